//! Host lifecycle: the admin's operator verbs (`POST /v1/hosts/{id}/<verb>`) and the
//! reconciler that moves silent hosts to `offline`.
//!
//! The coarse state machine is `node-state-model.md` §3 ([`HostLifecycle`]); the store's
//! `transition_host` (and a job step's host transitions) is the only writer of a host's state
//! and enforces both legality and compare-and-set, writing one `host.transition` event (with
//! the reason) per step. Each verb here adds what the store cannot know: which *source* states
//! the verb means (unquarantine is `quarantined -> active`, not any legal `-> active`), the
//! operator's reason, and the audit record (actor, role, action, target, reason, prior state,
//! expected state).
//!
//! | verb           | from                                   | to                                         |
//! |----------------|----------------------------------------|--------------------------------------------|
//! | `quarantine`   | active, offline, enrolling             | quarantined                                |
//! | `unquarantine` | quarantined                            | active                                     |
//! | `retire`       | active, offline, quarantined, draining | draining; its `retire` job: retired        |
//! | `reactivate`   | retired                                | active                                     |
//! | `remove`       | retired, removing                      | removing; its `remove` job: deleted        |
//! | `cordon`       | any but deleted                        | schedulable = false                        |
//! | `uncordon`     | any but deleted                        | schedulable = true                         |
//!
//! `draining` and `removing` are not self-sufficient (§3.3): entering either creates or
//! resumes the job that owns it. `retire` creates a `retire` job (cordon → drain, a
//! `node.drain` task → retire) and `remove` a `remove` job (remove → uninstall, a
//! `node.uninstall` task → delete), as the jobs API creates its jobs: `create_job_checked`
//! with the audit rows (`host.VERB` on the host, `job.KIND` on the job) in one transaction,
//! refused while another job holds the host. The verb then takes the job's first step itself —
//! `pending → running` together with the host's move into `draining` / `removing`, one
//! transaction ([`crate::jobs::lifecycle_guard`]) — so the answer shows the host in its
//! in-progress state with the job's id (`jobId`), and the host is never in either state
//! without an unfinished job: the job exists before the host enters the state, and only the
//! job's own steps take it out. A request cut between the two leaves a pending job, which the
//! executor starts with the same step (or asking again does). The rest is the executor's: the
//! host is `retired` only once the drain task succeeded, and `deleted` only once the
//! uninstall task succeeded and every certificate of the host is revoked — certificates, then
//! the CRL, then the state ([`AppState::revoke_host`]): a deleted host never again completes a
//! handshake. A retired host stays cordoned; `reactivate` does not uncordon it.
//!
//! A drain that still fails after `jobs.max_attempts` takes the host `draining → offline`
//! (§3.3, the drain lifecycle failed) and stops the job failed; a failed uninstall takes it
//! `removing → retired`; a job cancelled or reconciled leaves either state the same way.
//!
//! Resume (§8): `retire` on a host in `draining`, or `remove` on one in `removing` — or on a
//! host whose own `retire` / `remove` job stopped failed — takes up the host's unfinished job
//! instead of creating another: a pending one is started; a running or failed one is resumed
//! through the job engine's `resume` action ([`crate::api::jobs::take_action`]: a queued task
//! or a live lease is reused, a lapsed lease requeued, a lost or failed task re-issued, and
//! the host put back into its in-progress state), audited as `job.resume` beside the verb's
//! row. A host left in `draining` or `removing` with no job at all (by an older coordinator)
//! gets a new one. Asking again is idempotent: never a second job, never a second live task.
//! A job being compensated (cancelled or restarted) is a 409 until it has ended, and so is a
//! host held by another job that does not own the state the verb resumes.
//!
//! `deleted` is terminal and the id is never reused, so `reactivate` after removal is refused
//! (409) — re-onboarding makes a new host.
//!
//! Refused requests (bad reason, unknown host, a verb the current state does not allow, a
//! lost compare-and-set, a host held by another job) write nothing: no event and no audit row.
//! A transition verb's audit row is written once its transition has committed.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use drover_proto::states::{HostLifecycle, JobState};
use drover_proto::time::Time;
use serde::Deserialize;
use serde_json::json;
use uuid::Uuid;

