//! `drover-agent run` as a real process against a real coordinator: enrolled by the real
//! bootstrap command, it tells systemd it is ready and pings the watchdog (a real datagram
//! socket as `NOTIFY_SOCKET`), checks in over mTLS until the host is active, stops cleanly on SIGTERM,
//! and — run once with Debian's libfaketime two hours ahead, then on the real clock — reports
//! the clock stepping back, which the coordinator records as the host's event.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use drover_tests::{Harness, workspace_binary};
use uuid::Uuid;

/// Enrolls `hostname` with the bootstrap command into `root`, sandboxed; its id and config.
async fn enroll(h: &Harness, hostname: &str, root: &Path) -> (Uuid, PathBuf) {
    h.enroll_sandboxed(hostname, root, "").await
}

struct Agent(Child);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_agent(config: &Path, notify: Option<&Path>, faketime: Option<&str>) -> Agent {
    let agent = workspace_binary("drover-agent");
    let mut cmd = Command::new(&agent);
    if let Some(offset) = faketime {
        // libfaketime preloaded into the agent itself (the `faketime` wrapper would fork and
        // stand between the test and the agent's signals). Only the wall clock moves: timers
        // and timeouts keep the real monotonic clock.
        cmd.env("LD_PRELOAD", libfaketime()).env("FAKETIME", offset).env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
    }
    cmd.args(["run", "--config"]).arg(config).env("DROVER_LOG", "warn").stdout(Stdio::null()).stderr(Stdio::piped());
    if let Some(socket) = notify {
        // As systemd sets them for a unit with WatchdogSec=0.2s (no WATCHDOG_PID: ours).
        cmd.env("NOTIFY_SOCKET", socket).env("WATCHDOG_USEC", "200000");
    }
    Agent(cmd.spawn().expect("agent starts"))
}

/// Debian's libfaketime (package `faketime`), multi-threaded flavour, under any multiarch dir.
fn libfaketime() -> PathBuf {
    std::fs::read_dir("/usr/lib")
        .expect("/usr/lib")
        .flatten()
        .map(|e| e.path().join("faketime/libfaketimeMT.so.1"))
        .find(|p| p.is_file())
        .expect("libfaketimeMT.so.1 not found: install Debian's `faketime` package (.ci/run does)")
}

/// Waits (bounded) until `check` holds, polling the in-process coordinator's store.
async fn until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn stop(mut agent: Agent) -> std::process::ExitStatus {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(agent.0.id() as i32), nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    agent.0.wait().expect("agent exits")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_runs_checks_in_notifies_systemd_and_stops_on_sigterm() {
    let h = Harness::start().await;
    let root = h.dir.path().join("root-a");
    let (host, config) = enroll(&h, "gpu-run-01", &root).await;
    let socket_path = h.dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).expect("notify socket");
    socket.set_read_timeout(Some(Duration::from_secs(60))).expect("timeout");
    let agent = start_agent(&config, Some(&socket_path), None);
    let mut buf = [0u8; 512];
    let n = socket.recv(&mut buf).expect("the agent notified systemd");
    assert!(String::from_utf8_lossy(&buf[..n]).lines().any(|l| l == "READY=1"), "{}", String::from_utf8_lossy(&buf[..n]));
    // Watchdog pings follow, at half the interval the unit asked for.
    let pings_started = Instant::now();
    loop {
        let n = socket.recv(&mut buf).expect("the agent pings the watchdog");
        if String::from_utf8_lossy(&buf[..n]).lines().any(|l| l == "WATCHDOG=1") {
            break;
        }
        assert!(pings_started.elapsed() < Duration::from_secs(30), "no WATCHDOG=1 within 30 s");
    }
    let store = h.running.app.store.clone();
    until("the host to become active", || store.get_host(host).ok().flatten().is_some_and(|r| r.state.as_str() == "active")).await;
    // What the agent says of itself reaches the operator's view of the host: its memory, load,
    // state directory, as this machine has them (the check-in flush writes them).
    let deadline = Instant::now() + Duration::from_secs(60);
    let view = loop {
        h.running.app.flush_checkins().await.expect("flush");
        let (code, text) = h.call(Some(&h.admin), "GET", &format!("/v1/hosts/{host}"), None).await;
        assert_eq!(code, "200", "{text}");
        let v: serde_json::Value = serde_json::from_str(&text).expect("json");
        if !v["health"].is_null() {
            break v;
        }
        assert!(Instant::now() < deadline, "no health in the host's view: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let health = &view["health"];
    assert!(health["reportedAt"].is_string(), "{health}");
    assert!(health["health"]["memTotalBytes"].as_u64().is_some_and(|m| m > 0), "{health}");
    assert!(health["health"]["loadAvg1m"].is_number() && health["health"]["uptimeSecs"].is_number(), "{health}");
    assert!(health["health"]["stateDir"].is_object(), "{health}");
    assert!(health["probes"].is_array(), "{health}");
    let status = stop(agent);
    assert!(status.success(), "the agent did not stop cleanly on SIGTERM: {status:?}");
    // Pings may still be queued before it: read until STOPPING=1 (bounded by the socket's
    // read timeout and the few datagrams a 100 ms ping can have queued).
    let mut stopping = false;
    for _ in 0..10_000 {
        let n = socket.recv(&mut buf).expect("the agent said it is stopping");
        if String::from_utf8_lossy(&buf[..n]).lines().any(|l| l == "STOPPING=1") {
            stopping = true;
            break;
        }
    }
    assert!(stopping, "no STOPPING=1 after SIGTERM");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clock_stepping_back_is_reported_end_to_end() {
    let h = Harness::start().await;
    let root = h.dir.path().join("root-b");
    let (host, config) = enroll(&h, "gpu-run-02", &root).await;
    let seen = root.join("var/lib/drover/seen.json");

    // Two hours ahead: the agent records that time as the latest it has seen.
    let ahead = start_agent(&config, None, Some("+2h"));
    until("the agent to record the time it saw", || std::fs::read(&seen).is_ok()).await;
    assert!(stop(ahead).success());
    let recorded: serde_json::Value = serde_json::from_slice(&std::fs::read(&seen).expect("seen")).expect("json");
    let latest = drover_proto::time::Time::parse_strict(recorded["latestTime"].as_str().expect("latestTime")).expect("time");
    assert!(latest.secs_since(drover_tests::wall_now()) > 3600, "faketime did not move the agent's clock: {latest}");

    // Back on the real clock: two hours earlier than the agent has seen.
    let agent = start_agent(&config, None, None);
    let store = h.running.app.store.clone();
    until("the coordinator to record agent.ClockSteppedBack", || {
        store
            .list_events(&drover_engine::store::EventFilter { host_id: Some(host), ..Default::default() })
            .map(|events| events.iter().any(|e| e.event.kind == "agent.ClockSteppedBack"))
            .unwrap_or(false)
    })
    .await;
    assert!(stop(agent).success());
}
