//! One test per rule of the decision procedure: opening, waves, per-host progress, soak and
//! health gate, offline hosts, edges, onHealthFailure.

use drover_proto::report::{ActivationPhase, ProbeOutcome};
use drover_proto::spec::{Edge, OnHealthFailure};
use drover_proto::states::{HostRolloutState as H, RolloutState as R};

use super::fixture::*;
use crate::action::Action;

/// An opened, active rollout `gpu@r1` with waves [a, b] (soak 600) and [c, d] (soak 0).
fn two_waves() -> crate::PlanInput {
    snapshot(manifest("gpu", "r1", &[(600, &["a", "b"]), (0, &["c", "d"])]))
}

#[test]
fn opens_rollout_when_manifest_ref_differs_from_last_rolled_ref() {
    let mut input = two_waves();
    input.last_rolled_ref.insert("gpu".into(), "r0".into());
    let p = run(&input, t(0));
    let id = rid("gpu", "r1");
    assert!(matches!(&p.actions[0], Action::OpenRollout { rollout_id, reason, .. } if *rollout_id == id && reason.contains("r0")));
    assert!(matches!(&p.actions[1], Action::RolloutTransition { from: R::Opening, to: R::Active, .. }));
    assert_eq!(dispatched(&p), ["a", "b"]);
}

#[test]
fn does_not_reopen_when_last_rolled_ref_matches() {
    let mut input = two_waves();
    input.last_rolled_ref.insert("gpu".into(), "r1".into());
    let p = run(&input, t(0));
    assert!(p.actions.is_empty());
}

#[test]
fn new_ref_waits_behind_the_channels_active_rollout() {
    let (mut input, _) = advance(&two_waves(), t(0));
    add_channel(&mut input, manifest("gpu", "r2", &[(0, &["a", "b", "c", "d"])]));
    let p = run(&input, t(1));
    assert!(!p.actions.iter().any(|a| matches!(a, Action::OpenRollout { .. })));
    assert!(p.report.iter().any(|w| w.reason.contains("queued behind rollout gpu@r1")), "{:?}", p.report);
}

#[test]
fn new_ref_supersedes_a_halted_rollout() {
    let (mut input, _) = advance(&two_waves(), t(0));
    input.rollouts.get_mut(&rid("gpu", "r1")).expect("r1").state = R::Halted;
    add_channel(&mut input, manifest("gpu", "r2", &[(0, &["a", "b", "c", "d"])]));
    let (after, _) = advance(&input, t(1));
    assert_eq!(rollout_state(&after, &rid("gpu", "r1")), Some(R::Superseded));
    assert_eq!(rollout_state(&after, &rid("gpu", "r2")), Some(R::Active));
}

#[test]
fn manifest_whose_id_does_not_match_its_fields_fails_the_rollout() {
    let mut m = manifest("gpu", "r1", &[(0, &["a"])]);
    m.channel_ref = "other".into();
    let (after, p) = advance(&snapshot(m), t(0));
    assert_eq!(rollout_state(&after, &rid("gpu", "r1")), Some(R::Failed));
    assert!(dispatched(&p).is_empty());
}

#[test]
fn later_waves_wait_for_earlier_waves() {
    let p = run(&two_waves(), t(0));
    assert_eq!(dispatched(&p), ["a", "b"]);
    assert_eq!(why(&p, "c").as_deref(), Some("waiting for wave 1 (wave 0 in progress)"));
}

#[test]
fn dispatch_carries_wave_target_and_reason() {
    let p = run(&two_waves(), t(0));
    let d = p.actions.iter().find(|a| matches!(a, Action::Dispatch { .. })).expect("dispatch");
    let Action::Dispatch { host, rollout_id, wave_index, target, from, reason } = d else { unreachable!() };
    assert_eq!((host.as_str(), *wave_index, *from), ("a", 0, H::Pending));
    assert_eq!(*rollout_id, rid("gpu", "r1"));
    assert_eq!(*target, closure("r1", "a"));
    assert!(reason.contains("wave 0"));
}

#[test]
fn activating_host_waits_until_it_confirms_then_soaks() {
    let id = rid("gpu", "r1");
    let (mut input, _) = advance(&two_waves(), t(0));
    let p = run(&input, t(5));
    assert!(why(&p, "a").is_some_and(|w| w.starts_with("activating since")));
    confirm(&mut input, "a", &id);
    let (after, p) = advance(&input, t(10));
    assert_eq!(host_state(&after, &id, "a"), H::Soaking);
    assert!(p.actions.iter().any(|a| a.reason().contains("confirmed target")));
}

#[test]
fn soaking_host_converges_only_after_the_waves_soak_secs() {
    let id = rid("gpu", "r1");
    let (mut input, _) = advance(&two_waves(), t(0));
    confirm(&mut input, "a", &id);
    let (input, _) = advance(&input, t(10));
    let p = run(&input, t(609));
    assert!(p.actions.is_empty());
    assert!(why(&p, "a").is_some_and(|w| w.starts_with("wave 0 soaking until")), "{:?}", why(&p, "a"));
    let (after, _) = advance(&input, t(610));
    assert_eq!(host_state(&after, &id, "a"), H::Converged);
}

