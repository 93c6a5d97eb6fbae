//! Job routes: `POST /v1/hosts/{id}/decommission` (admin) starts a soft reset, a storage
//! cleanup, a reimage or a full decommission (the `retire` and `remove` jobs are started by
//! their lifecycle verbs, `crate::api::lifecycle`); `GET /v1/jobs`, `GET /v1/jobs/{id}` (viewer) show them;
//! `POST /v1/jobs/{id}/{action}` (admin) takes an operator action of `node-state-model.md`
//! §8 — retry_stage, resume, rerun, restart_clean, cancel, adopt_observed_state,
//! mark_manual_intervention_required.
//!
//! Every accepted action is one store transaction ([`take_action`], which the `retire` and
//! `remove` lifecycle verbs use to resume their jobs too): the job's new state and progress
//! (compare-and-set on what was read), the task the action re-issues or requeues (never a
//! duplicate of a live one), the host transition §3.3's guardrail asks for (a resumed retire
//! or remove puts its host back into `draining` / `removing`; a job cancelled or reconciled
//! leaves them), a `job.action` event and the audit row (actor, role, reason, prior state,
//! action, expected state). A refused action writes nothing and answers 409 naming the states
//! it is allowed from.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use drover_proto::states::{HostLifecycle, JobState};
use drover_proto::task::StorageScope;
use drover_proto::time::Time;
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::api::auth::{Admin, OperatorCaller, Reader};
use crate::api::error::{ApiError, JsonBody};
use crate::api::lifecycle::check_reason;
use crate::api::operator::{Page, QueryParams, decode_created_cursor, event_view, next_created, page_size, parse_uuid};
use crate::app::AppState;
use crate::jobs::exec::event;
use crate::jobs::model::MaasRelease;
use crate::jobs::model::{Stage, StageStatus, recommended_next};
use crate::jobs::{
    ActionOutcome, JobKind, JobView, OperatorAction, Progress, StorageChoice, TaskDirective, TaskObs, act, lifecycle_guard, stages,
};
use crate::maasflow::onboard::EraseMode;
use crate::store::{self, CreatedCursor, EventFilter, Host, HostOp, Job, JobFilter, JobStep, NewAudit, TaskRecord};

pub use drover_proto::api::jobs::{
    ActionOutcome as ActionOutcomeView, ActionResponse, DryRunView, HistoryEntry, JobDetail, JobError, JobJson,
};

/// A stored job as the API shows it, with its host's name.
pub fn job_json(job: &Job, hostname: Option<String>) -> JobJson {
    let parsed = JobView::from_job(job).ok();
    let kind_stages = parsed.as_ref().map(|v| stages(&v.kind).iter().map(|s| s.as_str().to_owned()).collect()).unwrap_or_default();
    let p = parsed.as_ref().map(|v| v.progress.clone());
    JobJson {
        job_id: job.job.job_id.to_string(),
        kind: job.job.kind.clone(),
        host_id: job.job.host_id.map(|h| h.to_string()),
        hostname,
        state: job.state,
        input: job.job.input.clone(),
        request_id: job.job.request_id.map(|r| r.to_string()),
        stages: kind_stages,
        stage: p.as_ref().map(|p| p.stage.as_str().to_owned()).unwrap_or_default(),
        stage_index: p.as_ref().map_or(0, |p| p.stage_index),
        attempt: p.as_ref().map_or(0, |p| p.attempt),
        task_id: p.as_ref().and_then(|p| p.task_id.clone()),
        child_job_id: p.as_ref().and_then(|p| p.child_job_id.clone()),
        failure_class: p.as_ref().and_then(|p| p.failure_class).map(|c| c.as_str().to_owned()),
        message: p.as_ref().map(|p| p.message.clone()).unwrap_or_default(),
        history: p.as_ref().map(|p| p.history.iter().map(history_entry).collect()).unwrap_or_default(),
        requester: None,
        started_at: p.as_ref().and_then(|p| p.history.iter().find(|e| e.status == StageStatus::Started).map(|e| e.at)),
        completed_at: matches!(job.state, JobState::Completed | JobState::Cancelled | JobState::Reconciled).then_some(job.updated_at),
        error: p.as_ref().and_then(|p| {
            let failed = p.history.iter().rev().find(|e| e.status == StageStatus::Failed)?;
            Some(JobError {
                class: p.failure_class.map(|c| c.as_str().to_owned()),
                stage: failed.stage.as_str().to_owned(),
                attempt: failed.attempt,
                message: failed.message.clone(),
                at: failed.at,
            })
        }),
        recommended_action: recommended_next(job.state, p.as_ref().and_then(|p| p.failure_class)).map(str::to_owned),
        created_at: job.job.created_at,
        updated_at: job.updated_at,
    }
}

