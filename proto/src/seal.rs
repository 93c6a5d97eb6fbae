//! Task secrets sealed to the host that runs the task (HPKE, RFC 9180).
//!
//! A `node.hw_sync_reseed` carries a MAAS machine token. Erasing it from the stored task
//! after the host acknowledged it is not enough: SQLite keeps the old row in its WAL and in
//! the free space of its pages, so a copy of the state directory taken at any time recovers
//! it. Instead the coordinator seals the token to the host's own X25519 key (registered at
//! enrollment; the private half never leaves the host) before the task is signed and
//! stored, so the store, its WAL and every backup hold only ciphertext that one host can open.
//!
//! Suite: DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, ChaCha20-Poly1305, base mode. The
//! associated data binds the ciphertext to its task and host ([`secret_aad`]): a sealed
//! token lifted into another task, or sent to another host, does not open.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hpke::aead::ChaCha20Poly1305;
use hpke::kdf::HkdfSha256;
use hpke::kem::X25519HkdfSha256;
use hpke::{Deserializable as _, Kem as _, OpModeR, OpModeS, Serializable as _};
use serde::{Deserialize, Serialize};

/// The suite's name as it appears on the wire.
pub const SUITE: &str = "X25519-HKDF-SHA256/HKDF-SHA256/ChaCha20-Poly1305";
/// HPKE `info`: what these keys are for, so a ciphertext for another protocol never opens here.
const INFO: &[u8] = b"drover task secret v1";
/// Largest ciphertext accepted (a MAAS token is under 200 bytes).
pub const MAX_CIPHERTEXT: usize = 4096;

/// Why sealing or opening failed. Never carries the plaintext.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SealError {
    /// A public or private key is not 32 bytes of base64 / not an X25519 key.
    #[error("{what} is not an X25519 key (32 bytes, base64)")]
    BadKey {
        /// Which key.
        what: &'static str,
    },
    /// The sealed value names another suite.
    #[error("sealed value uses suite {got:?}; only {SUITE:?} is accepted")]
    UnknownSuite {
        /// What it named.
        got: String,
    },
    /// The encapsulated key or ciphertext is not base64 or too long.
    #[error("sealed value's {field} is malformed")]
    Malformed {
        /// `enc` or `ciphertext`.
        field: &'static str,
    },
    /// Decryption failed: another host's key, another task, or tampered bytes.
    #[error("sealed value does not open with this host's key for this task (another host's, another task's, or altered)")]
    DoesNotOpen,
    /// HPKE refused to seal (cannot happen with a valid key; reported, not unwrapped).
    #[error("sealing failed")]
    SealFailed,
}

/// A value sealed to one host: the HPKE encapsulated key and the ciphertext, base64.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SealedBox {
    /// [`SUITE`].
    pub suite: String,
    /// The sender's encapsulated ephemeral key.
    pub enc: String,
    /// The ciphertext with its tag.
    pub ciphertext: String,
}

impl std::fmt::Debug for SealedBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Ciphertext is not secret, but it is noise in a log line.
        write!(f, "SealedBox({} bytes)", self.ciphertext.len())
    }
}

/// A host's sealing key pair. The private half stays in the agent's state directory.
pub struct SealKeyPair {
    private: <X25519HkdfSha256 as hpke::Kem>::PrivateKey,
    public: <X25519HkdfSha256 as hpke::Kem>::PublicKey,
}

impl SealKeyPair {
    /// A fresh key pair from the operating system's random source.
    pub fn generate() -> SealKeyPair {
        let (private, public) = X25519HkdfSha256::gen_keypair(&mut rand::rngs::OsRng);
        SealKeyPair { private, public }
    }

    /// The key pair from its stored private key (base64 of 32 bytes).
    pub fn from_private_b64(text: &str) -> Result<SealKeyPair, SealError> {
        let bytes = STANDARD.decode(text.trim()).map_err(|_| SealError::BadKey { what: "the sealing private key" })?;
        let private = <X25519HkdfSha256 as hpke::Kem>::PrivateKey::from_bytes(&bytes)
            .map_err(|_| SealError::BadKey { what: "the sealing private key" })?;
        let public = X25519HkdfSha256::sk_to_pk(&private);
        Ok(SealKeyPair { private, public })
    }

    /// The private key, base64, for the state directory (mode 0600).
    pub fn private_b64(&self) -> String {
        STANDARD.encode(self.private.to_bytes())
    }

    /// The public key, base64, as registered with the coordinator.
    pub fn public_b64(&self) -> String {
        STANDARD.encode(self.public.to_bytes())
    }

