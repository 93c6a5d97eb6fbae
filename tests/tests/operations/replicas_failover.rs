//! Coordinator replicas on one PostgreSQL database, over real processes: three
//! `drover-coordinator serve` processes sharing one state dir's CA and server identity and one
//! database (Debian's PostgreSQL, started in a temporary directory), simulated agents whose
//! client lists all three URLs, a rollout and a maintenance request running together — and
//! the leader SIGKILLed at a random moment, chosen by a seed.
//!
//! Each run proves, from the API and the event log: a new leader within the lease (plus a
//! follower's try interval); the rollout converged and every job completed; each host handed
//! exactly one intent and dispatched once, each job's task run exactly once (none lost, none
//! duplicated by the takeover); the disruption budget never exceeded at any point of the
//! event log; the agents kept reporting through the surviving replicas.
//!
//! CI runs 10 seeded runs; `DROVER_FAILOVER_RUNS=100` runs more (see BENCHMARKS.md), and
//! `DROVER_FAILOVER_SEED` picks the first seed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use drover_tests::api::all_events;
use drover_tests::replicas::{Cluster, publish_request, run_fleet};
use rand::{Rng as _, SeedableRng as _};
use serde_json::{Value, json};

const HOSTS: usize = 8;
const BUDGET: usize = 3;
const REPLICAS: usize = 3;
const LEASE_MS: u64 = 1000;

/// The most hosts out of service at once by the event log: in flight in the rollout
/// (Activating or Soaking) or held by a running job.
fn peak_out_of_service(events: &[Value]) -> usize {
    let (mut rolling, mut held) = (BTreeSet::new(), BTreeSet::new());
    let mut peak = 0;
    for e in events {
        let host = e["hostId"].as_str().unwrap_or_default().to_owned();
        match e["kind"].as_str() {
            Some("rollout.host") => {
                let to = e["data"]["transition"].as_str().and_then(|t| t.split(" -> ").nth(1)).unwrap_or_default();
                if matches!(to, "Activating" | "Soaking") {
                    rolling.insert(host);
                } else {
                    rolling.remove(&host);
                }
            }
            Some("job.transition") => {
                if matches!(e["data"]["to"].as_str(), Some("running" | "compensating")) {
                    held.insert(host);
                } else {
                    held.remove(&host);
                }
            }
            _ => continue,
        }
        peak = peak.max(rolling.union(&held).count());
    }
    peak
}

/// What one run measured.
struct RunReport {
    kill_after_ms: u64,
    takeover_ms: u128,
    agent_errors: usize,
}

