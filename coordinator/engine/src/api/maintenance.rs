//! On-demand maintenance (`rack-on-demand-maintenance.md`, for hosts): `POST /v1/maintenance`
//! (admin) asks for a list of activities on a scope of hosts; `GET /v1/maintenance[/{id}]`
//! (viewer) shows requests with their jobs.
//!
//! - **Scope**: a group label (a host tag of the latest release's fleet spec, e.g. a rack)
//!   and/or host ids. Host ids alone name those hosts; a group alone means every enrolled host
//!   of the group; both: the ids, each of which must be in the group.
//! - **Activities**: gpu_scrub, storage_cleanup, validate_clean, hw_sync_reseed, activate
//!   (re-apply the channel's current target); empty means all. They run in that order.
//! - **Preconditions**, all-or-nothing like `SetPowerShelfMaintenance`: every host active or
//!   quarantined, none with maintenance (or any other job) pending, no malformed or repeated
//!   id, at most `jobs.max_hosts_per_request` hosts, MAAS credentials present for every host
//!   when `hw_sync_reseed` is asked for. One refusal refuses the whole request and nothing
//!   changes; otherwise the request and one job per host are written in one transaction.
//! - **Initiator**: "<user> (<reference>)", "<user>", "<reference>", or "drover-cli".
//! - A failed job clears its host's request (the job stays failed, for the record, and
//!   nothing re-enters it): a new request on that host supersedes it. A request completes only
//!   when every job completed on real task results.

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
pub use drover_proto::api::maintenance::{MaintenanceScope, MaintenanceState, MaintenanceView};
use drover_proto::states::{HostLifecycle, JobState};
use drover_proto::task::StorageScope;
use serde::Deserialize;
use uuid::Uuid;

use crate::api::auth::{Admin, Reader};
use crate::api::error::{ApiError, JsonBody};
use crate::api::jobs::{JobJson, audit, with_hostnames};
use crate::api::lifecycle::check_reason;
use crate::api::operator::{Page, QueryParams, decode_created_cursor, next_created, page_size, parse_uuid};
use crate::app::AppState;
use crate::jobs::exec::FleetView;
use crate::jobs::{Activity, JobKind};
use crate::store::{self, CreatedCursor, JobFilter, MaintenanceFilter, MaintenanceRecord, NewJob, NewMaintenance};

/// Who asked, composed like the power-shelf handler's initiator column.
pub fn initiator(user: Option<&str>, reference: Option<&str>) -> String {
    let user = user.map(str::trim).filter(|u| !u.is_empty());
    let reference = reference.map(str::trim).filter(|r| !r.is_empty());
    match (user, reference) {
        (Some(u), Some(r)) => format!("{u} ({r})"),
        (Some(u), None) => u.to_owned(),
        (None, Some(r)) => r.to_owned(),
        (None, None) => "drover-cli".to_owned(),
    }
}

/// `POST /v1/maintenance` body.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MaintenanceRequest {
    /// A group label (a host tag in the fleet spec).
    #[serde(default)]
    pub group: Option<String>,
    /// Host ids (UUIDs).
    #[serde(default)]
    pub hosts: Vec<String>,
    /// Activities; empty means all.
    #[serde(default)]
    pub activities: Vec<Activity>,
    /// Scope of the storage cleanup activity (default all).
    #[serde(default)]
    pub storage: Option<StorageScope>,
    /// A ticket or issue reference, recorded in the initiator.
    #[serde(default)]
    pub reference: Option<String>,
    /// Why (required).
    pub reason: Option<String>,
}

/// Longest reference accepted.
const MAX_REFERENCE_CHARS: usize = 200;

/// Parses the explicit host ids: every one a UUID, none repeated.
pub fn parse_ids(ids: &[String]) -> Result<Vec<Uuid>, ApiError> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(ids.len());
    for raw in ids {
        let id = Uuid::parse_str(raw.trim()).map_err(|_| ApiError::bad_request(format!("host id {raw:?} is malformed (not a UUID)")))?;
        if !seen.insert(id) {
            return Err(ApiError::bad_request(format!("host id {id} is listed twice")));
        }
        out.push(id);
    }
    Ok(out)
}

