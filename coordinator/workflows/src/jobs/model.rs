//! What a job is, the stages it runs, and the progress read model it keeps.

use std::fmt;

use drover_proto::states::{HostLifecycle, JobState};
use drover_proto::task::{ComputeProcessPolicy, GpuVendor, HwSyncReseed, MaasToken, MachineToken, Secret, StorageScope, TaskKind};
use drover_proto::time::Time;
use serde::{Deserialize, Serialize};

use crate::maasflow::onboard::EraseMode;

/// Which storage a soft reset or decommission cleans (`none` skips the stage).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum StorageChoice {
    /// No storage cleanup.
    #[default]
    None,
    /// Local scratch roots.
    Local,
    /// Tenant `wekafs` mounts and their config.
    Weka,
    /// Both.
    All,
}

impl StorageChoice {
    /// The task scope, or `None` when the stage is skipped.
    pub fn scope(self) -> Option<StorageScope> {
        match self {
            StorageChoice::None => None,
            StorageChoice::Local => Some(StorageScope::Local),
            StorageChoice::Weka => Some(StorageScope::Weka),
            StorageChoice::All => Some(StorageScope::All),
        }
    }
}

/// One activity of an on-demand maintenance job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Activity {
    /// `node.gpu_scrub`.
    GpuScrub,
    /// `node.storage_cleanup`.
    StorageCleanup,
    /// `node.validate_clean`.
    ValidateClean,
    /// `node.hw_sync_reseed`.
    HwSyncReseed,
    /// Bring the host onto its desired generation (an intent, not a task).
    Activate,
}

impl Activity {
    /// Every activity, in the canonical order (also the order they run in).
    pub const ALL: [Activity; 5] =
        [Activity::GpuScrub, Activity::StorageCleanup, Activity::ValidateClean, Activity::HwSyncReseed, Activity::Activate];

    /// The stage that performs it.
    pub fn stage(self) -> Stage {
        match self {
            Activity::GpuScrub => Stage::ScrubGpu,
            Activity::StorageCleanup => Stage::CleanupStorage,
            Activity::ValidateClean => Stage::ValidateClean,
            Activity::HwSyncReseed => Stage::HwSyncReseed,
            Activity::Activate => Stage::Activate,
        }
    }
}

fn all_scope() -> StorageScope {
    StorageScope::All
}

/// How the MAAS half of a reimage or full decommission releases the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MaasRelease {
    /// none | quick | secure (the profile's `release_fallback_no_erase` decides what a failed
    /// erase does).
    #[serde(default)]
    pub erase: EraseMode,
    /// Full decommission: delete the machine from MAAS at the end (default: keep the record
    /// for MAAS-side audit).
    #[serde(default)]
    pub remove_maas_record: bool,
}

/// What a job does: its input, stored as the job's `input` JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", rename_all_fields = "camelCase", deny_unknown_fields)]
pub enum JobKind {
    /// Allocation turnover: the host stays deployed and is clean and available afterwards.
    SoftReset {
        /// Which storage to clean (`none` skips the stage).
        storage: StorageChoice,
    },
    /// Storage-only cleanup between tenants, then validation.
    StorageCleanup {
        /// local | weka | all.
        scope: StorageScope,
    },
    /// Remove the host from the fleet: retire, remove, uninstall the agent, delete.
    FullDecommission {
        /// Also clean storage before retiring (absent or `none`: no cleanup stage).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        storage: Option<StorageChoice>,
        /// Force-release allocations still attached; when false, attached allocations stop
        /// the job for an operator.
        #[serde(default)]
        force_release: bool,
        /// For a MAAS-bound host: how MAAS releases the machine.
        #[serde(default)]
        maas: MaasRelease,
    },
    /// A fresh OS on the same hardware, the host keeping its id (§5.3): cordon, drain, revoke
    /// users, clean storage, then the MAAS half (release with the erase, storage, RoCE, PXE,
    /// fresh token and first-boot bundle, deploy, re-enrollment, hardware sync), uncordon.
    Reimage {
        /// Also clean storage before the release (absent or `none`: no cleanup stage).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        storage: Option<StorageChoice>,
        /// How MAAS releases (and erases) the machine.
        #[serde(default)]
        maas: MaasRelease,
        /// The site profile to deploy with (default: the site's default profile).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        profile: Option<String>,
    },
    /// On-demand maintenance: the host is cordoned, the activities run, it is uncordoned.
    Maintenance {
        /// Which activities; empty means all. They always run in the canonical order
        /// ([`Activity::ALL`]), each once.
        #[serde(default)]
        activities: Vec<Activity>,
        /// Scope of the storage cleanup activity (default `all`).
        #[serde(default = "all_scope")]
        storage: StorageScope,
    },
    /// The `retire` lifecycle verb's drain (`node-state-model.md` §3.3 "admin lifecycle action
    /// that starts a resumable drain operation"): the host is held in `draining` while it is
    /// cordoned and drained, then `retired`. (No fields; a struct variant so that its JSON,
    /// `{"kind": "retire"}`, is as strict as the others'.)
    Retire {},
    /// The `remove` lifecycle verb's uninstall: the host is held in `removing` while the agent
    /// uninstalls itself, then its certificates are revoked and it is `deleted`.
    Remove {},
}

