//! The decision procedure of RFC-0002 §4 over a [`PlanInput`] snapshot.
//!
//! `plan` works on a private working copy of the input (`work.rs`: it clones only what
//! actions change and borrows the rest): every action it decides is applied to that
//! copy at once (with [`apply`](crate::apply), the executor's semantics), so later rules in the same tick
//! see earlier decisions — own dispatches count against budgets, a wave promoted in this tick
//! lets the next wave dispatch. It repeats passes until a pass decides nothing; that last
//! pass's waits are the report. Re-planning the applied result therefore yields no actions.
//!
//! Channels (RFC-0002 §4.3): at most one live rollout per channel; a new ref arriving while
//! one is live waits (queue depth one: a newer ref supersedes the queued one, `RefSuperseded`);
//! a channel edge `{before, after}` holds opening `after` while `before` has a live rollout
//! (Halted included) or a ref not yet rolled. After the fixpoint, each held channel gets one
//! `RolloutDeferred` per change of ref or blocker, recorded in `PlanInput::last_deferrals`.
//!
//! Stragglers (RFC-0002 §5.2): a host Skipped by the channel's current rollout picks up its
//! target when it returns even after that rollout `Converged` — dispatched by the converged
//! rollout (which stays `Converged`) under every dispatch rule, landed like any host, counted
//! in flight by every budget, and keeping its rollout from being pruned until it lands. See
//! `step_finished`.

use drover_proto::artifacts::{HostSetEntry, RolloutManifest};
use drover_proto::names::RolloutId;
use drover_proto::report::{ActivationPhase, ProbeOutcome};
use drover_proto::spec::{Mode, OnHealthFailure};
use drover_proto::states::{HostRolloutState as H, RolloutState as R};
use drover_proto::time::Time;

use crate::action::{Action, Plan, Wait};
use crate::budget::BudgetIndex;
use crate::input::{PlanInput, Snapshot};
use crate::wait::WaitReason;
use crate::work::Work;

/// More passes than any snapshot needs (each pass that acts moves some host or rollout
/// strictly forward); a guard against a rule bug looping forever.
const MAX_PASSES: usize = 64;

/// Plans one tick: the actions to take at `now` and, for everything that does not
/// advance, why.
pub fn plan(input: &PlanInput, now: Time) -> Plan {
    let mut work = Work::new(input);
    let mut tick = Tick { now, actions: Vec::new(), waits: Vec::new(), budgets: None };
    for _ in 0..MAX_PASSES {
        let before = tick.actions.len();
        tick.waits.clear();
        step(&mut work, &mut tick);
        if tick.actions.len() == before {
            break;
        }
    }
    record_deferrals(&mut work, &mut tick);
    record_stale_alerts(&mut work, &mut tick);
    let mut report = tick.waits;
    // Stable: within one host, waits keep the order the rules produced them in.
    report.sort_by(|a, b| (&a.channel, &a.rollout_id, &a.host).cmp(&(&b.channel, &b.rollout_id, &b.host)));
    Plan { actions: tick.actions, report }
}

/// The accumulating output of one tick.
struct Tick {
    now: Time,
    actions: Vec<Action>,
    waits: Vec<Wait>,
    /// The budget accounting of `work`, built on first use; a dispatch updates it, any other
    /// action drops it (it may change what is live or in flight).
    budgets: Option<BudgetIndex>,
}

impl Tick {
    fn emit(&mut self, work: &mut Work<'_>, action: Action) {
        work.apply(&action, self.now);
        use crate::budget::{in_flight_hosts_of, is_in_flight_state};
        match (&action, self.budgets.as_mut()) {
            (Action::Dispatch { host, .. }, Some(index)) => index.note_dispatched(host),
            // A host moving within a rollout: in flight or not is all that changes.
            (Action::HostTransition { host, from, to, .. }, Some(index)) => match (is_in_flight_state(*from), is_in_flight_state(*to)) {
                (false, true) => index.note_dispatched(host),
                (true, false) if !in_flight_hosts_of(work, host) => index.note_landed(host),
                _ => {}
            },
            _ => self.budgets = None,
        }
        self.actions.push(action);
    }

    fn first_full_budget(&mut self, work: &Work<'_>, id: &RolloutId, host: &str) -> Option<crate::budget::BudgetFull> {
        self.budgets.get_or_insert_with(|| BudgetIndex::build(work)).first_full(work, id, host)
    }

    fn wait(&mut self, id: &RolloutId, host: Option<&str>, why: WaitReason) {
        self.waits.push(Wait::new(id.channel(), Some(id), host, why));
    }

