//! The coordinator over the network, against a bare server in the same run: check-ins per
//! second over keep-alive mTLS connections from N concurrent clients, full mTLS handshakes
//! per second, and the coordinator's memory with 10,000 enrolled hosts that have all checked
//! in. The baseline (`bare-tls-server`) is hyper + tokio-rustls with the coordinator's own
//! TLS configuration answering the same bytes and doing nothing else; both run as separate
//! processes on loopback, sharing the machine with the load generator exactly alike.
//!
//! Run: `cargo build --release -p drover-coordinator && cargo bench -p drover-tests --bench
//! coordinator_http` (options after `--`: `--clients N`, `--secs S`, `--rounds R`, `--hosts H`).
//!
//! With `--stores sqlite,postgres` it compares the coordinator's stores instead: see
//! the `stores` module.

// A bench is its own crate root, so its modules would sit beside every other bench's file.
#[path = "coordinator_http/stores.rs"]
mod stores;

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use drover_client::{ClientIdentity, CoordinatorClient};
use drover_engine::state_dir::StateDir;
use drover_engine::store::{CertKind, NewCert, NewHost, NewIntent, SqliteStore, Store};
use drover_proto::names::RolloutId;
use drover_proto::time::Time;
use drover_tests::procs::{cpu_secs, release_binary as binary, rss_kib, start_server as start};
use rustls::pki_types::CertificateDer;
use uuid::Uuid;

use drover_client::rustls;

type Creds = (String, String);

