//! Results of tasks already run, kept after the coordinator acknowledged them
//! (`results.json` in the state directory: the last [`MAX_RECORDED_RESULTS`], written
//! atomically like every record), so that a task handed out again is answered, not refused.
//!
//! Why: a coordinator restored from a backup taken before a task's result arrived holds the
//! task queued or leased and hands it out again. The journal ([`crate::records::Journal`])
//! makes sure it never runs twice — but a refusal leaves the coordinator, and the job waiting
//! on the task (a MAAS onboarding, a decommission stage), waiting for ever. So a task whose id
//! the journal holds is answered with the result recorded when it ran: the same
//! [`TaskResult`], its evidence included, goes with the next check-in as a fresh result
//! would, and the coordinator completes the task.
//!
//! What is answered, and what stays refused:
//!
//! - only a task that verified again exactly as a new one would (director signature, this
//!   host's id, its validity window: [`crate::admit::admit_task`]); a task whose signature no
//!   longer verifies, or that expired, is refused before its id is even looked up;
//! - only with the result recorded under that task id, by this host (the coordinator checks
//!   the result against the host and task as it checks any, evidence included);
//! - a task still running has no result yet: it is refused as a replay, as before (its result
//!   follows when it finishes); one whose result was not acknowledged yet needs no answer (it
//!   goes with the next check-in anyway); one whose result is older than the window, or whose
//!   journal entry is gone, is refused as a replay, as before. Nothing here ever runs a task.
//!
//! Not in `journal.json`: the journal is read on every check-in and stays small; this file
//! is read only when results are acknowledged and when a taken task comes back. A file that
//! does not parse is replaced, with a warning: losing it costs the answers (those tasks are
//! refused, as before), never a second run.

use drover_proto::report::{ReportEvent, TaskResult};
use drover_proto::task::Task;
use serde::{Deserialize, Serialize};

use crate::records::{Journal, Records};
use crate::state::{StateDir, StateError};

/// `results.json`.
pub const RESULTS: &str = "results.json";

/// How many acknowledged results are kept (the oldest acknowledged go first). A result is a
/// few KiB at most (its steps, perhaps a signed statement), so the file stays under a MiB.
pub const MAX_RECORDED_RESULTS: usize = 256;

/// `results.json`: results the coordinator acknowledged, oldest acknowledged first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Recorded {
    /// The results, each task id once.
    pub results: Vec<TaskResult>,
}

impl Recorded {
    /// The result recorded for `task_id`.
    pub fn get(&self, task_id: &str) -> Option<&TaskResult> {
        self.results.iter().find(|r| r.task_id == task_id)
    }

    /// Adds `acknowledged` (a result already kept moves to the newest end), keeps only task
    /// ids `journal` still holds (an entry pruned has expired: its task is refused anyway),
    /// and drops the oldest beyond [`MAX_RECORDED_RESULTS`].
    pub fn keep(&mut self, acknowledged: &[TaskResult], journal: &Journal) {
        for r in acknowledged {
            self.results.retain(|k| k.task_id != r.task_id);
            self.results.push(r.clone());
        }
        self.results.retain(|k| journal.contains(&k.task_id));
        let excess = self.results.len().saturating_sub(MAX_RECORDED_RESULTS);
        self.results.drain(..excess);
    }
}

/// `results.json`, or empty when it is absent — or does not parse (logged).
pub fn read(state: &StateDir) -> Result<Recorded, StateError> {
    match state.read_json::<Recorded>(RESULTS) {
        Ok(recorded) => Ok(recorded.unwrap_or_default()),
        Err(StateError::Corrupt { file, message }) => {
            tracing::warn!(file = %file.display(), error = %message, "recorded task results unreadable; starting afresh (tasks handed out again are refused, not answered)");
            Ok(Recorded::default())
        }
        Err(e) => Err(e),
    }
}

/// Records `acknowledged` (results a check-in just delivered) for answering their tasks
/// again; see [`Recorded::keep`]. Call it before the journal that drops them is written: a
/// crash in between leaves a result in both, sent once more (the coordinator takes the same
/// result twice as one), never in neither.
pub fn keep(state: &StateDir, acknowledged: &[TaskResult], journal: &Journal) -> Result<(), StateError> {
    if acknowledged.is_empty() {
        return Ok(());
    }
    let mut recorded = read(state)?;
    recorded.keep(acknowledged, journal);
    state.write_json(RESULTS, &recorded)
}

/// The refusal of a task whose id was taken before and that is not answered.
pub fn replayed(task_id: &str) -> ReportEvent {
    ReportEvent::TaskRefused { task_id: task_id.to_owned(), reason: "Replayed: this task id was already taken".to_owned() }
}

