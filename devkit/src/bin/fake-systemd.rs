//! A stand-in for systemd's D-Bus API, for tests: serves the subset of
//! `org.freedesktop.systemd1.Manager` the agent uses, on the bus given by `--address ADDR`,
//! under the well-known name `org.freedesktop.systemd1`, and prints `ready` once serving.
//!
//! It does the work for real: `StartTransientUnit` starts `ExecStart`'s command as this
//! process's child (so it outlives the client that asked), exports the unit at
//! `/org/freedesktop/systemd1/unit/<escaped name>` with `Unit.ActiveState`/`SubState` and
//! `Service.Result`/`MainPID` following the child, and emits `PropertiesChanged`, `JobNew`
//! and `JobRemoved` — only once some client called `Subscribe`, as systemd does.
//! `GetUnit`, `ListUnitsFiltered` (real `ListUnits` tuples), `RestartUnit` (re-runs the
//! command) behave like systemd's, with its error names (`NoSuchUnit`, `UnitExists`,
//! `AlreadySubscribed`, `PropertyReadOnly` for unknown properties). A unit whose command
//! exits non-zero ends failed/failed/exit-code; one without `RemainAfterExit` that succeeds
//! is garbage-collected like systemd does with inactive units.
//!
//! Units with a unit file are configured with `--unit 'NAME;TYPE;STATE[;SCRIPT]'` (repeatable):
//! TYPE is `oneshot` or `simple` (a service running `/bin/sh -c SCRIPT`) or `timer` (no
//! script), STATE `active` (a simple service is started at once, a timer armed) or
//! `inactive`. They are enabled, stay loaded, and take `StartUnit`, `StopUnit`,
//! `RestartUnit` (mode `replace`), whose jobs end as systemd's do: a timer is
//! `active`/`waiting` at once; a oneshot is `activating`/`start` while its command runs and
//! its job ends `done` when the command succeeded (`inactive`/`dead`, result `success`) or
//! `failed` (`failed`/`failed`, `exit-code`); a simple service is `active`/`running` at once;
//! a stop sends SIGTERM to the process group, is `deactivating`/`stop-sigterm` until it
//! exited, and ends `inactive`/`dead`. `DisableUnitFiles` (the `unlink` changes of the
//! `.wants/` symlinks, none when already disabled), `GetUnitFileState` and `Reload` work on
//! them; an unknown name is `NoSuchUnit` everywhere. `Unit.ActiveEnterTimestamp` (µs) moves
//! on every activation, so a test sees a restart.

#![forbid(unsafe_code)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};
use zbus::message::Header;
use zbus::object_server::SignalEmitter;
use zbus::zvariant::{ObjectPath, OwnedObjectPath, OwnedValue, Value};
use zbus::{Connection, interface};

const BUS_NAME: &str = "org.freedesktop.systemd1";
const MANAGER_PATH: &str = "/org/freedesktop/systemd1";
const UNIT_INTERFACE: &str = "org.freedesktop.systemd1.Unit";
const SERVICE_INTERFACE: &str = "org.freedesktop.systemd1.Service";
const TIMER_INTERFACE: &str = "org.freedesktop.systemd1.Timer";
const JOB_MODES: [&str; 5] = ["replace", "fail", "isolate", "ignore-dependencies", "ignore-requirements"];

/// The errors systemd answers with (names as systemd spells them).
#[derive(Debug, zbus::DBusError)]
#[zbus(prefix = "org.freedesktop")]
enum SdError {
    /// A bus failure.
    #[zbus(error)]
    ZBus(zbus::Error),
    /// Unknown unit.
    #[zbus(name = "systemd1.NoSuchUnit")]
    NoSuchUnit(String),
    /// The name is taken.
    #[zbus(name = "systemd1.UnitExists")]
    UnitExists(String),
    /// A second `Subscribe`.
    #[zbus(name = "systemd1.AlreadySubscribed")]
    AlreadySubscribed(String),
    /// `Unsubscribe` without `Subscribe`.
    #[zbus(name = "systemd1.NotSubscribed")]
    NotSubscribed(String),
    /// Bad arguments.
    #[zbus(name = "DBus.Error.InvalidArgs")]
    InvalidArgs(String),
    /// A property systemd does not take for transient units.
    #[zbus(name = "DBus.Error.PropertyReadOnly")]
    PropertyReadOnly(String),
}

