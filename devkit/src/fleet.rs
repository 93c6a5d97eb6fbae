//! The local fleet itself: a real `drover-coordinator serve` on a loopback port, its state
//! and an admin credential made with `drover-coordinator init` and `operator-cert`, and
//! sandboxed `drover-agent run` processes enrolled through the real bootstrap script and
//! `curl`, each with its own [`HostRoot`], [`NixKit`] and [`PrivateBus`], checked by
//! [`confine::check`] before it starts.
//!
//! Every call is blocking (the fleet keeps its own small runtime for the HTTPS client), so a
//! CLI command or a plain `#[test]` drives it the same way.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use drover_client::{ClientIdentity, CoordinatorClient, REQUEST_TIMEOUT};
use drover_proto::publish::PublishRequest;
use drover_proto::release::ReleaseFiles;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::bus::PrivateBus;
use crate::hostroot::{HostRoot, toml_str};
use crate::nixkit::NixKit;
use crate::{DevkitError, confine, io_at};

/// The binaries the fleet runs.
#[derive(Debug, Clone)]
pub struct Binaries {
    /// `drover-coordinator`.
    pub coordinator: PathBuf,
    /// `drover-agent` (also what the coordinator serves to the bootstrap script).
    pub agent: PathBuf,
    /// `fake-systemd`.
    pub fake_systemd: PathBuf,
}

impl Binaries {
    /// The three binaries in `dir` (a cargo target profile directory), each checked.
    pub fn in_dir(dir: &Path) -> Result<Binaries, DevkitError> {
        let find = |name: &str| {
            let p = dir.join(name);
            if p.is_file() { Ok(p) } else { Err(DevkitError::MissingBinary { path: p }) }
        };
        Ok(Binaries { coordinator: find("drover-coordinator")?, agent: find("drover-agent")?, fake_systemd: find("fake-systemd")? })
    }
}

/// The coordinator process, stopped when dropped.
pub struct Coordinator {
    child: Child,
    /// `https://127.0.0.1:PORT`.
    pub url: String,
    /// Its state directory.
    pub state_dir: PathBuf,
    /// Its log (stderr, JSON lines).
    pub log: PathBuf,
    /// The coordinator CA (`ops/ca.crt`).
    pub ca: PathBuf,
    /// The admin credential (`ops/admin.crt`, `ops/admin.key`).
    pub admin: (PathBuf, PathBuf),
}

impl Coordinator {
    /// In `dir`: makes the coordinator's state (`coordinator/state`) and an admin credential
    /// (`ops/`) with `coordinator`'s `init` and `operator-cert`, writes its config on a free
    /// loopback port (serving `agent`, trusting `trust_file`, then `sections`), starts
    /// `serve` (log in `coordinator/coordinator.log`) and returns once it listens.
    pub fn start(dir: &Path, coordinator: &Path, agent: &Path, trust_file: &Path, sections: &str) -> Result<Coordinator, DevkitError> {
        let state = init_state(dir, coordinator)?;
        let port = free_port()?;
        let url = format!("https://127.0.0.1:{port}");
        let config = dir.join("coordinator/coordinator.toml");
        let text = config_text(port, &state, std::slice::from_ref(&url), trust_file, agent, sections);
        crate::write_file(&config, &text, 0o644)?;
        Coordinator::serve(dir, coordinator, &config, &dir.join("coordinator/coordinator.log"), url, state)
    }

    /// Replicas of one coordinator: as [`start`](Self::start), one state dir (the CA and
    /// server identity they share, as replicas on one host would) and `replicas` processes,
    /// each on its own free loopback port announcing every replica's URL, with `sections` and
    /// then `store(i)` (the `[store]` table of replica `i`, naming it) in its config
    /// `coordinator/rI.toml`, its log in `coordinator/rI.log`. Returns once every one listens.
    pub fn start_replicas(
        dir: &Path,
        coordinator: &Path,
        agent: &Path,
        trust_file: &Path,
        sections: &str,
        replicas: usize,
        store: impl Fn(usize) -> String,
    ) -> Result<Vec<Coordinator>, DevkitError> {
        let state = init_state(dir, coordinator)?;
        // Every port is chosen before any replica starts, so each config can list them all.
        let ports = (0..replicas).map(|_| free_port()).collect::<Result<Vec<u16>, _>>()?;
        let urls: Vec<String> = ports.iter().map(|p| format!("https://127.0.0.1:{p}")).collect();
        let mut out = Vec::with_capacity(replicas);
        for (i, port) in ports.iter().enumerate() {
            let config = dir.join(format!("coordinator/r{i}.toml"));
            let text = config_text(*port, &state, &urls, trust_file, agent, &format!("{sections}\n{}", store(i)));
            crate::write_file(&config, &text, 0o644)?;
            let log = dir.join(format!("coordinator/r{i}.log"));
            out.push(Coordinator::serve(dir, coordinator, &config, &log, urls[i].clone(), state.clone())?);
        }
        Ok(out)
    }

