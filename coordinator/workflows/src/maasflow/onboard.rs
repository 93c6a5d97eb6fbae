//! The onboarding workflow's durable state (`bare-metal-lifecycle.md` §4.2.1, §4.5, §4.12):
//! the request stored as the job's `input` ([`OnboardingRequest`]), the read model stored as
//! its `progress` ([`OnboardProgress`]), and the pure bookkeeping every step goes through —
//! advancing a stage, failing by class (§4.7) with the compensation of §4.6, and the time
//! limits of §4.14.
//!
//! An onboarding is a job of kind [`KIND`] with no host at first (the host record is created
//! by a stage), so one store transaction per step keeps the job, its events and its audit
//! together, and a restarted coordinator picks it up from what is stored.

use drover_proto::states::JobState;
use drover_proto::time::Time;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::taxonomy::{Compensation, Handling, MaasFailureClass, MaasStage, Workflow};
use drover_store::ProfilePolicy;

/// The job kind of an onboarding.
pub const KIND: &str = Workflow::Onboard.kind();

/// Most stage events kept in the read model (the oldest are dropped first; the event stream
/// keeps everything).
pub const MAX_EVENTS: usize = 200;

/// Most characters of an upstream snippet in the diagnostics.
pub const SNIPPET_MAX: usize = 400;

/// What was asked: the job's `input`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OnboardingRequest {
    /// The site's name.
    pub site: String,
    /// The profile's name.
    pub profile: String,
    /// The hardware SKU, informational.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sku: Option<String>,
    /// The node's hostname (lowercase).
    pub hostname: String,
    /// The node's BMC address.
    pub ipmi_ip: String,
    /// The PXE MAC, when the operator knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pxe_mac: Option<String>,
    /// The batch it belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_id: Option<Uuid>,
    /// Who asked (operator name and role).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requester: Option<String>,
    /// The existing host a reimage or decommission works on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_id: Option<Uuid>,
    /// The MAAS machine a reimage or decommission works on (from the host's binding).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_id: Option<String>,
    /// The job (reimage, full decommission) this workflow is the MAAS half of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_job_id: Option<Uuid>,
    /// The release's erase (reimage, decommission).
    #[serde(default)]
    pub erase: EraseMode,
    /// Delete the machine from MAAS at the end of a decommission (default: keep it).
    #[serde(default)]
    pub remove_maas_record: bool,
}

impl OnboardingRequest {
    /// What the workflow is, for MAAS comments and messages.
    pub fn workflow_name(&self) -> &'static str {
        if self.parent_job_id.is_some() { "reimage or decommission" } else { "onboarding" }
    }
}

/// How a release erases the machine's disks (§5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EraseMode {
    /// No erase.
    #[default]
    None,
    /// MAAS's quick erase (wipe the starts and ends of disks).
    Quick,
    /// Secure erase where the disks support it (falls back to a full wipe in MAAS).
    Secure,
}

impl EraseMode {
    /// The stable name.
    pub const fn as_str(self) -> &'static str {
        match self {
            EraseMode::None => "none",
            EraseMode::Quick => "quick",
            EraseMode::Secure => "secure",
        }
    }
}

/// What a stage event says happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventStatus {
    /// The stage began (or began again).
    Started,
    /// It reached its goal.
    Succeeded,
    /// It failed (the details say why and the class).
    Failed,
    /// A compensation ran for it (a release back to Ready).
    Compensated,
    /// It had nothing to do (already done, or off by policy).
    Skipped,
}

impl EventStatus {
    /// The stable string form (the serde form).
    pub const fn as_str(self) -> &'static str {
        match self {
            EventStatus::Started => "started",
            EventStatus::Succeeded => "succeeded",
            EventStatus::Failed => "failed",
            EventStatus::Compensated => "compensated",
            EventStatus::Skipped => "skipped",
        }
    }
}

/// One entry of the per-stage history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StageEvent {
    /// The stage.
    pub stage: MaasStage,
    /// What happened.
    pub status: EventStatus,
    /// The stage's attempt.
    pub attempt: u32,
    /// When.
    pub at: Time,
    /// Why, or what was done (never a secret).
    pub details: String,
}

/// The last MAAS observation (§4.12), for operators: the API's own type, stored as is.
pub use drover_proto::api::onboardings::Diagnostics;

