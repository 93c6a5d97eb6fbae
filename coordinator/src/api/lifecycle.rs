//! Host lifecycle: the admin's operator verbs (`POST /v1/hosts/{id}/<verb>`) and the
//! reconciler that moves silent hosts to `offline`.
//!
//! The coarse state machine is `node-state-model.md` §3 ([`HostLifecycle`]); the store's
//! `transition_host` is the only writer of a host's state and enforces both legality and
//! compare-and-set, writing one `host.transition` event (with the reason) per step. Each verb
//! here adds what the store cannot know: which *source* states the verb means (unquarantine
//! is `quarantined -> active`, not any legal `-> active`), the operator's reason, and the
//! audit record (actor, role, action, target, reason, prior state, expected state).
//!
//! | verb           | from                                   | to (in order)          |
//! |----------------|----------------------------------------|------------------------|
//! | `quarantine`   | active, offline, enrolling             | quarantined            |
//! | `unquarantine` | quarantined                            | active                 |
//! | `retire`       | active, offline, quarantined, draining | draining, retired      |
//! | `reactivate`   | retired                                | active                 |
//! | `remove`       | retired, removing                      | removing, deleted      |
//! | `cordon`       | any but deleted                        | schedulable = false    |
//! | `uncordon`     | any but deleted                        | schedulable = true     |
//!
//! `retire` and `remove` pass through `draining` / `removing`. There is no drain or uninstall
//! job yet (a later issue), so both steps happen in this request, each with its own event.
//! Accepting `draining` (resp. `removing`) as a source makes the verb the §8 "resume": a
//! request interrupted between its two steps is finished by asking again, so a host is never
//! left in an in-progress state with nothing driving it.
//!
//! `remove` revokes every certificate of the host (and ends its unused tokens) through
//! [`AppState::revoke_host`] *before* the host reaches `deleted`: a deleted host can never
//! again complete a handshake. `deleted` is terminal and the id is never reused, so
//! `reactivate` after removal is refused (409) — re-onboarding makes a new host.
//!
//! Refused requests (bad reason, unknown host, a verb the current state does not allow, a
//! lost compare-and-set) write nothing: no event and no audit row. The audit row is written
//! once the verb's first step has committed, so an accepted action is audited even when a
//! later step (the revocation, the second transition) fails and must be resumed.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use drover_proto::states::HostLifecycle;
use drover_proto::time::Time;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::api::auth::{Admin, OperatorCaller};
use crate::api::error::{ApiError, JsonBody};
use crate::app::{AppState, CrlError};
use crate::store::{self, Host, HostCursor, HostFilter, NewAudit, StoreError};

/// Longest reason an operator may give, in characters.
pub const MAX_REASON_CHARS: usize = 500;

/// The body every verb takes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LifecycleRequest {
    /// Why (required; recorded in the events and the audit).
    pub reason: Option<String>,
}

/// The host after the verb.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostStateResponse {
    /// The host's id.
    pub host_id: String,
    /// Its hostname.
    pub hostname: String,
    /// Its lifecycle state.
    pub state: HostLifecycle,
    /// Whether it is schedulable (not cordoned).
    pub schedulable: bool,
}

impl From<&Host> for HostStateResponse {
    fn from(h: &Host) -> Self {
        HostStateResponse { host_id: h.id.to_string(), hostname: h.hostname.clone(), state: h.state, schedulable: h.schedulable }
    }
}

/// A lifecycle verb: the source states it accepts and the states it walks through.
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
            Verb::Retire => &[Active, Offline, Quarantined, Draining],
            Verb::Reactivate => &[Retired],
            Verb::Remove => &[Retired, Removing],
        }
    }

    /// The transitions from `from`, in order (a resumed verb skips the step already taken).
    fn path(self, from: HostLifecycle) -> Vec<HostLifecycle> {
        use HostLifecycle::*;
        match self {
            Verb::Quarantine => vec![Quarantined],
            Verb::Unquarantine | Verb::Reactivate => vec![Active],
            Verb::Retire if from == Draining => vec![Retired],
            Verb::Retire => vec![Draining, Retired],
            Verb::Remove if from == Removing => vec![Deleted],
            Verb::Remove => vec![Removing, Deleted],
        }
    }

    fn target(self) -> HostLifecycle {
        self.path(self.sources()[0]).last().copied().unwrap_or(HostLifecycle::Deleted)
    }
}

