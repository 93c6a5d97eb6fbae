//! The operator actions of `node-state-model.md` §8, as pure functions over the job and its
//! current task. Idempotent: a fresh queued task or a live lease is reused (never duplicated);
//! an expired lease is requeued; a completed or missing task is replaced by a new one.

use std::fmt;

use drover_proto::report::TaskOutcome;
use drover_proto::states::JobState;
use drover_proto::task::TaskKind;
use drover_proto::time::Time;

use super::model::{Progress, Stage, StageStatus, TaskSettings, stages};
use super::plan::{JobView, TaskObs};
use drover_store::TaskState;

/// One operator action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OperatorAction {
    /// Rerun the current stage (fresh retry budget).
    RetryStage,
    /// Continue from the current stage, reusing what is still valid.
    Resume,
    /// Re-enter the workflow from the top; local stages already achieved advance at once.
    Rerun,
    /// Compensate, then start again from `pending`.
    RestartClean,
    /// Stop the job, compensating where possible.
    Cancel,
    /// Accept the externally advanced state: the current stage counts as done.
    AdoptObservedState,
    /// Freeze the job until a human resolves it.
    MarkManualInterventionRequired,
}

impl OperatorAction {
    /// The stable string form.
    pub const fn as_str(self) -> &'static str {
        match self {
            OperatorAction::RetryStage => "retry_stage",
            OperatorAction::Resume => "resume",
            OperatorAction::Rerun => "rerun",
            OperatorAction::RestartClean => "restart_clean",
            OperatorAction::Cancel => "cancel",
            OperatorAction::AdoptObservedState => "adopt_observed_state",
            OperatorAction::MarkManualInterventionRequired => "mark_manual_intervention_required",
        }
    }

    /// The job states it may be taken from.
    pub fn allowed_from(self) -> &'static [JobState] {
        use JobState::*;
        match self {
            // Running: a repeat of the action (or a job already retrying) — reuse, never duplicate.
            OperatorAction::RetryStage | OperatorAction::Resume => &[FailedRetryable, FailedManualIntervention, Running],
            OperatorAction::Rerun | OperatorAction::RestartClean | OperatorAction::AdoptObservedState => {
                &[FailedRetryable, FailedManualIntervention]
            }
            // Cancelled: a repeat, answered without change.
            OperatorAction::Cancel => &[Pending, Running, FailedRetryable, FailedManualIntervention, Compensating, Cancelled],
            OperatorAction::MarkManualInterventionRequired => &[Pending, Running, FailedRetryable, Compensating, FailedManualIntervention],
        }
    }
}

impl fmt::Display for OperatorAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What to do about the stage's task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskDirective {
    /// A fresh queued task or a live lease exists: use it, create nothing.
    Reuse(String),
    /// Its lease lapsed: make it leasable again (the store's `requeue_expired`), same id.
    Requeue(String),
    /// Sign and queue a new task of this kind, then record its id with
    /// [`Progress::bind_task`] on the outcome's progress.
    Issue(TaskKind),
    /// Nothing about tasks.
    None,
}

/// An accepted action: what to persist and what to audit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionOutcome {
    /// The action.
    pub action: OperatorAction,
    /// The job's state afterwards (may equal `audit_prior` for an idempotent repeat).
    pub new_state: JobState,
    /// The job's progress afterwards.
    pub progress: Progress,
    /// Human summary of the progress change.
    pub progress_change: String,
    /// What to do about the task.
    pub task: TaskDirective,
    /// The state before (for the audit record).
    pub audit_prior: JobState,
    /// The state the action expects to reach (for the audit record).
    pub audit_expected: JobState,
}

/// A refused action (the API answers 409).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{action} is not allowed while the job is {state}: {reason} (allowed from: {})", join(allowed))]
pub struct ActionRefused {
    /// The action.
    pub action: OperatorAction,
    /// The job's state.
    pub state: JobState,
    /// The states it is allowed from.
    pub allowed: Vec<JobState>,
    /// Why, for a human.
    pub reason: String,
}

fn join(states: &[JobState]) -> String {
    states.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
}

