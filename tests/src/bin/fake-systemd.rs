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

/// One unit's state.
struct Unit {
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

impl Shared {
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
                unit.active_state = "active".into();
                unit.sub_state = "running".into();
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
                unit.active_state = "failed".into();
                unit.sub_state = "failed".into();
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
                let mut unit = Unit {
                    description,
                    exec,
                    remain_after_exit,
                    active_state: "inactive".into(),
                    sub_state: "dead".into(),
                    result: "success".into(),
                    main_pid: 0,
                    exec_main_status: 0,
                    generation: 0,
                    path: path.clone(),
                };
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
            if !["replace", "fail", "isolate", "ignore-dependencies", "ignore-requirements"].contains(&mode) {
                return Err(SdError::InvalidArgs(format!("Job mode {mode} invalid")));
            }
            let job = self.shared.job();
            let (started, path, status) = {
                let mut units = lock(&self.shared.units);
                let Some(unit) = units.get_mut(name) else {
                    return Err(SdError::NoSuchUnit(format!("Unit {name} not found.")));
                };
                if unit.main_pid != 0 {
                    // Stop the running one first (its exit is then stale: the generation moves on).
                    let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(unit.main_pid as i32), nix::sys::signal::Signal::SIGTERM);
                }
                let started = self.shared.spawn(name, unit);
                (started, unit.path.clone(), status_of(unit))
            };
            unit_changed(conn, &self.shared, &path.as_ref(), status).await?;
            job_done(conn, &self.shared, &job, name, if started { "done" } else { "failed" }).await?;
            Ok(job.1)
        }

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
        let (path, status, collect) = {
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
            unit.result = result.into();
            unit.exec_main_status = code;
            let (active, sub) = match (result, unit.remain_after_exit) {
                ("success", true) => ("active", "exited"),
                ("success", false) => ("inactive", "dead"),
                _ => ("failed", "failed"),
            };
            unit.active_state = active.into();
            unit.sub_state = sub.into();
            let collect = active == "inactive";
            (unit.path.clone(), status_of(unit), collect)
        };
        if let Err(e) = unit_changed(&conn, &shared, &path.as_ref(), status).await {
            eprintln!("fake-systemd: PropertiesChanged for {}: {e}", exit.unit);
        }
        if collect {
            lock(&shared.units).remove(&exit.unit);
            let _ = conn.object_server().remove::<UnitObject, _>(&path).await;
            let _ = conn.object_server().remove::<ServiceObject, _>(&path).await;
        }
    }
}

fn address_from_args() -> Result<String, String> {
    let mut args = std::env::args().skip(1);
    let mut address = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--address" => address = Some(args.next().ok_or("--address needs a value")?),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    address.ok_or_else(|| "usage: fake-systemd --address ADDR".to_owned())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let address = match address_from_args() {
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
