//! The agent on a plain (non-NixOS) host, as MAAS deploys Ubuntu: the bootstrap command
//! (`GET /v1/bootstrap.sh`, run with real `curl` and `sh` into a temporary root, `sudo`
//! removed) installs the binary, `agent.toml` and a plain systemd unit, and enables and starts
//! it through `systemctl` (a recording stand-in on `PATH`: no systemd runs here).
//!
//! - The files land with their modes; `systemctl daemon-reload` and `enable --now` run; a
//!   second run of the same command (its token spent) is harmless, an outdated unit is
//!   replaced and the agent restarted, another host's command is refused before anything is
//!   touched, and a non-root run without the test root is refused.
//! - The unit passes `systemd-analyze verify` (against the installed binary, under the root)
//!   and is, line for line, the NixOS module's `drover-agent.service` (`nixos-modules/lib/agent.nix`
//!   rendered by `nix-instantiate`): the same `Type=notify`, watchdog, restart policy and
//!   hardening.
//! - The real `drover-agent run` on that root (no `/nix/var/nix/profiles/system`) refuses a
//!   rollout's intent with the reason, which the coordinator records for the host; it still
//!   reports its health (a failed unit reaches the coordinator) and runs
//!   `node.hw_sync_reseed` over D-Bus (the `fake-systemd` test service).
//!
//! Needs `curl`, `systemd-analyze`, Debian's `nix-bin` and `dbus-daemon` (CI installs them);
//! fails loudly without them.

#![forbid(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use drover_engine::app::Clock as _;
use drover_engine::store::EventFilter;
use drover_proto::keys::KeySigner;
use drover_proto::names::RolloutId;
use drover_proto::publish::PublishRequest;
use drover_proto::release::{ReleaseParams, build_release};
use drover_proto::resolve::ReleaseMeta;
use drover_proto::spec::FleetSpec;
use drover_proto::states::HostRolloutState;
use drover_tests::api::assert_task_succeeded;
use drover_tests::bus::TestBus;
use drover_tests::{CI_KEY, Harness, sh, start_agent, workspace_binary};
use serde_json::json;

/// The bound on every wait.
const WAIT: Duration = Duration::from_secs(90);
/// Where the bootstrap writes the unit, under the root.
const UNIT: &str = "etc/systemd/system/drover-agent.service";
/// The refusal an agent on a host without the NixOS system profile reports.
const NO_BACKEND: &str =
    "no activation backend: this host is not NixOS (no /nix/var/nix/profiles/system); the intent was refused and nothing was changed";

fn tool(name: &str) -> Command {
    let found = Command::new("sh").args(["-c", &format!("command -v {name}")]).output().expect("sh");
    assert!(found.status.success(), "{name} is not installed: CI installs it (Debian packages curl, systemd, nix-bin)");
    Command::new(name)
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).permissions().mode() & 0o7777
}

fn inode(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).ino()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Writes an executable script.
fn script(path: &Path, text: &str) {
    std::fs::write(path, text).expect("write");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// A `bin/` with a `systemctl` that appends its arguments to `systemctl.log` beside it.
fn fake_systemctl(dir: &Path) -> PathBuf {
    let bin = dir.join("fake-bin");
    std::fs::create_dir_all(&bin).expect("mkdir");
    script(&bin.join("systemctl"), &format!("#!/bin/sh\necho \"$*\" >> '{}'\n", dir.join("systemctl.log").display()));
    bin
}

fn systemctl_calls(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("systemctl.log")).unwrap_or_default().lines().map(str::to_owned).collect()
}

/// Runs a bootstrap command (as the API returned it, minus `sudo`) with `env`, and `bin`
/// first on `PATH`.
async fn run_bootstrap(h: &Harness, command: &str, bin: &Path, mut env: Vec<(String, String)>) -> Output {
    assert!(command.contains("| sudo sh -c "), "{command}");
    let command = command.replace("| sudo sh -c ", "| sh -c ");
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    env.extend([("PATH".to_owned(), path), ("TMPDIR".to_owned(), h.dir.path().display().to_string())]);
    sh(command, env).await
}

