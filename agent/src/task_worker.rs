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
use tokio::sync::{Notify, oneshot};

use crate::pull::HostOps;

/// The queue and the task in progress.
#[derive(Default)]
pub struct TaskWorker {
    queue: VecDeque<Task>,
    /// The task in progress and where its result will arrive.
    running: Option<(Task, oneshot::Receiver<TaskResult>)>,
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
        let (tx, rx) = oneshot::channel();
        // The result is sent before the wake-up, so the check-in that wakes always finds it.
        tokio::task::spawn_blocking(move || {
            let _ = tx.send(host.run_task(&run));
            done.notify_one();
        });
        self.running = Some((task, rx));
    }

    /// The result of the task in progress if it has finished (then the next one starts).
    /// A task whose thread panicked is reported failed, never silently lost.
    pub fn finished(&mut self, host: &Arc<dyn HostOps>, now: drover_proto::time::Time) -> Option<(Task, TaskResult)> {
        let (task, rx) = self.running.as_mut()?;
        let result = match rx.try_recv() {
            Ok(r) => r,
            Err(oneshot::error::TryRecvError::Empty) => return None,
            Err(oneshot::error::TryRecvError::Closed) => {
                tracing::error!(task_id = %task.task_id, "task thread ended without a result");
                crashed(task, "the task's thread ended without a result (it panicked)", now)
            }
        };
        let (task, _) = self.running.take()?;
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
        evidence: None,
    }
}
