//! End-to-end harness for Drover: a real coordinator (in this process, real TLS 1.3 on
//! 127.0.0.1, real SQLite file, real state dir) driven by real clients — `curl`, `openssl`,
//! and the `drover-agent` binary from this build.

#![forbid(unsafe_code)]

pub mod anonymous;
pub mod api;
pub mod benchkit;
pub mod binaries;
pub mod bus;
pub mod fleet;
pub mod logcapture;
pub mod maas;
pub mod procs;
pub mod racks;
pub mod replicas;
pub mod sandbox;
pub mod scheduler;
pub mod sim_agent;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use drover_engine::app::Clock;
use drover_engine::config::{AgentConfig, Config, EnrollmentConfig, HostsConfig, RolloutsConfig};
use drover_engine::identity::Role;
use drover_engine::pki::San;
use drover_engine::run::{Running, start_on};
use drover_engine::state_dir::StateDir;
use drover_engine::store::NewHost;
use drover_proto::keys::{KeyId, verifying_key_to_pem};
use drover_proto::time::Time;
use drover_proto::trust::{KeySetDoc, TrustDoc, TrustKeyDoc};
use ed25519_dalek::SigningKey;
use sha2::{Digest, Sha256};
use uuid::Uuid;

/// A clock the test moves by hand (token expiry, confirm deadlines).
pub struct ManualClock(AtomicI64);

