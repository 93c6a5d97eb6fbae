//! The pure rollout planner of RFC-0002: `plan(&PlanInput, now) -> Plan { actions, report }`.
//!
//! Of Drover's crates it depends on `drover-proto` only — no tokio, no store, no clock, no randomness: the
//! caller passes a verified snapshot ([`PlanInput`]) and the time, and gets back the actions
//! to persist (each with the reason for its transition) and, for everything that does not
//! advance, why. Ordering is deterministic (sorted maps, hostname order).

#![forbid(unsafe_code)]

pub mod action;
pub mod budget;
pub mod check;
pub mod engine;
pub mod input;
pub mod observed;
pub mod wait;
mod work;

#[cfg(test)]
mod tests;

pub use action::{Action, Plan, Wait, apply};
pub use check::{Violation, check_plan};
pub use drover_proto::states::{HostRolloutState, RolloutState, WaveState};
pub use engine::plan;
pub use input::{
    ChannelInput, Connectivity, HostObserved, HostProgress, PLAN_INPUT_SCHEMA_VERSION, PlanInput, PlanSettings, RolloutObserved, Snapshot,
};
pub use wait::WaitReason;
