//! Rotating the director key in a state directory, and which key signs when.

use drover_proto::rotation::{RotationDecision, decide};

use crate::state_dir::StateDirError;

use super::*;

const NOW: i64 = 1_800_000_000;

fn at(secs: i64) -> Time {
    Time::from_unix(secs).expect("in range")
}

fn dir_with(current: &SigningKey) -> (tempfile::TempDir, SigningKey) {
    (tempfile::tempdir().expect("tempdir"), current.clone())
}

#[test]
fn the_successor_signs_from_valid_from_and_agents_can_follow_the_statement() {
    let (tmp, current) = dir_with(&SigningKey::from_bytes(&[1; 32]));
    let rotated = rotate(tmp.path(), &current, at(NOW), 3600).expect("rotate");
    assert_eq!(rotated.valid_from, at(NOW + 3600));
    let director = Director::load(tmp.path(), current.clone()).expect("load");
    assert_eq!(director.signing_key(at(NOW + 3599)).verifying_key(), current.verifying_key());
    let next = director.signing_key(at(NOW + 3600)).verifying_key();
    assert_eq!(KeyId::of(&next), rotated.new_key_id);
    // What serve hands out is what an agent pinned to the current key adopts.
    let served = director.rotations();
    assert_eq!(served.len(), 1);
    let decision = decide(&served[0], &current.verifying_key(), None, at(NOW)).expect("valid");
    assert!(matches!(decision, RotationDecision::Adopt(ref v) if v.new_key == next), "{decision:?}");
}

#[test]
fn a_second_rotation_during_the_overlap_of_the_first_is_refused() {
    let (tmp, current) = dir_with(&SigningKey::from_bytes(&[1; 32]));
    rotate(tmp.path(), &current, at(NOW), 60).expect("first");
    let e = rotate(tmp.path(), &current, at(NOW + 59), 60).expect_err("second");
    assert!(matches!(e, DirectorError::AlreadyRotating { .. }), "{e:?}");
}

#[test]
fn a_swapped_successor_key_file_stops_serve() {
    // Whoever can replace director-next.key must not get it used under a statement naming
    // another key.
    let (tmp, current) = dir_with(&SigningKey::from_bytes(&[1; 32]));
    rotate(tmp.path(), &current, at(NOW), 60).expect("rotate");
    let intruder = keys::signing_key_to_pem(&SigningKey::from_bytes(&[9; 32])).expect("pem");
    drover_fsio::write_atomic(&tmp.path().join(DIRECTOR_ROTATIONS_DIR).join("1.key"), intruder.as_bytes(), 0o600, Mode::Replace)
        .expect("swap");
    let e = Director::load(tmp.path(), current).expect_err("mismatch");
    assert!(matches!(e, DirectorError::NextKeyMismatch { .. }), "{e:?}");
}

#[test]
fn a_statement_signed_by_another_key_stops_serve() {
    let (tmp, current) = dir_with(&SigningKey::from_bytes(&[1; 32]));
    rotate(tmp.path(), &SigningKey::from_bytes(&[7; 32]), at(NOW), 60).expect("rotate under another key");
    let e = Director::load(tmp.path(), current).expect_err("foreign statement");
    assert!(matches!(e, DirectorError::BadRotation { .. }), "{e:?}");
}

#[test]
fn a_successor_key_left_by_an_interrupted_rotation_is_unused() {
    let (tmp, current) = dir_with(&SigningKey::from_bytes(&[1; 32]));
    let spare = keys::signing_key_to_pem(&SigningKey::from_bytes(&[9; 32])).expect("pem");
    drover_fsio::write_atomic(&tmp.path().join(DIRECTOR_ROTATIONS_DIR).join("1.key"), spare.as_bytes(), 0o600, Mode::Replace)
        .expect("spare");
    let director = Director::load(tmp.path(), current.clone()).expect("load");
    assert!(director.rotations().is_empty());
    assert_eq!(director.signing_key(at(NOW + 1_000_000)).verifying_key(), current.verifying_key());
    rotate(tmp.path(), &current, at(NOW), 60).expect("a later rotation replaces the spare");
    Director::load(tmp.path(), current).expect("consistent");
}

#[test]
fn rotations_chain_each_signed_by_the_key_before_and_an_agent_walks_them() {
    let (tmp, initial) = dir_with(&SigningKey::from_bytes(&[1; 32]));
    let first = rotate(tmp.path(), &initial, at(NOW), 60).expect("first");
    let second = rotate(tmp.path(), &initial, at(NOW + 60), 60).expect("second, once the first is due");
    assert_eq!((first.step, second.step), (1, 2));
    assert_eq!(second.previous_key_id, first.new_key_id, "the second step is signed by the first successor");
    let director = Director::load(tmp.path(), initial.clone()).expect("load");
    let keys = chain_keys(&director);
    assert_eq!(keys.len(), 3);
    assert_eq!(director.signing_key(at(NOW + 59)).verifying_key(), keys[0]);
    assert_eq!(director.signing_key(at(NOW + 60)).verifying_key(), keys[1]);
    assert_eq!(director.signing_key(at(NOW + 120)).verifying_key(), keys[2]);

    // An agent pinned to director.key and offline through both overlaps walks the chain.
    let mut pinned = initial.verifying_key();
    for env in director.rotations() {
        let RotationDecision::Adopt(step) = decide(&env, &pinned, None, at(NOW + 500)).expect("valid step") else { panic!("step ignored") };
        pinned = step.new_key;
    }
    assert_eq!(pinned, keys[2]);
}

#[test]
fn only_the_latest_statements_are_served() {
    let (tmp, initial) = dir_with(&SigningKey::from_bytes(&[1; 32]));
    let steps = MAX_SERVED_ROTATIONS + 2;
    let mut last = None;
    for i in 0..steps {
        last = Some(rotate(tmp.path(), &initial, at(NOW + 60 * i as i64), 60).expect("rotate"));
    }
    let director = Director::load(tmp.path(), initial).expect("load");
    let served = director.rotations();
    assert_eq!(served.len(), MAX_SERVED_ROTATIONS);
    let newest: DirectorRotation = served.last().expect("one").payload().expect("statement");
    assert_eq!(newest.valid_from, last.expect("rotated").valid_from);
}

#[test]
fn a_statement_lost_from_the_middle_of_the_chain_stops_serve() {
    // A later step cannot be vouched for without the one before it, and signing with an
    // earlier key would sign with one the agents no longer trust.
    let (tmp, initial) = dir_with(&SigningKey::from_bytes(&[1; 32]));
    rotate(tmp.path(), &initial, at(NOW), 60).expect("first");
    rotate(tmp.path(), &initial, at(NOW + 60), 60).expect("second");
    std::fs::remove_file(tmp.path().join(DIRECTOR_ROTATIONS_DIR).join("1.json")).expect("remove");
    let e = Director::load(tmp.path(), initial).expect_err("gap");
    assert!(matches!(e, DirectorError::State(StateDirError::Missing { .. })), "{e:?}");
}
