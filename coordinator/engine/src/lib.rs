//! The Drover coordinator's library (the `drover-coordinator` binary, `coordinator/src/main.rs`, composes it): the fleet's one server.
//!
//! - [`agent_download`]: the anonymous agent downloads, bounded in number; an unstripped agent warned of.
//! - [`app`]: shared state, the clock, long-poll wake-ups, dispatch that wakes agents.
//! - [`api`]: the error shape, route guards and routes.
//! - [`cloudinit`]: the versioned cloud-init first-boot bundle MAAS runs on a deployed node (pure renderer; the crate `drover-cloudinit`).
//! - [`config`]: `coordinator.toml`, parsed once, errors naming file and key.
//! - [`devices`]: the rack and power-shelf controller loops and the device trait they act through.
//! - [`executor`]: the rollout executor: store snapshot → planner → one transaction of actions.
//! - [`jobs`]: the job executor, local stages and the MAAS child workflow.
//! - [`http1`]: the coordinator's own HTTP/1.1 connection layer: strict framing, no buffers held while a long-poll waits.
//! - [`latest_release`]: the latest release, verified once and read by all, and the fleet read model built from it.
//! - [`loops`]: every background loop in one table (running, passes, last error), in `/metrics` and `GET /v1/loops`.
//! - [`metrics`]: Prometheus counters and the `/metrics` text; [`http_metrics`] counts requests by route, [`process_metrics`] reads `process_*` from `/proc`.
//! - [`reconciler`]: the MAAS drift reconciler's runtime: one pass per site at a time, periodic (jittered) and on demand, batched writes.
//! - [`releases_dir`]: polling `releases_dir` and publishing what appears there.
//! - [`run`]: starting it all: state dir, store, TLS, listener.
//! - [`sites`]: MAAS sites: validation, credential selection, the MAAS probe and the workflow preflight.
//! - [`server`]: the listener: TLS handshake, identity per connection, HTTP/1.1 and HTTP/2.
//! - [`pki`], [`tls`], [`identity`], [`state_dir`], [`director`]: the crate `drover-pki`.
//! - [`jobs`], [`devices`] and [`maasflow`] re-export the pure decision cores of the crate `drover-workflows`.
//! - [`store`]: the engine's view of the store: the `Store` trait and records (the crate `drover-store`), its SQLite and
//!   PostgreSQL backends (the crates `drover-store-sqlite`, `drover-store-postgres`), and the async helpers that call it
//!   (`blocking`, `read_now`, `inline`, the leader term's task-local; `store_calls.rs`).
//!
//! The coordinator holds no CI key: it verifies releases with the same
//! `drover_proto::release::verify_release` the CLI and agents use, and signs only intents and
//! tasks, with its director key.

#![forbid(unsafe_code)]

pub mod agent_download;
pub mod api;
pub mod app;
pub mod bundles;
pub mod config;
pub mod devices;
pub mod executor;
pub mod fleet_release;
pub mod http_metrics;
pub mod jobs;
pub mod latest_release;
pub mod leader;
pub mod loops;
pub mod metrics;
pub mod onboarding;
pub mod peers;
pub mod process_metrics;
pub mod readiness;
pub mod reconciler;
pub mod releases_dir;
pub mod run;
pub mod secrets;
pub mod sites;
/// The first-boot bundle is the crate `drover-cloudinit`.
pub use drover_cloudinit as cloudinit;
/// The transport is the crate `drover-http`, re-exported under its old paths.
pub use drover_http::{conn_limits, http1, paced_body, proxy_protocol, rate_limit, server};
/// The CA, TLS, identity, state directory and director key are the crate `drover-pki`,
/// re-exported under their old paths.
pub use drover_pki::{director, identity, pki, state_dir, tls};
pub mod store;
mod store_calls;
/// The pure MAAS workflow decisions are the crate `drover-workflows`.
pub use drover_workflows::maasflow;
pub mod store_config;

pub use drover_proto as proto;