    fn host_to(&mut self, work: &mut Work<'_>, id: &RolloutId, host: &str, from: H, to: H, reason: String) {
        self.emit(work, Action::HostTransition { rollout_id: id.clone(), host: host.to_owned(), from, to, reason });
    }

    fn rollout_to(&mut self, work: &mut Work<'_>, id: &RolloutId, from: R, to: R, reason: String) {
        self.emit(work, Action::RolloutTransition { rollout_id: id.clone(), from, to, reason });
    }
}

/// Whether a host in `state` is done as far as wave promotion goes.
pub fn is_done_for_promotion(state: H) -> bool {
    matches!(state, H::Converged | H::Deferred | H::Skipped | H::Failed | H::Reverted)
}

/// The rollout states in which a channel's rollout blocks opening the next ref.
fn blocks_next_ref(state: R) -> bool {
    matches!(state, R::Opening | R::Active | R::Converging | R::Reverting)
}

/// One pass over every channel, every live rollout and every finished one with stragglers
/// (see [`step_finished`]), in rollout id order, then retention.
fn step(work: &mut Work<'_>, tick: &mut Tick) {
    use crate::budget::{has_in_flight, is_live, may_dispatch_stragglers, may_hold_in_flight};
    open_rollouts(work, tick);
    let ids: Vec<(RolloutId, bool)> = work
        .rollouts
        .iter()
        .filter_map(|(id, r)| {
            if is_live(r.state) {
                Some((id.clone(), true))
            } else if may_hold_in_flight(r.state)
                && (has_in_flight(r)
                    || may_dispatch_stragglers(work, id, r)
                    || (r.state == R::Converged && r.hosts.values().any(|p| p.state == H::Deferred)))
            {
                Some((id.clone(), false))
            } else {
                None
            }
        })
        .collect();
    for (id, live) in ids {
        if live {
            step_rollout(work, tick, &id);
        } else {
            step_finished(work, tick, &id);
        }
    }
    prune(work, tick);
}

/// Stragglers of a finished rollout (RFC-0002 §5.2, DESIGN "Rollout states": a host offline
/// when its wave ran is `Skipped` and picks up the channel's current target when it returns).
///
/// - A host still in flight (`Activating`/`Soaking`) in a finished rollout not pruned — a
///   straggler dispatched after its rollout converged, or one caught in flight when its
///   rollout was superseded or cancelled — is landed exactly as in a live rollout
///   ([`progress_host`]: confirm, soak of its wave, the per-host health gate, the confirm
///   deadline). A `Deferred` host of a `Converged` rollout goes on to `Converged` when it
///   boots into its target.
/// - When the rollout is `Converged` and still its channel's current rollout, each `Skipped`
///   host that is online again is dispatched on the channel's current target under the same
///   rules as any dispatch ([`consider_dispatch`]: wave order, held, in flight elsewhere,
///   stale channel, host edges, the manifest's frozen budgets). A superseded rollout never
///   does: the channel's newer rollout covers the host.
///
/// The rollout's own state stays `Converged` (Converged → Active is not a transition).
/// The health gate's `maxFailures` / `onHealthFailure` are not applied to stragglers: a
/// straggler that fails the gate, fails its activation or misses its confirm deadline is just
/// `Failed` (or `Reverted`) — a converged rollout is not halted or rolled back for one host
/// that was away, and the next ref rolls it again.
fn step_finished(work: &mut Work<'_>, tick: &mut Tick, id: &RolloutId) {
    let Some(r) = work.rollouts.get(id) else { return };
    let converged = r.state == R::Converged;
    let landing: Vec<String> = r
        .hosts
        .iter()
        .filter(|(_, p)| crate::budget::is_in_flight_state(p.state) || (converged && p.state == H::Deferred))
        .map(|(h, _)| h.clone())
        .collect();
    let returning: Vec<String> = if crate::budget::may_dispatch_stragglers(work, id, r) {
        r.hosts
            .iter()
            .filter(|(h, p)| p.state == H::Skipped && work.base.hosts.get(h.as_str()).is_some_and(|o| o.is_online()))
            .map(|(h, _)| h.clone())
            .collect()
    } else {
        Vec::new()
    };
    if landing.is_empty() && returning.is_empty() {
        return;
    }
    let Some(manifest) = work.manifest(id) else {
        return tick.wait(id, None, WaitReason::ManifestMissing { rollout: id.clone(), stragglers: true });
    };
    for h in &landing {
        if let Some(e) = manifest.host(h) {
            progress_host(work, tick, id, manifest, e);
        }
    }
    if returning.is_empty() {
        return;
    }
    // Wave order holds for stragglers too: a returning host of an earlier wave goes first.
    let mut order: Vec<&HostSetEntry> = returning.iter().filter_map(|h| manifest.host(h)).collect();
    order.sort_by_key(|e| e.wave_index);
    let mut current = current_wave(work, id, manifest);
    for entry in order {
        consider_dispatch(work, tick, id, manifest, entry, current);
        if work.host_state(id, &entry.hostname) != H::Skipped {
            current = current_wave(work, id, manifest);
        }
    }
}

