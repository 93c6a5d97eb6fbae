//! The coordinator's certificate authority: the CA itself, the coordinator's server
//! certificate, agent certificates issued from CSRs, operator credentials, and the CRL that
//! rustls checks on every handshake.
//!
//! Every certificate is built from the coordinator's own parameters. A CSR contributes its
//! public key and nothing else: whatever subject, SAN or extension it asks for is ignored,
//! so an agent cannot talk its way into an operator role (see `identity`).
//!
//! Keys are ECDSA P-256 (`rcgen::PKCS_ECDSA_P256_SHA256`): curl, OpenSSL and rustls all
//! handle it, on every platform the bootstrap script runs on. Time is always a parameter.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use base64::Engine as _;
use drover_proto::time::Time;
use rcgen::{
    BasicConstraints, Certificate, CertificateParams, CertificateRevocationListParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose,
    IsCa, KeyPair, KeyUsagePurpose, PKCS_ECDSA_P256_SHA256, PublicKeyData, RevokedCertParams, SanType, SerialNumber, SubjectPublicKeyInfo,
};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use uuid::Uuid;
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::error::X509Error;
use x509_parser::prelude::{FromDer, X509Certificate};

use crate::identity::{HOST_URI_PREFIX, OPERATOR_URI_PREFIX, OperatorNameError, Role, check_operator_name};

const DAY_SECS: u64 = 86_400;
/// Lifetime of the CA certificate: ten years (a CA rotation is a fleet-wide re-enrollment).
pub const CA_VALIDITY_SECS: u64 = 3_650 * DAY_SECS;
/// Lifetime of the coordinator's server certificate: one year.
pub const SERVER_CERT_VALIDITY_SECS: u64 = 365 * DAY_SECS;
/// Lifetime of an agent's client certificate: 30 days; agents renew at about 2/3 of it.
pub const HOST_CERT_VALIDITY_SECS: u64 = 30 * DAY_SECS;
/// Lifetime of an operator certificate: one year. Operators (and CI's publisher credential)
/// have no automatic renewal, so a short life would mostly produce outages; a lost or
/// departed operator's certificate is revoked through the CRL instead.
pub const OPERATOR_CERT_VALIDITY_SECS: u64 = 365 * DAY_SECS;
/// Validity of a host's evidence certificate.
pub const EVIDENCE_CERT_VALIDITY_SECS: u64 = 3 * 365 * DAY_SECS;
/// id-kp-documentSigning (RFC 9336), 1.3.6.1.5.5.7.3.36.
const DOCUMENT_SIGNING_OID: &[u64] = &[1, 3, 6, 1, 5, 5, 7, 3, 36];
/// How far `notBefore` is set before `now`, so a peer whose clock lags a little does not
/// see a freshly issued certificate as not yet valid. `notAfter` is still `now + validity`.
pub const BACKDATE_SECS: u64 = 300;
/// The CA's subject common name.
pub const CA_COMMON_NAME: &str = "Drover coordinator CA";
/// The server certificate's subject common name (clients check the SANs, not this).
pub const SERVER_COMMON_NAME: &str = "Drover coordinator";

