//! Maintenance tasks end to end: a real coordinator, the real `drover-agent run` process
//! enrolled by the bootstrap command into a temporary root, tasks issued through the admin
//! API (`POST /v1/hosts/{id}/tasks`), leased on check-in, run by the agent against the paths
//! its `[tasks]` table names inside the root, and reported back step by step. The tools at
//! the edge of the machine (`userdel`, `loginctl`, the drain hook) are scripts in the root
//! that behave like the real ones, exit codes included.

use std::process::Stdio;
use std::time::{Duration, Instant};

use drover_engine::app::Clock as _;
use drover_engine::store::{EventFilter, NewTask};
use drover_proto::keys::KeySigner;
use drover_proto::sig::Envelope;
use drover_proto::task::{Task, TaskKind};
use drover_tests::api::assert_task_succeeded;
use drover_tests::sandbox::{gpu_tools, sandbox};
use drover_tests::{Harness, start_agent};
use serde_json::{Value, json};
use uuid::Uuid;

async fn issue(h: &Harness, host: Uuid, task: Value) -> Uuid {
    h.issue_task(host, task, "tenant turnover").await
}

async fn result_of(h: &Harness, task: Uuid) -> Value {
    h.task_result(task, None).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soft_reset_tasks_run_end_to_end_through_a_real_agent() {
    let h = Harness::start().await;
    let root = h.dir.path().join("root-t");
    let extra = sandbox(&root);
    let (host, config) = h.enroll_sandboxed("gpu-task-01", &root, &extra).await;
    let _agent = start_agent(&config, "warn", Stdio::null());

    let drain = issue(&h, host, json!({ "type": "node.drain", "timeoutSecs": 30 })).await;
    let view = result_of(&h, drain).await;
    assert_task_succeeded(&view);
    assert_eq!(view["type"], "node.drain");
    assert!(root.join("run/drover/cordoned").is_file(), "cordoned locally");
    assert!(root.join("drained").is_file(), "the drain hook ran");

    let revoke = issue(&h, host, json!({ "type": "allocation.revoke_user" })).await;
    assert_task_succeeded(&result_of(&h, revoke).await);
    let passwd = std::fs::read_to_string(root.join("etc/passwd")).expect("passwd");
    assert!(!passwd.contains("alice") && passwd.contains("root:") && passwd.contains("syslog:"), "{passwd}");

    let cleanup = issue(&h, host, json!({ "type": "node.storage_cleanup", "scope": "local" })).await;
    let view = result_of(&h, cleanup).await;
    assert_task_succeeded(&view);
    let scratch = root.join("scratch");
    assert!(scratch.is_dir(), "the root itself is kept");
    assert_eq!(std::fs::read_dir(&scratch).expect("scratch").count(), 0, "everything inside is gone");
    let steps = view["result"]["steps"].as_array().expect("steps");
    let emptied = steps.iter().find(|s| s["name"] == format!("empty {}", scratch.display())).expect("a step per root");
    // weights.bin (4096) + notes.txt (11); two files, two directories.
    assert_eq!((emptied["data"]["freedBytes"].as_u64(), emptied["data"]["entries"].as_u64()), (Some(4107), Some(4)), "{emptied}");

    let validate = issue(&h, host, json!({ "type": "node.validate_clean", "checkGpu": false })).await;
    assert_task_succeeded(&result_of(&h, validate).await);

    // A residue makes validation fail with the residue listed.
    std::fs::write(scratch.join("left-behind.txt"), b"x").expect("write");
    let again = issue(&h, host, json!({ "type": "node.validate_clean", "checkGpu": false })).await;
    let view = result_of(&h, again).await;
    assert_eq!(view["result"]["outcome"], "failed", "{view}");
    assert!(view.to_string().contains("left-behind.txt"), "the residue is named: {view}");
}

/// A task the director signed, queued for `host` by hand (what a compromised or buggy
/// coordinator, or a replaying attacker with a copy of an answer, could serve).
async fn queue_raw(h: &Harness, host: Uuid, task: &Task) {
    let signer = KeySigner::new(h.running.app.director.signing_key(h.clock.now()).clone());
    let envelope = serde_json::to_vec(&Envelope::seal(task, std::slice::from_ref(&signer)).expect("seal")).expect("json");
    let row = NewTask { task_id: Uuid::new_v4(), host_id: host, job_id: None, envelope, created_at: h.clock.now() };
    h.running.app.dispatch_task(row).await.expect("queued");
}

async fn refusal(h: &Harness, host: Uuid, task_id: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let events = h.running.app.store.list_events(&EventFilter {
            host_id: Some(host),
            kind: Some("agent.TaskRefused".into()),
            ..Default::default()
        });
        if let Some(e) = events.expect("events").into_iter().find(|e| e.event.data["taskId"] == task_id) {
            return e.event.data["reason"].as_str().unwrap_or_default().to_owned();
        }
        assert!(Instant::now() < deadline, "no TaskRefused for {task_id}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_and_another_hosts_tasks_are_refused_and_a_replayed_one_never_runs_twice() {
    let h = Harness::start().await;
    let root = h.dir.path().join("root-r");
    let extra = sandbox(&root);
    let (host, config) = h.enroll_sandboxed("gpu-task-02", &root, &extra).await;
    let _agent = start_agent(&config, "warn", Stdio::null());
    let now = h.clock.now();
    let task = |host_id: Uuid, expires_in: i64| Task {
        task_id: Uuid::new_v4().to_string(),
        host_id: host_id.to_string(),
        job_id: None,
        issued_at: now,
        expires_at: drover_proto::time::Time::from_unix(now.unix() + expires_in).expect("time"),
        kind: TaskKind::Drain { timeout_secs: 10 },
    };

    // Another host's task, validly signed, served to this host.
    let foreign = task(Uuid::new_v4(), 3600);
    queue_raw(&h, host, &foreign).await;
    assert!(refusal(&h, host, &foreign.task_id).await.starts_with("WrongHost"));

    // An expired one.
    let stale = task(host, -60);
    queue_raw(&h, host, &stale).await;
    assert!(refusal(&h, host, &stale.task_id).await.starts_with("Expired"));

    // A good one runs once; the same signed task served again is answered with the result it
    // had (what a coordinator restored from an older backup needs), never run again. A task
    // issued after it completes only once the replay was handled: then the hook has not run.
    let good = task(host, 3600);
    queue_raw(&h, host, &good).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !root.join("drained").is_file() {
        assert!(Instant::now() < deadline, "the task never ran");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    std::fs::remove_file(root.join("drained")).expect("rm");
    queue_raw(&h, host, &good).await;
    let after = issue(&h, host, json!({ "type": "node.validate_clean", "checkGpu": false })).await;
    result_of(&h, after).await;
    assert!(!root.join("drained").exists(), "the replay did not run the hook again");
    let refused =
        h.running.app.store.list_events(&EventFilter { host_id: Some(host), kind: Some("agent.TaskRefused".into()), ..Default::default() });
    assert!(refused.expect("events").iter().all(|e| e.event.data["taskId"] != good.task_id), "answered, not refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_do_not_reach_logs() {
    let h = Harness::start().await;
    let root = h.dir.path().join("root-s");
    let mut extra = sandbox(&root);
    extra.push_str(&format!("maas_creds_file = \"{}\"\n", root.join("etc/maas/maas-machine-creds.yml").display()));
    let (host, config) = h.enroll_sandboxed("gpu-task-03", &root, &extra).await;
    let log = h.dir.path().join("agent.log");
    let _agent = start_agent(&config, "debug", Stdio::from(std::fs::File::create(&log).expect("log")));
    let token = "TS-0123456789-SECRET";
    let task = json!({ "type": "node.hw_sync_reseed", "maasUrl": "http://maas.example:5240/MAAS", "systemId": "x7ab3c",
        "consumerKey": "CK-SECRET-abc", "tokenKey": "TK-SECRET-def", "tokenSecret": token });
    let id = issue(&h, host, task).await;
    let view = result_of(&h, id).await;
    // There is no systemd here, so the timer cannot restart: the task fails after writing the
    // credentials — which is what matters for where the token went.
    let creds = std::fs::read_to_string(root.join("etc/maas/maas-machine-creds.yml")).expect("creds written");
    assert!(creds.contains(token), "the token is where it belongs");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(root.join("etc/maas/maas-machine-creds.yml")).expect("meta").permissions().mode() & 0o777, 0o600);
    for secret in [token, "CK-SECRET-abc", "TK-SECRET-def"] {
        assert!(!view.to_string().contains(secret), "the task view leaks {secret}: {view}");
        let agent_log = std::fs::read_to_string(&log).expect("log");
        assert!(!agent_log.contains(secret), "the agent's log leaks {secret}");
        let events = h.running.app.store.list_events(&EventFilter { limit: 1000, ..Default::default() }).expect("events");
        assert!(events.iter().all(|e| !e.event.data.to_string().contains(secret) && !e.event.message.contains(secret)));
        let audit = h.running.app.store.list_audit(&Default::default()).expect("audit");
        assert!(audit.iter().all(|a| !format!("{:?}", a.audit).contains(secret)));
        let stored = String::from_utf8(h.running.app.store.get_task(id).expect("store").expect("task").task.envelope).expect("utf-8");
        assert!(!stored.contains(secret), "the coordinator erased the token once the task was acknowledged");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_scrub_runs_through_a_real_agent_against_a_fake_nvidia_smi() {
    let h = Harness::start().await;
    let root = h.dir.path().join("root-g");
    let mut extra = sandbox(&root);
    let state = gpu_tools(&root, &mut extra);
    let (host, config) = h.enroll_sandboxed("gpu-task-04", &root, &extra).await;
    let _agent = start_agent(&config, "warn", Stdio::null());

    let scrub = issue(&h, host, json!({ "type": "node.gpu_scrub", "memoryUsedThresholdMib": 64 })).await;
    let view = result_of(&h, scrub).await;
    assert_task_succeeded(&view);
    let names: Vec<&str> = view["result"]["steps"].as_array().expect("steps").iter().filter_map(|s| s["name"].as_str()).collect();
    assert!(names.iter().any(|n| n.starts_with("reset ")) && names.contains(&"verify"), "{names:?}");
    let log = std::fs::read_to_string(state.join("log")).expect("the fake was called");
    assert!(log.contains("--gpu-reset -i"), "{log}");

    // The next scrub finds the GPU busy ("In use by another client", exit 255) and fails.
    std::fs::write(state.join("reset"), "busy").expect("scenario");
    let busy = issue(&h, host, json!({ "type": "node.gpu_scrub", "memoryUsedThresholdMib": 64 })).await;
    let view = result_of(&h, busy).await;
    assert_eq!(view["result"]["outcome"], "failed", "{view}");
    assert!(view.to_string().contains("In use by another client"), "{view}");
}
