//! Stragglers (RFC-0002 §5.2, DESIGN "Rollout states"): a host offline when its wave ran is
//! `Skipped` and picks up the channel's current target when it returns — also once the
//! channel's current rollout has `Converged`. The rollout stays `Converged`; the straggler is
//! dispatched under every rule of a dispatch (held, in flight elsewhere, budgets, edges, stale
//! channel) and lands like any host (soak, per-host health gate, confirm deadline); a straggler
//! that fails is just `Failed` (no halt of a converged rollout). A superseded converged
//! rollout leaves its Skipped hosts to the channel's newer rollout.

use drover_proto::report::ProbeOutcome;
use drover_proto::spec::Edge;
use drover_proto::states::{HostRolloutState as H, RolloutState as R};

use super::fixture::*;
use crate::action::{Action, Plan};
use crate::check::check_plan;
use crate::input::{Connectivity, PlanInput};

/// `gpu@r1` (one wave `hosts`, soak `soak`) converged with every host in `away` Skipped:
/// the others confirmed and soaked. Returned at `t(1000)`.
fn converged_with_skipped(m: drover_proto::artifacts::RolloutManifest, away: &[&str]) -> PlanInput {
    let id = m.rollout_id.clone();
    let mut input = snapshot(m);
    for h in away {
        offline(&mut input, h);
    }
    let (mut input, _) = advance(&input, t(0));
    let hosts: Vec<String> = input.manifest(&id).expect("manifest").host_set.iter().map(|e| e.hostname.clone()).collect();
    for h in hosts.iter().filter(|h| !away.contains(&h.as_str())) {
        confirm(&mut input, h, &id);
    }
    let (input, _) = advance(&input, t(10));
    let (input, _) = advance(&input, t(1000));
    assert_eq!(rollout_state(&input, &id), Some(R::Converged), "{:#?}", input.rollouts);
    for h in away {
        assert_eq!(host_state(&input, &id, h), H::Skipped);
    }
    input
}

fn back_online(input: &mut PlanInput, host: &str) {
    input.hosts.get_mut(host).expect("host").connectivity = Connectivity::Online;
}

fn dispatch_of<'a>(p: &'a Plan, host: &str) -> Option<&'a Action> {
    p.actions.iter().find(|a| matches!(a, Action::Dispatch { host: h, .. } if h == host))
}

fn wait_of(p: &Plan, id: &drover_proto::names::RolloutId, host: &str) -> Option<String> {
    p.report.iter().find(|w| w.rollout_id.as_ref() == Some(id) && w.host.as_deref() == Some(host)).map(|w| w.reason.clone())
}

#[test]
fn skipped_host_returning_after_convergence_gets_the_current_target() {
    let id = rid("gpu", "r1");
    let mut input = converged_with_skipped(manifest("gpu", "r1", &[(60, &["a", "b"])]), &["b"]);
    // Still offline: nothing to do, and nothing reported for a converged rollout.
    let p = run(&input, t(1100));
    assert!(p.actions.is_empty() && p.report.is_empty(), "{p:#?}");
    back_online(&mut input, "b");
    let (mut input, p) = advance(&input, t(1200));
    match dispatch_of(&p, "b") {
        Some(Action::Dispatch { rollout_id, target, from, reason, wave_index, .. }) => {
            assert_eq!((rollout_id, target.as_str(), *from, *wave_index), (&id, closure("r1", "b").as_str(), H::Skipped, 0));
            assert!(reason.contains("back online after rollout converged; dispatching the channel's current target"), "{reason}");
        }
        other => panic!("b not dispatched: {other:?} in {:#?}", p.actions),
    }
    assert_eq!(p.actions.len(), 1, "the rollout itself does not move: {:#?}", p.actions);
    assert_eq!(rollout_state(&input, &id), Some(R::Converged));
    assert_eq!(host_state(&input, &id, "b"), H::Activating);
    // The engine's fixpoint: re-planning the applied output acts no more, and says why.
    let again = run(&input, t(1200));
    assert!(again.actions.is_empty(), "{:#?}", again.actions);
    assert!(wait_of(&again, &id, "b").is_some_and(|w| w.contains("awaiting confirmation")), "{again:#?}");
    // It lands like any host: confirm, the soak of its wave, converged.
    confirm(&mut input, "b", &id);
    let (input, _) = advance(&input, t(1300));
    assert_eq!(host_state(&input, &id, "b"), H::Soaking);
    let p = run(&input, t(1330));
    assert_eq!(wait_of(&p, &id, "b").as_deref(), Some(format!("wave 0 soaking until {}", t(1360)).as_str()));
    let (input, p) = advance(&input, t(1360));
    assert_eq!(host_state(&input, &id, "b"), H::Converged);
    assert!(matches!(&p.actions[..], [Action::HostTransition { from: H::Soaking, to: H::Converged, .. }]), "{:#?}", p.actions);
    assert_eq!(rollout_state(&input, &id), Some(R::Converged));
    assert!(run(&input, t(1400)).actions.is_empty());
}

