//! `drover onboard`, `drover get onboardings`, `drover describe onboarding` and `drover
//! onboarding` as processes: a bad CSV or argument exits before any request (the fake
//! coordinator sees nothing), and against a fake coordinator over real mutual TLS 1.3 each verb
//! sends its route and body, prints its table or view (or the coordinator's JSON with `-o
//! json`), and a 409 exits 65 with the coordinator's message.

use crate::common;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use common::mtls::{self, Pki, drover_blocking, operator_flags};
use common::{Run, Scratch};
use drover_proto::api::onboardings::{Diagnostics, OnboardingEvent, OnboardingView};
use drover_proto::time::Time;
use serde_json::{Value, json};

const ID: &str = "0d9e1c7a-2b3c-4d5e-8f90-123456789abc";
const ID2: &str = "11111111-2222-4333-8444-555555555555";
const BATCH: &str = "5b7d3c1e-9a0f-4e2d-8c6b-abcdefabcdef";

/// An onboarding as the coordinator writes it: its own type, so this fake answers what a
/// coordinator would, field for field.
fn onboarding(id: &str, hostname: &str, ip: &str, state: &str) -> Value {
    let at = |t: &str| Time::parse_lenient(t).expect("time");
    let view = OnboardingView {
        onboarding_id: id.to_owned(),
        batch_id: Some(BATCH.to_owned()),
        site: "dc1".to_owned(),
        profile: "gpu".to_owned(),
        sku: None,
        hostname: hostname.to_owned(),
        ipmi_ip: ip.to_owned(),
        pxe_mac: None,
        state: state.parse().expect("a job state"),
        stage: "commission".to_owned(),
        stage_index: 1,
        stages: vec!["create_or_find".to_owned(), "commission".to_owned()],
        attempt: 2,
        system_id: Some("abc123".to_owned()),
        host_id: None,
        failure_class: Some("hardware_mismatch".to_owned()),
        message: "7 of 8 GPUs".to_owned(),
        recommended_action: Some("reseat the tray".to_owned()),
        diagnostics: Some(Diagnostics {
            maas_status: Some("Failed commissioning".to_owned()),
            power_state: Some("on".to_owned()),
            ip_addresses: vec!["10.1.0.5".to_owned()],
            upstream_snippet: None,
        }),
        requester: Some("admin.operator".to_owned()),
        created_at: at("2030-01-01T00:00:00Z"),
        started_at: None,
        completed_at: None,
        updated_at: at("2030-01-01T00:00:00Z"),
        events: vec![OnboardingEvent {
            stage: "commission".to_owned(),
            status: "failed".to_owned(),
            attempt: 2,
            at: at("2030-01-01T00:10:00Z"),
            details: "7 of 8 GPUs".to_owned(),
        }],
        workflow: "onboard".to_owned(),
        parent_job_id: None,
    };
    serde_json::to_value(view).expect("json")
}

/// A fake coordinator: the onboarding routes, recording every request line and body.
struct Fake {
    seen: Mutex<Vec<(String, Value)>>,
}

impl Fake {
    async fn start(self: &Arc<Self>, pki: &Pki) -> SocketAddr {
        let me = Arc::clone(self);
        mtls::serve(pki, move |head, body| me.respond(head, body)).await
    }

    fn answer(&self, line: &str) -> (u16, Value) {
        let a = onboarding(ID, "gpu-a-01", "10.0.0.11", "failed_manual_intervention");
        let b = onboarding(ID2, "gpu-a-02", "10.0.0.12", "running");
        match line {
            "POST /v1/maas/onboardings" => (201, json!({"onboarding": a})),
            "POST /v1/maas/onboardings/batch" => (201, json!({"batchId": BATCH, "onboardings": [a, b]})),
            l if l == format!("GET /v1/maas/onboardings?batch={BATCH}&host=gpu%20a") => (200, json!({"onboardings": [a]})),
            "GET /v1/maas/onboardings?state=running" => (200, json!({"onboardings": [b]})),
            l if l == format!("GET /v1/maas/onboardings/batches/{BATCH}") => (
                200,
                json!({"batchId": BATCH, "site": "dc1", "total": 2, "counts": {"running": 1, "failed_manual_intervention": 1},
                       "onboardings": [a, b]}),
            ),
            l if l == format!("GET /v1/maas/onboardings/{ID}") => (200, json!({"onboarding": a})),
            l if l == format!("POST /v1/maas/onboardings/{ID}/retry_stage") => {
                let mut a = a;
                a["state"] = "running".into();
                (200, json!({"onboarding": a, "message": "retrying commission"}))
            }
            l if l == format!("POST /v1/maas/onboardings/{ID}/cancel") => {
                (409, json!({"error": {"code": "conflict", "message": "cancel needs a running onboarding"}}))
            }
            _ => (404, json!({"error": {"code": "not_found", "message": "no such route"}})),
        }
    }

