//! Jobs: the listing (`GET /v1/jobs`), one job with its events (`GET /v1/jobs/{id}`), what an
//! operator action answers (`POST /v1/jobs/{id}/{action}`) and what a decommission answers
//! (`POST /v1/hosts/{id}/decommission`, its dry run included).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::api::events::EventView;
use crate::states::{HostLifecycle, JobState};
use crate::time::Time;

/// One entry of a job's history: a stage's attempt started, succeeded, failed, was skipped or
/// compensated.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    /// The stage (`cordon`, `cleanup_storage`, `maas_workflow`, …).
    pub stage: String,
    /// Its attempt.
    pub attempt: u32,
    /// `started`, `succeeded`, `failed`, `skipped` or `compensated`.
    pub status: String,
    /// Why, for a human.
    pub message: String,
    /// When.
    pub at: Time,
}

/// A job's latest failure.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobError {
    /// Why, as a class (`transient`, `task_failed`, …), when the job has one.
    pub class: Option<String>,
    /// The stage that failed.
    pub stage: String,
    /// Its attempt.
    pub attempt: u32,
    /// What the stage said.
    pub message: String,
    /// When.
    pub at: Time,
}

/// A job as the API shows it.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobJson {
    /// Its id.
    pub job_id: String,
    /// soft_reset | storage_cleanup | full_decommission | reimage | maintenance | retire | remove.
    pub kind: String,
    /// The host.
    pub host_id: Option<String>,
    /// The host's name (while it still has a record).
    pub hostname: Option<String>,
    /// The job state.
    pub state: JobState,
    /// What it was asked to do (its shape depends on `kind`).
    pub input: Value,
    /// The maintenance request it belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// Its stages, in order.
    pub stages: Vec<String>,
    /// The current stage.
    pub stage: String,
    /// Its index in `stages`.
    pub stage_index: usize,
    /// Attempts of the current stage.
    pub attempt: u32,
    /// The current stage's task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// The child MAAS workflow of a reimage or full decommission (`GET /v1/maas/onboardings/{id}`
    /// shows it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_job_id: Option<String>,
    /// Why it failed, as a class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_class: Option<String>,
    /// The latest status line.
    pub message: String,
    /// Every stage event, oldest first.
    pub history: Vec<HistoryEntry>,
    /// Who asked for it: the operator (and role) whose action created it, or the maintenance
    /// request's initiator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requester: Option<String>,
    /// When its first stage started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// When it finished (completed, cancelled or reconciled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Time>,
    /// The latest failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<JobError>,
    /// What an operator should do next, while the job waits for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recommended_action: Option<String>,
    /// Created.
    pub created_at: Time,
    /// Last change.
    pub updated_at: Time,
}

/// `GET /v1/jobs/{id}`: the job and its events, oldest first.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobDetail {
    /// The job.
    #[serde(flatten)]
    pub job: JobJson,
    /// Its events.
    pub events: Vec<EventView>,
}

/// What an operator action did.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActionOutcome {
    /// The action.
    pub action: String,
    /// The job's state before.
    pub prior_state: JobState,
    /// The job's state after.
    pub new_state: JobState,
    /// The state the audit record names as expected.
    pub expected_state: JobState,
    /// How the job's progress changed.
    pub progress_change: String,
    /// `reused ID`, `requeued ID`, `issued ID` or `none`.
    pub task: String,
}

/// `POST /v1/jobs/{id}/{action}`: the job after the action and what it did.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActionResponse {
    /// The job after the action.
    pub job: JobJson,
    /// What the action did.
    pub outcome: ActionOutcome,
}

/// What a dry-run decommission answers: the host as it is now and the stages its job would run.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DryRunView {
    /// Always true: nothing was started.
    pub dry_run: bool,
    /// The host.
    pub host_id: String,
    /// Its name.
    pub hostname: String,
    /// Its lifecycle state now.
    pub host_state: HostLifecycle,
    /// The job it would start.
    pub kind: String,
    /// In order; `maas_workflow` of a full decommission is marked when the host has no MAAS
    /// binding (it then has nothing to do).
    pub stages: Vec<String>,
}
