//! A coordinator job survives its coordinator being SIGKILLed mid-job, over real processes:
//! `drover-coordinator serve` (state dir from `init`, admin credential from `operator-cert`)
//! on a fixed loopback port, one real `drover-agent run` enrolled by the bootstrap command into
//! a sandboxed root (scratch with tenant files, a passwd with a tenant, the fake `userdel`,
//! `loginctl`, drain hook and `nvidia-smi`). A soft reset is started through the admin API;
//! once its drain stage has succeeded the coordinator is killed, started again on the same
//! state dir and port, and the agent carries on against it.
//!
//! What it proves: the job resumes from its stored progress to the same end as an undisturbed
//! run (`jobs_e2e.rs`) — completed, every stage succeeded exactly once and in order, exactly
//! one task per task stage (the kill issues no duplicate), the host active and schedulable,
//! the tenant's scratch emptied.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use drover_tests::procs::{Proc, SitePaths, fixed_port_site, log_tail};
use drover_tests::sandbox::{gpu_tools, sandbox};
use drover_tests::{Endpoint, start_agent};
use serde_json::{Value, json};

const STAGES: [&str; 7] = ["cordon", "drain", "revoke_users", "cleanup_storage", "scrub_gpu", "validate_clean", "uncordon"];

/// A state dir from `init`, an admin credential from `operator-cert`, the CI trust file and a
/// `coordinator.toml` listening on a fixed port (so the agent finds the restarted process
/// where it left the first), all under one directory.
struct Site {
    _dir: tempfile::TempDir,
    paths: SitePaths,
    endpoint: Endpoint,
}

impl Site {
    fn new() -> Site {
        let dir = tempfile::tempdir().expect("tempdir");
        let (paths, endpoint) =
            fixed_port_site(dir.path(), "[agent]\nlong_poll_secs = 2\n\n[rollouts]\ninterval_secs = 1\ndebounce_ms = 50\n");
        Site { _dir: dir, paths, endpoint }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.paths.dir.join(rel)
    }

    /// `serve --config`, its log appended to `coordinator.log`; it must answer on the
    /// configured port.
    fn serve(&self) -> Proc {
        let server = self.paths.serve();
        assert_eq!(server.url, self.endpoint.url, "the coordinator listens where the agent was told");
        server
    }

    /// Both processes' last log lines.
    fn logs(&self) -> String {
        format!("coordinator log:\n{}\nagent log:\n{}", log_tail(&self.path("coordinator.log"), 30), log_tail(&self.path("agent.log"), 30))
    }

    /// `GET path` as the admin; `None` while the coordinator does not answer 200 (it may be
    /// down or starting).
    async fn get(&self, path: &str) -> Option<Value> {
        let (code, text) = self.endpoint.call(Some(&self.endpoint.admin), "GET", path, None).await;
        if code != "200" {
            return None;
        }
        serde_json::from_str(&text).ok()
    }