/// `POST /v1/maintenance` (admin).
pub async fn request(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    JsonBody(req): JsonBody<MaintenanceRequest>,
) -> Result<(StatusCode, Json<MaintenanceView>), ApiError> {
    let reason = check_reason(req.reason.as_deref())?;
    if let Some(r) = &req.reference
        && (r.chars().count() > MAX_REFERENCE_CHARS || !drover_proto::text::is_plain(r))
    {
        return Err(ApiError::bad_request(format!(
            "reference must be at most {MAX_REFERENCE_CHARS} characters without control characters"
        )));
    }
    let group = req.group.as_deref().map(str::trim).filter(|g| !g.is_empty()).map(str::to_owned);
    let ids = parse_ids(&req.hosts)?;
    if group.is_none() && ids.is_empty() {
        return Err(ApiError::bad_request("a maintenance request needs a scope: a group label, host ids, or both"));
    }
    let max = app.config.jobs.max_hosts_per_request;
    if ids.len() > max {
        return Err(ApiError::bad_request(format!("{} hosts listed; at most {max} per request (jobs.max_hosts_per_request)", ids.len())));
    }
    let mut activities: Vec<Activity> = req.activities.clone();
    activities.sort();
    activities.dedup();

    // Resolve the scope to host records.
    let members: Option<BTreeSet<String>> = match &group {
        Some(g) => {
            let fleet = FleetView::load(&app).await;
            let m: BTreeSet<String> = fleet.tags.iter().filter(|(_, t)| t.iter().any(|x| x == g)).map(|(h, _)| h.clone()).collect();
            if m.is_empty() {
                return Err(ApiError::not_found(format!("no host of the latest release carries the group label {g:?}")));
            }
            Some(m)
        }
        None => None,
    };
    let ids_for_lookup = ids.clone();
    let members_for_lookup = members.clone();
    let hosts = store::blocking(app.store.clone(), move |s| {
        let mut out = Vec::new();
        if ids_for_lookup.is_empty() {
            for name in members_for_lookup.iter().flatten() {
                if let Some(h) = s.get_host_by_hostname(name)? {
                    out.push(Ok(h));
                }
            }
        } else {
            for id in &ids_for_lookup {
                out.push(s.get_host(*id)?.ok_or(*id));
            }
        }
        Ok(out)
    })
    .await?;
    let mut resolved = Vec::new();
    for h in hosts {
        let h = h.map_err(|id| ApiError::not_found(format!("host {id} not found; nothing was requested")))?;
        if let Some(m) = &members
            && !m.contains(&h.hostname)
        {
            return Err(ApiError::conflict(format!(
                "host {} ({}) is not in group {:?}; nothing was requested",
                h.id,
                h.hostname,
                group.as_deref().unwrap_or_default()
            )));
        }
        resolved.push(h);
    }
    if resolved.is_empty() {
        return Err(ApiError::conflict("the group has no enrolled host; nothing was requested"));
    }
    if resolved.len() > max {
        return Err(ApiError::bad_request(format!(
            "the scope has {} hosts; at most {max} per request (jobs.max_hosts_per_request)",
            resolved.len()
        )));
    }
    let reseed = activities.is_empty() || activities.contains(&Activity::HwSyncReseed);
    if reseed {
        for h in &resolved {
            let creds = crate::jobs::local::maas_creds(app.config.jobs.maas_creds_dir.as_deref(), &h.hostname)
                .map_err(|e| ApiError::conflict(format!("{e}; nothing was requested")))?;
            if creds.is_none() {
                return Err(ApiError::conflict(format!(
                    "hw_sync_reseed asked for, but host {} ({}) has no MAAS credentials (jobs.maas_creds_dir); nothing was requested",
                    h.id, h.hostname
                )));
            }
        }
    }

    let now = app.clock.now();
    let request_id = Uuid::new_v4();
    let kind = JobKind::Maintenance { activities: activities.clone(), storage: req.storage.unwrap_or(StorageScope::All) };
    let input = serde_json::to_value(&kind).map_err(|_| ApiError::internal())?;
    let jobs: Vec<NewJob> = resolved
        .iter()
        .map(|h| NewJob {
            job_id: Uuid::new_v4(),
            kind: kind.name().to_owned(),
            host_id: Some(h.id),
            input: input.clone(),
            created_at: now,
            request_id: Some(request_id),
        })
        .collect();
    let who = initiator(Some(&op.name), req.reference.as_deref());
    let scope = MaintenanceScope { group: group.clone(), hosts: resolved.iter().map(|h| h.id.to_string()).collect() };
    let scope = serde_json::to_value(&scope).map_err(|_| ApiError::internal())?;
    let new = NewMaintenance {
        request_id,
        initiator: who.clone(),
        reason: reason.clone(),
        scope,
        activities: serde_json::to_value(&activities).map_err(|_| ApiError::internal())?,
        created_at: now,
        jobs,
        audits: vec![audit(&op, now, "maintenance.request", &request_id.to_string(), &reason, None, JobState::Pending)],
    };
    let allowed: &'static [HostLifecycle] = &[HostLifecycle::Active, HostLifecycle::Quarantined];
    let (record, jobs) = store::blocking(app.store.clone(), move |s| s.create_maintenance(&new, allowed)).await?;
    tracing::info!(%request_id, initiator = %who, hosts = jobs.len(), %reason, "maintenance requested");
    app.executor.poke();
    let jobs = with_hostnames(&app, jobs).await?;
    Ok((StatusCode::CREATED, Json(request_view(&record, jobs))))
}

