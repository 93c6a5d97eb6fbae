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
//! [`crate::sites`]; a row here is always a validated one.

use std::fmt;
use std::str::FromStr;

use drover_proto::states::HostLifecycle;
use drover_proto::time::Time;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{NewAudit, NewEvent};

/// Whether a site (or a profile, or an override) takes new work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SiteStatus {
    /// Takes new work.
    Active,
    /// Refuses new work; running work finishes (§3.5).
    Disabled,
}

impl SiteStatus {
    /// The stable string form.
    pub const fn as_str(self) -> &'static str {
        match self {
            SiteStatus::Active => "active",
            SiteStatus::Disabled => "disabled",
        }
    }
}

impl fmt::Display for SiteStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SiteStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "active" => Ok(SiteStatus::Active),
            "disabled" => Ok(SiteStatus::Disabled),
            other => Err(format!("{other:?} is not a status (active, disabled)")),
        }
    }
}

/// A site's connectivity and defaults (§3.1, §3.6): everything but identity, status and
/// secrets. Also the API's shape for these fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SiteConfig {
    /// The Drover region this MAAS serves.
    pub region_code: String,
    /// MAAS's base URL, e.g. `http://10.176.46.1:5240/MAAS` (no credentials, query or fragment).
    pub api_base_url: String,
    /// PXE interface on the MAAS server side, e.g. `ens19`.
    pub pxe_iface: String,
    /// PXE VLAN id.
    pub pxe_vlan_vid: u16,
    /// PXE interface on the node side, e.g. `eno8303`.
    pub node_pxe_iface: String,
    /// The one deploy identity of the site (§3.6: site-scoped, not profile-scoped).
    pub deploy_user: String,
    /// The interface the deploy user reaches the node on.
    pub deploy_ssh_iface: String,
    /// Resolvers handed to deployed nodes.
    pub upstream_dns_servers: Vec<String>,
    /// PEM CA certificate(s) MAAS's HTTPS endpoint is verified against; `None`: plain HTTP
    /// or publicly trusted. Not a secret.
    #[serde(default)]
    pub maas_ca_pem: Option<String>,
    /// MAAS capabilities (from its version endpoint) every workflow on this site needs; the
    /// preflight refuses to start when one is missing (§4.14).
    #[serde(default)]
    pub required_capabilities: Vec<String>,
}

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

/// A profile's policy (§3.6, §3.7): how onboarding, reimage and decommission behave on the
/// site. Also the API's shape; every field has the seed's default.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ProfilePolicy {
    /// OS to deploy, e.g. `ubuntu/noble` (profile-scoped so one site can serve several shapes).
    pub distro_series: String,
    /// MAAS architecture, e.g. `amd64/generic`.
    pub architecture: String,
    /// Profile override of the site's PXE interface (MAAS side).
    pub pxe_iface: Option<String>,
    /// Profile override of the site's node-side PXE interface.
    pub node_pxe_iface: Option<String>,
    /// Profile override of the site's PXE VLAN.
    pub pxe_vlan_vid: Option<u16>,
    /// Refuse to onboard when the PXE prerequisites cannot be verified.
    pub strict_pxe_preflight: bool,
    /// Configure RoCE phase 2 from the site's assignments.
    pub enable_phase2_roce: bool,
    /// Require MAAS hardware sync (stays true for MAAS-managed nodes in v1).
    pub require_hw_sync: bool,
    /// MAAS hardware-sync interval.
    pub hardware_sync_interval_secs: u64,
    /// Release without erasing when an erasing release fails.
    pub release_fallback_no_erase: bool,
    /// Redeploy once more after a datasource / cloud-init class deploy failure.
    pub enable_deploy_retry_on_datasource_failure: bool,
    /// How many such redeploys.
    pub max_deploy_retry_attempts: u32,
    /// Claim the sole New machine when nothing matches more strongly (§4.16; unsafe, off).
    pub auto_claim_single_new_machine: bool,
    /// Onboardings of one batch running at once on this site.
    pub batch_max_parallel: u32,
    /// Infra-owned bootstrap bundle run at first boot before Drover's bootstrap.
    pub site_bootstrap_bundle_ref: Option<String>,
    /// Lifetime of the enrollment token baked into a node's cloud-init.
    pub enrollment_token_ttl_secs: u64,
    /// Block-device model pattern (case-insensitive substring) that picks the boot disk.
    pub boot_disk_pattern: String,
    /// §4.14: how long discovery may take.
    pub discovery_timeout_secs: u64,
    /// §4.14: how long commissioning may take.
    pub commission_timeout_secs: u64,
    /// §4.14: how long a deployment may take.
    pub deploy_timeout_secs: u64,
    /// §4.14: how long seeding hardware sync may take.
    pub hw_sync_seed_timeout_secs: u64,
    /// §4.14: how long hardware sync may take to report healthy.
    pub hw_sync_health_timeout_secs: u64,
    /// §4.14: how long the agent may take to enroll after deployment.
    pub enrollment_timeout_secs: u64,
}

impl Default for ProfilePolicy {
    fn default() -> Self {
        ProfilePolicy {
            distro_series: "ubuntu/noble".into(),
            architecture: "amd64/generic".into(),
            pxe_iface: None,
            node_pxe_iface: None,
            pxe_vlan_vid: None,
            strict_pxe_preflight: true,
            enable_phase2_roce: true,
            require_hw_sync: true,
            hardware_sync_interval_secs: 900,
            release_fallback_no_erase: true,
            enable_deploy_retry_on_datasource_failure: true,
            max_deploy_retry_attempts: 1,
            auto_claim_single_new_machine: false,
            batch_max_parallel: 10,
            site_bootstrap_bundle_ref: None,
            enrollment_token_ttl_secs: 7200,
            boot_disk_pattern: "BOSS".into(),
            discovery_timeout_secs: 900,
            commission_timeout_secs: 1800,
            deploy_timeout_secs: 2400,
            hw_sync_seed_timeout_secs: 600,
            hw_sync_health_timeout_secs: 1800,
            enrollment_timeout_secs: 1800,
        }
    }
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

/// What a power-credential override matches on (§3.2.1), in selection order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SelectorType {
    /// The node's PXE MAC address (most specific).
    PxeMac,
    /// The node's BMC address.
    IpmiIp,
    /// The node's hostname.
    Hostname,
}

impl SelectorType {
    /// The stable string form.
    pub const fn as_str(self) -> &'static str {
        match self {
            SelectorType::PxeMac => "pxe_mac",
            SelectorType::IpmiIp => "ipmi_ip",
            SelectorType::Hostname => "hostname",
        }
    }
}

impl fmt::Display for SelectorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SelectorType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "pxe_mac" => Ok(SelectorType::PxeMac),
            "ipmi_ip" => Ok(SelectorType::IpmiIp),
            "hostname" => Ok(SelectorType::Hostname),
            other => Err(format!("{other:?} is not a selector type (pxe_mac, ipmi_ip, hostname)")),
        }
    }
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
