//! Coordinator jobs end to end: a real coordinator (in process, real mTLS), the real
//! `drover-agent run` process enrolled by the bootstrap command into a temporary root with the
//! machine's edge faked (scratch, passwd, `userdel`, `loginctl`, the drain hook, a fake
//! `nvidia-smi` with the real formats), jobs started through the admin API and driven by the
//! executor through the agent's tasks.

use std::process::Stdio;
use std::time::{Duration, Instant};

use drover_engine::store::{EventFilter, TaskFilter};
use drover_tests::sandbox::{gpu_tools, sandbox};
use drover_tests::scheduler::{Answer, FakeScheduler};
use drover_tests::{Harness, start_agent};
use serde_json::{Value, json};
use uuid::Uuid;

/// The bound on every wait.
const WAIT: Duration = Duration::from_secs(90);

async fn post(h: &Harness, path: &str, body: Value) -> (String, Value) {
    h.post_json(path, &body).await
}

async fn get(h: &Harness, path: &str) -> Value {
    h.get_json(path).await
}

/// Waits (bounded) until the job reaches one of `states`.
async fn job_until(h: &Harness, job: &str, states: &[&str]) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let v = get(h, &format!("/v1/jobs/{job}")).await;
        if states.iter().any(|s| v["state"] == *s) {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "job {job} never reached {states:?}: {}",
            serde_json::to_string_pretty(
                &json!({"state": v["state"], "stage": v["stage"], "message": v["message"], "history": v["history"]})
            )
            .unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The tasks the store holds for `job`, by type (read back through the task API).
async fn task_types(h: &Harness, job: &str) -> Vec<String> {
    let job_id = Uuid::parse_str(job).expect("uuid");
    let tasks = h.running.app.store.list_tasks(&TaskFilter { job_id: Some(job_id), ..Default::default() }).expect("tasks");
    let mut out = Vec::new();
    for t in tasks {
        let v = get(h, &format!("/v1/tasks/{}", t.task.task_id)).await;
        out.push(v["type"].as_str().unwrap_or("?").to_owned());
    }
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soft_reset_job_runs_every_stage_through_a_real_agent() {
    let h = Harness::start().await;
    let root = h.dir.path().join("root-sr");
    let mut extra = sandbox(&root);
    let gpu = gpu_tools(&root, &mut extra);
    let (host, config) = h.enroll_sandboxed("gpu-job-01", &root, &extra).await;
    let _agent = start_agent(&config, "warn", Stdio::null());
    h.until_active(host).await;

    let (code, job) = post(
        &h,
        &format!("/v1/hosts/{host}/decommission"),
        json!({ "mode": "soft_reset", "storage": "local", "reason": "tenant turnover" }),
    )
    .await;
    assert_eq!(code, "201", "{job}");
    assert_eq!(job["kind"], "soft_reset");
    assert_eq!(job["stages"], json!(["cordon", "drain", "revoke_users", "cleanup_storage", "scrub_gpu", "validate_clean", "uncordon"]));
    let id = job["jobId"].as_str().expect("id").to_owned();

    // One owner at a time: a second job on the host is refused while this one runs.
    let (code, second) = post(&h, &format!("/v1/hosts/{host}/decommission"), json!({ "mode": "soft_reset", "reason": "again" })).await;
    assert_eq!(code, "409", "{second}");
    assert!(second.to_string().contains(&id), "the refusal names the holding job: {second}");

    let done = job_until(&h, &id, &["completed", "failed_retryable", "failed_manual_intervention"]).await;
    assert_eq!(done["state"], "completed", "{}", serde_json::to_string_pretty(&done).unwrap_or_default());
    // The richer record: who asked, when it started and finished, no error, nothing to do.
    assert_eq!(done["requester"], "alice (admin)", "{done}");
    assert!(done["startedAt"].is_string() && done["completedAt"].is_string(), "{done}");
    assert!(done["startedAt"].as_str() >= done["createdAt"].as_str(), "{done}");
    assert!(done.get("error").is_none() && done.get("recommendedAction").is_none(), "{done}");

    // Every stage succeeded once, in order; one task per task stage, none duplicated.
    let succeeded: Vec<&str> = done["history"]
        .as_array()
        .expect("history")
        .iter()
        .filter(|e| e["status"] == "succeeded")
        .filter_map(|e| e["stage"].as_str())
        .collect();
    assert_eq!(succeeded, ["cordon", "drain", "revoke_users", "cleanup_storage", "scrub_gpu", "validate_clean", "uncordon"]);
    assert_eq!(
        task_types(&h, &id).await,
        ["allocation.revoke_user", "node.drain", "node.gpu_scrub", "node.storage_cleanup", "node.validate_clean"]
    );

    // The host really was worked on, and is schedulable and active again.
    assert_eq!(std::fs::read_dir(root.join("scratch")).expect("scratch").count(), 0);
    assert!(!std::fs::read_to_string(root.join("etc/passwd")).expect("passwd").contains("alice"));
    assert!(std::fs::read_to_string(gpu.join("log")).expect("log").contains("--gpu-reset -i"));
    let host_view = get(&h, &format!("/v1/hosts/{host}")).await;
    assert_eq!((host_view["state"].as_str(), host_view["schedulable"].as_bool()), (Some("active"), Some(true)), "{host_view}");

    // An event per stage decision, and the listing shows the job.
    let events = h.running.app.store.list_events(&EventFilter { job_id: Uuid::parse_str(&id).ok(), ..Default::default() }).expect("events");
    let stage_events = events.iter().filter(|e| e.event.kind == "job.stage").count();
    assert!(stage_events >= 14, "start, 7 starts/issues and 7 completions: {stage_events}");
    let list = get(&h, &format!("/v1/jobs?host={host}")).await;
    assert_eq!(list["items"].as_array().map(Vec::len), Some(1), "{list}");
}

/// Removes the tenant user from the sandbox's passwd (what a finished tenancy leaves).
fn without_tenant(root: &std::path::Path) {
    let passwd = root.join("etc/passwd");
    let text = std::fs::read_to_string(&passwd).expect("passwd");
    std::fs::write(&passwd, text.lines().filter(|l| !l.starts_with("alice:")).map(|l| format!("{l}\n")).collect::<String>())
        .expect("write");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_validation_quarantines_and_repeated_retries_never_duplicate_tasks() {
    let h = Harness::start().await;
    let root = h.dir.path().join("root-sc");
    let mut extra = sandbox(&root);
    gpu_tools(&root, &mut extra);
    let (host, config) = h.enroll_sandboxed("gpu-job-02", &root, &extra).await;
    let _agent = start_agent(&config, "warn", Stdio::null());
    h.until_active(host).await;

    // The tenant user is still there: cleanup succeeds, validation finds the residue.
    let (code, job) = post(
        &h,
        &format!("/v1/hosts/{host}/decommission"),
        json!({ "mode": "storage_cleanup", "storage": "local", "reason": "between tenants" }),
    )
    .await;
    assert_eq!(code, "201", "{job}");
    let id = job["jobId"].as_str().expect("id").to_owned();
    let failed = job_until(&h, &id, &["completed", "failed_retryable", "failed_manual_intervention"]).await;
    assert_eq!(failed["state"], "failed_manual_intervention", "{failed}");
    assert_eq!(failed["failureClass"], "validation_failed", "{failed}");
    assert_eq!(
        (failed["error"]["class"].as_str(), failed["error"]["stage"].as_str()),
        (Some("validation_failed"), Some("validate_clean")),
        "{failed}"
    );
    assert!(failed["error"]["message"].as_str().unwrap_or_default().contains("user residue"), "{failed}");
    assert!(failed["recommendedAction"].as_str().unwrap_or_default().contains("residue"), "{failed}");
    assert!(failed.get("completedAt").is_none(), "a failed job has not completed: {failed}");
    assert!(failed["message"].as_str().unwrap_or_default().contains("user residue"), "the residue is named: {failed}");
    assert_eq!(get(&h, &format!("/v1/hosts/{host}")).await["state"], "quarantined");

    // The operator removes the residue and retries the stage — twice, as a nervous operator
    // does. The first issues one new validation task; the second finds it live and reuses it.
    without_tenant(&root);
    let (code, first) = post(&h, &format!("/v1/jobs/{id}/retry_stage"), json!({ "reason": "residue removed" })).await;
    assert_eq!(code, "200", "{first}");
    assert!(first["outcome"]["task"].as_str().unwrap_or_default().starts_with("issued "), "{first}");
    // The second one through the real `drover` binary, as an operator types it.
    let out = h.drover_as(&h.admin, &["job", "retry", &id, "--reason", "residue removed", "-o", "json"]).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let second: Value = serde_json::from_slice(&out.stdout).expect("json");
    let done = job_until(&h, &id, &["completed", "failed_retryable", "failed_manual_intervention"]).await;
    assert_eq!(done["state"], "completed", "{done}");
    let types = task_types(&h, &id).await;
    assert_eq!(types, ["node.storage_cleanup", "node.validate_clean", "node.validate_clean"], "one retry task, not two");
    if second["outcome"]["task"].as_str().unwrap_or_default().starts_with("reused ") {
        assert_eq!(second["outcome"]["task"].as_str().map(|t| &t[7..]), first["outcome"]["task"].as_str().map(|t| &t[7..]));
    }

    // Every action is audited; a completed job takes no more actions.
    let audits = h
        .running
        .app
        .store
        .list_audit(&drover_engine::store::AuditFilter::default())
        .expect("audit")
        .into_iter()
        .filter(|a| a.audit.action == "job.retry_stage" && a.audit.target == id)
        .count();
    assert_eq!(audits, 2);
    let (code, refused) = post(&h, &format!("/v1/jobs/{id}/cancel"), json!({ "reason": "too late" })).await;
    assert_eq!(code, "409", "{refused}");
    let out = h.drover_as(&h.admin, &["job", "cancel", &id, "--reason", "too late"]).await;
    assert_eq!(out.status.code(), Some(65), "a refused action exits 65: {}", String::from_utf8_lossy(&out.stderr));
    let out = h.drover_as(&h.viewer, &["job", "describe", &id]).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("validate_clean") && text.contains("completed"), "{text}");
    let (code, _) = post(&h, &format!("/v1/jobs/{id}/retry_stage"), json!({})).await;
    assert_eq!(code, "400", "a reason is required");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_decommission_releases_retires_uninstalls_and_deletes_the_host() {
    const UNIT: &str = "drover-agent.service";
    // The scheduler still has two allocations on the host, then one, then none.
    let scheduler = FakeScheduler::start(vec![Answer::count(2), Answer::count(1), Answer::count(0)]);
    let h = Harness::start_with_config(|_, c| {
        c.jobs.scheduler_webhook_url = Some(scheduler.url.clone());
        c.jobs.scheduler_poll_secs = 1;
    })
    .await;
    let root = h.dir.path().join("root-fd");
    let bus = drover_tests::bus::TestBus::start_with(&[format!("{UNIT};simple;active;exec sleep 600")]);
    let mut extra = sandbox(&root);
    gpu_tools(&root, &mut extra);
    extra.push_str(&format!("agent_unit = \"{UNIT}\"\n"));
    let (host, config) = h.enroll_sandboxed("gpu-job-03", &root, &extra).await;
    bus.point_agent_at(&config);
    let mut agent = start_agent(&config, "warn", Stdio::null());
    h.until_active(host).await;

    let (code, job) = post(
        &h,
        &format!("/v1/hosts/{host}/decommission"),
        json!({ "mode": "full", "storage": "local", "forceRelease": true, "reason": "end of life" }),
    )
    .await;
    assert_eq!(code, "201", "{job}");
    assert_eq!(
        job["stages"],
        json!([
            "cordon",
            "force_release",
            "drain",
            "revoke_users",
            "cleanup_storage",
            "retire",
            "remove",
            "uninstall",
            "maas_workflow",
            "delete"
        ])
    );
    let id = job["jobId"].as_str().expect("id").to_owned();

    // force_release: the notice, then one question per poll interval (the test's clock moves
    // it) while allocations remain; the job holds at the stage meanwhile.
    let app = h.running.app.clone();
    app.executor.tick_now(&app).await.expect("tick");
    for polls in 1..=3 {
        assert_eq!(scheduler.events("host.allocations_query").len(), polls, "one question per poll interval");
        let v = get(&h, &format!("/v1/jobs/{id}")).await;
        if polls < 3 {
            assert_eq!((v["state"].as_str(), v["stage"].as_str()), (Some("running"), Some("force_release")), "{v}");
            let remain = if polls == 1 { "2 allocations still attached" } else { "1 allocation still attached" };
            assert!(v.to_string().contains(remain), "{v}");
        }
        h.clock.advance(1);
        app.executor.tick_now(&app).await.expect("tick");
    }
    let done = job_until(&h, &id, &["completed", "failed_retryable", "failed_manual_intervention"]).await;
    assert_eq!(done["state"], "completed", "{}", serde_json::to_string_pretty(&done).unwrap_or_default());

    // The scheduler was told once, with the host, and asked until none remained.
    let notices = scheduler.events("host.force_release");
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert_eq!(notices[0]["hostId"].as_str(), Some(host.to_string().as_str()));
    assert_eq!(notices[0]["jobId"].as_str(), Some(id.as_str()));
    let queries = scheduler.events("host.allocations_query");
    assert_eq!(queries.len(), 3, "{queries:?}");
    assert!(queries.iter().all(|q| q["hostId"] == host.to_string() && q["hostname"] == "gpu-job-03"), "{queries:?}");
    assert_eq!(scheduler.requests()[0]["event"], "host.force_release", "the notice comes before the first question");

    // Deleted, every certificate revoked, the agent gone with its state, the id never reused.
    assert_eq!(get(&h, &format!("/v1/hosts/{host}")).await["state"], "deleted");
    let certs = h.running.app.store.list_certs(Some(host)).expect("certs");
    assert!(!certs.is_empty() && certs.iter().all(|c| c.revoked.is_some()), "{certs:?}");
    let deadline = Instant::now() + WAIT;
    while agent.0.try_wait().expect("try_wait").is_none() {
        assert!(Instant::now() < deadline, "the agent did not exit after its uninstall");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!root.join("var/lib/drover").exists(), "the agent purged its state dir");
    let (code, again) = post(&h, &format!("/v1/hosts/{host}/decommission"), json!({ "mode": "soft_reset", "reason": "again" })).await;
    assert_eq!(code, "409", "a deleted host takes no job: {again}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maintenance_request_is_all_or_nothing_and_completes_on_real_results() {
    let h = Harness::start().await;
    let mut hosts = Vec::new();
    let mut agents = Vec::new();
    for i in 1..=2 {
        let root = h.dir.path().join(format!("root-m{i}"));
        let mut extra = sandbox(&root);
        gpu_tools(&root, &mut extra);
        without_tenant(&root);
        let (host, config) = h.enroll_sandboxed(&format!("gpu-mnt-0{i}"), &root, &extra).await;
        agents.push(start_agent(&config, "warn", Stdio::null()));
        h.until_active(host).await;
        hosts.push(host);
    }
    // A third host that never enrolled: not active, so the whole request is refused.
    let never = h.create_host("gpu-mnt-09").await;
    let never_id = never["hostId"].as_str().expect("hostId").to_owned();
    let ids: Vec<String> = hosts.iter().map(Uuid::to_string).collect();
    let mut with_bad = ids.clone();
    with_bad.push(never_id.clone());
    let body = |hosts: &[String]| json!({ "hosts": hosts, "activities": ["gpu_scrub", "storage_cleanup", "validate_clean"], "storage": "local", "reference": "OPS-7", "reason": "quarterly scrub" });
    let (code, refused) = post(&h, "/v1/maintenance", body(&with_bad)).await;
    assert_eq!(code, "409", "{refused}");
    assert!(refused.to_string().contains(&never_id), "the refusal names the host: {refused}");
    assert_eq!(get(&h, "/v1/jobs").await["items"], json!([]), "nothing was created");
    assert_eq!(get(&h, "/v1/maintenance").await["items"], json!([]));
    for host in &hosts {
        assert_eq!(get(&h, &format!("/v1/hosts/{host}")).await["schedulable"], true, "no host changed");
    }
    let (code, _) = post(&h, "/v1/maintenance", json!({ "hosts": ["not-a-host-id"], "reason": "x" })).await;
    assert_eq!(code, "400", "malformed ids are refused");
    let (code, _) = post(&h, "/v1/maintenance", json!({ "reason": "x" })).await;
    assert_eq!(code, "400", "a request needs a scope");
    let (code, _) = h.call(Some(&h.viewer), "POST", "/v1/maintenance", Some(&body(&ids).to_string())).await;
    assert_eq!(code, "403", "maintenance is admin only");

    let mut args =
        vec!["maintenance", "request", "--activity", "gpu_scrub", "--activity", "storage_cleanup", "--activity", "validate_clean"];
    for id in &ids {
        args.extend(["--host", id.as_str()]);
    }
    args.extend(["--storage", "local", "--reference", "OPS-7", "--reason", "quarterly scrub", "-o", "json"]);
    let out = h.drover_as(&h.admin, &args).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let req: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert!(req["initiator"].as_str().unwrap_or_default().ends_with(" (OPS-7)"), "{req}");
    let rid = req["requestId"].as_str().expect("id").to_owned();
    // Maintenance pending on a host: a second request including it is refused.
    let (code, dup) = post(&h, "/v1/maintenance", body(&ids[..1])).await;
    assert_eq!(code, "409", "{dup}");
    for j in req["jobs"].as_array().expect("jobs") {
        let id = j["jobId"].as_str().expect("id");
        assert_eq!(j["stages"], json!(["cordon", "scrub_gpu", "cleanup_storage", "validate_clean", "uncordon"]));
        let done = job_until(&h, id, &["completed", "failed_retryable", "failed_manual_intervention"]).await;
        assert_eq!(done["state"], "completed", "{done}");
        assert_eq!(done["requester"], req["initiator"], "a maintenance job's requester is its request's initiator: {done}");
        assert_eq!(task_types(&h, id).await, ["node.gpu_scrub", "node.storage_cleanup", "node.validate_clean"]);
    }
    let view = get(&h, &format!("/v1/maintenance/{rid}")).await;
    assert_eq!(view["state"], "completed", "{view}");
}
