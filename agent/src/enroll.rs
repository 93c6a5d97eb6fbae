//! `drover-agent enroll`: the host's first contact with the coordinator.
//!
//! ```text
//! printf '%s\n' "$TOKEN" | drover-agent enroll --config /etc/drover/agent.toml \
//!     --host-id UUID --token-stdin --trust-sha256 HEX
//! drover-agent enroll --config agent.toml --host-id UUID --token-file /run/drover/token --trust-sha256 HEX
//! ```
//!
//! `--host-id` is the id `drover enroll` created the host under (the token is bound to it);
//! it is not secret.
//!
//! The token is read from stdin or a file, never from the command line: a process's
//! arguments are world-readable (`ps`, `/proc/PID/cmdline`) for as long as it runs and end up
//! in shell history and audit logs, while the token is the one secret that lets its holder
//! enroll a machine as this host. Inside the agent it lives in a [`Secret`], whose `Debug` and
//! `Display` print `<redacted>`; no error message quotes it.
//!
//! Steps, each refusing on failure and writing nothing until all checks passed:
//! 1. refuse if the state directory already holds an enrollment ([`StateDir::is_enrolled`]);
//! 2. `GET /v1/trust.json` without a client certificate, over TLS 1.3 to a coordinator whose
//!    certificate chains to `ca_file`; refuse unless sha256 of the exact bytes equals the
//!    operator's `--trust-sha256` and the bytes are valid trust roots ([`check_trust`]): the
//!    CI trust roots come from the operator, the coordinator only carries them;
//! 3. generate an ECDSA P-256 key on this host and a CSR for it (subject CN `drover-agent`;
//!    the coordinator takes only the public key from it); the key never leaves the host;
//! 4. `POST /v1/enroll` with the host id, the token and the CSR;
//! 5. check the answer ([`check_enrollment`]): the CA it returns is exactly the CA the TLS
//!    client trusted, the host id is the one we asked for, the certificate carries our public
//!    key, chains to that CA as a client certificate, and names that host id
//!    (`urn:drover:host:<uuid>`) and the returned hostname (subject CN); the director key parses;
//!    With the CSR go the host's sealing public key and a CSR for its evidence key
//!    ([`crate::host_keys`]); the evidence certificate returned must name this host and
//!    certify that key;
//! 6. write `seal.key`, `evidence.pem` (0600) and `evidence.crt`, `key.pem` (0600),
//!    `cert.pem`, `ca.crt`, `trust.json` (the verified bytes), `director.pub` and, last,
//!    `identity.json`, each atomically.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use drover_proto::enroll::{EnrollRequest, EnrollResponse};
use drover_proto::task::Secret;
use drover_proto::trust::TrustRoots;
use rustls::pki_types::{CertificateDer, UnixTime};
use sha2::{Digest, Sha256};
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

use crate::client::{self, ClientError, CoordinatorClient, REQUEST_TIMEOUT};
use crate::config::Config;
use crate::exit::{ExitStatus, codes};
use crate::state::{Identity, StateDir, StateError};

/// Where the coordinator serves the CI trust roots.
pub const TRUST_PATH: &str = "/v1/trust.json";
/// The enrollment route.
pub const ENROLL_PATH: &str = "/v1/enroll";
/// The CSR's subject common name (the coordinator ignores it).
pub const CSR_COMMON_NAME: &str = "drover-agent";
/// The URI SAN prefix naming a host in its certificate.
pub const HOST_URI_PREFIX: &str = "urn:drover:host:";
/// The longest token accepted.
pub const MAX_TOKEN_LEN: usize = 1024;

