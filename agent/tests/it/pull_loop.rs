//! The pull loop's own path against a scripted fake coordinator over real TLS 1.3: a valid
//! intent is activated once and reported; events outlive a failed check-in; and answers that
//! are too large or not what the route promises (a check-in answer, a rollout bundle) run
//! nothing and leave the loop working.

use crate::common;

use common::*;
use drover_agent::pull::PullError;
use drover_agent::records::Records;
use drover_client::ClientError;
use drover_proto::enroll::ProofBundle;
use drover_proto::report::{ActivationPhase, ReportEvent};
use std::time::Duration;

const INTENT_1: &str = "0d9a4c4e-2f7b-4e0c-8d53-8e3f0b6a7c21";

#[tokio::test]
async fn valid_intent_is_activated_once() {
    let mut h = Harness::new().await;
    let files = h.release();
    h.serve(&files);
    let intent = intent_for(&files, HOSTNAME, INTENT_1, h.t0);
    let expected_target = manifest(&files, &rollout_id()).host(HOSTNAME).expect("gpu-02").target_closure.clone();
    assert_eq!(intent.target_closure, expected_target);

    h.fake.push_checkin(Reply::ok(checkin_answer(Some(seal(&intent, &h.director)), Vec::new())));
    assert_eq!(h.pass_ok().await, Duration::from_secs(NEXT_CHECKIN_SECS));
    assert_eq!(h.host.targets(), vec![expected_target.clone()], "activated once, with the manifest's target for this host");
    let first = h.fake.checkin_bodies().remove(0);
    assert_eq!((first.known_intent_id, first.activation), (None, None));
    assert_eq!(first.current_generation.as_deref(), Some(CURRENT_GENERATION));
    assert_eq!(
        h.fake.lines(),
        vec!["POST /v1/agent/checkin HTTP/1.1".to_owned(), format!("GET /v1/rollouts/{}/proof HTTP/1.1", rollout_id())],
        "one check-in, one proof fetch"
    );

    // Records: the floor, the cache, the handled mark.
    let seen = h.state.seen().expect("seen");
    assert_eq!(seen.highest_timestamp_version, 1);
    assert_eq!(seen.last_intent_id.as_deref(), Some(INTENT_1));
    let cached = h.state.cached_root(&rollout_id()).expect("cache").expect("cached");
    assert_eq!(cached.sha256, sha256_hex(bundle(&files, &rollout_id()).root.as_bytes()));
    assert_eq!(cached.root, bundle(&files, &rollout_id()).root, "the exact bytes CI signed");

    // The next check-in reports the intent as known, with its activation status.
    h.pass_ok().await;
    let report = h.fake.last_checkin();
    assert_eq!(report.known_intent_id.as_deref(), Some(INTENT_1));
    let status = report.activation.expect("activation status");
    assert_eq!((status.intent_id.as_str(), status.phase), (INTENT_1, ActivationPhase::Confirmed));
    assert_eq!((status.rollout_id, status.target_closure), (rollout_id(), expected_target));
    assert!(report.events.is_empty(), "{:?}", report.events);
    assert_eq!(h.host.activation_count(), 1, "no intent in the answer: nothing more runs");
}