use crate::api::auth::{Admin, OperatorCaller};
use crate::api::error::{ApiError, JsonBody};
use crate::api::jobs::{self as jobs_api, JobRead};
use crate::app::AppState;
use crate::jobs::exec::event;
use crate::jobs::{Decision, JobKind, JobView, OperatorAction, apply as apply_decision, lifecycle_guard};
use crate::store::{self, Host, HostCursor, HostFilter, HostOp, Job, JobFilter, JobStep, NewAudit, StoreError, TaskRecord};

/// Longest reason an operator may give, in characters.
pub const MAX_REASON_CHARS: usize = 500;

/// The body every verb takes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LifecycleRequest {
    /// Why (required; recorded in the events and the audit).
    pub reason: Option<String>,
}

pub use drover_proto::api::hosts::HostStateResponse;

/// A stored host as the lifecycle routes answer it.
pub fn host_state(h: &Host) -> HostStateResponse {
    HostStateResponse { host_id: h.id.to_string(), hostname: h.hostname.clone(), state: h.state, schedulable: h.schedulable, job_id: None }
}

/// A lifecycle verb: the source states it accepts and the state it leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verb {
    Quarantine,
    Unquarantine,
    Retire,
    Reactivate,
    Remove,
}

impl Verb {
    fn action(self) -> &'static str {
        match self {
            Verb::Quarantine => "host.quarantine",
            Verb::Unquarantine => "host.unquarantine",
            Verb::Retire => "host.retire",
            Verb::Reactivate => "host.reactivate",
            Verb::Remove => "host.remove",
        }
    }

    fn sources(self) -> &'static [HostLifecycle] {
        use HostLifecycle::*;
        match self {
            Verb::Quarantine => &[Active, Offline, Enrolling],
            Verb::Unquarantine => &[Quarantined],
            // The in-progress state itself: asking again resumes (§8).
            Verb::Retire => &[Active, Offline, Quarantined, Draining],
            Verb::Reactivate => &[Retired],
            // (A host that never enrolled is removed without a job: see `cancel_enrollment`.)
            Verb::Remove => &[Retired, Removing],
        }
    }

    /// Where the verb leads (for `retire` and `remove`, once their job has finished).
    fn target(self) -> HostLifecycle {
        match self {
            Verb::Quarantine => HostLifecycle::Quarantined,
            Verb::Unquarantine | Verb::Reactivate => HostLifecycle::Active,
            Verb::Retire => HostLifecycle::Retired,
            Verb::Remove => HostLifecycle::Deleted,
        }
    }

    /// For the verbs a job carries out: its kind, and the in-progress state it holds the host in.
    fn job(self) -> Option<(JobKind, HostLifecycle)> {
        match self {
            Verb::Retire => Some((JobKind::Retire {}, HostLifecycle::Draining)),
            Verb::Remove => Some((JobKind::Remove {}, HostLifecycle::Removing)),
            Verb::Quarantine | Verb::Unquarantine | Verb::Reactivate => None,
        }
    }
}

/// Why `retire` or `remove` cannot create or resume the host's job (every one a 409; nothing
/// was written).
#[derive(Debug, thiserror::Error)]
enum JobVerbError {
    /// Another job holds the host and does not own the state the verb resumes.
    #[error(
        "host {host} is held by job {job} ({kind}, {state}): a host has one job at a time; let it finish, or recover or cancel it (drover job describe {job})"
    )]
    HeldByOtherJob { host: Uuid, job: Uuid, kind: String, state: JobState },
    /// The host's job is compensating (a cancel or restart_clean waits for its task).
    #[error("host {host}'s job {job} ({kind}) is compensating (being cancelled or restarted): ask again once it has ended")]
    Compensating { host: Uuid, job: Uuid, kind: String },
    /// The host's job's stored record does not parse.
    #[error("host {host}'s job {job} cannot be read ({why}): cancel it (drover job cancel {job}) and ask again")]
    Unreadable { host: Uuid, job: Uuid, why: String },
    /// The host or its job kept changing while the request ran.
    #[error("host {host} changed while the request ran; read it again and retry")]
    Raced { host: Uuid },
}

