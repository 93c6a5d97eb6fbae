//! What the listener holds open before a client has proven who it is.
//!
//! Enrollment needs connections without a client certificate, so anyone can complete a
//! handshake; without bounds, idle anonymous connections could hold every file descriptor and
//! lock agents and operators out. The rules, cheapest first:
//!
//! - **The accept loop waits, it never refuses**: it takes a permit for every open connection
//!   (`max_open`) before accepting, so at the cap new connections queue in the kernel's
//!   backlog instead of being turned away — an agent reconnecting is delayed, never refused.
//! - **Handshakes wait for room, they are never refused**: a handshake needs one of its
//!   source's slots (`max_handshakes_per_source`) and then one of all (`max_handshakes`); at
//!   either cap it waits, first come first served, and the handshake deadline
//!   (`handshake_secs`, from the accept) bounds waiting and handshaking together. A source
//!   stalling its handshakes delays its own, not everybody's.
//! - **Only a connection whose handshake ended without a certificate counts as anonymous**:
//!   the caps per source (`max_unauthenticated_per_source`) and in all
//!   (`max_unauthenticated`) count nothing else, so a client that presents a certificate is
//!   never refused by them, however many anonymous connections share its address (a NAT, a
//!   load balancer). At a cap the **oldest idle** anonymous connection is closed to make room;
//!   only when every one is busy with a request is the newest closed instead.
//! - **Requests without a certificate are rate-limited per source** ([`crate::rate_limit`]);
//!   a refused one is answered 429 after a delay, so a client hammering the anonymous routes
//!   gets no more than a request a second on each of its connections.
//! - **Their answers share a rate**: one larger than a frame is sent within
//!   `anonymous_bytes_per_sec` shared by all of them ([`crate::paced_body`]), so downloading
//!   the agent binary over and over cannot take the cores operators need.
//! - **Their bodies are small and share one budget**: at most
//!   [`crate::body::MAX_ANONYMOUS_BODY_BYTES`] each, and all anonymous bodies being read or
//!   handled at once at most `anonymous_body_budget_bytes`; a body that finds no room within
//!   [`BODY_BUDGET_WAIT`] is answered 503. Memory freed by such bodies is handed back to the
//!   system ([`ConnLimits::trim_if_due`]).
//! - **Deadlines**: the handshake, the first request after it (`first_request_secs`), and
//!   idling between requests without a certificate (`unauthenticated_idle_secs`).
//!
//! Per source means per IPv4 address or per IPv6 /64 ([`source_of`]). Refusals, evictions and
//! timeouts are counted for `/metrics`.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use crate::body::BodyLimit;
use crate::config::ConnectionsConfig;
use crate::rate_limit::SourceBuckets;

/// How long an anonymous body waits for room in the shared budget before it is answered 503.
pub const BODY_BUDGET_WAIT: Duration = Duration::from_secs(5);
/// The least a rate-limited request waits before its 429: a client that ignores
/// `Retry-After` still gets no more than one answer a second on each connection.
pub const RATE_LIMITED_DELAY: Duration = Duration::from_secs(1);
/// An answer to a request without a certificate costs one token of its source's bucket per
/// this many bytes beyond the first token (the agent binary is tens of MB: at the default rate
/// a source is served 50 MB/s of it, and a client hammering it gets no more).
pub const ANONYMOUS_BYTES_PER_TOKEN: u64 = 256 << 10;
/// Bytes every anonymous answer together may send at once before the shared rate applies.
pub const ANONYMOUS_BYTES_BURST: u64 = 8 << 20;
/// Bytes of anonymous bodies released since the last trim that make the next one due.
const TRIM_AFTER_BYTES: u64 = 4 << 20;

/// The source a per-source cap or bucket counts `ip` under: an IPv4 address (an IPv4-mapped
/// IPv6 one as the IPv4 it is), or an IPv6 address's /64 — one subscriber's allocation, which
/// hands its holder 2^64 addresses to rotate through.
pub fn source_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(std::net::Ipv6Addr::from(u128::from(v6) & !((1u128 << 64) - 1))),
        },
        v4 => v4,
    }
}

/// Why a connection was closed at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Its source has as many anonymous connections as allowed, every one of them busy.
    PerSource,
    /// As many anonymous connections are open as allowed, every one of them busy.
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
    /// The TLS handshake (waiting for a slot included).
    Handshake,
    /// The first request after the handshake.
    FirstRequest,
    /// Idle between requests without a certificate.
    Idle,
}