/// Checks the operator's reason: present, not blank, at most [`MAX_REASON_CHARS`], no
/// control characters (it lands in events, the audit and logs, one line each).
pub fn check_reason(reason: Option<&str>) -> Result<String, ApiError> {
    let reason = reason.map(str::trim).unwrap_or_default();
    if reason.is_empty() {
        return Err(ApiError::bad_request("reason is required: say why, it is recorded in the events and the audit"));
    }
    if reason.chars().count() > MAX_REASON_CHARS || reason.chars().any(char::is_control) {
        return Err(ApiError::bad_request(format!("reason must be at most {MAX_REASON_CHARS} characters without control characters")));
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
        (Verb::Remove, _) => "only a retired host can be removed: retire it first".to_owned(),
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

/// Runs `verb` on `host_id` for `op`: checks, transitions, audit (and, for `remove`, revocation).
async fn apply(app: &Arc<AppState>, op: &OperatorCaller, host_id: Uuid, verb: Verb, reason: String) -> Result<Host, ApiError> {
    let host = store::blocking(app.store.clone(), move |s| s.get_host(host_id))
        .await
        .map_err(store_error)?
        .ok_or_else(|| ApiError::not_found(format!("host {host_id} not found")))?;
    if !verb.sources().contains(&host.state) {
        return Err(refusal(verb, &host));
    }
    let prior = host.state;
    let event_reason = format!("{} by {}: {reason}", verb.action(), op.name);
    let audit = NewAudit {
        at: app.clock.now(),
        actor: op.name.clone(),
        role: op.role.as_str().to_owned(),
        action: verb.action().to_owned(),
        target: host_id.to_string(),
        reason: reason.clone(),
        prior_state: Some(prior.as_str().to_owned()),
        expected_state: Some(verb.target().as_str().to_owned()),
    };
    let mut audit = Some(audit);
    let mut from = prior;
    let mut current = host;
    for to in verb.path(prior) {
        if to == HostLifecycle::Deleted {
            // Revocation must be in force before the host counts as deleted: certificates
            // first, then the CRL every new handshake checks, then the state.
            let why = format!("host removed by {}: {reason}", op.name);
            app.revoke_host(host_id, why).await.map_err(|e| match e {
                CrlError::Store(e) => store_error(e),
                other => {
                    tracing::error!(error = %other, %host_id, "CRL refresh failed while removing a host; `remove` again resumes");
                    ApiError::internal()
                }
            })?;
        }
        let at = app.clock.now();
        let why = event_reason.clone();
        let first_audit = audit.take();
        // The transition (compare-and-set on the state just read, with its event) and, on the
        // first step, the audit row: a refused first step leaves no trace.
        current = store::blocking(app.store.clone(), move |s| {
            let host = s.transition_host(host_id, from, to, &why, at)?;
            if let Some(a) = first_audit {
                s.append_audit(&a)?;
            }
            Ok(host)
        })
        .await
        .map_err(store_error)?;
        from = to;
    }
    tracing::info!(%host_id, operator = %op.name, action = verb.action(), prior = %prior, state = %current.state, %reason, "host lifecycle verb applied");
    // A host leaving or re-entering service changes what a rollout may do with it.
    app.executor.poke();
    Ok(current)
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
    let host = apply(&app, &op, host_id, verb, reason).await?;
    Ok(Json(HostStateResponse::from(&host)))
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

/// `POST /v1/hosts/{id}/retire` (admin): active, offline or quarantined → draining → retired.
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

/// `POST /v1/hosts/{id}/remove` (admin): retired → removing → deleted, revoking the host.
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
    Ok(Json(HostStateResponse::from(&host)))
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
    tokio::spawn(async move {
        let mut every = tokio::time::interval(sweep_interval(app.config.hosts.offline_after_secs));
        // A slow sweep should not be followed by a burst of catch-up sweeps.
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first tick is immediate; skip it. Right after a (re)start every host looks as
        // silent as the coordinator was down, and deserves one interval to check in again.
        every.tick().await;
        loop {
            every.tick().await;
            match mark_silent_hosts_offline(&app).await {
                // An offline host no longer holds up its wave (it is Skipped).
                Ok(moved) if moved > 0 => app.executor.poke(),
                Ok(_) => {}
                Err(e) => tracing::error!(error = %e, "offline sweep failed; retrying at the next interval"),
            }
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
        for verb in [Verb::Quarantine, Verb::Unquarantine, Verb::Retire, Verb::Reactivate, Verb::Remove] {
            for &from in verb.sources() {
                let mut at = from;
                for to in verb.path(from) {
                    assert!(at.can_transition_to(to), "{verb:?}: {at} -> {to}");
                    at = to;
                }
                assert_eq!(at, verb.target(), "{verb:?} from {from}");
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
