//! `drover decommission`, `drover maintenance` and `drover job` as processes: bad input exits
//! 64 before any network traffic, and against a fake coordinator over real mutual TLS 1.3 each
//! verb sends its route and body, prints its line or table (or the coordinator's JSON with
//! `-o json`), and a 409 exits 65 with the coordinator's message.

use crate::common;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use common::mtls::{self, Pki, drover_blocking, operator_flags};
use common::{Run, Scratch, drover_env};
use drover_proto::api::events::EventView;
use drover_proto::api::hosts::{HostDetail, HostView};
use drover_proto::api::jobs::{ActionOutcome, ActionResponse, JobDetail, JobJson};
use drover_proto::api::maintenance::{MaintenanceScope, MaintenanceState, MaintenanceView};
use drover_proto::states::{HostLifecycle, JobState};
use drover_proto::time::Time;
use serde_json::{Value, json};

const HOST: &str = "7f0c6a56-1d51-4bb4-9a5e-3c8f1d2f9a10";

fn at() -> Time {
    Time::parse_lenient("2030-01-01T00:00:00Z").expect("time")
}

/// A job as the coordinator writes it: its own type, so this fake answers what a coordinator
/// would, field for field.
fn job_json(id: &str, state: JobState) -> JobJson {
    JobJson {
        job_id: id.to_owned(),
        kind: "full_decommission".to_owned(),
        host_id: Some(HOST.to_owned()),
        hostname: Some("gpu-a-01".to_owned()),
        state,
        input: json!({"mode": "full"}),
        request_id: None,
        stages: vec!["cordon".to_owned(), "drain".to_owned(), "wipe".to_owned()],
        stage: "drain".to_owned(),
        stage_index: 1,
        attempt: 1,
        task_id: None,
        child_job_id: None,
        failure_class: None,
        message: "draining".to_owned(),
        history: Vec::new(),
        requester: None,
        started_at: None,
        completed_at: None,
        error: None,
        recommended_action: None,
        created_at: at(),
        updated_at: at(),
    }
}

fn job(id: &str, state: JobState) -> Value {
    serde_json::to_value(job_json(id, state)).expect("json")
}

fn host() -> Value {
    let view = HostView {
        id: HOST.to_owned(),
        host_id: HOST.to_owned(),
        hostname: "gpu-a-01".to_owned(),
        state: HostLifecycle::Active,
        schedulable: true,
        created_at: at(),
        updated_at: at(),
        last_checkin: None,
        channel: None,
        wave: None,
        rollout_id: None,
        rollout_state: None,
    };
    serde_json::to_value(HostDetail { host: view, certificates: Vec::new(), health: None }).expect("json")
}

/// A fake coordinator: mutual TLS 1.3, the job and maintenance routes, recording every
/// request line and body.
struct Fake {
    seen: Mutex<Vec<(String, Value)>>,
}

impl Fake {
    async fn start(self: &Arc<Self>, pki: &Pki) -> SocketAddr {
        let me = Arc::clone(self);
        mtls::serve(pki, move |head, body| me.respond(head, body)).await
    }

