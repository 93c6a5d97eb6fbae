//! The invariant checker: replays a plan's actions over its input (with [`apply`]) and
//! refuses any that break the planner's safety rules — a dispatch into a full budget (held
//! hosts counted), a dispatch before the host's wave, a dispatch of a held host or of a host
//! in flight in another rollout, a transition the proto tables do not allow, a rollout opened
//! while a channel edge holds its channel ("no edge violated"), a second live rollout on a
//! channel ("never two active rollouts on a channel"), a deferral emitted twice, an opening,
//! dispatch or rollback on a channel whose timestamp is stale, a stale alert emitted twice or
//! for a fresh channel, a host reverted for a missed confirm deadline before it passed, a
//! dispatch by a rollout that is not running (a `Converged` one may dispatch only a returning
//! `Skipped` host, and only while it is its channel's current rollout), or a rollout pruned
//! before its retention ran out or while a host is in flight in it. Budgets count hosts in
//! flight in every rollout not pruned — stragglers of converged rollouts included. Tests run
//! it over every plan they make.
//!
//! It stays near-linear in the plan's length: the budget accounting and the per-wave count of
//! hosts not yet done are built once (per rollout, on first use) and kept current as each
//! action is applied, instead of being recomputed from the whole fleet for every dispatch.

use std::collections::{BTreeMap, BTreeSet};

use drover_proto::names::RolloutId;
use drover_proto::states::{HostRolloutState as H, RolloutState as R};
use drover_proto::time::Time;

use crate::action::{Action, Plan, apply};
use crate::budget::{budget_members, in_flight_elsewhere, in_flight_hosts, in_flight_hosts_of, is_current, is_in_flight_state, is_live};
use crate::engine::{is_done_for_promotion, is_prunable};
use crate::input::PlanInput;

/// One broken invariant: the index of the offending action and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("action {index}: {message}")]
pub struct Violation {
    /// Position in `plan.actions`.
    pub index: usize,
    /// What is wrong.
    pub message: String,
}

/// Checks every action of `plan` against `input` as the executor would apply them at `now`.
pub fn check_plan(input: &PlanInput, plan: &Plan, now: Time) -> Result<(), Vec<Violation>> {
    let mut work = input.clone();
    let mut cache = Cache::default();
    let mut out = Vec::new();
    for (index, action) in plan.actions.iter().enumerate() {
        if let Err(broken) = check_action(&work, &mut cache, action, now) {
            out.push(Violation { index, message: broken.to_string() });
        }
        let moved = match action {
            Action::HostTransition { rollout_id, host, .. } | Action::Dispatch { rollout_id, host, .. } => {
                Some((rollout_id, host, work.host_state(rollout_id, host)))
            }
            _ => None,
        };
        apply(&mut work, action, now);
        match moved {
            Some((id, host, before)) => cache.host_moved(&work, id, host, before),
            // A rollout opened or changing state changes what is live: budgets are re-counted.
            None if matches!(action, Action::OpenRollout { .. } | Action::RolloutTransition { .. }) => cache.budgets = None,
            None => {}
        }
    }
    if out.is_empty() { Ok(()) } else { Err(out) }
}

/// Why one action breaks an invariant (a [`Violation`] reports it as text).
#[derive(Debug, thiserror::Error)]
enum Broken {
    /// One of the planner's rules, described.
    #[error("{0}")]
    Rule(String),
    /// A transition the proto state tables do not allow.
    #[error(transparent)]
    Transition(#[from] drover_proto::states::IllegalTransition),
}

/// A [`Broken::Rule`], its description formatted.
macro_rules! broken {
    ($($arg:tt)*) => {
        Broken::Rule(format!($($arg)*))
    };
}

/// What the checker keeps current across one plan's actions.
#[derive(Default)]
struct Cache {
    /// The budget accounting, built on first use: in-flight hosts (held counted), each
    /// canonical selector's members across the rollouts that share budgets, and how many are in flight.
    budgets: Option<Budgets>,
    /// Per rollout, per wave index, how many hosts are not done for promotion.
    not_done: BTreeMap<RolloutId, Vec<usize>>,
}

struct Budgets {
    in_flight: BTreeSet<String>,
    members: BTreeMap<String, BTreeSet<String>>,
    counts: BTreeMap<String, usize>,
}

impl Cache {
    fn budgets(&mut self, work: &PlanInput) -> &Budgets {
        self.budgets.get_or_insert_with(|| {
            let in_flight = in_flight_hosts(work);
            let members = budget_members(work);
            let counts = members.iter().map(|(k, m)| (k.clone(), m.iter().filter(|h| in_flight.contains(*h)).count())).collect();
            Budgets { in_flight, members, counts }
        })
    }

    fn not_done(&mut self, work: &PlanInput, id: &RolloutId) -> &[usize] {
        self.not_done.entry(id.clone()).or_insert_with(|| {
            let mut counts = Vec::new();
            for e in work.manifest(id).map_or(&[][..], |m| &m.host_set[..]) {
                let w = e.wave_index as usize;
                if counts.len() <= w {
                    counts.resize(w + 1, 0);
                }
                counts[w] += usize::from(!is_done_for_promotion(work.host_state(id, &e.hostname)));
            }
            counts
        })
    }