/// Why a certificate could not be issued, loaded or inspected.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// A `--san` that is neither an IP literal nor a DNS name.
    #[error("subject alternative name {value:?} is neither an IP address nor a DNS name ({reason})")]
    BadSan {
        /// The text given.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A server certificate needs at least one name clients can check.
    #[error("a server certificate needs at least one subject alternative name")]
    NoSans,
    /// A hostname that is not a lowercase DNS name (the host identity's CN and DNS SAN).
    #[error("hostname {value:?} must be a lowercase DNS name ([a-z0-9-] labels separated by dots)")]
    BadHostname {
        /// The text given.
        value: String,
    },
    /// An operator name outside `[A-Za-z0-9._-]{1,64}`.
    #[error("{reason}")]
    BadOperatorName {
        /// The name given.
        name: String,
        /// Why it is refused.
        #[source]
        reason: OperatorNameError,
    },
    /// The CA certificate file does not hold a usable CA certificate.
    #[error("the CA certificate is not a parsable X.509 CA certificate")]
    BadCaCert {
        /// What the parser said.
        #[source]
        source: rcgen::Error,
    },
    /// A certificate that parses but is not a CA (no basicConstraints CA:TRUE).
    #[error("the CA certificate is not marked as a CA (basicConstraints CA:TRUE is missing)")]
    NotACa,
    /// The CA key file does not hold a usable private key.
    #[error("the CA key is not a PKCS#8 PEM private key of a supported algorithm")]
    BadCaKey {
        /// What the parser said.
        #[source]
        source: rcgen::Error,
    },
    /// A private key that does not belong to the certificate it is paired with.
    #[error("the private key does not match the {what} certificate's public key")]
    KeyMismatch {
        /// Which certificate ("CA", "server").
        what: &'static str,
    },
    /// A private key PEM that does not parse.
    #[error("not a PKCS#8 PEM private key of a supported algorithm")]
    BadKey {
        /// What the parser said.
        #[source]
        source: rcgen::Error,
    },
    /// Not PEM, or PEM with the wrong label.
    #[error("expected a PEM block labelled {expected:?}")]
    NotPem {
        /// The label wanted.
        expected: &'static str,
    },
    /// A CSR that is not a well-formed PKCS#10 request.
    #[error("the certificate signing request is malformed")]
    BadCsr {
        /// What the parser said.
        #[source]
        source: X509Error,
    },
    /// A CSR whose key is not of a type certified for `purpose`, named as it names itself.
    #[error("the CSR's key is {found}; {}", purpose.expects())]
    UnsupportedCsrKey {
        /// The key the CSR carries.
        found: CsrKey,
        /// What the certificate would be for.
        purpose: CsrPurpose,
    },
    /// A CSR signed with an algorithm that does not go with its (accepted) key, or that the
    /// verifier does not implement.
    #[error("the CSR's {key} key is accepted, but its signature algorithm {algorithm} is not (ECDSA with SHA-256 or SHA-384, or Ed25519)")]
    CsrSignatureAlgorithm {
        /// The key the CSR carries.
        key: CsrKey,
        /// The signature algorithm's OID.
        algorithm: String,
    },
    /// A CSR whose self-signature does not verify: whoever sent it does not hold the key.
    #[error("the CSR's self-signature does not verify against its own {key} key: it was not signed by that key")]
    CsrSignature {
        /// The key the CSR carries.
        key: CsrKey,
        /// What the verifier said.
        #[source]
        source: X509Error,
    },
    /// A CSR whose (accepted) key's bytes do not parse as a key of that type.
    #[error("the CSR's {key} key is malformed")]
    CsrKeyMalformed {
        /// The key type the CSR claims.
        key: CsrKey,
        /// What the parser said.
        #[source]
        source: rcgen::Error,
    },
    /// A certificate (not the CA's) that does not parse.
    #[error("not a parsable X.509 certificate")]
    BadCert {
        /// What the parser said.
        #[source]
        source: X509Error,
    },
    /// A certificate whose signature was not made by this CA.
    #[error("the certificate was not issued by this CA")]
    NotIssuedByCa {
        /// What the verifier said.
        #[source]
        source: X509Error,
    },
    /// A revoked serial that is not 1–20 bytes of hex.
    #[error("serial {value:?} must be 1 to 20 bytes of hex")]
    BadSerial {
        /// The text given.
        value: String,
    },
    /// A CRL whose next update is not after its issue time.
    #[error("the CRL's next update must lie after its issue time")]
    BadCrlWindow,
    /// An instant rcgen cannot encode.
    #[error("time {time} cannot be written into a certificate")]
    TimeOutOfRange {
        /// The instant.
        time: Time,
    },
    /// Key generation failed (the system's random source).
    #[error("could not generate a key pair")]
    KeyGen {
        /// What rcgen said.
        #[source]
        source: rcgen::Error,
    },
    /// Signing a certificate or CRL failed.
    #[error("could not sign the {what}")]
    Sign {
        /// What was being signed.
        what: &'static str,
        /// What rcgen said.
        #[source]
        source: rcgen::Error,
    },
}

/// One subject alternative name of the server certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum San {
    /// A DNS name (lowercased).
    Dns(String),
    /// An IP address.
    Ip(IpAddr),
}

impl San {
    /// Parses a `--san` value: an IP literal becomes an IP SAN, anything else must be a DNS
    /// name (no wildcards: the coordinator is one service with names of its own).
    pub fn parse(value: &str) -> Result<San, PkiError> {
        if let Ok(ip) = value.parse::<IpAddr>() {
            return Ok(San::Ip(ip));
        }
        let lower = value.to_ascii_lowercase();
        if value.contains('*') {
            return Err(PkiError::BadSan { value: value.to_owned(), reason: "wildcards are not issued" });
        }
        drover_proto::names::check_hostname(&lower)
            .map_err(|_| PkiError::BadSan { value: value.to_owned(), reason: "DNS labels are [A-Za-z0-9-], 1 to 63 characters" })?;
        Ok(San::Dns(lower))
    }

