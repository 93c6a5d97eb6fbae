//! The rollout executor: loads the planner's input from the store, plans, and applies the
//! plan's actions in one store transaction with one event per transition (RFC-0002 §7);
//! hosts that got an intent are woken from their long-poll.
//!
//! - [`input`]: the store's snapshot and the verified release → `PlanInput` (pure).
//! - [`cache`]: the verified release and stored manifests kept between ticks (a tick over an
//!   unchanged release neither reads nor verifies it).
//! - [`writes`]: a plan → the store ops, signed intents and events (pure but for signing).
//! - [`trigger`]: when ticks run — periodic, on events, debounced, one at a time.
//!
//! The executor holds nothing between ticks that decides anything (its cache holds only what
//! the store holds, verified): a coordinator killed and
//! started again plans from the same store and converges to the same outcome (RFC-0002 §2).
//! A tick whose plan no longer fits the store (an operator acted between the read and the
//! write) fails whole on the store's compare-and-set and the next tick plans again.

pub mod cache;
pub mod input;
pub mod trigger;
pub mod writes;

use std::sync::Arc;

use drover_planner::Plan;
use drover_proto::release::VerifiedRelease;

use crate::latest_release::{LatestError, LatestRelease};
use drover_proto::time::Time;

use crate::app::AppState;
use crate::store::{self, StoreError};

pub use trigger::Trigger;

/// Why a tick did not complete.
#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    /// Reading or writing the store failed, or the plan no longer fit it.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// The stored release no longer verifies (a key expired, `rejectBefore` moved): the tick
    /// is aborted and nothing is decided until a release that verifies is published.
    #[error("the latest release no longer verifies ({rule}): {message}")]
    Release {
        /// The verification rule that refused it.
        rule: &'static str,
        /// Why.
        message: String,
    },
    /// An intent could not be signed or encoded.
    #[error("cannot issue an intent: {0}")]
    Intent(String),
}

/// What one tick did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TickOutcome {
    /// The plan, as decided.
    pub plan: Plan,
    /// When the next tick is due for time's sake alone (a soak ending, a confirm deadline,
    /// a retention period), if any.
    pub next_due: Option<drover_proto::time::Time>,
    /// The shortest `reconcileIntervalSecs` of the release's channels (RFC-0002 §6: periodic
    /// per channel), if a release was planned.
    pub channel_period_secs: Option<u64>,
}

/// The planner's input as the store holds it now and the plan over it, with the shortest
/// channel period; `None` before any release. Reads only: [`tick`] applies the plan, the
/// dashboard's progress route shows its report of why hosts wait.
///
/// The release is read and verified only when its version is new to [`cache`] (or a trusted
/// key's validity changed since): a tick over an unchanged release reads the store's
/// snapshot and plans, nothing more.
pub async fn plan_now(app: &Arc<AppState>, now: Time) -> Result<Option<(input::Built, Plan, Option<u64>)>, ExecutorError> {
    let Some(verified) = verified_release(app, now).await? else { return Ok(None) };
    let channel_period_secs = verified.fleet.fleet.channels.values().map(|c| c.reconcile_interval_secs).filter(|s| *s > 0).min();
    let cache = app.manifest_cache.clone();
    let release = verified.clone();
    let (snapshot, stored) = store::blocking(app.store.clone(), move |s| {
        let snapshot = s.plan_snapshot()?;
        let stored = input::stored_manifests(s, &release, &snapshot, |id| lock(&cache).manifest(id))?;
        Ok((snapshot, stored))
    })
    .await?;
    let settings = input::settings(&app.config.rollouts);
    let built =
        input::build(&verified, &snapshot, &stored, settings).map_err(|e| ExecutorError::Release { rule: "observed", message: e })?;
    lock(&app.manifest_cache).keep_manifests(stored);
    let mut plan = drover_planner::plan(&built.input, now);
    // A store older than the fleet (restored from an older backup) issues nothing from its
    // release: agents would refuse it (`crate::fleet_release`).
    if app.fleet_release.behind(Some(verified.timestamp.doc.version)).is_some() {
        let held = crate::fleet_release::hold_back(&mut plan);
        if held > 0 {
            tracing::debug!(
                held,
                version = verified.timestamp.doc.version,
                "the fleet is past this release: nothing is dispatched from it"
            );
        }
    }
    Ok(Some((built, plan, channel_period_secs)))
}

fn lock(cache: &std::sync::Mutex<cache::ManifestCache>) -> std::sync::MutexGuard<'_, cache::ManifestCache> {
    cache.lock().unwrap_or_else(|e| e.into_inner())
}

/// The latest release, verified, from the engine's one cache ([`crate::latest_release`]).
/// `None` before any release.
async fn verified_release(app: &Arc<AppState>, now: Time) -> Result<Option<Arc<VerifiedRelease>>, ExecutorError> {
    // Staleness is reported, not refused: the planner stops new dispatch for a stale channel
    // and raises an alert, while hosts already in flight finish (RFC-0002 §4 step 0).
    match LatestRelease::load(&app.latest_release, &app.store, &app.trust, now).await {
        Ok(latest) => Ok(latest.map(|l| l.release.clone())),
        Err(LatestError::Store(e)) => Err(e.into()),
        Err(LatestError::Unverified { source, .. }) => Err(ExecutorError::Release { rule: source.rule(), message: source.to_string() }),
    }
}

/// Plans once and applies the plan. No release published yet: nothing to do.
pub async fn tick(app: &Arc<AppState>) -> Result<TickOutcome, ExecutorError> {
    let now = app.clock.now();
    let Some((built, plan, channel_period_secs)) = plan_now(app, now).await? else { return Ok(TickOutcome::default()) };
    if plan.actions.is_empty() {
        let next_due = input::next_due(&built.input, now);
        return Ok(TickOutcome { plan, next_due, channel_period_secs });
    }
    let after = input::applied(&built.input, &plan, now);
    let next_due = input::next_due(&after, now);
    let signer = drover_proto::keys::KeySigner::new(app.director.signing_key(now).clone());
    let issue = writes::IntentIssuer { signer: &signer, confirm_window_secs: app.config.rollouts.confirm_window_secs };
    let (write, woken) = writes::plan_write(&built, &plan, &after, now, &issue)?;
    store::blocking(app.store.clone(), move |s| s.apply_plan(&write, &[])).await?;
    // Logged once the plan is committed and before any agent is woken, so each line's
    // timestamp is the decision's: `drover-bench` measures dispatch latency from it.
    for a in &plan.actions {
        match a {
            drover_planner::Action::Dispatch { host, rollout_id, wave_index, from, reason, .. } => {
                tracing::info!(%rollout_id, host = %host, wave = wave_index, from = from.as_str(), to = "Activating", reason = %reason, "rollout action applied");
            }
            drover_planner::Action::HostTransition { rollout_id, host, from, to, reason } => {
                tracing::info!(%rollout_id, host = %host, from = from.as_str(), to = to.as_str(), reason = %reason, "rollout action applied");
            }
            _ => tracing::info!(reason = a.reason(), action = ?a, "rollout action applied"),
        }
    }
    for host in woken {
        app.hub.notify(host);
    }
    Ok(TickOutcome { plan, next_due, channel_period_secs })
}
