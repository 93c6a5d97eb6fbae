//! Read routes the dashboard (`drover ui`) is built on, each usable on its own (viewer):
//!
//! - `GET /v1/whoami`: who the certificate names and what its role may do, so a page shows
//!   action buttons to an admin only (the coordinator refuses a viewer's action anyway).
//! - `GET /v1/fleet/summary`: the fleet's counts, computed by the coordinator (a page never
//!   pages through every host to count them): by lifecycle state, schedulable and cordoned,
//!   offline, quarantined, and drifted from MAAS.
//! - `GET /v1/rollouts/{id}/progress`: a rollout's waves with their hosts counted by state
//!   (`Pending` for the manifest's hosts not dispatched yet), and the planner's report of why
//!   hosts wait (budget, edge, soak, gate, hold…), from a plan made now over the store — the
//!   same plan the executor would make, applied by nothing; `?waits=false` leaves the report
//!   (and the plan) out.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use drover_proto::names::RolloutId;
use drover_proto::time::Time;
use serde::Serialize;

use crate::api::auth::Reader;
use crate::api::error::ApiError;
use crate::api::operator::QueryParams;
use crate::api::rollouts::RolloutStateResponse;
use crate::app::AppState;
use crate::identity::Role;
use crate::store;

/// `GET /v1/whoami` answer.
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WhoAmI {
    /// The operator's name (the certificate's).
    pub name: String,
    /// `admin` or `viewer`.
    pub role: &'static str,
    /// Whether this role may take actions (halt, resume, cordon, retry…).
    pub can_act: bool,
}

/// `GET /v1/whoami` (viewer).
pub async fn whoami(Reader(op): Reader) -> Json<WhoAmI> {
    Json(WhoAmI { name: op.name, role: op.role.as_str(), can_act: op.role == Role::Admin })
}

/// `GET /v1/fleet/summary` answer.
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FleetSummary {
    /// When it was counted (the coordinator's clock).
    pub at: Time,
    /// Hosts that are not deleted.
    pub hosts: u64,
    /// Hosts by lifecycle state (every state, zeros included).
    pub by_state: BTreeMap<&'static str, u64>,
    /// Hosts (not deleted) that take new work.
    pub schedulable: u64,
    /// Hosts (not deleted) that take none: cordoned by an operator or held by a job.
    pub cordoned: u64,
    /// Hosts whose agent went silent.
    pub offline: u64,
    /// Hosts taken out of service.
    pub quarantined: u64,
    /// Hosts with an open drift between MAAS and Drover, across sites.
    pub drifted: u64,
}

/// `GET /v1/fleet/summary` (viewer).
pub async fn fleet_summary(State(app): State<Arc<AppState>>, _r: Reader) -> Result<Json<FleetSummary>, ApiError> {
    let now = app.clock.now();
    // The hosts and the open drifts only: nothing else of a scrape's snapshot.
    let (census, drifted) = store::blocking(app.store.clone(), move |s| {
        let census = crate::api::metrics_route::host_census(s)?;
        let mut drifted = 0u64;
        for site in s.list_sites()? {
            drifted += s.maas_reconcile_snapshot(site.id)?.iter().filter(|r| r.binding.drift.is_some()).count() as u64;
        }
        Ok((census, drifted))
    })
    .await?;
    let count = |state: &str| census.by_state.get(state).copied().unwrap_or(0);
    let hosts = census.live.len() as u64;
    Ok(Json(FleetSummary {
        at: now,
        hosts,
        schedulable: hosts - census.cordoned,
        cordoned: census.cordoned,
        offline: count("offline"),
        quarantined: count("quarantined"),
        drifted,
        by_state: census.by_state,
    }))
}

/// One wave of a rollout.
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WaveProgress {
    /// Its index.
    pub index: u32,
    /// Its hosts.
    pub total: u64,
    /// Its hosts by state.
    pub states: BTreeMap<&'static str, u64>,
    /// Its hosts converged.
    pub converged: u64,
}

/// Why one host (or the rollout, or its channel) does not advance.
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WaitView {
    /// The host, when one is concerned.
    pub host: Option<String>,
    /// Why, as a sentence.
    pub reason: String,
    /// Why, typed: `kind` (budget, edge, soak, gate, hold…) and its figures (the planner's
    /// `WaitReason`; described as an object with its `kind`).
    #[schemars(with = "serde_json::Map<String, serde_json::Value>")]
    pub why: drover_planner::WaitReason,
}

/// `GET /v1/rollouts/{id}/progress` answer.
#[derive(Debug, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutProgress {
    /// The rollout.
    pub rollout: RolloutStateResponse,
    /// Its waves, in order.
    pub waves: Vec<WaveProgress>,
    /// The planner's report for it (and for its channel when no rollout is named).
    pub waits: Vec<WaitView>,
    /// Why there is no report, when there is none (no release, or one that does not verify).
    pub report_error: Option<String>,
    /// When the report was made.
    pub at: Time,
}

/// `GET /v1/rollouts/{id}/progress` query.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProgressQuery {
    /// `false`: the waves only, without the planner's report (which costs a plan): what a
    /// list of rollouts refreshing every few seconds wants.
    waits: Option<bool>,
}

/// `GET /v1/rollouts/{id}/progress?waits=` (viewer).
pub async fn rollout_progress(
    State(app): State<Arc<AppState>>,
    _r: Reader,
    Path(id): Path<String>,
    QueryParams(q): QueryParams<ProgressQuery>,
) -> Result<Json<RolloutProgress>, ApiError> {
    let id = RolloutId::parse(&id).map_err(|e| ApiError::bad_request(format!("rollout id: {e}")))?;
    let lookup = id.clone();
    let (rollout, counts) = store::blocking(app.store.clone(), move |s| {
        let Some(rollout) = s.get_rollout(&lookup)? else { return Ok(None) };
        Ok(Some((rollout, crate::api::metrics_route::rollout_progress(s, &lookup)?)))
    })
    .await?
    .ok_or_else(|| ApiError::not_found(format!("rollout {id} not found")))?;
    let mut waves: BTreeMap<u32, WaveProgress> = BTreeMap::new();
    for c in counts {
        let w = waves.entry(c.wave).or_insert_with(|| WaveProgress { index: c.wave, total: 0, states: BTreeMap::new(), converged: 0 });
        w.total += c.count;
        *w.states.entry(c.state).or_insert(0) += c.count;
        if c.state == "Converged" {
            w.converged += c.count;
        }
    }
    let now = app.clock.now();
    // The report costs a plan (the release verified, the planner run): only when asked for.
    let (waits, report_error) = if q.waits == Some(false) {
        (Vec::new(), None)
    } else {
        match crate::executor::plan_now(&app, now).await {
            Ok(Some((_, plan, _))) => {
                let ours = plan.report.into_iter().filter(|w| match &w.rollout_id {
                    Some(r) => *r == id,
                    None => w.channel == id.channel(),
                });
                (ours.map(|w| WaitView { host: w.host, reason: w.reason, why: w.why }).collect(), None)
            }
            Ok(None) => (Vec::new(), Some("no release has been published".to_owned())),
            Err(e) => (Vec::new(), Some(e.to_string())),
        }
    };
    Ok(Json(RolloutProgress {
        rollout: crate::api::rollouts::rollout_state(&rollout),
        waves: waves.into_values().collect(),
        waits,
        report_error,
        at: now,
    }))
}
