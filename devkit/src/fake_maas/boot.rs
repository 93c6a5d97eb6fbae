//! Booting a deployed machine's user data, opt-in (`--boot-dir DIR`): when a machine with
//! stored `user_data` reaches Deployed, the fake "boots" it in a sandbox root,
//! `DIR/<system_id>/root`, on a thread of its own so no API call waits for it:
//!
//! 1. the machine's directory is emptied (a deployment installs a fresh disk);
//! 2. the user data is read as `#cloud-config` ([`userdata`]: JSON body only) and every
//!    `write_files` entry is laid under the root with its mode — a path that is not absolute
//!    or climbs with `..` fails the boot before anything is written;
//! 3. **only** the agent bootstrap part ([`AGENT_PART_PATH`] under the root) runs, with `sh`,
//!    `DROVER_BOOTSTRAP_ROOT=<root>`, `DROVER_BOOTSTRAP_SKIP_SYSTEMD=1`, `TMPDIR` in the
//!    machine's directory and a `sudo` on `PATH` that runs its command as it is (the fake is
//!    not root). Its output goes to `DIR/<system_id>/boot.log`; the part is deleted once it
//!    ran, as the first-boot runner does. The bootstrap downloads the agent binary from the
//!    coordinator (`/v1/agent/binary`), so nothing else is needed. The runner and the other
//!    parts — site bundle, users, hardware-sync timer, shares, RoCE — are **not** run: they
//!    need a real host (systemd, root, disks, NICs);
//! 4. the agent configuration text (`--agent-extra-config FILE`, else
//!    [`DEFAULT_AGENT_CONFIG`]; `@ROOT@` stands for the root; top-level keys and
//!    `[activation]` only) is appended to `<root>/etc/drover/agent.toml`, so the agent uses no
//!    system bus (or the test's) and activates under the root, then the devkit's sandboxed
//!    host layout is made in the root and its `[health]`/`[tasks]` tables appended (tenant
//!    files, tool stand-ins, the uninstall paths, the MAAS creds file — every task works on the
//!    sandbox), and `<root>/usr/local/bin/drover-agent run --config <root>/etc/drover/agent.toml`
//!    starts in its own process group, its output in `DIR/<system_id>/agent.log`.
//!
//! Each step is reported as an event on the machine (`Booting`, `Booted`, `Boot failed` at
//! ERROR, `Agent exited` at WARNING), recorded on the next request, and the control API's
//! `GET /_fake/machines/{id}` shows the boot under `_fake.boot`. A failure never stops the
//! fake. Release (and mark broken, delete, and `power_off`) powers the machine off: its
//! bootstrap or agent is killed with its process group (`power_on` does not boot it again); so are all of them when the fake stops on SIGTERM
//! or SIGINT. A restarted fake does not restart the agents of machines it had booted.
//!
//! Hardware sync: with booting on, `last_sync` is set only for a machine whose boot
//! succeeded and whose creds file ([`MAAS_CREDS_PATH`] under the root, read each time it is
//! looked at) names this system_id in its endpoint and carries the machine's current token;
//! it is then refreshed every `sync_interval`, as the machine's timer would. Wrong or missing
//! credentials never sync. (Real MAAS also sets `last_sync` when deployment ends; with booting
//! on the fake leaves that to the booted machine.)

pub mod userdata;

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};

use super::events::Level;
use super::reply::{Millis, now_millis};
use userdata::{Creds, CredsCheck};

/// The agent bootstrap part (`drover_cloudinit::AGENT_PART_PATH`).
pub const AGENT_PART_PATH: &str = "/usr/local/lib/drover-first-boot/50-agent-bootstrap.sh";
/// The MAAS hardware-sync credentials (`drover_cloudinit::MAAS_CREDS_PATH`).
pub const MAAS_CREDS_PATH: &str = "/etc/maas/maas-machine-creds.yml";
/// Where the bootstrap writes the agent's configuration.
pub const AGENT_CONFIG_PATH: &str = "/etc/drover/agent.toml";
/// Where the bootstrap installs the agent.
pub const AGENT_BIN_PATH: &str = "/usr/local/bin/drover-agent";

/// What is appended to a booted agent's `agent.toml` unless `--agent-extra-config` says
/// otherwise (`@ROOT@` is the sandbox root): as the tests' `enroll_sandboxed`, a bus address
/// where no bus is and the activation root inside the sandbox. (`[health]` and `[tasks]` come
/// from the sandboxed host layout, appended after it.)
pub const DEFAULT_AGENT_CONFIG: &str = "\n# Appended by fake-maas: a sandboxed agent (no system bus, everything under the boot root).\n\
systemd_bus = \"unix:path=@ROOT@/no-bus\"\n\n[activation]\nroot = \"@ROOT@\"\n";

