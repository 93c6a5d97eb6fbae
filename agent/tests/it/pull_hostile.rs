//! The pull loop against a hostile coordinator: each test plays one attack through the real
//! loop (real TLS 1.3 to a scripted fake coordinator, real CI-signed releases, director-signed
//! intents and tasks) and asserts that (a) the refusal reaches the coordinator as a typed
//! event in the **next** check-in, naming the broken rule, and (b) nothing was activated.

use crate::common;

use common::*;
use drover_agent::records::Records;
use drover_proto::intent::Intent;
use drover_proto::names::RolloutId;
use drover_proto::report::{ReportEvent, TaskOutcome};

const INTENT_1: &str = "0d9a4c4e-2f7b-4e0c-8d53-8e3f0b6a7c21";
const INTENT_2: &str = "7a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";
const TASK_1: &str = "3e6f1a0b-7c2d-4e9f-b8a1-2c3d4e5f6a7b";

/// Delivers `intent` sealed by the director against `files`' bundle; returns the next report's
/// events after asserting that nothing was activated.
async fn refused_intent(h: &mut Harness, intent: &Intent) -> Vec<ReportEvent> {
    let env = seal(intent, &h.director);
    let events = h.deliver_intent(env).await;
    assert_eq!(h.host.activation_count(), 0, "nothing may be activated");
    events
}

#[tokio::test]
async fn bad_root_signature_is_refused() {
    let mut h = Harness::new().await;
    let files = h.release();
    // A real CI signature by a trusted key, over other bytes (the timestamp's).
    let mut b = bundle(&files, &rollout_id());
    b.root_sig = b.timestamp_sig.clone();
    h.fake.serve_bundle(rollout_id().as_str(), &b);
    let intent = intent_for(&files, HOSTNAME, INTENT_1, h.t0);
    let events = refused_intent(&mut h, &intent).await;
    let artifact = assert_refusal(&events, false, "BadSignature");
    assert_eq!(artifact, format!("roots/{}.json", rollout_id()));
    assert!(h.state.cached_root(&rollout_id()).expect("cache").is_none(), "an unverified root is never cached");
}

#[tokio::test]
async fn bad_intent_signature_is_refused() {
    let mut h = Harness::new().await;
    let files = h.release();
    h.serve(&files);
    let intent = intent_for(&files, HOSTNAME, INTENT_1, h.t0);
    // Signed by a key other than the director's: CI's own key is no better than a stranger's.
    let stranger = new_signer();
    for env in [seal(&intent, &stranger), seal(&intent, &h.ci)] {
        let events = h.deliver_intent(env).await;
        assert_eq!(assert_refusal(&events, false, "UnknownKey"), "intent");
    }
    // Signed by the director, then altered: the signature no longer holds.
    let mut env = seal(&intent, &h.director);
    env.signed["targetClosure"] = serde_json::json!("/nix/store/55555555555555555555555555555555-nixos-system-evil");
    let events = h.deliver_intent(env).await;
    assert_eq!(assert_refusal(&events, false, "BadSignature"), "intent");
    assert_eq!(h.host.activation_count(), 0, "nothing may be activated");
}

#[tokio::test]
async fn stale_timestamp_is_refused() {
    let mut h = Harness::new().await;
    let files = h.release();
    h.serve(&files);
    // A day and a minute later (the channel's window is a day), with a fresh intent.
    let later = h.t0.plus_secs(86_400 + 60);
    h.clock.set(later);
    let events = refused_intent(&mut h, &intent_for(&files, HOSTNAME, INTENT_1, later)).await;
    assert_eq!(assert_refusal(&events, false, "Stale"), "timestamp.json");
}

#[tokio::test]
async fn future_dated_timestamp_is_refused() {
    let mut h = Harness::new().await;
    // Signed an hour ahead of the agent's clock (the tolerated skew is minutes).
    let files = release(h.t0.plus_secs(3600), 1, &h.ci);
    h.serve(&files);
    let intent = intent_for(&files, HOSTNAME, INTENT_1, h.t0);
    let events = refused_intent(&mut h, &intent).await;
    assert_eq!(assert_refusal(&events, false, "FutureDated"), "timestamp.json");
}

