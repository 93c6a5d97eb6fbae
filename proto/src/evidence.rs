//! Host-signed evidence: what a host reported about itself (a `validate_clean`, a GPU scrub,
//! its probe results), signed by a key only that host holds.
//!
//! The coordinator's records say what the coordinator was told; a tenant or an auditor who
//! does not trust the coordinator's operator needs the host's own word. At enrollment the
//! agent makes an Ed25519 *evidence key* and the coordinator's CA certifies it for that host
//! id (SAN `urn:drover:host:<id>`, extended key usage id-kp-documentSigning only, so the
//! certificate can never serve as a TLS client certificate). The agent signs each statement
//! with it; anyone with the CA certificate checks it offline ([`verify`]).
//!
//! Each rule is its own [`EvidenceError`] variant. What "replayed" means depends on what the
//! verifier expects: [`Expect`] pins the host, task and job, so a genuine statement about
//! another task or another host is refused as such.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::{Signature, Signer as _, SigningKey, Verifier as _, VerifyingKey};
use serde::{Deserialize, Serialize};
use x509_parser::prelude::{FromDer, GeneralName, ParsedExtension, X509Certificate};

use crate::canonical;
use crate::report::{ProbeResult, StepResult, TaskOutcome};
use crate::time::Time;

/// The statement format's version.
pub const VERSION: u32 = 1;
/// Signed bytes are this prefix, then the statement's canonical JSON: a signature made for
/// anything else (a task, a manifest) is never evidence.
const DOMAIN: &[u8] = b"drover-evidence-v1\0";
/// The URI SAN prefix naming a host.
pub const HOST_URI_PREFIX: &str = "urn:drover:host:";
/// id-kp-documentSigning (RFC 9336), the one purpose an evidence certificate has.
pub const DOCUMENT_SIGNING_OID: &str = "1.3.6.1.5.5.7.3.36";
/// Largest evidence document accepted (steps and probe output are bounded by the agent's
/// report limits; this bounds what a verifier parses).
pub const MAX_EVIDENCE_BYTES: usize = 256 * 1024;

/// What the host says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Statement {
    /// [`VERSION`].
    pub version: u32,
    /// The host that signs.
    pub host_id: String,
    /// When the agent signed it (its clock).
    pub at: Time,
    /// What it is about.
    pub subject: Subject,
}

/// What a statement is about.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase", rename_all_fields = "camelCase", deny_unknown_fields)]
pub enum Subject {
    /// A task's result (`node.validate_clean`, `node.gpu_scrub`).
    Task {
        /// The task.
        task_id: String,
        /// The job that issued it, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        job_id: Option<String>,
        /// Its catalog name.
        task_type: String,
        /// Overall outcome.
        outcome: TaskOutcome,
        /// Every step, as reported.
        steps: Vec<StepResult>,
        /// When it started.
        started_at: Time,
        /// When it finished.
        finished_at: Time,
    },
    /// Probe results, as one check-in reported them.
    Probes {
        /// The results.
        results: Vec<ProbeResult>,
    },
}

/// A signed statement with the certificate of the key that signed it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Evidence {
    /// What the host says.
    pub statement: Statement,
    /// Ed25519 over [`DOMAIN`] ‖ canonical JSON of `statement`, base64.
    pub signature: String,
    /// The host's evidence certificate (PEM), issued by the coordinator's CA.
    pub certificate: String,
}

/// What the verifier expects the evidence to be about. `None` accepts any.
#[derive(Debug, Clone, Default)]
pub struct Expect<'a> {
    /// This host.
    pub host_id: Option<&'a str>,
    /// This task.
    pub task_id: Option<&'a str>,
    /// This job.
    pub job_id: Option<&'a str>,
}