    /// Starts `serve --config CONFIG`, stderr to `log`, and waits until it listens.
    fn serve(
        dir: &Path,
        coordinator: &Path,
        config: &Path,
        log: &Path,
        url: String,
        state_dir: PathBuf,
    ) -> Result<Coordinator, DevkitError> {
        let ops = dir.join("ops");
        let log_file = std::fs::File::create(log).map_err(io_at(log))?;
        let mut child = Command::new(coordinator)
            .arg("serve")
            .arg("--config")
            .arg(config)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log_file)
            .spawn()
            .map_err(io_at(coordinator))?;
        let stdout = child.stdout.take();
        let coordinator = Coordinator {
            child,
            url,
            state_dir,
            log: log.to_path_buf(),
            ca: ops.join("ca.crt"),
            admin: (ops.join("admin.crt"), ops.join("admin.key")),
        };
        wait_listening(stdout)?;
        Ok(coordinator)
    }

    /// The process id (for `/proc` readings).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its exit status if it has exited (and reaps it then, so no zombie is left); `None`
    /// while it runs.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

impl Drop for Coordinator {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Makes `dir/coordinator/state` with `coordinator init` and the admin credential in
/// `dir/ops` with `operator-cert`; the state dir's path.
fn init_state(dir: &Path, coordinator: &Path) -> Result<PathBuf, DevkitError> {
    let state = dir.join("coordinator/state");
    let ops = dir.join("ops");
    run_ok("drover-coordinator init", Command::new(coordinator).arg("init").arg("--state-dir").arg(&state).args(["--san", "127.0.0.1"]))?;
    run_ok(
        "drover-coordinator operator-cert",
        Command::new(coordinator)
            .arg("operator-cert")
            .arg("--state-dir")
            .arg(&state)
            .args(["--role", "admin", "--name", "admin"])
            .arg("--out")
            .arg(&ops),
    )?;
    Ok(state)
}

/// A loopback port free now (chosen here so the config can announce it; loopback only).
fn free_port() -> Result<u16, DevkitError> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map_err(io_at("127.0.0.1:0"))?.port())
}

/// A coordinator's config: listening on loopback `port`, announcing `urls`, then `sections`.
fn config_text(port: u16, state: &Path, urls: &[String], trust_file: &Path, agent: &Path, sections: &str) -> String {
    let urls: Vec<String> = urls.iter().map(|u| format!("\"{u}\"")).collect();
    format!(
        "listen = \"127.0.0.1:{port}\"\nstate_dir = {}\npublic_urls = [{}]\ntrust_file = {}\nagent_binary = {}\n\n{}",
        toml_str(state),
        urls.join(", "),
        toml_str(trust_file),
        toml_str(agent),
        sections
    )
}

/// One sandboxed agent.
pub struct LocalAgent {
    /// Its hostname.
    pub hostname: String,
    /// The coordinator's id for it.
    pub host_id: Uuid,
    /// Its sandbox root.
    pub root: HostRoot,
    /// Its fake Nix toolchain.
    pub nix: NixKit,
    /// Its `agent.toml`.
    pub config: PathBuf,
    /// Its log (stderr).
    pub log: PathBuf,
    bus: PrivateBus,
    child: Option<Child>,
}

impl LocalAgent {
    /// Whether the agent process is still running (it exits by itself after an uninstall).
    pub fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Its process id and exit status if it has exited (reaped then, so no zombie is left);
    /// `None` while it runs or once it was stopped on purpose.
    pub fn exited(&mut self) -> Option<(u32, std::process::ExitStatus)> {
        let child = self.child.as_mut()?;
        let pid = child.id();
        child.try_wait().ok().flatten().map(|status| (pid, status))
    }

