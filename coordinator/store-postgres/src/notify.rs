//! Wake-ups across coordinator replicas: the leader commits an intent on replica A
//! while the host's agent long-polls on replica B; B must answer at once, not at the
//! long-poll's timeout. PostgreSQL carries it: the write sends `NOTIFY` in its transaction
//! ([`notify`]), which PostgreSQL delivers only if and when that transaction commits, and each
//! replica keeps one connection `LISTEN`ing ([`Listener`]), outside the pool.
//!
//! Notifications sent while a listener is disconnected are lost (PostgreSQL queues them only
//! for connected listeners). So the listener reports every (re)connection as
//! [`ListenEvent::Connected`]: the consumer must then assume it missed some and wake every
//! waiter, who re-reads its state; the long-poll's timeout stays the last fallback.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use super::{PgOpenError, PgOptions, chain, connect_config, postgres};
use crate::DbResult;
use drover_store::StoreError;

/// How often the listening thread looks at its stop flag while no notification comes.
const POLL: Duration = Duration::from_millis(250);
/// The longest pause between reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// What a listener reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenEvent {
    /// Listening (first time, or again after a lost connection): notifications may have been
    /// missed before this, so wake every waiter.
    Connected,
    /// A committed transaction sent `payload` on `channel`.
    Notified {
        /// The channel.
        channel: String,
        /// The payload (at most 8000 bytes, PostgreSQL's bound).
        payload: String,
    },
}

/// Whether `channel` is a name this module sends and listens on: lowercase ASCII letters,
/// digits and `_`, starting with a letter, so it is an SQL identifier without quoting.
fn valid_channel(channel: &str) -> bool {
    channel.len() <= 63
        && channel.bytes().next().is_some_and(|b| b.is_ascii_lowercase())
        && channel.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// Sends `payload` on `channel` as part of `tx`: delivered to every listener when `tx`
/// commits, never if it rolls back.
pub fn notify(tx: &mut postgres::Transaction<'_>, channel: &str, payload: &str) -> Result<(), StoreError> {
    if !valid_channel(channel) {
        return Err(StoreError::invalid("notification channel", format!("{channel:?} is not a lowercase identifier")));
    }
    tx.execute("SELECT pg_notify($1, $2)", &[&channel, &payload]).db()?;
    Ok(())
}

/// A thread holding one connection that `LISTEN`s on some channels and hands what arrives to
/// a callback; it reconnects (with backoff) when the connection is lost. Stopped when dropped.
pub struct Listener {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Listener {
    /// Starts listening on `channels` with `options`' database, calling `sink` from the
    /// listening thread for each [`ListenEvent`].
    pub fn start(options: &PgOptions, channels: &[&str], sink: impl Fn(ListenEvent) + Send + 'static) -> Result<Listener, PgOpenError> {
        if let Some(bad) = channels.iter().find(|c| !valid_channel(c)) {
            return Err(StoreError::invalid("notification channel", format!("{bad:?} is not a lowercase identifier")).into());
        }
        let (config, tls) = connect_config(options)?;
        let listen: String = channels.iter().map(|c| format!("LISTEN {c};")).collect();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("pg-listener".into())
            .spawn(move || listen_loop(&config, &tls, &listen, &flag, &sink))
            .map_err(|e| StoreError::backend(format!("cannot start the listener thread: {e}")))?;
        Ok(Listener { stop, thread: Some(thread) })
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Connect, `LISTEN`, deliver until the connection breaks or `stop`; then again, backing off.
fn listen_loop(
    config: &postgres::Config,
    tls: &tokio_postgres_rustls::MakeRustlsConnect,
    listen: &str,
    stop: &AtomicBool,
    sink: &dyn Fn(ListenEvent),
) {
    let mut backoff = Duration::from_millis(100);
    while !stop.load(Ordering::Relaxed) {
        match config.connect(tls.clone()).and_then(|mut c| c.batch_execute(listen).map(|()| c)) {
            Ok(mut client) => {
                backoff = Duration::from_millis(100);
                sink(ListenEvent::Connected);
                if let Err(e) = deliver(&mut client, stop, sink) {
                    tracing::warn!(error = %chain(&e), "lost the database connection that listens for wake-ups; reconnecting");
                }
            }
            Err(e) => {
                tracing::warn!(error = %chain(&e), retry_in_ms = backoff.as_millis(), "cannot listen for wake-ups");
                // Pacing the retries, not waiting for a condition: the stop flag is looked at
                // at least every POLL.
                let mut waited = Duration::ZERO;
                while waited < backoff && !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(POLL.min(backoff - waited));
                    waited += POLL;
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// Hands notifications to `sink` until `stop` (Ok) or the connection fails (Err).
fn deliver(client: &mut postgres::Client, stop: &AtomicBool, sink: &dyn Fn(ListenEvent)) -> Result<(), postgres::Error> {
    while !stop.load(Ordering::Relaxed) {
        {
            use postgres::fallible_iterator::FallibleIterator as _;
            let mut notifications = client.notifications();
            let mut iter = notifications.timeout_iter(POLL);
            while let Some(n) = iter.next()? {
                sink(ListenEvent::Notified { channel: n.channel().to_owned(), payload: n.payload().to_owned() });
            }
        }
        // The wait timed out: a connection the server closed says so here.
        if client.is_closed() {
            return client.batch_execute("");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_names_are_plain_identifiers() {
        assert!(valid_channel("drover_wake") && valid_channel("w2"));
        for bad in ["", "Wake", "2wake", "wake;DROP TABLE hosts", "wake-up", &"w".repeat(64)] {
            assert!(!valid_channel(bad), "{bad:?}");
        }
    }
}
