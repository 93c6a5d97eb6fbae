//! The rollout executor end to end: a real coordinator (real TLS 1.3, real SQLite), a signed
//! release published through the API, and simulated agents speaking the real protocol and
//! running the agent's own admission code. Ticks are driven by hand against a manual clock,
//! so soak times pass without waiting.

use std::collections::BTreeMap;
use std::sync::Arc;

use drover_engine::app::Clock as _;
use drover_engine::store::{AuditFilter, EventFilter, Store};
use drover_proto::keys::KeySigner;
use drover_proto::names::RolloutId;
use drover_proto::publish::PublishRequest;
use drover_proto::release::{ReleaseFiles, ReleaseParams, build_release};
use drover_proto::resolve::ReleaseMeta;
use drover_proto::spec::FleetSpec;
use drover_proto::states::{HostRolloutState, RolloutState};
use drover_proto::time::Time;
use drover_tests::Harness;
use drover_tests::sim_agent::{Behaviour, SimAgent};
use ed25519_dalek::SigningKey;

const FLEET: &[u8] = include_bytes!("../../../examples/fleet.json");

fn release(spec: &[u8], created_at: Time, version: u64, commit: &str) -> ReleaseFiles {
    let spec = FleetSpec::from_json(spec).expect("spec");
    let params = ReleaseParams { meta: ReleaseMeta { ci_commit: commit.into(), created_at }, version, previous: None };
    build_release(&spec, &params, &[KeySigner::new(SigningKey::from_bytes(&[9u8; 32]))]).expect("release")
}

async fn publish(h: &Harness, files: &ReleaseFiles) {
    let body = serde_json::to_string(&PublishRequest::from_files(files, Some("test".into())).expect("utf-8")).expect("json");
    let (code, text) = h.call(Some(&h.admin), "POST", "/v1/releases", Some(&body)).await;
    assert_eq!(code, "201", "{text}");
}

/// Every host of the example fleet as a simulated agent, its host enrolled (`enrolling`).
fn agents(h: &Harness, behaviour: impl Fn(&str) -> Behaviour) -> Vec<SimAgent> {
    let spec: serde_json::Value = serde_json::from_slice(FLEET).expect("json");
    let names: Vec<String> = spec["hosts"].as_object().expect("hosts").keys().cloned().collect();
    h.sim_agents(&names, behaviour)
}

/// Every agent checks in once, concurrently.
async fn step_all(h: &Harness, agents: Vec<SimAgent>) -> (Vec<SimAgent>, usize) {
    drover_tests::sim_agent::step_all(agents, h.clock.now()).await
}

fn rollout_states(store: &Arc<dyn Store>) -> BTreeMap<String, RolloutState> {
    store.list_rollouts(&Default::default()).expect("rollouts").into_iter().map(|r| (r.rollout_id.to_string(), r.state)).collect()
}

/// Drives agents and ticks until `done` holds over the rollouts' states, advancing the clock
/// by `step_secs` whenever a round changes nothing. Bounded.
async fn drive(
    h: &Harness,
    mut agents: Vec<SimAgent>,
    step_secs: i64,
    done: impl Fn(&BTreeMap<String, RolloutState>) -> bool,
) -> Vec<SimAgent> {
    let app = h.running.app.clone();
    for round in 0..200 {
        let (next, handled) = step_all(h, agents).await;
        agents = next;
        let out = app.executor.tick_now(&app).await.unwrap_or_else(|e| panic!("tick failed in round {round}: {e}"));
        if done(&rollout_states(&app.store)) {
            return agents;
        }
        if handled == 0 && out.plan.actions.is_empty() {
            h.clock.advance(step_secs);
        }
    }
    panic!("not done after 200 rounds: {:?}", rollout_states(&app.store));
}

/// Every host of the example fleet, healthy and running an older system (so re-applying the
/// channel's target is real work), checked in once.
async fn on_old_systems(h: &Harness) -> Vec<SimAgent> {
    let agents: Vec<SimAgent> = agents(h, |_| Behaviour::Healthy)
        .into_iter()
        .map(|a| {
            let old = format!("/nix/store/{:0>32}-nixos-system-{}-old", 0, a.hostname);
            a.running(&old)
        })
        .collect();
    step_all(h, agents).await.0
}

