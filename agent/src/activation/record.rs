//! What survives the agent: the pending (or last finished) activation, `activation.json`,
//! and the quarantine list, `quarantine.json`, both in the state directory and written
//! atomically ([`StateDir::write_atomic`], mode 0600).
//!
//! `activation.json` is written *before* every irreversible step (setting the profile,
//! starting a switch, starting a rollback) and after every transition, so an agent killed at
//! any instant — by a crash, by the OOM killer, or by the switch itself restarting the
//! agent's unit — finds on start-up exactly which step was under way, the transient unit
//! running it, the recorded previous closure to return to, and the confirm deadline;
//! [`Activator::resume`](super::Activator::resume) finishes it. A record at
//! [`Step::Done`] is the last activation's outcome, kept so a repeated intent is answered
//! without acting twice.
//!
//! ```json
//! {"intentId":"…","rolloutId":"main@abc","target":"/nix/store/…-nixos-system-x",
//!  "previous":"/nix/store/…","confirmWindowSecs":300,"step":"awaiting-confirm",
//!  "phase":"awaiting-confirm","message":"","unit":"drover-switch-….service",
//!  "confirmDeadline":"2026-11-21T10:05:00Z","rollback":null,"events":[],
//!  "retryable":false,"updatedAt":"2026-11-21T10:00:00Z"}
//! ```

use serde::{Deserialize, Serialize};

use drover_proto::names::RolloutId;
use drover_proto::report::{ActivationPhase, ActivationStatus, ReportEvent};
use drover_proto::time::Time;

use super::{ActivationError, ActivationReport, QUARANTINE_FILE, RECORD_FILE};
use crate::state::{PRIVATE_MODE, StateDir, StateError};

/// The step an activation is at (what [`resume`](super::Activator::resume) continues).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Step {
    /// About to set the profile and run `switch-to-configuration switch` in `unit`, or
    /// doing so.
    Switching,
    /// About to set the profile and run `switch-to-configuration boot`, or doing so.
    Booting,
    /// Switched; confirming until `confirm_deadline`.
    AwaitingConfirm,
    /// Confirmed; running the health gate.
    Gating,
    /// Returning to `previous` (see `rollback`).
    RollingBack,
    /// Finished; `phase`, `message` and `events` are the outcome.
    Done,
}

/// How a closure is applied: live, or staged for the next boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SwitchMode {
    /// `switch-to-configuration switch`, in a transient unit.
    Switch,
    /// `switch-to-configuration boot`.
    Boot,
}

impl SwitchMode {
    /// The `switch-to-configuration` argument.
    pub fn arg(self) -> &'static str {
        match self {
            SwitchMode::Switch => "switch",
            SwitchMode::Boot => "boot",
        }
    }
}

/// A rollback under way.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RollbackPlan {
    /// Why.
    pub reason: String,
    /// Live switch back, or only the boot entry (the target was only staged).
    pub mode: SwitchMode,
    /// Whether the target is quarantined once the rollback is done.
    pub quarantine: bool,
}

/// `activation.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ActivationRecord {
    /// The intent acted on.
    pub intent_id: String,
    /// Its rollout.
    pub rollout_id: RolloutId,
    /// The target closure.
    pub target: String,
    /// The closure that ran before (the rollback target); `None` only for an activation that
    /// ended before one was recorded (no backend, refused).
    pub previous: Option<String>,
    /// The intent's confirm window.
    pub confirm_window_secs: u64,
    /// Where the activation is.
    pub step: Step,
    /// The phase to report.
    pub phase: ActivationPhase,
    /// Detail for the report.
    #[serde(default)]
    pub message: String,
    /// The transient unit of the current step (switch or rollback), if it has one.
    #[serde(default)]
    pub unit: Option<String>,
    /// The confirmation is due by then (set once the switch finished).
    #[serde(default)]
    pub confirm_deadline: Option<Time>,
    /// The rollback under way.
    #[serde(default)]
    pub rollback: Option<RollbackPlan>,
    /// Events to report with the outcome.
    #[serde(default)]
    pub events: Vec<ReportEvent>,
    /// A finished activation that changed nothing (no backend, refused, realise or profile
    /// failure): the same intent is tried again rather than answered from this record.
    #[serde(default)]
    pub retryable: bool,
    /// When the record was written.
    pub updated_at: Time,
}

impl ActivationRecord {
    /// The status to report for it.
    pub fn status(&self) -> ActivationStatus {
        ActivationStatus {
            intent_id: self.intent_id.clone(),
            rollout_id: self.rollout_id.clone(),
            target_closure: self.target.clone(),
            phase: self.phase,
            message: self.message.clone(),
        }
    }