impl From<JobVerbError> for ApiError {
    fn from(e: JobVerbError) -> Self {
        match e {
            JobVerbError::HeldByOtherJob { .. }
            | JobVerbError::Compensating { .. }
            | JobVerbError::Unreadable { .. }
            | JobVerbError::Raced { .. } => ApiError::conflict(e.to_string()),
        }
    }
}

/// Checks the operator's reason: present, not blank, at most [`MAX_REASON_CHARS`], no
/// control characters (it lands in events, the audit and logs, one line each).
pub fn check_reason(reason: Option<&str>) -> Result<String, ApiError> {
    let reason = reason.map(str::trim).unwrap_or_default();
    if reason.is_empty() {
        return Err(ApiError::bad_request("reason is required: say why, it is recorded in the events and the audit"));
    }
    if reason.chars().count() > MAX_REASON_CHARS || !drover_proto::text::is_plain(reason) {
        return Err(ApiError::bad_request(format!(
            "reason must be at most {MAX_REASON_CHARS} characters without control characters, bidirectional controls or \
             zero-width characters (they change what an auditor reads)"
        )));
    }
    Ok(reason.to_owned())
}

fn parse_host_id(id: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(id).map_err(|_| ApiError::bad_request("host id is not a UUID"))
}

/// Why a verb is refused in `state`, naming the guardrail.
fn refusal(verb: Verb, host: &Host) -> ApiError {
    let id = host.id;
    let state = host.state;
    let allowed = verb.sources().iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ");
    let why = match (verb, state) {
        (_, HostLifecycle::Deleted) => {
            "deleted is terminal: a removed host's identity is never reactivated or reused; enroll the machine again as a new host"
                .to_owned()
        }
        (Verb::Remove, _) => "only a retired host, or one that never enrolled, can be removed: retire it first".to_owned(),
        _ => format!("{} needs the host in {allowed}", verb.action()),
    };
    ApiError::conflict(format!("host {id} is {state}: {why}"))
}

fn store_error(e: StoreError) -> ApiError {
    match e {
        // Only reachable if the table above and the state machine disagree; still a refusal.
        StoreError::IllegalTransition { from, to, .. } => ApiError::conflict(format!(
            "illegal host lifecycle transition {from} -> {to}: only the transitions of the host state machine are allowed"
        )),
        StoreError::StaleState { id, actual, .. } => {
            ApiError::conflict(format!("host {id} changed while the request ran (now {actual}); read it again and retry"))
        }
        other => ApiError::from(other),
    }
}

async fn read_host(app: &Arc<AppState>, host_id: Uuid) -> Result<Host, ApiError> {
    store::blocking(app.store.clone(), move |s| s.get_host(host_id))
        .await
        .map_err(store_error)?
        .ok_or_else(|| ApiError::not_found(format!("host {host_id} not found")))
}

/// The audit row of `verb` on `host` for `op`.
fn verb_audit(app: &AppState, op: &OperatorCaller, verb: Verb, host: &Host, reason: &str) -> NewAudit {
    NewAudit {
        at: app.clock.now(),
        actor: op.name.clone(),
        role: op.role.as_str().to_owned(),
        action: verb.action().to_owned(),
        target: host.id.to_string(),
        reason: reason.to_owned(),
        prior_state: Some(host.state.as_str().to_owned()),
        expected_state: Some(verb.target().as_str().to_owned()),
    }
}

/// Runs a transition verb (`quarantine`, `unquarantine`, `reactivate`) on `host_id` for `op`:
/// checks, the transition (compare-and-set on the state read) and the audit row.
async fn apply(app: &Arc<AppState>, op: &OperatorCaller, host_id: Uuid, verb: Verb, reason: String) -> Result<Host, ApiError> {
    let host = read_host(app, host_id).await?;
    if !verb.sources().contains(&host.state) {
        return Err(refusal(verb, &host));
    }
    let prior = host.state;
    let to = verb.target();
    let why = format!("{} by {}: {reason}", verb.action(), op.name);
    let audit = verb_audit(app, op, verb, &host, &reason);
    let at = app.clock.now();
    // The transition (with its event), then the audit row: a refused transition leaves no trace.
    let current = store::blocking(app.store.clone(), move |s| {
        let host = s.transition_host(host_id, prior, to, &why, at)?;
        s.append_audit(&audit)?;
        Ok(host)
    })
    .await
    .map_err(store_error)?;
    tracing::info!(%host_id, operator = %op.name, action = verb.action(), prior = %prior, state = %current.state, %reason, "host lifecycle verb applied");
    // A host leaving or re-entering service changes what a rollout may do with it.
    app.executor.poke();
    Ok(current)
}

