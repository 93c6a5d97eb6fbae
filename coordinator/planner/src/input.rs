//! `PlanInput`: the snapshot the planner decides over — the verified release parts (per
//! channel: the current manifest, its sha256 and the timestamp's revertable list), the
//! observed fleet state (rollouts with their per-host states, hosts with their last report),
//! each channel's last rolled ref, and the hosts held by jobs or maintenance.
//!
//! Everything here has already been verified by the caller; the planner trusts it as given
//! but still refuses (per rollout) a manifest whose id does not match its own fields.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use drover_proto::artifacts::{RevertableRollout, RolloutManifest};
use drover_proto::names::RolloutId;
use drover_proto::report::{ActivationStatus, ProbeOutcome};
use drover_proto::spec::{Compliance, Edge};
use drover_proto::states::{HostRolloutState, RolloutState};
use drover_proto::time::Time;

/// The `schemaVersion` of [`PlanInput`] this crate reads and writes.
pub const PLAN_INPUT_SCHEMA_VERSION: u64 = 1;

/// Everything one planning tick looks at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PlanInput {
    /// Always [`PLAN_INPUT_SCHEMA_VERSION`].
    pub schema_version: u64,
    /// The verified release, per channel.
    #[serde(default)]
    pub channels: BTreeMap<String, ChannelInput>,
    /// Manifests of earlier rollouts still referenced (an active rollout opened from an older
    /// ref, revertable targets), by rollout id. A channel's current manifest need not be here.
    #[serde(default)]
    pub manifests: BTreeMap<RolloutId, RolloutManifest>,
    /// Rollouts known to the store (active and recent), by id.
    #[serde(default)]
    pub rollouts: BTreeMap<RolloutId, RolloutObserved>,
    /// Observed hosts, by hostname.
    #[serde(default)]
    pub hosts: BTreeMap<String, HostObserved>,
    /// Per channel, the ref of the last rollout opened for it.
    #[serde(default)]
    pub last_rolled_ref: BTreeMap<String, String>,
    /// Hosts held by a job or maintenance request (hostname → reason): they count against
    /// every budget that selects them and are never dispatched.
    #[serde(default)]
    pub held: BTreeMap<String, String>,
    /// Hosts a job lends to the rollout engine for its `activate` stage: they count against
    /// every budget that selects them, like held hosts, but may be dispatched.
    #[serde(default)]
    pub lent: std::collections::BTreeSet<String>,
    /// fleet.resolved's `channelEdges` (RFC-0002 §4.3; `before`/`after` are channel names). The
    /// rollout manifests do not carry them, so the caller copies them from the verified
    /// fleet.resolved. An edge holds opening a rollout of `after` while `before` has a live
    /// rollout (Halted included) or a ref not yet rolled; a `before` with no history is open.
    #[serde(default)]
    pub channel_edges: Vec<Edge>,
    /// Per channel, the ref whose opening the planner last deferred (queued behind the
    /// channel's own rollout, or held by a channel edge) and by what: the store's
    /// `last_deferrals`. It debounces [`crate::Action::RolloutDeferred`] (emitted once per change
    /// of ref or blocker) and is the queue of depth one a newer ref supersedes.
    #[serde(default)]
    pub last_deferrals: BTreeMap<String, Deferral>,
    /// The coordinator's planning settings (confirm deadline, retention).
    #[serde(default)]
    pub settings: PlanSettings,
    /// Per channel, the timestamp `signedAt` a [`crate::Action::ReleaseStale`] alert was
    /// already raised for: the debounce of that alert (once per channel and signing).
    #[serde(default)]
    pub stale_alerts: BTreeMap<String, Time>,
}

