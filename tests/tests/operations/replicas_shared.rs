//! What one coordinator replica does binds on the others at once, over real
//! processes on one PostgreSQL database:
//! - work dispatched through replica A reaches an agent long-polling on replica B without
//!   waiting for its poll to time out (LISTEN/NOTIFY), the latency measured, though B answers
//!   the agent's routine check-ins from its cache of check-in views;
//! - an operator certificate issued with `operator-cert --config` is recorded in the
//!   PostgreSQL store, and once revoked through replica A, replica B refuses it too.

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use drover_tests::replicas::Cluster;
use drover_tests::wall_now;
use serde_json::{Value, json};
use tokio::sync::watch;

const LEASE_MS: u64 = 2000;

/// The sample `name` replica `i` reports in `/metrics`.
async fn metric(cluster: &Cluster, i: usize, name: &str) -> Option<u64> {
    let bytes = cluster.client(&cluster.urls[i..=i], true).get_bytes("/metrics").await.ok()?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')).and_then(|v| v.trim().parse().ok())
}

/// Held long-polls replica `i` reports.
async fn long_polls_held(cluster: &Cluster, i: usize) -> Option<u64> {
    metric(cluster, i, "drover_long_polls_held").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn work_dispatched_on_one_replica_wakes_an_agent_polling_another_at_once() {
    const TASKS: usize = 12;
    let mut cluster = Cluster::new(1, LEASE_MS);
    cluster.configure("wakeups", 2);
    cluster.start(0);
    cluster.start(1);
    let mut agents = cluster.enroll_all().await;
    let mut agent = agents.pop().expect("one agent");
    // The agent talks to replica 1 only; the work is dispatched through replica 0.
    agent.reconnect_to(&cluster.urls[1..=1]);
    let host = agent.host_id;
    let (tx, mut rx) = watch::channel((0usize, Instant::now()));
    let stop = Arc::new(AtomicBool::new(false));
    let halt = stop.clone();
    let looping = tokio::spawn(async move {
        while !halt.load(Ordering::SeqCst) {
            if agent.step(wall_now()).await.is_err() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            if agent.tasks_run.len() != tx.borrow().0 {
                tx.send_replace((agent.tasks_run.len(), Instant::now()));
            }
        }
        agent
    });
    cluster
        .wait_for("host active", 20, async || {
            let v: Value = cluster.client(&cluster.urls, true).get_json(&format!("/v1/hosts/{host}")).await.ok()?;
            (v["state"] == "active").then_some(())
        })
        .await;
    let admin0 = cluster.client(&cluster.urls[..1], true);
    let mut latencies = Vec::new();
    for k in 1..=TASKS {
        // Issue only while the agent's check-in is held on replica 1, so the only way it
        // learns of the task before its poll times out (2 s) is a wake-up across replicas.
        cluster
            .wait_for("the agent's long-poll held on replica 1", 10, async || (long_polls_held(&cluster, 1).await? == 1).then_some(()))
            .await;
        let body = json!({ "task": { "type": "node.validate_clean", "checkGpu": false }, "reason": "wake-up latency" });
        let sent = Instant::now();
        let _: Value = admin0.post_json(&format!("/v1/hosts/{host}/tasks"), &body).await.expect("task issued");
        let deadline = Instant::now() + Duration::from_secs(10);
        while rx.borrow_and_update().0 < k {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "task {k} never reached the agent\n{}", cluster.logs());
            let _ = tokio::time::timeout(left, rx.changed()).await;
        }
        latencies.push(rx.borrow().1.duration_since(sent));
    }
    // Every check-in so far followed a change to the host (a task issued, leased or done), so
    // replica 1 read each view from the database. Left idle, the agent's next routine
    // check-ins are answered from replica 1's cache of check-in views, which each task's
    // insert above had dropped first (or the agent would not have got the task).
    let views = async |source: &str| metric(&cluster, 1, &format!("drover_checkin_views_total{{source=\"{source}\"}}")).await;
    cluster.wait_for("replica 1 answers an idle agent from its cache", 20, async || (views("cache").await? > 0).then_some(())).await;
    eprintln!("replica 1's check-in views: {:?} from its cache, {:?} from the store", views("cache").await, views("store").await);
    stop.store(true, Ordering::SeqCst);
    let agent = looping.await.expect("agent loop");
    assert!(agent.refused.is_empty(), "{:?}", agent.refused);
    assert_eq!(agent.tasks_run.len(), TASKS, "each task once");
    latencies.sort_unstable();
    let (p50, max) = (latencies[TASKS / 2], latencies[TASKS - 1]);
    // Without the wake-up a task waits out the rest of a 2 s poll: about 1 s at the median.
    assert!(p50 < Duration::from_millis(300), "median {p50:?} across replicas: {latencies:?}");
    eprintln!("dispatch through replica 0 to an agent polling replica 1: median {} ms, max {} ms", p50.as_millis(), max.as_millis());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_operator_certificate_revoked_through_one_replica_is_refused_by_the_other() {
    let mut cluster = Cluster::new(0, LEASE_MS);
    cluster.configure("revocation", 2);
    cluster.start(0);
    cluster.start(1);
    let ops = cluster.paths.dir.join("ops-bob");
    let out = Command::new(drover_tests::workspace_binary("drover-coordinator"))
        .args(["operator-cert", "--role", "viewer", "--name", "bob"])
        .arg("--state-dir")
        .arg(&cluster.paths.state)
        .arg("--out")
        .arg(&ops)
        .arg("--config")
        .arg(cluster.config(0))
        .output()
        .expect("operator-cert runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let serial = stdout.lines().find_map(|l| l.strip_prefix("serial: ")).expect("serial printed").trim().to_owned();
    let bob = |i: usize| {
        let read = |p: std::path::PathBuf| std::fs::read(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
        let ca = drover_client::parse_certificates("ca", &read(ops.join("ca.crt"))).expect("ca");
        let id = drover_client::ClientIdentity::from_pem(&read(ops.join("bob.crt")), &read(ops.join("bob.key"))).expect("bob");
        drover_client::CoordinatorClient::new("bob", &cluster.urls[i..=i], &ca, Some(id), Duration::from_secs(5)).expect("client")
    };
    let _: Value = bob(1).get_json("/v1/hosts").await.expect("bob reads through replica 1");
    let listed: Value = cluster.client(&cluster.urls[1..=1], true).get_json("/v1/operator-certs").await.expect("list");
    assert!(listed.to_string().contains(&serial), "recorded in the shared store: {listed}");

    let admin0 = cluster.client(&cluster.urls[..1], true);
    let _: Value =
        admin0.post_json(&format!("/v1/operator-certs/{serial}/revoke"), &json!({ "reason": "left the team" })).await.expect("revoke");
    let revoked = Instant::now();
    let refused = cluster.wait_for("replica 1 refuses bob", 10, async || bob(1).get_json::<Value>("/v1/hosts").await.err()).await;
    eprintln!("replica 1 refused the revoked certificate {} ms after replica 0 revoked it: {refused}", revoked.elapsed().as_millis());
    assert!(bob(0).get_json::<Value>("/v1/hosts").await.is_err(), "replica 0 refuses it too");
}
