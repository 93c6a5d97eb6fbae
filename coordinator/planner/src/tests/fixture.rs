//! Test fixture: builds manifests and snapshots, plans with the invariant checker on, and
//! plays the executor (`apply`) and the agents (activation reports, health, probes).

use drover_proto::artifacts::{FrozenBudget, HostSetEntry, ManifestWave, RevertableRollout, RolloutManifest};
use drover_proto::names::RolloutId;
use drover_proto::report::{ActivationPhase, ActivationStatus, ProbeOutcome};
use drover_proto::selector::Selector;
use drover_proto::spec::{HealthGate, OnHealthFailure};
use drover_proto::states::{HostRolloutState, RolloutState};
use drover_proto::time::Time;

use crate::action::{Action, Plan, apply};
use crate::check::check_plan;
use crate::engine::plan;
use crate::input::{ChannelInput, Connectivity, HostObserved, PlanInput};

/// The fixture channels' freshness window (signed at `t(-60)`): a day, so only tests about
/// staleness see a stale channel.
pub const FRESHNESS_WINDOW_SECS: u64 = 86_400;

/// A fixed origin for test times.
pub fn t(secs: i64) -> Time {
    Time::from_unix(1_800_000_000 + secs).expect("time")
}

/// The rollout id `channel@ref`.
pub fn rid(channel: &str, r: &str) -> RolloutId {
    RolloutId::new(channel, r).expect("id")
}

/// A fake closure for `host` at `r`.
pub fn closure(r: &str, host: &str) -> String {
    format!("/nix/store/{r}-nixos-system-{host}")
}

/// A fake manifest sha for `id`.
pub fn sha(id: &RolloutId) -> String {
    format!("{:0>64}", id.channel_ref().len() + id.channel().len())
}

/// A budget over `hosts` selected by `tags`.
pub fn budget(tags: &[&str], hosts: &[&str], max: Option<u32>, pct: Option<u32>) -> FrozenBudget {
    let mut hosts: Vec<String> = hosts.iter().map(|h| h.to_string()).collect();
    hosts.sort();
    FrozenBudget {
        selector: Selector { tags: Some(tags.iter().map(|t| t.to_string()).collect()), ..Selector::default() },
        hosts,
        max_in_flight: max,
        max_in_flight_pct: pct,
    }
}

/// A manifest of `channel@r` with `waves` as (soakSecs, hosts).
pub fn manifest(channel: &str, r: &str, waves: &[(u64, &[&str])]) -> RolloutManifest {
    let mut host_set: Vec<HostSetEntry> = waves
        .iter()
        .enumerate()
        .flat_map(|(i, (_, hosts))| {
            hosts.iter().map(move |h| HostSetEntry { hostname: h.to_string(), wave_index: i as u32, target_closure: closure(r, h) })
        })
        .collect();
    host_set.sort_by(|a, b| a.hostname.cmp(&b.hostname));
    RolloutManifest {
        schema_version: 1,
        rollout_id: rid(channel, r),
        channel: channel.to_owned(),
        channel_ref: r.to_owned(),
        fleet_resolved_hash: "0".repeat(64),
        created_at: t(-3600),
        host_set,
        waves: waves.iter().enumerate().map(|(i, (soak, _))| ManifestWave { index: i as u32, soak_secs: *soak }).collect(),
        health_gate: HealthGate { max_failed_units: 0, required_probes: vec![], max_failures: 0 },
        on_health_failure: OnHealthFailure::Halt,
        probes: vec![],
        compliance_frameworks: vec![],
        edges: vec![],
        disruption_budgets: vec![],
    }
}

/// A healthy online host that reported nothing yet.
pub fn online() -> HostObserved {
    HostObserved {
        last_checkin: Some(t(0)),
        connectivity: Connectivity::Online,
        failed_units: 0,
        probes: Default::default(),
        activation: None,
    }
}

/// A snapshot with `m` as its channel's current manifest (never rolled) and every host of
/// it online.
pub fn snapshot(m: RolloutManifest) -> PlanInput {
    let mut input = PlanInput::empty();
    add_channel(&mut input, m);
    input
}

/// Adds `m` as its channel's current manifest, with its hosts online.
pub fn add_channel(input: &mut PlanInput, m: RolloutManifest) {
    for e in &m.host_set {
        input.hosts.entry(e.hostname.clone()).or_insert_with(online);
    }
    let sha = sha(&m.rollout_id);
    let c = ChannelInput {
        manifest: m,
        manifest_sha256: sha,
        revertable: vec![],
        signed_at: t(-60),
        freshness_window_secs: FRESHNESS_WINDOW_SECS,
        compliance: Default::default(),
    };
    input.channels.insert(c.manifest.channel.clone(), c);
}

/// Makes `prev` the channel's newest revertable rollout (its manifest kept in `manifests`).
pub fn add_revertable(input: &mut PlanInput, prev: RolloutManifest) {
    let c = input.channels.get_mut(&prev.channel).expect("channel");
    c.revertable.insert(0, RevertableRollout { rollout_id: prev.rollout_id.clone(), manifest_sha256: sha(&prev.rollout_id) });
    input.manifests.insert(prev.rollout_id.clone(), prev);
}

