//! Layering: the `drover` a CI runner installs to sign releases (`--no-default-features`)
//! must not compile the agent, D-Bus or the devkit, which only the `dev` demo needs.
//!
//! The test asks cargo itself (`cargo tree --offline`) for the CLI's normal dependency graph
//! with and without the `dev` feature. The default graph must hold those crates (the control:
//! it proves the names searched for are the ones cargo prints), the lean graph none of them.

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

/// The names of the crates in `drover-cli`'s normal dependency graph, one per package.
fn cli_tree(extra: &[&str]) -> Vec<String> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace root").join("Cargo.toml");
    let out = Command::new(cargo())
        .args(["tree", "--offline", "-p", "drover-cli", "-e", "normal", "--prefix", "none", "--format", "{p}"])
        .args(extra)
        .arg("--manifest-path")
        .arg(&manifest)
        .output()
        .expect("cargo tree runs");
    assert!(out.status.success(), "cargo tree {extra:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).expect("cargo tree prints UTF-8");
    let names: Vec<String> = text.lines().filter_map(|line| line.split_whitespace().next()).map(str::to_owned).collect();
    assert!(names.iter().any(|n| n == "drover-cli"), "cargo tree printed no drover-cli: {text}");
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
