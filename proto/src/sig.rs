//! Signature containers: detached `<artifact>.sig` files and the `{signed, signatures}`
//! envelope of per-host messages. Both carry `{keyId, alg, sig}` entries over JCS bytes.

use base64::Engine as _;
use ed25519_dalek::Signature;
use serde::{Deserialize, Serialize, de::DeserializeOwned};

use crate::artifacts::{self, SchemaError};
use crate::canonical::{self, CanonicalError};
use crate::keys::{KeyId, Signer};

/// One signature over some canonical bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SignatureEntry {
    /// The key that signed.
    pub key_id: KeyId,
    /// Always `"ed25519"`.
    pub alg: String,
    /// Standard base64 of the 64-byte signature.
    pub sig: String,
}

impl SignatureEntry {
    /// Builds an entry from a raw signature.
    pub fn new(key_id: KeyId, sig: &Signature) -> Self {
        SignatureEntry { key_id, alg: "ed25519".to_owned(), sig: base64::engine::general_purpose::STANDARD.encode(sig.to_bytes()) }
    }

    /// Decodes the signature bytes; `None` when they are not 64 bytes of base64.
    pub fn decode(&self) -> Option<Signature> {
        let raw = base64::engine::general_purpose::STANDARD.decode(&self.sig).ok()?;
        let raw: [u8; 64] = raw.try_into().ok()?;
        Some(Signature::from_bytes(&raw))
    }
}

/// A detached signature file (`<artifact>.sig`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SignatureFile {
    /// The signatures, any number of keys.
    pub signatures: Vec<SignatureEntry>,
}

/// Why signing failed.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    /// The value has no canonical form.
    #[error(transparent)]
    Canonical(#[from] CanonicalError),
    /// The message breaks the artifact schema (an integer beyond ±(2^53 − 1)), which every
    /// verifier would refuse.
    #[error("refusing to sign: {0}")]
    Schema(#[from] SchemaError),
    /// The signer (an external command, an HSM) failed.
    #[error("signer for key {key_id} failed: {source}")]
    Signer {
        /// The key that was to sign.
        key_id: KeyId,
        /// What went wrong.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Signs canonical bytes with every signer given, into one signature file.
pub fn sign_bytes<S: Signer>(bytes: &[u8], signers: &[S]) -> Result<SignatureFile, SignError> {
    let mut file = SignatureFile::default();
    for signer in signers {
        let sig = signer.sign(bytes).map_err(|e| SignError::Signer { key_id: signer.key_id().clone(), source: Box::new(e) })?;
        file.signatures.push(SignatureEntry::new(signer.key_id().clone(), &sig));
    }
    Ok(file)
}

/// A per-host message (intent, task) with its signatures, verified over JCS(`signed`).
///
/// `Debug` does not print `signed`: a task's payload carries secrets (the MAAS token) that
/// only the typed [`crate::task::Secret`] knows to redact; use [`Envelope::payload`] and
/// debug-print the typed message instead.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Envelope {
    /// The signed object, as JSON. Duplicate keys are refused while parsing: a lenient
    /// parser keeps the last one, and two parsers disagreeing about what was signed is how
    /// signature checks are bypassed.
    #[serde(deserialize_with = "crate::canonical::deserialize_strict")]
    pub signed: serde_json::Value,
    /// Signatures over its canonical bytes.
    pub signatures: Vec<SignatureEntry>,
}

impl std::fmt::Debug for Envelope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Envelope").field("signed", &format_args!("<redacted>")).field("signatures", &self.signatures).finish()
    }
}

impl Envelope {
    /// Signs a typed message.
    pub fn seal<T: Serialize, S: Signer>(message: &T, signers: &[S]) -> Result<Self, SignError> {
        let signed = serde_json::to_value(message).map_err(|source| CanonicalError::Serialize { source })?;
        artifacts::check_safe_integers(&signed)?;
        let bytes = canonical::to_vec(&signed)?;
        let file = sign_bytes(&bytes, signers)?;
        Ok(Envelope { signed, signatures: file.signatures })
    }

    /// Canonical bytes of `signed`.
    pub fn signed_bytes(&self) -> Result<Vec<u8>, CanonicalError> {
        canonical::to_vec(&self.signed)
    }

    /// The signed object as a typed message (does not verify; see `verify::verify_envelope`).
    pub fn payload<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        T::deserialize(&self.signed)
    }
}
