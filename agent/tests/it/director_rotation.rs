//! Director-key rotation through the real pull loop: the agent learns the successor from a
//! check-in, refuses it before `validFrom`, obeys it from then on, refuses the retired key and
//! pins the successor.

use crate::common;

use common::*;
use drover_agent::records::Records;
use drover_proto::keys::{KeyId, KeySigner, Signer as _, verifying_key_from_text, verifying_key_to_pem};
use drover_proto::report::{CheckinResponse, ReportEvent};
use drover_proto::rotation::{DirectorRotation, ROTATION_SCHEMA_VERSION};
use drover_proto::sig::Envelope;
use drover_proto::time::Time;

const TASK_EARLY: &str = "5b0e9c1d-2a3f-4b6c-8d7e-0f1a2b3c4d5e";
const TASK_NEW: &str = "6c1f0d2e-3b4a-4c7d-9e8f-1a2b3c4d5e6f";
const TASK_OLD: &str = "7d2a1e3f-4c5b-4d8e-af9a-2b3c4d5e6f70";
const TASK_SECOND: &str = "8e3b2f40-5d6c-4e9f-b0ab-3c4d5e6f7081";
const TASK_FIRST: &str = "9f4c3051-6e7d-4fa0-81bc-4d5e6f708192";
const OVERLAP_SECS: u64 = 60;

fn answer(rotation: &Envelope, tasks: Vec<Envelope>) -> Vec<u8> {
    answer_chain(std::slice::from_ref(rotation), tasks)
}

fn answer_chain(rotations: &[Envelope], tasks: Vec<Envelope>) -> Vec<u8> {
    serde_json::to_vec(&CheckinResponse { intent: None, tasks, next_checkin_secs: 30, director_rotations: rotations.to_vec() })
        .expect("json")
}

/// A statement by `from` handing over to `to` at `valid_from`.
fn hand_over(from: &KeySigner, to: &KeySigner, valid_from: Time) -> Envelope {
    let statement = DirectorRotation {
        schema_version: ROTATION_SCHEMA_VERSION,
        new_key: verifying_key_to_pem(&to.verifying_key()).expect("pem"),
        valid_from,
        previous_key_id: from.key_id().clone(),
    };
    seal(&statement, from)
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_offline_through_two_rotations_walks_the_chain() {
    let mut h = Harness::new().await;
    let (first, second) = (new_signer(), new_signer());
    let first_at = h.t0.plus_secs(OVERLAP_SECS);
    let second_at = first_at.plus_secs(OVERLAP_SECS);
    let chain = [hand_over(&h.director, &first, first_at), hand_over(&first, &second, second_at)];

    // The agent comes back after both switches: it follows the first step, then the second,
    // and obeys only the last key.
    h.clock.set(second_at);
    let body = answer_chain(&chain, vec![seal(&task(TASK_SECOND, second_at), &second), seal(&task(TASK_FIRST, second_at), &first)]);
    let events = deliver(&mut h, body).await;
    let journal = h.state.journal().expect("journal");
    assert!(journal.contains(TASK_SECOND), "a task signed by the last key runs");
    assert!(!journal.contains(TASK_FIRST), "a task signed by the retired middle key does not");
    assert!(events.iter().any(|e| matches!(e, ReportEvent::TaskRefused { task_id, .. } if task_id == TASK_FIRST)), "{events:?}");
    let pinned = String::from_utf8(h.state.read(drover_agent::state::DIRECTOR).expect("director.pub")).expect("utf8");
    assert_eq!(KeyId::of(&verifying_key_from_text(&pinned).expect("key")), *second.key_id());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_whose_second_step_is_signed_by_an_unknown_key_stops_at_the_first() {
    let mut h = Harness::new().await;
    let (first, intruder, stolen_target) = (new_signer(), new_signer(), new_signer());
    let first_at = h.t0.plus_secs(OVERLAP_SECS);
    let forged_at = first_at.plus_secs(OVERLAP_SECS);
    // Claims to come from the first successor but is signed by someone else.
    let statement = DirectorRotation {
        schema_version: ROTATION_SCHEMA_VERSION,
        new_key: verifying_key_to_pem(&stolen_target.verifying_key()).expect("pem"),
        valid_from: forged_at,
        previous_key_id: first.key_id().clone(),
    };
    let chain = [hand_over(&h.director, &first, first_at), seal(&statement, &intruder)];
    h.clock.set(forged_at);
    let body = answer_chain(&chain, vec![seal(&task(TASK_SECOND, forged_at), &stolen_target)]);
    deliver(&mut h, body).await;
    assert!(!h.state.journal().expect("journal").contains(TASK_SECOND), "the forged step commands nothing");
    let pinned = String::from_utf8(h.state.read(drover_agent::state::DIRECTOR).expect("director.pub")).expect("utf8");
    assert_eq!(KeyId::of(&verifying_key_from_text(&pinned).expect("key")), *first.key_id(), "the genuine step is kept");
}
