//! Wake-ups between coordinator replicas on one PostgreSQL database, over `LISTEN/NOTIFY`.
//!
//! Three things one replica does must reach the others at once:
//! - **a host's work changed** (an intent or task dispatched, a job moved): the agent may be
//!   long-polling on another replica, which must answer now, not at the poll's timeout;
//! - **the executor was poked** (a check-in whose report changed, an operator's rollout
//!   verb): only the leader plans, so the poke must reach it;
//! - **a certificate was revoked**: every replica must refuse it from its next handshake.
//!
//! [`Hub::notify`](crate::app::Hub::notify), [`Trigger::poke`](crate::executor::trigger::Trigger::poke)
//! and [`AppState::revocations_changed`](crate::app::AppState::revocations_changed) hand a
//! [`Wake`] to this module's sender thread, which batches what queued up and sends one
//! `NOTIFY` per batch (a payload holds up to ~200 host ids within PostgreSQL's 8000 bytes).
//! Each replica's [`Listener`] acts on the others' batches, ignoring its own. A listener that
//! lost its connection may have missed some: on reconnecting it wakes every held long-poll,
//! pokes the executor and re-reads the revocations. The long-poll's timeout stays the last
//! fallback; nothing is ever lost, only later.
//!
//! The same listening connection carries the invalidations of the replica's cached check-in
//! views ([`view_cache`]) and the sender thread sends its heartbeat: one connection, so
//! PostgreSQL's commit order puts an invalidation before the wake-up that follows its write.

use std::sync::Weak;
use std::sync::mpsc::{Receiver, Sender};
use std::time::Duration;

use uuid::Uuid;

use crate::app::AppState;
use crate::store::postgres::notify::{ListenEvent, Listener};
use crate::store::postgres::view_cache;
use crate::store::postgres::{PgOpenError, PgOptions, PgStore};

/// The channel replicas wake each other on.
pub const CHANNEL: &str = "drover_wake";

/// Most bytes of one payload (PostgreSQL refuses more than 8000).
const MAX_PAYLOAD: usize = 7900;

/// One thing to tell the other replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// This host's work changed.
    Host(Uuid),
    /// The executor should plan.
    Executor,
    /// The revocations changed.
    Revocations,
}

/// What the sender thread is handed.
pub type WakeSender = Sender<Wake>;

/// The replica's sender and listener; dropping it stops listening.
pub struct Peers {
    _listener: Listener,
}

