//! Operator rollout routes: the actions halt, resume, cancel and rollback (admin, audited),
//! one rollout with its hosts (viewer), and the planner's live input (viewer).
//!
//! - `POST /v1/rollouts/{id}/halt`: Active, Converging or Reverting → Halted. In-flight hosts
//!   finish their current step; nothing new is dispatched (RFC-0002 §5.1 `halt`). Halting a
//!   revert that cannot finish (a touched host gone for good) lets it be cancelled.
//! - `POST /v1/rollouts/{id}/resume`: Halted → Active. The health gate is evaluated again at
//!   the next tick: a rollout halted by its gate halts again while its wave still has more
//!   failed hosts than `maxFailures` — roll it back, cancel it, or publish a new ref.
//! - `POST /v1/rollouts/{id}/cancel`: any live state → Cancelled. Intents of the rollout
//!   still waiting for confirmation are withdrawn (an agent's confirm then gets 410 and it
//!   rolls back); hosts already confirmed stay where they are.
//! - `POST /v1/rollouts/{id}/rollback`: Active, Converging or Halted → Reverting; the planner
//!   then sends every touched host back to its closure in the channel's newest revertable
//!   rollout, and ends Reverted (or Halted when the timestamp lists none).
//!
//! Each takes `{"reason": "…"}` (required). The state change, its event and the audit record
//! are one store transaction that compares the state first: an action racing the executor
//! either lands whole or answers 409. The executor is woken at once (RFC-0002 §6).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
pub use drover_proto::api::rollouts::{RolloutHostView, RolloutStateResponse, RolloutStatus};
use drover_proto::names::RolloutId;
use drover_proto::states::RolloutState;
use serde_json::json;

use crate::api::auth::{Admin, OperatorCaller, Reader};
use crate::api::error::{ApiError, JsonBody};
use crate::api::lifecycle::{LifecycleRequest, check_reason};
use crate::app::AppState;
use crate::store::{self, NewAudit, NewEvent, PlanOp, PlanWrite, Rollout, StoreError};

/// An operator's rollout action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RolloutAction {
    /// Freeze.
    Halt,
    /// Unfreeze.
    Resume,
    /// Stop for good.
    Cancel,
    /// Revert touched hosts.
    Rollback,
}

impl RolloutAction {
    /// The audit action name.
    pub fn name(self) -> &'static str {
        match self {
            RolloutAction::Halt => "rollout.halt",
            RolloutAction::Resume => "rollout.resume",
            RolloutAction::Cancel => "rollout.cancel",
            RolloutAction::Rollback => "rollout.rollback",
        }
    }

    /// The states it applies to.
    pub fn sources(self) -> &'static [RolloutState] {
        use RolloutState as R;
        match self {
            RolloutAction::Halt => &[R::Active, R::Converging, R::Reverting],
            RolloutAction::Resume => &[R::Halted],
            RolloutAction::Cancel => &[R::Opening, R::Active, R::Converging, R::Halted],
            RolloutAction::Rollback => &[R::Active, R::Converging, R::Halted],
        }
    }

    /// Where it leads.
    pub fn target(self) -> RolloutState {
        match self {
            RolloutAction::Halt => RolloutState::Halted,
            RolloutAction::Resume => RolloutState::Active,
            RolloutAction::Cancel => RolloutState::Cancelled,
            RolloutAction::Rollback => RolloutState::Reverting,
        }
    }
}

/// A stored rollout as the rollout routes answer it.
pub fn rollout_state(r: &Rollout) -> RolloutStateResponse {
    {
        RolloutStateResponse {
            rollout_id: r.rollout_id.to_string(),
            channel: r.channel.clone(),
            state: r.state,
            manifest_sha256: r.manifest_sha256.clone(),
            opened_at: r.opened_at,
            updated_at: r.updated_at,
        }
    }
}

fn parse_id(id: &str) -> Result<RolloutId, ApiError> {
    RolloutId::parse(id).map_err(|e| ApiError::bad_request(format!("rollout id: {e}")))
}

