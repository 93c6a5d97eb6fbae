//! MAAS workflows (onboard, and the MAAS halves of reimage, decommission and resync):
//! `POST /v1/maas/onboardings[/batch]`, `GET /v1/maas/onboardings[/{id}]`,
//! `GET /v1/maas/onboardings/batches/{id}` and `POST /v1/maas/onboardings/{id}/{action}`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::states::JobState;
use crate::time::Time;

/// The last MAAS observation of the machine, for operators.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Diagnostics {
    /// MAAS's status name, e.g. `Failed deployment`.
    pub maas_status: Option<String>,
    /// MAAS's power state.
    pub power_state: Option<String>,
    /// The addresses MAAS knows.
    #[serde(default)]
    pub ip_addresses: Vec<String>,
    /// A bounded, sanitised extract of what MAAS said (status message, events, error).
    pub upstream_snippet: Option<String>,
}

/// One step of a workflow's history.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OnboardingEvent {
    /// The stage (`enlist`, `commission`, `deploy`, …).
    pub stage: String,
    /// `started`, `succeeded`, `failed`, `compensated` or `skipped`.
    pub status: String,
    /// The stage's attempt.
    pub attempt: u32,
    /// When.
    pub at: Time,
    /// Why, or what was done (never a secret).
    pub details: String,
}

/// A MAAS workflow as the API shows it.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OnboardingView {
    /// Its id (the job's).
    pub onboarding_id: String,
    /// Its batch.
    pub batch_id: Option<String>,
    /// The MAAS site's name.
    pub site: String,
    /// The site profile.
    pub profile: String,
    /// Hardware SKU.
    pub sku: Option<String>,
    /// The node's hostname.
    pub hostname: String,
    /// The node's BMC address.
    pub ipmi_ip: String,
    /// The node's PXE MAC, when the request named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pxe_mac: Option<String>,
    /// The job state.
    pub state: JobState,
    /// The current stage.
    pub stage: String,
    /// Its index in `stages`.
    pub stage_index: usize,
    /// Every stage, in order.
    pub stages: Vec<String>,
    /// The current stage's attempt.
    pub attempt: u32,
    /// The MAAS machine.
    pub system_id: Option<String>,
    /// The Drover host.
    pub host_id: Option<String>,
    /// Why it stopped, as a class.
    pub failure_class: Option<String>,
    /// The latest status line.
    pub message: String,
    /// What to do now, once stopped.
    pub recommended_action: Option<String>,
    /// The last MAAS observation.
    pub diagnostics: Option<Diagnostics>,
    /// Who asked.
    pub requester: Option<String>,
    /// Created.
    pub created_at: Time,
    /// First stage started.
    pub started_at: Option<Time>,
    /// Finished (completed, reconciled or cancelled).
    pub completed_at: Option<Time>,
    /// Last change.
    pub updated_at: Time,
    /// Per-stage history, oldest first.
    pub events: Vec<OnboardingEvent>,
    /// `onboard`, `reimage`, `decommission` or `resync`.
    pub workflow: String,
    /// The reimage or full decommission job this is the MAAS half of.
    pub parent_job_id: Option<String>,
}

/// `{"onboarding": …}`: one workflow (`GET /v1/maas/onboardings/{id}`, a single create).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OneOnboarding {
    /// The workflow.
    pub onboarding: OnboardingView,
}

/// `{"onboardings": […]}`: the listing.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OnboardingList {
    /// The workflows, oldest first.
    pub onboardings: Vec<OnboardingView>,
}

/// What a batch create answers: the batch's id and one onboarding per node.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreatedBatch {
    /// The batch's id.
    pub batch_id: String,
    /// One onboarding per node.
    pub onboardings: Vec<OnboardingView>,
}

/// `GET /v1/maas/onboardings/batches/{id}`: a batch's counts by state, and its onboardings.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BatchView {
    /// The batch's id.
    pub batch_id: String,
    /// Its site.
    pub site: String,
    /// How many onboardings it has.
    pub total: u64,
    /// How many are in each state.
    pub counts: BTreeMap<JobState, u64>,
    /// Its onboardings.
    pub onboardings: Vec<OnboardingView>,
}

/// What a recovery action answers: the workflow after it, and what it did.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OnboardingActionResponse {
    /// The workflow after the action.
    pub onboarding: OnboardingView,
    /// What the action did.
    pub message: String,
}
