//! The `retire` and `remove` lifecycle verbs end to end on the real agent: a real coordinator
//! (in process, real mTLS), the real `drover-agent run` process enrolled by the bootstrap
//! command into a sandboxed root (`drover_tests::sandbox`: its drain hook a script the test
//! controls), the verbs asked through the admin API and the `drover` binary.
//!
//! - `retire` creates a `retire` job and hands the host to it in `draining`: the agent runs a
//!   `node.drain` task, and the host is `retired` only once that task succeeded.
//! - `remove` creates a `remove` job and hands the host to it in `removing`: the agent
//!   uninstalls itself (a `node.uninstall` task, over a private D-Bus with the fake systemd),
//!   and the host is `deleted`, every certificate revoked, only once that task succeeded.
//! - A drain that keeps failing stops the job and takes the host `draining → offline`;
//!   `retire` again resumes the same job.
//! - Asking again while the job works reuses its job and its live task; a task whose lease
//!   lapsed is requeued (the same task), never duplicated.
//! - A host an older coordinator left in `draining` with no job gets one.
//!
//! Every wait is bounded and polls for its condition.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use drover_engine::api::agent::TASK_LEASE_SECS;
use drover_engine::app::Clock as _;
use drover_engine::store::{AuditFilter, EventFilter, JobFilter, TaskFilter, TaskRecord, TaskState};
use drover_proto::states::HostLifecycle;
use drover_tests::bus::TestBus;
use drover_tests::sandbox::sandbox;
use drover_tests::{AgentProcess, Harness, start_agent};
use serde_json::{Value, json};
use uuid::Uuid;

/// The bound on every wait.
const WAIT: Duration = Duration::from_secs(90);

/// A drain hook for the sandbox: it fails (exit 3, naming the workloads) while `fail` exists,
/// holds the drain while `gate_closed` exists (bounded: it gives up after about a minute, so
/// a hook orphaned by a killed agent always ends), then records `drained` and succeeds.
fn drain_hook(root: &Path) -> HookFiles {
    let files = HookFiles { fail: root.join("hook-fail"), gate_closed: root.join("hook-gate-closed"), drained: root.join("drained") };
    let script = format!(
        "#!/bin/sh\nif [ -e '{fail}' ]; then echo 'tenant workloads still running' >&2; exit 3; fi\n\
         i=0\nwhile [ -e '{gate}' ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done\n\
         [ -e '{gate}' ] && exit 4\necho drained > '{drained}'\n",
        fail = files.fail.display(),
        gate = files.gate_closed.display(),
        drained = files.drained.display(),
    );
    let hook = root.join("bin/drain-hook");
    std::fs::write(&hook, script).expect("hook");
    files
}

/// The switches of [`drain_hook`].
struct HookFiles {
    fail: PathBuf,
    gate_closed: PathBuf,
    drained: PathBuf,
}

/// A real agent on a sandboxed host, enrolled and active; `extra` is appended to its
/// `[tasks]` table. Returns the host, its config, its root and the hook's switches.
async fn enrolled(h: &Harness, hostname: &str, extra: &str) -> (Uuid, PathBuf, PathBuf, HookFiles) {
    let root = h.dir.path().join(format!("root-{hostname}"));
    let mut tasks = sandbox(&root);
    tasks.push_str(extra);
    let hook = drain_hook(&root);
    let (host, config) = h.enroll_sandboxed(hostname, &root, &tasks).await;
    (host, config, root, hook)
}

async fn post(h: &Harness, path: &str, body: Value) -> (String, Value) {
    h.post_json(path, &body).await
}

async fn verb(h: &Harness, host: Uuid, verb: &str, why: &str) -> Value {
    let (code, body) = post(h, &format!("/v1/hosts/{host}/{verb}"), json!({ "reason": why })).await;
    assert_eq!(code, "200", "{verb}: {body}");
    body
}

fn job_of(body: &Value) -> String {
    body["jobId"].as_str().unwrap_or_else(|| panic!("no jobId: {body}")).to_owned()
}

