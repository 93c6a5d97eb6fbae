//! systemd, as the agent uses it: transient units (so a switch survives the agent), unit
//! state, failed units, restarting named units — behind the narrow [`Systemd`] trait — plus
//! the service protocol of the agent's own unit (`Type=notify`, watchdog).
//!
//! The real implementation speaks systemd's D-Bus API (`org.freedesktop.systemd1.Manager`)
//! through zbus; tests run it against a private `dbus-daemon` with a test service that
//! implements the subset used here.

pub mod dbus;
/// The in-memory systemd: for tests only (this crate's, and others' through the `testkit`
/// feature), never in the agent that ships.
#[cfg(any(test, feature = "testkit"))]
pub mod fake;
pub mod notify;

use std::time::Duration;

/// A unit's state as systemd reports it. A timer that is armed is `active`/`waiting`
/// ([`UnitStatus::is_active`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitStatus {
    /// `ActiveState`: active, reloading, inactive, failed, activating, deactivating.
    pub active_state: String,
    /// `SubState`: running, exited, dead, failed, …
    pub sub_state: String,
    /// `Result` of a service: success, exit-code, signal, timeout, …; empty if unknown.
    pub result: String,
}

impl UnitStatus {
    /// Still starting or running.
    pub fn is_running(&self) -> bool {
        matches!(self.active_state.as_str(), "active" | "activating" | "reloading" | "deactivating") && self.sub_state != "exited"
    }

    /// `ActiveState` is `active` (an armed timer, a running service, a oneshot with
    /// `RemainAfterExit`).
    pub fn is_active(&self) -> bool {
        self.active_state == "active"
    }

    /// Finished, and successfully.
    pub fn succeeded(&self) -> bool {
        !self.is_running() && self.active_state != "failed" && (self.result.is_empty() || self.result == "success")
    }
}

/// Why a systemd call failed.
#[derive(Debug, thiserror::Error)]
pub enum SystemdError {
    /// The bus could not be reached.
    #[error("cannot reach systemd over D-Bus ({address}): {message}")]
    Connect {
        /// The bus address tried.
        address: String,
        /// What went wrong.
        message: String,
    },
    /// A method call failed (systemd's error name and message).
    #[error("systemd {method}({unit}): {message}")]
    Call {
        /// The method.
        method: &'static str,
        /// The unit concerned.
        unit: String,
        /// What systemd said.
        message: String,
    },
    /// A wait ran out.
    #[error("unit {unit} still {state} after {secs} s")]
    Timeout {
        /// The unit.
        unit: String,
        /// Its state at the deadline.
        state: String,
        /// The wait.
        secs: u64,
    },
}

/// The part of systemd the agent uses. Blocking calls: the agent runs them off its async
/// runtime.
pub trait Systemd: Send + Sync {
    /// Starts a transient service `unit` running `argv` and returns once systemd accepted
    /// the job; the unit then runs on its own, independent of the agent's process.
    fn start_transient_service(&self, unit: &str, description: &str, argv: &[String]) -> Result<(), SystemdError>;
    /// The unit's state; `None` if systemd does not know it.
    fn unit_status(&self, unit: &str) -> Result<Option<UnitStatus>, SystemdError>;
    /// Waits until `unit` is no longer running (or `timeout` passes: [`SystemdError::Timeout`])
    /// and returns its final state.
    fn wait_finished(&self, unit: &str, timeout: Duration) -> Result<UnitStatus, SystemdError>;
    /// Units in the failed state, by name.
    fn failed_units(&self) -> Result<Vec<String>, SystemdError>;
    /// Restarts `unit` (`RestartUnit`, mode `replace`) and waits, bounded by
    /// [`JOB_TIMEOUT`], until systemd finished the job: an error unless the job's result is
    /// `done` (for a oneshot service that is once its command ran and succeeded).
    fn restart_unit(&self, unit: &str) -> Result<(), SystemdError>;
    /// Starts `unit` (`StartUnit`, mode `replace`) and waits for its job like
    /// [`Systemd::restart_unit`]. An unknown unit is systemd's `NoSuchUnit`.
    fn start_unit(&self, unit: &str) -> Result<(), SystemdError> {
        Err(unsupported("StartUnit", unit))
    }
    /// Stops `unit` (`StopUnit`, mode `replace`) and waits for its job like
    /// [`Systemd::restart_unit`]. Stopping the agent's own unit kills the caller: the call
    /// then never returns.
    fn stop_unit(&self, unit: &str) -> Result<(), SystemdError> {
        Err(unsupported("StopUnit", unit))
    }
    /// Disables the unit files `units` (`DisableUnitFiles`, `runtime=false`: the symlinks
    /// under `/etc`), then reloads the manager (`Reload`). Returns systemd's changes, one
    /// `"<type> <path>"` each (`unlink /etc/systemd/system/multi-user.target.wants/x.service`);
    /// none when the units were already disabled.
    fn disable_unit_files(&self, units: &[&str]) -> Result<Vec<String>, SystemdError> {
        Err(unsupported("DisableUnitFiles", &units.join(" ")))
    }
}

/// The bound on waiting for one job of [`Systemd::start_unit`], [`Systemd::stop_unit`] and
/// [`Systemd::restart_unit`] (a oneshot service's job lasts as long as its command).
pub const JOB_TIMEOUT: Duration = Duration::from_secs(300);

/// The error of a [`Systemd`] double that does not implement a method.
fn unsupported(method: &'static str, unit: &str) -> SystemdError {
    SystemdError::Call { method, unit: unit.to_owned(), message: "not supported by this Systemd implementation".to_owned() }
}