/// Whether a rollout in `state` is finished and may be pruned once retained long enough.
pub fn is_prunable(state: R) -> bool {
    matches!(state, R::Converged | R::Reverted | R::Failed | R::Superseded | R::Cancelled)
}

/// Retention: a finished rollout kept `retentionSecs` is `Pruned` (the executor stops
/// loading it) — unless a host is still in flight in it (a straggler): it is pruned once that
/// host lands. A channel's current rollout is pruned like any other: the channel's
/// `lastRolledRef` — not the rollout record — is what keeps its ref from opening again.
fn prune(work: &mut Work<'_>, tick: &mut Tick) {
    let retention = work.base.settings.retention_secs;
    let due: Vec<(RolloutId, R, Time)> = work
        .rollouts
        .iter()
        .filter(|(_, r)| is_prunable(r.state) && r.since.plus_secs(retention) <= tick.now && !crate::budget::has_in_flight(r))
        .map(|(id, r)| (id.clone(), r.state, r.since))
        .collect();
    for (id, state, since) in due {
        tick.rollout_to(work, &id, state, R::Pruned, format!("{state} since {since}; retained {retention}s; pruned"));
    }
}

/// The stale wait of `channel` at `now`, when its timestamp is older than its window.
pub fn stale_reason<S: Snapshot + ?Sized>(work: &S, channel: &str, now: Time) -> Option<WaitReason> {
    let c = work.channels().get(channel).filter(|c| c.is_stale(now))?;
    Some(WaitReason::Stale { signed_at: c.signed_at, window_secs: c.freshness_window_secs })
}

/// After the fixpoint: each stale channel gets one `ReleaseStale` alert per `signedAt`
/// (debounced by `PlanInput::stale_alerts`) and, every tick, a channel-wide wait.
fn record_stale_alerts(work: &mut Work<'_>, tick: &mut Tick) {
    let stale: Vec<(String, Time, WaitReason)> = work
        .base
        .channels
        .iter()
        .filter_map(|(name, c)| stale_reason(work, name, tick.now).map(|r| (name.clone(), c.signed_at, r)))
        .collect();
    for (channel, signed_at, reason) in stale {
        tick.waits.push(Wait::new(&channel, None, None, reason.clone()));
        if work.stale_alerts.get(&channel) != Some(&signed_at) {
            tick.emit(work, Action::ReleaseStale { channel, signed_at, reason: reason.to_string() });
        }
    }
}

/// The required static controls of the channel's release that failed, when `id` is the
/// channel's current rollout (the release's compliance results are about its manifest).
fn failed_static_controls(work: &Work<'_>, id: &RolloutId) -> Vec<String> {
    let Some(c) = work.base.channels.get(id.channel()).filter(|c| c.manifest.rollout_id == *id) else { return Vec::new() };
    c.compliance.static_results.iter().filter(|r| r.required && !r.passed).map(|r| r.control.clone()).collect()
}

/// "required control X failed" / "required controls X, Y failed".
fn describe_failed_controls(failed: &[String]) -> String {
    let s = if failed.len() == 1 { "" } else { "s" };
    format!("required control{s} {} failed", failed.join(", "))
}

/// The channels in an order where every channel-edge predecessor comes before its successors
/// (Kahn's algorithm, ties by name; channels on a cycle, which validation refuses, last by
/// name), so a cascade from one push opens the predecessor before deciding its successors.
fn channel_order(work: &Work<'_>) -> Vec<String> {
    use std::collections::{BTreeMap, BTreeSet};
    let names: BTreeSet<&str> = work.base.channels.keys().map(String::as_str).collect();
    let mut preds: BTreeMap<&str, BTreeSet<&str>> = names.iter().map(|n| (*n, BTreeSet::new())).collect();
    for e in &work.base.channel_edges {
        if names.contains(e.before.as_str()) && e.before != e.after {
            if let Some(p) = preds.get_mut(e.after.as_str()) {
                p.insert(e.before.as_str());
            }
        }
    }
    let mut out: Vec<String> = Vec::new();
    let mut done: BTreeSet<&str> = BTreeSet::new();
    while let Some(next) = preds.iter().find(|(n, p)| !done.contains(*n) && p.iter().all(|b| done.contains(b))).map(|(n, _)| *n) {
        done.insert(next);
        out.push(next.to_owned());
    }
    out.extend(names.iter().filter(|n| !done.contains(*n)).map(|n| (*n).to_owned()));
    out
}

