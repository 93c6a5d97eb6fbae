//! A plan → what the store writes: one [`PlanOp`] per change (each with the state it expects),
//! a director-signed intent per dispatch and per rollback, and one event per transition in
//! RFC-0002 §7's shape:
//!
//! ```json
//! { "ts": "2026-04-24T10:17:03Z", "rollout": "stable@abc123", "wave": 2, "host": "attic-01",
//!   "transition": "Pending -> Activating", "reason": "wave 2 active; budgets permit",
//!   "budgets": { "etcd": "not-applicable", "always-on": "3/10 in flight" } }
//! ```
//!
//! Budgets are as they stand once the whole plan is applied (the state the next tick starts
//! from); a budget of the rollout that does not select the host reads "not-applicable".

use std::collections::BTreeMap;

use drover_planner::budget::{budget_name, in_flight_hosts};
use drover_planner::input::{Deferral, PlanInput};
use drover_planner::{Action, Plan};
use drover_proto::intent::Intent;
use drover_proto::keys::KeySigner;
use drover_proto::names::RolloutId;
use drover_proto::sig::Envelope;
use drover_proto::states::HostRolloutState;
use drover_proto::time::Time;
use serde_json::{Value, json};
use uuid::Uuid;

use super::ExecutorError;
use super::input::Built;
use crate::store::{NewEvent, NewIntent, PlanOp, PlanWrite};

/// Signs intents with the director key.
pub struct IntentIssuer<'a> {
    /// The director key.
    pub signer: &'a KeySigner,
    /// The confirm window written into every intent.
    pub confirm_window_secs: u64,
}

/// One intent to issue.
struct IntentSpec<'a> {
    host: &'a str,
    rollout_id: &'a RolloutId,
    wave_index: u32,
    target: &'a str,
}

impl IntentIssuer<'_> {
    /// The signed intent, or `None` for a host the store no longer has (deleted since it was
    /// touched): nobody can receive it, and refusing the whole plan for it would stall every
    /// rollout. The state change is still recorded, so the planner does not ask again.
    fn issue(&self, built: &Built, spec: &IntentSpec<'_>, now: Time) -> Result<Option<NewIntent>, ExecutorError> {
        let Some(host_id) = built.host_ids.get(spec.host).copied() else {
            tracing::warn!(host = spec.host, rollout = %spec.rollout_id, "no intent issued: the host is not enrolled (deleted?)");
            return Ok(None);
        };
        let manifest_sha256 = built
            .manifest_sha256
            .get(spec.rollout_id)
            .cloned()
            .ok_or_else(|| ExecutorError::Intent(format!("no manifest sha256 known for rollout {}", spec.rollout_id)))?;
        // The coordinator refuses the confirmation after the deadline (410), so the agent
        // rolls back; the intent expires then too, so a late agent never starts it.
        let deadline = now.plus_secs(built.input.settings.confirm_deadline_secs);
        let intent_id = Uuid::new_v4();
        let intent = Intent {
            intent_id: intent_id.to_string(),
            host_id: host_id.to_string(),
            hostname: spec.host.to_owned(),
            rollout_id: spec.rollout_id.clone(),
            manifest_sha256,
            wave_index: spec.wave_index,
            target_closure: spec.target.to_owned(),
            issued_at: now,
            expires_at: deadline,
            confirm_window_secs: self.confirm_window_secs,
        };
        let envelope = Envelope::seal(&intent, std::slice::from_ref(self.signer)).map_err(|e| ExecutorError::Intent(e.to_string()))?;
        let envelope = serde_json::to_vec(&envelope).map_err(|e| ExecutorError::Intent(e.to_string()))?;
        Ok(Some(NewIntent {
            intent_id,
            host_id,
            rollout_id: spec.rollout_id.clone(),
            envelope,
            confirm_deadline: Some(deadline),
            created_at: now,
        }))
    }
}

/// The in-flight count of each budget (by its selector's canonical form) once the plan is
/// applied, counted once per plan: each transition's event names the counts of its host's
/// budgets, and counting a budget's members per event made a tick dispatching thousands of
/// hosts under a fleet-wide budget quadratic (39 s for 6,666 dispatches at 100,000 hosts).
struct Budgets {
    in_flight: BTreeMap<String, usize>,
}

