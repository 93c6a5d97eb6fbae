//! [`decide`]: the next step of one job from a snapshot; [`apply`]: the state and progress
//! that step leaves behind. Pure: time is a parameter, nothing is read or written.

use drover_proto::report::TaskOutcome;
use drover_proto::states::{HostLifecycle, HostRolloutState, JobState};
use drover_proto::task::TaskKind;
use drover_proto::time::Time;
use serde_json::Value;

use super::model::{FailureClass, JobKind, Progress, Stage, StageStatus, TaskSettings, stages};
use drover_store::{Job, TaskRecord, TaskState};

/// The job as decided on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobView {
    /// What it does.
    pub kind: JobKind,
    /// Where it stands.
    pub state: JobState,
    /// Its progress read model.
    pub progress: Progress,
}

impl JobView {
    /// From a stored job: `input` is the [`JobKind`], `progress` the [`Progress`] (`null` at first).
    pub fn from_job(job: &Job) -> Result<JobView, serde_json::Error> {
        let kind: JobKind = serde_json::from_value(job.job.input.clone())?;
        let progress = Progress::from_value(&kind, &job.progress)?;
        Ok(JobView { kind, state: job.state, progress })
    }
}

/// The current stage's task, as observed in the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskObs {
    /// Its id.
    pub task_id: String,
    /// Queued, leased or completed.
    pub state: TaskState,
    /// While leased: when the lease lapses (and the task becomes leasable again).
    pub lease_expires_at: Option<Time>,
    /// How many times it was leased.
    pub lease_attempts: u32,
    /// Once completed: the reported outcome (`None` when the result has none we know).
    pub outcome: Option<TaskOutcome>,
    /// Once completed: a summary of the failed steps' messages.
    pub detail: String,
}

impl TaskObs {
    /// From a stored task record and its result JSON
    /// (`{"outcome": "succeeded"|"failed"|"refused", "steps": [...]}`).
    pub fn from_record(r: &TaskRecord) -> TaskObs {
        let result = r.result.as_ref();
        let outcome = result.and_then(|v| serde_json::from_value::<TaskOutcome>(v.get("outcome")?.clone()).ok());
        let detail = result.map(summarize_steps).unwrap_or_default();
        TaskObs {
            task_id: r.task.task_id.to_string(),
            state: r.state,
            lease_expires_at: r.lease_expires_at,
            lease_attempts: r.attempts,
            outcome,
            detail,
        }
    }

    /// Neither completed nor past its lease: the agent has it or will lease it.
    pub fn is_live(&self, now: Time) -> bool {
        match self.state {
            TaskState::Queued => true,
            TaskState::Leased => self.lease_expires_at.is_some_and(|t| t > now),
            TaskState::Completed => false,
        }
    }
}

fn summarize_steps(v: &Value) -> String {
    let Some(steps) = v.get("steps").and_then(Value::as_array) else { return String::new() };
    let failed: Vec<String> = steps
        .iter()
        .filter(|s| s.get("outcome").and_then(Value::as_str) == Some("error"))
        .map(|s| {
            let name = s.get("name").and_then(Value::as_str).unwrap_or("?");
            match s.get("message").and_then(Value::as_str) {
                Some(m) if !m.is_empty() => format!("{name}: {m}"),
                _ => name.to_owned(),
            }
        })
        .collect();
    failed.join("; ")
}

/// What is observed about the job's host, read from one store snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// The host's coarse lifecycle.
    pub lifecycle: HostLifecycle,
    /// Whether it accepts new allocations / rollout selection (false once cordoned).
    pub schedulable: bool,
    /// Its state in the current rollout, if it takes part in one.
    pub rollout: Option<HostRolloutState>,
    /// Whether it runs its desired generation (the `activate` stage's goal).
    pub on_desired_generation: bool,
    /// Another job that holds the host, if any (one owner at a time).
    pub held_by_other_job: Option<String>,
    /// The record of `progress.task_id`, when there is one.
    pub task: Option<TaskObs>,
    /// The host's MAAS side, for the `maas_workflow` stage.
    pub maas: MaasObs,
}

