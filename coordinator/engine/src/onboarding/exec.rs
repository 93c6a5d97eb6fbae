//! The onboarding executor: each tick reads every unfinished onboarding, admits pending ones
//! under their site's concurrency (the profile's `batch_max_parallel`), and drives each
//! running one — read MAAS, decide ([`crate::maasflow::stages`]), act, persist — until it has
//! to wait. Every decision is one store transaction (the job's state and read model,
//! compare-and-set on what was read, with its stage and domain events), so a coordinator
//! killed at any point resumes from what is stored, and since every stage reads MAAS before
//! it acts, the step it was in the middle of is not repeated blindly.

use std::collections::BTreeMap;
use std::sync::Arc;

use drover_maas::{Machine, NodeStatus, ReleaseOptions};
use drover_proto::states::{HostLifecycle, JobState};
use drover_proto::task::{HwSyncReseed, MaasToken, MachineToken, Secret, TaskKind};
use serde_json::json;
use uuid::Uuid;

use super::perform;
use super::site::{self, Failure, SiteCtx, maas_failure};
use crate::app::AppState;
use crate::maasflow::discovery::Wanted;
use crate::maasflow::inspect::snippet;
use crate::maasflow::onboard::{
    Diagnostics, EventStatus, FailureOutcome, OnboardProgress, OnboardingRequest, PendingCompensation, SNIPPET_MAX, domain_event,
    note_failure, on_failure, timed_out,
};
use crate::maasflow::stages::{self, MaasAct, Reseed, RoceWant, StageStep};
use crate::maasflow::taxonomy::{MaasFailureClass, MaasStage as S, Workflow};
use crate::store::{self, Job, JobFilter, JobStep, MaasObservation, NewEvent, NewTask, StoreError, TaskState};

/// Most decisions one onboarding makes in one tick.
const MAX_STEPS: usize = 12;

/// Runs the executor until the process ends, every `maas.poll_ms`.
pub async fn run(app: Arc<AppState>) {
    let mut every = tokio::time::interval(std::time::Duration::from_millis(app.config.maas.poll_ms));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let outcome = tick(&app).await;
        if let Err(e) = &outcome {
            tracing::warn!(error = %e, "onboarding tick failed; the next one tries again");
        }
        app.loops.ran(crate::loops::ONBOARDING, app.clock.now(), outcome.map(|_| ()));
    }
}

/// The request and read model of a stored onboarding.
pub fn parse(job: &Job) -> Result<(OnboardingRequest, OnboardProgress), serde_json::Error> {
    Ok((serde_json::from_value(job.job.input.clone())?, OnboardProgress::from_value(&job.progress)?))
}

/// One tick over every unfinished onboarding; returns how many steps were persisted.
pub async fn tick(app: &Arc<AppState>) -> Result<usize, StoreError> {
    // Only the MAAS workflows' kinds are read: a fleet-wide maintenance request's thousands
    // of unfinished jobs are not this executor's, and are not parsed every poll.
    let jobs = store::blocking(app.store.clone(), |s| {
        let mut jobs = Vec::new();
        for w in Workflow::ALL {
            jobs.extend(s.list_jobs(&JobFilter { kind: Some(w.kind().to_owned()), unfinished: true, ..Default::default() })?);
        }
        Ok(jobs)
    })
    .await?;
    let mut running: BTreeMap<String, u32> = BTreeMap::new();
    for j in &jobs {
        if matches!(j.state, JobState::Running | JobState::Compensating)
            && let Ok((req, _)) = parse(j)
        {
            *running.entry(req.site).or_default() += 1;
        }
    }
    let mut limits: BTreeMap<(String, String), u32> = BTreeMap::new();
    let mut steps = 0;
    let mut pending: Vec<Job> = jobs.iter().filter(|j| j.state == JobState::Pending).cloned().collect();
    pending.sort_by_key(|j| j.job.created_at);
    let mut admitted = Vec::new();
    for j in pending {
        let Ok((req, _)) = parse(&j) else { continue };
        if req.parent_job_id.is_some() || j.job.kind == Workflow::Resync.kind() {
            // The MAAS half of a reimage or decommission: its parent job was paced already; a
            // re-sync deploys nothing and is paced by the reconciler that issues it.
            admitted.push(j);
            continue;
        }
        let key = (req.site.clone(), req.profile.clone());
        let limit = match limits.get(&key) {
            Some(l) => *l,
            None => {
                let l = batch_limit(app, &req).await;
                limits.insert(key, l);
                l
            }
        };
        let n = running.entry(req.site.clone()).or_default();
        if *n < limit {
            *n += 1;
            admitted.push(j);
        }
    }
    let active = jobs.into_iter().filter(|j| j.state != JobState::Pending).chain(admitted);
    for j in active {
        let id = j.job.job_id;
        match drive(app, j).await {
            Ok(n) => steps += n,
            Err(e) if e.kind() == store::ErrorKind::Conflict => {
                tracing::info!(onboarding = %id, error = %e, "onboarding changed under its step (an operator action); next tick");
            }
            Err(e) => tracing::warn!(onboarding = %id, error = %e, "onboarding step failed; the next tick tries again"),
        }
    }
    Ok(steps)
}