fn all_converged(states: &BTreeMap<String, RolloutState>) -> bool {
    states.len() == 2 && states.values().all(|s| *s == RolloutState::Converged)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rollout_converges_wave_by_wave_through_the_executor() {
    let h = Harness::start_with_long_poll(1).await;
    let agents = agents(&h, |_| Behaviour::Healthy);
    let files = release(FLEET, h.clock.now(), 1, "c0ffee");
    publish(&h, &files).await;
    let agents = drive(&h, agents, 300, all_converged).await;
    let app = h.running.app.clone();

    // Every host got exactly one intent, for its channel's rollout, with its manifest target.
    let spec: serde_json::Value = serde_json::from_slice(FLEET).expect("json");
    for a in &agents {
        assert!(a.refused.is_empty(), "{}: the agent's admission refused an intent: {:?}", a.hostname, a.refused);
        let host = &spec["hosts"][&a.hostname];
        assert_eq!(a.handled.len(), 1, "{}: {:?}", a.hostname, a.handled);
        let want = RolloutId::new(host["channel"].as_str().expect("channel"), "c0ffee").expect("id");
        assert_eq!(a.handled[0].rollout_id, want.to_string());
        assert_eq!(a.handled[0].target, host["closure"].as_str().expect("closure"));
        assert!(a.handled[0].confirmed);
    }
    let gpu = RolloutId::new("gpu", "c0ffee").expect("id");
    let hosts = app.store.list_host_rollouts(&gpu).expect("hosts");
    assert_eq!(hosts.len(), 4);
    assert!(hosts.iter().all(|h| h.state == HostRolloutState::Converged), "{hosts:?}");

    // One event per transition, in RFC-0002 §7's shape, with the budgets of the rollout.
    let events =
        app.store.list_events(&EventFilter { kind: Some("rollout.host".into()), limit: 500, ..Default::default() }).expect("events");
    // A dispatch is any move into Activating: from Pending, or from Skipped when a loaded
    // machine let a host's check-ins lapse past the offline sweep while its wave ran.
    let dispatches: Vec<_> =
        events.iter().filter(|e| e.event.data["transition"].as_str().is_some_and(|t| t.ends_with("-> Activating"))).collect();
    let transitions: Vec<_> = events.iter().map(|e| e.event.data["transition"].to_string()).collect();
    assert_eq!(dispatches.len(), 5, "one dispatch per host: {transitions:?}");
    for e in &events {
        let d = &e.event.data;
        for key in ["ts", "rollout", "wave", "host", "transition", "reason", "budgets"] {
            assert!(d.get(key).is_some(), "event lacks {key}: {d}");
        }
    }
    let canary = dispatches.iter().find(|e| e.event.data["host"] == "gpu-a-01").expect("canary dispatched");
    assert_eq!(canary.event.data["wave"], 0);
    assert!(canary.event.data["budgets"]["gpu"].as_str().is_some_and(|b| b.ends_with("in flight")), "{}", canary.event.data);

    // Order: the channel edge held gpu until infra converged; waves in order; the host edge
    // gpu-b-01 → gpu-b-02.
    let at = |host: &str, transition: &str| {
        events
            .iter()
            .find(|e| e.event.data["host"] == host && e.event.data["transition"].as_str().is_some_and(|t| t.ends_with(transition)))
            .map(|e| e.id)
            .unwrap_or_else(|| panic!("no {transition} event for {host}"))
    };
    assert!(at("infra-01", "Soaking -> Converged") < at("gpu-a-01", "-> Activating"), "channel edge infra → gpu");
    assert!(at("gpu-a-01", "Soaking -> Converged") < at("gpu-a-02", "-> Activating"), "wave 0 before wave 1");
    assert!(at("gpu-b-01", "Soaking -> Converged") < at("gpu-b-02", "-> Activating"), "host edge");
    let deferred = app.store.list_events(&EventFilter { kind: Some("rollout.deferred".into()), ..Default::default() }).expect("events");
    assert_eq!(deferred.len(), 1, "RolloutDeferred once per change, not per tick");

    // Re-planning the converged fleet decides nothing.
    let again = app.executor.tick_now(&app).await.expect("tick");
    assert!(again.plan.actions.is_empty(), "{:?}", again.plan.actions);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failing_health_gate_halts_and_operator_actions_are_audited() {
    let h = Harness::start_with_long_poll(1).await;
    let agents = agents(&h, |name| if name == "gpu-a-01" { Behaviour::FailsProbes } else { Behaviour::Healthy });
    publish(&h, &release(FLEET, h.clock.now(), 1, "c0ffee")).await;
    let gpu = RolloutId::new("gpu", "c0ffee").expect("id");
    let key = gpu.to_string();
    let _agents = drive(&h, agents, 300, |s| s.get(&key) == Some(&RolloutState::Halted)).await;
    let app = h.running.app.clone();
    // No revertable rollout in the first release: rollback-and-halt halts.
    let halted = app.store.list_events(&EventFilter {
        rollout_id: Some(gpu.clone()),
        kind: Some("rollout.transition".into()),
        ..Default::default()
    });
    let halted = halted.expect("events");
    assert!(
        halted.iter().any(|e| e.event.message.contains("health gate") && e.event.data["transition"] == "Active -> Halted"),
        "{halted:?}"
    );
    let hosts = app.store.list_host_rollouts(&gpu).expect("hosts");
    assert!(hosts.iter().all(|h| h.hostname == "gpu-a-01" || h.state == HostRolloutState::Pending), "nothing past the canary: {hosts:?}");

    // A viewer cannot act; a missing reason is refused; the admin can, and is audited.
    let path = format!("/v1/rollouts/{gpu}/cancel");
    let (code, _) = h.call(Some(&h.viewer), "POST", &path, Some(r#"{"reason":"x"}"#)).await;
    assert_eq!(code, "403");
    let (code, _) = h.call(Some(&h.admin), "POST", &path, Some("{}")).await;
    assert_eq!(code, "400");
    let (code, text) = h.call(Some(&h.admin), "POST", &format!("/v1/rollouts/{gpu}/halt"), Some(r#"{"reason":"again"}"#)).await;
    assert_eq!(code, "409", "halting a halted rollout is refused: {text}");
    let (code, text) = h.call(Some(&h.admin), "POST", "/v1/rollouts/not-an-id/halt", Some(r#"{"reason":"x"}"#)).await;
    assert_eq!(code, "400", "{text}");
    let (code, text) = h.call(Some(&h.admin), "POST", "/v1/rollouts/gpu@nosuch/halt", Some(r#"{"reason":"x"}"#)).await;
    assert_eq!(code, "404", "{text}");
    let (code, text) = h.call(Some(&h.admin), "POST", &path, Some(r#"{"reason":"bad canary"}"#)).await;
    assert_eq!(code, "200", "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(v["state"], "Cancelled");
    let audit = app.store.list_audit(&AuditFilter::default()).expect("audit");
    let a = audit.iter().find(|a| a.audit.action == "rollout.cancel").expect("audited");
    assert_eq!((a.audit.actor.as_str(), a.audit.reason.as_str()), ("alice", "bad canary"));
    assert_eq!((a.audit.prior_state.as_deref(), a.audit.expected_state.as_deref()), (Some("Halted"), Some("Cancelled")));
    // The executor leaves a cancelled rollout alone.
    let out = app.executor.tick_now(&app).await.expect("tick");
    assert!(out.plan.actions.iter().all(|a| !format!("{a:?}").contains("gpu@c0ffee")), "{:?}", out.plan.actions);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stale_timestamp_stops_new_dispatch_and_alerts_once_per_channel() {
    let h = Harness::start_with_long_poll(1).await;
    let agents = agents(&h, |_| Behaviour::Healthy);
    let files = release(FLEET, h.clock.now(), 1, "c0ffee");
    publish(&h, &files).await;
    let app = h.running.app.clone();
    let count = |kind: &'static str, transition: Option<&'static str>| {
        let events = app.store.list_events(&EventFilter { kind: Some(kind.into()), limit: 500, ..Default::default() }).expect("events");
        events.iter().filter(|e| transition.is_none_or(|t| e.event.data["transition"] == t)).count()
    };
    // CI stops re-signing: the timestamp (freshness window one day) goes stale before any
    // host is online to be dispatched.
    h.clock.advance(2 * 86_400);
    let dispatched = count("rollout.host", Some("Pending -> Activating"));
    let mut agents = agents;
    for _ in 0..3 {
        let out = app.executor.tick_now(&app).await.expect("a stale release is reported, not an error");
        assert!(out.plan.actions.iter().all(|a| !matches!(a, drover_planner::Action::Dispatch { .. })), "{:?}", out.plan.actions);
        (agents, _) = step_all(&h, agents).await;
    }
    assert_eq!(count("rollout.host", Some("Pending -> Activating")), dispatched, "nothing new dispatched while stale");
    assert_eq!(count("alert.release_stale", None), 2, "one alert per channel, not one per tick");
    let out = app.executor.tick_now(&app).await.expect("tick");
    assert!(out.plan.report.iter().any(|w| matches!(w.why, drover_planner::WaitReason::Stale { .. })), "{:?}", out.plan.report);

    // CI re-signs the timestamp (same artifacts): the rollout goes on.
    let mut files = files;
    let ci = [KeySigner::new(SigningKey::from_bytes(&[9u8; 32]))];
    drover_proto::release::resign_timestamp(&mut files, None, h.clock.now(), &ci).expect("re-sign");
    publish(&h, &files).await;
    let _agents = drive(&h, agents, 300, all_converged).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rollback_and_halt_sends_touched_hosts_back_to_the_revertable_rollout() {
    let h = Harness::start_with_long_poll(1).await;
    let agents = agents(&h, |_| Behaviour::Healthy);
    let first = release(FLEET, h.clock.now(), 1, "c0ffee");
    publish(&h, &first).await;
    let mut agents = drive(&h, agents, 300, all_converged).await;

    // The next commit changes every closure; its canary fails the required probe.
    let spec = String::from_utf8(FLEET.to_vec()).expect("utf-8").replace("-25.05\"", "-25.11\"");
    let previous: drover_proto::artifacts::TimestampDoc =
        serde_json::from_slice(first.get(drover_proto::release::TIMESTAMP).expect("timestamp")).expect("timestamp doc");
    let params =
        ReleaseParams { meta: ReleaseMeta { ci_commit: "d00d".into(), created_at: h.clock.now() }, version: 2, previous: Some(previous) };
    let ci = [KeySigner::new(SigningKey::from_bytes(&[9u8; 32]))];
    let second = build_release(&FleetSpec::from_json(spec.as_bytes()).expect("spec"), &params, &ci).expect("release");
    for a in agents.iter_mut().filter(|a| a.hostname == "gpu-a-01") {
        a.behaviour = Behaviour::FailsProbes;
    }
    publish(&h, &second).await;
    let agents = drive(&h, agents, 300, |s| s.get("gpu@d00d") == Some(&RolloutState::Reverted)).await;

    let canary = agents.iter().find(|a| a.hostname == "gpu-a-01").expect("canary");
    let seen: Vec<(&str, &str)> = canary.handled.iter().map(|i| (i.rollout_id.as_str(), i.target.as_str())).collect();
    let old = "/nix/store/6cp643dzvlxxpkgbg5kzmwj47sam9zs2-nixos-system-gpu-a-01-25.05";
    let new = "/nix/store/6cp643dzvlxxpkgbg5kzmwj47sam9zs2-nixos-system-gpu-a-01-25.11";
    assert_eq!(
        seen,
        vec![("gpu@c0ffee", old), ("gpu@d00d", new), ("gpu@c0ffee", old)],
        "dispatched, then reverted to the revertable rollout"
    );
    assert!(canary.refused.is_empty(), "the agent's admission accepted the rollback intent: {:?}", canary.refused);
    for a in agents.iter().filter(|a| a.hostname.starts_with("gpu-") && a.hostname != "gpu-a-01") {
        assert_eq!(a.handled.len(), 1, "{} never left the old rollout: {:?}", a.hostname, a.handled);
    }
    let app = h.running.app.clone();
    let gpu = RolloutId::new("gpu", "d00d").expect("id");
    let transitions: Vec<String> = app
        .store
        .list_events(&EventFilter { rollout_id: Some(gpu.clone()), kind: Some("rollout.transition".into()), ..Default::default() })
        .expect("events")
        .into_iter()
        .map(|e| e.event.data["transition"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(transitions, ["Opening -> Active", "Active -> Reverting", "Reverting -> Reverted"]);
    let hosts = app.store.list_host_rollouts(&gpu).expect("hosts");
    let a01 = hosts.iter().find(|h| h.hostname == "gpu-a-01").expect("canary row");
    assert_eq!((a01.state, a01.intent_target.as_deref()), (HostRolloutState::Reverted, Some(old)));
}

/// Polls `done` every 20 ms for at most 10 s.
async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executor_runs_on_events_and_collapses_a_burst_into_one_tick() {
    // The periodic tick is far away (30 s): whatever happens here is event-driven.
    let h = Harness::start_with_long_poll(1).await;
    let app = h.running.app.clone();
    eventually("the start-up tick", || app.executor.ticks() >= 1).await;
    let _agents = agents(&h, |_| Behaviour::Healthy);
    publish(&h, &release(FLEET, h.clock.now(), 1, "c0ffee")).await;
    // Publishing is an event: the executor opens the rollouts without being asked.
    eventually("the rollouts opened by the publish event", || !rollout_states(&app.store).is_empty()).await;
    // That tick is counted once it has finished (start-up tick + publish tick).
    eventually("the publish tick to finish", || app.executor.ticks() >= 2).await;

    let before = app.executor.ticks();
    for _ in 0..100 {
        app.executor.poke();
    }
    eventually("a tick after the burst", || app.executor.ticks() > before).await;
    // Only the absence of a second tick is left to show: give it two debounce windows.
    tokio::time::sleep(std::time::Duration::from_millis(2 * app.config.rollouts.debounce_ms)).await;
    assert_eq!(app.executor.ticks(), before + 1, "100 triggers inside the debounce window are one tick");
    assert_eq!(app.executor.failures(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_that_stops_verifying_aborts_ticks_with_one_alert() {
    // The CI key is trusted for one day only.
    let h = Harness::start_with_config(|dir, config| {
        let ci = SigningKey::from_bytes(&[9u8; 32]).verifying_key();
        let doc = serde_json::json!({ "schemaVersion": 1, "ci": { "threshold": 1, "keys": [{
            "keyId": drover_proto::keys::KeyId::of(&ci).to_string(), "alg": "ed25519",
            "publicKey": drover_proto::keys::verifying_key_to_pem(&ci).expect("pem"),
            "notAfter": drover_tests::wall_now().plus_secs(86_400) }] } });
        let path = dir.join("short-trust.json");
        std::fs::write(&path, doc.to_string()).expect("write");
        config.trust_file = path;
        config.agent.long_poll_secs = 1;
    })
    .await;
    let app = h.running.app.clone();
    publish(&h, &release(FLEET, h.clock.now(), 1, "c0ffee")).await;
    app.executor.tick_now(&app).await.expect("the release verifies today");
    h.clock.advance(2 * 86_400);
    for _ in 0..3 {
        let err = app.executor.tick_now(&app).await.expect_err("the key has expired");
        assert!(matches!(err, drover_engine::executor::ExecutorError::Release { .. }), "{err}");
    }
    let alerts =
        app.store.list_events(&EventFilter { kind: Some("alert.release_unverified".into()), ..Default::default() }).expect("events");
    assert_eq!(alerts.len(), 1, "one alert, not one per tick: {alerts:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ticks_over_an_unchanged_release_verify_it_once() {
    let h = Harness::start_with_long_poll(1).await;
    let app = h.running.app.clone();
    let verifications = || app.latest_release.verifications();
    publish(&h, &release(FLEET, h.clock.now(), 1, "c0ffee")).await;
    app.executor.tick_now(&app).await.expect("tick");
    let after_first = verifications();
    assert!(after_first >= 1, "the first tick over a release verifies it");
    for _ in 0..5 {
        h.clock.advance(60);
        app.executor.tick_now(&app).await.expect("tick");
        // The job tick's fleet view, the rack controller's and maintenance requests' and
        // `/readyz`'s check all read the same cache: none of them verifies again.
        let view = drover_engine::jobs::exec::FleetView::load(&app).await;
        assert!(!view.targets.is_empty(), "the fleet view comes from the verified release");
        let previous = app.readiness.verdict();
        let verdict = drover_engine::readiness::check(&app, &previous);
        assert!(matches!(verdict.release, drover_engine::readiness::ReleaseHealth::Verified { version: 1, .. }), "{:?}", verdict.release);
    }
    assert_eq!(verifications(), after_first, "nothing changed: the release is neither read nor verified again, by any reader");
    publish(&h, &release(FLEET, h.clock.now(), 2, "c0ffee2")).await;
    app.executor.tick_now(&app).await.expect("tick");
    assert_eq!(verifications(), after_first + 1, "a new release is verified once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn host_offline_during_the_rollout_gets_the_current_target_when_it_returns() {
    let h = Harness::start_with_long_poll(1).await;
    let agents = agents(&h, |name| if name == "gpu-a-02" { Behaviour::Offline } else { Behaviour::Healthy });
    publish(&h, &release(FLEET, h.clock.now(), 1, "c0ffee")).await;
    // The rollout does not wait for the silent host: it is Skipped, and the rollout converges.
    let mut agents = drive(&h, agents, 300, all_converged).await;
    let app = h.running.app.clone();
    let gpu = RolloutId::new("gpu", "c0ffee").expect("id");
    let state_of =
        |host: &str| app.store.list_host_rollouts(&gpu).expect("hosts").into_iter().find(|r| r.hostname == host).map(|r| r.state);
    assert_eq!(state_of("gpu-a-02"), Some(HostRolloutState::Skipped));

    // It comes back: the converged rollout dispatches the channel's current target to it.
    for a in agents.iter_mut().filter(|a| a.hostname == "gpu-a-02") {
        a.behaviour = Behaviour::Healthy;
    }
    for _ in 0..40 {
        (agents, _) = step_all(&h, agents).await;
        let out = app.executor.tick_now(&app).await.expect("tick");
        if state_of("gpu-a-02") == Some(HostRolloutState::Converged) {
            break;
        }
        if out.plan.actions.is_empty() {
            h.clock.advance(300);
        }
    }
    assert_eq!(state_of("gpu-a-02"), Some(HostRolloutState::Converged));
    let returned = agents.iter().find(|a| a.hostname == "gpu-a-02").expect("agent");
    assert_eq!(returned.handled.len(), 1);
    assert_eq!(returned.handled[0].rollout_id, "gpu@c0ffee");
    assert_eq!(rollout_states(&app.store).get("gpu@c0ffee"), Some(&RolloutState::Converged), "the rollout stays converged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn maintenance_and_a_rollout_on_the_same_hosts_never_exceed_a_budget_together() {
    let h = Harness::start_with_long_poll(1).await;
    let mut agents = on_old_systems(&h).await;
    let files = release(FLEET, h.clock.now(), 1, "c0ffee");
    publish(&h, &files).await;
    let fleet: drover_proto::artifacts::FleetResolved =
        serde_json::from_slice(files.get("fleet.resolved.json").expect("fleet")).expect("fleet json");
    assert!(!fleet.disruption_budgets.is_empty());
    // Maintenance on every gpu host, re-applying their target, while the rollout runs.
    let body = serde_json::json!({ "group": "gpu", "activities": ["activate"], "reason": "re-apply after repair" }).to_string();
    let (code, text) = h.call(Some(&h.admin), "POST", "/v1/maintenance", Some(&body)).await;
    assert_eq!(code, "201", "{text}");
    let app = h.running.app.clone();
    let mut max_seen = 0;
    for round in 0..300 {
        let (next, handled) = step_all(&h, agents).await;
        agents = next;
        let out = app.executor.tick_now(&app).await.unwrap_or_else(|e| panic!("tick failed in round {round}: {e}"));
        // The invariant, after every tick: no budget has more hosts out of service than it allows.
        let now_out = drover_tests::sim_agent::disrupted(app.store.as_ref());
        for b in &fleet.disruption_budgets {
            let n = b.hosts.iter().filter(|x| now_out.contains(*x)).count();
            max_seen = max_seen.max(n);
            assert!(
                n <= b.allowed(),
                "round {round}: {n} hosts of budget {:?} out of service (allowed {}): {now_out:?}",
                b.selector,
                b.allowed()
            );
        }
        let jobs = app.store.list_jobs(&Default::default()).expect("jobs");
        let jobs_done = jobs.iter().all(|j| j.state == drover_proto::states::JobState::Completed);
        if jobs_done && all_converged(&rollout_states(&app.store)) {
            assert_eq!(jobs.len(), 4);
            assert!(max_seen >= 1, "hosts were taken out of service under the budgets: {max_seen}");
            return;
        }
        if handled == 0 && out.plan.actions.is_empty() {
            h.clock.advance(300);
        }
    }
    let jobs: Vec<_> = app.store.list_jobs(&Default::default()).expect("jobs").into_iter().map(|j| (j.state, j.progress)).collect();
    panic!("not done after 300 rounds: {:?} {jobs:?}", rollout_states(&app.store));
}

/// One budget for all disruption: a rack's maintenance cycle and a rollout on the
/// same hosts. The rack request waits, saying which budget, while the rollout has hosts of it
/// in flight; once the cycle runs, its machines are held — counted against the budget and not
/// dispatched — and after every tick no budget has more hosts out of service than it allows.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rack_maintenance_and_a_rollout_share_one_budget() {
    let h = Harness::start_with_long_poll(1).await;
    let mut agents = on_old_systems(&h).await;
    let app = h.running.app.clone();
    let admin = |method: &'static str, path: String, body: serde_json::Value| {
        let h = &h;
        async move { h.call(Some(&h.admin), method, &path, Some(&body.to_string())).await }
    };
    assert_eq!(admin("POST", "/v1/racks".into(), serde_json::json!({ "name": "r1", "hardwareType": "hgx", "reason": "t" })).await.0, "201");
    let mut machines = Vec::new();
    for name in ["gpu-a-01", "gpu-b-01"] {
        let host = app.store.get_host_by_hostname(name).expect("store").expect("host");
        let (code, text) = admin("POST", format!("/v1/hosts/{}/rack", host.id), serde_json::json!({ "rack": "r1", "reason": "t" })).await;
        assert_eq!(code, "200", "{text}");
        machines.push(host.id.to_string());
    }
    let files = release(FLEET, h.clock.now(), 1, "c0ffee");
    publish(&h, &files).await;
    let fleet: drover_proto::artifacts::FleetResolved =
        serde_json::from_slice(files.get("fleet.resolved.json").expect("fleet")).expect("fleet json");
    let out_of_service = |store: &dyn Store| {
        let mut out = drover_tests::sim_agent::disrupted(store);
        for id in store.plan_snapshot().expect("snapshot").held.keys() {
            out.insert(store.get_host(*id).expect("store").expect("host").hostname);
        }
        out
    };
    let mut requested = false;
    for round in 0..300 {
        let (next, handled) = step_all(&h, agents).await;
        agents = next;
        let out = app.executor.tick_now(&app).await.unwrap_or_else(|e| panic!("tick failed in round {round}: {e}"));
        let now_out = out_of_service(app.store.as_ref());
        for b in &fleet.disruption_budgets {
            let n = b.hosts.iter().filter(|x| now_out.contains(*x)).count();
            assert!(
                n <= b.allowed(),
                "round {round}: {n} hosts of budget {:?} out of service (allowed {}): {now_out:?}",
                b.selector,
                b.allowed()
            );
        }
        // Ask for the rack's maintenance while the rollout has another gpu host in flight.
        if !requested && drover_tests::sim_agent::disrupted(app.store.as_ref()).iter().any(|x| x == "gpu-a-02" || x == "gpu-b-02") {
            let body = serde_json::json!({ "machineIds": machines, "activities": [{ "activity": "configure_nmx_cluster" }] });
            let (code, text) = admin("POST", "/v1/racks/r1/maintenance".into(), body).await;
            assert_eq!(code, "202", "{text}");
            requested = true;
        }
        let rack = app.store.list_racks().expect("racks").into_iter().next().expect("rack");
        let cycles = app.store.list_events(&EventFilter { kind: Some("rack.transition".into()), ..Default::default() }).expect("events");
        let finished = cycles.iter().any(|e| e.event.message.contains("validation passed"));
        if requested && finished && rack.maintenance.is_none() && all_converged(&rollout_states(&app.store)) {
            let waited = app
                .store
                .list_events(&EventFilter { kind: Some("rack.maintenance.progress".into()), ..Default::default() })
                .expect("events")
                .into_iter()
                .any(|e| e.event.message.contains("waits for a disruption-budget slot: budget"));
            assert!(waited, "the rack request waited on a budget the rollout was using");
            return;
        }
        if handled == 0 && out.plan.actions.is_empty() {
            h.clock.advance(300);
        }
        // The rack controller runs on its own tick: give it a moment between rounds.
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("not done after 300 rounds: {:?} rack {:?}", rollout_states(&app.store), app.store.list_racks().expect("racks"));
}

/// A host whose agent still reports a rolled-back activation of an intent this coordinator
/// never issued — for the very rollout and target it is about to be dispatched, as after a
/// store restored from an older backup — is not failed by that stale report: only an
/// activation of the host's current intent speaks for a dispatch.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rolled_back_activation_of_an_intent_never_issued_does_not_fail_the_dispatch() {
    let h = Harness::start_with_long_poll(1).await;
    let spec: serde_json::Value = serde_json::from_slice(FLEET).expect("json");
    let target = spec["hosts"]["gpu-a-01"]["closure"].as_str().expect("closure").to_owned();
    let stale = drover_proto::report::ActivationStatus {
        intent_id: uuid::Uuid::new_v4().to_string(),
        rollout_id: RolloutId::new("gpu", "c0ffee").expect("id"),
        target_closure: target.clone(),
        phase: drover_proto::report::ActivationPhase::RolledBack,
        message: "confirmation answered 410".into(),
    };
    let agents: Vec<SimAgent> = agents(&h, |_| Behaviour::Healthy)
        .into_iter()
        .map(|a| if a.hostname == "gpu-a-01" { a.remembering(stale.clone()) } else { a })
        .collect();
    // The stale report reaches the coordinator before the rollout exists.
    let (agents, _) = step_all(&h, agents).await;
    publish(&h, &release(FLEET, h.clock.now(), 1, "c0ffee")).await;
    // Done when converged, or halted (what a failed canary does).
    let settled = |s: &BTreeMap<String, RolloutState>| all_converged(s) || s.values().any(|r| *r == RolloutState::Halted);
    let agents = drive(&h, agents, 300, settled).await;

    let app = h.running.app.clone();
    let gpu = RolloutId::new("gpu", "c0ffee").expect("id");
    let canary = app.store.list_host_rollouts(&gpu).expect("hosts").into_iter().find(|r| r.hostname == "gpu-a-01").expect("canary");
    assert_eq!(canary.state, HostRolloutState::Converged);
    let agent = agents.iter().find(|a| a.hostname == "gpu-a-01").expect("agent");
    assert_eq!(agent.handled.len(), 1, "dispatched once: {:?}", agent.handled);
    assert_eq!((agent.handled[0].target.as_str(), agent.handled[0].confirmed), (target.as_str(), true));
}