    fn to_rcgen(&self) -> Result<SanType, PkiError> {
        Ok(match self {
            San::Dns(name) => SanType::DnsName(ia5(name)?),
            San::Ip(ip) => SanType::IpAddress(*ip),
        })
    }
}

impl FromStr for San {
    type Err = PkiError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        San::parse(s)
    }
}

impl fmt::Display for San {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            San::Dns(name) => f.write_str(name),
            San::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

/// A certificate the CA issued, with what the store records about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedCert {
    /// The certificate, PEM.
    pub pem: String,
    /// The certificate, DER.
    pub der: Vec<u8>,
    /// Its serial as lowercase hex (32 digits), the key revocation goes by.
    pub serial_hex: String,
    /// Start of validity (`now` minus [`BACKDATE_SECS`]).
    pub not_before: Time,
    /// End of validity (`now` plus the certificate kind's validity).
    pub not_after: Time,
}

/// A certificate together with the private key generated for it (server and operator
/// credentials; agents generate their own keys and send only a CSR).
#[derive(Clone)]
pub struct Credential {
    /// The certificate.
    pub cert: IssuedCert,
    /// The private key, PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`).
    pub key_pem: String,
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print key material.
        f.debug_struct("Credential").field("cert", &self.cert).field("key_pem", &"<redacted>").finish()
    }
}

/// The coordinator's certificate authority.
pub struct Ca {
    cert_pem: String,
    cert_der: Vec<u8>,
    /// rcgen's view of the CA for signing: only its subject, key identifier method and key
    /// usages are used. For a loaded CA it is rebuilt from the certificate's fields (rcgen
    /// cannot sign with a parsed certificate), which keeps issuer name and authority key
    /// identifier byte-identical to the real CA certificate's.
    issuer: Certificate,
    key: KeyPair,
}

impl fmt::Debug for Ca {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print key material.
        write!(f, "Ca({})", self.sha256_fingerprint())
    }
}

impl Ca {
    /// Creates a new CA: ECDSA P-256, CN [`CA_COMMON_NAME`], CA with path length 0 (it signs
    /// end-entity certificates only), keyCertSign + cRLSign, valid [`CA_VALIDITY_SECS`].
    pub fn generate(now: Time) -> Result<Ca, PkiError> {
        let key = new_key()?;
        let mut params = base_params(now, CA_VALIDITY_SECS)?;
        params.distinguished_name = common_name(CA_COMMON_NAME);
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let cert = params.self_signed(&key).map_err(|source| PkiError::Sign { what: "CA certificate", source })?;
        Ok(Ca { cert_pem: cert.pem(), cert_der: cert.der().to_vec(), issuer: cert, key })
    }

    /// Loads a CA from its certificate and PKCS#8 private key (both PEM), checking that the
    /// certificate is a CA and that the key is its key.
    pub fn load(cert_pem: &str, key_pem: &str) -> Result<Ca, PkiError> {
        let cert_der = pem_to_der(cert_pem, "CERTIFICATE")?;
        let key = KeyPair::from_pem(key_pem).map_err(|source| PkiError::BadCaKey { source })?;
        let params = CertificateParams::from_ca_cert_der(&cert_der.as_slice().into()).map_err(|source| PkiError::BadCaCert { source })?;
        if !matches!(params.is_ca, IsCa::Ca(_)) {
            return Err(PkiError::NotACa);
        }
        if subject_public_key(&cert_der)? != key.public_key_raw() {
            return Err(PkiError::KeyMismatch { what: "CA" });
        }
        let issuer = params.self_signed(&key).map_err(|source| PkiError::Sign { what: "CA certificate", source })?;
        // Re-encoded from the DER actually used, so `cert_pem` never carries stray text or a
        // second block from the file.
        Ok(Ca { cert_pem: der_to_pem("CERTIFICATE", &cert_der), cert_der, issuer, key })
    }

    /// The CA certificate, PEM (what `ca.crt` holds and what clients pin).
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA certificate, DER (for rustls root stores).
    pub fn cert_der(&self) -> &[u8] {
        &self.cert_der
    }

    /// The CA private key, PKCS#8 PEM (for writing `ca.key`).
    pub fn key_pem(&self) -> String {
        self.key.serialize_pem()
    }

    /// The CA certificate's SHA-256 fingerprint in OpenSSL's form (`AB:CD:…`), as
    /// `openssl x509 -fingerprint -sha256` prints it.
    pub fn sha256_fingerprint(&self) -> String {
        sha256_fingerprint(&self.cert_der)
    }