/// The site concurrency of a pending onboarding's profile (1 when it cannot be read: the
/// onboarding itself then fails at `load_site` with the reason).
async fn batch_limit(app: &Arc<AppState>, req: &OnboardingRequest) -> u32 {
    let (site, profile) = (req.site.clone(), req.profile.clone());
    let found = store::blocking(app.store.clone(), move |s| {
        let Some(site) = s.get_site_by_name(&site)? else { return Ok(None) };
        Ok(s.list_profiles(site.id)?.into_iter().find(|p| p.name == profile))
    })
    .await;
    match found {
        Ok(Some(p)) => p.policy.batch_max_parallel.max(1),
        _ => 1,
    }
}

/// Persists one step: state and read model (compare-and-set on `job`), an
/// `onboarding.stage` event per new stage event, the domain event of a state change, and a
/// task when one is issued.
async fn save(
    app: &Arc<AppState>,
    job: &Job,
    state: JobState,
    p: &OnboardProgress,
    reason: &str,
    task: Option<NewTask>,
) -> Result<Job, StoreError> {
    let now = app.clock.now();
    let old = OnboardProgress::from_value(&job.progress).unwrap_or_default();
    let fresh = match old.events.last() {
        Some(last) => p.events.iter().rposition(|e| e == last).map_or(p.events.len(), |i| i + 1),
        None => 0,
    };
    let host_id = p.host_id;
    let job_id = job.job.job_id;
    let mut events: Vec<NewEvent> = p.events[fresh.min(p.events.len())..]
        .iter()
        .map(|e| NewEvent {
            at: e.at,
            kind: "onboarding.stage".into(),
            host_id,
            rollout_id: None,
            job_id: Some(job_id),
            message: format!(
                "{} {}: {}",
                e.stage.as_str(),
                serde_json::to_value(e.status).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default(),
                e.details
            ),
            data: json!({ "stage": e.stage, "status": e.status, "attempt": e.attempt }),
        })
        .collect();
    let workflow = Workflow::of_kind(&job.job.kind).unwrap_or_default();
    // The MAAS half of a reimage or decommission reports through its parent job's events.
    let domain = if workflow == Workflow::Onboard { domain_event(workflow, job.state, state) } else { None };
    if let Some(kind) = domain {
        let input: Option<OnboardingRequest> = serde_json::from_value(job.job.input.clone()).ok();
        events.push(NewEvent {
            at: now,
            kind,
            host_id,
            rollout_id: None,
            job_id: Some(job_id),
            message: reason.to_owned(),
            data: json!({
                "onboardingId": job_id,
                "hostname": input.as_ref().map(|i| i.hostname.clone()),
                "site": input.as_ref().map(|i| i.site.clone()),
                "batchId": input.as_ref().and_then(|i| i.batch_id),
                "stage": p.stage,
                "failureClass": p.failure_class,
                "workflow": workflow,
                "parentJobId": input.as_ref().and_then(|i| i.parent_job_id),
            }),
        });
    }
    // A drift repair that gave up is the drift's second alert (§9.1: bounded, then alert): the
    // reconciler does not try again while the drift stays open.
    if workflow == Workflow::Resync && job.state != state && matches!(state, JobState::FailedRetryable | JobState::FailedManualIntervention)
    {
        events.push(NewEvent {
            at: now,
            kind: "maas.drift.repair_failed".into(),
            host_id,
            rollout_id: None,
            job_id: Some(job_id),
            message: format!("hardware-sync re-sync gave up: {reason}"),
            data: json!({ "severity": "critical", "rule": "hw_sync_unhealthy", "stage": p.stage, "failureClass": p.failure_class }),
        });
    }
    let step = JobStep {
        job_id,
        expected_state: job.state,
        expected_progress: job.progress.clone(),
        new_state: state,
        new_progress: p.to_value(),
        reason: reason.to_owned(),
        task,
        requeue_task: None,
        host_ops: Vec::new(),
        events,
        audits: Vec::new(),
        at: now,
    };
    store::blocking(app.store.clone(), move |s| s.apply_job_step(&step)).await
}

