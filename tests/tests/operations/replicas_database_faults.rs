//! Coordinator replicas when the database itself fails, over real processes:
//! - PostgreSQL restarted under two running replicas in the middle of a rollout: they carry on
//!   without a restart of their own (pools reconnect, the listener reconnects and wakes every
//!   held long-poll, a leader is elected again) and the rollout converges;
//! - a replica cut off from the database (its connections through a proxy the test cuts)
//!   stops leading within its lease, the other takes over, and once the cut heals the first
//!   serves again, as a follower, without a restart.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use drover_tests::api::all_events;
use drover_tests::replicas::{Cluster, publish_request, run_fleet};
use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};

const LEASE_MS: u64 = 1000;

/// A TCP proxy to the database that the test can cut (every connection closed, new ones
/// refused) and heal: a replica behind it is partitioned from the database and only it.
struct Cuttable {
    port: u16,
    open: Arc<AtomicBool>,
    live: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl Cuttable {
    async fn start(upstream: u16) -> Cuttable {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let (open, live) = (Arc::new(AtomicBool::new(true)), Arc::new(Mutex::new(Vec::new())));
        let (o, l) = (open.clone(), live.clone());
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if !o.load(Ordering::SeqCst) {
                    continue; // dropped: the connection is refused
                }
                let forward = tokio::spawn(async move {
                    if let Ok(mut up) = TcpStream::connect(("127.0.0.1", upstream)).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut up).await;
                    }
                });
                l.lock().expect("lock").push(forward.abort_handle());
            }
        });
        Cuttable { port, open, live }
    }

    fn cut(&self) {
        self.open.store(false, Ordering::SeqCst);
        for c in self.live.lock().expect("lock").drain(..) {
            c.abort();
        }
    }

    fn heal(&self) {
        self.open.store(true, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_ride_out_a_database_restart_mid_rollout() {
    const HOSTS: usize = 4;
    let mut cluster = Cluster::new(HOSTS, LEASE_MS);
    cluster.configure("restart", 2);
    cluster.start(0);
    cluster.start(1);
    cluster.wait_for("a leader", 20, async || cluster.leader().await).await;
    let agents = cluster.enroll_all().await;
    let stop = Arc::new(AtomicBool::new(false));
    let fleet = run_fleet(agents, stop.clone());
    let admin = cluster.client(&cluster.urls, true);
    let _: Value = admin.post_json("/v1/releases", &publish_request(HOSTS, 2)).await.expect("publish");
    // Restart once the rollout is under way: its first hosts dispatched.
    cluster
        .wait_for("the first dispatch", 30, async || {
            let events: Value = admin.get_json("/v1/events?kind=rollout.host").await.ok()?;
            events["items"].as_array()?.iter().any(|e| e["data"]["transition"] == "Pending -> Activating").then_some(())
        })
        .await;
    let restarted = Instant::now();
    cluster.db.restart().expect("postgres restarts");
    let converged = cluster
        .wait_for("the rollout converged after the restart", 60, async || {
            let rollouts: Value = admin.get_json("/v1/rollouts").await.ok()?;
            let items = rollouts["items"].as_array()?;
            (!items.is_empty() && items.iter().all(|r| r["state"] == "Converged")).then(|| restarted.elapsed())
        })
        .await;
    stop.store(true, Ordering::SeqCst);
    let agents = fleet.join_all().await;
    for (a, _) in &agents {
        assert!(a.refused.is_empty(), "{}: {:?}", a.hostname, a.refused);
        assert_eq!(a.handled.len(), 1, "{}: one intent, once: {:?}", a.hostname, a.handled);
    }
    // The same processes served throughout.
    let logs = cluster.logs();
    for (i, r) in cluster.replicas.iter_mut().enumerate() {
        let r = r.as_mut().expect("running");
        assert!(r.child.try_wait().expect("status").is_none(), "replica r{i} exited:\n{logs}");
    }
    assert!(cluster.leader().await.is_some(), "a leader after the restart");
    eprintln!("the rollout converged {:.1} s after PostgreSQL restarted", converged.as_secs_f64());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_cut_off_from_the_database_stops_leading_and_serves_again_when_healed() {
    let mut cluster = Cluster::new(1, LEASE_MS);
    cluster.configure("partition", 2);
    let proxy = Cuttable::start(cluster.db.port()).await;
    cluster.write_config(0, &cluster.database_url("partition", proxy.port));
    cluster.start(0);
    let first = cluster.wait_for("r0 leads", 20, async || cluster.leader().await).await;
    assert_eq!(first, 0, "the only replica leads");
    cluster.start(1);

    proxy.cut();
    let cut_at = Instant::now();
    let log = cluster.log(0);
    let stepped_down = cluster
        .wait_for("r0 stops leading", 10, async || {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            text.contains("this replica stopped leading").then(|| cut_at.elapsed())
        })
        .await;
    let takeover = cluster.wait_for("r1 leads", 10, async || (cluster.leader().await == Some(1)).then(|| cut_at.elapsed())).await;
    // r0 stops on its own clock, before its lease could lapse for the others.
    assert!(stepped_down <= Duration::from_millis(LEASE_MS), "r0 stopped leading {stepped_down:?} after the cut");
    assert!(takeover >= stepped_down, "r1 took over ({takeover:?}) only after r0 stopped ({stepped_down:?})");
    // The lease lapses within one lease of r0's last renewal; r1 tries every half lease.
    assert!(takeover <= Duration::from_millis(LEASE_MS + LEASE_MS / 2 + 500), "r1 led {takeover:?} after the cut");

    proxy.heal();
    let admin0 = cluster.client(&cluster.urls[..1], true);
    cluster
        .wait_for("r0 serves again, as a follower", 30, async || {
            let bytes = admin0.get_bytes("/metrics").await.ok()?;
            let text = String::from_utf8_lossy(&bytes).into_owned();
            text.lines().any(|l| l.starts_with("drover_leader{") && l.ends_with(" 0")).then_some(())
        })
        .await;
    assert_eq!(cluster.leader().await, Some(1), "r1 still leads");
    let events = all_events(&cluster.client(&cluster.urls, true), "").await;
    let elected: Vec<(String, i64)> = events
        .iter()
        .filter(|e| e["kind"] == "coordinator.leader_elected")
        .map(|e| (e["data"]["replica"].as_str().unwrap_or("?").to_owned(), e["data"]["token"].as_i64().unwrap_or(0)))
        .collect();
    assert_eq!(elected.len(), 2, "{elected:?}");
    assert_eq!((elected[0].0.as_str(), elected[1].0.as_str()), ("r0", "r1"), "{elected:?}");
    assert!(elected[1].1 > elected[0].1, "the takeover raised the fencing token: {elected:?}");
    eprintln!(
        "cut: r0 stopped leading after {} ms, r1 led after {} ms (lease {LEASE_MS} ms)",
        stepped_down.as_millis(),
        takeover.as_millis()
    );
}
