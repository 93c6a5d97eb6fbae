//! Unit tests of [`decide`](super::decide) and [`apply`](super::apply): every job kind driven to
//! its end by a well-behaved executor and agent, and each failure and wait rule.

use super::super::model::{StageEvent, StorageChoice};
use super::*;

pub(crate) fn t(secs: i64) -> Time {
    Time::from_unix(1_800_000_000 + secs).expect("time")
}

pub(crate) fn observed() -> Observed {
    Observed {
        lifecycle: HostLifecycle::Active,
        schedulable: true,
        rollout: None,
        on_desired_generation: true,
        held_by_other_job: None,
        task: None,
        maas: Default::default(),
    }
}

pub(crate) fn task(id: &str, state: TaskState, lease: Option<Time>, leases: u32, outcome: Option<TaskOutcome>) -> TaskObs {
    TaskObs { task_id: id.into(), state, lease_expires_at: lease, lease_attempts: leases, outcome, detail: String::new() }
}

fn job(kind: JobKind) -> JobView {
    let progress = Progress::initial(&kind);
    JobView { kind, state: JobState::Pending, progress }
}

/// Drives a job to the end, simulating a well-behaved executor and agent: returns the
/// stages in the order their work was issued.
fn drive(mut j: JobView, mut obs: Observed) -> (JobView, Vec<Stage>) {
    let policy = scheduler();
    let mut issued = Vec::new();
    for i in 0..200 {
        let now = t(i);
        let d = decide(&j, &obs, now, &policy);
        let mut task_id = None;
        match &d {
            Decision::IssueTask { stage, .. } => {
                issued.push(*stage);
                let id = format!("task-{i}");
                obs.task = Some(task(&id, TaskState::Completed, None, 1, Some(TaskOutcome::Succeeded)));
                task_id = Some(id);
            }
            Decision::RunLocal { stage, .. } => {
                issued.push(*stage);
                match stage {
                    Stage::Cordon => obs.schedulable = false,
                    Stage::Uncordon => obs.schedulable = true,
                    Stage::ForceRelease => {
                        let (s, p) = apply(&j, &d, now, None);
                        j = JobView { state: s, progress: p, ..j };
                        let answer = SchedulerAnswer { release_sent_now: true, allocations: Ok(0) };
                        let (_, s, p) = after_scheduler_answer(&j, &answer, now, &policy);
                        j = JobView { state: s, progress: p, ..j };
                        continue;
                    }
                    Stage::Activate => obs.on_desired_generation = true,
                    Stage::Retire => obs.lifecycle = HostLifecycle::Retired,
                    Stage::Remove => obs.lifecycle = HostLifecycle::Removing,
                    Stage::Delete => obs.lifecycle = HostLifecycle::Deleted,
                    _ => unreachable!(),
                }
            }
            Decision::Advance { .. } => obs.task = None,
            Decision::Complete { .. } => {
                let (s, p) = apply(&j, &d, now, None);
                assert_eq!(lifecycle_guard(&j.kind, p.stage, obs.lifecycle, j.state, s), None, "a completed job leaves its host be");
                return (JobView { state: s, progress: p, ..j }, issued);
            }
            Decision::Start { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
        let (s, p) = apply(&j, &d, now, task_id.as_deref());
        // The executor's guardrail step: a retire or remove that starts moves its host into
        // the state it holds, in the same transaction.
        if let Some(to) = lifecycle_guard(&j.kind, p.stage, obs.lifecycle, j.state, s) {
            obs.lifecycle = to;
        }
        j = JobView { state: s, progress: p, ..j };
    }
    panic!("did not finish")
}

#[test]
fn soft_reset_runs_its_stages_in_order() {
    use Stage::*;
    let (done, issued) = drive(job(JobKind::SoftReset { storage: StorageChoice::Local }), observed());
    assert_eq!(issued, vec![Cordon, Drain, RevokeUsers, CleanupStorage, ScrubGpu, ValidateClean, Uncordon]);
    assert_eq!(done.state, JobState::Completed);
    let succeeded: Vec<Stage> = done.progress.history.iter().filter(|e| e.status == StageStatus::Succeeded).map(|e| e.stage).collect();
    assert_eq!(succeeded, issued);
}

#[test]
fn soft_reset_of_a_quarantined_host_leaves_it_cordoned() {
    use Stage::*;
    let obs = Observed { lifecycle: HostLifecycle::Quarantined, schedulable: false, ..observed() };
    let (done, issued) = drive(job(JobKind::SoftReset { storage: StorageChoice::None }), obs);
    assert_eq!(done.state, JobState::Completed);
    // Cleaned, but the uncordon is not run: a quarantined host is never schedulable.
    assert!(!issued.contains(&Uncordon), "{issued:?}");
    let last = done.progress.history.iter().rev().find(|e| e.stage == Uncordon).expect("uncordon recorded");
    assert!(last.message.contains("quarantined"), "{last:?}");
}

#[test]
fn storage_none_skips_cleanup() {
    let (_, issued) = drive(job(JobKind::SoftReset { storage: StorageChoice::None }), observed());
    assert!(!issued.contains(&Stage::CleanupStorage), "{issued:?}");
    assert_eq!(issued.len(), 6);
}

#[test]
fn full_decommission_issues_its_stages_in_order_and_deletes_the_host() {
    use Stage::*;
    let (done, issued) = drive(job(JobKind::FullDecommission { storage: None, force_release: true, maas: Default::default() }), observed());
    assert_eq!(issued, vec![Cordon, ForceRelease, Drain, RevokeUsers, Retire, Remove, Uninstall, Delete]);
    assert_eq!(done.state, JobState::Completed);
}

/// The policy with a scheduler webhook configured (polls 10 s apart).
fn scheduler() -> Policy {
    Policy { scheduler_webhook: true, scheduler_poll_secs: 10, ..Policy::default() }
}

/// A full decommission at its `force_release` stage, not yet attempted, cordoned.
fn at_force_release(force_release: bool) -> (JobView, Observed) {
    let mut obs = observed();
    obs.schedulable = false;
    (at_stage(JobKind::FullDecommission { storage: None, force_release, maas: Default::default() }, Stage::ForceRelease, 0, None), obs)
}

/// One `force_release` attempt at `now`: the decision must be to run the stage; the
/// executor's I/O is `answer`. Returns the step it ends with and the job after.
fn poll(j: &JobView, obs: &Observed, now: Time, policy: &Policy, answer: SchedulerAnswer) -> (Decision, JobView) {
    let d = decide(j, obs, now, policy);
    assert!(matches!(d, Decision::RunLocal { stage: Stage::ForceRelease, .. }), "{d:?}");
    let (s, p) = apply(j, &d, now, None);
    let after = JobView { state: s, progress: p, ..j.clone() };
    let (outcome, s, p) = after_scheduler_answer(&after, &answer, now, policy);
    (outcome, JobView { state: s, progress: p, ..after })
}

fn count(n: u64, sent: bool) -> SchedulerAnswer {
    SchedulerAnswer { release_sent_now: sent, allocations: Ok(n) }
}

fn unusable(why: &str) -> SchedulerAnswer {
    SchedulerAnswer { release_sent_now: false, allocations: Err(why.into()) }
}

#[test]
fn force_release_asks_until_no_allocation_remains_one_poll_per_interval() {
    let policy = scheduler();
    let (j, obs) = at_force_release(true);
    // The notice goes out with the first attempt; two allocations remain.
    let (d, j) = poll(&j, &obs, t(0), &policy, count(2, true));
    assert!(matches!(&d, Decision::Wait { reason } if reason.contains("2 allocations still attached")), "{d:?}");
    assert_eq!((j.state, j.progress.attempt, j.progress.release_sent), (JobState::Running, 1, true));
    assert_eq!(j.progress.failure_class, Some(FailureClass::OwnershipConflict));
    // Not asked again before the interval (a restart decides the same from what is stored).
    for now in [t(0), t(9)] {
        let d = decide(&j, &obs, now, &policy);
        assert!(matches!(&d, Decision::Wait { reason } if reason.contains("asks the scheduler again")), "{d:?}");
        assert_eq!(d, decide(&j, &obs, now, &policy));
    }
    let (d, j) = poll(&j, &obs, t(10), &policy, count(1, false));
    assert!(matches!(&d, Decision::Wait { reason } if reason.contains("1 allocation still attached (poll 2 of 3)")), "{d:?}");
    assert!(j.progress.release_sent, "the notice is not sent twice");
    let (d, j) = poll(&j, &obs, t(20), &policy, count(0, false));
    assert!(matches!(d, Decision::Advance { from: Stage::ForceRelease, to_stage: Stage::Drain, .. }), "{d:?}");
    assert_eq!((j.progress.stage, j.progress.attempt, j.progress.failure_class, j.progress.release_sent), (Stage::Drain, 0, None, false));
    // The read model keeps each poll's count.
    let polls: Vec<&str> = j
        .progress
        .history
        .iter()
        .filter(|e| e.stage == Stage::ForceRelease && e.status != StageStatus::Started)
        .map(|e| e.message.as_str())
        .collect();
    assert_eq!(polls.len(), 3, "{polls:?}");
    assert!(polls[0].contains("2 allocations") && polls[1].contains("1 allocation") && polls[2].contains("no allocation"), "{polls:?}");
}

#[test]
fn allocations_stuck_after_the_bound_need_an_operator_naming_the_count() {
    let policy = scheduler();
    let (mut j, obs) = at_force_release(true);
    for (i, now) in [t(0), t(10)].into_iter().enumerate() {
        let (d, after) = poll(&j, &obs, now, &policy, count(1, i == 0));
        assert!(matches!(d, Decision::Wait { .. }), "{d:?}");
        j = after;
    }
    let (d, j) = poll(&j, &obs, t(20), &policy, count(1, false));
    let Decision::Fail { class, state, message, .. } = &d else { panic!("{d:?}") };
    assert_eq!((*class, *state), (FailureClass::OwnershipConflict, JobState::FailedManualIntervention));
    assert!(message.contains("1 allocation attached after 3 polls"), "{message}");
    assert_eq!((j.state, j.progress.failure_class), (JobState::FailedManualIntervention, Some(FailureClass::OwnershipConflict)));
    assert!(decide(&j, &obs, t(60), &policy).reason().contains("waits for an operator action"));
}

#[test]
fn attached_allocations_without_force_release_need_an_operator_at_once() {
    let policy = scheduler();
    let (j, obs) = at_force_release(false);
    let (d, j) = poll(&j, &obs, t(0), &policy, count(3, false));
    let Decision::Fail { class, state, message, .. } = &d else { panic!("{d:?}") };
    assert_eq!((*class, *state), (FailureClass::OwnershipConflict, JobState::FailedManualIntervention));
    assert!(message.contains("3 allocations still attached and forceRelease is false"), "{message}");
    assert_eq!(j.progress.attempt, 1, "asked once, no release notice");
    // None attached: the stage is done without a notice.
    let (j, obs) = at_force_release(false);
    let (d, _) = poll(&j, &obs, t(0), &policy, count(0, false));
    assert!(matches!(d, Decision::Advance { to_stage: Stage::Drain, .. }), "{d:?}");
}

#[test]
fn an_unusable_answer_is_retried_and_never_taken_as_zero() {
    let policy = scheduler();
    let (j, obs) = at_force_release(true);
    // The release notice refused: nothing was asked, the next attempt sends it again.
    let (d, j) = poll(&j, &obs, t(0), &policy, unusable("release notice not delivered: answered 500"));
    assert!(matches!(&d, Decision::Wait { reason } if reason.contains("no usable answer") && reason.contains("500")), "{d:?}");
    assert_eq!((j.progress.release_sent, j.progress.failure_class), (false, Some(FailureClass::Transient)));
    // Sent, then a malformed answer: retried.
    let (d, j) = poll(&j, &obs, t(10), &policy, SchedulerAnswer { release_sent_now: true, allocations: Err("malformed".into()) });
    assert!(matches!(d, Decision::Wait { .. }), "{d:?}");
    assert!(j.progress.release_sent);
    // Still nothing usable at the bound: failed_retryable, not done.
    let (d, j) = poll(&j, &obs, t(20), &policy, unusable("answered 500 Internal Server Error"));
    assert!(matches!(&d, Decision::Fail { class: FailureClass::Transient, state: JobState::FailedRetryable, .. }), "{d:?}");
    assert_eq!(j.progress.stage, Stage::ForceRelease);
    // An error then zero: done.
    let (j, obs) = at_force_release(true);
    let (_, j) = poll(&j, &obs, t(0), &policy, SchedulerAnswer { release_sent_now: true, allocations: Err("answered 500".into()) });
    let (d, _) = poll(&j, &obs, t(10), &policy, count(0, false));
    assert!(matches!(d, Decision::Advance { to_stage: Stage::Drain, .. }), "{d:?}");
}

#[test]
fn without_a_scheduler_force_release_fails_closed_and_a_plain_decommission_cannot_know() {
    let policy = Policy::default();
    assert!(!policy.scheduler_webhook);
    let (j, obs) = at_force_release(true);
    let d = decide(&j, &obs, t(0), &policy);
    let Decision::Fail { class, state, message, .. } = &d else { panic!("{d:?}") };
    assert_eq!((*class, *state), (FailureClass::Configuration, JobState::FailedManualIntervention));
    assert!(message.contains("jobs.scheduler_webhook_url"), "{message}");
    let (j, obs) = at_force_release(false);
    let d = decide(&j, &obs, t(0), &policy);
    assert!(matches!(&d, Decision::Advance { to_stage: Stage::Drain, reason, .. } if reason.contains("cannot know")), "{d:?}");
}

fn at_stage(kind: JobKind, stage: Stage, attempt: u32, task_id: Option<&str>) -> JobView {
    let index = stages(&kind).iter().position(|s| *s == stage).expect("stage in plan");
    let mut j = job(kind);
    j.state = JobState::Running;
    j.progress.stage_index = index;
    j.progress.stage = stage;
    j.progress.attempt = attempt;
    j.progress.task_id = task_id.map(str::to_owned);
    j
}

#[test]
fn failed_validation_quarantines_and_needs_an_operator() {
    let j = at_stage(JobKind::SoftReset { storage: StorageChoice::All }, Stage::ValidateClean, 1, Some("v1"));
    let mut obs = observed();
    obs.schedulable = false;
    let mut tk = task("v1", TaskState::Completed, None, 1, Some(TaskOutcome::Failed));
    tk.detail = "tenant_mounts: /mnt/weka/t1".into();
    obs.task = Some(tk);
    let d = decide(&j, &obs, t(0), &Policy::default());
    let Decision::Fail { class, state, message, quarantine, host_to } = &d else { panic!("{d:?}") };
    assert_eq!(*class, FailureClass::ValidationFailed);
    assert_eq!(*state, JobState::FailedManualIntervention);
    assert!(*quarantine);
    assert_eq!(*host_to, Some(HostLifecycle::Quarantined));
    assert!(message.contains("/mnt/weka/t1"), "{message}");
    let (s, p) = apply(&j, &d, t(0), None);
    assert_eq!(s, JobState::FailedManualIntervention);
    assert_eq!(p.failure_class, Some(FailureClass::ValidationFailed));
    assert!(JobState::Running.can_transition_to(s));
}

#[test]
fn transient_task_failure_is_retried_up_to_the_bound() {
    let policy = Policy::default();
    let kind = JobKind::StorageCleanup { scope: drover_proto::task::StorageScope::Local };
    // A step error: re-issued, superseding the failed task, while attempts remain.
    let j = at_stage(kind.clone(), Stage::CleanupStorage, 1, Some("c1"));
    let mut obs = observed();
    obs.task = Some(task("c1", TaskState::Completed, None, 1, Some(TaskOutcome::Failed)));
    let d = decide(&j, &obs, t(0), &policy);
    let Decision::IssueTask { attempt: 2, supersedes: Some(prior), .. } = &d else { panic!("{d:?}") };
    assert_eq!(prior, "c1");
    // At the bound: failed_retryable, with the class.
    let j3 = at_stage(kind.clone(), Stage::CleanupStorage, 3, Some("c3"));
    obs.task = Some(task("c3", TaskState::Completed, None, 1, Some(TaskOutcome::Failed)));
    let d = decide(&j3, &obs, t(0), &policy);
    assert!(matches!(d, Decision::Fail { class: FailureClass::TaskFailed, state: JobState::FailedRetryable, .. }), "{d:?}");
    // A lapsed lease: the same task is leasable again (no duplicate) until the bound.
    let j = at_stage(kind.clone(), Stage::CleanupStorage, 1, Some("c1"));
    obs.task = Some(task("c1", TaskState::Leased, Some(t(-10)), 1, None));
    let d = decide(&j, &obs, t(0), &policy);
    assert!(matches!(&d, Decision::Wait { reason } if reason.contains("lost its lease")), "{d:?}");
    obs.task = Some(task("c1", TaskState::Leased, Some(t(-10)), 3, None));
    let d = decide(&j, &obs, t(0), &policy);
    assert!(matches!(d, Decision::Fail { class: FailureClass::Transient, state: JobState::FailedRetryable, .. }), "{d:?}");
    // A lost record: re-issued.
    obs.task = None;
    let d = decide(&j, &obs, t(0), &policy);
    assert!(matches!(d, Decision::IssueTask { attempt: 2, .. }), "{d:?}");
}

#[test]
fn refused_task_needs_an_operator() {
    let j = at_stage(JobKind::SoftReset { storage: StorageChoice::None }, Stage::Drain, 1, Some("d1"));
    let mut obs = observed();
    obs.schedulable = false;
    obs.task = Some(task("d1", TaskState::Completed, None, 1, Some(TaskOutcome::Refused)));
    let d = decide(&j, &obs, t(0), &Policy::default());
    assert!(matches!(d, Decision::Fail { class: FailureClass::Refused, state: JobState::FailedManualIntervention, .. }), "{d:?}");
}

#[test]
fn failed_uninstall_returns_the_host_to_retired() {
    let kind = JobKind::FullDecommission { storage: None, force_release: true, maas: Default::default() };
    let j = at_stage(kind, Stage::Uninstall, 3, Some("u3"));
    let mut obs = observed();
    obs.schedulable = false;
    obs.lifecycle = HostLifecycle::Removing;
    obs.task = Some(task("u3", TaskState::Completed, None, 1, Some(TaskOutcome::Failed)));
    let d = decide(&j, &obs, t(0), &Policy::default());
    assert!(matches!(d, Decision::Fail { host_to: Some(HostLifecycle::Retired), state: JobState::FailedRetryable, .. }), "{d:?}");
}

#[test]
fn retire_enters_draining_then_cordons_drains_and_retires() {
    use Stage::*;
    for from in [HostLifecycle::Active, HostLifecycle::Offline, HostLifecycle::Quarantined, HostLifecycle::Draining] {
        let mut obs = observed();
        obs.lifecycle = from;
        let (done, issued) = drive(job(JobKind::Retire {}), obs);
        assert_eq!(issued, vec![Cordon, Drain, Retire], "from {from}");
        assert_eq!(done.state, JobState::Completed);
    }
    // Starting puts the host into draining before any stage runs; a host already there stays.
    let j = job(JobKind::Retire {});
    let d = decide(&j, &observed(), t(0), &Policy::default());
    assert!(matches!(d, Decision::Start { .. }), "{d:?}");
    let (s, p) = apply(&j, &d, t(0), None);
    assert_eq!(lifecycle_guard(&j.kind, p.stage, HostLifecycle::Active, j.state, s), Some(HostLifecycle::Draining));
    assert_eq!(lifecycle_guard(&j.kind, p.stage, HostLifecycle::Draining, j.state, s), None);
}

#[test]
fn remove_enters_removing_then_uninstalls_and_deletes() {
    use Stage::*;
    // The start moved the host into removing: the remove stage is already achieved.
    let mut obs = observed();
    obs.lifecycle = HostLifecycle::Retired;
    let (done, issued) = drive(job(JobKind::Remove {}), obs.clone());
    assert_eq!(issued, vec![Uninstall, Delete]);
    assert_eq!(done.state, JobState::Completed);
    let succeeded: Vec<Stage> = done.progress.history.iter().filter(|e| e.status == StageStatus::Succeeded).map(|e| e.stage).collect();
    assert_eq!(succeeded, vec![Remove, Uninstall, Delete]);
    // The uninstall is the agent's task: the delete waits for its result.
    let j = at_stage(JobKind::Remove {}, Uninstall, 1, Some("u1"));
    obs.lifecycle = HostLifecycle::Removing;
    obs.task = Some(task("u1", TaskState::Leased, Some(t(60)), 1, None));
    assert!(matches!(decide(&j, &obs, t(0), &Policy::default()), Decision::Wait { .. }));
    obs.task = Some(task("u1", TaskState::Completed, None, 1, Some(TaskOutcome::Succeeded)));
    assert!(matches!(decide(&j, &obs, t(0), &Policy::default()), Decision::Advance { to_stage: Delete, .. }));
    // A host that is not removing is not deleted.
    let j = at_stage(JobKind::Remove {}, Delete, 0, None);
    obs.lifecycle = HostLifecycle::Retired;
    obs.task = None;
    let d = decide(&j, &obs, t(0), &Policy::default());
    assert!(matches!(d, Decision::Fail { class: FailureClass::Ambiguous, .. }), "{d:?}");
}

#[test]
fn a_machine_released_in_maas_has_no_agent_left_to_uninstall() {
    // The drift reconciler released a retired host's machine (§6.4): removing it later must
    // not wait for an uninstall task no agent can run.
    let mut obs = observed();
    obs.lifecycle = HostLifecycle::Removing;
    obs.maas = MaasObs { bound: true, released: true, child: None };
    let j = at_stage(JobKind::Remove {}, Stage::Uninstall, 0, None);
    let d = decide(&j, &obs, t(0), &Policy::default());
    assert!(
        matches!(&d, Decision::Advance { from: Stage::Uninstall, to_stage: Stage::Delete, reason, .. } if reason.contains("released")),
        "{d:?}"
    );
    obs.maas.released = false;
    assert!(matches!(decide(&j, &obs, t(0), &Policy::default()), Decision::IssueTask { stage: Stage::Uninstall, .. }));
}

#[test]
fn a_retire_drain_that_keeps_failing_stops_the_job_and_takes_the_host_offline() {
    let mut obs = observed();
    obs.lifecycle = HostLifecycle::Draining;
    obs.schedulable = false;
    obs.task = Some(task("d1", TaskState::Completed, None, 1, Some(TaskOutcome::Failed)));
    // Within the bound: a fresh drain task, the host stays draining.
    let j = at_stage(JobKind::Retire {}, Stage::Drain, 1, Some("d1"));
    let d = decide(&j, &obs, t(0), &Policy::default());
    assert!(matches!(d, Decision::IssueTask { stage: Stage::Drain, attempt: 2, .. }), "{d:?}");
    let (s, p) = apply(&j, &d, t(0), Some("d2"));
    assert_eq!(lifecycle_guard(&j.kind, p.stage, obs.lifecycle, j.state, s), None);
    // The bound spent: the job stops for an operator and the host leaves draining (§3.3).
    obs.task = Some(task("d3", TaskState::Completed, None, 1, Some(TaskOutcome::Failed)));
    let j = at_stage(JobKind::Retire {}, Stage::Drain, 3, Some("d3"));
    let d = decide(&j, &obs, t(0), &Policy::default());
    assert!(matches!(d, Decision::Fail { class: FailureClass::TaskFailed, state: JobState::FailedManualIntervention, .. }), "{d:?}");
    let (s, p) = apply(&j, &d, t(0), None);
    assert_eq!(lifecycle_guard(&j.kind, p.stage, obs.lifecycle, j.state, s), Some(HostLifecycle::Offline));
    // An agent that never keeps its lease: the same, failed_retryable.
    obs.task = Some(task("d3", TaskState::Leased, Some(t(-1)), 3, None));
    let d = decide(&j, &obs, t(0), &Policy::default());
    assert!(matches!(d, Decision::Fail { class: FailureClass::Transient, state: JobState::FailedRetryable, .. }), "{d:?}");
    let (s, p) = apply(&j, &d, t(0), None);
    assert_eq!(lifecycle_guard(&j.kind, p.stage, obs.lifecycle, j.state, s), Some(HostLifecycle::Offline));
}

#[test]
fn the_lifecycle_guard_owns_draining_and_removing_for_a_working_job_only() {
    use HostLifecycle as L;
    use JobState as J;
    let full = JobKind::FullDecommission { storage: None, force_release: false, maas: Default::default() };
    let soft = JobKind::SoftReset { storage: StorageChoice::None };
    let guard = |kind: &JobKind, stage, host, from, to| lifecycle_guard(kind, stage, host, from, to);
    // Resumed after a failed drain (the host offline, or active again after a check-in).
    for host in [L::Offline, L::Active, L::Quarantined] {
        for from in [J::FailedRetryable, J::FailedManualIntervention, J::Pending] {
            assert_eq!(guard(&JobKind::Retire {}, Stage::Drain, host, from, J::Running), Some(L::Draining), "{host} {from}");
        }
    }
    // Resumed after a failed uninstall (back to retired): removing again — a full
    // decommission's too, from its uninstall on, and not before.
    assert_eq!(guard(&JobKind::Remove {}, Stage::Uninstall, L::Retired, J::FailedRetryable, J::Running), Some(L::Removing));
    assert_eq!(guard(&full, Stage::Uninstall, L::Retired, J::FailedRetryable, J::Running), Some(L::Removing));
    assert_eq!(guard(&full, Stage::Delete, L::Retired, J::FailedRetryable, J::Running), Some(L::Removing));
    assert_eq!(guard(&full, Stage::Drain, L::Active, J::FailedRetryable, J::Running), None);
    assert_eq!(guard(&soft, Stage::Cordon, L::Active, J::Pending, J::Running), None);
    // Never an illegal move: a reactivated host is not pulled back into removing.
    assert_eq!(guard(&JobKind::Remove {}, Stage::Uninstall, L::Active, J::FailedRetryable, J::Running), None);
    assert_eq!(guard(&JobKind::Retire {}, Stage::Drain, L::Retired, J::FailedRetryable, J::Running), None);
    // A job that stops never leaves its host draining or removing.
    for to in [J::FailedRetryable, J::FailedManualIntervention, J::Cancelled, J::Reconciled] {
        assert_eq!(guard(&JobKind::Retire {}, Stage::Drain, L::Draining, J::Running, to), Some(L::Offline), "{to}");
        assert_eq!(guard(&JobKind::Remove {}, Stage::Uninstall, L::Removing, J::Running, to), Some(L::Retired), "{to}");
        assert_eq!(guard(&full, Stage::MaasWorkflow, L::Removing, J::Running, to), Some(L::Retired), "{to}");
        assert_eq!(guard(&soft, Stage::Drain, L::Active, J::Running, to), None, "{to}");
    }
    // Still owned: compensating waits for the task, pending is about to start; a step that
    // does not change the job's state moves nothing.
    assert_eq!(guard(&JobKind::Retire {}, Stage::Drain, L::Draining, J::Running, J::Compensating), None);
    assert_eq!(guard(&JobKind::Retire {}, Stage::Drain, L::Offline, J::Compensating, J::Pending), None);
    assert_eq!(guard(&JobKind::Retire {}, Stage::Drain, L::Offline, J::Running, J::Running), None);
}

#[test]
fn job_waits_for_an_in_flight_activation() {
    let j = job(JobKind::SoftReset { storage: StorageChoice::None });
    for r in [HostRolloutState::Activating, HostRolloutState::Soaking] {
        let mut obs = observed();
        obs.rollout = Some(r);
        let d = decide(&j, &obs, t(0), &Policy::default());
        assert_eq!(d, Decision::Wait { reason: "waits for an in-flight activation to settle".into() });
    }
    let mut obs = observed();
    obs.rollout = Some(HostRolloutState::Converged);
    assert!(matches!(decide(&j, &obs, t(0), &Policy::default()), Decision::Start { .. }));
}

#[test]
fn a_second_job_on_the_same_host_waits() {
    let j = job(JobKind::StorageCleanup { scope: drover_proto::task::StorageScope::All });
    let mut obs = observed();
    obs.held_by_other_job = Some("job-1".into());
    let d = decide(&j, &obs, t(0), &Policy::default());
    assert!(matches!(&d, Decision::Wait { reason } if reason.contains("job-1")), "{d:?}");
}

#[test]
fn deciding_twice_yields_the_same_decision() {
    let policy = Policy::default();
    let kind = JobKind::Maintenance { activities: vec![], storage: drover_proto::task::StorageScope::All };
    let mut snapshots = vec![(job(kind.clone()), observed())];
    let mut obs = observed();
    obs.schedulable = false;
    for (stage, tk) in [
        (Stage::ScrubGpu, None),
        (Stage::ScrubGpu, Some(task("s1", TaskState::Queued, None, 0, None))),
        (Stage::ScrubGpu, Some(task("s1", TaskState::Leased, Some(t(60)), 1, None))),
        (Stage::ScrubGpu, Some(task("s1", TaskState::Completed, None, 1, Some(TaskOutcome::Failed)))),
        (Stage::ValidateClean, Some(task("s1", TaskState::Completed, None, 1, Some(TaskOutcome::Failed)))),
    ] {
        let j = at_stage(kind.clone(), stage, u32::from(tk.is_some()), tk.as_ref().map(|x| x.task_id.as_str()));
        snapshots.push((j, Observed { task: tk, ..obs.clone() }));
    }
    for (j, o) in &snapshots {
        let first = decide(j, o, t(0), &policy);
        assert_eq!(first, decide(j, o, t(0), &policy));
        assert!(!first.reason().is_empty(), "{first:?}");
        assert_eq!(apply(j, &first, t(0), Some("x")), apply(j, &first, t(0), Some("x")));
    }
}

#[test]
fn terminal_and_failed_jobs_wait_with_a_reason() {
    for s in [JobState::Completed, JobState::Cancelled, JobState::Reconciled, JobState::FailedRetryable] {
        let mut j = job(JobKind::SoftReset { storage: StorageChoice::None });
        j.state = s;
        let d = decide(&j, &observed(), t(0), &Policy::default());
        assert!(matches!(&d, Decision::Wait { reason } if reason.contains(s.as_str())), "{d:?}");
    }
}

#[test]
fn compensation_waits_for_a_live_task_then_ends_where_it_was_asked() {
    let mut j = at_stage(JobKind::SoftReset { storage: StorageChoice::None }, Stage::Drain, 1, Some("d1"));
    j.state = JobState::Compensating;
    j.progress.after_compensation = Some(JobState::Pending);
    let mut obs = observed();
    obs.task = Some(task("d1", TaskState::Leased, Some(t(30)), 1, None));
    assert!(matches!(decide(&j, &obs, t(0), &Policy::default()), Decision::Wait { .. }));
    obs.task = Some(task("d1", TaskState::Completed, None, 1, Some(TaskOutcome::Succeeded)));
    let d = decide(&j, &obs, t(0), &Policy::default());
    assert!(matches!(d, Decision::FinishCompensation { to: JobState::Pending, .. }), "{d:?}");
    let (s, p) = apply(&j, &d, t(0), None);
    assert_eq!(s, JobState::Pending);
    assert_eq!((p.stage_index, p.stage, p.attempt, p.task_id.clone()), (0, Stage::Cordon, 0, None));
    assert!(matches!(p.history.last(), Some(StageEvent { status: StageStatus::Compensated, .. })));
}

#[test]
fn maas_workflow_starts_its_child_then_follows_it_and_skips_an_unbound_host() {
    use crate::jobs::model::MaasRelease;
    use crate::jobs::plan::{ChildObs, MaasObs};
    let policy = Policy::default();
    let full = JobKind::FullDecommission { storage: None, force_release: false, maas: MaasRelease::default() };
    let j = at_stage(full, Stage::MaasWorkflow, 0, None);
    // Not bound: a full decommission has nothing to do in MAAS.
    assert!(matches!(decide(&j, &observed(), t(0), &policy), Decision::Advance { to_stage: Stage::Delete, .. }));
    let reimage = JobKind::Reimage { storage: None, maas: MaasRelease::default(), profile: None };
    let j = at_stage(reimage, Stage::MaasWorkflow, 0, None);
    assert!(matches!(
        decide(&j, &observed(), t(0), &policy),
        Decision::Fail { class: FailureClass::Configuration, state: JobState::FailedManualIntervention, .. }
    ));
    let bound = Observed { maas: MaasObs { bound: true, released: false, child: None }, ..observed() };
    assert!(matches!(decide(&j, &bound, t(0), &policy), Decision::RunLocal { stage: Stage::MaasWorkflow, .. }));
    let child = |state| Observed {
        maas: MaasObs {
            bound: true,
            released: false,
            child: Some(ChildObs { job_id: "c1".into(), state, stage: "deploy".into(), message: "deploying".into() }),
        },
        ..observed()
    };
    assert!(matches!(decide(&j, &child(JobState::Running), t(0), &policy), Decision::Wait { .. }));
    match decide(&j, &child(JobState::FailedManualIntervention), t(0), &policy) {
        Decision::Wait { reason } => assert!(reason.contains("c1") && reason.contains("failed_manual_intervention"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(decide(&j, &child(JobState::Completed), t(0), &policy), Decision::Advance { to_stage: Stage::Uncordon, .. }));
    // Deciding the same snapshot again yields the same decision.
    assert_eq!(decide(&j, &child(JobState::Running), t(0), &policy), decide(&j, &child(JobState::Running), t(0), &policy));
}