#[tokio::test]
async fn events_survive_a_failed_checkin() {
    let mut h = Harness::new().await;
    let files = h.release();
    h.serve(&files);
    // A refusal to report: an intent the director did not sign.
    let intent = intent_for(&files, HOSTNAME, INTENT_1, h.t0);
    h.fake.push_checkin(Reply::ok(checkin_answer(Some(seal(&intent, &new_signer())), Vec::new())));
    h.pass_ok().await;

    // The check-in carrying it fails (503): the pass errors, the event is kept.
    h.fake.push_checkin(Reply { status: 503, body: br#"{"error":{"code":"unavailable","message":"try later"}}"#.to_vec() });
    let e = h.agent.pass().await.expect_err("a 503 fails the pass");
    assert!(matches!(&e, PullError::Client(c) if c.status() == Some(503)), "{e:?}");
    let failed = h.fake.last_checkin();
    assert_eq!(failed.events.len(), 1, "the failed check-in carried it: {:?}", failed.events);

    h.pass_ok().await;
    let events = h.last_events();
    assert_eq!(assert_refusal(&events, false, "UnknownKey"), "intent");
    assert_eq!(events, failed.events, "the same event, once");

    // Delivered: the check-in after that carries nothing.
    h.pass_ok().await;
    assert!(h.last_events().is_empty(), "{:?}", h.last_events());
    assert_eq!(h.host.activation_count(), 0);
}

#[tokio::test]
async fn oversized_checkin_response_is_refused() {
    let mut h = Harness::new().await;
    let files = h.release();
    h.serve(&files);
    // A valid answer with a valid intent, padded past the client's limit with whitespace.
    let mut body = checkin_answer(Some(seal(&intent_for(&files, HOSTNAME, INTENT_1, h.t0), &h.director)), Vec::new());
    body.resize(drover_client::MAX_RESPONSE_BYTES + 1, b' ');
    h.fake.push_checkin(Reply::ok(body));
    let e = h.agent.pass().await.expect_err("too large");
    assert!(matches!(&e, PullError::Client(ClientError::TooLarge { .. })), "{e:?}");
    assert_eq!(h.host.activation_count(), 0, "nothing runs");
    assert_eq!(h.fake.lines().len(), 1, "no bundle fetched: {:?}", h.fake.lines());
    assert_eq!(h.state.seen().expect("seen").last_intent_id, None);

    // The next good pass works and acts on what it is given.
    h.fake.push_checkin(Reply::ok(checkin_answer(Some(seal(&intent_for(&files, HOSTNAME, INTENT_1, h.t0), &h.director)), Vec::new())));
    h.pass_ok().await;
    assert_eq!(h.host.activation_count(), 1);
}

#[tokio::test]
async fn malformed_checkin_response_is_refused() {
    let mut h = Harness::new().await;
    let files = h.release();
    h.serve(&files);
    let intent = serde_json::to_value(seal(&intent_for(&files, HOSTNAME, INTENT_1, h.t0), &h.director)).expect("json");
    let cases: Vec<Vec<u8>> = vec![
        b"<html>not json</html>".to_vec(),
        br#"{"nextCheckinSecs":30"#.to_vec(),
        br#"{"intent":5,"nextCheckinSecs":30}"#.to_vec(),
        // A field the protocol does not have, next to a valid intent.
        serde_json::to_vec(&serde_json::json!({"intent": intent, "nextCheckinSecs": 30, "run": "rm -rf /"})).expect("json"),
        // Two documents.
        format!("{} {{}}", serde_json::json!({"intent": intent, "nextCheckinSecs": 30})).into_bytes(),
        // The intent's signed object with a duplicate key (parsers disagree on which wins).
        br#"{"intent":{"signed":{"a":1,"a":2},"signatures":[]},"nextCheckinSecs":30}"#.to_vec(),
    ];
    for body in cases {
        h.fake.push_checkin(Reply::ok(body.clone()));
        let e = h.agent.pass().await.expect_err("malformed answer");
        assert!(matches!(&e, PullError::Client(ClientError::Decode { .. })), "{}: {e:?}", String::from_utf8_lossy(&body));
    }
    assert_eq!(h.host.activation_count(), 0, "nothing runs");
    assert!(h.fake.lines().iter().all(|l| l.starts_with("POST /v1/agent/checkin ")), "no bundle fetched: {:?}", h.fake.lines());

    // The loop still works.
    h.pass_ok().await;
    assert!(h.last_events().is_empty());
}

#[tokio::test]
async fn malformed_bundle_is_refused() {
    let mut h = Harness::new().await;
    let files = h.release();
    let good = bundle(&files, &rollout_id());
    let id = rollout_id().to_string();
    let fetch = format!("rollouts/{id}/proof");
    let root_file = format!("roots/{id}.json");
    let cases: Vec<(Reply, &str, &str)> = vec![
        // Not a bundle at all: the fetch itself fails (and is not retried as transient).
        (Reply::ok(br#"{"root":1}"#.to_vec()), &fetch, "unexpected response"),
        (Reply::ok(b"\x00\xff garbage".to_vec()), &fetch, "unexpected response"),
        // A bundle whose root is not canonical JSON (re-serialised with spaces).
        (
            Reply::json(&ProofBundle {
                root: serde_json::to_string_pretty(&serde_json::from_str::<serde_json::Value>(&good.root).expect("json")).expect("json"),
                ..good.clone()
            }),
            &root_file,
            "NotCanonical:",
        ),
        // A bundle whose timestamp is not JSON.
        (Reply::json(&ProofBundle { timestamp: "{".to_owned(), ..good.clone() }), "timestamp.json", "NotCanonical:"),
    ];
    for (i, (reply, expected_artifact, reason_start)) in cases.into_iter().enumerate() {
        h.fake.route(&bundle_path(&id), reply);
        let intent_id = format!("0d9a4c4e-2f7b-4e0c-8d53-8e3f0b6a7c{i:02}");
        let events = h.deliver_intent(seal(&intent_for(&files, HOSTNAME, &intent_id, h.t0), &h.director)).await;
        match events.as_slice() {
            [ReportEvent::VerificationFailed { artifact, reason }] => {
                assert_eq!(artifact, expected_artifact, "case {i}");
                assert!(reason.contains(reason_start), "case {i}: expected {reason_start:?} in {reason:?}");
            }
            other => panic!("case {i}: expected one VerificationFailed, got {other:?}"),
        }
        assert_eq!(h.state.seen().expect("seen").last_intent_id.as_deref(), Some(intent_id.as_str()), "handled (refused), not retried");
    }
    assert_eq!(h.host.activation_count(), 0, "nothing runs");
    assert!(h.state.cached_root(&rollout_id()).expect("cache").is_none());
}

/// An intent re-sent inside its window (the real coordinator never re-sends a known intent; a
/// hostile one can) is recognised as already handled and not acted on again.
#[tokio::test]
async fn replayed_intent_is_not_activated_twice() {
    let mut h = Harness::new().await;
    let files = h.release();
    h.serve(&files);
    let env = seal(&intent_for(&files, HOSTNAME, INTENT_1, h.t0), &h.director);
    h.fake.push_checkin(Reply::ok(checkin_answer(Some(env.clone()), Vec::new())));
    h.pass_ok().await;
    assert_eq!(h.host.activation_count(), 1);
    // The coordinator sends the intent the agent reported as known once more (a replay of its
    // own answer, still inside the intent's window).
    h.clock.set(h.t0.plus_secs(60));
    h.fake.push_checkin(Reply::ok(checkin_answer(Some(env), Vec::new())));
    h.pass_ok().await;
    assert_eq!(h.fake.last_checkin().known_intent_id.as_deref(), Some(INTENT_1));
    assert_eq!(h.host.activation_count(), 1, "an intent already handled is not acted on again");
}

/// A coordinator restored from a backup older than this host's enrollment answers every
/// check-in `403 host_unknown_reenroll`: the loop recognises it from the answer (so it says
/// so once and asks again in minutes, not at the backoff's pace), and runs nothing meanwhile.
#[tokio::test]
async fn a_coordinator_that_has_no_record_of_this_host_is_recognised_from_its_answer() {
    let mut h = Harness::new().await;
    let body = serde_json::json!({ "error": {
        "code": drover_proto::report::HOST_UNKNOWN_REENROLL,
        "message": format!("this coordinator has no record of host {HOST_ID} ({HOSTNAME}): enroll it again"),
    } });
    let mut watch = drover_agent::host_unknown::HostUnknown::default();
    for _ in 0..2 {
        h.fake.push_checkin(Reply { status: 403, body: serde_json::to_vec(&body).expect("json") });
        let e = h.agent.pass().await.expect_err("refused");
        assert!(drover_agent::host_unknown::recognise(&e).is_some_and(|m| m.contains(HOST_ID)), "{e:?}");
        let wait = watch.failed(&e, 0.5).expect("recognised");
        assert!(wait >= Duration::from_secs(240), "asks again in minutes: {wait:?}");
    }
    assert!(watch.is_unknown());
    assert_eq!(h.host.activation_count(), 0);

    // Any other refusal keeps the usual backoff.
    h.fake.push_checkin(Reply { status: 404, body: br#"{"error":{"code":"not_found","message":"host"}}"#.to_vec() });
    let e = h.agent.pass().await.expect_err("refused");
    assert_eq!(drover_agent::host_unknown::recognise(&e), None);
    assert_eq!(watch.failed(&e, 0.5), None);
}