#[test]
fn straggler_failing_its_health_gate_is_failed_without_halting_the_converged_rollout() {
    let id = rid("gpu", "r1");
    let mut m = manifest("gpu", "r1", &[(0, &["a", "b"])]);
    m.health_gate.required_probes = vec!["ssh".into()];
    let mut input = snapshot(m);
    probe(&mut input, "a", "ssh", ProbeOutcome::Passed);
    offline(&mut input, "b");
    let (mut input, _) = advance(&input, t(0));
    confirm(&mut input, "a", &id);
    let (input, _) = advance(&input, t(10));
    let (mut input, _) = advance(&input, t(20));
    assert_eq!(rollout_state(&input, &id), Some(R::Converged));
    back_online(&mut input, "b");
    let (mut input, _) = advance(&input, t(30));
    confirm(&mut input, "b", &id);
    probe(&mut input, "b", "ssh", ProbeOutcome::Failed);
    // maxFailures is 0 and onHealthFailure halt: a live rollout would halt; this one stays.
    let (input, p) = advance(&input, t(40));
    assert_eq!(host_state(&input, &id, "b"), H::Failed, "{:#?}", p.actions);
    assert_eq!(rollout_state(&input, &id), Some(R::Converged));
    assert!(!p.actions.iter().any(|a| matches!(a, Action::RolloutTransition { .. })), "{:#?}", p.actions);
    // Failed is final for this ref: not dispatched again.
    assert!(run(&input, t(50)).actions.is_empty());
}

#[test]
fn straggler_after_convergence_respects_budgets() {
    let x = rid("x", "r1");
    let y = rid("y", "r1");
    let rack = budget(&["rack"], &["a", "b", "c"], Some(1), None);
    let mut mx = manifest("x", "r1", &[(0, &["a", "b"])]);
    mx.disruption_budgets = vec![rack.clone()];
    let mut my = manifest("y", "r1", &[(0, &["c"])]);
    my.disruption_budgets = vec![rack];

    // The straggler takes the slot first (x@r1 is planned before y@r1): c waits for it, and
    // keeps waiting while it is in flight in its converged rollout.
    let mut input = converged_with_skipped(mx.clone(), &["b"]);
    back_online(&mut input, "b");
    add_channel(&mut input, my.clone());
    let (input, p) = advance(&input, t(1100));
    assert!(dispatch_of(&p, "b").is_some() && dispatch_of(&p, "c").is_none(), "{:#?}", p.actions);
    assert_eq!(wait_of(&p, &y, "c").as_deref(), Some("budget rack 1/1 in flight"));
    let (mut input, p) = advance(&input, t(1200));
    assert_eq!(wait_of(&p, &y, "c").as_deref(), Some("budget rack 1/1 in flight"), "the straggler still counts");
    confirm(&mut input, "b", &x);
    let (input, p) = advance(&input, t(1300));
    assert_eq!(host_state(&input, &x, "b"), H::Converged);
    assert_eq!(dispatched(&p), ["c"], "the slot freed by the straggler landing");

    // A host in flight elsewhere holds the slot: the straggler waits for it.
    let mut input = converged_with_skipped(mx, &["b"]);
    add_channel(&mut input, my);
    let (mut input, p) = advance(&input, t(1100));
    assert_eq!(dispatched(&p), ["c"]);
    back_online(&mut input, "b");
    let (mut input, p) = advance(&input, t(1200));
    assert!(dispatched(&p).is_empty());
    assert_eq!(wait_of(&p, &x, "b").as_deref(), Some("budget rack 1/1 in flight"));
    // A held host counts too.
    confirm(&mut input, "c", &y);
    input.held.insert("a".into(), "job-1".into());
    let (_, p) = advance(&input, t(1300));
    assert!(dispatched(&p).is_empty(), "{:#?}", p.actions);
    assert_eq!(wait_of(&p, &x, "b").as_deref(), Some("budget rack 1/1 in flight"));
}

