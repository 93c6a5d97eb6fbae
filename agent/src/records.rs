//! The agent's durable records beyond enrollment, each one file in the state directory written
//! atomically ([`StateDir::write_atomic`]: write, fsync, rename, fsync the directory), so a
//! crash at any instant leaves the previous record or the next one, never a torn one:
//!
//! | file | what |
//! |---|---|
//! | `seen.json` | the highest timestamp version accepted, the latest time seen, the intent last handled |
//! | `manifest-<rolloutId>.json` | a verified manifest's bytes, signature and sha256, by rollout id |
//! | `journal.json` | task ids already taken (with their expiry) and results not yet acknowledged |
//! | `results.json` | the last results acknowledged, to answer a task handed out again ([`crate::recorded`]) |
//!
//! The pending activation (`activation.json`) belongs to [`crate::activation`].
//!
//! A record that is missing reads as empty (a fresh enrollment); one that does not parse is
//! an error naming the file — the agent stops rather than forget a version floor or a replay
//! journal, since forgetting either would re-open the attacks they close.

use std::collections::BTreeMap;
use std::path::PathBuf;

use drover_proto::names::RolloutId;
use drover_proto::report::TaskResult;
use drover_proto::time::Time;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::state::{PRIVATE_MODE, StateDir, StateError};

/// `seen.json`.
pub const SEEN: &str = "seen.json";
/// `journal.json`.
pub const JOURNAL: &str = "journal.json";
/// Prefix of cached root files (`docs/manifest-proofs.md`).
pub const ROOT_PREFIX: &str = "root-";
/// Most roots kept in the cache; the oldest beyond this are dropped.
pub const MAX_CACHED_ROOTS: usize = 8;

/// What the agent has accepted so far: the floors that make rollback and replay visible.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Seen {
    /// The highest `timestamp.json` version accepted (0: none yet).
    pub highest_timestamp_version: u64,
    /// The latest wall-clock time the agent has seen (to notice the clock stepping back).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_time: Option<Time>,
    /// The intent last handled (acted on or refused), sent as `knownIntentId`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_intent_id: Option<String>,
    /// The intent last admitted and handed to the activation backend: never acted on twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acted_intent_id: Option<String>,
    /// The `timestamp.json` (with its signature) of `highest_timestamp_version`, as verified:
    /// what the agent shows a coordinator that serves an older release (restored from an
    /// older backup), which only CI's signature makes it believe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub highest_release: Option<drover_proto::report::ReleaseSeen>,
}

/// A verified signed root as cached: the exact bytes CI signed, with their signature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CachedRoot {
    /// The rollout.
    pub rollout_id: RolloutId,
    /// sha256 (hex) of `root`.
    pub sha256: String,
    /// The root's bytes (UTF-8 JSON).
    pub root: String,
    /// Its `.sig` file's bytes.
    pub root_sig: String,
}

/// One task id the agent has taken.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JournalEntry {
    /// The task's `expiresAt`: after it, the entry may go (an expired task is refused anyway).
    pub expires_at: Time,
    /// Its result, until the coordinator has acknowledged it (a check-in that carried it
    /// succeeded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unacknowledged: Option<TaskResult>,
    /// Taken and not finished: queued or running. An entry still running when the agent
    /// starts was interrupted by a crash or a kill ([`Journal::interrupted`]); it is never run
    /// again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub running: bool,
}

/// `journal.json`: every task id taken, so a replayed task is refused.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Journal {
    /// By task id.
    pub tasks: BTreeMap<String, JournalEntry>,
}

impl Journal {
    /// Whether `task_id` was taken before.
    pub fn contains(&self, task_id: &str) -> bool {
        self.tasks.contains_key(task_id)
    }

    /// Results the coordinator has not acknowledged yet, oldest id first.
    pub fn unacknowledged(&self) -> Vec<TaskResult> {
        self.tasks.values().filter_map(|e| e.unacknowledged.clone()).collect()
    }

    /// Marks every result in `sent` acknowledged.
    pub fn acknowledge(&mut self, sent: &[TaskResult]) {
        for r in sent {
            if let Some(e) = self.tasks.get_mut(&r.task_id) {
                e.unacknowledged = None;
            }
        }
    }

    /// Turns every entry left running by a previous process into a failed result saying so:
    /// the task may have done part of its work, and running it again could do harm (a second
    /// GPU reset, a second cleanup racing a new tenant). Returns how many.
    pub fn interrupted(&mut self, now: Time) -> usize {
        let mut n = 0;
        for (id, e) in self.tasks.iter_mut().filter(|(_, e)| e.running) {
            e.running = false;
            e.unacknowledged = Some(TaskResult {
                task_id: id.clone(),
                outcome: drover_proto::report::TaskOutcome::Failed,
                steps: vec![drover_proto::report::StepResult {
                    name: "interrupted".to_owned(),
                    outcome: drover_proto::report::StepOutcome::Error,
                    message: "the agent stopped while this task was queued or running; it is not run again (its effects are unknown)"
                        .to_owned(),
                    data: serde_json::Value::Null,
                }],
                started_at: now,
                finished_at: now,
                evidence: None,
            });
            n += 1;
        }
        n
    }