/// The coordinator's planning settings. Every field has a default, so `{}` (or leaving the
/// object out) means the defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct PlanSettings {
    /// How long after its dispatch a host may stay `Activating` without confirming before the
    /// planner records it `Reverted` (RFC-0002 §4 step 4: the agent rolls back on its own once
    /// the intent's deadline passes, and the coordinator answers 410 to a later confirmation).
    pub confirm_deadline_secs: u64,
    /// How long a finished rollout (Converged, Reverted, Failed, Superseded, Cancelled) is
    /// kept before it is `Pruned`.
    pub retention_secs: u64,
}

impl PlanSettings {
    /// Default [`PlanSettings::confirm_deadline_secs`]: 30 minutes.
    pub const DEFAULT_CONFIRM_DEADLINE_SECS: u64 = 1800;
    /// Default [`PlanSettings::retention_secs`]: 7 days.
    pub const DEFAULT_RETENTION_SECS: u64 = 7 * 24 * 3600;
}

impl Default for PlanSettings {
    fn default() -> Self {
        PlanSettings { confirm_deadline_secs: Self::DEFAULT_CONFIRM_DEADLINE_SECS, retention_secs: Self::DEFAULT_RETENTION_SECS }
    }
}

/// A channel's deferred ref, as the last [`crate::Action::RolloutDeferred`] recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Deferral {
    /// The ref waiting to be rolled.
    pub target_ref: String,
    /// The channel it waits for (its own channel when queued behind its active rollout).
    pub blocked_by: String,
    /// Since when.
    pub since: Time,
}

/// One channel's verified release parts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChannelInput {
    /// The channel's current manifest (the timestamp's current rollout).
    pub manifest: RolloutManifest,
    /// Its sha256 (hex).
    pub manifest_sha256: String,
    /// The timestamp's revertable rollouts of the channel, newest first.
    #[serde(default)]
    pub revertable: Vec<RevertableRollout>,
    /// The timestamp's `signedAt`: with [`ChannelInput::freshness_window_secs`] it says whether
    /// the channel is stale (RFC-0002 §4 step 0; freshness lives in `timestamp.json`).
    pub signed_at: Time,
    /// The channel's freshness window: stale once `now - signedAt` exceeds it. A stale
    /// channel opens, dispatches and rolls back nothing until CI re-signs.
    pub freshness_window_secs: u64,
    /// fleet.resolved's compliance settings of the channel, with CI's static results: the
    /// static compliance gate (RFC-0002 §4 step 2a) of a rollout opened from this release.
    #[serde(default)]
    pub compliance: Compliance,
}

impl ChannelInput {
    /// Whether the channel's timestamp is stale at `now` (`now - signedAt > window`).
    pub fn is_stale(&self, now: Time) -> bool {
        now.secs_since(self.signed_at) > i64::try_from(self.freshness_window_secs).unwrap_or(i64::MAX)
    }
}

/// One rollout as the store records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RolloutObserved {
    /// Its state.
    pub state: RolloutState,
    /// Since when.
    pub since: Time,
    /// The sha256 of the manifest it was opened with.
    pub manifest_sha256: String,
    /// Per-host participation; a host of the manifest missing here is `Pending`.
    #[serde(default)]
    pub hosts: BTreeMap<String, HostProgress>,
}

/// One host's place in one rollout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HostProgress {
    /// Its state.
    pub state: HostRolloutState,
    /// Since when.
    pub since: Time,
    /// The target closure of the last intent issued to it for this rollout (a dispatch or a
    /// rollback), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intent: Option<String>,
}

/// A host's connectivity as the coordinator sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Connectivity {
    /// Checking in.
    #[default]
    Online,
    /// Heartbeat silence.
    Offline,
}

/// What the coordinator last heard from a host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HostObserved {
    /// Its last check-in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_checkin: Option<Time>,
    /// Online or offline.
    #[serde(default)]
    pub connectivity: Connectivity,
    /// Failed systemd units in its last health report.
    #[serde(default)]
    pub failed_units: u32,
    /// Latest probe outcome by probe name.
    #[serde(default)]
    pub probes: BTreeMap<String, ProbeOutcome>,
    /// The activation status it last reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activation: Option<ActivationStatus>,
}

