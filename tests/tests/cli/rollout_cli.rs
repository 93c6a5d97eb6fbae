//! `drover rollout …` and `drover plan --from-coordinator` as an operator runs them: the real
//! `drover` binary against a real coordinator over mutual TLS.

use drover_engine::app::Clock as _;
use drover_proto::keys::KeySigner;
use drover_proto::publish::PublishRequest;
use drover_proto::release::{ReleaseParams, build_release};
use drover_proto::resolve::ReleaseMeta;
use drover_proto::spec::FleetSpec;
use drover_proto::states::HostLifecycle;
use drover_tests::Harness;
use ed25519_dalek::SigningKey;

use drover_tests::output_text as text;

/// A published example release with every host online, planned once by the executor:
/// `infra@c0ffee` Active with infra-01 dispatched, `gpu` deferred behind it.
async fn started() -> Harness {
    let h = Harness::start_with_long_poll(1).await;
    let spec = FleetSpec::from_json(include_bytes!("../../../examples/fleet.json")).expect("spec");
    let params = ReleaseParams { meta: ReleaseMeta { ci_commit: "c0ffee".into(), created_at: h.clock.now() }, version: 1, previous: None };
    let files = build_release(&spec, &params, &[KeySigner::new(SigningKey::from_bytes(&[9u8; 32]))]).expect("release");
    for name in ["infra-01", "gpu-a-01", "gpu-a-02", "gpu-b-01", "gpu-b-02"] {
        let (id, _, _) = h.host_credentials(name);
        let store = &h.running.app.store;
        store.transition_host(id, HostLifecycle::BootstrapIssued, HostLifecycle::Enrolling, "enrolled", h.clock.now()).expect("enrolling");
        store.transition_host(id, HostLifecycle::Enrolling, HostLifecycle::Active, "checked in", h.clock.now()).expect("active");
    }
    let body = serde_json::to_string(&PublishRequest::from_files(&files, None).expect("utf-8")).expect("json");
    let (code, out) = h.call(Some(&h.admin), "POST", "/v1/releases", Some(&body)).await;
    assert_eq!(code, "201", "{out}");
    let app = h.running.app.clone();
    let first = app.executor.tick_now(&app).await.expect("tick");
    assert!(!first.plan.actions.is_empty() || app.executor.ticks() > 1, "the release was planned");
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_from_coordinator_shows_the_live_report_and_no_pending_actions() {
    let h = started().await;
    let trust = h.trust.0.display().to_string();
    let out = h.drover_as(&h.viewer, &["plan", "--from-coordinator", "--trust", &trust]).await;
    assert!(out.status.success(), "{}", text(&out));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).expect("plan JSON");
    // The executor planned this snapshot to its fixpoint: the operator's dry run agrees.
    assert_eq!(plan["actions"], serde_json::json!([]), "{plan}");
    let report = plan["report"].as_array().expect("report");
    let reasons: Vec<&str> = report.iter().filter_map(|w| w["reason"].as_str()).collect();
    assert!(reasons.iter().any(|r| r.contains("channel edge: waits for channel infra")), "{reasons:?}");
    assert!(reasons.iter().any(|r| r.contains("awaiting confirmation")), "{reasons:?}");

    // The release is verified against the operator's own trust roots, not the server's.
    let other = h.dir.path().join("other-trust.json");
    let ci = SigningKey::from_bytes(&[7u8; 32]).verifying_key();
    let doc = serde_json::json!({ "schemaVersion": 1, "ci": { "threshold": 1, "keys": [{
        "keyId": drover_proto::keys::KeyId::of(&ci).to_string(), "alg": "ed25519",
        "publicKey": drover_proto::keys::verifying_key_to_pem(&ci).expect("pem") }] } });
    std::fs::write(&other, doc.to_string()).expect("write");
    let out = h.drover_as(&h.viewer, &["plan", "--from-coordinator", "--trust", other.to_str().expect("utf8")]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("REFUSED"), "{}", text(&out));
    // Files and the coordinator are exclusive.
    let out = h.drover_as(&h.viewer, &["plan", "--from-coordinator", "--trust", &trust, "--observed", "x.json"]).await;
    assert_eq!(out.status.code(), Some(64), "{}", text(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollout_verbs_halt_resume_and_status_with_roles_and_exit_codes() {
    let h = started().await;
    let out = h.drover_as(&h.viewer, &["rollout", "halt", "infra@c0ffee", "--reason", "looks wrong"]).await;
    assert_eq!(out.status.code(), Some(77), "a viewer may not act: {}", text(&out));
    let out = h.drover_as(&h.admin, &["rollout", "halt", "infra@c0ffee"]).await;
    assert_eq!(out.status.code(), Some(64), "a reason is required: {}", text(&out));
    let out = h.drover_as(&h.admin, &["rollout", "halt", "in/fra", "--reason", "x"]).await;
    assert_eq!(out.status.code(), Some(64), "no rollout id, prefix or channel: {}", text(&out));
    let out = h.drover_as(&h.admin, &["rollout", "halt", "infra@c0ffee", "--reason", "looks wrong"]).await;
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "infra@c0ffee Halted");
    let out = h.drover_as(&h.admin, &["rollout", "halt", "infra@c0ffee", "--reason", "again"]).await;
    assert_eq!(out.status.code(), Some(65), "halting a halted rollout is a 409: {}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs it in Active, Converging"), "{}", text(&out));

    // While halted the executor dispatches nothing new.
    let app = h.running.app.clone();
    let out = app.executor.tick_now(&app).await.expect("tick");
    assert!(out.plan.actions.is_empty(), "{:?}", out.plan.actions);

    let out = h.drover_as(&h.viewer, &["rollout", "status", "infra@c0ffee", "-o", "json"]).await;
    assert!(out.status.success(), "{}", text(&out));
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(status["state"], "Halted");
    assert_eq!(status["hosts"][0]["hostname"], "infra-01");
    assert_eq!(status["hosts"][0]["state"], "Activating");

    let out = h.drover_as(&h.admin, &["rollout", "resume", "infra@c0ffee", "--reason", "false alarm"]).await;
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "infra@c0ffee Active");
    let (code, body) = h.call(Some(&h.viewer), "GET", "/v1/audit", None).await;
    assert_eq!(code, "200", "{body}");
    assert!(body.contains("rollout.halt") && body.contains("rollout.resume") && body.contains("false alarm"), "{body}");
}