/// Why evidence was refused, one variant per rule.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EvidenceError {
    /// The statement does not serialise canonically (an unsafe number, …).
    #[error("statement has no canonical form: {reason}")]
    NotCanonical {
        /// Why.
        reason: String,
    },
    /// Unknown statement version.
    #[error("statement version {got} is not {VERSION}")]
    UnknownVersion {
        /// What it said.
        got: u32,
    },
    /// The certificate is not a PEM X.509 certificate.
    #[error("evidence certificate does not parse: {reason}")]
    BadCertificate {
        /// Why.
        reason: String,
    },
    /// rule: certificate_chains_to_the_ca.
    #[error("evidence certificate was not issued by the given CA")]
    NotIssuedByCa,
    /// rule: certificate_is_for_evidence.
    #[error("certificate is not an evidence certificate (its extended key usage must be documentSigning only)")]
    NotAnEvidenceCertificate,
    /// rule: certificate_names_the_statement_host.
    #[error("statement is by host {statement} but the certificate is for host {certificate}")]
    OtherHostsCertificate {
        /// The statement's host.
        statement: String,
        /// The certificate's host (or `none`).
        certificate: String,
    },
    /// rule: signed_while_the_certificate_was_valid.
    #[error("statement signed at {at}, outside the certificate's validity {not_before} .. {not_after}")]
    OutsideCertificateValidity {
        /// The statement's time.
        at: String,
        /// Validity start.
        not_before: String,
        /// Validity end.
        not_after: String,
    },
    /// rule: signature_verifies.
    #[error("signature does not verify with the certificate's key (the statement was altered or signed by another key)")]
    BadSignature,
    /// rule: expected_host.
    #[error("evidence is about host {got}, expected host {expected}")]
    UnexpectedHost {
        /// Expected.
        expected: String,
        /// Found.
        got: String,
    },
    /// rule: expected_task (a replay of another task's evidence).
    #[error("evidence is about {got}, expected task {expected}")]
    UnexpectedTask {
        /// Expected.
        expected: String,
        /// Found (`task X` or `probe results`).
        got: String,
    },
    /// rule: expected_job.
    #[error("evidence is about job {got}, expected job {expected}")]
    UnexpectedJob {
        /// Expected.
        expected: String,
        /// Found (or `none`).
        got: String,
    },
}

fn signed_bytes(statement: &Statement) -> Result<Vec<u8>, EvidenceError> {
    let body = canonical::to_vec_of(statement).map_err(|e| EvidenceError::NotCanonical { reason: e.to_string() })?;
    let mut out = DOMAIN.to_vec();
    out.extend_from_slice(&body);
    Ok(out)
}

/// Signs `statement` with the host's evidence key; `certificate` is that key's certificate.
pub fn sign(statement: Statement, key: &SigningKey, certificate: &str) -> Result<Evidence, EvidenceError> {
    let bytes = signed_bytes(&statement)?;
    let signature = STANDARD.encode(key.sign(&bytes).to_bytes());
    Ok(Evidence { statement, signature, certificate: certificate.to_owned() })
}

/// What a verified certificate says.
struct CertFacts {
    host_id: Option<String>,
    key: VerifyingKey,
    not_before: i64,
    not_after: i64,
}

fn pem_der(pem: &str) -> Result<Vec<u8>, EvidenceError> {
    let bad = |reason: &str| EvidenceError::BadCertificate { reason: reason.to_owned() };
    let body = pem
        .trim()
        .strip_prefix("-----BEGIN CERTIFICATE-----")
        .and_then(|r| r.strip_suffix("-----END CERTIFICATE-----"))
        .ok_or_else(|| bad("not a PEM CERTIFICATE block"))?;
    let b64: String = body.chars().filter(|c| !c.is_whitespace()).collect();
    STANDARD.decode(b64).map_err(|_| bad("PEM body is not base64"))
}