/// The request's state from its jobs: running while any is unfinished and none failed;
/// failed once one failed (its host's request is cleared); completed when all completed.
pub fn request_state(jobs: &[JobJson]) -> MaintenanceState {
    if jobs.iter().any(|j| matches!(j.state, JobState::FailedRetryable | JobState::FailedManualIntervention | JobState::Cancelled)) {
        MaintenanceState::Failed
    } else if !jobs.is_empty() && jobs.iter().all(|j| matches!(j.state, JobState::Completed | JobState::Reconciled)) {
        MaintenanceState::Completed
    } else {
        MaintenanceState::Running
    }
}

/// A request as the API shows it. The scope and activities are stored as the JSON this
/// coordinator wrote; one that no longer reads as such (an older build's) shows as empty
/// rather than failing the read.
fn request_view(r: &MaintenanceRecord, jobs: Vec<JobJson>) -> MaintenanceView {
    let scope: MaintenanceScope = crate::api::operator::stored_as("maintenance scope", r.request_id, Some(&r.scope))
        .unwrap_or(MaintenanceScope { group: None, hosts: Vec::new() });
    let activities: Vec<String> =
        crate::api::operator::stored_as("maintenance activities", r.request_id, Some(&r.activities)).unwrap_or_default();
    MaintenanceView {
        request_id: r.request_id.to_string(),
        initiator: r.initiator.clone(),
        reason: r.reason.clone(),
        group: scope.group.clone(),
        scope,
        activities,
        state: request_state(&jobs),
        created_at: r.created_at,
        jobs,
    }
}

/// `GET /v1/maintenance/{id}` (viewer).
pub async fn get(State(app): State<Arc<AppState>>, _r: Reader, Path(id): Path<String>) -> Result<Json<MaintenanceView>, ApiError> {
    let request_id = parse_uuid("request id", &id)?;
    let (record, jobs) = store::blocking(app.store.clone(), move |s| {
        let r = s.get_maintenance(request_id)?;
        let jobs = s.list_jobs(&JobFilter { request_id: Some(request_id), ..Default::default() })?;
        Ok((r, jobs))
    })
    .await?;
    let record = record.ok_or_else(|| ApiError::not_found(format!("maintenance request {request_id} not found")))?;
    Ok(Json(request_view(&record, with_hostnames(&app, jobs).await?)))
}

/// `GET /v1/maintenance?limit=&after=` (viewer): requests with their jobs, oldest first, paged
/// (`items`, `next`).
pub async fn list(
    State(app): State<Arc<AppState>>,
    _r: Reader,
    QueryParams(q): QueryParams<MaintenanceQuery>,
) -> Result<Json<Page<MaintenanceView, String>>, ApiError> {
    let limit = page_size(q.limit)?;
    let filter = MaintenanceFilter { after: q.after.as_deref().map(decode_created_cursor).transpose()?, limit };
    let rows = store::blocking(app.store.clone(), move |s| {
        s.list_maintenance(&filter)?
            .into_iter()
            .map(|r| {
                let jobs = s.list_jobs(&JobFilter { request_id: Some(r.request_id), ..Default::default() })?;
                Ok((r, jobs))
            })
            .collect::<Result<Vec<_>, store::StoreError>>()
    })
    .await?;
    let next = next_created(&rows, limit, |(r, _)| CreatedCursor { created_at: r.created_at, id: r.request_id });
    let mut items = Vec::new();
    for (r, jobs) in rows {
        items.push(request_view(&r, with_hostnames(&app, jobs).await?));
    }
    Ok(Json(Page { items, next }))
}

/// `GET /v1/maintenance` query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaintenanceQuery {
    limit: Option<u32>,
    after: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initiator_follows_the_four_cases() {
        assert_eq!(initiator(Some("alice"), Some("OPS-12")), "alice (OPS-12)");
        assert_eq!(initiator(Some("alice"), None), "alice");
        assert_eq!(initiator(None, Some("OPS-12")), "OPS-12");
        assert_eq!(initiator(None, None), "drover-cli");
        assert_eq!(initiator(Some(" "), Some("")), "drover-cli");
    }

    #[test]
    fn malformed_or_repeated_ids_are_refused() {
        let ok = Uuid::new_v4().to_string();
        assert_eq!(parse_ids(std::slice::from_ref(&ok)).expect("ok").len(), 1);
        let e = parse_ids(&[ok.clone(), "not-a-uuid".into()]).expect_err("malformed");
        assert!(format!("{e:?}").contains("not-a-uuid"), "{e:?}");
        assert!(parse_ids(&[ok.clone(), ok]).is_err());
    }
}