    /// Issues the coordinator's server certificate for `sans` with a fresh key: EKU
    /// serverAuth, valid [`SERVER_CERT_VALIDITY_SECS`].
    pub fn issue_server(&self, sans: &[San], now: Time) -> Result<Credential, PkiError> {
        if sans.is_empty() {
            return Err(PkiError::NoSans);
        }
        let mut params = leaf_params(now, SERVER_CERT_VALIDITY_SECS, ExtendedKeyUsagePurpose::ServerAuth)?;
        params.distinguished_name = common_name(SERVER_COMMON_NAME);
        params.subject_alt_names = sans.iter().map(San::to_rcgen).collect::<Result<_, _>>()?;
        let key = new_key()?;
        let cert = self.sign(params, &key, "server certificate", now, SERVER_CERT_VALIDITY_SECS)?;
        Ok(Credential { cert, key_pem: key.serialize_pem() })
    }

    /// Issues an agent's client certificate for the public key of `csr_pem`.
    ///
    /// The CSR's self-signature must verify (the sender holds the key); everything else in
    /// it — subject, SANs, extensions — is ignored. The certificate says only what the
    /// coordinator decided: CN `hostname`, SAN URI `urn:drover:host:<host_id>` and DNS
    /// `hostname`, EKU clientAuth, valid [`HOST_CERT_VALIDITY_SECS`].
    pub fn issue_host_from_csr(&self, csr_pem: &str, host_id: Uuid, hostname: &str, now: Time) -> Result<IssuedCert, PkiError> {
        if drover_proto::names::check_hostname(hostname).is_err() {
            return Err(PkiError::BadHostname { value: hostname.to_owned() });
        }
        let public_key = csr_public_key(csr_pem, CsrPurpose::Host)?;
        let mut params = leaf_params(now, HOST_CERT_VALIDITY_SECS, ExtendedKeyUsagePurpose::ClientAuth)?;
        params.distinguished_name = common_name(hostname);
        params.subject_alt_names = vec![SanType::URI(ia5(&format!("{HOST_URI_PREFIX}{host_id}"))?), SanType::DnsName(ia5(hostname)?)];
        self.sign(params, &public_key, "host certificate", now, HOST_CERT_VALIDITY_SECS)
    }

    /// Issues a host's evidence certificate for the Ed25519 key of `csr_pem`
    /// ([`drover_proto::evidence`]): CN `hostname`, SAN URI `urn:drover:host:<host_id>`,
    /// extended key usage id-kp-documentSigning alone (RFC 9336), so the certificate names
    /// whose statements the key signs and can never authenticate a TLS client. Valid
    /// [`EVIDENCE_CERT_VALIDITY_SECS`]: the key lives as long as the host's installation (a
    /// reimage enrolls, and certifies, a new one).
    pub fn issue_evidence_from_csr(&self, csr_pem: &str, host_id: Uuid, hostname: &str, now: Time) -> Result<IssuedCert, PkiError> {
        if drover_proto::names::check_hostname(hostname).is_err() {
            return Err(PkiError::BadHostname { value: hostname.to_owned() });
        }
        let public_key = csr_public_key(csr_pem, CsrPurpose::Evidence)?;
        let mut params = leaf_params(now, EVIDENCE_CERT_VALIDITY_SECS, ExtendedKeyUsagePurpose::Other(DOCUMENT_SIGNING_OID.to_vec()))?;
        params.distinguished_name = common_name(hostname);
        params.subject_alt_names = vec![SanType::URI(ia5(&format!("{HOST_URI_PREFIX}{host_id}"))?)];
        self.sign(params, &public_key, "evidence certificate", now, EVIDENCE_CERT_VALIDITY_SECS)
    }

    /// Issues an operator credential with a fresh key: CN `name`, SAN URI
    /// `urn:drover:operator:<role>:<name>`, EKU clientAuth, valid
    /// [`OPERATOR_CERT_VALIDITY_SECS`].
    pub fn issue_operator(&self, name: &str, role: Role, now: Time) -> Result<Credential, PkiError> {
        check_operator_name(name).map_err(|reason| PkiError::BadOperatorName { name: name.to_owned(), reason })?;
        let mut params = leaf_params(now, OPERATOR_CERT_VALIDITY_SECS, ExtendedKeyUsagePurpose::ClientAuth)?;
        params.distinguished_name = common_name(name);
        params.subject_alt_names = vec![SanType::URI(ia5(&format!("{OPERATOR_URI_PREFIX}{role}:{name}"))?)];
        let key = new_key()?;
        let cert = self.sign(params, &key, "operator certificate", now, OPERATOR_CERT_VALIDITY_SECS)?;
        Ok(Credential { cert, key_pem: key.serialize_pem() })
    }

