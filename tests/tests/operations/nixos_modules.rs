//! The NixOS modules (`nixos-modules/`) checked without nixpkgs: every file parses
//! (`nix-instantiate --parse`); the configuration files the modules install are rendered by
//! their builtins-only functions (`nix-instantiate --eval --strict --json`) and accepted by the
//! binaries' own parsers (`drover-agent check-config`, the coordinator's `Config::parse`); the
//! unit files pass `systemd-analyze verify` and are scored by `systemd-analyze security
//! --offline=true`.
//!
//! Needs Debian's `nix-bin` (CI installs it) and `systemd-analyze`; fails loudly without them.

use std::path::{Path, PathBuf};
use std::process::Command;

use drover_tests::workspace_binary;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn modules() -> PathBuf {
    repo().join("nixos-modules")
}

fn tool(name: &str) -> Command {
    let found = Command::new("sh").args(["-c", &format!("command -v {name}")]).output().expect("sh");
    assert!(found.status.success(), "{name} is not installed: CI installs it (Debian package nix-bin / systemd)");
    Command::new(name)
}

/// Evaluates a Nix expression (with `nixos-modules/` as the working dir) to a JSON value.
fn eval(expr: &str) -> serde_json::Value {
    let out = tool("nix-instantiate")
        .current_dir(modules())
        .args(["--eval", "--strict", "--json", "-E", expr])
        .output()
        .expect("nix-instantiate");
    assert!(out.status.success(), "nix-instantiate failed on {expr}:\n{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("json")
}

/// Evaluates a Nix expression that must fail; its error text.
fn eval_error(expr: &str) -> String {
    let out = tool("nix-instantiate")
        .current_dir(modules())
        .args(["--eval", "--strict", "--json", "-E", expr])
        .output()
        .expect("nix-instantiate");
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "{expr} evaluated: {}", String::from_utf8_lossy(&out.stdout));
    err
}

/// `drover-agent check-config --config FILE`, as `run` reads its file.
fn check_config(file: &Path) -> std::process::Output {
    Command::new(workspace_binary("drover-agent")).arg("check-config").arg("--config").arg(file).output().expect("check-config")
}

/// A package dir whose bin/ holds the workspace's binaries (what `package` points at).
fn package(dir: &Path) -> PathBuf {
    let bin = dir.join("pkg/bin");
    std::fs::create_dir_all(&bin).expect("mkdir");
    for name in ["drover-agent", "drover-coordinator"] {
        std::os::unix::fs::symlink(workspace_binary(name), bin.join(name)).expect("symlink");
    }
    dir.join("pkg")
}

fn agent_expr(pkg: &Path, ca: &Path) -> String {
    format!(
        r#"import ./lib/agent.nix {{
            package = "{pkg}";
            coordinatorUrls = [ "https://coord-1.example:8443" "https://coord-2.example:8443" ];
            caFile = "{ca}";
            hostId = "9f1c2a6e-3b8d-4c1e-9a57-0d2f4e6b8c10";
            tokenFile = "/run/keys/drover-token";
            trustSha256 = "{sha}";
            probes = [ {{ name = "sshd"; kind = "tcp"; host = "127.0.0.1"; port = 22; timeoutSecs = 2; }} ];
            gpu = {{ nvidiaSmi = "/run/current-system/sw/bin/nvidia-smi"; toolTimeoutSecs = 120; }};
            storage = {{ roots = [ "/scratch" "/local/nvme" ]; wekaFsTypes = [ "wekafs" ]; }};
            hwSync = {{ credsFile = "/etc/maas/maas-machine-creds.yml"; timer = "maas_hardware_sync.timer"; service = "maas_hardware_sync.service"; }};
            tenantUids = {{ min = 10000; max = 59999; }};
            drainHook = [ "/run/current-system/sw/bin/systemctl" "stop" "slurmd.service" ];
            settings = {{ checkin = {{ backoff_max_secs = 120; backoff_base_secs = null; request_timeout_secs = null; }}; systemd_bus = null; }};
        }}"#,
        pkg = pkg.display(),
        ca = ca.display(),
        sha = "0".repeat(64)
    )
}

/// A CA certificate (PEM) in `dir`: `check-config` reads `ca_file` as a connection would.
fn ca_file(dir: &Path) -> PathBuf {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let cert = params.self_signed(&key).expect("self-signed");
    let path = dir.join("ca.crt");
    std::fs::write(&path, cert.pem()).expect("ca");
    path
}

