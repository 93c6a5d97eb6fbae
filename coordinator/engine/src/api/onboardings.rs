//! Onboarding routes (`bare-metal-lifecycle.md` §4.1, §4.15): `POST /v1/maas/onboardings`
//! and `/v1/maas/onboardings/batch` (admin) start onboardings after a preflight of the site
//! (active, MAAS reachable, token accepted, profile active); `GET /v1/maas/onboardings`
//! (filters `batch`, `host`, `state`, `site`), `GET /v1/maas/onboardings/{id}` and
//! `GET /v1/maas/onboardings/batches/{id}` (viewer) show them; `POST
//! /v1/maas/onboardings/{id}/{action}` (admin) takes a recovery action — the jobs' names
//! (`retry_stage`, `resume`, `rerun`, `restart_clean`, `cancel`, `adopt_observed_state`,
//! `mark_manual_intervention_required`) — audited with actor, role, reason, prior state and
//! stage, and the expected state; a refused action writes nothing and answers 409.
//!
//! A request naming a hostname or BMC address that an unfinished onboarding already holds
//! is refused (409): two workflows must never race for one machine.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use drover_proto::states::{HostLifecycle, JobState};
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::api::auth::{Admin, OperatorCaller, Reader};
use crate::api::error::{ApiError, JsonBody};
use crate::api::lifecycle::check_reason;
use crate::api::operator::{QueryParams, parse_uuid};
use crate::app::AppState;
use crate::jobs::OperatorAction;
use crate::maasflow::onboard::{KIND, OnboardingRequest};
use crate::maasflow::recovery::{self, ActionContext};
use crate::maasflow::taxonomy::Workflow;
use crate::sites::preflight;
use crate::sites::validate;
use crate::store::{self, Job, JobFilter, JobStep, NewAudit, NewEvent, NewJob};

/// Most nodes in one batch.
pub const MAX_BATCH: usize = 1000;

pub use drover_proto::api::onboardings::{
    BatchView, CreatedBatch, OnboardingActionResponse, OnboardingEvent, OnboardingList, OnboardingView, OneOnboarding,
};

/// A stored MAAS workflow job as the API shows it; `None` when it does not parse.
pub fn onboarding_view(job: &Job) -> Option<OnboardingView> {
    let (req, p) = crate::onboarding::exec::parse(job).ok()?;
    let workflow = Workflow::of_kind(&job.job.kind)?;
    Some(OnboardingView {
        onboarding_id: job.job.job_id.to_string(),
        batch_id: req.batch_id.map(|b| b.to_string()),
        site: req.site,
        profile: req.profile,
        sku: req.sku,
        hostname: req.hostname,
        ipmi_ip: req.ipmi_ip,
        pxe_mac: req.pxe_mac,
        state: job.state,
        stage: p.stage.as_str().to_owned(),
        stage_index: p.stage_index(workflow),
        stages: workflow.stages().iter().map(|s| s.as_str().to_owned()).collect(),
        attempt: p.attempt,
        system_id: p.system_id,
        host_id: p.host_id.map(|h| h.to_string()),
        failure_class: p.failure_class.map(|c| c.as_str().to_owned()),
        message: p.message,
        recommended_action: p.recommended_action,
        diagnostics: p.diagnostics,
        requester: req.requester,
        created_at: job.job.created_at,
        started_at: p.started_at,
        completed_at: matches!(job.state, JobState::Completed | JobState::Reconciled | JobState::Cancelled).then_some(job.updated_at),
        updated_at: job.updated_at,
        events: p
            .events
            .into_iter()
            .map(|e| OnboardingEvent {
                stage: e.stage.as_str().to_owned(),
                status: e.status.as_str().to_owned(),
                attempt: e.attempt,
                at: e.at,
                details: e.details,
            })
            .collect(),
        workflow: workflow.name().to_owned(),
        parent_job_id: req.parent_job_id.map(|j| j.to_string()),
    })
}

/// One node of a request.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeRequest {
    /// Hostname.
    pub hostname: String,
    /// BMC address.
    pub ipmi_ip: String,
    /// PXE MAC, when known.
    #[serde(default)]
    pub pxe_mac: Option<String>,
}