/// What a unit is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A transient service from `StartTransientUnit` (`Type=exec`), collected when inactive.
    Transient,
    /// `Type=oneshot` with a unit file.
    Oneshot,
    /// `Type=simple` with a unit file.
    Simple,
    /// A timer with a unit file.
    Timer,
}

/// One unit's state.
struct Unit {
    kind: Kind,
    /// `UnitFileState` is `enabled` (transient units have no unit file).
    enabled: bool,
    /// A job that ends when the unit's process exits (a oneshot's start, a stop).
    pending_job: Option<(u32, OwnedObjectPath)>,
    /// A stop sent SIGTERM: the exit ends the unit cleanly.
    stopping: bool,
    /// `ActiveEnterTimestamp`, µs since the epoch.
    active_enter_usec: u64,
    description: String,
    /// `(path, argv)` from `ExecStart`.
    exec: (String, Vec<String>),
    remain_after_exit: bool,
    active_state: String,
    sub_state: String,
    result: String,
    main_pid: u32,
    exec_main_status: i32,
    /// Bumped on every start, so a stale child's exit is ignored.
    generation: u64,
    path: OwnedObjectPath,
}

/// A child's exit, reported by its reaper thread.
struct Exit {
    unit: String,
    generation: u64,
    status: std::io::Result<ExitStatus>,
}

/// Everything the interfaces share.
struct Shared {
    units: Mutex<BTreeMap<String, Unit>>,
    subscribers: Mutex<HashSet<String>>,
    next_job: AtomicU32,
    exits: UnboundedSender<Exit>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// systemd's object path label escaping (`bus_label_escape`).
fn escape_label(name: &str) -> String {
    if name.is_empty() {
        return "_".into();
    }
    let mut out = String::new();
    for (i, b) in name.bytes().enumerate() {
        if b.is_ascii_alphanumeric() && !(i == 0 && b.is_ascii_digit()) {
            out.push(b as char);
        } else {
            out.push_str(&format!("_{b:02x}"));
        }
    }
    out
}

/// systemd's unit name rules, for the service type this fake supports.
fn valid_service_name(name: &str) -> bool {
    let Some(prefix) = name.strip_suffix(".service") else { return false };
    !prefix.is_empty()
        && name.len() <= 255
        && prefix.bytes().all(|b| b.is_ascii_alphanumeric() || b":-_.\\@".contains(&b))
        && !prefix.starts_with('@')
}

fn now_usec() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

impl Unit {
    fn new(kind: Kind, description: String, exec: (String, Vec<String>), remain_after_exit: bool, path: OwnedObjectPath) -> Unit {
        Unit {
            kind,
            enabled: kind != Kind::Transient,
            pending_job: None,
            stopping: false,
            active_enter_usec: 0,
            description,
            exec,
            remain_after_exit,
            active_state: "inactive".into(),
            sub_state: "dead".into(),
            result: "success".into(),
            main_pid: 0,
            exec_main_status: 0,
            generation: 0,
            path,
        }
    }

    /// Sets the state, stamping `ActiveEnterTimestamp` when the unit becomes active.
    fn set_state(&mut self, active: &str, sub: &str) {
        if active == "active" && self.active_state != "active" {
            // Strictly increasing, so two activations within a microsecond still differ.
            self.active_enter_usec = now_usec().max(self.active_enter_usec + 1);
        }
        self.active_state = active.into();
        self.sub_state = sub.into();
    }
}

/// A job's verb.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verb {
    Start,
    Stop,
    Restart,
}

/// What a job did at once: the unit's path and state for `PropertiesChanged`, and the
/// job's result if it ended at once (`None`: it ends when the unit's process exits).
struct Begun {
    path: OwnedObjectPath,
    status: (String, String, String, u32),
    result: Option<&'static str>,
}