/// How long the bootstrap part may run.
const BOOTSTRAP_TIMEOUT: Duration = Duration::from_secs(300);

/// The `sudo` the bootstrap finds first on `PATH`: options dropped, the command run as is.
const SUDO_SHIM: &str = "#!/bin/sh\n# fake-maas: the sandboxed boot is not root; run the command as it is.\n\
while [ $# -gt 0 ]; do\n  case \"$1\" in\n    --) shift; break ;;\n    -*) shift ;;\n    *) break ;;\n  esac\ndone\nexec \"$@\"\n";

/// How to boot deployed machines (`--boot-dir`, `--agent-extra-config`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootOptions {
    /// The parent directory: each machine boots into `dir/<system_id>/root`.
    pub dir: PathBuf,
    /// A file whose text is appended to each booted agent's `agent.toml` (`@ROOT@` is the
    /// sandbox root) instead of [`DEFAULT_AGENT_CONFIG`].
    pub agent_extra_config: Option<PathBuf>,
}

impl BootOptions {
    /// Booting into `dir` with the default agent configuration.
    pub fn new(dir: impl Into<PathBuf>) -> BootOptions {
        BootOptions { dir: dir.into(), agent_extra_config: None }
    }
}

/// Why a boot failed (recorded as a `Boot failed` event; never a panic).
#[derive(Debug, thiserror::Error)]
pub enum BootError {
    /// The user data is not a `#cloud-config` document this fake reads.
    #[error("not a #cloud-config user data: {0}")]
    NotCloudConfig(String),
    /// A `write_files` path is relative or climbs out of the root.
    #[error("write_files path {path:?} escapes the boot root: refused, nothing was written")]
    Escape {
        /// The path as the user data names it.
        path: String,
    },
    /// A `write_files` entry cannot be written as asked.
    #[error("write_files entry {path:?}: {message}")]
    BadEntry {
        /// The path as the user data names it.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The user data has no agent bootstrap part.
    #[error("the user data writes no agent bootstrap part ({AGENT_PART_PATH})")]
    NoAgentPart,
    /// The bootstrap part failed.
    #[error("the agent bootstrap part failed ({status}); the end of boot.log: {tail}")]
    Bootstrap {
        /// Its exit status, in words.
        status: String,
        /// The end of its output.
        tail: String,
    },
    /// The bootstrap left no agent to start.
    #[error("the bootstrap left no {0} under the root")]
    NoAgent(&'static str),
    /// The machine was released or deleted while it booted.
    #[error("the machine was powered off while booting")]
    Stopped,
    /// The sandboxed host layout (tenant files, tool stand-ins) could not be made.
    #[error("the sandboxed host layout: {0}")]
    HostRoot(String),
    /// A file or process could not be made.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// Where a machine's boot stands.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    Booting,
    Running,
    Failed(String),
    AgentExited(String),
}

#[derive(Debug)]
struct Slot {
    generation: u64,
    phase: Phase,
    bootstrap_pgid: Option<i32>,
    agent: Option<Child>,
    agent_pid: Option<u32>,
    events: Vec<BootEvent>,
}

/// Something a boot reports, recorded as a machine event on the next request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootEvent {
    /// When it happened.
    pub at: Millis,
    /// Its level.
    pub level: Level,
    /// Its type (`Booting`, `Booted`, `Boot failed`, `Agent exited`).
    pub kind: &'static str,
    /// The details.
    pub description: String,
}

#[derive(Debug)]
struct Inner {
    dir: PathBuf,
    agent_config: String,
    slots: Mutex<BTreeMap<String, Slot>>,
    generation: std::sync::atomic::AtomicU64,
}

/// Boots deployed machines and keeps their processes; cheap to clone (one shared table).
#[derive(Debug, Clone)]
pub struct Booter {
    inner: Arc<Inner>,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> BootError + '_ {
    move |source| BootError::Io { path: path.to_path_buf(), source }
}

/// Kills a process group (a bootstrap, or an agent with whatever it started).
fn kill_group(pgid: u32) {
    if let Ok(raw) = i32::try_from(pgid) {
        let _ = killpg(Pid::from_raw(raw), Signal::SIGKILL);
    }
}

/// A TOML basic string's content.
fn toml_escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

impl Booter {
    /// A booter for `options`: creates the directory and reads the extra configuration.
    pub fn new(options: &BootOptions) -> Result<Booter, BootError> {
        std::fs::create_dir_all(&options.dir).map_err(io_err(&options.dir))?;
        let dir = std::fs::canonicalize(&options.dir).map_err(io_err(&options.dir))?;
        let agent_config = match &options.agent_extra_config {
            Some(file) => std::fs::read_to_string(file).map_err(io_err(file))?,
            None => DEFAULT_AGENT_CONFIG.to_owned(),
        };
        let inner = Inner { dir, agent_config, slots: Mutex::new(BTreeMap::new()), generation: Default::default() };
        Ok(Booter { inner: Arc::new(inner) })
    }