/// `POST /v1/maas/onboardings`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateRequest {
    /// The site, by name or id (recorded by name).
    pub site: String,
    /// The site's profile, by name or id (recorded by name).
    pub profile: String,
    /// Hardware SKU.
    #[serde(default)]
    pub sku: Option<String>,
    /// Hostname.
    pub hostname: String,
    /// BMC address.
    pub ipmi_ip: String,
    /// PXE MAC.
    #[serde(default)]
    pub pxe_mac: Option<String>,
}

/// `POST /v1/maas/onboardings/batch`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BatchRequest {
    /// The site, by name or id (recorded by name).
    pub site: String,
    /// The site's profile, by name or id (recorded by name).
    pub profile: String,
    /// Hardware SKU.
    #[serde(default)]
    pub sku: Option<String>,
    /// The nodes.
    pub nodes: Vec<NodeRequest>,
}

fn bad(e: validate::FieldError) -> ApiError {
    ApiError::bad_request(e.to_string())
}

fn check_node(i: Option<usize>, n: &NodeRequest) -> Result<NodeRequest, ApiError> {
    let at = |f: &str| i.map_or(f.to_owned(), |i| format!("nodes[{i}].{f}"));
    let hostname = validate::hostname(&at("hostname"), &n.hostname).map_err(bad)?;
    // The host this onboarding creates is named by hostname or id, the id tried first.
    drover_proto::names::check_not_an_id("hostname", &hostname)?;
    Ok(NodeRequest {
        hostname,
        ipmi_ip: validate::ip(&at("ipmiIp"), &n.ipmi_ip).map_err(bad)?,
        pxe_mac: n.pxe_mac.as_deref().map(|m| validate::mac(&at("pxeMac"), m)).transpose().map_err(bad)?,
    })
}

fn check_sku(sku: Option<&str>) -> Result<Option<String>, ApiError> {
    match sku.map(str::trim) {
        None | Some("") => Ok(None),
        Some(s) if s.len() <= 64 && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) => Ok(Some(s.to_owned())),
        Some(_) => Err(ApiError::bad_request("sku must be 1-64 of letters, digits, - _ .")),
    }
}

/// The preflight of §4.14 for a new request: the site active, its MAAS reachable with its
/// token, the profile active. Answers the site's and the profile's names, which the request
/// records: the onboarding then works on the very site and profile checked here, even when
/// they were given by id (the executor loads them by name).
async fn preflight_for(app: &Arc<AppState>, site: &str, profile: &str) -> Result<(String, String), ApiError> {
    let s = crate::api::sites::load_site(app, site).await?;
    let p = crate::api::site_items::load_profile(app, &s, profile).await?;
    preflight::preflight(app.store.clone(), &*app.secrets, &*app.maas, s.id, Some(p.id), &[], crate::api::sites::MAAS_CALL_TIMEOUT)
        .await
        .map_err(|f| {
        let class = serde_json::to_value(&f).ok().and_then(|v| v.get("class").and_then(Value::as_str).map(str::to_owned));
        ApiError::conflict(format!("preflight failed ({}): {}", class.unwrap_or_default(), f.message))
    })?;
    Ok((s.name, p.name))
}