#[test]
fn straggler_after_convergence_waits_for_its_edge_predecessor() {
    let id = rid("gpu", "r1");
    let mut m = manifest("gpu", "r1", &[(0, &["db", "other", "web"])]);
    m.edges.push(Edge { before: "db".into(), after: "web".into(), reason: "schema first".into() });
    let mut input = converged_with_skipped(m, &["db", "web"]);
    // The successor back alone: it waits for its predecessor, which is still away.
    back_online(&mut input, "web");
    let p = run(&input, t(1100));
    assert!(p.actions.is_empty(), "{:#?}", p.actions);
    assert_eq!(wait_of(&p, &id, "web").as_deref(), Some("edge predecessor db not converged"));
    // The predecessor back: it goes first, the successor still waits.
    back_online(&mut input, "db");
    let (mut input, p) = advance(&input, t(1200));
    assert_eq!(dispatched(&p), ["db"]);
    assert_eq!(wait_of(&p, &id, "web").as_deref(), Some("edge predecessor db not converged"));
    confirm(&mut input, "db", &id);
    let (input, p) = advance(&input, t(1300));
    assert_eq!(host_state(&input, &id, "db"), H::Converged);
    assert_eq!(dispatched(&p), ["web"]);
    assert_eq!(rollout_state(&input, &id), Some(R::Converged));
}

#[test]
fn straggler_after_convergence_waits_while_held_or_stale() {
    let id = rid("gpu", "r1");
    let mut input = converged_with_skipped(manifest("gpu", "r1", &[(0, &["a", "b"])]), &["b"]);
    back_online(&mut input, "b");
    input.held.insert("b".into(), "maintenance m-1".into());
    let p = run(&input, t(1100));
    assert!(p.actions.is_empty());
    assert_eq!(wait_of(&p, &id, "b").as_deref(), Some("held by maintenance m-1"));
    input.held.clear();
    input.channels.get_mut("gpu").expect("gpu").freshness_window_secs = 60;
    let p = run(&input, t(1100));
    assert!(dispatched(&p).is_empty(), "{:#?}", p.actions);
    assert!(wait_of(&p, &id, "b").is_some_and(|w| w.contains("stale")), "{p:#?}");
}

#[test]
fn converged_rollout_with_a_straggler_in_flight_is_not_pruned() {
    let id = rid("gpu", "r1");
    let mut input = converged_with_skipped(manifest("gpu", "r1", &[(0, &["a", "b"])]), &["b"]);
    input.settings.retention_secs = 100;
    input.rollouts.get_mut(&id).expect("r1").since = t(1000);
    back_online(&mut input, "b");
    let (input, _) = advance(&input, t(1050));
    assert_eq!(host_state(&input, &id, "b"), H::Activating);
    // Retention ran out while the straggler is in flight: kept.
    let (mut input, p) = advance(&input, t(1200));
    assert!(p.actions.is_empty(), "{:#?}", p.actions);
    assert_eq!(rollout_state(&input, &id), Some(R::Converged));
    // The checker refuses pruning it.
    let prune = Plan {
        actions: vec![Action::RolloutTransition { rollout_id: id.clone(), from: R::Converged, to: R::Pruned, reason: "test".into() }],
        report: vec![],
    };
    let err = check_plan(&input, &prune, t(1200)).expect_err("pruned with a host in flight");
    assert!(err[0].message.contains("still Activating"), "{err:?}");
    // Once it lands, the rollout is pruned in the same tick.
    confirm(&mut input, "b", &id);
    let (input, p) = advance(&input, t(1300));
    assert_eq!(host_state(&input, &id, "b"), H::Converged);
    assert_eq!(rollout_state(&input, &id), Some(R::Pruned), "{:#?}", p.actions);
}