async fn one_run(cluster: &mut Cluster, run: usize, seed: u64) -> RunReport {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    cluster.configure(&format!("run{run}"), REPLICAS);
    for i in 0..REPLICAS {
        cluster.start(i);
    }
    let first_leader = cluster.wait_for("a first leader", 20, async || cluster.leader().await).await;
    let agents = cluster.enroll_all().await;
    let stop = Arc::new(AtomicBool::new(false));
    let fleet = run_fleet(agents, stop.clone());
    let admin = cluster.client(&cluster.urls, true);
    let published: Result<Value, _> = admin.post_json("/v1/releases", &publish_request(HOSTS, BUDGET)).await;
    published.unwrap_or_else(|e| panic!("publish: {e}\n{}", cluster.logs()));
    cluster
        .wait_for("every host active", 20, async || {
            let hosts: Value = admin.get_json("/v1/hosts").await.ok()?;
            let items = hosts["items"].as_array()?;
            (items.len() == HOSTS && items.iter().all(|h| h["state"] == "active")).then_some(())
        })
        .await;
    let body = json!({ "group": "gpu", "activities": ["validate_clean"], "reason": "failover drill" });
    let _: Value = admin.post_json("/v1/maintenance", &body).await.expect("maintenance request");

    // The kill lands anywhere from at once to well into the rollout and the jobs.
    let kill_after_ms: u64 = rng.gen_range(0..4000);
    tokio::time::sleep(Duration::from_millis(kill_after_ms)).await;
    let leader = cluster.leader().await.unwrap_or(first_leader);
    let mut killed = cluster.replicas[leader].take().expect("the leader runs");
    killed.child.kill().expect("SIGKILL");
    killed.child.wait().expect("reaped");
    let killed_at = Instant::now();
    let new_leader = cluster.wait_for("a new leader", 10, async || cluster.leader().await).await;
    let takeover_ms = killed_at.elapsed().as_millis();
    assert_ne!(new_leader, leader);
    // A lapsed lease is taken by a follower's next try (every half lease) and its work starts
    // at the supervisor's next look; the old leader renewed at most a third of a lease before
    // the kill.
    let bound = u128::from(LEASE_MS + LEASE_MS / 2 + 500);
    assert!(takeover_ms <= bound, "run {run} (seed {seed}): a new leader after {takeover_ms} ms, over {bound} ms");

    // Converged and completed, as the surviving replicas tell it.
    let admin = cluster.client(&cluster.urls, true);
    cluster
        .wait_for("rollout converged and jobs completed", 60, async || {
            let rollouts: Value = admin.get_json("/v1/rollouts").await.ok()?;
            let converged = rollouts["items"].as_array()?.iter().all(|r| r["state"] == "Converged");
            let jobs: Value = admin.get_json("/v1/jobs").await.ok()?;
            let jobs = jobs["items"].as_array()?;
            let done = jobs.len() == HOSTS && jobs.iter().all(|j| j["state"] == "completed");
            for j in jobs {
                let state = j["state"].as_str().unwrap_or_default();
                assert!(!state.starts_with("failed") && state != "cancelled", "run {run} (seed {seed}): job {j}");
            }
            (converged && done).then_some(())
        })
        .await;
    stop.store(true, Ordering::SeqCst);
    let mut agents = Vec::new();
    for joined in fleet.join_all().await {
        agents.push(joined);
    }

    // Nothing lost, nothing duplicated.
    let events = all_events(&admin, "").await;
    let mut dispatched: BTreeMap<String, usize> = BTreeMap::new();
    // A dispatch moves a host to Activating: from Pending, or from Skipped when its wave ran
    // while the maintenance job held it.
    let is_dispatch =
        |e: &&Value| e["kind"] == "rollout.host" && e["data"]["transition"].as_str().is_some_and(|t| t.ends_with(" -> Activating"));
    for e in events.iter().filter(is_dispatch) {
        *dispatched.entry(e["hostId"].as_str().unwrap_or("?").to_owned()).or_default() += 1;
    }
    if !(dispatched.len() == HOSTS && dispatched.values().all(|n| *n == 1)) {
        // What each host went through, for the failure message.
        let story: Vec<String> = events
            .iter()
            .filter(|e| {
                e["kind"] == "rollout.host"
                    || e["kind"] == "job.transition"
                    || e["kind"].as_str().is_some_and(|k| k.starts_with("coordinator."))
            })
            .map(|e| format!("{} {} {} {} {}", e["id"], e["kind"], e["hostId"], e["data"]["transition"], e["message"]))
            .collect();
        panic!("run {run} (seed {seed}): dispatches {dispatched:?}\n{}\n{}", story.join("\n"), cluster.logs());
    }
    let tasks: Value = admin.get_json("/v1/tasks").await.expect("tasks");
    let issued: BTreeSet<String> =
        tasks["items"].as_array().expect("items").iter().filter_map(|t| t["taskId"].as_str().map(str::to_owned)).collect();
    assert_eq!(issued.len(), HOSTS, "run {run} (seed {seed}): one task per job: {tasks}");
    let mut ran = BTreeSet::new();
    for (a, _) in &agents {
        assert!(a.refused.is_empty(), "run {run} (seed {seed}): {} refused {:?}", a.hostname, a.refused);
        assert_eq!(a.handled.len(), 1, "run {run} (seed {seed}): {} handled {:?}", a.hostname, a.handled);
        assert!(a.handled[0].confirmed, "run {run} (seed {seed}): {} not confirmed", a.hostname);
        assert_eq!(a.tasks_run.len(), 1, "run {run} (seed {seed}): {} ran {:?}", a.hostname, a.tasks_run);
        ran.extend(a.tasks_run.iter().cloned());
    }
    assert_eq!(ran, issued, "run {run} (seed {seed}): every issued task ran, once");
    let peak = peak_out_of_service(&events);
    assert!(peak <= BUDGET, "run {run} (seed {seed}): {peak} hosts out of service at once under a budget of {BUDGET}");
    let elected: Vec<&Value> = events.iter().filter(|e| e["kind"] == "coordinator.leader_elected").collect();
    assert!(elected.len() >= 2, "run {run} (seed {seed}): both elections are events: {elected:?}");
    // The token rises with every change of holder; a leader that lapsed (a renewal too slow on
    // a loaded machine) and took the lease back before anyone else keeps its token.
    let terms: Vec<(&str, i64)> =
        elected.iter().map(|e| (e["data"]["holder"].as_str().unwrap_or("?"), e["data"]["token"].as_i64().unwrap_or(0))).collect();
    let rising = terms.windows(2).all(|w| if w[0].0 == w[1].0 { w[0].1 == w[1].1 } else { w[0].1 < w[1].1 });
    assert!(rising, "run {run} (seed {seed}): fencing tokens rise with each new holder: {terms:?}");

    cluster.replicas.clear();
    RunReport { kill_after_ms, takeover_ms, agent_errors: agents.iter().map(|(_, e)| e).sum() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_leader_killed_at_random_moments_loses_and_duplicates_nothing() {
    let runs: usize = std::env::var("DROVER_FAILOVER_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(10);
    let first_seed: u64 = std::env::var("DROVER_FAILOVER_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(25);
    let mut cluster = Cluster::new(HOSTS, LEASE_MS);
    let started = Instant::now();
    let mut takeovers = Vec::new();
    for run in 0..runs {
        let seed = first_seed + run as u64;
        let r = one_run(&mut cluster, run, seed).await;
        eprintln!(
            "run {run} (seed {seed}): leader killed {} ms in, new leader after {} ms, {} agent requests failed over or retried",
            r.kill_after_ms, r.takeover_ms, r.agent_errors
        );
        takeovers.push(r.takeover_ms);
    }
    takeovers.sort_unstable();
    eprintln!(
        "{runs} runs in {:.1} s; takeover after the kill: median {} ms, max {} ms (lease {LEASE_MS} ms)",
        started.elapsed().as_secs_f64(),
        takeovers[takeovers.len() / 2],
        takeovers[takeovers.len() - 1]
    );
}