/// What the `maas_workflow` stage observes: whether the host is bound to a MAAS machine, and
/// the child workflow its progress names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MaasObs {
    /// The host has a MAAS binding.
    pub bound: bool,
    /// MAAS was last seen holding the machine released or gone (Ready, New, or absent): its
    /// OS — and the agent — no longer run (e.g. the reconciler released a retired host).
    pub released: bool,
    /// The child workflow job (`progress.child_job_id`), once created.
    pub child: Option<ChildObs>,
}

/// A child MAAS workflow as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildObs {
    /// Its id.
    pub job_id: String,
    /// Its state.
    pub state: JobState,
    /// Its current stage.
    pub stage: String,
    /// Its latest status line.
    pub message: String,
}

impl Observed {
    /// Activating or soaking in a rollout.
    pub fn activation_in_flight(&self) -> bool {
        matches!(self.rollout, Some(HostRolloutState::Activating | HostRolloutState::Soaking))
    }
}

/// Tunables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Attempts per stage before automatic retry stops (task re-issues, lease lapses, local
    /// actions that did not take).
    pub max_attempts: u32,
    /// What the task stages are built from.
    pub tasks: TaskSettings,
    /// A scheduler webhook is configured (`jobs.scheduler_webhook_url`): `force_release` can
    /// ask it whether allocations are still attached.
    pub scheduler_webhook: bool,
    /// `force_release` asks the scheduler at most this often while allocations remain (or
    /// while it gives no usable answer).
    pub scheduler_poll_secs: u64,
}

impl Default for Policy {
    fn default() -> Self {
        Policy { max_attempts: 3, tasks: TaskSettings::default(), scheduler_webhook: false, scheduler_poll_secs: 15 }
    }
}

/// The one next step for a job. Every variant carries a human reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// `pending → running`.
    Start {
        /// Why.
        reason: String,
    },
    /// Sign and queue a task for the host (attempt `attempt` of the stage).
    IssueTask {
        /// The stage.
        stage: Stage,
        /// The task.
        kind: TaskKind,
        /// Which attempt this is (1-based).
        attempt: u32,
        /// The previous attempt's task (completed or lost), which this one replaces.
        supersedes: Option<String>,
        /// Why.
        reason: String,
    },
    /// The executor performs a local stage itself (cordon, uncordon, force_release, activate,
    /// retire, remove, delete); the next decision observes whether it took (force_release:
    /// [`after_scheduler_answer`] decides on the scheduler's answer in the same step).
    RunLocal {
        /// The stage.
        stage: Stage,
        /// Which attempt this is (1-based).
        attempt: u32,
        /// Why.
        reason: String,
    },
    /// The current stage is done; move to the next.
    Advance {
        /// The stage done.
        from: Stage,
        /// The next stage.
        to_stage: Stage,
        /// Why.
        reason: String,
    },
    /// The last stage is done: `running → completed`.
    Complete {
        /// Why.
        reason: String,
    },
    /// Stop the job.
    Fail {
        /// Why, as a class.
        class: FailureClass,
        /// `failed_retryable` or `failed_manual_intervention`.
        state: JobState,
        /// Why, for a human.
        message: String,
        /// Quarantine the host (a failed validation).
        quarantine: bool,
        /// Move the host's lifecycle here too (`quarantined`; `retired` after a failed uninstall).
        host_to: Option<HostLifecycle>,
    },
    /// Compensation is over: `compensating → pending | cancelled`.
    FinishCompensation {
        /// The state it ends in.
        to: JobState,
        /// Why.
        reason: String,
    },
    /// Nothing to do now.
    Wait {
        /// Why.
        reason: String,
    },
}