/// What an anonymous connection shares with the caps: whether it is busy, and the signal
/// that it was chosen to make room.
#[derive(Default)]
pub struct AnonConn {
    busy: AtomicUsize,
    evict: Notify,
}

impl AnonConn {
    /// Marks a request in progress until the guard drops: a busy connection is not evicted.
    pub fn busy(self: &Arc<Self>) -> Busy {
        self.busy.fetch_add(1, Ordering::AcqRel);
        Busy(self.clone())
    }

    /// Resolves once the caps chose this connection to make room (at once if they already
    /// did): the connection closes at its next idle moment.
    pub async fn evicted(&self) {
        self.evict.notified().await;
    }
}

/// A request in progress on an anonymous connection.
pub struct Busy(Arc<AnonConn>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

#[derive(Default)]
struct Anonymous {
    next_id: u64,
    /// Open anonymous connections by id: ids grow, so the first is the oldest.
    open: BTreeMap<u64, (IpAddr, Arc<AnonConn>)>,
    per_source: HashMap<IpAddr, usize>,
}

impl Anonymous {
    /// Removes connection `id` from the counts; false if it was not counted (evicted).
    fn remove(&mut self, id: u64) -> bool {
        let Some((ip, _)) = self.open.remove(&id) else { return false };
        if let Some(n) = self.per_source.get_mut(&ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per_source.remove(&ip);
            }
        }
        true
    }

    /// The oldest idle connection (of `ip`, when given).
    fn oldest_idle(&self, ip: Option<IpAddr>) -> Option<u64> {
        self.open
            .iter()
            .find(|(_, (from, conn))| ip.is_none_or(|ip| *from == ip) && conn.busy.load(Ordering::Acquire) == 0)
            .map(|(id, _)| *id)
    }
}

/// The listener's bounds and their counters; shared by the accept loop and every connection.
pub struct ConnLimits {
    config: ConnectionsConfig,
    open: Arc<Semaphore>,
    handshakes: Arc<Semaphore>,
    /// Per source: its handshake slots, and how many connections wait for or hold one.
    handshaking: Mutex<HashMap<IpAddr, (Arc<Semaphore>, usize)>>,
    anonymous: Mutex<Anonymous>,
    bodies: Arc<Semaphore>,
    buckets: Mutex<SourceBuckets>,
    pacer: Arc<Mutex<crate::rate_limit::BytePacer>>,
    refused: [AtomicU64; 2],
    evicted: [AtomicU64; 2],
    timed_out: [AtomicU64; 3],
    proxy_refused: AtomicU64,
    bodies_refused: AtomicU64,
    released_bytes: AtomicU64,
    body_limit: BodyLimit,
}

/// A connection's handshake slots, its source's and one of all; released when dropped.
pub struct HandshakeSlot {
    limits: Arc<ConnLimits>,
    ip: IpAddr,
    source: Option<OwnedSemaphorePermit>,
    all: Option<OwnedSemaphorePermit>,
}

impl Drop for HandshakeSlot {
    fn drop(&mut self) {
        self.all.take();
        self.source.take();
        let mut m = self.limits.handshaking.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = m.get_mut(&self.ip) {
            entry.1 = entry.1.saturating_sub(1);
            if entry.1 == 0 {
                m.remove(&self.ip);
            }
        }
    }
}

/// An anonymous connection's place under the caps; released when dropped.
pub struct AnonSlot {
    limits: Arc<ConnLimits>,
    id: u64,
    conn: Arc<AnonConn>,
}

impl AnonSlot {
    /// What the connection shares with the caps.
    pub fn conn(&self) -> &Arc<AnonConn> {
        &self.conn
    }
}

impl Drop for AnonSlot {
    fn drop(&mut self) {
        self.limits.anonymous.lock().unwrap_or_else(|p| p.into_inner()).remove(self.id);
    }
}

/// Room for one anonymous body in the shared budget; given back when dropped.
pub struct BodyPermit {
    limits: Arc<ConnLimits>,
    bytes: u64,
    _permit: OwnedSemaphorePermit,
}

impl Drop for BodyPermit {
    fn drop(&mut self) {
        self.limits.released_bytes.fetch_add(self.bytes, Ordering::Relaxed);
    }
}