/// `remove` of a host that never enrolled: straight to deleted (nothing was installed, so
/// there is nothing to uninstall), its unused enrollment tokens ended, audited. Its hostname
/// is free again at once (only live hosts hold one).
async fn cancel_enrollment(app: &Arc<AppState>, op: &OperatorCaller, host: &Host, reason: String) -> Result<Host, ApiError> {
    let host_id = host.id;
    let why = format!("{} by {}: {reason} (never enrolled; its enrollment token ended)", Verb::Remove.action(), op.name);
    let audit = verb_audit(app, op, Verb::Remove, host, &reason);
    let at = app.clock.now();
    let deleted = store::blocking(app.store.clone(), move |s| {
        // The transition first: if the host enrolled meanwhile it fails and nothing changes.
        let deleted = s.transition_host(host_id, HostLifecycle::BootstrapIssued, HostLifecycle::Deleted, &why, at)?;
        s.revoke_host_certs(host_id, at, &why)?;
        s.append_audit(&audit)?;
        Ok(deleted)
    })
    .await
    .map_err(store_error)?;
    tracing::info!(%host_id, operator = %op.name, %reason, "host that never enrolled deleted");
    Ok(deleted)
}

/// What `retire` / `remove` read: the host, its unfinished jobs, and the first one's task.
async fn read_for_job_verb(app: &Arc<AppState>, host_id: Uuid) -> Result<(Host, Vec<Job>, Option<TaskRecord>), ApiError> {
    let read = store::blocking(app.store.clone(), move |s| {
        let Some(host) = s.get_host(host_id)? else { return Ok(None) };
        let jobs = s.list_jobs(&JobFilter { host_id: Some(host_id), unfinished: true, ..Default::default() })?;
        let task_id =
            jobs.first().and_then(|j| j.progress.get("taskId")).and_then(serde_json::Value::as_str).and_then(|t| Uuid::parse_str(t).ok());
        let task = task_id.map(|t| s.get_task(t)).transpose()?.flatten();
        Ok(Some((host, jobs, task)))
    })
    .await
    .map_err(store_error)?;
    read.ok_or_else(|| ApiError::not_found(format!("host {host_id} not found")))
}

/// The first step of the verb's own job, taken by the request: `pending → running` and the
/// host's move into the state the job holds, with a `job.stage` event and `audits`, in one
/// transaction. `None` when the job or the host changed since they were read (the executor
/// may have taken the same step): nothing was written, the caller reads again.
async fn start_job(
    app: &Arc<AppState>,
    op: &OperatorCaller,
    verb: Verb,
    job: &Job,
    host: &Host,
    reason: &str,
    audits: Vec<NewAudit>,
) -> Result<Option<Job>, ApiError> {
    let job_id = job.job.job_id;
    let view = JobView::from_job(job).map_err(|e| JobVerbError::Unreadable { host: host.id, job: job_id, why: e.to_string() })?;
    let now = app.clock.now();
    let asked = format!("{} by {}: {reason}", verb.action(), op.name);
    let decision =
        Decision::Start { reason: format!("{} job {job_id} starts at stage {}; {asked}", view.kind.name(), view.progress.stage) };
    let (state, progress) = apply_decision(&view, &decision, now, None);
    let why = crate::jobs::exec::step_message(job_id, view.kind.name(), &view.progress.stage.to_string(), decision.reason());
    let host_ops: Vec<HostOp> = lifecycle_guard(&view.kind, progress.stage, host.state, job.state, state)
        .map(|to| HostOp::Transition { host_id: host.id, from: host.state, to, reason: format!("{asked} (job {job_id})") })
        .into_iter()
        .collect();
    let data = json!({ "stage": progress.stage.as_str(), "decision": "start", "attempt": progress.attempt, "state": state.as_str() });
    let step = JobStep {
        job_id,
        expected_state: job.state,
        expected_progress: job.progress.clone(),
        new_state: state,
        new_progress: progress.to_value(),
        reason: why.clone(),
        task: None,
        requeue_task: None,
        host_ops,
        events: vec![event(now, "job.stage", host.id, job_id, &why, data)],
        audits,
        at: now,
    };
    match store::blocking(app.store.clone(), move |s| s.apply_job_step(&step)).await {
        Ok(job) => Ok(Some(job)),
        Err(StoreError::StaleState { .. }) => Ok(None),
        Err(e) => Err(store_error(e)),
    }
}