impl Decision {
    /// The human reason.
    pub fn reason(&self) -> &str {
        match self {
            Decision::Start { reason }
            | Decision::IssueTask { reason, .. }
            | Decision::RunLocal { reason, .. }
            | Decision::Advance { reason, .. }
            | Decision::Complete { reason }
            | Decision::FinishCompensation { reason, .. }
            | Decision::Wait { reason } => reason,
            Decision::Fail { message, .. } => message,
        }
    }
}

fn wait(reason: impl Into<String>) -> Decision {
    Decision::Wait { reason: reason.into() }
}

fn fail(class: FailureClass, state: JobState, message: impl Into<String>) -> Decision {
    Decision::Fail { class, state, message: message.into(), quarantine: false, host_to: None }
}

fn manual(class: FailureClass, message: impl Into<String>) -> Decision {
    fail(class, JobState::FailedManualIntervention, message)
}

/// The next step for `job`, given what is observed at `now`. Deciding the same snapshot again
/// yields the same decision.
pub fn decide(job: &JobView, observed: &Observed, now: Time, policy: &Policy) -> Decision {
    match job.state {
        JobState::Pending => decide_pending(job, observed),
        JobState::Running => decide_running(job, observed, now, policy),
        JobState::Compensating => decide_compensating(job, observed),
        JobState::FailedRetryable | JobState::FailedManualIntervention => {
            wait(format!("job is {}: it waits for an operator action (retry_stage, resume, rerun, cancel, …)", job.state))
        }
        JobState::Completed | JobState::Cancelled | JobState::Reconciled => wait(format!("job is {}: nothing left to do", job.state)),
    }
}

fn decide_pending(job: &JobView, observed: &Observed) -> Decision {
    if let Some(other) = &observed.held_by_other_job {
        return wait(format!("host is held by job {other}; one job owns a host at a time"));
    }
    if observed.activation_in_flight() {
        return wait("waits for an in-flight activation to settle");
    }
    if observed.lifecycle == HostLifecycle::Deleted {
        return manual(FailureClass::OwnershipConflict, "host is deleted; a job cannot run on it");
    }
    Decision::Start { reason: format!("{} job starts at stage {}", job.kind.name(), job.progress.stage) }
}

fn decide_running(job: &JobView, obs: &Observed, now: Time, policy: &Policy) -> Decision {
    let p = &job.progress;
    let plan = stages(&job.kind);
    if let Some(other) = &obs.held_by_other_job {
        return manual(FailureClass::OwnershipConflict, format!("host is also held by job {other}; ownership is ambiguous"));
    }
    let Some(&stage) = plan.get(p.stage_index) else {
        return manual(FailureClass::Ambiguous, format!("progress is at stage index {} but the plan has {}", p.stage_index, plan.len()));
    };
    if stage != p.stage {
        return manual(
            FailureClass::Ambiguous,
            format!("progress names stage {} at index {} but the plan has {stage} there", p.stage, p.stage_index),
        );
    }
    if obs.lifecycle == HostLifecycle::Deleted && stage != Stage::Delete {
        return manual(FailureClass::OwnershipConflict, format!("host was deleted out of band during stage {stage}"));
    }
    let done = |why: String| next_or_complete(&plan, p.stage_index, why);
    if stage.is_local() { decide_local(job, obs, stage, now, policy, done) } else { decide_task(job, obs, stage, now, policy, done) }
}

/// The decision for a local stage the executor performed and saw succeed at once (nothing
/// the store observes later).
pub fn local_stage_done(job: &JobView, why: String) -> Decision {
    next_or_complete(&stages(&job.kind), job.progress.stage_index, why)
}

/// What the executor learned from the scheduler in one `force_release` attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedulerAnswer {
    /// The release notice was sent in this attempt and acknowledged (2xx).
    pub release_sent_now: bool,
    /// How many allocations the scheduler says are still attached, or why there is no usable
    /// answer (the notice or the query unreachable or refused, a malformed body): never zero.
    pub allocations: Result<u64, String>,
}

fn force_release(kind: &JobKind) -> bool {
    matches!(kind, JobKind::FullDecommission { force_release: true, .. })
}