fn coordinator_expr(pkg: &Path) -> String {
    format!(
        r#"import ./lib/coordinator.nix {{
            package = "{pkg}";
            publicUrls = [ "https://coord-1.example:8443" ];
            san = [ "coord-1.example" "10.0.0.5" ];
            trustFile = "/etc/drover/trust.json";
            agentBinary = "{pkg}/bin/drover-agent";
            releasesDir = "/var/lib/drover-releases";
            settings = {{
                rollouts.interval_secs = 30;
                jobs = {{ max_attempts = 3; max_hosts_per_request = 200; }};
                enrollment.token_ttl_secs = null;
                releases_poll_secs = null;
                connections.max_open = 20000;
            }};
        }}"#,
        pkg = pkg.display()
    )
}

#[test]
fn every_module_file_parses() {
    let mut files = Vec::new();
    for dir in [modules(), modules().join("lib")] {
        for e in std::fs::read_dir(&dir).expect("nixos-modules") {
            let p = e.expect("entry").path();
            if p.extension().is_some_and(|x| x == "nix") {
                files.push(p);
            }
        }
    }
    assert!(files.len() >= 7, "{files:?}");
    for f in files {
        let out = tool("nix-instantiate").arg("--parse").arg(&f).output().expect("nix-instantiate");
        assert!(out.status.success(), "{}: {}", f.display(), String::from_utf8_lossy(&out.stderr));
    }
    // default.nix exports both modules.
    let names = eval("builtins.attrNames (import ./default.nix)");
    assert_eq!(names, serde_json::json!(["default", "drover-agent", "drover-coordinator"]));
}

#[test]
fn rendered_agent_toml_passes_the_agents_own_check() {
    let dir = tempfile::tempdir().expect("tmp");
    let pkg = package(dir.path());
    let toml = eval(&format!("({}).toml", agent_expr(&pkg, &ca_file(dir.path()))));
    let file = dir.path().join("agent.toml");
    std::fs::write(&file, toml.as_str().expect("a string")).expect("write");
    let out = check_config(&file);
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stderr), toml.as_str().unwrap_or_default());
    let text = toml.as_str().unwrap_or_default();
    // Every typed gpu/storage/hwSync option lands under the agent's own key (the agent refuses
    // unknown keys, so the check above proves the names; these prove the values arrived).
    for want in [
        "\"storage_roots\" = [\"/scratch\", \"/local/nvme\"]",
        "\"weka_fs_types\" = [\"wekafs\"]",
        "\"nvidia_smi\" = \"/run/current-system/sw/bin/nvidia-smi\"",
        "\"gpu_tool_timeout_secs\" = 120",
        "\"maas_creds_file\" = \"/etc/maas/maas-machine-creds.yml\"",
        "\"hw_sync_service\" = \"maas_hardware_sync.service\"",
        "\"backoff_max_secs\" = 120",
        "[[\"probes\"]]",
    ] {
        assert!(text.contains(want), "{want} in:\n{text}");
    }
    // Unset typed settings (null, as the module system gives them) are left out: the agent's
    // defaults apply.
    assert!(!text.contains("systemd_bus") && !text.contains("backoff_base_secs"), "{text}");
    // A typo in a freeform settings key is refused by the agent, naming the key.
    let bad = eval(&format!(
        "(import ./lib/agent.nix {{ package = \"{}\"; coordinatorUrls = [ \"https://c.example:8443\" ]; caFile = \"/c\"; settings = {{ checkin.backof_max = 1; }}; }}).toml",
        pkg.display()
    ));
    std::fs::write(&file, bad.as_str().expect("string")).expect("write");
    let out = check_config(&file);
    assert_eq!(out.status.code(), Some(65), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("backof_max"));
}

/// A minimal agent expression with one typed group set to `group`.
fn agent_with(group: &str) -> String {
    format!(
        "(import ./lib/agent.nix {{ package = \"/p\"; coordinatorUrls = [ \"https://c.example:8443\" ]; caFile = \"/c\"; {group}; }}).toml"
    )
}

#[test]
fn typed_agent_groups_refuse_wrong_types_and_unknown_names_naming_the_option() {
    let cases = [
        ("gpu = { toolTimeoutSecs = \"120\"; }", "services.drover-agent.gpu.toolTimeoutSecs", "string"),
        ("gpu = { toolTimeoutSecs = 0; }", "services.drover-agent.gpu.toolTimeoutSecs", "int"),
        ("storage = { roots = \"/scratch\"; }", "services.drover-agent.storage.roots", "string"),
        ("storage = { wekaFsTypes = [ 1 ]; }", "services.drover-agent.storage.wekaFsTypes", "list"),
        ("hwSync = { timer = true; }", "services.drover-agent.hwSync.timer", "bool"),
        ("gpu = { nvidiaSMI = \"/bin/nvidia-smi\"; }", "services.drover-agent.gpu.nvidiaSMI: no such option", "nvidiaSmi"),
    ];
    for (group, option, detail) in cases {
        let err = eval_error(&agent_with(group));
        assert!(err.contains(option) && err.contains(detail), "{group}: {err}");
    }
    // The same groups, well typed, evaluate (nulls are unset options).
    let ok = eval(&agent_with("gpu = { dcgmi = \"/bin/dcgmi\"; amdSmi = null; }; hwSync = { service = \"s.service\"; }"));
    let text = ok.as_str().expect("string");
    assert!(text.contains("\"dcgmi\" = \"/bin/dcgmi\"") && !text.contains("amd_smi"), "{text}");
}

