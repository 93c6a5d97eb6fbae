//! Budget pacing at fleet scale through the real executor: 200 hosts under one disruption
//! budget of `maxInFlightPct: 10` (20 hosts), a maintenance request over all of them and a
//! rollout of the same hosts running at the same time. Simulated agents speak the real
//! protocol and run the agent's own admission rules on every intent and task (the work
//! itself is instant). After every executor tick the hosts out of service — in flight in the
//! rollout or held by a started job — never exceed the budget; the request works through the
//! hosts a batch at a time; every job completes on its task's result and every host converges.

use drover_engine::app::Clock as _;
use drover_proto::keys::KeySigner;
use drover_proto::publish::PublishRequest;
use drover_proto::release::{ReleaseParams, build_release};
use drover_proto::resolve::ReleaseMeta;
use drover_proto::spec::FleetSpec;
use drover_proto::states::{JobState, RolloutState};
use drover_tests::Harness;
use drover_tests::sim_agent::{Behaviour, disrupted, step_all};
use ed25519_dalek::SigningKey;
use serde_json::json;

const HOSTS: usize = 200;

fn hostname(i: usize) -> String {
    format!("gpu-{i:03}")
}

/// 200 gpu hosts in ten racks, one channel rolled in one wave, one budget of 10 %.
fn spec() -> Vec<u8> {
    let hosts: serde_json::Map<String, serde_json::Value> = (0..HOSTS)
        .map(|i| {
            let closure = format!("/nix/store/{i:0>32}-nixos-system-{}-25.05", hostname(i));
            (
                hostname(i),
                json!({ "system": "x86_64-linux", "tags": ["gpu", format!("rack-{:02}", i / 20)], "channel": "gpu", "closure": closure }),
            )
        })
        .collect();
    serde_json::to_vec(&json!({
        "hosts": hosts,
        "channels": { "gpu": { "rolloutPolicy": "one-wave", "freshnessWindowSecs": "1d", "signingIntervalSecs": "4h" } },
        "rolloutPolicies": { "one-wave": { "waves": [ { "selector": { "all": true }, "soakSecs": 0 } ] } },
        "disruptionBudgets": [ { "selector": { "tags": ["gpu"] }, "maxInFlightPct": 10 } ]
    }))
    .expect("spec")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_request_over_200_hosts_works_through_them_ten_percent_at_a_time_beside_a_rollout() {
    let h = Harness::start_with_long_poll(1).await;
    let names: Vec<String> = (0..HOSTS).map(hostname).collect();
    let agents = h.sim_agents(&names, |_| Behaviour::Healthy);
    let (mut agents, _) = step_all(agents, h.clock.now()).await;

    let spec = FleetSpec::from_json(&spec()).expect("spec");
    let params = ReleaseParams { meta: ReleaseMeta { ci_commit: "5ca1e".into(), created_at: h.clock.now() }, version: 1, previous: None };
    let files = build_release(&spec, &params, &[KeySigner::new(SigningKey::from_bytes(&[9u8; 32]))]).expect("release");
    let body = serde_json::to_string(&PublishRequest::from_files(&files, Some("test".into())).expect("utf-8")).expect("json");
    let (code, text) = h.call(Some(&h.admin), "POST", "/v1/releases", Some(&body)).await;
    assert_eq!(code, "201", "{text}");
    let body = json!({ "group": "gpu", "activities": ["validate_clean"], "reason": "quarterly validation" }).to_string();
    let (code, text) = h.call(Some(&h.admin), "POST", "/v1/maintenance", Some(&body)).await;
    assert_eq!(code, "201", "{text}");

    let app = h.running.app.clone();
    let (mut max_out, mut max_jobs, mut batches_seen) = (0, 0, std::collections::BTreeSet::new());
    for round in 0..600 {
        let (next, handled) = step_all(agents, h.clock.now()).await;
        agents = next;
        let out = app.executor.tick_now(&app).await.unwrap_or_else(|e| panic!("tick failed in round {round}: {e}"));
        let now_out = disrupted(app.store.as_ref());
        assert!(now_out.len() <= HOSTS / 10, "round {round}: {} hosts out of service under a budget of 20", now_out.len());
        max_out = max_out.max(now_out.len());
        let jobs = app.store.list_jobs(&Default::default()).expect("jobs");
        let started = jobs.iter().filter(|j| !matches!(j.state, JobState::Pending) && !j.state.is_terminal()).count();
        max_jobs = max_jobs.max(started);
        batches_seen.insert(jobs.iter().filter(|j| j.state == JobState::Completed).count() / 20);
        let rollouts = app.store.list_rollouts(&Default::default()).expect("rollouts");
        let converged = rollouts.len() == 1 && rollouts[0].state == RolloutState::Converged;
        if converged && jobs.iter().all(|j| j.state == JobState::Completed) {
            assert_eq!(jobs.len(), HOSTS);
            assert!((HOSTS / 20..=HOSTS / 10).contains(&max_jobs), "jobs in flight at once peaked at {max_jobs}");
            assert_eq!(max_out, HOSTS / 10, "the budget was used to the full");
            assert!(batches_seen.len() >= 5, "the request went through in batches: {batches_seen:?}");
            for a in &agents {
                assert!(a.refused.is_empty(), "{}: {:?}", a.hostname, a.refused);
                assert_eq!(a.tasks_run.len(), 1, "{}: one validation task, never duplicated", a.hostname);
                assert_eq!(a.handled.len(), 1, "{}: one intent", a.hostname);
            }
            return;
        }
        if handled == 0 && out.plan.actions.is_empty() && started == 0 {
            h.clock.advance(30);
        }
    }
    panic!("not done after 600 rounds");
}