impl JobKind {
    /// Every [`JobKind::name`].
    pub const NAMES: [&'static str; 7] =
        ["soft_reset", "storage_cleanup", "full_decommission", "reimage", "maintenance", "retire", "remove"];

    /// The stable name (the store's `kind` column): `soft_reset`, `storage_cleanup`,
    /// `full_decommission`, `reimage`, `maintenance`, `retire`, `remove`.
    pub fn name(&self) -> &'static str {
        match self {
            JobKind::SoftReset { .. } => "soft_reset",
            JobKind::StorageCleanup { .. } => "storage_cleanup",
            JobKind::FullDecommission { .. } => "full_decommission",
            JobKind::Reimage { .. } => "reimage",
            JobKind::Maintenance { .. } => "maintenance",
            JobKind::Retire {} => "retire",
            JobKind::Remove {} => "remove",
        }
    }

    /// A new job of this kind on `host_id`, created at `now` with a fresh id (its input is
    /// this kind as JSON).
    pub fn new_job(&self, host_id: uuid::Uuid, now: drover_proto::time::Time) -> Result<drover_store::NewJob, serde_json::Error> {
        Ok(drover_store::NewJob {
            job_id: uuid::Uuid::new_v4(),
            kind: self.name().to_owned(),
            host_id: Some(host_id),
            input: serde_json::to_value(self)?,
            created_at: now,
            request_id: None,
        })
    }

    /// The in-progress lifecycle state (`draining`, `removing`) a job of this kind holds its
    /// host in while it works at `stage`, if any. `node-state-model.md` §3.3: those states are
    /// not self-sufficient — entering one creates or resumes the job that owns it, and the job
    /// never leaves its host there when it stops ([`crate::jobs::plan::lifecycle_guard`]).
    ///
    /// A retire holds `draining` and a remove `removing` throughout; a full decommission holds
    /// `removing` from its uninstall on (its retire and remove stages pass through `draining`
    /// and into `removing` in one step each).
    pub fn holds(&self, stage: Stage) -> Option<HostLifecycle> {
        match (self, stage) {
            (JobKind::Retire {}, _) => Some(HostLifecycle::Draining),
            (JobKind::Remove {}, _) => Some(HostLifecycle::Removing),
            (JobKind::FullDecommission { .. }, Stage::Uninstall | Stage::MaasWorkflow | Stage::Delete) => Some(HostLifecycle::Removing),
            _ => None,
        }
    }

    /// The storage scope its cleanup stage uses, if it has one.
    pub fn storage_scope(&self) -> Option<StorageScope> {
        match self {
            JobKind::SoftReset { storage } => storage.scope(),
            JobKind::StorageCleanup { scope } => Some(*scope),
            JobKind::FullDecommission { storage, .. } | JobKind::Reimage { storage, .. } => storage.and_then(StorageChoice::scope),
            JobKind::Maintenance { storage, .. } => Some(*storage),
            JobKind::Retire {} | JobKind::Remove {} => None,
        }
    }
}

