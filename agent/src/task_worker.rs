//! Runs admitted tasks one at a time, beside the pull loop, so a long task (a drain waiting
//! for tenant workloads, a GPU reset) never stops check-ins: the host keeps reporting health
//! and stays online while it works.
//!
//! Durability (the journal, `records.rs`): a task is journaled as `running` when it is
//! admitted — before it is queued — so a crash can never make it run twice; its result
//! replaces the `running` mark when it finishes; results leave the journal only after a
//! check-in that carried them succeeded. An entry still `running` when the agent starts was
//! interrupted and is reported failed, not run again.

use std::collections::VecDeque;
use std::sync::Arc;

use drover_proto::report::{TaskOutcome, TaskResult};
use drover_proto::task::{Task, TaskKind};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::pull::HostOps;

/// The queue and the task in progress.
#[derive(Default)]
pub struct TaskWorker {
    queue: VecDeque<Task>,
    running: Option<(Task, JoinHandle<TaskResult>)>,
    done: Arc<Notify>,
}

impl TaskWorker {
    /// Notified whenever a task finishes (the pull loop checks in at once to report it).
    pub fn done(&self) -> Arc<Notify> {
        self.done.clone()
    }

    /// Queues an admitted (and already journaled) task and starts it if nothing runs.
    pub fn push(&mut self, task: Task, host: &Arc<dyn HostOps>) {
        self.queue.push_back(task);
        self.start_next(host);
    }

    /// Whether a task is queued or running.
    pub fn busy(&self) -> bool {
        self.running.is_some() || !self.queue.is_empty()
    }

    fn start_next(&mut self, host: &Arc<dyn HostOps>) {
        if self.running.is_some() {
            return;
        }
        let Some(task) = self.queue.pop_front() else { return };
        let host = host.clone();
        let done = self.done.clone();
        let run = task.clone();
        let handle = tokio::task::spawn_blocking(move || {
            let result = host.run_task(&run);
            done.notify_one();
            result
        });
        self.running = Some((task, handle));
    }

    /// The result of the task in progress if it has finished (then the next one starts).
    /// A task whose thread panicked is reported failed, never silently lost.
    pub async fn finished(&mut self, host: &Arc<dyn HostOps>, now: drover_proto::time::Time) -> Option<(Task, TaskResult)> {
        if !self.running.as_ref().is_some_and(|(_, h)| h.is_finished()) {
            return None;
        }
        let (task, handle) = self.running.take()?;
        let result = match handle.await {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(task_id = %task.task_id, error = %e, "task thread failed");
                crashed(&task, &e.to_string(), now)
            }
        };
        self.start_next(host);
        Some((task, result))
    }
}

/// Whether `result` is a successful `node.uninstall`: after it is reported, the agent stops.
pub fn is_completed_uninstall(task: &Task, result: &TaskResult) -> bool {
    matches!(task.kind, TaskKind::Uninstall { .. }) && result.outcome == TaskOutcome::Succeeded
}

fn crashed(task: &Task, why: &str, now: drover_proto::time::Time) -> TaskResult {
    TaskResult {
        task_id: task.task_id.clone(),
        outcome: TaskOutcome::Failed,
        steps: vec![drover_proto::report::StepResult {
            name: task.kind.type_name().to_owned(),
            outcome: drover_proto::report::StepOutcome::Error,
            message: format!("the task's thread failed: {why}"),
            data: serde_json::Value::Null,
        }],
        started_at: now,
        finished_at: now,
    }
}
