//! What agents send and receive on their routes: check-in, confirmation, health, probe and
//! task results, and typed report events (`ManifestMismatch`, …).

use serde::{Deserialize, Serialize};

use crate::names::RolloutId;
use crate::sig::Envelope;
use crate::spec::Mode;
use crate::time::Time;

/// A probe's outcome (RFC-0002 §5.3): probe-error gates like failed.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProbeOutcome {
    /// The check held.
    Passed,
    /// The check ran and did not hold.
    Failed,
    /// The probe itself broke (nonzero exit of a wrapper, malformed output, timeout).
    ProbeError,
}

/// One probe run.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProbeResult {
    /// The probe's name.
    pub name: String,
    /// Its outcome.
    pub outcome: ProbeOutcome,
    /// enforce | observe.
    pub mode: Mode,
    /// Short human detail (exit code, status, error).
    #[serde(default)]
    pub message: String,
    /// How long it took.
    pub duration_ms: u64,
    /// When it ran.
    pub observed_at: Time,
}

/// GPU summary inside a health report.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GpuSummary {
    /// nvidia | amd.
    pub vendor: String,
    /// GPUs seen.
    pub count: u32,
    /// GPUs with problems (lost, pending remaps, uncorrectable ECC).
    pub unhealthy: u32,
}

/// MAAS hardware-sync state inside a health report.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HwSyncState {
    /// `/etc/maas/maas-machine-creds.yml` exists.
    pub creds_present: bool,
    /// The hardware-sync timer is active.
    pub timer_active: bool,
}

/// The host's health as the agent saw it.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HealthReport {
    /// When collected.
    pub collected_at: Time,
    /// Seconds since boot.
    pub uptime_secs: u64,
    /// 1-minute load average.
    pub load_avg_1m: f64,
    /// Total memory.
    pub mem_total_bytes: u64,
    /// Available memory.
    pub mem_available_bytes: u64,
    /// CPU busy share over the last collection interval, 0–100 (all CPUs together); absent
    /// on the first collection (no interval yet) and from older agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_usage_pct: Option<f64>,
    /// Usage of the filesystems the agent is configured to report.
    #[serde(default)]
    pub disks: Vec<DiskUsage>,
    /// Failed systemd units, by name.
    #[serde(default)]
    pub failed_units: Vec<String>,
    /// GPUs, when the host has any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuSummary>,
    /// MAAS hardware sync, on MAAS-managed hosts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hw_sync: Option<HwSyncState>,
    /// What could not be collected this time (systemd unreachable, GPU driver down, …), one
    /// line each; the rest of the report stands.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub collect_errors: Vec<String>,
    /// The agent's own state directory: whether it can keep its records there. Absent from
    /// older agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_dir: Option<StateDirHealth>,
}

/// The agent's state directory inside a health report: whether the agent can keep its records
/// (version floors, replay journal, pending activation) there.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StateDirHealth {
    /// The directory.
    pub path: String,
    /// Its filesystem's size.
    pub total_bytes: u64,
    /// Space available to the agent there.
    pub available_bytes: u64,
    /// Whether the agent can write its records: false while the filesystem is full, or nearly,
    /// or while its last write there failed for want of space and no room has been freed.
    pub ready: bool,
    /// Why not, when not ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// One filesystem's usage inside a health report.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DiskUsage {
    /// Where it is mounted.
    pub mount_point: String,
    /// Its size.
    pub total_bytes: u64,
    /// Space available to unprivileged users.
    pub available_bytes: u64,
}

/// Where an activation stands on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ActivationPhase {
    /// Realising and switching.
    Activating,
    /// Switched; waiting for the coordinator's confirmation.
    AwaitingConfirm,
    /// Confirmed; running the target.
    Confirmed,
    /// Staged for next boot.
    Deferred,
    /// Rolled back to the recorded previous closure.
    RolledBack,
    /// Failed before switching (realise or profile set failed).
    Failed,
    /// The host has no activation backend (no NixOS system profile).
    NoBackend,
}

/// The agent's activation status for its current intent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ActivationStatus {
    /// The intent acted on.
    pub intent_id: String,
    /// Its rollout.
    pub rollout_id: RolloutId,
    /// The target closure.
    pub target_closure: String,
    /// Phase.
    pub phase: ActivationPhase,
    /// Detail.
    #[serde(default)]
    pub message: String,
}