    /// Signs a CRL (DER, for rustls's `WebPkiClientVerifier::builder(..).with_crls(..)`)
    /// listing `revoked` as `(serial_hex, revoked_at)`, issued `now`, next update
    /// `now + next_update_secs`. The CRL number is `now`'s Unix seconds, which grows with
    /// every later CRL without a counter to persist.
    pub fn crl<S: AsRef<str>>(&self, revoked: &[(S, Time)], now: Time, next_update_secs: u64) -> Result<Vec<u8>, PkiError> {
        if next_update_secs == 0 {
            return Err(PkiError::BadCrlWindow);
        }
        let revoked_certs = revoked
            .iter()
            .map(|(serial, at)| {
                Ok(RevokedCertParams {
                    serial_number: parse_serial(serial.as_ref())?,
                    revocation_time: to_datetime(*at)?,
                    reason_code: None,
                    invalidity_date: None,
                })
            })
            .collect::<Result<Vec<_>, PkiError>>()?;
        let params = CertificateRevocationListParams {
            this_update: to_datetime(now)?,
            next_update: to_datetime(now.plus_secs(next_update_secs))?,
            crl_number: SerialNumber::from(u64::try_from(now.unix()).unwrap_or(0)),
            issuing_distribution_point: None,
            revoked_certs,
            // The CRL's authority key identifier must equal the CA certificate's subject key
            // identifier, or verifiers cannot match the CRL to its issuer.
            key_identifier_method: self.issuer.params().key_identifier_method.clone(),
        };
        let crl = params.signed_by(&self.issuer, &self.key).map_err(|source| PkiError::Sign { what: "CRL", source })?;
        Ok(crl.der().to_vec())
    }

    /// Checks that `cert_der` was signed by this CA (not its validity period or revocation:
    /// that is the TLS layer's job).
    pub fn verify_issued(&self, cert_der: &[u8]) -> Result<(), PkiError> {
        let (_, cert) = X509Certificate::from_der(cert_der).map_err(|e| PkiError::BadCert { source: nom_error(e) })?;
        let (_, ca) = X509Certificate::from_der(&self.cert_der).map_err(|e| PkiError::BadCert { source: nom_error(e) })?;
        cert.verify_signature(Some(ca.public_key())).map_err(|source| PkiError::NotIssuedByCa { source })
    }

    fn sign(
        &self,
        params: CertificateParams,
        public_key: &impl PublicKeyData,
        what: &'static str,
        now: Time,
        validity_secs: u64,
    ) -> Result<IssuedCert, PkiError> {
        let serial_hex = params.serial_number.as_ref().map(|s| hex::encode(s.as_ref())).unwrap_or_default();
        let cert = params.signed_by(public_key, &self.issuer, &self.key).map_err(|source| PkiError::Sign { what, source })?;
        Ok(IssuedCert {
            pem: cert.pem(),
            der: cert.der().to_vec(),
            serial_hex,
            not_before: backdated(now),
            not_after: now.plus_secs(validity_secs),
        })
    }
}

/// Checks that `key_pem` (PKCS#8) is the private key of the certificate `cert_der`;
/// `what` names the certificate in the error.
pub fn check_key_matches(cert_der: &[u8], key_pem: &str, what: &'static str) -> Result<(), PkiError> {
    let key = KeyPair::from_pem(key_pem).map_err(|source| PkiError::BadKey { source })?;
    if subject_public_key(cert_der)? == key.public_key_raw() { Ok(()) } else { Err(PkiError::KeyMismatch { what }) }
}

/// The DER inside a PEM block labelled `label` (the first block; surrounding text ignored).
pub fn pem_to_der(pem: &str, label: &'static str) -> Result<Vec<u8>, PkiError> {
    let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).map_err(|_| PkiError::NotPem { expected: label })?;
    if block.label != label {
        return Err(PkiError::NotPem { expected: label });
    }
    Ok(block.contents)
}

