//! What the listener holds open before a client has proven who it is (issue 23).
//!
//! Enrollment needs connections without a client certificate, so anyone can complete a
//! handshake; without bounds, idle anonymous connections could hold every file descriptor and
//! lock agents and operators out. The rules, cheapest first:
//!
//! - **The accept loop waits, it never refuses**: it takes a permit for every open connection
//!   (`max_open`) and for every handshake in progress (`max_handshakes`) before accepting, so
//!   at either cap new connections queue in the kernel's backlog instead of being turned away
//!   — an agent reconnecting is delayed, never refused.
//! - **Unauthenticated connections are capped and the newest is refused**: a connection counts
//!   as unauthenticated from its accept until its handshake shows a verified client
//!   certificate. Per source address (`max_unauthenticated_per_source`, handshakes included)
//!   and in all (`max_unauthenticated`, after the handshake), a connection over the cap is
//!   closed at once. An authenticated connection is never closed by these caps: it stops
//!   counting the moment its certificate is verified.
//! - **Deadlines**: the handshake (`handshake_secs`), the first request after it
//!   (`first_request_secs`), and idling between requests without a certificate
//!   (`unauthenticated_idle_secs`).
//!
//! Refusals and timeouts are counted for `/metrics`.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::ConnectionsConfig;

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Its source address has as many unauthenticated connections as allowed.
    PerSource,
    /// As many connections without a certificate are open as allowed.
    Unauthenticated,
}

impl Refusal {
    fn label(self) -> &'static str {
        match self {
            Refusal::PerSource => "per_source",
            Refusal::Unauthenticated => "unauthenticated",
        }
    }
}

/// Which deadline closed a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deadline {
    /// The TLS handshake.
    Handshake,
    /// The first request after the handshake.
    FirstRequest,
    /// Idle between requests without a certificate.
    Idle,
}

#[derive(Default)]
struct Counts {
    unauthenticated: usize,
    per_source: HashMap<IpAddr, usize>,
}

/// The listener's bounds and their counters; shared by the accept loop and every connection.
pub struct ConnLimits {
    config: ConnectionsConfig,
    open: Arc<Semaphore>,
    handshakes: Arc<Semaphore>,
    counts: Mutex<Counts>,
    refused_per_source: AtomicU64,
    refused_unauthenticated: AtomicU64,
    timed_out: [AtomicU64; 3],
}

/// Holds a source's unauthenticated slot (and, once the handshake is done without a
/// certificate, one of the unauthenticated connections); released when dropped or when
/// [`SourceSlot::authenticated`] is called.
pub struct SourceSlot {
    limits: Arc<ConnLimits>,
    ip: IpAddr,
    counted_unauthenticated: bool,
    live: bool,
}

impl ConnLimits {
    /// The bounds of `config`.
    pub fn new(config: ConnectionsConfig) -> Arc<ConnLimits> {
        Arc::new(ConnLimits {
            open: Arc::new(Semaphore::new(config.max_open)),
            handshakes: Arc::new(Semaphore::new(config.max_handshakes)),
            config,
            counts: Mutex::default(),
            refused_per_source: AtomicU64::new(0),
            refused_unauthenticated: AtomicU64::new(0),
            timed_out: Default::default(),
        })
    }

    /// Whether accepted sockets set `TCP_NODELAY`.
    pub fn tcp_nodelay(&self) -> bool {
        self.config.tcp_nodelay
    }

    /// Waits for room for one more open connection and one more handshake (the accept loop
    /// calls this before accepting: at a cap it waits, the kernel queues).
    pub async fn room(&self) -> (OwnedSemaphorePermit, OwnedSemaphorePermit) {
        // Neither semaphore is ever closed, so acquiring cannot fail; were it to, the loop
        // would still be bounded by the other permit and the accept error path.
        let open = loop {
            if let Ok(p) = self.open.clone().acquire_owned().await {
                break p;
            }
        };
        let handshake = loop {
            if let Ok(p) = self.handshakes.clone().acquire_owned().await {
                break p;
            }
        };
        (open, handshake)
    }

    /// Counts a new connection from `ip` as unauthenticated, or refuses it (the newest)
    /// when its source is at the cap.
    pub fn admit_source(self: &Arc<Self>, ip: IpAddr) -> Result<SourceSlot, Refusal> {
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        let n = c.per_source.entry(ip).or_insert(0);
        if *n >= self.config.max_unauthenticated_per_source {
            drop(c);
            self.refused(Refusal::PerSource);
            return Err(Refusal::PerSource);
        }
        *n += 1;
        Ok(SourceSlot { limits: self.clone(), ip, counted_unauthenticated: false, live: true })
    }

    fn refused(&self, why: Refusal) {
        match why {
            Refusal::PerSource => &self.refused_per_source,
            Refusal::Unauthenticated => &self.refused_unauthenticated,
        }
        .fetch_add(1, Ordering::Relaxed);
        tracing::debug!(reason = why.label(), "connection refused");
    }

