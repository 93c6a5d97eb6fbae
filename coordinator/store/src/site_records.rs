//! MAAS site rows (`bare-metal-lifecycle.md` §3): sites, their profiles, per-node power
//! credential overrides and RoCE assignments, independent of any backend.
//!
//! A site is one MAAS region: identity, connectivity and the *paths* of its secrets in the
//! secret store (§3.2: the store never holds a secret value, so no listing, event or backup
//! of it can leak one). A profile is a policy bundle applied to the workflows that run
//! against the site (§3.7); every site gets a default profile when it is created.
//!
//! The site's configuration and a profile's policy are stored as one JSON document each: they
//! are read whole and written whole (a PATCH is read, merge, validate, compare-and-set on the
//! row's `revision`), and nothing queries inside them. Validation lives in
//! the engine's `sites`; a row here is always a validated one.

use drover_proto::states::HostLifecycle;
use drover_proto::time::Time;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{NewAudit, NewEvent};

/// Whether a site takes new work, its connectivity, a profile's policy and what an override
/// matches on: the API's own types ([`drover_proto::api::sites`]).
pub use drover_proto::api::sites::{ProfilePolicy, SelectorType, SiteConfig, SiteStatus};

/// Where a site's secrets live in the secret store, and when each was last written. Paths
/// only: the values never enter this store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SiteSecrets {
    /// `{"token": "<consumer_key>:<token_key>:<token_secret>"}`.
    pub api_token_path: String,
    /// `{"user", "pass"}`: the site's default BMC credentials.
    pub default_power_path: String,
    /// `{"password"}`: the deploy user's password.
    pub deploy_password_path: String,
    /// When the API token was last written (after a successful probe).
    #[serde(default)]
    pub api_token_set_at: Option<i64>,
    /// When the default power credentials were last written.
    #[serde(default)]
    pub default_power_set_at: Option<i64>,
    /// When the deploy password was last written.
    #[serde(default)]
    pub deploy_password_set_at: Option<i64>,
}

/// A MAAS site.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Site {
    /// Its id.
    pub id: Uuid,
    /// Unique among sites, e.g. `dc1-maas`.
    pub name: String,
    /// Active or disabled.
    pub status: SiteStatus,
    /// Connectivity and defaults.
    pub config: SiteConfig,
    /// The profile workflows use when a request names none.
    pub default_profile_id: Uuid,
    /// Secret paths and when they were written.
    pub secrets: SiteSecrets,
    /// Bumped by every update: the compare-and-set token of a PATCH.
    pub revision: u64,
    /// Created.
    pub created_at: Time,
    /// Last changed.
    pub updated_at: Time,
}

/// A site profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// Its id.
    pub id: Uuid,
    /// The site it belongs to.
    pub site_id: Uuid,
    /// Unique within the site, e.g. `gpu-default`.
    pub name: String,
    /// Free text.
    pub description: Option<String>,
    /// Active or disabled (a disabled profile starts no new work).
    pub status: SiteStatus,
    /// The policy.
    pub policy: ProfilePolicy,
    /// Compare-and-set token.
    pub revision: u64,
    /// Created.
    pub created_at: Time,
    /// Last changed.
    pub updated_at: Time,
}

/// A per-node power-credential override.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PowerOverride {
    /// Its id.
    pub id: Uuid,
    /// The site.
    pub site_id: Uuid,
    /// What it matches on.
    pub selector_type: SelectorType,
    /// The value, normalised (MACs lowercase with colons, addresses canonical).
    pub selector_value: String,
    /// Where its `{"user","pass"}` lives in the secret store.
    pub secret_path: String,
    /// Only active overrides are selected.
    pub status: SiteStatus,
    /// Created.
    pub created_at: Time,
    /// Last changed.
    pub updated_at: Time,
}

/// One RoCE address assignment (§3.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoceAssignment {
    /// Its id.
    pub id: Uuid,
    /// The site.
    pub site_id: Uuid,
    /// The node.
    pub hostname: String,
    /// The node's interface.
    pub interface: String,
    /// Address and prefix, e.g. `172.30.9.61/31`.
    pub ipv4_cidr: String,
    /// Created.
    pub created_at: Time,
    /// Last changed.
    pub updated_at: Time,
}

/// One row of a RoCE bulk upsert; `(site, hostname, interface)` is the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewRoce {
    /// The node.
    pub hostname: String,
    /// The node's interface.
    pub interface: String,
    /// Address and prefix.
    pub ipv4_cidr: String,
}

/// What a RoCE bulk upsert did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RoceUpsert {
    /// Rows that did not exist.
    pub created: u64,
    /// Rows whose address changed.
    pub updated: u64,
    /// Rows already as given.
    pub unchanged: u64,
}

