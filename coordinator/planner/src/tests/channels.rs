//! Channel-level rules (RFC-0002 §4.3, §5.2): channel edges hold a successor's rollout and
//! emit `RolloutDeferred` once per change; one active rollout per channel with a queue of
//! depth one (latest ref wins, the skipped queued ref superseded); returning Skipped hosts
//! take the channel's current target; the invariant checker's channel rules.

use drover_proto::spec::Edge;
use drover_proto::states::{HostRolloutState as H, RolloutState as R};

use super::fixture::*;
use crate::action::{Action, Plan};
use crate::check::check_plan;
use crate::engine::plan;
use crate::input::PlanInput;

fn edge(before: &str, after: &str) -> Edge {
    Edge { before: before.into(), after: after.into(), reason: String::new() }
}

/// Channels `db` (hosts d1, d2) and `app` (hosts a1, a2), both at `r`, never rolled, with the
/// channel edge db → app.
fn db_then_app(r: &str) -> PlanInput {
    let mut input = snapshot(manifest("db", r, &[(0, &["d1", "d2"])]));
    add_channel(&mut input, manifest("app", r, &[(0, &["a1", "a2"])]));
    input.channel_edges.push(edge("db", "app"));
    input
}

/// Confirms every dispatched host of `id` and plans at `now`: with soak 0 the rollout converges.
fn converge(mut input: PlanInput, id: &drover_proto::names::RolloutId, now: drover_proto::time::Time) -> (PlanInput, Plan) {
    let hosts: Vec<String> = input.manifest(id).expect("manifest").host_set.iter().map(|e| e.hostname.clone()).collect();
    for h in hosts {
        if host_state(&input, id, &h) == H::Activating {
            confirm(&mut input, &h, id);
        }
    }
    advance(&input, now)
}

/// A new ref lands on `m`'s channel: the old manifest stays reachable (as the store keeps it).
fn land(input: &mut PlanInput, m: drover_proto::artifacts::RolloutManifest) {
    if let Some(old) = input.channels.get(&m.channel).map(|c| c.manifest.clone()) {
        input.manifests.insert(old.rollout_id.clone(), old);
    }
    add_channel(input, m);
}

fn deferrals(p: &Plan) -> Vec<(String, String, String)> {
    p.actions
        .iter()
        .filter_map(|a| match a {
            Action::RolloutDeferred { channel, target_ref, blocked_by, .. } => {
                Some((channel.clone(), target_ref.clone(), blocked_by.clone()))
            }
            _ => None,
        })
        .collect()
}

fn opened(p: &Plan) -> Vec<String> {
    p.actions
        .iter()
        .filter_map(|a| if let Action::OpenRollout { rollout_id, .. } = a { Some(rollout_id.to_string()) } else { None })
        .collect()
}

fn channel_wait(p: &Plan, channel: &str) -> Option<String> {
    p.report.iter().find(|w| w.channel == channel && w.host.is_none()).map(|w| w.reason.clone())
}

#[test]
fn channel_edge_holds_the_successor_until_the_predecessor_converges() {
    let (input, p) = advance(&db_then_app("c2"), t(0));
    assert_eq!(opened(&p), ["db@c2"]);
    assert_eq!(deferrals(&p), [("app".to_owned(), "c2".to_owned(), "db".to_owned())]);
    assert_eq!(channel_wait(&p, "app").as_deref(), Some("channel edge: waits for channel db (rollout db@c2 Active)"));
    assert_eq!(input.last_deferrals.get("app").map(|d| (d.target_ref.as_str(), d.blocked_by.as_str())), Some(("c2", "db")));
    // Still blocked a tick later: reported, not emitted again.
    let (input, p) = advance(&input, t(10));
    assert!(deferrals(&p).is_empty(), "{:?}", p.actions);
    assert!(channel_wait(&p, "app").is_some_and(|r| r.starts_with("channel edge: waits for channel db")));
    // The predecessor converges: the successor opens and its deferral record is cleared.
    let (input, p) = converge(input, &rid("db", "c2"), t(20));
    assert_eq!(rollout_state(&input, &rid("db", "c2")), Some(R::Converged));
    assert_eq!(opened(&p), ["app@c2"]);
    assert_eq!(dispatched(&p), ["a1", "a2"]);
    assert!(input.last_deferrals.is_empty());
}