/// The payloads that tell what `batch` holds, from replica `me`: `ME e`, `ME c`, and
/// `ME h ID,ID,…` split to fit.
pub fn encode(me: Uuid, batch: &[Wake]) -> Vec<String> {
    let mut out = Vec::new();
    if batch.contains(&Wake::Executor) {
        out.push(format!("{me} e"));
    }
    if batch.contains(&Wake::Revocations) {
        out.push(format!("{me} c"));
    }
    let mut hosts: Vec<Uuid> = batch.iter().filter_map(|w| if let Wake::Host(h) = w { Some(*h) } else { None }).collect();
    hosts.sort_unstable();
    hosts.dedup();
    let mut current = String::new();
    for h in hosts {
        if current.len() + 37 > MAX_PAYLOAD {
            out.push(std::mem::take(&mut current));
        }
        if current.is_empty() {
            current = format!("{me} h ");
        } else {
            current.push(',');
        }
        current.push_str(&h.to_string());
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// What a payload says, unless it came from `me` or is not one of ours.
pub fn decode(me: Uuid, payload: &str) -> Vec<Wake> {
    let mut parts = payload.splitn(3, ' ');
    let (Some(from), Some(kind)) = (parts.next(), parts.next()) else { return Vec::new() };
    if from.parse::<Uuid>().map_or(true, |from| from == me) {
        return Vec::new();
    }
    match (kind, parts.next()) {
        ("e", None) => vec![Wake::Executor],
        ("c", None) => vec![Wake::Revocations],
        ("h", Some(ids)) => ids.split(',').filter_map(|id| id.parse().ok()).map(Wake::Host).collect(),
        _ => Vec::new(),
    }
}

/// Starts telling the other replicas (through `store`) what this one queues on the returned
/// sender, and listening for what they tell it (with `options`).
pub fn start(store: PgStore, options: &PgOptions, app: Weak<AppState>) -> Result<(Peers, WakeSender), PgOpenError> {
    let me = Uuid::new_v4();
    let (tx, rx) = std::sync::mpsc::channel();
    // Left never live (it then keeps nothing and marks no write) when the operator turned it off.
    let views = options.cache_checkin_views.then(|| store.view_cache().clone());
    let heartbeat = views.as_ref().map(|v| v.heartbeat());
    std::thread::Builder::new()
        .name("pg-wake-sender".into())
        .spawn(move || send_loop(&store, me, heartbeat.as_deref(), &rx))
        .map_err(|e| crate::store::StoreError::backend(format!("cannot start the wake-up sender: {e}")))?;
    let runtime = tokio::runtime::Handle::current();
    let first = std::sync::atomic::AtomicBool::new(true);
    let listener = Listener::start(options, &[CHANNEL, view_cache::CHANNEL], move |event| {
        // The views first, in the order heard: a wake-up below must find them dropped.
        match &event {
            ListenEvent::Connected => {
                if let Some(views) = &views {
                    views.connected();
                }
            }
            ListenEvent::Notified { channel, payload } if channel == view_cache::CHANNEL => {
                if let Some(views) = &views {
                    views.heard(payload, std::time::Instant::now());
                }
                return;
            }
            ListenEvent::Notified { .. } => {}
        }
        let Some(app) = app.upgrade() else { return };
        let wakes = match event {
            ListenEvent::Connected if first.swap(false, std::sync::atomic::Ordering::SeqCst) => return,
            ListenEvent::Connected => {
                // Reconnected: what was sent meanwhile is lost; everyone looks again.
                tracing::info!("listening for wake-ups again: waking every held check-in");
                app.hub.wake_all_local();
                vec![Wake::Executor, Wake::Revocations]
            }
            ListenEvent::Notified { payload, .. } => decode(me, &payload),
        };
        for wake in wakes {
            match wake {
                Wake::Host(h) => app.hub.notify_local(h),
                Wake::Executor => app.executor.poke_local(),
                Wake::Revocations => {
                    let app = app.clone();
                    runtime.spawn(async move {
                        if let Err(e) = app.refresh_crl().await {
                            tracing::error!(error = %e, "re-reading revocations another replica made failed");
                        }
                    });
                }
            }
        }
    })?;
    Ok((Peers { _listener: listener }, tx))
}

/// Sends what queues up, one batch at a time, and `heartbeat` (the view cache's, when it is
/// on) every [`view_cache::HEARTBEAT_EVERY`], until every sender is gone.
fn send_loop(store: &PgStore, me: Uuid, heartbeat: Option<&str>, rx: &Receiver<Wake>) {
    let mut beat_due = std::time::Instant::now();
    loop {
        let mut batch = match heartbeat {
            Some(_) => match rx.recv_timeout(beat_due.saturating_duration_since(std::time::Instant::now())) {
                Ok(first) => vec![first],
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Vec::new(),
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
            },
            None => match rx.recv() {
                Ok(first) => vec![first],
                Err(_) => return,
            },
        };
        batch.extend(rx.try_iter().take(100_000));
        let mut payloads: Vec<(&str, String)> = encode(me, &batch).into_iter().map(|p| (CHANNEL, p)).collect();
        if let Some(beat) = heartbeat.filter(|_| std::time::Instant::now() >= beat_due) {
            payloads.push((view_cache::CHANNEL, beat.to_owned()));
            beat_due = std::time::Instant::now() + view_cache::HEARTBEAT_EVERY;
        }
        if payloads.is_empty() {
            continue;
        }
        // One connection for the whole batch: each checkout costs a liveness round trip.
        let sent = store.conn().map_err(|e| e.to_string()).and_then(|mut c| {
            payloads.iter().try_for_each(|(channel, payload)| {
                c.execute("SELECT pg_notify($1, $2)", &[channel, payload]).map(drop).map_err(|e| e.to_string())
            })
        });
        match sent {
            Ok(()) => {}
            // A heartbeat alone: unheard, the cache stops being trusted and reads go to the
            // database.
            Err(e) if batch.is_empty() => tracing::debug!(error = %e, "cannot send the view cache's heartbeat"),
            Err(e) => {
                // The others fall back on their long-poll timeout and the executor's interval.
                tracing::warn!(error = %e, "cannot wake the other replicas");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_round_trip_and_split_within_the_payload_bound() {
        let (me, other) = (Uuid::new_v4(), Uuid::new_v4());
        let hosts: Vec<Uuid> = (0..500).map(|_| Uuid::new_v4()).collect();
        let mut batch: Vec<Wake> = hosts.iter().map(|h| Wake::Host(*h)).collect();
        batch.extend([Wake::Executor, Wake::Host(hosts[0]), Wake::Revocations, Wake::Executor]);
        let payloads = encode(other, &batch);
        assert!(payloads.len() >= 3, "500 ids need several payloads");
        assert!(payloads.iter().all(|p| p.len() <= 8000));
        let mut seen: Vec<Wake> = payloads.iter().flat_map(|p| decode(me, p)).collect();
        assert_eq!(seen.iter().filter(|w| **w == Wake::Executor).count(), 1);
        assert_eq!(seen.iter().filter(|w| **w == Wake::Revocations).count(), 1);
        seen.retain(|w| matches!(w, Wake::Host(_)));
        let mut want: Vec<Wake> = hosts.iter().map(|h| Wake::Host(*h)).collect();
        want.sort_by_key(|w| format!("{w:?}"));
        seen.sort_by_key(|w| format!("{w:?}"));
        assert_eq!(seen, want, "every host once");
        assert!(payloads.iter().all(|p| decode(other, p).is_empty()), "a replica ignores its own");
        for junk in ["", "x", "not-a-uuid e", &format!("{other} z"), &format!("{other} h")] {
            assert!(decode(me, junk).is_empty(), "{junk:?}");
        }
    }
}