/// One stage of a job. The string forms are stable (they are stored in progress JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Local: mark the host unschedulable (no new allocations, no rollout selection).
    Cordon,
    /// Local: ask the scheduler whether allocations are still attached; with `forceRelease`
    /// tell it to end them first and ask until none remain.
    ForceRelease,
    /// Task `node.drain`: run the drain hook and wait for it.
    Drain,
    /// Task `allocation.revoke_user`: remove tenant users, end their sessions.
    RevokeUsers,
    /// Task `node.storage_cleanup`.
    CleanupStorage,
    /// Task `node.gpu_scrub`.
    ScrubGpu,
    /// Task `node.validate_clean`; a failure quarantines the host.
    ValidateClean,
    /// Task `node.hw_sync_reseed`.
    HwSyncReseed,
    /// Local: dispatch the host's desired generation (an intent) and wait until it is on it.
    Activate,
    /// Local: mark the host schedulable again.
    Uncordon,
    /// Local: lifecycle → `retired` (through `draining` when needed).
    Retire,
    /// Local: lifecycle `retired` → `removing`.
    Remove,
    /// Task `node.uninstall`: the agent removes itself.
    Uninstall,
    /// Local: lifecycle `removing` → `deleted` (and the host's certificates revoked).
    Delete,
    /// Local: the MAAS half runs as a child workflow (`maas_reimage` / `maas_decommission`)
    /// the MAAS executor drives; the stage waits for it. A host with no MAAS binding skips it
    /// in a full decommission.
    MaasWorkflow,
}

