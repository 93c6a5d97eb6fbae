//! What a plan says: [`Action`]s for the executor (each with the reason for its transition)
//! and [`Wait`]s for the report, plus [`apply`], the reference semantics of an action on a
//! [`PlanInput`] — the same change the executor persists, which the planner also uses to
//! see its own earlier decisions within one tick.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use drover_proto::names::RolloutId;
use drover_proto::states::{HostRolloutState, RolloutState};
use drover_proto::time::Time;

use crate::input::{Deferral, HostProgress, PlanInput, RolloutObserved};
use crate::wait::WaitReason;

/// One decision for the executor to persist (and, for intents, sign and deliver).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase", rename_all_fields = "camelCase", deny_unknown_fields)]
pub enum Action {
    /// Record a new rollout in `Opening` and the channel's last rolled ref.
    OpenRollout {
        /// The new rollout.
        rollout_id: RolloutId,
        /// Its channel.
        channel: String,
        /// The sha256 of its manifest.
        manifest_sha256: String,
        /// Why.
        reason: String,
    },
    /// The channel's current ref cannot open a rollout yet: it is queued behind the channel's
    /// own active rollout (`blocked_by` is the channel itself) or held by a channel edge
    /// (`blocked_by` is the predecessor channel). Emitted once per change of ref or blocker;
    /// recorded in [`PlanInput::last_deferrals`].
    RolloutDeferred {
        /// The held channel.
        channel: String,
        /// The ref that waits.
        target_ref: String,
        /// The channel it waits for.
        blocked_by: String,
        /// Why.
        reason: String,
    },
    /// A deferred (queued) ref of the channel was overtaken by a newer ref before it rolled:
    /// queue depth one, latest ref wins; the intermediate ref is never rolled.
    RefSuperseded {
        /// The channel.
        channel: String,
        /// The queued ref dropped.
        superseded_ref: String,
        /// The channel's ref now.
        by_ref: String,
        /// Why.
        reason: String,
    },
    /// A rollout-level state change.
    RolloutTransition {
        /// The rollout.
        rollout_id: RolloutId,
        /// From.
        from: RolloutState,
        /// To.
        to: RolloutState,
        /// Why.
        reason: String,
    },
    /// A per-host state change that issues nothing.
    HostTransition {
        /// The rollout.
        rollout_id: RolloutId,
        /// The host.
        host: String,
        /// From.
        from: HostRolloutState,
        /// To.
        to: HostRolloutState,
        /// Why.
        reason: String,
    },
    /// Issue an intent: `host` goes `from` → `Activating` on `target`.
    Dispatch {
        /// The host.
        host: String,
        /// The rollout.
        rollout_id: RolloutId,
        /// The host's wave.
        wave_index: u32,
        /// The closure to run.
        target: String,
        /// The host's state before (`Pending`, or `Skipped` for a returning host).
        from: HostRolloutState,
        /// Why.
        reason: String,
    },
    /// Issue a rollback intent: `host` (of `rollout_id`) goes back to `target`, its closure in
    /// the revertable rollout `revert_to`. The host state changes when it reports back.
    Rollback {
        /// The host.
        host: String,
        /// The rollout being reverted.
        rollout_id: RolloutId,
        /// The rollout reverted to.
        revert_to: RolloutId,
        /// The closure to run.
        target: String,
        /// Why.
        reason: String,
    },
    /// Alert: the channel's timestamp is older than its freshness window, so the channel
    /// opens, dispatches and rolls back nothing until CI re-signs. Emitted once per channel
    /// and `signed_at`; recorded in [`PlanInput::stale_alerts`].
    ReleaseStale {
        /// The stale channel.
        channel: String,
        /// The stale timestamp's `signedAt`.
        signed_at: Time,
        /// Why.
        reason: String,
    },
}

impl Action {
    /// The reason carried by the action.
    pub fn reason(&self) -> &str {
        match self {
            Action::OpenRollout { reason, .. }
            | Action::RolloutDeferred { reason, .. }
            | Action::RefSuperseded { reason, .. }
            | Action::RolloutTransition { reason, .. }
            | Action::HostTransition { reason, .. }
            | Action::Dispatch { reason, .. }
            | Action::Rollback { reason, .. }
            | Action::ReleaseStale { reason, .. } => reason,
        }
    }
}

