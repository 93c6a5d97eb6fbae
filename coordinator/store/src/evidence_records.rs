//! What the store keeps of what a host says of itself: its own keys and the evidence it signs,
//! and its latest health report. The keys are
//! registered at enrollment, in the enrollment's transaction; evidence is kept as the host sent
//! it, so it verifies offline with the CA certificate alone.

use drover_proto::time::Time;
use uuid::Uuid;

use super::NewCert;

/// A host's latest health report: what its agent last said of itself (health, probe results),
/// as the JSON of `HostHealthReport` (the engine's operator API), and when it arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostHealth {
    /// The host.
    pub host_id: Uuid,
    /// When the check-in that carried it arrived (coordinator time).
    pub reported_at: Time,
    /// The report, JSON.
    pub report: String,
}

/// The public keys a host registered when it last enrolled.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostKeys {
    /// X25519 public key (base64): task secrets are sealed to it.
    pub seal_key: Option<String>,
    /// The certificate (PEM) the CA issued for the host's Ed25519 evidence key.
    pub evidence_cert: Option<String>,
}

/// What an enrollment records besides the host's transition: its TLS certificate and its keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enrolled {
    /// The client certificate issued.
    pub cert: NewCert,
    /// The keys it registered (replacing any of an earlier enrollment: a reimage made new ones).
    pub keys: HostKeys,
}

impl From<NewCert> for Enrolled {
    fn from(cert: NewCert) -> Self {
        Enrolled { cert, keys: HostKeys::default() }
    }
}

/// Evidence to keep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEvidence {
    /// The host that signed it (checked against the statement before it reaches the store).
    pub host_id: Uuid,
    /// The task it is about, if any.
    pub task_id: Option<Uuid>,
    /// The job that task belonged to, if any.
    pub job_id: Option<Uuid>,
    /// `task` or `probes`.
    pub kind: String,
    /// When the host signed it.
    pub signed_at: Time,
    /// When the coordinator received it.
    pub received_at: Time,
    /// The evidence document (JSON) exactly as the host sent it.
    pub document: String,
}

/// Kept evidence, with its position in the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvidenceRecord {
    /// Insertion order (the paging cursor).
    pub seq: i64,
    /// As kept.
    pub evidence: NewEvidence,
}

/// Which evidence to list: every set field must match; oldest first, after `after`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EvidenceFilter {
    /// This host's.
    pub host_id: Option<Uuid>,
    /// This job's.
    pub job_id: Option<Uuid>,
    /// This task's.
    pub task_id: Option<Uuid>,
    /// Only records with `seq` above this.
    pub after: Option<i64>,
    /// At most this many.
    pub limit: usize,
}