    fn slots(&self) -> MutexGuard<'_, BTreeMap<String, Slot>> {
        self.inner.slots.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The machine's directory (`dir/<system_id>`); its root is `root` inside it.
    pub fn machine_dir(&self, system_id: &str) -> PathBuf {
        self.inner.dir.join(system_id)
    }

    /// Starts booting `user_data` (as deploy stored it) for `system_id` on a new thread;
    /// whatever ran for it before is stopped first.
    pub fn start(&self, system_id: &str, user_data: &str) {
        self.stop(system_id);
        let generation = self.inner.generation.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        let mut slot = Slot { generation, phase: Phase::Booting, bootstrap_pgid: None, agent: None, agent_pid: None, events: Vec::new() };
        if !system_id.chars().all(|c| c.is_ascii_alphanumeric()) || system_id.is_empty() {
            let message = format!("system_id {system_id:?} cannot name a boot directory");
            slot.events.push(BootEvent { at: now_millis(), level: Level::Error, kind: "Boot failed", description: message.clone() });
            slot.phase = Phase::Failed(message);
            self.slots().insert(system_id.to_owned(), slot);
            return;
        }
        let root = self.machine_dir(system_id).join("root");
        slot.events.push(BootEvent {
            at: now_millis(),
            level: Level::Info,
            kind: "Booting",
            description: format!("Booting the deployed user data in {}", root.display()),
        });
        self.slots().insert(system_id.to_owned(), slot);
        let (booter, id, data) = (self.clone(), system_id.to_owned(), user_data.to_owned());
        let spawned = std::thread::Builder::new().name(format!("boot-{id}")).spawn(move || booter.boot(&id, generation, &data));
        if let Err(e) = spawned {
            self.finish(system_id, generation, Err(BootError::Io { path: root, source: e }));
        }
    }

    /// The boot thread.
    fn boot(&self, system_id: &str, generation: u64, user_data: &str) {
        let result = self.run_boot(system_id, generation, user_data);
        self.finish(system_id, generation, result);
    }

    /// Records a boot's outcome, unless the machine was stopped meanwhile (then a started
    /// agent is killed at once).
    fn finish(&self, system_id: &str, generation: u64, result: Result<Child, BootError>) {
        let mut slots = self.slots();
        let Some(slot) = slots.get_mut(system_id).filter(|s| s.generation == generation) else {
            if let Ok(mut child) = result {
                kill_group(child.id());
                let _ = child.wait();
            }
            return;
        };
        slot.bootstrap_pgid = None;
        match result {
            Ok(child) => {
                let log = self.machine_dir(system_id).join("agent.log");
                slot.events.push(BootEvent {
                    at: now_millis(),
                    level: Level::Info,
                    kind: "Booted",
                    description: format!("drover-agent started (pid {}); its log: {}", child.id(), log.display()),
                });
                slot.agent_pid = Some(child.id());
                slot.agent = Some(child);
                slot.phase = Phase::Running;
            }
            Err(e) => {
                let message = e.to_string();
                slot.events.push(BootEvent { at: now_millis(), level: Level::Error, kind: "Boot failed", description: message.clone() });
                slot.phase = Phase::Failed(message);
            }
        }
    }

    fn run_boot(&self, system_id: &str, generation: u64, user_data: &str) -> Result<Child, BootError> {
        let dir = self.machine_dir(system_id);
        match std::fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(BootError::Io { path: dir, source: e }),
            _ => {}
        }
        let (root, bin, tmp) = (dir.join("root"), dir.join("bin"), dir.join("tmp"));
        for d in [&root, &bin, &tmp] {
            std::fs::create_dir_all(d).map_err(io_err(d))?;
        }
        let files = userdata::parse(&userdata::decode_user_data(user_data), &root)?;
        userdata::materialize(&root, &files)?;
        let part = userdata::resolve(&root, AGENT_PART_PATH)?;
        if !part.is_file() {
            return Err(BootError::NoAgentPart);
        }
        let sudo = bin.join("sudo");
        std::fs::write(&sudo, SUDO_SHIM).map_err(io_err(&sudo))?;
        std::fs::set_permissions(&sudo, std::fs::Permissions::from_mode(0o755)).map_err(io_err(&sudo))?;