/// Creates the onboardings (one job each), refusing hostnames or BMC addresses an unfinished
/// onboarding holds.
async fn create(app: &Arc<AppState>, op: &OperatorCaller, reqs: Vec<OnboardingRequest>) -> Result<Vec<Job>, ApiError> {
    let now = app.clock.now();
    let actor = op.name.clone();
    let role = op.role.as_str().to_owned();
    let jobs = store::blocking(app.store.clone(), move |s| {
        let open = s.list_jobs(&JobFilter { kind: Some(KIND.to_owned()), unfinished: true, ..Default::default() })?;
        let mut held = BTreeSet::new();
        for j in &open {
            if let Ok(r) = serde_json::from_value::<OnboardingRequest>(j.job.input.clone()) {
                held.insert(r.hostname);
                held.insert(r.ipmi_ip);
            }
        }
        if let Some(r) = reqs.iter().find(|r| held.contains(&r.hostname) || held.contains(&r.ipmi_ip)) {
            return Err(store::StoreError::conflict(
                "onboarding",
                &r.hostname,
                format!("an unfinished onboarding already holds {} or {}", r.hostname, r.ipmi_ip),
            ));
        }
        let mut out = Vec::new();
        for r in &reqs {
            let new = NewJob {
                job_id: Uuid::new_v4(),
                kind: KIND.to_owned(),
                host_id: None,
                input: serde_json::to_value(r).map_err(store::StoreError::backend)?,
                created_at: now,
                request_id: None,
            };
            let job = s.create_job(&new)?;
            s.append_audit(&NewAudit {
                at: now,
                actor: actor.clone(),
                role: role.clone(),
                action: "onboarding.create".into(),
                target: job.job.job_id.to_string(),
                reason: format!("onboard {} ({}) on site {} with profile {}", r.hostname, r.ipmi_ip, r.site, r.profile),
                prior_state: None,
                expected_state: Some(JobState::Pending.as_str().into()),
            })?;
            out.push(job);
        }
        Ok(out)
    })
    .await?;
    tracing::info!(count = jobs.len(), operator = %op.name, "onboardings created");
    Ok(jobs)
}

fn request_of(
    op: &OperatorCaller,
    site: &str,
    profile: &str,
    sku: Option<String>,
    n: NodeRequest,
    batch: Option<Uuid>,
) -> OnboardingRequest {
    OnboardingRequest {
        site: site.to_owned(),
        profile: profile.to_owned(),
        sku,
        hostname: n.hostname,
        ipmi_ip: n.ipmi_ip,
        pxe_mac: n.pxe_mac,
        batch_id: batch,
        requester: Some(format!("{} ({})", op.name, op.role.as_str())),
        host_id: None,
        system_id: None,
        parent_job_id: None,
        erase: Default::default(),
        remove_maas_record: false,
    }
}

fn views(jobs: &[Job]) -> Vec<OnboardingView> {
    jobs.iter().filter_map(onboarding_view).collect()
}

/// `POST /v1/maas/onboardings` (admin).
pub async fn create_one(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    JsonBody(req): JsonBody<CreateRequest>,
) -> Result<(StatusCode, Json<OneOnboarding>), ApiError> {
    let node = check_node(None, &NodeRequest { hostname: req.hostname, ipmi_ip: req.ipmi_ip, pxe_mac: req.pxe_mac })?;
    let sku = check_sku(req.sku.as_deref())?;
    let (site, profile) = preflight_for(&app, &req.site, &req.profile).await?;
    let jobs = create(&app, &op, vec![request_of(&op, &site, &profile, sku, node, None)]).await?;
    let one = views(&jobs).into_iter().next().ok_or_else(ApiError::internal)?;
    Ok((StatusCode::CREATED, Json(OneOnboarding { onboarding: one })))
}

/// `POST /v1/maas/onboardings/batch` (admin).
pub async fn create_batch(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    JsonBody(req): JsonBody<BatchRequest>,
) -> Result<(StatusCode, Json<CreatedBatch>), ApiError> {
    if req.nodes.is_empty() || req.nodes.len() > MAX_BATCH {
        return Err(ApiError::bad_request(format!("nodes must list 1 to {MAX_BATCH} nodes")));
    }
    let sku = check_sku(req.sku.as_deref())?;
    let mut seen = BTreeMap::new();
    let mut nodes = Vec::new();
    for (i, n) in req.nodes.iter().enumerate() {
        let n = check_node(Some(i), n)?;
        for key in [&n.hostname, &n.ipmi_ip] {
            if let Some(first) = seen.insert(key.clone(), i) {
                return Err(ApiError::bad_request(format!("nodes[{i}]: {key} is already in nodes[{first}]")));
            }
        }
        nodes.push(n);
    }
    let (site, profile) = preflight_for(&app, &req.site, &req.profile).await?;
    let batch = Uuid::new_v4();
    let reqs = nodes.into_iter().map(|n| request_of(&op, &site, &profile, sku.clone(), n, Some(batch))).collect();
    let jobs = create(&app, &op, reqs).await?;
    Ok((StatusCode::CREATED, Json(CreatedBatch { batch_id: batch.to_string(), onboardings: views(&jobs) })))
}

