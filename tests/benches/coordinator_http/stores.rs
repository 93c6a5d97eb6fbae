//! The coordinator on each of its stores, same run, same machine: the same hosts
//! preloaded into SQLite (the baseline) and into PostgreSQL through the same `Store` calls,
//! one `drover-coordinator serve` per store over one state dir (one CA, so one set of client
//! credentials would do; each store still gets its own host ids, hence its own certificates),
//! and the same keep-alive check-in load on each in turn, rounds alternating the order.
//!
//! Reported per store: check-ins per second, the coordinator's CPU seconds per 1,000
//! check-ins, and coordinator plus database CPU per 1,000 check-ins — for SQLite the two are
//! one figure (the database is inside the coordinator's process), for PostgreSQL the database
//! is the postmaster and every backend it forked, read from `/proc`. The goal of the issue:
//! PostgreSQL within 2× of SQLite's CPU per check-in. `postgres` is a replica as it ships
//! (routine check-ins answered from its cache of check-in views); `postgres-uncached` the
//! same with `cache_checkin_views = false`, every check-in reading the database — what a
//! check-in costs when its host changed since its last one.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use drover_devkit::postgres::{self as pg, PostgresServer};
use drover_engine::store::SqliteStore;
use drover_engine::store::postgres::{Password, PgOptions, PgStore};
use drover_tests::procs::{
    Proc, cpu_secs, log_tail, postmaster_pid, release_binary, rss_kib, start_server_with_stderr, tree_cpu_secs, tree_pss_kib,
};
use rustls::pki_types::CertificateDer;

use super::{Creds, init_state, keep_alive_rate, preload, write_config};

/// One store under test: its coordinator process, the hosts it knows, and its database.
struct Subject {
    name: String,
    // Before `db`: fields drop in order, so the coordinator stops before its database.
    coord: Proc,
    log: std::path::PathBuf,
    creds: Vec<Creds>,
    /// The PostgreSQL server (none for SQLite, which lives in the coordinator's process).
    db: Option<PostgresServer>,
    /// Per round: check-ins/s, coordinator CPU s and coordinator + database CPU s per 1,000
    /// check-ins.
    rates: Vec<f64>,
    coord_cpu: Vec<f64>,
    total_cpu: Vec<f64>,
}

impl Subject {
    /// CPU seconds of the database's processes so far (0 without a separate database).
    fn db_cpu(&self) -> f64 {
        self.db.as_ref().and_then(|db| postmaster_pid(&db.data_dir())).map_or(0.0, tree_cpu_secs)
    }
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// `mean | … | ratio (lo–hi) | …` for one measurement: each store's mean, then each other
/// store's ratio to the first's (the baseline) with the per-round range.
fn row(subjects: &[Subject], get: fn(&Subject) -> &Vec<f64>, digits: usize) -> String {
    let mut out: Vec<String> = subjects.iter().map(|s| format!("{:.digits$}", mean(get(s)))).collect();
    if let Some((first, others)) = subjects.split_first() {
        for other in others {
            let ratios: Vec<f64> = get(other).iter().zip(get(first)).map(|(l, f)| l / f).collect();
            let lo = ratios.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = ratios.iter().copied().fold(0.0, f64::max);
            out.push(format!("**{:.2}** ({lo:.2}–{hi:.2})", mean(get(other)) / mean(get(first))));
        }
    }
    out.join(" | ")
}

/// Opens the PostgreSQL store the coordinator will use, as the coordinator opens it.
fn open_pg(db: &PostgresServer) -> PgStore {
    let mut options = PgOptions::new(db.url());
    let password = std::fs::read_to_string(db.password_file()).expect("password file");
    options.password = Some(Password::new(&password));
    PgStore::open(&options).expect("the PostgreSQL store opens")
}

/// Starts the coordinator of config `config`, its log (warnings and errors) in `log`.
fn serve(config: &Path, log: &Path) -> Proc {
    let file = std::fs::File::create(log).expect("log");
    let mut cmd = Command::new(release_binary("drover-coordinator"));
    cmd.args(["serve", "--config"]).arg(config).env("DROVER_LOG", "warn");
    let started = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || start_server_with_stderr(cmd, Stdio::from(file))));
    started.unwrap_or_else(|_| panic!("the coordinator did not start:\n{}", log_tail(log, 20)))
}