#[test]
fn superseded_converged_rollout_leaves_its_skipped_host_to_the_newer_rollout() {
    let r1 = rid("gpu", "r1");
    let r2 = rid("gpu", "r2");
    let mut input = converged_with_skipped(manifest("gpu", "r1", &[(0, &["a", "b"])]), &["b"]);
    back_online(&mut input, "b");
    let old = input.channels["gpu"].manifest.clone();
    add_channel(&mut input, manifest("gpu", "r2", &[(0, &["a", "b"])]));
    input.manifests.insert(r1.clone(), old);
    let (input, p) = advance(&input, t(1100));
    assert_eq!(host_state(&input, &r1, "b"), H::Skipped, "r1 dispatches nothing: {:#?}", p.actions);
    assert!(
        p.actions.iter().any(|a| matches!(a, Action::Dispatch { host, rollout_id, .. } if host == "b" && *rollout_id == r2)),
        "{:#?}",
        p.actions
    );
    // The checker refuses a straggler dispatch by a converged rollout no longer current.
    let mut before = input.clone();
    before.rollouts.get_mut(&r2).expect("r2").hosts.remove("b");
    let bad = Plan {
        actions: vec![Action::Dispatch {
            host: "b".into(),
            rollout_id: r1.clone(),
            wave_index: 0,
            target: closure("r1", "b"),
            from: H::Skipped,
            reason: "test".into(),
        }],
        report: vec![],
    };
    let err = check_plan(&before, &bad, t(1100)).expect_err("superseded rollout dispatching");
    assert!(err[0].message.contains("not its channel's current rollout"), "{err:?}");
}

#[test]
fn straggler_in_flight_when_a_newer_ref_lands_is_landed_before_the_newer_rollout_takes_it() {
    let r1 = rid("gpu", "r1");
    let r2 = rid("gpu", "r2");
    let mut input = converged_with_skipped(manifest("gpu", "r1", &[(0, &["a", "b"])]), &["b"]);
    back_online(&mut input, "b");
    let (mut input, _) = advance(&input, t(1100));
    assert_eq!(host_state(&input, &r1, "b"), H::Activating);
    let old = input.channels["gpu"].manifest.clone();
    add_channel(&mut input, manifest("gpu", "r2", &[(0, &["a", "b"])]));
    input.manifests.insert(r1.clone(), old);
    let (mut input, p) = advance(&input, t(1200));
    assert_eq!(dispatched(&p), ["a"]);
    assert_eq!(wait_of(&p, &r2, "b").as_deref(), Some("in flight in rollout gpu@r1"));
    confirm(&mut input, "b", &r1);
    let (input, p) = advance(&input, t(1300));
    assert_eq!(host_state(&input, &r1, "b"), H::Converged, "landed in its (superseded) rollout");
    assert!(
        p.actions.iter().any(|a| matches!(a, Action::Dispatch { host, rollout_id, .. } if host == "b" && *rollout_id == r2)),
        "{:#?}",
        p.actions
    );
}

#[test]
fn straggler_in_flight_counts_in_budgets_shared_by_canonical_selector() {
    let y = rid("y", "r1");
    // x@r1 froze `rack` over a, b; y@r1 froze the same selector over c, d only (the tag moved
    // between the two snapshots): they share it, so the straggler b counts against y's cap.
    let mut mx = manifest("x", "r1", &[(0, &["a", "b"])]);
    mx.disruption_budgets = vec![budget(&["rack"], &["a", "b"], Some(1), None)];
    let mut my = manifest("y", "r1", &[(0, &["c", "d"])]);
    my.disruption_budgets = vec![budget(&["rack"], &["c", "d"], Some(1), None)];
    let mut input = converged_with_skipped(mx, &["b"]);
    back_online(&mut input, "b");
    let (mut input, p) = advance(&input, t(1100));
    assert_eq!(dispatched(&p), ["b"]);
    add_channel(&mut input, my);
    let (_, p) = advance(&input, t(1200));
    assert!(dispatched(&p).is_empty(), "{:#?}", p.actions);
    assert_eq!(wait_of(&p, &y, "c").as_deref(), Some("budget rack 1/1 in flight"));
    assert_eq!(wait_of(&p, &y, "d").as_deref(), Some("budget rack 1/1 in flight"));
}

#[test]
fn deferred_straggler_converges_when_it_boots_into_its_target() {
    let id = rid("gpu", "r1");
    let mut input = converged_with_skipped(manifest("gpu", "r1", &[(0, &["a", "b"])]), &["b"]);
    back_online(&mut input, "b");
    let (mut input, _) = advance(&input, t(1100));
    report(&mut input, "b", &id, &closure("r1", "b"), drover_proto::report::ActivationPhase::Deferred);
    let (mut input, _) = advance(&input, t(1200));
    assert_eq!(host_state(&input, &id, "b"), H::Deferred);
    // Deferred is not in flight: nothing waits on it, and retention may prune the rollout.
    assert!(run(&input, t(1300)).report.is_empty());
    confirm(&mut input, "b", &id);
    let (input, _) = advance(&input, t(1400));
    assert_eq!(host_state(&input, &id, "b"), H::Converged);
    assert_eq!(rollout_state(&input, &id), Some(R::Converged));
}
