//! One test per rule added for the rollout's life beyond waves: the confirm deadline
//! (RFC-0002 §4 step 4), retention (`Pruned`), a stale timestamp (step 0: no new dispatch,
//! one alert per signing), the static compliance gate (step 2a), and an edge predecessor
//! skipped in a superseded ref.

use drover_proto::report::ActivationPhase;
use drover_proto::spec::{Compliance, Edge, Mode, OnHealthFailure, StaticResult};
use drover_proto::states::{HostRolloutState as H, RolloutState as R};

use super::fixture::*;
use crate::action::{Action, Plan};
use crate::check::check_plan;
use crate::input::PlanInput;

fn one_wave() -> PlanInput {
    snapshot(manifest("gpu", "r1", &[(0, &["a", "b"])]))
}

fn reason_of(p: &Plan, host: &str) -> Option<String> {
    p.actions.iter().find_map(|a| match a {
        Action::HostTransition { host: h, reason, .. } if h == host => Some(reason.clone()),
        _ => None,
    })
}

// ---- confirm deadline ----

#[test]
fn activating_host_past_its_confirm_deadline_is_reverted() {
    let id = rid("gpu", "r1");
    let mut input = one_wave();
    input.settings.confirm_deadline_secs = 600;
    input.channels.get_mut("gpu").expect("gpu").manifest.health_gate.max_failures = 2;
    let (input, _) = advance(&input, t(0));
    // Exactly at the deadline it still waits; one second later it is reverted.
    let p = run(&input, t(600));
    assert!(p.actions.is_empty());
    let (after, p) = advance(&input, t(601));
    assert_eq!(host_state(&after, &id, "a"), H::Reverted);
    let why = reason_of(&p, "a").expect("a transition");
    assert!(why.contains("confirm deadline") && why.contains("passed without confirmation"), "{why}");
    assert!(why.contains("rolls back on its own"), "{why}");
}

#[test]
fn activating_host_before_its_confirm_deadline_waits_naming_it() {
    let (input, _) = advance(&one_wave(), t(0));
    let p = run(&input, t(100));
    let w = why(&p, "a").expect("a waits");
    assert!(w.contains("awaiting confirmation") && w.contains(&format!("confirm deadline {}", t(1800))), "{w}");
}

#[test]
fn host_that_confirmed_or_failed_is_not_reverted_by_the_deadline() {
    let id = rid("gpu", "r1");
    let mut input = one_wave();
    input.channels.get_mut("gpu").expect("gpu").manifest.health_gate.max_failures = 2;
    let (mut input, _) = advance(&input, t(0));
    confirm(&mut input, "a", &id);
    report(&mut input, "b", &id, &closure("r1", "b"), ActivationPhase::Failed);
    let (after, _) = advance(&input, t(10_000));
    assert_eq!(host_state(&after, &id, "a"), H::Converged, "confirmed, soaked (0 s), converged");
    assert_eq!(host_state(&after, &id, "b"), H::Failed);
}

#[test]
fn hosts_reverted_by_the_confirm_deadline_count_toward_max_failures() {
    let id = rid("gpu", "r1");
    let (mut input, _) = advance(&one_wave(), t(0));
    confirm(&mut input, "a", &id);
    let (after, p) = advance(&input, t(1801));
    assert_eq!(host_state(&after, &id, "b"), H::Reverted);
    assert_eq!(rollout_state(&after, &id), Some(R::Halted));
    assert!(p.actions.iter().any(|a| a.reason().contains("1 failed hosts > maxFailures 0")), "{:#?}", p.actions);
}

#[test]
fn checker_refuses_a_revert_before_the_confirm_deadline() {
    let id = rid("gpu", "r1");
    let (input, _) = advance(&one_wave(), t(0));
    let early = Plan {
        actions: vec![Action::HostTransition {
            rollout_id: id,
            host: "a".into(),
            from: H::Activating,
            to: H::Reverted,
            reason: "too early".into(),
        }],
        report: vec![],
    };
    assert!(check_plan(&input, &early, t(100)).is_err());
    assert!(check_plan(&input, &early, t(1801)).is_ok());
}

// ---- retention ----

/// `gpu@r1` converged at `t(0)`; the channel's current manifest is still `r1`.
fn converged_at_zero() -> PlanInput {
    let id = rid("gpu", "r1");
    let input = snapshot(manifest("gpu", "r1", &[(0, &["a"])]));
    let (mut input, _) = advance(&input, t(-100));
    confirm(&mut input, "a", &id);
    let (input, _) = advance(&input, t(-50));
    let (mut input, _) = advance(&input, t(-10));
    assert_eq!(rollout_state(&input, &id), Some(R::Converged));
    input.rollouts.get_mut(&id).expect("r1").since = t(0);
    // Weeks pass in these tests: keep the timestamp fresh throughout.
    input.channels.get_mut("gpu").expect("gpu").freshness_window_secs = u64::MAX;
    input
}