/// What holds the opening of `channel`'s pending ref, if anything: `(blocked_by, reason)`.
/// First the channel's own live rollout (one active rollout per channel; the ref queues), then
/// each channel edge into it (RFC-0002 §4.3): a predecessor with a live rollout (Halted
/// included) or a ref not yet rolled holds it; one with no rollout history is open.
pub fn opening_blocker<S: Snapshot + ?Sized>(work: &S, channel: &str, target_ref: &str) -> Option<(String, WaitReason)> {
    if let Some((busy, r)) = work.rollouts().iter().find(|(rid, r)| rid.channel() == channel && blocks_next_ref(r.state)) {
        return Some((channel.to_owned(), WaitReason::Queued { target_ref: target_ref.to_owned(), behind: busy.clone(), state: r.state }));
    }
    let mut edges: Vec<&drover_proto::spec::Edge> =
        work.channel_edges().iter().filter(|e| e.after == channel && e.before != channel).collect();
    edges.sort_by(|a, b| a.before.cmp(&b.before));
    for e in edges {
        let b = e.before.as_str();
        let held = if let Some((rid, r)) = work.rollouts().iter().find(|(rid, r)| rid.channel() == b && crate::budget::is_live(r.state)) {
            format!("rollout {rid} {}", r.state)
        } else if let Some(pending) = pending_ref(work, b) {
            format!("ref {pending} not yet rolled")
        } else {
            continue;
        };
        return Some((b.to_owned(), WaitReason::ChannelEdge { channel: b.to_owned(), held, because: e.reason.clone() }));
    }
    None
}

/// The channel's current ref when no rollout has been opened for it yet.
pub fn pending_ref<S: Snapshot + ?Sized>(work: &S, channel: &str) -> Option<String> {
    let id = &work.channels().get(channel)?.manifest.rollout_id;
    let rolled = work.last_rolled_ref().get(channel).map(String::as_str) == Some(id.channel_ref()) || work.rollouts().contains_key(id);
    (!rolled).then(|| id.channel_ref().to_owned())
}

/// Step 2a: a channel whose current rollout id is not its last rolled ref opens a rollout —
/// unless its own rollout is still active (the ref queues, depth one: a newer ref supersedes
/// the queued one) or a channel edge holds it. A hold is reported every tick and emitted as
/// `RolloutDeferred` once per change of ref or blocker.
fn open_rollouts(work: &mut Work<'_>, tick: &mut Tick) {
    for channel in channel_order(work) {
        let Some((id, sha)) = work.base.channels.get(&channel).map(|c| (c.manifest.rollout_id.clone(), c.manifest_sha256.clone())) else {
            continue;
        };
        if let Some(d) = work.last_deferrals.get(&channel).filter(|d| d.target_ref != id.channel_ref()).cloned() {
            let reason = format!("queued ref {} superseded by ref {} (queue depth one, latest ref wins)", d.target_ref, id.channel_ref());
            let by_ref = id.channel_ref().to_owned();
            tick.emit(work, Action::RefSuperseded { channel: channel.clone(), superseded_ref: d.target_ref, by_ref, reason });
        }
        if pending_ref(work, &channel).is_none() {
            continue;
        }
        let last = work.last_rolled_ref.get(&channel).cloned();
        if let Some(reason) = stale_reason(work, &channel, tick.now) {
            tick.wait(&id, None, reason);
            continue;
        }
        if let Some((_, reason)) = opening_blocker(work, &channel, id.channel_ref()) {
            tick.wait(&id, None, reason);
            continue;
        }
        let halted: Vec<(RolloutId, R)> = work
            .rollouts
            .iter()
            .filter(|(rid, r)| rid.channel() == channel && r.state == R::Halted)
            .map(|(rid, r)| (rid.clone(), r.state))
            .collect();
        for (old, state) in &halted {
            tick.rollout_to(work, old, *state, R::Superseded, format!("superseded by {id}"));
        }
        let reason = match last {
            Some(l) => format!("channel {channel} ref {} differs from last rolled ref {l}", id.channel_ref()),
            None => format!("channel {channel} ref {} has never been rolled", id.channel_ref()),
        };
        tick.emit(work, Action::OpenRollout { rollout_id: id, channel, manifest_sha256: sha, reason });
    }
}

