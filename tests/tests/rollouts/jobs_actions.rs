//! Operator recovery actions on a job through the real coordinator (real mTLS, real SQLite,
//! the real executor), against a simulated agent that speaks the real protocol and applies the
//! agent's task rules: a lease that lapsed is requeued — the same task, never a copy —
//! repeated actions are answered without duplicating anything, a job frozen for a human is
//! resumed, every action is audited with its prior and expected state, and the job then runs
//! to its end on the agent's results.

use std::time::{Duration, Instant};

use drover_engine::app::Clock as _;
use drover_engine::store::{AuditFilter, TaskFilter, TaskState};
use drover_tests::Harness;
use drover_tests::sim_agent::{Behaviour, step_all};
use serde_json::{Value, json};
use uuid::Uuid;

async fn post(h: &Harness, path: &str, body: Value) -> (String, Value) {
    h.post_json(path, &body).await
}

async fn act(h: &Harness, job: &str, action: &str) -> Value {
    let (code, v) = post(h, &format!("/v1/jobs/{job}/{action}"), json!({ "reason": format!("operator {action}") })).await;
    assert_eq!(code, "200", "{action}: {v}");
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lapsed_lease_is_requeued_and_repeated_actions_never_duplicate_tasks() {
    let h = Harness::start_with_long_poll(1).await;
    let app = h.running.app.clone();
    let agents = h.sim_agents(&["gpu-act-01".to_owned()], |_| Behaviour::LosesTasks);
    let (mut agents, _) = step_all(agents, h.clock.now()).await;
    let host = agents[0].host_id;

    let (code, job) = post(
        &h,
        &format!("/v1/hosts/{host}/decommission"),
        json!({ "mode": "storage_cleanup", "storage": "local", "reason": "between tenants" }),
    )
    .await;
    assert_eq!(code, "201", "{job}");
    let id = job["jobId"].as_str().expect("id").to_owned();
    let job_id = Uuid::parse_str(&id).expect("uuid");
    let tasks = || app.store.list_tasks(&TaskFilter { job_id: Some(job_id), ..Default::default() }).expect("tasks");
    app.executor.tick_now(&app).await.expect("tick");
    let first = tasks();
    assert_eq!(first.len(), 1, "the cleanup task is queued");
    let task = first[0].task.task_id.to_string();

    // The agent leases it, but the answer never reaches it.
    (agents, _) = step_all(agents, h.clock.now()).await;
    assert_eq!(tasks()[0].state, TaskState::Leased);
    // While the lease is live, a retry reuses the task.
    let v = act(&h, &id, "retry_stage").await;
    assert_eq!(v["outcome"]["task"], format!("reused {task}"), "{v}");

    // The lease lapses; the executor says so and waits.
    h.clock.advance(301);
    let jobs = drover_engine::jobs::exec::tick(&app).await.expect("job tick");
    let why = jobs.waiting.get(&job_id).cloned().unwrap_or_default();
    assert!(why.contains("lost its lease"), "{why:?}");
    assert_eq!(h.get_json(&format!("/v1/jobs/{id}")).await["state"], "running");
    // retry_stage requeues the same task; a second retry finds it queued and reuses it.
    let v = act(&h, &id, "retry_stage").await;
    assert_eq!(v["outcome"]["task"], format!("requeued {task}"), "{v}");
    assert_eq!(tasks()[0].state, TaskState::Queued);
    let v = act(&h, &id, "retry_stage").await;
    assert_eq!(v["outcome"]["task"], format!("reused {task}"), "{v}");
    assert_eq!(tasks().len(), 1, "never a copy");

    // Frozen for a human: the executor leaves it alone; resume picks the same task up.
    let v = act(&h, &id, "mark_manual_intervention_required").await;
    assert_eq!(v["job"]["state"], "failed_manual_intervention", "{v}");
    app.executor.tick_now(&app).await.expect("tick");
    assert_eq!(tasks().len(), 1);
    let v = act(&h, &id, "resume").await;
    assert_eq!(
        (v["job"]["state"].as_str(), v["outcome"]["task"].as_str()),
        (Some("running"), Some(format!("reused {task}").as_str())),
        "{v}"
    );

    // The agent gets its tasks from now on: the job runs to its end.
    agents[0].behaviour = Behaviour::Healthy;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        (agents, _) = step_all(agents, h.clock.now()).await;
        app.executor.tick_now(&app).await.expect("tick");
        let job = app.store.get_job(job_id).expect("store").expect("job");
        if job.state.is_terminal() {
            assert_eq!(job.state.as_str(), "completed", "{:?}", job.progress);
            break;
        }
        assert!(Instant::now() < deadline, "job never finished: {:?}", job.progress);
    }
    assert_eq!(tasks().len(), 2, "one cleanup task, one validation task");
    assert_eq!(agents[0].tasks_run.len(), 2);
    assert_eq!(agents[0].tasks_run[0], task, "the requeued task is the one the agent ran");

    // Every action audited, with its prior and expected state.
    let audits: Vec<_> = app
        .store
        .list_audit(&AuditFilter::default())
        .expect("audit")
        .into_iter()
        .filter(|a| a.audit.target == id && a.audit.action.starts_with("job."))
        .collect();
    let actions: Vec<&str> = audits.iter().map(|a| a.audit.action.as_str()).collect();
    assert_eq!(
        actions,
        [
            "job.storage_cleanup",
            "job.retry_stage",
            "job.retry_stage",
            "job.retry_stage",
            "job.mark_manual_intervention_required",
            "job.resume"
        ]
    );
    assert!(audits[1..].iter().all(|a| a.audit.prior_state.is_some() && a.audit.expected_state.is_some()));
    assert_eq!(audits[5].audit.prior_state.as_deref(), Some("failed_manual_intervention"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_waits_for_the_task_still_out_and_leaves_the_host_cordoned() {
    let h = Harness::start_with_long_poll(1).await;
    let app = h.running.app.clone();
    let agents = h.sim_agents(&["gpu-act-02".to_owned()], |_| Behaviour::LosesTasks);
    let (mut agents, _) = step_all(agents, h.clock.now()).await;
    let host = agents[0].host_id;
    let (code, job) = post(&h, &format!("/v1/hosts/{host}/decommission"), json!({ "mode": "soft_reset", "reason": "tenant left" })).await;
    assert_eq!(code, "201", "{job}");
    let id = job["jobId"].as_str().expect("id").to_owned();
    let job_id = Uuid::parse_str(&id).expect("uuid");
    app.executor.tick_now(&app).await.expect("tick");
    (agents, _) = step_all(agents, h.clock.now()).await;
    let state = |app: &std::sync::Arc<drover_engine::app::AppState>| app.store.get_job(job_id).expect("store").expect("job").state;

    // The drain task is out (leased): cancelling compensates — it cannot be withdrawn — and
    // the job stays compensating until the task's fate is known.
    let v = act(&h, &id, "cancel").await;
    assert_eq!(v["job"]["state"], "compensating", "{v}");
    app.executor.tick_now(&app).await.expect("tick");
    assert_eq!(state(&app).as_str(), "compensating");
    // Repeating the cancel changes nothing and duplicates nothing.
    let v = act(&h, &id, "cancel").await;
    assert_eq!(v["job"]["state"], "compensating", "{v}");

    // The lease lapses, the agent is reachable again, runs the task and reports: cancelled.
    agents[0].behaviour = Behaviour::Healthy;
    h.clock.advance(301);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !state(&app).is_terminal() {
        (agents, _) = step_all(agents, h.clock.now()).await;
        app.executor.tick_now(&app).await.expect("tick");
        assert!(Instant::now() < deadline, "the cancel never finished");
    }
    assert_eq!(state(&app).as_str(), "cancelled");
    assert_eq!(agents[0].tasks_run.len(), 1, "nothing issued after the cancel");
    // A cancelled job's host stays cordoned: an operator uncordons it once it is known clean.
    let host_view = app.store.get_host(host).expect("store").expect("host");
    assert!(!host_view.schedulable);
    let v = act(&h, &id, "cancel").await;
    assert_eq!(v["outcome"]["progressChange"], "already cancelled", "{v}");
    let (code, refused) = post(&h, &format!("/v1/jobs/{id}/retry_stage"), json!({ "reason": "too late" })).await;
    assert_eq!(code, "409", "{refused}");
    // The host is free for a new job.
    let (code, again) = post(&h, &format!("/v1/hosts/{host}/decommission"), json!({ "mode": "soft_reset", "reason": "try again" })).await;
    assert_eq!(code, "201", "{again}");
}