impl ConnLimits {
    /// The bounds of `config`, request bodies bounded by the router's `body_limit`.
    pub fn new(config: ConnectionsConfig, body_limit: BodyLimit) -> Arc<ConnLimits> {
        Arc::new(ConnLimits {
            open: Arc::new(Semaphore::new(config.max_open)),
            handshakes: Arc::new(Semaphore::new(config.max_handshakes)),
            handshaking: Mutex::default(),
            anonymous: Mutex::default(),
            bodies: Arc::new(Semaphore::new(config.anonymous_body_budget_bytes)),
            buckets: Mutex::new(SourceBuckets::new(config.anonymous_requests_per_sec, config.anonymous_burst)),
            pacer: Arc::new(Mutex::new(crate::rate_limit::BytePacer::new(config.anonymous_bytes_per_sec, ANONYMOUS_BYTES_BURST))),
            config,
            refused: Default::default(),
            evicted: Default::default(),
            timed_out: Default::default(),
            proxy_refused: AtomicU64::new(0),
            bodies_refused: AtomicU64::new(0),
            released_bytes: AtomicU64::new(0),
            body_limit,
        })
    }

    /// The router's body policy: the most a request may carry, applied before buffering.
    pub fn body_limit(&self) -> BodyLimit {
        self.body_limit
    }

    /// Whether accepted sockets set `TCP_NODELAY`.
    pub fn tcp_nodelay(&self) -> bool {
        self.config.tcp_nodelay
    }

    /// The load balancers whose PROXY protocol v2 headers are trusted.
    pub fn balancers(&self) -> &[IpAddr] {
        &self.config.proxy_protocol_from
    }

    /// Waits for room for one more open connection (the accept loop calls this before
    /// accepting: at the cap it waits, the kernel queues).
    pub async fn room(&self) -> OwnedSemaphorePermit {
        // The semaphore is never closed, so acquiring cannot fail; were it to, the loop
        // would retry rather than accept past the cap.
        loop {
            if let Ok(p) = self.open.clone().acquire_owned().await {
                return p;
            }
        }
    }

    /// Waits for one of `ip`'s handshake slots, then one of all (first come, first served).
    /// The caller bounds the wait with the handshake deadline.
    pub async fn handshake_slot(self: &Arc<Self>, ip: IpAddr) -> HandshakeSlot {
        let ip = source_of(ip);
        let source = {
            let mut m = self.handshaking.lock().unwrap_or_else(|p| p.into_inner());
            let per_source = self.config.max_handshakes_per_source;
            let entry = m.entry(ip).or_insert_with(|| (Arc::new(Semaphore::new(per_source)), 0));
            entry.1 += 1;
            entry.0.clone()
        };
        let mut slot = HandshakeSlot { limits: self.clone(), ip, source: None, all: None };
        slot.source = source.acquire_owned().await.ok();
        slot.all = self.handshakes.clone().acquire_owned().await.ok();
        slot
    }

    /// Counts a connection whose handshake ended without a certificate. At a cap the oldest
    /// idle anonymous connection (of the same source, for the per-source cap) is told to close
    /// and stops counting; when all are busy, this one, the newest, is refused.
    pub fn anonymous(self: &Arc<Self>, ip: IpAddr) -> Result<AnonSlot, Refusal> {
        let ip = source_of(ip);
        let mut a = self.anonymous.lock().unwrap_or_else(|p| p.into_inner());
        for (cap, of) in [(Refusal::PerSource, Some(ip)), (Refusal::Unauthenticated, None)] {
            let full = match cap {
                Refusal::PerSource => a.per_source.get(&ip).copied().unwrap_or(0) >= self.config.max_unauthenticated_per_source,
                Refusal::Unauthenticated => a.open.len() >= self.config.max_unauthenticated,
            };
            if !full {
                continue;
            }
            let Some(victim) = a.oldest_idle(of) else {
                drop(a);
                self.refused[cap as usize].fetch_add(1, Ordering::Relaxed);
                tracing::debug!(reason = cap.label(), %ip, "anonymous connection refused: every one at the cap is busy");
                return Err(cap);
            };
            if let Some((_, conn)) = a.open.get(&victim) {
                conn.evict.notify_one();
            }
            a.remove(victim);
            self.evicted[cap as usize].fetch_add(1, Ordering::Relaxed);
            tracing::debug!(cap = cap.label(), %ip, "oldest idle anonymous connection closed to make room");
        }
        let id = a.next_id;
        a.next_id += 1;
        let conn = Arc::new(AnonConn::default());
        a.open.insert(id, (ip, conn.clone()));
        *a.per_source.entry(ip).or_insert(0) += 1;
        Ok(AnonSlot { limits: self.clone(), id, conn })
    }