/// The read model: the job's `progress`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OnboardProgress {
    /// The current stage.
    pub stage: MaasStage,
    /// Its attempt (1 on first entry).
    pub attempt: u32,
    /// When the current attempt of the stage began (its time limit counts from here).
    pub stage_started_at: Option<Time>,
    /// When the first stage started.
    pub started_at: Option<Time>,
    /// The MAAS machine claimed.
    pub system_id: Option<String>,
    /// This run asked MAAS to create the machine.
    #[serde(default)]
    pub created_in_maas: bool,
    /// The machines MAAS listed when discovery first looked (what appears later appeared
    /// during this run).
    #[serde(default)]
    pub known_before: Option<Vec<String>>,
    /// The Drover host created for the node.
    pub host_id: Option<Uuid>,
    /// The boot disk chosen.
    pub boot_disk: Option<String>,
    /// The flat layout was applied.
    #[serde(default)]
    pub layout_applied: bool,
    /// sha256 of the user data last deployed (its manifest; never the text, which holds
    /// secrets).
    pub user_data_sha256: Option<String>,
    /// Redeploys after a datasource-class failure decided so far.
    #[serde(default)]
    pub deploy_retries: u32,
    /// Deploy calls MAAS accepted so far (fewer than `deploy_retries + 1`: a decided redeploy
    /// is still to be made).
    #[serde(default)]
    pub deploy_calls: u32,
    /// The `node.hw_sync_reseed` task of the current EnsureHardwareSync attempt.
    #[serde(default)]
    pub reseed_task_id: Option<String>,
    /// The release fell back to no erase after the erase failed.
    #[serde(default)]
    pub erase_fallback_used: bool,
    /// The power-off was asked.
    #[serde(default)]
    pub power_off_asked: bool,
    /// An operator's adoption named this machine.
    #[serde(default)]
    pub adopt_system_id: Option<String>,
    /// Why it stopped, as a class.
    pub failure_class: Option<MaasFailureClass>,
    /// The stage it failed at.
    pub failed_stage: Option<MaasStage>,
    /// The latest status line.
    pub message: String,
    /// What an operator should do now.
    pub recommended_action: Option<String>,
    /// The last MAAS observation.
    pub diagnostics: Option<Diagnostics>,
    /// The pending compensation (a release back to Ready) while `compensating`.
    #[serde(default)]
    pub compensation: Option<PendingCompensation>,
    /// Per-stage history, oldest first (at most [`MAX_EVENTS`]).
    #[serde(default)]
    pub events: Vec<StageEvent>,
}

/// Where a compensation leads once MAAS has released the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PendingCompensation {
    /// A failure: stop in `failed_manual_intervention`.
    ThenFail,
    /// `restart_clean`: start over from the first stage.
    ThenRestart,
    /// `cancel`: end `cancelled`.
    ThenCancel,
}

impl Default for OnboardProgress {
    fn default() -> Self {
        OnboardProgress {
            stage: MaasStage::LoadSite,
            attempt: 0,
            stage_started_at: None,
            started_at: None,
            system_id: None,
            created_in_maas: false,
            known_before: None,
            host_id: None,
            boot_disk: None,
            layout_applied: false,
            user_data_sha256: None,
            deploy_retries: 0,
            deploy_calls: 0,
            reseed_task_id: None,
            erase_fallback_used: false,
            power_off_asked: false,
            adopt_system_id: None,
            failure_class: None,
            failed_stage: None,
            message: "waiting to start".into(),
            recommended_action: None,
            diagnostics: None,
            compensation: None,
            events: Vec::new(),
        }
    }
}

impl OnboardProgress {
    /// From the stored `progress` (`null` before the first step).
    pub fn from_value(v: &serde_json::Value) -> Result<OnboardProgress, serde_json::Error> {
        if v.is_null() { Ok(OnboardProgress::default()) } else { serde_json::from_value(v.clone()) }
    }

    /// As stored.
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }

    /// The index of the current stage in its workflow's list.
    pub fn stage_index(&self, workflow: Workflow) -> usize {
        workflow.stages().iter().position(|s| *s == self.stage).unwrap_or(0)
    }

    /// Appends a stage event, dropping the oldest beyond [`MAX_EVENTS`].
    pub fn record(&mut self, status: EventStatus, at: Time, details: impl Into<String>) {
        let details = details.into();
        self.message = format!("{}: {}", self.stage.as_str(), details);
        self.events.push(StageEvent { stage: self.stage, status, attempt: self.attempt, at, details });
        if self.events.len() > MAX_EVENTS {
            let extra = self.events.len() - MAX_EVENTS;
            self.events.drain(..extra);
        }
    }

    /// Enters `stage` (attempt 1, its clock restarted), with a `started` event.
    pub fn enter(&mut self, stage: MaasStage, now: Time) {
        self.stage = stage;
        self.attempt = 1;
        self.stage_started_at = Some(now);
        self.started_at.get_or_insert(now);
        self.record(EventStatus::Started, now, "started");
    }

    /// The current stage reached its goal: a `succeeded` (or `skipped`) event, then the next
    /// stage is entered. Returns false when it was the last stage (the onboarding is done).
    pub fn advance(&mut self, workflow: Workflow, now: Time, skipped: bool, details: impl Into<String>) -> bool {
        self.record(if skipped { EventStatus::Skipped } else { EventStatus::Succeeded }, now, details);
        let list = workflow.stages();
        let next = list.iter().position(|s| *s == self.stage).and_then(|i| list.get(i + 1)).copied();
        match next {
            Some(s) => {
                self.enter(s, now);
                true
            }
            None => {
                self.message = match workflow {
                    Workflow::Onboard => "onboarded: the node is deployed, synced and enrolled",
                    Workflow::Reimage => "reimaged: a fresh OS is deployed, synced, and the host re-enrolled",
                    Workflow::Decommission => "released, powered off and handled in MAAS",
                    Workflow::Resync => "re-synced: hardware sync is healthy again",
                }
                .into();
                false
            }
        }
    }

    /// Clears the failure fields (a recovery action resumes the work).
    pub fn clear_failure(&mut self) {
        self.failure_class = None;
        self.failed_stage = None;
        self.recommended_action = None;
    }
}

