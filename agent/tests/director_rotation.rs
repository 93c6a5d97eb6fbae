//! Director-key rotation through the real pull loop: the agent learns the successor from a
//! check-in, refuses it before `validFrom`, obeys it from then on, refuses the retired key and
//! pins the successor.

mod common;

use common::*;
use drover_agent::records::Records;
use drover_proto::keys::{KeyId, Signer as _, verifying_key_from_text, verifying_key_to_pem};
use drover_proto::report::{CheckinResponse, ReportEvent};
use drover_proto::rotation::{DirectorRotation, ROTATION_SCHEMA_VERSION};
use drover_proto::sig::Envelope;

const TASK_EARLY: &str = "5b0e9c1d-2a3f-4b6c-8d7e-0f1a2b3c4d5e";
const TASK_NEW: &str = "6c1f0d2e-3b4a-4c7d-9e8f-1a2b3c4d5e6f";
const TASK_OLD: &str = "7d2a1e3f-4c5b-4d8e-af9a-2b3c4d5e6f70";
const OVERLAP_SECS: u64 = 60;

fn answer(rotation: &Envelope, tasks: Vec<Envelope>) -> Vec<u8> {
    serde_json::to_vec(&CheckinResponse { intent: None, tasks, next_checkin_secs: 30, director_rotation: Some(rotation.clone()) })
        .expect("json")
}

/// Runs one pass answering `body`, then one more (whose check-in reports the first's refusals).
async fn deliver(h: &mut Harness, body: Vec<u8>) -> Vec<ReportEvent> {
    h.fake.push_checkin(Reply::ok(body));
    h.pass_ok().await;
    h.pass_ok().await;
    h.last_events()
}

fn refused(events: &[ReportEvent], id: &str) -> bool {
    events.iter().any(|e| matches!(e, ReportEvent::TaskRefused { task_id, reason } if task_id == id && reason.contains("KeyNotValidAt")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_switches_to_the_successor_key_at_valid_from() {
    let mut h = Harness::new().await;
    let successor = new_signer();
    let valid_from = h.t0.plus_secs(OVERLAP_SECS);
    let statement = DirectorRotation {
        schema_version: ROTATION_SCHEMA_VERSION,
        new_key: verifying_key_to_pem(&successor.verifying_key()).expect("pem"),
        valid_from,
        previous_key_id: h.director.key_id().clone(),
    };
    let rotation = seal(&statement, &h.director);

    // During the overlap a task signed by the successor is refused: a leaked new key buys nothing yet.
    let early = answer(&rotation, vec![seal(&task(TASK_EARLY, h.t0), &successor)]);
    let events = deliver(&mut h, early).await;
    assert!(refused(&events, TASK_EARLY), "{events:?}");
    assert!(!h.state.journal().expect("journal").contains(TASK_EARLY));

    // From validFrom on the successor commands the host and is pinned.
    h.clock.set(valid_from);
    let signed_by_successor = answer(&rotation, vec![seal(&task(TASK_NEW, valid_from), &successor)]);
    deliver(&mut h, signed_by_successor).await;
    assert!(h.state.journal().expect("journal").contains(TASK_NEW), "a task signed by the successor runs after validFrom");
    let pinned = String::from_utf8(h.state.read(drover_agent::state::DIRECTOR).expect("director.pub")).expect("utf8");
    assert_eq!(KeyId::of(&verifying_key_from_text(&pinned).expect("key")), *successor.key_id());

    // The retired key, even if stolen later, no longer commands the host.
    let retired = answer(&rotation, vec![seal(&task(TASK_OLD, valid_from), &h.director)]);
    let events = deliver(&mut h, retired).await;
    assert!(!h.state.journal().expect("journal").contains(TASK_OLD));
    assert!(events.iter().any(|e| matches!(e, ReportEvent::TaskRefused { task_id, .. } if task_id == TASK_OLD)), "{events:?}");
}