/// A task that verified again and whose id `journal` holds (see the module doc): `None` when
/// it is answered — its recorded result is put back in the journal as unacknowledged, so the
/// next check-in carries it, and the journal written — or already on its way; else the
/// refusal to report.
pub fn answer_again(state: &StateDir, journal: &mut Journal, task: &Task) -> Result<Option<ReportEvent>, StateError> {
    let Some(entry) = journal.tasks.get(&task.task_id) else { return Ok(Some(replayed(&task.task_id))) };
    if entry.running {
        return Ok(Some(replayed(&task.task_id)));
    }
    if entry.unacknowledged.is_some() {
        tracing::debug!(task_id = %task.task_id, "task handed out again; its result goes with the next check-in");
        return Ok(None);
    }
    let recorded = read(state)?;
    let Some(result) = recorded.get(&task.task_id).filter(|r| r.task_id == task.task_id) else {
        return Ok(Some(replayed(&task.task_id)));
    };
    if let Some(entry) = journal.tasks.get_mut(&task.task_id) {
        entry.unacknowledged = Some(result.clone());
    }
    state.put_journal(journal)?;
    tracing::info!(
        task_id = %task.task_id,
        kind = task.kind.type_name(),
        outcome = ?result.outcome,
        "task handed out again (the coordinator lost its result?): answered with the result recorded when it ran; not run again"
    );
    Ok(None)
}

#[cfg(test)]
mod tests {
    use drover_proto::report::TaskOutcome;
    use drover_proto::task::TaskKind;
    use drover_proto::time::Time;

    use super::*;
    use crate::records::JournalEntry;

    fn t(secs: i64) -> Time {
        Time::from_unix(1_800_000_000 + secs).expect("time")
    }

    fn result(id: &str) -> TaskResult {
        TaskResult {
            task_id: id.into(),
            outcome: TaskOutcome::Succeeded,
            steps: Vec::new(),
            started_at: t(0),
            finished_at: t(1),
            evidence: None,
        }
    }

    fn task(id: &str) -> Task {
        Task {
            task_id: id.into(),
            host_id: "h".into(),
            job_id: None,
            issued_at: t(0),
            expires_at: t(600),
            kind: TaskKind::Drain { timeout_secs: 5 },
        }
    }

    fn taken(ids: &[&str]) -> Journal {
        let mut j = Journal::default();
        for id in ids {
            j.tasks.insert((*id).into(), JournalEntry { expires_at: t(600), unacknowledged: None, running: false });
        }
        j
    }

    fn state() -> (tempfile::TempDir, StateDir) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let state = StateDir::open(&tmp.path().join("state")).expect("open");
        (tmp, state)
    }

    #[test]
    fn the_window_keeps_the_newest_results_and_only_tasks_the_journal_holds() {
        let ids: Vec<String> = (0..MAX_RECORDED_RESULTS + 10).map(|i| format!("task-{i:04}")).collect();
        let mut journal = taken(&ids.iter().map(String::as_str).collect::<Vec<_>>());
        let mut r = Recorded::default();
        for id in &ids {
            r.keep(&[result(id)], &journal);
        }
        assert_eq!(r.results.len(), MAX_RECORDED_RESULTS);
        assert!(r.get("task-0000").is_none() && r.get(&ids[ids.len() - 1]).is_some(), "the oldest acknowledged go first");
        // A result acknowledged again moves to the newest end; a pruned journal entry takes
        // its result with it.
        r.keep(&[result("task-0010")], &journal);
        assert_eq!(r.results.last().map(|k| k.task_id.as_str()), Some("task-0010"));
        assert_eq!(r.results.iter().filter(|k| k.task_id == "task-0010").count(), 1);
        journal.tasks.remove("task-0011");
        r.keep(&[], &journal);
        assert!(r.get("task-0011").is_none());
    }

    #[test]
    fn a_task_already_run_is_answered_from_its_record_and_others_stay_refused() {
        let (_tmp, s) = state();
        let mut journal = taken(&["done", "old"]);
        journal.tasks.insert("running".into(), JournalEntry { expires_at: t(600), unacknowledged: None, running: true });
        keep(&s, &[result("done")], &journal).expect("keep");
        s.put_journal(&journal).expect("journal");

        assert_eq!(answer_again(&s, &mut journal, &task("done")).expect("answer"), None);
        assert_eq!(journal.unacknowledged(), [result("done")], "the recorded result goes with the next check-in");
        assert_eq!(s.journal().expect("journal").unacknowledged(), [result("done")], "and is durable");
        // Handed out once more before that check-in: nothing more to do.
        assert_eq!(answer_again(&s, &mut journal, &task("done")).expect("answer"), None);

        for id in ["old", "running", "never-taken"] {
            assert_eq!(answer_again(&s, &mut journal, &task(id)).expect("answer"), Some(replayed(id)), "{id}");
        }
    }

    #[test]
    fn an_unreadable_results_file_costs_the_answers_not_the_agent() {
        let (_tmp, s) = state();
        std::fs::write(s.file(RESULTS), b"{\"results\":[").expect("write");
        let journal = taken(&["a"]);
        assert_eq!(read(&s).expect("read"), Recorded::default());
        keep(&s, &[result("a")], &journal).expect("replaced");
        assert_eq!(read(&s).expect("read").get("a"), Some(&result("a")));
    }
}
