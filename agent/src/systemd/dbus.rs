//! [`DbusSystemd`]: the real [`Systemd`], over systemd's D-Bus API
//! (`org.freedesktop.systemd1`, `/org/freedesktop/systemd1`, `org.freedesktop.systemd1.Manager`).
//!
//! The connection is zbus's blocking one (its reader runs on zbus's own runtime). Each call
//! runs its async body on a short-lived current-thread runtime of its own, so the waits can
//! be bounded with a timer; call these methods off the agent's async runtime (they block).
//!
//! [`Systemd::start_unit`], [`Systemd::stop_unit`] and [`Systemd::restart_unit`] queue a job
//! (mode `replace`) and wait for its `JobRemoved` signal, bounded by
//! [`JOB_TIMEOUT`](super::JOB_TIMEOUT); [`Systemd::disable_unit_files`] is
//! `DisableUnitFiles(runtime=false)` followed by `Reload`.
//!
//! Transient services are started with `RemainAfterExit=true`, so their final state stays
//! queryable after the command exits (active/exited on success, failed/failed otherwise).
//! The flip side, as with systemd itself: the name stays taken until the unit is stopped or
//! reset, so callers give each run a fresh unit name.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use zbus::export::futures_core::Stream;
use zbus::message::Type as MessageType;
use zbus::zvariant::{OwnedObjectPath, OwnedValue, Value};
use zbus::{AsyncDrop, MatchRule, MessageStream};

use super::{JOB_TIMEOUT, Systemd, SystemdError, UnitStatus};

/// systemd's bus name.
pub const DESTINATION: &str = "org.freedesktop.systemd1";
/// The manager object.
pub const MANAGER_PATH: &str = "/org/freedesktop/systemd1";
/// The manager interface.
pub const MANAGER_INTERFACE: &str = "org.freedesktop.systemd1.Manager";
/// Every unit's interface.
pub const UNIT_INTERFACE: &str = "org.freedesktop.systemd1.Unit";
/// systemd's error for an unknown unit.
pub const NO_SUCH_UNIT: &str = "org.freedesktop.systemd1.NoSuchUnit";
/// systemd's error when a client subscribes twice.
const ALREADY_SUBSCRIBED: &str = "org.freedesktop.systemd1.AlreadySubscribed";
const PROPERTIES_INTERFACE: &str = "org.freedesktop.DBus.Properties";

/// How long one method call may take before it counts as failed.
const METHOD_TIMEOUT: Duration = Duration::from_secs(25);

/// systemd over D-Bus.
#[derive(Debug)]
pub struct DbusSystemd {
    conn: zbus::blocking::Connection,
    /// The address, for error messages.
    address: String,
    /// Whether `Subscribe` was called on this connection (systemd only sends unit and job
    /// signals once some client subscribed).
    subscribed: AtomicBool,
    /// The bound on a unit job's wait ([`JOB_TIMEOUT`] unless set).
    job_timeout: Duration,
}

/// A method call's failure as text: the D-Bus error name and its message.
fn describe(e: &zbus::Error) -> String {
    match e {
        zbus::Error::MethodError(name, Some(text), _) => format!("{name}: {text}"),
        zbus::Error::MethodError(name, None, _) => name.to_string(),
        other => other.to_string(),
    }
}

/// The D-Bus error name of a failed call, if it was an error reply.
fn error_name(e: &zbus::Error) -> Option<&str> {
    match e {
        zbus::Error::MethodError(name, _, _) => Some(name.as_str()),
        _ => None,
    }
}

/// The interface carrying a unit type's `Result` property, if the type has one.
fn result_interface(unit: &str) -> Option<&'static str> {
    let suffix = unit.rsplit_once('.').map(|(_, s)| s)?;
    Some(match suffix {
        "service" => "org.freedesktop.systemd1.Service",
        "timer" => "org.freedesktop.systemd1.Timer",
        "socket" => "org.freedesktop.systemd1.Socket",
        "mount" => "org.freedesktop.systemd1.Mount",
        "automount" => "org.freedesktop.systemd1.Automount",
        "swap" => "org.freedesktop.systemd1.Swap",
        "path" => "org.freedesktop.systemd1.Path",
        "scope" => "org.freedesktop.systemd1.Scope",
        _ => return None,
    })
}