/// Why something did not advance this tick.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Wait {
    /// The channel.
    pub channel: String,
    /// The rollout, when one is concerned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_id: Option<RolloutId>,
    /// The host, when one is concerned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Why, for humans ("budget gpu-a 3/3 in flight", "offline", …): `why` as a sentence.
    pub reason: String,
    /// Why, typed: the kind of hold and its figures.
    pub why: WaitReason,
}

impl Wait {
    /// A wait of `channel` (and `rollout_id`, `host` when they are concerned) for `why`.
    pub fn new(channel: &str, rollout_id: Option<&RolloutId>, host: Option<&str>, why: WaitReason) -> Wait {
        Wait { channel: channel.to_owned(), rollout_id: rollout_id.cloned(), host: host.map(str::to_owned), reason: why.to_string(), why }
    }
}

/// The output of one planning tick.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Plan {
    /// Decisions, in the order they were taken (apply in this order).
    pub actions: Vec<Action>,
    /// Every host (or rollout, or channel) that did not advance, with why.
    pub report: Vec<Wait>,
}

/// Applies `action` to `input` the way the executor persists it, at `now`.
///
/// Unknown rollouts are ignored (the planner never emits such actions); state fields are
/// overwritten without re-checking legality — that is the invariant checker's job.
pub fn apply(input: &mut PlanInput, action: &Action, now: Time) {
    let parts = Changed {
        rollouts: &mut input.rollouts,
        last_rolled_ref: &mut input.last_rolled_ref,
        last_deferrals: &mut input.last_deferrals,
        stale_alerts: &mut input.stale_alerts,
    };
    apply_to(parts, action, now);
}

/// The parts of a [`PlanInput`] an action changes; everything else (the release, hosts,
/// holds, settings) an action never touches, which lets the planner's working copy borrow
/// them from the caller's input instead of cloning them.
pub(crate) struct Changed<'a> {
    pub rollouts: &'a mut BTreeMap<RolloutId, RolloutObserved>,
    pub last_rolled_ref: &'a mut BTreeMap<String, String>,
    pub last_deferrals: &'a mut BTreeMap<String, Deferral>,
    pub stale_alerts: &'a mut BTreeMap<String, Time>,
}

/// [`apply`] on the parts an action changes.
pub(crate) fn apply_to(input: Changed<'_>, action: &Action, now: Time) {
    match action {
        Action::OpenRollout { rollout_id, channel, manifest_sha256, .. } => {
            input.rollouts.insert(
                rollout_id.clone(),
                RolloutObserved {
                    state: RolloutState::Opening,
                    since: now,
                    manifest_sha256: manifest_sha256.clone(),
                    hosts: Default::default(),
                },
            );
            input.last_rolled_ref.insert(channel.clone(), rollout_id.channel_ref().to_owned());
            input.last_deferrals.remove(channel);
        }
        Action::RolloutDeferred { channel, target_ref, blocked_by, .. } => {
            input
                .last_deferrals
                .insert(channel.clone(), Deferral { target_ref: target_ref.clone(), blocked_by: blocked_by.clone(), since: now });
        }
        Action::RefSuperseded { channel, superseded_ref, .. } => {
            if input.last_deferrals.get(channel).is_some_and(|d| d.target_ref == *superseded_ref) {
                input.last_deferrals.remove(channel);
            }
        }
        Action::RolloutTransition { rollout_id, to, .. } => {
            if let Some(r) = input.rollouts.get_mut(rollout_id) {
                r.state = *to;
                r.since = now;
            }
        }
        Action::HostTransition { rollout_id, host, to, .. } => {
            if let Some(r) = input.rollouts.get_mut(rollout_id) {
                let p = r.hosts.entry(host.clone()).or_insert(HostProgress { state: *to, since: now, intent: None });
                p.state = *to;
                p.since = now;
            }
        }
        Action::Dispatch { host, rollout_id, target, .. } => {
            if let Some(r) = input.rollouts.get_mut(rollout_id) {
                r.hosts
                    .insert(host.clone(), HostProgress { state: HostRolloutState::Activating, since: now, intent: Some(target.clone()) });
            }
        }
        Action::Rollback { host, rollout_id, target, .. } => {
            if let Some(r) = input.rollouts.get_mut(rollout_id) {
                let p = r.hosts.entry(host.clone()).or_insert(HostProgress { state: HostRolloutState::Pending, since: now, intent: None });
                p.intent = Some(target.clone());
            }
        }
        Action::ReleaseStale { channel, signed_at, .. } => {
            input.stale_alerts.insert(channel.clone(), *signed_at);
        }
    }
}