/// One entry of a job's history as the API shows it.
fn history_entry(e: &crate::jobs::model::StageEvent) -> HistoryEntry {
    HistoryEntry {
        stage: e.stage.as_str().to_owned(),
        attempt: e.attempt,
        status: e.status.as_str().to_owned(),
        message: e.message.clone(),
        at: e.at,
    }
}

/// Jobs with their hosts' names, read in one blocking call.
pub async fn with_hostnames(app: &Arc<AppState>, jobs: Vec<Job>) -> Result<Vec<JobJson>, ApiError> {
    Ok(store::blocking(app.store.clone(), move |s| {
        jobs.iter()
            .map(|j| {
                let name = j.job.host_id.map(|h| s.get_host(h)).transpose()?.flatten().map(|h| h.hostname);
                let mut json = job_json(j, name);
                json.requester = requester(s, j)?;
                Ok(json)
            })
            .collect::<Result<Vec<_>, store::StoreError>>()
    })
    .await?)
}

/// Who asked for a job: a maintenance request's initiator, else the operator of the audit
/// record that created it (the first one naming the job).
fn requester(s: &dyn store::Store, job: &Job) -> Result<Option<String>, store::StoreError> {
    if let Some(request) = job.job.request_id {
        return Ok(s.get_maintenance(request)?.map(|m| m.initiator));
    }
    let first = s.list_audit(&store::AuditFilter { target: Some(job.job.job_id.to_string()), limit: 1, ..Default::default() })?;
    Ok(first.first().map(|a| format!("{} ({})", a.audit.actor, a.audit.role)))
}

/// `POST /v1/hosts/{id}/decommission` body.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DecommissionRequest {
    /// soft_reset | storage_cleanup | full.
    pub mode: String,
    /// none | local | weka | all.
    #[serde(default)]
    pub storage: Option<StorageChoice>,
    /// Full decommission: tell the scheduler to end allocations still attached.
    #[serde(default)]
    pub force_release: bool,
    /// Reimage and full decommission of a MAAS-bound host: none | quick | secure.
    #[serde(default)]
    pub erase: Option<EraseMode>,
    /// Full decommission: delete the machine from MAAS at the end (default: keep it).
    #[serde(default)]
    pub remove_maas_record: bool,
    /// Reimage: the site profile to deploy with (default: the site's default profile).
    #[serde(default)]
    pub profile: Option<String>,
    /// Why (required).
    pub reason: Option<String>,
    /// Check the request and answer the job it would start (200, [`DryRunView`]) without
    /// starting it: nothing is written, audited or sent to the host.
    #[serde(default)]
    pub dry_run: bool,
}

