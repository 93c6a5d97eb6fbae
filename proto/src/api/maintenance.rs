//! Maintenance requests (`POST /v1/maintenance`, `GET /v1/maintenance`,
//! `GET /v1/maintenance/{id}`): one job per host, and the request's state read from them.

use serde::{Deserialize, Serialize};

use crate::api::jobs::JobJson;
use crate::time::Time;

/// The hosts a request named: a host tag, ids, or both.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MaintenanceScope {
    /// The host tag.
    pub group: Option<String>,
    /// The hosts' ids, as resolved when the request was made.
    pub hosts: Vec<String>,
}

/// A request's state, read from its jobs: `failed` once one failed, `completed` when all
/// completed, `running` otherwise.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MaintenanceState {
    /// A job is still working.
    Running,
    /// Every job completed.
    Completed,
    /// A job failed or was cancelled.
    Failed,
}

impl MaintenanceState {
    /// The wire form.
    pub const fn as_str(self) -> &'static str {
        match self {
            MaintenanceState::Running => "running",
            MaintenanceState::Completed => "completed",
            MaintenanceState::Failed => "failed",
        }
    }
}

/// A maintenance request with its jobs.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceView {
    /// Its id.
    pub request_id: String,
    /// Who asked (the operator certificate's name).
    pub initiator: String,
    /// Why.
    pub reason: String,
    /// The hosts it named.
    pub scope: MaintenanceScope,
    /// The host tag (the same as `scope.group`).
    pub group: Option<String>,
    /// The activities each job runs, in order.
    pub activities: Vec<String>,
    /// Its state.
    pub state: MaintenanceState,
    /// When it was made.
    pub created_at: Time,
    /// One job per host.
    pub jobs: Vec<JobJson>,
}