/// Filters of `GET /v1/maas/onboardings`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Batch id.
    pub batch: Option<String>,
    /// Hostname.
    pub host: Option<String>,
    /// Job state.
    pub state: Option<String>,
    /// Site name.
    pub site: Option<String>,
    /// onboard (the default) | reimage | decommission | all.
    pub workflow: Option<String>,
}

/// Every MAAS workflow (onboardings, and the MAAS halves of reimages and decommissions).
async fn all(app: &Arc<AppState>) -> Result<Vec<OnboardingView>, ApiError> {
    let jobs = store::blocking(app.store.clone(), |s| {
        let mut jobs = Vec::new();
        for w in Workflow::ALL {
            jobs.extend(s.list_jobs(&JobFilter { kind: Some(w.kind().to_owned()), ..Default::default() })?);
        }
        Ok(jobs)
    })
    .await?;
    Ok(views(&jobs))
}

/// `GET /v1/maas/onboardings` (viewer).
pub async fn list(
    State(app): State<Arc<AppState>>,
    Reader(_): Reader,
    QueryParams(q): QueryParams<ListQuery>,
) -> Result<Json<OnboardingList>, ApiError> {
    let batch = q.batch.as_deref().map(|b| parse_uuid("batch", b)).transpose()?;
    let state = q
        .state
        .as_deref()
        .map(|s| s.parse::<JobState>().map_err(|_| ApiError::bad_request(format!("state {s:?} is not a job state"))))
        .transpose()?;
    let host = q.host.as_deref().map(str::to_ascii_lowercase);
    let workflow = match q.workflow.as_deref() {
        None | Some("onboard") => Some(Workflow::Onboard),
        Some("reimage") => Some(Workflow::Reimage),
        Some("decommission") => Some(Workflow::Decommission),
        Some("resync") => Some(Workflow::Resync),
        Some("all") => None,
        Some(other) => {
            return Err(ApiError::bad_request(format!("workflow {other:?} is not onboard, reimage, decommission, resync or all")));
        }
    };
    let rows: Vec<OnboardingView> = all(&app)
        .await?
        .into_iter()
        .filter(|o| workflow.is_none_or(|w| o.workflow == w.name()))
        .filter(|o| batch.is_none_or(|b| o.batch_id == Some(b.to_string())))
        .filter(|o| state.is_none_or(|s| o.state == s))
        .filter(|o| host.as_deref().is_none_or(|h| o.hostname == h))
        .filter(|o| q.site.as_deref().is_none_or(|s| o.site == s))
        .collect();
    Ok(Json(OnboardingList { onboardings: rows }))
}

async fn load(app: &Arc<AppState>, id: &str) -> Result<Job, ApiError> {
    let id = parse_uuid("onboarding id", id)?;
    let job = store::blocking(app.store.clone(), move |s| s.get_job(id)).await?;
    // The MAAS halves of reimage and full decommission are read and recovered here too.
    job.filter(|j| Workflow::of_kind(&j.job.kind).is_some()).ok_or_else(|| ApiError::not_found(format!("MAAS workflow {id} not found")))
}

/// `GET /v1/maas/onboardings/{id}` (viewer).
pub async fn get(State(app): State<Arc<AppState>>, Reader(_): Reader, Path(id): Path<String>) -> Result<Json<OneOnboarding>, ApiError> {
    let job = load(&app, &id).await?;
    let view = onboarding_view(&job).ok_or_else(|| ApiError::conflict(format!("onboarding {id} does not parse")))?;
    Ok(Json(OneOnboarding { onboarding: view }))
}

