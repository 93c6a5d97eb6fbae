//! The Debian packages (`packaging/deb/build-debs.sh`), built from this workspace's binaries
//! and checked without a container: their contents and control data (`dpkg-deb`), `lintian`
//! clean of errors, their units verified by `systemd-analyze verify` in a throwaway root they
//! are unpacked into and scored by `systemd-analyze security` against the NixOS modules'
//! thresholds, the agent unit's hardening the same as the bootstrap's, and the unpacked
//! coordinator run: `init` a state directory, check the example configuration, serve.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn tool(name: &str) -> Command {
    drover_tests::required_tool(name, "dpkg-dev lintian systemd")
}

fn run(mut cmd: Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{what} failed:\n{text}");
    text
}

/// Builds both packages into `out`; their paths (agent, coordinator).
fn build(out: &Path) -> (PathBuf, PathBuf) {
    let bins = drover_tests::workspace_binary("drover-agent").parent().expect("bin dir").to_path_buf();
    for b in ["drover-coordinator", "drover"] {
        drover_tests::workspace_binary(b);
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging/deb/build-debs.sh");
    let mut cmd = Command::new("sh");
    cmd.arg(script).arg(&bins).arg(out).env("DROVER_DEB_COMPRESS", "gzip");
    let text = run(cmd, "build-debs.sh");
    let mut paths = text.lines().filter(|l| l.ends_with(".deb")).map(PathBuf::from);
    (paths.next().expect("agent .deb"), paths.next().expect("coordinator .deb"))
}

/// `dpkg-deb --contents`: path → (mode, owner).
fn contents(deb: &Path) -> Vec<(String, String, String)> {
    let mut cmd = tool("dpkg-deb");
    cmd.arg("--contents").arg(deb);
    run(cmd, "dpkg-deb --contents")
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[5].trim_start_matches('.').to_owned(), f[0].to_owned(), f[1].to_owned())
        })
        .collect()
}

fn field(deb: &Path, name: &str) -> String {
    let mut cmd = tool("dpkg-deb");
    cmd.arg("--field").arg(deb).arg(name);
    run(cmd, "dpkg-deb --field").trim().to_owned()
}

/// "Overall exposure level for X: 1.9 OK" → 1.9, for a unit under `root`.
fn exposure(root: &Path, unit: &str) -> f64 {
    let mut cmd = tool("systemd-analyze");
    cmd.args(["security", "--offline=true", "--no-pager"])
        .arg(format!("--root={}", root.display()))
        .arg(format!("/lib/systemd/system/{unit}"));
    let text = run(cmd, "systemd-analyze security");
    let line = text.lines().find(|l| l.contains("Overall exposure level")).unwrap_or_else(|| panic!("no score for {unit}:\n{text}"));
    line.split(": ").nth(1).and_then(|v| v.split_whitespace().next()).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{line}"))
}

/// The hardening directives of a unit's text (what is not about starting and stopping it).
fn hardening(unit: &str) -> BTreeSet<String> {
    const OPERATIONAL: [&str; 8] =
        ["Type=", "NotifyAccess=", "ExecStart=", "Restart=", "RestartSec=", "WatchdogSec=", "TimeoutStopSec=", "LimitNOFILE="];
    let service = unit.split("[Service]").nth(1).expect("[Service]").split("[Install]").next().expect("service section");
    service
        .lines()
        .map(str::trim)
        .filter(|l| l.contains('=') && !l.starts_with('#') && !OPERATIONAL.iter().any(|o| l.starts_with(o)))
        .map(str::to_owned)
        .collect()
}