/// Why enrollment was refused.
#[derive(Debug, thiserror::Error)]
pub enum EnrollError {
    /// The state directory already holds an enrollment.
    #[error("already enrolled: {dir} holds an identity, key and certificate; remove them to enroll again", dir = dir.display())]
    AlreadyEnrolled {
        /// The state directory.
        dir: PathBuf,
    },
    /// `--host-id` is not a UUID.
    #[error("--host-id must be a UUID, got {got:?}")]
    BadHostId {
        /// What was given.
        got: String,
    },
    /// `--trust-sha256` is not 64 hex digits.
    #[error("--trust-sha256 must be 64 hex digits (sha256), got {got:?}")]
    BadTrustHash {
        /// What was given.
        got: String,
    },
    /// The coordinator's trust roots are not the operator's.
    #[error("trust.json from the coordinator has sha256 {actual}, but the operator pinned {expected}; refusing to enroll")]
    TrustMismatch {
        /// The pinned hash.
        expected: String,
        /// The hash of what the coordinator served.
        actual: String,
    },
    /// The trust roots match the hash but are not valid trust roots.
    #[error("trust.json from the coordinator is not valid trust roots: {message}")]
    TrustMalformed {
        /// What is wrong.
        message: String,
    },
    /// The token file could not be read.
    #[error("cannot read the token from {what}: {source}")]
    TokenRead {
        /// `stdin` or the file.
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The token is empty or malformed (its value is never shown).
    #[error("bad enrollment token from {what}: {reason}")]
    BadToken {
        /// `stdin` or the file.
        what: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// Key or CSR generation failed.
    #[error("cannot generate the agent key or CSR: {message}")]
    KeyGen {
        /// The library's message.
        message: String,
    },
    /// The CA the coordinator returned is not the one the TLS client trusted.
    #[error("the coordinator returned a CA certificate that differs from {ca_file}; refusing to enroll")]
    CaMismatch {
        /// The CA file the agent trusts.
        ca_file: String,
    },
    /// The certificate carries another public key than ours.
    #[error("the coordinator returned a certificate for another public key than this host's; refusing to enroll")]
    ForeignKey,
    /// The certificate does not chain to the CA or does not name this host.
    #[error("the coordinator returned an unacceptable certificate: {message}")]
    BadCertificate {
        /// What is wrong.
        message: String,
    },
    /// Another field of the answer is unusable.
    #[error("the coordinator's enrollment answer is unusable: {message}")]
    BadResponse {
        /// What is wrong.
        message: String,
    },
    /// Talking to the coordinator failed.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The state directory failed.
    #[error(transparent)]
    State(#[from] StateError),
}

impl ExitStatus for EnrollError {
    fn exit_code(&self) -> u8 {
        match self {
            EnrollError::AlreadyEnrolled { .. } => codes::CANT_CREATE,
            EnrollError::BadTrustHash { .. } | EnrollError::BadHostId { .. } => codes::USAGE,
            EnrollError::TokenRead { .. } => codes::NO_INPUT,
            EnrollError::KeyGen { .. } => codes::SOFTWARE,
            EnrollError::TrustMismatch { .. }
            | EnrollError::TrustMalformed { .. }
            | EnrollError::BadToken { .. }
            | EnrollError::CaMismatch { .. }
            | EnrollError::ForeignKey
            | EnrollError::BadCertificate { .. }
            | EnrollError::BadResponse { .. } => codes::DATA,
            EnrollError::Client(e) => e.exit_code(),
            EnrollError::State(e) => e.exit_code(),
        }
    }
}

/// Where the token comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// Standard input (the bootstrap script pipes it in).
    Stdin,
    /// A file.
    File(PathBuf),
}

/// Reads the token from `source`.
pub fn read_token(source: &TokenSource) -> Result<Secret, EnrollError> {
    let (what, mut reader): (String, Box<dyn Read>) = match source {
        TokenSource::Stdin => ("stdin".to_owned(), Box::new(std::io::stdin())),
        TokenSource::File(path) => {
            let what = path.display().to_string();
            let file = std::fs::File::open(path).map_err(|source| EnrollError::TokenRead { what: what.clone(), source })?;
            (what, Box::new(file))
        }
    };
    let mut buf = Vec::new();
    // One byte more than any valid token (plus its newline), so an endless stream cannot
    // exhaust memory and an over-long one is still caught.
    (&mut reader)
        .take(MAX_TOKEN_LEN as u64 + 3)
        .read_to_end(&mut buf)
        .map_err(|source| EnrollError::TokenRead { what: what.clone(), source })?;
    parse_token(&what, &buf)
}

/// Validates token bytes: surrounding whitespace (a trailing newline) is dropped; the rest
/// must be 1..=1024 printable ASCII characters without spaces.
pub fn parse_token(what: &str, bytes: &[u8]) -> Result<Secret, EnrollError> {
    let bad = |reason| EnrollError::BadToken { what: what.to_owned(), reason };
    let text = std::str::from_utf8(bytes).map_err(|_| bad("not UTF-8 text"))?.trim();
    if text.is_empty() {
        return Err(bad("empty"));
    }
    if text.len() > MAX_TOKEN_LEN {
        return Err(bad("longer than 1024 characters"));
    }
    if !text.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(bad("contains whitespace, control or non-ASCII characters (one token on one line is expected)"));
    }
    Ok(Secret::new(text))
}

/// Validates `--trust-sha256`: 64 hex digits, returned lowercase.
pub fn parse_sha256_hex(s: &str) -> Result<String, EnrollError> {
    if s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(s.to_ascii_lowercase())
    } else {
        Err(EnrollError::BadTrustHash { got: s.chars().take(80).collect() })
    }
}

