//! `node.drain`: cordon the host locally, run the configured drain hook (e.g. stop tenant
//! workloads) and wait for it, bounded by the task's `timeout_secs`.
//!
//! Steps: `cordon`, `drain-hook`, `tenant-processes`, run by [`super::steps::execute`].
//!
//! Decisions:
//! - `cordon` writes `cordon_file` atomically (parent directories created, temporary file in
//!   the same directory, fsync, rename, fsync of the directory) with one JSON line
//!   `{"cordonedAt":"…","by":"node.drain"}`. Re-cordoning rewrites it (idempotent).
//! - `drain-hook` runs `drain_hook` (argv, no shell) with `timeout_secs` (at least 1 s) as its
//!   deadline: exit 0 is ok; a non-zero exit, a missing program or the deadline (the hook is
//!   killed) is an error quoting the tail of its stderr. No hook configured: skipped "no drain
//!   hook configured".
//! - The wait is the hook's own run: drain does **not** wait for tenant processes to
//!   disappear — a tenant still logged in would make every drain time out, and ending
//!   sessions and processes is `allocation.revoke_user`'s job. The last step
//!   (`tenant-processes`) only reports how many tenant processes remain (`ok`, with their
//!   pids in `data`), so the coordinator sees what revoke_user will have to stop.

use std::path::Path;
use std::time::Duration;

use drover_proto::report::StepResult;
use serde_json::json;

use super::TaskEnv;
use super::host_facts;
use super::steps::{self, Done, Step};
use crate::exec::{CommandSpec, ExecError};

/// What a step does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Write the cordon marker.
    Cordon,
    /// Run the hook (argv) with the task's timeout.
    Hook(Vec<String>),
    /// No hook configured.
    NoHook,
    /// Report the tenant processes left.
    ReportProcesses,
}

/// The plan for the configured hook.
pub fn plan(drain_hook: &[String]) -> Vec<Step<Action>> {
    let hook = if drain_hook.is_empty() { Action::NoHook } else { Action::Hook(drain_hook.to_vec()) };
    vec![Step::new("cordon", Action::Cordon), Step::new("drain-hook", hook), Step::new("tenant-processes", Action::ReportProcesses)]
}

/// Runs the task.
pub fn run(timeout_secs: u64, env: &TaskEnv<'_>) -> Vec<StepResult> {
    let timeout = Duration::from_secs(timeout_secs.max(1));
    steps::execute(&plan(&env.settings.drain_hook), |a| match a {
        Action::Cordon => cordon(env),
        Action::Hook(argv) => hook(argv, timeout, env),
        Action::NoHook => Done::skipped("no drain hook configured"),
        Action::ReportProcesses => report_processes(env),
    })
}

/// Writes the marker atomically (fresh temporary, no symlink followed, fsync, rename).
fn write_atomic(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    drover_fsio::write_atomic(path, contents, 0o644, drover_fsio::Mode::Replace)
}

fn cordon(env: &TaskEnv<'_>) -> Done {
    let path = &env.settings.cordon_file;
    let now = env.clock.now().to_string();
    let line = format!("{}\n", json!({ "cordonedAt": now, "by": "node.drain" }));
    match write_atomic(path, line.as_bytes()) {
        Ok(()) => Done::ok(format!("cordoned: {}", path.display()))
            .with_data(json!({ "cordonFile": path.display().to_string(), "cordonedAt": now })),
        Err(e) => Done::error(format!("cannot write {}: {e}", path.display())),
    }
}

fn hook(argv: &[String], timeout: Duration, env: &TaskEnv<'_>) -> Done {
    let args: Vec<&str> = argv[1..].iter().map(String::as_str).collect();
    let spec = CommandSpec::new(&argv[0], &args, timeout);
    match env.runner.run(&spec) {
        Ok(out) if out.success() => Done::ok(format!("{} finished", spec.display())),
        Ok(out) => {
            let how = out.code.map_or_else(|| "was killed by a signal".to_owned(), |c| format!("exited {c}"));
            Done::error(format!("drain hook {how}: {}", host_facts::tail(&out.stderr, 2000)))
                .with_data(json!({ "code": out.code, "stderrTail": host_facts::tail(&out.stderr, 2000) }))
        }
        Err(e @ ExecError::TimedOut { .. }) => Done::error(format!("drain hook timed out: {e}")),
        Err(e) => Done::error(format!("drain hook: {e}")),
    }
}

fn report_processes(env: &TaskEnv<'_>) -> Done {
    match host_facts::tenant_processes(&env.settings.proc_dir, env.settings) {
        Ok(procs) => {
            let pids: Vec<i32> = procs.iter().filter(|p| !p.zombie).map(|p| p.pid).collect();
            let msg = if pids.is_empty() {
                "no tenant processes left".to_owned()
            } else {
                format!("{} tenant process(es) left (revoke_user stops them)", pids.len())
            };
            Done::ok(msg).with_data(json!({ "tenantPids": pids }))
        }
        Err(e) => Done::error(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_hook_the_hook_step_is_planned_as_skipped() {
        assert_eq!(plan(&[])[1].action, Action::NoHook);
        assert_eq!(plan(&["/bin/true".to_owned()])[1].action, Action::Hook(vec!["/bin/true".to_owned()]));
    }
}