    /// The private bus's address.
    pub fn bus_address(&self) -> &str {
        self.bus.address()
    }
}

impl Drop for LocalAgent {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// What the fleet is made of and how it is tuned.
#[derive(Debug, Clone)]
pub struct FleetOptions {
    /// Everything lives under here.
    pub dir: PathBuf,
    /// The binaries.
    pub binaries: Binaries,
    /// The CI trust roots the coordinator and agents verify against.
    pub trust_file: PathBuf,
    /// TOML tables appended to `coordinator.toml` (intervals for a quick demo or test).
    pub coordinator_sections: String,
    /// `DROVER_LOG` for the agents.
    pub agent_log: String,
}

/// The coordinator, its client and the agents.
pub struct LocalFleet {
    /// Options it was started with.
    pub options: FleetOptions,
    // Agents before the coordinator: dropped first, so none of them logs a lost coordinator.
    /// The agents, in the order they were added.
    pub agents: Vec<LocalAgent>,
    /// The coordinator.
    pub coordinator: Coordinator,
    client: CoordinatorClient,
    runtime: tokio::runtime::Runtime,
}

fn run_ok(what: &str, cmd: &mut Command) -> Result<std::process::Output, DevkitError> {
    let out = cmd.stdin(Stdio::null()).output().map_err(|e| DevkitError::Process { what: what.to_owned(), message: e.to_string() })?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
        return Err(DevkitError::Process {
            what: what.to_owned(),
            message: format!("{}: {}", out.status, tail.into_iter().rev().collect::<Vec<_>>().join(" | ")),
        });
    }
    Ok(out)
}

