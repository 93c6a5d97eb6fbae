//! The agent routes against a real coordinator: a held check-in returns as soon as work is
//! dispatched to its host, a rollout's artifacts come back byte-exact and verify, a host's
//! proof of its place verifies and is its own, confirm
//! answers 204 only while the dispatch is still wanted, and renewal keeps the host's
//! identity.

use std::time::Duration;

use drover_engine::app::Clock as _;
use drover_engine::store::{IntentStatus, NewIntent};
use drover_proto::enroll::{ProofBundle, RolloutBundle};
use drover_proto::names::RolloutId;
use drover_proto::release::{ReleaseParams, build_release, manifest_path, root_path};
use drover_proto::resolve::ReleaseMeta;
use drover_proto::spec::FleetSpec;
use drover_tests::{Harness, key_and_csr};
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
        "\n%{http_code}".into(),
        url,
    ]
}

/// Splits curl's output into (body, status).
fn split(out: &std::process::Output) -> (String, String) {
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (body.to_owned(), code.trim().to_owned())
}

fn intent(host: Uuid, rollout: &RolloutId, deadline: Option<drover_proto::time::Time>, now: drover_proto::time::Time) -> NewIntent {
    let id = Uuid::new_v4();
    let envelope = serde_json::json!({ "signed": { "intentId": id.to_string() }, "signatures": [] }).to_string().into_bytes();
    NewIntent { intent_id: id, host_id: host, rollout_id: rollout.clone(), envelope, confirm_deadline: deadline, created_at: now }
}