impl Stage {
    /// The stable string form.
    pub const fn as_str(self) -> &'static str {
        match self {
            Stage::Cordon => "cordon",
            Stage::ForceRelease => "force_release",
            Stage::Drain => "drain",
            Stage::RevokeUsers => "revoke_users",
            Stage::CleanupStorage => "cleanup_storage",
            Stage::ScrubGpu => "scrub_gpu",
            Stage::ValidateClean => "validate_clean",
            Stage::HwSyncReseed => "hw_sync_reseed",
            Stage::Activate => "activate",
            Stage::Uncordon => "uncordon",
            Stage::Retire => "retire",
            Stage::Remove => "remove",
            Stage::Uninstall => "uninstall",
            Stage::Delete => "delete",
            Stage::MaasWorkflow => "maas_workflow",
        }
    }

    /// True for the stages the executor performs itself (no agent task).
    pub fn is_local(self) -> bool {
        matches!(
            self,
            Stage::Cordon
                | Stage::ForceRelease
                | Stage::Activate
                | Stage::Uncordon
                | Stage::Retire
                | Stage::Remove
                | Stage::Delete
                | Stage::MaasWorkflow
        )
    }

    /// The agent task this stage runs: `Ok(None)` for a local stage; an error when a setting
    /// it needs is absent (the MAAS credentials of `hw_sync_reseed`, a storage scope).
    pub fn task(self, kind: &JobKind, settings: &TaskSettings) -> Result<Option<TaskKind>, MissingSetting> {
        let task = match self {
            Stage::Drain => TaskKind::Drain { timeout_secs: settings.drain_timeout_secs },
            Stage::RevokeUsers => TaskKind::RevokeUser { users: None },
            Stage::CleanupStorage => {
                TaskKind::StorageCleanup { scope: kind.storage_scope().ok_or(MissingSetting("storage cleanup scope"))? }
            }
            Stage::ScrubGpu => TaskKind::GpuScrub {
                vendor: settings.gpu_vendor,
                compute_processes: settings.compute_processes,
                memory_used_threshold_mib: settings.memory_used_threshold_mib,
                dcgm_diag_level: settings.dcgm_diag_level,
            },
            Stage::ValidateClean => TaskKind::ValidateClean {
                check_gpu: settings.validate_check_gpu,
                // After a scrub in the same job, its own memory bound holds at validation too
                // (on NVIDIA and AMD alike); without one, tenant processes are what is judged.
                memory_used_threshold_mib: stages(kind).contains(&Stage::ScrubGpu).then_some(settings.memory_used_threshold_mib),
            },
            Stage::HwSyncReseed => {
                let c = settings.hw_sync.as_ref().ok_or(MissingSetting("MAAS hardware-sync credentials"))?;
                TaskKind::HwSyncReseed(HwSyncReseed {
                    maas_url: c.maas_url.clone(),
                    system_id: c.system_id.clone(),
                    token: MachineToken::Plain(MaasToken {
                        consumer_key: c.consumer_key.clone(),
                        token_key: c.token_key.clone(),
                        token_secret: c.token_secret.clone(),
                    }),
                })
            }
            Stage::Uninstall => TaskKind::Uninstall { purge_state: settings.uninstall_purge_state },
            Stage::Cordon
            | Stage::ForceRelease
            | Stage::Activate
            | Stage::Uncordon
            | Stage::Retire
            | Stage::Remove
            | Stage::Delete
            | Stage::MaasWorkflow => {
                return Ok(None);
            }
        };
        Ok(Some(task))
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A setting a stage's task needs is absent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no {0} configured for this host")]
pub struct MissingSetting(pub &'static str);

/// The stages a job runs, in order (skipped stages are left out).
///
/// - soft_reset: cordon → drain → revoke_users → cleanup_storage (not with `none`) →
///   scrub_gpu → validate_clean → uncordon
/// - storage_cleanup: cleanup_storage → validate_clean
/// - full_decommission: cordon → force_release → drain → revoke_users → cleanup_storage
///   (only with a storage choice other than `none`) → retire → remove → uninstall →
///   maas_workflow (skipped for a host with no MAAS binding) → delete
/// - reimage: cordon → drain → revoke_users → cleanup_storage (with a storage choice) →
///   maas_workflow → uncordon
/// - maintenance: cordon → the activities' stages (canonical order) → uncordon
/// - retire: cordon → drain → retire
/// - remove: remove → uninstall → delete
pub fn stages(kind: &JobKind) -> Vec<Stage> {
    use Stage::*;
    match kind {
        JobKind::SoftReset { storage } => {
            let mut v = vec![Cordon, Drain, RevokeUsers];
            if storage.scope().is_some() {
                v.push(CleanupStorage);
            }
            v.extend([ScrubGpu, ValidateClean, Uncordon]);
            v
        }
        JobKind::StorageCleanup { .. } => vec![CleanupStorage, ValidateClean],
        JobKind::FullDecommission { storage, .. } => {
            let mut v = vec![Cordon, ForceRelease, Drain, RevokeUsers];
            if storage.and_then(StorageChoice::scope).is_some() {
                v.push(CleanupStorage);
            }
            // The agent uninstalls itself while its OS still runs; MAAS then releases (and
            // erases) and powers the machine off; the host record goes last.
            v.extend([Retire, Remove, Uninstall, MaasWorkflow, Delete]);
            v
        }
        JobKind::Reimage { storage, .. } => {
            let mut v = vec![Cordon, Drain, RevokeUsers];
            if storage.and_then(StorageChoice::scope).is_some() {
                v.push(CleanupStorage);
            }
            v.extend([MaasWorkflow, Uncordon]);
            v
        }
        JobKind::Maintenance { activities, .. } => {
            let mut v = vec![Cordon];
            v.extend(Activity::ALL.iter().filter(|a| activities.is_empty() || activities.contains(a)).map(|a| a.stage()));
            v.push(Uncordon);
            v
        }
        // The lifecycle verbs' own jobs: the same stages as a full decommission's, without
        // what the verbs never did (scheduler release, tenant cleanup, MAAS).
        JobKind::Retire {} => vec![Cordon, Drain, Retire],
        JobKind::Remove {} => vec![Remove, Uninstall, Delete],
    }
}

/// Fleet settings the task stages are built from (the executor fills `hw_sync` per host).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskSettings {
    /// `node.drain` gives up after this long.
    pub drain_timeout_secs: u64,
    /// GPU vendor for `node.gpu_scrub`.
    pub gpu_vendor: GpuVendor,
    /// What a scrub does about running compute processes.
    pub compute_processes: ComputeProcessPolicy,
    /// Scrub verification threshold (MiB used per GPU).
    pub memory_used_threshold_mib: u64,
    /// `dcgmi diag -r N` after the scrub, when set.
    pub dcgm_diag_level: Option<u8>,
    /// `node.validate_clean` also checks GPU allocations and memory.
    pub validate_check_gpu: bool,
    /// `node.uninstall` also deletes the agent's state dir.
    pub uninstall_purge_state: bool,
    /// The host's MAAS machine credentials, for `node.hw_sync_reseed`.
    pub hw_sync: Option<HwSyncCreds>,
}

impl Default for TaskSettings {
    fn default() -> Self {
        TaskSettings {
            drain_timeout_secs: 900,
            gpu_vendor: GpuVendor::Auto,
            compute_processes: ComputeProcessPolicy::Refuse,
            memory_used_threshold_mib: 64,
            dcgm_diag_level: None,
            validate_check_gpu: true,
            uninstall_purge_state: true,
            hw_sync: None,
        }
    }
}

/// One host's MAAS machine credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HwSyncCreds {
    /// MAAS base URL.
    pub maas_url: String,
    /// The machine's MAAS system id.
    pub system_id: String,
    /// OAuth consumer key.
    pub consumer_key: Secret,
    /// OAuth token key.
    pub token_key: Secret,
    /// OAuth token secret.
    pub token_secret: Secret,
}

