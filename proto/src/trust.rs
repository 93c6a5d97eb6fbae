//! Trust roots: which keys may sign, toward what threshold, inside which validity windows.
//!
//! `trust.json` reaches an agent from its operator (NixOS option or a hash-pinned download),
//! never from the coordinator alone. A trust file that lists one key twice is refused: a
//! threshold counts *distinct* keys, and a duplicate is either a mistake or an attempt to
//! make one key count twice.

use std::collections::BTreeMap;

use ed25519_dalek::VerifyingKey;
use serde::{Deserialize, Serialize};

use crate::keys::{KeyError, KeyId, verifying_key_from_text};
use crate::time::Time;

/// Why a trust file was refused.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    /// Not JSON of the trust shape.
    #[error("trust file is malformed: {source}")]
    Malformed {
        /// What the parser reported.
        #[source]
        source: serde_json::Error,
    },
    /// Schema versions other than 1 are not understood.
    #[error("trust file schemaVersion {found} is not supported (expected 1)")]
    UnsupportedSchemaVersion {
        /// The version found.
        found: u64,
    },
    /// The same key appears twice.
    #[error("trust file lists key {key_id} more than once")]
    DuplicateKey {
        /// The repeated key.
        key_id: KeyId,
    },
    /// A listed keyId does not match its public key.
    #[error("trust file key {claimed}: keyId does not match the public key (its id is {actual})")]
    KeyIdMismatch {
        /// The id written in the file.
        claimed: KeyId,
        /// The id computed from the key.
        actual: KeyId,
    },
    /// A public key could not be read.
    #[error("trust file key {key_id}: {source}")]
    BadKey {
        /// The key's claimed id.
        key_id: KeyId,
        /// Why it could not be read.
        #[source]
        source: KeyError,
    },
    /// Only ed25519 is supported.
    #[error("trust file key {key_id}: algorithm {alg:?} is not supported (expected \"ed25519\")")]
    UnsupportedAlgorithm {
        /// The key.
        key_id: KeyId,
        /// The algorithm named.
        alg: String,
    },
    /// A threshold of zero, or higher than the number of keys, can never be met safely.
    #[error("threshold {threshold} is impossible with {keys} key(s): it must be between 1 and the number of keys")]
    BadThreshold {
        /// The threshold given.
        threshold: u32,
        /// How many keys are listed.
        keys: usize,
    },
    /// notAfter before notBefore.
    #[error("trust file key {key_id}: notAfter is before notBefore")]
    EmptyWindow {
        /// The key.
        key_id: KeyId,
    },
}

/// One key as written in `trust.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TrustKeyDoc {
    /// sha256 of the raw public key.
    pub key_id: KeyId,
    /// Always `"ed25519"`.
    pub alg: String,
    /// SPKI PEM or base64 of the 32 raw bytes.
    pub public_key: String,
    /// The key counts only at or after this instant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<Time>,
    /// The key counts only at or before this instant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_after: Option<Time>,
}

/// A set of keys and the threshold of distinct ones a signature file must reach.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KeySetDoc {
    /// Distinct valid signatures required.
    pub threshold: u32,
    /// The keys.
    pub keys: Vec<TrustKeyDoc>,
    /// Anything signed before this instant is refused (kill switch after a compromise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reject_before: Option<Time>,
}

/// `trust.json` as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TrustDoc {
    /// Always 1.
    pub schema_version: u64,
    /// The CI release keys.
    pub ci: KeySetDoc,
}

/// A key ready to verify with, and the window in which it counts.
#[derive(Debug, Clone)]
pub struct TrustedKey {
    /// The public key.
    pub key: VerifyingKey,
    /// Counts from this instant.
    pub not_before: Option<Time>,
    /// Counts until this instant.
    pub not_after: Option<Time>,
}

impl TrustedKey {
    /// Whether the key counts at `at`.
    pub fn valid_at(&self, at: Time) -> bool {
        self.not_before.is_none_or(|nb| at >= nb) && self.not_after.is_none_or(|na| at <= na)
    }
}