fn allocations(n: u64) -> String {
    if n == 1 { "1 allocation".to_owned() } else { format!("{n} allocations") }
}

/// The step one `force_release` attempt ends with, from the scheduler's answer: `job` is the
/// job after its [`Decision::RunLocal`] was applied (the attempt counted). Returns the
/// decision and the state and progress to persist with it (one transaction).
///
/// - no allocation attached: the stage is done;
/// - allocations attached without `forceRelease`: manual intervention (`ownership_conflict`);
/// - with `forceRelease`, allocations still attached: asked again after
///   [`Policy::scheduler_poll_secs`] until the attempts are spent, then manual intervention
///   (`ownership_conflict`) naming the count;
/// - no usable answer: asked again (`transient`) until the attempts are spent, then
///   `failed_retryable` — an unreachable scheduler never counts as zero allocations.
///
/// A decision of [`Decision::Wait`] means "ask again": the progress records the attempt as
/// failed, with its class and the count.
pub fn after_scheduler_answer(job: &JobView, answer: &SchedulerAnswer, now: Time, policy: &Policy) -> (Decision, JobState, Progress) {
    let mut job = job.clone();
    job.progress.release_sent |= answer.release_sent_now;
    let (attempt, max, poll) = (job.progress.attempt, policy.max_attempts, policy.scheduler_poll_secs);
    let force = force_release(&job.kind);
    let (decision, again) = match &answer.allocations {
        Ok(0) if force => (local_stage_done(&job, "the scheduler reports no allocation attached after the release notice".into()), None),
        Ok(0) => (local_stage_done(&job, "the scheduler reports no allocation attached".into()), None),
        Ok(n) if !force => (
            manual(
                FailureClass::OwnershipConflict,
                format!("the scheduler reports {} still attached and forceRelease is false", allocations(*n)),
            ),
            None,
        ),
        Ok(n) if attempt >= max => (
            manual(
                FailureClass::OwnershipConflict,
                format!(
                    "the scheduler still reports {} attached after {attempt} polls: end them, then resume (or adopt the observed state)",
                    allocations(*n)
                ),
            ),
            None,
        ),
        Ok(n) => (
            wait(format!("the scheduler reports {} still attached (poll {attempt} of {max}); asks again in {poll} s", allocations(*n))),
            Some(FailureClass::OwnershipConflict),
        ),
        Err(e) if attempt >= max => (
            fail(
                FailureClass::Transient,
                JobState::FailedRetryable,
                format!("no usable answer from the scheduler: {e}; gave up after {attempt} attempts"),
            ),
            None,
        ),
        Err(e) => (
            wait(format!("no usable answer from the scheduler (attempt {attempt} of {max}): {e}; asks again in {poll} s")),
            Some(FailureClass::Transient),
        ),
    };
    match (&decision, again) {
        (Decision::Wait { reason }, Some(class)) => {
            let mut p = job.progress.clone();
            p.failure_class = Some(class);
            p.push(p.stage, attempt, StageStatus::Failed, reason, now);
            (decision, job.state, p)
        }
        _ => {
            let (state, p) = apply(&job, &decision, now, None);
            (decision, state, p)
        }
    }
}