/// Validates `--host-id`: a UUID, returned in its lowercase hyphenated form.
pub fn parse_host_id(s: &str) -> Result<String, EnrollError> {
    uuid::Uuid::parse_str(s).map(|u| u.hyphenated().to_string()).map_err(|_| EnrollError::BadHostId { got: s.chars().take(80).collect() })
}

/// Checks the coordinator's `trust.json` bytes against the operator's pinned sha256 (hex,
/// either case), then parses them as trust roots.
pub fn check_trust(bytes: &[u8], expected_hex: &str) -> Result<TrustRoots, EnrollError> {
    let expected = expected_hex.trim().to_ascii_lowercase();
    let actual = hex::encode(Sha256::digest(bytes));
    if actual != expected {
        return Err(EnrollError::TrustMismatch { expected, actual });
    }
    TrustRoots::from_json(bytes).map_err(|e| EnrollError::TrustMalformed { message: e.to_string() })
}

/// Generates the agent's key on this host: ECDSA P-256.
pub fn generate_key() -> Result<rcgen::KeyPair, EnrollError> {
    rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(|e| EnrollError::KeyGen { message: e.to_string() })
}

/// A PEM CSR for `key`, subject CN [`CSR_COMMON_NAME`].
pub fn build_csr(key: &rcgen::KeyPair) -> Result<String, EnrollError> {
    let keygen = |e: rcgen::Error| EnrollError::KeyGen { message: e.to_string() };
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(keygen)?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(rcgen::DnType::CommonName, CSR_COMMON_NAME);
    params.serialize_request(key).and_then(|csr| csr.pem()).map_err(keygen)
}

fn parse_x509<'a>(der: &'a [u8]) -> Result<X509Certificate<'a>, EnrollError> {
    match X509Certificate::from_der(der) {
        Ok(([], cert)) => Ok(cert),
        Ok(_) => Err(EnrollError::BadCertificate { message: "trailing bytes after the certificate".to_owned() }),
        Err(e) => Err(EnrollError::BadCertificate { message: format!("not valid X.509: {e}") }),
    }
}

/// Refuses `cert_der` unless its SubjectPublicKeyInfo is exactly `our_spki_der`.
pub fn check_public_key(cert_der: &[u8], our_spki_der: &[u8]) -> Result<(), EnrollError> {
    let cert = parse_x509(cert_der)?;
    if cert.public_key().raw != our_spki_der {
        return Err(EnrollError::ForeignKey);
    }
    Ok(())
}

/// Refuses `chain[0]` unless it verifies as a client certificate under `ca` (signature,
/// basic constraints, key usage), the way the coordinator's TLS server will check it.
///
/// The check runs at `max(now, notBefore)`: a host whose clock lags the coordinator by a few
/// seconds must still be able to enroll with a certificate issued "now"; a certificate
/// already expired at `now` is refused.
pub fn check_chain(chain: &[CertificateDer<'static>], ca: &[CertificateDer<'static>], now: UnixTime) -> Result<(), EnrollError> {
    let bad = |message: String| EnrollError::BadCertificate { message };
    let leaf = chain.first().ok_or_else(|| bad("no certificate".to_owned()))?;
    let not_before = parse_x509(leaf)?.validity().not_before.timestamp();
    let at = UnixTime::since_unix_epoch(std::time::Duration::from_secs(now.as_secs().max(u64::try_from(not_before).unwrap_or(0))));
    let mut roots = rustls::RootCertStore::empty();
    for cert in ca {
        roots.add(cert.clone()).map_err(|e| bad(format!("the CA is not usable: {e}")))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| bad(format!("cannot build a verifier: {e}")))?;
    verifier.verify_client_cert(leaf, &chain[1..], at).map_err(|e| bad(format!("does not verify under the coordinator CA: {e}")))?;
    Ok(())
}

/// Refuses `cert_der` unless it names `host_id` as its one `urn:drover:host:` URI and
/// `hostname` as its subject CN.
pub fn check_names(cert_der: &[u8], host_id: &str, hostname: &str) -> Result<(), EnrollError> {
    let bad = |message: String| EnrollError::BadCertificate { message };
    let cert = parse_x509(cert_der)?;
    let san = cert.subject_alternative_name().map_err(|e| bad(format!("bad subjectAltName: {e}")))?;
    let uris: Vec<&str> = san
        .map(|ext| ext.value.general_names.iter().filter_map(|n| if let GeneralName::URI(u) = n { Some(*u) } else { None }).collect())
        .unwrap_or_default();
    let hosts: Vec<&str> = uris.iter().filter_map(|u| u.strip_prefix(HOST_URI_PREFIX)).collect();
    if hosts != [host_id] {
        return Err(bad(format!("it names host ids {hosts:?}, expected exactly [{host_id:?}]")));
    }
    let cns: Vec<&str> = cert.subject().iter_common_name().filter_map(|cn| cn.as_str().ok()).collect();
    if cns != [hostname] {
        return Err(bad(format!("its subject CN is {cns:?}, expected {hostname:?}")));
    }
    Ok(())
}