    /// Opens `sealed` for the task and host `aad` names.
    pub fn open(&self, sealed: &SealedBox, aad: &[u8]) -> Result<Vec<u8>, SealError> {
        if sealed.suite != SUITE {
            return Err(SealError::UnknownSuite { got: crate::text::bounded(&sealed.suite, 64).into_owned() });
        }
        let enc = STANDARD.decode(&sealed.enc).map_err(|_| SealError::Malformed { field: "enc" })?;
        let enc = <X25519HkdfSha256 as hpke::Kem>::EncappedKey::from_bytes(&enc).map_err(|_| SealError::Malformed { field: "enc" })?;
        if sealed.ciphertext.len() > MAX_CIPHERTEXT * 4 / 3 + 4 {
            return Err(SealError::Malformed { field: "ciphertext" });
        }
        let ct = STANDARD.decode(&sealed.ciphertext).map_err(|_| SealError::Malformed { field: "ciphertext" })?;
        hpke::single_shot_open::<ChaCha20Poly1305, HkdfSha256, X25519HkdfSha256>(&OpModeR::Base, &self.private, &enc, INFO, &ct, aad)
            .map_err(|_| SealError::DoesNotOpen)
    }
}

/// Checks a registered public key (base64 of 32 bytes).
pub fn check_public_b64(text: &str) -> Result<(), SealError> {
    parse_public(text).map(|_| ())
}

fn parse_public(text: &str) -> Result<<X25519HkdfSha256 as hpke::Kem>::PublicKey, SealError> {
    let bytes = STANDARD.decode(text.trim()).map_err(|_| SealError::BadKey { what: "the host's sealing key" })?;
    <X25519HkdfSha256 as hpke::Kem>::PublicKey::from_bytes(&bytes).map_err(|_| SealError::BadKey { what: "the host's sealing key" })
}

/// Seals `plaintext` to the host whose public key is `public_b64`, bound to `aad`.
pub fn seal(public_b64: &str, plaintext: &[u8], aad: &[u8]) -> Result<SealedBox, SealError> {
    let pk = parse_public(public_b64)?;
    let (enc, ct) = hpke::single_shot_seal::<ChaCha20Poly1305, HkdfSha256, X25519HkdfSha256, _>(
        &OpModeS::Base,
        &pk,
        INFO,
        plaintext,
        aad,
        &mut rand::rngs::OsRng,
    )
    .map_err(|_| SealError::SealFailed)?;
    Ok(SealedBox { suite: SUITE.to_owned(), enc: STANDARD.encode(enc.to_bytes()), ciphertext: STANDARD.encode(ct) })
}

/// The associated data of a task secret: the task id and the host id, so the ciphertext
/// opens only inside the task it was sealed for, on the host it was sealed to.
pub fn secret_aad(task_id: &str, host_id: &str) -> Vec<u8> {
    format!("drover.task-secret\0{task_id}\0{host_id}").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_value_opens_only_with_its_key_task_and_host() {
        let host = SealKeyPair::generate();
        let other = SealKeyPair::generate();
        let aad = secret_aad("t1", "h1");
        let sealed = seal(&host.public_b64(), b"token-value", &aad).expect("seal");
        assert!(!sealed.ciphertext.contains("token-value"));
        assert_eq!(host.open(&sealed, &aad).expect("open"), b"token-value");
        assert_eq!(other.open(&sealed, &aad), Err(SealError::DoesNotOpen), "another host's key");
        assert_eq!(host.open(&sealed, &secret_aad("t2", "h1")), Err(SealError::DoesNotOpen), "another task");
        assert_eq!(host.open(&sealed, &secret_aad("t1", "h2")), Err(SealError::DoesNotOpen), "another host id");
    }

    #[test]
    fn a_tampered_ciphertext_does_not_open() {
        let host = SealKeyPair::generate();
        let aad = secret_aad("t", "h");
        let mut sealed = seal(&host.public_b64(), b"secret", &aad).expect("seal");
        let mut ct = STANDARD.decode(&sealed.ciphertext).expect("b64");
        ct[0] ^= 1;
        sealed.ciphertext = STANDARD.encode(ct);
        assert_eq!(host.open(&sealed, &aad), Err(SealError::DoesNotOpen));
        sealed.suite = "P256".into();
        assert!(matches!(host.open(&sealed, &aad), Err(SealError::UnknownSuite { .. })));
    }

    #[test]
    fn keys_round_trip_and_bad_keys_are_named() {
        let k = SealKeyPair::generate();
        let back = SealKeyPair::from_private_b64(&k.private_b64()).expect("load");
        assert_eq!(back.public_b64(), k.public_b64());
        assert_eq!(check_public_b64("AAAA"), Err(SealError::BadKey { what: "the host's sealing key" }));
        assert!(check_public_b64(&k.public_b64()).is_ok());
    }
}
