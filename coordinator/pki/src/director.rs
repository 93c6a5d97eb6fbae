//! The director's signing keys while serving, and `rotate-director-key`, which hands the
//! director key over to a successor without re-enrolling any host — as often as needed.
//!
//! The rotations live beside `director.key` in the state directory, one numbered step each:
//!
//! ```text
//! director-rotations/1.key    the first successor, PKCS#8 v1 PEM          0600
//! director-rotations/1.json   its statement, signed by director.key        0644
//! director-rotations/2.key    the next successor                           0600
//! director-rotations/2.json   its statement, signed by 1.key               0644
//! ```
//!
//! Steps are only ever added, never rewritten: a step's key file is written first and its
//! statement last, each atomically, so a crash in between leaves a spare key file that the
//! next rotation replaces, and no order of crashes changes which key signs. `serve` signs with
//! the key of the last step whose `validFrom` has passed (`director.key` before the first),
//! hands the last [`MAX_SERVED_ROTATIONS`] statements to every agent on check-in (so one that
//! was offline through an overlap, or through several, still walks the chain), and enrolls new
//! hosts with the key that signs at that moment. A new step is refused while the last one is
//! still in its overlap: an agent holds one pending successor at a time.

use std::os::unix::fs::DirBuilderExt as _;
use std::path::{Path, PathBuf};

use drover_fsio::Mode;
use drover_proto::keys::{self, KeyError, KeyId, KeySigner};
use drover_proto::rotation::{self, DirectorRotation, ROTATION_SCHEMA_VERSION, RotationError};
use drover_proto::sig::{Envelope, SignError};
use drover_proto::time::Time;
use ed25519_dalek::SigningKey;
#[cfg(test)]
use ed25519_dalek::VerifyingKey;

use crate::state_dir::{StateDirError, read_state_file};

/// The directory of rotation steps inside the state directory.
pub const DIRECTOR_ROTATIONS_DIR: &str = "director-rotations";
/// How many of the latest statements a check-in carries: an agent further behind than that
/// (offline through more than three completed rotations) re-enrolls.
pub const MAX_SERVED_ROTATIONS: usize = 4;

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
    #[error("{}: not the successor key its statement names", path.display())]
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
    /// The last rotation is still in its overlap: agents hold one pending successor at a time.
    #[error("a rotation to key {new_key_id} (from {valid_from}) is already in place in {}", path.display())]
    AlreadyRotating {
        /// The statement file.
        path: PathBuf,
        /// Its successor.
        new_key_id: KeyId,
        /// When it takes over.
        valid_from: Time,
    },
    /// A step takes over no later than the step before it.
    #[error("{}: validFrom {valid_from} is not after the previous step's {previous}", path.display())]
    NotLater {
        /// The statement file.
        path: PathBuf,
        /// Its instant.
        valid_from: Time,
        /// The previous step's.
        previous: Time,
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

/// One rotation step: the statement handing over to a key, and that key.
struct Step {
    key: SigningKey,
    statement: Envelope,
    valid_from: Time,
}

/// The director's signing keys: `director.key` and every successor it handed over to.
pub struct Director {
    initial: SigningKey,
    steps: Vec<Step>,
}

impl std::fmt::Debug for Director {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print key material.
        f.debug_struct("Director")
            .field("initial", &KeyId::of(&self.initial.verifying_key()))
            .field("steps", &self.steps.iter().map(|s| (KeyId::of(&s.key.verifying_key()), s.valid_from)).collect::<Vec<_>>())
            .finish()
    }
}

impl Director {
    /// A director with one key and no rotation.
    pub fn single(initial: SigningKey) -> Director {
        Director { initial, steps: Vec::new() }
    }

    /// Loads every rotation step `rotate-director-key` made after `initial` (the checked
    /// `director.key` of the state directory `dir`), each checked against the key before it.
    pub fn load(dir: &Path, initial: SigningKey) -> Result<Director, DirectorError> {
        let mut director = Director::single(initial);
        let steps_dir = dir.join(DIRECTOR_ROTATIONS_DIR);
        for n in 1.. {
            let path = steps_dir.join(format!("{n}.json"));
            let text = match read_state_file(&path, false) {
                Ok(text) => text,
                // The first missing statement ends the chain (a key file without one is a
                // spare), unless a later step exists: then one was lost, and guessing which key
                // signs would sign with one the agents no longer trust.
                Err(e @ StateDirError::Missing { .. }) => {
                    if steps_dir.join(format!("{}.json", n + 1)).exists() {
                        return Err(e.into());
                    }
                    break;
                }
                Err(e) => return Err(e.into()),
            };
            let statement: Envelope =
                serde_json::from_str(&text).map_err(|source| DirectorError::Malformed { path: path.clone(), source })?;
            let previous = director.last_key().verifying_key();
            // No windows are involved in checking a statement itself, so the instant is immaterial.
            let verified = rotation::verify_rotation(&statement, &previous, Time::EPOCH)
                .map_err(|source| DirectorError::BadRotation { path: path.clone(), source })?;
            let valid_from = verified.statement.valid_from;
            if let Some(last) = director.steps.last().filter(|last| valid_from <= last.valid_from) {
                return Err(DirectorError::NotLater { path, valid_from, previous: last.valid_from });
            }
            let key_path = steps_dir.join(format!("{n}.key"));
            let pem = read_state_file(&key_path, true)?;
            let key = keys::signing_key_from_pem(&pem).map_err(|source| DirectorError::Key { path: key_path.clone(), source })?;
            if key.verifying_key() != verified.new_key {
                return Err(DirectorError::NextKeyMismatch { path: key_path });
            }
            director.steps.push(Step { key, statement, valid_from });
        }
        Ok(director)
    }

