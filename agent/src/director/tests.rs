//! Following a director-key rotation through the state directory, crash and replay included.

use drover_proto::keys::{KeySigner, verifying_key_to_pem};
use drover_proto::rotation::{DirectorRotation, ROTATION_SCHEMA_VERSION};
use ed25519_dalek::SigningKey;

use super::*;

const VALID_FROM: i64 = 1_800_000_000;

fn at(secs: i64) -> Time {
    Time::from_unix(secs).expect("in range")
}

fn key(seed: u8) -> SigningKey {
    SigningKey::from_bytes(&[seed; 32])
}

fn rotation(old: &SigningKey, new: &SigningKey, valid_from: i64) -> Envelope {
    let statement = DirectorRotation {
        schema_version: ROTATION_SCHEMA_VERSION,
        new_key: verifying_key_to_pem(&new.verifying_key()).expect("pem"),
        valid_from: at(valid_from),
        previous_key_id: KeyId::of(&old.verifying_key()),
    };
    Envelope::seal(&statement, &[KeySigner::new(old.clone())]).expect("seal")
}

fn enrolled(old: &SigningKey) -> (tempfile::TempDir, StateDir) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let state = StateDir::open(&tmp.path().join("state")).expect("state");
    state.write_director_pub(&verifying_key_to_pem(&old.verifying_key()).expect("pem")).expect("director.pub");
    (tmp, state)
}

fn pinned(state: &StateDir) -> VerifyingKey {
    verifying_key_from_text(&String::from_utf8(state.read(DIRECTOR).expect("read")).expect("utf8")).expect("key")
}

#[test]
fn a_followed_rotation_survives_a_restart_and_is_promoted_once_due() {
    let (old, new) = (key(1), key(2));
    let (_tmp, state) = enrolled(&old);
    let before = at(VALID_FROM - 600);
    let mut keys = DirectorKeys::load(&state, before).expect("load");
    let followed = keys.follow(&state, &rotation(&old, &new, VALID_FROM), before).expect("follow");
    assert_eq!(followed, Followed::Stored { new_key_id: KeyId::of(&new.verifying_key()), valid_from: at(VALID_FROM) });
    assert!(!keys.promote_if_due(&state, at(VALID_FROM - 1)).expect("not yet"));
    assert_eq!(pinned(&state), old.verifying_key());

    // A restart during the overlap still knows the successor.
    let mut reloaded = DirectorKeys::load(&state, before).expect("reload");
    assert_eq!(reloaded.rotation().map(|r| r.new_key), Some(new.verifying_key()));
    assert!(reloaded.promote_if_due(&state, at(VALID_FROM)).expect("due"));
    assert_eq!(pinned(&state), new.verifying_key());
    assert!(reloaded.rotation().is_none());

    // After promotion the stored statement (and the coordinator's copy) names the pinned key
    // as successor: loading and following both ignore it.
    let after = at(VALID_FROM + 60);
    let mut promoted = DirectorKeys::load(&state, after).expect("load after promotion");
    assert!(promoted.rotation().is_none());
    assert_eq!(promoted.follow(&state, &rotation(&old, &new, VALID_FROM), after).expect("ignored"), Followed::Nothing);
}

#[test]
fn rotation_signed_by_an_unknown_key_leaves_no_trace() {
    let (old, new, attacker) = (key(1), key(2), key(9));
    let (_tmp, state) = enrolled(&old);
    let now = at(VALID_FROM - 600);
    let mut keys = DirectorKeys::load(&state, now).expect("load");
    // The attacker hands over from its own key, naming the pinned key as the one replaced.
    let mut env = rotation(&attacker, &new, VALID_FROM);
    env.signed["previousKeyId"] = serde_json::Value::String(KeyId::of(&old.verifying_key()).to_string());
    let e = keys.follow(&state, &env, now).expect_err("refused");
    assert!(matches!(e, DirectorError::Refused(RotationError::NotSignedByPinnedKey { .. })), "{e:?}");
    assert!(keys.rotation().is_none());
    assert!(!state.file(DIRECTOR_ROTATION).exists());
}

#[test]
fn replayed_older_rotation_does_not_replace_the_stored_one() {
    let (old, first, second) = (key(1), key(2), key(3));
    let (_tmp, state) = enrolled(&old);
    let now = at(VALID_FROM - 600);
    let mut keys = DirectorKeys::load(&state, now).expect("load");
    keys.follow(&state, &rotation(&old, &second, VALID_FROM + 60), now).expect("newer");
    let stored = state.read(DIRECTOR_ROTATION).expect("stored");
    assert_eq!(keys.follow(&state, &rotation(&old, &first, VALID_FROM), now).expect("replay"), Followed::Nothing);
    assert_eq!(state.read(DIRECTOR_ROTATION).expect("still stored"), stored);
    assert_eq!(keys.rotation().map(|r| r.new_key), Some(second.verifying_key()));
}

#[test]
fn a_tampered_stored_rotation_stops_loading() {
    let (old, new) = (key(1), key(2));
    let (_tmp, state) = enrolled(&old);
    let mut env = rotation(&old, &new, VALID_FROM);
    env.signed["validFrom"] = serde_json::Value::String("2020-01-01T00:00:00Z".to_owned());
    state.write_atomic(DIRECTOR_ROTATION, &serde_json::to_vec(&env).expect("json"), PUBLIC_MODE).expect("write");
    let e = DirectorKeys::load(&state, at(VALID_FROM - 600)).expect_err("tampered");
    assert!(matches!(e, StateError::Corrupt { .. }), "{e:?}");
}

#[test]
fn an_agent_offline_through_the_overlap_follows_on_its_first_check_in() {
    let (old, new) = (key(1), key(2));
    let (_tmp, state) = enrolled(&old);
    let late = at(VALID_FROM + 86_400);
    let mut keys = DirectorKeys::load(&state, late).expect("load");
    keys.follow(&state, &rotation(&old, &new, VALID_FROM), late).expect("follow late");
    assert!(keys.promote_if_due(&state, late).expect("promote"));
    assert_eq!(pinned(&state), new.verifying_key());
    assert!(keys.key_set().get(&KeyId::of(&new.verifying_key())).is_some());
    assert!(keys.key_set().get(&KeyId::of(&old.verifying_key())).is_none());
}