/// The job a decommission request asks for, and the host states it may start from.
pub fn decommission_kind(req: &DecommissionRequest) -> Result<(JobKind, &'static [HostLifecycle]), ApiError> {
    use HostLifecycle as L;
    if req.force_release && req.mode != "full" {
        return Err(ApiError::bad_request("forceRelease only applies to mode full"));
    }
    if req.erase.is_some() && !matches!(req.mode.as_str(), "full" | "reimage") {
        return Err(ApiError::bad_request("erase only applies to modes reimage and full"));
    }
    if req.remove_maas_record && req.mode != "full" {
        return Err(ApiError::bad_request("removeMaasRecord only applies to mode full"));
    }
    if req.profile.is_some() && req.mode != "reimage" {
        return Err(ApiError::bad_request("profile only applies to mode reimage"));
    }
    let maas = MaasRelease { erase: req.erase.unwrap_or_default(), remove_maas_record: req.remove_maas_record };
    match req.mode.as_str() {
        "soft_reset" => Ok((JobKind::SoftReset { storage: req.storage.unwrap_or_default() }, &[L::Active, L::Quarantined])),
        "storage_cleanup" => {
            let scope = match req.storage {
                Some(StorageChoice::Local) => StorageScope::Local,
                Some(StorageChoice::Weka) => StorageScope::Weka,
                Some(StorageChoice::All) => StorageScope::All,
                None | Some(StorageChoice::None) => {
                    return Err(ApiError::bad_request("mode storage_cleanup needs storage: local, weka or all"));
                }
            };
            Ok((JobKind::StorageCleanup { scope }, &[L::Active, L::Quarantined]))
        }
        "full" => Ok((
            JobKind::FullDecommission { storage: req.storage, force_release: req.force_release, maas },
            &[L::Active, L::Offline, L::Quarantined, L::Draining, L::Retired],
        )),
        "reimage" => {
            if let Some(p) = &req.profile {
                crate::sites::validate::name("profile", p).map_err(|e| ApiError::bad_request(e.to_string()))?;
            }
            Ok((JobKind::Reimage { storage: req.storage, maas, profile: req.profile.clone() }, &[L::Active, L::Offline, L::Quarantined]))
        }
        other => Err(ApiError::bad_request(format!("mode {other:?} is not one of soft_reset, storage_cleanup, full, reimage"))),
    }
}

/// `POST /v1/hosts/{id}/decommission` (admin): creates the job (201); the executor runs it.
pub async fn decommission(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    Path(id): Path<String>,
    JsonBody(req): JsonBody<DecommissionRequest>,
) -> Result<Response, ApiError> {
    let host_id = parse_uuid("host id", &id)?;
    let reason = check_reason(req.reason.as_deref())?;
    let (kind, allowed) = decommission_kind(&req)?;
    if matches!(kind, JobKind::Reimage { .. }) {
        // The MAAS half needs to know which machine: onboarding through MAAS binds it.
        let bound = store::blocking(app.store.clone(), move |s| s.get_maas_binding(host_id)).await?;
        if bound.is_none() {
            return Err(ApiError::conflict(format!(
                "host {host_id} has no MAAS binding: only a host onboarded through MAAS can be reimaged"
            )));
        }
    }
    if req.dry_run {
        return dry_run(&app, host_id, kind, allowed).await.map(IntoResponse::into_response);
    }
    let now = app.clock.now();
    let new = kind.new_job(host_id, now).map_err(|_| ApiError::internal())?;
    let job_id = new.job_id;
    let audit = audit(&op, now, &format!("job.{}", kind.name()), &job_id.to_string(), &reason, None, JobState::Pending);
    let job = store::blocking(app.store.clone(), move |s| s.create_job_checked(&new, allowed, &[audit])).await?;
    tracing::info!(%job_id, %host_id, kind = kind.name(), operator = %op.name, %reason, "job created");
    app.executor.poke();
    let mut out = with_hostnames(&app, vec![job]).await?;
    Ok((StatusCode::CREATED, Json(out.remove(0))).into_response())
}