/// Checks a whole enrollment answer against the host id we enrolled as, our public key and
/// the CA the TLS client trusted (`ca_name` names it in errors); returns the identity to
/// store.
pub fn check_enrollment(
    resp: &EnrollResponse,
    expected_host_id: &str,
    our_spki_der: &[u8],
    trusted_ca: &[CertificateDer<'static>],
    ca_name: &str,
    now: UnixTime,
) -> Result<Identity, EnrollError> {
    let bad = |message: String| EnrollError::BadResponse { message };
    let host_id = uuid::Uuid::parse_str(&resp.host_id).map_err(|_| bad(format!("host id {:?} is not a UUID", resp.host_id)))?;
    if host_id.hyphenated().to_string() != resp.host_id {
        return Err(bad(format!("host id {:?} is not a lowercase hyphenated UUID", resp.host_id)));
    }
    if resp.host_id != expected_host_id {
        return Err(bad(format!("host id {:?} is not the one enrolled for, {expected_host_id:?}", resp.host_id)));
    }
    drover_proto::names::check_hostname(&resp.hostname).map_err(|e| bad(format!("hostname: {e}")))?;
    let returned_ca = client::parse_certificates("caCertificate", resp.ca_certificate.as_bytes()).map_err(|e| bad(e.to_string()))?;
    if returned_ca != trusted_ca {
        return Err(EnrollError::CaMismatch { ca_file: ca_name.to_owned() });
    }
    let chain = client::parse_certificates("certificate", resp.certificate.as_bytes())
        .map_err(|e| EnrollError::BadCertificate { message: e.to_string() })?;
    check_public_key(&chain[0], our_spki_der)?;
    check_chain(&chain, trusted_ca, now)?;
    check_names(&chain[0], &resp.host_id, &resp.hostname)?;
    drover_proto::keys::verifying_key_from_text(&resp.director_public_key).map_err(|e| bad(format!("directorPublicKey: {e}")))?;
    Ok(Identity { host_id: resp.host_id.clone(), hostname: resp.hostname.clone() })
}

/// Runs the whole enrollment (see the module doc) and returns the identity it stored.
pub async fn enroll(config: &Config, host_id: &str, token: Secret, trust_sha256: &str) -> Result<Identity, EnrollError> {
    let host_id = parse_host_id(host_id)?;
    let expected = parse_sha256_hex(trust_sha256)?;
    let state = StateDir::open(&config.state_dir)?;
    if state.is_enrolled() {
        return Err(EnrollError::AlreadyEnrolled { dir: config.state_dir.clone() });
    }
    let ca = client::load_ca(&config.ca_file)?;
    let coordinator = CoordinatorClient::new(crate::USER_AGENT, &config.coordinator_urls, &ca, None, REQUEST_TIMEOUT)?;

    let trust_bytes = coordinator.get_bytes(TRUST_PATH).await?;
    check_trust(&trust_bytes, &expected)?;

    let key = generate_key()?;
    let csr = build_csr(&key)?;
    let keys = crate::host_keys::generate()?;
    let request = EnrollRequest {
        host_id: host_id.clone(),
        token,
        csr,
        seal_key: Some(keys.seal.public_b64()),
        evidence_csr: Some(keys.evidence_csr.clone()),
    };
    let resp: EnrollResponse = coordinator.post_json(ENROLL_PATH, &request).await?;
    let now = UnixTime::now();
    let identity = check_enrollment(&resp, &host_id, &key.public_key_der(), &ca, &display(&config.ca_file), now)?;
    if let Some(cert) = &resp.evidence_certificate {
        let at = drover_proto::time::Time::from_unix(i64::try_from(now.as_secs()).unwrap_or(i64::MAX))
            .map_err(|e| EnrollError::BadResponse { message: format!("this host's clock: {e}") })?;
        keys.check_certificate(cert, &identity.host_id, at)?;
    } else {
        tracing::warn!("the coordinator issued no evidence certificate: this host will sign no evidence");
    }

    keys.store(&state, resp.evidence_certificate.as_deref())?;
    state.write_key(&key.serialize_pem())?;
    state.write_cert(&resp.certificate)?;
    state.write_ca(&resp.ca_certificate)?;
    state.write_trust(&trust_bytes)?;
    state.write_director_pub(&resp.director_public_key)?;
    state.write_identity(&identity)?;
    Ok(identity)
}

fn display(p: &Path) -> String {
    p.display().to_string()
}

#[cfg(test)]
mod tests;
