//! `drover decommission`, `drover maintenance` and `drover job` as processes: bad input exits
//! 64 before any network traffic, and against a fake coordinator over real mutual TLS 1.3 each
//! verb sends its route and body, prints its line or table (or the coordinator's JSON with
//! `-o json`), and a 409 exits 65 with the coordinator's message.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use common::mtls::{self, Pki, drover_blocking, operator_flags};
use common::{Run, Scratch, drover_env};
use serde_json::{Value, json};

const HOST: &str = "7f0c6a56-1d51-4bb4-9a5e-3c8f1d2f9a10";

fn job(id: &str, state: &str) -> Value {
    json!({
        "jobId": id, "kind": "full_decommission", "hostId": HOST, "hostname": "gpu-a-01", "state": state,
        "input": {"mode": "full"}, "stages": ["cordon", "drain", "wipe"], "stage": "drain", "stageIndex": 1,
        "attempt": 1, "message": "draining", "history": [], "createdAt": "2030-01-01T00:00:00Z", "updatedAt": "2030-01-01T00:00:00Z"
    })
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
            l if l == format!("GET /v1/hosts/{HOST}") => {
                (200, json!({"id": HOST, "hostId": HOST, "hostname": "gpu-a-01", "state": "active"}))
            }
            l if l == format!("POST /v1/hosts/{HOST}/decommission") => (201, job("job-1", "pending")),
            "POST /v1/maintenance" if body.get("group") == Some(&json!("busy")) => conflict("host gpu-a-01 is held by job job-1"),
            "POST /v1/maintenance" => (
                201,
                json!({"requestId": "mr-1", "initiator": "admin.operator", "reason": "scrub", "group": "rack-a1",
                       "activities": [], "state": "running", "createdAt": "2030-01-01T00:00:00Z", "jobs": [job("job-2", "pending")]}),
            ),
            "GET /v1/maintenance" => (200, json!({"items": [], "next": null})),
            "GET /v1/jobs?state=running" => (200, json!({"items": [job("job-1", "running")], "next": null})),
            "GET /v1/jobs/job-1" => {
                let mut j = job("job-1", "running");
                j["events"] = json!([{"id": 1, "at": "2030-01-01T00:00:01Z", "kind": "created", "message": "by admin", "data": {}}]);
                (200, j)
            }
            "POST /v1/jobs/job-1/retry_stage" => conflict("retry_stage needs failed_retryable; job-1 is running"),
            "POST /v1/jobs/job-1/cancel" => (
                200,
                json!({"job": job("job-1", "compensating"), "outcome": {"action": "cancel", "priorState": "running",
                       "newState": "compensating", "expectedState": "running", "progressChange": "cancelled at drain", "task": "issued t-3"}}),
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