impl LocalFleet {
    /// Makes the coordinator's state and admin credential, writes its config and starts it;
    /// returns once it listens.
    pub fn start(options: FleetOptions) -> Result<LocalFleet, DevkitError> {
        let coordinator = Coordinator::start(
            &options.dir,
            &options.binaries.coordinator,
            &options.binaries.agent,
            &options.trust_file,
            &options.coordinator_sections,
        )?;
        let url = coordinator.url.clone();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| DevkitError::Process { what: "async runtime".into(), message: e.to_string() })?;
        let read = |p: &Path| std::fs::read(p).map_err(io_at(p));
        let ca = drover_client::parse_certificates("ca.crt", &read(&coordinator.ca)?)?;
        let identity = ClientIdentity::from_pem(&read(&coordinator.admin.0)?, &read(&coordinator.admin.1)?)?;
        let client = CoordinatorClient::new("drover-dev", std::slice::from_ref(&url), &ca, Some(identity), REQUEST_TIMEOUT)?;
        Ok(LocalFleet { options, agents: Vec::new(), coordinator, client, runtime })
    }

    /// `GET path` as the admin.
    pub fn get(&self, path: &str) -> Result<Value, DevkitError> {
        Ok(self.runtime.block_on(self.client.get_json(path))?)
    }

    /// `POST path` with `body` as the admin.
    pub fn post(&self, path: &str, body: &Value) -> Result<Value, DevkitError> {
        Ok(self.runtime.block_on(self.client.post_json(path, body))?)
    }

    /// Publishes a signed release.
    pub fn publish(&self, files: &ReleaseFiles, reason: &str) -> Result<Value, DevkitError> {
        let request = PublishRequest::from_files(files, Some(reason.to_owned()))
            .ok_or_else(|| DevkitError::Release("a release file is not UTF-8".into()))?;
        Ok(self.runtime.block_on(self.client.post_json("/v1/releases", &request))?)
    }

    /// The HTTPS client (admin), for callers with their own async code.
    pub fn client(&self) -> &CoordinatorClient {
        &self.client
    }

    /// Creates `hostname` on the coordinator, runs the bootstrap command it answers (real
    /// `curl`, the real script) into a fresh sandbox root, sandboxes the written config,
    /// lets `prepare` lay down the host's Nix closures, proves the config confined, and
    /// starts `drover-agent run`. Does not wait for the agent's first check-in.
    pub fn add_agent(
        &mut self,
        hostname: &str,
        prepare: impl FnOnce(&NixKit) -> Result<(), DevkitError>,
    ) -> Result<&mut LocalAgent, DevkitError> {
        let trust = std::fs::read(&self.options.trust_file).map_err(io_at(&self.options.trust_file))?;
        let trust_sha256 = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&trust));
        let created = self.post("/v1/hosts", &json!({"hostname": hostname, "trustSha256": trust_sha256}))?;
        let host_id = created["hostId"]
            .as_str()
            .and_then(|s| Uuid::parse_str(s).ok())
            .ok_or_else(|| DevkitError::Process { what: "POST /v1/hosts".into(), message: format!("no hostId in {created}") })?;
        let command = created["command"].as_str().unwrap_or_default();
        // The sandbox runs as this user: the script's `sudo` step is the one part skipped.
        let command = command.replace("| sudo sh -c ", "| sh -c ");
        let root_dir = self.options.dir.join("hosts").join(hostname);
        let root = HostRoot::create(&root_dir)?;
        let tmp = self.options.dir.join("tmp");
        std::fs::create_dir_all(&tmp).map_err(io_at(&tmp))?;
        run_ok(
            &format!("bootstrap of {hostname}"),
            Command::new("sh")
                .arg("-c")
                .arg(&command)
                .env("DROVER_BOOTSTRAP_ROOT", &root_dir)
                .env("DROVER_BOOTSTRAP_SKIP_SYSTEMD", "1")
                .env("TMPDIR", &tmp),
        )?;
        let nix = NixKit::install(&root_dir)?;
        prepare(&nix)?;
        let bus = PrivateBus::start(&root.path("run/dbus"), &self.options.binaries.fake_systemd)?;
        let config = root.path("etc/drover/agent.toml");
        let mut text = std::fs::read_to_string(&config).map_err(io_at(&config))?;
        text.push_str(&format!("systemd_bus = \"{}\"\n\n{}\n{}", bus.address(), nix.activation_toml(), root.tasks_toml()));
        std::fs::write(&config, text).map_err(io_at(&config))?;
        let parsed = drover_agent::config::Config::load(&config)
            .map_err(|e| DevkitError::Process { what: format!("{hostname}'s agent.toml"), message: e.to_string() })?;
        confine::check(hostname, &parsed, &root_dir)?;
        let log = root.path("agent.log");
        let log_file = std::fs::File::create(&log).map_err(io_at(&log))?;
        let path = format!("{}:/usr/bin:/bin", root.bin().display());
        let child = Command::new(&self.options.binaries.agent)
            .arg("run")
            .arg("--config")
            .arg(&config)
            .env("PATH", path)
            .env("DROVER_LOG", &self.options.agent_log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .map_err(io_at(&self.options.binaries.agent))?;
        self.agents.push(LocalAgent { hostname: hostname.to_owned(), host_id, root, nix, config, log, bus, child: Some(child) });
        let last = self.agents.len() - 1;
        Ok(&mut self.agents[last])
    }

    /// The agent named `hostname`.
    pub fn agent(&mut self, hostname: &str) -> Option<&mut LocalAgent> {
        self.agents.iter_mut().find(|a| a.hostname == hostname)
    }

    /// Polls `cond` every 100 ms until it holds, for at most `secs`.
    pub fn wait_until(
        &mut self,
        what: &str,
        secs: u64,
        mut cond: impl FnMut(&mut LocalFleet) -> Result<bool, DevkitError>,
    ) -> Result<(), DevkitError> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if cond(self)? {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(DevkitError::Timeout { what: what.to_owned(), secs });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Every host's listing row, by hostname (all pages).
    pub fn hosts(&self) -> Result<Vec<Value>, DevkitError> {
        let mut out = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let path = match &cursor {
                Some(c) => format!("/v1/hosts?limit=500&after={c}"),
                None => "/v1/hosts?limit=500".to_owned(),
            };
            let page = self.get(&path)?;
            out.extend(page["items"].as_array().cloned().unwrap_or_default());
            match page["next"].as_str() {
                Some(next) => cursor = Some(next.to_owned()),
                None => return Ok(out),
            }
        }
    }
}

fn wait_listening(stdout: Option<std::process::ChildStdout>) -> Result<(), DevkitError> {
    use std::io::BufRead;
    let stdout = stdout.ok_or_else(|| DevkitError::Process { what: "drover-coordinator serve".into(), message: "no stdout".into() })?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.starts_with("listening on ") {
                let _ = tx.send(());
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(30)).map_err(|_| DevkitError::Process {
        what: "drover-coordinator serve".into(),
        message: "never said it listens (see coordinator.log)".into(),
    })
}
