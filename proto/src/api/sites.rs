//! MAAS sites and what hangs off them (`/v1/maas/sites…`): a site with its connectivity and
//! the paths (never the values) of its secrets, its profiles' policies, per-node power
//! credential overrides, RoCE assignments, and what a probe or a preflight of MAAS answers.
//!
//! [`SiteConfig`] and [`ProfilePolicy`] are also what the coordinator stores: one definition
//! for the store, the API and the CLI.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::time::Time;

/// Whether a site (or a profile, or an override) takes new work.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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

/// A name that is none of the values a field allows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{value:?} is not a {what} ({allowed})")]
pub struct NotOneOf {
    /// What the field holds (`status`, `selector type`).
    pub what: &'static str,
    /// The value given.
    pub value: String,
    /// The values allowed, comma-separated.
    pub allowed: &'static str,
}

impl FromStr for SiteStatus {
    type Err = NotOneOf;
    fn from_str(s: &str) -> Result<Self, NotOneOf> {
        match s {
            "active" => Ok(SiteStatus::Active),
            "disabled" => Ok(SiteStatus::Disabled),
            other => Err(NotOneOf { what: "status", value: other.to_owned(), allowed: "active, disabled" }),
        }
    }
}

/// A site's connectivity and defaults (§3.1, §3.6): everything but identity, status and
/// secrets. Also the API's shape for these fields.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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

/// A profile's policy (§3.6, §3.7): how onboarding, reimage and decommission behave on the
/// site. Also the API's shape; every field has the seed's default.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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

/// What a power-credential override matches on (§3.2.1), in selection order.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
    type Err = NotOneOf;
    fn from_str(s: &str) -> Result<Self, NotOneOf> {
        match s {
            "pxe_mac" => Ok(SelectorType::PxeMac),
            "ipmi_ip" => Ok(SelectorType::IpmiIp),
            "hostname" => Ok(SelectorType::Hostname),
            other => Err(NotOneOf { what: "selector type", value: other.to_owned(), allowed: "pxe_mac, ipmi_ip, hostname" }),
        }
    }
}

/// Where one of a site's secrets lives in the secret store, and when it was last written
/// (`None`: never). The value never leaves the secret store.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecretRef {
    /// The secret store path.
    pub path: String,
    /// When it was last written.
    pub set_at: Option<Time>,
}

/// A site's secrets, by path.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SiteCredentials {
    /// The MAAS API token.
    pub api_token: SecretRef,
    /// The site's default BMC credentials.
    pub default_power: SecretRef,
    /// The deploy user's password.
    pub deploy_password: SecretRef,
}

/// A MAAS site as the API shows it: its configuration's fields, then identity and state.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SiteView {
    /// Its connectivity and defaults.
    #[serde(flatten)]
    pub config: SiteConfig,
    /// Its id.
    pub id: String,
    /// Its unique name.
    pub name: String,
    /// Active or disabled.
    pub status: SiteStatus,
    /// The profile workflows use when a request names none.
    pub default_profile_id: String,
    /// Where its secrets live.
    pub credentials: SiteCredentials,
    /// Bumped by every update (a PATCH's compare-and-set token).
    pub revision: u64,
    /// Created.
    pub created_at: Time,
    /// Last changed.
    pub updated_at: Time,
}

/// A site profile.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProfileView {
    /// Its id.
    pub id: String,
    /// Its site.
    pub site_id: String,
    /// Unique within the site.
    pub name: String,
    /// Free text.
    pub description: Option<String>,
    /// Active or disabled.
    pub status: SiteStatus,
    /// Whether it is the site's default.
    pub default: bool,
    /// Its policy.
    pub policy: ProfilePolicy,
    /// Compare-and-set token.
    pub revision: u64,
    /// Created.
    pub created_at: Time,
    /// Last changed.
    pub updated_at: Time,
}

/// A per-node power-credential override: what it matches and where its credentials live.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OverrideView {
    /// Its id.
    pub id: String,
    /// Its site.
    pub site_id: String,
    /// What it matches on.
    pub selector_type: SelectorType,
    /// The value, normalised.
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

/// One RoCE address assignment.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RoceView {
    /// Its id.
    pub id: String,
    /// The node.
    pub hostname: String,
    /// The node's interface.
    pub interface: String,
    /// Address and prefix, e.g. `172.30.9.61/31`.
    pub ipv4_cidr: String,
    /// Created (absent from a deletion's answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<Time>,
    /// Last changed (absent from a deletion's answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<Time>,
}

/// What a RoCE bulk upsert did.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RoceUpsert {
    /// The site.
    pub site_id: String,
    /// Rows created.
    pub created: u64,
    /// Rows changed.
    pub updated: u64,
    /// Rows already as asked.
    pub unchanged: u64,
}

/// `{"items": […]}`: sites, profiles, overrides or RoCE rows.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", schemars(rename = "Items_of_{T}"))]
pub struct Items<T> {
    /// The rows.
    pub items: Vec<T>,
}

/// A MAAS rack controller, as a probe saw it.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RackController {
    /// MAAS's id.
    pub system_id: String,
    /// Its hostname.
    pub hostname: String,
    /// Its MAAS version, when reported.
    pub version: Option<String>,
}

/// What a successful probe of MAAS learned.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProbeReport {
    /// MAAS's version string, e.g. `3.7.0~beta1`.
    pub version: String,
    /// Its capabilities.
    pub capabilities: Vec<String>,
    /// Its rack controllers.
    pub rack_controllers: Vec<RackController>,
}

/// Why a probe or a preflight failed: who must act, and what is wrong (never a secret).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckFailure {
    /// `upstream_transient` (MAAS away: retry), or the site's or the operator's fault.
    pub class: String,
    /// What is wrong.
    pub message: String,
}

/// `POST /v1/maas/sites/{site}/probe`: 200 either way; `ok` says which.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProbeAnswer {
    /// The site's id.
    pub site_id: String,
    /// Its name.
    pub site: String,
    /// Whether MAAS answered as it should.
    pub ok: bool,
    /// The MAAS asked (on success).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_base_url: Option<String>,
    /// What it said (on success).
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub report: Option<ProbeReport>,
    /// Why not (on failure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<CheckFailure>,
}

/// `POST /v1/maas/sites/{site}/preflight`: 200 either way; `ok` says which.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreflightAnswer {
    /// The site's id.
    pub site_id: String,
    /// Whether a workflow may start.
    pub ok: bool,
    /// The profile in force (on success).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile_id: Option<String>,
    /// Its name (on success).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// What MAAS said (on success).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maas: Option<ProbeReport>,
    /// Why not (on failure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<CheckFailure>,
}
