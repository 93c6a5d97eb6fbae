//! Attack tests for director-key rotation statements and the key windows around them.

use ed25519_dalek::SigningKey;

use super::*;
use crate::keys::{KeySigner, verifying_key_to_pem};
use crate::task::Task;

fn key(seed: u8) -> SigningKey {
    SigningKey::from_bytes(&[seed; 32])
}

fn at(secs: i64) -> Time {
    Time::from_unix(secs).expect("in range")
}

const VALID_FROM: i64 = 1_800_000_000;

fn statement(old: &SigningKey, new: &SigningKey, valid_from: i64) -> DirectorRotation {
    DirectorRotation {
        schema_version: ROTATION_SCHEMA_VERSION,
        new_key: verifying_key_to_pem(&new.verifying_key()).expect("pem"),
        valid_from: at(valid_from),
        previous_key_id: KeyId::of(&old.verifying_key()),
    }
}

fn signed(statement: &DirectorRotation, by: &SigningKey) -> Envelope {
    Envelope::seal(statement, &[KeySigner::new(by.clone())]).expect("seal")
}

fn rotation(old: &SigningKey, new: &SigningKey, valid_from: i64) -> Envelope {
    signed(&statement(old, new, valid_from), old)
}

fn now() -> Time {
    at(VALID_FROM - 3600)
}

#[test]
fn rotation_signed_by_the_pinned_key_is_adopted() {
    let (old, new) = (key(1), key(2));
    let decision = decide(&rotation(&old, &new, VALID_FROM), &old.verifying_key(), None, now()).expect("valid");
    let RotationDecision::Adopt(v) = decision else { panic!("expected Adopt, got {decision:?}") };
    assert_eq!(v.new_key, new.verifying_key());
    assert_eq!(v.statement.valid_from, at(VALID_FROM));
    assert!(!v.due(at(VALID_FROM - 1)));
    assert!(v.due(at(VALID_FROM)));
}

#[test]
fn rotation_signed_by_an_unknown_key_is_refused() {
    let (old, new, attacker) = (key(1), key(2), key(9));
    // The attacker names the right previous key but can only sign with its own.
    let env = signed(&statement(&old, &new, VALID_FROM), &attacker);
    let e = decide(&env, &old.verifying_key(), None, now()).expect_err("unknown signer");
    assert!(matches!(e, RotationError::NotSignedByPinnedKey { source: VerifyError::UnknownKey { .. } }), "{e:?}");
}

#[test]
fn rotation_with_a_forged_signature_under_the_pinned_key_id_is_refused() {
    let (old, new, attacker) = (key(1), key(2), key(9));
    let mut env = signed(&statement(&old, &new, VALID_FROM), &attacker);
    env.signatures[0].key_id = KeyId::of(&old.verifying_key());
    let e = decide(&env, &old.verifying_key(), None, now()).expect_err("forged");
    assert!(matches!(e, RotationError::NotSignedByPinnedKey { source: VerifyError::BadSignature { .. } }), "{e:?}");
}

#[test]
fn rotation_edited_after_signing_is_refused() {
    let (old, new, attacker) = (key(1), key(2), key(9));
    let mut env = rotation(&old, &new, VALID_FROM);
    env.signed["newKey"] = serde_json::Value::String(verifying_key_to_pem(&attacker.verifying_key()).expect("pem"));
    let e = decide(&env, &old.verifying_key(), None, now()).expect_err("edited");
    assert!(matches!(e, RotationError::NotSignedByPinnedKey { .. }), "{e:?}");
}

#[test]
fn rotation_to_the_same_key_is_refused() {
    let old = key(1);
    let mut same = statement(&old, &old, VALID_FROM);
    same.new_key = verifying_key_to_pem(&old.verifying_key()).expect("pem");
    // `decide` ignores a statement naming the pinned key as already followed; the verifier
    // itself refuses it.
    let e = verify_rotation(&signed(&same, &old), &old.verifying_key(), now()).expect_err("same key");
    assert!(matches!(e, RotationError::SameKey { .. }), "{e:?}");
}

#[test]
fn rotation_from_another_chain_is_refused() {
    // Signed by the pinned key but claiming to replace some other key: a statement minted
    // for a different coordinator's chain must not be followed here.
    let (old, new, other) = (key(1), key(2), key(3));
    let mut s = statement(&old, &new, VALID_FROM);
    s.previous_key_id = KeyId::of(&other.verifying_key());
    let e = decide(&signed(&s, &old), &old.verifying_key(), None, now()).expect_err("wrong chain");
    assert!(matches!(e, RotationError::WrongPreviousKey { .. }), "{e:?}");
}

#[test]
fn rotation_to_an_unreadable_key_is_refused() {
    let old = key(1);
    let mut s = statement(&old, &key(2), VALID_FROM);
    s.new_key = "not a key".to_owned();
    let e = decide(&signed(&s, &old), &old.verifying_key(), None, now()).expect_err("bad key");
    assert!(matches!(e, RotationError::BadNewKey { .. }), "{e:?}");
}

#[test]
fn rotation_of_an_unknown_schema_version_is_refused() {
    let old = key(1);
    let mut s = statement(&old, &key(2), VALID_FROM);
    s.schema_version = 2;
    let e = decide(&signed(&s, &old), &old.verifying_key(), None, now()).expect_err("version");
    assert!(matches!(e, RotationError::Malformed { .. }), "{e:?}");
}