/// After the fixpoint: every channel whose pending ref is still held gets a `RolloutDeferred`
/// unless the same ref was already recorded deferred by the same blocker (debounce: once per
/// change of ref or blocker). Done last so a hold that clears within the tick is not journaled.
fn record_deferrals(work: &mut Work<'_>, tick: &mut Tick) {
    for channel in channel_order(work) {
        let Some(target_ref) = pending_ref(work, &channel) else { continue };
        let Some((blocked_by, reason)) = opening_blocker(work, &channel, &target_ref) else { continue };
        let recorded = work.last_deferrals.get(&channel).is_some_and(|d| d.target_ref == target_ref && d.blocked_by == blocked_by);
        if !recorded {
            tick.emit(work, Action::RolloutDeferred { channel, target_ref, blocked_by, reason: reason.to_string() });
        }
    }
}

/// Why a manifest cannot be acted on, if it cannot.
fn manifest_problem(work: &Work<'_>, id: &RolloutId) -> Option<String> {
    let Some(m) = work.manifest(id) else {
        return Some(format!("manifest of {id} missing"));
    };
    match RolloutId::new(&m.channel, &m.channel_ref) {
        Ok(own) if own == *id && m.rollout_id == *id => {}
        _ => return Some(format!("manifest rolloutId {} does not match its channel and ref", m.rollout_id)),
    }
    if !m.check_sorted() {
        return Some("manifest arrays out of canonical order".to_owned());
    }
    let recorded = work.rollouts.get(id).map(|r| r.manifest_sha256.as_str());
    if let Some(c) = work.base.channels.get(id.channel()).filter(|c| c.manifest.rollout_id == *id) {
        if recorded != Some(c.manifest_sha256.as_str()) {
            return Some("manifest sha256 differs from the one the rollout was opened with".to_owned());
        }
    }
    None
}

fn step_rollout(work: &mut Work<'_>, tick: &mut Tick, id: &RolloutId) {
    let Some(state) = work.rollouts.get(id).map(|r| r.state) else { return };
    if state == R::Opening {
        // Static compliance gate (RFC-0002 §4 step 2a): CI evaluated the static controls and
        // signed the results into fleet.resolved; a failed required one blocks the rollout
        // when the channel enforces (observe mode only reports it, see below).
        let failed = failed_static_controls(work, id);
        let enforce = work.base.channels.get(id.channel()).is_some_and(|c| c.compliance.mode == Mode::Enforce);
        match manifest_problem(work, id) {
            Some(p) => tick.rollout_to(work, id, state, R::Failed, p),
            None if enforce && !failed.is_empty() => {
                let why = format!("static compliance gate: {}", describe_failed_controls(&failed));
                tick.rollout_to(work, id, state, R::Failed, why)
            }
            None => tick.rollout_to(work, id, state, R::Active, "manifest verified; wave 0 starts".to_owned()),
        }
        return;
    }
    let Some(manifest) = work.manifest(id) else {
        tick.wait(id, None, WaitReason::ManifestMissing { rollout: id.clone(), stragglers: false });
        return;
    };
    // While reverting, the touched hosts' states are `revert`'s business (no soak or gate).
    if state != R::Reverting {
        for entry in &manifest.host_set {
            progress_host(work, tick, id, manifest, entry);
        }
    }
    match state {
        R::Active | R::Converging => {
            if health_failure(work, tick, id, manifest) {
                return;
            }
            let failed = failed_static_controls(work, id);
            if !failed.is_empty() {
                // Observe mode (enforce failed it at Opening): a notice for the channel, every
                // tick, that does not stand in for any host's own wait.
                tick.waits.push(Wait::new(id.channel(), None, None, WaitReason::Compliance { rollout: id.clone(), controls: failed }));
            }
            let mut current = current_wave(work, id, manifest);
            // In wave order (hostname within a wave): a returning Skipped host of an earlier
            // wave re-opens that wave, and later waves' hosts must then wait for it.
            let mut order: Vec<&HostSetEntry> = manifest.host_set.iter().collect();
            order.sort_by_key(|e| e.wave_index);
            for entry in order {
                let before = work.host_state(id, &entry.hostname);
                consider_dispatch(work, tick, id, manifest, entry, current);
                if before == H::Skipped && work.host_state(id, &entry.hostname) != H::Skipped {
                    current = current_wave(work, id, manifest);
                }
            }
            let state = work.rollouts.get(id).map_or(state, |r| r.state);
            if state == R::Active && current.is_none() {
                tick.rollout_to(work, id, state, R::Converging, "every wave promoted".to_owned());
            } else if state == R::Converging && current.is_none() && !any_in_flight(work, id, manifest) {
                tick.rollout_to(work, id, state, R::Converged, "every host done; none in flight".to_owned());
            }
        }
        R::Halted => {
            let since = work.rollouts.get(id).map_or(tick.now, |r| r.since);
            tick.wait(id, None, WaitReason::Halted { since });
        }
        R::Reverting => revert(work, tick, id, manifest),
        _ => {}
    }
}