impl Shared {
    /// Queues `verb` on `name` as job `job` and does what can be done at once.
    fn begin(&self, name: &str, verb: Verb, job: &(u32, OwnedObjectPath)) -> Result<Begun, SdError> {
        let mut units = lock(&self.units);
        let Some(unit) = units.get_mut(name) else {
            return Err(SdError::NoSuchUnit(format!("Unit {name} not found.")));
        };
        let result = match (unit.kind, verb) {
            (Kind::Timer, Verb::Stop) => {
                unit.set_state("inactive", "dead");
                Some("done")
            }
            (Kind::Timer, Verb::Start | Verb::Restart) => {
                if verb == Verb::Restart {
                    unit.set_state("inactive", "dead");
                }
                unit.set_state("active", "waiting");
                unit.result = "success".into();
                Some("done")
            }
            (_, Verb::Stop) => {
                if unit.main_pid != 0 {
                    let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(unit.main_pid as i32), nix::sys::signal::Signal::SIGTERM);
                    unit.stopping = true;
                    unit.set_state("deactivating", "stop-sigterm");
                    unit.pending_job = Some(job.clone());
                    None
                } else {
                    if unit.active_state != "failed" {
                        unit.set_state("inactive", "dead");
                    }
                    Some("done")
                }
            }
            (_, Verb::Start) if unit.main_pid != 0 || unit.active_state == "active" => {
                // Already started (or starting): nothing to do, as systemd.
                Some("done")
            }
            (kind, Verb::Start | Verb::Restart) => {
                if unit.main_pid != 0 {
                    // Stop the running one first (its exit is then stale: the generation moves on).
                    let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(unit.main_pid as i32), nix::sys::signal::Signal::SIGTERM);
                    unit.set_state("inactive", "dead");
                }
                unit.stopping = false;
                if !self.spawn(name, unit) {
                    Some("failed")
                } else if kind == Kind::Oneshot {
                    unit.set_state("activating", "start");
                    unit.pending_job = Some(job.clone());
                    None
                } else {
                    Some("done")
                }
            }
        };
        Ok(Begun { path: unit.path.clone(), status: status_of(unit), result })
    }

    fn subscribed(&self) -> bool {
        !lock(&self.subscribers).is_empty()
    }

    fn job(&self) -> (u32, OwnedObjectPath) {
        let id = self.next_job.fetch_add(1, Ordering::SeqCst);
        let path = OwnedObjectPath::try_from(format!("{MANAGER_PATH}/job/{id}")).expect("job path");
        (id, path)
    }

    /// Starts `unit`'s command (a new generation); on failure to spawn the unit is failed.
    fn spawn(&self, name: &str, unit: &mut Unit) -> bool {
        unit.generation += 1;
        let (program, argv) = &unit.exec;
        let mut cmd = Command::new(program);
        if let Some(arg0) = argv.first() {
            cmd.arg0(arg0);
        }
        cmd.args(argv.iter().skip(1))
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into()))
            .current_dir("/")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .process_group(0);
        match cmd.spawn() {
            Ok(mut child) => {
                unit.main_pid = child.id();
                unit.set_state("active", "running");
                unit.result = "success".into();
                let (tx, unit_name, generation) = (self.exits.clone(), name.to_owned(), unit.generation);
                std::thread::spawn(move || {
                    let status = child.wait();
                    let _ = tx.send(Exit { unit: unit_name, generation, status });
                });
                true
            }
            Err(e) => {
                eprintln!("fake-systemd: {name}: cannot run {program}: {e}");
                unit.main_pid = 0;
                unit.exec_main_status = 203;
                unit.set_state("failed", "failed");
                unit.result = "exit-code".into();
                false
            }
        }
    }
}

/// Emits the unit's `PropertiesChanged` (both interfaces), if anyone subscribed.
async fn unit_changed(
    conn: &Connection,
    shared: &Shared,
    path: &ObjectPath<'_>,
    status: (String, String, String, u32),
) -> zbus::Result<()> {
    if !shared.subscribed() {
        return Ok(());
    }
    let emitter = SignalEmitter::new(conn, path.to_owned())?;
    let (active, sub, result, pid) = status;
    let unit: HashMap<&str, Value<'_>> = HashMap::from([("ActiveState", Value::from(active)), ("SubState", Value::from(sub))]);
    zbus::fdo::Properties::properties_changed(&emitter, UNIT_INTERFACE.try_into()?, unit, (&[] as &[&str]).into()).await?;
    let timer = lock(&shared.units).values().any(|u| u.path.as_ref() == *path && u.kind == Kind::Timer);
    if timer {
        let changed: HashMap<&str, Value<'_>> = HashMap::from([("Result", Value::from(result))]);
        return zbus::fdo::Properties::properties_changed(&emitter, TIMER_INTERFACE.try_into()?, changed, (&[] as &[&str]).into()).await;
    }
    let service: HashMap<&str, Value<'_>> = HashMap::from([("Result", Value::from(result)), ("MainPID", Value::from(pid))]);
    zbus::fdo::Properties::properties_changed(&emitter, SERVICE_INTERFACE.try_into()?, service, (&[] as &[&str]).into()).await
}