/// A validated key set: distinct keys, possible threshold, parsed public keys.
#[derive(Debug, Clone)]
pub struct KeySet {
    threshold: usize,
    keys: BTreeMap<KeyId, TrustedKey>,
    reject_before: Option<Time>,
}

impl KeySet {
    /// Validates a key set document.
    pub fn from_doc(doc: &KeySetDoc) -> Result<Self, TrustError> {
        let mut keys = BTreeMap::new();
        for k in &doc.keys {
            if k.alg != "ed25519" {
                return Err(TrustError::UnsupportedAlgorithm { key_id: k.key_id.clone(), alg: k.alg.clone() });
            }
            let key = verifying_key_from_text(&k.public_key).map_err(|source| TrustError::BadKey { key_id: k.key_id.clone(), source })?;
            let actual = KeyId::of(&key);
            if actual != k.key_id {
                return Err(TrustError::KeyIdMismatch { claimed: k.key_id.clone(), actual });
            }
            if let (Some(nb), Some(na)) = (k.not_before, k.not_after) {
                if na < nb {
                    return Err(TrustError::EmptyWindow { key_id: k.key_id.clone() });
                }
            }
            let trusted = TrustedKey { key, not_before: k.not_before, not_after: k.not_after };
            if keys.insert(actual.clone(), trusted).is_some() {
                return Err(TrustError::DuplicateKey { key_id: actual });
            }
        }
        let threshold = doc.threshold as usize;
        if threshold == 0 || threshold > keys.len() {
            return Err(TrustError::BadThreshold { threshold: doc.threshold, keys: keys.len() });
        }
        Ok(KeySet { threshold, keys, reject_before: doc.reject_before })
    }

    /// A one-key set with threshold 1 and no window (the director key pinned at enrollment).
    pub fn single(key: VerifyingKey) -> Self {
        Self::any_of([key])
    }

    /// Keys of which any one suffices, without windows (e.g. "signed by one of the keys I
    /// am about to sign with").
    pub fn any_of(keys: impl IntoIterator<Item = VerifyingKey>) -> Self {
        let keys = keys.into_iter().map(|key| (KeyId::of(&key), TrustedKey { key, not_before: None, not_after: None })).collect();
        KeySet { threshold: 1, keys, reject_before: None }
    }

    /// Distinct valid signatures required.
    pub fn threshold(&self) -> usize {
        self.threshold
    }

    /// The trusted key with this id.
    pub fn get(&self, id: &KeyId) -> Option<&TrustedKey> {
        self.keys.get(id)
    }

    /// The kill-switch instant, if set.
    pub fn reject_before(&self) -> Option<Time> {
        self.reject_before
    }

    /// Whether every key is valid at `b` exactly when it is valid at `a`: then a verification
    /// that passed at `a` passes at a later `b` too (a cache of one may be kept).
    pub fn same_validity(&self, a: Time, b: Time) -> bool {
        self.keys.values().all(|k| k.valid_at(a) == k.valid_at(b))
    }
}

/// Validated `trust.json`.
#[derive(Debug, Clone)]
pub struct TrustRoots {
    /// The CI release keys.
    pub ci: KeySet,
}

impl TrustRoots {
    /// Parses and validates `trust.json` bytes.
    pub fn from_json(bytes: &[u8]) -> Result<Self, TrustError> {
        let doc: TrustDoc = serde_json::from_slice(bytes).map_err(|source| TrustError::Malformed { source })?;
        Self::from_doc(&doc)
    }

    /// Validates a parsed trust document.
    pub fn from_doc(doc: &TrustDoc) -> Result<Self, TrustError> {
        if doc.schema_version != 1 {
            return Err(TrustError::UnsupportedSchemaVersion { found: doc.schema_version });
        }
        Ok(TrustRoots { ci: KeySet::from_doc(&doc.ci)? })
    }
}
