//! The director's signing keys while serving, and `rotate-director-key`, which hands the
//! director key over to a successor without re-enrolling any host.
//!
//! The rotation lives beside `director.key` in the state directory:
//!
//! ```text
//! director-next.key       the successor, PKCS#8 v1 PEM     0600
//! director-rotation.json  the statement, signed by director.key (drover_proto::rotation)
//! ```
//!
//! The successor key is written first and the statement last, each atomically: the
//! statement is what makes a rotation exist, so a crash in between leaves a spare key file
//! that the next run replaces. `serve` signs with `director.key` until `validFrom` and with
//! the successor from then on, hands the statement to every agent on check-in (so one
//! offline through the overlap still follows), and enrolls new hosts with the key that signs
//! at that moment.

use std::path::{Path, PathBuf};

use drover_fsio::Mode;
use drover_proto::keys::{self, KeyError, KeyId, KeySigner};
use drover_proto::rotation::{self, DirectorRotation, ROTATION_SCHEMA_VERSION, RotationError, VerifiedRotation};
use drover_proto::sig::{Envelope, SignError};
use drover_proto::time::Time;
use ed25519_dalek::SigningKey;

use crate::state_dir::{StateDirError, read_state_file};

/// The successor key file.
pub const DIRECTOR_NEXT_KEY_FILE: &str = "director-next.key";
/// The rotation statement file.
pub const DIRECTOR_ROTATION_FILE: &str = "director-rotation.json";

/// Why the director keys could not be loaded or rotated. Every variant names its file.
#[derive(Debug, thiserror::Error)]
pub enum DirectorError {
    /// A state file could not be read.
    #[error(transparent)]
    State(#[from] StateDirError),
    /// The statement is not one the current director key made for its successor.
    #[error("{}: {source}", path.display())]
    BadRotation {
        /// The statement file.
        path: PathBuf,
        /// The rule it breaks.
        #[source]
        source: RotationError,
    },
    /// The statement is not JSON of the envelope shape.
    #[error("{}: not a signed rotation statement: {source}", path.display())]
    Malformed {
        /// The statement file.
        path: PathBuf,
        /// What the parser reported.
        #[source]
        source: serde_json::Error,
    },
    /// The successor key file does not hold an Ed25519 key, or not the one the statement names.
    #[error("{}: not the successor key named by {DIRECTOR_ROTATION_FILE}", path.display())]
    NextKeyMismatch {
        /// The key file.
        path: PathBuf,
    },
    /// A key could not be read or encoded.
    #[error("{}: {source}", path.display())]
    Key {
        /// The key file.
        path: PathBuf,
        /// Why.
        #[source]
        source: KeyError,
    },
    /// A rotation is already in place: the agents follow one step at a time.
    #[error("a rotation to key {new_key_id} (from {valid_from}) is already in place in {}", path.display())]
    AlreadyRotating {
        /// The statement file.
        path: PathBuf,
        /// Its successor.
        new_key_id: KeyId,
        /// When it takes over.
        valid_from: Time,
    },
    /// The statement could not be signed.
    #[error("cannot sign the rotation statement: {source}")]
    Sign {
        /// Why.
        #[source]
        source: SignError,
    },
    /// A file could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// A successor key with the statement that hands over to it.
struct Next {
    key: SigningKey,
    statement: Envelope,
    valid_from: Time,
}

/// The director's signing keys: the current one and, after a rotation, its successor.
pub struct Director {
    current: SigningKey,
    next: Option<Next>,
}

impl std::fmt::Debug for Director {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print key material.
        f.debug_struct("Director")
            .field("current", &KeyId::of(&self.current.verifying_key()))
            .field("next", &self.next.as_ref().map(|n| (KeyId::of(&n.key.verifying_key()), n.valid_from)))
            .finish()
    }
}

impl Director {
    /// A director with one key and no rotation.
    pub fn single(current: SigningKey) -> Director {
        Director { current, next: None }
    }