/// Runs `retire` or `remove` on `host_id` for `op`: creates the verb's job and starts it, or
/// resumes the host's unfinished job (module docs). Returns the host and the job after.
async fn apply_job_verb(
    app: &Arc<AppState>,
    op: &OperatorCaller,
    host_id: Uuid,
    verb: Verb,
    reason: String,
) -> Result<(Host, Job), ApiError> {
    let Some((kind, held)) = verb.job() else { return Err(ApiError::internal()) };
    // Set once this request's audit rows are stored: a retry after a race writes no second one.
    let mut audited = false;
    // A race (another request, the executor starting the job, a check-in moving the host) is
    // answered by reading again; a few rounds settle any of them.
    for _ in 0..3 {
        let (host, jobs, task) = read_for_job_verb(app, host_id).await?;
        if !verb.sources().contains(&host.state) {
            return Err(refusal(verb, &host));
        }
        let audits = if audited { Vec::new() } else { vec![verb_audit(app, op, verb, &host, &reason)] };
        let Some(job) = jobs.first().cloned() else {
            // No job: create the verb's own, as the jobs API does, then take its first step.
            let now = app.clock.now();
            let new = kind.new_job(host_id, now).map_err(|_| ApiError::internal())?;
            let job_id = new.job_id;
            let mut rows = audits;
            rows.push(jobs_api::audit(op, now, &format!("job.{}", kind.name()), &job_id.to_string(), &reason, None, JobState::Pending));
            let allowed = verb.sources();
            let created = match store::blocking(app.store.clone(), move |s| s.create_job_checked(&new, allowed, &rows)).await {
                Ok(job) => job,
                // Another job or state change got there first: read again.
                Err(e) if e.kind() == store::ErrorKind::Conflict => continue,
                Err(e) => return Err(store_error(e)),
            };
            audited = true;
            tracing::info!(job_id = %job_id, %host_id, kind = kind.name(), operator = %op.name, %reason, "lifecycle job created");
            match start_job(app, op, verb, &created, &host, &reason, Vec::new()).await? {
                Some(job) => return Ok((read_host(app, host_id).await?, job)),
                None => continue,
            }
        };
        let job_id = job.job.job_id;
        let own = job.job.kind == kind.name();
        if jobs.len() > 1 || !(own || host.state == held) {
            return Err(JobVerbError::HeldByOtherJob { host: host_id, job: job_id, kind: job.job.kind.clone(), state: job.state }.into());
        }
        match job.state {
            // The executor started it since this request created it: done.
            _ if audited && job.state != JobState::Pending => return Ok((host, job)),
            JobState::Pending if own => match start_job(app, op, verb, &job, &host, &reason, audits).await? {
                Some(job) => return Ok((read_host(app, host_id).await?, job)),
                None => continue,
            },
            // Another kind's pending job owns the state: it starts when the executor admits it.
            JobState::Pending => {
                store::blocking(app.store.clone(), move |s| audits.iter().try_for_each(|a| s.append_audit(a).map(drop)))
                    .await
                    .map_err(store_error)?;
                return Ok((host, job));
            }
            JobState::Running | JobState::FailedRetryable | JobState::FailedManualIntervention => {
                let read = JobRead { job, task, host: Some(host) };
                let taken = jobs_api::take_action(app, op, read, OperatorAction::Resume, &reason, audits).await?;
                tracing::info!(%job_id, %host_id, operator = %op.name, task = %taken.task_note, change = %taken.outcome.progress_change, "lifecycle job resumed");
                return Ok((read_host(app, host_id).await?, taken.job));
            }
            JobState::Compensating => {
                return Err(JobVerbError::Compensating { host: host_id, job: job_id, kind: job.job.kind.clone() }.into());
            }
            // Not listed as unfinished; read again if the listing raced with its end.
            JobState::Completed | JobState::Cancelled | JobState::Reconciled => continue,
        }
    }
    Err(JobVerbError::Raced { host: host_id }.into())
}