#[test]
fn debian_packages_install_hardened_units_and_pass_lintian() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (agent, coordinator) = build(&dir.path().join("out"));
    assert!(agent.is_file() && coordinator.is_file());

    // Contents: where Debian puts things, owned by root, binaries executable.
    let a = contents(&agent);
    let c = contents(&coordinator);
    let has = |list: &[(String, String, String)], path: &str, mode: &str| {
        let row = list.iter().find(|(p, _, _)| p == path).unwrap_or_else(|| panic!("{path} missing: {list:?}"));
        assert_eq!((row.1.as_str(), row.2.as_str()), (mode, "root/root"), "{path}");
    };
    has(&a, "/usr/bin/drover-agent", "-rwxr-xr-x");
    has(&a, "/lib/systemd/system/drover-agent.service", "-rw-r--r--");
    has(&a, "/usr/share/doc/drover-agent/copyright", "-rw-r--r--");
    has(&c, "/usr/bin/drover-coordinator", "-rwxr-xr-x");
    has(&c, "/usr/bin/drover", "-rwxr-xr-x");
    has(&c, "/usr/lib/drover/drover-agent", "-rwxr-xr-x");
    has(&c, "/lib/systemd/system/drover-coordinator.service", "-rw-r--r--");
    has(&c, "/lib/systemd/system/drover-coordinator-init.service", "-rw-r--r--");
    has(&c, "/etc/drover/coordinator-init.env", "-rw-r--r--");
    has(&c, "/usr/share/doc/drover-coordinator/examples/coordinator.toml", "-rw-r--r--");
    assert_eq!(field(&agent, "Package"), "drover-agent");
    assert_eq!(field(&coordinator, "Version"), format!("{}-1", env!("CARGO_PKG_VERSION")));
    assert!(field(&agent, "Depends").contains("libc6"), "shared-library dependencies found by dpkg-shlibdeps");

    // lintian: no error (warnings, such as a missing manual page, are allowed).
    let out = tool("lintian").args(["--tag-display-limit", "0"]).arg(&agent).arg(&coordinator).output().expect("lintian");
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    let errors: Vec<&str> = text.lines().filter(|l| l.starts_with("E:")).collect();
    assert!(out.status.success() && errors.is_empty(), "lintian errors:\n{text}");

    // A throwaway root: the host's own units (the targets ours name) with both packages over.
    let root = dir.path().join("root");
    drover_tests::system_units_into(&root);
    let units = root.join("lib/systemd/system");
    for deb in [&agent, &coordinator] {
        let mut cmd = tool("dpkg-deb");
        cmd.arg("-x").arg(deb).arg(&root);
        run(cmd, "dpkg-deb -x");
    }
    for unit in ["drover-agent.service", "drover-coordinator.service", "drover-coordinator-init.service"] {
        let out = tool("systemd-analyze")
            .args(["verify", "--man=no"])
            .arg(format!("--root={}", root.display()))
            .arg(format!("/lib/systemd/system/{unit}"))
            .output()
            .expect("systemd-analyze verify");
        let err = String::from_utf8_lossy(&out.stderr);
        let ours: Vec<&str> = err.lines().filter(|l| l.contains("drover")).collect();
        assert!(out.status.success() && ours.is_empty(), "{unit}: {err}");
    }
    // The NixOS modules' thresholds (tests/tests/nixos_modules.rs).
    let (ea, ec, ei) = (
        exposure(&root, "drover-agent.service"),
        exposure(&root, "drover-coordinator.service"),
        exposure(&root, "drover-coordinator-init.service"),
    );
    eprintln!("systemd-analyze security: agent {ea}, coordinator {ec}, coordinator-init {ei}");
    assert!(ea <= 6.0 && ec <= 1.5 && ei <= 1.5, "agent {ea}, coordinator {ec}, init {ei}");

    // The packaged agent unit is hardened exactly as the bootstrap's (and so the NixOS module's).
    let packaged = std::fs::read_to_string(units.join("drover-agent.service")).expect("unit");
    let script = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../coordinator/engine/src/enroll/bootstrap.sh"))
        .expect("bootstrap.sh");
    let bootstrap_unit = script.split("<<UNIT\n").nth(1).and_then(|s| s.split("\nUNIT\n").next()).expect("the bootstrap's unit");
    assert_eq!(hardening(&packaged), hardening(bootstrap_unit));
    assert!(packaged.contains("ExecStart=/usr/bin/drover-agent run --config /etc/drover/agent.toml"));

    // The unpacked coordinator runs: init, the example configuration checked, then it serves.
    let bin = |name: &str| root.join("usr/bin").join(name);
    let state = dir.path().join("state");
    let mut cmd = Command::new(bin("drover-coordinator"));
    cmd.args(["init", "--san", "127.0.0.1", "--state-dir"]).arg(&state);
    run(cmd, "packaged drover-coordinator init");
    std::fs::write(dir.path().join("trust.json"), drover_tests::ci_trust_json()).expect("trust");
    let port = drover_tests::free_loopback_port();
    let example = std::fs::read_to_string(root.join("usr/share/doc/drover-coordinator/examples/coordinator.toml")).expect("example");
    let config = example
        .replace("0.0.0.0:8443", &format!("127.0.0.1:{port}"))
        .replace("\"/var/lib/drover\"", &format!("{:?}", state.display().to_string()))
        .replace("\"/etc/drover/trust.json\"", &format!("{:?}", dir.path().join("trust.json").display().to_string()))
        .replace("\"/usr/lib/drover/drover-agent\"", &format!("{:?}", root.join("usr/lib/drover/drover-agent").display().to_string()));
    let config_path = dir.path().join("coordinator.toml");
    std::fs::write(&config_path, config).expect("config");
    let mut cmd = Command::new(bin("drover-coordinator"));
    cmd.arg("check-config").arg("--config").arg(&config_path);
    assert!(run(cmd, "check-config").contains("ok"));
    let mut serve = Command::new(bin("drover-coordinator"))
        .arg("serve")
        .arg("--config")
        .arg(&config_path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("serve");
    let deadline = Instant::now() + Duration::from_secs(30);
    let healthy = loop {
        let out = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--tlsv1.3", "--cacert"])
            .arg(state.join("ca.crt"))
            .arg(format!("https://127.0.0.1:{port}/healthz"))
            .output()
            .expect("curl");
        if out.stdout == b"200" {
            break true;
        }
        if Instant::now() > deadline || serve.try_wait().ok().flatten().is_some() {
            break false;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = serve.kill();
    let _ = serve.wait();
    assert!(healthy, "the packaged coordinator serves /healthz over TLS 1.3");
    let mut cmd = Command::new(bin("drover"));
    cmd.arg("--version");
    assert!(run(cmd, "packaged drover").contains(env!("CARGO_PKG_VERSION")));
}