#[test]
fn successor_listed_first_still_waits_for_a_predecessor_opening_in_the_same_tick() {
    // "aaa" sorts before "db": the planner orders channels by their edges, not by name.
    let mut input = snapshot(manifest("db", "c2", &[(0, &["d1"])]));
    add_channel(&mut input, manifest("aaa", "c2", &[(0, &["a1"])]));
    input.channel_edges.push(edge("db", "aaa"));
    let p = run(&input, t(0));
    assert_eq!(opened(&p), ["db@c2"]);
    assert_eq!(deferrals(&p), [("aaa".to_owned(), "c2".to_owned(), "db".to_owned())]);
    assert!(p.actions.iter().any(|a| matches!(a, Action::RolloutDeferred { reason, .. } if reason.contains("rollout db@c2 Active"))));
}

#[test]
fn halted_predecessor_blocks_its_successor() {
    let (mut input, _) = advance(&db_then_app("c2"), t(0));
    input.rollouts.get_mut(&rid("db", "c2")).expect("db").state = R::Halted;
    let (input, p) = advance(&input, t(1));
    assert!(opened(&p).is_empty());
    assert!(deferrals(&p).is_empty(), "same ref, same blocker: not emitted again");
    assert_eq!(channel_wait(&p, "app").as_deref(), Some("channel edge: waits for channel db (rollout db@c2 Halted)"));
    assert_eq!(rollout_state(&input, &rid("app", "c2")), None);
}

#[test]
fn predecessor_without_rollout_history_is_open() {
    let mut input = snapshot(manifest("app", "c2", &[(0, &["a1"])]));
    input.channel_edges.push(edge("db", "app"));
    let p = run(&input, t(0));
    assert_eq!(opened(&p), ["app@c2"]);
    assert!(deferrals(&p).is_empty());
}

#[test]
fn edge_reason_is_carried_into_the_deferral() {
    let mut input = db_then_app("c2");
    input.channel_edges[0].reason = "schema migrations first".into();
    let p = run(&input, t(0));
    assert!(p.actions.iter().any(|a| matches!(a, Action::RolloutDeferred { reason, .. } if reason.ends_with("; schema migrations first"))));
}

#[test]
fn deferral_is_emitted_again_when_its_blocker_changes() {
    // app@r1 active; app gets r2 (queued behind its own rollout) while db gets c2.
    let input = snapshot(manifest("app", "r1", &[(0, &["a1"])]));
    let (mut input, _) = advance(&input, t(0));
    land(&mut input, manifest("app", "r2", &[(0, &["a1"])]));
    add_channel(&mut input, manifest("db", "c2", &[(0, &["d1"])]));
    input.channel_edges.push(edge("db", "app"));
    let (input, p) = advance(&input, t(1));
    assert_eq!(deferrals(&p), [("app".to_owned(), "r2".to_owned(), "app".to_owned())]);
    assert_eq!(channel_wait(&p, "app").as_deref(), Some("ref r2 queued behind rollout app@r1 (Active)"));
    // app@r1 converges; db@c2 is still active: the blocker is now the edge.
    let (input, p) = converge(input, &rid("app", "r1"), t(2));
    assert_eq!(rollout_state(&input, &rid("app", "r1")), Some(R::Converged));
    assert_eq!(deferrals(&p), [("app".to_owned(), "r2".to_owned(), "db".to_owned())]);
    let (_, p) = converge(input, &rid("db", "c2"), t(3));
    assert_eq!(opened(&p), ["app@r2"]);
}

