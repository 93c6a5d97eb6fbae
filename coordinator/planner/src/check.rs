//! The invariant checker: replays a plan's actions over its input (with [`apply`]) and
//! refuses any that break the planner's safety rules — a dispatch into a full budget (held
//! hosts counted), a dispatch before the host's wave, a dispatch of a held host or of a host
//! in flight in another rollout, a transition the proto tables do not allow, a rollout opened
//! while a channel edge holds its channel ("no edge violated"), a second live rollout on a
//! channel ("never two active rollouts on a channel"), or a deferral emitted twice. Tests run it over every plan they make.

use drover_proto::states::HostRolloutState as H;
use drover_proto::time::Time;

use crate::action::{Action, Plan, apply};
use crate::budget::{budget_members, in_flight_elsewhere, in_flight_hosts, is_live};
use crate::engine::is_done_for_promotion;
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
    let mut out = Vec::new();
    for (index, action) in plan.actions.iter().enumerate() {
        if let Err(message) = check_action(&work, action) {
            out.push(Violation { index, message });
        }
        apply(&mut work, action, now);
    }
    if out.is_empty() { Ok(()) } else { Err(out) }
}

fn check_action(work: &PlanInput, action: &Action) -> Result<(), String> {
    if action.reason().is_empty() {
        return Err("action without a reason".to_owned());
    }
    match action {
        Action::OpenRollout { rollout_id, channel, .. } => {
            if rollout_id.channel() != channel {
                return Err(format!("rollout {rollout_id} opened for channel {channel}"));
            }
            if work.rollouts.contains_key(rollout_id) {
                return Err(format!("rollout {rollout_id} opened twice"));
            }
            if let Some((other, r)) = work.rollouts.iter().find(|(id, r)| id.channel() == channel && is_live(r.state)) {
                return Err(format!("two active rollouts on channel {channel}: {other} ({}) and {rollout_id}", r.state));
            }
            for e in work.channel_edges.iter().filter(|e| e.after == *channel && e.before != *channel) {
                let b = e.before.as_str();
                if let Some((other, r)) = work.rollouts.iter().find(|(id, r)| id.channel() == b && is_live(r.state)) {
                    return Err(format!("channel edge {b} -> {channel} violated: {rollout_id} opened while {other} is {}", r.state));
                }
                if let Some(c) = work.channels.get(b) {
                    let pending = &c.manifest.rollout_id;
                    if work.last_rolled_ref.get(b).map(String::as_str) != Some(pending.channel_ref())
                        && !work.rollouts.contains_key(pending)
                    {
                        return Err(format!("channel edge {b} -> {channel} violated: {rollout_id} opened before {pending} was"));
                    }
                }
            }
        }
        Action::RolloutDeferred { channel, target_ref, blocked_by, .. } => {
            let current = work.channels.get(channel).map(|c| c.manifest.rollout_id.channel_ref());
            if current != Some(target_ref.as_str()) {
                return Err(format!("deferred ref {target_ref} is not channel {channel}'s current ref"));
            }
            if work.last_deferrals.get(channel).is_some_and(|d| d.target_ref == *target_ref && d.blocked_by == *blocked_by) {
                return Err(format!("deferral of {channel} ref {target_ref} by {blocked_by} emitted twice"));
            }
        }
        Action::RefSuperseded { channel, superseded_ref, by_ref, .. } => {
            if work.last_deferrals.get(channel).map(|d| d.target_ref.as_str()) != Some(superseded_ref.as_str()) {
                return Err(format!("ref {superseded_ref} of {channel} superseded but not queued"));
            }
            if superseded_ref == by_ref {
                return Err(format!("ref {superseded_ref} of {channel} superseded by itself"));
            }
        }
        Action::RolloutTransition { rollout_id, from, to, .. } => {
            let actual = work.rollouts.get(rollout_id).map(|r| r.state).ok_or_else(|| format!("unknown rollout {rollout_id}"))?;
            if actual != *from {
                return Err(format!("rollout {rollout_id} is {actual}, not {from}"));
            }
            from.transition(*to).map_err(|e| e.to_string())?;
        }
        Action::HostTransition { rollout_id, host, from, to, .. } => {
            host_from(work, rollout_id, host, *from)?;
            from.transition(*to).map_err(|e| e.to_string())?;
        }
        Action::Dispatch { rollout_id, host, wave_index, target, from, .. } => {
            host_from(work, rollout_id, host, *from)?;
            from.transition(H::Activating).map_err(|e| e.to_string())?;
            if let Some(reason) = work.held.get(host) {
                return Err(format!("{host} dispatched while held by {reason}"));
            }
            if let Some(other) = in_flight_elsewhere(work, rollout_id, host) {
                return Err(format!("{host} dispatched in {rollout_id} while in flight in {other}"));
            }
            let m = work.manifest(rollout_id).ok_or_else(|| format!("no manifest for {rollout_id}"))?;
            let entry = m.host(host).ok_or_else(|| format!("{host} not in {rollout_id}"))?;
            if entry.wave_index != *wave_index || entry.target_closure != *target {
                return Err(format!("{host} dispatched with wave/target not in the manifest"));
            }
            if let Some(e) =
                m.host_set.iter().find(|e| e.wave_index < *wave_index && !is_done_for_promotion(work.host_state(rollout_id, &e.hostname)))
            {
                return Err(format!("{host} (wave {wave_index}) dispatched before {} of wave {} is done", e.hostname, e.wave_index));
            }
            let in_flight = in_flight_hosts(work);
            let members = budget_members(work);
            for b in m.disruption_budgets.iter().filter(|b| b.hosts.iter().any(|h| h == host)) {
                let count =
                    members.get(&b.selector.canonical()).map_or(0, |s| s.iter().filter(|h| *h != host && in_flight.contains(*h)).count());
                if count + 1 > b.allowed() {
                    return Err(format!("{host} dispatched into a full budget ({count}/{} in flight)", b.allowed()));
                }
            }
        }
        Action::Rollback { rollout_id, host, revert_to, target, .. } => {
            let m = work.manifest(revert_to).ok_or_else(|| format!("no manifest for {revert_to}"))?;
            if m.host(host).map(|e| &e.target_closure) != Some(target) {
                return Err(format!("{host} rolled back to a target not in {revert_to}"));
            }
            if !work.rollouts.contains_key(rollout_id) {
                return Err(format!("unknown rollout {rollout_id}"));
            }
        }
    }
    Ok(())
}

fn host_from(work: &PlanInput, id: &drover_proto::names::RolloutId, host: &str, from: H) -> Result<(), String> {
    if !work.rollouts.contains_key(id) {
        return Err(format!("unknown rollout {id}"));
    }
    let actual = work.host_state(id, host);
    if actual != from { Err(format!("{host} in {id} is {actual}, not {from}")) } else { Ok(()) }
}