#[test]
fn finished_rollout_is_pruned_once_retained_for_retention_secs() {
    let id = rid("gpu", "r1");
    let input = converged_at_zero();
    let week = 604_800;
    assert!(run(&input, t(week - 1)).actions.is_empty(), "kept within retention");
    let (after, p) = advance(&input, t(week));
    assert_eq!(rollout_state(&after, &id), Some(R::Pruned));
    assert!(
        matches!(&p.actions[..], [Action::RolloutTransition { from: R::Converged, to: R::Pruned, reason, .. }] if reason.contains("retained 604800s; pruned")),
        "{:#?}",
        p.actions
    );
}

#[test]
fn every_finished_state_is_pruned_but_live_ones_never_are() {
    for state in [R::Reverted, R::Failed, R::Superseded, R::Cancelled, R::Halted] {
        let mut input = converged_at_zero();
        input.settings.retention_secs = 10;
        input.rollouts.get_mut(&rid("gpu", "r1")).expect("r1").state = state;
        let (after, _) = advance(&input, t(10));
        let want = if state == R::Halted { R::Halted } else { R::Pruned };
        assert_eq!(rollout_state(&after, &rid("gpu", "r1")), Some(want), "{state}");
    }
}

#[test]
fn pruned_current_rollout_never_reopens() {
    let id = rid("gpu", "r1");
    let input = converged_at_zero();
    let (after, _) = advance(&input, t(604_800));
    assert_eq!(rollout_state(&after, &id), Some(R::Pruned));
    // Kept as Pruned, or no longer loaded at all: lastRolledRef keeps the ref from opening.
    assert!(run(&after, t(700_000)).actions.is_empty());
    let mut dropped = after.clone();
    dropped.rollouts.remove(&id);
    assert_eq!(dropped.last_rolled_ref.get("gpu").map(String::as_str), Some("r1"));
    assert!(run(&dropped, t(700_000)).actions.is_empty());
}

// ---- stale timestamp ----

/// `gpu@r1` never rolled; the channel's timestamp was signed at `t(0)` with a 300 s window.
fn signed_at_zero(input: &mut PlanInput) {
    let c = input.channels.get_mut("gpu").expect("gpu");
    c.signed_at = t(0);
    c.freshness_window_secs = 300;
}

#[test]
fn stale_channel_opens_nothing_and_alerts_once_per_signing() {
    let mut input = one_wave();
    signed_at_zero(&mut input);
    assert!(!run(&input, t(300)).actions.is_empty(), "fresh at exactly the window");
    let (after, p) = advance(&input, t(301));
    assert!(matches!(&p.actions[..], [Action::ReleaseStale { channel, signed_at, reason }]
        if channel == "gpu" && *signed_at == t(0) && reason.contains("is stale (window 300s); no new dispatch until CI re-signs")));
    assert_eq!(after.stale_alerts.get("gpu"), Some(&t(0)));
    assert!(p.report.iter().any(|w| w.rollout_id == Some(rid("gpu", "r1")) && w.reason.contains("is stale")));
    // Later ticks: the same signing is not alerted again.
    assert!(run(&after, t(5000)).actions.is_empty());
    // A new signing that is stale too is alerted once more.
    let mut resigned = after;
    resigned.channels.get_mut("gpu").expect("gpu").signed_at = t(1000);
    let p = run(&resigned, t(5000));
    assert!(matches!(&p.actions[..], [Action::ReleaseStale { signed_at, .. }] if *signed_at == t(1000)));
}

#[test]
fn stale_channel_dispatches_nothing_but_soaks_and_converges() {
    let id = rid("gpu", "r1");
    let mut input = snapshot(manifest("gpu", "r1", &[(0, &["a"]), (0, &["b"])]));
    signed_at_zero(&mut input);
    let (mut input, _) = advance(&input, t(0));
    confirm(&mut input, "a", &id);
    let (after, p) = advance(&input, t(400));
    assert_eq!(host_state(&after, &id, "a"), H::Converged, "soak and gate go on");
    assert!(dispatched(&p).is_empty(), "wave 1 is not dispatched");
    assert!(why(&p, "b").is_some_and(|w| w.starts_with("timestamp signed at") && w.contains("is stale")), "{:?}", why(&p, "b"));
    // CI re-signs: b goes.
    let mut fresh = after;
    fresh.channels.get_mut("gpu").expect("gpu").signed_at = t(400);
    assert_eq!(dispatched(&run(&fresh, t(401))), ["b"]);
}

