//! What the dashboard's pages cost the coordinator at fleet size: the reads its pages make,
//! over real TLS 1.3 against a coordinator holding `--hosts` hosts (10,000), each timed over
//! `--calls` calls. The baseline, measured in the same run, is what a page would have to do
//! without the coordinator's summary: list every host, page by page (`GET /v1/hosts`, 1,000 a
//! page), and count them itself.
//!
//! Run: `cargo bench -p drover-tests --bench dashboard_reads` (options after `--`: `--hosts N`
//! (10000), `--calls N` (20)).

use std::path::Path;
use std::time::{Duration, Instant};

use drover_client::{ClientIdentity, CoordinatorClient};
use drover_engine::app::Clock as _;
use drover_engine::store::NewHost;
use drover_tests::Harness;
use serde_json::Value;

fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn client(h: &Harness) -> CoordinatorClient {
    let read = |p: &Path| std::fs::read(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
    let ca = drover_client::parse_certificates("ca", &read(&h.ca)).expect("ca");
    let identity = ClientIdentity::from_pem(&read(&h.admin.0), &read(&h.admin.1)).expect("admin");
    CoordinatorClient::new("dashboard-reads-bench", std::slice::from_ref(&h.url), &ca, Some(identity), Duration::from_secs(60))
        .expect("client")
}

/// Median and p95 of `calls` runs of `f`.
async fn time<F: AsyncFnMut()>(calls: usize, mut f: F) -> (Duration, Duration) {
    f().await; // warm
    let mut samples = Vec::with_capacity(calls);
    for _ in 0..calls {
        let t = Instant::now();
        f().await;
        samples.push(t.elapsed());
    }
    samples.sort();
    (samples[samples.len() / 2], samples[(samples.len() - 1) * 95 / 100])
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (hosts, calls) = (arg(&args, "--hosts", 10_000), arg(&args, "--calls", 20));
    let h = Harness::start().await;
    let now = h.clock.now();
    let store = h.running.app.store.clone();
    let started = Instant::now();
    for i in 0..hosts {
        store.create_host(&NewHost { hostname: format!("gpu-{i:05}"), created_at: now, token: None }).expect("host");
    }
    eprintln!("{hosts} hosts created in {:.1} s", started.elapsed().as_secs_f64());
    let c = client(&h);

    let page_all = async || {
        let mut after: Option<String> = None;
        let mut counted = 0usize;
        loop {
            let path = match &after {
                Some(a) => format!("/v1/hosts?limit=1000&after={a}"),
                None => "/v1/hosts?limit=1000".to_owned(),
            };
            let page: Value = c.get_json(&path).await.expect("page");
            counted += page["items"].as_array().map_or(0, Vec::len);
            match page["next"].as_str() {
                Some(n) => after = Some(n.to_owned()),
                None => break,
            }
        }
        assert_eq!(counted, hosts);
    };
    let baseline = time(calls, page_all).await;
    let summary = time(calls, async || {
        let s: Value = c.get_json("/v1/fleet/summary").await.expect("summary");
        assert_eq!(s["hosts"], hosts);
    })
    .await;
    let page = time(calls, async || {
        let _: Value = c.get_json("/v1/hosts?limit=50").await.expect("page");
    })
    .await;
    let metrics = time(calls, async || {
        let _ = c.get_bytes("/metrics").await.expect("metrics");
    })
    .await;
    println!("dashboard reads at {hosts} hosts, {calls} calls each (median / p95, ms; ratio of medians to the baseline)");
    for (what, (p50, p95)) in [
        ("baseline: every host paged (1000 a page) and counted", baseline),
        ("GET /v1/fleet/summary (the overview)", summary),
        ("GET /v1/hosts?limit=50 (one page of the hosts page)", page),
        ("GET /metrics (a Prometheus scrape)", metrics),
    ] {
        println!("  {what:<56} {:>8.1} / {:>8.1}   {:.2}x", ms(p50), ms(p95), p50.as_secs_f64() / baseline.0.as_secs_f64());
    }
}