/// Takes `action` on `job`, whose current stage's task (the record of `progress.task_id`) is
/// `task`. `settings` builds a task to issue.
pub fn act(
    action: OperatorAction,
    job: &JobView,
    task: Option<&TaskObs>,
    now: Time,
    settings: &TaskSettings,
) -> Result<ActionOutcome, ActionRefused> {
    let refuse = |reason: String| ActionRefused { action, state: job.state, allowed: action.allowed_from().to_vec(), reason };
    if !action.allowed_from().contains(&job.state) {
        return Err(refuse(format!("{} is not a state {action} applies to", job.state)));
    }
    // The task record must be the current one to reason about it.
    let task = task.filter(|t| job.progress.task_id.as_deref() == Some(t.task_id.as_str()));
    let live = task.filter(|t| t.is_live(now));
    let prior = job.state;
    let mut p = job.progress.clone();
    let outcome = |new_state: JobState, progress: Progress, change: String, task: TaskDirective, expected: JobState| ActionOutcome {
        action,
        new_state,
        progress,
        progress_change: change,
        task,
        audit_prior: prior,
        audit_expected: expected,
    };
    let to = |target: JobState| -> Result<JobState, ActionRefused> {
        if job.state == target || job.state.can_transition_to(target) {
            Ok(target)
        } else {
            Err(refuse(format!("{} → {target} is not a legal job transition", job.state)))
        }
    };
    let stage = p.stage;
    match action {
        OperatorAction::RetryStage | OperatorAction::Resume => {
            let state = to(JobState::Running)?;
            let directive = stage_task(action, job, task, now, settings).map_err(refuse)?;
            if state == prior && !matches!(directive, TaskDirective::Issue(_)) && !matches!(directive, TaskDirective::Requeue(_)) {
                let change = format!("job already running stage {stage}; nothing duplicated");
                return Ok(outcome(state, p, change, directive, state));
            }
            // A fresh retry budget for the stage.
            let change = match &directive {
                TaskDirective::Issue(_) => {
                    p.attempt = 1;
                    p.task_id = None;
                    format!("stage {stage} re-issued (attempt 1)")
                }
                TaskDirective::Requeue(id) => {
                    p.attempt = p.attempt.max(1);
                    format!("task {id} of stage {stage} requeued")
                }
                TaskDirective::Reuse(id) => format!("stage {stage} continues with task {id}"),
                TaskDirective::None => {
                    p.attempt = 0;
                    p.task_id = if action == OperatorAction::Resume { p.task_id } else { None };
                    // retry_stage runs a local stage afresh (force_release sends its release
                    // notice again); resume continues it (only asks).
                    p.release_sent &= action == OperatorAction::Resume;
                    format!("stage {stage} continues")
                }
            };
            p.failure_class = None;
            p.push(stage, p.attempt, StageStatus::Started, &format!("{action}: {change}"), now);
            Ok(outcome(state, p, change, directive, JobState::Running))
        }
        OperatorAction::Rerun => {
            let state = to(JobState::Running)?;
            if let Some(t) = live {
                return Err(refuse(format!("task {} of stage {stage} is still live; wait for it or cancel", t.task_id)));
            }
            let history = std::mem::take(&mut p.history);
            p = Progress { history, ..Progress::initial(&job.kind) };
            let change = format!("rerun from the top (stage {}); achieved stages are adopted", p.stage);
            p.push(p.stage, 0, StageStatus::Started, &format!("{action}: {change}"), now);
            Ok(outcome(state, p, change, TaskDirective::None, JobState::Running))
        }
        OperatorAction::RestartClean => {
            let state = to(JobState::Compensating)?;
            p.after_compensation = Some(JobState::Pending);
            let change = "compensating, then pending from the first stage".to_owned();
            p.push(stage, p.attempt, StageStatus::Compensated, &format!("{action}: {change}"), now);
            let directive = live.map_or(TaskDirective::None, |t| TaskDirective::Reuse(t.task_id.clone()));
            Ok(outcome(state, p, change, directive, JobState::Pending))
        }
        OperatorAction::Cancel => {
            if prior == JobState::Cancelled {
                return Ok(outcome(prior, p, "already cancelled".into(), TaskDirective::None, prior));
            }
            let in_flight = task.filter(|t| t.state != TaskState::Completed);
            // Already compensating with the task still out: a repeated cancel changes nothing
            // (and a cancel during restart_clean's compensation ends cancelled instead).
            if let (Some(t), JobState::Compensating) = (in_flight, prior) {
                let change = if p.after_compensation == Some(JobState::Cancelled) {
                    format!("already cancelling: waits for task {} to finish", t.task_id)
                } else {
                    p.after_compensation = Some(JobState::Cancelled);
                    let change = format!("cancelling instead of restarting: waits for task {} to finish", t.task_id);
                    p.push(stage, p.attempt, StageStatus::Compensated, &format!("{action}: {change}"), now);
                    change
                };
                return Ok(outcome(prior, p, change, TaskDirective::Reuse(t.task_id.clone()), JobState::Cancelled));
            }
            if let (Some(t), true) = (in_flight, job.state.can_transition_to(JobState::Compensating)) {
                let state = to(JobState::Compensating)?;
                p.after_compensation = Some(JobState::Cancelled);
                let change = format!("cancelling: waits for task {} to finish, then cancelled", t.task_id);
                p.push(stage, p.attempt, StageStatus::Compensated, &format!("{action}: {change}"), now);
                return Ok(outcome(state, p, change, TaskDirective::Reuse(t.task_id.clone()), JobState::Cancelled));
            }
            let state = to(JobState::Cancelled)?;
            p.after_compensation = None;
            let change = "cancelled".to_owned();
            p.push(stage, p.attempt, StageStatus::Compensated, &format!("{action}: {change}"), now);
            Ok(outcome(state, p, change, TaskDirective::None, JobState::Cancelled))
        }
        OperatorAction::AdoptObservedState => {
            if let Some(t) = live {
                return Err(refuse(format!("task {} of stage {stage} is still live; wait for it or cancel", t.task_id)));
            }
            let plan = stages(&job.kind);
            let change;
            let state = match plan.get(p.stage_index + 1) {
                Some(&next) => {
                    let s = to(JobState::Running)?;
                    p.push(stage, p.attempt, StageStatus::Skipped, &format!("{action}: stage {stage} adopted as done"), now);
                    p.stage_index += 1;
                    p.stage = next;
                    p.attempt = 0;
                    p.task_id = None;
                    p.failure_class = None;
                    p.release_sent = false;
                    change = format!("stage {stage} adopted; continues at {next}");
                    s
                }
                None => {
                    let s = to(JobState::Reconciled)?;
                    change = format!("last stage {stage} adopted; job reconciled");
                    p.push(stage, p.attempt, StageStatus::Skipped, &format!("{action}: {change}"), now);
                    p.failure_class = None;
                    s
                }
            };
            p.message = change.clone();
            Ok(outcome(state, p, change, TaskDirective::None, state))
        }
        OperatorAction::MarkManualInterventionRequired => {
            if prior == JobState::FailedManualIntervention {
                return Ok(outcome(prior, p, "already waiting for manual intervention".into(), TaskDirective::None, prior));
            }
            let state = to(JobState::FailedManualIntervention)?;
            let change = format!("frozen at stage {stage} until a human resolves it");
            p.push(stage, p.attempt, StageStatus::Failed, &format!("{action}: {change}"), now);
            Ok(outcome(state, p, change, TaskDirective::None, state))
        }
    }
}