    /// Records a finished task's result.
    pub fn finish(&mut self, result: TaskResult) {
        if let Some(e) = self.tasks.get_mut(&result.task_id) {
            e.running = false;
            e.unacknowledged = Some(result);
        }
    }

    /// Drops entries expired before `now - grace_secs` whose results were acknowledged.
    pub fn prune(&mut self, now: Time, grace_secs: u64) {
        self.tasks.retain(|_, e| {
            e.running || e.unacknowledged.is_some() || now.secs_since(e.expires_at) <= i64::try_from(grace_secs).unwrap_or(i64::MAX)
        });
    }
}

/// Reading and writing the records.
pub trait Records {
    /// `seen.json`, or the default when absent.
    fn seen(&self) -> Result<Seen, StateError>;
    /// Replaces `seen.json`.
    fn put_seen(&self, seen: &Seen) -> Result<(), StateError>;
    /// The cached signed root of `id`, if any.
    fn cached_root(&self, id: &RolloutId) -> Result<Option<CachedRoot>, StateError>;
    /// Caches a verified root (and drops the oldest beyond [`MAX_CACHED_ROOTS`]).
    fn put_root(&self, m: &CachedRoot) -> Result<(), StateError>;
    /// `journal.json`, or an empty journal when absent.
    fn journal(&self) -> Result<Journal, StateError>;
    /// Replaces `journal.json`.
    fn put_journal(&self, journal: &Journal) -> Result<(), StateError>;
}

fn root_file(id: &RolloutId) -> String {
    // Rollout ids are `[A-Za-z0-9._-]{1,64}@[A-Za-z0-9._-]{1,64}`: safe as a file name.
    format!("{ROOT_PREFIX}{id}.json")
}

impl StateDir {
    /// Reads `name` as JSON; `None` when the file does not exist.
    pub fn read_json<T: DeserializeOwned>(&self, name: &str) -> Result<Option<T>, StateError> {
        let file = self.file(name);
        match std::fs::read(&file) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| StateError::Corrupt { file, message: e.to_string() }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(StateError::Read { file, source }),
        }
    }

    /// Writes `value` as JSON to `name`, atomically, mode 0600 (records are nobody else's).
    pub fn write_json<T: Serialize>(&self, name: &str, value: &T) -> Result<(), StateError> {
        let bytes = serde_json::to_vec(value).map_err(|e| StateError::Corrupt { file: self.file(name), message: e.to_string() })?;
        self.write_atomic(name, &bytes, PRIVATE_MODE)
    }
}

impl Records for StateDir {
    fn seen(&self) -> Result<Seen, StateError> {
        Ok(self.read_json(SEEN)?.unwrap_or_default())
    }

    fn put_seen(&self, seen: &Seen) -> Result<(), StateError> {
        self.write_json(SEEN, seen)
    }

    fn cached_root(&self, id: &RolloutId) -> Result<Option<CachedRoot>, StateError> {
        let name = root_file(id);
        let cached: Option<CachedRoot> = self.read_json(&name)?;
        match cached {
            Some(c) if c.rollout_id != *id => {
                Err(StateError::Corrupt { file: self.file(&name), message: format!("holds rollout {} instead of {id}", c.rollout_id) })
            }
            other => Ok(other),
        }
    }

    fn put_root(&self, m: &CachedRoot) -> Result<(), StateError> {
        self.write_json(&root_file(&m.rollout_id), m)?;
        let dir_err = |source| StateError::Read { file: self.path().to_owned(), source };
        let mut cached: Vec<(std::time::SystemTime, PathBuf)> = Vec::new();
        for entry in std::fs::read_dir(self.path()).map_err(dir_err)? {
            let entry = entry.map_err(dir_err)?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(ROOT_PREFIX) && name.ends_with(".json") {
                let modified = entry.metadata().and_then(|m| m.modified()).map_err(dir_err)?;
                cached.push((modified, entry.path()));
            }
        }
        cached.sort();
        let excess = cached.len().saturating_sub(MAX_CACHED_ROOTS);
        for (_, path) in cached.into_iter().take(excess) {
            if path != self.file(&root_file(&m.rollout_id)) {
                std::fs::remove_file(&path).map_err(|source| StateError::Write { file: path.clone(), source })?;
            }
        }
        Ok(())
    }

    fn journal(&self) -> Result<Journal, StateError> {
        Ok(self.read_json(JOURNAL)?.unwrap_or_default())
    }