/// Outcome of one step of a task.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StepOutcome {
    /// Done.
    Ok,
    /// Failed.
    Error,
    /// Not needed (idempotent re-run, nothing to do).
    Skipped,
}

/// One step's result.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StepResult {
    /// Step name from the task's plan.
    pub name: String,
    /// Outcome.
    pub outcome: StepOutcome,
    /// Human detail.
    #[serde(default)]
    pub message: String,
    /// Structured detail (bytes freed, residues found, …).
    #[serde(default)]
    pub data: serde_json::Value,
}

/// A task's overall outcome.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskOutcome {
    /// Every step ok or skipped.
    Succeeded,
    /// A step failed.
    Failed,
    /// Not run: bad signature, expired, replayed, wrong host.
    Refused,
}

/// The result of running (or refusing) a task.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaskResult {
    /// The task.
    pub task_id: String,
    /// Overall outcome.
    pub outcome: TaskOutcome,
    /// Per step, in order.
    pub steps: Vec<StepResult>,
    /// When it started.
    pub started_at: Time,
    /// When it finished.
    pub finished_at: Time,
    /// The host's signed statement of this result (`node.validate_clean`, `node.gpu_scrub`),
    /// when the host has an evidence key ([`crate::evidence`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<serde_json::Value>"))]
    pub evidence: Option<crate::evidence::Evidence>,
}

/// Something the agent refused or noticed, reported as a typed event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all_fields = "camelCase")]
pub enum ReportEvent {
    /// The manifest, the intent and the host disagree (wave, target, id, hash).
    ManifestMismatch {
        /// The rollout advertised.
        rollout_id: String,
        /// The verification rule broken.
        reason: String,
    },
    /// An artifact failed verification.
    VerificationFailed {
        /// Which artifact.
        artifact: String,
        /// The verification rule broken.
        reason: String,
    },
    /// A task was refused.
    TaskRefused {
        /// The task.
        task_id: String,
        /// Why.
        reason: String,
    },
    /// The host's clock went backwards past the latest time the agent had seen.
    ClockSteppedBack {
        /// Latest time seen.
        last_seen: Time,
        /// The clock now.
        now: Time,
    },
    /// An activation was rolled back.
    RolledBack {
        /// The rollout.
        rollout_id: String,
        /// The closure restored.
        restored_closure: String,
        /// Why.
        reason: String,
    },
    /// An intent arrived on a host without a NixOS system profile.
    NoActivationBackend {
        /// The rollout.
        rollout_id: String,
    },
}

/// Most events one check-in may carry; an agent holding more sends the oldest first.
pub const MAX_EVENTS_PER_CHECKIN: usize = 64;
/// Longest free-text field (a reason, an id) of an event the coordinator accepts, in bytes.
pub const MAX_EVENT_TEXT_BYTES: usize = 1024;

impl ReportEvent {
    /// Whether this is an agent's refusal of a release older than one it verified (the
    /// `VersionRollback` rule): the coordinator that served it is behind the fleet.
    pub fn is_version_rollback(&self) -> bool {
        match self {
            ReportEvent::VerificationFailed { reason, .. } | ReportEvent::ManifestMismatch { reason, .. } => {
                reason.starts_with("VersionRollback")
            }
            _ => false,
        }
    }

    /// The event with every free-text field cut to [`MAX_EVENT_TEXT_BYTES`] (at a character
    /// boundary), so a long error chain can never get an agent's check-ins refused.
    pub fn bounded(self) -> ReportEvent {
        fn cut(mut s: String) -> String {
            if s.len() > MAX_EVENT_TEXT_BYTES {
                let mut end = MAX_EVENT_TEXT_BYTES - 3;
                while !s.is_char_boundary(end) {
                    end -= 1;
                }
                s.truncate(end);
                s.push_str("...");
            }
            s
        }
        match self {
            ReportEvent::ManifestMismatch { rollout_id, reason } => {
                ReportEvent::ManifestMismatch { rollout_id: cut(rollout_id), reason: cut(reason) }
            }
            ReportEvent::VerificationFailed { artifact, reason } => {
                ReportEvent::VerificationFailed { artifact: cut(artifact), reason: cut(reason) }
            }
            ReportEvent::TaskRefused { task_id, reason } => ReportEvent::TaskRefused { task_id: cut(task_id), reason: cut(reason) },
            ReportEvent::RolledBack { rollout_id, restored_closure, reason } => {
                ReportEvent::RolledBack { rollout_id: cut(rollout_id), restored_closure: cut(restored_closure), reason: cut(reason) }
            }
            ReportEvent::NoActivationBackend { rollout_id } => ReportEvent::NoActivationBackend { rollout_id: cut(rollout_id) },
            e @ ReportEvent::ClockSteppedBack { .. } => e,
        }
    }