impl HostObserved {
    /// Whether the host is online.
    pub fn is_online(&self) -> bool {
        self.connectivity == Connectivity::Online
    }
}

/// Read access to a planning snapshot: a whole [`PlanInput`], or the planner's working copy
/// (which clones only what a tick changes and reads the rest from the caller's input).
pub trait Snapshot {
    /// Rollouts by id.
    fn rollouts(&self) -> &BTreeMap<RolloutId, RolloutObserved>;
    /// The verified release, per channel.
    fn channels(&self) -> &BTreeMap<String, ChannelInput>;
    /// Earlier manifests still referenced, by rollout id.
    fn manifests(&self) -> &BTreeMap<RolloutId, RolloutManifest>;
    /// Held hosts (hostname → reason).
    fn held(&self) -> &BTreeMap<String, String>;
    /// Hosts lent by jobs for activation (counted in budgets, dispatchable).
    fn lent(&self) -> &std::collections::BTreeSet<String>;
    /// Per channel, the ref of the last rollout opened for it.
    fn last_rolled_ref(&self) -> &BTreeMap<String, String>;
    /// fleet.resolved's channel edges.
    fn channel_edges(&self) -> &[Edge];

    /// The manifest of `id`: the channel's current one when it matches, else from
    /// [`Snapshot::manifests`].
    fn manifest_of(&self, id: &RolloutId) -> Option<&RolloutManifest> {
        self.channels().get(id.channel()).map(|c| &c.manifest).filter(|m| m.rollout_id == *id).or_else(|| self.manifests().get(id))
    }

    /// The state of `host` in rollout `id` (`Pending` when unrecorded).
    fn state_of(&self, id: &RolloutId, host: &str) -> HostRolloutState {
        self.rollouts().get(id).and_then(|r| r.hosts.get(host)).map_or(HostRolloutState::Pending, |p| p.state)
    }
}

impl Snapshot for PlanInput {
    fn rollouts(&self) -> &BTreeMap<RolloutId, RolloutObserved> {
        &self.rollouts
    }
    fn channels(&self) -> &BTreeMap<String, ChannelInput> {
        &self.channels
    }
    fn manifests(&self) -> &BTreeMap<RolloutId, RolloutManifest> {
        &self.manifests
    }
    fn held(&self) -> &BTreeMap<String, String> {
        &self.held
    }
    fn lent(&self) -> &std::collections::BTreeSet<String> {
        &self.lent
    }
    fn last_rolled_ref(&self) -> &BTreeMap<String, String> {
        &self.last_rolled_ref
    }
    fn channel_edges(&self) -> &[Edge] {
        &self.channel_edges
    }
}

impl PlanInput {
    /// An empty snapshot at the current schema version.
    pub fn empty() -> Self {
        PlanInput {
            schema_version: PLAN_INPUT_SCHEMA_VERSION,
            channels: BTreeMap::new(),
            manifests: BTreeMap::new(),
            rollouts: BTreeMap::new(),
            hosts: BTreeMap::new(),
            last_rolled_ref: BTreeMap::new(),
            held: BTreeMap::new(),
            lent: Default::default(),
            channel_edges: Vec::new(),
            last_deferrals: BTreeMap::new(),
            settings: PlanSettings::default(),
            stale_alerts: BTreeMap::new(),
        }
    }

    /// The manifest of `id`: the channel's current one when it matches, else from
    /// [`PlanInput::manifests`].
    pub fn manifest(&self, id: &RolloutId) -> Option<&RolloutManifest> {
        self.manifest_of(id)
    }

    /// The state of `host` in rollout `id` (`Pending` when unrecorded).
    pub fn host_state(&self, id: &RolloutId, host: &str) -> HostRolloutState {
        self.state_of(id, host)
    }
}