/// A decommission's dry run: the checks a real request passes (the host exists, its state
/// allows the job, no unfinished job holds it), read in one snapshot, and the stages.
async fn dry_run(
    app: &Arc<AppState>,
    host_id: Uuid,
    kind: JobKind,
    allowed: &'static [HostLifecycle],
) -> Result<Json<DryRunView>, ApiError> {
    let (host, bound) = store::blocking(app.store.clone(), move |s| {
        s.check_job_start(host_id, allowed)?;
        let host = s.get_host(host_id)?.ok_or_else(|| store::StoreError::not_found("host", host_id))?;
        Ok((host, s.get_maas_binding(host_id)?.is_some()))
    })
    .await?;
    let full = matches!(kind, JobKind::FullDecommission { .. });
    let stages = stages(&kind)
        .into_iter()
        .map(|stage| match stage {
            Stage::MaasWorkflow if full && !bound => format!("{} (nothing to do: the host has no MAAS binding)", stage.as_str()),
            _ => stage.as_str().to_owned(),
        })
        .collect();
    Ok(Json(DryRunView {
        dry_run: true,
        host_id: host.id.to_string(),
        hostname: host.hostname,
        host_state: host.state,
        kind: kind.name().to_owned(),
        stages,
    }))
}

/// An audit row for a job action.
pub fn audit(
    op: &OperatorCaller,
    at: Time,
    action: &str,
    target: &str,
    reason: &str,
    prior: Option<JobState>,
    expected: JobState,
) -> NewAudit {
    NewAudit {
        at,
        actor: op.name.clone(),
        role: op.role.as_str().to_owned(),
        action: action.to_owned(),
        target: target.to_owned(),
        reason: reason.to_owned(),
        prior_state: prior.map(|p| p.as_str().to_owned()),
        expected_state: Some(expected.as_str().to_owned()),
    }
}

/// `GET /v1/jobs` query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobsQuery {
    host: Option<String>,
    state: Option<String>,
    kind: Option<String>,
    limit: Option<u32>,
    after: Option<String>,
}

/// A `kind=` filter: a kind of job the coordinator creates (a filter on anything else would
/// match nothing, and a typo would pass for a quiet fleet).
pub(crate) fn job_kind_filter(kind: &str) -> Result<String, ApiError> {
    if crate::jobs::model::all_job_kinds().any(|k| k == kind) {
        return Ok(kind.to_owned());
    }
    let known: Vec<&str> = crate::jobs::model::all_job_kinds().collect();
    Err(ApiError::bad_request(format!("kind {kind:?} is not a job kind (one of: {})", known.join(", "))))
}

/// `GET /v1/jobs?host=&state=&kind=&limit=&after=` (viewer): jobs oldest first, paged
/// (`items`, `next`).
pub async fn list(
    State(app): State<Arc<AppState>>,
    _r: Reader,
    QueryParams(q): QueryParams<JobsQuery>,
) -> Result<Json<Page<JobJson, String>>, ApiError> {
    let state = q
        .state
        .as_deref()
        .map(|s| {
            JobState::ALL
                .iter()
                .copied()
                .find(|x| x.as_str() == s)
                .ok_or_else(|| ApiError::bad_request(format!("state {s:?} is not a job state")))
        })
        .transpose()?;
    let limit = page_size(q.limit)?;
    let filter = JobFilter {
        host_id: q.host.as_deref().map(|h| parse_uuid("host", h)).transpose()?,
        state,
        kind: q.kind.as_deref().map(job_kind_filter).transpose()?,
        after: q.after.as_deref().map(decode_created_cursor).transpose()?,
        limit,
        ..Default::default()
    };
    let jobs = store::blocking(app.store.clone(), move |s| s.list_jobs(&filter)).await?;
    let next = next_created(&jobs, limit, |j| CreatedCursor { created_at: j.job.created_at, id: j.job.job_id });
    Ok(Json(Page { items: with_hostnames(&app, jobs).await?, next }))
}

