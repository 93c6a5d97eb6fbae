//! MAAS sites (`bare-metal-lifecycle.md` §3): the domain logic around the store's site rows.
//!
//! - [`validate`]: field checks and normalisation for everything operators send.
//! - [`probe`]: the narrow [`probe::MaasProbe`] trait (version, rack controllers, token check)
//!   and its implementation over `drover-maas`.
//! - [`preflight`]: the one check every MAAS workflow runs before it starts (§4.14).
//!
//! Secrets: a site row holds only the *paths* of its secrets ([`secret_paths`]); values are
//! read from the secret store at use time and never cached past one step, so rotating a token
//! or a BMC password needs no restart (§3.5). [`select_power_credentials`] is the pure
//! selection order of §3.2.1.

pub mod preflight;
pub mod probe;
pub mod validate;

use uuid::Uuid;

use crate::store::{PowerOverride, SelectorType, SiteSecrets, SiteStatus};

/// The secret-store paths of a new site (§3.2), derived from its id so they never collide.
pub fn secret_paths(site_id: Uuid) -> SiteSecrets {
    SiteSecrets {
        api_token_path: format!("maas-sites/{site_id}/api-token"),
        default_power_path: format!("maas-sites/{site_id}/power/default"),
        deploy_password_path: format!("maas-sites/{site_id}/deploy-password"),
        api_token_set_at: None,
        default_power_set_at: None,
        deploy_password_set_at: None,
    }
}

/// The secret-store path of a power-credential override.
pub fn override_path(site_id: Uuid, override_id: Uuid) -> String {
    format!("maas-sites/{site_id}/power/overrides/{override_id}")
}

/// What is known about a node when its BMC credentials are needed; any of it may be missing
/// (an onboarding request has hostname and IPMI address, a PXE MAC only once observed).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeKeys<'a> {
    /// Observed PXE MAC (normalised).
    pub pxe_mac: Option<&'a str>,
    /// The BMC address.
    pub ipmi_ip: Option<&'a str>,
    /// The hostname.
    pub hostname: Option<&'a str>,
}

/// Where a node's power credentials come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PowerSource<'a> {
    /// An active override matched.
    Override(&'a PowerOverride),
    /// No override matched: the site's default credentials.
    SiteDefault,
}

/// §3.2.1's selection order: an exact active override by PXE MAC, else by IPMI address, else
/// by hostname, else the site default. Inputs are compared normalised (MACs lowercase,
/// hostnames lowercase, addresses canonical), as [`validate`] stores them.
pub fn select_power_credentials<'a>(overrides: &'a [PowerOverride], node: &NodeKeys<'_>) -> PowerSource<'a> {
    let norm = |ty: SelectorType, v: &str| validate::selector_value(ty, v).ok();
    let wanted = [
        (SelectorType::PxeMac, node.pxe_mac.and_then(|v| norm(SelectorType::PxeMac, v))),
        (SelectorType::IpmiIp, node.ipmi_ip.and_then(|v| norm(SelectorType::IpmiIp, v))),
        (SelectorType::Hostname, node.hostname.and_then(|v| norm(SelectorType::Hostname, v))),
    ];
    for (ty, value) in wanted {
        let Some(value) = value else { continue };
        if let Some(o) = overrides.iter().find(|o| o.status == SiteStatus::Active && o.selector_type == ty && o.selector_value == value) {
            return PowerSource::Override(o);
        }
    }
    PowerSource::SiteDefault
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_store_conformance::t;

    fn o(ty: SelectorType, value: &str, status: SiteStatus) -> PowerOverride {
        PowerOverride {
            id: Uuid::new_v4(),
            site_id: Uuid::nil(),
            selector_type: ty,
            selector_value: value.into(),
            secret_path: format!("p/{value}"),
            status,
            created_at: t(0),
            updated_at: t(0),
        }
    }

    #[test]
    fn selection_order_is_mac_then_ipmi_then_hostname_then_default() {
        let all = vec![
            o(SelectorType::Hostname, "gpu-1", SiteStatus::Active),
            o(SelectorType::IpmiIp, "10.0.0.9", SiteStatus::Active),
            o(SelectorType::PxeMac, "aa:bb:cc:dd:ee:ff", SiteStatus::Active),
        ];
        let node = NodeKeys { pxe_mac: Some("AA-BB-CC-DD-EE-FF"), ipmi_ip: Some("10.0.0.9"), hostname: Some("GPU-1") };
        assert_eq!(select_power_credentials(&all, &node), PowerSource::Override(&all[2]));
        let node = NodeKeys { pxe_mac: Some("00:00:00:00:00:01"), ..node };
        assert_eq!(select_power_credentials(&all, &node), PowerSource::Override(&all[1]));
        let node = NodeKeys { ipmi_ip: None, ..node };
        assert_eq!(select_power_credentials(&all, &node), PowerSource::Override(&all[0]));
        let node = NodeKeys { hostname: Some("gpu-2"), ..node };
        assert_eq!(select_power_credentials(&all, &node), PowerSource::SiteDefault);
    }

    #[test]
    fn disabled_overrides_are_never_selected() {
        let all = vec![o(SelectorType::Hostname, "gpu-1", SiteStatus::Disabled)];
        let node = NodeKeys { hostname: Some("gpu-1"), ..Default::default() };
        assert_eq!(select_power_credentials(&all, &node), PowerSource::SiteDefault);
    }
}
