//! The planner's working copy of a snapshot for one tick: it owns — clones once — only the
//! parts an action changes (rollouts, last rolled refs, deferrals, stale alerts) and borrows
//! everything else (the release's manifests, hosts, holds, settings) from the caller's input,
//! which no action touches. A manifest or a host's report read through it therefore borrows
//! the caller's input, not the working copy, and stays usable while the copy changes — the
//! planner never clones a manifest or a host.

use std::collections::BTreeMap;

use drover_proto::artifacts::RolloutManifest;
use drover_proto::names::RolloutId;
use drover_proto::spec::Edge;
use drover_proto::states::HostRolloutState;
use drover_proto::time::Time;

use crate::action::{Action, Changed, apply_to};
use crate::input::{ChannelInput, Deferral, PlanInput, RolloutObserved, Snapshot};

/// See the module documentation.
pub(crate) struct Work<'a> {
    /// The caller's input: everything no action changes is read from here.
    pub base: &'a PlanInput,
    /// Rollouts, as this tick's actions leave them.
    pub rollouts: BTreeMap<RolloutId, RolloutObserved>,
    /// Last rolled refs, as this tick's actions leave them.
    pub last_rolled_ref: BTreeMap<String, String>,
    /// Deferrals, as this tick's actions leave them.
    pub last_deferrals: BTreeMap<String, Deferral>,
    /// Stale alerts, as this tick's actions leave them.
    pub stale_alerts: BTreeMap<String, Time>,
}

impl<'a> Work<'a> {
    /// The working copy of `base`.
    pub fn new(base: &'a PlanInput) -> Self {
        Work {
            base,
            rollouts: base.rollouts.clone(),
            last_rolled_ref: base.last_rolled_ref.clone(),
            last_deferrals: base.last_deferrals.clone(),
            stale_alerts: base.stale_alerts.clone(),
        }
    }

    /// Applies `action` (the executor's semantics, [`crate::apply`]).
    pub fn apply(&mut self, action: &Action, now: Time) {
        let parts = Changed {
            rollouts: &mut self.rollouts,
            last_rolled_ref: &mut self.last_rolled_ref,
            last_deferrals: &mut self.last_deferrals,
            stale_alerts: &mut self.stale_alerts,
        };
        apply_to(parts, action, now);
    }

    /// The manifest of `id`, borrowed from the caller's input.
    pub fn manifest(&self, id: &RolloutId) -> Option<&'a RolloutManifest> {
        let base: &'a PlanInput = self.base;
        base.manifest(id)
    }

    /// The state of `host` in rollout `id`.
    pub fn host_state(&self, id: &RolloutId, host: &str) -> HostRolloutState {
        self.state_of(id, host)
    }
}

impl Snapshot for Work<'_> {
    fn rollouts(&self) -> &BTreeMap<RolloutId, RolloutObserved> {
        &self.rollouts
    }
    fn channels(&self) -> &BTreeMap<String, ChannelInput> {
        &self.base.channels
    }
    fn manifests(&self) -> &BTreeMap<RolloutId, RolloutManifest> {
        &self.base.manifests
    }
    fn held(&self) -> &BTreeMap<String, String> {
        &self.base.held
    }
    fn lent(&self) -> &std::collections::BTreeSet<String> {
        &self.base.lent
    }
    fn last_rolled_ref(&self) -> &BTreeMap<String, String> {
        &self.last_rolled_ref
    }
    fn channel_edges(&self) -> &[Edge] {
        &self.base.channel_edges
    }
}
