//! Tasks that need systemd, end to end through the real `drover-agent run` process: a real
//! coordinator (in process, real TLS), the agent enrolled by the bootstrap command into a
//! temporary root, and its `systemd_bus` pointed at a private `dbus-daemon` with the
//! `fake-systemd` test service ([`TestBus`]). Tasks are issued through the admin API and their
//! results read back from the coordinator.
//!
//! - `node.hw_sync_reseed`: the MAAS credentials are written in MAAS's shape, the timer is
//!   restarted and the sync service really runs; the coordinator erases the token afterwards.
//! - `node.uninstall` with `purgeState`: the agent disables its unit, removes its files and
//!   its whole state dir, reports the result from memory, stops its unit, and exits by itself.
//!
//! These tests need `/usr/bin/dbus-daemon` (CI installs it) and fail loudly without it.

#![forbid(unsafe_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use drover_agent::systemd::Systemd as _;
use drover_engine::store::TaskState;
use drover_tests::api::assert_task_succeeded;
use drover_tests::bus::TestBus;
use drover_tests::{AgentProcess, Harness, start_agent};
use serde_json::{Value, json};
use uuid::Uuid;

/// The bound on every wait in these tests.
const WAIT: Duration = Duration::from_secs(60);

async fn issue(h: &Harness, host: Uuid, task: Value) -> Uuid {
    h.issue_task(host, task, "decommission").await
}

async fn result_of(h: &Harness, task: Uuid, log: &Path) -> Value {
    h.task_result(task, Some(log)).await
}