/// What a failure does to the onboarding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureOutcome {
    /// Try the stage again in place (attempt + 1); the job stays `running`.
    RetryInPlace,
    /// Release the machine back to Ready first (`compensating`), then stop for an operator.
    CompensateThenStop,
    /// Stop in this state.
    Stop(JobState),
}

/// §4.6 and §4.7 together: a failure of `class` at `stage` on its `attempt`, with at most
/// `max_attempts` automatic attempts per stage.
pub fn on_failure(stage: MaasStage, class: MaasFailureClass, attempt: u32, max_attempts: u32) -> FailureOutcome {
    let stop_state = match class.default_handling() {
        Handling::FailImmediately => JobState::FailedRetryable,
        Handling::ManualIntervention => JobState::FailedManualIntervention,
        Handling::BoundedRetry if attempt < max_attempts && class == MaasFailureClass::UpstreamTransient => {
            return FailureOutcome::RetryInPlace;
        }
        // A timeout or a definite MAAS failure after the stage's own bounded handling (the
        // datasource redeploy, repeated commissioning) needs an operator's look.
        Handling::BoundedRetry if stage.compensation() == Compensation::ReleaseToReady => JobState::FailedManualIntervention,
        Handling::BoundedRetry => JobState::FailedRetryable,
    };
    if stage.compensation() == Compensation::ReleaseToReady { FailureOutcome::CompensateThenStop } else { FailureOutcome::Stop(stop_state) }
}

/// Records a failure on the read model: class, stage, message and recommended action.
pub fn note_failure(p: &mut OnboardProgress, class: MaasFailureClass, message: &str, now: Time) {
    p.failure_class = Some(class);
    p.failed_stage = Some(p.stage);
    p.recommended_action = Some(class.recommended_action().to_owned());
    p.record(EventStatus::Failed, now, format!("{class}: {message}"));
}

/// The stage's time limit has passed (§4.14): its class, when it has a limit.
pub fn timed_out(p: &OnboardProgress, now: Time, policy: &ProfilePolicy) -> Option<(u64, MaasFailureClass)> {
    let (limit, class) = p.stage.timeout(policy)?;
    let started = p.stage_started_at?;
    (now.secs_since(started) >= limit as i64).then_some((limit, class))
}

/// The domain event a move into `to` emits (§8.0), if any: `node.onboarding.*` for
/// onboardings, `node.decommission.*` for decommission jobs (the job engine emits those; the
/// MAAS half of a reimage or decommission emits none of its own).
pub fn domain_event(workflow: Workflow, from: JobState, to: JobState) -> Option<String> {
    if from == to {
        return None;
    }
    let prefix = match workflow {
        Workflow::Onboard => "node.onboarding",
        Workflow::Reimage | Workflow::Decommission => "node.decommission",
        // A re-sync is the reconciler's repair; its alert is the drift's, not a domain event.
        Workflow::Resync => return None,
    };
    let what = match to {
        JobState::Running if from == JobState::Pending => "started",
        JobState::Completed | JobState::Reconciled => "completed",
        JobState::FailedRetryable => "failed",
        JobState::FailedManualIntervention => "manual_intervention_required",
        JobState::Cancelled => "cancelled",
        _ => return None,
    };
    Some(format!("{prefix}.{what}"))
}