/// Why a stage failed, which decides how the job recovers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureClass {
    /// Task lease lapsed, task record lost, local stage did not take: retried automatically
    /// up to the bound, then `failed_retryable`.
    Transient,
    /// A task step reported an error: re-issued up to the bound, then `failed_retryable`
    /// (`failed_manual_intervention` for a drain).
    TaskFailed,
    /// `node.validate_clean` found residue: the host is quarantined, an operator decides.
    ValidationFailed,
    /// The agent refused the task (signature, expiry, replay, wrong host): manual.
    Refused,
    /// Another owner holds the host, allocations remain attached, the host moved out of band:
    /// manual.
    OwnershipConflict,
    /// Progress and observation disagree in a way automation cannot adopt safely: manual.
    Ambiguous,
    /// A setting the stage needs is missing: manual.
    Configuration,
}

impl FailureClass {
    /// The stable string form.
    pub const fn as_str(self) -> &'static str {
        match self {
            FailureClass::Transient => "transient",
            FailureClass::TaskFailed => "task_failed",
            FailureClass::ValidationFailed => "validation_failed",
            FailureClass::Refused => "refused",
            FailureClass::OwnershipConflict => "ownership_conflict",
            FailureClass::Ambiguous => "ambiguous",
            FailureClass::Configuration => "configuration",
        }
    }
}

impl FailureClass {
    /// The operator action the read model recommends once a job stopped with this class.
    pub const fn recommended_action(self) -> &'static str {
        match self {
            FailureClass::Transient => "retry (the stage is safe to run again)",
            FailureClass::TaskFailed => "read the task's failed steps, fix the host, then retry",
            FailureClass::ValidationFailed => "inspect the residue the validation listed, clean the host, then retry",
            FailureClass::Refused => "check the agent's clock, trust roots and identity, then retry",
            FailureClass::OwnershipConflict => "release or finish the other owner's work, then resume, or adopt the observed state",
            FailureClass::Ambiguous => "inspect the host, then adopt the observed state or restart clean",
            FailureClass::Configuration => "set the missing coordinator setting, then resume",
        }
    }
}

/// What an operator should do next with a job in `state` that last failed with `class`;
/// `None` while automation is still in charge or the job is finished.
pub fn recommended_next(state: JobState, class: Option<FailureClass>) -> Option<&'static str> {
    match state {
        JobState::FailedRetryable | JobState::FailedManualIntervention => {
            Some(class.map_or("read the job's history, then retry or mark it for manual intervention", FailureClass::recommended_action))
        }
        _ => None,
    }
}