    /// Loads the rotation, if `rotate-director-key` made one, beside `current` (the checked
    /// `director.key` of the state directory `dir`).
    pub fn load(dir: &Path, current: SigningKey) -> Result<Director, DirectorError> {
        let Some(rotation) = read_rotation(dir, &current)? else { return Ok(Director::single(current)) };
        let (verified, statement) = rotation;
        let key_path = dir.join(DIRECTOR_NEXT_KEY_FILE);
        let pem = read_state_file(&key_path, true)?;
        let key = keys::signing_key_from_pem(&pem).map_err(|source| DirectorError::Key { path: key_path.clone(), source })?;
        if key.verifying_key() != verified.new_key {
            return Err(DirectorError::NextKeyMismatch { path: key_path });
        }
        let valid_from = verified.statement.valid_from;
        Ok(Director { current, next: Some(Next { key, statement, valid_from }) })
    }

    /// The key that signs at `now`: the successor from `validFrom` on, else the current key.
    pub fn signing_key(&self, now: Time) -> &SigningKey {
        match &self.next {
            Some(next) if now >= next.valid_from => &next.key,
            _ => &self.current,
        }
    }

    /// The rotation statement to hand to agents, if any.
    pub fn rotation(&self) -> Option<&Envelope> {
        self.next.as_ref().map(|n| &n.statement)
    }
}

/// Reads and checks `director-rotation.json`; `None` when there is none.
fn read_rotation(dir: &Path, current: &SigningKey) -> Result<Option<(VerifiedRotation, Envelope)>, DirectorError> {
    let path = dir.join(DIRECTOR_ROTATION_FILE);
    let text = match read_state_file(&path, false) {
        Ok(text) => text,
        Err(StateDirError::Missing { .. }) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let env: Envelope = serde_json::from_str(&text).map_err(|source| DirectorError::Malformed { path: path.clone(), source })?;
    // No windows are involved in checking the statement itself, so the instant is immaterial.
    let verified = rotation::verify_rotation(&env, &current.verifying_key(), Time::EPOCH)
        .map_err(|source| DirectorError::BadRotation { path, source })?;
    Ok(Some((verified, env)))
}

/// What `rotate-director-key` did.
#[derive(Debug)]
pub struct Rotated {
    /// The successor's id.
    pub new_key_id: KeyId,
    /// When it takes over.
    pub valid_from: Time,
}

/// Generates a successor for the director key of the state directory `dir` (whose current
/// key is `current`), taking over `overlap_secs` after `now`. Refuses while a rotation is in
/// place: agents follow one step, and a second would strand those still offline.
pub fn rotate(dir: &Path, current: &SigningKey, now: Time, overlap_secs: u64) -> Result<Rotated, DirectorError> {
    let path = dir.join(DIRECTOR_ROTATION_FILE);
    if let Some((held, _)) = read_rotation(dir, current)? {
        return Err(DirectorError::AlreadyRotating { path, new_key_id: held.new_key_id, valid_from: held.statement.valid_from });
    }
    let next = SigningKey::generate(&mut rand::rngs::OsRng);
    let key_path = dir.join(DIRECTOR_NEXT_KEY_FILE);
    let key_err = |path: &Path| {
        let path = path.to_owned();
        move |source| DirectorError::Key { path, source }
    };
    let next_pem = keys::signing_key_to_pem(&next).map_err(key_err(&key_path))?;
    let statement = DirectorRotation {
        schema_version: ROTATION_SCHEMA_VERSION,
        new_key: keys::verifying_key_to_pem(&next.verifying_key()).map_err(key_err(&key_path))?,
        valid_from: now.plus_secs(overlap_secs),
        previous_key_id: KeyId::of(&current.verifying_key()),
    };
    let env = Envelope::seal(&statement, &[KeySigner::new(current.clone())]).map_err(|source| DirectorError::Sign { source })?;
    let mut bytes = serde_json::to_vec_pretty(&env).map_err(|source| DirectorError::Malformed { path: path.clone(), source })?;
    bytes.push(b'\n');
    let write = |path: &Path, bytes: &[u8], mode: u32| {
        drover_fsio::write_atomic(path, bytes, mode, Mode::Replace).map_err(|source| DirectorError::Write { path: path.to_owned(), source })
    };
    write(&key_path, next_pem.as_bytes(), 0o600)?;
    write(&path, &bytes, 0o644)?;
    Ok(Rotated { new_key_id: KeyId::of(&next.verifying_key()), valid_from: statement.valid_from })
}

#[cfg(test)]
mod tests;
