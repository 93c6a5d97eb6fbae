//! Director-key rotation: a statement, signed by the director key an agent pinned at
//! enrollment, that names the key which takes over from a given instant.
//!
//! The coordinator hands the statement out on every check-in for as long as it holds it, so
//! an agent learns the successor during the overlap window and follows even if it was
//! offline through all of it. Until `validFrom` only the old key counts; from `validFrom` on
//! only the new one: a message is judged by the agent's clock at verification time, the same
//! rule the trust windows of [`crate::trust`] apply, so a stolen new key is useless before
//! the switch and a stolen old key is useless after it.
//!
//! Rotations chain: each statement is signed by the key the one before it handed over to, and
//! a check-in carries the latest few, oldest first. An agent follows the one whose previous
//! key is the key it pins, promotes it once due, and so walks as many steps as it missed;
//! statements addressed to another key are not for it and are passed over.

use base64::Engine as _;
use ed25519_dalek::VerifyingKey;
use serde::{Deserialize, Serialize};

use crate::keys::{KeyError, KeyId, verifying_key_from_text};
use crate::sig::Envelope;
use crate::time::{Time, TimeError};
use crate::trust::{KeySet, KeySetDoc, TrustError, TrustKeyDoc};
use crate::verify::{self, VerifyError};

/// The only statement version this build writes and reads.
pub const ROTATION_SCHEMA_VERSION: u64 = 1;

/// What the old director key signs to hand over to a new one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DirectorRotation {
    /// Always [`ROTATION_SCHEMA_VERSION`].
    pub schema_version: u64,
    /// The successor key, SPKI PEM.
    pub new_key: String,
    /// From this instant on only the new key counts; before it only the old one.
    pub valid_from: Time,
    /// The key this statement replaces (and is signed by).
    pub previous_key_id: KeyId,
}

/// Why a rotation statement was refused. One variant per rule.
#[derive(Debug, thiserror::Error)]
pub enum RotationError {
    /// Not a rotation statement of this shape or version.
    #[error("director rotation is malformed: {message}")]
    Malformed {
        /// What is wrong.
        message: String,
    },
    /// Not signed by the pinned director key (an unknown key, a bad signature).
    #[error("director rotation is not signed by the pinned director key: {source}")]
    NotSignedByPinnedKey {
        /// The signature rule that failed.
        #[source]
        source: VerifyError,
    },
    /// `previousKeyId` names a key other than the pinned one: the statement belongs to a
    /// different chain (another coordinator, or a rotation this agent never followed).
    #[error("director rotation replaces key {claimed}, but the pinned director key is {pinned}")]
    WrongPreviousKey {
        /// The id the statement names.
        claimed: KeyId,
        /// The pinned key's id.
        pinned: KeyId,
    },
    /// `newKey` is not an Ed25519 public key.
    #[error("director rotation newKey is not a usable public key: {source}")]
    BadNewKey {
        /// Why it could not be read.
        #[source]
        source: KeyError,
    },
    /// The new key is the old key: nothing would change, and a window over one key is empty.
    #[error("director rotation hands key {key_id} over to itself")]
    SameKey {
        /// The key.
        key_id: KeyId,
    },
    /// Two statements signed by the same key name different successors for the same instant:
    /// the signer is confused or compromised, and neither is followed.
    #[error("director rotation at {valid_from} to key {offered} conflicts with the held rotation to key {held}")]
    Conflicting {
        /// The shared switch instant.
        valid_from: Time,
        /// The successor already held.
        held: KeyId,
        /// The successor now offered.
        offered: KeyId,
    },
    /// `validFrom` is the first representable instant, so the old key has no window at all.
    #[error("director rotation validFrom {valid_from} leaves the old key no window")]
    NoOldWindow {
        /// The instant given.
        valid_from: Time,
        /// Why no earlier instant exists.
        #[source]
        source: TimeError,
    },
    /// The two-key set could not be built.
    #[error("director keys around a rotation: {source}")]
    KeySet {
        /// Why.
        #[source]
        source: TrustError,
    },
}

/// A rotation statement whose signature, chain and key were checked.
#[derive(Debug, Clone)]
pub struct VerifiedRotation {
    /// The statement as signed.
    pub statement: DirectorRotation,
    /// The successor key.
    pub new_key: VerifyingKey,
    /// Its id.
    pub new_key_id: KeyId,
}

impl VerifiedRotation {
    /// Whether the successor has taken over at `now` (the old key may be forgotten).
    pub fn due(&self, now: Time) -> bool {
        now >= self.statement.valid_from
    }

