//! A coordinator restored from a backup older than its fleet: real
//! `drover-coordinator serve` processes on one fixed port, `backup` while serving, the process
//! killed, `restore` into its state directory and a new process on the same port, with real
//! `drover-agent run` processes enrolled by the bootstrap command into temporary roots.
//!
//! - `a_host_enrolled_after_the_backup_is_told_to_re_enroll_not_404`: the restored store has
//!   no record of a host enrolled after the backup. Every agent route (check-in, confirm,
//!   renew, rollout, proof) answers its still-valid certificate one way — `403
//!   host_unknown_reenroll`, naming the host id and hostname and the way back — the agent
//!   says so once in its log, and the way back the message names works: `drover enroll` of
//!   the hostname on the restored coordinator, the old state moved aside, the printed command
//!   run on the host, and the host is active again under its new id.
//! - `a_task_whose_result_the_restored_store_lost_is_answered_from_the_agents_record`: a
//!   storage-cleanup job's task queued at the backup, run by the agent after it and its job
//!   completed; after the restore the store holds the task queued again and hands it out; the
//!   agent answers with the result it recorded, never running it again, and the task ends
//!   `succeeded` and the job `completed` in the restored store.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use drover_proto::report::HOST_UNKNOWN_REENROLL;
use drover_tests::procs::{Proc, SitePaths, fixed_port_site, log_tail};
use drover_tests::sandbox::{gpu_tools, sandbox};
use drover_tests::{Endpoint, key_and_csr, start_agent, workspace_binary};
use serde_json::{Value, json};
use uuid::Uuid;

/// Long-polls of a second, jobs and rollouts planned every second, and hosts not marked
/// offline while an agent is stopped on purpose.
const SECTIONS: &str = "[agent]\nlong_poll_secs = 1\n\n[hosts]\noffline_after_secs = 600\n\n\
                        [rollouts]\ninterval_secs = 1\ndebounce_ms = 50\n";

/// The bound on every wait.
const WAIT: Duration = Duration::from_secs(90);

fn coordinator(args: &[&str]) -> std::process::Output {
    Command::new(workspace_binary("drover-coordinator")).args(args).output().expect("drover-coordinator runs")
}

/// A backup of the serving store at `file`.
fn backup(paths: &SitePaths, file: &Path) {
    let out = coordinator(&["backup", "--state-dir", &paths.state.display().to_string(), "--out", &file.display().to_string()]);
    assert!(out.status.success(), "backup: {}", String::from_utf8_lossy(&out.stderr));
}

/// The process killed with its store, `backup` restored in its state directory and a new
/// process serving it on the same port.
fn lose_and_restore(paths: &SitePaths, mut server: Proc, backup: &Path) -> Proc {
    server.child.kill().expect("SIGKILL");
    server.child.wait().expect("reaped");
    for f in ["coordinator.db", "coordinator.db-wal", "coordinator.db-shm"] {
        let _ = std::fs::remove_file(paths.state.join(f));
    }
    let out = coordinator(&["restore", "--state-dir", &paths.state.display().to_string(), "--from", &backup.display().to_string()]);
    assert!(out.status.success(), "restore: {}", String::from_utf8_lossy(&out.stderr));
    paths.serve()
}

async fn get(e: &Endpoint, path: &str) -> Value {
    let (code, text) = e.call(Some(&e.admin), "GET", path, None).await;
    assert_eq!(code, "200", "GET {path}: {text}");
    serde_json::from_str(&text).expect("json")
}

/// Polls `check` every 100 ms until it returns `Some`, for at most [`WAIT`]; `log` (the
/// coordinator's) goes into the panic message.
async fn wait_for<T>(what: &str, log: &Path, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not after {WAIT:?}; coordinator log:\n{}", log_tail(log, 40));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn until_active(e: &Endpoint, log: &Path, host: Uuid) {
    wait_for(&format!("host {host} active"), log, async || (get(e, &format!("/v1/hosts/{host}")).await["state"] == "active").then_some(()))
        .await;
}