/// Cordons (`false`) or uncordons a host: the `schedulable` flag the scheduler reads.
async fn set_schedulable(
    app: &Arc<AppState>,
    op: &OperatorCaller,
    host_id: Uuid,
    schedulable: bool,
    reason: String,
) -> Result<Host, ApiError> {
    let action = if schedulable { "host.uncordon" } else { "host.cordon" };
    let label = |s: bool| if s { "schedulable" } else { "cordoned" };
    let at = app.clock.now();
    let actor = op.name.clone();
    let role = op.role.as_str().to_owned();
    let why = reason.clone();
    let host = store::blocking(app.store.clone(), move |s| {
        let Some(host) = s.get_host(host_id)? else { return Ok(Err(ApiError::not_found(format!("host {host_id} not found")))) };
        if host.state == HostLifecycle::Deleted {
            return Ok(Err(ApiError::conflict(format!("host {host_id} is deleted: deleted is terminal, its flags no longer change"))));
        }
        if schedulable && host.state == HostLifecycle::Quarantined {
            return Ok(Err(ApiError::conflict(format!(
                "host {host_id} is quarantined, and a quarantined host is never schedulable: unquarantine it first (drover host unquarantine {host_id} --reason …), then uncordon it"
            ))));
        }
        // The store makes a same-value set a no-op without an event; the request is still
        // an operator action, so it is audited either way.
        let updated = s.set_schedulable(host_id, schedulable, &format!("{action} by {actor}: {why}"), at)?;
        s.append_audit(&NewAudit {
            at,
            actor,
            role,
            action: action.to_owned(),
            target: host_id.to_string(),
            reason: why,
            prior_state: Some(label(host.schedulable).to_owned()),
            expected_state: Some(label(schedulable).to_owned()),
        })?;
        Ok(Ok(updated))
    })
    .await
    .map_err(store_error)??;
    tracing::info!(%host_id, operator = %op.name, action, %reason, "host schedulable flag set");
    Ok(host)
}

async fn verb_route(
    app: Arc<AppState>,
    op: OperatorCaller,
    id: String,
    req: LifecycleRequest,
    verb: Verb,
) -> Result<Json<HostStateResponse>, ApiError> {
    let host_id = parse_host_id(&id)?;
    let reason = check_reason(req.reason.as_deref())?;
    if verb == Verb::Remove {
        let host = read_host(&app, host_id).await?;
        if host.state == HostLifecycle::BootstrapIssued {
            let host = cancel_enrollment(&app, &op, &host, reason).await?;
            return Ok(Json(crate::api::lifecycle::host_state(&host)));
        }
    }
    if verb.job().is_some() {
        let (host, job) = apply_job_verb(&app, &op, host_id, verb, reason.clone()).await?;
        tracing::info!(%host_id, operator = %op.name, action = verb.action(), state = %host.state, job_id = %job.job.job_id, job_state = %job.state, %reason, "host lifecycle verb applied");
        // The job's next steps are the executor's; a host leaving service changes what a
        // rollout may do with it.
        app.executor.poke();
        return Ok(Json(HostStateResponse { job_id: Some(job.job.job_id.to_string()), ..crate::api::lifecycle::host_state(&host) }));
    }
    let host = apply(&app, &op, host_id, verb, reason).await?;
    Ok(Json(crate::api::lifecycle::host_state(&host)))
}

/// `POST /v1/hosts/{id}/quarantine` (admin): active, offline or enrolling → quarantined.
pub async fn quarantine(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    Path(id): Path<String>,
    JsonBody(req): JsonBody<LifecycleRequest>,
) -> Result<Json<HostStateResponse>, ApiError> {
    verb_route(app, op, id, req, Verb::Quarantine).await
}

/// `POST /v1/hosts/{id}/unquarantine` (admin): quarantined → active.
pub async fn unquarantine(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    Path(id): Path<String>,
    JsonBody(req): JsonBody<LifecycleRequest>,
) -> Result<Json<HostStateResponse>, ApiError> {
    verb_route(app, op, id, req, Verb::Unquarantine).await
}