/// Emits `JobNew` then `JobRemoved` for a job that completed at once, if anyone subscribed.
async fn job_done(conn: &Connection, shared: &Shared, job: &(u32, OwnedObjectPath), unit: &str, result: &str) -> zbus::Result<()> {
    if !shared.subscribed() {
        return Ok(());
    }
    let emitter = SignalEmitter::new(conn, MANAGER_PATH)?;
    Manager::job_new(&emitter, job.0, job.1.as_ref(), unit).await?;
    Manager::job_removed(&emitter, job.0, job.1.as_ref(), unit, result).await
}

/// Emits `JobNew` for a job that is still running, if anyone subscribed.
async fn job_queued(conn: &Connection, shared: &Shared, job: &(u32, OwnedObjectPath), unit: &str) -> zbus::Result<()> {
    if !shared.subscribed() {
        return Ok(());
    }
    let emitter = SignalEmitter::new(conn, MANAGER_PATH)?;
    Manager::job_new(&emitter, job.0, job.1.as_ref(), unit).await
}

/// Emits `JobRemoved` for a job that ended, if anyone subscribed.
async fn job_ended(conn: &Connection, shared: &Shared, job: &(u32, OwnedObjectPath), unit: &str, result: &str) -> zbus::Result<()> {
    if !shared.subscribed() {
        return Ok(());
    }
    let emitter = SignalEmitter::new(conn, MANAGER_PATH)?;
    Manager::job_removed(&emitter, job.0, job.1.as_ref(), unit, result).await
}

/// Runs a job of `verb` on `name` and answers with its path, like systemd's manager methods.
async fn unit_job(shared: &Shared, conn: &Connection, name: &str, mode: &str, verb: Verb) -> Result<OwnedObjectPath, SdError> {
    if !JOB_MODES.contains(&mode) {
        return Err(SdError::InvalidArgs(format!("Job mode {mode} invalid")));
    }
    let job = shared.job();
    let begun = shared.begin(name, verb, &job)?;
    unit_changed(conn, shared, &begun.path.as_ref(), begun.status).await?;
    match begun.result {
        Some(result) => job_done(conn, shared, &job, name, result).await?,
        None => job_queued(conn, shared, &job, name).await?,
    }
    Ok(job.1)
}

fn status_of(unit: &Unit) -> (String, String, String, u32) {
    (unit.active_state.clone(), unit.sub_state.clone(), unit.result.clone(), unit.main_pid)
}

/// The manager object; in its own module because the interface macro generates a signals
/// trait whose methods carry no docs.
mod manager {
    #![allow(missing_docs)]

    use super::*;

    /// `org.freedesktop.systemd1.Manager`, the subset the agent uses.
    pub(super) struct Manager {
        pub(super) shared: Arc<Shared>,
    }

    #[interface(name = "org.freedesktop.systemd1.Manager")]
    impl Manager {
        async fn subscribe(&self, #[zbus(header)] header: Header<'_>) -> Result<(), SdError> {
            let sender = header.sender().map(|s| s.to_string()).unwrap_or_default();
            if !lock(&self.shared.subscribers).insert(sender) {
                return Err(SdError::AlreadySubscribed("Client is already subscribed.".into()));
            }
            Ok(())
        }

        async fn unsubscribe(&self, #[zbus(header)] header: Header<'_>) -> Result<(), SdError> {
            let sender = header.sender().map(|s| s.to_string()).unwrap_or_default();
            if !lock(&self.shared.subscribers).remove(&sender) {
                return Err(SdError::NotSubscribed("Client is not subscribed.".into()));
            }
            Ok(())
        }

        async fn get_unit(&self, name: &str) -> Result<OwnedObjectPath, SdError> {
            match lock(&self.shared.units).get(name) {
                Some(unit) => Ok(unit.path.clone()),
                None => Err(SdError::NoSuchUnit(format!("Unit {name} not loaded."))),
            }
        }

        #[allow(clippy::type_complexity)]
        async fn list_units_filtered(
            &self,
            states: Vec<String>,
        ) -> Vec<(String, String, String, String, String, String, OwnedObjectPath, u32, String, OwnedObjectPath)> {
            let root = OwnedObjectPath::try_from("/").expect("root path");
            let units = lock(&self.shared.units);
            units
                .iter()
                .filter(|(_, u)| states.is_empty() || states.iter().any(|s| s == "loaded" || *s == u.active_state || *s == u.sub_state))
                .map(|(name, u)| {
                    let (active, sub) = (u.active_state.clone(), u.sub_state.clone());
                    (
                        name.clone(),
                        u.description.clone(),
                        "loaded".into(),
                        active,
                        sub,
                        String::new(),
                        u.path.clone(),
                        0,
                        String::new(),
                        root.clone(),
                    )
                })
                .collect()
        }

