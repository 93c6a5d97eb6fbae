//! The drift reconciliation API (`bare-metal-lifecycle.md` §6.6):
//!
//! | route                                              | role   | what                                   |
//! |----------------------------------------------------|--------|----------------------------------------|
//! | `GET /v1/maas/reconciliation/status`               | viewer | ok / drifted / unreconciled per site, with the last pass |
//! | `GET /v1/maas/reconciliation/drift[?site=S]`       | viewer | every bound host with an open drift     |
//! | `POST /v1/maas/reconciliation/drift/{host}/resolve`| admin  | an operator resolves a drift (audited)  |
//! | `POST /v1/maas/reconciliation/run`                 | admin  | a pass now, over one site or all        |
//!
//! Counts come from the store (the bindings), so any replica answers the same; the last
//! pass of each site is this process's. A resolution names what the operator did: `acknowledge`
//! (the default: the drift closes, and is not reopened until the pair has been seen healthy)
//! or `unquarantine` (also returns an auto-quarantined host to service). `{host}` is a host id
//! or hostname.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use drover_proto::states::HostLifecycle;
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::api::auth::{Admin, Reader};
use crate::api::error::{ApiError, JsonBody};
use crate::api::lifecycle::check_reason;
use crate::api::operator::QueryParams;
use crate::app::AppState;
use crate::reconciler;
use crate::store::{self, ChangeLog, NewAudit, NewEvent, ReconcileRow, Site, SiteStatus, StoreError};

pub use drover_proto::api::reconciliation::{DriftList, DriftResolved, DriftView, ReconciliationStatus, RunList, SiteReconciliation};

async fn sites(app: &Arc<AppState>, name: Option<&str>) -> Result<Vec<Site>, ApiError> {
    let Some(n) = name.map(str::to_owned) else { return Ok(store::blocking(app.store.clone(), |s| s.list_sites()).await?) };
    let one = store::blocking(app.store.clone(), move |s| s.get_site_by_name(&n)).await?;
    one.map(|s| vec![s]).ok_or_else(|| ApiError::not_found(format!("site {} does not exist", name.unwrap_or_default())))
}

async fn rows(app: &Arc<AppState>, site: Uuid) -> Result<Vec<ReconcileRow>, ApiError> {
    Ok(store::blocking(app.store.clone(), move |s| s.maas_reconcile_snapshot(site)).await?)
}

/// `GET /v1/maas/reconciliation/status` (viewer).
pub async fn status(State(app): State<Arc<AppState>>, Reader(_): Reader) -> Result<Json<ReconciliationStatus>, ApiError> {
    let mut out = Vec::new();
    for site in sites(&app, None).await? {
        let rows = rows(&app, site.id).await?;
        let drifted = rows.iter().filter(|r| r.binding.drift.is_some()).count() as u64;
        let unreconciled = rows.iter().filter(|r| r.binding.drift.is_none() && r.binding.observed.is_none()).count() as u64;
        out.push(SiteReconciliation {
            site: site.name.clone(),
            status: site.status.as_str().to_owned(),
            ok: rows.len() as u64 - drifted - unreconciled,
            drifted,
            unreconciled,
            last_run: app.reconciler.last(site.id),
        });
    }
    Ok(Json(ReconciliationStatus { sites: out }))
}

/// `?site=` of the drift listing.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DriftQuery {
    site: Option<String>,
}

/// A drifted host as the API shows it. Its details are stored as the JSON this coordinator
/// wrote; details that no longer read as such (an older build's) show as `null` rather than
/// failing the listing.
fn drift_view(site: &str, r: &ReconcileRow) -> DriftView {
    let b = &r.binding;
    let details = crate::api::operator::stored_as("drift details", b.host_id, b.drift.as_ref());
    DriftView {
        host_id: b.host_id.to_string(),
        hostname: r.hostname.clone(),
        site: site.to_owned(),
        system_id: b.system_id.clone(),
        state: r.state,
        schedulable: r.schedulable,
        last_maas_status: b.observed.as_ref().map(|o| o.status.clone()),
        last_power_state: b.observed.as_ref().map(|o| o.power_state.clone()),
        last_ips: b.observed.as_ref().map(|o| o.ips.clone()).unwrap_or_default(),
        last_reconciled_at: b.observed.as_ref().map(|o| o.at),
        drift_detected: b.drift.is_some(),
        drift_details: details,
        drift_detected_at: b.drift_detected_at,
        drift_resolved_at: b.drift_resolved_at,
    }
}

/// `GET /v1/maas/reconciliation/drift` (viewer): hosts with an open drift, by site then
/// hostname.
pub async fn drift(
    State(app): State<Arc<AppState>>,
    Reader(_): Reader,
    QueryParams(q): QueryParams<DriftQuery>,
) -> Result<Json<DriftList>, ApiError> {
    let mut out = Vec::new();
    for site in sites(&app, q.site.as_deref()).await? {
        let mut rows: Vec<ReconcileRow> = rows(&app, site.id).await?.into_iter().filter(|r| r.binding.drift.is_some()).collect();
        rows.sort_by(|a, b| a.hostname.cmp(&b.hostname));
        out.extend(rows.iter().map(|r| drift_view(&site.name, r)));
    }
    Ok(Json(DriftList { drift: out }))
}