fn client(url: &str, ca: &[CertificateDer<'static>], creds: &Creds) -> CoordinatorClient {
    let identity = ClientIdentity::from_pem(creds.0.as_bytes(), creds.1.as_bytes()).expect("identity");
    CoordinatorClient::new("bench", &[url.to_owned()], ca, Some(identity), Duration::from_secs(30)).expect("client")
}

/// Requests per second from `clients` tasks over `secs`, each on its own kept-alive connection.
async fn keep_alive_rate(url: &str, ca: &[CertificateDer<'static>], creds: &[Creds], clients: usize, secs: u64, post: bool) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for c in creds.iter().take(clients) {
        let client = client(url, ca, c);
        let done = done.clone();
        tasks.push(tokio::spawn(async move {
            let report = serde_json::json!({ "agentVersion": "bench", "bootId": "b" });
            while Instant::now() < deadline {
                let ok = if post {
                    client.post_json::<_, serde_json::Value>("/v1/agent/checkin", &report).await.is_ok()
                } else {
                    client.get_bytes("/healthz").await.is_ok()
                };
                assert!(ok, "request failed under load");
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        t.await.expect("load task");
    }
    done.load(Ordering::Relaxed) as f64 / secs as f64
}

/// One measurement over several rounds: the mean rate of each server, and the per-round
/// ratios (coordinator / baseline) so the spread is visible beside the mean ratio.
#[derive(Default)]
struct Rates {
    coordinator: Vec<f64>,
    bare: Vec<f64>,
}

impl Rates {
    fn add(&mut self, coordinator: bool, rate: f64) {
        if coordinator { self.coordinator.push(rate) } else { self.bare.push(rate) }
    }

    fn row(&self) -> String {
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
        let ratios: Vec<f64> = self.coordinator.iter().zip(&self.bare).map(|(c, b)| c / b).collect();
        let lo = ratios.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = ratios.iter().copied().fold(0.0, f64::max);
        let (c, b) = (mean(&self.coordinator), mean(&self.bare));
        format!("{c:.0} | {b:.0} | **{:.2}** ({lo:.2}–{hi:.2})", c / b)
    }
}

/// Full mTLS handshakes per second: every request on a new client, hence a new connection.
async fn handshake_rate(url: &str, ca: &[CertificateDer<'static>], creds: &[Creds], clients: usize, secs: u64) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for c in creds.iter().take(clients) {
        let (url, ca, done, c) = (url.to_owned(), ca.to_vec(), done.clone(), c.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                let fresh = client(&url, &ca, &c);
                assert!(fresh.get_bytes("/healthz").await.is_ok(), "handshake failed under load");
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        t.await.expect("load task");
    }
    done.load(Ordering::Relaxed) as f64 / secs as f64
}

/// The options after `cargo bench -p drover-tests --bench coordinator_http --`.
#[derive(Parser)]
#[command(name = "coordinator_http")]
struct Args {
    /// Concurrent clients, each on its own connection with its own identity.
    #[arg(long, default_value_t = 32)]
    clients: usize,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 5)]
    secs: u64,
    /// Rounds, alternating which server goes first.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Hosts enrolled straight into the store (at least `--clients`).
    #[arg(long, default_value_t = 10_000)]
    hosts: usize,
    /// Compare the coordinator on these stores (`sqlite`, `postgres`, `postgres-uncached`; the first is the
    /// baseline) instead of the coordinator against a bare server.
    #[arg(long, value_delimiter = ',', value_parser = ["sqlite", "postgres", "postgres-uncached"])]
    stores: Vec<String>,
    /// What `cargo bench` passes to every bench binary; nothing to do with it.
    #[arg(long, hide = true)]
    bench: bool,
}

/// The time now, as the store records it.
fn now() -> Time {
    Time::from_unix(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs() as i64).expect("now")
}

/// `drover-coordinator init` of a state dir at `state_path`, opened.
fn init_state(coordinator: &std::path::Path, state_path: &std::path::Path) -> StateDir {
    let out = Command::new(coordinator).args(["init", "--state-dir"]).arg(state_path).args(["--san", "127.0.0.1"]).output().expect("init");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    StateDir::open(state_path).expect("state")
}

/// Writes `DIR/trust.json` and a stand-in agent binary, and the config `DIR/NAME` for a
/// coordinator on a free port over `state_path`, with `sections` (TOML tables) appended.
fn write_config(dir: &std::path::Path, name: &str, state_path: &std::path::Path, sections: &str) -> std::path::PathBuf {
    let ci = ed25519_dalek::SigningKey::from_bytes(&[9u8; 32]).verifying_key();
    let trust = serde_json::json!({ "schemaVersion": 1, "ci": { "threshold": 1, "keys": [{
        "keyId": drover_proto::keys::KeyId::of(&ci).to_string(), "alg": "ed25519",
        "publicKey": drover_proto::keys::verifying_key_to_pem(&ci).expect("pem") }] } });
    std::fs::write(dir.join("trust.json"), trust.to_string()).expect("trust");
    std::fs::write(dir.join("agent"), b"not an agent").expect("agent");
    let config = format!(
        "listen = \"127.0.0.1:0\"\nstate_dir = \"{}\"\npublic_urls = [\"https://127.0.0.1:1\"]\ntrust_file = \"{}\"\nagent_binary = \"{}\"\n\n{sections}",
        state_path.display(),
        dir.join("trust.json").display(),
        dir.join("agent").display()
    );
    let path = dir.join(name);
    std::fs::write(&path, config).expect("config");
    path
}

/// Enrolls `hosts` hosts straight into `store` (what POST /v1/enroll records), each with a
/// real certificate from `state`'s CA and an intent, so every check-in has work and returns
/// at once; their credentials.
fn preload(store: &dyn Store, state: &StateDir, hosts: usize) -> Vec<Creds> {
    let now = now();
    let rollout = RolloutId::new("gpu", "bench").expect("id");
    let mut creds: Vec<Creds> = Vec::with_capacity(hosts);
    for i in 0..hosts {
        let hostname = format!("gpu-{i:05}");
        let host = store.create_host(&NewHost { hostname: hostname.clone(), created_at: now, token: None }).expect("host");
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key");
        let csr = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params").serialize_request(&key).expect("csr");
        let cert = state.ca().issue_host_from_csr(&csr.pem().expect("pem"), host.id, &hostname, now).expect("cert");
        let record = NewCert {
            serial: cert.serial_hex,
            kind: CertKind::Host,
            host_id: Some(host.id),
            subject: hostname,
            not_before: cert.not_before,
            not_after: cert.not_after,
        };
        store.record_cert(&record).expect("record");
        let envelope = serde_json::json!({ "signed": { "host": host.id.to_string() }, "signatures": [] }).to_string().into_bytes();
        store
            .put_intent(&NewIntent {
                intent_id: Uuid::new_v4(),
                host_id: host.id,
                rollout_id: rollout.clone(),
                envelope,
                confirm_deadline: None,
                created_at: now,
            })
            .expect("intent");
        creds.push((cert.pem, key.serialize_pem()));
    }
    creds
}

fn main() {
    let Args { clients, secs, rounds, hosts, stores, bench: _ } = Args::parse();
    if hosts < clients {
        eprintln!("coordinator_http: --hosts {hosts} is fewer than --clients {clients}: each client needs its own host");
        std::process::exit(2);
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    if !stores.is_empty() {
        stores::compare(&stores, clients, secs, rounds, hosts);
        return;
    }

    let dir = tempfile::tempdir().expect("tempdir");
    let state_path = dir.path().join("state");
    let coordinator = binary("drover-coordinator");
    let state = init_state(&coordinator, &state_path);
    let store = SqliteStore::open(state.db_path()).expect("store");
    let setup = Instant::now();
    let creds = preload(&store, &state, hosts);
    drop(store);
    let setup_secs = setup.elapsed().as_secs_f64();
    write_config(dir.path(), "coordinator.toml", &state_path, "");
    let ca = vec![CertificateDer::from(state.ca().cert_der().to_vec())];

    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    runtime.block_on(async {
        let coord = {
            let mut cmd = Command::new(&coordinator);
            cmd.args(["serve", "--config"]).arg(dir.path().join("coordinator.toml")).env("DROVER_LOG", "warn");
            start(cmd)
        };
        // The bare server answers exactly what the coordinator answers a check-in.
        let sample: serde_json::Value = client(&coord.url, &ca, &creds[0])
            .post_json("/v1/agent/checkin", &serde_json::json!({ "agentVersion": "bench", "bootId": "b" }))
            .await
            .expect("sample check-in");
        std::fs::write(dir.path().join("body.json"), serde_json::to_vec(&sample).expect("json")).expect("body");
        let bare = {
            let mut cmd = Command::new(binary("bare-tls-server"));
            cmd.arg("--state-dir").arg(&state_path).arg("--body").arg(dir.path().join("body.json"));
            start(cmd)
        };

        // Rounds alternate which server goes first, so drift in the machine's load over the
        // run (other tenants of the VM host, CPU boost) falls on both alike.
        let (mut keep, mut hs, mut cpu_per) = (Rates::default(), Rates::default(), Rates::default());
        for round in 0..rounds {
            let order = if round % 2 == 0 { [&coord.url, &bare.url] } else { [&bare.url, &coord.url] };
            for url in order {
                let is_coord = *url == coord.url;
                let pid = if is_coord { coord.child.id() } else { bare.child.id() };
                let cpu_before = cpu_secs(pid, false);
                let k = keep_alive_rate(url, &ca, &creds, clients, secs, true).await;
                let cpu = cpu_secs(pid, false) - cpu_before;
                let h = handshake_rate(url, &ca, &creds, clients, secs).await;
                keep.add(is_coord, k);
                hs.add(is_coord, h);
                // CPU microseconds the server spent per check-in answered.
                cpu_per.add(is_coord, cpu * 1e6 / (k * secs as f64));
            }
        }

        // Every host checks in once (its own connection), then the coordinator's memory.
        let started = Instant::now();
        let next = Arc::new(AtomicU64::new(0));
        let creds = Arc::new(creds);
        let mut tasks = Vec::new();
        for _ in 0..64 {
            let (next, creds, ca, url) = (next.clone(), creds.clone(), ca.clone(), coord.url.clone());
            tasks.push(tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                    let Some(c) = creds.get(i) else { break };
                    let r: Result<serde_json::Value, _> = client(&url, &ca, c)
                        .post_json("/v1/agent/checkin", &serde_json::json!({ "agentVersion": "bench", "bootId": "b" }))
                        .await;
                    assert!(r.is_ok(), "check-in of host {i} failed: {r:?}");
                }
            }));
        }
        for t in tasks {
            t.await.expect("check-in task");
        }
        let all_in = started.elapsed().as_secs_f64();
        let (rss, hwm) = rss_kib(coord.child.id());
        let (bare_rss, _) = rss_kib(bare.child.id());

        println!("# coordinator HTTP benchmark");
        println!();
        println!(
            "{clients} concurrent clients, {secs} s per measurement, {rounds} rounds; {hosts} enrolled hosts (setup {setup_secs:.1} s)"
        );
        println!();
        println!("| measurement | coordinator | bare hyper + rustls (baseline) | ratio (per-round range) | goal |");
        println!("|---|---|---|---|---|");
        println!("| check-ins/s, keep-alive mTLS | {} | ≥ 0.60 |", keep.row());
        println!("| full mTLS handshakes/s | {} | ≥ 0.90 |", hs.row());
        println!("| server CPU µs per keep-alive check-in | {} | |", cpu_per.row());
        println!(
            "| RSS after all {hosts} hosts checked in (MiB) | {:.1} (peak {:.1}) | {:.1} | | < 200 |",
            rss as f64 / 1024.0,
            hwm as f64 / 1024.0,
            bare_rss as f64 / 1024.0
        );
        println!();
        println!("all {hosts} hosts checked in once, each on a new connection, in {all_in:.1} s");
    });
}