        async fn start_transient_unit(
            &self,
            name: &str,
            mode: &str,
            properties: Vec<(String, OwnedValue)>,
            _aux: Vec<(String, Vec<(String, OwnedValue)>)>,
            #[zbus(connection)] conn: &Connection,
        ) -> Result<OwnedObjectPath, SdError> {
            if !valid_service_name(name) {
                return Err(SdError::InvalidArgs(format!("Invalid unit name or type: {name}")));
            }
            if !["replace", "fail", "isolate", "ignore-dependencies", "ignore-requirements"].contains(&mode) {
                return Err(SdError::InvalidArgs(format!("Job mode {mode} invalid")));
            }
            let mut description = name.to_owned();
            let mut exec = None;
            let mut remain_after_exit = false;
            for (key, value) in properties {
                let bad = |what: &str| SdError::InvalidArgs(format!("{key}: {what}"));
                match key.as_str() {
                    "Description" => description = String::try_from(value).map_err(|e| bad(&e.to_string()))?,
                    "RemainAfterExit" => remain_after_exit = bool::try_from(value).map_err(|e| bad(&e.to_string()))?,
                    "Type" => {
                        let kind = String::try_from(value).map_err(|e| bad(&e.to_string()))?;
                        if !["simple", "exec", "forking", "oneshot", "dbus", "notify", "idle"].contains(&kind.as_str()) {
                            return Err(bad("invalid service type"));
                        }
                    }
                    "ExecStart" => {
                        let cmds: Vec<(String, Vec<String>, bool)> = Vec::try_from(value).map_err(|e| bad(&e.to_string()))?;
                        let [(path, argv, _)] = <[_; 1]>::try_from(cmds).map_err(|_| bad("this fake runs exactly one command"))?;
                        if argv.is_empty() {
                            return Err(bad("ExecStart= argv is empty"));
                        }
                        if !path.starts_with('/') && path.contains('/') {
                            return Err(bad(&format!("Path {path} is neither a valid executable name nor an absolute path")));
                        }
                        exec = Some((path, argv));
                    }
                    _ => return Err(SdError::PropertyReadOnly(format!("Cannot set property {key}, or unknown property."))),
                }
            }
            let Some(exec) = exec else {
                return Err(SdError::InvalidArgs("Service has no ExecStart=, ExecStop=, or SuccessAction=. Refusing.".into()));
            };
            let path =
                OwnedObjectPath::try_from(format!("{MANAGER_PATH}/unit/{}", escape_label(name))).map_err(|e| SdError::ZBus(e.into()))?;
            let job = self.shared.job();
            let (started, status) = {
                let mut units = lock(&self.shared.units);
                if units.contains_key(name) {
                    return Err(SdError::UnitExists(format!("Unit {name} was already loaded or has a fragment file.")));
                }
                let mut unit = Unit::new(Kind::Transient, description, exec, remain_after_exit, path.clone());
                let started = self.shared.spawn(name, &mut unit);
                let status = status_of(&unit);
                units.insert(name.to_owned(), unit);
                (started, status)
            };
            let server = conn.object_server();
            server.at(&path, UnitObject { shared: self.shared.clone(), name: name.to_owned() }).await?;
            server.at(&path, ServiceObject { shared: self.shared.clone(), name: name.to_owned() }).await?;
            unit_changed(conn, &self.shared, &path.as_ref(), status).await?;
            job_done(conn, &self.shared, &job, name, if started { "done" } else { "failed" }).await?;
            Ok(job.1)
        }

        async fn restart_unit(&self, name: &str, mode: &str, #[zbus(connection)] conn: &Connection) -> Result<OwnedObjectPath, SdError> {
            unit_job(&self.shared, conn, name, mode, Verb::Restart).await
        }

        async fn start_unit(&self, name: &str, mode: &str, #[zbus(connection)] conn: &Connection) -> Result<OwnedObjectPath, SdError> {
            unit_job(&self.shared, conn, name, mode, Verb::Start).await
        }

        async fn stop_unit(&self, name: &str, mode: &str, #[zbus(connection)] conn: &Connection) -> Result<OwnedObjectPath, SdError> {
            unit_job(&self.shared, conn, name, mode, Verb::Stop).await
        }