/// Runs `fut` to completion on a fresh current-thread runtime (with a timer).
fn run<F: Future>(fut: F) -> Result<F::Output, SystemdError> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().map_err(|e| SystemdError::Call {
        method: "runtime",
        unit: String::new(),
        message: format!("cannot start a runtime for the D-Bus call: {e}"),
    })?;
    Ok(rt.block_on(fut))
}

/// The next message from either stream (`None` once one of them ends).
async fn next_of(a: &mut MessageStream, b: &mut MessageStream) -> Option<zbus::Result<zbus::Message>> {
    std::future::poll_fn(|cx| {
        if let Poll::Ready(m) = Pin::new(&mut *a).poll_next(cx) {
            return Poll::Ready(m);
        }
        Pin::new(&mut *b).poll_next(cx)
    })
    .await
}

impl DbusSystemd {
    /// Connects to the system bus (where systemd lives).
    pub fn system() -> Result<Self, SystemdError> {
        let builder = zbus::blocking::connection::Builder::system()
            .map_err(|e| SystemdError::Connect { address: "system bus".into(), message: e.to_string() })?;
        Self::connect(builder, "system bus")
    }

    /// Connects to the bus at a D-Bus address (`unix:path=/run/…`), e.g. a test bus.
    pub fn at_address(address: &str) -> Result<Self, SystemdError> {
        let builder = zbus::blocking::connection::Builder::address(address)
            .map_err(|e| SystemdError::Connect { address: address.into(), message: e.to_string() })?;
        Self::connect(builder, address)
    }

    fn connect(builder: zbus::blocking::connection::Builder<'_>, address: &str) -> Result<Self, SystemdError> {
        let conn = builder
            .method_timeout(METHOD_TIMEOUT)
            .build()
            .map_err(|e| SystemdError::Connect { address: address.into(), message: e.to_string() })?;
        Ok(DbusSystemd { conn, address: address.to_owned(), subscribed: AtomicBool::new(false), job_timeout: JOB_TIMEOUT })
    }

    /// The same, with another bound on waiting for a unit job (start, stop, restart).
    pub fn with_job_timeout(mut self, timeout: Duration) -> Self {
        self.job_timeout = timeout;
        self
    }

    /// The bus address this talks to.
    pub fn address(&self) -> &str {
        &self.address
    }

    fn conn(&self) -> &zbus::Connection {
        self.conn.inner()
    }

