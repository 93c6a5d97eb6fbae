//! Ed25519 keys in the formats `openssl` reads: PKCS#8 PEM private keys, SPKI PEM public
//! keys, and the key id every signature names (lowercase hex sha256 of the raw public key).

use std::fmt;

use base64::Engine as _;
use ed25519_dalek::pkcs8::spki::der::zeroize::Zeroizing;
use ed25519_dalek::pkcs8::{
    DecodePrivateKey, DecodePublicKey, EncodePrivateKey, EncodePublicKey, KeypairBytes, spki::der::pem::LineEnding,
};
use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};

/// Why a key could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// Not a PKCS#8 PEM Ed25519 private key.
    #[error(
        "not a PKCS#8 PEM Ed25519 private key (expected '-----BEGIN PRIVATE KEY-----', as `drover keygen` or `openssl genpkey -algorithm ed25519` write)"
    )]
    BadPrivateKey,
    /// Neither an SPKI PEM Ed25519 public key nor 32 raw bytes in base64.
    #[error("not an Ed25519 public key (expected SPKI PEM '-----BEGIN PUBLIC KEY-----' or base64 of 32 raw bytes)")]
    BadPublicKey,
    /// A key id that is not 64 lowercase hex digits.
    #[error("key id {value:?} must be 64 lowercase hex digits (sha256 of the raw public key)")]
    BadKeyId {
        /// The text given.
        value: String,
    },
    /// PEM encoding failed (should not happen for a valid key).
    #[error("could not encode key as PEM")]
    Encode,
}

/// Lowercase hex sha256 of a raw 32-byte Ed25519 public key.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyId(String);

impl KeyId {
    /// The id of a public key.
    pub fn of(key: &VerifyingKey) -> Self {
        KeyId(hex::encode(Sha256::digest(key.as_bytes())))
    }

    /// Parses a key id, which must be 64 lowercase hex digits.
    pub fn parse(s: &str) -> Result<Self, KeyError> {
        if crate::names::is_sha256_hex(s) { Ok(KeyId(s.to_owned())) } else { Err(KeyError::BadKeyId { value: s.to_owned() }) }
    }

    /// The hex text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyId({})", &self.0)
    }
}

impl Serialize for KeyId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for KeyId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        KeyId::parse(&String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// Reads a PKCS#8 PEM Ed25519 private key.
pub fn signing_key_from_pem(pem: &str) -> Result<SigningKey, KeyError> {
    SigningKey::from_pkcs8_pem(pem.trim()).map_err(|_| KeyError::BadPrivateKey)
}

/// Writes a private key as PKCS#8 v1 PEM: the seed only, the form `openssl genpkey` writes.
/// (The v2 form that also embeds the public key is refused by OpenSSL 3.0.)
/// The text is wiped from memory when dropped.
pub fn signing_key_to_pem(key: &SigningKey) -> Result<Zeroizing<String>, KeyError> {
    let bytes = KeypairBytes { secret_key: key.to_bytes(), public_key: None };
    bytes.to_pkcs8_pem(LineEnding::LF).map_err(|_| KeyError::Encode)
}

/// Reads a public key given as SPKI PEM or as base64 of the 32 raw bytes.
pub fn verifying_key_from_text(text: &str) -> Result<VerifyingKey, KeyError> {
    let text = text.trim();
    if text.starts_with("-----BEGIN") {
        return VerifyingKey::from_public_key_pem(text).map_err(|_| KeyError::BadPublicKey);
    }
    let raw = base64::engine::general_purpose::STANDARD.decode(text).map_err(|_| KeyError::BadPublicKey)?;
    let raw: [u8; 32] = raw.try_into().map_err(|_| KeyError::BadPublicKey)?;
    VerifyingKey::from_bytes(&raw).map_err(|_| KeyError::BadPublicKey)
}

/// Writes a public key as SPKI PEM.
pub fn verifying_key_to_pem(key: &VerifyingKey) -> Result<String, KeyError> {
    key.to_public_key_pem(LineEnding::LF).map_err(|_| KeyError::Encode)
}

/// Something that signs canonical bytes with an Ed25519 key: a key in memory, or (in the
/// CLI) an external command fronting an HSM or a YubiKey.
pub trait Signer {
    /// The error the signer may fail with.
    type Error: std::error::Error + Send + Sync + 'static;
    /// The id of the key that signs.
    fn key_id(&self) -> &KeyId;
    /// The public half of the key that signs.
    fn verifying_key(&self) -> VerifyingKey;
    /// Signs `message` (canonical bytes) and returns the 64-byte signature.
    fn sign(&self, message: &[u8]) -> Result<Signature, Self::Error>;
}

/// A [`Signer`] over an Ed25519 key held in memory.
pub struct KeySigner {
    key: SigningKey,
    id: KeyId,
}

impl KeySigner {
    /// Wraps a signing key.
    pub fn new(key: SigningKey) -> Self {
        let id = KeyId::of(&key.verifying_key());
        KeySigner { key, id }
    }
}

impl fmt::Debug for KeySigner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print key material.
        write!(f, "KeySigner({})", self.id)
    }
}

impl Signer for KeySigner {
    type Error = std::convert::Infallible;

    fn key_id(&self) -> &KeyId {
        &self.id
    }

    fn verifying_key(&self) -> VerifyingKey {
        self.key.verifying_key()
    }

    fn sign(&self, message: &[u8]) -> Result<Signature, Self::Error> {
        Ok(self.key.sign(message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_round_trip_and_key_id() {
        let key = SigningKey::from_bytes(&[7u8; 32]);
        let pem = signing_key_to_pem(&key).expect("encode");
        assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----"));
        let back = signing_key_from_pem(&pem).expect("decode");
        assert_eq!(back.to_bytes(), key.to_bytes());
        let pubpem = verifying_key_to_pem(&key.verifying_key()).expect("encode");
        let vk = verifying_key_from_text(&pubpem).expect("decode");
        assert_eq!(vk, key.verifying_key());
        let b64 = base64::engine::general_purpose::STANDARD.encode(vk.as_bytes());
        assert_eq!(verifying_key_from_text(&b64).expect("raw"), vk);
        assert_eq!(KeyId::of(&vk).as_str().len(), 64);
    }

    #[test]
    fn wrong_key_files_are_refused() {
        assert!(signing_key_from_pem("hello").is_err());
        let pubpem = verifying_key_to_pem(&SigningKey::from_bytes(&[1u8; 32]).verifying_key()).expect("encode");
        assert!(signing_key_from_pem(&pubpem).is_err(), "a public key is not a private key");
        assert!(verifying_key_from_text("AAAA").is_err());
        assert!(KeyId::parse("ABC").is_err());
    }
}