        /// `DisableUnitFiles(as files, b runtime) -> a(sss) changes`.
        async fn disable_unit_files(&self, files: Vec<String>, runtime: bool) -> Result<Vec<(String, String, String)>, SdError> {
            let mut units = lock(&self.shared.units);
            if let Some(missing) = files.iter().find(|f| units.get(f.as_str()).is_none_or(|u| u.kind == Kind::Transient)) {
                return Err(SdError::NoSuchUnit(format!("Unit file {missing} does not exist.")));
            }
            let root = if runtime { "/run/systemd/system" } else { "/etc/systemd/system" };
            let mut changes = Vec::new();
            for file in &files {
                let unit = units.get_mut(file.as_str()).expect("checked above");
                if std::mem::take(&mut unit.enabled) {
                    let wants = if unit.kind == Kind::Timer { "timers.target.wants" } else { "multi-user.target.wants" };
                    changes.push(("unlink".to_owned(), format!("{root}/{wants}/{file}"), String::new()));
                }
            }
            Ok(changes)
        }

        /// `GetUnitFileState(s file) -> s`.
        async fn get_unit_file_state(&self, file: &str) -> Result<String, SdError> {
            match lock(&self.shared.units).get(file) {
                Some(u) if u.kind == Kind::Transient => Ok("transient".into()),
                Some(u) => Ok(if u.enabled { "enabled" } else { "disabled" }.into()),
                None => Err(SdError::NoSuchUnit(format!("Unit file {file} does not exist."))),
            }
        }

        /// `Reload()`: nothing to re-read here.
        async fn reload(&self) {}

        /// `JobNew(u id, o job, s unit)`.
        #[zbus(signal)]
        pub(super) async fn job_new(emitter: &SignalEmitter<'_>, id: u32, job: ObjectPath<'_>, unit: &str) -> zbus::Result<()>;

        /// `JobRemoved(u id, o job, s unit, s result)`.
        #[zbus(signal)]
        pub(super) async fn job_removed(
            emitter: &SignalEmitter<'_>,
            id: u32,
            job: ObjectPath<'_>,
            unit: &str,
            result: &str,
        ) -> zbus::Result<()>;
    }
}
use manager::Manager;

/// `org.freedesktop.systemd1.Unit` of one unit.
struct UnitObject {
    shared: Arc<Shared>,
    name: String,
}

impl UnitObject {
    fn read<T>(&self, f: impl FnOnce(&Unit) -> T, gone: T) -> T {
        lock(&self.shared.units).get(&self.name).map(f).unwrap_or(gone)
    }
}

#[interface(name = "org.freedesktop.systemd1.Unit")]
impl UnitObject {
    #[zbus(property)]
    async fn id(&self) -> String {
        self.name.clone()
    }

    #[zbus(property)]
    async fn description(&self) -> String {
        self.read(|u| u.description.clone(), String::new())
    }

    #[zbus(property)]
    async fn load_state(&self) -> String {
        self.read(|_| "loaded".into(), "not-found".into())
    }

    #[zbus(property)]
    async fn active_state(&self) -> String {
        self.read(|u| u.active_state.clone(), "inactive".into())
    }

    #[zbus(property)]
    async fn sub_state(&self) -> String {
        self.read(|u| u.sub_state.clone(), "dead".into())
    }

    #[zbus(property)]
    async fn active_enter_timestamp(&self) -> u64 {
        self.read(|u| u.active_enter_usec, 0)
    }
}

/// `org.freedesktop.systemd1.Timer` of one timer.
struct TimerObject {
    shared: Arc<Shared>,
    name: String,
}

#[interface(name = "org.freedesktop.systemd1.Timer")]
impl TimerObject {
    #[zbus(property)]
    async fn result(&self) -> String {
        lock(&self.shared.units).get(&self.name).map_or_else(|| "success".into(), |u| u.result.clone())
    }
}

/// `org.freedesktop.systemd1.Service` of one unit.
struct ServiceObject {
    shared: Arc<Shared>,
    name: String,
}

impl ServiceObject {
    fn read<T>(&self, f: impl FnOnce(&Unit) -> T, gone: T) -> T {
        lock(&self.shared.units).get(&self.name).map(f).unwrap_or(gone)
    }
}