    /// The newest key of the chain, due or not.
    fn last_key(&self) -> &SigningKey {
        self.steps.last().map_or(&self.initial, |s| &s.key)
    }

    /// The key that signs at `now`: that of the last step whose `validFrom` has passed, else
    /// `director.key`.
    pub fn signing_key(&self, now: Time) -> &SigningKey {
        self.steps.iter().rev().find(|s| now >= s.valid_from).map_or(&self.initial, |s| &s.key)
    }

    /// The statements to hand to agents, oldest first: the last [`MAX_SERVED_ROTATIONS`].
    pub fn rotations(&self) -> Vec<Envelope> {
        let skip = self.steps.len().saturating_sub(MAX_SERVED_ROTATIONS);
        self.steps[skip..].iter().map(|s| s.statement.clone()).collect()
    }
}

/// What `rotate-director-key` did.
#[derive(Debug)]
pub struct Rotated {
    /// The key that signed the statement (the one signing now).
    pub previous_key_id: KeyId,
    /// The successor's id.
    pub new_key_id: KeyId,
    /// When it takes over.
    pub valid_from: Time,
    /// The step's number in the chain (1 for the first rotation).
    pub step: usize,
}

/// Generates a successor for the key signing now in the state directory `dir` (whose
/// `director.key` is `initial`), taking over `overlap_secs` after `now`. Refuses while the
/// last step is still in its overlap: agents hold one pending successor at a time.
pub fn rotate(dir: &Path, initial: &SigningKey, now: Time, overlap_secs: u64) -> Result<Rotated, DirectorError> {
    let director = Director::load(dir, initial.clone())?;
    let step = director.steps.len() + 1;
    let steps_dir = dir.join(DIRECTOR_ROTATIONS_DIR);
    if let Some(last) = director.steps.last().filter(|last| now < last.valid_from) {
        return Err(DirectorError::AlreadyRotating {
            path: steps_dir.join(format!("{}.json", step - 1)),
            new_key_id: KeyId::of(&last.key.verifying_key()),
            valid_from: last.valid_from,
        });
    }
    let current = director.last_key();
    let next = SigningKey::generate(&mut rand::rngs::OsRng);
    let key_path = steps_dir.join(format!("{step}.key"));
    let path = steps_dir.join(format!("{step}.json"));
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
    if let Some(last) = director.steps.last().filter(|last| statement.valid_from <= last.valid_from) {
        return Err(DirectorError::NotLater { path, valid_from: statement.valid_from, previous: last.valid_from });
    }
    let env = Envelope::seal(&statement, &[KeySigner::new(current.clone())]).map_err(|source| DirectorError::Sign { source })?;
    let mut bytes = serde_json::to_vec_pretty(&env).map_err(|source| DirectorError::Malformed { path: path.clone(), source })?;
    bytes.push(b'\n');
    let write_err = |path: &Path| {
        let path = path.to_owned();
        move |source| DirectorError::Write { path, source }
    };
    // Private like the state directory around it: it holds keys.
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&steps_dir).map_err(write_err(&steps_dir))?;
    drover_fsio::write_atomic(&key_path, next_pem.as_bytes(), 0o600, Mode::Replace).map_err(write_err(&key_path))?;
    drover_fsio::write_atomic(&path, &bytes, 0o644, Mode::Exclusive).map_err(write_err(&path))?;
    Ok(Rotated {
        previous_key_id: KeyId::of(&current.verifying_key()),
        new_key_id: KeyId::of(&next.verifying_key()),
        valid_from: statement.valid_from,
        step,
    })
}

/// The public half of every key of the chain, oldest first.
#[cfg(test)]
pub fn chain_keys(director: &Director) -> Vec<VerifyingKey> {
    std::iter::once(director.initial.verifying_key()).chain(director.steps.iter().map(|s| s.key.verifying_key())).collect()
}

#[cfg(test)]
mod tests;