    fn put_journal(&self, journal: &Journal) -> Result<(), StateError> {
        self.write_json(JOURNAL, journal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: i64) -> Time {
        Time::from_unix(1_800_000_000 + secs).expect("time")
    }

    fn state() -> (tempfile::TempDir, StateDir) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let state = StateDir::open(&tmp.path().join("state")).expect("open");
        (tmp, state)
    }

    #[test]
    fn absent_records_read_as_empty_and_round_trip() {
        let (_tmp, s) = state();
        assert_eq!(s.seen().unwrap(), Seen::default());
        assert_eq!(s.journal().unwrap(), Journal::default());
        let seen = Seen {
            highest_timestamp_version: 7,
            latest_time: Some(t(5)),
            last_intent_id: Some("i".into()),
            acted_intent_id: None,
            highest_release: Some(drover_proto::report::ReleaseSeen { version: 7, timestamp: "{}".into(), timestamp_sig: "sig".into() }),
        };
        s.put_seen(&seen).unwrap();
        assert_eq!(s.seen().unwrap(), seen);
    }

    #[test]
    fn a_corrupt_record_is_an_error_naming_the_file_not_an_empty_one() {
        let (_tmp, s) = state();
        std::fs::write(s.file(SEEN), b"{\"highestTimestampVersion\":").unwrap();
        let e = s.seen().unwrap_err();
        assert!(matches!(e, StateError::Corrupt { .. }) && e.to_string().contains(SEEN), "{e}");
    }

    #[test]
    fn the_root_cache_is_bounded_and_keeps_the_newest() {
        let (_tmp, s) = state();
        for i in 0..(MAX_CACHED_ROOTS + 3) {
            let id = RolloutId::new("gpu", &format!("c{i:02}")).unwrap();
            s.put_root(&CachedRoot { rollout_id: id, sha256: format!("{i}"), root: "{}".into(), root_sig: "{}".into() }).unwrap();
        }
        let kept =
            std::fs::read_dir(s.path()).unwrap().filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with("root-")).count();
        assert_eq!(kept, MAX_CACHED_ROOTS);
        let newest = RolloutId::new("gpu", &format!("c{:02}", MAX_CACHED_ROOTS + 2)).unwrap();
        assert!(s.cached_root(&newest).unwrap().is_some());
    }

    #[test]
    fn a_root_file_holding_another_rollout_is_refused() {
        let (_tmp, s) = state();
        let a = RolloutId::new("gpu", "a").unwrap();
        let b = RolloutId::new("gpu", "b").unwrap();
        s.put_root(&CachedRoot { rollout_id: b.clone(), sha256: "x".into(), root: "{}".into(), root_sig: "{}".into() }).unwrap();
        std::fs::rename(s.file(&root_file(&b)), s.file(&root_file(&a))).unwrap();
        assert!(matches!(s.cached_root(&a), Err(StateError::Corrupt { .. })));
    }

    #[test]
    fn the_journal_keeps_unacknowledged_results_and_prunes_only_expired_acknowledged_entries() {
        let result = |id: &str| TaskResult {
            task_id: id.into(),
            outcome: drover_proto::report::TaskOutcome::Refused,
            steps: Vec::new(),
            started_at: t(0),
            finished_at: t(0),
            evidence: None,
        };
        let mut j = Journal::default();
        j.tasks.insert("old-acked".into(), JournalEntry { expires_at: t(0), unacknowledged: None, running: false });
        j.tasks
            .insert("old-pending".into(), JournalEntry { expires_at: t(0), unacknowledged: Some(result("old-pending")), running: false });
        j.tasks.insert("live".into(), JournalEntry { expires_at: t(1000), unacknowledged: Some(result("live")), running: false });
        j.prune(t(500), 60);
        assert!(!j.contains("old-acked") && j.contains("old-pending") && j.contains("live"));
        j.acknowledge(&[result("old-pending")]);
        assert_eq!(j.unacknowledged().len(), 1);
        j.prune(t(500), 60);
        assert!(!j.contains("old-pending"), "acknowledged and expired: pruned");
    }

    #[test]
    fn a_task_left_running_by_a_crash_is_reported_interrupted_and_never_rerun() {
        let mut j = Journal::default();
        j.tasks.insert("scrub".into(), JournalEntry { expires_at: t(0), unacknowledged: None, running: true });
        j.prune(t(999_999), 60);
        assert!(j.contains("scrub"), "a running entry is never pruned: its id must stay taken");
        assert_eq!(j.interrupted(t(10)), 1);
        let r = j.unacknowledged();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].outcome, drover_proto::report::TaskOutcome::Failed);
        assert!(r[0].steps[0].message.contains("not run again"), "{:?}", r[0].steps);
        assert!(j.contains("scrub"), "still taken: a replay is refused");
        assert_eq!(j.interrupted(t(11)), 0);
    }
}