    fn answer(&self, line: &str, body: &Value) -> (u16, Value) {
        let conflict = |m: &str| (409, json!({"error": {"code": "conflict", "message": m}}));
        match line {
            l if l == format!("GET /v1/hosts/{HOST}") => (200, host()),
            l if l == format!("POST /v1/hosts/{HOST}/decommission") => (201, job("job-1", JobState::Pending)),
            "POST /v1/maintenance" if body.get("group") == Some(&json!("busy")) => conflict("host gpu-a-01 is held by job job-1"),
            "POST /v1/maintenance" => {
                let request = MaintenanceView {
                    request_id: "mr-1".to_owned(),
                    initiator: "admin.operator".to_owned(),
                    reason: "scrub".to_owned(),
                    scope: MaintenanceScope { group: Some("rack-a1".to_owned()), hosts: vec![HOST.to_owned()] },
                    group: Some("rack-a1".to_owned()),
                    activities: vec!["gpu_scrub".to_owned()],
                    state: MaintenanceState::Running,
                    created_at: at(),
                    jobs: vec![job_json("job-2", JobState::Pending)],
                };
                (201, serde_json::to_value(request).expect("json"))
            }
            "GET /v1/maintenance" => (200, json!({"items": [], "next": null})),
            "GET /v1/jobs?state=running" => (200, json!({"items": [job("job-1", JobState::Running)], "next": null})),
            "GET /v1/jobs/job-1" => {
                let event = EventView {
                    id: 1,
                    at: at(),
                    kind: "created".to_owned(),
                    host_id: Some(HOST.to_owned()),
                    rollout_id: None,
                    job_id: Some("job-1".to_owned()),
                    message: "by admin".to_owned(),
                    data: json!({}),
                };
                (200, serde_json::to_value(JobDetail { job: job_json("job-1", JobState::Running), events: vec![event] }).expect("json"))
            }
            "POST /v1/jobs/job-1/retry_stage" => conflict("retry_stage needs failed_retryable; job-1 is running"),
            "POST /v1/jobs/job-1/cancel" => (
                200,
                serde_json::to_value(ActionResponse {
                    job: job_json("job-1", JobState::Compensating),
                    outcome: ActionOutcome {
                        action: "cancel".to_owned(),
                        prior_state: JobState::Running,
                        new_state: JobState::Compensating,
                        expected_state: JobState::Running,
                        progress_change: "cancelled at drain".to_owned(),
                        task: "issued t-3".to_owned(),
                    },
                })
                .expect("json"),
            ),
            _ => (404, json!({"error": {"code": "not_found", "message": "no such route"}})),
        }
    }

    /// Records the request line (without the HTTP version) and the JSON body, and answers.
    fn respond(&self, head: &str, body: &[u8]) -> (u16, Vec<u8>) {
        let first = head.lines().next().unwrap_or_default();
        let line = first.rsplit_once(' ').map(|(l, _)| l).unwrap_or(first).to_owned();
        let body: Value = if body.is_empty() { Value::Null } else { serde_json::from_slice(body).expect("json body") };
        let (status, answer) = self.answer(&line, &body);
        self.seen.lock().expect("lock").push((line, body));
        (status, serde_json::to_vec(&answer).expect("json"))
    }
}

/// Runs `drover ARGS` with the operator credentials for `url`, off the runtime's threads.
async fn drover(dir: &Path, url: &str, args: &[&str]) -> Run {
    drover_blocking(dir, args.iter().chain(&operator_flags(url)).map(|a| (*a).to_owned()).collect()).await
}