/// Drives one onboarding until it waits; returns the steps persisted.
async fn drive(app: &Arc<AppState>, mut job: Job) -> Result<usize, StoreError> {
    let (req, _) = match parse(&job) {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(onboarding = %job.job.job_id, error = %e, "stored onboarding does not parse; an operator must cancel it");
            return Ok(0);
        }
    };
    let workflow = Workflow::of_kind(&job.job.kind).unwrap_or_default();
    let mut ctx: Option<SiteCtx> = None;
    for n in 0..MAX_STEPS {
        let mut p = OnboardProgress::from_value(&job.progress).unwrap_or_default();
        let now = app.clock.now();
        match job.state {
            JobState::Pending => {
                // A reimage or decommission starts from the host's binding.
                p.system_id = p.system_id.or_else(|| req.system_id.clone());
                p.host_id = p.host_id.or(req.host_id);
                p.enter(workflow.stages()[0], now);
                let why = format!("{} of {} started", workflow.kind(), req.hostname);
                job = save(app, &job, JobState::Running, &p, &why, None).await?;
                continue;
            }
            JobState::FailedRetryable | JobState::FailedManualIntervention => {
                return adopt_late_enrollment(app, job, p).await.map(|b| n + usize::from(b));
            }
            JobState::Running | JobState::Compensating => {}
            _ => return Ok(n),
        }
        if ctx.is_none() {
            match site::load(app, &req).await {
                Ok(c) => ctx = Some(c),
                Err(f) => {
                    job = fail(app, &job, p, f, None).await?;
                    continue;
                }
            }
        }
        let Some(c) = ctx.as_ref() else { return Ok(n) };
        if job.state == JobState::Compensating {
            match compensate(app, c, &job, p).await? {
                Some(j) => {
                    job = j;
                    continue;
                }
                None => return Ok(n),
            }
        }
        match step(app, c, &req, workflow, &job, p).await? {
            Some(j) => job = j,
            None => return Ok(n),
        }
    }
    Ok(MAX_STEPS)
}

/// §4.13: an onboarding that stopped while waiting for the agent completes when the agent
/// enrolls late (`reconciled`).
async fn adopt_late_enrollment(app: &Arc<AppState>, job: Job, mut p: OnboardProgress) -> Result<bool, StoreError> {
    if p.stage != S::WaitAgentEnrollment || p.failure_class != Some(MaasFailureClass::AgentEnrollmentFailure) {
        return Ok(false);
    }
    let Some(host_id) = p.host_id else { return Ok(false) };
    let host = store::blocking(app.store.clone(), move |s| s.get_host(host_id)).await?;
    if host.is_none_or(|h| h.state != HostLifecycle::Active) {
        return Ok(false);
    }
    p.clear_failure();
    p.record(EventStatus::Succeeded, app.clock.now(), "the agent enrolled late; adopted (§4.13)");
    save(app, &job, JobState::Reconciled, &p, "a late enrollment was adopted", None).await?;
    Ok(true)
}

