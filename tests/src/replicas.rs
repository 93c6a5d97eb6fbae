//! Coordinator replicas on one PostgreSQL database as real processes, for the replica tests:
//! one state dir shared by the replicas (as each replica's copy of it would be),
//! Debian's PostgreSQL in a temporary directory, a config per replica, simulated agents that
//! list every replica's URL, and the reads the tests judge by (who leads, every event).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use drover_client::{ClientIdentity, CoordinatorClient};
use drover_devkit::postgres::PostgresServer;
use drover_proto::enroll::{CreateHostRequest, CreateHostResponse, EnrollRequest, EnrollResponse};
use drover_proto::keys::KeySigner;
use drover_proto::publish::PublishRequest;
use drover_proto::release::{ReleaseParams, build_release};
use drover_proto::resolve::ReleaseMeta;
use drover_proto::spec::FleetSpec;
use ed25519_dalek::SigningKey;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::task::JoinSet;

use crate::procs::{Proc, SitePaths, init_site, log_tail, start_server_with_stderr};
use crate::sim_agent::{Behaviour, SimAgent};
use crate::{key_and_csr, wall_now};

/// Host `i`'s name.
pub fn hostname(i: usize) -> String {
    format!("gpu-{i:02}")
}

/// `hosts` gpu hosts, one channel in two waves (a canary of two, then the rest, each soaking
/// a second), all under one budget of `budget` hosts out of service.
pub fn spec(hosts: usize, budget: usize) -> Vec<u8> {
    let all: serde_json::Map<String, Value> = (0..hosts)
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
        "hosts": all,
        "channels": { "gpu": { "rolloutPolicy": "two-waves", "freshnessWindowSecs": "1d", "signingIntervalSecs": "4h" } },
        "rolloutPolicies": { "two-waves": { "waves": [
            { "selector": { "tags": ["canary"] }, "soakSecs": 1 },
            { "selector": { "all": true }, "soakSecs": 1 }
        ] } },
        "disruptionBudgets": [ { "selector": { "tags": ["gpu"] }, "maxInFlight": budget } ]
    }))
    .expect("spec")
}

/// The release CI would publish for [`spec`], signed with the key the site's trust file names.
pub fn publish_request(hosts: usize, budget: usize) -> PublishRequest {
    let spec = FleetSpec::from_json(&spec(hosts, budget)).expect("spec");
    let params = ReleaseParams { meta: ReleaseMeta { ci_commit: "fa11".into(), created_at: wall_now() }, version: 1, previous: None };
    let files = build_release(&spec, &params, &[KeySigner::new(SigningKey::from_bytes(&[9u8; 32]))]).expect("release");
    PublishRequest::from_files(&files, Some("test".into())).expect("utf-8")
}

/// One state dir (shared by the replicas, as each replica's copy of it would be), the
/// database server, and the replicas of the current run.
pub struct Cluster {
    _dir: tempfile::TempDir,
    /// The site: state dir, admin credential, trust file.
    pub paths: SitePaths,
    /// The database server.
    pub db: PostgresServer,
    /// Each replica's port.
    pub ports: Vec<u16>,
    /// Each replica's `https://` URL.
    pub urls: Vec<String>,
    /// The running replicas (`None`: stopped or killed).
    pub replicas: Vec<Option<Proc>>,
    /// Hosts enrolled by [`Cluster::enroll_all`].
    pub hosts: usize,
    /// The leader lease, milliseconds.
    pub lease_ms: u64,
}

impl Cluster {
    /// A fresh site and database server; no replica yet.
    pub fn new(hosts: usize, lease_ms: u64) -> Cluster {
        let dir = tempfile::tempdir().expect("tempdir");
        let paths = init_site(dir.path());
        let db = PostgresServer::start(drover_devkit::postgres::PgOptions::default()).expect("postgres starts");
        Cluster { _dir: dir, paths, db, ports: Vec::new(), urls: Vec::new(), replicas: Vec::new(), hosts, lease_ms }
    }

    /// The URL of database `database` on this server.
    pub fn database_url(&self, database: &str, port: u16) -> String {
        let url = self.db.url();
        let base = url.rsplit_once(':').expect("a port in the URL").0;
        format!("{base}:{port}/{database}")
    }