        let log_path = dir.join("boot.log");
        let log = std::fs::File::create(&log_path).map_err(io_err(&log_path))?;
        let log2 = log.try_clone().map_err(io_err(&log_path))?;
        let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into()));
        let mut child = Command::new("sh")
            .arg(&part)
            .current_dir(&root)
            .env("PATH", path)
            .env("DROVER_BOOTSTRAP_ROOT", &root)
            .env("DROVER_BOOTSTRAP_SKIP_SYSTEMD", "1")
            .env("TMPDIR", &tmp)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .process_group(0)
            .spawn()
            .map_err(io_err(Path::new("sh")))?;
        {
            let mut slots = self.slots();
            match slots.get_mut(system_id).filter(|s| s.generation == generation) {
                Some(slot) => slot.bootstrap_pgid = i32::try_from(child.id()).ok(),
                None => {
                    kill_group(child.id());
                    let _ = child.wait();
                    return Err(BootError::Stopped);
                }
            }
        }
        let status = wait_bounded(&mut child, BOOTSTRAP_TIMEOUT).map_err(io_err(&part))?;
        let _ = std::fs::remove_file(&part);
        let ok = status.is_some_and(|s| s.success());
        if !ok {
            let status = status.map_or_else(|| format!("killed after {} s", BOOTSTRAP_TIMEOUT.as_secs()), |s| s.to_string());
            return Err(BootError::Bootstrap { status, tail: tail(&log_path) });
        }
        let config = userdata::resolve(&root, AGENT_CONFIG_PATH)?;
        let agent = userdata::resolve(&root, AGENT_BIN_PATH)?;
        if !config.is_file() {
            return Err(BootError::NoAgent("agent.toml"));
        }
        if !agent.is_file() {
            return Err(BootError::NoAgent("drover-agent binary"));
        }
        let extra = self.inner.agent_config.replace("@ROOT@", &toml_escape(&root.display().to_string()));
        // Every task the coordinator may send works on the sandbox, never on this machine:
        // the devkit's host layout (tenant files and users, userdel/loginctl/umount stand-ins,
        // the drain hook, a fake nvidia-smi, the uninstall paths) and its [health]/[tasks].
        let host = crate::hostroot::HostRoot::create(&root).map_err(|e| BootError::HostRoot(e.to_string()))?;
        let mut text = std::fs::read_to_string(&config).map_err(io_err(&config))?;
        if !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&extra);
        text.push('\n');
        text.push_str(&host.tasks_toml());
        std::fs::write(&config, text).map_err(io_err(&config))?;

        let agent_log = dir.join("agent.log");
        let out = std::fs::File::create(&agent_log).map_err(io_err(&agent_log))?;
        let err = out.try_clone().map_err(io_err(&agent_log))?;
        Command::new(&agent)
            .arg("run")
            .arg("--config")
            .arg(&config)
            .current_dir(&root)
            .env("TMPDIR", &tmp)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .spawn()
            .map_err(io_err(&agent))
    }

    /// Stops whatever runs for `system_id` (the machine powers off): its bootstrap or agent
    /// is killed with its process group. The files stay until its next boot.
    pub fn stop(&self, system_id: &str) {
        let slot = self.slots().remove(system_id);
        if let Some(mut slot) = slot {
            if let Some(pgid) = slot.bootstrap_pgid.and_then(|p| u32::try_from(p).ok()) {
                kill_group(pgid);
            }
            if let Some(mut child) = slot.agent.take() {
                kill_group(child.id());
                let _ = child.wait();
            }
        }
    }

    /// Stops every machine (the fake is going away).
    pub fn shutdown(&self) {
        let ids: Vec<String> = self.slots().keys().cloned().collect();
        for id in ids {
            self.stop(&id);
        }
    }

    /// Takes what the boots reported since the last call, noticing agents that exited.
    pub fn drain(&self) -> Vec<(String, BootEvent)> {
        let mut out = Vec::new();
        for (id, slot) in self.slots().iter_mut() {
            if let Some(child) = slot.agent.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    slot.agent = None;
                    let what = format!("drover-agent exited ({status})");
                    slot.events.push(BootEvent {
                        at: now_millis(),
                        level: Level::Warning,
                        kind: "Agent exited",
                        description: what.clone(),
                    });
                    slot.phase = Phase::AgentExited(what);
                }
            }
            out.extend(slot.events.drain(..).map(|e| (id.clone(), e)));
        }
        out
    }

    /// Whether `system_id` booted (its bootstrap succeeded), whatever its agent did since.
    pub fn booted(&self, system_id: &str) -> bool {
        self.slots().get(system_id).is_some_and(|s| matches!(s.phase, Phase::Running | Phase::AgentExited(_)))
    }

    /// How the creds file under a booted machine's root stands against its `token`;
    /// `None` when the machine has not booted.
    pub fn creds_check(&self, system_id: &str, token: Option<&(String, String, String)>) -> Option<CredsCheck> {
        if !self.booted(system_id) {
            return None;
        }
        let file = self.machine_dir(system_id).join("root").join(MAAS_CREDS_PATH.trim_start_matches('/'));
        let creds = std::fs::read_to_string(file).ok().and_then(|t| Creds::parse(&t));
        Some(creds.map_or(CredsCheck::Missing, |c| c.check(system_id, token)))
    }

    /// The boot as the control API shows it, or `null` when the machine never booted here.
    pub fn status_json(&self, system_id: &str, token: Option<&(String, String, String)>) -> Value {
        let dir = self.machine_dir(system_id);
        let (phase, error, pid) = {
            let slots = self.slots();
            let Some(slot) = slots.get(system_id) else { return Value::Null };
            let (phase, error) = match &slot.phase {
                Phase::Booting => ("booting", None),
                Phase::Running => ("running", None),
                Phase::Failed(e) => ("failed", Some(e.clone())),
                Phase::AgentExited(e) => ("agent_exited", Some(e.clone())),
            };
            (phase, error, slot.agent.as_ref().and(slot.agent_pid))
        };
        json!({
            "state": phase, "error": error, "agent_pid": pid,
            "root": dir.join("root"), "boot_log": dir.join("boot.log"), "agent_log": dir.join("agent.log"),
            "hw_sync": self.creds_check(system_id, token).map(CredsCheck::as_str),
        })
    }
}