/// Records a failure and moves the onboarding where its class and stage say.
async fn fail(
    app: &Arc<AppState>,
    job: &Job,
    mut p: OnboardProgress,
    (class, message): Failure,
    m: Option<&Machine>,
) -> Result<Job, StoreError> {
    let now = app.clock.now();
    note_failure(&mut p, class, &message, now);
    let mut diag = p.diagnostics.take().unwrap_or_default();
    if let Some(m) = m {
        diag = observe(m);
    }
    diag.upstream_snippet = Some(snippet(&message, SNIPPET_MAX));
    p.diagnostics = Some(diag);
    match on_failure(p.stage, class, p.attempt, app.config.jobs.max_attempts) {
        FailureOutcome::RetryInPlace => {
            p.attempt += 1;
            p.clear_failure();
            p.message = format!("{}: {message}; trying again (attempt {})", p.stage.as_str(), p.attempt);
            save(app, job, job.state, &p, &message, None).await
        }
        FailureOutcome::CompensateThenStop => {
            p.compensation = Some(PendingCompensation::ThenFail);
            save(app, job, JobState::Compensating, &p, &format!("{class}: {message}; releasing the machine back to Ready"), None).await
        }
        FailureOutcome::Stop(state) => save(app, job, state, &p, &format!("{class}: {message}"), None).await,
    }
}

fn observe(m: &Machine) -> Diagnostics {
    Diagnostics {
        maas_status: Some(m.status_name.clone()),
        power_state: Some(m.power_state.as_str().to_owned()),
        ip_addresses: m.ip_addresses.clone(),
        upstream_snippet: m.status_message.as_deref().map(|s| snippet(s, SNIPPET_MAX)),
    }
}

/// A compensation step: release the machine back to Ready (abort a deployment in flight
/// first), wait for it, then go where the compensation leads. `None`: waiting.
async fn compensate(app: &Arc<AppState>, ctx: &SiteCtx, job: &Job, mut p: OnboardProgress) -> Result<Option<Job>, StoreError> {
    let now = app.clock.now();
    let machine = match &p.system_id {
        None => None,
        Some(sid) => match ctx.client.read_machine(sid).await {
            Ok(m) => Some(m),
            Err(e) if e.class() == drover_maas::ErrorClass::Gone => None,
            Err(e) => {
                tracing::info!(onboarding = %job.job.job_id, error = %e, "compensation cannot read MAAS; trying again");
                return Ok(None);
            }
        },
    };
    if let Some(m) = &machine {
        let sid = m.system_id.as_str();
        let call = match m.status {
            NodeStatus::Deploying => Some(("abort", ctx.client.abort(sid, Some("Drover compensation")).await.map(|_| ()))),
            NodeStatus::Deployed | NodeStatus::FailedDeployment | NodeStatus::Allocated => {
                Some(("release", ctx.client.release(sid, &ReleaseOptions::default()).await.map(|_| ())))
            }
            NodeStatus::Releasing | NodeStatus::DiskErasing => return Ok(None),
            _ => None,
        };
        if let Some((what, result)) = call {
            let details = match result {
                Ok(()) => format!("{what} of {sid} asked (was {})", m.status_name),
                Err(e) => format!("{what} of {sid} failed: {e}; trying again"),
            };
            p.record(EventStatus::Compensated, now, details);
            return save(app, job, JobState::Compensating, &p, "compensating", None).await.map(Some);
        }
    }
    let leads = p.compensation.take().unwrap_or(PendingCompensation::ThenFail);
    p.record(EventStatus::Compensated, now, "the machine is back to Ready (or gone); compensation done");
    let (state, reason) = match leads {
        PendingCompensation::ThenFail => {
            let class = p.failure_class.unwrap_or(MaasFailureClass::DeployCloudInitFailure);
            p.failure_class = Some(class);
            p.recommended_action.get_or_insert_with(|| class.recommended_action().to_owned());
            (JobState::FailedManualIntervention, format!("{class}: the machine was released back to Ready"))
        }
        PendingCompensation::ThenCancel => (JobState::Cancelled, "cancelled after releasing the machine".to_owned()),
        PendingCompensation::ThenRestart => {
            let events = std::mem::take(&mut p.events);
            p = OnboardProgress { events, host_id: p.host_id, ..OnboardProgress::default() };
            (JobState::Pending, "restart_clean: starting over from the first stage".to_owned())
        }
    };
    save(app, job, state, &p, &reason, None).await.map(Some)
}

