//! The Drover node agent, one per host: `drover-agent enroll | run | check-config`.
//!
//! - [`config`]: `agent.toml`, parsed once, unknown keys refused.
//! - [`state`], [`records`]: the durable state directory, every write atomic; the floors
//!   (timestamp version, latest time), the manifest cache and the task journal; [`recorded`]:
//!   the last task results, to answer a task handed out again instead of refusing it.
//! - [`client`]: the HTTPS client for the coordinator (pinned CA, TLS 1.3, fail-over), the
//!   shared `drover-client` crate, re-exported here.
//! - [`enroll`]: key generated on the host, CSR, hash-pinned trust roots; [`host_keys`]: the
//!   host's sealing key (task secrets are sealed to it) and its evidence-signing key.
//! - [`director`]: the director key intents and tasks are signed with, pinned at enrollment,
//!   and how a signed rotation to a new one is followed.
//! - [`pull`]: the pull loop — check in, verify, act, report; [`admit`]: the order of the
//!   checks an intent or task passes before anything acts on it; [`timekeeping`]: clock steps,
//!   renewal time, backoff; [`host_unknown`]: a coordinator that has no record of this host
//!   (restored from an older backup), said once and asked again in minutes.
//! - [`activation`]: NixOS activation with magic rollback (a state machine without I/O and its
//!   executor).
//! - [`tasks`]: the maintenance tasks (GPU scrub, storage cleanup, clean validation, MAAS
//!   hardware-sync reseed, drain, tenant-user revocation, uninstall), each planned as steps by a pure
//!   function and then executed; [`task_worker`]: runs admitted tasks one at a time beside the
//!   pull loop, journaled so a crash never runs one twice.
//! - [`systemd`]: systemd over D-Bus behind a trait, and the notify/watchdog protocol.
//! - [`health`], [`gpu`], [`probes`]: the health report, the `GpuTool` trait (`nvidia-smi`),
//!   exec/HTTP/TCP probes.
//! - [`exec`]: external commands behind the `CommandRunner` trait.
//! - [`run`]: `drover-agent run`, the real parts wired together; [`exit`]: sysexits codes.

#![forbid(unsafe_code)]

pub mod activation;
pub mod admit;
pub mod config;
pub mod director;
pub mod enroll;
pub mod exec;
pub mod exit;
pub mod gpu;
pub mod health;
pub mod host_keys;
pub mod host_unknown;
pub mod probes;
pub mod pull;
pub mod recorded;
pub mod records;
pub mod run;
pub mod state;
pub mod systemd;
pub mod task_worker;
pub mod tasks;
pub mod timekeeping;

pub use drover_client as client;
pub use drover_proto as proto;

/// The `User-Agent` the agent sends to the coordinator.
pub const USER_AGENT: &str = concat!("drover-agent/", env!("CARGO_PKG_VERSION"));
