//! Which replica runs the leader work — the rollout executor, the job engine, the sweeps and
//! the reconcilers — and for how long.
//!
//! On SQLite there is one process, and it always leads. On PostgreSQL every replica runs an
//! [`Elector`] on the lease; [`supervise`] starts the leader work when this replica is elected,
//! inside the term's [`fence`] so each of its writes is checked against the token, and aborts
//! it the moment the replica stops leading (the elector's deadline passes on this replica's
//! own clock, whatever the database says). Work aborted mid-write loses that write only: the
//! store's operations are single transactions, and the next leader re-plans from the store.
//!
//! Each change is an event (`coordinator.leader_elected`, `coordinator.leader_stepped_down`),
//! a log line and the metrics `drover_leader` and `drover_leader_changes_total`.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::app::AppState;
use crate::store::fence::{self, Fence};
use crate::store::postgres::PgStore;
use crate::store::postgres::election::{Change, StepDown, Timing};
use crate::store::postgres::elector::Elector;
use crate::store::{self, NewEvent};

/// The lease replicas elect their leader on.
pub const LEASE_NAME: &str = "coordinator-leader";

/// How often the supervisor compares what runs with who leads.
const WATCH: Duration = Duration::from_millis(50);

/// This replica's view of leadership.
pub struct Leadership {
    replica: String,
    elector: Mutex<Option<Elector>>,
    /// `false` on SQLite: the one process always leads.
    elected: bool,
    leading: AtomicBool,
    token: AtomicI64,
    changes: AtomicU64,
    /// Why the elector last stepped down, for the event.
    last_reason: Arc<Mutex<Option<StepDown>>>,
}

/// Whether this replica may run leader work now, and in which term.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lead {
    /// Another replica leads, or none does yet.
    Follower,
    /// This replica leads; its writes carry the fence (none on SQLite).
    Leader(Option<Fence>),
}

impl Leadership {
    /// The one process on SQLite: always the leader, nothing to fence.
    pub fn single(replica: String) -> Leadership {
        Leadership {
            replica,
            elector: Mutex::new(None),
            elected: false,
            leading: AtomicBool::new(false),
            token: AtomicI64::new(0),
            changes: AtomicU64::new(0),
            last_reason: Default::default(),
        }
    }

    /// A replica on PostgreSQL: runs for the lease as `replica` plus a per-process suffix (a
    /// restarted replica is a new holder, so its token differs from its previous life's).
    pub fn elected(store: PgStore, replica: String, ttl: Duration) -> std::io::Result<Leadership> {
        let holder = format!("{replica}/{}", uuid::Uuid::new_v4().simple());
        // The margin covers clock drift over one lease and a write in flight at the deadline.
        let timing = Timing { ttl, margin: (ttl / 5).max(Duration::from_millis(100)) };
        let last_reason: Arc<Mutex<Option<StepDown>>> = Default::default();
        let reason = last_reason.clone();
        let elector = Elector::start(store, LEASE_NAME, &holder, timing, move |change| {
            if let Change::SteppedDown { reason: why, .. } = change {
                *reason.lock().unwrap_or_else(PoisonError::into_inner) = Some(why);
            }
        })?;
        Ok(Leadership {
            replica,
            elector: Mutex::new(Some(elector)),
            elected: true,
            leading: AtomicBool::new(false),
            token: AtomicI64::new(0),
            changes: AtomicU64::new(0),
            last_reason,
        })
    }

    /// This replica's name.
    pub fn replica(&self) -> &str {
        &self.replica
    }

    /// Whether, and in which term, this replica leads now.
    pub fn current(&self) -> Lead {
        if !self.elected {
            return Lead::Leader(None);
        }
        match self.elector.lock().unwrap_or_else(PoisonError::into_inner).as_ref().and_then(Elector::leading) {
            Some(lease) => Lead::Leader(Some(lease.fence())),
            None => Lead::Follower,
        }
    }

    /// Whether leader work runs here now (as the supervisor last saw it).
    pub fn is_leading(&self) -> bool {
        self.leading.load(Ordering::SeqCst)
    }

    /// Stops electing and gives a held lease up at once, so another replica takes over
    /// without waiting for it to lapse (a replica shutting down).
    pub fn hand_over(&self) {
        // Dropping it joins its thread, which may be in a database call: not on the runtime.
        drop(self.elector.lock().unwrap_or_else(PoisonError::into_inner).take());
    }

    /// Appends `drover_leader` and `drover_leader_changes_total` to a metrics exposition.
    pub fn render_into(&self, out: &mut String) {
        let replica = self.replica.replace(['\\', '"', '\n'], "_");
        let _ = writeln!(out, "# HELP drover_leader Whether this replica runs the leader work (1) or not (0).");
        let _ = writeln!(out, "# TYPE drover_leader gauge");
        let _ = writeln!(out, "drover_leader{{replica=\"{replica}\"}} {}", u8::from(self.is_leading()));
        let _ = writeln!(out, "# HELP drover_leader_token The fencing token of this replica's current or last term.");
        let _ = writeln!(out, "# TYPE drover_leader_token gauge");
        let _ = writeln!(out, "drover_leader_token{{replica=\"{replica}\"}} {}", self.token.load(Ordering::SeqCst));
        let _ = writeln!(out, "# HELP drover_leader_changes_total Times this replica started or stopped leading.");
        let _ = writeln!(out, "# TYPE drover_leader_changes_total counter");
        let _ = writeln!(out, "drover_leader_changes_total{{replica=\"{replica}\"}} {}", self.changes.load(Ordering::SeqCst));
    }
}