/// The reseed task's state for EnsureHardwareSync.
async fn reseed_state(app: &Arc<AppState>, p: &OnboardProgress) -> Result<Reseed, StoreError> {
    let Some(id) = p.reseed_task_id.as_deref().and_then(|t| Uuid::parse_str(t).ok()) else { return Ok(Reseed::NotIssued) };
    let Some(task) = store::blocking(app.store.clone(), move |s| s.get_task(id)).await? else { return Ok(Reseed::NotIssued) };
    let obs = crate::jobs::TaskObs::from_record(&task);
    Ok(match task.state {
        TaskState::Completed => match obs.outcome {
            Some(drover_proto::report::TaskOutcome::Succeeded) => Reseed::Succeeded,
            _ => Reseed::Failed(if obs.detail.is_empty() { "the task did not succeed".into() } else { obs.detail }),
        },
        _ if obs.is_live(app.clock.now()) => Reseed::Live,
        _ => Reseed::Failed("the agent did not finish the task within its lease".into()),
    })
}

/// One decision of a running onboarding. `None`: it waits.
async fn step(
    app: &Arc<AppState>,
    ctx: &SiteCtx,
    req: &OnboardingRequest,
    workflow: Workflow,
    job: &Job,
    mut p: OnboardProgress,
) -> Result<Option<Job>, StoreError> {
    let now = app.clock.now();
    let policy = &ctx.profile.policy;
    if let Some((limit, class)) = timed_out(&p, now, policy) {
        let message = format!("{} did not finish within {limit}s (profile {})", p.stage.as_str(), ctx.profile.name);
        return fail(app, job, p, (class, message), None).await.map(Some);
    }
    // Every stage past discovery reads the machine first (§4.13: refresh before acting).
    let reads_machine = !matches!(p.stage, S::LoadSite | S::ResolvePowerCredentials | S::CreateOrFind);
    let machine = match (&p.system_id, reads_machine) {
        (Some(sid), true) => match ctx.client.read_machine(sid).await {
            Ok(m) => Some(m),
            // Removing the record is done when the machine is gone.
            Err(e) if p.stage == S::RemoveMaasRecord && e.class() == drover_maas::ErrorClass::Gone => None,
            Err(e) => {
                let f = if e.class() == drover_maas::ErrorClass::Gone {
                    (MaasFailureClass::StateAmbiguity, format!("machine {sid} was deleted from MAAS mid-workflow"))
                } else {
                    maas_failure("read the machine", &e)
                };
                return fail(app, job, p, f, None).await.map(Some);
            }
        },
        (None, true) => {
            let f = (MaasFailureClass::StateAmbiguity, "no MAAS machine is recorded past discovery".to_owned());
            return fail(app, job, p, f, None).await.map(Some);
        }
        _ => None,
    };
    if let Some(m) = &machine {
        let seen = observe(m);
        let changed = p.diagnostics.as_ref().is_none_or(|d| {
            (&d.maas_status, &d.power_state, &d.ip_addresses) != (&seen.maas_status, &seen.power_state, &seen.ip_addresses)
        });
        // The host's binding keeps what MAAS last reported (§6.5), written when it changes.
        if changed && let Some(host_id) = p.host_id {
            let obs = MaasObservation {
                status: m.status_name.clone(),
                power_state: m.power_state.as_str().to_owned(),
                ips: m.ip_addresses.clone(),
                at: now,
            };
            let written = store::blocking(app.store.clone(), move |s| match s.observe_maas_binding(host_id, &obs) {
                Err(e) if e.kind() == store::ErrorKind::NotFound => Ok(()),
                other => other.map(|_| ()),
            })
            .await;
            if let Err(e) = written {
                tracing::warn!(host_id = %host_id, error = %e, "the MAAS binding's observation was not recorded");
            }
        }
        p.diagnostics = Some(seen);
    }
    let decided = decide(app, ctx, req, workflow, &mut p, machine.as_ref()).await;
    let decided = match decided {
        Ok(s) => s,
        Err(f) => return fail(app, job, p, f, machine.as_ref()).await.map(Some),
    };
    match decided {
        StageStep::Done { details, skipped } => {
            let more = p.advance(workflow, now, skipped, details);
            let (state, reason) = if more {
                (JobState::Running, format!("entered {}", p.stage.as_str()))
            } else {
                (JobState::Completed, format!("{}: {}", req.hostname, p.message))
            };
            save(app, job, state, &p, &reason, None).await.map(Some)
        }
        StageStep::Claim { system_id, details } => {
            p.system_id = Some(system_id);
            p.adopt_system_id = None;
            p.advance(workflow, now, false, details);
            save(app, job, JobState::Running, &p, "machine claimed", None).await.map(Some)
        }
        StageStep::Act(act) => match perform::act(app, ctx, req, &mut p, &act).await {
            Ok(details) => {
                if act == MaasAct::Create {
                    // MAAS answered with the machine it created: that is the one.
                    let sid = p.system_id.clone().unwrap_or_default();
                    p.advance(workflow, now, false, details);
                    return save(app, job, JobState::Running, &p, &format!("created {sid}"), None).await.map(Some);
                }
                p.record(EventStatus::Started, now, details);
                save(app, job, JobState::Running, &p, "MAAS change made", None).await.map(Some)
            }
            Err(f) => fail(app, job, p, f, machine.as_ref()).await.map(Some),
        },
        StageStep::Wait(reason) => {
            if p.message.ends_with(&reason) {
                return Ok(None);
            }
            p.message = format!("{}: {reason}", p.stage.as_str());
            save(app, job, JobState::Running, &p, &reason, None).await?;
            Ok(None)
        }
        StageStep::Fail { class, message } => fail(app, job, p, (class, message), machine.as_ref()).await.map(Some),
        StageStep::Retry(reason) => {
            p.attempt += 1;
            p.reseed_task_id = None;
            p.record(EventStatus::Started, now, reason);
            save(app, job, JobState::Running, &p, "stage retried", None).await.map(Some)
        }
        StageStep::RetryDeploy { details } => {
            // Decided and persisted first; the release is the Deploy stage's first call.
            p.record(EventStatus::Compensated, now, format!("{details}: the failed deployment is released, then deployed again"));
            p.deploy_retries += 1;
            p.enter(S::Deploy, now);
            save(app, job, JobState::Running, &p, "redeploying after a datasource-class failure", None).await.map(Some)
        }
        StageStep::IssueReseed => {
            let sid = p.system_id.clone().unwrap_or_default();
            let token = match ctx.client.get_token(&sid).await {
                Ok(Some(t)) => t,
                Ok(None) => return Ok(None),
                Err(e) => return fail(app, job, p, maas_failure("read the machine token", &e), machine.as_ref()).await.map(Some),
            };
            let Some(host_id) = p.host_id else {
                return fail(app, job, p, (MaasFailureClass::StateAmbiguity, "no host to seed".into()), None).await.map(Some);
            };
            let kind = TaskKind::HwSyncReseed(HwSyncReseed {
                maas_url: ctx.site.config.api_base_url.clone(),
                system_id: sid,
                token: MachineToken::Plain(MaasToken {
                    consumer_key: Secret::new(token.consumer_key),
                    token_key: Secret::new(token.token_key),
                    token_secret: Secret::new(token.token_secret),
                }),
            });
            let (task, row) = match crate::api::tasks::seal(app, host_id, Some(job.job.job_id), kind, app.config.jobs.task_ttl_secs).await {
                Ok(v) => v,
                // The agent enrolled without a sealing key, so MAAS's token cannot reach it
                // sealed; no retry mends that: the onboarding stops and says why.
                Err(e @ crate::api::tasks::SealTaskError::NoSealKey { .. }) => {
                    return fail(app, job, p, (MaasFailureClass::AgentEnrollmentFailure, e.to_string()), None).await.map(Some);
                }
                Err(e) => {
                    tracing::error!(error = %e, "cannot sign the hardware-sync seeding task");
                    return Ok(None);
                }
            };
            p.reseed_task_id = Some(task.task_id.clone());
            p.record(EventStatus::Started, now, format!("node.hw_sync_reseed {} issued with MAAS's fresh machine token", task.task_id));
            save(app, job, JobState::Running, &p, "hardware-sync seeding issued", Some(row)).await.map(Some)
        }
    }
}

