//! The job executor: one tick reads every unfinished job (but the MAAS workflows, which the
//! MAAS executor drives), paces the pending ones against the disruption budgets, and drives
//! each job through its decisions ([`decide`]) until it has to wait — for a task result, an
//! in-flight activation, a budget slot or an operator.
//!
//! Every decision is persisted as one store transaction ([`Store::apply_job_step`]): the
//! job's new state and progress (compare-and-set on what was read), the task it queues, the
//! host changes of a local stage or of §3.3's guardrail ([`lifecycle_guard`]: a retire or
//! remove that starts puts its host into `draining` / `removing`, a job that stops never
//! leaves it there), and a `job.stage` event. A coordinator killed at any point
//! restarts from what is stored: a step either happened whole or not at all, a queued task is
//! found again by its id in the progress, so a restarted executor never issues a stage's task
//! twice. Jobs tick after the rollout executor, under the same lock.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use drover_proto::names::RolloutId;

use drover_proto::states::{HostRolloutState, JobState};
use drover_proto::time::Time;

use serde_json::json;
use uuid::Uuid;

use super::local::{self, AllocationsQuery, ReleaseNotice};
use super::model::{FailureClass, JobKind, Stage};
use super::pacing;
use super::plan::{Decision, JobView, Observed, SchedulerAnswer, TaskObs, after_scheduler_answer, apply, decide, lifecycle_guard};
use crate::api::tasks::SealTaskError;
use crate::app::AppState;
use crate::store::{self, Host, HostOp, Job, JobFilter, JobStep, NewEvent, PlanSnapshot, Store, StoreError, TaskRecord};

/// Most decisions one job makes in one tick (local stages take effect at once, so a job can
/// cross several stages in a tick; the bound keeps one tick short).
const MAX_STEPS_PER_TICK: usize = 16;

/// Most decisions persisted in one tick across all jobs (under a second of transactions):
/// a request over the whole fleet with no budget to pace it must not hold the executor's
/// lock — and so the rollouts — for many seconds. The rest continues in the next tick, which
/// is asked for at once.
const MAX_STEPS_PER_TICK_ALL: usize = 1000;

/// Why a job tick did not complete.
#[derive(Debug, thiserror::Error)]
pub enum JobExecError {
    /// Reading or writing the store failed.
    #[error("store: {0}")]
    Store(#[from] StoreError),
}

/// What one tick did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobsTick {
    /// Decisions persisted.
    pub steps: usize,
    /// Jobs that wait, with why.
    pub waiting: BTreeMap<Uuid, String>,
    /// Jobs whose step failed this tick (the next tick tries again), with why.
    pub errors: BTreeMap<Uuid, String>,
    /// The tick stopped at [`MAX_STEPS_PER_TICK_ALL`]; another was asked for.
    pub capped: bool,
}

/// The fleet read model is the engine's one, built from the one verified-release cache.
pub use crate::latest_release::FleetView;

