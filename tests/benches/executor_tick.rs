//! What a rollout executor tick costs at fleet scale: an in-process coordinator (real SQLite in
//! WAL mode, the real executor, the director key signing every intent) with `--hosts`
//! (100,000) active hosts and a CI-signed release rolling all of them (3 channels, 4 waves
//! 1 : 2 : 4 : 8, a 10 % disruption budget: the fleet simulator's scenario). Timed:
//!
//! - **baseline:** `plan_snapshot()` — the one read every tick makes;
//! - `verify_release` alone over the stored release (what a tick no longer does when the
//!   release is unchanged);
//! - the **first tick**: the release read and verified, rollouts opened, the first budget's
//!   worth of hosts dispatched (an intent signed and stored for each);
//! - a **steady tick**: nothing changed (every dispatched host is still switching), the
//!   verified release kept from the tick before — what a tick costs when nothing changed;
//! - the same steady tick with the kept release dropped first, as every tick did before the
//!   cache: the release read from the store and verified again.
//!
//! Run: `cargo bench -p drover-tests --bench executor_tick` (options after `--`: `--hosts N`,
//! `--iters K`; defaults 100,000 and 7).

use std::time::Instant;

use drover_engine::app::Clock as _;
use drover_engine::store::NewHost;
use drover_proto::keys::KeySigner;
use drover_proto::states::HostLifecycle;
use drover_proto::verify::VerifyContext;
use drover_tests::fleet::scenario::Scenario;

use drover_tests::benchkit::{arg, median_p90 as median, ms_since as ms, quiet_harness};

fn main() {
    let hosts = arg("--hosts", 100_000);
    let iters = arg("--iters", 7);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    rt.block_on(async move {
        let h = quiet_harness().await;
        let app = h.running.app.clone();
        let store = app.store.clone();
        let now = h.clock.now();
        let scenario = Scenario::of(hosts);
        let sim_hosts = scenario.hosts();
        let t = Instant::now();
        for h in &sim_hosts {
            let host = store.create_host(&NewHost { hostname: h.hostname.clone(), created_at: now, token: None }).expect("host");
            store.transition_host(host.id, HostLifecycle::BootstrapIssued, HostLifecycle::Enrolling, "bench", now).expect("enrolling");
            store.transition_host(host.id, HostLifecycle::Enrolling, HostLifecycle::Active, "bench", now).expect("active");
        }
        eprintln!("{hosts} hosts created in {:.1} s", t.elapsed().as_secs_f64());
        let t = Instant::now();
        let signer = KeySigner::new(ed25519_dalek::SigningKey::from_bytes(&drover_tests::CI_KEY));
        let files = scenario.release(&sim_hosts, 1, &signer, now).expect("release");
        let bytes: usize = files.files.values().map(Vec::len).sum();
        eprintln!("release built and signed in {:.1} s ({:.1} MB)", t.elapsed().as_secs_f64(), bytes as f64 / 1e6);
        store.put_release(1, now, &files).expect("publish");

        let baseline: Vec<f64> = (0..iters)
            .map(|_| {
                let t = Instant::now();
                store.plan_snapshot().expect("snapshot");
                ms(t)
            })
            .collect();
        let verify: Vec<f64> = (0..iters)
            .map(|_| {
                let t = Instant::now();
                let r = store.latest_release().expect("read").expect("stored");
                drover_proto::release::verify_release(&r.files, &app.trust, &VerifyContext::at(now).reporting_stale()).expect("verifies");
                ms(t)
            })
            .collect();
        let t = Instant::now();
        let first = drover_engine::executor::tick(&app).await.expect("first tick");
        let first_ms = ms(t);
        let dispatched = first.plan.actions.iter().filter(|a| matches!(a, drover_planner::Action::Dispatch { .. })).count();
        // Anything the first tick left for a second (a rollout opened, then dispatched).
        let second = drover_engine::executor::tick(&app).await.expect("second tick");
        let dispatched = dispatched + second.plan.actions.iter().filter(|a| matches!(a, drover_planner::Action::Dispatch { .. })).count();
        let mut steady = Vec::new();
        for _ in 0..iters {
            let t = Instant::now();
            let out = drover_engine::executor::tick(&app).await.expect("tick");
            steady.push(ms(t));
            assert!(out.plan.actions.is_empty(), "a steady tick decides nothing: {:?}", out.plan.actions.first());
        }
        let mut uncached = Vec::new();
        for _ in 0..iters {
            app.latest_release.forget();
            let t = Instant::now();
            drover_engine::executor::tick(&app).await.expect("tick");
            uncached.push(ms(t));
        }
        let verifications = app.latest_release.verifications();
        let (b, bp) = median(baseline);
        let (v, vp) = median(verify);
        let (s, sp) = median(steady);
        let (u, up) = median(uncached);
        println!("executor_tick: {hosts} hosts, {iters} iterations (median / p90 ms, × baseline); {dispatched} dispatched; {verifications} release verifications in all");
        println!("| measurement | median ms | p90 ms | × baseline |");
        println!("|---|---|---|---|");
        println!("| `plan_snapshot()` (baseline) | {b:.1} | {bp:.1} | 1.00 |");
        println!("| the stored release read and verified (`verify_release`) | {v:.1} | {vp:.1} | {:.2} |", v / b);
        println!("| first tick: release verified, rollouts opened, {dispatched} hosts dispatched | {first_ms:.0} | – | {:.1} |", first_ms / b);
        println!("| steady tick, release kept (issue 27) | {s:.1} | {sp:.1} | {:.2} |", s / b);
        println!("| steady tick, release read and verified again (before) | {u:.1} | {up:.1} | {:.2} |", u / b);
    });
}