impl ManualClock {
    /// Starting at `t`.
    pub fn at(t: Time) -> Arc<Self> {
        Arc::new(ManualClock(AtomicI64::new(t.unix())))
    }
    /// Moves time forward.
    pub fn advance(&self, secs: i64) {
        self.0.fetch_add(secs, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Time {
        Time::from_unix(self.0.load(Ordering::SeqCst)).unwrap_or(Time::EPOCH)
    }
}

/// The system clock now, as a `Time`.
pub fn wall_now() -> Time {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    Time::from_unix(i64::try_from(secs).unwrap_or(0)).unwrap_or(Time::EPOCH)
}

/// The CI key every test release is signed with.
pub const CI_KEY: [u8; 32] = [9u8; 32];

/// A canonical `trust.json` trusting [`CI_KEY`] alone (threshold 1, no windows).
pub fn ci_trust_json() -> Vec<u8> {
    let ci = SigningKey::from_bytes(&CI_KEY).verifying_key();
    let doc = TrustDoc {
        schema_version: 1,
        ci: KeySetDoc {
            threshold: 1,
            keys: vec![TrustKeyDoc {
                key_id: KeyId::of(&ci),
                alg: "ed25519".into(),
                public_key: verifying_key_to_pem(&ci).expect("pem"),
                not_before: None,
                not_after: None,
            }],
            reject_before: None,
        },
    };
    drover_proto::canonical::to_vec_of(&doc).expect("canonical")
}

/// A finished command's stdout and stderr, labelled, for a failing assertion's message.
pub fn output_text(out: &std::process::Output) -> String {
    format!("stdout: {}\nstderr: {}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// A binary of this workspace's build: next to the test executable's `deps/` directory, or
/// beside the running binary (`drover-bench` in `target/release/`); never older than its
/// sources: built first under cargo, refused outside it ([`binaries::fresh_binary`]).
pub fn workspace_binary(name: &str) -> PathBuf {
    binaries::fresh_binary(name)
}

/// A running coordinator and the credentials to talk to it.
pub struct Harness {
    /// Everything lives under here.
    pub dir: tempfile::TempDir,
    /// The coordinator.
    pub running: Running,
    /// Its URL.
    pub url: String,
    /// Its clock.
    pub clock: Arc<ManualClock>,
    /// The CA certificate (PEM file).
    pub ca: PathBuf,
    /// An admin operator's certificate and key.
    pub admin: (PathBuf, PathBuf),
    /// A viewer operator's certificate and key.
    pub viewer: (PathBuf, PathBuf),
    /// The operator's trust.json and its sha256.
    pub trust: (PathBuf, String),
}

fn write(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

impl Harness {
    /// Initialises a state dir, issues operator credentials and a CI trust file, and starts
    /// the coordinator on a fresh loopback port.
    pub async fn start() -> Harness {
        Self::start_with_long_poll(2).await
    }

    /// Like [`Harness::start`], holding idle check-ins for `long_poll_secs`.
    pub async fn start_with_long_poll(long_poll_secs: u64) -> Harness {
        Self::start_with_config(move |_, config| config.agent.long_poll_secs = long_poll_secs).await
    }

    /// Like [`Harness::start`], with the configuration adjusted by `tweak` (given the
    /// harness's directory) before the coordinator starts.
    pub async fn start_with_config(tweak: impl FnOnce(&Path, &mut Config)) -> Harness {
        let dir = tempfile::tempdir().expect("tempdir");
        let now = wall_now();
        let clock = ManualClock::at(now);
        let state_path = dir.path().join("state");
        let state = StateDir::init(&state_path, &[San::parse("127.0.0.1").expect("san")], now).expect("init");
        let ca = dir.path().join("ca.crt");
        write(&ca, state.ca().cert_pem().as_bytes());
        let mut creds = Vec::new();
        for (name, role) in [("alice", Role::Admin), ("victor", Role::Viewer)] {
            let cred = state.ca().issue_operator(name, role, now).expect("operator cert");
            let (crt, key) = (dir.path().join(format!("{name}.crt")), dir.path().join(format!("{name}.key")));
            write(&crt, cred.cert.pem.as_bytes());
            write(&key, cred.key_pem.as_bytes());
            creds.push((crt, key));
        }
        let trust_bytes = ci_trust_json();
        let trust = dir.path().join("trust.json");
        write(&trust, &trust_bytes);
        let trust_sha = hex::encode(Sha256::digest(&trust_bytes));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let url = format!("https://127.0.0.1:{}", addr.port());
        let mut config = Config {
            listen: addr,
            state_dir: state_path,
            public_urls: vec![url.clone()],
            trust_file: trust.clone(),
            agent_binary: workspace_binary("drover-agent"),
            agent_package: None,
            enrollment: EnrollmentConfig::default(),
            agent: AgentConfig { long_poll_secs: 2 },
            releases_dir: None,
            releases_poll_secs: 10,
            hosts: HostsConfig::default(),
            connections: Default::default(),
            rollouts: RolloutsConfig::default(),
            jobs: Default::default(),
            secrets: Default::default(),
            store: Default::default(),
            // Reconciler passes run on demand in tests, so each asserts what one pass did.
            maas: drover_engine::config::MaasConfig { poll_ms: 100, reconcile_interval_secs: 0, ..Default::default() },
            // Device controllers tick fast and give up on a device quickly.
            devices: drover_engine::config::DevicesConfig {
                tick_ms: 100,
                request_timeout_secs: 5,
                converge_timeout_secs: 15,
                poll_ms: 100,
            },
        };
        tweak(dir.path(), &mut config);
        drop(state);
        let running = start_on(listener, config, clock.clone()).await.expect("coordinator starts");
        let mut creds = creds.into_iter();
        let admin = creds.next().expect("admin");
        let viewer = creds.next().expect("viewer");
        Harness { dir, running, url, clock, ca, admin, viewer, trust: (trust, trust_sha) }
    }

    /// `curl` against the coordinator with TLS 1.3 and the CA, plus `args`; runs on the
    /// blocking pool so the in-process server keeps serving.
    pub async fn curl(&self, args: Vec<String>) -> Output {
        let mut full = vec!["-sS".to_owned(), "--tlsv1.3".to_owned(), "--cacert".to_owned(), self.ca.display().to_string()];
        full.extend(args);
        run_blocking("curl", full, Vec::new()).await
    }

    /// `curl` with a client certificate.
    pub async fn curl_as(&self, (cert, key): &(PathBuf, PathBuf), args: Vec<String>) -> Output {
        let mut full = vec!["--cert".to_owned(), cert.display().to_string(), "--key".to_owned(), key.display().to_string()];
        full.extend(args);
        self.curl(full).await
    }

    /// One request with `curl`, as `creds` (or anonymous), with an optional JSON body;
    /// returns the HTTP status (`"000"` when no response came back at all) and the body.
    pub async fn call(&self, creds: Option<&(PathBuf, PathBuf)>, method: &str, path: &str, body: Option<&str>) -> (String, String) {
        self.endpoint().call(creds, method, path, body).await
    }

    /// Runs the `drover` binary with `args` against this coordinator, presenting `creds`.
    pub async fn drover_as(&self, (cert, key): &(PathBuf, PathBuf), args: &[&str]) -> Output {
        let mut full: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        for (flag, value) in [
            ("--coordinator", self.url.clone()),
            ("--cert", cert.display().to_string()),
            ("--key", key.display().to_string()),
            ("--ca", self.ca.display().to_string()),
        ] {
            full.extend([flag.to_owned(), value]);
        }
        let bin = workspace_binary("drover");
        tokio::task::spawn_blocking(move || Command::new(bin).args(&full).stdin(Stdio::null()).output().expect("drover runs"))
            .await
            .expect("blocking task")
    }

    /// [`Harness::drover_as`] that must succeed: its stdout.
    pub async fn drover_ok(&self, creds: &(PathBuf, PathBuf), args: &[&str]) -> String {
        let out = self.drover_as(creds, args).await;
        assert!(out.status.success(), "drover {args:?}: {}", output_text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `drover enroll HOSTNAME` as the admin: the host's id and the one-time token its command
    /// embeds (read back out of the command the way the host's shell would receive it).
    pub async fn enroll_with_cli(&self, hostname: &str) -> (uuid::Uuid, String) {
        let trust = self.trust.0.display().to_string();
        let command = self.drover_ok(&self.admin, &["enroll", hostname, "--trust", &trust]).await;
        let token = command.split("printf '%s\\n' '").nth(1).and_then(|rest| rest.split('\'').next()).expect("token in the command");
        let id = command.split("--host-id '").nth(1).and_then(|rest| rest.split('\'').next()).expect("host id in the command");
        (uuid::Uuid::parse_str(id).expect("host id"), token.to_owned())
    }

    /// Creates a host through the real API as the admin; returns the JSON response.
    pub async fn create_host(&self, hostname: &str) -> serde_json::Value {
        self.endpoint().create_host(hostname).await
    }

    /// Creates `hostname` through the API and runs the bootstrap command it returns (real
    /// `curl` and `sh`, `sudo` removed, the systemd step skipped) into `root`; returns the host
    /// id. The agent's state is then under `root/var/lib/drover`, its config at
    /// `root/etc/drover/agent.toml`.
    pub async fn bootstrap_host(&self, hostname: &str, root: &Path) -> Uuid {
        self.endpoint().bootstrap_host(hostname, root).await
    }

    /// This coordinator as an [`Endpoint`]: its URL, CA, admin and trust hash.
    pub fn endpoint(&self) -> Endpoint {
        Endpoint {
            url: self.url.clone(),
            ca: self.ca.clone(),
            admin: self.admin.clone(),
            trust_sha256: self.trust.1.clone(),
            tmp: self.dir.path().to_path_buf(),
        }
    }
}

/// A coordinator as its clients reach it — in this process ([`Harness::endpoint`]) or a
/// `drover-coordinator serve` process: where it answers, the CA that signed its certificate,
/// an admin operator's certificate and key, the sha256 of the trust.json hosts are created
/// with, and a directory for the bootstrap's temporary files.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// `https://ADDR`.
    pub url: String,
    /// The CA certificate (PEM file).
    pub ca: PathBuf,
    /// An admin operator's certificate and key.
    pub admin: (PathBuf, PathBuf),
    /// The operator's trust.json's sha256 (hex).
    pub trust_sha256: String,
    /// `TMPDIR` for the bootstrap command.
    pub tmp: PathBuf,
}

impl Endpoint {
    /// One request with `curl` (TLS 1.3, the CA), as `creds` (or anonymous), with an optional
    /// JSON body; returns the HTTP status (`"000"` when no response came back at all) and the
    /// body. Runs on the blocking pool so an in-process server keeps serving.
    pub async fn call(&self, creds: Option<&(PathBuf, PathBuf)>, method: &str, path: &str, body: Option<&str>) -> (String, String) {
        let mut args = vec!["-sS".to_owned(), "--tlsv1.3".to_owned(), "--cacert".to_owned(), self.ca.display().to_string()];
        if let Some((cert, key)) = creds {
            args.extend(["--cert".to_owned(), cert.display().to_string(), "--key".to_owned(), key.display().to_string()]);
        }
        args.extend(["-X".to_owned(), method.to_owned(), "-w".to_owned(), "\n%{http_code}".to_owned()]);
        // A body too large for an argument list goes through a file.
        let mut file = None;
        if let Some(b) = body {
            let data = if b.len() > 64 * 1024 {
                let f = self.tmp.join(format!("body-{}.json", uuid::Uuid::new_v4()));
                std::fs::write(&f, b).expect("write the request body");
                let arg = format!("@{}", f.display());
                file = Some(f);
                arg
            } else {
                b.to_owned()
            };
            args.extend(["-H".to_owned(), "content-type: application/json".to_owned(), "--data-binary".to_owned(), data]);
        }
        args.push(format!("{}{path}", self.url));
        let out = run_blocking("curl", args, Vec::new()).await;
        if let Some(f) = file {
            let _ = std::fs::remove_file(f);
        }
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
        (code.trim().to_owned(), body.to_owned())
    }

    /// Creates a host through the real API as the admin; returns the JSON response.
    pub async fn create_host(&self, hostname: &str) -> serde_json::Value {
        let body = serde_json::json!({ "hostname": hostname, "trustSha256": self.trust_sha256 }).to_string();
        let (code, text) = self.call(Some(&self.admin), "POST", "/v1/hosts", Some(&body)).await;
        assert_eq!(code, "201", "create host failed: {text}");
        serde_json::from_str(&text).expect("create host response is JSON")
    }

    /// Like [`Harness::bootstrap_host`].
    pub async fn bootstrap_host(&self, hostname: &str, root: &Path) -> Uuid {
        let created = self.create_host(hostname).await;
        let command = created["command"].as_str().expect("command").replace("| sudo sh -c ", "| sh -c ");
        let env = vec![
            ("DROVER_BOOTSTRAP_ROOT".to_owned(), root.display().to_string()),
            ("DROVER_BOOTSTRAP_SKIP_SYSTEMD".to_owned(), "1".to_owned()),
            ("TMPDIR".to_owned(), self.tmp.display().to_string()),
        ];
        let out = sh(command, env).await;
        assert!(out.status.success(), "bootstrap failed: {}", String::from_utf8_lossy(&out.stderr));
        Uuid::parse_str(created["hostId"].as_str().expect("id")).expect("uuid")
    }

    /// Like [`Harness::enroll_sandboxed`].
    pub async fn enroll_sandboxed(&self, hostname: &str, root: &Path, extra: &str) -> (Uuid, PathBuf) {
        let host = self.bootstrap_host(hostname, root).await;
        let config = root.join("etc/drover/agent.toml");
        let mut text = std::fs::read_to_string(&config).expect("config");
        text.push_str(&format!(
            "systemd_bus = \"unix:path={}\"\n\n[activation]\nroot = \"{}\"\n\n{extra}",
            root.join("no-bus").display(),
            root.display()
        ));
        std::fs::write(&config, text).expect("config");
        (host, config)
    }
}

/// A `drover-agent run` process, killed and reaped when dropped.
pub struct AgentProcess(pub std::process::Child);

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `drover-agent run --config CONFIG` with `DROVER_LOG=log` and its stderr going to
/// `stderr` (a file the test may read back, e.g. to prove a secret never reached a log line).
pub fn start_agent(config: &Path, log: &str, stderr: Stdio) -> AgentProcess {
    let child = Command::new(workspace_binary("drover-agent"))
        .args(["run", "--config"])
        .arg(config)
        .env("DROVER_LOG", log)
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("agent starts");
    AgentProcess(child)
}

impl Harness {
    /// Enrolls `hostname` with the real bootstrap command into `root` and sandboxes its
    /// config: no system bus (a bus address that is not there), the activation backend's
    /// root inside `root`, then `extra` appended (e.g. a `[tasks]` table). Returns the host
    /// id and the config file.
    pub async fn enroll_sandboxed(&self, hostname: &str, root: &Path, extra: &str) -> (Uuid, PathBuf) {
        self.endpoint().enroll_sandboxed(hostname, root, extra).await
    }
    /// A simulated agent per hostname, each host created with its certificate and enrolling
    /// (its first check-in makes it active).
    pub fn sim_agents(&self, hostnames: &[String], behaviour: impl Fn(&str) -> sim_agent::Behaviour) -> Vec<sim_agent::SimAgent> {
        let trust = std::fs::read(&self.trust.0).expect("trust");
        let director = std::fs::read_to_string(self.dir.path().join("state").join("director.pub")).expect("director.pub");
        let mut out = Vec::new();
        for hostname in hostnames {
            let (id, (crt, key), _) = self.host_credentials(hostname);
            let store = &self.running.app.store;
            store
                .transition_host(
                    id,
                    drover_proto::states::HostLifecycle::BootstrapIssued,
                    drover_proto::states::HostLifecycle::Enrolling,
                    "enrolled",
                    self.clock.now(),
                )
                .expect("enrolling");
            out.push(sim_agent::SimAgent::new(&self.url, &self.ca, (&crt, &key), hostname, id, &trust, &director, behaviour(hostname)));
        }
        out
    }

    /// The example fleet (`examples/fleet.json`) as simulated agents, checked in once; its
    /// release (CI key `[9; 32]`, commit `c0ffee`) stored; and one executor tick, which opens
    /// the infra rollout and dispatches its first wave. The agents are not stepped again, so
    /// that rollout stays in flight. Returns the fleet's hostnames.
    pub async fn example_fleet_rolling(&self) -> Vec<String> {
        const FLEET: &[u8] = include_bytes!("../../examples/fleet.json");
        let now = self.clock.now();
        let spec_json: serde_json::Value = serde_json::from_slice(FLEET).expect("json");
        let names: Vec<String> = spec_json["hosts"].as_object().expect("hosts").keys().cloned().collect();
        let agents = self.sim_agents(&names, |_| sim_agent::Behaviour::Healthy);
        sim_agent::step_all(agents, now).await;
        let spec = drover_proto::spec::FleetSpec::from_json(FLEET).expect("spec");
        let meta = drover_proto::resolve::ReleaseMeta { ci_commit: "c0ffee".into(), created_at: now };
        let params = drover_proto::release::ReleaseParams { meta, version: 1, previous: None };
        let ci = drover_proto::keys::KeySigner::new(SigningKey::from_bytes(&[9u8; 32]));
        let files = drover_proto::release::build_release(&spec, &params, &[ci]).expect("release");
        self.running.app.store.put_release(1, now, &files).expect("store release");
        let app = self.running.app.clone();
        app.executor.tick_now(&app).await.expect("tick");
        names
    }

    /// A host in the store and a certificate for it from the CA, as enrollment would make:
    /// its id, its certificate and key files, and the certificate's serial.
    pub fn host_credentials(&self, hostname: &str) -> (Uuid, (PathBuf, PathBuf), String) {
        let now = self.clock.now();
        let new = NewHost { hostname: hostname.into(), created_at: now, token: None };
        let host_id = self.running.app.store.create_host(&new).expect("host").id;
        let (key_pem, csr_pem) = key_and_csr(hostname);
        let cert = self.running.app.ca.issue_host_from_csr(&csr_pem, host_id, hostname, now).expect("cert");
        let (crt, key) = (self.dir.path().join(format!("{hostname}.crt")), self.dir.path().join(format!("{hostname}.key")));
        write(&crt, cert.pem.as_bytes());
        write(&key, key_pem.as_bytes());
        (host_id, (crt, key), cert.serial_hex)
    }
}

/// A command for `name`, a tool a test needs from the system; fails loudly, saying which
/// package brings it (`.ci/run` installs each), when it is not on `PATH`.
pub fn required_tool(name: &str, package: &str) -> Command {
    let found = Command::new("sh").args(["-c", &format!("command -v {name}")]).output().is_ok_and(|o| o.status.success());
    assert!(found, "{name} is not installed: apt-get install {package} (as .ci/run does)");
    Command::new(name)
}

/// A TCP port free on loopback now (bound and released: whoever binds it next gets it,
/// barring a race with another process of this machine).
pub fn free_loopback_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

/// A child process killed and reaped when this is dropped, however the test ends.
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Copies the machine's own unit files (the targets the agent's unit is ordered against)
/// into `root`, so `systemd-analyze verify --root` finds them there.
pub fn system_units_into(root: &Path) {
    let from = ["/usr/lib/systemd/system", "/lib/systemd/system"]
        .iter()
        .map(Path::new)
        .find(|p| p.join("multi-user.target").is_file())
        .expect("no multi-user.target in /usr/lib/systemd/system: install Debian's systemd (CI does)");
    let to = root.join("usr/lib/systemd/system");
    std::fs::create_dir_all(&to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("ls").flatten() {
        if entry.path().is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name())).expect("copy");
        }
    }
}

/// A fresh P-256 key and a CSR for it, made by `openssl` as a host would.
pub fn key_and_csr(hostname: &str) -> (String, String) {
    let out = Command::new("openssl")
        .args([
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-subj",
            &format!("/CN={hostname}"),
            "-keyout",
            "-",
        ])
        .output()
        .expect("openssl req");
    let text = String::from_utf8(out.stdout).expect("utf8");
    let split = text.find("-----BEGIN CERTIFICATE REQUEST-----").expect("csr in openssl's output");
    (text[..split].to_owned(), text[split..].to_owned())
}

/// Runs a program to completion on the blocking pool.
pub async fn run_blocking(program: &'static str, args: Vec<String>, env: Vec<(String, String)>) -> Output {
    tokio::task::spawn_blocking(move || {
        Command::new(program).args(&args).envs(env).stdin(Stdio::null()).output().unwrap_or_else(|e| panic!("cannot run {program}: {e}"))
    })
    .await
    .expect("blocking task")
}

/// Runs a shell command line (the exact bootstrap command) on the blocking pool.
pub async fn sh(command: String, env: Vec<(String, String)>) -> Output {
    run_blocking("sh", vec!["-c".into(), command], env).await
}
