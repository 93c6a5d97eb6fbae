//! The pure decision cores of the coordinator (the crate `drover-workflows`): every rule of a
//! staged workflow as a function over a snapshot, so each is unit-tested without a store, a
//! clock, MAAS or a device — the engine (`drover-engine`) reads the snapshot, calls these, and
//! persists what they decide.
//!
//! - [`jobs`]: what a job is, its stages and progress, the next step of one job
//!   ([`jobs::decide`]), the operator actions on it, and which pending jobs may start under the
//!   disruption budgets ([`jobs::pacing`]).
//! - [`maasflow`]: the MAAS workflows' failure taxonomy, onboarding stages, discovery, boot
//!   disk, drift verdicts and the reconciler's plan.
//! - [`devices`]: the rack and power-shelf controllers' ticks and the rules of an on-demand
//!   maintenance request.
//!
//! Nothing here does I/O, reads a clock (`now` is an argument) or runs async code: this crate
//! has no tokio and no store backend among its dependencies, and the layering test
//! (`tests/tests/layering`) keeps it so.

#![forbid(unsafe_code)]

pub mod devices;
pub mod jobs;
pub mod maasflow;
