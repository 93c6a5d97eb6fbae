//! Layering: which workspace crate may depend on which, asked of cargo itself.
//!
//! - The crates are layers and the arrows point down: [`MAY_DEPEND_ON`] lists, for every
//!   workspace crate, the workspace crates its normal and build dependencies may name. A crate
//!   missing from the table, or an edge not in it, fails the test — so nothing below the
//!   engine depends on the engine, the engine never on the binary, and a new crate is placed
//!   in the layering when it is added (`cargo metadata --no-deps`).
//! - The pure cores have no async runtime: the crates in [`NO_TOKIO`] list no tokio among
//!   their dependencies, and those in [`NO_TOKIO_ANYWHERE`] have none in their whole normal
//!   graph (`cargo tree`), so a decision that needs I/O cannot be written there.
//! - The `drover` a CI runner installs to sign releases (`--no-default-features`) must not
//!   compile the agent, D-Bus or the devkit, which only the `dev` demo needs. The default graph
//!   must hold those crates (the control: it proves the names searched for are the ones cargo
//!   prints), the lean graph none of them.

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// Crates that belong to the demo and the node side, never to a release-signing `drover`.
const FORBIDDEN: [&str; 4] = ["drover-agent", "drover-devkit", "zbus", "dbus"];

/// The cargo that runs this test: it is the one whose lock file and registry cache are warm.
fn cargo() -> PathBuf {
    match std::env::var_os("CARGO") {
        Some(cargo) => PathBuf::from(cargo),
        None => panic!("CARGO is not set: run this test through `cargo test`, which sets it"),
    }
}

/// The workspace's `Cargo.toml`.
fn manifest() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace root").join("Cargo.toml")
}

/// The names of the crates in `drover-cli`'s normal dependency graph, one per package.
fn cli_tree(extra: &[&str]) -> Vec<String> {
    tree("drover-cli", extra)
}

