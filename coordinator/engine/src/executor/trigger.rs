//! When the executor ticks (RFC-0002 §6): at least every `rollouts.interval_secs` or every
//! channel's `reconcileIntervalSecs`, whichever is shorter (one tick plans every channel, so the
//! fastest channel sets the pace), earlier whenever the last plan said time alone will change
//! a decision — a soak ending, a confirm deadline, a retention period — and on events — a check-in whose report changed, a
//! release published, an operator's rollout action, a host going offline. Events arriving
//! within `rollouts.debounce_ms` of the first collapse into one tick.
//!
//! One executor acts at a time: ticks run under one lock, whether the loop or a caller of
//! [`Trigger::tick_now`] runs them, so two plans are never made from the same snapshot.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{Mutex, Notify};

use super::{ExecutorError, TickOutcome, tick};
use crate::app::AppState;

/// The executor's trigger, shared by everything that may cause a tick.
#[derive(Default)]
pub struct Trigger {
    notify: Notify,
    dirty: AtomicBool,
    lock: Mutex<()>,
    ticks: AtomicU64,
    failures: AtomicU64,
    /// The last release refusal alerted, so an unchanged one is not alerted every tick.
    last_alert: std::sync::Mutex<Option<String>>,
    /// The other replicas (PostgreSQL only): a poke must reach the leader.
    pub peers: std::sync::OnceLock<crate::peers::WakeSender>,
}

impl Trigger {
    /// Asks for a tick soon (after the debounce window), of the leader wherever it runs.
    pub fn poke(&self) {
        self.poke_local();
        if let Some(peers) = self.peers.get() {
            let _ = peers.send(crate::peers::Wake::Executor);
        }
    }

    /// [`Trigger::poke`] on this replica only (what another replica told it).
    pub fn poke_local(&self) {
        self.dirty.store(true, Ordering::SeqCst);
        self.notify.notify_one();
    }

    /// Ticks completed so far (successful or not).
    pub fn ticks(&self) -> u64 {
        self.ticks.load(Ordering::SeqCst)
    }

    /// Ticks that failed so far.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::SeqCst)
    }

    /// Runs one tick now, waiting for a running one to finish first.
    pub async fn tick_now(&self, app: &Arc<AppState>) -> Result<TickOutcome, ExecutorError> {
        let _one_at_a_time = self.lock.lock().await;
        let out = tick(app).await;
        if let Err(e @ ExecutorError::Release { .. }) = &out {
            alert_once(app, e.to_string()).await;
        }
        // Jobs act after the rollouts, under the same lock: one owner of a host decides at a
        // time, and a release that stopped verifying does not stop maintenance.
        let jobs = crate::jobs::exec::tick(app).await;
        let now = app.clock.now();
        app.loops.ran(crate::loops::EXECUTOR, now, out.as_ref().map(|_| ()));
        app.loops.ran(crate::loops::JOB_TICK, now, jobs.as_ref().map(|_| ()));
        if let Err(e) = &jobs {
            tracing::warn!(error = %e, "job tick failed");
            self.failures.fetch_add(1, Ordering::SeqCst);
        }
        self.ticks.fetch_add(1, Ordering::SeqCst);
        if out.is_err() {
            self.failures.fetch_add(1, Ordering::SeqCst);
        }
        out
    }
}

/// Runs the executor until the process ends.
pub async fn run(app: Arc<AppState>) {
    let interval = Duration::from_secs(app.config.rollouts.interval_secs);
    let debounce = Duration::from_millis(app.config.rollouts.debounce_ms);
    let trigger = &app.executor;
    // A start is an event: whatever the store holds is planned at once.
    trigger.poke();
    let mut wait = interval;
    loop {
        let _ = tokio::time::timeout(wait, trigger.notify.notified()).await;
        if trigger.dirty.load(Ordering::SeqCst) {
            tokio::time::sleep(debounce).await;
        }
        // Everything that arrived until now is covered by this tick: drop the stored wake-up
        // (a zero timeout polls the notification once, taking a stored permit if there is one).
        trigger.dirty.store(false, Ordering::SeqCst);
        let _ = tokio::time::timeout(Duration::ZERO, trigger.notify.notified()).await;
        wait = interval;
        match trigger.tick_now(&app).await {
            Ok(out) => {
                if let Some(secs) = out.channel_period_secs {
                    wait = wait.min(Duration::from_secs(secs));
                }
                if !out.plan.actions.is_empty() {
                    tracing::info!(actions = out.plan.actions.len(), waits = out.plan.report.len(), "rollout plan applied");
                }
                if let Some(due) = out.next_due {
                    let secs = u64::try_from(due.secs_since(app.clock.now())).unwrap_or(0);
                    wait = wait.min(Duration::from_secs(secs.max(1)));
                }
            }
            Err(ExecutorError::Store(e)) if e.kind() == crate::store::ErrorKind::Conflict => {
                // The store moved between the read and the write (an operator action): plan
                // again from what is there now.
                tracing::info!(error = %e, "rollout plan no longer fits the store; planning again");
                trigger.poke();
            }
            Err(e @ ExecutorError::Release { .. }) => {
                tracing::error!(error = %e, "rollout executor tick aborted: the latest release does not verify");
            }
            Err(e) => tracing::error!(error = %e, "rollout executor tick failed"),
        }
    }
}

/// Records an `alert.release_unverified` event (RFC-0002 §4 step 0: abort the tick, keep the
/// last verified state, emit an alert) unless the same refusal was the last one alerted.
async fn alert_once(app: &Arc<AppState>, message: String) {
    {
        let mut last = app.executor.last_alert.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if last.as_deref() == Some(message.as_str()) {
            return;
        }
        *last = Some(message.clone());
    }
    let event = crate::store::NewEvent {
        at: app.clock.now(),
        kind: "alert.release_unverified".to_owned(),
        host_id: None,
        rollout_id: None,
        job_id: None,
        message: message.clone(),
        data: serde_json::json!({ "reason": message }),
    };
    if let Err(e) = crate::store::blocking(app.store.clone(), move |s| s.append_event(&event)).await {
        tracing::error!(error = %e, "cannot record the release alert");
    }
}
