//! Budgets (maxInFlight, maxInFlightPct, held hosts, cross-rollout summing), idempotent
//! re-planning, and the invariant checker refusing bad plans.

use drover_proto::states::HostRolloutState as H;

use super::fixture::*;
use crate::action::{Action, Plan};
use crate::check::check_plan;
use crate::engine::plan;

fn five_gpu_hosts(max: Option<u32>, pct: Option<u32>) -> crate::PlanInput {
    let hosts = ["g1", "g2", "g3", "g4", "g5"];
    let mut m = manifest("gpu", "r1", &[(0, &hosts)]);
    m.disruption_budgets.push(budget(&["gpu-a"], &hosts, max, pct));
    snapshot(m)
}

#[test]
fn max_in_flight_caps_dispatches_counting_the_plans_own() {
    let p = run(&five_gpu_hosts(Some(2), None), crate::tests::fixture::t(0));
    assert_eq!(dispatched(&p), ["g1", "g2"]);
    assert_eq!(why(&p, "g3").as_deref(), Some("budget gpu-a 2/2 in flight"));
}

#[test]
fn max_in_flight_pct_floors_and_allows_at_least_one() {
    assert_eq!(dispatched(&run(&five_gpu_hosts(None, Some(10)), t(0))), ["g1"], "floor(10 × 5 / 100) = 0 → 1");
    assert_eq!(dispatched(&run(&five_gpu_hosts(None, Some(50)), t(0))), ["g1", "g2"], "floor(50 × 5 / 100) = 2");
    assert_eq!(dispatched(&run(&five_gpu_hosts(Some(1), Some(100)), t(0))), ["g1"], "the smaller cap wins");
}

#[test]
fn held_hosts_count_against_budgets_and_are_never_dispatched() {
    let mut input = five_gpu_hosts(Some(2), None);
    input.held.insert("g1".into(), "job decommission-7".into());
    let p = run(&input, t(0));
    assert_eq!(dispatched(&p), ["g2"]);
    assert_eq!(why(&p, "g1").as_deref(), Some("held by job decommission-7"));
    assert_eq!(why(&p, "g3").as_deref(), Some("budget gpu-a 2/2 in flight"));
}

#[test]
fn budget_slot_frees_when_a_host_converges() {
    let id = rid("gpu", "r1");
    let (mut input, _) = advance(&five_gpu_hosts(Some(2), None), t(0));
    confirm(&mut input, "g1", &id);
    let (_, p) = advance(&input, t(1));
    assert_eq!(dispatched(&p), ["g3"]);
}

#[test]
fn budgets_sum_across_rollouts_by_canonical_selector() {
    let mut m1 = manifest("gpu", "r1", &[(0, &["g1", "g2"])]);
    m1.disruption_budgets.push(budget(&["gpu-a", "rack-1"], &["g1", "g2", "g3", "g4"], Some(3), None));
    let mut m2 = manifest("infer", "s1", &[(0, &["g3", "g4"])]);
    // Same selector, tags in another order: canonical equality makes it the same budget.
    m2.disruption_budgets.push(budget(&["rack-1", "gpu-a"], &["g1", "g2", "g3", "g4"], Some(3), None));
    let mut input = snapshot(m1);
    add_channel(&mut input, m2);
    let p = run(&input, t(0));
    assert_eq!(dispatched(&p), ["g1", "g2", "g3"]);
    assert_eq!(why(&p, "g4").as_deref(), Some("budget gpu-a+rack-1 3/3 in flight"));
}

#[test]
fn replanning_unchanged_input_yields_no_actions() {
    // Walk a two-wave rollout with a budget, a held host and an offline host; at every
    // step apply the plan as the executor would and re-plan at the same `now`.
    let id = rid("gpu", "r1");
    let hosts = ["a", "b", "c", "d", "e"];
    let mut m = manifest("gpu", "r1", &[(30, &["a", "b", "c"]), (0, &["d", "e"])]);
    m.disruption_budgets.push(budget(&["gpu-a"], &hosts, Some(2), None));
    let mut input = snapshot(m);
    input.held.insert("c".into(), "maintenance mr-1".into());
    offline(&mut input, "e");
    for step in 0..8 {
        let now = t(step * 40);
        let p = plan(&input, now);
        check_plan(&input, &p, now).expect("invariants");
        let next = applied(&input, &p, now);
        let again = plan(&next, now);
        assert!(again.actions.is_empty(), "step {step}: {:#?}", again.actions);
        assert_eq!(again.report, plan(&next, now).report, "the report is deterministic");
        input = next;
        // The agents confirm whatever they were told; the job releases c after step 2.
        for h in hosts {
            if host_state(&input, &id, h) == H::Activating {
                confirm(&mut input, h, &id);
            }
        }
        if step == 2 {
            input.held.clear();
        }
    }
    assert_eq!(rollout_state(&input, &id), Some(crate::RolloutState::Converged));
    assert_eq!(host_state(&input, &id, "e"), H::Skipped);
}

#[test]
fn invariant_checker_refuses_a_dispatch_into_a_full_budget() {
    let input = five_gpu_hosts(Some(1), None);
    let mut p = plan(&input, t(0));
    let extra = Action::Dispatch {
        host: "g2".into(),
        rollout_id: rid("gpu", "r1"),
        wave_index: 0,
        target: closure("r1", "g2"),
        from: H::Pending,
        reason: "forced".into(),
    };
    p.actions.push(extra);
    let v = check_plan(&input, &p, t(0)).expect_err("over budget");
    assert!(v[0].message.contains("full budget"), "{v:?}");
}

#[test]
fn invariant_checker_refuses_a_dispatch_before_its_wave_and_an_illegal_transition() {
    let input = snapshot(manifest("gpu", "r1", &[(0, &["a"]), (0, &["b"])]));
    let mut p = plan(&input, t(0));
    p.actions.push(Action::Dispatch {
        host: "b".into(),
        rollout_id: rid("gpu", "r1"),
        wave_index: 1,
        target: closure("r1", "b"),
        from: H::Pending,
        reason: "forced".into(),
    });
    p.actions.push(Action::HostTransition {
        rollout_id: rid("gpu", "r1"),
        host: "a".into(),
        from: H::Activating,
        to: H::Pending,
        reason: "x".into(),
    });
    let v = check_plan(&input, &p, t(0)).expect_err("bad plan");
    assert!(v[0].message.contains("before a of wave 0"), "{v:?}");
    assert!(v[1].message.contains("illegal"), "{v:?}");
    let empty = Plan::default();
    assert!(check_plan(&input, &empty, t(0)).is_ok());
}

#[test]
fn plan_input_round_trips_as_camel_case_json_with_schema_version() {
    let (input, p) = advance(&five_gpu_hosts(Some(2), None), t(0));
    let text = serde_json::to_string(&input).expect("json");
    assert!(text.contains("\"schemaVersion\":1") && text.contains("\"lastRolledRef\""), "{text}");
    let back: crate::PlanInput = serde_json::from_str(&text).expect("parse");
    assert_eq!(back, input);
    let plan_text = serde_json::to_string(&p).expect("json");
    assert!(plan_text.contains("\"kind\":\"dispatch\"") && plan_text.contains("\"waveIndex\":0"), "{plan_text}");
}