#[test]
fn wave_promotes_when_every_host_is_done_and_next_wave_dispatches() {
    let id = rid("gpu", "r1");
    let (mut input, _) = advance(&two_waves(), t(0));
    confirm(&mut input, "a", &id);
    report(&mut input, "b", &id, &closure("r1", "b"), ActivationPhase::Deferred);
    let (input, _) = advance(&input, t(10));
    assert_eq!(host_state(&input, &id, "b"), H::Deferred);
    let p = run(&input, t(700));
    assert_eq!(dispatched(&p), ["c", "d"]);
}

#[test]
fn offline_host_is_skipped_without_blocking_its_wave() {
    let id = rid("gpu", "r1");
    let mut input = snapshot(manifest("gpu", "r1", &[(0, &["a", "b"]), (0, &["c"])]));
    offline(&mut input, "b");
    let (mut input, p) = advance(&input, t(0));
    assert_eq!(dispatched(&p), ["a"]);
    assert_eq!(host_state(&input, &id, "b"), H::Skipped);
    assert_eq!(why(&p, "b").as_deref(), Some("offline (skipped)"));
    confirm(&mut input, "a", &id);
    let (_, p) = advance(&input, t(1));
    assert_eq!(dispatched(&p), ["c"]);
}

#[test]
fn skipped_host_is_dispatched_when_it_returns() {
    let id = rid("gpu", "r1");
    let mut input = snapshot(manifest("gpu", "r1", &[(0, &["a", "b"])]));
    offline(&mut input, "b");
    let (mut input, _) = advance(&input, t(0));
    input.hosts.get_mut("b").expect("b").connectivity = crate::Connectivity::Online;
    let p = run(&input, t(100));
    assert!(p.actions.iter().any(|a| matches!(a, Action::Dispatch { host, from: H::Skipped, .. } if host == "b")));
    let _ = id;
}

#[test]
fn edge_predecessor_must_converge_first() {
    let mut m = manifest("gpu", "r1", &[(0, &["db", "web"])]);
    m.edges.push(Edge { before: "db".into(), after: "web".into(), reason: "schema first".into() });
    let id = rid("gpu", "r1");
    let (mut input, p) = advance(&snapshot(m), t(0));
    assert_eq!(dispatched(&p), ["db"]);
    assert_eq!(why(&p, "web").as_deref(), Some("edge predecessor db not converged"));
    confirm(&mut input, "db", &id);
    let (_, p) = advance(&input, t(1));
    assert_eq!(dispatched(&p), ["web"]);
}

#[test]
fn failed_units_over_the_gate_fail_the_host() {
    let id = rid("gpu", "r1");
    let mut input = snapshot(manifest("gpu", "r1", &[(60, &["a"])]));
    input.channels.get_mut("gpu").expect("gpu").manifest.health_gate.max_failures = 1;
    let (mut input, _) = advance(&input, t(0));
    confirm(&mut input, "a", &id);
    let (mut input, _) = advance(&input, t(1));
    input.hosts.get_mut("a").expect("a").failed_units = 2;
    let (after, p) = advance(&input, t(2));
    assert_eq!(host_state(&after, &id, "a"), H::Failed);
    assert!(p.actions.iter().any(|a| a.reason() == "health gate: 2 failed units > maxFailedUnits 0"));
}

#[test]
fn probe_error_on_a_required_probe_counts_as_failed() {
    let id = rid("gpu", "r1");
    let mut m = manifest("gpu", "r1", &[(0, &["a", "b"])]);
    m.health_gate.required_probes = vec!["nccl".into()];
    m.health_gate.max_failures = 1;
    let (mut input, _) = advance(&snapshot(m), t(0));
    confirm(&mut input, "a", &id);
    confirm(&mut input, "b", &id);
    probe(&mut input, "a", "nccl", ProbeOutcome::ProbeError);
    let (after, p) = advance(&input, t(1));
    assert_eq!(host_state(&after, &id, "a"), H::Failed);
    assert!(p.actions.iter().any(|a| a.reason() == "health gate: required probe nccl probe-error"));
    assert_eq!(why(&p, "b").as_deref(), Some("required probe nccl has not reported passed"));
}

#[test]
fn required_probes_must_pass_before_converging() {
    let id = rid("gpu", "r1");
    let mut m = manifest("gpu", "r1", &[(0, &["a"])]);
    m.health_gate.required_probes = vec!["nccl".into()];
    let (mut input, _) = advance(&snapshot(m), t(0));
    confirm(&mut input, "a", &id);
    probe(&mut input, "a", "nccl", ProbeOutcome::Passed);
    let (after, _) = advance(&input, t(1));
    assert_eq!(host_state(&after, &id, "a"), H::Converged);
}