/// Runs one job tick.
pub async fn tick(app: &Arc<AppState>) -> Result<JobsTick, JobExecError> {
    // One read for the whole tick: the jobs, the rollout snapshot, and each job's host and
    // current task. A job re-reads only after it has acted (most jobs, most ticks, wait).
    let (jobs, snapshot, mut seen) = store::blocking(app.store.clone(), |s| {
        // The MAAS workflows (onboardings, and the MAAS halves of reimages and decommissions)
        // are jobs too, driven by their own executor (`crate::onboarding`); every other kind —
        // the lifecycle verbs' `retire` and `remove` included — is driven here.
        let mut jobs = s.list_jobs(&JobFilter { unfinished: true, ..Default::default() })?;
        jobs.retain(|j| crate::maasflow::taxonomy::Workflow::of_kind(&j.job.kind).is_none());
        if jobs.is_empty() {
            return Ok((jobs, PlanSnapshot::default(), BTreeMap::new()));
        }
        let mut seen = BTreeMap::new();
        for j in &jobs {
            if let Some(h) = j.job.host_id {
                seen.insert(j.job.job_id, read_host_and_task(s, h, &j.progress)?);
            }
        }
        Ok((jobs, s.plan_snapshot()?, seen))
    })
    .await?;
    let mut out = JobsTick::default();
    if jobs.is_empty() {
        return Ok(out);
    }
    let fleet = FleetView::load(app).await;
    let mut rollouts = RolloutView::new(&snapshot);
    let names: BTreeMap<Uuid, String> = snapshot.hosts.iter().map(|h| (h.id, h.hostname.clone())).collect();

    // Pacing: a pending job starts only while every budget listing its host has room.
    let mut disrupted: BTreeSet<String> = rollouts.in_flight_in.keys().cloned().collect();
    disrupted.extend(snapshot.held.keys().chain(&snapshot.lent).filter_map(|id| names.get(id).cloned()));
    let mut candidates = Vec::new();
    // A pending job whose host is gone (deleted since) disrupts nothing: it is decided on at
    // once, and the decision names the problem.
    let mut unpaced = BTreeSet::new();
    for j in &jobs {
        let Some(host) = j.job.host_id.and_then(|h| names.get(&h)) else {
            unpaced.insert(j.job.job_id);
            continue;
        };
        match j.state {
            JobState::Pending => candidates.push((j.job.job_id, host.clone())),
            // During `activate` the job does not hold the host for the planner, but the host
            // is still out of service: the pacer counts it.
            _ => {
                disrupted.insert(host.clone());
            }
        }
    }
    let admission = pacing::admit(&candidates, &disrupted, &fleet.budgets);
    let admitted: BTreeSet<Uuid> = admission.admitted.iter().copied().chain(unpaced).collect();
    for (id, why) in admission.waiting {
        out.waiting.insert(id, format!("waits for a disruption-budget slot: {why}"));
    }

    // One owner at a time: the store refuses a second unfinished job on a host, so another
    // started job on the same host means something moved out of band.
    let mut started_on: BTreeMap<Uuid, Vec<String>> = BTreeMap::new();
    for j in jobs.iter().filter(|j| j.state != JobState::Pending) {
        if let Some(h) = j.job.host_id {
            started_on.entry(h).or_default().push(format!("{} ({}, {})", j.job.job_id, j.job.kind, j.state));
        }
    }
    for j in jobs {
        let id = j.job.job_id;
        if out.steps >= MAX_STEPS_PER_TICK_ALL {
            out.waiting.insert(id, format!("this tick made {} decisions; continues in the next", out.steps));
            out.capped = true;
            continue;
        }
        let other =
            j.job.host_id.and_then(|h| started_on.get(&h)).and_then(|v| v.iter().find(|o| !o.starts_with(&id.to_string())).cloned());
        if j.state == JobState::Pending && !admitted.contains(&id) {
            continue;
        }
        let first = seen.remove(&id);
        match drive(app, j, first, other, &fleet, &mut rollouts, &mut out.steps).await {
            Ok(Some(why)) => {
                out.waiting.insert(id, why);
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(job_id = %id, error = %e, "job step failed; the next tick tries again");
                out.errors.insert(id, e.to_string());
            }
        }
    }
    if out.capped {
        app.executor.poke();
    }
    Ok(out)
}

/// Host states in the rollouts of one snapshot, kept current as jobs re-dispatch hosts.
struct RolloutView {
    /// (rollout, hostname) → state.
    states: BTreeMap<(RolloutId, String), HostRolloutState>,
    /// hostname → its state where it is in flight (Activating or Soaking).
    in_flight_in: BTreeMap<String, HostRolloutState>,
}

/// Hostnames in flight in any rollout (activating or soaking): out of service, counted
/// against every budget that selects them.
pub fn in_flight_hosts(s: &PlanSnapshot) -> BTreeSet<String> {
    RolloutView::new(s).in_flight_in.into_keys().collect()
}