    /// The variant's name (`ManifestMismatch`, …), as the wire's `type` field says it.
    pub fn type_name(&self) -> &'static str {
        match self {
            ReportEvent::ManifestMismatch { .. } => "ManifestMismatch",
            ReportEvent::VerificationFailed { .. } => "VerificationFailed",
            ReportEvent::TaskRefused { .. } => "TaskRefused",
            ReportEvent::ClockSteppedBack { .. } => "ClockSteppedBack",
            ReportEvent::RolledBack { .. } => "RolledBack",
            ReportEvent::NoActivationBackend { .. } => "NoActivationBackend",
        }
    }

    /// Whether every free-text field is within [`MAX_EVENT_TEXT_BYTES`].
    pub fn is_bounded(&self) -> bool {
        self.clone().bounded() == *self
    }
}

/// `POST /v1/agent/checkin` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CheckinRequest {
    /// The agent's version.
    pub agent_version: String,
    /// `/proc/sys/kernel/random/boot_id`.
    pub boot_id: String,
    /// The closure `/run/current-system` points to, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_generation: Option<String>,
    /// Latest health.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthReport>,
    /// Probe results since the last check-in.
    #[serde(default)]
    pub probe_results: Vec<ProbeResult>,
    /// The host's signed statement of `probe_results`, when it has an evidence key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_evidence: Option<crate::evidence::Evidence>,
    /// Task results not yet acknowledged.
    #[serde(default)]
    pub task_results: Vec<TaskResult>,
    /// Activation status of the current intent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activation: Option<ActivationStatus>,
    /// Typed events.
    #[serde(default)]
    pub events: Vec<ReportEvent>,
    /// The intent the agent already holds, so the server can long-poll until it changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub known_intent_id: Option<String>,
    /// The highest release this agent has verified, as CI signed it: sent at the first
    /// check-in after the agent starts or could not reach the coordinator, every 10 minutes,
    /// and while the coordinator serves intents from an older one (the agent refused one as a
    /// version rollback). A coordinator restored from an older backup learns what the fleet
    /// has seen, and can check it, since only CI's keys make a timestamp verify.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_seen: Option<ReleaseSeen>,
}

/// A `timestamp.json` an agent verified, with its detached signature, byte for byte.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReleaseSeen {
    /// Its version, as the agent read it (the coordinator reads it again from the bytes).
    pub version: u64,
    /// The file.
    pub timestamp: String,
    /// Its signature file.
    pub timestamp_sig: String,
}

/// `POST /v1/agent/checkin` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CheckinResponse {
    /// The signed intent, if the host has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intent: Option<Envelope>,
    /// Signed tasks leased to the host.
    #[serde(default)]
    pub tasks: Vec<Envelope>,
    /// When to check in next.
    pub next_checkin_secs: u64,
    /// The director key's latest hand-overs to a successor, oldest first, each signed by the
    /// key before it ([`crate::rotation`]); served through each overlap and after, so an
    /// agent offline through one or several rotations walks the chain.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub director_rotations: Vec<Envelope>,
}

/// `POST /v1/agent/confirm` body (magic rollback).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConfirmRequest {
    /// The intent being confirmed.
    pub intent_id: String,
    /// Its rollout.
    pub rollout_id: RolloutId,
    /// The closure now running.
    pub closure: String,
    /// The boot it runs in.
    pub boot_id: String,
}

/// The wire error shape of every API: `{"error":{"code","message"}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiError {
    /// The error.
    pub error: ApiErrorBody,
}

/// Body of [`ApiError`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiErrorBody {
    /// A stable machine-readable code (`not_found`, `bad_request`, …).
    pub code: String,
    /// A human message.
    pub message: String,
}

/// The error code of an agent route called with a valid host certificate whose host this
/// coordinator has no record of: its store was restored from a backup older than the host's
/// enrollment (or the host was removed from it). The host must be enrolled again; the agent
/// recognises the code, says so once and asks again only every few minutes.
pub const HOST_UNKNOWN_REENROLL: &str = "host_unknown_reenroll";