fn cert_facts(cert_pem: &str, ca_pem: Option<&str>) -> Result<CertFacts, EvidenceError> {
    let der = pem_der(cert_pem)?;
    let (rest, cert) = X509Certificate::from_der(&der).map_err(|e| EvidenceError::BadCertificate { reason: e.to_string() })?;
    if !rest.is_empty() {
        return Err(EvidenceError::BadCertificate { reason: "trailing bytes after the certificate".into() });
    }
    if let Some(ca_pem) = ca_pem {
        let ca_der = pem_der(ca_pem)?;
        let (_, ca) = X509Certificate::from_der(&ca_der).map_err(|e| EvidenceError::BadCertificate { reason: format!("CA: {e}") })?;
        if cert.issuer() != ca.subject() || cert.verify_signature(Some(ca.public_key())).is_err() {
            return Err(EvidenceError::NotIssuedByCa);
        }
    }
    let mut document_signing_only = false;
    let mut host_id = None;
    for ext in cert.extensions() {
        match ext.parsed_extension() {
            ParsedExtension::ExtendedKeyUsage(eku) => {
                document_signing_only = !eku.any
                    && !eku.server_auth
                    && !eku.client_auth
                    && !eku.code_signing
                    && !eku.email_protection
                    && !eku.time_stamping
                    && !eku.ocsp_signing
                    && eku.other.len() == 1
                    && eku.other[0].to_id_string() == DOCUMENT_SIGNING_OID;
            }
            ParsedExtension::SubjectAlternativeName(san) => {
                for name in &san.general_names {
                    if let GeneralName::URI(uri) = name {
                        if let Some(id) = uri.strip_prefix(HOST_URI_PREFIX) {
                            host_id = Some(id.to_owned());
                        }
                    }
                }
            }
            _ => {}
        }
    }
    if !document_signing_only {
        return Err(EvidenceError::NotAnEvidenceCertificate);
    }
    let raw = &cert.public_key().subject_public_key.data;
    let key = <[u8; 32]>::try_from(raw.as_ref())
        .ok()
        .and_then(|b| VerifyingKey::from_bytes(&b).ok())
        .ok_or_else(|| EvidenceError::BadCertificate { reason: "the certified key is not an Ed25519 key".into() })?;
    let validity = cert.validity();
    Ok(CertFacts { host_id, key, not_before: validity.not_before.timestamp(), not_after: validity.not_after.timestamp() })
}

/// The host id an evidence certificate names (what the coordinator checks against the
/// enrolling host), after checking it is an evidence certificate at all.
pub fn certificate_host(cert_pem: &str) -> Result<Option<String>, EvidenceError> {
    cert_facts(cert_pem, None).map(|f| f.host_id)
}

/// Checks `evidence` against every rule: with `ca_pem`, that its certificate was issued by
/// that CA (offline verification); without, the caller has matched the certificate to the
/// one it registered (the coordinator on submission).
pub fn verify(evidence: &Evidence, ca_pem: Option<&str>, expect: &Expect<'_>) -> Result<(), EvidenceError> {
    let s = &evidence.statement;
    if s.version != VERSION {
        return Err(EvidenceError::UnknownVersion { got: s.version });
    }
    let facts = cert_facts(&evidence.certificate, ca_pem)?;
    if facts.host_id.as_deref() != Some(s.host_id.as_str()) {
        return Err(EvidenceError::OtherHostsCertificate {
            statement: crate::text::echo(&s.host_id).into_owned(),
            certificate: facts.host_id.unwrap_or_else(|| "none".into()),
        });
    }
    let at = s.at.unix();
    if at < facts.not_before || at > facts.not_after {
        let show = |t: i64| Time::from_unix(t).map_or_else(|_| t.to_string(), |t| t.to_string());
        return Err(EvidenceError::OutsideCertificateValidity {
            at: s.at.to_string(),
            not_before: show(facts.not_before),
            not_after: show(facts.not_after),
        });
    }
    let sig = STANDARD.decode(&evidence.signature).ok().and_then(|b| Signature::from_slice(&b).ok()).ok_or(EvidenceError::BadSignature)?;
    facts.key.verify(&signed_bytes(s)?, &sig).map_err(|_| EvidenceError::BadSignature)?;
    if let Some(expected) = expect.host_id {
        if expected != s.host_id {
            return Err(EvidenceError::UnexpectedHost { expected: expected.to_owned(), got: s.host_id.clone() });
        }
    }
    let (task, job) = match &s.subject {
        Subject::Task { task_id, job_id, .. } => (Some(task_id.as_str()), job_id.as_deref()),
        Subject::Probes { .. } => (None, None),
    };
    if let Some(expected) = expect.task_id {
        if task != Some(expected) {
            let got = task.map_or_else(|| "probe results".to_owned(), |t| format!("task {t}"));
            return Err(EvidenceError::UnexpectedTask { expected: expected.to_owned(), got });
        }
    }
    if let Some(expected) = expect.job_id {
        if job != Some(expected) {
            return Err(EvidenceError::UnexpectedJob { expected: expected.to_owned(), got: job.unwrap_or("none").to_owned() });
        }
    }
    Ok(())
}
