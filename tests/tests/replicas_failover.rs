//! Coordinator replicas on one PostgreSQL database (issue 25), over real processes: three
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
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use drover_client::{ClientIdentity, CoordinatorClient};
use drover_devkit::postgres::{self as pg, PostgresServer};
use drover_proto::enroll::{CreateHostRequest, CreateHostResponse, EnrollRequest, EnrollResponse};
use drover_proto::keys::KeySigner;
use drover_proto::publish::PublishRequest;
use drover_proto::release::{ReleaseParams, build_release};
use drover_proto::resolve::ReleaseMeta;
use drover_proto::spec::FleetSpec;
use drover_tests::procs::{Proc, SitePaths, init_site, log_tail, start_server_with_stderr};
use drover_tests::sim_agent::{Behaviour, SimAgent};
use drover_tests::{key_and_csr, wall_now};
use ed25519_dalek::SigningKey;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::task::JoinSet;

const HOSTS: usize = 8;
const BUDGET: usize = 3;
const REPLICAS: usize = 3;
const LEASE_MS: u64 = 1000;

fn hostname(i: usize) -> String {
    format!("gpu-{i:02}")
}

/// Eight gpu hosts, one channel in two waves (a canary of two, then the rest), all under one
/// budget of three hosts out of service.
fn spec() -> Vec<u8> {
    let hosts: serde_json::Map<String, Value> = (0..HOSTS)
        .map(|i| {
            let mut tags = vec!["gpu".to_owned()];
            if i < 2 {
                tags.push("canary".to_owned());
            }
            let closure = format!("/nix/store/{i:0>32}-nixos-system-{}-25.05", hostname(i));
            (hostname(i), json!({ "system": "x86_64-linux", "tags": tags, "channel": "gpu", "closure": closure }))
        })
        .collect();
    serde_json::to_vec(&json!({
        "hosts": hosts,
        "channels": { "gpu": { "rolloutPolicy": "two-waves", "freshnessWindowSecs": "1d", "signingIntervalSecs": "4h" } },
        "rolloutPolicies": { "two-waves": { "waves": [
            { "selector": { "tags": ["canary"] }, "soakSecs": 1 },
            { "selector": { "all": true }, "soakSecs": 1 }
        ] } },
        "disruptionBudgets": [ { "selector": { "tags": ["gpu"] }, "maxInFlight": BUDGET } ]
    }))
    .expect("spec")
}

fn publish_request() -> PublishRequest {
    let spec = FleetSpec::from_json(&spec()).expect("spec");
    let params = ReleaseParams { meta: ReleaseMeta { ci_commit: "fa11".into(), created_at: wall_now() }, version: 1, previous: None };
    let files = build_release(&spec, &params, &[KeySigner::new(SigningKey::from_bytes(&[9u8; 32]))]).expect("release");
    PublishRequest::from_files(&files, Some("test".into())).expect("utf-8")
}

/// splitmix64: a seeded sequence, so a failing run is replayed by its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// One state dir (shared by the replicas, as each replica's copy of it would be), the
/// database server, and the replicas of the current run.
struct Cluster {
    paths: SitePaths,
    db: PostgresServer,
    ports: Vec<u16>,
    urls: Vec<String>,
    replicas: Vec<Option<Proc>>,
}

