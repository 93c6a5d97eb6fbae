//! What a job tick costs at fleet scale: an in-process coordinator (real SQLite in WAL mode,
//! the real executor) with `--hosts` (10,000) active hosts and one maintenance request
//! (`validate_clean`) over all of them, no release (so no budget holds any job back: the
//! worst case). Timed:
//!
//! - **baseline:** `plan_snapshot()` — the one read the rollout executor makes per tick, over
//!   the same hosts and jobs;
//! - `list_jobs(unfinished)` alone;
//! - **starting every job**: each starts, cordons its host and queues its signed task — four
//!   decisions, each its own transaction, per host — over as many ticks as the per-tick cap
//!   of 1,000 decisions takes (the longest tick is reported too);
//! - a **steady tick**: every job waits on its queued task (two point reads and a decision
//!   per job, nothing written).
//!
//! Run: `cargo bench -p drover-tests --bench jobs_tick` (options after `--`: `--hosts N`,
//! `--iters K`; defaults 10,000 and 7).

use std::time::Instant;

use drover_engine::app::Clock as _;
use drover_engine::jobs::{Activity, JobKind};
use drover_engine::store::{NewHost, NewJob, NewMaintenance};
use drover_proto::states::HostLifecycle;
use drover_proto::task::StorageScope;
use uuid::Uuid;

use drover_tests::benchkit::{arg, median_p90 as median, ms_since as ms, quiet_harness};

fn main() {
    let hosts = arg("--hosts", 10_000);
    let iters = arg("--iters", 7);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    rt.block_on(async move {
        let h = quiet_harness().await;
        let app = h.running.app.clone();
        let store = app.store.clone();
        let now = h.clock.now();
        let mut ids = Vec::with_capacity(hosts);
        for i in 0..hosts {
            let host = store.create_host(&NewHost { hostname: format!("gpu-{i:05}"), created_at: now, token: None }).expect("host");
            store.transition_host(host.id, HostLifecycle::BootstrapIssued, HostLifecycle::Enrolling, "bench", now).expect("enrolling");
            store.transition_host(host.id, HostLifecycle::Enrolling, HostLifecycle::Active, "bench", now).expect("active");
            ids.push(host.id);
        }
        let request_id = Uuid::new_v4();
        let kind = JobKind::Maintenance { activities: vec![Activity::ValidateClean], storage: StorageScope::All };
        let input = serde_json::to_value(&kind).expect("json");
        let jobs = ids
            .iter()
            .map(|h| NewJob {
                job_id: Uuid::new_v4(),
                kind: kind.name().into(),
                host_id: Some(*h),
                input: input.clone(),
                created_at: now,
                request_id: Some(request_id),
            })
            .collect();
        let new = NewMaintenance {
            request_id,
            initiator: "bench".into(),
            reason: "bench".into(),
            scope: serde_json::json!({}),
            activities: serde_json::json!(["validate_clean"]),
            created_at: now,
            jobs,
            audits: Vec::new(),
        };
        store.create_maintenance(&new, &[HostLifecycle::Active]).expect("request");

        let baseline: Vec<f64> = (0..iters)
            .map(|_| {
                let t = Instant::now();
                store.plan_snapshot().expect("snapshot");
                ms(t)
            })
            .collect();
        let list: Vec<f64> = (0..iters)
            .map(|_| {
                let t = Instant::now();
                store.list_jobs(&drover_engine::store::JobFilter { unfinished: true, ..Default::default() }).expect("jobs");
                ms(t)
            })
            .collect();
        let t = Instant::now();
        let (mut ticks, mut longest) = (0, 0.0f64);
        while store.list_tasks(&Default::default()).expect("tasks").len() < hosts {
            let one = Instant::now();
            app.executor.tick_now(&app).await.expect("tick");
            longest = longest.max(ms(one));
            ticks += 1;
            assert!(ticks < 100, "jobs never all queued their tasks");
        }
        let first = ms(t);
        let mut steady = Vec::new();
        for _ in 0..iters {
            let t = Instant::now();
            app.executor.tick_now(&app).await.expect("tick");
            steady.push(ms(t));
        }
        assert_eq!(store.list_tasks(&Default::default()).expect("tasks").len(), hosts, "a steady tick issues nothing");
        let (b, bp) = median(baseline);
        let (l, lp) = median(list);
        let (s, sp) = median(steady);
        println!("jobs_tick: {hosts} hosts, {iters} iterations (median / p90 ms, × baseline)");
        println!("| measurement | median ms | p90 ms | × baseline |");
        println!("|---|---|---|---|");
        println!("| `plan_snapshot()` (baseline) | {b:.1} | {bp:.1} | 1.00 |");
        println!("| `list_jobs(unfinished)` | {l:.1} | {lp:.1} | {:.2} |", l / b);
        println!("| every job started, cordoned, its signed task queued: {ticks} ticks, total | {first:.0} | – | {:.1} |", first / b);
        println!("| … the longest of those ticks | {longest:.0} | – | {:.1} |", longest / b);
        println!("| steady tick: {hosts} jobs wait on their tasks | {s:.1} | {sp:.1} | {:.2} |", s / b);
    });
}
