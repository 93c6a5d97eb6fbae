//! `secrets_do_not_reach_logs`: during a real enrollment (host created through the API, token
//! and CSR posted to `/v1/enroll`, first check-in), the coordinator's tracing output is
//! captured, and neither it, nor the stored events and audit, nor the operator listings hold
//! the enrollment token, its sha256, the agent's key, the CA key or the director key.
//!
//! The capture is the process-wide subscriber (`drover_tests::logcapture`).

use drover_engine::store::{AuditFilter, EventFilter};
use drover_tests::{Harness, key_and_csr};
use sha2::{Digest, Sha256};

/// The searchable forms of a PEM secret: each line of its base64 body (a leak of part of a
/// key is still a leak, and JSON escaping would hide the PEM's newlines from a whole-text
/// search).
fn pem_needles(pem: &str) -> Vec<String> {
    pem.lines().map(str::trim).filter(|l| !l.starts_with("-----") && l.len() >= 16).map(str::to_owned).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_do_not_reach_logs() {
    let logs = drover_tests::logcapture::global();

    let h = Harness::start_with_long_poll(0).await;
    let created = h.create_host("gpu-secret").await;
    let token = created["token"].as_str().expect("token").to_owned();
    let host_id = created["hostId"].as_str().expect("host id").to_owned();
    let (agent_key, csr) = key_and_csr("gpu-secret");
    let enroll = serde_json::json!({ "hostId": host_id, "token": token, "csr": csr }).to_string();
    let (code, body) = h.call(None, "POST", "/v1/enroll", Some(&enroll)).await;
    assert_eq!(code, "200", "enrollment failed: {body}");
    let cert_pem = serde_json::from_str::<serde_json::Value>(&body).expect("json")["certificate"].as_str().expect("certificate").to_owned();
    let cert = (h.dir.path().join("agent.crt"), h.dir.path().join("agent.key"));
    std::fs::write(&cert.0, cert_pem).expect("write cert");
    std::fs::write(&cert.1, &agent_key).expect("write key");
    let checkin = serde_json::json!({ "agentVersion": "test", "bootId": "b-1" }).to_string();
    let (code, body) = h.call(Some(&cert), "POST", "/v1/agent/checkin", Some(&checkin)).await;
    assert_eq!(code, "200", "check-in failed: {body}");
    // A replayed token is refused, and the refusal is logged too: it must not echo the token.
    let (code, _) = h.call(None, "POST", "/v1/enroll", Some(&enroll)).await;
    assert_ne!(code, "200");

    let mut needles: Vec<(String, String)> = vec![
        ("token".into(), token.clone()),
        ("token sha256".into(), hex::encode(Sha256::digest(token.as_bytes()))),
        (
            "director key (hex)".into(),
            hex::encode(h.running.app.director.signing_key(drover_engine::app::Clock::now(&*h.clock)).to_bytes()),
        ),
    ];
    for (what, pem) in [
        ("agent key", agent_key.clone()),
        ("CA key", h.running.app.ca.key_pem()),
        ("director key PEM", std::fs::read_to_string(h.dir.path().join("state/director.key")).expect("director.key")),
    ] {
        let lines = pem_needles(&pem);
        assert!(!lines.is_empty(), "{what} has no body lines");
        needles.extend(lines.into_iter().map(|l| (what.to_owned(), l)));
    }

    let mut haystacks: Vec<(String, String)> = Vec::new();
    let store = &h.running.app.store;
    let events = store.list_events(&EventFilter::default()).expect("events");
    assert!(!events.is_empty(), "enrollment wrote events");
    haystacks.push(("store events".into(), format!("{events:?}")));
    let audit = store.list_audit(&AuditFilter::default()).expect("audit");
    assert!(!audit.is_empty(), "host creation was audited");
    haystacks.push(("store audit".into(), format!("{audit:?}")));
    for path in ["/v1/hosts", &format!("/v1/hosts/{host_id}"), "/v1/tokens", "/v1/events", "/v1/audit"] {
        let (code, body) = h.call(Some(&h.admin), "GET", path, None).await;
        assert_eq!(code, "200", "{path}: {body}");
        haystacks.push((format!("GET {path}"), body));
    }
    let log_text = logs.text();
    assert!(log_text.contains("host created"), "the capture sees the coordinator's log lines:\n{log_text}");
    haystacks.push(("captured logs".into(), log_text));

    for (where_, text) in &haystacks {
        for (what, needle) in &needles {
            assert!(!text.contains(needle.as_str()), "{what} reached {where_}");
        }
    }
}
