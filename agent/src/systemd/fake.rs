//! [`FakeSystemd`]: an in-memory [`Systemd`] for unit tests of the tasks. It keeps loaded
//! units with their state and unit-file state, records every call, and answers like systemd:
//! an unknown unit is `org.freedesktop.systemd1.NoSuchUnit`, a job on a unit set to fail
//! leaves it `failed` and reports `job failed`. The D-Bus path is tested against the
//! `fake-systemd` test service on a real `dbus-daemon` (`tests/tests/agents/agent_systemd.rs`).

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use super::dbus::NO_SUCH_UNIT;
use super::{Systemd, SystemdError, UnitStatus};

/// How a fake unit behaves when started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FakeKind {
    /// A timer: started, it is `active`/`waiting`.
    Timer,
    /// A `Type=oneshot` service: its start job ends when the command did (`inactive`/`dead`,
    /// result `success`).
    Oneshot,
    /// A long-running service: started, it is `active`/`running`.
    Simple,
}

#[derive(Debug, Clone)]
struct FakeUnit {
    kind: FakeKind,
    status: UnitStatus,
    /// `UnitFileState`: enabled or not.
    enabled: bool,
    /// Set by [`FakeSystemd::fail_jobs`]: every job on the unit fails.
    fails: bool,
}

#[derive(Debug, Default)]
struct State {
    units: BTreeMap<String, FakeUnit>,
    calls: Vec<String>,
}

/// An in-memory systemd (see the module docs).
#[derive(Debug, Default)]
pub struct FakeSystemd {
    state: Mutex<State>,
}

fn status(active: &str, sub: &str, result: &str) -> UnitStatus {
    UnitStatus { active_state: active.to_owned(), sub_state: sub.to_owned(), result: result.to_owned() }
}

fn no_such_unit(method: &'static str, unit: &str) -> SystemdError {
    SystemdError::Call { method, unit: unit.to_owned(), message: format!("{NO_SUCH_UNIT}: Unit {unit} not found.") }
}

impl FakeSystemd {
    /// No units.
    pub fn new() -> Self {
        FakeSystemd::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Adds an enabled unit file for `name`, loaded and stopped (`inactive`/`dead`), or
    /// already started when `started`.
    pub fn with_unit(self, name: &str, kind: FakeKind, started: bool) -> Self {
        let mut unit = FakeUnit { kind, status: status("inactive", "dead", "success"), enabled: true, fails: false };
        if started {
            unit.status = started_status(kind);
        }
        self.lock().units.insert(name.to_owned(), unit);
        self
    }

    /// Every later job on `name` fails (the unit ends `failed`/`failed`/`exit-code`).
    pub fn fail_jobs(&self, name: &str) {
        if let Some(u) = self.lock().units.get_mut(name) {
            u.fails = true;
        }
    }

    /// The calls so far, `"<Method> <unit>"` each, in order.
    pub fn calls(&self) -> Vec<String> {
        self.lock().calls.clone()
    }

    /// Whether `name`'s unit file is enabled (`None`: no such unit file).
    pub fn is_enabled(&self, name: &str) -> Option<bool> {
        self.lock().units.get(name).map(|u| u.enabled)
    }

    fn job(&self, method: &'static str, unit: &str, stop: bool) -> Result<(), SystemdError> {
        let mut state = self.lock();
        state.calls.push(format!("{method} {unit}"));
        let u = state.units.get_mut(unit).ok_or_else(|| no_such_unit(method, unit))?;
        if u.fails {
            u.status = status("failed", "failed", "exit-code");
            return Err(SystemdError::Call { method, unit: unit.to_owned(), message: "job failed".to_owned() });
        }
        u.status = if stop { status("inactive", "dead", "success") } else { started_status(u.kind) };
        Ok(())
    }
}

fn started_status(kind: FakeKind) -> UnitStatus {
    match kind {
        FakeKind::Timer => status("active", "waiting", "success"),
        FakeKind::Oneshot => status("inactive", "dead", "success"),
        FakeKind::Simple => status("active", "running", "success"),
    }
}

impl Systemd for FakeSystemd {
    fn start_transient_service(&self, unit: &str, _description: &str, _argv: &[String]) -> Result<(), SystemdError> {
        let mut state = self.lock();
        state.calls.push(format!("StartTransientUnit {unit}"));
        if state.units.contains_key(unit) {
            return Err(SystemdError::Call {
                method: "StartTransientUnit",
                unit: unit.to_owned(),
                message: format!("org.freedesktop.systemd1.UnitExists: Unit {unit} was already loaded or has a fragment file."),
            });
        }
        let unit_state = FakeUnit { kind: FakeKind::Oneshot, status: status("active", "exited", "success"), enabled: false, fails: false };
        state.units.insert(unit.to_owned(), unit_state);
        Ok(())
    }