#[test]
fn stale_channel_rolls_nothing_back() {
    let id = rid("gpu", "r1");
    let mut m = manifest("gpu", "r1", &[(0, &["a"])]);
    m.on_health_failure = OnHealthFailure::RollbackAndHalt;
    let mut input = snapshot(m);
    add_revertable(&mut input, manifest("gpu", "r0", &[(0, &["a"])]));
    signed_at_zero(&mut input);
    let (mut input, _) = advance(&input, t(0));
    report(&mut input, "a", &id, &closure("r1", "a"), ActivationPhase::Failed);
    let (after, p) = advance(&input, t(400));
    assert_eq!(rollout_state(&after, &id), Some(R::Reverting));
    assert!(!p.actions.iter().any(|a| matches!(a, Action::Rollback { .. })), "{:#?}", p.actions);
    assert!(why(&p, "a").is_some_and(|w| w.contains("is stale")));
}

#[test]
fn checker_refuses_a_dispatch_on_a_stale_channel() {
    let mut input = one_wave();
    let fresh = run(&input, t(0));
    signed_at_zero(&mut input);
    input.channels.get_mut("gpu").expect("gpu").signed_at = t(-1000);
    assert!(check_plan(&input, &fresh, t(0)).is_err());
}

// ---- static compliance gate ----

fn with_compliance(mode: Mode, results: &[(&str, bool, bool)]) -> PlanInput {
    let mut input = one_wave();
    input.channels.get_mut("gpu").expect("gpu").compliance = Compliance {
        frameworks: vec!["cis-level1".into()],
        mode,
        static_results: results
            .iter()
            .map(|(c, required, passed)| StaticResult { control: (*c).into(), required: *required, passed: *passed })
            .collect(),
    };
    input
}

#[test]
fn failing_required_static_control_fails_the_rollout() {
    let input = with_compliance(Mode::Enforce, &[("cis-5.2.1", true, false), ("cis-1.1", true, true), ("cis-6.1", true, false)]);
    let (after, p) = advance(&input, t(0));
    assert_eq!(rollout_state(&after, &rid("gpu", "r1")), Some(R::Failed));
    assert!(dispatched(&p).is_empty());
    assert!(
        p.actions.iter().any(|a| a.reason() == "static compliance gate: required controls cis-5.2.1, cis-6.1 failed"),
        "{:#?}",
        p.actions
    );
    // Failed is final for the ref: it does not reopen.
    assert!(run(&after, t(1)).actions.is_empty());
}

#[test]
fn failing_required_static_control_in_observe_mode_goes_active_with_a_notice() {
    let input = with_compliance(Mode::Observe, &[("cis-5.2.1", true, false)]);
    let (after, p) = advance(&input, t(0));
    assert_eq!(rollout_state(&after, &rid("gpu", "r1")), Some(R::Active));
    assert_eq!(dispatched(&p), ["a", "b"]);
    let notice = "static compliance gate (observe, not enforced): required control cis-5.2.1 failed in gpu@r1";
    assert!(p.report.iter().any(|w| w.reason == notice), "{:#?}", p.report);
    assert!(run(&after, t(1)).report.iter().any(|w| w.reason == notice), "the notice stays while the rollout runs");
}

#[test]
fn failing_static_control_that_is_not_required_passes_the_gate() {
    let input = with_compliance(Mode::Enforce, &[("cis-9.9", false, false), ("cis-1.1", true, true)]);
    let (after, p) = advance(&input, t(0));
    assert_eq!(rollout_state(&after, &rid("gpu", "r1")), Some(R::Active));
    assert_eq!(dispatched(&p), ["a", "b"]);
}

// ---- edges and superseded refs (liveness) ----

#[test]
fn successor_of_a_predecessor_skipped_in_a_superseded_ref_follows_it() {
    let id = rid("gpu", "r1");
    let mut m = manifest("gpu", "r1", &[(0, &["db", "web"])]);
    m.edges.push(Edge { before: "db".into(), after: "web".into(), reason: "schema first".into() });
    let mut input = snapshot(m);
    offline(&mut input, "db");
    let (mut input, p) = advance(&input, t(0));
    assert_eq!(host_state(&input, &id, "db"), H::Skipped);
    assert_eq!(why(&p, "web").as_deref(), Some("edge predecessor db not converged"), "the current rollout waits for db");
    // A newer ref lands: db can never converge in r1 any more, so web follows it to r2.
    let old = input.channels["gpu"].manifest.clone();
    input.manifests.insert(id.clone(), old);
    add_channel(&mut input, manifest("gpu", "r2", &[(0, &["db", "web"])]));
    let (after, p) = advance(&input, t(1));
    assert_eq!(host_state(&after, &id, "web"), H::Skipped);
    assert!(reason_of(&p, "web").is_some_and(|r| r.contains("edge predecessor db skipped")));
    assert_eq!(rollout_state(&after, &id), Some(R::Converged));
    assert_eq!(rollout_state(&after, &rid("gpu", "r2")), Some(R::Active));
}