/// retry_stage / resume: the idempotency rules of §8 for the current stage's task.
fn stage_task(
    action: OperatorAction,
    job: &JobView,
    task: Option<&TaskObs>,
    now: Time,
    settings: &TaskSettings,
) -> Result<TaskDirective, String> {
    let stage: Stage = job.progress.stage;
    if stage.is_local() {
        return Ok(TaskDirective::None);
    }
    let issue = || match stage.task(&job.kind, settings) {
        Ok(Some(k)) => Ok(TaskDirective::Issue(k)),
        Ok(None) => Ok(TaskDirective::None),
        Err(e) => Err(format!("stage {stage}: {e}")),
    };
    match task {
        Some(t) if t.is_live(now) => Ok(TaskDirective::Reuse(t.task_id.clone())),
        Some(t) if t.state == TaskState::Leased => Ok(TaskDirective::Requeue(t.task_id.clone())),
        // resume continues past a task that succeeded (the next decision advances).
        Some(t) if action == OperatorAction::Resume && t.outcome == Some(TaskOutcome::Succeeded) => Ok(TaskDirective::None),
        // Completed otherwise, or missing (never issued, or lost): a new task. While running
        // with no task yet, the planner issues it.
        None if job.state == JobState::Running && job.progress.task_id.is_none() => Ok(TaskDirective::None),
        _ => issue(),
    }
}