    /// The director keys that count around the switch: the pinned key up to the second
    /// before `validFrom`, the new key from `validFrom` on.
    pub fn key_set(&self, pinned: &VerifyingKey) -> Result<KeySet, RotationError> {
        let valid_from = self.statement.valid_from;
        let last_old =
            Time::from_unix(valid_from.unix().saturating_sub(1)).map_err(|source| RotationError::NoOldWindow { valid_from, source })?;
        let doc = |key: &VerifyingKey, not_before, not_after| TrustKeyDoc {
            key_id: KeyId::of(key),
            alg: "ed25519".to_owned(),
            public_key: base64::engine::general_purpose::STANDARD.encode(key.as_bytes()),
            not_before,
            not_after,
        };
        let set = KeySetDoc {
            threshold: 1,
            keys: vec![doc(pinned, None, Some(last_old)), doc(&self.new_key, Some(valid_from), None)],
            reject_before: None,
        };
        KeySet::from_doc(&set).map_err(|source| RotationError::KeySet { source })
    }
}

/// What an agent should do with a rotation statement it was handed.
#[derive(Debug)]
pub enum RotationDecision {
    /// A valid statement newer than any held: store it.
    Adopt(Box<VerifiedRotation>),
    /// Already followed (the pinned key is its successor), already held, or older than the
    /// one held (a replay): nothing to do.
    Ignore,
}

/// Reads the signed statement without checking its signature.
fn statement_of(env: &Envelope) -> Result<DirectorRotation, RotationError> {
    let statement: DirectorRotation = env.payload().map_err(|e| RotationError::Malformed { message: e.to_string() })?;
    if statement.schema_version != ROTATION_SCHEMA_VERSION {
        return Err(RotationError::Malformed {
            message: format!("schemaVersion {} is not supported (expected {ROTATION_SCHEMA_VERSION})", statement.schema_version),
        });
    }
    Ok(statement)
}

/// Verifies a rotation statement against the pinned director key: signed by it, naming it as
/// the key replaced, handing over to a different, readable key.
pub fn verify_rotation(env: &Envelope, pinned: &VerifyingKey, now: Time) -> Result<VerifiedRotation, RotationError> {
    verify::check_safe_integers("director rotation", &env.signed).map_err(|e| RotationError::Malformed { message: e.to_string() })?;
    let bytes = env.signed_bytes().map_err(|e| RotationError::Malformed { message: e.to_string() })?;
    verify::check_threshold("director rotation", &bytes, &env.signatures, &KeySet::single(*pinned), now)
        .map_err(|source| RotationError::NotSignedByPinnedKey { source })?;
    let statement = statement_of(env)?;
    let pinned_id = KeyId::of(pinned);
    if statement.previous_key_id != pinned_id {
        return Err(RotationError::WrongPreviousKey { claimed: statement.previous_key_id, pinned: pinned_id });
    }
    let new_key = verifying_key_from_text(&statement.new_key).map_err(|source| RotationError::BadNewKey { source })?;
    let new_key_id = KeyId::of(&new_key);
    if new_key_id == pinned_id {
        return Err(RotationError::SameKey { key_id: new_key_id });
    }
    Ok(VerifiedRotation { statement, new_key, new_key_id })
}

/// Decides whether to follow a rotation statement, given the pinned key and the rotation
/// already held (if any).
///
/// A statement whose successor is the pinned key is ignored before its signature is checked:
/// after promotion the coordinator keeps serving it for agents still offline, and it is
/// signed by a key this agent no longer trusts.
pub fn decide(
    env: &Envelope,
    pinned: &VerifyingKey,
    held: Option<&VerifiedRotation>,
    now: Time,
) -> Result<RotationDecision, RotationError> {
    let unverified = statement_of(env)?;
    if verifying_key_from_text(&unverified.new_key).is_ok_and(|k| k == *pinned) {
        return Ok(RotationDecision::Ignore);
    }
    let offered = verify_rotation(env, pinned, now)?;
    if let Some(held) = held {
        let (held_at, offered_at) = (held.statement.valid_from, offered.statement.valid_from);
        if offered_at < held_at || (offered_at == held_at && offered.new_key_id == held.new_key_id) {
            return Ok(RotationDecision::Ignore);
        }
        if offered_at == held_at {
            return Err(RotationError::Conflicting { valid_from: held_at, held: held.new_key_id.clone(), offered: offered.new_key_id });
        }
    }
    Ok(RotationDecision::Adopt(Box::new(offered)))
}

#[cfg(test)]
mod tests;
