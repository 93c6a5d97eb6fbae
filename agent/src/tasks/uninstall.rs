//! `node.uninstall`: the agent removes itself at the end of a full decommission — stop and
//! disable its own unit, remove its secrets, report, exit.
//!
//! **The hand-off.** The task's result must still reach the coordinator after the key is
//! gone, and stopping the agent's own unit kills the agent. So the work is split in two:
//!
//! 1. [`run`] (the task, through [`super::run_task`]) does everything but the stop:
//!    - `disable-unit <agent_unit>`: `DisableUnitFiles([agent_unit], runtime=false)` then
//!      `Reload` — nothing starts the agent again at boot (no unit file: skipped);
//!    - `remove <path>` for each of `[tasks].uninstall_paths` (the unit file, the binary, the
//!      config; a missing one is skipped; a symlink is removed itself, never followed);
//!    - `remove-secret <state_dir>/<file>` for the key, the certificate and the identity
//!      ([`crate::state::KEY`], [`crate::state::CERT`], [`crate::state::IDENTITY`]), or,
//!      with `purge_state`, `purge-state <state_dir>`: the whole state dir (journal and
//!      caches included);
//!    - `stop-unit <agent_unit>`, always reported **skipped** ("deferred"): it is [`finish`]'s.
//!
//!    The running agent is unaffected: its HTTP client holds the identity (key and
//!    certificate) in memory, so it can still report.
//! 2. The pull loop reports the result as usual; **once the coordinator acknowledged it**, it
//!    calls [`finish`], which stops the agent's unit (`StopUnit`, mode `replace`): systemd
//!    then sends SIGTERM to the agent, and the call normally never returns. If [`finish`]
//!    returns an error (no such unit: the agent does not run under systemd; the bus is
//!    down), or returns at all, the pull loop stops and the process exits (with the unit
//!    disabled, nothing starts it again). If the task failed, the pull loop must not call
//!    [`finish`]: the agent keeps running so the coordinator can retry.
//!
//! With `purge_state` the pull loop must not expect its state dir (task journal, records)
//! to be writable after the task; without it, only the three identity files are gone.

use std::path::{Component, Path, PathBuf};

use drover_proto::report::StepResult;
use serde_json::json;

use super::TaskEnv;
use super::steps::{self, Done, Step};
use crate::state;
use crate::systemd::SystemdError;
use crate::systemd::dbus::NO_SUCH_UNIT;

/// One planned step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Disable the agent's unit file.
    DisableUnit(String),
    /// Remove one of `uninstall_paths`.
    Remove(PathBuf),
    /// Remove one identity file from the state dir.
    RemoveSecret(PathBuf),
    /// Remove the whole state dir.
    PurgeState(PathBuf),
    /// The stop, deferred to [`finish`].
    DeferredStop(String),
}

/// The identity files removed from the state dir (without `purge_state`).
pub const SECRET_FILES: [&str; 3] = [state::KEY, state::CERT, state::IDENTITY];

/// The plan (pure).
pub fn plan(purge_state: bool, settings: &super::TaskSettings, state_dir: &Path) -> Vec<Step<Action>> {
    let unit = &settings.agent_unit;
    let mut plan = vec![Step::new(format!("disable-unit {unit}"), Action::DisableUnit(unit.clone()))];
    for p in &settings.uninstall_paths {
        plan.push(Step::new(format!("remove {}", p.display()), Action::Remove(p.clone())));
    }
    if purge_state {
        plan.push(Step::new(format!("purge-state {}", state_dir.display()), Action::PurgeState(state_dir.to_path_buf())));
    } else {
        for f in SECRET_FILES {
            let p = state_dir.join(f);
            plan.push(Step::new(format!("remove-secret {}", p.display()), Action::RemoveSecret(p)));
        }
    }
    plan.push(Step::new(format!("stop-unit {unit}"), Action::DeferredStop(unit.clone())));
    plan
}

/// Runs the task: everything but the stop (see the module docs).
pub fn run(purge_state: bool, env: &TaskEnv<'_>) -> Vec<StepResult> {
    let plan = plan(purge_state, env.settings, env.state_dir);
    steps::execute(&plan, |action| run_step(action, env))
}

