//! The host's own keys besides its TLS key, made at enrollment and never sent anywhere:
//!
//! - `seal.key`: an X25519 private key (base64, 0600). The coordinator seals every task
//!   secret (a MAAS machine token) to its public half, so the coordinator's store, its WAL
//!   and its backups hold only ciphertext this host alone can open ([`drover_proto::seal`]).
//! - `evidence.pem` (PKCS#8, 0600) and `evidence.crt`: an Ed25519 key and the certificate the
//!   coordinator's CA issued for it, naming this host. The agent signs what it reports about
//!   its own cleanliness with it ([`drover_proto::evidence`]), so a tenant or auditor can
//!   check offline that this host said so, without trusting the coordinator's records.
//!
//! Unlike the TLS key these are not renewed: they live as long as the installation, and a
//! reimage enrolls new ones. An agent enrolled before they existed has none: it then gets
//! no task that carries a secret and signs no evidence, and says so in its log.

use drover_proto::evidence::{self, Evidence, Statement};
use drover_proto::seal::{SealError, SealKeyPair, SealedBox};
use ed25519_dalek::SigningKey;

use crate::enroll::{CSR_COMMON_NAME, EnrollError};
use crate::state::{PRIVATE_MODE, PUBLIC_MODE, StateDir, StateError};

/// The sealing private key.
pub const SEAL_KEY: &str = "seal.key";
/// The evidence private key.
pub const EVIDENCE_KEY: &str = "evidence.pem";
/// The evidence key's certificate.
pub const EVIDENCE_CERT: &str = "evidence.crt";

/// Keys made for one enrollment, before the coordinator answered.
pub struct NewKeys {
    /// The sealing key pair.
    pub seal: SealKeyPair,
    /// The evidence key, PKCS#8 PEM.
    evidence_pem: String,
    /// A CSR for it.
    pub evidence_csr: String,
}

/// Makes a sealing key pair and an Ed25519 evidence key with its CSR.
pub fn generate() -> Result<NewKeys, EnrollError> {
    let keygen = |e: rcgen::Error| EnrollError::KeyGen { message: e.to_string() };
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).map_err(keygen)?;
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(keygen)?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(rcgen::DnType::CommonName, CSR_COMMON_NAME);
    let evidence_csr = params.serialize_request(&key).and_then(|csr| csr.pem()).map_err(keygen)?;
    Ok(NewKeys { seal: SealKeyPair::generate(), evidence_pem: key.serialize_pem(), evidence_csr })
}

impl NewKeys {
    /// Checks the evidence certificate the coordinator issued: an evidence certificate (not
    /// a TLS one), for `host_id`, certifying our key.
    pub fn check_certificate(&self, cert_pem: &str, host_id: &str, at: drover_proto::time::Time) -> Result<(), EnrollError> {
        let bad = |message: String| EnrollError::BadResponse { message: format!("evidenceCertificate: {message}") };
        let named = evidence::certificate_host(cert_pem).map_err(|e| bad(e.to_string()))?;
        if named.as_deref() != Some(host_id) {
            return Err(bad(format!("it names host {named:?}, expected {host_id:?}")));
        }
        let ours = drover_proto::keys::signing_key_from_pem(&self.evidence_pem).map_err(|e| bad(e.to_string()))?;
        let probe = evidence::sign(
            Statement {
                version: evidence::VERSION,
                host_id: host_id.to_owned(),
                at,
                subject: evidence::Subject::Probes { results: vec![] },
            },
            &ours,
            cert_pem,
        )
        .map_err(|e| bad(e.to_string()))?;
        evidence::verify(&probe, None, &evidence::Expect::default()).map_err(|_| bad("it certifies another key than ours".into()))
    }

    /// Writes the keys (private ones 0600) and the evidence certificate, if the coordinator
    /// issued one.
    pub fn store(&self, state: &StateDir, evidence_cert: Option<&str>) -> Result<(), StateError> {
        state.write_atomic(SEAL_KEY, self.seal.private_b64().as_bytes(), PRIVATE_MODE)?;
        if let Some(cert) = evidence_cert {
            state.write_atomic(EVIDENCE_KEY, self.evidence_pem.as_bytes(), PRIVATE_MODE)?;
            state.write_atomic(EVIDENCE_CERT, cert.as_bytes(), PUBLIC_MODE)?;
        }
        Ok(())
    }
}

/// Why a sealed secret could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// No sealing key in the state directory.
    #[error("this host has no sealing key ({file}): it enrolled before task secrets were sealed; enroll it again")]
    NoKey {
        /// The missing file.
        file: String,
    },
    /// The key file is unreadable or malformed.
    #[error("sealing key {file}: {message}")]
    BadKey {
        /// The file.
        file: String,
        /// What is wrong.
        message: String,
    },
    /// HPKE refused.
    #[error(transparent)]
    Seal(#[from] SealError),
}

/// Opens a task secret sealed to this host for `task_id`.
pub fn open(state_dir: &std::path::Path, sealed: &SealedBox, task_id: &str, host_id: &str) -> Result<Vec<u8>, OpenError> {
    let file = state_dir.join(SEAL_KEY);
    let shown = file.display().to_string();
    let text = match std::fs::read_to_string(&file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(OpenError::NoKey { file: shown }),
        Err(e) => return Err(OpenError::BadKey { file: shown, message: e.to_string() }),
    };
    let key = SealKeyPair::from_private_b64(&text).map_err(|e| OpenError::BadKey { file: shown, message: e.to_string() })?;
    Ok(key.open(sealed, &drover_proto::seal::secret_aad(task_id, host_id))?)
}

/// Why the evidence key or its certificate could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum EvidenceKeyError {
    /// A file could not be read.
    #[error("{file}: {source}", file = file.display())]
    Read {
        /// The file.
        file: std::path::PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The key file holds no Ed25519 key.
    #[error("{file}: {source}", file = file.display())]
    Key {
        /// The file.
        file: std::path::PathBuf,
        /// What is wrong with it.
        #[source]
        source: drover_proto::keys::KeyError,
    },
}

/// The evidence signer, if this host has an evidence key and certificate.
pub struct EvidenceSigner {
    key: SigningKey,
    cert: String,
    host_id: String,
}

impl EvidenceSigner {
    /// Loads the key and certificate; `Ok(None)` when this host has none.
    pub fn load(state_dir: &std::path::Path, host_id: &str) -> Result<Option<EvidenceSigner>, EvidenceKeyError> {
        let key_file = state_dir.join(EVIDENCE_KEY);
        let pem = match std::fs::read_to_string(&key_file) {
            Ok(p) => p,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(EvidenceKeyError::Read { file: key_file, source }),
        };
        let key = drover_proto::keys::signing_key_from_pem(&pem).map_err(|source| EvidenceKeyError::Key { file: key_file, source })?;
        let cert_file = state_dir.join(EVIDENCE_CERT);
        let cert = std::fs::read_to_string(&cert_file).map_err(|source| EvidenceKeyError::Read { file: cert_file, source })?;
        Ok(Some(EvidenceSigner { key, cert, host_id: host_id.to_owned() }))
    }

    /// Signs a statement about `subject`, made `at`.
    pub fn sign(&self, at: drover_proto::time::Time, subject: evidence::Subject) -> Result<Evidence, evidence::EvidenceError> {
        evidence::sign(Statement { version: evidence::VERSION, host_id: self.host_id.clone(), at, subject }, &self.key, &self.cert)
    }
}