    /// Takes a token from `ip`'s bucket for a request without a certificate; `Err(wait)` when
    /// it is rate-limited, with how long until the next token.
    pub fn allow_anonymous_request(&self, ip: IpAddr) -> Result<(), Duration> {
        let ip = source_of(ip);
        let now = tokio::time::Instant::now().into_std();
        self.buckets.lock().unwrap_or_else(|p| p.into_inner()).take(ip, now)
    }

    /// Charges `ip`'s bucket for an answer of `bytes` (one token was taken for the request):
    /// `Err(wait)` when the source cannot pay for it now, and the answer is replaced by a 429.
    pub fn charge_anonymous_answer(&self, ip: IpAddr, bytes: u64) -> Result<(), Duration> {
        let ip = source_of(ip);
        let extra = bytes / ANONYMOUS_BYTES_PER_TOKEN;
        if extra == 0 {
            return Ok(());
        }
        let now = tokio::time::Instant::now().into_std();
        self.buckets.lock().unwrap_or_else(|p| p.into_inner()).take_n(ip, u32::try_from(extra).unwrap_or(u32::MAX), now)
    }

    /// Admits a request without a certificate from `ip`, or answers its 429 — late, so a client
    /// that ignores `Retry-After` gains nothing by asking again at once.
    pub async fn admit_anonymous(&self, ip: IpAddr) -> Result<(), axum::response::Response> {
        match self.allow_anonymous_request(ip) {
            Ok(()) => Ok(()),
            Err(wait) => {
                tokio::time::sleep(wait.max(RATE_LIMITED_DELAY)).await;
                Err(rate_limited(wait))
            }
        }
    }

    /// The answer to a request without a certificate as it is sent: a large one (the agent
    /// binary) paid for by its size, or a 429 as late as any, and paced.
    pub async fn anonymous_answer(&self, ip: IpAddr, is_head: bool, response: axum::response::Response) -> axum::response::Response {
        use axum::body::HttpBody as _;
        if !is_head
            && let Some(bytes) = response.body().size_hint().exact()
            && let Err(wait) = self.charge_anonymous_answer(ip, bytes)
        {
            tokio::time::sleep(wait.max(RATE_LIMITED_DELAY)).await;
            return rate_limited(wait);
        }
        self.pace(response)
    }

    /// An answer to a request without a certificate, larger ones sent within the bytes a
    /// second all such answers share ([`crate::paced_body`]).
    pub fn pace(&self, response: axum::response::Response) -> axum::response::Response {
        use axum::body::HttpBody as _;
        if response.body().size_hint().lower() <= crate::paced_body::PIECE as u64 {
            return response;
        }
        let pacer = self.pacer.clone();
        response.map(|body| axum::body::Body::new(crate::paced_body::Paced::new(body, pacer)))
    }