/// Stops the agent's own unit: call it once the coordinator acknowledged the uninstall's
/// (successful) result. Normally the agent is killed during the call; on an error (or if it
/// returns at all) the caller exits the process.
pub fn finish(env: &TaskEnv<'_>) -> Result<(), SystemdError> {
    let unit = &env.settings.agent_unit;
    tracing::info!(unit = %unit, "uninstall: stopping the agent's unit");
    env.systemd.stop_unit(unit)
}

/// A path `uninstall` may remove: absolute, not `/`, no `..`.
fn removable(p: &Path) -> bool {
    p.is_absolute() && p.parent().is_some() && !p.components().any(|c| matches!(c, Component::ParentDir))
}

fn is_no_such_unit(e: &SystemdError) -> bool {
    matches!(e, SystemdError::Call { message, .. } if message.starts_with(NO_SUCH_UNIT))
}

/// Removes `p` (a file or symlink itself, or a directory tree without following symlinks).
fn remove(p: &Path) -> Done {
    if !removable(p) {
        return Done::error(format!("refusing to remove {}: not an absolute path below / without `..`", p.display()));
    }
    let meta = match std::fs::symlink_metadata(p) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Done::skipped(format!("{} is already gone", p.display())),
        Err(e) => return Done::error(format!("{}: {e}", p.display())),
    };
    let removed = if meta.is_dir() { std::fs::remove_dir_all(p) } else { std::fs::remove_file(p) };
    match removed {
        Ok(()) => Done::ok(format!("removed {}", p.display())).with_data(json!({ "path": p.display().to_string() })),
        Err(e) => Done::error(format!("cannot remove {}: {e}", p.display())),
    }
}

fn run_step(action: &Action, env: &TaskEnv<'_>) -> Done {
    match action {
        Action::DisableUnit(unit) => match env.systemd.disable_unit_files(&[unit.as_str()]) {
            Ok(changes) if changes.is_empty() => Done::skipped(format!("{unit} was not enabled")),
            Ok(changes) => Done::ok(format!("{unit} disabled")).with_data(json!({ "changes": changes })),
            Err(e) if is_no_such_unit(&e) => Done::skipped(format!("{unit} has no unit file")),
            Err(e) => Done::error(e.to_string()),
        },
        Action::Remove(p) | Action::RemoveSecret(p) | Action::PurgeState(p) => remove(p),
        Action::DeferredStop(unit) => {
            Done::skipped(format!("deferred: the agent stops {unit} once the coordinator acknowledged this result"))
        }
    }
}

#[cfg(test)]
mod tests {
    use drover_proto::report::StepOutcome;

    use super::*;
    use crate::exec::SystemRunner;
    use crate::systemd::Systemd;
    use crate::systemd::fake::{FakeKind, FakeSystemd};
    use crate::tasks::TaskSettings;
    use crate::timekeeping::SystemClock;

    #[test]
    fn the_plan_disables_removes_and_defers_the_stop() {
        let s = TaskSettings::default();
        let names: Vec<String> = plan(false, &s, Path::new("/var/lib/drover")).into_iter().map(|s| s.name).collect();
        assert_eq!(
            names,
            [
                "disable-unit drover-agent.service",
                "remove /etc/systemd/system/drover-agent.service",
                "remove /usr/local/bin/drover-agent",
                "remove /etc/drover/agent.toml",
                "remove-secret /var/lib/drover/key.pem",
                "remove-secret /var/lib/drover/cert.pem",
                "remove-secret /var/lib/drover/identity.json",
                "stop-unit drover-agent.service",
            ]
        );
        let purge: Vec<String> = plan(true, &s, Path::new("/var/lib/drover")).into_iter().map(|s| s.name).collect();
        assert_eq!(purge[4..], ["purge-state /var/lib/drover", "stop-unit drover-agent.service"]);
    }

    fn setup(dir: &Path) -> (TaskSettings, PathBuf) {
        let files = ["unit", "bin", "agent.toml"].map(|f| dir.join("root").join(f));
        std::fs::create_dir_all(dir.join("root")).expect("mkdir");
        for f in &files[..2] {
            std::fs::write(f, "x").expect("write");
        }
        let state_dir = dir.join("state");
        std::fs::create_dir_all(&state_dir).expect("mkdir");
        for f in SECRET_FILES.iter().chain(&["journal.json"]) {
            std::fs::write(state_dir.join(f), "x").expect("write");
        }
        (TaskSettings { uninstall_paths: files.to_vec(), ..TaskSettings::default() }, state_dir)
    }