impl RolloutView {
    fn new(s: &PlanSnapshot) -> RolloutView {
        let mut v = RolloutView { states: BTreeMap::new(), in_flight_in: BTreeMap::new() };
        for r in &s.rollouts {
            for h in &r.hosts {
                v.states.insert((h.rollout_id.clone(), h.hostname.clone()), h.state);
                if matches!(h.state, HostRolloutState::Activating | HostRolloutState::Soaking) {
                    v.in_flight_in.insert(h.hostname.clone(), h.state);
                }
            }
        }
        v
    }

    /// The host's state that matters to a job: in flight anywhere, else in its channel's
    /// current rollout.
    fn state_of(&self, hostname: &str, current: Option<&RolloutId>) -> Option<HostRolloutState> {
        if let Some(s) = self.in_flight_in.get(hostname) {
            return Some(*s);
        }
        current.and_then(|r| self.states.get(&(r.clone(), hostname.to_owned())).copied())
    }

    fn redispatched(&mut self, rollout: &RolloutId, hostname: &str) {
        if let Some(s) = self.states.get_mut(&(rollout.clone(), hostname.to_owned()))
            && !matches!(s, HostRolloutState::Activating | HostRolloutState::Soaking)
        {
            *s = HostRolloutState::Skipped;
        }
    }
}

/// What the executor observes about `host` for a job.
fn observe(host: &Host, task: Option<TaskObs>, fleet: &FleetView, rollouts: &RolloutView) -> Observed {
    let target = fleet.targets.get(&host.hostname);
    let current = target.and_then(|(r, _)| r.as_ref());
    let running = host.last_checkin.as_ref().and_then(|c| c.current_generation.as_deref());
    // No target (the host is in no release) or no activation backend (a host enrolled by
    // curl on a distribution without a system profile): there is nothing to re-apply.
    let on_desired_generation = match (target, running) {
        (Some((_, closure)), Some(gen_now)) => closure == gen_now,
        _ => true,
    };
    Observed {
        lifecycle: host.state,
        schedulable: host.schedulable,
        rollout: rollouts.state_of(&host.hostname, current),
        on_desired_generation,
        held_by_other_job: None,
        task,
        maas: Default::default(),
    }
}

/// A job's host and the record of the task its progress names.
fn read_host_and_task(s: &dyn Store, host_id: Uuid, progress: &serde_json::Value) -> Result<(Host, Option<TaskRecord>), StoreError> {
    let host = s.get_host(host_id)?.ok_or_else(|| StoreError::not_found("host", host_id))?;
    let task_id = progress.get("taskId").and_then(serde_json::Value::as_str).and_then(|t| Uuid::parse_str(t).ok());
    let task = task_id.map(|t| s.get_task(t)).transpose()?.flatten();
    Ok((host, task))
}

/// Drives one job until it waits; returns the wait reason (`None`: it finished).
async fn drive(
    app: &Arc<AppState>,
    mut job: Job,
    mut first: Option<(Host, Option<TaskRecord>)>,
    other: Option<String>,
    fleet: &FleetView,
    rollouts: &mut RolloutView,
    steps: &mut usize,
) -> Result<Option<String>, JobExecError> {
    let Some(host_id) = job.job.host_id else { return Ok(Some("job names no host".into())) };
    for _ in 0..MAX_STEPS_PER_TICK {
        if job.state.is_terminal() {
            return Ok(None);
        }
        let view = match JobView::from_job(&job) {
            Ok(v) => v,
            Err(e) => return Ok(Some(format!("stored job does not parse ({e}); an operator must cancel it"))),
        };
        let (host, task) = match first.take() {
            Some(read) => read,
            None => {
                let progress = job.progress.clone();
                store::blocking(app.store.clone(), move |s| read_host_and_task(s, host_id, &progress)).await?
            }
        };
        let mut obs = observe(&host, task.as_ref().map(TaskObs::from_record), fleet, rollouts);
        obs.held_by_other_job = other.clone();
        if matches!(view.progress.stage, Stage::MaasWorkflow | Stage::Uninstall) {
            let child = view.progress.child_job_id.clone();
            obs.maas = store::blocking(app.store.clone(), move |s| super::maas_child::observe(s, host_id, child.as_deref())).await?;
        }
        let creds = if view.progress.stage == Stage::HwSyncReseed {
            match local::maas_creds(app.config.jobs.maas_creds_dir.as_deref(), &host.hostname) {
                Ok(c) => c,
                Err(e) => return Ok(Some(e.to_string())),
            }
        } else {
            None
        };
        let policy = local::policy(&app.config.jobs, creds);
        let now = app.clock.now();
        let decision = decide(&view, &obs, now, &policy);
        if let Decision::Wait { reason } = decision {
            return Ok(Some(reason));
        }
        job = execute(app, &job, &view, &host, decision, fleet, rollouts).await?;
        *steps += 1;
    }
    Ok(Some("step limit for this tick reached; continues next tick".into()))
}