impl fmt::Display for FailureClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What happened to a stage attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StageStatus {
    /// Work issued (a task queued, a local action requested).
    Started,
    /// Done.
    Succeeded,
    /// Failed (the message says why).
    Failed,
    /// Not run: adopted from observed state by an operator.
    Skipped,
    /// Compensated (cancel, restart_clean).
    Compensated,
}

impl StageStatus {
    /// The stable string form (the serde form).
    pub const fn as_str(self) -> &'static str {
        match self {
            StageStatus::Started => "started",
            StageStatus::Succeeded => "succeeded",
            StageStatus::Failed => "failed",
            StageStatus::Skipped => "skipped",
            StageStatus::Compensated => "compensated",
        }
    }
}

/// One entry of a job's history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StageEvent {
    /// The stage.
    pub stage: Stage,
    /// Its attempt (0 before any).
    pub attempt: u32,
    /// What happened.
    pub status: StageStatus,
    /// Why, for a human.
    pub message: String,
    /// When.
    pub at: Time,
}

/// The job's progress read model, stored as its `progress` JSON (`null` before it starts).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Progress {
    /// Index of the current stage in [`stages`].
    pub stage_index: usize,
    /// The current stage (checked against `stage_index`).
    pub stage: Stage,
    /// Attempts of the current stage so far (0: not started).
    pub attempt: u32,
    /// The current attempt's task, for a task stage once issued.
    #[serde(default)]
    pub task_id: Option<String>,
    /// The last failure's class, while the job is failing or retrying.
    #[serde(default)]
    pub failure_class: Option<FailureClass>,
    /// The latest human-readable status.
    #[serde(default)]
    pub message: String,
    /// Where compensation leads (`pending` for restart_clean, `cancelled` for cancel).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_compensation: Option<JobState>,
    /// `force_release`: the scheduler acknowledged the release notice in this run of the
    /// stage, so later polls only ask (cleared when the stage is left or retried afresh).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub release_sent: bool,
    /// Every stage event, oldest first.
    #[serde(default)]
    pub history: Vec<StageEvent>,
    /// `maas_workflow`: the child MAAS workflow job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_job_id: Option<String>,
}

impl Progress {
    /// Progress before the first stage.
    pub fn initial(kind: &JobKind) -> Progress {
        Progress {
            stage_index: 0,
            stage: stages(kind).first().copied().unwrap_or(Stage::Cordon),
            attempt: 0,
            task_id: None,
            failure_class: None,
            message: String::new(),
            after_compensation: None,
            release_sent: false,
            history: Vec::new(),
            child_job_id: None,
        }
    }

    /// Reads the stored JSON: `null` is [`Progress::initial`].
    pub fn from_value(kind: &JobKind, value: &serde_json::Value) -> Result<Progress, serde_json::Error> {
        if value.is_null() { Ok(Progress::initial(kind)) } else { serde_json::from_value(value.clone()) }
    }

    /// The JSON to store.
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }

    /// Records the task the executor queued for the current attempt.
    pub fn bind_task(&mut self, task_id: impl Into<String>) {
        self.task_id = Some(task_id.into());
    }

    pub(crate) fn push(&mut self, stage: Stage, attempt: u32, status: StageStatus, message: &str, at: Time) {
        self.message = message.to_owned();
        self.history.push(StageEvent { stage, attempt, status, message: message.to_owned(), at });
    }
}

