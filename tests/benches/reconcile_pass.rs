//! What one MAAS drift reconciler pass costs the coordinator at site scale: an in-process
//! coordinator (real SQLite in WAL mode) with `--hosts` (10,000) active hosts bound to as many
//! Deployed machines in the fake MAAS (a separate process, so its CPU is not counted), which
//! lists them in one unpaged array as MAAS does (maas-facts §0c). Timed, as wall time and this
//! process's CPU time (user + system, from `getrusage`):
//!
//! - the **first pass**: every observation recorded (one change per host);
//! - **baseline**: a pass with no drift — MAAS's listing read and parsed, the store's snapshot
//!   read, everything judged, nothing written;
//! - a **drift pass**: `--drifted` (1,000) machines changed address since the last pass
//!   (each an observation and an INFO note, written in batches of `[maas] reconcile_batch`).
//!
//! Each row reports the changes written and the transactions they took.
//!
//! Run: `cargo bench -p drover-tests --bench reconcile_pass` (options after `--`: `--hosts N`,
//! `--drifted D`, `--iters K`; defaults 10,000, 1,000 and 5).

use std::time::{Duration, Instant};

use drover_devkit::fake_maas::{FakeMaas, FakeMaasOptions};
use drover_engine::app::Clock as _;
use drover_engine::reconciler;
use drover_engine::store::{ChangeLog, MaasBinding, NewAudit, NewEvent, NewHost};
use drover_proto::states::HostLifecycle;
use drover_tests::Harness;
use nix::sys::resource::{UsageWho, getrusage};
use serde_json::json;

const API_KEY: &str = "bench-consumer:bench-token:bench-secret";

use drover_tests::benchkit::arg;

fn cpu() -> Duration {
    let u = getrusage(UsageWho::RUSAGE_SELF).expect("getrusage");
    let tv = |t: nix::sys::time::TimeVal| Duration::new(t.tv_sec() as u64, (t.tv_usec() as u32) * 1000);
    tv(u.user_time()) + tv(u.system_time())
}

fn median(v: Vec<f64>) -> f64 {
    drover_tests::benchkit::median_p90(v).0
}

struct Row {
    wall_ms: f64,
    cpu_ms: f64,
    changes: u64,
    batches: u64,
}

async fn timed(app: &std::sync::Arc<drover_engine::app::AppState>, site: &drover_engine::store::Site) -> Row {
    let (wall, cpu0) = (Instant::now(), cpu());
    let r = reconciler::pass(app, site).await;
    let row = Row {
        wall_ms: wall.elapsed().as_secs_f64() * 1e3,
        cpu_ms: (cpu() - cpu0).as_secs_f64() * 1e3,
        changes: r.changes,
        batches: r.batches,
    };
    assert_eq!(r.outcome, reconciler::Outcome::Ok, "{r:?}");
    row
}

fn main() {
    let hosts = arg("--hosts", 10_000);
    let drifted = arg("--drifted", 1_000).min(hosts);
    let iters = arg("--iters", 5).max(1);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    rt.block_on(async move {
        let h = Harness::start_with_config(|_, c| c.rollouts.interval_secs = 3600).await;
        let maas = FakeMaas::start(&FakeMaasOptions { api_key: API_KEY.into(), ..FakeMaasOptions::default() }).expect("fake MAAS");
        let call = |method: &'static str, path: &'static str, body: serde_json::Value| {
            let h = &h;
            async move {
                let (code, text) = h.call(Some(&h.admin), method, path, Some(&body.to_string())).await;
                assert!(code.starts_with('2'), "{path}: {code} {text}");
            }
        };
        call("POST", "/v1/maas/sites", json!({ "name": "dc1", "regionCode": "eu-1", "apiBaseUrl": maas.url(), "pxeIface": "ens19",
            "pxeVlanVid": 46, "nodePxeIface": "eno1", "reason": "bench" }))
        .await;
        call("POST", "/v1/maas/sites/dc1/credentials", json!({ "apiToken": API_KEY, "defaultPower": { "user": "root", "pass": "x" },
            "deployPassword": "bench-deploy", "reason": "bench" }))
        .await;
        let app = h.running.app.clone();
        let store = app.store.clone();
        let site = store.get_site_by_name("dc1").expect("site").expect("dc1");
        let now = h.clock.now();
        let setup = Instant::now();
        let mut machines = Vec::with_capacity(hosts);
        for i in 0..hosts {
            let name = format!("gpu-{i:05}");
            let m = maas
                .control("POST", "machines", Some(&json!({ "hostname": name, "power_address": format!("10.{}.{}.{}", 100 + i / 65_536, (i / 256) % 256, i % 256),
                    "mac_addresses": [format!("52:54:01:{:02x}:{:02x}:{:02x}", i / 65_536, (i / 256) % 256, i % 256)], "status": "Deployed" })))
                .expect("machine");
            let system_id = m["system_id"].as_str().expect("id").to_owned();
            let host = store.create_host(&NewHost { hostname: name, created_at: now, token: None }).expect("host");
            store.transition_host(host.id, HostLifecycle::BootstrapIssued, HostLifecycle::Enrolling, "bench", now).expect("enrolling");
            store.transition_host(host.id, HostLifecycle::Enrolling, HostLifecycle::Active, "bench", now).expect("active");
            let binding = MaasBinding::new(host.id, site.id, &system_id, None, None, now);
            let log = ChangeLog {
                event: NewEvent { at: now, kind: "maas.binding.created".into(), host_id: Some(host.id), rollout_id: None, job_id: None, message: String::new(), data: json!({}) },
                audit: NewAudit { at: now, actor: "bench".into(), role: "admin".into(), action: "bind".into(), target: host.id.to_string(), reason: "bench".into(), prior_state: None, expected_state: None },
            };
            store.put_maas_binding(&binding, &log).expect("bind");
            machines.push(system_id);
        }
        eprintln!("setup: {hosts} machines and bound hosts in {:.1} s", setup.elapsed().as_secs_f64());

        let first = timed(&app, &site).await;
        let (mut base, mut drift) = (Vec::new(), Vec::new());
        for k in 0..iters {
            base.push(timed(&app, &site).await);
            for (j, id) in machines.iter().take(drifted).enumerate() {
                let ip = format!("10.{}.{}.{}", 200 + k % 50, (j / 256) % 256, j % 256);
                maas.control("POST", &format!("machines/{id}/ip"), Some(&json!({ "ip": ip }))).expect("ip");
            }
            drift.push(timed(&app, &site).await);
        }
        let b_cpu = median(base.iter().map(|r| r.cpu_ms).collect());
        let show = |name: &str, rows: &[Row]| {
            let cpu = median(rows.iter().map(|r| r.cpu_ms).collect());
            let wall = median(rows.iter().map(|r| r.wall_ms).collect());
            let (changes, batches) = (rows[0].changes, rows[0].batches);
            println!("{name:<28} wall {wall:>8.1} ms  cpu {cpu:>8.1} ms  ({:>5.2}x baseline cpu)  changes {changes:>6}  transactions {batches:>3}", cpu / b_cpu);
        };
        println!("reconciler pass, {hosts} machines / {hosts} bound hosts, {iters} iterations (median)");
        show("first pass (all recorded)", std::slice::from_ref(&first));
        show("baseline: no drift", &base);
        show(&format!("drift: {drifted} IP changes"), &drift);
    });
}