/// Carries out one decision and persists it in one transaction; returns the job after.
async fn execute(
    app: &Arc<AppState>,
    job: &Job,
    view: &JobView,
    host: &Host,
    decision: Decision,
    fleet: &FleetView,
    rollouts: &mut RolloutView,
) -> Result<Job, JobExecError> {
    let now = app.clock.now();
    let job_id = job.job.job_id;
    let stage = view.progress.stage;
    let mut task_row = None;
    let mut sealed_task_id = None;
    let decision = match decision {
        Decision::IssueTask { ref kind, .. } => {
            match crate::api::tasks::seal(app, host.id, Some(job_id), kind.clone(), app.config.jobs.task_ttl_secs).await {
                Ok((task, row)) => {
                    task_row = Some(row);
                    sealed_task_id = Some(task.task_id);
                    decision
                }
                // No retry can mend these (the host must enroll again, or the task breaks the
                // schema): the job stops with the reason instead of trying every tick.
                Err(e @ (SealTaskError::NoSealKey { .. } | SealTaskError::Invalid { .. })) => Decision::Fail {
                    class: FailureClass::Configuration,
                    state: JobState::FailedManualIntervention,
                    message: format!("stage {stage}: {e}"),
                    quarantine: false,
                    host_to: None,
                },
                Err(e) => {
                    tracing::error!(error = %e, %job_id, "cannot sign a job's task");
                    return Ok(job.clone());
                }
            }
        }
        d => d,
    };
    let mut host_ops = Vec::new();
    let mut events = Vec::new();
    let mut why = step_message(job_id, view.kind.name(), &stage.to_string(), decision.reason());
    let mut data = json!({});
    let (mut state, mut progress) = apply(view, &decision, now, sealed_task_id.as_deref());
    match &decision {
        Decision::RunLocal { stage: Stage::ForceRelease, .. } => {
            // The scheduler owns the allocations: with forceRelease it is told to end them
            // (once per run of the stage), then asked how many remain; the plan decides on
            // the answer, persisted with the attempt in this step's one transaction. Sent but
            // not persisted (a crash, a conflict): the next attempt sends it again — the
            // scheduler treats a repeated notice for the same job as one.
            let after = JobView { state, progress, kind: view.kind.clone() };
            let config = &app.config.jobs;
            let mut release_sent_now = false;
            let mut refused = None;
            if matches!(view.kind, JobKind::FullDecommission { force_release: true, .. }) && !after.progress.release_sent {
                let notice = ReleaseNotice {
                    event: "host.force_release",
                    host_id: host.id.to_string(),
                    hostname: host.hostname.clone(),
                    job_id: job_id.to_string(),
                    reason: decision.reason().to_owned(),
                };
                match local::notify_scheduler(config, &notice).await {
                    Ok(()) => {
                        release_sent_now = true;
                        events.push(event(
                            now,
                            "host.force_release",
                            host.id,
                            job_id,
                            "release notice sent to the scheduler",
                            json!(notice),
                        ));
                    }
                    Err(e) => refused = Some(format!("release notice not delivered: {e}")),
                }
            }
            let allocations = match refused {
                Some(e) => Err(e),
                None => {
                    let query = AllocationsQuery {
                        event: "host.allocations_query",
                        host_id: host.id.to_string(),
                        hostname: host.hostname.clone(),
                        job_id: job_id.to_string(),
                    };
                    local::query_allocations(config, &query).await.map_err(|e| e.to_string())
                }
            };
            if let Ok(n) = &allocations {
                data = json!({ "allocations": n });
            }
            let answer = SchedulerAnswer { release_sent_now, allocations };
            let (outcome, s, p) = after_scheduler_answer(&after, &answer, now, &local::policy(config, None));
            (state, progress) = (s, p);
            why = format!("{why}; {}", outcome.reason());
        }
        Decision::RunLocal { stage: Stage::MaasWorkflow, .. } => match super::maas_child::start(app, job_id, host, &view.kind).await {
            Ok(child) => {
                progress.child_job_id = Some(child.to_string());
                why = format!("{why}; MAAS workflow {child}");
                data = json!({ "childJobId": child });
            }
            Err(e) => progress.message = format!("the MAAS workflow could not be started: {e}"),
        },
        Decision::RunLocal { stage: Stage::Delete, .. } => {
            // Certificates first, then the CRL every handshake checks, then the state: a
            // deleted host can never again connect (the lifecycle verb's order).
            if let Err(e) = app.revoke_host(host.id, format!("decommissioned by job {job_id}")).await {
                progress.message = format!("revoking the host's certificates failed: {e}");
                tracing::warn!(error = %e, %job_id, "revocation failed during delete; retried");
            } else {
                host_ops = local::host_ops(Stage::Delete, host.id, &host.hostname, host.state, None, &why);
                if let Err(e) = super::maas_child::forget_binding(app, host.id, job_id).await {
                    tracing::warn!(error = %e, %job_id, "the host's MAAS binding was not removed; retried with the stage");
                    host_ops.clear();
                }
            }
        }
        Decision::RunLocal { stage, .. } => {
            let rollout = fleet.targets.get(&host.hostname).and_then(|(r, _)| r.as_ref());
            host_ops = local::host_ops(*stage, host.id, &host.hostname, host.state, rollout, &why);
            if let (Stage::Activate, Some(r)) = (stage, rollout) {
                rollouts.redispatched(r, &host.hostname);
            }
        }
        Decision::Fail { host_to: Some(to), .. } if host.state != *to && host.state.can_transition_to(*to) => {
            host_ops.push(HostOp::Transition { host_id: host.id, from: host.state, to: *to, reason: why.clone() });
        }
        _ => {}
    }
    // §3.3: a job entering `running` puts its host into the in-progress state it holds, and a
    // job that stops (fails, ends) never leaves it in `draining` / `removing` — in this same
    // transaction. A step that already moves the host (a local stage, a failure naming its
    // host state) has decided for itself.
    if host_ops.is_empty()
        && let Some(to) = lifecycle_guard(&view.kind, progress.stage, host.state, job.state, state)
    {
        host_ops.push(HostOp::Transition { host_id: host.id, from: host.state, to, reason: why.clone() });
    }
    if let Some(domain) = decommission_event(&view.kind, job.state, state) {
        let d =
            json!({ "jobId": job_id, "mode": view.kind.name(), "stage": progress.stage.as_str(), "failureClass": progress.failure_class });
        events.push(event(now, &domain, host.id, job_id, &why, d));
    }
    let kind = decision_name(&decision);
    data["stage"] = json!(stage.as_str());
    data["decision"] = json!(kind);
    data["attempt"] = json!(progress.attempt);
    data["state"] = json!(state.as_str());
    events.push(event(now, "job.stage", host.id, job_id, &why, data));
    let notify = task_row.is_some();
    let step = JobStep {
        job_id,
        expected_state: job.state,
        expected_progress: job.progress.clone(),
        new_state: state,
        new_progress: progress.to_value(),
        reason: why.clone(),
        task: task_row,
        requeue_task: None,
        host_ops,
        events,
        audits: Vec::new(),
        at: now,
    };
    let after = store::blocking(app.store.clone(), move |s| s.apply_job_step(&step)).await?;
    tracing::info!(%job_id, host = %host.hostname, decision = kind, stage = %stage, state = %after.state, reason = decision.reason(), "job step");
    if notify {
        app.hub.notify(host.id);
    }
    if matches!(decision, Decision::RunLocal { .. } | Decision::Complete { .. } | Decision::Fail { .. }) {
        // A host leaving or re-entering service, or a job releasing it, changes what a
        // rollout may do.
        app.executor.poke();
    }
    Ok(after)
}