/// `GET /v1/jobs/{id}` (viewer): the job and its events.
pub async fn get(State(app): State<Arc<AppState>>, _r: Reader, Path(id): Path<String>) -> Result<Json<JobDetail>, ApiError> {
    let job_id = parse_uuid("job id", &id)?;
    let (job, events) = store::blocking(app.store.clone(), move |s| {
        let job = s.get_job(job_id)?;
        let events = s.list_events(&EventFilter { job_id: Some(job_id), ..Default::default() })?;
        Ok((job, events))
    })
    .await?;
    let job = job.ok_or_else(|| ApiError::not_found(format!("job {job_id} not found")))?;
    let job = with_hostnames(&app, vec![job]).await?.remove(0);
    Ok(Json(JobDetail { job, events: events.into_iter().map(event_view).collect() }))
}

/// `POST /v1/jobs/{id}/{action}` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActionRequest {
    /// Why (required).
    pub reason: Option<String>,
}

/// A job as an action reads it: the job, the record of its current stage's task, its host.
#[derive(Debug, Clone)]
pub struct JobRead {
    /// The job.
    pub job: Job,
    /// The record of `progress.taskId`, when there is one.
    pub task: Option<TaskRecord>,
    /// Its host, while it has a record.
    pub host: Option<Host>,
}

/// Reads `job_id`, its current task and its host in one blocking call (`None`: no such job).
pub async fn read_job(app: &Arc<AppState>, job_id: Uuid) -> Result<Option<JobRead>, ApiError> {
    Ok(store::blocking(app.store.clone(), move |s| {
        let Some(job) = s.get_job(job_id)? else { return Ok(None) };
        let task_id = JobView::from_job(&job).ok().and_then(|v| v.progress.task_id).and_then(|t| Uuid::parse_str(&t).ok());
        let task = task_id.map(|t| s.get_task(t)).transpose()?.flatten();
        let host = job.job.host_id.map(|h| s.get_host(h)).transpose()?.flatten();
        Ok(Some(JobRead { job, task, host }))
    })
    .await?)
}

/// An accepted, persisted operator action.
#[derive(Debug, Clone)]
pub struct ActionTaken {
    /// The job after it.
    pub job: Job,
    /// What the action decided.
    pub outcome: ActionOutcome,
    /// What it did about the task: `none`, `reused ID`, `requeued ID`, `issued ID`.
    pub task_note: String,
}