/// Every kind of job the coordinator creates: the kinds above and the MAAS workflows' (an
/// onboarding, and the children of reimages, decommissions and drift repairs). A listing's
/// `kind` filter must name one of these.
pub fn all_job_kinds() -> impl Iterator<Item = &'static str> {
    JobKind::NAMES.into_iter().chain(crate::maasflow::taxonomy::Workflow::ALL.map(|w| w.kind()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_listed_kind_name_is_a_kind_and_every_kind_is_listed() {
        for name in JobKind::NAMES {
            // Fields a kind requires may be missing; the kind itself must be known.
            if let Err(e) = serde_json::from_value::<JobKind>(json!({ "kind": name })) {
                assert!(!e.to_string().contains("unknown variant"), "{name}: {e}");
            }
        }
        let kinds = [
            JobKind::SoftReset { storage: StorageChoice::Local },
            JobKind::StorageCleanup { scope: StorageScope::All },
            JobKind::FullDecommission { storage: None, force_release: false, maas: MaasRelease::default() },
            JobKind::Reimage { storage: None, maas: MaasRelease::default(), profile: None },
            JobKind::Maintenance { activities: Vec::new(), storage: StorageScope::All },
            JobKind::Retire {},
            JobKind::Remove {},
        ];
        assert_eq!(kinds.iter().map(JobKind::name).collect::<Vec<_>>(), JobKind::NAMES);
        let all: Vec<&str> = all_job_kinds().collect();
        assert!(all.contains(&"maas_onboarding") && all.contains(&"maas_resync"), "{all:?}");
    }

    #[test]
    fn full_decommission_runs_its_stages_in_order() {
        use Stage::*;
        let k = JobKind::FullDecommission { storage: None, force_release: true, maas: MaasRelease::default() };
        assert_eq!(stages(&k), vec![Cordon, ForceRelease, Drain, RevokeUsers, Retire, Remove, Uninstall, MaasWorkflow, Delete]);
        let k = JobKind::FullDecommission { storage: Some(StorageChoice::Weka), force_release: false, maas: MaasRelease::default() };
        assert_eq!(
            stages(&k),
            vec![Cordon, ForceRelease, Drain, RevokeUsers, CleanupStorage, Retire, Remove, Uninstall, MaasWorkflow, Delete]
        );
    }

    #[test]
    fn reimage_runs_the_maas_half_between_the_cleanup_and_the_uncordon() {
        use Stage::*;
        let k = JobKind::Reimage { storage: None, maas: MaasRelease::default(), profile: None };
        assert_eq!(stages(&k), vec![Cordon, Drain, RevokeUsers, MaasWorkflow, Uncordon]);
        let k = JobKind::Reimage { storage: Some(StorageChoice::Local), maas: MaasRelease::default(), profile: None };
        assert_eq!(stages(&k), vec![Cordon, Drain, RevokeUsers, CleanupStorage, MaasWorkflow, Uncordon]);
        let parsed: JobKind = serde_json::from_value(json!({"kind": "reimage", "maas": {"erase": "quick"}})).expect("parse");
        assert!(matches!(parsed, JobKind::Reimage { maas: MaasRelease { erase: EraseMode::Quick, remove_maas_record: false }, .. }));
    }

    #[test]
    fn the_lifecycle_verbs_jobs_run_their_stages_and_hold_their_in_progress_state() {
        use Stage::*;
        assert_eq!(stages(&JobKind::Retire {}), vec![Cordon, Drain, Retire]);
        assert_eq!(stages(&JobKind::Remove {}), vec![Remove, Uninstall, Delete]);
        for s in stages(&JobKind::Retire {}) {
            assert_eq!(JobKind::Retire {}.holds(s), Some(HostLifecycle::Draining), "{s}");
        }
        for s in stages(&JobKind::Remove {}) {
            assert_eq!(JobKind::Remove {}.holds(s), Some(HostLifecycle::Removing), "{s}");
        }
        // A full decommission holds `removing` only once it is there (uninstall on).
        let full = JobKind::FullDecommission { storage: None, force_release: false, maas: MaasRelease::default() };
        let held: Vec<Stage> = stages(&full).into_iter().filter(|s| full.holds(*s).is_some()).collect();
        assert_eq!(held, vec![Uninstall, MaasWorkflow, Delete]);
        assert_eq!(JobKind::SoftReset { storage: StorageChoice::All }.holds(Drain), None);
        // Their JSON is the kind alone, strictly.
        assert_eq!(serde_json::to_value(JobKind::Retire {}).expect("json"), json!({"kind": "retire"}));
        assert_eq!(serde_json::from_value::<JobKind>(json!({"kind": "remove"})).expect("parse"), JobKind::Remove {});
        assert_eq!((JobKind::Retire {}.name(), JobKind::Remove {}.name()), ("retire", "remove"));
        assert!(serde_json::from_value::<JobKind>(json!({"kind": "retire", "extra": 1})).is_err());
    }

    #[test]
    fn storage_none_skips_cleanup() {
        let k = JobKind::SoftReset { storage: StorageChoice::None };
        assert!(!stages(&k).contains(&Stage::CleanupStorage));
        let k = JobKind::SoftReset { storage: StorageChoice::Local };
        assert!(stages(&k).contains(&Stage::CleanupStorage));
        let k = JobKind::FullDecommission { storage: Some(StorageChoice::None), force_release: true, maas: MaasRelease::default() };
        assert!(!stages(&k).contains(&Stage::CleanupStorage));
    }

    #[test]
    fn maintenance_runs_activities_in_canonical_order_and_empty_means_all() {
        use Stage::*;
        let all = JobKind::Maintenance { activities: vec![], storage: StorageScope::All };
        assert_eq!(stages(&all), vec![Cordon, ScrubGpu, CleanupStorage, ValidateClean, HwSyncReseed, Activate, Uncordon]);
        let some = JobKind::Maintenance { activities: vec![Activity::ValidateClean, Activity::GpuScrub], storage: StorageScope::All };
        assert_eq!(stages(&some), vec![Cordon, ScrubGpu, ValidateClean, Uncordon]);
    }

    #[test]
    fn job_kind_json_is_stable_and_strict() {
        let k: JobKind = serde_json::from_value(json!({"kind": "soft_reset", "storage": "weka"})).expect("parse");
        assert_eq!(k, JobKind::SoftReset { storage: StorageChoice::Weka });
        let k: JobKind = serde_json::from_value(json!({"kind": "full_decommission", "forceRelease": true})).expect("parse");
        assert_eq!(k, JobKind::FullDecommission { storage: None, force_release: true, maas: MaasRelease::default() });
        assert_eq!(k.name(), "full_decommission");
        let k: JobKind =
            serde_json::from_value(json!({"kind": "maintenance", "activities": ["hw_sync_reseed", "activate"]})).expect("parse");
        assert_eq!(k, JobKind::Maintenance { activities: vec![Activity::HwSyncReseed, Activity::Activate], storage: StorageScope::All });
        assert!(serde_json::from_value::<JobKind>(json!({"kind": "soft_reset", "storage": "all", "extra": 1})).is_err());
        assert!(serde_json::from_value::<JobKind>(json!({"kind": "storage_cleanup", "scope": "none"})).is_err());
    }

    #[test]
    fn progress_round_trips_and_null_is_initial() {
        let k = JobKind::StorageCleanup { scope: StorageScope::Local };
        let mut p = Progress::from_value(&k, &serde_json::Value::Null).expect("null");
        assert_eq!(p.stage, Stage::CleanupStorage);
        p.bind_task("t-1");
        p.failure_class = Some(FailureClass::Transient);
        p.push(Stage::CleanupStorage, 1, StageStatus::Started, "queued", Time::EPOCH);
        let v = p.to_value();
        assert_eq!(v["stage"], json!("cleanup_storage"));
        assert_eq!(v["failureClass"], json!("transient"));
        assert_eq!(v["history"][0]["status"], json!("started"));
        assert_eq!(Progress::from_value(&k, &v).expect("parse"), p);
    }

    #[test]
    fn task_stages_map_to_the_catalog_and_local_stages_do_not() {
        let k = JobKind::SoftReset { storage: StorageChoice::All };
        let s = TaskSettings::default();
        for st in stages(&k) {
            let t = st.task(&k, &s).expect("settings");
            assert_eq!(t.is_none(), st.is_local(), "{st}");
        }
        assert_eq!(Stage::CleanupStorage.task(&k, &s), Ok(Some(TaskKind::StorageCleanup { scope: StorageScope::All })));
        assert!(Stage::HwSyncReseed.task(&k, &s).is_err(), "no creds, no task");
    }
}