impl Budgets {
    fn of(after: &PlanInput) -> Self {
        let flying = in_flight_hosts(after);
        let in_flight = drover_planner::budget::budget_members(after)
            .into_iter()
            .map(|(selector, members)| (selector, members.iter().filter(|h| flying.contains(*h)).count()))
            .collect();
        Budgets { in_flight }
    }

    fn for_host(&self, after: &PlanInput, id: &RolloutId, host: &str) -> Value {
        let Some(m) = after.manifest(id) else { return json!({}) };
        let mut out = serde_json::Map::new();
        for b in &m.disruption_budgets {
            let text = if b.hosts.binary_search_by(|h| h.as_str().cmp(host)).is_ok() {
                let n = self.in_flight.get(&b.selector.canonical()).copied().unwrap_or(0);
                format!("{n}/{} in flight", b.allowed())
            } else {
                "not-applicable".to_owned()
            };
            out.insert(budget_name(b), Value::String(text));
        }
        Value::Object(out)
    }
}

fn wave_of(input: &PlanInput, id: &RolloutId, host: &str) -> Option<u32> {
    input.manifest(id).and_then(|m| m.host(host)).map(|e| e.wave_index)
}

/// The §7 event of one transition.
#[allow(clippy::too_many_arguments)]
fn event(
    kind: &str,
    now: Time,
    rollout: Option<&RolloutId>,
    wave: Option<u32>,
    host: Option<(&str, Option<Uuid>)>,
    transition: String,
    reason: &str,
    budgets: Value,
) -> NewEvent {
    let data = json!({
        "ts": now.to_string(),
        "rollout": rollout.map(RolloutId::as_str),
        "wave": wave,
        "host": host.map(|(h, _)| h),
        "transition": transition,
        "reason": reason,
        "budgets": budgets,
    });
    NewEvent {
        at: now,
        kind: kind.to_owned(),
        host_id: host.and_then(|(_, id)| id),
        rollout_id: rollout.cloned(),
        job_id: None,
        message: reason.to_owned(),
        data,
    }
}