    /// Creates database `database` and writes `count` replicas' configs for it, on fresh
    /// ports; none is started.
    pub fn configure(&mut self, database: &str, count: usize) {
        self.db.psql(&format!("CREATE DATABASE {database} OWNER drover")).expect("create database");
        self.ports =
            (0..count).map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()).collect();
        self.urls = self.ports.iter().map(|p| format!("https://127.0.0.1:{p}")).collect();
        self.replicas = (0..count).map(|_| None).collect();
        for i in 0..count {
            self.write_config(i, &self.database_url(database, self.db.port()));
        }
    }

    /// Writes replica `i`'s config, its store at `database_url`.
    pub fn write_config(&self, i: usize, database_url: &str) {
        let public: Vec<String> = self.urls.iter().map(|u| format!("\"{u}\"")).collect();
        {
            let port = self.ports[i];
            let config = format!(
                "listen = \"127.0.0.1:{port}\"\nstate_dir = \"{}\"\npublic_urls = [{}]\ntrust_file = \"{}\"\nagent_binary = \"{}\"\n\n\
                 [agent]\nlong_poll_secs = 2\n\n[hosts]\noffline_after_secs = 60\n\n\
                 [rollouts]\ninterval_secs = 1\ndebounce_ms = 50\nconfirm_window_secs = 10\nconfirm_deadline_secs = 120\n\n\
                 [store]\nbackend = \"postgres\"\nurl = \"{database_url}\"\npassword_file = \"{}\"\nlease_ms = {}\nreplica = \"r{i}\"\n",
                self.paths.state.display(),
                public.join(", "),
                self.paths.dir.join("trust.json").display(),
                crate::workspace_binary("drover-agent").display(),
                self.db.password_file().display(),
                self.lease_ms,
            );
            std::fs::write(self.config(i), config).expect("config");
        }
    }

    /// Replica `i`'s config file.
    pub fn config(&self, i: usize) -> PathBuf {
        self.paths.dir.join(format!("r{i}.toml"))
    }

    /// Replica `i`'s log.
    pub fn log(&self, i: usize) -> PathBuf {
        self.paths.dir.join(format!("r{i}.log"))
    }

    /// Starts replica `i` and waits until it listens.
    pub fn start(&mut self, i: usize) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.log(i)).expect("log");
        let mut cmd = Command::new(crate::workspace_binary("drover-coordinator"));
        cmd.arg("serve").arg("--config").arg(self.config(i));
        let started = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || start_server_with_stderr(cmd, Stdio::from(log))));
        let proc = started.unwrap_or_else(|_| panic!("replica r{i} did not start:\n{}", log_tail(&self.log(i), 20)));
        assert_eq!(proc.url, self.urls[i]);
        self.replicas[i] = Some(proc);
    }

    /// Each replica's panics, if any, and its last log lines.
    pub fn logs(&self) -> String {
        (0..self.ports.len())
            .map(|i| {
                let all = std::fs::read_to_string(self.log(i)).unwrap_or_default();
                let panics: Vec<&str> = all.lines().filter(|l| l.contains("panicked at")).take(3).collect();
                format!("--- replica r{i}: {}\n{}\n", panics.join("\n"), log_tail(&self.log(i), 25))
            })
            .collect()
    }

    /// A client for `urls`, as the admin or anonymous.
    pub fn client(&self, urls: &[String], identity: bool) -> CoordinatorClient {
        let read = |p: &Path| std::fs::read(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
        let ca = drover_client::parse_certificates("ca", &read(&self.paths.ops.join("ca.crt"))).expect("ca");
        let identity = identity.then(|| {
            ClientIdentity::from_pem(&read(&self.paths.ops.join("alice.crt")), &read(&self.paths.ops.join("alice.key"))).expect("admin")
        });
        CoordinatorClient::new("replicas-test", urls, &ca, identity, Duration::from_secs(10)).expect("client")
    }

    /// The replica whose metrics say it leads, if exactly one does.
    pub async fn leader(&self) -> Option<usize> {
        let mut leading = Vec::new();
        for (i, url) in self.urls.iter().enumerate() {
            if self.replicas[i].is_none() {
                continue;
            }
            // Bounded: a replica cut off from the database answers only after its pool gives up.
            let client = self.client(std::slice::from_ref(url), true);
            let Ok(Ok(bytes)) = tokio::time::timeout(Duration::from_millis(500), client.get_bytes("/metrics")).await else { continue };
            if String::from_utf8_lossy(&bytes).lines().any(|l| l.starts_with("drover_leader{") && l.ends_with(" 1")) {
                leading.push(i);
            }
        }
        (leading.len() == 1).then(|| leading[0])
    }

    /// Polls `check` every 50 ms until it returns `Some`, for at most `secs`.
    pub async fn wait_for<T>(&self, what: &str, secs: u64, mut check: impl AsyncFnMut() -> Option<T>) -> T {
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
    pub async fn enroll_all(&self) -> Vec<SimAgent> {
        let admin = self.client(&self.urls, true);
        let anonymous = self.client(&self.urls, false);
        let trust_sha256 = hex::encode(Sha256::digest(&self.paths.trust));
        let mut agents = Vec::new();
        for i in 0..self.hosts {
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
            // Agents spread over the replicas: each lists them all, starting at a different one.
            let mut urls = self.urls.clone();
            let first = i % urls.len();
            urls.rotate_left(first);
            agent.reconnect_to(&urls);
            agents.push(agent);
        }
        agents
    }
}

/// The agents, each checking in on its own task until told to stop, retrying shortly on an
/// error (a replica went away under a request).
pub fn run_fleet(agents: Vec<SimAgent>, stop: Arc<AtomicBool>) -> JoinSet<(SimAgent, usize)> {
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