    fn unit_status(&self, unit: &str) -> Result<Option<UnitStatus>, SystemdError> {
        Ok(self.lock().units.get(unit).map(|u| u.status.clone()))
    }

    fn wait_finished(&self, unit: &str, _timeout: Duration) -> Result<UnitStatus, SystemdError> {
        self.unit_status(unit)?.ok_or_else(|| no_such_unit("GetUnit", unit))
    }

    fn failed_units(&self) -> Result<Vec<String>, SystemdError> {
        Ok(self.lock().units.iter().filter(|(_, u)| u.status.active_state == "failed").map(|(n, _)| n.clone()).collect())
    }

    fn restart_unit(&self, unit: &str) -> Result<(), SystemdError> {
        self.job("RestartUnit", unit, false)
    }

    fn start_unit(&self, unit: &str) -> Result<(), SystemdError> {
        self.job("StartUnit", unit, false)
    }

    fn stop_unit(&self, unit: &str) -> Result<(), SystemdError> {
        self.job("StopUnit", unit, true)
    }

    fn disable_unit_files(&self, units: &[&str]) -> Result<Vec<String>, SystemdError> {
        let mut state = self.lock();
        state.calls.push(format!("DisableUnitFiles {}", units.join(" ")));
        if let Some(missing) = units.iter().find(|u| !state.units.contains_key(**u)) {
            return Err(SystemdError::Call {
                method: "DisableUnitFiles",
                unit: units.join(" "),
                message: format!("{NO_SUCH_UNIT}: Unit file {missing} does not exist."),
            });
        }
        let mut changes = Vec::new();
        for name in units {
            let u = state.units.get_mut(*name).expect("checked above");
            if u.enabled {
                u.enabled = false;
                let wants = if u.kind == FakeKind::Timer { "timers.target.wants" } else { "multi-user.target.wants" };
                changes.push(format!("unlink /etc/systemd/system/{wants}/{name}"));
            }
        }
        state.calls.push("Reload".to_owned());
        Ok(changes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_move_states_and_unknown_units_are_no_such_unit() {
        let sd = FakeSystemd::new().with_unit("t.timer", FakeKind::Timer, false).with_unit("s.service", FakeKind::Oneshot, false);
        sd.restart_unit("t.timer").expect("restart");
        assert!(sd.unit_status("t.timer").expect("status").expect("known").is_active());
        sd.start_unit("s.service").expect("start");
        assert!(sd.unit_status("s.service").expect("status").expect("known").succeeded());
        match sd.start_unit("nope.service") {
            Err(SystemdError::Call { message, .. }) => assert!(message.starts_with(NO_SUCH_UNIT), "{message}"),
            other => panic!("expected NoSuchUnit, got {other:?}"),
        }
        sd.fail_jobs("s.service");
        assert!(sd.start_unit("s.service").is_err());
        assert_eq!(sd.failed_units().expect("failed"), vec!["s.service".to_owned()]);
        assert_eq!(sd.disable_unit_files(&["t.timer"]).expect("disable"), vec!["unlink /etc/systemd/system/timers.target.wants/t.timer"]);
        assert!(sd.disable_unit_files(&["t.timer"]).expect("again").is_empty());
        assert_eq!(sd.is_enabled("t.timer"), Some(false));
    }
}
