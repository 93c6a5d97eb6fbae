//! Enrollment end to end: the admin creates a host through the real API, the exact command it
//! returns runs with real `curl` and `sh` (only `sudo` removed: this machine has none) into a
//! temporary root, the `drover-agent` binary from this build enrolls, and the certificate it
//! got works on the agent routes. Then the ways a token must be refused.

use std::path::Path;

use drover_tests::{Harness, sh};

/// The bootstrap command as the API returned it, minus `sudo`, with the test hooks that
/// install under `root` and skip the systemd step.
async fn run_bootstrap(h: &Harness, command: &str, root: &Path) -> std::process::Output {
    assert!(command.contains("| sudo sh -c "), "{command}");
    let command = command.replace("| sudo sh -c ", "| sh -c ");
    let env = vec![
        ("DROVER_BOOTSTRAP_ROOT".to_owned(), root.display().to_string()),
        ("DROVER_BOOTSTRAP_SKIP_SYSTEMD".to_owned(), "1".to_owned()),
        ("TMPDIR".to_owned(), h.dir.path().display().to_string()),
    ];
    sh(command, env).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_command_enrolls_with_real_curl_and_the_agent_binary() {
    let h = Harness::start().await;
    let created = h.create_host("gpu-01").await;
    let command = created["command"].as_str().expect("command");
    assert!(command.contains("--pinnedpubkey 'sha256//"), "the command pins the server key: {command}");
    assert!(command.contains(&h.trust.1), "the command carries the trust hash: {command}");
    let root = h.dir.path().join("root");
    let out = run_bootstrap(&h, command, &root).await;
    assert!(
        out.status.success(),
        "bootstrap failed:\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let state = root.join("var/lib/drover");
    for f in ["key.pem", "cert.pem", "ca.crt", "trust.json", "director.pub", "identity.json"] {
        assert!(state.join(f).is_file(), "{f} missing from the agent state dir");
    }
    assert!(root.join("usr/local/bin/drover-agent").is_file());
    assert_eq!(std::fs::read(state.join("trust.json")).expect("trust"), std::fs::read(&h.trust.0).expect("trust"));
    let identity: serde_json::Value = serde_json::from_slice(&std::fs::read(state.join("identity.json")).expect("identity")).expect("json");
    assert_eq!(identity["hostId"], created["hostId"]);
    assert_eq!(identity["hostname"], "gpu-01");

    // The certificate the agent got is accepted on an agent route, and its first check-in
    // makes the host active.
    let cert = (state.join("cert.pem"), state.join("key.pem"));
    let checkin = serde_json::json!({ "agentVersion": "test", "bootId": "b-1" }).to_string();
    let (code, body) = h.call(Some(&cert), "POST", "/v1/agent/checkin", Some(&checkin)).await;
    assert_eq!(code, "200", "check-in with the enrolled cert failed: {body}");
    let host_id = uuid::Uuid::parse_str(created["hostId"].as_str().expect("id")).expect("uuid");
    let host = h.running.app.store.get_host(host_id).expect("store").expect("host");
    assert_eq!(host.state.as_str(), "active");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reused_token_is_refused() {
    let h = Harness::start().await;
    let created = h.create_host("gpu-02").await;
    let command = created["command"].as_str().expect("command");
    let out = run_bootstrap(&h, command, &h.dir.path().join("first")).await;
    assert!(out.status.success(), "first run: {}", String::from_utf8_lossy(&out.stderr));
    // The same command on another machine (another root) must not enroll again.
    let out = run_bootstrap(&h, command, &h.dir.path().join("second")).await;
    assert!(!out.status.success(), "a reused token enrolled a second machine");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("already used"), "{stderr}");
    assert!(!h.dir.path().join("second/var/lib/drover/cert.pem").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_token_is_refused() {
    let h = Harness::start().await;
    let created = h.create_host("gpu-03").await;
    h.clock.advance(2 * 3600 + 1);
    let out = run_bootstrap(&h, created["command"].as_str().expect("command"), &h.dir.path().join("root")).await;
    assert!(!out.status.success(), "an expired token enrolled");
    assert!(String::from_utf8_lossy(&out.stderr).contains("expired"), "{}", String::from_utf8_lossy(&out.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_hosts_token_is_refused() {
    let h = Harness::start().await;
    let a = h.create_host("gpu-a").await;
    let b = h.create_host("gpu-b").await;
    // Host B's command with host A's token.
    let a_token = a["token"].as_str().expect("token");
    let b_token = b["token"].as_str().expect("token");
    let forged = b["command"].as_str().expect("command").replace(b_token, a_token);
    let out = run_bootstrap(&h, &forged, &h.dir.path().join("root")).await;
    assert!(!out.status.success(), "host A's token enrolled host B");
    assert!(String::from_utf8_lossy(&out.stderr).contains("another host"), "{}", String::from_utf8_lossy(&out.stderr));
    // And A's token was not spent by the attempt.
    let out = run_bootstrap(&h, a["command"].as_str().expect("command"), &h.dir.path().join("a")).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trust_file_not_matching_the_operators_hash_is_refused() {
    let h = Harness::start().await;
    let created = h.create_host("gpu-04").await;
    // The operator's hash says one trust.json; the coordinator serves another (a compromised
    // coordinator swapping CI keys): the agent must refuse before enrolling.
    let command = created["command"].as_str().expect("command").replace(&h.trust.1, &"0".repeat(64));
    let out = run_bootstrap(&h, &command, &h.dir.path().join("root")).await;
    assert!(!out.status.success(), "enrolled with a trust file the operator did not vouch for");
    assert!(!h.dir.path().join("root/var/lib/drover/cert.pem").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drover_enroll_prints_the_command_that_enrolls_the_host() {
    // The operator's path: `drover enroll` (real binary, mTLS as the admin) prints the
    // command; the host runs it.
    let h = Harness::start().await;
    let drover = drover_tests::workspace_binary("drover").display().to_string();
    let args = vec![
        "enroll".to_owned(),
        "gpu-05".to_owned(),
        "--trust".to_owned(),
        h.trust.0.display().to_string(),
        "--coordinator".to_owned(),
        h.url.clone(),
        "--cert".to_owned(),
        h.admin.0.display().to_string(),
        "--key".to_owned(),
        h.admin.1.display().to_string(),
        "--ca".to_owned(),
        h.ca.display().to_string(),
    ];
    let out =
        tokio::task::spawn_blocking(move || std::process::Command::new(drover).args(args).output().expect("drover")).await.expect("join");
    assert!(out.status.success(), "drover enroll failed: {}", String::from_utf8_lossy(&out.stderr));
    let command = String::from_utf8(out.stdout).expect("utf8");
    let root = h.dir.path().join("root");
    let out = run_bootstrap(&h, command.trim(), &root).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(root.join("var/lib/drover/cert.pem").is_file());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_installs_a_notify_unit_and_starts_it() {
    // A fake `systemctl` on PATH records what the script asks of systemd, as the real one
    // would be asked; the unit file itself is real, under the test root.
    let h = Harness::start().await;
    let created = h.create_host("gpu-06").await;
    let bin = h.dir.path().join("fakebin");
    std::fs::create_dir_all(&bin).expect("mkdir");
    let log = h.dir.path().join("systemctl.log");
    let fake = format!("#!/bin/sh\necho \"$*\" >> '{}'\n", log.display());
    std::fs::write(bin.join("systemctl"), fake).expect("write");
    std::process::Command::new("chmod").args(["+x"]).arg(bin.join("systemctl")).status().expect("chmod");
    let root = h.dir.path().join("root");
    let command = created["command"].as_str().expect("command").replace("| sudo sh -c ", "| sh -c ");
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let env = vec![
        ("DROVER_BOOTSTRAP_ROOT".to_owned(), root.display().to_string()),
        ("TMPDIR".to_owned(), h.dir.path().display().to_string()),
        ("PATH".to_owned(), path),
    ];
    let out = sh(command, env).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let unit = std::fs::read_to_string(root.join("etc/systemd/system/drover-agent.service")).expect("unit written");
    assert!(unit.contains("ExecStart=/usr/local/bin/drover-agent run --config /etc/drover/agent.toml"), "{unit}");
    let calls = std::fs::read_to_string(&log).expect("systemctl was called");
    assert!(calls.contains("daemon-reload"), "{calls}");
    // This build's agent can run: the unit is enabled and started (`Type=notify`, so
    // systemd waits for the agent's READY=1).
    assert!(unit.contains("Type=notify") && unit.contains("WatchdogSec="), "{unit}");
    assert!(calls.contains("enable --now drover-agent.service"), "the unit was not started: {calls}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("started"), "{}", String::from_utf8_lossy(&out.stdout));
}