#[test]
fn health_failure_with_halt_halts_the_rollout() {
    let id = rid("gpu", "r1");
    let (mut input, _) = advance(&two_waves(), t(0));
    report(&mut input, "a", &id, &closure("r1", "a"), ActivationPhase::Failed);
    let (after, p) = advance(&input, t(1));
    assert_eq!(host_state(&after, &id, "a"), H::Failed);
    assert_eq!(rollout_state(&after, &id), Some(R::Halted));
    assert!(p.actions.iter().any(|a| a.reason().contains("onHealthFailure halt")));
    // In-flight hosts finish naturally; nothing new is dispatched.
    let mut after = after;
    confirm(&mut after, "b", &id);
    let (after, p) = advance(&after, t(2));
    assert_eq!(host_state(&after, &id, "b"), H::Soaking);
    assert!(dispatched(&p).is_empty());
    assert!(p.report.iter().any(|w| w.host.is_none() && w.reason.starts_with("rollout halted since")));
}

#[test]
fn failures_within_max_failures_do_not_trigger_on_health_failure() {
    let id = rid("gpu", "r1");
    let mut input = two_waves();
    input.channels.get_mut("gpu").expect("gpu").manifest.health_gate.max_failures = 1;
    let (mut input, _) = advance(&input, t(0));
    report(&mut input, "a", &id, &closure("r1", "a"), ActivationPhase::RolledBack);
    let (after, _) = advance(&input, t(1));
    assert_eq!(rollout_state(&after, &id), Some(R::Active));
}

#[test]
fn rollback_and_halt_reverts_touched_hosts_to_the_revertable_target() {
    let id = rid("gpu", "r1");
    let prev_id = rid("gpu", "r0");
    let mut input = two_waves();
    input.channels.get_mut("gpu").expect("gpu").manifest.on_health_failure = OnHealthFailure::RollbackAndHalt;
    add_revertable(&mut input, manifest("gpu", "r0", &[(0, &["a", "b", "c", "d"])]));
    let (mut input, _) = advance(&input, t(0));
    confirm(&mut input, "b", &id);
    report(&mut input, "a", &id, &closure("r1", "a"), ActivationPhase::Failed);
    let (mut input, p) = advance(&input, t(1));
    assert_eq!(rollout_state(&input, &id), Some(R::Reverting));
    let rollbacks: Vec<(&str, &str)> = p
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::Rollback { host, target, revert_to, .. } if *revert_to == prev_id => Some((host.as_str(), target.as_str())),
            _ => None,
        })
        .collect();
    let (ta, tb) = (closure("r0", "a"), closure("r0", "b"));
    assert_eq!(rollbacks, [("a", ta.as_str()), ("b", tb.as_str())]);
    assert_eq!(why(&p, "c").as_deref(), None, "untouched hosts stay out of the revert");
    confirm(&mut input, "a", &prev_id);
    let (mut input, _) = advance(&input, t(2));
    assert_eq!(host_state(&input, &id, "a"), H::Reverted);
    assert_eq!(rollout_state(&input, &id), Some(R::Reverting));
    confirm(&mut input, "b", &prev_id);
    let (input, _) = advance(&input, t(3));
    assert_eq!(rollout_state(&input, &id), Some(R::Reverted));
}

#[test]
fn rollback_and_halt_without_a_revertable_rollout_halts() {
    let id = rid("gpu", "r1");
    let mut input = two_waves();
    input.channels.get_mut("gpu").expect("gpu").manifest.on_health_failure = OnHealthFailure::RollbackAndHalt;
    let (mut input, _) = advance(&input, t(0));
    report(&mut input, "a", &id, &closure("r1", "a"), ActivationPhase::Failed);
    let (after, _) = advance(&input, t(1));
    assert_eq!(rollout_state(&after, &id), Some(R::Halted));
}

#[test]
fn rollout_converges_once_every_wave_is_done() {
    let id = rid("gpu", "r1");
    let (mut input, _) = advance(&snapshot(manifest("gpu", "r1", &[(0, &["a"]), (0, &["b"])])), t(0));
    confirm(&mut input, "a", &id);
    let (mut input, _) = advance(&input, t(1));
    confirm(&mut input, "b", &id);
    let (input, p) = advance(&input, t(2));
    assert_eq!(rollout_state(&input, &id), Some(R::Converged));
    assert!(p.actions.iter().any(|a| matches!(a, Action::RolloutTransition { from: R::Active, to: R::Converging, .. })));
    assert!(run(&input, t(3)).actions.is_empty());
}

#[test]
fn deferred_host_converges_when_it_boots_into_the_target() {
    let id = rid("gpu", "r1");
    let (mut input, _) = advance(&snapshot(manifest("gpu", "r1", &[(0, &["a"]), (0, &["b"])])), t(0));
    report(&mut input, "a", &id, &closure("r1", "a"), ActivationPhase::Deferred);
    let (mut input, p) = advance(&input, t(1));
    assert_eq!(host_state(&input, &id, "a"), H::Deferred);
    assert_eq!(dispatched(&p), ["b"], "Deferred counts as done for promotion");
    confirm(&mut input, "a", &id);
    let (input, _) = advance(&input, t(2));
    assert_eq!(host_state(&input, &id, "a"), H::Converged);
}