    /// Records a connection closed by a deadline.
    pub fn timed_out(&self, which: Deadline) {
        self.timed_out[which as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// The handshake deadline.
    pub fn handshake_timeout(&self) -> Duration {
        Duration::from_secs(self.config.handshake_secs)
    }

    /// The first request's deadline.
    pub fn first_request_timeout(&self) -> Duration {
        Duration::from_secs(self.config.first_request_secs)
    }

    /// How long a connection without a certificate may idle between requests.
    pub fn unauthenticated_idle(&self) -> Duration {
        Duration::from_secs(self.config.unauthenticated_idle_secs)
    }

    /// Unauthenticated connections open now (handshakes excluded).
    pub fn unauthenticated_open(&self) -> usize {
        self.counts.lock().unwrap_or_else(|p| p.into_inner()).unauthenticated
    }

    /// Appends the connection families to a Prometheus exposition.
    pub fn render_into(&self, out: &mut String) {
        let _ = writeln!(out, "# HELP drover_connections_open Connections open now, by kind.\n# TYPE drover_connections_open gauge");
        let open = self.config.max_open - self.open.available_permits();
        let _ = writeln!(out, "drover_connections_open{{kind=\"all\"}} {open}");
        let _ = writeln!(out, "drover_connections_open{{kind=\"unauthenticated\"}} {}", self.unauthenticated_open());
        let handshaking = self.config.max_handshakes - self.handshakes.available_permits();
        let _ = writeln!(out, "drover_connections_open{{kind=\"handshaking\"}} {handshaking}");
        let _ = writeln!(
            out,
            "# HELP drover_connections_refused_total Connections closed at once by a cap, by cap.\n# TYPE drover_connections_refused_total counter"
        );
        for (why, n) in [(Refusal::PerSource, &self.refused_per_source), (Refusal::Unauthenticated, &self.refused_unauthenticated)] {
            let _ = writeln!(out, "drover_connections_refused_total{{reason=\"{}\"}} {}", why.label(), n.load(Ordering::Relaxed));
        }
        let _ = writeln!(
            out,
            "# HELP drover_connections_timed_out_total Connections closed by a deadline, by deadline.\n# TYPE drover_connections_timed_out_total counter"
        );
        for (label, i) in [("handshake", Deadline::Handshake), ("first_request", Deadline::FirstRequest), ("idle", Deadline::Idle)] {
            let _ = writeln!(
                out,
                "drover_connections_timed_out_total{{deadline=\"{label}\"}} {}",
                self.timed_out[i as usize].load(Ordering::Relaxed)
            );
        }
    }
}

impl SourceSlot {
    /// The handshake verified a client certificate: the connection stops counting as
    /// unauthenticated (no cap ever closes it).
    pub fn authenticated(mut self) {
        self.release();
    }

    /// The handshake ended without a certificate: the connection takes one of the
    /// unauthenticated slots, or is refused (the newest) when they are all taken.
    pub fn anonymous(mut self) -> Result<SourceSlot, Refusal> {
        let limits = self.limits.clone();
        let mut c = limits.counts.lock().unwrap_or_else(|p| p.into_inner());
        if c.unauthenticated >= limits.config.max_unauthenticated {
            drop(c);
            self.release();
            limits.refused(Refusal::Unauthenticated);
            return Err(Refusal::Unauthenticated);
        }
        c.unauthenticated += 1;
        self.counted_unauthenticated = true;
        Ok(self)
    }

    fn release(&mut self) {
        if !self.live {
            return;
        }
        self.live = false;
        let mut c = self.limits.counts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = c.per_source.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                c.per_source.remove(&self.ip);
            }
        }
        if self.counted_unauthenticated {
            c.unauthenticated = c.unauthenticated.saturating_sub(1);
        }
    }
}

impl Drop for SourceSlot {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(total: usize, per_source: usize) -> Arc<ConnLimits> {
        ConnLimits::new(ConnectionsConfig {
            max_unauthenticated: total,
            max_unauthenticated_per_source: per_source,
            ..ConnectionsConfig::default()
        })
    }

    #[test]
    fn the_newest_over_a_source_cap_is_refused_and_a_closed_one_frees_its_slot() {
        let l = limits(100, 2);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let s1 = l.admit_source(a).expect("1");
        let _s2 = l.admit_source(a).expect("2");
        assert_eq!(l.admit_source(a).err(), Some(Refusal::PerSource));
        assert!(l.admit_source(b).is_ok(), "another source is not affected");
        drop(s1);
        assert!(l.admit_source(a).is_ok(), "a closed connection frees its slot");
    }

    #[test]
    fn an_authenticated_connection_stops_counting_and_is_never_refused() {
        let l = limits(1, 1);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let agent = l.admit_source(a).expect("handshaking");
        agent.authenticated();
        // Its source has room again at once, however many agents sit behind it.
        let anon = l.admit_source(a).expect("room").anonymous().expect("the one unauthenticated slot");
        assert_eq!(l.unauthenticated_open(), 1);
        let other = l.admit_source("10.0.0.9".parse().unwrap()).expect("handshaking");
        assert_eq!(other.anonymous().err(), Some(Refusal::Unauthenticated), "the newest without a certificate is refused");
        drop(anon);
        assert_eq!(l.unauthenticated_open(), 0);
        let mut out = String::new();
        l.render_into(&mut out);
        assert!(out.contains("drover_connections_refused_total{reason=\"unauthenticated\"} 1"), "{out}");
    }
}