/// The first wave with a host not yet done, or `None` when every wave is promoted.
fn current_wave(work: &Work<'_>, id: &RolloutId, m: &RolloutManifest) -> Option<u32> {
    m.waves
        .iter()
        .map(|w| w.index)
        .find(|&w| m.host_set.iter().any(|e| e.wave_index == w && !is_done_for_promotion(work.host_state(id, &e.hostname))))
}

fn any_in_flight(work: &Work<'_>, id: &RolloutId, m: &RolloutManifest) -> bool {
    m.host_set.iter().any(|e| crate::budget::is_in_flight_state(work.host_state(id, &e.hostname)))
}

/// A host's state in a rollout and since when.
struct Since {
    state: H,
    since: Time,
}

/// Moves a dispatched host along from what it reported: Activating → Soaking / Deferred /
/// Failed; Soaking → Converged / Failed under the health gate; Deferred → Converged.
fn progress_host(work: &mut Work<'_>, tick: &mut Tick, id: &RolloutId, m: &RolloutManifest, e: &HostSetEntry) {
    let h = e.hostname.as_str();
    // Only the state and its time are needed: copied, not the whole progress record.
    let Some(progress) = work.rollouts.get(id).and_then(|r| r.hosts.get(h)).map(|p| Since { state: p.state, since: p.since }) else {
        return;
    };
    // Borrowed from the caller's input (no action changes hosts), so never cloned.
    let missing;
    let obs = match work.base.hosts.get(h) {
        Some(o) => o,
        None => {
            missing = crate::input::HostObserved {
                last_checkin: None,
                connectivity: crate::input::Connectivity::Offline,
                failed_units: 0,
                probes: Default::default(),
                activation: None,
            };
            &missing
        }
    };
    let act = obs.activation.as_ref().filter(|a| a.rollout_id == *id && a.target_closure == e.target_closure);
    match progress.state {
        H::Activating => match act.map(|a| (a.phase, a.message.as_str())) {
            Some((ActivationPhase::Confirmed, _)) => {
                tick.host_to(work, id, h, H::Activating, H::Soaking, format!("host confirmed target {}", e.target_closure))
            }
            Some((ActivationPhase::Deferred, _)) => {
                tick.host_to(work, id, h, H::Activating, H::Deferred, "activation staged for next boot".to_owned())
            }
            Some((phase @ (ActivationPhase::Failed | ActivationPhase::RolledBack | ActivationPhase::NoBackend), msg)) => {
                let phase = serde_json::to_value(phase).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
                let msg = if msg.is_empty() { String::new() } else { format!(": {msg}") };
                tick.host_to(work, id, h, H::Activating, H::Failed, format!("activation {phase}{msg}"))
            }
            _ => {
                // Step 4's ConfirmWindow: the intent carries the same deadline, the agent rolls
                // back on its own once it passes and the coordinator answers 410 to a late
                // confirmation, so the host is recorded as reverted.
                let deadline = progress.since.plus_secs(work.base.settings.confirm_deadline_secs);
                if deadline < tick.now {
                    let r = format!("confirm deadline {deadline} passed without confirmation; the agent rolls back on its own");
                    tick.host_to(work, id, h, H::Activating, H::Reverted, r)
                } else {
                    tick.wait(id, Some(h), WaitReason::Confirm { since: progress.since, deadline })
                }
            }
        },
        H::Soaking => {
            let gate = &m.health_gate;
            if obs.failed_units > gate.max_failed_units {
                let r = format!("health gate: {} failed units > maxFailedUnits {}", obs.failed_units, gate.max_failed_units);
                return tick.host_to(work, id, h, H::Soaking, H::Failed, r);
            }
            for p in &gate.required_probes {
                if let Some(o @ (ProbeOutcome::Failed | ProbeOutcome::ProbeError)) = obs.probes.get(p) {
                    let o = if *o == ProbeOutcome::Failed { "failed" } else { "probe-error" };
                    return tick.host_to(work, id, h, H::Soaking, H::Failed, format!("health gate: required probe {p} {o}"));
                }
            }
            let soak = m.waves.get(e.wave_index as usize).map_or(0, |w| w.soak_secs);
            let until = progress.since.plus_secs(soak);
            if tick.now < until {
                return tick.wait(id, Some(h), WaitReason::Soak { wave: e.wave_index, until });
            }
            if !obs.is_online() {
                return tick.wait(id, Some(h), WaitReason::OfflineWhileSoaking);
            }
            if let Some(p) = gate.required_probes.iter().find(|p| obs.probes.get(*p) != Some(&ProbeOutcome::Passed)) {
                return tick.wait(id, Some(h), WaitReason::Gate { probe: p.clone() });
            }
            tick.host_to(work, id, h, H::Soaking, H::Converged, format!("soaked {soak}s; health gate passed"))
        }
        H::Deferred if act.is_some_and(|a| a.phase == ActivationPhase::Confirmed) => {
            tick.host_to(work, id, h, H::Deferred, H::Converged, format!("host booted into target {}", e.target_closure))
        }
        _ => {}
    }
}