/// Plans, checks the invariants and that replanning the applied result adds nothing.
pub fn run(input: &PlanInput, now: Time) -> Plan {
    let p = plan(input, now);
    if let Err(v) = check_plan(input, &p, now) {
        panic!("invariants broken: {v:?}\nplan: {p:#?}");
    }
    let after = applied(input, &p, now);
    let again = plan(&after, now);
    assert!(again.actions.is_empty(), "replanning the applied plan acted again: {:#?}", again.actions);
    assert_every_stuck_host_explained(&after, &again);
    p
}

/// Every host of a live rollout that is still Pending, Activating or Soaking has a wait in
/// the report (its own, or one for its whole rollout); so does every straggler (a host in
/// flight in a finished rollout not pruned, or a Skipped host of its channel's current
/// converged rollout that is online again).
pub fn assert_every_stuck_host_explained(input: &PlanInput, p: &Plan) {
    for (id, r) in input.rollouts.iter().filter(|(_, r)| !crate::budget::is_live(r.state) && r.state != RolloutState::Pruned) {
        let current = r.state == RolloutState::Converged && crate::budget::is_current(input, id);
        for (h, progress) in &r.hosts {
            let online = input.hosts.get(h).is_some_and(|o| o.is_online());
            let stuck =
                crate::budget::is_in_flight_state(progress.state) || (current && progress.state == HostRolloutState::Skipped && online);
            let explained = p.report.iter().any(|w| w.rollout_id.as_ref() == Some(id) && w.host.as_deref().is_none_or(|x| x == h));
            assert!(!stuck || explained, "straggler {h} ({}) in {id} ({}) not explained: {:#?}", progress.state, r.state, p.report);
        }
    }
    for (id, r) in input.rollouts.iter().filter(|(_, r)| crate::budget::is_live(r.state)) {
        let Some(m) = input.manifest(id) else { continue };
        let rollout_wide = p.report.iter().any(|w| w.rollout_id.as_ref() == Some(id) && w.host.is_none());
        for e in &m.host_set {
            let state = input.host_state(id, &e.hostname);
            let stuck = matches!(state, HostRolloutState::Pending | HostRolloutState::Activating | HostRolloutState::Soaking);
            let explained =
                rollout_wide || p.report.iter().any(|w| w.rollout_id.as_ref() == Some(id) && w.host.as_deref() == Some(&e.hostname));
            assert!(!stuck || explained, "{} ({state}) in {id} ({}) not explained: {:#?}", e.hostname, r.state, p.report);
        }
    }
}

/// `input` with `p`'s actions applied at `now`.
pub fn applied(input: &PlanInput, p: &Plan, now: Time) -> PlanInput {
    let mut out = input.clone();
    for a in &p.actions {
        apply(&mut out, a, now);
    }
    out
}

/// Plans at `now`, checks, and applies: the next snapshot.
pub fn advance(input: &PlanInput, now: Time) -> (PlanInput, Plan) {
    let p = run(input, now);
    (applied(input, &p, now), p)
}

/// The host reports `phase` for its target in rollout `id`.
pub fn report(input: &mut PlanInput, host: &str, id: &RolloutId, target: &str, phase: ActivationPhase) {
    let h = input.hosts.get_mut(host).expect("host");
    h.activation = Some(ActivationStatus {
        intent_id: format!("intent-{host}"),
        rollout_id: id.clone(),
        target_closure: target.to_owned(),
        phase,
        message: String::new(),
    });
}

/// The host confirms its target in rollout `id` (as listed in that rollout's manifest).
pub fn confirm(input: &mut PlanInput, host: &str, id: &RolloutId) {
    let target = input.manifest(id).and_then(|m| m.host(host)).map(|e| e.target_closure.clone()).expect("host in manifest");
    report(input, host, id, &target, ActivationPhase::Confirmed);
}

/// Sets a probe outcome on a host.
pub fn probe(input: &mut PlanInput, host: &str, name: &str, outcome: ProbeOutcome) {
    input.hosts.get_mut(host).expect("host").probes.insert(name.to_owned(), outcome);
}

/// Marks a host offline.
pub fn offline(input: &mut PlanInput, host: &str) {
    input.hosts.get_mut(host).expect("host").connectivity = Connectivity::Offline;
}

/// Hosts dispatched by a plan, in order.
pub fn dispatched(p: &Plan) -> Vec<String> {
    p.actions.iter().filter_map(|a| if let Action::Dispatch { host, .. } = a { Some(host.clone()) } else { None }).collect()
}

/// The wait reason reported for `host`, if any.
pub fn why(p: &Plan, host: &str) -> Option<String> {
    p.report.iter().find(|w| w.host.as_deref() == Some(host)).map(|w| w.reason.clone())
}

/// A host's state in a rollout.
pub fn host_state(input: &PlanInput, id: &RolloutId, host: &str) -> HostRolloutState {
    input.host_state(id, host)
}

/// A rollout's state.
pub fn rollout_state(input: &PlanInput, id: &RolloutId) -> Option<RolloutState> {
    input.rollouts.get(id).map(|r| r.state)
}
