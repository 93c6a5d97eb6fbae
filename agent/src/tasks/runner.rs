//! From an admitted task to its result: the one place that maps a [`TaskKind`] to its module.

use std::path::Path;

use drover_proto::report::TaskResult;
use drover_proto::task::{Task, TaskKind};

use super::steps;
use super::{TaskSettings, drain, gpu_scrub, hw_sync, storage, uninstall, users, validate};
use crate::exec::CommandRunner;
use crate::systemd::Systemd;
use crate::timekeeping::Clock;

/// What a task may use: the settings, and the machine only through these traits.
pub struct TaskEnv<'a> {
    /// `[tasks]`.
    pub settings: &'a TaskSettings,
    /// Runs external tools (`nvidia-smi`, `userdel`, the drain hook, …).
    pub runner: &'a dyn CommandRunner,
    /// systemd over D-Bus.
    pub systemd: &'a dyn Systemd,
    /// Time (and waiting, for bounded waits).
    pub clock: &'a dyn Clock,
    /// The agent's state dir (`node.uninstall` removes it).
    pub state_dir: &'a Path,
}

/// Runs `task` and reports every step. Never panics on bad input: a task whose facts cannot
/// be read fails with a step saying why.
pub fn run_task(task: &Task, env: &TaskEnv<'_>) -> TaskResult {
    let started_at = env.clock.now();
    tracing::info!(task_id = %task.task_id, kind = task.kind.type_name(), "task started");
    let steps = match &task.kind {
        TaskKind::GpuScrub { vendor, compute_processes, memory_used_threshold_mib, dcgm_diag_level } => gpu_scrub::run(
            &gpu_scrub::Params {
                vendor: *vendor,
                policy: *compute_processes,
                memory_used_threshold_mib: *memory_used_threshold_mib,
                dcgm_diag_level: *dcgm_diag_level,
            },
            env,
        ),
        TaskKind::StorageCleanup { scope } => storage::run(*scope, env),
        TaskKind::ValidateClean { check_gpu } => validate::run(*check_gpu, env),
        TaskKind::HwSyncReseed { maas_url, system_id, consumer_key, token_key, token_secret } => {
            hw_sync::run(&hw_sync::Params { maas_url, system_id, consumer_key, token_key, token_secret }, env)
        }
        TaskKind::Drain { timeout_secs } => drain::run(*timeout_secs, env),
        TaskKind::RevokeUser { users } => users::run(users.as_deref(), env),
        TaskKind::Uninstall { purge_state } => uninstall::run(*purge_state, env),
    };
    let outcome = steps::outcome(&steps);
    tracing::info!(task_id = %task.task_id, kind = task.kind.type_name(), ?outcome, "task finished");
    TaskResult { task_id: task.task_id.clone(), outcome, steps, started_at, finished_at: env.clock.now() }
}