/// Lines of an agent's log that contain every one of `parts`.
fn log_lines(log: &Path, parts: &[&str]) -> usize {
    std::fs::read_to_string(log).unwrap_or_default().lines().filter(|l| parts.iter().all(|p| l.contains(p))).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_enrolled_after_the_backup_is_told_to_re_enroll_not_404() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (paths, e) = fixed_port_site(dir.path(), SECTIONS);
    let log = dir.path().join("coordinator.log");
    let server = paths.serve();
    e.create_host("before-01").await;
    let file = dir.path().join("before.db");
    backup(&paths, &file);

    // Enrolled after the backup, its agent running and active.
    let root = dir.path().join("root-after");
    let extra = sandbox(&root);
    let (old_id, config) = e.enroll_sandboxed("after-01", &root, &extra).await;
    let agent_log = dir.path().join("agent-old.log");
    let agent = start_agent(&config, "info", Stdio::from(std::fs::File::create(&agent_log).expect("log")));
    until_active(&e, &log, old_id).await;

    let _server = lose_and_restore(&paths, server, &file);

    // Every agent route answers the host's certificate one way: who, why, and the way back.
    let state = root.join("var/lib/drover");
    let cert = (state.join("cert.pem"), state.join("key.pem"));
    let checkin = json!({ "agentVersion": "0.1.0", "bootId": "b" }).to_string();
    let confirm = json!({ "intentId": Uuid::new_v4().to_string(), "rolloutId": "gpu@c0ffee", "closure": "/nix/store/x", "bootId": "b" });
    let renew = json!({ "csr": key_and_csr("after-01").1 }).to_string();
    let routes = [
        ("POST", "/v1/agent/checkin", Some(checkin)),
        ("POST", "/v1/agent/confirm", Some(confirm.to_string())),
        ("POST", "/v1/agent/renew", Some(renew)),
        ("GET", "/v1/rollouts/gpu@c0ffee", None),
        ("GET", "/v1/rollouts/gpu@c0ffee/proof", None),
    ];
    for (method, path, body) in routes {
        let (code, text) = e.call(Some(&cert), method, path, body.as_deref()).await;
        assert_eq!(code, "403", "{method} {path}: {text}");
        let answer: Value = serde_json::from_str(&text).expect("the API's error shape");
        assert_eq!(answer["error"]["code"], HOST_UNKNOWN_REENROLL, "{method} {path}: {text}");
        let message = answer["error"]["message"].as_str().expect("message");
        for want in [old_id.to_string().as_str(), "(after-01)", "restored from a backup", "`drover enroll after-01`", "/var/lib/drover"] {
            assert!(message.contains(want), "{method} {path}: {want:?} missing from {message:?}");
        }
    }

    // The agent says so once, at error level, and does not retry at the backoff's pace.
    wait_for("the agent's log naming the refusal", &log, async || {
        (log_lines(&agent_log, &[HOST_UNKNOWN_REENROLL, "\"ERROR\""]) > 0).then_some(())
    })
    .await;
    drop(agent);
    assert_eq!(log_lines(&agent_log, &[HOST_UNKNOWN_REENROLL, "\"ERROR\""]), 1, "said once:\n{}", log_tail(&agent_log, 20));
    assert_eq!(log_lines(&agent_log, &[HOST_UNKNOWN_REENROLL, "check-in failed"]), 0, "not the generic failure, again and again");

    // The way back, as the message says: the agent stopped, its state moved aside, the
    // hostname enrolled again on the restored coordinator and the printed command run.
    let aside = root.join(format!("var/lib/drover.{old_id}"));
    std::fs::rename(&state, &aside).expect("move the old state aside");
    let (new_id, config) = e.enroll_sandboxed("after-01", &root, &extra).await;
    assert_ne!(new_id, old_id, "a new host id");
    let _agent = start_agent(&config, "warn", Stdio::null());
    until_active(&e, &log, new_id).await;
    let old_cert = (aside.join("cert.pem"), aside.join("key.pem"));
    let (code, _) =
        e.call(Some(&old_cert), "POST", "/v1/agent/checkin", Some(&json!({ "agentVersion": "0.1.0", "bootId": "b" }).to_string())).await;
    assert_eq!(code, "403", "the old certificate stays refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_whose_result_the_restored_store_lost_is_answered_from_the_agents_record() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (paths, e) = fixed_port_site(dir.path(), SECTIONS);
    let log = dir.path().join("coordinator.log");
    let server = paths.serve();
    let root = dir.path().join("root-job");
    let mut extra = sandbox(&root);
    gpu_tools(&root, &mut extra);
    // No tenant left in passwd: the job's validation passes.
    let passwd = root.join("etc/passwd");
    let text = std::fs::read_to_string(&passwd).expect("passwd");
    std::fs::write(&passwd, text.lines().filter(|l| !l.starts_with("alice:")).map(|l| format!("{l}\n")).collect::<String>())
        .expect("passwd");
    let (host, config) = e.enroll_sandboxed("gpu-restore-01", &root, &extra).await;
    let agent_log = dir.path().join("agent.log");
    let start =
        || start_agent(&config, "info", Stdio::from(std::fs::OpenOptions::new().create(true).append(true).open(&agent_log).expect("log")));
    let agent = start();
    until_active(&e, &log, host).await;
    // Stopped, so the backup holds the job's first task queued, before any result.
    drop(agent);

    let body = json!({ "mode": "storage_cleanup", "storage": "local", "reason": "between tenants" }).to_string();
    let (code, text) = e.call(Some(&e.admin), "POST", &format!("/v1/hosts/{host}/decommission"), Some(&body)).await;
    assert_eq!(code, "201", "{text}");
    let job = serde_json::from_str::<Value>(&text).expect("json")["jobId"].as_str().expect("job id").to_owned();
    let cleanup = wait_for("the cleanup task issued", &log, async || {
        let v = get(&e, &format!("/v1/jobs/{job}")).await;
        v["taskId"].as_str().map(str::to_owned)
    })
    .await;
    assert_eq!(get(&e, &format!("/v1/tasks/{cleanup}")).await["state"], "queued");
    let file = dir.path().join("task-queued.db");
    backup(&paths, &file);

    // After the backup: the agent runs it, and the job completes.
    let _agent = start();
    let completed = async |e: &Endpoint| {
        let v = get(e, &format!("/v1/jobs/{job}")).await;
        match v["state"].as_str() {
            Some("completed") => Some(v),
            Some("running" | "pending") => None,
            other => panic!("job {job} {other:?}: {v}"),
        }
    };
    wait_for("the job completed before the restore", &log, async || completed(&e).await).await;
    let before = get(&e, &format!("/v1/tasks/{cleanup}")).await;
    assert_eq!(before["result"]["outcome"], "succeeded", "{before}");

    // Restored: the store has the task queued again and hands it out; the agent answers.
    let _server = lose_and_restore(&paths, server, &file);
    let job_after = wait_for("the job completed in the restored store", &log, async || completed(&e).await).await;
    assert_eq!(job_after["stages"], json!(["cleanup_storage", "validate_clean"]));
    let after = get(&e, &format!("/v1/tasks/{cleanup}")).await;
    assert_eq!(after["state"], "completed", "{after}");
    assert_eq!(after["result"]["outcome"], "succeeded", "{after}");
    // The result recorded when it ran, not a second run's: that one would have freed nothing.
    assert_eq!(after["result"]["steps"], before["result"]["steps"], "the recorded steps, byte for byte");
    let freed = after["result"]["steps"].as_array().expect("steps").iter().filter_map(|s| s["data"]["entries"].as_u64()).sum::<u64>();
    assert!(freed > 0, "what the first run freed: {after}");
    assert_eq!(log_lines(&agent_log, &["task admitted", &cleanup]), 1, "run once:\n{}", log_tail(&agent_log, 30));
    assert_eq!(log_lines(&agent_log, &["answered with the result recorded", &cleanup]), 1, "answered once:\n{}", log_tail(&agent_log, 30));
}
