//! Check-in cost in the store: the four calls one agent check-in makes (`get_host`,
//! `record_checkin`, `current_intent`, `lease_tasks`) against a SQLite store holding 10,000
//! hosts, measured against a same-run baseline — one bare primary-key `SELECT` on the same
//! file through rusqlite — so the ratio says what the store's own work costs.
//!
//! Run: `cargo bench -p drover-engine --bench checkin_store` (`-- --hosts N --rounds K`).

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use drover_engine::store::{Checkin, NewHost, SqliteStore, Store};
use drover_proto::time::Time;
use uuid::Uuid;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str, default: usize| {
        args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
    };
    let hosts = arg("--hosts", 10_000);
    let rounds = arg("--rounds", 20_000);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("coordinator.db");
    let store = Arc::new(SqliteStore::open(&path).expect("store"));
    let t0 = Time::parse_strict("2026-11-21T10:00:00Z").expect("time");
    let mut ids: Vec<Uuid> = Vec::with_capacity(hosts);
    for i in 0..hosts {
        let host = store.create_host(&NewHost { hostname: format!("gpu-{i:05}"), created_at: t0, token: None }).expect("host");
        ids.push(host.id);
    }

    // Baseline: a bare point read on the same file, the floor any store call pays.
    let raw = rusqlite::Connection::open(&path).expect("raw connection");
    let mut stmt = raw.prepare("SELECT hostname FROM hosts WHERE id = ?1").expect("prepare");
    let started = Instant::now();
    for r in 0..rounds {
        let id = ids[r % hosts].to_string();
        let name: String = stmt.query_row([id], |row| row.get(0)).expect("row");
        black_box(name);
    }
    let raw_per = started.elapsed().as_secs_f64() / rounds as f64;

    let checkin = |store: &SqliteStore, id: Uuid, r: usize| {
        let now = t0.plus_secs(r as u64);
        black_box(store.get_host(id).expect("get"));
        store
            .record_checkin(id, &Checkin { at: now, agent_version: "bench".into(), boot_id: "b".into(), current_generation: None })
            .expect("checkin");
        black_box(store.current_intent(id).expect("intent"));
        black_box(store.lease_tasks(id, now, 300, 16).expect("lease"));
    };
    let started = Instant::now();
    for r in 0..rounds {
        checkin(&store, ids[r % hosts], r);
    }
    let one_thread = started.elapsed().as_secs_f64();
    let per = one_thread / rounds as f64;

    let threads = 4;
    let started = Instant::now();
    std::thread::scope(|scope| {
        for t in 0..threads {
            let (store, ids) = (store.clone(), &ids);
            scope.spawn(move || {
                for r in (t..rounds).step_by(threads) {
                    checkin(&store, ids[r % hosts], r);
                }
            });
        }
    });
    let parallel = started.elapsed().as_secs_f64();

    println!("# drover-coordinator check-in store benchmark");
    println!();
    println!("{hosts} hosts in one SQLite file (WAL); {rounds} check-ins per measurement");
    println!();
    println!("| measurement | per check-in µs | check-ins/s | × baseline |");
    println!("|---|---|---|---|");
    println!("| baseline: one primary-key SELECT through rusqlite | {:.1} | {:.0} | 1.00 |", raw_per * 1e6, 1.0 / raw_per);
    println!(
        "| store: get_host + record_checkin + current_intent + lease_tasks, 1 thread | {:.1} | {:.0} | {:.1} |",
        per * 1e6,
        rounds as f64 / one_thread,
        per / raw_per
    );
    println!(
        "| the same, {threads} threads | {:.1} | {:.0} | {:.1} |",
        parallel / rounds as f64 * 1e6,
        rounds as f64 / parallel,
        parallel / rounds as f64 / raw_per
    );
}