#[test]
fn replayed_older_rotation_is_ignored() {
    let (old, first, second) = (key(1), key(2), key(3));
    let pinned = old.verifying_key();
    let RotationDecision::Adopt(held) = decide(&rotation(&old, &second, VALID_FROM + 60), &pinned, None, now()).expect("newer") else {
        panic!("expected Adopt")
    };
    let replay = decide(&rotation(&old, &first, VALID_FROM), &pinned, Some(&held), now()).expect("replay is not an error");
    assert!(matches!(replay, RotationDecision::Ignore), "{replay:?}");
    let again = decide(&rotation(&old, &second, VALID_FROM + 60), &pinned, Some(&held), now()).expect("same");
    assert!(matches!(again, RotationDecision::Ignore), "{again:?}");
}

#[test]
fn newer_rotation_replaces_the_held_one() {
    let (old, first, second) = (key(1), key(2), key(3));
    let pinned = old.verifying_key();
    let RotationDecision::Adopt(held) = decide(&rotation(&old, &first, VALID_FROM), &pinned, None, now()).expect("first") else {
        panic!("expected Adopt")
    };
    let next = decide(&rotation(&old, &second, VALID_FROM + 60), &pinned, Some(&held), now()).expect("newer");
    assert!(matches!(next, RotationDecision::Adopt(ref v) if v.new_key == second.verifying_key()), "{next:?}");
}

#[test]
fn two_rotations_to_different_keys_at_the_same_instant_are_refused() {
    let (old, first, second) = (key(1), key(2), key(3));
    let pinned = old.verifying_key();
    let RotationDecision::Adopt(held) = decide(&rotation(&old, &first, VALID_FROM), &pinned, None, now()).expect("first") else {
        panic!("expected Adopt")
    };
    let e = decide(&rotation(&old, &second, VALID_FROM), &pinned, Some(&held), now()).expect_err("conflict");
    assert!(matches!(e, RotationError::Conflicting { .. }), "{e:?}");
}

#[test]
fn rotation_already_followed_is_ignored_after_promotion() {
    // The coordinator keeps serving the statement after validFrom; an agent that promoted
    // the new key no longer trusts the old signer, and must not treat it as an attack.
    let (old, new) = (key(1), key(2));
    let decision = decide(&rotation(&old, &new, VALID_FROM), &new.verifying_key(), None, at(VALID_FROM + 10)).expect("followed");
    assert!(matches!(decision, RotationDecision::Ignore), "{decision:?}");
}

fn task_signed_by(signer: &SigningKey, issued_at: i64) -> Envelope {
    let task = Task {
        task_id: "2f1b6c1e-8f3a-4d5e-9a7b-0c1d2e3f4a5b".to_owned(),
        host_id: "7d9e1c2b-3a4f-4b6c-8d0e-1f2a3b4c5d6e".to_owned(),
        job_id: None,
        issued_at: at(issued_at),
        expires_at: at(issued_at + 3600),
        kind: crate::task::TaskKind::StorageCleanup { scope: crate::task::StorageScope::Local },
    };
    Envelope::seal(&task, &[KeySigner::new(signer.clone())]).expect("seal")
}

fn verify_task_at(env: &Envelope, keys: &KeySet, now: i64) -> Result<Task, VerifyError> {
    verify::verify_task(env, keys, "7d9e1c2b-3a4f-4b6c-8d0e-1f2a3b4c5d6e", &verify::VerifyContext::at(at(now)))
}

fn windowed_keys(old: &SigningKey, new: &SigningKey) -> KeySet {
    let v = verify_rotation(&rotation(old, new, VALID_FROM), &old.verifying_key(), now()).expect("valid");
    v.key_set(&old.verifying_key()).expect("key set")
}

#[test]
fn tasks_follow_the_switch_from_old_key_to_new_key() {
    let (old, new) = (key(1), key(2));
    let keys = windowed_keys(&old, &new);
    verify_task_at(&task_signed_by(&old, VALID_FROM - 60), &keys, VALID_FROM - 1).expect("old key before validFrom");
    verify_task_at(&task_signed_by(&new, VALID_FROM), &keys, VALID_FROM).expect("new key from validFrom");
}

#[test]
fn task_signed_by_the_new_key_before_valid_from_is_refused() {
    // A leaked successor key must buy nothing during the overlap.
    let (old, new) = (key(1), key(2));
    let keys = windowed_keys(&old, &new);
    let e = verify_task_at(&task_signed_by(&new, VALID_FROM - 60), &keys, VALID_FROM - 1).expect_err("too early");
    assert!(matches!(e, VerifyError::KeyNotValidAt { .. }), "{e:?}");
}

#[test]
fn task_signed_by_the_old_key_after_valid_from_is_refused() {
    // The retired key, even if stolen later, no longer commands the host.
    let (old, new) = (key(1), key(2));
    let keys = windowed_keys(&old, &new);
    let e = verify_task_at(&task_signed_by(&old, VALID_FROM), &keys, VALID_FROM).expect_err("retired");
    assert!(matches!(e, VerifyError::KeyNotValidAt { .. }), "{e:?}");
}