/// The step names of a task view, in order, with their outcomes.
fn steps(view: &Value) -> Vec<(String, String)> {
    view["result"]["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .map(|s| (s["name"].as_str().unwrap_or_default().to_owned(), s["outcome"].as_str().unwrap_or_default().to_owned()))
        .collect()
}

/// Runs `f` (calls on the bus: the systemd client runs its own short-lived runtime) off the
/// test's async workers.
fn off_runtime<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// Waits (bounded, polling `try_wait`) for the agent process to exit by itself.
async fn exited(agent: &mut AgentProcess) -> ExitStatus {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(status) = agent.0.try_wait().expect("try_wait") {
            return status;
        }
        assert!(Instant::now() < deadline, "the agent did not exit within {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hw_sync_reseed_runs_through_the_real_agent_over_dbus() {
    let h = Harness::start().await;
    let root = h.dir.path().join("root-hw");
    let marker = root.join("synced");
    let bus = TestBus::start_with(&[
        "maas_hardware_sync.timer;timer;inactive".to_owned(),
        format!("maas_hardware_sync.service;oneshot;inactive;echo synced >> '{}'", marker.display()),
    ]);
    let creds_file = root.join("etc/maas/maas-machine-creds.yml");
    let extra = format!("[tasks]\nmaas_creds_file = \"{}\"\n", creds_file.display());
    let (host, config) = h.enroll_sandboxed("hw-sync-01", &root, &extra).await;
    bus.point_agent_at(&config);
    let log = h.dir.path().join("agent.log");
    let _agent = start_agent(&config, "info", Stdio::from(std::fs::File::create(&log).expect("log")));

    let (ck, tk, ts) = ("CK-x7ab3c-consumer", "TK-x7ab3c-token", "TS-x7ab3c-secret-0123456789");
    let task = json!({ "type": "node.hw_sync_reseed", "maasUrl": "http://maas.example:5240/MAAS", "systemId": "x7ab3c",
        "consumerKey": ck, "tokenKey": tk, "tokenSecret": ts });
    let id = issue(&h, host, task).await;
    let view = result_of(&h, id, &log).await;
    assert_task_succeeded(&view);
    assert_eq!(view["type"], "node.hw_sync_reseed");
    let ok = |name: String| (name, "ok".to_owned());
    assert_eq!(
        steps(&view),
        [
            ok(format!("write-creds {}", creds_file.display())),
            ok("restart-timer maas_hardware_sync.timer".to_owned()),
            ok("start-service maas_hardware_sync.service".to_owned()),
            ok("verify".to_owned()),
        ],
        "{view}"
    );

    // The credentials, in MAAS's shape, private.
    assert_eq!(
        std::fs::read_to_string(&creds_file).expect("creds written"),
        format!(
            "reporting:\n  maas:\n    consumer_key: '{ck}'\n    endpoint: 'http://maas.example:5240/MAAS/metadata/status/x7ab3c'\n    \
             token_key: '{tk}'\n    token_secret: '{ts}'\n"
        )
    );
    let meta = std::fs::metadata(&creds_file).expect("meta");
    assert!(meta.is_file());
    assert_eq!(meta.permissions().mode() & 0o7777, 0o600);
    // The sync really ran (once), the timer is armed.
    assert_eq!(std::fs::read_to_string(&marker).expect("the sync ran"), "synced\n");
    let (timer, service) = off_runtime(|| {
        let sd = bus.systemd();
        let status = |unit: &str| sd.unit_status(unit).expect("status").expect("loaded");
        (status("maas_hardware_sync.timer"), status("maas_hardware_sync.service"))
    });
    assert_eq!((timer.active_state.as_str(), timer.sub_state.as_str()), ("active", "waiting"));
    assert!(service.succeeded(), "{service:?}");

    // Neither the result nor the stored task carries a secret once the task completed.
    for secret in [ck, tk, ts] {
        assert!(!view.to_string().contains(secret), "the task view leaks {secret}: {view}");
        let record = h.running.app.store.get_task(id).expect("store").expect("task");
        let stored = String::from_utf8(record.task.envelope).expect("utf-8");
        assert!(!stored.contains(secret), "the stored envelope still carries {secret}: {stored}");
    }
}

/// A file in the root, with its parents.
fn touch(path: &Path, text: &str) -> PathBuf {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, text).expect("write");
    path.to_path_buf()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uninstall_reports_then_stops_the_agent_for_good() {
    const UNIT: &str = "drover-agent.service";
    let h = Harness::start().await;
    let root = h.dir.path().join("root-un");
    // The unit the agent "runs under": a long-running service on the fake systemd.
    let bus = TestBus::start_with(&[format!("{UNIT};simple;active;exec sleep 600")]);
    let unit_file = touch(&root.join("etc/systemd/system").join(UNIT), "[Service]\nExecStart=/usr/local/bin/drover-agent run\n");
    let binary = root.join("usr/local/bin/drover-agent");
    let config_path = root.join("etc/drover/agent.toml");
    let uninstall_paths = [unit_file.clone(), binary.clone(), config_path.clone()];
    let extra = format!(
        "[tasks]\nagent_unit = \"{UNIT}\"\nuninstall_paths = [{}]\n",
        uninstall_paths.iter().map(|p| format!("\"{}\"", p.display())).collect::<Vec<_>>().join(", ")
    );
    let (host, config) = h.enroll_sandboxed("uninstall-01", &root, &extra).await;
    assert_eq!(config, config_path);
    bus.point_agent_at(&config);
    if !binary.exists() {
        touch(&binary, "#!/bin/sh\n");
    }
    let state_dir = root.join("var/lib/drover");
    assert!(state_dir.join("key.pem").is_file(), "enrolled into {}", state_dir.display());
    let unit_state = || {
        off_runtime(|| {
            let unit = bus.systemd().unit_status(UNIT).expect("status").expect("loaded");
            (bus.unit_file_state(UNIT), unit.active_state, unit.sub_state)
        })
    };
    let strings = |a: &str, b: &str, c: &str| (a.to_owned(), b.to_owned(), c.to_owned());
    assert_eq!(unit_state(), strings("enabled", "active", "running"));

    let log = h.dir.path().join("agent.log");
    let mut agent = start_agent(&config, "info", Stdio::from(std::fs::File::create(&log).expect("log")));
    let id = issue(&h, host, json!({ "type": "node.uninstall", "purgeState": true })).await;
    let view = result_of(&h, id, &log).await;
    let agent_log = || std::fs::read_to_string(&log).unwrap_or_default();
    assert_task_succeeded(&view);
    assert_eq!(view["type"], "node.uninstall");
    let want: Vec<(String, String)> = [
        (format!("disable-unit {UNIT}"), "ok"),
        (format!("remove {}", unit_file.display()), "ok"),
        (format!("remove {}", binary.display()), "ok"),
        (format!("remove {}", config_path.display()), "ok"),
        (format!("purge-state {}", state_dir.display()), "ok"),
        (format!("stop-unit {UNIT}"), "skipped"),
    ]
    .into_iter()
    .map(|(n, o)| (n, o.to_owned()))
    .collect();
    assert_eq!(steps(&view), want, "{view}");

    // The agent stops its unit once the result was acknowledged, then exits by itself, cleanly.
    let status = exited(&mut agent).await;
    assert!(status.success(), "the agent exited with {status:?}; its log:\n{}", agent_log());
    assert!(agent_log().contains("uninstall reported"), "{}", agent_log());

    assert!(!state_dir.exists(), "the state dir is purged");
    for p in &uninstall_paths {
        assert!(!p.exists(), "{} was removed", p.display());
    }
    assert_eq!(unit_state(), strings("disabled", "inactive", "dead"), "the unit was disabled and stopped");
    // The coordinator kept the task completed (the agent reported nothing after it).
    let record = h.running.app.store.get_task(id).expect("store").expect("task");
    assert_eq!(record.state, TaskState::Completed);
}
