//! The capability preflight of `bare-metal-lifecycle.md` §4.14: one cheap check every MAAS
//! workflow runs before it starts, so a missing prerequisite fails fast with a class that
//! says who must act, instead of failing half-way through a machine.
//!
//! Checked in order: the site exists and is active; the profile (named, or the site's
//! default) is the site's and active; an API token is written; MAAS answers; the token is
//! accepted; every capability the site or the workflow requires is offered and MAAS has a
//! rack controller. The token is read from the secret store here, at use time, and dropped
//! when the check ends.
//!
//! | failure | class | who acts |
//! |---|---|---|
//! | unknown or disabled site or profile, no token written, token refused | `input_config_error` | an operator fixes the site |
//! | a required capability missing, no rack controller | `site_capability_missing` | MAAS's operators |
//! | MAAS or the secret store unreachable, a backend failure | `upstream_transient` | nobody: retry later |

use std::time::Duration;

use serde::Serialize;
use uuid::Uuid;

use super::probe::{MaasProbe, ProbeError, ProbeReport, ProbeTarget};
use crate::secrets::{SecretPath, SecretStore};
use crate::store::{self, Profile, Site, SiteStatus, Store};

/// The class of a preflight failure (§4.14).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PreflightClass {
    /// The site, profile or credentials as configured cannot work: an operator must fix them.
    InputConfigError,
    /// MAAS lacks something the site or workflow requires.
    SiteCapabilityMissing,
    /// Something upstream did not answer: retrying later may succeed.
    UpstreamTransient,
}

impl PreflightClass {
    /// The stable string form.
    pub const fn as_str(self) -> &'static str {
        match self {
            PreflightClass::InputConfigError => "input_config_error",
            PreflightClass::SiteCapabilityMissing => "site_capability_missing",
            PreflightClass::UpstreamTransient => "upstream_transient",
        }
    }
}

/// Why a workflow may not start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{}: {message}", class.as_str())]
pub struct PreflightFailure {
    /// Who must act.
    pub class: PreflightClass,
    /// What is wrong (never a secret).
    pub message: String,
}

impl PreflightFailure {
    /// As the API shows it.
    pub fn view(&self) -> drover_proto::api::sites::CheckFailure {
        drover_proto::api::sites::CheckFailure { class: self.class.as_str().to_owned(), message: self.message.clone() }
    }
}

fn fail(class: PreflightClass, message: impl Into<String>) -> PreflightFailure {
    PreflightFailure { class, message: message.into() }
}

/// What a passed preflight resolved, for the workflow to start from.
#[derive(Debug, Clone)]
pub struct Preflight {
    /// The site.
    pub site: Site,
    /// The profile in force.
    pub profile: Profile,
    /// What MAAS said.
    pub maas: ProbeReport,
}

/// Runs the preflight for `site_id` with `profile_id` (the site's default when `None`),
/// requiring the capabilities in `needed` on top of the site's own.
pub async fn preflight(
    store: std::sync::Arc<dyn Store>,
    secrets: &dyn SecretStore,
    probe: &dyn MaasProbe,
    site_id: Uuid,
    profile_id: Option<Uuid>,
    needed: &[&str],
    timeout: Duration,
) -> Result<Preflight, PreflightFailure> {
    let transient = |e: store::StoreError| fail(PreflightClass::UpstreamTransient, format!("the coordinator's store failed: {e}"));
    let site = store::blocking(store.clone(), move |s| s.get_site(site_id))
        .await
        .map_err(transient)?
        .ok_or_else(|| fail(PreflightClass::InputConfigError, format!("site {site_id} does not exist")))?;
    let profile_id = profile_id.unwrap_or(site.default_profile_id);
    let profile = store::blocking(store, move |s| s.get_profile(profile_id)).await.map_err(transient)?;
    let profile = check_site_and_profile(&site, profile_id, profile)?;
    let report = probe_site(secrets, probe, &site, timeout).await?;
    check_capabilities(&site, &report, needed)?;
    Ok(Preflight { site, profile, maas: report })
}

/// Reads `site`'s API token from the secret store now and probes its MAAS with it: the part
/// of the preflight the probe route runs on its own. The token is dropped when this returns.
pub async fn probe_site(
    secrets: &dyn SecretStore,
    probe: &dyn MaasProbe,
    site: &Site,
    timeout: Duration,
) -> Result<ProbeReport, PreflightFailure> {
    let path = SecretPath::new(&site.secrets.api_token_path)
        .map_err(|e| fail(PreflightClass::InputConfigError, format!("site {}: bad secret path: {e}", site.name)))?;
    let token = match secrets.read(&path).await {
        Ok(Some(value)) => value.get("token").map(str::to_owned),
        Ok(None) => None,
        Err(e) if e.is_transient() => return Err(fail(PreflightClass::UpstreamTransient, format!("the secret store is unavailable: {e}"))),
        Err(e) => return Err(fail(PreflightClass::InputConfigError, format!("the site's API token cannot be read: {e}"))),
    };
    let Some(token) = token else {
        return Err(fail(
            PreflightClass::InputConfigError,
            format!("site {} has no MAAS API token: write one with `drover site credentials`", site.name),
        ));
    };
    probe.probe(ProbeTarget::for_site(site, &token, timeout)).await.map_err(|e| probe_failure(site, e))
}

/// The site must be active, the profile the site's and active.
pub fn check_site_and_profile(site: &Site, profile_id: Uuid, profile: Option<Profile>) -> Result<Profile, PreflightFailure> {
    if site.status != SiteStatus::Active {
        return Err(fail(PreflightClass::InputConfigError, format!("site {} is disabled: it takes no new work", site.name)));
    }
    let profile = profile
        .filter(|p| p.site_id == site.id)
        .ok_or_else(|| fail(PreflightClass::InputConfigError, format!("profile {profile_id} is not a profile of site {}", site.name)))?;
    if profile.status != SiteStatus::Active {
        return Err(fail(PreflightClass::InputConfigError, format!("profile {} of site {} is disabled", profile.name, site.name)));
    }
    Ok(profile)
}

/// A probe's failure as a preflight class.
pub fn probe_failure(site: &Site, e: ProbeError) -> PreflightFailure {
    let class = match e {
        ProbeError::Unreachable { .. } | ProbeError::Protocol { .. } => PreflightClass::UpstreamTransient,
        ProbeError::CredentialsRefused { .. } | ProbeError::Config { .. } => PreflightClass::InputConfigError,
    };
    fail(class, format!("site {}: {e}", site.name))
}

/// Every required capability offered, and at least one rack controller.
pub fn check_capabilities(site: &Site, report: &ProbeReport, needed: &[&str]) -> Result<(), PreflightFailure> {
    let missing: Vec<&str> = site
        .config
        .required_capabilities
        .iter()
        .map(String::as_str)
        .chain(needed.iter().copied())
        .filter(|c| !report.capabilities.iter().any(|have| have == c))
        .collect();
    if !missing.is_empty() {
        return Err(fail(
            PreflightClass::SiteCapabilityMissing,
            format!("MAAS {} at site {} lacks required capabilities: {}", report.version, site.name, missing.join(", ")),
        ));
    }
    if report.rack_controllers.is_empty() {
        return Err(fail(PreflightClass::SiteCapabilityMissing, format!("MAAS at site {} has no rack controller", site.name)));
    }
    Ok(())
}