/// Runs `drover host VERB HOST --reason WHY` as the admin; its stdout fields.
async fn drover_host(h: &Harness, verb: &str, host: Uuid, why: &str) -> Vec<String> {
    let out = h.drover_as(&h.admin, &["host", verb, &host.to_string(), "--reason", why]).await;
    assert!(out.status.success(), "drover host {verb}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).split_whitespace().map(str::to_owned).collect()
}

fn host_state(h: &Harness, host: Uuid) -> HostLifecycle {
    h.running.app.store.get_host(host).expect("store").expect("host").state
}

fn tasks(h: &Harness, job: &str) -> Vec<TaskRecord> {
    let job_id = Uuid::parse_str(job).expect("uuid");
    h.running.app.store.list_tasks(&TaskFilter { job_id: Some(job_id), ..Default::default() }).expect("tasks")
}

/// The host's jobs, any state.
fn jobs_of(h: &Harness, host: Uuid) -> Vec<String> {
    let jobs = h.running.app.store.list_jobs(&JobFilter { host_id: Some(host), ..Default::default() }).expect("jobs");
    jobs.into_iter().map(|j| j.job.job_id.to_string()).collect()
}

/// The host's lifecycle moves, as (from, to, message).
fn moves(h: &Harness, host: Uuid) -> Vec<(String, String, String)> {
    let filter = EventFilter { host_id: Some(host), kind: Some("host.transition".into()), ..EventFilter::default() };
    let events = h.running.app.store.list_events(&filter).expect("events");
    events
        .into_iter()
        .map(|e| {
            let field = |k: &str| e.event.data[k].as_str().unwrap_or_default().to_owned();
            (field("from"), field("to"), e.event.message)
        })
        .collect()
}

/// Waits (bounded) until the job reaches one of `states`; returns its view.
async fn job_until(h: &Harness, job: &str, states: &[&str]) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let v = h.get_json(&format!("/v1/jobs/{job}")).await;
        if states.iter().any(|s| v["state"] == *s) {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "job {job} never reached {states:?}: {}",
            json!({"state": v["state"], "stage": v["stage"], "message": v["message"], "history": v["history"]})
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits (bounded) until the job's only task is leased (the agent took it and works on it).
async fn task_leased(h: &Harness, job: &str) -> TaskRecord {
    let deadline = Instant::now() + WAIT;
    loop {
        let all = tasks(h, job);
        if let [t] = all.as_slice()
            && t.state == TaskState::Leased
        {
            return t.clone();
        }
        assert!(Instant::now() < deadline, "the job's task was never leased: {all:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

const DONE: &[&str] = &["completed", "failed_retryable", "failed_manual_intervention", "cancelled", "reconciled"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retire_drains_on_the_agent_and_retires_only_once_the_drain_succeeded() {
    let h = Harness::start().await;
    let (host, config, _root, hook) = enrolled(&h, "gpu-ret-01", "").await;
    std::fs::write(&hook.gate_closed, "").expect("close the gate");
    let _agent = start_agent(&config, "warn", Stdio::null());
    h.until_active(host).await;

    // The verb hands the host to its job in draining and prints the job.
    let line = drover_host(&h, "retire", host, "end of lease").await;
    assert_eq!((line[0].as_str(), line[1].as_str(), line[2].as_str()), (host.to_string().as_str(), "gpu-ret-01", "draining"), "{line:?}");
    let job = line.get(4).cloned().unwrap_or_else(|| panic!("no job id printed: {line:?}"));
    let view = h.get_json(&format!("/v1/jobs/{job}")).await;
    assert_eq!((view["kind"].as_str(), view["requester"].as_str()), (Some("retire"), Some("alice (admin)")), "{view}");
    assert_eq!(view["stages"], json!(["cordon", "drain", "retire"]));

    // The agent works on the drain (the hook holds it): the host is draining and cordoned,
    // not retired.
    let drain = task_leased(&h, &job).await;
    let view = h.get_json(&format!("/v1/jobs/{job}")).await;
    assert_eq!((view["state"].as_str(), view["stage"].as_str()), (Some("running"), Some("drain")), "{view}");
    let seen = h.get_json(&format!("/v1/hosts/{host}")).await;
    assert_eq!((seen["state"].as_str(), seen["schedulable"].as_bool()), (Some("draining"), Some(false)), "{seen}");
    assert!(!hook.drained.exists());

    // The drain finishes: only now is the host retired.
    std::fs::remove_file(&hook.gate_closed).expect("open the gate");
    let done = job_until(&h, &job, DONE).await;
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(host_state(&h, host), HostLifecycle::Retired);
    assert!(hook.drained.exists(), "the agent ran the drain hook");
    let all = tasks(&h, &job);
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!(all[0].task.task_id, drain.task.task_id);
    let view = h.get_json(&format!("/v1/tasks/{}", drain.task.task_id)).await;
    assert_eq!((view["type"].as_str(), view["result"]["outcome"].as_str()), (Some("node.drain"), Some("succeeded")), "{view}");
    let trail: Vec<(String, String)> = moves(&h, host).into_iter().map(|(f, t, _)| (f, t)).collect();
    assert_eq!(
        trail[trail.len() - 2..],
        [("active".to_owned(), "draining".to_owned()), ("draining".to_owned(), "retired".to_owned())],
        "{trail:?}"
    );
    assert_eq!(jobs_of(&h, host), [job]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remove_uninstalls_the_agent_and_deletes_the_host_only_once_it_has() {
    const UNIT: &str = "drover-agent.service";
    let h = Harness::start().await;
    let bus = TestBus::start_with(&[format!("{UNIT};simple;active;exec sleep 600")]);
    // The files the uninstall removes, inside the sandbox (never the machine's own).
    let root = h.dir.path().join("root-gpu-rem-01");
    let files = [root.join("etc/systemd/system").join(UNIT), root.join("usr/local/bin/drover-agent"), root.join("etc/drover/agent.toml")];
    let listed = files.iter().map(|p| format!("\"{}\"", p.display())).collect::<Vec<_>>().join(", ");
    let (host, config, _, _hook) = enrolled(&h, "gpu-rem-01", &format!("agent_unit = \"{UNIT}\"\nuninstall_paths = [{listed}]\n")).await;
    assert_eq!(config, files[2]);
    bus.point_agent_at(&config);
    let mut agent = start_agent(&config, "warn", Stdio::null());
    h.until_active(host).await;

    let retire = job_of(&verb(&h, host, "retire", "end of life").await);
    assert_eq!(job_until(&h, &retire, DONE).await["state"], "completed");
    assert_eq!(host_state(&h, host), HostLifecycle::Retired);

    let line = drover_host(&h, "remove", host, "end of life").await;
    assert_eq!(line[2], "removing", "{line:?}");
    let job = line.get(4).cloned().unwrap_or_else(|| panic!("no job id printed: {line:?}"));
    let done = job_until(&h, &job, DONE).await;
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(done["kind"], "remove");
    let succeeded: Vec<&str> = done["history"]
        .as_array()
        .expect("history")
        .iter()
        .filter(|e| e["status"] == "succeeded")
        .filter_map(|e| e["stage"].as_str())
        .collect();
    assert_eq!(succeeded, ["remove", "uninstall", "delete"], "the delete follows the uninstall's success");

    // The uninstall really ran on the agent, which reported it and then exited by itself.
    let all = tasks(&h, &job);
    assert_eq!(all.len(), 1, "{all:?}");
    let view = h.get_json(&format!("/v1/tasks/{}", all[0].task.task_id)).await;
    assert_eq!((view["type"].as_str(), view["result"]["outcome"].as_str()), (Some("node.uninstall"), Some("succeeded")), "{view}");
    let deadline = Instant::now() + WAIT;
    while agent.0.try_wait().expect("try_wait").is_none() {
        assert!(Instant::now() < deadline, "the agent did not exit after its uninstall");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!root.join("var/lib/drover").exists(), "the agent purged its state dir");
    assert!(files.iter().all(|p| !p.exists()), "the agent removed its files: {files:?}");

    // Deleted, every certificate revoked, removing → deleted last.
    assert_eq!(host_state(&h, host), HostLifecycle::Deleted);
    let certs = h.running.app.store.list_certs(Some(host)).expect("certs");
    assert!(!certs.is_empty() && certs.iter().all(|c| c.revoked.is_some()), "{certs:?}");
    let trail: Vec<(String, String)> = moves(&h, host).into_iter().map(|(f, t, _)| (f, t)).collect();
    assert_eq!(
        trail[trail.len() - 2..],
        [("retired".to_owned(), "removing".to_owned()), ("removing".to_owned(), "deleted".to_owned())],
        "{trail:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_drain_takes_the_host_offline_and_retire_resumes_its_job() {
    let h = Harness::start_with_config(|_, c| c.jobs.max_attempts = 2).await;
    let (host, config, _root, hook) = enrolled(&h, "gpu-ret-02", "").await;
    std::fs::write(&hook.fail, "").expect("make the hook fail");
    let _agent = start_agent(&config, "warn", Stdio::null());
    h.until_active(host).await;

    let body = verb(&h, host, "retire", "rack move").await;
    assert_eq!(body["state"], "draining", "{body}");
    let job = job_of(&body);
    let failed = job_until(&h, &job, DONE).await;
    assert_eq!(failed["state"], "failed_manual_intervention", "{failed}");
    assert_eq!(failed["failureClass"], "task_failed", "{failed}");
    assert!(failed["message"].as_str().unwrap_or_default().contains("tenant workloads still running"), "{failed}");
    assert_eq!(tasks(&h, &job).len(), 2, "both attempts ran on the agent");
    // §3.3: the drain lifecycle failed — draining → offline, with its event naming the job.
    // (The agent's next check-in then brings the host back to active, cordoned.)
    let fell_back = moves(&h, host).into_iter().find(|(f, t, _)| f == "draining" && t == "offline");
    let (_, _, why) = fell_back.unwrap_or_else(|| panic!("no draining -> offline move: {:?}", moves(&h, host)));
    assert!(why.contains(&job), "{why}");
    assert!(matches!(host_state(&h, host), HostLifecycle::Offline | HostLifecycle::Active), "{:?}", host_state(&h, host));

    // Fixed: retire again resumes the same job — a fresh drain, the host back in draining.
    std::fs::remove_file(&hook.fail).expect("fix the hook");
    let body = verb(&h, host, "retire", "workloads moved away").await;
    assert_eq!((job_of(&body), body["state"].as_str()), (job.clone(), Some("draining")), "{body}");
    let done = job_until(&h, &job, DONE).await;
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(host_state(&h, host), HostLifecycle::Retired);
    assert!(hook.drained.exists());
    assert_eq!(tasks(&h, &job).len(), 3, "two failed drains and the resumed one");
    assert_eq!(jobs_of(&h, host), std::slice::from_ref(&job), "no second job");
    let audits = h.running.app.store.list_audit(&AuditFilter { target: Some(job.clone()), ..AuditFilter::default() }).expect("audit");
    let actions: Vec<&str> = audits.iter().map(|a| a.audit.action.as_str()).collect();
    assert_eq!(actions, ["job.retire", "job.resume"]);
    assert_eq!(audits[1].audit.prior_state.as_deref(), Some("failed_manual_intervention"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asking_again_never_duplicates_the_job_or_a_live_task_and_requeues_a_lapsed_one() {
    let h = Harness::start().await;
    let (host, config, _root, hook) = enrolled(&h, "gpu-ret-03", "").await;
    std::fs::write(&hook.gate_closed, "").expect("close the gate");
    let agent: AgentProcess = start_agent(&config, "warn", Stdio::null());
    h.until_active(host).await;

    let job = job_of(&verb(&h, host, "retire", "swap PSU").await);
    let drain = task_leased(&h, &job).await;
    // The agent holds the drain's lease: asking again, twice, reuses the job and the task.
    for _ in 0..2 {
        let body = verb(&h, host, "retire", "swap PSU, again").await;
        assert_eq!((job_of(&body), body["state"].as_str()), (job.clone(), Some("draining")), "{body}");
    }
    assert_eq!(tasks(&h, &job).len(), 1, "a live lease is never duplicated");

    // The machine goes away mid-drain: the lease lapses and the task is lost with it.
    drop(agent);
    h.clock.advance(i64::try_from(TASK_LEASE_SECS).expect("secs") + 1);
    let app = h.running.app.clone();
    let tick = drover_engine::jobs::exec::tick(&app).await.expect("job tick");
    let why = tick.waiting.get(&Uuid::parse_str(&job).expect("uuid")).cloned().unwrap_or_default();
    assert!(why.contains("lost its lease"), "{why:?}");
    // Asking again requeues that task (the same one, leasable at once); once more finds it
    // queued and reuses it. Still one job, one task; the host never left draining.
    for _ in 0..2 {
        let body = verb(&h, host, "retire", "resume the drain").await;
        assert_eq!((job_of(&body), body["state"].as_str()), (job.clone(), Some("draining")), "{body}");
        let all = tasks(&h, &job);
        assert_eq!(all.len(), 1, "{all:?}");
        assert_eq!((all[0].task.task_id, all[0].state), (drain.task.task_id, TaskState::Queued));
    }
    assert_eq!(jobs_of(&h, host), std::slice::from_ref(&job));
    let events = h
        .running
        .app
        .store
        .list_events(&EventFilter { job_id: Uuid::parse_str(&job).ok(), kind: Some("job.action".into()), ..EventFilter::default() })
        .expect("events");
    let notes: Vec<String> = events.iter().map(|e| e.event.data["task"].as_str().unwrap_or_default().to_owned()).collect();
    let id = drain.task.task_id.to_string();
    assert_eq!(notes, [format!("reused {id}"), format!("reused {id}"), format!("requeued {id}"), format!("reused {id}")]);
    assert!(!moves(&h, host).iter().any(|(f, _, _)| f == "draining"), "the host stayed draining");
    // Let the orphaned hook end.
    std::fs::remove_file(&hook.gate_closed).expect("open the gate");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_left_draining_with_no_job_gets_one_from_retire() {
    let h = Harness::start().await;
    let (host, config, _root, hook) = enrolled(&h, "gpu-ret-04", "").await;
    let _agent = start_agent(&config, "warn", Stdio::null());
    h.until_active(host).await;
    // An older coordinator passed through draining in the request itself and was cut short.
    let now = h.clock.now();
    h.running.app.store.transition_host(host, HostLifecycle::Active, HostLifecycle::Draining, "older coordinator", now).expect("draining");
    assert!(jobs_of(&h, host).is_empty());

    let body = verb(&h, host, "retire", "finish the retirement").await;
    assert_eq!(body["state"], "draining", "{body}");
    let job = job_of(&body);
    let done = job_until(&h, &job, DONE).await;
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(host_state(&h, host), HostLifecycle::Retired);
    assert!(hook.drained.exists(), "drained on the agent before it was retired");
    assert_eq!(jobs_of(&h, host), [job]);
}
