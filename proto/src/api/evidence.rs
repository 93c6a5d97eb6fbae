//! Kept evidence (`GET /v1/hosts/{id}/evidence`, `GET /v1/jobs/{id}/evidence`): the signed
//! statements hosts sent, each as the host sent it so it verifies offline.

use serde::{Deserialize, Serialize};

use crate::time::Time;

/// One kept statement.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EvidenceView {
    /// Its sequence number (`after=SEQ` resumes after it).
    pub seq: i64,
    /// The host that signed it.
    pub host_id: String,
    /// The task it is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// That task's job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// `task` or `probes`.
    pub kind: String,
    /// When the host signed it.
    pub signed_at: Time,
    /// When the coordinator received it.
    pub received_at: Time,
    /// The document as the host sent it, untouched (a [`crate::evidence::Evidence`]): kept as
    /// JSON so `drover evidence verify` checks exactly what was sent.
    pub evidence: serde_json::Value,
}