/// The bootstrap into `root`, systemd step included (the recording `systemctl`).
async fn bootstrap(h: &Harness, command: &str, root: &Path, bin: &Path) -> Output {
    run_bootstrap(h, command, bin, vec![("DROVER_BOOTSTRAP_ROOT".to_owned(), root.display().to_string())]).await
}

use drover_tests::output_text as text;

async fn host_state(h: &Harness, id: &str) -> String {
    h.get_json(&format!("/v1/hosts/{id}")).await["state"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_installs_the_agent_and_a_plain_unit_and_a_second_run_is_harmless() {
    let h = Harness::start().await;
    let created = h.create_host("ubuntu-01").await;
    let (command, host_id) = (created["command"].as_str().expect("command"), created["hostId"].as_str().expect("id"));
    let root = h.dir.path().join("root");
    let bin = fake_systemctl(h.dir.path());

    let out = bootstrap(&h, command, &root, &bin).await;
    assert!(out.status.success(), "bootstrap failed:\n{}", text(&out));
    let (agent, config, ca, unit) =
        (root.join("usr/local/bin/drover-agent"), root.join("etc/drover/agent.toml"), root.join("etc/drover/ca.crt"), root.join(UNIT));
    let state = root.join("var/lib/drover");
    assert_eq!(std::fs::read(&agent).expect("agent"), std::fs::read(workspace_binary("drover-agent")).expect("build"));
    assert_eq!(mode(&agent), 0o755);
    assert_eq!((mode(&config), mode(&ca), mode(&unit)), (0o644, 0o644, 0o644));
    assert_eq!(read(&ca), read(&h.ca));
    assert_eq!((mode(&state), mode(&state.join("key.pem"))), (0o700, 0o600));
    assert!(state.join("identity.json").is_file() && state.join("cert.pem").is_file());
    // The agent's own parser takes the config; every table but the coordinator's is the
    // default, which fits a plain host.
    let parsed = drover_agent::config::Config::load(&config).expect("agent.toml");
    assert_eq!(parsed.coordinator_urls, std::slice::from_ref(&h.url));
    assert_eq!(parsed.state_dir, state);
    assert_eq!(parsed.tasks, drover_agent::tasks::TaskSettings::default());
    let unit_text = read(&unit);
    assert!(unit_text.contains("\nExecStart=/usr/local/bin/drover-agent run --config /etc/drover/agent.toml\n"), "{unit_text}");
    for want in ["Type=notify", "WatchdogSec=120", "Restart=on-failure", "NoNewPrivileges=yes", "CapabilityBoundingSet=CAP_SYS_ADMIN"] {
        assert!(unit_text.contains(&format!("\n{want}")), "{want} missing:\n{unit_text}");
    }
    assert_eq!(systemctl_calls(h.dir.path()), ["daemon-reload", "enable --now drover-agent.service"]);
    assert_eq!(host_state(&h, host_id).await, "enrolling");

    // Again, the same command (its token spent), after a local edit to agent.toml: nothing
    // is enrolled, replaced or lost; the unit is enabled and started again, not restarted.
    let edited = format!("{}\n[checkin]\nbackoff_max_secs = 60\n", read(&config));
    std::fs::write(&config, &edited).expect("edit");
    let (agent_ino, unit_ino, cert) = (inode(&agent), inode(&unit), read(&state.join("cert.pem")));
    let out = bootstrap(&h, command, &root, &bin).await;
    assert!(out.status.success(), "the second run failed:\n{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("already enrolled as host {host_id}")), "{}", text(&out));
    assert_eq!(read(&config), edited, "the second run kept agent.toml");
    assert_eq!((inode(&agent), inode(&unit)), (agent_ino, unit_ino), "unchanged files are not rewritten");
    assert_eq!(read(&state.join("cert.pem")), cert);
    assert_eq!(read(&unit), unit_text);
    assert_eq!(systemctl_calls(h.dir.path())[2..], ["daemon-reload", "enable --now drover-agent.service"]);

    // An outdated unit (as an older script wrote it) is replaced, and the running agent
    // restarted on the new one.
    std::fs::write(&unit, unit_text.replace("Restart=on-failure", "Restart=always")).expect("old unit");
    let out = bootstrap(&h, command, &root, &bin).await;
    assert!(out.status.success(), "the third run failed:\n{}", text(&out));
    assert_eq!(read(&unit), unit_text);
    assert_eq!(mode(&unit), 0o644);
    assert_eq!(
        systemctl_calls(h.dir.path())[4..],
        ["daemon-reload", "enable --now drover-agent.service", "try-restart drover-agent.service"]
    );

    // Another host's command on this enrolled host: refused before anything is touched, its
    // token unspent.
    let other = h.create_host("ubuntu-02").await;
    let out = bootstrap(&h, other["command"].as_str().expect("command"), &root, &bin).await;
    assert!(!out.status.success(), "another host's command ran on an enrolled host:\n{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains(&format!("already enrolled as host {host_id}")), "{}", text(&out));
    assert_eq!(host_state(&h, other["hostId"].as_str().expect("id")).await, "bootstrap_issued");
    assert_eq!(systemctl_calls(h.dir.path()).len(), 7);
    assert_eq!(read(&config), edited);

    // Without the test root, a user that is not root is refused (an `id` that says 1000).
    let other = h.create_host("ubuntu-03").await;
    script(&bin.join("id"), "#!/bin/sh\necho 1000\n");
    let out = run_bootstrap(&h, other["command"].as_str().expect("command"), &bin, Vec::new()).await;
    assert!(!out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("must run as root"), "{}", text(&out));
    assert_eq!(systemctl_calls(h.dir.path()).len(), 7);
}

/// A unit file's lines by section, blank lines and comments left out.
fn sections(text: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut section = String::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        if line.starts_with('[') {
            section = line.to_owned();
        } else {
            out.entry(section.clone()).or_default().insert(line.to_owned());
        }
    }
    out
}

/// The NixOS module's `drover-agent.service` for an agent in `/usr/local` with the default
/// config path (what the bootstrap installs), rendered by `nix-instantiate`.
fn nixos_unit() -> String {
    let expr = r#"(import ./lib/agent.nix {
        package = "/usr/local";
        coordinatorUrls = [ "https://coord-1.example:8443" ];
        caFile = "/etc/drover/ca.crt";
    }).units."drover-agent.service""#;
    let out = tool("nix-instantiate")
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../nixos-modules"))
        .args(["--eval", "--strict", "--json", "-E", expr])
        .output()
        .expect("nix-instantiate");
    assert!(out.status.success(), "nix-instantiate failed:\n{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice::<String>(&out.stdout).expect("a string")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plain_unit_verifies_and_is_the_nixos_modules_unit() {
    let h = Harness::start().await;
    let root = h.dir.path().join("root");
    h.bootstrap_host("ubuntu-04", &root).await;
    let unit = root.join(UNIT);
    let unit_text = read(&unit);

    // Line for line what the NixOS module runs (same section, same settings; order aside).
    assert_eq!(sections(&unit_text), sections(&nixos_unit()), "the plain unit drifted from nixos-modules/lib/agent.nix");

    // `systemd-analyze verify` under the root, against the binary the script installed.
    drover_tests::system_units_into(&root);
    let out = tool("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(format!("--root={}", root.display()))
        .arg(format!("/{UNIT}"))
        .output()
        .expect("systemd-analyze");
    let err = String::from_utf8_lossy(&out.stderr);
    let ours: Vec<&str> = err.lines().filter(|l| l.contains("drover")).collect();
    assert!(out.status.success() && ours.is_empty(), "systemd-analyze verify: {err}\n{unit_text}");
    // The check is real: without the binary it fails.
    std::fs::remove_file(root.join("usr/local/bin/drover-agent")).expect("rm");
    let out =
        tool("systemd-analyze").args(["verify", "--man=no"]).arg(format!("--root={}", root.display())).arg(format!("/{UNIT}")).output();
    let out = out.expect("systemd-analyze");
    assert!(!out.status.success(), "verify passed without the agent binary: {}", String::from_utf8_lossy(&out.stderr));

    // As hardened as the NixOS one (the same bound as tests/tests/nixos_modules.rs).
    let out = tool("systemd-analyze").args(["security", "--offline=true", "--no-pager"]).arg(&unit).output().expect("systemd-analyze");
    let all = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    let line = all.lines().find(|l| l.contains("Overall exposure level")).unwrap_or_else(|| panic!("no score:\n{all}"));
    let score: f64 = line.split(": ").nth(1).and_then(|v| v.split_whitespace().next()).and_then(|v| v.parse().ok()).expect("score");
    assert!(score <= 6.0, "agent exposure {score}");
}

/// Publishes a CI-signed release whose fleet is `hostname` alone on channel `base`; its
/// rollout id.
async fn publish_one_host_release(h: &Harness, hostname: &str, commit: &str) -> RolloutId {
    let spec = json!({
        "hosts": { hostname: { "system": "x86_64-linux", "tags": ["maas"], "channel": "base",
            "closure": "/nix/store/6cp643dzvlxxpkgbg5kzmwj47sam9zs2-nixos-system-ubuntu-25.05" } },
        "channels": { "base": { "rolloutPolicy": "all", "freshnessWindowSecs": "1d", "signingIntervalSecs": "4h" } },
        "rolloutPolicies": { "all": { "waves": [ { "selector": { "all": true }, "soakSecs": 0 } ] } }
    });
    let spec = FleetSpec::from_json(spec.to_string().as_bytes()).expect("spec");
    let params = ReleaseParams { meta: ReleaseMeta { ci_commit: commit.into(), created_at: h.clock.now() }, version: 1, previous: None };
    let files = build_release(&spec, &params, &[KeySigner::new(ed25519_dalek::SigningKey::from_bytes(&CI_KEY))]).expect("release");
    let body = serde_json::to_string(&PublishRequest::from_files(&files, Some("test".into())).expect("utf-8")).expect("json");
    let (code, text) = h.call(Some(&h.admin), "POST", "/v1/releases", Some(&body)).await;
    assert_eq!(code, "201", "{text}");
    RolloutId::new("base", commit).expect("rollout id")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_on_a_plain_host_refuses_intents_with_the_reason_and_still_reports_health_and_runs_tasks() {
    let h = Harness::start_with_long_poll(1).await;
    let root = h.dir.path().join("root");
    let marker = root.join("synced");
    let bus = TestBus::start_with(&[
        "maas_hardware_sync.timer;timer;inactive".to_owned(),
        format!("maas_hardware_sync.service;oneshot;inactive;echo synced >> '{}'", marker.display()),
        "broken.service;oneshot;inactive;exit 3".to_owned(),
    ]);
    let host = h.bootstrap_host("ubuntu-05", &root).await;
    // The root is the host's `/` for activation: Ubuntu, no Nix at all.
    assert!(!root.join("nix").exists());
    let creds = root.join("etc/maas/maas-machine-creds.yml");
    let config = root.join("etc/drover/agent.toml");
    let mut toml = read(&config);
    toml.push_str(&format!(
        "systemd_bus = \"{bus}\"\n\n[activation]\nroot = \"{root}\"\n\n[health]\nmaas_creds_file = \"{creds}\"\n\n\
         [tasks]\nmaas_creds_file = \"{creds}\"\n",
        bus = bus.address(),
        root = root.display(),
        creds = creds.display()
    ));
    std::fs::write(&config, toml).expect("config");
    // A unit that failed, for the health report to carry.
    tokio::task::block_in_place(|| {
        use drover_agent::systemd::Systemd as _;
        let sd = bus.systemd();
        let _ = sd.start_unit("broken.service");
        assert_eq!(sd.failed_units().expect("failed units"), ["broken.service"]);
    });
    let log = h.dir.path().join("agent.log");
    let mut agent = start_agent(&config, "info", Stdio::from(std::fs::File::create(&log).expect("log")));
    h.until_active(host).await;
    let app = h.running.app.clone();

    // Health: the failed unit reaches the coordinator's view of the host.
    let deadline = Instant::now() + WAIT;
    loop {
        let snapshot = app.store.plan_snapshot().expect("snapshot");
        let failed = snapshot.hosts.iter().find(|p| p.id == host).and_then(|p| p.report.as_ref()).map(|r| r.failed_units);
        if failed == Some(1) {
            break;
        }
        assert!(Instant::now() < deadline, "no health report with the failed unit ({failed:?}); agent log:\n{}", read(&log));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A rollout's intent: refused with the reason, which the coordinator records.
    let rollout = publish_one_host_release(&h, "ubuntu-05", "ub0001").await;
    let deadline = Instant::now() + WAIT;
    loop {
        app.executor.tick_now(&app).await.expect("tick");
        let hosts = app.store.list_host_rollouts(&rollout).expect("host rollouts");
        if hosts.iter().any(|r| r.state == HostRolloutState::Failed) {
            break;
        }
        assert!(Instant::now() < deadline, "the host never failed its rollout: {hosts:?}; agent log:\n{}", read(&log));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let events = app.store.list_events(&EventFilter { limit: 500, ..Default::default() }).expect("events");
    let failed = events
        .iter()
        .find(|e| e.event.kind == "rollout.host" && e.event.data["transition"] == "Activating -> Failed")
        .unwrap_or_else(|| panic!("no Activating -> Failed event: {events:#?}"));
    assert_eq!(failed.event.data["reason"], format!("activation no-backend: {NO_BACKEND}"), "{:?}", failed.event);
    assert!(
        events.iter().any(|e| e.event.kind == "agent.NoActivationBackend" && e.event.data["rolloutId"] == rollout.to_string()),
        "{events:#?}"
    );
    assert!(agent.0.try_wait().expect("try_wait").is_none(), "the agent exited after the refusal:\n{}", read(&log));
    assert!(!root.join("nix").exists(), "nothing Nix was created on the host");

    // Tasks still run: the MAAS hardware-sync reseed, over D-Bus, writing the credentials.
    let task = json!({ "type": "node.hw_sync_reseed", "maasUrl": "http://10.20.0.2:5240/MAAS", "systemId": "4y3h7r",
        "consumerKey": "cK9xq7", "tokenKey": "tKm2Lp", "tokenSecret": "tSsecretValue42" });
    let id = h.issue_task(host, task, "maas onboarding").await;
    let view = h.task_result(id, Some(&log)).await;
    assert_task_succeeded(&view);
    assert_eq!(mode(&creds), 0o600);
    assert!(read(&creds).contains("endpoint: 'http://10.20.0.2:5240/MAAS/metadata/status/4y3h7r'"));
    assert_eq!(read(&marker), "synced\n");
}

/// The agent's Debian package (`packaging/deb/build-debs.sh`, agent only) into `out`.
fn agent_package(out: &Path) -> PathBuf {
    let bins = workspace_binary("drover-agent").parent().expect("bin dir").to_path_buf();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging/deb/build-debs.sh");
    let made = Command::new("sh")
        .arg(script)
        .arg(&bins)
        .arg(out)
        .env("DROVER_DEB_COMPRESS", "gzip")
        .env("DROVER_DEB_ONLY", "agent")
        .output()
        .expect("build-debs.sh");
    assert!(made.status.success(), "{}", text(&made));
    PathBuf::from(String::from_utf8_lossy(&made.stdout).lines().last().expect("the package").to_owned())
}

/// On a host with `dpkg`, a coordinator that serves the agent's Debian package has its
/// bootstrap install that package (checked against the sha256 baked into the script) instead
/// of the bare binary: dpkg knows the agent, the binary is the package's in /usr/bin, the unit
/// is the package's (none written beside it), and the host enrolls and starts as before; a
/// second run is harmless.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_installs_the_agents_debian_package_where_the_coordinator_serves_one() {
    tool("dpkg");
    let pkgs = tempfile::tempdir().expect("tempdir");
    let deb = agent_package(pkgs.path());
    let served = deb.clone();
    let h = Harness::start_with_config(move |_, c| c.agent_package = Some(served)).await;
    let (code, body) = h.call(None, "GET", "/v1/agent/package.deb", None).await;
    assert_eq!(code, "200", "served to anyone enrolling, like the binary");
    assert!(body.starts_with("!<arch>"), "a Debian package");
    let created = h.create_host("ubuntu-11").await;
    let (command, host_id) = (created["command"].as_str().expect("command"), created["hostId"].as_str().expect("id"));
    let root = h.dir.path().join("root");
    let bin = fake_systemctl(h.dir.path());

    let out = bootstrap(&h, command, &root, &bin).await;
    assert!(out.status.success(), "bootstrap failed:\n{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("installed from its package"), "{}", text(&out));
    let status = read(&root.join("var/lib/dpkg/status"));
    assert!(status.contains("Package: drover-agent\nStatus: install ok installed\n"), "{status}");
    let agent = root.join("usr/bin/drover-agent");
    assert_eq!(mode(&agent), 0o755);
    assert!(!root.join("usr/local/bin/drover-agent").exists() && !root.join(UNIT).exists(), "no bare binary, no unit beside the package's");
    let unit = read(&root.join("lib/systemd/system/drover-agent.service"));
    assert!(unit.contains("\nExecStart=/usr/bin/drover-agent run --config /etc/drover/agent.toml\n"), "{unit}");
    let state = root.join("var/lib/drover");
    assert_eq!((mode(&state), mode(&state.join("key.pem"))), (0o700, 0o600));
    assert!(state.join("identity.json").is_file());
    let parsed = drover_agent::config::Config::load(&root.join("etc/drover/agent.toml")).expect("agent.toml");
    assert_eq!(parsed.coordinator_urls, std::slice::from_ref(&h.url));
    assert_eq!(systemctl_calls(h.dir.path()), ["daemon-reload", "enable --now drover-agent.service"]);
    assert_eq!(host_state(&h, host_id).await, "enrolling");
    // The packaged binary runs.
    let version = Command::new(&agent).arg("--version").output().expect("packaged agent");
    assert!(String::from_utf8_lossy(&version.stdout).contains(env!("CARGO_PKG_VERSION")));

    // Again: enrollment skipped, the same package reinstalled, nothing restarted.
    let cert = read(&state.join("cert.pem"));
    let out = bootstrap(&h, command, &root, &bin).await;
    assert!(out.status.success(), "the second run failed:\n{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("already enrolled as host {host_id}")), "{}", text(&out));
    assert_eq!(read(&state.join("cert.pem")), cert);
    assert_eq!(systemctl_calls(h.dir.path())[2..], ["daemon-reload", "enable --now drover-agent.service"]);

    // DROVER_BOOTSTRAP_NO_PACKAGE keeps the bare install on a dpkg host.
    let other = h.create_host("ubuntu-12").await;
    let root2 = h.dir.path().join("root2");
    let env =
        vec![("DROVER_BOOTSTRAP_ROOT".to_owned(), root2.display().to_string()), ("DROVER_BOOTSTRAP_NO_PACKAGE".to_owned(), "1".to_owned())];
    let out = run_bootstrap(&h, other["command"].as_str().expect("command"), &bin, env).await;
    assert!(out.status.success(), "{}", text(&out));
    assert!(root2.join("usr/local/bin/drover-agent").is_file() && root2.join(UNIT).is_file());
}
