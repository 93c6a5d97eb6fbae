//! Rotating the director key in a state directory, and which key signs when.

use drover_proto::rotation::{RotationDecision, decide};

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
    let env = director.rotation().expect("served");
    let decision = decide(env, &current.verifying_key(), None, at(NOW)).expect("valid");
    assert!(matches!(decision, RotationDecision::Adopt(ref v) if v.new_key == next), "{decision:?}");
}

#[test]
fn a_second_rotation_while_one_is_in_place_is_refused() {
    let (tmp, current) = dir_with(&SigningKey::from_bytes(&[1; 32]));
    rotate(tmp.path(), &current, at(NOW), 60).expect("first");
    let e = rotate(tmp.path(), &current, at(NOW + 120), 60).expect_err("second");
    assert!(matches!(e, DirectorError::AlreadyRotating { .. }), "{e:?}");
}

#[test]
fn a_swapped_successor_key_file_stops_serve() {
    // Whoever can replace director-next.key must not get it used under a statement naming
    // another key.
    let (tmp, current) = dir_with(&SigningKey::from_bytes(&[1; 32]));
    rotate(tmp.path(), &current, at(NOW), 60).expect("rotate");
    let intruder = keys::signing_key_to_pem(&SigningKey::from_bytes(&[9; 32])).expect("pem");
    drover_fsio::write_atomic(&tmp.path().join(DIRECTOR_NEXT_KEY_FILE), intruder.as_bytes(), 0o600, Mode::Replace).expect("swap");
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
    drover_fsio::write_atomic(&tmp.path().join(DIRECTOR_NEXT_KEY_FILE), spare.as_bytes(), 0o600, Mode::Replace).expect("spare");
    let director = Director::load(tmp.path(), current.clone()).expect("load");
    assert!(director.rotation().is_none());
    assert_eq!(director.signing_key(at(NOW + 1_000_000)).verifying_key(), current.verifying_key());
    rotate(tmp.path(), &current, at(NOW), 60).expect("a later rotation replaces the spare");
    Director::load(tmp.path(), current).expect("consistent");
}