/// `maas_workflow`: start the child (a `RunLocal` the executor turns into the child job), then
/// follow it. A full decommission of a host that MAAS does not know skips the stage; a reimage
/// cannot. A stopped child keeps the parent waiting with the child's words: the operator
/// recovers the child (its own actions), and the parent goes on when the child completes.
fn decide_maas_child(job: &JobView, obs: &Observed, policy: &Policy, done: impl Fn(String) -> Decision) -> Decision {
    if !obs.maas.bound && obs.maas.child.is_none() {
        return match job.kind {
            JobKind::Reimage { .. } => {
                manual(FailureClass::Configuration, "the host has no MAAS binding: only a host onboarded through MAAS can be reimaged")
            }
            _ => done("the host is not bound to a MAAS machine: nothing to release in MAAS".to_owned()),
        };
    }
    let Some(child) = &obs.maas.child else {
        if job.progress.attempt >= policy.max_attempts {
            return fail(
                FailureClass::Transient,
                JobState::FailedRetryable,
                format!("the MAAS workflow could not be started in {} attempts: {}", job.progress.attempt, job.progress.message),
            );
        }
        return Decision::RunLocal {
            stage: Stage::MaasWorkflow,
            attempt: job.progress.attempt + 1,
            reason: "starts the MAAS workflow".into(),
        };
    };
    match child.state {
        JobState::Completed | JobState::Reconciled => done(format!("MAAS workflow {} {}", child.job_id, child.state)),
        JobState::Cancelled => manual(FailureClass::Ambiguous, format!("MAAS workflow {} was cancelled: {}", child.job_id, child.message)),
        JobState::FailedRetryable | JobState::FailedManualIntervention => wait(format!(
            "MAAS workflow {} is {} at {}: {} (recover it with drover onboarding <verb> {})",
            child.job_id, child.state, child.stage, child.message, child.job_id
        )),
        _ => wait(format!("MAAS workflow {} is {} at {}: {}", child.job_id, child.state, child.stage, child.message)),
    }
}

fn next_or_complete(plan: &[Stage], index: usize, why: String) -> Decision {
    match plan.get(index + 1) {
        Some(&next) => Decision::Advance { from: plan[index], to_stage: next, reason: why },
        None => Decision::Complete { reason: format!("{why}; every stage is done") },
    }
}

fn decide_local(job: &JobView, obs: &Observed, stage: Stage, now: Time, policy: &Policy, done: impl Fn(String) -> Decision) -> Decision {
    use HostLifecycle as L;
    let achieved = match stage {
        Stage::Cordon => (!obs.schedulable).then(|| "host is cordoned".to_owned()),
        // A quarantined host is never schedulable: cleaned or not, it stays cordoned until an
        // operator unquarantines it and uncordons it.
        Stage::Uncordon if obs.lifecycle == L::Quarantined => {
            Some("host is quarantined: it stays cordoned until an operator unquarantines and uncordons it".to_owned())
        }
        Stage::Uncordon => obs.schedulable.then(|| "host is schedulable again".to_owned()),
        // Drover does not track tenant allocations: the scheduler is asked (the executor runs
        // the stage and decides on its answer, `after_scheduler_answer`). Without a
        // scheduler nothing can be known: forceRelease fails closed, a plain decommission
        // relies on the cordon (documented).
        Stage::ForceRelease if !policy.scheduler_webhook => {
            if force_release(&job.kind) {
                return manual(
                    FailureClass::Configuration,
                    "forceRelease needs jobs.scheduler_webhook_url: without a scheduler Drover cannot know whether allocations remain attached",
                );
            }
            Some(
                "no scheduler webhook is configured: Drover cannot know whether allocations are attached (the cordon stopped new ones)"
                    .to_owned(),
            )
        }
        Stage::Activate => {
            if obs.activation_in_flight() {
                return wait("activation in flight; waiting for it to settle");
            }
            // A host the channel's rollout has not reached yet is brought to its target by
            // that rollout's wave: the job does not jump the wave order (nor wait for it —
            // holding budget slots while waiting for a wave that needs them would deadlock).
            match obs.rollout {
                _ if obs.on_desired_generation => Some("host runs its channel's current target".to_owned()),
                None => Some("no rollout lists the host yet: its channel's next rollout brings it to the target".to_owned()),
                Some(HostRolloutState::Pending) => {
                    Some("its channel's rollout has not reached the host's wave: that wave brings it to the target".to_owned())
                }
                Some(HostRolloutState::Skipped) if job.progress.attempt > 0 => {
                    return wait("waits for the rollout engine to dispatch the channel's current target");
                }
                _ => None,
            }
        }
        Stage::MaasWorkflow => return decide_maas_child(job, obs, policy, done),
        Stage::Retire => matches!(obs.lifecycle, L::Retired | L::Removing | L::Deleted).then(|| "host is retired".to_owned()),
        Stage::Remove => matches!(obs.lifecycle, L::Removing | L::Deleted).then(|| "host is removing".to_owned()),
        Stage::Delete => (obs.lifecycle == L::Deleted).then(|| "host is deleted".to_owned()),
        _ => None,
    };
    if let Some(why) = achieved {
        return done(why);
    }
    // Preconditions the executor cannot satisfy on its own.
    match stage {
        Stage::Retire if !matches!(obs.lifecycle, L::Active | L::Offline | L::Quarantined | L::Draining) => {
            return manual(FailureClass::Ambiguous, format!("cannot retire a host that is {}", obs.lifecycle));
        }
        Stage::Remove if obs.lifecycle != L::Retired => {
            return manual(FailureClass::Ambiguous, format!("cannot remove a host that is {} (expected retired)", obs.lifecycle));
        }
        Stage::Delete if obs.lifecycle != L::Removing => {
            return manual(FailureClass::Ambiguous, format!("cannot delete a host that is {} (expected removing)", obs.lifecycle));
        }
        _ => {}
    }
    if stage != Stage::Activate && obs.activation_in_flight() {
        return wait(format!("stage {stage} waits for an in-flight activation to settle"));
    }
    let attempt = job.progress.attempt;
    if attempt >= policy.max_attempts {
        return fail(
            FailureClass::Transient,
            JobState::FailedRetryable,
            format!("stage {stage} did not take effect after {attempt} attempts"),
        );
    }
    // The scheduler is asked again only once the poll interval has passed since the last ask.
    if stage == Stage::ForceRelease
        && attempt > 0
        && let Some(last) = job.progress.history.iter().rev().find(|e| e.stage == stage).map(|e| e.at)
    {
        let next = last.plus_secs(policy.scheduler_poll_secs);
        if now < next {
            return wait(format!("stage {stage}: asks the scheduler again at {next} (attempt {} of {})", attempt + 1, policy.max_attempts));
        }
    }
    Decision::RunLocal { stage, attempt: attempt + 1, reason: format!("stage {stage}: attempt {} of {}", attempt + 1, policy.max_attempts) }
}