    /// Records the request line (without the HTTP version) and the JSON body, and answers.
    fn respond(&self, head: &str, body: &[u8]) -> (u16, Vec<u8>) {
        let first = head.lines().next().unwrap_or_default();
        let line = first.rsplit_once(' ').map(|(l, _)| l).unwrap_or(first).to_owned();
        let body: Value = if body.is_empty() { Value::Null } else { serde_json::from_slice(body).expect("json body") };
        let (status, answer) = self.answer(&line);
        self.seen.lock().expect("lock").push((line, body));
        (status, serde_json::to_vec(&answer).expect("json"))
    }
}

/// Runs `drover ARGS` with the operator credentials for `url`, off the runtime's threads.
async fn drover(dir: &Path, url: &str, args: &[&str]) -> Run {
    drover_blocking(dir, args.iter().chain(&operator_flags(url)).map(|a| (*a).to_owned()).collect()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn onboardings_against_a_fake_coordinator() {
    let sc = Scratch::new();
    let pki = Pki::new();
    pki.write_operator(&sc);
    let fake = Arc::new(Fake { seen: Mutex::new(Vec::new()) });
    let url = format!("https://{}", fake.start(&pki).await);
    let dir = sc.path();
    let site = ["onboard", "--site", "dc1", "--profile", "gpu"];
    let with = |extra: &[&'static str]| -> Vec<&'static str> { site.iter().chain(extra).copied().collect() };

    // Refused before anything is sent.
    sc.write("dup.csv", "hostname,ipmi_ip\ngpu-a-01,10.0.0.11\ngpu-a-02,10.0.0.11\n");
    drover(dir, &url, &with(&["--csv", "dup.csv"])).await.fails_with(65).stderr_has(&["dup.csv: line 3", "already on line 2"]);
    sc.write("noheader.csv", "gpu-a-01,10.0.0.11\n");
    drover(dir, &url, &with(&["--csv", "noheader.csv"])).await.fails_with(65).stderr_has(&["line 1: no header"]);
    sc.write("empty.csv", "\n");
    drover(dir, &url, &with(&["--csv", "empty.csv"])).await.fails_with(65).stderr_has(&["empty"]);
    drover(dir, &url, &with(&["gpu-a-01", "not-an-ip"])).await.fails_with(64).stderr_has(&["IPMI_IP"]);
    // A hostname that parses as an id would name another host (ids are tried first).
    drover(dir, &url, &with(&[ID2, "10.0.0.13"])).await.fails_with(64).stderr_has(&["names must not parse as ids"]);
    assert_eq!(drover(dir, &url, &["onboarding", "retry", ID]).await.code, 64, "--reason is required");
    drover(dir, &url, &["describe", "onboarding", "gpu-a-01"]).await.fails_with(64).stderr_has(&["UUID"]);
    drover(dir, &url, &["get", "onboardings", "--batch", "b1"]).await.fails_with(64).stderr_has(&["--batch"]);
    assert!(fake.seen.lock().expect("lock").is_empty(), "nothing was sent");

    let run = drover(dir, &url, &with(&["GPU-A-01", "10.0.0.11", "--pxe-mac", "AA-BB-CC-DD-EE-FF"])).await;
    run.ok().stdout_has(&format!("{ID}  gpu-a-01  10.0.0.11  failed_manual_intervention  commission\n"));
    run.stdout_has(&format!("drover describe onboarding {ID}\n"));

    sc.write("rack.csv", "ipmi_ip,hostname\n10.0.0.11,gpu-a-01\n10.0.0.12,gpu-a-02\n");
    let run = drover(dir, &url, &with(&["--sku", "hgx", "--csv", "rack.csv"])).await;
    run.ok().stdout_has(&format!("Batch {BATCH}: 2 onboardings\n")).stdout_has(&format!("drover get onboardings --batch {BATCH}\n"));
    let run = drover(dir, &url, &with(&["--csv", "rack.csv", "-o", "json"])).await;
    let v: Value = serde_json::from_str(&run.ok().stdout).expect("json");
    assert_eq!(v["batchId"], json!(BATCH));

    let run = drover(dir, &url, &["get", "onboardings", "--batch", BATCH, "--host", "gpu a"]).await;
    let lines: Vec<&str> = run.ok().stdout.lines().collect();
    assert_eq!(lines[0], format!("Batch {BATCH} (site dc1): 2 onboardings: running 1, failed_manual_intervention 1"), "{}", run.stdout);
    assert!(lines[1].starts_with("ID ") && lines[2].starts_with(&format!("{ID}  gpu-a-01  dc1 ")), "{}", run.stdout);
    let run = drover(dir, &url, &["get", "onboardings", "--state", "running", "-o", "json"]).await;
    let v: Value = serde_json::from_str(&run.ok().stdout).expect("json");
    assert_eq!(v["onboardings"][0]["onboardingId"], json!(ID2));

    let run = drover(dir, &url, &["describe", "onboarding", ID]).await;
    run.ok().stdout_has("Stage:         commission (2/2)\n").stdout_has("  MAAS status: Failed commissioning\n");

    let run = drover(dir, &url, &["onboarding", "retry", ID, "--reason", "tray reseated"]).await;
    assert_eq!(run.ok().stdout, format!("{ID} running (stage commission): retrying commission\n"));
    drover(dir, &url, &["onboarding", "cancel", ID, "--reason", "wrong rack"]).await.fails_with(65).stderr_has(&["409", "cancel needs"]);

    let node = |h: &str, ip: &str, mac: Value| json!({"hostname": h, "ipmiIp": ip, "pxeMac": mac});
    let seen = fake.seen.lock().expect("lock").clone();
    let mut single = json!({"site": "dc1", "profile": "gpu", "sku": null});
    single
        .as_object_mut()
        .expect("object")
        .extend(node("gpu-a-01", "10.0.0.11", json!("aa:bb:cc:dd:ee:ff")).as_object().expect("o").clone());
    let nodes = json!([node("gpu-a-01", "10.0.0.11", Value::Null), node("gpu-a-02", "10.0.0.12", Value::Null)]);
    let expected = vec![
        ("POST /v1/maas/onboardings".to_owned(), single),
        ("POST /v1/maas/onboardings/batch".to_owned(), json!({"site": "dc1", "profile": "gpu", "sku": "hgx", "nodes": nodes})),
        ("POST /v1/maas/onboardings/batch".to_owned(), json!({"site": "dc1", "profile": "gpu", "sku": null, "nodes": nodes})),
        (format!("GET /v1/maas/onboardings?batch={BATCH}&host=gpu%20a"), Value::Null),
        (format!("GET /v1/maas/onboardings/batches/{BATCH}"), Value::Null),
        ("GET /v1/maas/onboardings?state=running".to_owned(), Value::Null),
        (format!("GET /v1/maas/onboardings/{ID}"), Value::Null),
        (format!("POST /v1/maas/onboardings/{ID}/retry_stage"), json!({"reason": "tray reseated"})),
        (format!("POST /v1/maas/onboardings/{ID}/cancel"), json!({"reason": "wrong rack"})),
    ];
    assert_eq!(seen, expected);

    // --wait follows what the verb started until it stands still: here the onboarding is
    // back in failed_manual_intervention, which needs a person: exit 2, its line printed once.
    fake.seen.lock().expect("lock").clear();
    let run = drover(dir, &url, &["onboarding", "retry", ID, "--reason", "tray reseated", "--wait", "--timeout", "30"]).await;
    let run = run.fails_with(2);
    assert_eq!(
        run.stdout,
        format!("{ID} running (stage commission): retrying commission\n{ID} failed_manual_intervention stage commission (2/2)\n")
    );
    run.stderr_has(&[&format!("onboarding {ID} did not succeed")]);
    let run = drover(dir, &url, &with(&["gpu-a-01", "10.0.0.11", "--wait", "--timeout", "30"])).await;
    run.fails_with(2).stdout_has(&format!("{ID} failed_manual_intervention stage commission (2/2)\n"));
    let seen: Vec<String> = fake.seen.lock().expect("lock").iter().map(|(l, _)| l.clone()).collect();
    assert_eq!(
        seen,
        [
            format!("POST /v1/maas/onboardings/{ID}/retry_stage"),
            format!("GET /v1/maas/onboardings/{ID}"),
            "POST /v1/maas/onboardings".to_owned(),
            format!("GET /v1/maas/onboardings/{ID}"),
        ]
    );
}
