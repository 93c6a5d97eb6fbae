//! MAAS drift and reconciliation (`GET /v1/maas/reconciliation/status`, `…/drift`,
//! `POST …/run`, `POST …/drift/{host}/resolve`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::states::HostLifecycle;
use crate::time::Time;

/// What the reconciler does about a drift, with its detail.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "action")]
pub enum DriftAction {
    /// Nothing.
    None,
    /// Quarantine the host (no new work; tenants are not released).
    Quarantine,
    /// Record the machine's new addresses on the host.
    UpdateAddresses {
        /// What MAAS lists now.
        ips: Vec<String>,
    },
    /// Release the machine and power it off in MAAS.
    ReleaseAndPowerOff,
    /// Re-assert hardware sync and re-seed the credentials.
    Resync,
}

impl DriftAction {
    /// The wire name.
    pub const fn as_str(&self) -> &'static str {
        match self {
            DriftAction::None => "none",
            DriftAction::Quarantine => "quarantine",
            DriftAction::UpdateAddresses { .. } => "update_addresses",
            DriftAction::ReleaseAndPowerOff => "release_and_power_off",
            DriftAction::Resync => "resync",
        }
    }
}

/// An open drift: which rule holds, how loud it is, what MAAS showed and what was expected.
/// The coordinator keeps it as this JSON with the binding.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DriftDetails {
    /// The rule (`agent_not_polling`, `released_under_us`, …).
    pub rule: String,
    /// `debug`, `info`, `warn` or `critical`.
    pub severity: String,
    /// The rule in words.
    pub alert: String,
    /// MAAS's status of the machine then.
    pub maas_status: String,
    /// The machine.
    pub system_id: String,
    /// What was expected of MAAS, in words.
    pub expected: String,
    /// What MAAS showed, in words.
    pub observed: String,
    /// What the reconciler does about it.
    pub action: DriftAction,
}

/// A bound host with an open drift.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DriftView {
    /// The host.
    pub host_id: String,
    /// Its name.
    pub hostname: String,
    /// Its MAAS site.
    pub site: String,
    /// Its MAAS machine.
    pub system_id: String,
    /// Its lifecycle state.
    pub state: HostLifecycle,
    /// False while cordoned.
    pub schedulable: bool,
    /// MAAS's status at the last pass that saw the machine.
    pub last_maas_status: Option<String>,
    /// Its power state then.
    pub last_power_state: Option<String>,
    /// Its addresses then.
    pub last_ips: Vec<String>,
    /// When that pass ran.
    pub last_reconciled_at: Option<Time>,
    /// Whether a drift is open.
    pub drift_detected: bool,
    /// The open drift (`None` when its stored details no longer read as such).
    pub drift_details: Option<DriftDetails>,
    /// When it was detected.
    pub drift_detected_at: Option<Time>,
    /// When the last one was resolved.
    pub drift_resolved_at: Option<Time>,
}

/// `{"drift": […]}`: hosts with an open drift, by site then hostname.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriftList {
    /// The hosts.
    pub drift: Vec<DriftView>,
}

/// How a reconciler pass ended.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PassOutcome {
    /// MAAS listed and every batch was written.
    Ok,
    /// MAAS (or the secret store) did not answer, or the pass ran out of time: nothing was
    /// judged from it.
    UpstreamTransient,
    /// The site's configuration or the store stopped it.
    Failed,
}

impl PassOutcome {
    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            PassOutcome::Ok => "ok",
            PassOutcome::UpstreamTransient => "upstream_transient",
            PassOutcome::Failed => "failed",
        }
    }
}

/// What a pass found.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PassReport {
    /// Machines MAAS listed.
    pub machines: u64,
    /// Bound hosts judged.
    pub hosts: u64,
    /// Machines no host is bound to.
    pub unmanaged: u64,
    /// Drifts opened by this pass.
    pub detected: u64,
    /// Drifts healed by this pass.
    pub healed: u64,
    /// Hosts quarantined by this pass.
    pub quarantined: u64,
    /// Open drifts after the pass, by rule.
    pub open_by_rule: BTreeMap<String, u64>,
}

/// One reconciler pass over a site.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunRecord {
    /// The site's name.
    pub site: String,
    /// When the pass began.
    pub started_at: Time,
    /// How long it took.
    pub duration_ms: u64,
    /// How it ended.
    pub outcome: PassOutcome,
    /// Why, when it did not end `ok`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// What the pass found (zeros, and the previous open drifts, when it could not see MAAS).
    #[serde(flatten)]
    pub report: PassReport,
    /// Store changes written.
    pub changes: u64,
    /// Transactions they took.
    pub batches: u64,
    /// Hosts that moved under the pass (judged again next time).
    pub skipped: u64,
}

/// `{"runs": […]}`: the passes `POST …/run` ran.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunList {
    /// One per site.
    pub runs: Vec<RunRecord>,
}

/// One site's reconciliation counts.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SiteReconciliation {
    /// The site's name.
    pub site: String,
    /// `active` or `disabled`.
    pub status: String,
    /// Bound hosts that agree with MAAS.
    pub ok: u64,
    /// Bound hosts with an open drift.
    pub drifted: u64,
    /// Bound hosts no pass has seen yet.
    pub unreconciled: u64,
    /// The last pass since the coordinator started.
    pub last_run: Option<RunRecord>,
}

/// `{"sites": […]}`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReconciliationStatus {
    /// Every site.
    pub sites: Vec<SiteReconciliation>,
}

/// What resolving a drift answers: the host after it.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DriftResolved {
    /// The host.
    pub host_id: String,
    /// Its name.
    pub hostname: String,
    /// Its lifecycle state now.
    pub state: HostLifecycle,
    /// Whether it takes work now.
    pub schedulable: bool,
    /// `acknowledge` or `unquarantine`.
    pub action: String,
    /// When the drift was resolved.
    pub drift_resolved_at: Option<Time>,
}