#[test]
fn bad_input_exits_64_before_any_request() {
    let sc = Scratch::new();
    let creds = operator_flags("https://127.0.0.1:1");
    let run = |args: &[&str]| {
        let mut argv = args.to_vec();
        argv.extend(creds);
        drover_env(sc.path(), &argv, b"", &[])
    };
    // Credentials are not even read: these are refused first (the files do not exist).
    run(&["maintenance", "request", "--activity", "gpu_scrub", "--reason", "r"]).fails_with(64).stderr_has(&["--group", "--host"]);
    run(&["maintenance", "request", "--group", "g", "--reason", " "]).fails_with(64).stderr_has(&["--reason"]);
    run(&["decommission", HOST, "--mode", "storage-cleanup", "--reason", "r"]).fails_with(64).stderr_has(&["--storage"]);
    // A hostname is as good as an id; text that can be neither is refused before a request.
    run(&["decommission", "gpu/a-01", "--mode", "full", "--reason", "r", "--yes"])
        .fails_with(64)
        .stderr_has(&["gpu/a-01", "not a hostname or a host id"]);
    run(&["job", "cancel", "../x", "--reason", "r"]).fails_with(64).stderr_has(&["JOB_ID"]);
    assert_eq!(run(&["job", "cancel", "job-1"]).code, 64, "--reason is required");
    assert_eq!(run(&["job", "get", "--state", "sleeping"]).code, 64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn against_a_fake_coordinator_each_verb_sends_its_route_and_prints_its_answer() {
    let sc = Scratch::new();
    let pki = Pki::new();
    pki.write_operator(&sc);
    let fake = Arc::new(Fake { seen: Mutex::new(Vec::new()) });
    let url = format!("https://{}", fake.start(&pki).await);
    let dir = sc.path();

    let run = drover(dir, &url, &["decommission", HOST, "--mode", "full", "--storage", "all", "--reason", "retire rack", "--yes"]).await;
    assert_eq!(run.ok().stdout, "job-1 full_decommission pending\n");

    let run = drover(dir, &url, &["maintenance", "request", "--group", "rack-a1", "--activity", "gpu_scrub", "--reason", "scrub"]).await;
    assert_eq!(run.ok().stdout, "mr-1 admin.operator running\njob-2 gpu-a-01 pending\n");
    drover(dir, &url, &["maintenance", "request", "--group", "busy", "--reason", "scrub"])
        .await
        .fails_with(65)
        .stderr_has(&["409", "held by job job-1"]);
    let run = drover(dir, &url, &["maintenance", "list", "-o", "json"]).await;
    assert_eq!(serde_json::from_str::<Value>(&run.ok().stdout).expect("json"), json!([]), "every page's requests, as one array");

    let run = drover(dir, &url, &["job", "get", "--state", "running"]).await;
    run.ok();
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{}", run.stdout);
    assert!(lines[0].starts_with("JOB ") && lines[1].starts_with("job-1  full_decommission  gpu-a-01  running  drain "), "{}", run.stdout);
    let run = drover(dir, &url, &["job", "describe", "job-1"]).await;
    run.ok().stdout_has("  -> 2. drain\n").stdout_has("created");
    let run = drover(dir, &url, &["job", "get", "job-1", "-o", "json"]).await;
    let v: Value = serde_json::from_str(&run.ok().stdout).expect("json");
    assert_eq!(v["input"], json!({"mode": "full"}), "the coordinator's JSON passes through");

    let run = drover(dir, &url, &["job", "cancel", "job-1", "--reason", "wrong host"]).await;
    assert_eq!(run.ok().stdout, "job-1 compensating (cancelled at drain; task issued t-3)\n");
    drover(dir, &url, &["job", "retry", "job-1", "--reason", "again"]).await.fails_with(65).stderr_has(&["409", "needs failed_retryable"]);

    let seen = fake.seen.lock().expect("lock").clone();
    let expected = vec![
        // Asked first: the confirmation names the host by its hostname.
        (format!("GET /v1/hosts/{HOST}"), Value::Null),
        (format!("POST /v1/hosts/{HOST}/decommission"), json!({"mode": "full", "storage": "all", "reason": "retire rack"})),
        ("POST /v1/maintenance".to_owned(), json!({"group": "rack-a1", "activities": ["gpu_scrub"], "reason": "scrub"})),
        ("POST /v1/maintenance".to_owned(), json!({"group": "busy", "reason": "scrub"})),
        ("GET /v1/maintenance".to_owned(), Value::Null),
        ("GET /v1/jobs?state=running".to_owned(), Value::Null),
        ("GET /v1/jobs/job-1".to_owned(), Value::Null),
        ("GET /v1/jobs/job-1".to_owned(), Value::Null),
        ("POST /v1/jobs/job-1/cancel".to_owned(), json!({"reason": "wrong host"})),
        ("POST /v1/jobs/job-1/retry_stage".to_owned(), json!({"reason": "again"})),
    ];
    assert_eq!(seen, expected);
}