    /// Room for an anonymous body of `bytes` in the shared budget, waiting at most
    /// [`BODY_BUDGET_WAIT`]; None when there is none (the request is answered 503).
    pub async fn anonymous_body(self: &Arc<Self>, bytes: usize) -> Option<BodyPermit> {
        let n = u32::try_from(bytes.max(1)).ok()?;
        match tokio::time::timeout(BODY_BUDGET_WAIT, self.bodies.clone().acquire_many_owned(n)).await {
            Ok(Ok(permit)) => Some(BodyPermit { limits: self.clone(), bytes: u64::from(n), _permit: permit }),
            _ => {
                self.bodies_refused.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// Hands freed heap back to the system when anonymous bodies have released enough since
    /// the last time (called periodically): with one allocator arena (`drover-malloc`) the
    /// pages an attack's bodies used would otherwise stay in the process after it ends.
    pub fn trim_if_due(&self) -> bool {
        if !self.trim_due() {
            return false;
        }
        self.released_bytes.store(0, Ordering::Relaxed);
        drover_malloc::trim()
    }

    /// Whether enough anonymous body bytes were released since the last trim for another.
    pub fn trim_due(&self) -> bool {
        self.released_bytes.load(Ordering::Relaxed) >= TRIM_AFTER_BYTES
    }

    /// Records a connection closed for its PROXY protocol header (or for lacking one).
    pub fn proxy_refused(&self) {
        self.proxy_refused.fetch_add(1, Ordering::Relaxed);
    }

    /// Records a connection closed by a deadline.
    pub fn timed_out(&self, which: Deadline) {
        self.timed_out[which as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// The handshake deadline (from the accept, waiting for a slot included).
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

    /// Anonymous connections open now (handshakes excluded).
    pub fn unauthenticated_open(&self) -> usize {
        self.anonymous.lock().unwrap_or_else(|p| p.into_inner()).open.len()
    }

    /// Bytes of the anonymous body budget in use now.
    pub fn anonymous_body_bytes(&self) -> usize {
        self.config.anonymous_body_budget_bytes - self.bodies.available_permits()
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
            "# HELP drover_connections_refused_total Connections closed at once: by an anonymous cap with every connection under it busy, or for their PROXY protocol header.\n# TYPE drover_connections_refused_total counter"
        );
        for cap in [Refusal::PerSource, Refusal::Unauthenticated] {
            let _ = writeln!(
                out,
                "drover_connections_refused_total{{reason=\"{}\"}} {}",
                cap.label(),
                self.refused[cap as usize].load(Ordering::Relaxed)
            );
        }
        let _ =
            writeln!(out, "drover_connections_refused_total{{reason=\"proxy_protocol\"}} {}", self.proxy_refused.load(Ordering::Relaxed));
        let _ = writeln!(
            out,
            "# HELP drover_connections_evicted_total Idle anonymous connections closed to make room for a new one, by cap.\n# TYPE drover_connections_evicted_total counter"
        );
        for cap in [Refusal::PerSource, Refusal::Unauthenticated] {
            let _ = writeln!(
                out,
                "drover_connections_evicted_total{{cap=\"{}\"}} {}",
                cap.label(),
                self.evicted[cap as usize].load(Ordering::Relaxed)
            );
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
        let limited = self.buckets.lock().unwrap_or_else(|p| p.into_inner()).limited();
        let _ = writeln!(
            out,
            "# HELP drover_anonymous_requests_limited_total Requests without a certificate answered 429 by their source's rate limit.\n# TYPE drover_anonymous_requests_limited_total counter\ndrover_anonymous_requests_limited_total {limited}"
        );
        let _ = writeln!(
            out,
            "# HELP drover_anonymous_body_bytes Bytes of the shared anonymous body budget in use.\n# TYPE drover_anonymous_body_bytes gauge\ndrover_anonymous_body_bytes {}",
            self.anonymous_body_bytes()
        );
        let _ = writeln!(
            out,
            "# HELP drover_anonymous_bodies_refused_total Anonymous requests answered 503 for want of room in the body budget.\n# TYPE drover_anonymous_bodies_refused_total counter\ndrover_anonymous_bodies_refused_total {}",
            self.bodies_refused.load(Ordering::Relaxed)
        );
    }
}

/// The 429 for a source past its rate, with the wait in whole seconds (at least one).
pub fn rate_limited(wait: Duration) -> axum::response::Response {
    let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
    let mut answer = crate::body::error_response(
        axum::http::StatusCode::TOO_MANY_REQUESTS,
        "rate_limited",
        format!("too many requests without a client certificate from this address; retry in {secs} s"),
    );
    answer.headers_mut().insert(axum::http::header::RETRY_AFTER, axum::http::HeaderValue::from(secs));
    answer
}

/// The 503 for an anonymous body that found no room in the shared budget.
pub fn body_budget_full() -> axum::response::Response {
    let mut answer = crate::body::error_response(
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        "anonymous_budget_full",
        "too many request bodies from clients without a certificate are in flight; retry shortly",
    );
    answer.headers_mut().insert(axum::http::header::RETRY_AFTER, axum::http::HeaderValue::from(1u64));
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    fn test_limit(_: &axum::http::request::Parts) -> usize {
        1 << 20
    }

    fn limits(total: usize, per_source: usize) -> Arc<ConnLimits> {
        ConnLimits::new(
            ConnectionsConfig { max_unauthenticated: total, max_unauthenticated_per_source: per_source, ..ConnectionsConfig::default() },
            test_limit,
        )
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    #[test]
    fn at_the_source_cap_the_oldest_idle_connection_makes_room() {
        let l = limits(100, 2);
        let a = ip("10.0.0.1");
        let first = l.anonymous(a).expect("1");
        let second = l.anonymous(a).expect("2");
        let _busy = first.conn().busy();
        // The first is busy with a request: the second, the oldest idle one, is closed.
        let third = l.anonymous(a).expect("room is made");
        assert_eq!(Arc::strong_count(second.conn()), 1, "the evicted connection is no longer counted");
        let other = l.anonymous(ip("10.0.0.2")).expect("another source is not affected");
        let evicted = second.conn().clone();
        drop(second);
        assert_eq!(l.unauthenticated_open(), 3, "the evicted one's drop does not free another's slot");
        // Told to close: its wait resolves at once.
        tokio_test_block_on(evicted.evicted());
        drop((first, third, other));
        assert_eq!(l.unauthenticated_open(), 0);
    }

    #[test]
    fn when_every_anonymous_connection_is_busy_the_newest_is_refused() {
        let l = limits(2, 2);
        let a = l.anonymous(ip("10.0.0.1")).expect("1");
        let b = l.anonymous(ip("10.0.0.2")).expect("2");
        let (_x, _y) = (a.conn().busy(), b.conn().busy());
        assert_eq!(l.anonymous(ip("10.0.0.3")).err(), Some(Refusal::Unauthenticated));
        let mut out = String::new();
        l.render_into(&mut out);
        assert!(out.contains("drover_connections_refused_total{reason=\"unauthenticated\"} 1"), "{out}");
        drop(_x);
        assert!(l.anonymous(ip("10.0.0.3")).is_ok(), "an idle one is evicted once its request ends");
        l.render_into(&mut out);
        assert!(out.contains("drover_connections_evicted_total{cap=\"unauthenticated\"} 1"), "{out}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_handshake_past_its_sources_slots_waits_and_others_do_not() {
        let l = ConnLimits::new(ConnectionsConfig { max_handshakes_per_source: 1, ..ConnectionsConfig::default() }, test_limit);
        let held = l.handshake_slot(ip("10.0.0.1")).await;
        let waiting = tokio::time::timeout(Duration::from_secs(1), l.handshake_slot(ip("10.0.0.1"))).await;
        assert!(waiting.is_err(), "the source's second handshake waits");
        let other = tokio::time::timeout(Duration::from_secs(1), l.handshake_slot(ip("10.0.0.2"))).await;
        assert!(other.is_ok(), "another source's does not");
        drop(held);
        let next = tokio::time::timeout(Duration::from_secs(1), l.handshake_slot(ip("10.0.0.1"))).await;
        assert!(next.is_ok(), "it gets the slot once the first is done");
        drop((other, next));
        assert!(l.handshaking.lock().expect("lock").is_empty(), "sources are forgotten when their handshakes end");
    }

    #[test]
    fn addresses_of_one_ipv6_64_are_one_source() {
        let l = limits(100, 2);
        let _a = l.anonymous(ip("2001:db8:1:2::1")).expect("1");
        let b = l.anonymous(ip("2001:db8:1:2:ffff::9")).expect("2");
        let _busy = b.conn().busy();
        let _c = l.anonymous(ip("2001:db8:1:2:abcd::5")).expect("3 evicts the first");
        assert_eq!(l.unauthenticated_open(), 2, "one /64, one per-source cap");
        assert!(l.anonymous(ip("2001:db8:1:3::1")).is_ok(), "the next /64 is another source");
        assert_eq!(source_of(ip("::ffff:10.0.0.1")), ip("10.0.0.1"));
    }

    #[tokio::test(start_paused = true)]
    async fn anonymous_bodies_share_one_budget() {
        let l = ConnLimits::new(ConnectionsConfig { anonymous_body_budget_bytes: 100_000, ..ConnectionsConfig::default() }, test_limit);
        let a = l.anonymous_body(60_000).await.expect("room");
        assert!(l.anonymous_body(60_000).await.is_none(), "no room within the wait: 503");
        assert_eq!(l.anonymous_body_bytes(), 60_000);
        drop(a);
        assert!(l.anonymous_body(60_000).await.is_some());
    }

    fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime")
            .block_on(async { tokio::time::timeout(Duration::from_secs(5), f).await.expect("resolves") })
    }
}