    /// Calls a manager method.
    async fn manager_call<B>(&self, method: &'static str, body: &B) -> Result<zbus::Message, zbus::Error>
    where
        B: serde::Serialize + zbus::zvariant::DynamicType,
    {
        self.conn().call_method(Some(DESTINATION), MANAGER_PATH, Some(MANAGER_INTERFACE), method, body).await
    }

    /// `GetUnit`: the unit's object path, `None` on `NoSuchUnit`.
    async fn unit_path(&self, unit: &str) -> Result<Option<OwnedObjectPath>, SystemdError> {
        let call_err = |e: &zbus::Error| SystemdError::Call { method: "GetUnit", unit: unit.to_owned(), message: describe(e) };
        match self.manager_call("GetUnit", &(unit,)).await {
            Ok(reply) => reply.body().deserialize::<OwnedObjectPath>().map(Some).map_err(|e| call_err(&e)),
            Err(e) if error_name(&e) == Some(NO_SUCH_UNIT) => Ok(None),
            Err(e) => Err(call_err(&e)),
        }
    }

    /// One string property of the object at `path`.
    async fn string_property(&self, unit: &str, path: &OwnedObjectPath, interface: &str, name: &str) -> Result<String, SystemdError> {
        let call_err =
            |e: &zbus::Error| SystemdError::Call { method: "Get", unit: unit.to_owned(), message: format!("{name}: {}", describe(e)) };
        let reply = self
            .conn()
            .call_method(Some(DESTINATION), path, Some(PROPERTIES_INTERFACE), "Get", &(interface, name))
            .await
            .map_err(|e| call_err(&e))?;
        let value: OwnedValue = reply.body().deserialize().map_err(|e| call_err(&e))?;
        match Value::from(value) {
            Value::Str(s) => Ok(s.to_string()),
            other => Err(SystemdError::Call {
                method: "Get",
                unit: unit.to_owned(),
                message: format!("{name} is {}, not a string", other.value_signature()),
            }),
        }
    }

    /// The state of the unit at `path`.
    async fn status_at(&self, unit: &str, path: &OwnedObjectPath) -> Result<UnitStatus, SystemdError> {
        let active_state = self.string_property(unit, path, UNIT_INTERFACE, "ActiveState").await?;
        let sub_state = self.string_property(unit, path, UNIT_INTERFACE, "SubState").await?;
        let result = match result_interface(unit) {
            Some(interface) => self.string_property(unit, path, interface, "Result").await?,
            None => String::new(),
        };
        Ok(UnitStatus { active_state, sub_state, result })
    }

    /// `Subscribe`, once per connection (a second one is systemd's `AlreadySubscribed`).
    async fn subscribe(&self, unit: &str) -> Result<(), SystemdError> {
        if self.subscribed.load(Ordering::SeqCst) {
            return Ok(());
        }
        match self.manager_call("Subscribe", &()).await {
            Ok(_) => {}
            Err(e) if error_name(&e) == Some(ALREADY_SUBSCRIBED) => {}
            Err(e) => return Err(SystemdError::Call { method: "Subscribe", unit: unit.to_owned(), message: describe(&e) }),
        }
        self.subscribed.store(true, Ordering::SeqCst);
        Ok(())
    }

    async fn signal_stream(&self, unit: &str, rule: zbus::Result<MatchRule<'_>>) -> Result<MessageStream, SystemdError> {
        let call_err = |e: zbus::Error| SystemdError::Call { method: "AddMatch", unit: unit.to_owned(), message: describe(&e) };
        let rule = rule.map_err(call_err)?;
        MessageStream::for_match_rule(rule, self.conn(), Some(64)).await.map_err(call_err)
    }

    /// Waits (bounded by `deadline`) until the unit at `path` stops running. Both signal
    /// streams are registered before the first look at the state, so no change is missed.
    async fn wait_at(&self, unit: &str, path: &OwnedObjectPath, timeout: Duration, deadline: Instant) -> Result<UnitStatus, SystemdError> {
        self.subscribe(unit).await?;
        let props_rule = MatchRule::builder()
            .msg_type(MessageType::Signal)
            .sender(DESTINATION)
            .and_then(|b| b.path(path.as_ref()))
            .and_then(|b| b.interface(PROPERTIES_INTERFACE))
            .and_then(|b| b.member("PropertiesChanged"))
            .map(|b| b.build());
        let mut props = self.signal_stream(unit, props_rule).await?;
        let jobs_rule = job_removed_rule(unit);
        let mut jobs = match self.signal_stream(unit, jobs_rule).await {
            Ok(s) => s,
            Err(e) => {
                props.async_drop().await;
                return Err(e);
            }
        };
        let outcome = async {
            loop {
                let status = self.status_at(unit, path).await?;
                if !status.is_running() {
                    return Ok(status);
                }
                match tokio::time::timeout_at(deadline.into(), next_of(&mut props, &mut jobs)).await {
                    Err(_) => {
                        // One last look: the change may have landed just at the deadline.
                        let status = self.status_at(unit, path).await?;
                        if !status.is_running() {
                            return Ok(status);
                        }
                        let state = format!("{}/{}", status.active_state, status.sub_state);
                        return Err(SystemdError::Timeout { unit: unit.to_owned(), state, secs: timeout.as_secs() });
                    }
                    Ok(None) => {
                        return Err(SystemdError::Call {
                            method: "wait",
                            unit: unit.to_owned(),
                            message: "the D-Bus connection closed".into(),
                        });
                    }
                    // A signal (or a stream error): look at the state again.
                    Ok(Some(_)) => {}
                }
            }
        }
        .await;
        // Remove the match rules here, on this runtime, rather than in a detached task.
        props.async_drop().await;
        jobs.async_drop().await;
        outcome
    }
}

/// The match rule for the manager's `JobRemoved` signals about `unit` (its third argument).
fn job_removed_rule(unit: &str) -> zbus::Result<MatchRule<'_>> {
    MatchRule::builder()
        .msg_type(MessageType::Signal)
        .sender(DESTINATION)
        .and_then(|b| b.path(MANAGER_PATH))
        .and_then(|b| b.interface(MANAGER_INTERFACE))
        .and_then(|b| b.member("JobRemoved"))
        .and_then(|b| b.arg(2, unit))
        .map(|b| b.build())
}