/// The event and the audit record a site change writes in its own transaction.
#[derive(Debug, Clone, PartialEq)]
pub struct ChangeLog {
    /// The event (kind `maas.site.*`, the site id in `data.siteId`).
    pub event: NewEvent,
    /// The operator's action.
    pub audit: NewAudit,
}

/// The binding of a host to its MAAS machine (§6.5, `node_maas_state`): which machine the
/// host is, and what MAAS last said about it. The current truth; jobs are the history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaasBinding {
    /// The Drover host.
    pub host_id: Uuid,
    /// The site whose MAAS holds the machine.
    pub site_id: Uuid,
    /// MAAS's id of the machine.
    pub system_id: String,
    /// The BMC address the host was onboarded with.
    pub ipmi_ip: Option<String>,
    /// The PXE MAC, once observed.
    pub pxe_mac: Option<String>,
    /// What MAAS last reported.
    pub observed: Option<MaasObservation>,
    /// The open drift's details (rule, MAAS status, expectation), if one is open.
    pub drift: Option<serde_json::Value>,
    /// When the open drift was detected.
    pub drift_detected_at: Option<Time>,
    /// When the last drift was resolved.
    pub drift_resolved_at: Option<Time>,
    /// The details of a drift an operator resolved while its condition still held: the
    /// reconciler does not open it again until the pair has been seen healthy.
    pub acknowledged: Option<serde_json::Value>,
    /// Bound.
    pub created_at: Time,
    /// Last changed.
    pub updated_at: Time,
}

impl MaasBinding {
    /// A new binding of `host_id` to machine `system_id` of `site_id`, made at `at`: nothing
    /// observed yet, no drift.
    pub fn new(host_id: Uuid, site_id: Uuid, system_id: &str, ipmi_ip: Option<String>, pxe_mac: Option<String>, at: Time) -> MaasBinding {
        MaasBinding {
            host_id,
            site_id,
            system_id: system_id.to_owned(),
            ipmi_ip,
            pxe_mac,
            observed: None,
            drift: None,
            drift_detected_at: None,
            drift_resolved_at: None,
            acknowledged: None,
            created_at: at,
            updated_at: at,
        }
    }
}

/// What MAAS reported about a bound machine at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaasObservation {
    /// Its status name, e.g. `Deployed`.
    pub status: String,
    /// `on`, `off`, `unknown` or `error`.
    pub power_state: String,
    /// Its addresses.
    pub ips: Vec<String>,
    /// When it was read.
    pub at: Time,
}

/// A bound host as a reconciler pass reads it: the binding, the host's lifecycle and flag,
/// and the kinds of the unfinished jobs on it (a MAAS workflow in flight changes what MAAS is
/// expected to show, §7.3).
#[derive(Debug, Clone, PartialEq)]
pub struct ReconcileRow {
    /// The binding.
    pub binding: MaasBinding,
    /// The host's name.
    pub hostname: String,
    /// The host's lifecycle.
    pub state: HostLifecycle,
    /// Its schedulable flag.
    pub schedulable: bool,
    /// Kinds of its unfinished jobs.
    pub jobs: Vec<String>,
}

/// What a pass does to a binding's drift record.
#[derive(Debug, Clone, PartialEq)]
pub enum DriftWrite {
    /// Leave it.
    Keep,
    /// Open a drift with these details (an open one keeps its detection time).
    Open(serde_json::Value),
    /// The pair is healthy again: close the open drift (auto-heal) and forget an
    /// acknowledged one, so a recurrence is a new drift.
    Heal,
}

/// One bound host's changes from a reconciler pass, applied together.
#[derive(Debug, Clone, PartialEq)]
pub struct ReconcileChange {
    /// The host.
    pub host_id: Uuid,
    /// The lifecycle the plan was made on: if the host has moved since, the whole change is
    /// skipped (the next pass judges it afresh).
    pub expected_state: HostLifecycle,
    /// A new observation to record.
    pub observation: Option<MaasObservation>,
    /// The drift record.
    pub drift: DriftWrite,
    /// Quarantine the host (`active` → `quarantined`, schedulable = false) with this reason.
    pub quarantine: Option<String>,
    /// Alerts and notes (kind `maas.drift.*`).
    pub events: Vec<NewEvent>,
    /// A repair job to create with the drift it answers (a MAAS workflow).
    pub job: Option<super::NewJob>,
}

/// What a batch did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReconcileApplied {
    /// Changes written.
    pub applied: u64,
    /// Hosts whose lifecycle moved since the snapshot (or whose binding is gone): skipped.
    pub skipped: Vec<Uuid>,
}