#[tokio::test]
async fn lower_timestamp_version_is_refused() {
    let mut h = Harness::new().await;
    let v2 = release(h.t0, 2, &h.ci);
    h.serve(&v2);
    let events = h.deliver_intent(seal(&intent_for(&v2, HOSTNAME, INTENT_1, h.t0), &h.director)).await;
    assert!(events.is_empty(), "version 2 is accepted: {events:?}");
    assert_eq!(h.host.activation_count(), 1);
    assert_eq!(h.state.seen().expect("seen").highest_timestamp_version, 2);

    // The same manifest under an older (validly signed, still fresh) timestamp.
    let v1 = release(h.t0, 1, &h.ci);
    h.serve(&v1);
    let events = h.deliver_intent(seal(&intent_for(&v1, HOSTNAME, INTENT_2, h.t0), &h.director)).await;
    assert_eq!(assert_refusal(&events, false, "VersionRollback"), "timestamp.json");
    assert_eq!(h.host.activation_count(), 1, "the rolled-back timestamp activates nothing");
    assert_eq!(h.state.seen().expect("seen").highest_timestamp_version, 2, "the floor stays");
}

#[tokio::test]
async fn expired_intent_is_refused() {
    let mut h = Harness::new().await;
    let files = h.release();
    h.serve(&files);
    h.clock.set(h.t0.plus_secs(120));
    let intent = Intent { expires_at: h.t0.plus_secs(60), ..intent_for(&files, HOSTNAME, INTENT_1, h.t0) };
    let events = refused_intent(&mut h, &intent).await;
    assert_eq!(assert_refusal(&events, false, "Expired"), "intent");
}

#[tokio::test]
async fn host_not_in_manifest_is_refused() {
    // The agent is gpu-03, which the manifest does not list; the director sends it an intent
    // anyway (with a validly CI-signed target of another host), and the only proof there is
    // to serve is another host's: genuine under the root, refused as not this host's.
    let mut h = Harness::named("gpu-03").await;
    let files = h.release();
    h.serve(&files);
    let intent = Intent { hostname: "gpu-03".to_owned(), ..intent_for(&files, HOSTNAME, INTENT_1, h.t0) };
    let events = refused_intent(&mut h, &intent).await;
    assert_eq!(assert_refusal(&events, true, "WrongHost"), rollout_id().as_str());
}

#[tokio::test]
async fn proof_for_another_host_is_refused() {
    // gpu-01's genuine entry and audit path, served to gpu-02 with an intent that claims
    // gpu-01's wave and target for gpu-02.
    let mut h = Harness::new().await;
    let files = h.release();
    h.fake.serve_bundle(rollout_id().as_str(), &bundle_for(&files, &rollout_id(), "gpu-01"));
    let theirs = intent_for(&files, "gpu-01", INTENT_1, h.t0);
    let intent = Intent { hostname: HOSTNAME.to_owned(), ..theirs };
    let events = refused_intent(&mut h, &intent).await;
    assert_eq!(assert_refusal(&events, true, "WrongHost"), rollout_id().as_str());
    assert!(h.state.cached_root(&rollout_id()).expect("cache").is_none());
}

#[tokio::test]
async fn proof_with_the_leaf_moved_to_another_wave_is_refused() {
    // A coordinator holding the director key moves gpu-02 into the canary wave: it edits the
    // leaf it serves and signs an intent to match. The leaf no longer hashes to the CI root.
    let mut h = Harness::new().await;
    let files = h.release();
    let mut b = bundle(&files, &rollout_id());
    b.proof.entry.wave_index = 0;
    h.fake.serve_bundle(rollout_id().as_str(), &b);
    let intent = Intent { wave_index: 0, ..intent_for(&files, HOSTNAME, INTENT_1, h.t0) };
    let events = refused_intent(&mut h, &intent).await;
    assert_eq!(assert_refusal(&events, true, "ProofInvalid"), rollout_id().as_str());
}

#[tokio::test]
async fn truncated_proof_is_refused() {
    let mut h = Harness::new().await;
    let files = h.release();
    let mut b = bundle(&files, &rollout_id());
    b.proof.path.pop();
    h.fake.serve_bundle(rollout_id().as_str(), &b);
    let intent = intent_for(&files, HOSTNAME, INTENT_1, h.t0);
    let events = refused_intent(&mut h, &intent).await;
    assert_eq!(assert_refusal(&events, true, "ProofInvalid"), rollout_id().as_str());
}

#[tokio::test]
async fn target_mismatch_is_refused() {
    let mut h = Harness::new().await;
    let files = h.release();
    h.serve(&files);
    let m = manifest(&files, &rollout_id());
    for target in [
        "/nix/store/55555555555555555555555555555555-nixos-system-evil".to_owned(),
        // gpu-01's (validly CI-signed) target is still not gpu-02's.
        m.host("gpu-01").expect("gpu-01").target_closure.clone(),
    ] {
        let intent = Intent { target_closure: target, ..intent_for(&files, HOSTNAME, INTENT_1, h.t0) };
        let events = refused_intent(&mut h, &intent).await;
        assert_eq!(assert_refusal(&events, true, "TargetMismatch"), rollout_id().as_str());
    }
}