impl DbusSystemd {
    /// Queues a job with `method(unit, "replace")` and waits (bounded by `timeout`) for its
    /// `JobRemoved`. The signal stream is registered before the call, so a job that finishes
    /// before the reply arrives is still seen. A result other than `done` (`failed`,
    /// `timeout`, `canceled`, `dependency`, `skipped`) is an error naming it.
    async fn job(&self, method: &'static str, unit: &str, timeout: Duration) -> Result<(), SystemdError> {
        let deadline = Instant::now() + timeout;
        let call_err = |e: &zbus::Error| SystemdError::Call { method, unit: unit.to_owned(), message: describe(e) };
        self.subscribe(unit).await?;
        let jobs_rule = job_removed_rule(unit);
        let mut jobs = self.signal_stream(unit, jobs_rule).await?;
        let outcome = async {
            let reply = self.manager_call(method, &(unit, "replace")).await.map_err(|e| call_err(&e))?;
            let job: OwnedObjectPath = reply.body().deserialize().map_err(|e| call_err(&e))?;
            loop {
                let next = std::future::poll_fn(|cx| Pin::new(&mut jobs).poll_next(cx));
                match tokio::time::timeout_at(deadline.into(), next).await {
                    Err(_) => {
                        let state = match self.unit_path(unit).await {
                            Ok(Some(path)) => match self.status_at(unit, &path).await {
                                Ok(st) => format!("{}/{} (job {} pending)", st.active_state, st.sub_state, job.as_str()),
                                Err(_) => format!("job {} pending", job.as_str()),
                            },
                            _ => format!("job {} pending", job.as_str()),
                        };
                        return Err(SystemdError::Timeout { unit: unit.to_owned(), state, secs: timeout.as_secs() });
                    }
                    Ok(None) => {
                        return Err(SystemdError::Call { method, unit: unit.to_owned(), message: "the D-Bus connection closed".into() });
                    }
                    Ok(Some(Ok(msg))) => {
                        let Ok((_id, path, _unit, result)) = msg.body().deserialize::<(u32, OwnedObjectPath, String, String)>() else {
                            continue;
                        };
                        if path != job {
                            continue;
                        }
                        return if result == "done" {
                            Ok(())
                        } else {
                            Err(SystemdError::Call { method, unit: unit.to_owned(), message: format!("job {result}") })
                        };
                    }
                    Ok(Some(Err(_))) => {}
                }
            }
        }
        .await;
        jobs.async_drop().await;
        outcome
    }
}