fn decide_task(job: &JobView, obs: &Observed, stage: Stage, now: Time, policy: &Policy, done: impl Fn(String) -> Decision) -> Decision {
    let p = &job.progress;
    // No OS runs on a machine MAAS holds released (the drift reconciler releases a retired
    // host's machine, §6.4), so no agent is left to uninstall itself.
    if stage == Stage::Uninstall && obs.maas.released {
        return done("MAAS holds the machine released: its OS and agent are gone, nothing to uninstall".to_owned());
    }
    let Some(task_id) = &p.task_id else {
        return issue(job, obs, stage, policy, None, format!("stage {stage} starts"));
    };
    let Some(t) = &obs.task else {
        return retry_or_fail(
            job,
            obs,
            stage,
            policy,
            FailureClass::Transient,
            Some(task_id),
            format!("task {task_id} is missing from the store"),
        );
    };
    if &t.task_id != task_id {
        return manual(FailureClass::Ambiguous, format!("observed task {} is not the stage's task {task_id}", t.task_id));
    }
    match t.state {
        TaskState::Queued => wait(format!("task {task_id} ({stage}) is queued for the host")),
        TaskState::Leased if t.is_live(now) => {
            let until = t.lease_expires_at.map(|x| x.to_string()).unwrap_or_default();
            wait(format!("task {task_id} ({stage}) is leased to the host until {until}"))
        }
        TaskState::Leased => {
            if t.lease_attempts >= policy.max_attempts {
                fail(
                    FailureClass::Transient,
                    JobState::FailedRetryable,
                    format!("task {task_id} ({stage}) lost its lease {} times: the agent looks unreachable", t.lease_attempts),
                )
            } else {
                wait(format!(
                    "task {task_id} ({stage}) lost its lease (lease {} of {}); it is leasable again",
                    t.lease_attempts, policy.max_attempts
                ))
            }
        }
        TaskState::Completed => match t.outcome {
            Some(TaskOutcome::Succeeded) => done(format!("task {task_id} ({stage}) succeeded")),
            Some(TaskOutcome::Refused) => {
                manual(FailureClass::Refused, format!("the agent refused task {task_id} ({stage}): {}", or_none(&t.detail)))
            }
            Some(TaskOutcome::Failed) if stage == Stage::ValidateClean => Decision::Fail {
                class: FailureClass::ValidationFailed,
                state: JobState::FailedManualIntervention,
                message: format!("validation found residue, host quarantined: {}", or_none(&t.detail)),
                quarantine: true,
                host_to: Some(HostLifecycle::Quarantined),
            },
            Some(TaskOutcome::Failed) => retry_or_fail(
                job,
                obs,
                stage,
                policy,
                FailureClass::TaskFailed,
                Some(task_id),
                format!("task {task_id} ({stage}) failed: {}", or_none(&t.detail)),
            ),
            None => manual(FailureClass::Ambiguous, format!("task {task_id} ({stage}) completed without a known outcome")),
        },
    }
}

