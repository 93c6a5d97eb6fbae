//! The vocabulary of the coordinator's staged workflows, which jobs and MAAS onboardings share:
//! job kinds and workflow states as `--kind`/`--state` filters ([`JobKind`], [`JobState`],
//! with their wire names), the operator actions with their route segments ([`Action`]:
//! retry, resume, rerun, restart-clean, cancel, adopt, mark-manual), and the `{"reason"}` body
//! every action posts ([`ReasonBody`]).

use clap::ValueEnum;
use serde::Serialize;

/// A job's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum JobKind {
    /// `drover decommission --mode soft-reset`.
    #[value(name = "soft_reset", alias = "soft-reset")]
    SoftReset,
    /// `drover decommission --mode storage-cleanup`.
    #[value(name = "storage_cleanup", alias = "storage-cleanup")]
    StorageCleanup,
    /// `drover decommission --mode full`.
    #[value(name = "full_decommission", alias = "full-decommission")]
    FullDecommission,
    /// One host's share of a `drover maintenance request`.
    #[value(name = "maintenance")]
    Maintenance,
    /// `drover host retire`: the drain that owns `draining`.
    #[value(name = "retire")]
    Retire,
    /// `drover host remove`: the uninstall that owns `removing`.
    #[value(name = "remove")]
    Remove,
}

impl JobKind {
    pub fn wire(self) -> &'static str {
        match self {
            JobKind::SoftReset => "soft_reset",
            JobKind::StorageCleanup => "storage_cleanup",
            JobKind::FullDecommission => "full_decommission",
            JobKind::Maintenance => "maintenance",
            JobKind::Retire => "retire",
            JobKind::Remove => "remove",
        }
    }
}

/// A job's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum JobState {
    /// Not started yet.
    #[value(name = "pending")]
    Pending,
    /// A stage is in progress.
    #[value(name = "running")]
    Running,
    /// Every stage is done.
    #[value(name = "completed")]
    Completed,
    /// A stage failed; it may be retried.
    #[value(name = "failed_retryable", alias = "failed-retryable")]
    FailedRetryable,
    /// A stage failed in a way that needs a person.
    #[value(name = "failed_manual_intervention", alias = "failed-manual-intervention")]
    FailedManualIntervention,
    /// Cancelled by an operator.
    #[value(name = "cancelled")]
    Cancelled,
    /// Compensating (undoing) what the job did.
    #[value(name = "compensating")]
    Compensating,
    /// Closed by reconciliation with the host's observed state.
    #[value(name = "reconciled")]
    Reconciled,
}

impl JobState {
    pub fn wire(self) -> &'static str {
        match self {
            JobState::Pending => "pending",
            JobState::Running => "running",
            JobState::Completed => "completed",
            JobState::FailedRetryable => "failed_retryable",
            JobState::FailedManualIntervention => "failed_manual_intervention",
            JobState::Cancelled => "cancelled",
            JobState::Compensating => "compensating",
            JobState::Reconciled => "reconciled",
        }
    }
}

/// An operator action on a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// `retry_stage`.
    RetryStage,
    /// `resume`.
    Resume,
    /// `rerun`.
    Rerun,
    /// `restart_clean`.
    RestartClean,
    /// `cancel`.
    Cancel,
    /// `adopt_observed_state`.
    AdoptObservedState,
    /// `mark_manual_intervention_required`.
    MarkManualInterventionRequired,
}

impl Action {
    /// The action's name in its route.
    pub fn path_segment(self) -> &'static str {
        match self {
            Action::RetryStage => "retry_stage",
            Action::Resume => "resume",
            Action::Rerun => "rerun",
            Action::RestartClean => "restart_clean",
            Action::Cancel => "cancel",
            Action::AdoptObservedState => "adopt_observed_state",
            Action::MarkManualInterventionRequired => "mark_manual_intervention_required",
        }
    }
}

/// The body of every admin POST on jobs and onboardings.
#[derive(Serialize, Debug, PartialEq, Eq)]
pub struct ReasonBody<'a> {
    /// Why.
    pub reason: &'a str,
}
