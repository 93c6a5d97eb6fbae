//! `[connections]` in `coordinator.toml`: what the listener holds open, and for how long, before
//! a client has proven who it is. The coordinator's `Config` embeds [`ConnectionsConfig`] and
//! checks its ranges; parsing and the errors naming file and key are the coordinator's.

use serde::Deserialize;

/// `[connections]`: what the listener holds open, and for how long, before a client has
/// proven who it is ([`crate::conn_limits`]). Authenticated connections (a verified client
/// certificate) are never refused by these caps; only the accept loop's total and the
/// handshake bounds slow them, by waiting, never by refusing.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectionsConfig {
    /// Every open connection; at the cap the accept loop waits for one to close. Keep it above
    /// the fleet (each agent holds one) plus operators, and below the open-files limit.
    #[serde(default = "default_max_open")]
    pub max_open: usize,
    /// TLS handshakes in progress; at the cap a new handshake waits for one to end.
    #[serde(default = "default_max_handshakes")]
    pub max_handshakes: usize,
    /// TLS handshakes in progress from one source address; at the cap that source's next
    /// handshake waits (others' do not).
    #[serde(default = "default_max_handshakes_per_source")]
    pub max_handshakes_per_source: usize,
    /// How long a handshake may take, waiting for a slot included.
    #[serde(default = "default_handshake_secs")]
    pub handshake_secs: u64,
    /// Connections whose handshake ended without a client certificate (they reach only the
    /// enrollment and bootstrap routes); at the cap the oldest idle one is closed to make room.
    #[serde(default = "default_max_unauthenticated")]
    pub max_unauthenticated: usize,
    /// Connections without a certificate from one source address (handshakes do not count);
    /// at the cap that source's oldest idle one is closed to make room.
    #[serde(default = "default_max_unauthenticated_per_source")]
    pub max_unauthenticated_per_source: usize,
    /// After the handshake, the first request must begin within this (every connection).
    #[serde(default = "default_first_request_secs")]
    pub first_request_secs: u64,
    /// How long a connection without a certificate may sit idle between requests
    /// (authenticated ones: 120 s, the agents' long-poll needs it).
    #[serde(default = "default_unauthenticated_idle_secs")]
    pub unauthenticated_idle_secs: u64,
    /// Which HTTP/1.1 stack serves clients that pick HTTP/1.1 in ALPN: the coordinator's own
    /// (`"drover"`, the default) or hyper's (`"hyper"`, tuned alike; for comparing the two,
    /// see BENCHMARKS.md). HTTP/2 is hyper's either way.
    #[serde(default)]
    pub http1: Http1Stack,
    /// Whether accepted sockets set `TCP_NODELAY` (the default): without it a response
    /// written in two pieces waits on the client's delayed ACK (Nagle's algorithm), ~40 ms.
    /// `false` exists only to measure that (BENCHMARKS.md).
    #[serde(default = "default_tcp_nodelay")]
    pub tcp_nodelay: bool,
    /// Requests without a certificate one source address may make a second, sustained
    /// ([`crate::rate_limit`]); past it they are answered 429.
    #[serde(default = "default_anonymous_requests_per_sec")]
    pub anonymous_requests_per_sec: u32,
    /// How many such requests one source may make at once before the rate applies (a fleet
    /// enrolling behind one NAT address makes five a host).
    #[serde(default = "default_anonymous_burst")]
    pub anonymous_burst: u32,
    /// Bytes a second all answers to clients without a certificate may be sent at together
    /// (after an 8 MiB burst): what bounds the CPU that downloads of the agent binary take.
    #[serde(default = "default_anonymous_bytes_per_sec")]
    pub anonymous_bytes_per_sec: u64,
    /// Bytes of request bodies all connections without a certificate may have buffered at
    /// once (each body is at most 64 KiB).
    #[serde(default = "default_anonymous_body_budget")]
    pub anonymous_body_budget_bytes: usize,
    /// Load balancers whose connections start with a PROXY protocol v2 header naming the
    /// client ([`crate::proxy_protocol`]); a PROXY header from any other address is refused.
    #[serde(default)]
    pub proxy_protocol_from: Vec<std::net::IpAddr>,
}

fn default_max_handshakes_per_source() -> usize {
    // A fleet behind one NAT reconnecting at once queues here for a few milliseconds each;
    // a source stalling its handshakes holds at most this many of all the slots.
    64
}
fn default_anonymous_requests_per_sec() -> u32 {
    200
}
fn default_anonymous_burst() -> u32 {
    2000
}
fn default_anonymous_bytes_per_sec() -> u64 {
    // 64 MiB/s: a few per cent of a core to encrypt; 10,000 stripped agents (~20 MB each)
    // in about 50 minutes. Raise it for faster first installs of large fleets.
    64 << 20
}
fn default_anonymous_body_budget() -> usize {
    8 << 20
}

fn default_tcp_nodelay() -> bool {
    true
}

/// `connections.http1`: which HTTP/1.1 implementation serves the listener.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Http1Stack {
    /// [`crate::http1`]: holds no buffer while a long-poll waits.
    #[default]
    Drover,
    /// hyper's `http1::Builder`, with the same head, header-count and deadline bounds.
    Hyper,
}

fn default_max_open() -> usize {
    50_000
}
fn default_max_handshakes() -> usize {
    1024
}
fn default_handshake_secs() -> u64 {
    10
}
fn default_max_unauthenticated() -> usize {
    1024
}
fn default_max_unauthenticated_per_source() -> usize {
    // Agents behind one NAT address handshake from one source: legitimate handshakes finish
    // in milliseconds, so even a fleet reconnecting at once rarely has this many in progress
    // from one address; stalled ones (the attack) are what the cap is for.
    256
}
fn default_first_request_secs() -> u64 {
    10
}
fn default_unauthenticated_idle_secs() -> u64 {
    10
}

impl Default for ConnectionsConfig {
    fn default() -> Self {
        ConnectionsConfig {
            max_open: default_max_open(),
            max_handshakes: default_max_handshakes(),
            handshake_secs: default_handshake_secs(),
            max_unauthenticated: default_max_unauthenticated(),
            max_unauthenticated_per_source: default_max_unauthenticated_per_source(),
            first_request_secs: default_first_request_secs(),
            unauthenticated_idle_secs: default_unauthenticated_idle_secs(),
            http1: Http1Stack::default(),
            tcp_nodelay: default_tcp_nodelay(),
            max_handshakes_per_source: default_max_handshakes_per_source(),
            anonymous_requests_per_sec: default_anonymous_requests_per_sec(),
            anonymous_burst: default_anonymous_burst(),
            anonymous_body_budget_bytes: default_anonymous_body_budget(),
            anonymous_bytes_per_sec: default_anonymous_bytes_per_sec(),
            proxy_protocol_from: Vec::new(),
        }
    }
}
