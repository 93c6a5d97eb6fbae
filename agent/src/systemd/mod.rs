//! systemd, as the agent uses it: transient units (so a switch survives the agent), unit
//! state, failed units, restarting named units — behind the narrow [`Systemd`] trait — plus
//! the service protocol of the agent's own unit (`Type=notify`, watchdog).
//!
//! The real implementation speaks systemd's D-Bus API (`org.freedesktop.systemd1.Manager`)
//! through zbus; tests run it against a private `dbus-daemon` with a test service that
//! implements the subset used here.

pub mod dbus;
pub mod notify;

use std::time::Duration;

/// A unit's state as systemd reports it.
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
    /// Restarts `unit` and returns once systemd accepted the job.
    fn restart_unit(&self, unit: &str) -> Result<(), SystemdError>;
}