impl Systemd for DbusSystemd {
    fn start_transient_service(&self, unit: &str, description: &str, argv: &[String]) -> Result<(), SystemdError> {
        let Some(program) = argv.first() else {
            return Err(SystemdError::Call { method: "StartTransientUnit", unit: unit.to_owned(), message: "empty command line".into() });
        };
        let exec_start: Vec<(String, Vec<String>, bool)> = vec![(program.clone(), argv.to_vec(), false)];
        let properties: Vec<(&str, Value<'_>)> = vec![
            ("Description", Value::from(description)),
            ("Type", Value::from("exec")),
            ("RemainAfterExit", Value::from(true)),
            ("ExecStart", Value::from(exec_start)),
        ];
        let aux: Vec<(&str, Vec<(&str, Value<'_>)>)> = Vec::new();
        let body = (unit, "fail", properties, aux);
        run(async {
            let reply = self.manager_call("StartTransientUnit", &body).await;
            reply.and_then(|r| r.body().deserialize::<OwnedObjectPath>()).map(|_job| ()).map_err(|e| SystemdError::Call {
                method: "StartTransientUnit",
                unit: unit.to_owned(),
                message: describe(&e),
            })
        })?
    }

    fn unit_status(&self, unit: &str) -> Result<Option<UnitStatus>, SystemdError> {
        run(async {
            match self.unit_path(unit).await? {
                Some(path) => self.status_at(unit, &path).await.map(Some),
                None => Ok(None),
            }
        })?
    }

    fn wait_finished(&self, unit: &str, timeout: Duration) -> Result<UnitStatus, SystemdError> {
        let deadline = Instant::now() + timeout;
        run(async {
            let Some(path) = self.unit_path(unit).await? else {
                return Err(SystemdError::Call {
                    method: "GetUnit",
                    unit: unit.to_owned(),
                    message: format!("{NO_SUCH_UNIT}: unknown unit"),
                });
            };
            self.wait_at(unit, &path, timeout, deadline).await
        })?
    }

    fn failed_units(&self) -> Result<Vec<String>, SystemdError> {
        type Listed = (String, String, String, String, String, String, OwnedObjectPath, u32, String, OwnedObjectPath);
        run(async {
            let reply = self.manager_call("ListUnitsFiltered", &(vec!["failed"],)).await;
            let units: Vec<Listed> = reply.and_then(|r| r.body().deserialize()).map_err(|e| SystemdError::Call {
                method: "ListUnitsFiltered",
                unit: String::new(),
                message: describe(&e),
            })?;
            let mut names: Vec<String> = units.into_iter().map(|u| u.0).collect();
            names.sort();
            Ok(names)
        })?
    }

    fn restart_unit(&self, unit: &str) -> Result<(), SystemdError> {
        run(self.job("RestartUnit", unit, self.job_timeout))?
    }

    fn start_unit(&self, unit: &str) -> Result<(), SystemdError> {
        run(self.job("StartUnit", unit, self.job_timeout))?
    }

    fn stop_unit(&self, unit: &str) -> Result<(), SystemdError> {
        run(self.job("StopUnit", unit, self.job_timeout))?
    }

    fn disable_unit_files(&self, units: &[&str]) -> Result<Vec<String>, SystemdError> {
        let joined = units.join(" ");
        run(async {
            let call_err =
                |method: &'static str, e: &zbus::Error| SystemdError::Call { method, unit: joined.clone(), message: describe(e) };
            let reply = self.manager_call("DisableUnitFiles", &(units, false)).await.map_err(|e| call_err("DisableUnitFiles", &e))?;
            let changes: Vec<(String, String, String)> = reply.body().deserialize().map_err(|e| call_err("DisableUnitFiles", &e))?;
            self.manager_call("Reload", &()).await.map_err(|e| call_err("Reload", &e))?;
            Ok(changes.into_iter().map(|(kind, file, _dest)| format!("{kind} {file}")).collect())
        })?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_interfaces_by_unit_type() {
        assert_eq!(result_interface("nixos-switch-7.service"), Some("org.freedesktop.systemd1.Service"));
        assert_eq!(result_interface("maas_hardware_sync.timer"), Some("org.freedesktop.systemd1.Timer"));
        assert_eq!(result_interface("multi-user.target"), None);
        assert_eq!(result_interface("nosuffix"), None);
    }

    #[test]
    fn an_unreachable_bus_is_a_connect_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let address = format!("unix:path={}", dir.path().join("no-bus").display());
        match DbusSystemd::at_address(&address) {
            Err(SystemdError::Connect { address: a, .. }) => assert_eq!(a, address),
            other => panic!("expected a connect error, got {other:?}"),
        }
        assert!(matches!(DbusSystemd::at_address("not an address"), Err(SystemdError::Connect { .. })));
    }
}