/// The names of the crates in `package`'s normal dependency graph, one per package.
fn tree(package: &str, extra: &[&str]) -> Vec<String> {
    let manifest = manifest();
    let out = Command::new(cargo())
        .args(["tree", "--offline", "-p", package, "-e", "normal", "--prefix", "none", "--format", "{p}"])
        .args(extra)
        .arg("--manifest-path")
        .arg(&manifest)
        .output()
        .expect("cargo tree runs");
    assert!(out.status.success(), "cargo tree {extra:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).expect("cargo tree prints UTF-8");
    let names: Vec<String> = text.lines().filter_map(|line| line.split_whitespace().next()).map(str::to_owned).collect();
    assert!(names.iter().any(|n| n == package), "cargo tree printed no {package}: {text}");
    names
}

fn forbidden_in(names: &[String]) -> Vec<&str> {
    FORBIDDEN.iter().copied().filter(|bad| names.iter().any(|n| n.contains(bad))).collect()
}

#[test]
fn drover_without_dev_compiles_no_agent_dbus_or_devkit() {
    let lean = cli_tree(&["--no-default-features"]);
    assert_eq!(forbidden_in(&lean), Vec::<&str>::new(), "drover --no-default-features depends on: {lean:?}");
    // The lean CLI still has what signing a release needs.
    for needed in ["drover-proto", "drover-client", "ed25519-dalek"] {
        assert!(lean.iter().any(|n| n == needed), "drover --no-default-features lost {needed}: {lean:?}");
    }
}

#[test]
fn drover_with_dev_does_compile_the_demo() {
    let full = cli_tree(&[]);
    let found = forbidden_in(&full);
    for expected in ["drover-agent", "drover-devkit", "zbus"] {
        assert!(found.contains(&expected), "the default drover (feature dev) should depend on {expected}: {full:?}");
    }
}

/// For every workspace crate, the workspace crates its normal and build dependencies may name.
/// Read top to bottom it is the layering: each crate names only crates above it in this list.
const MAY_DEPEND_ON: &[(&str, &[&str])] = &[
    // Leaves: wire formats and verification, file writes, the allocator, the device clients.
    ("drover-proto", &[]),
    ("drover-fsio", &[]),
    ("drover-malloc", &[]),
    ("drover-maas", &[]),
    ("drover-redfish", &[]),
    ("drover-client", &["drover-proto", "drover-fsio"]),
    // The coordinator's lower layers: pure cores, durable state, PKI, rendering.
    ("drover-planner", &["drover-proto"]),
    ("drover-store", &["drover-proto"]),
    ("drover-store-sqlite", &["drover-proto", "drover-fsio", "drover-store"]),
    ("drover-store-postgres", &["drover-proto", "drover-store"]),
    ("drover-store-conformance", &["drover-proto", "drover-store"]),
    ("drover-pki", &["drover-proto", "drover-fsio"]),
    ("drover-cloudinit", &["drover-proto"]),
    ("drover-secrets", &["drover-client"]),
    // The transport: listener, TLS accept, HTTP/1.1 and HTTP/2, generic over a router.
    ("drover-http", &["drover-proto", "drover-pki", "drover-malloc"]),
    ("drover-workflows", &["drover-proto", "drover-store", "drover-planner", "drover-maas"]),
    // Services, background tasks and, until the API is a crate of its own, the API, which
    // names the transport for its body policy and the listener it starts.
    (
        "drover-engine",
        &[
            "drover-proto",
            "drover-fsio",
            "drover-malloc",
            "drover-maas",
            "drover-redfish",
            "drover-client",
            "drover-planner",
            "drover-store",
            "drover-store-sqlite",
            "drover-store-postgres",
            "drover-pki",
            "drover-cloudinit",
            "drover-workflows",
            "drover-secrets",
            "drover-http",
        ],
    ),
    // The binary: the composition root.
    ("drover-coordinator", &["drover-engine", "drover-malloc", "drover-proto"]),
    // The node side and the operator's tools.
    ("drover-agent", &["drover-proto", "drover-fsio", "drover-client"]),
    ("drover-devkit", &["drover-agent", "drover-client", "drover-proto"]),
    ("drover-cli", &["drover-proto", "drover-fsio", "drover-client", "drover-planner", "drover-maas", "drover-devkit"]),
    // The end-to-end tests drive everything.
    (
        "drover-tests",
        &[
            "drover-proto",
            "drover-client",
            "drover-planner",
            "drover-maas",
            "drover-redfish",
            "drover-engine",
            "drover-agent",
            "drover-devkit",
        ],
    ),
];

/// The crates below the engine: none of them may depend on the engine or the binary, even
/// for their own tests (a dev-dependency), or the engine's tests would build two engines.
const BELOW_THE_ENGINE: [&str; 15] = [
    "drover-proto",
    "drover-fsio",
    "drover-maas",
    "drover-redfish",
    "drover-client",
    "drover-planner",
    "drover-store",
    "drover-store-sqlite",
    "drover-store-postgres",
    "drover-store-conformance",
    "drover-pki",
    "drover-cloudinit",
    "drover-workflows",
    "drover-secrets",
    "drover-http",
];

/// Crates whose own dependencies never list tokio.
const NO_TOKIO: [&str; 6] = ["drover-proto", "drover-planner", "drover-store", "drover-workflows", "drover-cloudinit", "drover-fsio"];

/// Crates whose whole normal graph holds no tokio.
const NO_TOKIO_ANYWHERE: [&str; 5] = ["drover-proto", "drover-planner", "drover-store", "drover-cloudinit", "drover-fsio"];

/// One dependency edge as `cargo metadata` states it.
#[derive(Debug)]
struct Edge {
    from: String,
    to: String,
    /// `None` for a normal dependency, else `"dev"` or `"build"`.
    kind: Option<String>,
}

/// Every workspace crate's name and its dependency edges (to any crate, workspace or not).
fn workspace_edges() -> (Vec<String>, Vec<Edge>) {
    let out = Command::new(cargo())
        .args(["metadata", "--offline", "--no-deps", "--format-version", "1", "--manifest-path"])
        .arg(manifest())
        .output()
        .expect("cargo metadata runs");
    assert!(out.status.success(), "cargo metadata failed: {}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON");
    let packages = meta["packages"].as_array().expect("metadata lists packages");
    let names: Vec<String> = packages.iter().map(|p| p["name"].as_str().expect("a package has a name").to_owned()).collect();
    let mut edges = Vec::new();
    for p in packages {
        for d in p["dependencies"].as_array().expect("a package lists its dependencies") {
            edges.push(Edge {
                from: p["name"].as_str().expect("name").to_owned(),
                to: d["name"].as_str().expect("a dependency has a name").to_owned(),
                kind: d["kind"].as_str().map(str::to_owned),
            });
        }
    }
    (names, edges)
}

#[test]
fn every_workspace_crate_has_a_place_in_the_layering() {
    let (names, _) = workspace_edges();
    let placed: Vec<&str> = MAY_DEPEND_ON.iter().map(|(name, _)| *name).collect();
    let unplaced: Vec<&String> = names.iter().filter(|n| !placed.contains(&n.as_str())).collect();
    assert!(unplaced.is_empty(), "workspace crates missing from MAY_DEPEND_ON: {unplaced:?}");
    let gone: Vec<&&str> = placed.iter().filter(|p| !names.iter().any(|n| n == *p)).collect();
    assert!(gone.is_empty(), "MAY_DEPEND_ON names crates the workspace no longer has: {gone:?}");
    // The table is an order: a crate names only crates placed above it.
    for (i, (name, allowed)) in MAY_DEPEND_ON.iter().enumerate() {
        for dep in *allowed {
            let at = placed.iter().position(|p| p == dep).expect("an allowed dependency is itself placed");
            assert!(at < i, "{name} may depend on {dep}, which is placed below it: the table must point down");
        }
    }
}

#[test]
fn workspace_dependencies_only_point_down() {
    let (names, edges) = workspace_edges();
    let mut upward = Vec::new();
    for e in edges.iter().filter(|e| names.contains(&e.to) && e.kind.as_deref() != Some("dev")) {
        let allowed = MAY_DEPEND_ON.iter().find(|(n, _)| *n == e.from).map(|(_, a)| *a).unwrap_or(&[]);
        if !allowed.contains(&e.to.as_str()) {
            upward.push(format!("{} -> {}", e.from, e.to));
        }
    }
    assert!(upward.is_empty(), "dependencies outside the layering (MAY_DEPEND_ON): {upward:?}");
    // The control: the edges searched are the ones cargo states.
    assert!(edges.iter().any(|e| e.from == "drover-engine" && e.to == "drover-workflows"), "cargo metadata lost a known edge");
}

#[test]
fn nothing_below_the_engine_depends_on_it_even_for_tests() {
    let (_, edges) = workspace_edges();
    let bad: Vec<String> = edges
        .iter()
        .filter(|e| {
            BELOW_THE_ENGINE.contains(&e.from.as_str()) && matches!(e.to.as_str(), "drover-engine" | "drover-coordinator" | "drover-tests")
        })
        .map(|e| format!("{} -> {} ({})", e.from, e.to, e.kind.as_deref().unwrap_or("normal")))
        .collect();
    assert!(bad.is_empty(), "crates below the engine depending on it: {bad:?}");
}

#[test]
fn the_pure_cores_have_no_async_runtime() {
    let (_, edges) = workspace_edges();
    let direct: Vec<String> = edges
        .iter()
        .filter(|e| NO_TOKIO.contains(&e.from.as_str()) && e.to.starts_with("tokio") && e.kind.as_deref() != Some("dev"))
        .map(|e| format!("{} -> {}", e.from, e.to))
        .collect();
    assert!(direct.is_empty(), "pure crates listing tokio: {direct:?}");
    for package in NO_TOKIO_ANYWHERE {
        let graph = tree(package, &[]);
        assert!(!graph.iter().any(|n| n.starts_with("tokio")), "{package}'s normal graph holds tokio: {graph:?}");
    }
    // The control: the engine's graph does hold tokio, so the name searched is the one printed.
    assert!(tree("drover-engine", &[]).iter().any(|n| n == "tokio"), "cargo tree printed no tokio for the engine");
}