/// `POST /v1/hosts/{id}/retire` (admin): active, offline or quarantined → draining, owned by a
/// `retire` job (created, or resumed for a host already draining) that drains the host and
/// retires it.
pub async fn retire(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    Path(id): Path<String>,
    JsonBody(req): JsonBody<LifecycleRequest>,
) -> Result<Json<HostStateResponse>, ApiError> {
    verb_route(app, op, id, req, Verb::Retire).await
}

/// `POST /v1/hosts/{id}/reactivate` (admin): retired → active; never after removal.
pub async fn reactivate(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    Path(id): Path<String>,
    JsonBody(req): JsonBody<LifecycleRequest>,
) -> Result<Json<HostStateResponse>, ApiError> {
    verb_route(app, op, id, req, Verb::Reactivate).await
}

/// `POST /v1/hosts/{id}/remove` (admin): retired → removing, owned by a `remove` job (created,
/// or resumed for a host already removing) that uninstalls the agent, revokes the host and
/// deletes it; a host that never enrolled (`bootstrap_issued`) is deleted at once, its
/// enrollment token ended.
pub async fn remove(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    Path(id): Path<String>,
    JsonBody(req): JsonBody<LifecycleRequest>,
) -> Result<Json<HostStateResponse>, ApiError> {
    verb_route(app, op, id, req, Verb::Remove).await
}

async fn cordon_route(
    app: Arc<AppState>,
    op: OperatorCaller,
    id: String,
    req: LifecycleRequest,
    schedulable: bool,
) -> Result<Json<HostStateResponse>, ApiError> {
    let host_id = parse_host_id(&id)?;
    let reason = check_reason(req.reason.as_deref())?;
    let host = set_schedulable(&app, &op, host_id, schedulable, reason).await?;
    Ok(Json(crate::api::lifecycle::host_state(&host)))
}

/// `POST /v1/hosts/{id}/cordon` (admin): the host is no longer schedulable.
pub async fn cordon(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    Path(id): Path<String>,
    JsonBody(req): JsonBody<LifecycleRequest>,
) -> Result<Json<HostStateResponse>, ApiError> {
    cordon_route(app, op, id, req, false).await
}

/// `POST /v1/hosts/{id}/uncordon` (admin): the host is schedulable again.
pub async fn uncordon(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    Path(id): Path<String>,
    JsonBody(req): JsonBody<LifecycleRequest>,
) -> Result<Json<HostStateResponse>, ApiError> {
    cordon_route(app, op, id, req, true).await
}

// ---- offline detection ------------------------------------------------------------------

/// Longest pause between two offline sweeps, whatever `offline_after_secs` says.
pub const MAX_SWEEP_SECS: u64 = 30;

/// How often the reconciler sweeps for `offline_after_secs`: a quarter of it (so a host is
/// marked at most 25 % late), at most [`MAX_SWEEP_SECS`], at least a second.
pub fn sweep_interval(offline_after_secs: u64) -> Duration {
    Duration::from_secs((offline_after_secs / 4).clamp(1, MAX_SWEEP_SECS))
}