/// Runs the comparison over `stores` (the first is the baseline) and prints its table.
pub fn compare(stores: &[String], clients: usize, secs: u64, rounds: usize, hosts: usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    let state_path = dir.path().join("state");
    let state = init_state(&release_binary("drover-coordinator"), &state_path);
    let ca = vec![CertificateDer::from(state.ca().cert_der().to_vec())];

    let mut subjects = Vec::new();
    let mut setup = Vec::new();
    for name in stores {
        let started = Instant::now();
        let (creds, db, sections) = match name.as_str() {
            "postgres" | "postgres-uncached" => {
                let db = PostgresServer::start(pg::PgOptions::default()).expect("PostgreSQL starts (apt-get install postgresql)");
                let creds = preload(&open_pg(&db), &state, hosts);
                // The replica's pool stays at its default, as an operator would first run it.
                let sections = format!(
                    "[store]\nbackend = \"postgres\"\nurl = \"{}\"\npassword_file = \"{}\"\nreplica = \"bench\"\ncache_checkin_views = {}\n",
                    db.url(),
                    db.password_file().display(),
                    name == "postgres"
                );
                (creds, Some(db), sections)
            }
            _ => {
                let store = SqliteStore::open(state.db_path()).expect("store");
                (preload(&store, &state, hosts), None, String::new())
            }
        };
        setup.push(format!("{name} {:.1} s", started.elapsed().as_secs_f64()));
        let config = write_config(dir.path(), &format!("coordinator-{name}.toml"), &state_path, &sections);
        let log = dir.path().join(format!("coordinator-{name}.log"));
        let coord = serve(&config, &log);
        subjects.push(Subject {
            name: name.clone(),
            coord,
            log,
            creds,
            db,
            rates: Vec::new(),
            coord_cpu: Vec::new(),
            total_cpu: Vec::new(),
        });
    }

    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    runtime.block_on(async {
        // Each store's first check-ins (connections, caches) before anything is measured.
        for s in &subjects {
            keep_alive_rate(&s.coord.url, &ca, &s.creds, clients, 1, true).await;
        }
        // Rounds alternate the order, so drift in the machine's load over the run falls on
        // every store alike.
        for round in 0..rounds {
            let mut order: Vec<usize> = (0..subjects.len()).collect();
            if round % 2 == 1 {
                order.reverse();
            }
            for i in order {
                let s = &mut subjects[i];
                let pid = s.coord.child.id();
                let (coord_before, db_before) = (cpu_secs(pid, false), s.db_cpu());
                let rate = keep_alive_rate(&s.coord.url, &ca, &s.creds, clients, secs, true).await;
                let (coord, db) = (cpu_secs(pid, false) - coord_before, s.db_cpu() - db_before);
                let thousands = rate * secs as f64 / 1000.0;
                s.rates.push(rate);
                s.coord_cpu.push(coord / thousands);
                s.total_cpu.push((coord + db) / thousands);
            }
        }
    });

    let names: Vec<&str> = subjects.iter().map(|s| s.name.as_str()).collect();
    let ratio_head: String = names.iter().skip(1).map(|n| format!(" | {n} / {} (per-round range)", names[0])).collect();
    let ratio_cols = names.len().saturating_sub(1);
    println!("# coordinator HTTP benchmark: stores");
    println!();
    println!("{clients} concurrent clients, {secs} s per measurement, {rounds} rounds; {hosts} hosts preloaded ({})", setup.join(", "));
    println!();
    println!("| measurement | {}{ratio_head} | goal |", names.join(" | "));
    println!("|---|{}---|", "---|".repeat(names.len() + ratio_cols));
    println!("| check-ins/s, keep-alive mTLS | {} | |", row(&subjects, |s| &s.rates, 0));
    println!("| coordinator CPU s per 1,000 check-ins | {} | |", row(&subjects, |s| &s.coord_cpu, 3));
    println!("| coordinator + database CPU s per 1,000 check-ins | {} | ≤ 2 |", row(&subjects, |s| &s.total_cpu, 3));
    let memory: Vec<String> = subjects
        .iter()
        .map(|s| {
            let coord = rss_kib(s.coord.child.id()).0 as f64 / 1024.0;
            let db = s.db.as_ref().and_then(|db| postmaster_pid(&db.data_dir())).map(tree_pss_kib);
            match db {
                Some(kib) => format!("{coord:.1} + database {:.1}", kib as f64 / 1024.0),
                None => format!("{coord:.1}"),
            }
        })
        .collect();
    println!("| coordinator RSS (+ database PSS) at the end, MiB | {} |{} |", memory.join(" | "), " |".repeat(ratio_cols));
    println!();
    println!("SQLite's CPU is the coordinator's own; PostgreSQL's database CPU is its postmaster's and every backend's, from /proc.");
    // What went wrong on a store shows in its coordinator's warnings and errors.
    for s in &subjects {
        let log = std::fs::read_to_string(&s.log).unwrap_or_default();
        let bad: Vec<&str> = log.lines().filter(|l| l.contains("\"ERROR\"") || l.contains("\"WARN\"")).collect();
        if !bad.is_empty() {
            println!();
            println!("{}: {} warnings or errors in the coordinator's log, the first:", s.name, bad.len());
            for line in bad.iter().take(5) {
                println!("    {line}");
            }
        }
    }
    // Dropped field by field in order: each coordinator before the database under it.
    drop(subjects);
}