/// What the current stage does next, from MAAS (and the store) as they are now.
async fn decide(
    app: &Arc<AppState>,
    ctx: &SiteCtx,
    req: &OnboardingRequest,
    workflow: Workflow,
    p: &mut OnboardProgress,
    m: Option<&Machine>,
) -> Result<StageStep, Failure> {
    let policy = &ctx.profile.policy;
    let max = app.config.jobs.max_attempts;
    let machine = || m.ok_or((MaasFailureClass::StateAmbiguity, "the machine was not read".to_owned()));
    Ok(match p.stage {
        S::LoadSite => {
            let v = ctx.client.version().await.map_err(|e| maas_failure("MAAS's version", &e))?;
            stages::StageStep::Done {
                details: format!("site {} (MAAS {}), profile {}", ctx.site.name, v.version, ctx.profile.name),
                skipped: false,
            }
        }
        S::ResolvePowerCredentials => {
            let (_, _, from) = perform::power_credentials(app, ctx, req).await?;
            StageStep::Done { details: format!("BMC credentials from {from}"), skipped: false }
        }
        S::CreateOrFind => {
            let found = perform::candidates(ctx, p.known_before.as_deref()).await?;
            if p.known_before.is_none() {
                p.known_before = Some(found.iter().map(|c| c.system_id.clone()).collect());
            }
            let wanted = Wanted { hostname: &req.hostname, ipmi_ip: &req.ipmi_ip, pxe_mac: req.pxe_mac.as_deref() };
            stages::create_or_find(&found, &wanted, p.created_in_maas, policy.auto_claim_single_new_machine, p.adopt_system_id.as_deref())
        }
        S::Commission => stages::commission(machine()?, &req.hostname),
        S::WaitReady => stages::wait_ready(machine()?, p.attempt, max),
        S::ConfigureStorage => {
            let m = machine()?;
            let devices = ctx.client.list_block_devices(&m.system_id).await.map_err(|e| maas_failure("list block devices", &e))?;
            stages::configure_storage(m, &devices, &policy.boot_disk_pattern, p.layout_applied)
        }
        S::RocePhase2 => {
            let (site_id, hostname) = (ctx.site.id, req.hostname.clone());
            let rows = store::blocking(app.store.clone(), move |s| s.list_roce(site_id, Some(&hostname)))
                .await
                .map_err(|e| (MaasFailureClass::UpstreamTransient, format!("the coordinator's store failed: {e}")))?;
            let wants: Vec<RoceWant> = rows.into_iter().map(|r| RoceWant { interface: r.interface, ipv4_cidr: r.ipv4_cidr }).collect();
            let subnets = if wants.is_empty() || !policy.enable_phase2_roce {
                Vec::new()
            } else {
                ctx.client.list_subnets().await.map_err(|e| maas_failure("list subnets", &e))?
            };
            stages::roce_phase2(machine()?, &wants, &subnets, policy.enable_phase2_roce)
        }
        S::PxeInterfaceAuto => {
            let name = policy.node_pxe_iface.clone().or_else(|| Some(ctx.site.config.node_pxe_iface.clone()).filter(|s| !s.is_empty()));
            stages::pxe_interface_auto(machine()?, name.as_deref())
        }
        S::CreateHostAndRenderCloudInit => {
            let m = machine()?;
            if m.status != NodeStatus::Ready {
                return Err((
                    MaasFailureClass::StateAmbiguity,
                    format!("machine {} is {}, not Ready, before deploy", m.system_id, m.status_name),
                ));
            }
            let details = perform::ensure_host(app, ctx, req, p).await?;
            StageStep::Done { details, skipped: false }
        }
        S::Deploy => stages::deploy(machine()?, p.deploy_calls <= p.deploy_retries && p.deploy_retries > 0),
        S::WaitDeployed => {
            let m = machine()?;
            let events = if m.status == NodeStatus::FailedDeployment {
                let q = drover_maas::EventQuery { system_ids: vec![m.system_id.clone()], limit: Some(20), ..Default::default() };
                ctx.client.events(&q).await.map(|page| page.events).unwrap_or_default()
            } else {
                Vec::new()
            };
            stages::wait_deployed(
                m,
                &events,
                p.deploy_retries,
                policy.enable_deploy_retry_on_datasource_failure,
                policy.max_deploy_retry_attempts,
            )
        }
        S::WaitAgentEnrollment => {
            let host_id = p.host_id.ok_or((MaasFailureClass::StateAmbiguity, "no Drover host was recorded".to_owned()))?;
            let host = store::blocking(app.store.clone(), move |s| s.get_host(host_id))
                .await
                .map_err(|e| (MaasFailureClass::UpstreamTransient, format!("the coordinator's store failed: {e}")))?
                .ok_or((MaasFailureClass::StateAmbiguity, format!("host {host_id} is gone from the store")))?;
            stages::wait_enrollment(machine()?, host.state == HostLifecycle::Active, host.state.as_str())
        }
        S::EnsureHardwareSync => {
            let m = machine()?;
            let token = ctx.client.get_token(&m.system_id).await.map_err(|e| maas_failure("read the machine token", &e))?;
            let reseed = reseed_state(app, p)
                .await
                .map_err(|e| (MaasFailureClass::UpstreamTransient, format!("the coordinator's store failed: {e}")))?;
            stages::ensure_hw_sync(m, token.is_some(), policy.require_hw_sync, &reseed, p.attempt, max)
        }
        S::WaitHardwareSyncHealthy => {
            let m = machine()?;
            let now = time::OffsetDateTime::from_unix_timestamp(app.clock.now().unix()).unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
            stages::wait_hw_sync_healthy(m, m.hw_sync().is_healthy(now), policy.require_hw_sync)
        }
        S::AssertHardwareSync => {
            let value = stages::hw_sync_interval_setting(policy.hardware_sync_interval_secs);
            ctx.client
                .set_config("hardware_sync_interval", &value)
                .await
                .map_err(|e| maas_failure("re-assert the site's hardware_sync_interval", &e))?;
            stages::assert_hw_sync(machine()?, policy.require_hw_sync)
        }
        S::ReleaseMachine => stages::release_machine(machine()?, req.erase),
        S::WaitReleased => {
            let step = stages::wait_released(machine()?, policy.release_fallback_no_erase, p.erase_fallback_used);
            if workflow == Workflow::Reimage
                && matches!(step, StageStep::Done { .. })
                && let Some(host_id) = p.host_id
            {
                retire_old_identity(app, host_id).await?;
            }
            step
        }
        S::PowerOff => stages::power_off(machine()?, p.power_off_asked),
        S::RemoveMaasRecord => stages::remove_maas_record(m, req.remove_maas_record),
    })
}

/// A reimage released the machine: the old OS — and the agent's key — are gone. Every
/// certificate of the host is revoked and the host is `offline` until the fresh OS enrolls
/// (idempotent: a repeat revokes nothing more and leaves an offline host as it is).
async fn retire_old_identity(app: &Arc<AppState>, host_id: Uuid) -> Result<(), Failure> {
    let now = app.clock.now();
    store::blocking(app.store.clone(), move |s| {
        s.revoke_host_certs(host_id, now, "reimage: the machine was released and its OS erased")?;
        if let Some(h) = s.get_host(host_id)?
            && h.state == HostLifecycle::Active
        {
            s.transition_host(host_id, HostLifecycle::Active, HostLifecycle::Offline, "reimage: the machine was released", now)?;
        }
        Ok(())
    })
    .await
    .map_err(|e| (MaasFailureClass::UpstreamTransient, format!("the coordinator's store failed: {e}")))?;
    if let Err(e) = app.revocations_changed().await {
        tracing::error!(error = %e, host_id = %host_id, "the CRL was not refreshed after a reimage revoked the host's certificates");
    }
    Ok(())
}