/// `retry_stage`.
pub fn retry_stage(job: &JobView, task: Option<&TaskObs>, now: Time, s: &TaskSettings) -> Result<ActionOutcome, ActionRefused> {
    act(OperatorAction::RetryStage, job, task, now, s)
}

/// `resume`.
pub fn resume(job: &JobView, task: Option<&TaskObs>, now: Time, s: &TaskSettings) -> Result<ActionOutcome, ActionRefused> {
    act(OperatorAction::Resume, job, task, now, s)
}

/// `rerun`.
pub fn rerun(job: &JobView, task: Option<&TaskObs>, now: Time, s: &TaskSettings) -> Result<ActionOutcome, ActionRefused> {
    act(OperatorAction::Rerun, job, task, now, s)
}

/// `restart_clean`.
pub fn restart_clean(job: &JobView, task: Option<&TaskObs>, now: Time, s: &TaskSettings) -> Result<ActionOutcome, ActionRefused> {
    act(OperatorAction::RestartClean, job, task, now, s)
}

/// `cancel`.
pub fn cancel(job: &JobView, task: Option<&TaskObs>, now: Time, s: &TaskSettings) -> Result<ActionOutcome, ActionRefused> {
    act(OperatorAction::Cancel, job, task, now, s)
}

/// `adopt_observed_state`.
pub fn adopt_observed_state(job: &JobView, task: Option<&TaskObs>, now: Time, s: &TaskSettings) -> Result<ActionOutcome, ActionRefused> {
    act(OperatorAction::AdoptObservedState, job, task, now, s)
}

/// `mark_manual_intervention_required`.
pub fn mark_manual_intervention_required(
    job: &JobView,
    task: Option<&TaskObs>,
    now: Time,
    s: &TaskSettings,
) -> Result<ActionOutcome, ActionRefused> {
    act(OperatorAction::MarkManualInterventionRequired, job, task, now, s)
}

#[cfg(test)]
mod tests {
    use super::super::model::{JobKind, StorageChoice};
    use super::super::plan::tests::{t, task};
    use super::*;

    fn at(state: JobState, stage: Stage, attempt: u32, task_id: Option<&str>) -> JobView {
        let kind = JobKind::SoftReset { storage: StorageChoice::All };
        let index = stages(&kind).iter().position(|s| *s == stage).expect("stage");
        let mut progress = Progress::initial(&kind);
        progress.stage_index = index;
        progress.stage = stage;
        progress.attempt = attempt;
        progress.task_id = task_id.map(str::to_owned);
        JobView { kind, state, progress }
    }

    fn s() -> TaskSettings {
        TaskSettings::default()
    }

    #[test]
    fn retry_stage_with_a_fresh_queued_task_does_not_duplicate() {
        let j = at(JobState::FailedRetryable, Stage::ScrubGpu, 3, Some("g3"));
        let q = task("g3", TaskState::Queued, None, 0, None);
        let out = retry_stage(&j, Some(&q), t(0), &s()).expect("allowed");
        assert_eq!(out.task, TaskDirective::Reuse("g3".into()));
        assert_eq!(out.new_state, JobState::Running);
        assert_eq!(out.progress.task_id.as_deref(), Some("g3"));
        // The same action again (now running): still the same task, nothing new.
        let again = JobView { state: out.new_state, progress: out.progress.clone(), ..j };
        let out2 = retry_stage(&again, Some(&q), t(1), &s()).expect("idempotent");
        assert_eq!(out2.task, TaskDirective::Reuse("g3".into()));
        assert_eq!(out2.new_state, JobState::Running);
    }