/// PEM text of `der` under `label`, 64 base64 characters a line, LF line ends.
pub fn der_to_pem(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// SHA-256 fingerprint of a DER certificate as OpenSSL prints it: uppercase hex pairs
/// separated by colons.
pub fn sha256_fingerprint(der: &[u8]) -> String {
    Sha256::digest(der).iter().map(|b| format!("{b:02X}")).collect::<Vec<_>>().join(":")
}

/// curl's `--pinnedpubkey` value for a certificate: `sha256//` and the base64 SHA-256 of
/// its DER SubjectPublicKeyInfo. It pins the server key, so it survives re-issuing the
/// server certificate for the same key but not a new key.
pub fn spki_sha256_pin(cert_der: &[u8]) -> Result<String, PkiError> {
    let (_, cert) = X509Certificate::from_der(cert_der).map_err(|e| PkiError::BadCert { source: nom_error(e) })?;
    let digest = Sha256::digest(cert.tbs_certificate.subject_pki.raw);
    Ok(format!("sha256//{}", base64::engine::general_purpose::STANDARD.encode(digest)))
}

/// What a CSR is sent for: each certificate certifies its own key types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CsrPurpose {
    /// A host's TLS client certificate (enrollment, renewal): ECDSA P-256 (what the agent
    /// makes), P-384 or Ed25519, the keys rustls verifies client signatures with.
    Host,
    /// A host's evidence certificate ([`drover_proto::evidence`]): Ed25519 only, the one
    /// algorithm evidence statements are signed and checked with.
    Evidence,
}

impl CsrPurpose {
    /// The key types certified for this purpose.
    fn accepts(self, key: &CsrKey) -> bool {
        match self {
            CsrPurpose::Host => matches!(key, CsrKey::EcdsaP256 | CsrKey::EcdsaP384 | CsrKey::Ed25519),
            CsrPurpose::Evidence => matches!(key, CsrKey::Ed25519),
        }
    }

    /// What this purpose needs, as a sentence's second half.
    fn expects(self) -> &'static str {
        match self {
            CsrPurpose::Host => "host certificates need ECDSA P-256 (as the agent makes), ECDSA P-384 or Ed25519",
            CsrPurpose::Evidence => "evidence keys must be Ed25519",
        }
    }
}

/// The key a CSR carries, as its SubjectPublicKeyInfo names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CsrKey {
    /// ECDSA on P-256.
    EcdsaP256,
    /// ECDSA on P-384.
    EcdsaP384,
    /// Ed25519.
    Ed25519,
    /// RSA (`rsaEncryption`), with the modulus' size when it parses.
    Rsa {
        /// Bits of the modulus (0 when it does not parse).
        bits: usize,
    },
    /// An EC key on another curve (P-521, secp256k1, Brainpool, …).
    OtherCurve {
        /// The curve's name, or its OID.
        curve: String,
    },
    /// Any other algorithm.
    Other {
        /// The algorithm's name, or its OID.
        algorithm: String,
    },
}

impl fmt::Display for CsrKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CsrKey::EcdsaP256 => f.write_str("ECDSA P-256"),
            CsrKey::EcdsaP384 => f.write_str("ECDSA P-384"),
            CsrKey::Ed25519 => f.write_str("Ed25519"),
            CsrKey::Rsa { bits: 0 } => f.write_str("RSA"),
            CsrKey::Rsa { bits } => write!(f, "RSA ({bits}-bit)"),
            CsrKey::OtherCurve { curve } => write!(f, "ECDSA on curve {curve}"),
            CsrKey::Other { algorithm } => f.write_str(algorithm),
        }
    }
}

/// Bits of a big-endian unsigned integer (a DER INTEGER's bytes, leading zeros and all).
fn bit_length(bytes: &[u8]) -> usize {
    let bytes = &bytes[bytes.iter().take_while(|b| **b == 0).count()..];
    match bytes.first() {
        Some(first) => (bytes.len() - 1) * 8 + (8 - first.leading_zeros() as usize),
        None => 0,
    }
}

/// What key `spki` holds, by its algorithm OID (and curve, for EC keys).
fn csr_key(spki: &x509_parser::x509::SubjectPublicKeyInfo<'_>) -> CsrKey {
    let named =
        |oid: &str, names: &[(&str, &str)]| names.iter().find(|(o, _)| *o == oid).map_or_else(|| oid.to_owned(), |(_, n)| (*n).to_owned());
    match spki.algorithm.algorithm.to_id_string().as_str() {
        "1.2.840.113549.1.1.1" => {
            let bits = match spki.parsed() {
                Ok(x509_parser::public_key::PublicKey::RSA(rsa)) => bit_length(rsa.modulus),
                _ => 0,
            };
            CsrKey::Rsa { bits }
        }
        "1.2.840.10045.2.1" => {
            let curve = spki.algorithm.parameters.as_ref().and_then(|p| p.as_oid().ok()).map(|o| o.to_id_string());
            match curve.as_deref() {
                Some("1.2.840.10045.3.1.7") => CsrKey::EcdsaP256,
                Some("1.3.132.0.34") => CsrKey::EcdsaP384,
                Some(other) => CsrKey::OtherCurve {
                    curve: named(other, &[("1.3.132.0.35", "P-521"), ("1.3.132.0.10", "secp256k1"), ("1.2.840.10045.3.1.1", "P-192")]),
                },
                None => CsrKey::OtherCurve { curve: "(none named)".to_owned() },
            }
        }
        "1.3.101.112" => CsrKey::Ed25519,
        other => CsrKey::Other {
            algorithm: named(
                other,
                &[
                    ("1.2.840.113549.1.1.10", "RSASSA-PSS"),
                    ("1.2.840.10040.4.1", "DSA"),
                    ("1.3.101.113", "Ed448"),
                    ("1.3.101.110", "X25519 (a key-agreement key: it cannot sign)"),
                    ("1.3.101.111", "X448 (a key-agreement key: it cannot sign)"),
                ],
            ),
        },
    }
}