    /// Polls `check` every 100 ms until it returns `Some`, for at most `secs`.
    async fn wait_for<T>(&self, what: &str, secs: u64, mut check: impl AsyncFnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(v) = check().await {
                return v;
            }
            assert!(Instant::now() < deadline, "{what}: not after {secs} s\n{}", self.logs());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The stages whose history entries say `succeeded`, in history order.
fn succeeded(job: &Value) -> Vec<String> {
    let history = job["history"].as_array().map(Vec::as_slice).unwrap_or_default();
    history.iter().filter(|e| e["status"] == "succeeded").filter_map(|e| e["stage"].as_str().map(str::to_owned)).collect()
}

/// The job as an operator would read it when a wait fails.
fn summary(job: &Value) -> String {
    let brief = json!({ "state": job["state"], "stage": job["stage"], "attempt": job["attempt"], "message": job["message"], "history": job["history"] });
    serde_json::to_string_pretty(&brief).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coordinator_killed_mid_job_resumes_to_the_same_end() {
    let started = Instant::now();
    let site = Site::new();
    let mut server = site.serve();

    let root = site.path("root");
    let mut extra = sandbox(&root);
    let gpu = gpu_tools(&root, &mut extra);
    // While the coordinator is down the agent backs off; keep that short so it is back soon.
    extra.push_str("\n[checkin]\nbackoff_base_secs = 1\nbackoff_max_secs = 2\n");
    let (host, config) = site.endpoint.enroll_sandboxed("gpu-restart-01", &root, &extra).await;
    let agent_log = std::fs::File::create(site.path("agent.log")).expect("agent log");
    let _agent = start_agent(&config, "info", Stdio::from(agent_log));
    site.wait_for("host active", 60, async || {
        let v = site.get(&format!("/v1/hosts/{host}")).await?;
        (v["state"] == "active").then_some(())
    })
    .await;

    let body = json!({ "mode": "soft_reset", "storage": "local", "reason": "tenant turnover" }).to_string();
    let (code, text) = site.endpoint.call(Some(&site.endpoint.admin), "POST", &format!("/v1/hosts/{host}/decommission"), Some(&body)).await;
    assert_eq!(code, "201", "{text}");
    let job: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(job["stages"], json!(STAGES));
    let id = job["jobId"].as_str().expect("id").to_owned();

    // Kill as soon as the drain has succeeded: the job is then between task stages, its next
    // task issued or about to be.
    let at_kill = site
        .wait_for("drain succeeded", 60, async || {
            let v = site.get(&format!("/v1/jobs/{id}")).await?;
            assert_ne!(v["state"], "completed", "the job finished before the kill could land: {}", summary(&v));
            succeeded(&v).iter().any(|s| s == "drain").then_some(v)
        })
        .await;
    server.child.kill().expect("SIGKILL");
    server.child.wait().expect("reaped");
    let _server = site.serve();

    let done = site
        .wait_for("job completed after the restart", 120, async || {
            let v = site.get(&format!("/v1/jobs/{id}")).await?;
            let state = v["state"].as_str().unwrap_or_default();
            assert!(
                !state.starts_with("failed") && state != "cancelled",
                "the job stopped after the restart (killed at {}): {}\n{}",
                summary(&at_kill),
                summary(&v),
                site.logs()
            );
            (state == "completed").then_some(v)
        })
        .await;

    // Every stage succeeded exactly once, in order, despite the kill.
    assert_eq!(succeeded(&done), STAGES, "killed at {}; ended {}", summary(&at_kill), summary(&done));

    // One task per task stage, none duplicated by the restart.
    let tasks = site.get(&format!("/v1/tasks?host={host}")).await.expect("tasks");
    let mut types: Vec<String> = tasks["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter(|t| t["jobId"] == id.as_str())
        .map(|t| t["type"].as_str().unwrap_or("?").to_owned())
        .collect();
    types.sort();
    assert_eq!(types, ["allocation.revoke_user", "node.drain", "node.gpu_scrub", "node.storage_cleanup", "node.validate_clean"], "{tasks}");

    // The host really was worked on, and is active and schedulable again.
    assert_eq!(std::fs::read_dir(root.join("scratch")).expect("scratch").count(), 0, "scratch emptied");
    assert!(!std::fs::read_to_string(root.join("etc/passwd")).expect("passwd").contains("alice"), "tenant removed");
    assert!(std::fs::read_to_string(gpu.join("log")).expect("log").contains("--gpu-reset -i"), "GPUs reset");
    let host_view = site.get(&format!("/v1/hosts/{host}")).await.expect("host");
    assert_eq!((host_view["state"].as_str(), host_view["schedulable"].as_bool()), (Some("active"), Some(true)), "{host_view}");

    let at = at_kill["stage"].as_str().unwrap_or("?");
    let secs = started.elapsed().as_secs_f64();
    eprintln!("killed at stage {at} (task {}); the job completed; {secs:.1} s in all", at_kill["taskId"]);
}