fn or_none(s: &str) -> &str {
    if s.is_empty() { "no detail" } else { s }
}

fn retry_or_fail(
    job: &JobView,
    obs: &Observed,
    stage: Stage,
    policy: &Policy,
    class: FailureClass,
    prior: Option<&String>,
    why: String,
) -> Decision {
    let attempt = job.progress.attempt;
    if attempt < policy.max_attempts {
        return issue(job, obs, stage, policy, prior.cloned(), format!("{why}; retrying"));
    }
    let state = if stage == Stage::Drain && class == FailureClass::TaskFailed {
        JobState::FailedManualIntervention
    } else {
        JobState::FailedRetryable
    };
    let host_to = (stage == Stage::Uninstall && obs.lifecycle == HostLifecycle::Removing).then_some(HostLifecycle::Retired);
    Decision::Fail { class, state, message: format!("{why}; gave up after {attempt} attempts"), quarantine: false, host_to }
}

fn issue(job: &JobView, obs: &Observed, stage: Stage, policy: &Policy, supersedes: Option<String>, why: String) -> Decision {
    if obs.activation_in_flight() {
        return wait(format!("stage {stage} waits for an in-flight activation to settle"));
    }
    let attempt = job.progress.attempt;
    if attempt >= policy.max_attempts {
        return fail(FailureClass::Transient, JobState::FailedRetryable, format!("stage {stage} used all {attempt} attempts"));
    }
    match stage.task(&job.kind, &policy.tasks) {
        Ok(Some(kind)) => Decision::IssueTask {
            stage,
            kind,
            attempt: attempt + 1,
            supersedes,
            reason: format!("{why} (attempt {} of {})", attempt + 1, policy.max_attempts),
        },
        Ok(None) => manual(FailureClass::Ambiguous, format!("stage {stage} has no task")),
        Err(e) => manual(FailureClass::Configuration, format!("stage {stage}: {e}")),
    }
}

fn decide_compensating(job: &JobView, obs: &Observed) -> Decision {
    if let (Some(id), Some(t)) = (&job.progress.task_id, &obs.task)
        && &t.task_id == id
        && t.state != TaskState::Completed
    {
        return wait(format!(
            "compensation waits for task {id} ({}) to finish; a queued or leased task cannot be withdrawn",
            job.progress.stage
        ));
    }
    let to = job.progress.after_compensation.unwrap_or(JobState::Cancelled);
    Decision::FinishCompensation { to, reason: format!("nothing of the job is in flight any more; it ends {to}") }
}