/// `GET /v1/maas/onboardings/batches/{id}` (viewer): the batch summary.
pub async fn batch(State(app): State<Arc<AppState>>, Reader(_): Reader, Path(id): Path<String>) -> Result<Json<BatchView>, ApiError> {
    let batch = parse_uuid("batch id", &id)?;
    let batch_id = batch.to_string();
    let rows: Vec<OnboardingView> = all(&app).await?.into_iter().filter(|o| o.batch_id.as_ref() == Some(&batch_id)).collect();
    if rows.is_empty() {
        return Err(ApiError::not_found(format!("batch {batch} not found")));
    }
    let mut counts: BTreeMap<JobState, u64> = BTreeMap::new();
    for o in &rows {
        *counts.entry(o.state).or_default() += 1;
    }
    Ok(Json(BatchView { batch_id, site: rows[0].site.clone(), total: rows.len() as u64, counts, onboardings: rows }))
}

/// The body of an action.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ActionRequest {
    /// Why (required).
    pub reason: Option<String>,
    /// For `adopt_observed_state` of a stopped discovery: the machine to claim.
    #[serde(default)]
    pub system_id: Option<String>,
}

/// `POST /v1/maas/onboardings/{id}/{action}` (admin).
pub async fn action(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    Path((id, action)): Path<(String, String)>,
    JsonBody(req): JsonBody<ActionRequest>,
) -> Result<Json<OnboardingActionResponse>, ApiError> {
    let action: OperatorAction = serde_json::from_value(Value::String(action.clone())).map_err(|_| {
        ApiError::not_found(format!(
            "no onboarding action {action:?}: retry_stage, resume, rerun, restart_clean, cancel, adopt_observed_state, mark_manual_intervention_required"
        ))
    })?;
    let reason = check_reason(req.reason.as_deref())?;
    let adopt = match req.system_id.as_deref() {
        Some(s) if !s.is_empty() && s.len() <= 32 && s.chars().all(|c| c.is_ascii_alphanumeric()) => Some(s.to_owned()),
        Some(_) => return Err(ApiError::bad_request("systemId must be MAAS's alphanumeric machine id")),
        None => None,
    };
    let job = load(&app, &id).await?;
    let (_, progress) = crate::onboarding::exec::parse(&job).map_err(|e| ApiError::conflict(format!("onboarding does not parse: {e}")))?;
    let host_active = match progress.host_id {
        Some(h) => store::blocking(app.store.clone(), move |s| s.get_host(h)).await?.is_some_and(|h| h.state == HostLifecycle::Active),
        None => false,
    };
    let now = app.clock.now();
    let ctx = ActionContext { host_active, adopt_system_id: adopt };
    let accepted = recovery::act(action, job.state, &progress, &ctx, now).map_err(|e| ApiError::conflict(e.to_string()))?;
    let job_id = job.job.job_id;
    let step = JobStep {
        job_id,
        expected_state: job.state,
        expected_progress: job.progress.clone(),
        new_state: accepted.state,
        new_progress: accepted.progress.to_value(),
        reason: format!("{} by {}: {reason}", action.as_str(), op.name),
        task: None,
        requeue_task: None,
        host_ops: Vec::new(),
        events: vec![NewEvent {
            at: now,
            kind: "onboarding.action".into(),
            host_id: progress.host_id,
            rollout_id: None,
            job_id: Some(job_id),
            message: format!("{} by {}: {reason}", action.as_str(), op.name),
            data: json!({ "action": action.as_str(), "from": job.state, "to": accepted.state, "stage": progress.stage }),
        }],
        audits: vec![NewAudit {
            at: now,
            actor: op.name.clone(),
            role: op.role.as_str().to_owned(),
            action: format!("onboarding.{}", action.as_str()),
            target: job_id.to_string(),
            reason,
            prior_state: Some(format!("{} at {}", job.state.as_str(), progress.stage.as_str())),
            expected_state: Some(accepted.state.as_str().to_owned()),
        }],
        at: now,
    };
    let after = store::blocking(app.store.clone(), move |s| s.apply_job_step(&step)).await?;
    let view = onboarding_view(&after).ok_or_else(ApiError::internal)?;
    Ok(Json(OnboardingActionResponse { onboarding: view, message: accepted.message }))
}
