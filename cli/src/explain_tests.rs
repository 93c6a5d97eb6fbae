//! Tests of `drover explain host`'s pure part ([`explain`], [`render`]): the example release,
//! signed here, planned over `examples/observed.json` as the coordinator would plan it.

use drover_planner::action::Plan;
use drover_planner::input::{HostProgress, PlanInput};
use drover_planner::observed::Observed;
use drover_proto::keys::{KeyId, KeySigner, verifying_key_to_pem};
use drover_proto::release::{ReleaseParams, build_release};
use drover_proto::resolve::ReleaseMeta;
use drover_proto::spec::FleetSpec;
use drover_proto::states::HostRolloutState;
use ed25519_dalek::SigningKey;

use super::*;

const SIGNED_AT: &str = "2025-01-01T00:00:00Z";
const NOW: &str = "2025-01-01T01:00:00Z";

fn time(s: &str) -> Time {
    Time::parse_lenient(s).expect("time")
}

/// The example release (commit `c0ffee`) joined with the example observed state.
fn input() -> PlanInput {
    let key = SigningKey::from_bytes(&[9u8; 32]);
    let spec = FleetSpec::from_json(include_bytes!("../../examples/fleet.json")).expect("spec");
    let params =
        ReleaseParams { meta: ReleaseMeta { ci_commit: "c0ffee".into(), created_at: time(SIGNED_AT) }, version: 1, previous: None };
    let files = build_release(&spec, &params, &[KeySigner::new(key.clone())]).expect("release");
    let ci = key.verifying_key();
    let doc = serde_json::json!({ "schemaVersion": 1, "ci": { "threshold": 1, "keys": [{
        "keyId": KeyId::of(&ci).to_string(), "alg": "ed25519", "publicKey": verifying_key_to_pem(&ci).expect("pem") }] } });
    let trust = TrustRoots::from_json(doc.to_string().as_bytes()).expect("trust");
    let release = verify_release(&files, &trust, &VerifyContext::at(time(NOW))).expect("verifies");
    let observed: Observed = serde_json::from_slice(include_bytes!("../../examples/observed.json")).expect("observed");
    plan_input(&release, observed).expect("joins")
}

/// Plans `input` at NOW and applies the plan, as one executor tick would.
fn tick(input: &mut PlanInput) -> Plan {
    let plan = drover_planner::plan(input, time(NOW));
    for a in &plan.actions {
        drover_planner::apply(input, a, time(NOW));
    }
    plan
}

fn explained(host: &str, input: &PlanInput) -> Explanation {
    let plan = drover_planner::plan(input, time(NOW));
    let record = HostRecord { id: Some("id-1".into()), lifecycle: Some("active".into()), running: None };
    explain(host, &record, input, &plan, time(NOW), 1, "verified against trust.json".into())
}

#[test]
fn a_host_whose_rollout_is_not_open_yet_sees_the_planned_opening() {
    let input = input();
    let x = explained("infra-01", &input);
    assert_eq!(x.channel.as_deref(), Some("infra"));
    let target = x.target.clone().expect("target");
    assert_eq!((target.rollout_id.to_string().as_str(), target.wave_index), ("infra@c0ffee", 0));
    assert!(x.rollout.is_none() && !x.on_target);
    assert!(x.verdict.contains("has no rollout opened yet"), "{}", x.verdict);
    assert!(x.planned.iter().any(|a| matches!(a, Action::OpenRollout { .. })), "{:?}", x.planned);
    let text = render(&x);
    assert!(text.contains("Channel:     infra\n") && text.contains("- openRollout: "), "{text}");
}

#[test]
fn a_host_waiting_behind_a_channel_edge_gets_the_reason() {
    let mut input = input();
    tick(&mut input);
    let x = explained("gpu-a-01", &input);
    assert_eq!(x.channel.as_deref(), Some("gpu"));
    assert!(!x.on_target);
    let edge = x.waits.iter().find_map(|w| match &w.why {
        drover_planner::WaitReason::ChannelEdge { channel, .. } => Some(channel.as_str()),
        _ => None,
    });
    assert_eq!(edge, Some("infra"), "held by the channel edge to infra: {:?}", x.waits);
    assert!(render(&x).contains("[rollout gpu@c0ffee] channel edge: waits for channel infra"), "{}", render(&x));
    // The offline host is reported as such.
    assert_eq!(explained("gpu-b-02", &input).connectivity.as_deref(), Some("offline"));
}