#[test]
fn rendered_coordinator_toml_parses_with_the_coordinators_own_parser() {
    let dir = tempfile::tempdir().expect("tmp");
    let pkg = package(dir.path());
    let toml = eval(&format!("({}).toml", coordinator_expr(&pkg)));
    let text = toml.as_str().expect("a string");
    let config = drover_engine::config::Config::parse(Path::new("coordinator.toml"), text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(config.public_urls, ["https://coord-1.example:8443"]);
    assert_eq!((config.rollouts.interval_secs, config.jobs.max_hosts_per_request), (30, 200));
    // A freeform key beside the typed ones; unset typed keys keep the coordinator's defaults.
    assert_eq!(config.connections.max_open, 20000);
    assert_eq!((config.enrollment.token_ttl_secs, config.releases_poll_secs), (7200, 10));
}

/// "Overall exposure level for X: 1.9 OK" → 1.9.
fn exposure(unit: &Path) -> f64 {
    let out = tool("systemd-analyze").args(["security", "--offline=true", "--no-pager"]).arg(unit).output().expect("systemd-analyze");
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    let line =
        text.lines().find(|l| l.contains("Overall exposure level")).unwrap_or_else(|| panic!("no score for {}:\n{text}", unit.display()));
    line.split(": ").nth(1).and_then(|v| v.split_whitespace().next()).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{line}"))
}

#[test]
fn rendered_units_verify_and_are_hardened() {
    let dir = tempfile::tempdir().expect("tmp");
    let pkg = package(dir.path());
    let units = dir.path().join("units");
    std::fs::create_dir_all(&units).expect("mkdir");
    for expr in [agent_expr(&pkg, Path::new("/etc/drover/ca.crt")), coordinator_expr(&pkg)] {
        let rendered = eval(&format!("({expr}).units"));
        for (name, text) in rendered.as_object().expect("units") {
            std::fs::write(units.join(name), text.as_str().expect("text")).expect("write");
        }
    }
    let names = ["drover-agent.service", "drover-agent-enroll.service", "drover-coordinator.service", "drover-coordinator-init.service"];
    for name in names {
        let file = units.join(name);
        assert!(file.is_file(), "{name} rendered");
        let out = tool("systemd-analyze")
            .env("SYSTEMD_UNIT_PATH", format!("{}:", units.display()))
            .args(["verify", "--man=no"])
            .arg(&file)
            .output()
            .expect("systemd-analyze");
        let err = String::from_utf8_lossy(&out.stderr);
        // Only this unit's own problems count (the build machine's other units are not ours).
        let ours: Vec<&str> = err.lines().filter(|l| l.contains("drover")).collect();
        assert!(out.status.success() && ours.is_empty(), "{name}: {err}\n{}", std::fs::read_to_string(&file).unwrap_or_default());
    }
    let agent = units.join("drover-agent.service");
    let agent_text = std::fs::read_to_string(&agent).expect("unit");
    for want in ["Type=notify", "WatchdogSec=120", "NoNewPrivileges=yes", "CapabilityBoundingSet=CAP_SYS_ADMIN"] {
        assert!(agent_text.contains(want), "{want}");
    }
    // One long-poll connection per agent: a 10,000-host fleet needs the file limit raised.
    let coordinator_text = std::fs::read_to_string(units.join("drover-coordinator.service")).expect("unit");
    assert!(coordinator_text.contains("LimitNOFILE=65536"), "{coordinator_text}");
    // The agent runs as root in the host's mount namespace (it unmounts tenant filesystems and
    // switches the system), so its score stays high; the coordinator needs nothing of the
    // host and is locked down.
    let (a, c) = (exposure(&agent), exposure(&units.join("drover-coordinator.service")));
    eprintln!("systemd-analyze security --offline=true: agent {a}, coordinator {c}");
    assert!(c <= 1.5, "coordinator exposure {c}");
    assert!(a <= 6.0, "agent exposure {a}");
}
