//! Tasks as operators see them (`GET /v1/tasks`, `POST /v1/hosts/{id}/tasks`): never their
//! signed envelope.

use serde::{Deserialize, Serialize};

use crate::report::TaskResult;
use crate::time::Time;

/// A task's delivery state.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskState {
    /// Waiting for its host to lease it.
    Queued,
    /// Handed to its host, whose lease has not lapsed.
    Leased,
    /// Its result arrived.
    Completed,
}

impl TaskState {
    /// The wire form.
    pub const fn as_str(self) -> &'static str {
        match self {
            TaskState::Queued => "queued",
            TaskState::Leased => "leased",
            TaskState::Completed => "completed",
        }
    }
}

impl std::str::FromStr for TaskState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "queued" => Ok(TaskState::Queued),
            "leased" => Ok(TaskState::Leased),
            "completed" => Ok(TaskState::Completed),
            other => Err(format!("unknown task state {other:?}")),
        }
    }
}

/// A task row.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskView {
    /// Its id.
    pub task_id: String,
    /// Its host.
    pub host_id: String,
    /// Its job, if a job issued it.
    pub job_id: Option<String>,
    /// Its catalog type (`node.gpu_scrub`, …; `unknown` when its envelope does not say).
    #[serde(rename = "type")]
    pub kind: String,
    /// Where its delivery stands.
    pub state: TaskState,
    /// How many times it was leased.
    pub attempts: u32,
    /// When it was queued.
    pub created_at: Time,
    /// While leased: when the lease lapses.
    pub lease_expires_at: Option<Time>,
    /// When the result arrived.
    pub completed_at: Option<Time>,
    /// The host's result: outcome and every step (its signed statement is kept apart).
    pub result: Option<TaskResult>,
}