#[test]
fn newer_ref_supersedes_the_queued_one_and_only_the_latest_rolls() {
    let input = snapshot(manifest("gpu", "r1", &[(0, &["a", "b"])]));
    let (mut input, _) = advance(&input, t(0));
    land(&mut input, manifest("gpu", "r2", &[(0, &["a", "b"])]));
    let (mut input, p) = advance(&input, t(1));
    assert_eq!(deferrals(&p), [("gpu".to_owned(), "r2".to_owned(), "gpu".to_owned())]);
    land(&mut input, manifest("gpu", "r3", &[(0, &["a", "b"])]));
    let (input, p) = advance(&input, t(2));
    let superseded: Vec<_> = p
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::RefSuperseded { superseded_ref, by_ref, .. } => Some((superseded_ref.clone(), by_ref.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(superseded, [("r2".to_owned(), "r3".to_owned())]);
    assert_eq!(deferrals(&p), [("gpu".to_owned(), "r3".to_owned(), "gpu".to_owned())]);
    assert_eq!(input.last_deferrals.get("gpu").map(|d| d.target_ref.as_str()), Some("r3"));
    let (input, p) = converge(input, &rid("gpu", "r1"), t(3));
    assert_eq!(opened(&p), ["gpu@r3"]);
    assert!(!input.rollouts.contains_key(&rid("gpu", "r2")), "the intermediate ref never rolls");
    assert_eq!(input.last_rolled_ref.get("gpu").map(String::as_str), Some("r3"));
}

#[test]
fn queued_ref_superseded_when_the_channel_returns_to_its_rolled_ref() {
    let input = snapshot(manifest("gpu", "r1", &[(0, &["a"])]));
    let (mut input, _) = advance(&input, t(0));
    let r1 = input.channels["gpu"].manifest.clone();
    land(&mut input, manifest("gpu", "r2", &[(0, &["a"])]));
    let (mut input, _) = advance(&input, t(1));
    land(&mut input, r1);
    let (input, p) = advance(&input, t(2));
    assert!(
        p.actions
            .iter()
            .any(|a| matches!(a, Action::RefSuperseded { superseded_ref, by_ref, .. } if superseded_ref == "r2" && by_ref == "r1"))
    );
    assert!(input.last_deferrals.is_empty());
}

#[test]
fn never_two_active_rollouts_on_a_channel_while_refs_keep_landing() {
    let mut input = snapshot(manifest("gpu", "r1", &[(0, &["a"]), (0, &["b"])]));
    for (i, r) in ["r2", "r3", "r4"].iter().enumerate() {
        let (next, _) = advance(&input, t(i as i64));
        input = next;
        land(&mut input, manifest("gpu", r, &[(0, &["a"]), (0, &["b"])]));
        let live = input.rollouts.values().filter(|r| crate::budget::is_live(r.state)).count();
        assert_eq!(live, 1);
    }
}

#[test]
fn skipped_host_returning_after_a_newer_ref_takes_the_channels_current_target() {
    let r1 = rid("gpu", "r1");
    let r2 = rid("gpu", "r2");
    let mut input = snapshot(manifest("gpu", "r1", &[(0, &["a", "b"])]));
    offline(&mut input, "b");
    let (mut input, _) = advance(&input, t(0));
    assert_eq!(host_state(&input, &r1, "b"), H::Skipped);
    land(&mut input, manifest("gpu", "r2", &[(0, &["a", "b"])]));
    input.hosts.get_mut("b").expect("b").connectivity = crate::Connectivity::Online;
    let (input, p) = advance(&input, t(1));
    assert!(dispatched(&p).is_empty(), "not re-dispatched with r1's stale target");
    assert_eq!(why(&p, "b").as_deref(), Some("skipped; will take the channel's current rollout"));
    let (input, p) = converge(input, &r1, t(2));
    assert_eq!(rollout_state(&input, &r1), Some(R::Converged));
    assert_eq!(host_state(&input, &r1, "b"), H::Skipped);
    let target = p.actions.iter().find_map(|a| match a {
        Action::Dispatch { host, rollout_id, target, .. } if host == "b" && *rollout_id == r2 => Some(target.clone()),
        _ => None,
    });
    assert_eq!(target, Some(closure("r2", "b")));
}

#[test]
fn host_in_flight_in_another_rollout_is_not_dispatched() {
    // A host listed by two channels (a misconfiguration the planner must still survive).
    let input = snapshot(manifest("x", "r1", &[(0, &["shared"])]));
    let (mut input, _) = advance(&input, t(0));
    add_channel(&mut input, manifest("y", "r1", &[(0, &["shared"])]));
    let p = run(&input, t(1));
    assert!(dispatched(&p).is_empty());
    let w = p.report.iter().find(|w| w.rollout_id == Some(rid("y", "r1")) && w.host.as_deref() == Some("shared"));
    assert_eq!(w.map(|w| w.reason.as_str()), Some("in flight in rollout x@r1"));
}

#[test]
fn invariant_checker_refuses_opening_past_a_channel_edge() {
    let input = db_then_app("c2");
    let mut p = Plan::default();
    p.actions.push(Action::OpenRollout {
        rollout_id: rid("app", "c2"),
        channel: "app".into(),
        manifest_sha256: sha(&rid("app", "c2")),
        reason: "forced".into(),
    });
    let v = check_plan(&input, &p, t(0)).expect_err("edge violated");
    assert!(v[0].message.contains("channel edge db -> app violated"), "{v:?}");
    let (after, _) = advance(&input, t(0));
    let v = check_plan(&after, &p, t(0)).expect_err("edge violated");
    assert!(v[0].message.contains("while db@c2 is Active"), "{v:?}");
}

#[test]
fn invariant_checker_refuses_a_second_active_rollout_on_a_channel() {
    let (mut input, _) = advance(&snapshot(manifest("gpu", "r1", &[(0, &["a"])])), t(0));
    land(&mut input, manifest("gpu", "r2", &[(0, &["a"])]));
    let mut p = Plan::default();
    p.actions.push(Action::OpenRollout {
        rollout_id: rid("gpu", "r2"),
        channel: "gpu".into(),
        manifest_sha256: sha(&rid("gpu", "r2")),
        reason: "forced".into(),
    });
    let v = check_plan(&input, &p, t(1)).expect_err("two active");
    assert!(v[0].message.contains("two active rollouts on channel gpu"), "{v:?}");
}

#[test]
fn invariant_checker_refuses_a_repeated_deferral() {
    let (after, p) = advance(&db_then_app("c2"), t(0));
    let again =
        Plan { actions: p.actions.iter().filter(|a| matches!(a, Action::RolloutDeferred { .. })).cloned().collect(), report: vec![] };
    assert_eq!(again.actions.len(), 1);
    let v = check_plan(&after, &again, t(1)).expect_err("emitted twice");
    assert!(v[0].message.contains("emitted twice"), "{v:?}");
    assert!(plan(&after, t(1)).actions.is_empty());
}

#[test]
fn hold_that_clears_within_the_tick_is_not_journaled() {
    let input = snapshot(manifest("gpu", "r1", &[(0, &["a"])]));
    let (mut input, _) = advance(&input, t(0));
    land(&mut input, manifest("gpu", "r2", &[(0, &["a"])]));
    confirm(&mut input, "a", &rid("gpu", "r1"));
    let p = run(&input, t(1));
    assert!(deferrals(&p).is_empty(), "{:?}", p.actions);
    assert_eq!(opened(&p), ["gpu@r2"]);
}

#[test]
fn returning_skipped_host_waits_while_an_earlier_wave_is_in_progress_again() {
    let id = rid("gpu", "r1");
    let mut input = snapshot(manifest("gpu", "r1", &[(0, &["a", "b"]), (0, &["c", "d"])]));
    offline(&mut input, "b");
    let (mut input, _) = advance(&input, t(0));
    assert_eq!(host_state(&input, &id, "b"), H::Skipped);
    confirm(&mut input, "a", &id);
    offline(&mut input, "d");
    let (mut input, p) = advance(&input, t(1));
    assert_eq!(dispatched(&p), ["c"]);
    assert_eq!(host_state(&input, &id, "d"), H::Skipped);
    // b (wave 0) returns and is dispatched: wave 0 is in progress again; d (wave 1) returns too.
    input.hosts.get_mut("b").expect("b").connectivity = crate::Connectivity::Online;
    input.hosts.get_mut("d").expect("d").connectivity = crate::Connectivity::Online;
    let (mut input, p) = advance(&input, t(2));
    assert_eq!(dispatched(&p), ["b"]);
    assert_eq!(why(&p, "d").as_deref(), Some("skipped; waiting for wave 1 (wave 0 in progress)"));
    confirm(&mut input, "b", &id);
    let (_, p) = advance(&input, t(3));
    assert!(
        p.actions
            .iter()
            .any(|a| matches!(a, Action::Dispatch { host, from: H::Skipped, target, .. } if host == "d" && *target == closure("r1", "d")))
    );
}