/// `node-state-model.md` §3.3's guardrail on `draining` and `removing` for a job moving
/// `from → to` with its progress at `stage` and its host in `host`: the lifecycle state the
/// same step moves the host to, if any (the step's one transaction carries the transition, so
/// no reader ever sees the host in an in-progress state with no job working on it).
///
/// - Entering `running` (started, or resumed, retried or rerun by an operator): a job that
///   holds an in-progress state at `stage` ([`JobKind::holds`]) puts its host there — a new
///   retire's host enters `draining`, a resumed one whose failed drain left it `offline` (or
///   `active` again since its agent checked in) goes back to `draining`, a resumed remove
///   whose failed uninstall left it `retired` goes back to `removing`.
/// - Stopping — failed (either kind), cancelled, reconciled or completed: a host is never left
///   in `draining` or `removing` with nothing working on it: `draining → offline` (the drain
///   lifecycle failed or stopped short of retirement), `removing → retired` (the uninstall
///   failed or was rolled back). Asking the verb again resumes the job and re-enters the state.
pub fn lifecycle_guard(kind: &JobKind, stage: Stage, host: HostLifecycle, from: JobState, to: JobState) -> Option<HostLifecycle> {
    use HostLifecycle as L;
    if from == to {
        return None;
    }
    match to {
        JobState::Running => kind.holds(stage).filter(|&held| host != held && host.can_transition_to(held)),
        // Still owned: a pending job is about to start, a compensating one waits for its task.
        JobState::Pending | JobState::Compensating => None,
        JobState::FailedRetryable
        | JobState::FailedManualIntervention
        | JobState::Cancelled
        | JobState::Reconciled
        | JobState::Completed => match host {
            L::Draining => Some(L::Offline),
            L::Removing => Some(L::Retired),
            _ => None,
        },
    }
}

/// The job state and progress `decision` leaves behind, once the executor has carried it out
/// (`issued_task_id`: the id of the task it queued for [`Decision::IssueTask`]). A
/// [`Decision::Wait`] changes nothing.
pub fn apply(job: &JobView, decision: &Decision, now: Time, issued_task_id: Option<&str>) -> (JobState, Progress) {
    let mut p = job.progress.clone();
    let stage = p.stage;
    let state = match decision {
        Decision::Wait { .. } => return (job.state, p),
        Decision::Start { reason } => {
            p.message = reason.clone();
            JobState::Running
        }
        Decision::IssueTask { attempt, supersedes, reason, .. } => {
            if supersedes.is_some() || *attempt > 1 {
                p.push(stage, p.attempt, StageStatus::Failed, reason, now);
            }
            p.attempt = *attempt;
            p.task_id = issued_task_id.map(str::to_owned);
            p.push(stage, *attempt, StageStatus::Started, reason, now);
            job.state
        }
        Decision::RunLocal { attempt, reason, .. } => {
            p.attempt = *attempt;
            p.push(stage, *attempt, StageStatus::Started, reason, now);
            job.state
        }
        Decision::Advance { to_stage, reason, .. } => {
            p.push(stage, p.attempt, StageStatus::Succeeded, reason, now);
            p.stage_index += 1;
            p.stage = *to_stage;
            p.attempt = 0;
            p.task_id = None;
            p.failure_class = None;
            p.release_sent = false;
            job.state
        }
        Decision::Complete { reason } => {
            p.push(stage, p.attempt, StageStatus::Succeeded, reason, now);
            p.failure_class = None;
            JobState::Completed
        }
        Decision::Fail { class, state, message, .. } => {
            p.failure_class = Some(*class);
            p.push(stage, p.attempt, StageStatus::Failed, message, now);
            *state
        }
        Decision::FinishCompensation { to, reason } => {
            p.push(stage, p.attempt, StageStatus::Compensated, reason, now);
            p.after_compensation = None;
            if *to == JobState::Pending {
                let history = std::mem::take(&mut p.history);
                p = Progress { history, message: reason.clone(), ..Progress::initial(&job.kind) };
            }
            *to
        }
    };
    (state, p)
}

#[cfg(test)]
#[path = "plan_tests.rs"]
pub(crate) mod tests;