/// Waits for `child` up to `limit`; on timeout kills its group and answers `None`.
fn wait_bounded(child: &mut Child, limit: Duration) -> std::io::Result<Option<std::process::ExitStatus>> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            kill_group(child.id());
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The last lines of a log (at most 600 bytes), on one line.
fn tail(path: &Path) -> String {
    let mut text = String::new();
    if let Ok(mut f) = std::fs::File::open(path) {
        let _ = f.read_to_string(&mut text);
    }
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let joined = lines[lines.len().saturating_sub(4)..].join(" | ");
    let start = joined.len().saturating_sub(600);
    let start = (start..=joined.len()).find(|&i| joined.is_char_boundary(i)).unwrap_or(joined.len());
    joined[start..].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sudo_shim_and_tail() {
        let dir = tempfile::tempdir().unwrap();
        let sudo = dir.path().join("sudo");
        std::fs::write(&sudo, SUDO_SHIM).unwrap();
        let out = Command::new("sh").arg(&sudo).args(["-E", "--", "echo", "-n", "hi"]).output().unwrap();
        assert_eq!(out.stdout, b"hi");
        let log = dir.path().join("log");
        std::fs::write(&log, "a\n\nb\nc\nd\ne\n").unwrap();
        assert_eq!(tail(&log), "b | c | d | e");
        assert_eq!(toml_escape(r#"/a"b\c"#), r#"/a\"b\\c"#);
    }

    #[test]
    fn bad_user_data_is_a_recorded_failure() {
        let dir = tempfile::tempdir().unwrap();
        let booter = Booter::new(&BootOptions::new(dir.path())).unwrap();
        booter.start("abc123", "#!/bin/sh\necho not cloud-config\n");
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut events = Vec::new();
        while !events.iter().any(|(_, e): &(String, BootEvent)| e.kind == "Boot failed") {
            assert!(Instant::now() < deadline, "no failure recorded: {events:?}");
            std::thread::sleep(Duration::from_millis(20));
            events.extend(booter.drain());
        }
        assert_eq!(events[0].1.kind, "Booting");
        assert!(events.iter().any(|(_, e)| e.level == Level::Error && e.description.contains("#cloud-config")), "{events:?}");
        assert!(!booter.booted("abc123"));
        assert_eq!(booter.status_json("abc123", None)["state"], "failed");
        assert_eq!(booter.creds_check("abc123", None), None);
        booter.start("../x", "#cloud-config\n{}");
        assert_eq!(booter.status_json("../x", None)["state"], "failed");
        assert!(!dir.path().parent().unwrap().join("x").exists());
    }
}