#[tokio::test]
async fn wave_mismatch_is_refused() {
    let mut h = Harness::new().await;
    let files = h.release();
    h.serve(&files);
    // gpu-02 is in wave 1; the director claims wave 0 (the canary wave) to jump the queue.
    let intent = Intent { wave_index: 0, ..intent_for(&files, HOSTNAME, INTENT_1, h.t0) };
    let events = refused_intent(&mut h, &intent).await;
    assert_eq!(assert_refusal(&events, true, "WaveMismatch"), rollout_id().as_str());
}

#[tokio::test]
async fn root_served_under_another_rollout_id_is_refused() {
    let mut h = Harness::new().await;
    let files = h.release();
    // The intent names `stable@elsewhere`; the coordinator serves stable@c0ffee1's root and
    // proof (and a fresh timestamp) under that id.
    let elsewhere = RolloutId::new("stable", "elsewhere").expect("id");
    h.fake.serve_bundle(elsewhere.as_str(), &bundle(&files, &rollout_id()));
    let intent = Intent { rollout_id: elsewhere.clone(), ..intent_for(&files, HOSTNAME, INTENT_1, h.t0) };
    let events = refused_intent(&mut h, &intent).await;
    assert_eq!(assert_refusal(&events, true, "RolloutIdMismatch"), elsewhere.as_str());
    assert!(h.fake.lines().contains(&format!("GET /v1/rollouts/{elsewhere}/proof HTTP/1.1")), "{:?}", h.fake.lines());
    assert!(h.state.cached_root(&elsewhere).expect("cache").is_none());
}

#[tokio::test]
async fn cached_root_with_other_bytes_is_refused() {
    let mut h = Harness::new().await;
    let files = h.release();
    h.serve(&files);
    let events = h.deliver_intent(seal(&intent_for(&files, HOSTNAME, INTENT_1, h.t0), &h.director)).await;
    assert!(events.is_empty(), "the first root is accepted: {events:?}");
    assert_eq!(h.host.activation_count(), 1);
    let cached = h.state.cached_root(&rollout_id()).expect("cache").expect("cached");

    // Later, a validly CI-signed release puts other bytes (another target) under the same id.
    let mut spec = small_spec_json();
    spec["hosts"]["gpu-02"]["closure"] = serde_json::json!("/nix/store/ffffffffffffffffffffffffffffffff-nixos-system-gpu-02");
    let other = release_of(&spec, h.t0.plus_secs(60), 2, &h.ci);
    h.clock.set(h.t0.plus_secs(120));
    h.serve(&other);
    let intent = intent_for(&other, HOSTNAME, INTENT_2, h.t0.plus_secs(120));
    assert_ne!(sha256_hex(bundle(&other, &rollout_id()).root.as_bytes()), cached.sha256);
    let events = h.deliver_intent(seal(&intent, &h.director)).await;
    assert_eq!(assert_refusal(&events, true, "RootChanged"), rollout_id().as_str());
    assert_eq!(h.host.activation_count(), 1, "the changed root activates nothing");
    assert_eq!(h.state.cached_root(&rollout_id()).expect("cache"), Some(cached), "the cache keeps the first bytes");
}

#[tokio::test]
async fn intent_for_another_host_is_refused() {
    let mut h = Harness::new().await;
    let files = h.release();
    h.serve(&files);
    let mine = intent_for(&files, HOSTNAME, INTENT_1, h.t0);
    // Addressed to another host id.
    let events = refused_intent(&mut h, &Intent { host_id: OTHER_HOST_ID.to_owned(), ..mine.clone() }).await;
    assert_eq!(assert_refusal(&events, true, "WrongHost"), rollout_id().as_str());
    // Our id, but gpu-01's entry (its wave and its validly signed target).
    let borrowed = Intent { host_id: HOST_ID.to_owned(), ..intent_for(&files, "gpu-01", INTENT_2, h.t0) };
    let events = refused_intent(&mut h, &borrowed).await;
    assert_eq!(assert_refusal(&events, true, "WrongHost"), rollout_id().as_str());
}