impl Cluster {
    /// The three replicas' configs for database `database`, on fresh ports.
    fn configure(&mut self, database: &str) {
        self.db.psql(&format!("CREATE DATABASE {database} OWNER drover")).expect("create database");
        let url = format!("{}/{database}", self.db.url().rsplit_once('/').expect("a database in the URL").0);
        self.ports =
            (0..REPLICAS).map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()).collect();
        self.urls = self.ports.iter().map(|p| format!("https://127.0.0.1:{p}")).collect();
        let public: Vec<String> = self.urls.iter().map(|u| format!("\"{u}\"")).collect();
        for (i, port) in self.ports.iter().enumerate() {
            let config = format!(
                "listen = \"127.0.0.1:{port}\"\nstate_dir = \"{}\"\npublic_urls = [{}]\ntrust_file = \"{}\"\nagent_binary = \"{}\"\n\n\
                 [agent]\nlong_poll_secs = 2\n\n[hosts]\noffline_after_secs = 60\n\n\
                 [rollouts]\ninterval_secs = 1\ndebounce_ms = 50\nconfirm_window_secs = 10\nconfirm_deadline_secs = 120\n\n\
                 [store]\nbackend = \"postgres\"\nurl = \"{url}\"\npassword_file = \"{}\"\nlease_ms = {LEASE_MS}\nreplica = \"r{i}\"\n",
                self.paths.state.display(),
                public.join(", "),
                self.paths.dir.join("trust.json").display(),
                drover_tests::workspace_binary("drover-agent").display(),
                self.db.password_file().display(),
            );
            std::fs::write(self.config(i), config).expect("config");
        }
    }

    fn config(&self, i: usize) -> PathBuf {
        self.paths.dir.join(format!("r{i}.toml"))
    }

    fn log(&self, i: usize) -> PathBuf {
        self.paths.dir.join(format!("r{i}.log"))
    }

    fn start(&mut self, i: usize) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.log(i)).expect("log");
        let mut cmd = Command::new(drover_tests::workspace_binary("drover-coordinator"));
        cmd.arg("serve").arg("--config").arg(self.config(i));
        let started = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || start_server_with_stderr(cmd, Stdio::from(log))));
        let proc = started.unwrap_or_else(|_| panic!("replica r{i} did not start:\n{}", log_tail(&self.log(i), 20)));
        assert_eq!(proc.url, self.urls[i]);
        self.replicas[i] = Some(proc);
    }

    /// Each replica's panics, if any, and its last log lines.
    fn logs(&self) -> String {
        (0..REPLICAS)
            .map(|i| {
                let all = std::fs::read_to_string(self.log(i)).unwrap_or_default();
                let panics: Vec<&str> = all.lines().filter(|l| l.contains("panicked at")).take(3).collect();
                format!("--- replica r{i}: {}\n{}\n", panics.join("\n"), log_tail(&self.log(i), 25))
            })
            .collect()
    }

    fn client(&self, urls: &[String], identity: bool) -> CoordinatorClient {
        let read = |p: &Path| std::fs::read(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
        let ca = drover_client::parse_certificates("ca", &read(&self.paths.ops.join("ca.crt"))).expect("ca");
        let identity = identity.then(|| {
            ClientIdentity::from_pem(&read(&self.paths.ops.join("alice.crt")), &read(&self.paths.ops.join("alice.key"))).expect("admin")
        });
        CoordinatorClient::new("replicas-test", urls, &ca, identity, Duration::from_secs(10)).expect("client")
    }

    /// The replica whose metrics say it leads, if exactly one does.
    async fn leader(&self) -> Option<usize> {
        let mut leading = Vec::new();
        for (i, url) in self.urls.iter().enumerate() {
            if self.replicas[i].is_none() {
                continue;
            }
            let Ok(bytes) = self.client(std::slice::from_ref(url), true).get_bytes("/metrics").await else { continue };
            if String::from_utf8_lossy(&bytes).lines().any(|l| l.starts_with("drover_leader{") && l.ends_with(" 1")) {
                leading.push(i);
            }
        }
        (leading.len() == 1).then(|| leading[0])
    }

    /// Polls `check` every 50 ms until it returns `Some`, for at most `secs`.
    async fn wait_for<T>(&self, what: &str, secs: u64, mut check: impl AsyncFnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(v) = check().await {
                return v;
            }
            assert!(Instant::now() < deadline, "{what}: not after {secs} s\n{}", self.logs());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Every host created by the admin and enrolled, as a healthy simulated agent listing all
    /// replicas.
    async fn enroll_all(&self) -> Vec<SimAgent> {
        let admin = self.client(&self.urls, true);
        let anonymous = self.client(&self.urls, false);
        let trust_sha256 = hex::encode(Sha256::digest(&self.paths.trust));
        let mut agents = Vec::new();
        for i in 0..HOSTS {
            let name = hostname(i);
            let req = CreateHostRequest { hostname: name.clone(), trust_sha256: trust_sha256.clone(), token_ttl_secs: None };
            let created: CreateHostResponse = admin.post_json("/v1/hosts", &req).await.expect("create host");
            let (key_pem, csr) = key_and_csr(&name);
            let req = EnrollRequest { host_id: created.host_id.clone(), token: created.token, csr, seal_key: None, evidence_csr: None };
            let enrolled: EnrollResponse = anonymous.post_json("/v1/enroll", &req).await.expect("enroll");
            let (crt, key) = (self.paths.dir.join(format!("{name}.crt")), self.paths.dir.join(format!("{name}.key")));
            std::fs::write(&crt, &enrolled.certificate).expect("cert");
            std::fs::write(&key, &key_pem).expect("key");
            let id = uuid::Uuid::parse_str(&enrolled.host_id).expect("uuid");
            let mut agent = SimAgent::new(
                &self.urls[0],
                &self.paths.ops.join("ca.crt"),
                (&crt, &key),
                &name,
                id,
                &self.paths.trust,
                &enrolled.director_public_key,
                Behaviour::Healthy,
            );
            agent.reconnect_to(&self.urls);
            agents.push(agent);
        }
        agents
    }
}

/// The agents, each checking in on its own task until told to stop, retrying shortly on an
/// error (a replica went away under a request).
fn run_fleet(agents: Vec<SimAgent>, stop: Arc<AtomicBool>) -> JoinSet<(SimAgent, usize)> {
    let mut tasks = JoinSet::new();
    for mut agent in agents {
        let stop = stop.clone();
        tasks.spawn(async move {
            let mut errors = 0;
            while !stop.load(Ordering::SeqCst) {
                if agent.step(wall_now()).await.is_err() {
                    errors += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            (agent, errors)
        });
    }
    tasks
}

/// Every event, all pages, in id order.
async fn all_events(admin: &CoordinatorClient) -> Vec<Value> {
    let mut out = Vec::new();
    let mut after = 0;
    loop {
        let page: Value = admin.get_json(&format!("/v1/events?after={after}&limit=500")).await.expect("events");
        out.extend(page["items"].as_array().expect("items").iter().cloned());
        match page["next"].as_i64() {
            Some(next) => after = next,
            None => return out,
        }
    }
}

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
    let mut rng = Rng(seed);
    cluster.configure(&format!("run{run}"));
    cluster.replicas = (0..REPLICAS).map(|_| None).collect();
    for i in 0..REPLICAS {
        cluster.start(i);
    }
    let first_leader = cluster.wait_for("a first leader", 20, async || cluster.leader().await).await;
    let agents = cluster.enroll_all().await;
    let stop = Arc::new(AtomicBool::new(false));
    let fleet = run_fleet(agents, stop.clone());
    let admin = cluster.client(&cluster.urls, true);
    let published: Result<Value, _> = admin.post_json("/v1/releases", &publish_request()).await;
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
    let kill_after_ms = rng.next() % 4000;
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
            let jobs = jobs["jobs"].as_array()?;
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
    let events = all_events(&admin).await;
    let mut dispatched: BTreeMap<String, usize> = BTreeMap::new();
    for e in events.iter().filter(|e| e["kind"] == "rollout.host" && e["data"]["transition"] == "Pending -> Activating") {
        *dispatched.entry(e["hostId"].as_str().unwrap_or("?").to_owned()).or_default() += 1;
    }
    assert!(dispatched.len() == HOSTS && dispatched.values().all(|n| *n == 1), "run {run} (seed {seed}): dispatches {dispatched:?}");
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
    let tokens: Vec<i64> = elected.iter().filter_map(|e| e["data"]["token"].as_i64()).collect();
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "run {run} (seed {seed}): fencing tokens rise: {tokens:?}");

    cluster.replicas.clear();
    RunReport { kill_after_ms, takeover_ms, agent_errors: agents.iter().map(|(_, e)| e).sum() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_leader_killed_at_random_moments_loses_and_duplicates_nothing() {
    let runs: usize = std::env::var("DROVER_FAILOVER_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(10);
    let first_seed: u64 = std::env::var("DROVER_FAILOVER_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(25);
    let dir = tempfile::tempdir().expect("tempdir");
    let paths = init_site(dir.path());
    let db = PostgresServer::start(pg::PgOptions::default()).expect("postgres starts");
    let mut cluster = Cluster { paths, db, ports: Vec::new(), urls: Vec::new(), replicas: Vec::new() };
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