/// Checks a CSR the way issuing from it for `purpose` would (PEM, key type, self-signature)
/// without signing anything: cheap enough to run on unauthenticated input before a token is
/// spent.
pub fn check_csr(csr_pem: &str, purpose: CsrPurpose) -> Result<(), PkiError> {
    csr_public_key(csr_pem, purpose).map(|_| ())
}

/// The public key of a CSR for `purpose`: its key type is checked first, so a key that is
/// not certified is named as such rather than as a signature that does not verify (the
/// verifier knows fewer algorithms than there are keys), then its self-signature.
fn csr_public_key(csr_pem: &str, purpose: CsrPurpose) -> Result<SubjectPublicKeyInfo, PkiError> {
    // Some tools (old OpenSSL, Windows) label the block "NEW CERTIFICATE REQUEST".
    let der = pem_to_der(csr_pem, "CERTIFICATE REQUEST")
        .or_else(|_| pem_to_der(csr_pem, "NEW CERTIFICATE REQUEST"))
        .map_err(|_| PkiError::NotPem { expected: "CERTIFICATE REQUEST" })?;
    // Parsed with x509-parser rather than rcgen's `CertificateSigningRequestParams`, which
    // refuses any extension it does not model — pointless, as no extension is used.
    let (rest, csr) = X509CertificationRequest::from_der(&der).map_err(|e| PkiError::BadCsr { source: nom_error(e) })?;
    if !rest.is_empty() {
        return Err(PkiError::BadCsr { source: X509Error::InvalidCertificate });
    }
    let key = csr_key(&csr.certification_request_info.subject_pki);
    if !purpose.accepts(&key) {
        return Err(PkiError::UnsupportedCsrKey { found: key, purpose });
    }
    match csr.verify_signature() {
        Ok(()) => {}
        Err(X509Error::SignatureUnsupportedAlgorithm) => {
            return Err(PkiError::CsrSignatureAlgorithm { key, algorithm: csr.signature_algorithm.algorithm.to_id_string() });
        }
        Err(source) => return Err(PkiError::CsrSignature { key, source }),
    }
    SubjectPublicKeyInfo::from_der(csr.certification_request_info.subject_pki.raw)
        .map_err(|source| PkiError::CsrKeyMalformed { key, source })
}

/// The raw subjectPublicKey bits of a DER certificate (what `KeyPair::public_key_raw` gives).
fn subject_public_key(cert_der: &[u8]) -> Result<Vec<u8>, PkiError> {
    let (_, cert) = X509Certificate::from_der(cert_der).map_err(|e| PkiError::BadCert { source: nom_error(e) })?;
    Ok(cert.tbs_certificate.subject_pki.subject_public_key.data.to_vec())
}

fn nom_error(e: x509_parser::nom::Err<X509Error>) -> X509Error {
    match e {
        x509_parser::nom::Err::Error(e) | x509_parser::nom::Err::Failure(e) => e,
        x509_parser::nom::Err::Incomplete(_) => X509Error::InvalidCertificate,
    }
}

fn new_key() -> Result<KeyPair, PkiError> {
    KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(|source| PkiError::KeyGen { source })
}

fn common_name(cn: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, cn);
    dn
}

fn ia5(s: &str) -> Result<rcgen::Ia5String, PkiError> {
    // Every caller has validated `s` as ASCII already; this cannot fail in practice.
    rcgen::Ia5String::try_from(s).map_err(|_| PkiError::BadSan { value: s.to_owned(), reason: "not ASCII" })
}

fn backdated(now: Time) -> Time {
    Time::from_unix(now.unix().saturating_sub(BACKDATE_SECS as i64)).unwrap_or(now)
}