    #[test]
    fn retry_stage_after_a_failed_task_issues_a_fresh_one() {
        let j = at(JobState::FailedRetryable, Stage::ScrubGpu, 3, Some("g3"));
        let done = task("g3", TaskState::Completed, None, 1, Some(TaskOutcome::Failed));
        let out = retry_stage(&j, Some(&done), t(0), &s()).expect("allowed");
        assert!(matches!(out.task, TaskDirective::Issue(TaskKind::GpuScrub { .. })), "{:?}", out.task);
        assert_eq!((out.progress.attempt, out.progress.task_id.clone()), (1, None));
        assert_eq!((out.audit_prior, out.audit_expected), (JobState::FailedRetryable, JobState::Running));
    }

    #[test]
    fn resume_with_a_live_lease_does_not_duplicate() {
        let j = at(JobState::FailedManualIntervention, Stage::Drain, 2, Some("d2"));
        let leased = task("d2", TaskState::Leased, Some(t(120)), 1, None);
        let out = resume(&j, Some(&leased), t(0), &s()).expect("allowed");
        assert_eq!(out.task, TaskDirective::Reuse("d2".into()));
        assert_eq!(out.new_state, JobState::Running);
    }

    #[test]
    fn resume_with_an_expired_lease_requeues() {
        let j = at(JobState::FailedRetryable, Stage::Drain, 3, Some("d3"));
        let lapsed = task("d3", TaskState::Leased, Some(t(-5)), 3, None);
        let out = resume(&j, Some(&lapsed), t(0), &s()).expect("allowed");
        assert_eq!(out.task, TaskDirective::Requeue("d3".into()));
        assert_eq!(out.new_state, JobState::Running);
        assert_eq!(out.progress.task_id.as_deref(), Some("d3"));
    }

    #[test]
    fn resume_past_a_succeeded_task_lets_the_planner_advance() {
        let j = at(JobState::FailedRetryable, Stage::RevokeUsers, 1, Some("r1"));
        let ok = task("r1", TaskState::Completed, None, 1, Some(TaskOutcome::Succeeded));
        let out = resume(&j, Some(&ok), t(0), &s()).expect("allowed");
        assert_eq!(out.task, TaskDirective::None);
        assert_eq!(out.progress.task_id.as_deref(), Some("r1"));
    }

    #[test]
    fn cancel_from_terminal_state_is_refused() {
        for state in [JobState::Completed, JobState::Reconciled] {
            let j = at(state, Stage::Uncordon, 1, None);
            let err = cancel(&j, None, t(0), &s()).expect_err("terminal");
            assert_eq!(err.state, state);
            assert!(err.allowed.contains(&JobState::Running));
            assert!(err.to_string().contains("allowed from"), "{err}");
        }
        // Cancelling a cancelled job again is a no-op, not a second cancellation.
        let j = at(JobState::Cancelled, Stage::Drain, 1, None);
        let out = cancel(&j, None, t(0), &s()).expect("repeat");
        assert_eq!((out.new_state, out.task), (JobState::Cancelled, TaskDirective::None));
    }

    #[test]
    fn cancel_with_a_task_in_flight_compensates_first() {
        let j = at(JobState::Running, Stage::Drain, 1, Some("d1"));
        let q = task("d1", TaskState::Queued, None, 0, None);
        let out = cancel(&j, Some(&q), t(0), &s()).expect("allowed");
        assert_eq!(out.new_state, JobState::Compensating);
        assert_eq!(out.audit_expected, JobState::Cancelled);
        assert_eq!(out.progress.after_compensation, Some(JobState::Cancelled));
        let out = cancel(&at(JobState::Pending, Stage::Cordon, 0, None), None, t(0), &s()).expect("allowed");
        assert_eq!(out.new_state, JobState::Cancelled);
    }