#[interface(name = "org.freedesktop.systemd1.Service")]
impl ServiceObject {
    #[zbus(property)]
    async fn result(&self) -> String {
        self.read(|u| u.result.clone(), "success".into())
    }

    #[zbus(property, name = "MainPID")]
    async fn main_pid(&self) -> u32 {
        self.read(|u| u.main_pid, 0)
    }

    #[zbus(property)]
    async fn exec_main_status(&self) -> i32 {
        self.read(|u| u.exec_main_status, 0)
    }
}

/// Applies children's exits: new state, signals, garbage collection of inactive units.
async fn reap(conn: Connection, shared: Arc<Shared>, mut exits: tokio::sync::mpsc::UnboundedReceiver<Exit>) {
    while let Some(exit) = exits.recv().await {
        let (path, status, collect, ended) = {
            let mut units = lock(&shared.units);
            let Some(unit) = units.get_mut(&exit.unit).filter(|u| u.generation == exit.generation) else { continue };
            unit.main_pid = 0;
            let (result, code) = match &exit.status {
                Ok(s) if s.success() => ("success", 0),
                Ok(s) => match (s.code(), s.signal()) {
                    (Some(code), _) => ("exit-code", code),
                    (None, Some(sig)) => ("signal", sig),
                    (None, None) => ("exit-code", 1),
                },
                Err(_) => ("exit-code", 1),
            };
            // A process stopped by a stop job ends the unit cleanly, whatever its status.
            let result = if std::mem::take(&mut unit.stopping) { "success" } else { result };
            unit.result = result.into();
            unit.exec_main_status = code;
            let (active, sub) = match (result, unit.remain_after_exit) {
                ("success", true) => ("active", "exited"),
                ("success", false) => ("inactive", "dead"),
                _ => ("failed", "failed"),
            };
            unit.set_state(active, sub);
            let collect = active == "inactive" && unit.kind == Kind::Transient;
            let ended = unit.pending_job.take().map(|job| (job, if result == "success" { "done" } else { "failed" }));
            (unit.path.clone(), status_of(unit), collect, ended)
        };
        if let Err(e) = unit_changed(&conn, &shared, &path.as_ref(), status).await {
            eprintln!("fake-systemd: PropertiesChanged for {}: {e}", exit.unit);
        }
        if let Some((job, result)) = ended
            && let Err(e) = job_ended(&conn, &shared, &job, &exit.unit, result).await
        {
            eprintln!("fake-systemd: JobRemoved for {}: {e}", exit.unit);
        }
        if collect {
            lock(&shared.units).remove(&exit.unit);
            let _ = conn.object_server().remove::<UnitObject, _>(&path).await;
            let _ = conn.object_server().remove::<ServiceObject, _>(&path).await;
        }
    }
}

/// A `--unit 'NAME;TYPE;STATE[;SCRIPT]'` (see the module docs).
struct UnitSpec {
    name: String,
    kind: Kind,
    active: bool,
    script: Option<String>,
}

/// Why the command line is refused.
#[derive(Debug, thiserror::Error)]
enum ArgsError {
    /// A `--unit` without its three fields.
    #[error("--unit {spec:?}: expected NAME;TYPE;STATE[;SCRIPT]")]
    UnitFields {
        /// The `--unit` value.
        spec: String,
    },
    /// A TYPE that does not fit the unit's name.
    #[error("--unit {spec:?}: TYPE must be oneshot or simple for a .service, timer for a .timer")]
    UnitType {
        /// The `--unit` value.
        spec: String,
    },
    /// A service without a script, or a timer with one.
    #[error("--unit {spec:?}: a service needs a SCRIPT, a timer has none")]
    UnitScript {
        /// The `--unit` value.
        spec: String,
    },
    /// A STATE that is neither active nor inactive.
    #[error("--unit {spec:?}: STATE must be active or inactive")]
    UnitState {
        /// The `--unit` value.
        spec: String,
    },
    /// A flag without its value.
    #[error("{flag} needs a value")]
    NeedsValue {
        /// The flag.
        flag: &'static str,
    },
    /// An argument it does not take.
    #[error("unknown argument {argument:?}")]
    Unknown {
        /// The argument.
        argument: String,
    },
    /// No `--address`.
    #[error("usage: fake-systemd --address ADDR [--unit 'NAME;TYPE;STATE[;SCRIPT]']...")]
    Usage,
}

