//! Events (`GET /v1/events`, `GET /v1/events/stream`, a job's events) and audit records
//! (`GET /v1/audit`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::time::Time;

/// One event: what happened, when, to which host, rollout or job.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventView {
    /// Its id: events are ordered by it, and `after=ID` resumes after it.
    pub id: i64,
    /// When.
    pub at: Time,
    /// Its kind (`host.transition`, `rollout.halted`, …: `drover_proto::event_kinds`).
    pub kind: String,
    /// The host it concerns.
    pub host_id: Option<String>,
    /// The rollout it concerns.
    pub rollout_id: Option<String>,
    /// The job it concerns.
    pub job_id: Option<String>,
    /// For a human.
    pub message: String,
    /// The kind's structured detail (its shape depends on the kind).
    pub data: Value,
}

/// One audit record: who did what to which target, why, from which state to which.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditView {
    /// Its id (`after=ID` resumes after it).
    pub id: i64,
    /// When.
    pub at: Time,
    /// The operator certificate's name.
    pub actor: String,
    /// Its role.
    pub role: String,
    /// What was done (`host.cordon`, `rollout.halt`, …).
    pub action: String,
    /// To what (a host id, a rollout id, a job id, …).
    pub target: String,
    /// Why, as the operator said.
    pub reason: String,
    /// The target's state before.
    pub prior_state: Option<String>,
    /// The state the action led to.
    pub expected_state: Option<String>,
}