fn to_datetime(t: Time) -> Result<OffsetDateTime, PkiError> {
    OffsetDateTime::from_unix_timestamp(t.unix()).map_err(|_| PkiError::TimeOutOfRange { time: t })
}

/// Validity window and a fresh serial; the common ground of every certificate issued.
fn base_params(now: Time, validity_secs: u64) -> Result<CertificateParams, PkiError> {
    let mut params = CertificateParams::default();
    params.not_before = to_datetime(backdated(now))?;
    params.not_after = to_datetime(now.plus_secs(validity_secs))?;
    params.serial_number = Some(random_serial());
    Ok(params)
}

/// An end-entity certificate: not a CA, digitalSignature (what ECDSA and Ed25519 TLS keys
/// do), one extended key usage, and an authority key identifier pointing at the CA.
fn leaf_params(now: Time, validity_secs: u64, eku: ExtendedKeyUsagePurpose) -> Result<CertificateParams, PkiError> {
    let mut params = base_params(now, validity_secs)?;
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![eku];
    params.use_authority_key_identifier_extension = true;
    Ok(params)
}

/// 16 random bytes with the top bit clear (a positive INTEGER with no padding byte) and the
/// next bit set (no leading zero byte is dropped), so the serial is always 32 hex digits,
/// with 126 random bits.
fn random_serial() -> SerialNumber {
    let mut bytes: [u8; 16] = rand::random();
    bytes[0] = (bytes[0] & 0x3f) | 0x40;
    SerialNumber::from_slice(&bytes)
}

fn parse_serial(value: &str) -> Result<SerialNumber, PkiError> {
    let bad = || PkiError::BadSerial { value: value.to_owned() };
    let bytes = hex::decode(value).map_err(|_| bad())?;
    if bytes.is_empty() || bytes.len() > 20 {
        return Err(bad());
    }
    Ok(SerialNumber::from_slice(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Time {
        Time::parse_strict("2026-03-01T12:00:00Z").expect("valid")
    }

    #[test]
    fn sans_parse_as_ip_or_dns() {
        assert_eq!(San::parse("10.0.0.1").expect("ip"), San::Ip("10.0.0.1".parse().expect("ip")));
        assert_eq!(San::parse("::1").expect("ip6"), San::Ip("::1".parse().expect("ip")));
        assert_eq!(San::parse("Coord.Example.com").expect("dns"), San::Dns("coord.example.com".into()));
        for bad in ["", "*.example.com", "a b", "-x.example", "ex ample", "é.example"] {
            assert!(San::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn serials_are_32_hex_digits_and_positive() {
        for _ in 0..64 {
            let hex = hex::encode(random_serial().as_ref());
            assert_eq!(hex.len(), 32);
            assert!(matches!(hex.as_bytes()[0], b'4'..=b'7'), "{hex}");
        }
        assert!(parse_serial("zz").is_err());
        assert!(parse_serial("").is_err());
        assert!(parse_serial(&"ab".repeat(21)).is_err());
    }

    #[test]
    fn a_loaded_ca_signs_what_the_original_verifies() {
        let ca = Ca::generate(now()).expect("ca");
        let loaded = Ca::load(ca.cert_pem(), &ca.key_pem()).expect("load");
        assert_eq!(loaded.cert_der(), ca.cert_der());
        assert_eq!(loaded.cert_pem(), ca.cert_pem(), "re-encoded PEM is rcgen's PEM");
        let op = loaded.issue_operator("alice", Role::Viewer, now()).expect("issue");
        ca.verify_issued(&op.cert.der).expect("signed by the same CA");
        let other = Ca::generate(now()).expect("ca");
        assert!(matches!(other.verify_issued(&op.cert.der), Err(PkiError::NotIssuedByCa { .. })));
        assert!(matches!(Ca::load(ca.cert_pem(), &other.key_pem()), Err(PkiError::KeyMismatch { what: "CA" })));
        assert!(matches!(Ca::load(&op.cert.pem, &op.key_pem), Err(PkiError::NotACa)));
    }

    #[test]
    fn crl_window_and_serials_are_checked() {
        let ca = Ca::generate(now()).expect("ca");
        assert!(matches!(ca.crl::<&str>(&[], now(), 0), Err(PkiError::BadCrlWindow)));
        assert!(matches!(ca.crl(&[("nothex", now())], now(), 60), Err(PkiError::BadSerial { .. })));
        assert!(!ca.crl::<&str>(&[], now(), 60).expect("empty crl").is_empty());
    }

    #[test]
    fn ca_is_send_and_sync_for_sharing_across_tasks() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Ca>();
    }
}
