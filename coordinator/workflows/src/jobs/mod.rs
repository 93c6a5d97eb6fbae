//! The pure decision core of coordinator jobs (soft reset, storage cleanup, full decommission,
//! reimage, on-demand maintenance, and the drain and uninstall that own the `retire` and
//! `remove` lifecycle verbs): durable staged workflows, `node-state-model.md` §3.3–§8 and
//! `bare-metal-lifecycle.md` §5.
//!
//! - [`model`]: what a job is ([`JobKind`]), its stage catalog ([`Stage`], [`stages`]), and
//!   the progress read model stored as the job's `progress` JSON ([`Progress`]).
//! - [`plan`]: [`decide`] — one job, one snapshot of what is observed, `now` and the policy in;
//!   one [`Decision`] with a human reason out — [`apply`], the progress it leaves behind, and
//!   [`lifecycle_guard`], the host transition that keeps `draining` / `removing` owned by a
//!   working job (§3.3's guardrail) as a job starts, resumes or stops.
//! - [`actions`]: the operator actions of §8 (`retry_stage`, `resume`, `rerun`,
//!   `restart_clean`, `cancel`, `adopt_observed_state`, `mark_manual_intervention_required`),
//!   idempotent: a queued or live task is never duplicated, an expired one is requeued.
//! - [`pacing`]: which pending jobs may start under the disruption budgets.
//!
//! The engine's `jobs` module persists these decisions, one store transaction per step.

pub mod actions;
pub mod model;
pub mod pacing;
pub mod plan;

pub use actions::{ActionOutcome, ActionRefused, OperatorAction, TaskDirective, act};
pub use model::{
    Activity, FailureClass, HwSyncCreds, JobKind, MissingSetting, Progress, Stage, StageEvent, StageStatus, StorageChoice, TaskSettings,
    stages,
};
pub use plan::{
    Decision, JobView, Observed, Policy, SchedulerAnswer, TaskObs, after_scheduler_answer, apply, decide, lifecycle_guard, local_stage_done,
};