/// `onHealthFailure` (RFC-0002 §5.1) when a wave has more failed hosts than tolerated.
/// Returns true when it fired.
fn health_failure(work: &mut Work<'_>, tick: &mut Tick, id: &RolloutId, m: &RolloutManifest) -> bool {
    let Some(state) = work.rollouts.get(id).map(|r| r.state) else { return false };
    let max = m.health_gate.max_failures as usize;
    // A host that missed its confirm deadline (Reverted while the rollout runs) failed too.
    let over = m.waves.iter().find_map(|w| {
        let failed = m
            .host_set
            .iter()
            .filter(|e| e.wave_index == w.index && matches!(work.host_state(id, &e.hostname), H::Failed | H::Reverted))
            .count();
        (failed > max).then_some((w.index, failed))
    });
    let Some((wave, failed)) = over else { return false };
    let why = format!("health gate: wave {wave} has {failed} failed hosts > maxFailures {max}");
    match m.on_health_failure {
        OnHealthFailure::Halt => tick.rollout_to(work, id, state, R::Halted, format!("{why}; onHealthFailure halt")),
        OnHealthFailure::RollbackAndHalt if revert_target(work, id).is_some() => {
            tick.rollout_to(work, id, state, R::Reverting, format!("{why}; onHealthFailure rollback-and-halt"))
        }
        OnHealthFailure::RollbackAndHalt => {
            tick.rollout_to(work, id, state, R::Halted, format!("{why}; rollback-and-halt but no revertable rollout, halting"))
        }
    }
    true
}

/// The rollout to revert to: the newest revertable rollout of the channel whose manifest
/// the input carries.
pub(crate) fn revert_target<'a>(work: &Work<'a>, id: &RolloutId) -> Option<&'a RolloutManifest> {
    let c = work.base.channels.get(id.channel())?;
    c.revertable.iter().filter(|r| r.rollout_id != *id).find_map(|r| work.manifest(&r.rollout_id))
}

