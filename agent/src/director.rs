//! The director key the agent trusts for intents and tasks, and how it follows a rotation.
//!
//! `director.pub` is pinned at enrollment. A rotation statement handed out on check-in is
//! checked against it ([`drover_proto::rotation`]) and, when it is newer than the one held,
//! stored whole as `director-rotation.json`; from then on the old key counts up to the second
//! before `validFrom` and the new key from `validFrom` on. Once past `validFrom` the new key
//! is written over `director.pub`. Each step is one atomic file write, and a crash between
//! the two leaves a statement whose successor is the pinned key, which loading ignores, so
//! no order of crashes leaves the agent trusting less or more than it should.

use std::io::ErrorKind;

use drover_proto::keys::{KeyId, verifying_key_from_text, verifying_key_to_pem};
use drover_proto::rotation::{DirectorRotation, RotationDecision, RotationError, VerifiedRotation, decide};
use drover_proto::sig::Envelope;
use drover_proto::time::Time;
use drover_proto::trust::KeySet;
use ed25519_dalek::VerifyingKey;

use crate::state::{DIRECTOR, PUBLIC_MODE, StateDir, StateError};

/// The stored rotation statement (the envelope as received).
pub const DIRECTOR_ROTATION: &str = "director-rotation.json";

/// Why a rotation was not followed.
#[derive(Debug, thiserror::Error)]
pub enum DirectorError {
    /// The statement broke a rotation rule.
    #[error(transparent)]
    Refused(#[from] RotationError),
    /// The state directory could not be read or written.
    #[error(transparent)]
    State(#[from] StateError),
}

/// What a check-in's rotation statement changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Followed {
    /// Nothing: already held, already followed, or older than the one held.
    Nothing,
    /// A new successor was stored; it takes over at `valid_from`.
    Stored {
        /// The successor.
        new_key_id: KeyId,
        /// When it takes over.
        valid_from: Time,
    },
}

/// The pinned director key, the rotation held (if any), and the key set both make.
#[derive(Debug, Clone)]
pub struct DirectorKeys {
    pinned: VerifyingKey,
    rotation: Option<VerifiedRotation>,
    keys: KeySet,
}

impl DirectorKeys {
    /// A pinned key with no rotation (a simulated agent; a freshly enrolled one).
    pub fn pinned(key: VerifyingKey) -> DirectorKeys {
        DirectorKeys { pinned: key, rotation: None, keys: KeySet::single(key) }
    }

    /// Loads `director.pub` and, when present, the stored rotation (checked again against
    /// the pinned key: the file is trusted no more than the wire).
    pub fn load(state: &StateDir, now: Time) -> Result<DirectorKeys, StateError> {
        let corrupt = |name: &str, message: String| StateError::Corrupt { file: state.file(name), message };
        let pem = String::from_utf8(state.read(DIRECTOR)?).map_err(|e| corrupt(DIRECTOR, e.to_string()))?;
        let pinned = verifying_key_from_text(&pem).map_err(|e| corrupt(DIRECTOR, e.to_string()))?;
        let mut keys = DirectorKeys::pinned(pinned);
        let bytes = match state.read(DIRECTOR_ROTATION) {
            Ok(bytes) => bytes,
            Err(StateError::Read { source, .. }) if source.kind() == ErrorKind::NotFound => return Ok(keys),
            Err(e) => return Err(e),
        };
        let env: Envelope = serde_json::from_slice(&bytes).map_err(|e| corrupt(DIRECTOR_ROTATION, e.to_string()))?;
        match decide(&env, &pinned, None, now).map_err(|e| corrupt(DIRECTOR_ROTATION, e.to_string()))? {
            RotationDecision::Adopt(rotation) => keys.hold(*rotation).map_err(|e| corrupt(DIRECTOR_ROTATION, e.to_string()))?,
            RotationDecision::Ignore => {}
        }
        Ok(keys)
    }

    /// Whether a statement names the pinned key as the one it replaces, read before any check:
    /// one addressed to another key is not for this agent now (a step it already followed, or
    /// one after a step it has yet to follow) and is passed over. One that does not parse is
    /// taken as addressed here, so that checking it reports why it is refused.
    pub fn addressed_to_pinned(&self, env: &Envelope) -> bool {
        env.payload::<DirectorRotation>().map_or(true, |s| s.previous_key_id == KeyId::of(&self.pinned))
    }

    /// The keys intents and tasks are verified against (windows judged at verification time).
    pub fn key_set(&self) -> &KeySet {
        &self.keys
    }

    /// The rotation held, if any.
    pub fn rotation(&self) -> Option<&VerifiedRotation> {
        self.rotation.as_ref()
    }

    fn hold(&mut self, rotation: VerifiedRotation) -> Result<(), RotationError> {
        self.keys = rotation.key_set(&self.pinned)?;
        self.rotation = Some(rotation);
        Ok(())
    }

    /// Checks a statement from a check-in and, when it is valid and newer than the one held,
    /// stores it before trusting it.
    pub fn follow(&mut self, state: &StateDir, env: &Envelope, now: Time) -> Result<Followed, DirectorError> {
        let RotationDecision::Adopt(rotation) = decide(env, &self.pinned, self.rotation.as_ref(), now)? else {
            return Ok(Followed::Nothing);
        };
        // Built before anything is written, so a statement that cannot make a key set is
        // refused without a trace on disk.
        let keys = rotation.key_set(&self.pinned)?;
        let mut bytes = serde_json::to_vec_pretty(env)
            .map_err(|e| StateError::Corrupt { file: state.file(DIRECTOR_ROTATION), message: e.to_string() })?;
        bytes.push(b'\n');
        state.write_atomic(DIRECTOR_ROTATION, &bytes, PUBLIC_MODE)?;
        let followed = Followed::Stored { new_key_id: rotation.new_key_id.clone(), valid_from: rotation.statement.valid_from };
        self.keys = keys;
        self.rotation = Some(*rotation);
        Ok(followed)
    }

    /// Once the held rotation is due, pins its key in `director.pub` and forgets the old
    /// one. Returns whether it did.
    pub fn promote_if_due(&mut self, state: &StateDir, now: Time) -> Result<bool, StateError> {
        let Some(rotation) = self.rotation.as_ref().filter(|r| r.due(now)) else { return Ok(false) };
        let pem = verifying_key_to_pem(&rotation.new_key)
            .map_err(|e| StateError::Corrupt { file: state.file(DIRECTOR), message: e.to_string() })?;
        state.write_director_pub(&pem)?;
        self.pinned = rotation.new_key;
        self.keys = KeySet::single(self.pinned);
        self.rotation = None;
        Ok(true)
    }
}

#[cfg(test)]
mod tests;