fn parse_unit(spec: &str) -> Result<UnitSpec, ArgsError> {
    let mut parts = spec.splitn(4, ';');
    let (Some(name), Some(kind), Some(state)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(ArgsError::UnitFields { spec: spec.to_owned() });
    };
    let script = parts.next().map(str::to_owned);
    let kind = match (kind, name.rsplit_once('.').map(|(_, s)| s)) {
        ("oneshot", Some("service")) => Kind::Oneshot,
        ("simple", Some("service")) => Kind::Simple,
        ("timer", Some("timer")) => Kind::Timer,
        _ => return Err(ArgsError::UnitType { spec: spec.to_owned() }),
    };
    if (kind == Kind::Timer) != script.is_none() {
        return Err(ArgsError::UnitScript { spec: spec.to_owned() });
    }
    let active = match state {
        "active" => true,
        "inactive" => false,
        _ => return Err(ArgsError::UnitState { spec: spec.to_owned() }),
    };
    Ok(UnitSpec { name: name.to_owned(), kind, active, script })
}

fn args() -> Result<(String, Vec<UnitSpec>), ArgsError> {
    let mut args = std::env::args().skip(1);
    let mut address = None;
    let mut units = Vec::new();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--address" => address = Some(args.next().ok_or(ArgsError::NeedsValue { flag: "--address" })?),
            "--unit" => units.push(parse_unit(&args.next().ok_or(ArgsError::NeedsValue { flag: "--unit" })?)?),
            other => return Err(ArgsError::Unknown { argument: other.to_owned() }),
        }
    }
    let address = address.ok_or(ArgsError::Usage)?;
    Ok((address, units))
}

/// Loads the configured units and exports their objects.
async fn load_units(conn: &Connection, shared: &Arc<Shared>, specs: Vec<UnitSpec>) -> zbus::Result<()> {
    for spec in specs {
        let path = OwnedObjectPath::try_from(format!("{MANAGER_PATH}/unit/{}", escape_label(&spec.name)))?;
        let exec = match &spec.script {
            Some(script) => ("/bin/sh".to_owned(), vec!["/bin/sh".to_owned(), "-c".to_owned(), script.clone()]),
            None => (String::new(), Vec::new()),
        };
        let mut unit = Unit::new(spec.kind, spec.name.clone(), exec, false, path.clone());
        if spec.active {
            match spec.kind {
                Kind::Timer => unit.set_state("active", "waiting"),
                Kind::Simple => {
                    shared.spawn(&spec.name, &mut unit);
                }
                Kind::Oneshot | Kind::Transient => {}
            }
        }
        lock(&shared.units).insert(spec.name.clone(), unit);
        let server = conn.object_server();
        server.at(&path, UnitObject { shared: shared.clone(), name: spec.name.clone() }).await?;
        if spec.kind == Kind::Timer {
            server.at(&path, TimerObject { shared: shared.clone(), name: spec.name.clone() }).await?;
        } else {
            server.at(&path, ServiceObject { shared: shared.clone(), name: spec.name.clone() }).await?;
        }
    }
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let (address, specs) = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("fake-systemd: {e}");
            std::process::exit(2);
        }
    };
    let (tx, rx) = unbounded_channel();
    let shared = Arc::new(Shared {
        units: Mutex::new(BTreeMap::new()),
        subscribers: Mutex::new(HashSet::new()),
        next_job: AtomicU32::new(1),
        exits: tx,
    });
    let built = async {
        zbus::connection::Builder::address(address.as_str())?
            .serve_at(MANAGER_PATH, Manager { shared: shared.clone() })?
            .name(BUS_NAME)?
            .build()
            .await
    };
    let conn = match built.await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("fake-systemd: cannot serve {BUS_NAME} on {address}: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = load_units(&conn, &shared, specs).await {
        eprintln!("fake-systemd: cannot load the configured units: {e}");
        std::process::exit(1);
    }
    let mut stdout = std::io::stdout();
    let _ = writeln!(stdout, "ready");
    let _ = stdout.flush();
    // SIGTERM (the tests' teardown) stops the units' processes too, so a failed test leaves
    // no command behind; SIGKILL leaves them running, as a crashed manager would.
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("fake-systemd: cannot handle SIGTERM: {e}");
            std::process::exit(1);
        }
    };
    tokio::select! {
        () = reap(conn, shared.clone(), rx) => {}
        _ = term.recv() => {
            for unit in lock(&shared.units).values().filter(|u| u.main_pid != 0) {
                let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(unit.main_pid as i32), nix::sys::signal::Signal::SIGKILL);
            }
        }
    }
}
