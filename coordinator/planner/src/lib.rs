//! The pure rollout planner of RFC-0002: `plan(&PlanInput, now) -> Plan { actions, report }`.
//!
//! Not built yet (issue "Rollout engine"). This crate exists so the crate graph is the
//! architecture from the first commit: it may depend on `drover-proto` only — no tokio, no
//! store, no clock — and the vocabulary it will plan over (rollout, wave and per-host states
//! with their transition tables, manifests, frozen budgets) already lives there.

#![forbid(unsafe_code)]

pub use drover_proto::states::{HostRolloutState, RolloutState, WaveState};