    /// `host` of rollout `id` went from `before` to its state in `work`.
    fn host_moved(&mut self, work: &PlanInput, id: &RolloutId, host: &str, before: H) {
        let after = work.host_state(id, host);
        if let (Some(counts), Some(e)) = (self.not_done.get_mut(id), work.manifest(id).and_then(|m| m.host(host))) {
            if let Some(c) = counts.get_mut(e.wave_index as usize) {
                *c = *c + usize::from(!is_done_for_promotion(after)) - usize::from(!is_done_for_promotion(before));
            }
        }
        if let Some(b) = self.budgets.as_mut() {
            let now_in = in_flight_hosts_of(work, host);
            let changed = if now_in { b.in_flight.insert(host.to_owned()) } else { b.in_flight.remove(host) };
            if changed {
                for (key, m) in &b.members {
                    if m.contains(host) {
                        let c = b.counts.entry(key.clone()).or_default();
                        *c = if now_in { *c + 1 } else { c.saturating_sub(1) };
                    }
                }
            }
        }
    }
}

/// The stale reason of the channel at `now`, if its timestamp is stale.
fn stale(work: &PlanInput, channel: &str, now: Time) -> Option<String> {
    work.channels
        .get(channel)
        .filter(|c| c.is_stale(now))
        .map(|c| format!("channel {channel}'s timestamp signed at {} is stale", c.signed_at))
}

fn check_action(work: &PlanInput, cache: &mut Cache, action: &Action, now: Time) -> Result<(), Broken> {
    if action.reason().is_empty() {
        return Err(Broken::Rule("action without a reason".to_owned()));
    }
    match action {
        Action::OpenRollout { rollout_id, channel, .. } => {
            if let Some(s) = stale(work, channel, now) {
                return Err(broken!("{rollout_id} opened while {s}"));
            }
            if rollout_id.channel() != channel {
                return Err(broken!("rollout {rollout_id} opened for channel {channel}"));
            }
            if work.rollouts.contains_key(rollout_id) {
                return Err(broken!("rollout {rollout_id} opened twice"));
            }
            if let Some((other, r)) = work.rollouts.iter().find(|(id, r)| id.channel() == channel && is_live(r.state)) {
                return Err(broken!("two active rollouts on channel {channel}: {other} ({}) and {rollout_id}", r.state));
            }
            for e in work.channel_edges.iter().filter(|e| e.after == *channel && e.before != *channel) {
                let b = e.before.as_str();
                if let Some((other, r)) = work.rollouts.iter().find(|(id, r)| id.channel() == b && is_live(r.state)) {
                    return Err(broken!("channel edge {b} -> {channel} violated: {rollout_id} opened while {other} is {}", r.state));
                }
                if let Some(c) = work.channels.get(b) {
                    let pending = &c.manifest.rollout_id;
                    if work.last_rolled_ref.get(b).map(String::as_str) != Some(pending.channel_ref())
                        && !work.rollouts.contains_key(pending)
                    {
                        return Err(broken!("channel edge {b} -> {channel} violated: {rollout_id} opened before {pending} was"));
                    }
                }
            }
        }
        Action::RolloutDeferred { channel, target_ref, blocked_by, .. } => {
            let current = work.channels.get(channel).map(|c| c.manifest.rollout_id.channel_ref());
            if current != Some(target_ref.as_str()) {
                return Err(broken!("deferred ref {target_ref} is not channel {channel}'s current ref"));
            }
            if work.last_deferrals.get(channel).is_some_and(|d| d.target_ref == *target_ref && d.blocked_by == *blocked_by) {
                return Err(broken!("deferral of {channel} ref {target_ref} by {blocked_by} emitted twice"));
            }
        }
        Action::RefSuperseded { channel, superseded_ref, by_ref, .. } => {
            if work.last_deferrals.get(channel).map(|d| d.target_ref.as_str()) != Some(superseded_ref.as_str()) {
                return Err(broken!("ref {superseded_ref} of {channel} superseded but not queued"));
            }
            if superseded_ref == by_ref {
                return Err(broken!("ref {superseded_ref} of {channel} superseded by itself"));
            }
        }
        Action::RolloutTransition { rollout_id, from, to, .. } => {
            let actual = work.rollouts.get(rollout_id).map(|r| r.state).ok_or_else(|| broken!("unknown rollout {rollout_id}"))?;
            if actual != *from {
                return Err(broken!("rollout {rollout_id} is {actual}, not {from}"));
            }
            from.transition(*to)?;
            if *to == R::Pruned {
                let r = &work.rollouts[rollout_id];
                if !is_prunable(*from) || r.since.plus_secs(work.settings.retention_secs) > now {
                    return Err(broken!("{rollout_id} ({from} since {}) pruned before its retention ran out", r.since));
                }
                if let Some((h, p)) = r.hosts.iter().find(|(_, p)| is_in_flight_state(p.state)) {
                    return Err(broken!("{rollout_id} pruned while {h} is still {} in it", p.state));
                }
            }
        }
        Action::HostTransition { rollout_id, host, from, to, .. } => {
            host_from(work, rollout_id, host, *from)?;
            from.transition(*to)?;
            // Outside a revert, Activating -> Reverted is the missed confirm deadline only.
            let reverting = work.rollouts.get(rollout_id).is_some_and(|r| r.state == R::Reverting);
            if (*from, *to) == (H::Activating, H::Reverted) && !reverting {
                let since = work.rollouts[rollout_id].hosts.get(host).map_or(now, |p| p.since);
                if since.plus_secs(work.settings.confirm_deadline_secs) >= now {
                    return Err(broken!("{host} in {rollout_id} reverted before its confirm deadline passed"));
                }
            }
        }
        Action::ReleaseStale { channel, signed_at, .. } => {
            let c = work.channels.get(channel).ok_or_else(|| broken!("stale alert for unknown channel {channel}"))?;
            if c.signed_at != *signed_at || !c.is_stale(now) {
                return Err(broken!("stale alert for channel {channel} signed at {signed_at}, which is not its stale timestamp"));
            }
            if work.stale_alerts.get(channel) == Some(signed_at) {
                return Err(broken!("stale alert for channel {channel} signed at {signed_at} emitted twice"));
            }
        }
        Action::Dispatch { rollout_id, host, wave_index, target, from, .. } => {
            host_from(work, rollout_id, host, *from)?;
            from.transition(H::Activating)?;
            // Only a running rollout dispatches — or a Converged one that is still its channel's
            // current rollout, dispatching a returning Skipped host (a straggler, RFC-0002 §5.2).
            match work.rollouts.get(rollout_id).map(|r| r.state) {
                Some(R::Active | R::Converging) => {}
                Some(R::Converged) if *from == H::Skipped && is_current(work, rollout_id) => {}
                Some(R::Converged) => {
                    return Err(broken!("{host} dispatched from {from} by {rollout_id}, converged and not its channel's current rollout"));
                }
                state => return Err(broken!("{host} dispatched by {rollout_id} in {state:?}")),
            }
            if let Some(s) = stale(work, rollout_id.channel(), now) {
                return Err(broken!("{host} dispatched in {rollout_id} while {s}"));
            }
            if let Some(reason) = work.held.get(host) {
                return Err(broken!("{host} dispatched while held by {reason}"));
            }
            if let Some(other) = in_flight_elsewhere(work, rollout_id, host) {
                return Err(broken!("{host} dispatched in {rollout_id} while in flight in {other}"));
            }
            let m = work.manifest(rollout_id).ok_or_else(|| broken!("no manifest for {rollout_id}"))?;
            let entry = m.host(host).ok_or_else(|| broken!("{host} not in {rollout_id}"))?;
            if entry.wave_index != *wave_index || entry.target_closure != *target {
                return Err(broken!("{host} dispatched with wave/target not in the manifest"));
            }
            if let Some(w) = cache.not_done(work, rollout_id).iter().take(*wave_index as usize).position(|n| *n > 0) {
                let e = m
                    .host_set
                    .iter()
                    .find(|e| e.wave_index == w as u32 && !is_done_for_promotion(work.host_state(rollout_id, &e.hostname)));
                let name = e.map_or("a host", |e| e.hostname.as_str());
                return Err(broken!("{host} (wave {wave_index}) dispatched before {name} of wave {w} is done"));
            }
            let budgets = cache.budgets(work);
            // Budget host lists are sorted (the manifest's canonical order).
            for b in m.disruption_budgets.iter().filter(|b| b.hosts.binary_search_by(|h| h.as_str().cmp(host)).is_ok()) {
                let key = b.selector.canonical();
                let counted_self = budgets.in_flight.contains(host) && budgets.members.get(&key).is_some_and(|m| m.contains(host));
                let count = budgets.counts.get(&key).copied().unwrap_or(0) - usize::from(counted_self);
                if count + 1 > b.allowed() {
                    return Err(broken!("{host} dispatched into a full budget ({count}/{} in flight)", b.allowed()));
                }
            }
        }
        Action::Rollback { rollout_id, host, revert_to, target, .. } => {
            if let Some(s) = stale(work, rollout_id.channel(), now) {
                return Err(broken!("{host} of {rollout_id} rolled back while {s}"));
            }
            let m = work.manifest(revert_to).ok_or_else(|| broken!("no manifest for {revert_to}"))?;
            if m.host(host).map(|e| &e.target_closure) != Some(target) {
                return Err(broken!("{host} rolled back to a target not in {revert_to}"));
            }
            if !work.rollouts.contains_key(rollout_id) {
                return Err(broken!("unknown rollout {rollout_id}"));
            }
        }
    }
    Ok(())
}

fn host_from(work: &PlanInput, id: &RolloutId, host: &str, from: H) -> Result<(), Broken> {
    if !work.rollouts.contains_key(id) {
        return Err(broken!("unknown rollout {id}"));
    }
    let actual = work.host_state(id, host);
    if actual != from { Err(broken!("{host} in {id} is {actual}, not {from}")) } else { Ok(()) }
}
