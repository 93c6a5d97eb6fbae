//! Hosts: the listing (`GET /v1/hosts`), one host with its certificates and latest health
//! (`GET /v1/hosts/{id}`), and what a lifecycle verb answers (`POST /v1/hosts/{id}/cordon`, …).

use serde::{Deserialize, Serialize};

use crate::report::{HealthReport, ProbeResult};
use crate::states::{HostLifecycle, HostRolloutState};
use crate::time::Time;

/// A host's last check-in as operators see it.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckinView {
    /// When.
    pub at: Time,
    /// The agent's version.
    pub agent_version: String,
    /// The host's boot id then.
    pub boot_id: String,
    /// The NixOS generation it ran.
    pub current_generation: Option<String>,
}

/// A host row. Its id is under both `id` (the key host objects have always had) and `hostId`,
/// the key every other operator answer (tasks, jobs, events, lifecycle answers) names a host
/// by, so a script can read `hostId` from any answer.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostView {
    /// The host's id.
    pub id: String,
    /// The same id.
    pub host_id: String,
    /// Its hostname.
    pub hostname: String,
    /// Its lifecycle state.
    pub state: HostLifecycle,
    /// False while cordoned.
    pub schedulable: bool,
    /// Enrolled.
    pub created_at: Time,
    /// Last change of its record.
    pub updated_at: Time,
    /// Its last check-in (`None` before the first).
    pub last_checkin: Option<CheckinView>,
    /// The channel of the rollout opened last that names it (`None` when none does).
    pub channel: Option<String>,
    /// Its wave in that rollout.
    pub wave: Option<u32>,
    /// That rollout.
    pub rollout_id: Option<String>,
    /// Its state in that rollout.
    pub rollout_state: Option<HostRolloutState>,
}

/// A certificate as operators see it (no key material: the CA never had the host's key).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CertView {
    /// Serial, lowercase hex.
    pub serial: String,
    /// `host` or `operator`.
    pub kind: String,
    /// Validity start.
    pub not_before: Time,
    /// Validity end.
    pub not_after: Time,
    /// Whether it was revoked.
    pub revoked: bool,
    /// When.
    pub revoked_at: Option<Time>,
}

/// What a host's agent last said of itself: its health report (GPUs, disks, load, memory,
/// failed units, its state directory) and its probe results. The coordinator keeps it as this
/// JSON in the store.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostHealthReport {
    /// The health report, when the check-in carried one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthReport>,
    /// The probe results it carried.
    #[serde(default)]
    pub probes: Vec<ProbeResult>,
}

/// A host's latest report, with when it arrived.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthView {
    /// When it arrived.
    pub reported_at: Time,
    /// The report.
    #[serde(flatten)]
    pub report: HostHealthReport,
}

/// `GET /v1/hosts/{id}`: one host with its certificates and its latest health report.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostDetail {
    /// The host's row.
    #[serde(flatten)]
    pub host: HostView,
    /// Its certificates, revoked ones included.
    pub certificates: Vec<CertView>,
    /// Absent until the host's agent has reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthView>,
}

/// What a lifecycle verb answers: the host after it.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostStateResponse {
    /// The host's id.
    pub host_id: String,
    /// Its hostname.
    pub hostname: String,
    /// Its lifecycle state.
    pub state: HostLifecycle,
    /// Whether it is schedulable (not cordoned).
    pub schedulable: bool,
    /// `retire` and `remove`: the job that owns the host's `draining` / `removing` (created or
    /// resumed by the request); `GET /v1/jobs/{id}` follows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
}
