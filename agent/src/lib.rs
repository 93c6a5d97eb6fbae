//! The Drover node agent, one per host.
//!
//! Built so far: enrollment (`drover-agent enroll`) and what it stands on.
//! - [`config`]: `agent.toml`, parsed once, unknown keys refused.
//! - [`state`]: the durable state directory, every write atomic.
//! - [`client`]: the HTTPS client for the coordinator (pinned CA, TLS 1.3, fail-over), the
//!   shared `drover-client` crate, re-exported here.
//! - [`enroll`]: key generated on the host, CSR, hash-pinned trust roots.
//! - [`exit`]: sysexits-style exit codes.
//!
//! Still to come (issues "Agent" and "Agent maintenance tasks"): the pull loop, verification
//! of intents and tasks (`drover_proto::verify`, re-exported here), NixOS activation with
//! magic rollback, maintenance tasks, health and probes.

#![forbid(unsafe_code)]

pub mod activation;
pub mod config;
pub mod enroll;
pub mod exec;
pub mod exit;
pub mod gpu;
pub mod health;
pub mod probes;
pub mod state;
pub mod systemd;

pub use drover_client as client;
pub use drover_proto as proto;

/// The `User-Agent` the agent sends to the coordinator.
pub const USER_AGENT: &str = concat!("drover-agent/", env!("CARGO_PKG_VERSION"));