/// Pending (or returning Skipped) hosts of the current wave: offline → Skipped, held, edge
/// or budget → wait, else dispatch.
fn consider_dispatch(work: &mut Work<'_>, tick: &mut Tick, id: &RolloutId, m: &RolloutManifest, e: &HostSetEntry, current: Option<u32>) {
    let h = e.hostname.as_str();
    let state = work.host_state(id, h);
    if !matches!(state, H::Pending | H::Skipped) {
        return;
    }
    let online = work.base.hosts.get(h).is_some_and(|o| o.is_online());
    if state == H::Skipped {
        let is_current = work.base.channels.get(id.channel()).is_some_and(|c| c.manifest.rollout_id == *id);
        if !online {
            return tick.wait(id, Some(h), WaitReason::Offline);
        }
        if !is_current {
            return tick.wait(id, Some(h), WaitReason::Skipped);
        }
    }
    // A returning Skipped host too: an earlier wave may be in progress again (one of its own
    // Skipped hosts came back), and waves never overlap.
    if current.is_some_and(|c| e.wave_index > c) {
        let why = WaitReason::Wave { wave: e.wave_index, current: current.unwrap_or(0), skipped: state == H::Skipped };
        return tick.wait(id, Some(h), why);
    }
    if let Some(reason) = work.base.held.get(h) {
        return tick.wait(id, Some(h), WaitReason::Hold { by: reason.clone() });
    }
    if let Some(other) = crate::budget::in_flight_elsewhere(work, id, h) {
        return tick.wait(id, Some(h), WaitReason::InFlightElsewhere { rollout: other.clone() });
    }
    if !online {
        return tick.host_to(work, id, h, H::Pending, H::Skipped, format!("offline when wave {} ran", e.wave_index));
    }
    if let Some(reason) = stale_reason(work, id.channel(), tick.now) {
        return tick.wait(id, Some(h), reason);
    }
    if let Some(edge) =
        m.edges.iter().find(|ed| ed.after == h && m.host(&ed.before).is_some() && work.host_state(id, &ed.before) != H::Converged)
    {
        // A predecessor skipped in a rollout that is no longer its channel's current one never
        // converges here (it takes the current rollout when it returns, and that rollout
        // cannot open before this one ends): waiting for it would hold this rollout — and the
        // channel — forever. The successor follows it into the current rollout instead, where
        // the edge holds again; it is never dispatched ahead of its predecessor.
        let is_current = work.base.channels.get(id.channel()).is_some_and(|c| c.manifest.rollout_id == *id);
        if state == H::Pending && !is_current && work.host_state(id, &edge.before) == H::Skipped {
            let r = format!("edge predecessor {} skipped in a superseded ref; follows it to the channel's current rollout", edge.before);
            return tick.host_to(work, id, h, H::Pending, H::Skipped, r);
        }
        return tick.wait(id, Some(h), WaitReason::Edge { before: edge.before.clone() });
    }
    if let Some(full) = tick.first_full_budget(work, id, h) {
        return tick.wait(id, Some(h), full.reason());
    }
    let converged = work.rollouts.get(id).is_some_and(|r| r.state == R::Converged);
    let reason = if state == H::Skipped && converged {
        format!("back online after rollout converged; dispatching the channel's current target (wave {}, budgets permit)", e.wave_index)
    } else if state == H::Skipped {
        format!("back online; wave {} dispatch, budgets permit", e.wave_index)
    } else {
        format!("wave {} active; budgets permit", e.wave_index)
    };
    tick.emit(
        work,
        Action::Dispatch {
            host: h.to_owned(),
            rollout_id: id.clone(),
            wave_index: e.wave_index,
            target: e.target_closure.clone(),
            from: state,
            reason,
        },
    );
}

/// rollback-and-halt: every touched host gets a rollback intent to its closure in the
/// revertable rollout; a host is Reverted once it confirms that closure; the rollout is
/// Reverted once every touched host is.
fn revert(work: &mut Work<'_>, tick: &mut Tick, id: &RolloutId, m: &RolloutManifest) {
    let Some(prev) = revert_target(work, id) else {
        return tick.rollout_to(work, id, R::Reverting, R::Halted, "no revertable rollout left; halting".to_owned());
    };
    let mut all_reverted = true;
    for e in &m.host_set {
        let h = e.hostname.as_str();
        let state = work.host_state(id, h);
        if !matches!(state, H::Activating | H::Soaking | H::Converged | H::Failed | H::Deferred) {
            continue;
        }
        all_reverted = false;
        let Some(target) = prev.host(h).map(|p| p.target_closure.clone()) else {
            tick.wait(id, Some(h), WaitReason::NotRevertable { rollout: prev.rollout_id.clone() });
            continue;
        };
        let confirmed = work
            .base
            .hosts
            .get(h)
            .and_then(|o| o.activation.as_ref())
            .is_some_and(|a| a.rollout_id == prev.rollout_id && a.target_closure == target && a.phase == ActivationPhase::Confirmed);
        let intent = work.rollouts.get(id).and_then(|r| r.hosts.get(h)).and_then(|p| p.intent.clone());
        if confirmed {
            tick.host_to(work, id, h, state, H::Reverted, format!("host confirmed revert target {target}"));
        } else if let Some(reason) = stale_reason(work, id.channel(), tick.now).filter(|_| intent.as_deref() != Some(target.as_str())) {
            tick.wait(id, Some(h), reason);
        } else if intent.as_deref() != Some(target.as_str()) {
            let reason = format!("rollback-and-halt: revert to {}", prev.rollout_id);
            tick.emit(
                work,
                Action::Rollback { host: h.to_owned(), rollout_id: id.clone(), revert_to: prev.rollout_id.clone(), target, reason },
            );
        } else {
            tick.wait(id, Some(h), WaitReason::Reverting { to: prev.rollout_id.clone() });
        }
    }
    if all_reverted {
        tick.rollout_to(work, id, R::Reverting, R::Reverted, "every touched host reverted".to_owned());
    } else {
        tick.wait(id, None, WaitReason::RollingBack { to: prev.rollout_id.clone() });
    }
}