/// One sweep: every `active` host silent for `[hosts] offline_after_secs` (no check-in, or
/// never checked in and no state change, since then) moves to `offline` with the reason
/// "no check-in for Ns". Returns how many hosts it moved. The next check-in brings a host
/// back (`api::agent::checkin`).
///
/// Each host is re-read and re-checked in the transaction that moves it, and the move is a
/// compare-and-set on `active`: a host that checked in or changed state since the listing is
/// left alone.
pub async fn mark_silent_hosts_offline(app: &Arc<AppState>) -> Result<usize, StoreError> {
    // Buffered check-ins first: a host that has just checked in is not silent.
    app.flush_checkins().await?;
    let secs = app.config.hosts.offline_after_secs;
    let now = app.clock.now();
    let cutoff = Time::from_unix(now.unix().saturating_sub(i64::try_from(secs).unwrap_or(i64::MAX))).unwrap_or(Time::EPOCH);
    let reason = format!("no check-in for {secs}s");
    store::blocking(app.store.clone(), move |s| {
        let mut moved = 0usize;
        let mut after: Option<HostCursor> = None;
        loop {
            let page = s.list_hosts(&HostFilter {
                state: Some(HostLifecycle::Active),
                silent_since: Some(cutoff),
                after: after.clone(),
                limit: 0,
            })?;
            let Some(last) = page.last() else { break };
            after = Some(HostCursor::after(last));
            for listed in &page {
                let Some(host) = s.get_host(listed.id)? else { continue };
                let last_seen = host.last_checkin.as_ref().map_or(host.updated_at, |c| c.at);
                if host.state != HostLifecycle::Active || last_seen >= cutoff {
                    continue;
                }
                match s.transition_host(host.id, HostLifecycle::Active, HostLifecycle::Offline, &reason, now) {
                    Ok(_) => {
                        tracing::warn!(host_id = %host.id, hostname = %host.hostname, silent_secs = now.secs_since(last_seen), "host offline: no check-in");
                        moved += 1;
                    }
                    // Changed under us (a check-in, an operator verb): not ours to move.
                    Err(StoreError::StaleState { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(moved)
    })
    .await
}

/// Starts the offline reconciler: [`mark_silent_hosts_offline`] every [`sweep_interval`].
pub fn spawn_offline_reconciler(app: Arc<AppState>) -> tokio::task::JoinHandle<()> {
    let (loops, clock) = (app.loops.clone(), app.clock.clone());
    loops.spawn(crate::loops::OFFLINE_SWEEP, clock, async move {
        let mut every = tokio::time::interval(sweep_interval(app.config.hosts.offline_after_secs));
        // A slow sweep should not be followed by a burst of catch-up sweeps.
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first tick is immediate; skip it. Right after a (re)start every host looks as
        // silent as the coordinator was down, and deserves one interval to check in again.
        every.tick().await;
        loop {
            every.tick().await;
            let outcome = mark_silent_hosts_offline(&app).await;
            match &outcome {
                // An offline host no longer holds up its wave (it is Skipped).
                Ok(moved) if *moved > 0 => app.executor.poke(),
                Ok(_) => {}
                Err(e) => tracing::error!(error = %e, "offline sweep failed; retrying at the next interval"),
            }
            app.loops.ran(crate::loops::OFFLINE_SWEEP, app.clock.now(), outcome.map(|_| ()));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_required_bounded_and_single_line() {
        assert!(check_reason(None).is_err());
        assert!(check_reason(Some("  ")).is_err());
        assert!(check_reason(Some("a\nb")).is_err());
        assert!(check_reason(Some(&"x".repeat(MAX_REASON_CHARS + 1))).is_err());
        assert_eq!(check_reason(Some(" disk swap ")).expect("ok"), "disk swap");
        assert!(check_reason(Some(&"é".repeat(MAX_REASON_CHARS))).is_ok());
    }

    #[test]
    fn every_verb_walks_only_legal_transitions() {
        for verb in [Verb::Quarantine, Verb::Unquarantine, Verb::Reactivate] {
            assert!(verb.job().is_none());
            for &from in verb.sources() {
                assert!(from.can_transition_to(verb.target()), "{verb:?}: {from} -> {}", verb.target());
            }
        }
        // A job verb's sources enter the state its job holds (or are in it: a resume), which
        // its job leaves for the verb's target.
        for verb in [Verb::Retire, Verb::Remove] {
            let (kind, held) = verb.job().expect("a job verb");
            assert!(verb.sources().contains(&held), "{verb:?} resumes from {held}");
            for &from in verb.sources() {
                assert!(from == held || from.can_transition_to(held), "{verb:?}: {from} -> {held}");
            }
            assert!(held.can_transition_to(verb.target()), "{verb:?}: {held} -> {}", verb.target());
            // `remove` of a host that never enrolled goes straight to its target, without a job.
            if verb == Verb::Remove {
                assert!(HostLifecycle::BootstrapIssued.can_transition_to(verb.target()));
            }
            for stage in crate::jobs::stages(&kind) {
                assert_eq!(kind.holds(stage), Some(held), "{verb:?} at {stage}");
            }
        }
    }

    #[test]
    fn sweeps_are_bounded() {
        assert_eq!(sweep_interval(180), Duration::from_secs(30));
        assert_eq!(sweep_interval(20), Duration::from_secs(5));
        assert_eq!(sweep_interval(2), Duration::from_secs(1));
    }
}