/// The example fleet released at commit `c0ffee` as version 7 and stored as published; the
/// release's files and the time it was made.
fn publish_example(h: &Harness) -> (drover_proto::release::ReleaseFiles, drover_proto::time::Time) {
    let spec = FleetSpec::from_json(include_bytes!("../../../examples/fleet.json")).expect("spec");
    let now = h.clock.now();
    let params = ReleaseParams { meta: ReleaseMeta { ci_commit: "c0ffee".into(), created_at: now }, version: 7, previous: None };
    let ci = drover_proto::keys::KeySigner::new(ed25519_dalek::SigningKey::from_bytes(&[9u8; 32]));
    let files = build_release(&spec, &params, &[ci]).expect("release");
    h.running.app.store.put_release(7, now, &files).expect("publish");
    (files, now)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_checkin_returns_as_soon_as_an_intent_is_dispatched() {
    // A 60 s hold: the check-in below can only come back early because the dispatch woke it.
    let h = Harness::start_with_long_poll(60).await;
    let (host, cert, _) = h.host_credentials("gpu-01");
    let started = std::time::Instant::now();
    let request = h.curl_as(&cert, post(format!("{}/v1/agent/checkin", h.url), r#"{"agentVersion":"t","bootId":"b"}"#.into()));
    let dispatch = async {
        // Wait (bounded) until the check-in is actually held, then dispatch.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while h.running.app.hub.held() == 0 {
            assert!(std::time::Instant::now() < deadline, "the check-in was never held");
            tokio::task::yield_now().await;
        }
        let rollout = RolloutId::new("gpu", "c1").expect("id");
        h.running.app.dispatch_intent(intent(host, &rollout, None, h.clock.now())).await.expect("dispatch");
    };
    let (out, ()) = tokio::join!(request, dispatch);
    let (body, code) = split(&out);
    assert_eq!(code, "200", "{body}");
    let body: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert!(body["intent"]["signed"]["intentId"].is_string(), "the dispatched intent came back: {body}");
    assert!(started.elapsed() < Duration::from_secs(60), "the check-in was not woken by the dispatch");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_checkin_is_answered_empty_after_the_hold() {
    let h = Harness::start().await;
    let (_, cert, _) = h.host_credentials("gpu-02");
    let out = h.curl_as(&cert, post(format!("{}/v1/agent/checkin", h.url), r#"{"agentVersion":"t","bootId":"b"}"#.into())).await;
    let (body, code) = split(&out);
    assert_eq!(code, "200");
    let body: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert!(body.get("intent").is_none());
    assert_eq!(body["tasks"], serde_json::json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollout_artifacts_come_back_byte_exact_and_verify() {
    let h = Harness::start().await;
    let (_, cert, _) = h.host_credentials("gpu-03");
    let (files, now) = publish_example(&h);
    let id = RolloutId::new("gpu", "c0ffee").expect("id");

    let out = h.curl_as(&cert, vec!["-w".into(), "\n%{http_code}".into(), format!("{}/v1/rollouts/{id}", h.url)]).await;
    let (body, code) = split(&out);
    assert_eq!(code, "200", "{body}");
    let bundle: RolloutBundle = serde_json::from_str(&body).expect("bundle");
    assert_eq!(bundle.manifest.as_bytes(), files.get(&manifest_path(&id)).expect("manifest"), "manifest bytes changed in transit");
    // What the agent will do with them: verify against the operator's trust roots.
    let trust = drover_proto::trust::TrustRoots::from_json(&std::fs::read(&h.trust.0).expect("trust")).expect("trust");
    let ctx = drover_proto::verify::VerifyContext::at(now);
    let ts = drover_proto::verify::verify_timestamp(bundle.timestamp.as_bytes(), bundle.timestamp_sig.as_bytes(), &trust, &ctx)
        .expect("timestamp verifies");
    let anchors = drover_proto::verify::ManifestAnchors { advertised_id: Some(&id), timestamp: &ts, fleet: None };
    drover_proto::verify::verify_manifest(bundle.manifest.as_bytes(), bundle.manifest_sig.as_bytes(), &trust, &ctx, anchors)
        .expect("manifest verifies");

    let out = h.curl_as(&cert, vec!["-w".into(), "\n%{http_code}".into(), format!("{}/v1/rollouts/gpu@nope", h.url)]).await;
    assert_eq!(split(&out).1, "404");
    let out = h.curl_as(&cert, vec!["-w".into(), "\n%{http_code}".into(), format!("{}/v1/rollouts/not-an-id", h.url)]).await;
    assert_eq!(split(&out).1, "400");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hosts_proof_comes_back_verifies_and_is_its_own() {
    let h = Harness::start().await;
    let (_, cert, _) = h.host_credentials("gpu-b-01");
    let (_, stranger, _) = h.host_credentials("infra-01");
    let (files, now) = publish_example(&h);
    let id = RolloutId::new("gpu", "c0ffee").expect("id");

    let out = h.curl_as(&cert, vec!["-w".into(), "\n%{http_code}".into(), format!("{}/v1/rollouts/{id}/proof", h.url)]).await;
    let (body, code) = split(&out);
    assert_eq!(code, "200", "{body}");
    assert!(body.len() < 4096, "a proof bundle is a few KB, not a manifest: {} bytes", body.len());
    let bundle: ProofBundle = serde_json::from_str(&body).expect("bundle");
    assert_eq!(bundle.root.as_bytes(), files.get(&root_path(&id)).expect("root"), "root bytes changed in transit");
    assert_eq!(bundle.proof.entry.hostname, "gpu-b-01", "the certificate's host, and only it");
    let trust = drover_proto::trust::TrustRoots::from_json(&std::fs::read(&h.trust.0).expect("trust")).expect("trust");
    let ctx = drover_proto::verify::VerifyContext::at(now);
    let ts = drover_proto::verify::verify_timestamp(bundle.timestamp.as_bytes(), bundle.timestamp_sig.as_bytes(), &trust, &ctx)
        .expect("timestamp verifies");
    let anchors = drover_proto::verify::ManifestAnchors { advertised_id: Some(&id), timestamp: &ts, fleet: None };
    let root = drover_proto::verify::verify_root(bundle.root.as_bytes(), bundle.root_sig.as_bytes(), &trust, &ctx, anchors)
        .expect("root verifies");
    let place = drover_proto::verify::verify_place(&root, &bundle.proof, "gpu-b-01").expect("the proof holds");
    assert_eq!(place.manifest_sha256, drover_proto::resolve::sha256_hex(files.get(&manifest_path(&id)).expect("manifest")));

    // A host outside the rollout gets no proof (there is none to give), nor a rollout with
    // no manifest; a malformed id is a 400.
    let out = h.curl_as(&stranger, vec!["-w".into(), "\n%{http_code}".into(), format!("{}/v1/rollouts/{id}/proof", h.url)]).await;
    let (body, code) = split(&out);
    assert_eq!(code, "404", "{body}");
    assert!(body.contains("infra-01 is not in rollout gpu@c0ffee"), "{body}");
    let out = h.curl_as(&cert, vec!["-w".into(), "\n%{http_code}".into(), format!("{}/v1/rollouts/gpu@nope/proof", h.url)]).await;
    assert_eq!(split(&out).1, "404");
    let out = h.curl_as(&cert, vec!["-w".into(), "\n%{http_code}".into(), format!("{}/v1/rollouts/not-an-id/proof", h.url)]).await;
    assert_eq!(split(&out).1, "400");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirm_is_204_while_wanted_and_410_once_cancelled_superseded_or_late() {
    let h = Harness::start().await;
    let (host, cert, _) = h.host_credentials("gpu-04");
    let rollout = RolloutId::new("gpu", "c1").expect("id");
    let confirm = |id: Uuid| {
        let body =
            serde_json::json!({ "intentId": id.to_string(), "rolloutId": rollout.to_string(), "closure": "/nix/store/x", "bootId": "b" });
        h.curl_as(&cert, post(format!("{}/v1/agent/confirm", h.url), body.to_string()))
    };
    let now = h.clock.now();
    let first = intent(host, &rollout, Some(now.plus_secs(300)), now);
    let first_id = first.intent_id;
    h.running.app.dispatch_intent(first).await.expect("dispatch");
    assert_eq!(split(&confirm(first_id).await).1, "204");
    assert_eq!(split(&confirm(first_id).await).1, "204", "confirming twice is idempotent");

    // Superseded by a newer dispatch: the older one answers 410.
    let second = intent(host, &rollout, Some(now.plus_secs(300)), now);
    let second_id = second.intent_id;
    h.running.app.dispatch_intent(second).await.expect("dispatch");
    assert_eq!(split(&confirm(first_id).await).1, "410", "a superseded dispatch is no longer wanted");
    // The new one's confirm deadline passes before the agent confirms: 410, roll back.
    h.clock.advance(301);
    assert_eq!(split(&confirm(second_id).await).1, "410");

    // Cancelled: 410.
    let now = h.clock.now();
    let fourth = intent(host, &rollout, None, now);
    let fourth_id = fourth.intent_id;
    h.running.app.dispatch_intent(fourth).await.expect("dispatch");
    h.running.app.store.set_intent_status(host, fourth_id, IntentStatus::Cancelled, now).expect("cancel");
    assert_eq!(split(&confirm(fourth_id).await).1, "410");
    // An id nobody issued: 410 as well (never a 5xx, never a write).
    assert_eq!(split(&confirm(Uuid::new_v4()).await).1, "410");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_issues_a_fresh_certificate_naming_the_same_host() {
    let h = Harness::start().await;
    let (host, cert, _) = h.host_credentials("gpu-05");
    let (_, csr) = key_and_csr("anything-the-agent-likes");
    let body = serde_json::json!({ "csr": csr }).to_string();
    let out = h.curl_as(&cert, post(format!("{}/v1/agent/renew", h.url), body)).await;
    let (body, code) = split(&out);
    assert_eq!(code, "200", "{body}");
    let body: serde_json::Value = serde_json::from_str(&body).expect("json");
    let pem = body["certificate"].as_str().expect("certificate");
    let der = drover_engine::pki::pem_to_der(pem, "CERTIFICATE").expect("der");
    match drover_engine::identity::Identity::from_cert_der(&der).expect("identity") {
        drover_engine::identity::Identity::Host { host_id, hostname } => {
            assert_eq!(host_id, host);
            assert_eq!(hostname, "gpu-05");
        }
        other => panic!("renewal produced {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_are_leased_once_and_completed_by_their_result() {
    let h = Harness::start().await;
    let (host, cert, _) = h.host_credentials("gpu-06");
    let task_id = Uuid::new_v4();
    let envelope = serde_json::json!({ "signed": { "taskId": task_id.to_string() }, "signatures": [] }).to_string().into_bytes();
    let new = drover_engine::store::NewTask { task_id, host_id: host, job_id: None, envelope, created_at: h.clock.now() };
    h.running.app.dispatch_task(new).await.expect("dispatch");
    let checkin = |body: String| h.curl_as(&cert, post(format!("{}/v1/agent/checkin", h.url), body));
    let (body, code) = split(&checkin(r#"{"agentVersion":"t","bootId":"b"}"#.into()).await);
    assert_eq!(code, "200");
    let body: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(body["tasks"][0]["signed"]["taskId"], task_id.to_string(), "the task is delivered: {body}");
    // Leased: the next check-in does not hand out a second live copy.
    let (body, _) = split(&checkin(r#"{"agentVersion":"t","bootId":"b"}"#.into()).await);
    let body: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(body["tasks"], serde_json::json!([]), "a leased task came back while its lease is live");
    // The result completes it.
    let now = h.clock.now().to_string();
    let report = serde_json::json!({
        "agentVersion": "t", "bootId": "b",
        "taskResults": [{ "taskId": task_id.to_string(), "outcome": "succeeded", "steps": [{ "name": "noop", "outcome": "ok" }], "startedAt": now, "finishedAt": now }]
    });
    let (_, code) = split(&checkin(report.to_string()).await);
    assert_eq!(code, "200");
    let task = h.running.app.store.get_task(task_id).expect("store").expect("task");
    assert!(task.result.is_some(), "the result was not recorded");
    assert_eq!(task.state.as_str(), "completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routine_checkins_are_written_in_batches_and_never_lost_to_the_offline_sweep() {
    let h = Harness::start().await;
    let (host, cert, _) = h.host_credentials("gpu-07");
    let now = h.clock.now();
    h.running
        .app
        .store
        .transition_host(
            host,
            drover_proto::states::HostLifecycle::BootstrapIssued,
            drover_proto::states::HostLifecycle::Enrolling,
            "t",
            now,
        )
        .expect("enrolling");
    let report = r#"{"agentVersion":"t","bootId":"b"}"#;
    // First check-in: a state change (enrolling -> active), written at once.
    let (_, code) = split(&h.curl_as(&cert, post(format!("{}/v1/agent/checkin", h.url), report.into())).await);
    assert_eq!(code, "200");
    let first = h.running.app.store.get_host(host).expect("store").expect("host");
    assert_eq!(first.state.as_str(), "active");
    assert_eq!(first.last_checkin.as_ref().map(|c| c.at), Some(now));
    // A routine check-in later: buffered, then written by the flush.
    h.clock.advance(100);
    let (_, code) = split(&h.curl_as(&cert, post(format!("{}/v1/agent/checkin", h.url), report.into())).await);
    assert_eq!(code, "200");
    h.running.app.flush_checkins().await.expect("flush");
    let later = h.running.app.store.get_host(host).expect("store").expect("host");
    assert_eq!(later.last_checkin.map(|c| c.at), Some(now.plus_secs(100)));
    // Just short of the offline threshold since that routine check-in, the sweep (which
    // flushes first) must leave the host active.
    h.clock.advance(179);
    let (_, code) = split(&h.curl_as(&cert, post(format!("{}/v1/agent/checkin", h.url), report.into())).await);
    assert_eq!(code, "200");
    h.clock.advance(2);
    let moved = drover_engine::api::lifecycle::mark_silent_hosts_offline(&h.running.app).await.expect("sweep");
    assert_eq!(moved, 0, "a host that had just checked in was marked offline");
    assert_eq!(h.running.app.store.get_host(host).expect("store").expect("host").state.as_str(), "active");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reported_events_become_host_events() {
    let h = Harness::start().await;
    let (host, cert, _) = h.host_credentials("gpu-03");
    let body = serde_json::json!({
        "agentVersion": "t", "bootId": "b",
        "events": [
            { "type": "ManifestMismatch", "rolloutId": "gpu@c9", "reason": "TargetMismatch: not this host's target" },
            { "type": "ClockSteppedBack", "lastSeen": "2026-11-21T12:00:00Z", "now": "2026-11-21T10:00:00Z" }
        ]
    });
    let (code, text) = h.call(Some(&cert), "POST", "/v1/agent/checkin", Some(&body.to_string())).await;
    assert_eq!(code, "200", "{text}");
    let events = h.running.app.store.list_events(&Default::default()).expect("events");
    let mine: Vec<_> = events.iter().map(|e| &e.event).filter(|e| e.host_id == Some(host) && e.kind.starts_with("agent.")).collect();
    let kinds: Vec<&str> = mine.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["agent.ManifestMismatch", "agent.ClockSteppedBack"], "{mine:?}");
    assert_eq!(mine[0].rollout_id.as_ref().map(|r| r.to_string()), Some("gpu@c9".to_owned()));
    assert!(mine[0].message.contains("TargetMismatch"), "{}", mine[0].message);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_event_is_refused_and_records_nothing() {
    let h = Harness::start().await;
    let (host, cert, _) = h.host_credentials("gpu-04");
    let body = serde_json::json!({
        "agentVersion": "t", "bootId": "b",
        "events": [{ "type": "VerificationFailed", "artifact": "timestamp.json", "reason": "x".repeat(5000) }]
    });
    let (code, text) = h.call(Some(&cert), "POST", "/v1/agent/checkin", Some(&body.to_string())).await;
    assert_eq!(code, "400", "{text}");
    assert!(text.contains("VerificationFailed") && text.contains("1024"), "{text}");
    let events = h.running.app.store.list_events(&Default::default()).expect("events");
    assert!(!events.iter().any(|e| e.event.host_id == Some(host) && e.event.kind.starts_with("agent.")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkin_report_is_stored_only_when_it_changes_and_flooding_it_is_refused() {
    let h = Harness::start().await;
    let (host, cert, _) = h.host_credentials("gpu-05");
    let report = |outcome: &str| {
        serde_json::json!({
            "agentVersion": "t", "bootId": "b",
            "probeResults": [{ "name": "nccl", "outcome": outcome, "mode": "enforce", "durationMs": 3, "observedAt": "2026-11-21T10:00:00Z" }]
        })
        .to_string()
    };
    let stored = || h.running.app.store.plan_snapshot().expect("snapshot").hosts.into_iter().find(|p| p.id == host).and_then(|p| p.report);
    assert_eq!(stored(), None, "nothing reported yet");
    let (code, text) = h.call(Some(&cert), "POST", "/v1/agent/checkin", Some(&report("failed"))).await;
    assert_eq!(code, "200", "{text}");
    let first = stored().expect("stored");
    assert_eq!(first.probes["nccl"], drover_proto::report::ProbeOutcome::Failed);
    let (code, _) = h.call(Some(&cert), "POST", "/v1/agent/checkin", Some(&report("passed"))).await;
    assert_eq!(code, "200");
    assert_eq!(stored().expect("stored").probes["nccl"], drover_proto::report::ProbeOutcome::Passed, "the latest result wins");

    // A flood of probe results, or a probe name too long to be one, is refused whole.
    let flood: Vec<serde_json::Value> = (0..65)
        .map(|i| serde_json::json!({ "name": format!("p{i}"), "outcome": "failed", "mode": "enforce", "durationMs": 1, "observedAt": "2026-11-21T10:00:00Z" }))
        .collect();
    let body = serde_json::json!({ "agentVersion": "t", "bootId": "b", "probeResults": flood }).to_string();
    let (code, text) = h.call(Some(&cert), "POST", "/v1/agent/checkin", Some(&body)).await;
    assert_eq!(code, "400", "{text}");
    let long = report("failed").replace("\"nccl\"", &format!("\"{}\"", "n".repeat(200)));
    let (code, text) = h.call(Some(&cert), "POST", "/v1/agent/checkin", Some(&long)).await;
    assert_eq!(code, "400", "{text}");
    assert!(text.contains("probeResults.name"), "{text}");
    assert_eq!(stored().expect("stored").probes.len(), 1, "nothing of a refused report is kept");
}