/// The domain event (§8.0) of a decommission job's move (soft reset, storage cleanup, full
/// decommission, reimage: the modes of §5.1), if any: `node.decommission.started|completed|
/// failed|manual_intervention_required|cancelled`. Maintenance and the lifecycle verbs' own
/// `retire` / `remove` jobs are no decommission mode: their trail is their `job.stage` and
/// `host.transition` events.
pub fn decommission_event(kind: &JobKind, from: JobState, to: JobState) -> Option<String> {
    if matches!(kind, JobKind::Maintenance { .. } | JobKind::Retire {} | JobKind::Remove {}) {
        return None;
    }
    crate::maasflow::onboard::domain_event(crate::maasflow::taxonomy::Workflow::Decommission, from, to)
}

fn decision_name(d: &Decision) -> &'static str {
    match d {
        Decision::Start { .. } => "start",
        Decision::IssueTask { .. } => "issue_task",
        Decision::RunLocal { .. } => "run_local",
        Decision::Advance { .. } => "advance",
        Decision::Complete { .. } => "complete",
        Decision::Fail { .. } => "fail",
        Decision::FinishCompensation { .. } => "finish_compensation",
        Decision::Wait { .. } => "wait",
    }
}

/// The message of a job step's event: the job, its kind and the decision's reason, naming the
/// stage once — most reasons already say "stage X …", and an event that read "stage drain:
/// stage drain starts" told the operator the same thing twice.
pub fn step_message(job_id: Uuid, kind: &str, stage: &str, reason: &str) -> String {
    let named = format!("stage {stage}");
    let names_it = reason.match_indices(&named).any(|(i, m)| {
        // A whole word: "stage drain" is not named by "stage drain_extra".
        reason[i + m.len()..].chars().next().is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'))
    });
    if names_it { format!("job {job_id} ({kind}): {reason}") } else { format!("job {job_id} ({kind}), {named}: {reason}") }
}

/// A job event.
pub fn event(at: Time, kind: &str, host: Uuid, job: Uuid, message: &str, data: serde_json::Value) -> NewEvent {
    NewEvent { at, kind: kind.into(), host_id: Some(host), rollout_id: None, job_id: Some(job), message: message.into(), data }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_message_names_its_stage_once() {
        let id = Uuid::from_u128(7);
        assert_eq!(step_message(id, "soft_reset", "drain", "stage drain starts"), format!("job {id} (soft_reset): stage drain starts"));
        assert_eq!(
            step_message(id, "soft_reset", "drain", "host was deleted out of band during stage drain"),
            format!("job {id} (soft_reset): host was deleted out of band during stage drain")
        );
        assert_eq!(
            step_message(id, "soft_reset", "drain", "task succeeded"),
            format!("job {id} (soft_reset), stage drain: task succeeded")
        );
        assert_eq!(
            step_message(id, "full_decommission", "remove", "stage remove_binding starts"),
            format!("job {id} (full_decommission), stage remove: stage remove_binding starts"),
            "another stage's name is not this one's"
        );
    }
}