/// Passes until a check-in carries a task result; returns that check-in.
async fn until_a_result_is_reported(h: &mut Harness) -> drover_proto::report::CheckinRequest {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        h.pass_ok().await;
        let report = h.fake.last_checkin();
        if !report.task_results.is_empty() {
            return report;
        }
        assert!(std::time::Instant::now() < deadline, "the task's result was never reported");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// The one event of the latest check-in: a `TaskRefused` of `TASK_1`; returns its reason.
fn refused_task_1(h: &Harness) -> String {
    let report = h.fake.last_checkin();
    assert!(report.task_results.is_empty(), "a refused task produces no result: {:?}", report.task_results);
    match report.events.as_slice() {
        [ReportEvent::TaskRefused { task_id, reason }] if task_id == TASK_1 => reason.clone(),
        other => panic!("expected one TaskRefused of {TASK_1}, got {other:?}"),
    }
}

/// A coordinator restored from a backup older than a task's result hands the task out again
/// (or someone replays its answer): the agent answers with the result it recorded — the same
/// result, in the next check-in — and never runs the task again. Once the result is older
/// than the window kept, the same task is refused as a replay, as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_already_run_is_answered_with_its_recorded_result_not_run_again() {
    let mut h = Harness::new().await;
    let env = seal(&task(TASK_1, h.t0), &h.director);
    h.fake.push_checkin(Reply::ok(checkin_answer(None, vec![env.clone()])));
    h.pass_ok().await;
    let journal = h.state.journal().expect("journal");
    assert!(journal.contains(TASK_1), "the first delivery lands in the journal before it runs");

    // The task runs beside the loop; its result goes with the first check-in after it ends.
    let report = until_a_result_is_reported(&mut h).await;
    assert_eq!(report.task_results.len(), 1, "{:?}", report.task_results);
    let first = report.task_results[0].clone();
    assert_eq!((first.task_id.as_str(), first.outcome), (TASK_1, TaskOutcome::Succeeded));
    assert!(report.events.is_empty(), "{:?}", report.events);
    h.pass_ok().await;
    assert!(h.fake.last_checkin().task_results.is_empty(), "acknowledged: not sent again");

    // The same envelope, handed out again: answered with the recorded result, not run.
    h.fake.push_checkin(Reply::ok(checkin_answer(None, vec![env.clone()])));
    h.pass_ok().await;
    h.pass_ok().await;
    let report = h.fake.last_checkin();
    assert_eq!(report.task_results, std::slice::from_ref(&first), "the same result, once more");
    assert!(report.events.is_empty(), "answered, not refused: {:?}", report.events);
    h.pass_ok().await;
    assert!(h.fake.last_checkin().task_results.is_empty(), "acknowledged again");
    assert_eq!(h.host.tasks.lock().expect("lock").len(), 1, "the task ran exactly once");

    // Older than the window kept (its record gone): refused as a replay, still not run.
    std::fs::remove_file(h.state.file(drover_agent::recorded::RESULTS)).expect("rm results.json");
    h.fake.push_checkin(Reply::ok(checkin_answer(None, vec![env])));
    h.pass_ok().await;
    h.pass_ok().await;
    assert!(refused_task_1(&h).starts_with("Replayed:"));
    assert_eq!(h.state.journal().expect("journal").tasks.len(), 1);
    assert_eq!(h.host.tasks.lock().expect("lock").len(), 1, "the task ran exactly once");
    assert_eq!(h.host.activation_count(), 0);
}

/// A task id already run is answered only for a task that verifies again as a new one would:
/// the same id signed by another key, or addressed to another host, or expired, is refused
/// with its rule and gets no result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_task_id_that_no_longer_verifies_is_refused_not_answered() {
    let mut h = Harness::new().await;
    h.fake.push_checkin(Reply::ok(checkin_answer(None, vec![seal(&task(TASK_1, h.t0), &h.director)])));
    h.pass_ok().await;
    until_a_result_is_reported(&mut h).await;
    h.pass_ok().await;

    let forged = seal(&task(TASK_1, h.t0), &new_signer());
    let foreign = seal(&drover_proto::task::Task { host_id: OTHER_HOST_ID.to_owned(), ..task(TASK_1, h.t0) }, &h.director);
    let an_hour_ago = drover_proto::time::Time::from_unix(h.t0.unix() - 3600).expect("time");
    let expired = seal(&task(TASK_1, an_hour_ago), &h.director);
    for (env, rule) in [(forged, "UnknownKey"), (foreign, "WrongHost"), (expired, "Expired")] {
        h.fake.push_checkin(Reply::ok(checkin_answer(None, vec![env])));
        h.pass_ok().await;
        h.pass_ok().await;
        let reason = refused_task_1(&h);
        assert!(reason.starts_with(rule), "expected {rule}, got {reason}");
    }
    assert_eq!(h.host.tasks.lock().expect("lock").len(), 1, "the task ran exactly once");
}