#[test]
fn a_converged_host_is_on_target_and_others_are_not() {
    let mut input = input();
    tick(&mut input);
    tick(&mut input);
    let x = explained("infra-01", &input);
    let rollout = x.rollout.clone().expect("opened");
    assert_eq!(rollout.state, "Active");
    assert!(!x.on_target, "{x:?}");
    let id = RolloutId::parse("infra@c0ffee").expect("id");
    let r = input.rollouts.get_mut(&id).expect("rollout");
    r.hosts.insert("infra-01".into(), HostProgress { state: HostRolloutState::Converged, since: time(NOW), intent: None });
    let x = explained("infra-01", &input);
    assert!(x.on_target && x.verdict.starts_with("on target: Converged in infra@c0ffee"), "{}", x.verdict);
    let json = serde_json::to_value(&x).expect("json");
    assert_eq!(json["onTarget"], true);
    assert_eq!(json["rollout"]["hostState"], "Converged");
    assert_eq!(json["target"]["rolloutId"], "infra@c0ffee");
}

#[test]
fn a_host_in_no_channel_says_so() {
    let x = explained("stranger", &input());
    assert!(x.channel.is_none() && x.target.is_none() && !x.on_target);
    assert!(x.verdict.contains("in no channel of release 1"), "{}", x.verdict);
    assert!(render(&x).contains("Channel:     -\n"));
}

#[test]
fn a_skipped_host_says_why_from_the_event_that_skipped_it() {
    let ev = |id: i64, rollout: &str, transition: &str, reason: &str| {
        let v = serde_json::json!({"id": id, "at": format!("2025-01-01T00:0{id}:00Z"), "kind": "rollout.host", "rolloutId": rollout,
            "message": reason, "data": {"transition": transition, "reason": reason}});
        crate::answer::decode("/v1/events", &v).expect("an event")
    };
    let events: Vec<drover_proto::api::events::EventView> = vec![
        ev(1, "infra@c0ffee", "Pending -> Skipped", "offline when wave 0 ran"),
        ev(2, "infra@c0ffee", "Skipped -> Dispatched", "back online; wave 0 dispatch, budgets permit"),
        ev(3, "infra@c0ffee", "Dispatched -> Skipped", "offline when wave 0 ran again"),
        ev(4, "infra@beef", "Pending -> Skipped", "another rollout's skip"),
        ev(5, "infra@c0ffee", "Pending -> Dispatched", "wave 0 active; budgets permit"),
    ];
    // The latest skip of this rollout, not another rollout's and not a later non-skip.
    assert_eq!(skip_reason(&events, "infra@c0ffee"), "offline when wave 0 ran again (at 2025-01-01T00:03:00Z, event 3)");
    assert_eq!(skip_reason(&events[..2], "infra@beef"), "no event records why (the events may have been pruned)");

    let mut input = input();
    tick(&mut input);
    tick(&mut input);
    let id = RolloutId::parse("infra@c0ffee").expect("id");
    let r = input.rollouts.get_mut(&id).expect("rollout");
    r.hosts.insert("infra-01".into(), HostProgress { state: HostRolloutState::Skipped, since: time(NOW), intent: None });
    let mut x = explained("infra-01", &input);
    assert_eq!(x.rollout.as_ref().map(|r| r.host_state.as_str()), Some("Skipped"));
    let plain = render(&x);
    assert!(!plain.contains("Skipped:"), "{plain}");
    x.skipped = Some(skip_reason(&events, "infra@c0ffee"));
    x.waits.clear();
    let text = render(&x);
    assert!(text.contains("Skipped:     offline when wave 0 ran again (at 2025-01-01T00:03:00Z, event 3)\n"), "{text}");
    assert!(!text.contains("the planner reports no wait"), "{text}");
    assert_eq!(serde_json::to_value(&x).expect("json")["skipped"], "offline when wave 0 ran again (at 2025-01-01T00:03:00Z, event 3)");
}
