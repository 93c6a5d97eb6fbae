//! From an admitted task to its result: the one place that maps a [`TaskKind`] to its module.

use std::path::Path;

use drover_proto::report::{StepOutcome, StepResult, TaskResult};
use drover_proto::task::{MaasToken, MachineToken, Task, TaskKind};
use serde_json::Value;

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

/// The MAAS token of a reseed, opened with this host's sealing key. A token that arrives in
/// the clear is refused: the coordinator seals every task secret to the host's key, so a
/// plain one means it was kept somewhere in the clear, and running it would make that normal.
fn open_token(task: &Task, token: &MachineToken, env: &TaskEnv<'_>) -> Result<MaasToken, TokenError> {
    match token {
        MachineToken::Plain(_) => Err(TokenError::Unsealed),
        MachineToken::Sealed(sealed) => {
            let bytes = crate::host_keys::open(env.state_dir, sealed, &task.task_id, &task.host_id)?;
            serde_json::from_slice(&bytes).map_err(|e| TokenError::NotAToken { kind: classify(&e), column: e.column() })
        }
    }
}

/// Why the MAAS token of a reseed cannot be used.
#[derive(Debug, thiserror::Error)]
enum TokenError {
    /// It came in the clear.
    #[error("refused: the MAAS token arrived unsealed; task secrets must be sealed to this host's key")]
    Unsealed,
    /// It could not be opened.
    #[error(transparent)]
    Open(#[from] crate::host_keys::OpenError),
    /// It opened and is not a MAAS token. The parser's own message is not kept: it may quote
    /// the secret.
    #[error("the sealed token is not a MAAS token ({kind} at column {column})")]
    NotAToken {
        /// What kind of parse error.
        kind: &'static str,
        /// Where.
        column: usize,
    },
}

fn classify(e: &serde_json::Error) -> &'static str {
    match e.classify() {
        serde_json::error::Category::Io => "I/O error",
        serde_json::error::Category::Syntax => "syntax error",
        serde_json::error::Category::Data => "wrong fields",
        serde_json::error::Category::Eof => "truncated",
    }
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
        TaskKind::ValidateClean { check_gpu, memory_used_threshold_mib } => {
            validate::run(&validate::Params { check_gpu: *check_gpu, memory_used_threshold_mib: *memory_used_threshold_mib }, env)
        }
        TaskKind::HwSyncReseed(reseed) => match open_token(task, &reseed.token, env) {
            Ok(t) => hw_sync::run(
                &hw_sync::Params {
                    maas_url: &reseed.maas_url,
                    system_id: &reseed.system_id,
                    consumer_key: &t.consumer_key,
                    token_key: &t.token_key,
                    token_secret: &t.token_secret,
                },
                env,
            ),
            Err(e) => {
                vec![StepResult {
                    name: "open sealed token".into(),
                    outcome: StepOutcome::Error,
                    message: e.to_string(),
                    data: Value::Null,
                }]
            }
        },
        TaskKind::Drain { timeout_secs } => drain::run(*timeout_secs, env),
        TaskKind::RevokeUser { users } => users::run(users.as_deref(), env),
        TaskKind::Uninstall { purge_state } => uninstall::run(*purge_state, env),
    };
    let outcome = steps::outcome(&steps);
    tracing::info!(task_id = %task.task_id, kind = task.kind.type_name(), ?outcome, "task finished");
    TaskResult { task_id: task.task_id.clone(), outcome, steps, started_at, finished_at: env.clock.now(), evidence: None }
}