/// Applies `action` to rollout `id` for `op`.
pub async fn act(
    app: &Arc<AppState>,
    op: &OperatorCaller,
    id: RolloutId,
    action: RolloutAction,
    reason: String,
) -> Result<Rollout, ApiError> {
    let lookup = id.clone();
    let rollout = store::blocking(app.store.clone(), move |s| s.get_rollout(&lookup))
        .await?
        .ok_or_else(|| ApiError::not_found(format!("rollout {id} not found")))?;
    let from = rollout.state;
    let to = action.target();
    if !action.sources().contains(&from) {
        let allowed = action.sources().iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ");
        return Err(ApiError::conflict(format!("rollout {id} is {from}: {} needs it in {allowed}", action.name())));
    }
    let at = app.clock.now();
    let why = format!("{} by {}: {reason}", action.name(), op.name);
    let mut ops = vec![PlanOp::RolloutState { rollout_id: id.clone(), from, to }];
    if action == RolloutAction::Cancel {
        ops.push(PlanOp::CancelIntents { rollout_id: id.clone() });
    }
    let event = NewEvent {
        at,
        kind: "rollout.transition".to_owned(),
        host_id: None,
        rollout_id: Some(id.clone()),
        job_id: None,
        message: why.clone(),
        data: json!({
            "ts": at, "rollout": id.as_str(), "wave": null, "host": null,
            "transition": format!("{from} -> {to}"), "reason": why, "budgets": {}, "operator": op.name,
        }),
    };
    let audit = NewAudit {
        at,
        actor: op.name.clone(),
        role: op.role.as_str().to_owned(),
        action: action.name().to_owned(),
        target: id.to_string(),
        reason: reason.clone(),
        prior_state: Some(from.as_str().to_owned()),
        expected_state: Some(to.as_str().to_owned()),
    };
    let write = PlanWrite { at, ops, events: vec![event] };
    let lookup = id.clone();
    let after = store::blocking(app.store.clone(), move |s| {
        s.apply_plan(&write, &[audit])?;
        s.get_rollout(&lookup)?.ok_or_else(|| StoreError::not_found("rollout", &lookup))
    })
    .await
    .map_err(|e| match e {
        StoreError::StaleState { actual, .. } => {
            ApiError::conflict(format!("rollout {id} changed while the request ran (now {actual}); read it again and retry"))
        }
        other => ApiError::from(other),
    })?;
    tracing::info!(rollout = %id, operator = %op.name, action = action.name(), %from, %to, %reason, "rollout action applied");
    app.executor.poke();
    Ok(after)
}

async fn route(
    app: Arc<AppState>,
    op: OperatorCaller,
    id: String,
    req: LifecycleRequest,
    action: RolloutAction,
) -> Result<Json<RolloutStateResponse>, ApiError> {
    let id = parse_id(&id)?;
    let reason = check_reason(req.reason.as_deref())?;
    let rollout = act(&app, &op, id, action, reason).await?;
    Ok(Json(crate::api::rollouts::rollout_state(&rollout)))
}

/// `POST /v1/rollouts/{id}/halt` (admin).
pub async fn halt(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    Path(id): Path<String>,
    JsonBody(req): JsonBody<LifecycleRequest>,
) -> Result<Json<RolloutStateResponse>, ApiError> {
    route(app, op, id, req, RolloutAction::Halt).await
}

/// `POST /v1/rollouts/{id}/resume` (admin).
pub async fn resume(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    Path(id): Path<String>,
    JsonBody(req): JsonBody<LifecycleRequest>,
) -> Result<Json<RolloutStateResponse>, ApiError> {
    route(app, op, id, req, RolloutAction::Resume).await
}

/// `POST /v1/rollouts/{id}/cancel` (admin).
pub async fn cancel(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    Path(id): Path<String>,
    JsonBody(req): JsonBody<LifecycleRequest>,
) -> Result<Json<RolloutStateResponse>, ApiError> {
    route(app, op, id, req, RolloutAction::Cancel).await
}

/// `POST /v1/rollouts/{id}/rollback` (admin).
pub async fn rollback(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    Path(id): Path<String>,
    JsonBody(req): JsonBody<LifecycleRequest>,
) -> Result<Json<RolloutStateResponse>, ApiError> {
    route(app, op, id, req, RolloutAction::Rollback).await
}

/// `GET /v1/rollouts/{id}/status` (viewer): the rollout and its hosts' states.
pub async fn status(State(app): State<Arc<AppState>>, _caller: Reader, Path(id): Path<String>) -> Result<Json<RolloutStatus>, ApiError> {
    let id = parse_id(&id)?;
    let lookup = id.clone();
    let (rollout, hosts) =
        store::blocking(app.store.clone(), move |s| Ok((s.get_rollout(&lookup)?, s.list_host_rollouts(&lookup)?))).await?;
    let rollout = rollout.ok_or_else(|| ApiError::not_found(format!("rollout {id} not found")))?;
    let hosts = hosts
        .into_iter()
        .map(|h| RolloutHostView {
            hostname: h.hostname,
            wave_index: h.wave_index,
            state: h.state,
            since: h.since,
            intent_target: h.intent_target,
        })
        .collect();
    Ok(Json(RolloutStatus { rollout: crate::api::rollouts::rollout_state(&rollout), hosts }))
}

pub use drover_planner::observed::PlanInputResponse;

/// `GET /v1/plan-input` (viewer): the observed state the executor plans over, with the
/// release it plans against. The release is served as stored so the caller verifies it
/// against its own trust roots; nothing here is trusted for being served.
pub async fn plan_input(State(app): State<Arc<AppState>>, _caller: Reader) -> Result<Json<PlanInputResponse>, ApiError> {
    let now = app.clock.now();
    let (release, snapshot) = store::blocking(app.store.clone(), |s| Ok((s.latest_release()?, s.plan_snapshot()?))).await?;
    let release = release.ok_or_else(|| ApiError::not_found("no release has been published"))?;
    let observed = crate::executor::input::observed(&snapshot, crate::executor::input::settings(&app.config.rollouts));
    let mut files = std::collections::BTreeMap::new();
    for (path, bytes) in &release.files.files {
        let text = String::from_utf8(bytes.clone()).map_err(|_| {
            tracing::error!(%path, "stored release file is not UTF-8");
            ApiError::internal()
        })?;
        files.insert(path.clone(), text);
    }
    Ok(Json(PlanInputResponse { now, observed, release_version: release.version, release: files }))
}