    /// The status and events.
    pub fn report(&self) -> ActivationReport {
        ActivationReport { status: self.status(), events: self.events.clone() }
    }
}

/// One quarantined closure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QuarantineEntry {
    /// The closure.
    pub target: String,
    /// Refused until then.
    pub until: Time,
    /// Why it was quarantined.
    pub reason: String,
}

/// `quarantine.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QuarantineList {
    /// The entries, at most one per target.
    pub entries: Vec<QuarantineEntry>,
}

impl QuarantineList {
    /// The entry refusing `target` at `now`, if any.
    pub fn active(&self, target: &str, now: Time) -> Option<&QuarantineEntry> {
        self.entries.iter().find(|e| e.target == target && now < e.until)
    }

    /// Adds (or replaces) `entry` and drops the entries expired at `now`.
    pub fn add(&mut self, entry: QuarantineEntry, now: Time) {
        self.entries.retain(|e| e.target != entry.target && now < e.until);
        self.entries.push(entry);
    }
}

fn read_json<T: for<'de> Deserialize<'de>>(state: &StateDir, name: &str) -> Result<Option<T>, ActivationError> {
    let bytes = match state.read(name) {
        Ok(bytes) => bytes,
        Err(StateError::Read { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    serde_json::from_slice(&bytes).map(Some).map_err(|e| ActivationError::Corrupt { file: state.file(name), message: e.to_string() })
}

fn write_json<T: Serialize>(state: &StateDir, name: &str, value: &T) -> Result<(), ActivationError> {
    let mut bytes =
        serde_json::to_vec_pretty(value).map_err(|e| ActivationError::Corrupt { file: state.file(name), message: e.to_string() })?;
    bytes.push(b'\n');
    Ok(state.write_atomic(name, &bytes, PRIVATE_MODE)?)
}

/// Reads `activation.json` (`None` if there is none).
pub fn load_record(state: &StateDir) -> Result<Option<ActivationRecord>, ActivationError> {
    read_json(state, RECORD_FILE)
}

/// Writes `activation.json` atomically.
pub fn store_record(state: &StateDir, record: &ActivationRecord) -> Result<(), ActivationError> {
    write_json(state, RECORD_FILE, record)
}

/// Reads `quarantine.json` (empty if there is none).
pub fn load_quarantine(state: &StateDir) -> Result<QuarantineList, ActivationError> {
    Ok(read_json(state, QUARANTINE_FILE)?.unwrap_or_default())
}

/// Adds `entry` to `quarantine.json`.
pub fn quarantine(state: &StateDir, entry: QuarantineEntry, now: Time) -> Result<(), ActivationError> {
    let mut list = load_quarantine(state)?;
    list.add(entry, now);
    write_json(state, QUARANTINE_FILE, &list)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: i64) -> Time {
        Time::from_unix(secs).expect("time")
    }

    #[test]
    fn quarantine_expires_and_is_replaced_per_target() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let state = StateDir::open(tmp.path()).expect("state");
        assert!(load_quarantine(&state).expect("empty").entries.is_empty());
        quarantine(&state, QuarantineEntry { target: "a".into(), until: t(100), reason: "r1".into() }, t(0)).expect("add");
        quarantine(&state, QuarantineEntry { target: "b".into(), until: t(50), reason: "r2".into() }, t(0)).expect("add");
        let list = load_quarantine(&state).expect("load");
        assert_eq!(list.active("a", t(99)).map(|e| e.reason.as_str()), Some("r1"));
        assert!(list.active("a", t(100)).is_none(), "expired at `until`");
        // Adding at t=60 drops b (expired) and replaces a.
        quarantine(&state, QuarantineEntry { target: "a".into(), until: t(200), reason: "r3".into() }, t(60)).expect("add");
        let list = load_quarantine(&state).expect("load");
        assert_eq!(list.entries, vec![QuarantineEntry { target: "a".into(), until: t(200), reason: "r3".into() }]);
    }

    #[test]
    fn a_corrupt_record_is_an_error_naming_the_file() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let state = StateDir::open(tmp.path()).expect("state");
        assert!(load_record(&state).expect("none").is_none());
        state.write_atomic(RECORD_FILE, b"{not json", PRIVATE_MODE).expect("write");
        let e = load_record(&state).expect_err("corrupt");
        assert!(e.to_string().contains(RECORD_FILE), "{e}");
    }
}