/// What the operator did about a drift.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Resolution {
    /// Seen and handled outside Drover; close the drift.
    #[default]
    Acknowledge,
    /// Close it and return the auto-quarantined host to service (quarantined → active,
    /// schedulable again).
    Unquarantine,
}

/// The resolve body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResolveRequest {
    /// Why (required; recorded in the event and the audit).
    reason: Option<String>,
    /// What was done (default `acknowledge`).
    #[serde(default)]
    action: Resolution,
}

/// `{host}`: an id (tried first, by the rule every "id or name" lookup shares) or a hostname.
async fn host_id(app: &Arc<AppState>, key: &str) -> Result<Uuid, ApiError> {
    if let Some(id) = drover_proto::names::as_id(key) {
        return Ok(id);
    }
    let name = key.to_ascii_lowercase();
    let host = store::blocking(app.store.clone(), move |s| s.get_host_by_hostname(&name)).await?;
    host.map(|h| h.id).ok_or_else(|| ApiError::not_found(format!("host {key} not found")))
}

/// `POST /v1/maas/reconciliation/drift/{host}/resolve` (admin).
pub async fn resolve(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    Path(key): Path<String>,
    JsonBody(req): JsonBody<ResolveRequest>,
) -> Result<Json<DriftResolved>, ApiError> {
    let reason = check_reason(req.reason.as_deref())?;
    let id = host_id(&app, &key).await?;
    let at = app.clock.now();
    let action = req.action;
    let (actor, role) = (op.name.clone(), op.role.as_str().to_owned());
    let why = reason.clone();
    let (binding, host) = store::blocking(app.store.clone(), move |s| {
        let Some(host) = s.get_host(id)? else { return Ok(Err(ApiError::not_found(format!("host {id} not found")))) };
        let Some(current) = s.get_maas_binding(id)? else {
            return Ok(Err(ApiError::not_found(format!("host {} is not bound to a MAAS machine", host.hostname))));
        };
        let Some(details) = current.drift.clone() else {
            return Ok(Err(ApiError::conflict(format!("host {} has no open drift to resolve", host.hostname))));
        };
        if action == Resolution::Unquarantine && host.state != HostLifecycle::Quarantined {
            return Ok(Err(ApiError::conflict(format!(
                "host {} is {}, not quarantined: resolve with action acknowledge",
                host.hostname, host.state
            ))));
        }
        let verb = match action {
            Resolution::Acknowledge => "acknowledge",
            Resolution::Unquarantine => "unquarantine",
        };
        let log = ChangeLog {
            event: NewEvent {
                at,
                kind: "maas.drift.resolved".into(),
                host_id: Some(id),
                rollout_id: None,
                job_id: None,
                message: format!("{}: drift resolved by {actor} ({verb}): {why}", host.hostname),
                data: json!({"severity": "info", "action": verb, "drift": details, "siteId": current.site_id.to_string()}),
            },
            audit: NewAudit {
                at,
                actor: actor.clone(),
                role,
                action: format!("maas.drift.resolve.{verb}"),
                target: id.to_string(),
                reason: why.clone(),
                prior_state: details.get("rule").and_then(Value::as_str).map(str::to_owned),
                expected_state: Some("resolved".into()),
            },
        };
        let binding = s.resolve_maas_drift(id, at, &log)?;
        let mut host = host;
        if action == Resolution::Unquarantine {
            let reason = format!("drift resolved by {actor}: {why}");
            s.transition_host(id, HostLifecycle::Quarantined, HostLifecycle::Active, &reason, at)?;
            host = s.set_schedulable(id, true, &reason, at)?;
        }
        Ok(Ok((binding, host)))
    })
    .await
    .map_err(|e| match e {
        StoreError::StaleState { .. } => ApiError::conflict("the host changed while the request ran; read it again and retry"),
        other => ApiError::from(other),
    })??;
    tracing::info!(host_id = %id, operator = %op.name, action = ?action, %reason, "MAAS drift resolved");
    Ok(Json(DriftResolved {
        host_id: id.to_string(),
        hostname: host.hostname,
        state: host.state,
        schedulable: host.schedulable,
        action: match action {
            Resolution::Acknowledge => "acknowledge",
            Resolution::Unquarantine => "unquarantine",
        }
        .to_owned(),
        drift_resolved_at: binding.drift_resolved_at,
    }))
}

/// The run body.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunRequest {
    /// One site by name (default: every active site).
    site: Option<String>,
}

/// `POST /v1/maas/reconciliation/run` (admin): runs a pass now (after any running one) and
/// answers with it.
pub async fn run(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    JsonBody(req): JsonBody<RunRequest>,
) -> Result<Json<RunList>, ApiError> {
    let chosen = sites(&app, req.site.as_deref()).await?;
    if let Some(site) = chosen.iter().find(|s| req.site.is_some() && s.status != SiteStatus::Active) {
        return Err(ApiError::conflict(format!("site {} is {}: enable it to reconcile it", site.name, site.status.as_str())));
    }
    let active: Vec<Site> = chosen.into_iter().filter(|s| s.status == SiteStatus::Active).collect();
    tracing::info!(operator = %op.name, sites = active.len(), "MAAS reconciliation asked for");
    let mut runs = Vec::new();
    for site in &active {
        runs.push(reconciler::pass(&app, site).await);
    }
    Ok(Json(RunList { runs }))
}