impl MaasStage {
    /// The stable string form.
    pub fn as_str(self) -> &'static str {
        match self {
            MaasStage::LoadSite => "load_site",
            MaasStage::ResolvePowerCredentials => "resolve_power_credentials",
            MaasStage::CreateOrFind => "create_or_find",
            MaasStage::Commission => "commission",
            MaasStage::WaitReady => "wait_ready",
            MaasStage::ConfigureStorage => "configure_storage",
            MaasStage::RocePhase2 => "roce_phase2",
            MaasStage::PxeInterfaceAuto => "pxe_interface_auto",
            MaasStage::CreateHostAndRenderCloudInit => "create_host_and_render_cloud_init",
            MaasStage::Deploy => "deploy",
            MaasStage::WaitDeployed => "wait_deployed",
            MaasStage::EnsureHardwareSync => "ensure_hardware_sync",
            MaasStage::WaitHardwareSyncHealthy => "wait_hardware_sync_healthy",
            MaasStage::WaitAgentEnrollment => "wait_agent_enrollment",
            MaasStage::ReleaseMachine => "release_machine",
            MaasStage::WaitReleased => "wait_released",
            MaasStage::PowerOff => "power_off",
            MaasStage::RemoveMaasRecord => "remove_maas_record",
            MaasStage::AssertHardwareSync => "assert_hardware_sync",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> Time {
        Time::from_unix(1_800_000_000 + s).expect("time")
    }

    #[test]
    fn stage_names_match_their_serde_form() {
        for s in MaasStage::ALL {
            assert_eq!(serde_json::to_value(s).expect("json"), serde_json::json!(s.as_str()));
        }
    }

    #[test]
    fn advancing_walks_every_stage_once_then_finishes() {
        let mut p = OnboardProgress::default();
        p.enter(MaasStage::LoadSite, t(0));
        let mut seen = vec![p.stage];
        while p.advance(Workflow::Onboard, t(seen.len() as i64), false, "ok") {
            seen.push(p.stage);
        }
        assert_eq!(seen, MaasStage::ALL);
        assert_eq!(p.started_at, Some(t(0)));
        assert!(p.events.iter().filter(|e| e.status == EventStatus::Succeeded).count() == MaasStage::ALL.len());
    }

    #[test]
    fn events_are_bounded() {
        let mut p = OnboardProgress::default();
        for i in 0..(MAX_EVENTS as i64 + 50) {
            p.record(EventStatus::Started, t(i), "x");
        }
        assert_eq!(p.events.len(), MAX_EVENTS);
        assert_eq!(p.events[0].at, t(50));
    }

    #[test]
    fn failures_follow_the_class_and_the_stage() {
        use MaasFailureClass as C;
        use MaasStage as S;
        assert_eq!(on_failure(S::CreateOrFind, C::UpstreamTransient, 1, 3), FailureOutcome::RetryInPlace);
        assert_eq!(on_failure(S::CreateOrFind, C::UpstreamTransient, 3, 3), FailureOutcome::Stop(JobState::FailedRetryable));
        assert_eq!(on_failure(S::ConfigureStorage, C::HardwareMismatch, 1, 3), FailureOutcome::Stop(JobState::FailedManualIntervention));
        assert_eq!(on_failure(S::CreateOrFind, C::StateAmbiguity, 1, 3), FailureOutcome::Stop(JobState::FailedManualIntervention));
        assert_eq!(on_failure(S::LoadSite, C::InputConfigError, 1, 3), FailureOutcome::Stop(JobState::FailedRetryable));
        assert_eq!(on_failure(S::WaitDeployed, C::DeployCloudInitFailure, 1, 3), FailureOutcome::CompensateThenStop);
        // Post-deploy: MAAS is left alone.
        assert_eq!(on_failure(S::WaitAgentEnrollment, C::AgentEnrollmentFailure, 1, 3), FailureOutcome::Stop(JobState::FailedRetryable));
    }

    #[test]
    fn limits_count_from_the_stage_attempt() {
        let policy = ProfilePolicy { deploy_timeout_secs: 100, ..ProfilePolicy::default() };
        let mut p = OnboardProgress::default();
        p.enter(MaasStage::WaitDeployed, t(0));
        assert_eq!(timed_out(&p, t(99), &policy), None);
        assert_eq!(timed_out(&p, t(100), &policy), Some((100, MaasFailureClass::DeployCloudInitFailure)));
        p.enter(MaasStage::ConfigureStorage, t(0));
        assert_eq!(timed_out(&p, t(1_000_000), &policy), None);
    }

    #[test]
    fn domain_events_name_the_outcome() {
        let w = Workflow::Onboard;
        assert_eq!(domain_event(w, JobState::Pending, JobState::Running).as_deref(), Some("node.onboarding.started"));
        assert_eq!(domain_event(w, JobState::FailedRetryable, JobState::Running), None);
        assert_eq!(
            domain_event(w, JobState::Running, JobState::FailedManualIntervention).as_deref(),
            Some("node.onboarding.manual_intervention_required")
        );
        assert_eq!(domain_event(w, JobState::Running, JobState::Completed).as_deref(), Some("node.onboarding.completed"));
        assert_eq!(domain_event(Workflow::Reimage, JobState::Running, JobState::Completed).as_deref(), Some("node.decommission.completed"));
    }
}