/// The store write of `plan` (made over `built.input` at `now`; `after` is the input with the
/// plan applied), and the hosts to wake.
pub fn plan_write(
    built: &Built,
    plan: &Plan,
    after: &PlanInput,
    now: Time,
    issuer: &IntentIssuer<'_>,
) -> Result<(PlanWrite, Vec<Uuid>), ExecutorError> {
    let input = &built.input;
    let budgets = Budgets::of(after);
    // Each host's state as the ops so far leave it: an op's expectation is the state before it.
    let mut work = input.clone();
    let mut ops = Vec::new();
    let mut events = Vec::new();
    let mut woken = Vec::new();
    for action in &plan.actions {
        let reason = action.reason();
        match action {
            Action::OpenRollout { rollout_id, manifest_sha256, .. } => {
                ops.push(PlanOp::OpenRollout { rollout_id: rollout_id.clone(), manifest_sha256: manifest_sha256.clone() });
                events.push(event("rollout.opened", now, Some(rollout_id), None, None, "-> Opening".into(), reason, json!({})));
            }
            Action::RolloutDeferred { channel, target_ref, blocked_by, .. } => {
                let deferral = Deferral { target_ref: target_ref.clone(), blocked_by: blocked_by.clone(), since: now };
                let deferral = serde_json::to_value(&deferral).map_err(|e| ExecutorError::Intent(e.to_string()))?;
                ops.push(PlanOp::Deferral { channel: channel.clone(), deferral: Some(deferral) });
                let mut e = event("rollout.deferred", now, None, None, None, format!("{channel}@{target_ref} deferred"), reason, json!({}));
                e.data["channel"] = json!(channel);
                e.data["blockedBy"] = json!(blocked_by);
                events.push(e);
            }
            Action::RefSuperseded { channel, superseded_ref, by_ref, .. } => {
                if work.last_deferrals.get(channel).is_some_and(|d| d.target_ref == *superseded_ref) {
                    ops.push(PlanOp::Deferral { channel: channel.clone(), deferral: None });
                }
                let mut e =
                    event("rollout.ref_superseded", now, None, None, None, format!("{superseded_ref} -> {by_ref}"), reason, json!({}));
                e.data["channel"] = json!(channel);
                events.push(e);
            }
            Action::RolloutTransition { rollout_id, from, to, .. } => {
                ops.push(PlanOp::RolloutState { rollout_id: rollout_id.clone(), from: *from, to: *to });
                events.push(event("rollout.transition", now, Some(rollout_id), None, None, format!("{from} -> {to}"), reason, json!({})));
            }
            Action::HostTransition { rollout_id, host, from, to, .. } => {
                let wave = wave_of(input, rollout_id, host);
                ops.push(PlanOp::HostState {
                    rollout_id: rollout_id.clone(),
                    hostname: host.clone(),
                    wave_index: wave.unwrap_or(0),
                    from: *from,
                    to: *to,
                    intent_target: None,
                });
                let b = budgets.for_host(after, rollout_id, host);
                let h = Some((host.as_str(), built.host_ids.get(host).copied()));
                events.push(event("rollout.host", now, Some(rollout_id), wave, h, format!("{from} -> {to}"), reason, b));
            }
            Action::Dispatch { host, rollout_id, wave_index, target, from, .. } => {
                let spec = IntentSpec { host, rollout_id, wave_index: *wave_index, target };
                let intent = issuer.issue(built, &spec, now)?;
                ops.push(PlanOp::HostState {
                    rollout_id: rollout_id.clone(),
                    hostname: host.clone(),
                    wave_index: *wave_index,
                    from: *from,
                    to: HostRolloutState::Activating,
                    intent_target: Some(target.clone()),
                });
                if let Some(intent) = intent {
                    woken.push(intent.host_id);
                    ops.push(PlanOp::Intent(intent));
                }
                let b = budgets.for_host(after, rollout_id, host);
                let h = Some((host.as_str(), built.host_ids.get(host).copied()));
                let t = format!("{from} -> Activating");
                events.push(event("rollout.host", now, Some(rollout_id), Some(*wave_index), h, t, reason, b));
            }
            Action::Rollback { host, rollout_id, revert_to, target, .. } => {
                // The intent names the rollout reverted to: its manifest lists this closure for
                // the host, and the fresh timestamp lists that manifest as revertable.
                let wave = wave_of(input, revert_to, host).unwrap_or(0);
                let spec = IntentSpec { host, rollout_id: revert_to, wave_index: wave, target };
                let intent = issuer.issue(built, &spec, now)?;
                let state = work.host_state(rollout_id, host);
                ops.push(PlanOp::HostState {
                    rollout_id: rollout_id.clone(),
                    hostname: host.clone(),
                    wave_index: wave_of(input, rollout_id, host).unwrap_or(0),
                    from: state,
                    to: state,
                    intent_target: Some(target.clone()),
                });
                if let Some(intent) = intent {
                    woken.push(intent.host_id);
                    ops.push(PlanOp::Intent(intent));
                }
                let b = budgets.for_host(after, rollout_id, host);
                let h = Some((host.as_str(), built.host_ids.get(host).copied()));
                let t = format!("{state} -> revert to {revert_to}");
                events.push(event("rollout.host", now, Some(rollout_id), wave_of(input, rollout_id, host), h, t, reason, b));
            }
            Action::ReleaseStale { channel, signed_at, .. } => {
                ops.push(PlanOp::StaleAlert { channel: channel.clone(), signed_at: *signed_at });
                let mut e = event("alert.release_stale", now, None, None, None, format!("{channel} stale"), reason, json!({}));
                e.data["channel"] = json!(channel);
                e.data["signedAt"] = json!(signed_at);
                events.push(e);
            }
        }
        drover_planner::apply(&mut work, action, now);
    }
    // Hosts are woken once each, whatever the plan issued them.
    woken.sort();
    woken.dedup();
    Ok((PlanWrite { at: now, ops, events }, woken))
}
