//! The rows of the rollout executor: what it reads to build the planner's input
//! ([`PlanSnapshot`]: hosts with their last reports, live rollouts with their per-host states,
//! channel bookkeeping, hosts held by jobs) and what it writes back ([`PlanWrite`]: one
//! transaction of [`PlanOp`]s and their events).
//!
//! Every op carries the state it expects to find (compare-and-set): a plan made from a
//! snapshot that has since changed (an operator halted the rollout between the read and the
//! write) fails whole with `StaleState`, nothing of it is written, and the next tick re-plans
//! from the new state.

use std::collections::BTreeMap;

use drover_proto::names::RolloutId;
use drover_proto::report::{ActivationStatus, ProbeOutcome};
use drover_proto::states::{HostLifecycle, HostRolloutState, RolloutState};
use drover_proto::time::Time;
use uuid::Uuid;

use super::records::{HostRollout, NewEvent, NewIntent, Rollout};

/// What a host last reported that rollout decisions depend on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HostReport {
    /// Failed systemd units in its last health report.
    pub failed_units: u32,
    /// Latest outcome per probe name.
    pub probes: BTreeMap<String, ProbeOutcome>,
    /// The activation status of its current intent, as last reported.
    pub activation: Option<ActivationStatus>,
}

/// One host as the planner needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanHost {
    /// Its id (intents are bound to it).
    pub id: Uuid,
    /// Its name (manifests name hosts by it).
    pub hostname: String,
    /// Its lifecycle state.
    pub state: HostLifecycle,
    /// Its last recorded check-in.
    pub last_checkin: Option<Time>,
    /// Its last report, if it ever sent one.
    pub report: Option<HostReport>,
}

/// Per-channel bookkeeping of the executor.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ChannelRecord {
    /// The ref of the last rollout opened for the channel.
    pub last_rolled_ref: Option<String>,
    /// The ref whose opening was last deferred, as the planner's JSON (`Deferral`).
    pub deferral: Option<serde_json::Value>,
    /// The timestamp `signedAt` a staleness alert was last raised for.
    pub stale_alert: Option<Time>,
}

/// A live or recent rollout with its hosts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanRollout {
    /// The rollout row.
    pub rollout: Rollout,
    /// Its hosts that have a recorded state.
    pub hosts: Vec<HostRollout>,
}

/// Everything [`Store::plan_snapshot`](super::Store::plan_snapshot) reads, from one snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PlanSnapshot {
    /// Hosts that are not deleted.
    pub hosts: Vec<PlanHost>,
    /// Rollouts that are not pruned.
    pub rollouts: Vec<PlanRollout>,
    /// Channel bookkeeping, by channel.
    pub channels: BTreeMap<String, ChannelRecord>,
    /// Hosts held by a job (started, unfinished, not in its `activate` stage): host id → reason.
    pub held: BTreeMap<Uuid, String>,
    /// Hosts a running job lends to the rollout engine for its `activate` stage: counted
    /// against budgets, dispatchable.
    pub lent: std::collections::BTreeSet<Uuid>,
}

/// One change of a plan, with the state it expects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanOp {
    /// A new rollout in `Opening`; records the channel's last rolled ref and clears its
    /// deferral. `Conflict` if the id exists.
    OpenRollout {
        /// The rollout.
        rollout_id: RolloutId,
        /// Its manifest's sha256.
        manifest_sha256: String,
    },
    /// A rollout `from -> to` (legal, and still in `from`).
    RolloutState {
        /// The rollout.
        rollout_id: RolloutId,
        /// Expected state.
        from: RolloutState,
        /// New state.
        to: RolloutState,
    },
    /// A host's state in a rollout `from -> to` (a `Pending` host may have no row yet), and
    /// the target of the intent issued with it, if any. `from == to` with a target records a
    /// revert intent without a state change.
    HostState {
        /// The rollout.
        rollout_id: RolloutId,
        /// The host.
        hostname: String,
        /// Its wave.
        wave_index: u32,
        /// Expected state.
        from: HostRolloutState,
        /// New state.
        to: HostRolloutState,
        /// The closure of the intent issued with this change, if one was.
        intent_target: Option<String>,
    },
    /// A signed intent becomes the host's current one (the previous one is superseded).
    Intent(NewIntent),
    /// A channel's deferral (the planner's `Deferral` JSON), or none.
    Deferral {
        /// The channel.
        channel: String,
        /// The deferral, or `None` to clear it.
        deferral: Option<serde_json::Value>,
    },
    /// A staleness alert was raised for the channel's timestamp signed at `signed_at`.
    StaleAlert {
        /// The channel.
        channel: String,
        /// The stale timestamp's `signedAt`.
        signed_at: Time,
    },
    /// Every still-wanted intent of the rollout is withdrawn (the agent's confirm gets 410).
    CancelIntents {
        /// The rollout.
        rollout_id: RolloutId,
    },
}

/// One plan's writes: applied in order, in one transaction, with its events.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanWrite {
    /// When.
    pub at: Time,
    /// The changes.
    pub ops: Vec<PlanOp>,
    /// One event per transition (RFC-0002 §7).
    pub events: Vec<NewEvent>,
}
