//! The coordinator's TLS and identity rules against real clients: TLS 1.2 refused, no client
//! certificate on an agent route refused, roles checked per route, a revoked certificate
//! refused at the handshake, and host A's certificate never reading or writing host B's
//! state.

use drover_engine::app::Clock as _;
use drover_engine::store::{CertKind, NewCert, NewIntent, NewTask};
use drover_tests::{Harness, run_blocking};
use uuid::Uuid;

fn post(url: String, body: String) -> Vec<String> {
    vec![
        "-X".into(),
        "POST".into(),
        "-H".into(),
        "content-type: application/json".into(),
        "-d".into(),
        body,
        "-w".into(),
        "%{http_code}".into(),
        "-o".into(),
        "/dev/null".into(),
        url,
    ]
}

fn status(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_1_2_is_refused() {
    let h = Harness::start().await;
    let addr = h.running.addr.to_string();
    let out = run_blocking("openssl", vec!["s_client".into(), "-connect".into(), addr.clone(), "-tls1_2".into()], vec![]).await;
    assert!(!out.status.success(), "a TLS 1.2 handshake succeeded: {}", String::from_utf8_lossy(&out.stdout));
    // TLS 1.3 to the same port works (the refusal above is about the version).
    let out = run_blocking(
        "openssl",
        vec![
            "s_client".into(),
            "-connect".into(),
            addr,
            "-tls1_3".into(),
            "-CAfile".into(),
            h.ca.display().to_string(),
            "-verify_return_error".into(),
        ],
        vec![],
    )
    .await;
    assert!(String::from_utf8_lossy(&out.stdout).contains("TLSv1.3"), "{}", String::from_utf8_lossy(&out.stdout));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_route_without_client_certificate_is_refused() {
    let h = Harness::start().await;
    let out = h.curl(post(format!("{}/v1/agent/checkin", h.url), r#"{"agentVersion":"x","bootId":"y"}"#.into())).await;
    assert_eq!(status(&out), "401");
    // An operator certificate is not a host certificate either.
    let out = h.curl_as(&h.admin, post(format!("{}/v1/agent/checkin", h.url), r#"{"agentVersion":"x","bootId":"y"}"#.into())).await;
    assert_eq!(status(&out), "403");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn viewer_cannot_create_hosts() {
    let h = Harness::start().await;
    let body = serde_json::json!({ "hostname": "gpu-01", "trustSha256": h.trust.1 }).to_string();
    let out = h.curl_as(&h.viewer, post(format!("{}/v1/hosts", h.url), body.clone())).await;
    assert_eq!(status(&out), "403");
    let out = h.curl(post(format!("{}/v1/hosts", h.url), body)).await;
    assert_eq!(status(&out), "401");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_a_never_reads_or_writes_host_bs_state() {
    let h = Harness::start().await;
    let (_, a_cert, _) = h.host_credentials("gpu-a");
    let (b_id, _, _) = h.host_credentials("gpu-b");
    // B has an intent and a task waiting.
    let intent_id = Uuid::new_v4();
    let envelope = br#"{"signed":{"for":"gpu-b"},"signatures":[]}"#.to_vec();
    let rollout_id = drover_proto::names::RolloutId::new("gpu", "c1").expect("id");
    h.running
        .app
        .dispatch_intent(NewIntent {
            intent_id,
            host_id: b_id,
            rollout_id: rollout_id.clone(),
            envelope: envelope.clone(),
            confirm_deadline: None,
            created_at: h.clock.now(),
        })
        .await
        .expect("intent");
    let task_id = Uuid::new_v4();
    h.running.app.dispatch_task(NewTask { task_id, host_id: b_id, job_id: None, envelope, created_at: h.clock.now() }).await.expect("task");

    // A checks in: it gets none of B's work.
    let (code, body) = h.call(Some(&a_cert), "POST", "/v1/agent/checkin", Some(r#"{"agentVersion":"x","bootId":"y"}"#)).await;
    assert_eq!(code, "200", "{body}");
    let body: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert!(body.get("intent").is_none(), "A received B's intent: {body}");
    assert_eq!(body["tasks"], serde_json::json!([]), "A received B's task: {body}");

    // A confirms B's intent: 410, and B's intent is untouched.
    let confirm = serde_json::json!({ "intentId": intent_id.to_string(), "rolloutId": rollout_id.to_string(), "closure": "/nix/store/x", "bootId": "y" }).to_string();
    let out = h.curl_as(&a_cert, post(format!("{}/v1/agent/confirm", h.url), confirm)).await;
    assert_eq!(status(&out), "410");
    let rec = h.running.app.store.get_intent(b_id, intent_id).expect("store").expect("intent");
    assert_eq!(rec.status.as_str(), "wanted");

    // A reports a result for B's task: it is not recorded, and B's task stays open.
    let now = h.clock.now().to_string();
    let result = serde_json::json!({
        "agentVersion": "x", "bootId": "y",
        "taskResults": [{ "taskId": task_id.to_string(), "outcome": "succeeded", "steps": [], "startedAt": now, "finishedAt": now }]
    })
    .to_string();
    let out = h.curl_as(&a_cert, post(format!("{}/v1/agent/checkin", h.url), result)).await;
    assert_eq!(status(&out), "200", "A's own check-in goes on; the foreign result is skipped");
    let task = h.running.app.store.get_task(task_id).expect("store").expect("task");
    assert!(task.result.is_none(), "A completed B's task");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoked_certificate_is_refused_at_the_handshake() {
    let h = Harness::start().await;
    let (id, cert, serial) = h.host_credentials("gpu-r");
    // Record the certificate as issued, as enrollment does, then revoke the host via the API.
    let now = h.clock.now();
    let record = NewCert {
        serial,
        kind: CertKind::Host,
        host_id: Some(id),
        subject: "gpu-r".into(),
        not_before: now,
        not_after: now.plus_secs(86_400),
    };
    h.running.app.store.record_cert(&record).expect("record");
    let checkin = || post(format!("{}/v1/agent/checkin", h.url), r#"{"agentVersion":"x","bootId":"y"}"#.into());
    let out = h.curl_as(&cert, checkin()).await;
    assert_eq!(status(&out), "200", "{}", String::from_utf8_lossy(&out.stderr));
    let out = h.curl_as(&h.admin, post(format!("{}/v1/hosts/{id}/revoke", h.url), String::new())).await;
    assert_eq!(status(&out), "200");
    let out = h.curl_as(&cert, checkin()).await;
    assert!(!out.status.success(), "a revoked certificate completed a handshake");
    assert_eq!(status(&out), "000", "no HTTP response at all: the handshake fails");
    // Only admins revoke; an unknown host is a 404, a malformed id a 400.
    let out = h.curl_as(&h.viewer, post(format!("{}/v1/hosts/{id}/revoke", h.url), String::new())).await;
    assert_eq!(status(&out), "403");
    let out = h.curl_as(&h.admin, post(format!("{}/v1/hosts/{}/revoke", h.url, Uuid::new_v4()), String::new())).await;
    assert_eq!(status(&out), "404");
    let out = h.curl_as(&h.admin, post(format!("{}/v1/hosts/not-a-uuid/revoke", h.url), String::new())).await;
    assert_eq!(status(&out), "400");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_revoked_mid_connection_can_do_nothing_more() {
    // An agent's pooled connection outlives the handshake's CRL: revocation must still bind
    // on the very next request over it (including renewing itself a fresh certificate).
    let h = Harness::start().await;
    let (id, cert, serial) = h.host_credentials("gpu-m");
    let now = h.clock.now();
    let record = NewCert {
        serial,
        kind: CertKind::Host,
        host_id: Some(id),
        subject: "gpu-m".into(),
        not_before: now,
        not_after: now.plus_secs(86_400),
    };
    h.running.app.store.record_cert(&record).expect("record");
    let identity = drover_client::ClientIdentity::from_pem(&std::fs::read(&cert.0).expect("crt"), &std::fs::read(&cert.1).expect("key"))
        .expect("identity");
    let ca = drover_client::load_ca(&h.ca).expect("ca");
    let client = drover_client::CoordinatorClient::new(
        "test",
        std::slice::from_ref(&h.url),
        &ca,
        Some(identity),
        std::time::Duration::from_secs(30),
    )
    .expect("client");
    let report = serde_json::json!({ "agentVersion": "t", "bootId": "b" });
    let first: Result<serde_json::Value, _> = client.post_json("/v1/agent/checkin", &report).await;
    assert!(first.is_ok(), "{first:?}");
    h.running.app.revoke_host(id, "test".into()).await.expect("revoke");
    let (_, csr) = drover_tests::key_and_csr("gpu-m");
    let renewed: Result<serde_json::Value, _> = client.post_json("/v1/agent/renew", &serde_json::json!({ "csr": csr })).await;
    match renewed {
        Err(drover_client::ClientError::Api { status: 401, message, .. }) => assert!(message.contains("revoked"), "{message}"),
        other => panic!("a revoked certificate renewed itself over its open connection: {other:?}"),
    }
    let again: Result<serde_json::Value, _> = client.post_json("/v1/agent/checkin", &report).await;
    assert!(again.is_err(), "a revoked certificate checked in again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_offering_both_get_http_1_1_and_h2_only_clients_get_h2() {
    let h = Harness::start().await;
    let version = |extra: Option<&str>| {
        let mut args: Vec<String> = extra.into_iter().map(str::to_owned).collect();
        args.extend(["-o".into(), "/dev/null".into(), "-w".into(), "%{http_code} %{http_version}".into(), format!("{}/healthz", h.url)]);
        args
    };
    // curl offers h2 and http/1.1; the coordinator's preference picks its own HTTP/1.1.
    let out = h.curl(version(Some("--http2"))).await;
    assert_eq!(status(&out), "200 1.1", "{}", String::from_utf8_lossy(&out.stderr));
    // A client offering only h2 negotiates it and is answered by the HTTP/2 stack.
    let addr = h.running.addr.to_string();
    let out = run_blocking(
        "openssl",
        vec!["s_client".into(), "-connect".into(), addr, "-alpn".into(), "h2".into(), "-CAfile".into(), h.ca.display().to_string()],
        vec![],
    )
    .await;
    assert!(String::from_utf8_lossy(&out.stdout).contains("ALPN protocol: h2"), "{}", String::from_utf8_lossy(&out.stdout));
    let ca = drover_client::load_ca(&h.ca).expect("ca");
    let mut tls = drover_client::tls_config(&ca, None).expect("tls");
    tls.alpn_protocols = vec![b"h2".to_vec()];
    let client = drover_client::CoordinatorClient::with_tls("t", std::slice::from_ref(&h.url), tls, std::time::Duration::from_secs(30))
        .expect("client");
    let body = client.get_bytes("/healthz").await.expect("answered over HTTP/2");
    assert!(!body.is_empty());
}