    #[test]
    fn repeated_cancel_while_compensating_changes_nothing() {
        let j = at(JobState::Running, Stage::Drain, 1, Some("d1"));
        let leased = task("d1", TaskState::Leased, Some(t(300)), 1, None);
        let first = cancel(&j, Some(&leased), t(0), &s()).expect("allowed");
        let compensating = JobView { state: first.new_state, progress: first.progress.clone(), kind: j.kind.clone() };
        let again = cancel(&compensating, Some(&leased), t(1), &s()).expect("allowed");
        assert_eq!(again.new_state, JobState::Compensating, "still waiting for the task");
        assert_eq!(again.progress, first.progress, "nothing recorded twice");
        assert_eq!(again.task, TaskDirective::Reuse("d1".into()));
        // A cancel during restart_clean's compensation ends cancelled instead of pending.
        let restarting = restart_clean(&at(JobState::FailedRetryable, Stage::Drain, 1, Some("d1")), Some(&leased), t(0), &s()).expect("ok");
        let view = JobView { state: restarting.new_state, progress: restarting.progress, kind: j.kind.clone() };
        let out = cancel(&view, Some(&leased), t(1), &s()).expect("allowed");
        assert_eq!((out.new_state, out.progress.after_compensation), (JobState::Compensating, Some(JobState::Cancelled)));
    }

    #[test]
    fn rerun_and_adopt_refuse_while_a_task_is_live() {
        let j = at(JobState::FailedRetryable, Stage::ScrubGpu, 3, Some("g3"));
        let q = task("g3", TaskState::Queued, None, 0, None);
        assert!(rerun(&j, Some(&q), t(0), &s()).is_err());
        assert!(adopt_observed_state(&j, Some(&q), t(0), &s()).is_err());
        let out = rerun(&j, None, t(0), &s()).expect("allowed");
        assert_eq!((out.progress.stage_index, out.progress.stage), (0, Stage::Cordon));
        assert_eq!(out.new_state, JobState::Running);
    }

    #[test]
    fn adopt_observed_state_skips_the_stage_or_reconciles_at_the_end() {
        let j = at(JobState::FailedManualIntervention, Stage::ValidateClean, 1, None);
        let out = adopt_observed_state(&j, None, t(0), &s()).expect("allowed");
        assert_eq!((out.new_state, out.progress.stage), (JobState::Running, Stage::Uncordon));
        assert_eq!(out.progress.history.last().map(|e| e.status), Some(StageStatus::Skipped));
        let j = at(JobState::FailedRetryable, Stage::Uncordon, 3, None);
        let out = adopt_observed_state(&j, None, t(0), &s()).expect("allowed");
        assert_eq!(out.new_state, JobState::Reconciled);
        // From manual intervention, Reconciled is legal too.
        assert!(JobState::FailedManualIntervention.can_transition_to(JobState::Reconciled));
    }

    #[test]
    fn restart_clean_compensates_then_goes_pending() {
        let j = at(JobState::FailedRetryable, Stage::ScrubGpu, 3, None);
        let out = restart_clean(&j, None, t(0), &s()).expect("allowed");
        assert_eq!((out.new_state, out.audit_expected), (JobState::Compensating, JobState::Pending));
        assert_eq!(out.progress.after_compensation, Some(JobState::Pending));
        assert!(restart_clean(&at(JobState::Running, Stage::ScrubGpu, 1, None), None, t(0), &s()).is_err());
    }

    #[test]
    fn mark_manual_intervention_required_freezes_and_repeats_quietly() {
        let j = at(JobState::Running, Stage::Drain, 1, Some("d1"));
        let out = mark_manual_intervention_required(&j, None, t(0), &s()).expect("allowed");
        assert_eq!(out.new_state, JobState::FailedManualIntervention);
        let again = JobView { state: out.new_state, progress: out.progress, ..j };
        let out = mark_manual_intervention_required(&again, None, t(0), &s()).expect("repeat");
        assert_eq!(out.new_state, JobState::FailedManualIntervention);
        assert!(mark_manual_intervention_required(&at(JobState::Completed, Stage::Drain, 1, None), None, t(0), &s()).is_err());
    }
}