/// Starts the leader work; returns its tasks (aborted together when the term ends).
pub type StartWork = fn(&Arc<AppState>) -> Vec<JoinHandle<()>>;

/// Runs `start`'s work whenever this replica leads, for as long as it leads; never returns.
pub async fn supervise(app: Arc<AppState>, start: StartWork) {
    let mut running: Option<(Option<Fence>, Vec<JoinHandle<()>>)> = None;
    let mut every = tokio::time::interval(WATCH);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        app.loops.ran(crate::loops::LEADER_SUPERVISION, app.clock.now(), Ok::<(), std::convert::Infallible>(()));
        let lead = app.leader.current();
        let same = matches!((&lead, &running), (Lead::Leader(f), Some((g, _))) if f == g);
        if same {
            continue;
        }
        if let Some((term, tasks)) = running.take() {
            for t in &tasks {
                t.abort();
            }
            stepped_down(&app, term);
        }
        if let Lead::Leader(term) = lead {
            let tasks = match &term {
                Some(f) => fence::scope(f.clone(), async { start(&app) }).await,
                None => start(&app),
            };
            elected(&app, term.as_ref());
            running = Some((term, tasks));
        }
    }
}

fn elected(app: &Arc<AppState>, term: Option<&Fence>) {
    let leader = &app.leader;
    leader.leading.store(true, Ordering::SeqCst);
    let Some(term) = term else { return };
    leader.token.store(term.token, Ordering::SeqCst);
    leader.changes.fetch_add(1, Ordering::SeqCst);
    tracing::info!(replica = %leader.replica, token = term.token, "this replica leads: executor, job engine, sweeps and reconcilers started");
    let event = NewEvent {
        at: app.clock.now(),
        kind: "coordinator.leader_elected".into(),
        host_id: None,
        rollout_id: None,
        job_id: None,
        message: format!("replica {} leads (token {})", leader.replica, term.token),
        data: serde_json::json!({ "replica": leader.replica, "holder": term.holder, "token": term.token }),
    };
    // In the term: a replica that has already lost it does not claim it in the log. Not
    // waited for: a slow database must not delay the supervisor's next look.
    let write = fence::scope(term.clone(), store::blocking(app.store.clone(), move |s| s.append_event(&event)));
    tokio::spawn(async move {
        if let Err(e) = write.await {
            tracing::warn!(error = %e, "could not record the leadership change");
        }
    });
}

fn stepped_down(app: &Arc<AppState>, term: Option<Fence>) {
    let leader = &app.leader;
    leader.leading.store(false, Ordering::SeqCst);
    let Some(term) = term else { return };
    leader.changes.fetch_add(1, Ordering::SeqCst);
    let reason = match leader.last_reason.lock().unwrap_or_else(PoisonError::into_inner).take() {
        Some(StepDown::TakenOver) => "taken_over",
        Some(StepDown::TokenChanged) => "token_changed",
        Some(StepDown::Lapsed) | None => "lapsed",
    };
    tracing::warn!(replica = %leader.replica, token = term.token, reason, "this replica stopped leading: leader work aborted");
    let event = NewEvent {
        at: app.clock.now(),
        kind: "coordinator.leader_stepped_down".into(),
        host_id: None,
        rollout_id: None,
        job_id: None,
        message: format!("replica {} stopped leading (token {}): {reason}", leader.replica, term.token),
        data: serde_json::json!({ "replica": leader.replica, "holder": term.holder, "token": term.token, "reason": reason }),
    };
    // Outside any term (it has ended); a replica cut off from the database only logs it.
    let store = app.store.clone();
    tokio::spawn(async move {
        if let Err(e) = store::blocking(store, move |s| s.append_event(&event)).await {
            tracing::warn!(error = %e, "could not record the leadership change");
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_one_sqlite_process_always_leads_with_nothing_to_fence() {
        let l = Leadership::single("solo".into());
        assert_eq!(l.current(), Lead::Leader(None));
        assert!(!l.is_leading(), "not until the supervisor has started the work");
        l.leading.store(true, Ordering::SeqCst);
        let mut out = String::new();
        l.render_into(&mut out);
        assert!(out.contains("drover_leader{replica=\"solo\"} 1\n"), "{out}");
        assert!(out.contains("# TYPE drover_leader_changes_total counter\n"), "{out}");
        l.hand_over();
        assert_eq!(l.current(), Lead::Leader(None), "nothing to hand over on SQLite");
    }
}
