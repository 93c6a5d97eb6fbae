//! The thread that runs a replica's [`Election`] against the database: tries the lease when
//! the election says, reports each change of role, and gives the lease up when dropped (a
//! replica shutting down hands over at once instead of after the lease lapses).
//!
//! [`Elector::leading`] is what leader work asks before acting: it compares the deadline with
//! the clock itself, so it turns false on time even while the thread is stuck in a call to an
//! unreachable database.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::PgStore;
use super::election::{Attempt, Change, Election, Timing};
use super::lease::{Lease, leads_until};

/// How often the thread wakes between tries, to report a lapsed deadline and see its stop flag.
const TICK: Duration = Duration::from_millis(50);
/// How long after the lease's expiry a follower tries: the database must see it lapsed.
const LAPSE_SLACK: Duration = Duration::from_millis(20);

/// What the thread shares with the replica's leader work.
#[derive(Default)]
struct Shared {
    /// The lease this replica holds and until when it may act on it.
    held: Option<(Lease, Instant)>,
}

/// A running election for one replica; dropping it stops it and releases a held lease.
pub struct Elector {
    shared: Arc<Mutex<Shared>>,
    stop: Arc<AtomicBool>,
    release_on_stop: Arc<AtomicBool>,
    store: PgStore,
    thread: Option<JoinHandle<()>>,
}

impl Elector {
    /// Starts electing on lease `name` as `holder`, calling `sink` with every change of role
    /// (from the election thread).
    pub fn start(
        store: PgStore,
        name: &str,
        holder: &str,
        timing: Timing,
        sink: impl Fn(Change) + Send + 'static,
    ) -> std::io::Result<Elector> {
        let (shared, stop, release_on_stop) =
            (Arc::new(Mutex::new(Shared::default())), Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(true)));
        let (s, st, db, name, holder) = (shared.clone(), stop.clone(), store.clone(), name.to_owned(), holder.to_owned());
        let thread = std::thread::Builder::new().name("leader-election".into()).spawn(move || {
            let mut election = Election::new(timing);
            while !st.load(Ordering::Relaxed) {
                if election.next_attempt().is_none_or(|at| Instant::now() >= at) {
                    let sent = Instant::now();
                    let mut lapses_at = None;
                    let attempt = match db.acquire_lease(&name, &holder, timing.ttl) {
                        Ok(Some(lease)) => {
                            let token = lease.token;
                            let until = leads_until(sent, timing.ttl, timing.margin);
                            let mut g = s.lock().unwrap_or_else(PoisonError::into_inner);
                            // Only the token the election keeps is acted on (see below).
                            g.held = Some((lease, until));
                            Attempt::Held { token }
                        }
                        Ok(None) => {
                            // Try again the moment it lapses (a crashed leader renews no more).
                            match db.lease_remaining(&name) {
                                Ok(Some(left)) => lapses_at = Some(Instant::now() + left + LAPSE_SLACK),
                                Ok(None) => {}
                                Err(e) => tracing::debug!(error = %e, "cannot read when the leader lease lapses"),
                            }
                            Attempt::Taken
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, lease = %name, "cannot reach the database to hold the leader lease");
                            Attempt::Failed
                        }
                    };
                    if let Some(change) = election.on_attempt(sent, attempt, Instant::now()) {
                        sink(change);
                    }
                    if let Some(at) = lapses_at {
                        election.lease_lapses_at(at);
                    }
                }
                if let Some(change) = election.on_tick(Instant::now()) {
                    sink(change);
                }
                // What leader work may act on: the election's verdict, never more.
                let mut g = s.lock().unwrap_or_else(PoisonError::into_inner);
                match (election.leading(Instant::now()), &g.held) {
                    (Some(token), Some((lease, _))) if lease.token == token => {}
                    _ => g.held = None,
                }
                drop(g);
                std::thread::sleep(TICK);
            }
        })?;
        Ok(Elector { shared, stop, release_on_stop, store, thread: Some(thread) })
    }

    /// The lease to fence leader writes with, while this replica leads; `None` from the
    /// moment its deadline passes, whatever the thread is doing.
    pub fn leading(&self) -> Option<Lease> {
        let g = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        g.held.as_ref().filter(|(_, until)| Instant::now() < *until).map(|(lease, _)| lease.clone())
    }

    /// Stops without releasing the lease, as a crashed replica would: the others take over
    /// only once it lapses. For fault tests.
    pub fn abandon(mut self) {
        self.release_on_stop.store(false, Ordering::Relaxed);
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Elector {
    fn drop(&mut self) {
        self.halt();
        if self.release_on_stop.load(Ordering::Relaxed)
            && let Some(lease) = self.leading()
            && let Err(e) = self.store.release_lease(&lease)
        {
            tracing::warn!(error = %e, "could not give the leader lease up; it lapses on its own");
        }
    }
}