/// Takes `action` for `op` on a job as `read`: decides it ([`act`]), signs the task it
/// re-issues, and writes — in one transaction, compare-and-set on the job as read — the job's
/// new state and progress, the new or requeued task, the host transition of §3.3's guardrail
/// ([`lifecycle_guard`]: a resumed retire or remove re-enters `draining` / `removing`, a job
/// the action stops leaves them), a `job.action` event (and the decommission domain event),
/// and the action's audit row followed by `extra_audits`. A refused action writes nothing
/// (409 naming the states it is allowed from).
pub async fn take_action(
    app: &Arc<AppState>,
    op: &OperatorCaller,
    read: JobRead,
    action: OperatorAction,
    reason: &str,
    extra_audits: Vec<NewAudit>,
) -> Result<ActionTaken, ApiError> {
    let JobRead { job, task, host } = read;
    let job_id = job.job.job_id;
    let view = JobView::from_job(&job).map_err(|e| ApiError::conflict(format!("job {job_id} does not parse: {e}")))?;
    let now = app.clock.now();
    let creds = match &host {
        Some(h) => crate::jobs::local::maas_creds(app.config.jobs.maas_creds_dir.as_deref(), &h.hostname)
            .map_err(|e| ApiError::conflict(e.to_string()))?,
        None => None,
    };
    let policy = crate::jobs::local::policy(&app.config.jobs, creds);
    let obs = task.as_ref().map(TaskObs::from_record);
    let outcome = act(action, &view, obs.as_ref(), now, &policy.tasks).map_err(|e| ApiError::conflict(e.to_string()))?;
    let mut progress: Progress = outcome.progress.clone();
    let (mut task_row, mut requeue, mut task_note) = (None, None, "none".to_owned());
    match &outcome.task {
        TaskDirective::Reuse(id) => task_note = format!("reused {id}"),
        TaskDirective::Requeue(id) => {
            requeue = Uuid::parse_str(id).ok();
            task_note = format!("requeued {id}");
        }
        TaskDirective::Issue(kind) => {
            let host_id = job.job.host_id.ok_or_else(|| ApiError::conflict("job names no host"))?;
            let (task, row) = crate::api::tasks::seal(app, host_id, Some(job_id), kind.clone(), app.config.jobs.task_ttl_secs).await?;
            progress.bind_task(task.task_id.clone());
            task_note = format!("issued {}", task.task_id);
            task_row = Some(row);
        }
        TaskDirective::None => {}
    }
    let host_id = job.job.host_id.unwrap_or_default();
    let message = format!("{} by {}: {reason} ({}; task {task_note})", action.as_str(), op.name, outcome.progress_change);
    let host_ops: Vec<HostOp> = host
        .as_ref()
        .and_then(|h| {
            let to = lifecycle_guard(&view.kind, outcome.progress.stage, h.state, job.state, outcome.new_state)?;
            Some(HostOp::Transition { host_id: h.id, from: h.state, to, reason: message.clone() })
        })
        .into_iter()
        .collect();
    let domain = crate::jobs::exec::decommission_event(&view.kind, job.state, outcome.new_state).map(|kind| {
        event(now, &kind, host_id, job_id, &message, json!({ "jobId": job_id, "mode": view.kind.name(), "action": action.as_str() }))
    });
    let mut audits = vec![audit(
        op,
        now,
        &format!("job.{}", action.as_str()),
        &job_id.to_string(),
        reason,
        Some(outcome.audit_prior),
        outcome.audit_expected,
    )];
    audits.extend(extra_audits);
    let step = JobStep {
        job_id,
        expected_state: job.state,
        expected_progress: job.progress.clone(),
        new_state: outcome.new_state,
        new_progress: progress.to_value(),
        reason: message.clone(),
        task: task_row,
        requeue_task: requeue,
        host_ops,
        events: vec![event(
            now,
            "job.action",
            host_id,
            job_id,
            &message,
            json!({ "action": action.as_str(), "prior": job.state.as_str(), "state": outcome.new_state.as_str(), "task": task_note }),
        )]
        .into_iter()
        .chain(domain)
        .collect(),
        audits,
        at: now,
    };
    let after = store::blocking(app.store.clone(), move |s| s.apply_job_step(&step)).await?;
    tracing::info!(%job_id, action = action.as_str(), operator = %op.name, prior = %job.state, state = %after.state, task = %task_note, "job action");
    if job.job.host_id.is_some() {
        app.hub.notify(host_id);
    }
    app.executor.poke();
    Ok(ActionTaken { job: after, outcome, task_note })
}

/// `POST /v1/jobs/{id}/{action}` (admin).
pub async fn action(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    Path((id, action)): Path<(String, String)>,
    JsonBody(req): JsonBody<ActionRequest>,
) -> Result<Json<ActionResponse>, ApiError> {
    let job_id = parse_uuid("job id", &id)?;
    let action: OperatorAction = serde_json::from_value(Value::String(action.clone())).map_err(|_| {
        ApiError::not_found(format!(
            "no job action {action:?}: retry_stage, resume, rerun, restart_clean, cancel, adopt_observed_state, mark_manual_intervention_required"
        ))
    })?;
    let reason = check_reason(req.reason.as_deref())?;
    let read = read_job(&app, job_id).await?.ok_or_else(|| ApiError::not_found(format!("job {job_id} not found")))?;
    let ActionTaken { job, outcome, task_note } = take_action(&app, &op, read, action, &reason, Vec::new()).await?;
    let json_job = with_hostnames(&app, vec![job]).await?.remove(0);
    Ok(Json(ActionResponse {
        job: json_job,
        outcome: ActionOutcomeView {
            action: action.as_str().to_owned(),
            prior_state: outcome.audit_prior,
            new_state: outcome.new_state,
            expected_state: outcome.audit_expected,
            progress_change: outcome.progress_change,
            task: task_note,
        },
    }))
}