    fn env<'a>(settings: &'a TaskSettings, sd: &'a dyn Systemd, state: &'a Path) -> TaskEnv<'a> {
        TaskEnv { settings, runner: &SystemRunner, systemd: sd, clock: &SystemClock, state_dir: state }
    }

    #[test]
    fn uninstall_disables_removes_and_leaves_the_stop_to_finish() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (s, state_dir) = setup(dir.path());
        let sd = FakeSystemd::new().with_unit("drover-agent.service", FakeKind::Simple, true);
        let e = env(&s, &sd, &state_dir);
        let steps = run(false, &e);
        let outcomes: Vec<StepOutcome> = steps.iter().map(|s| s.outcome).collect();
        use StepOutcome::{Ok, Skipped};
        assert_eq!(outcomes, [Ok, Ok, Ok, Skipped, Ok, Ok, Ok, Skipped], "{steps:#?}");
        assert_eq!(sd.is_enabled("drover-agent.service"), Some(false));
        assert!(s.uninstall_paths.iter().all(|p| !p.exists()));
        assert!(SECRET_FILES.iter().all(|f| !state_dir.join(f).exists()));
        assert!(state_dir.join("journal.json").exists(), "without purge_state the rest of the state stays");
        // The agent's unit still runs: the result can be reported.
        assert!(sd.unit_status("drover-agent.service").expect("status").expect("known").is_running());
        assert_eq!(sd.calls(), ["DisableUnitFiles drover-agent.service", "Reload"]);
        finish(&e).expect("stop");
        assert_eq!(sd.unit_status("drover-agent.service").expect("status").expect("known").active_state, "inactive");
        // Idempotent: a second run skips what is gone.
        let again = run(false, &e);
        assert!(again.iter().all(|s| s.outcome == Skipped), "{again:#?}");
    }

    #[test]
    fn purge_state_removes_the_state_dir_and_finish_reports_a_missing_unit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (s, state_dir) = setup(dir.path());
        let sd = FakeSystemd::new();
        let e = env(&s, &sd, &state_dir);
        let steps = run(true, &e);
        assert_eq!(steps[0].outcome, StepOutcome::Skipped, "no unit file: {steps:#?}");
        assert!(steps.iter().all(|s| s.outcome != StepOutcome::Error));
        assert!(!state_dir.exists());
        let err = finish(&e).expect_err("no such unit").to_string();
        assert!(err.contains("NoSuchUnit"), "{err}");
    }

    #[test]
    fn a_failed_disable_stops_before_anything_is_removed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (s, state_dir) = setup(dir.path());
        // A double without DisableUnitFiles: the call fails.
        struct Down;
        impl Systemd for Down {
            fn start_transient_service(&self, _: &str, _: &str, _: &[String]) -> Result<(), SystemdError> {
                unreachable!()
            }
            fn unit_status(&self, _: &str) -> Result<Option<crate::systemd::UnitStatus>, SystemdError> {
                unreachable!()
            }
            fn wait_finished(&self, _: &str, _: std::time::Duration) -> Result<crate::systemd::UnitStatus, SystemdError> {
                unreachable!()
            }
            fn failed_units(&self) -> Result<Vec<String>, SystemdError> {
                unreachable!()
            }
            fn restart_unit(&self, _: &str) -> Result<(), SystemdError> {
                unreachable!()
            }
        }
        let steps = run(false, &env(&s, &Down, &state_dir));
        assert_eq!(steps[0].outcome, StepOutcome::Error);
        assert!(steps[1..].iter().all(|s| s.outcome == StepOutcome::Skipped));
        assert!(state_dir.join(state::KEY).exists() && s.uninstall_paths[0].exists());
    }

    #[test]
    fn relative_or_root_paths_are_refused() {
        for p in ["relative", "/", "/etc/../etc/passwd"] {
            assert_eq!(remove(Path::new(p)).outcome, StepOutcome::Error, "{p}");
        }
    }
}
