//! Machine interfaces and their subnet links (`/nodes/{system_id}/interfaces/`), and subnets
//! (`/subnets/`).
//!
//! Linking and unlinking are machine-admin ops allowed only while the machine is New, Ready,
//! Allocated, Broken or Failed testing (409 otherwise). A link's `id` (from the interface's
//! `links`) is what `unlink_subnet` takes, not the subnet's id.

use serde::Deserialize;

use crate::client::{Call, MaasClient, seg};
use crate::error::MaasError;
use crate::form::Params;
use crate::types::nullable;

/// A VLAN as embedded in subnets and interfaces.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
pub struct Vlan {
    /// Its id.
    #[serde(default)]
    pub id: Option<i64>,
    /// 802.1Q tag (0 = untagged).
    #[serde(default)]
    pub vid: Option<i64>,
    /// Its name.
    #[serde(default)]
    pub name: Option<String>,
    /// Its fabric's name.
    #[serde(default)]
    pub fabric: Option<String>,
}

/// A subnet.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Subnet {
    /// Its id.
    pub id: i64,
    /// Its name (defaults to the CIDR).
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    /// The network, e.g. `10.0.0.0/31`.
    #[serde(default, deserialize_with = "nullable")]
    pub cidr: String,
    /// Gateway, if any.
    #[serde(default)]
    pub gateway_ip: Option<String>,
    /// Its VLAN.
    #[serde(default)]
    pub vlan: Option<Vlan>,
    /// DNS servers.
    #[serde(default, deserialize_with = "nullable")]
    pub dns_servers: Vec<String>,
    /// Whether MAAS manages addresses in it.
    #[serde(default)]
    pub managed: Option<bool>,
    /// Free text.
    #[serde(default)]
    pub description: Option<String>,
}

/// How an interface gets an address on a subnet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkMode {
    /// MAAS assigns a static address at deploy.
    Auto,
    /// DHCP.
    Dhcp,
    /// A given static address.
    Static,
    /// Up, no address.
    LinkUp,
}

impl LinkMode {
    /// The value MAAS takes in `mode=`.
    pub fn as_param(self) -> &'static str {
        match self {
            LinkMode::Auto => "AUTO",
            LinkMode::Dhcp => "DHCP",
            LinkMode::Static => "STATIC",
            LinkMode::LinkUp => "LINK_UP",
        }
    }
}

/// One address link of an interface.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Link {
    /// The link's id (for `unlink_subnet`).
    pub id: i64,
    /// `auto`, `dhcp`, `static` or `link_up` as MAAS stores it.
    #[serde(default, deserialize_with = "nullable")]
    pub mode: String,
    /// The subnet, when linked to one.
    #[serde(default)]
    pub subnet: Option<Subnet>,
    /// The address, when assigned.
    #[serde(default)]
    pub ip_address: Option<String>,
}

/// A machine's network interface.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Interface {
    /// Its id (the handle of link/unlink).
    pub id: i64,
    /// Kernel name, e.g. `eno1`.
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    /// `physical`, `bond`, `vlan`, `bridge`…
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    /// MAC address.
    #[serde(default)]
    pub mac_address: Option<String>,
    /// Whether it is enabled.
    #[serde(default)]
    pub enabled: Option<bool>,
    /// Address links.
    #[serde(default, deserialize_with = "nullable")]
    pub links: Vec<Link>,
    /// Its VLAN.
    #[serde(default)]
    pub vlan: Option<Vlan>,
}

/// Parameters of `op=link_subnet`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkSubnet {
    /// The mode.
    pub mode: LinkMode,
    /// Subnet id or specifier (required for Auto and Static).
    pub subnet: Option<String>,
    /// The address (Static).
    pub ip_address: Option<String>,
    /// Make this link's gateway the machine's default (Auto and Static only).
    pub default_gateway: bool,
    /// Replace other links (needed for LinkUp when other links exist).
    pub force: bool,
}

impl LinkSubnet {
    /// A link in `mode` to `subnet`, nothing else set.
    pub fn new(mode: LinkMode, subnet: Option<&str>) -> LinkSubnet {
        LinkSubnet { mode, subnet: subnet.map(str::to_owned), ip_address: None, default_gateway: false, force: false }
    }

    fn params(&self) -> Params {
        let mut p = Params::new();
        p.text("mode", self.mode.as_param())
            .opt_text("subnet", self.subnet.as_deref())
            .opt_text("ip_address", self.ip_address.as_deref())
            // Both booleans are sent only when set: absent is false to either of MAAS's parsers.
            .flag("default_gateway", self.default_gateway)
            .flag("force", self.force);
        p
    }
}

/// `POST /subnets/`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewSubnet {
    /// The network (required; a /31 or /32 is fine).
    pub cidr: String,
    /// Name (MAAS uses the CIDR when absent).
    pub name: Option<String>,
    /// VLAN id or specifier.
    pub vlan: Option<String>,
    /// Fabric (with `vid`, an alternative to `vlan`).
    pub fabric: Option<String>,
    /// 802.1Q tag, with `fabric`.
    pub vid: Option<u16>,
    /// Gateway (must be inside the CIDR).
    pub gateway_ip: Option<String>,
    /// DNS servers.
    pub dns_servers: Vec<String>,
    /// Free text.
    pub description: Option<String>,
    /// Whether MAAS manages addresses (MAAS's default: yes).
    pub managed: Option<bool>,
    /// Allow DNS resolution through MAAS (default: yes).
    pub allow_dns: Option<bool>,
    /// Allow the MAAS proxy (default: yes).
    pub allow_proxy: Option<bool>,
}

impl NewSubnet {
    fn params(&self) -> Params {
        let mut p = Params::new();
        p.text("cidr", self.cidr.as_str())
            .opt_text("name", self.name.as_deref())
            .opt_text("vlan", self.vlan.as_deref())
            .opt_text("fabric", self.fabric.as_deref());
        if let Some(vid) = self.vid {
            p.text("vid", vid.to_string());
        }
        p.opt_text("gateway_ip", self.gateway_ip.as_deref()).opt_text("description", self.description.as_deref());
        if !self.dns_servers.is_empty() {
            p.text("dns_servers", self.dns_servers.join(","));
        }
        // `true`/`false` are read right by every parser MAAS uses for these (`false` is false
        // even to a checkbox), and the caller's explicit choice must reach MAAS.
        p.opt_boolean("managed", self.managed).opt_boolean("allow_dns", self.allow_dns).opt_boolean("allow_proxy", self.allow_proxy);
        p
    }
}

fn interface_path(system_id: &str, interface_id: i64) -> String {
    format!("/nodes/{}/interfaces/{interface_id}/", seg(system_id))
}

impl MaasClient {
    /// `GET /nodes/{id}/interfaces/`.
    pub async fn list_interfaces(&self, system_id: &str) -> Result<Vec<Interface>, MaasError> {
        self.json(Call::get(format!("/nodes/{}/interfaces/", seg(system_id)))).await
    }

    /// `POST /nodes/{id}/interfaces/{iface}/?op=link_subnet`: the updated interface.
    pub async fn link_subnet(&self, system_id: &str, interface_id: i64, link: &LinkSubnet) -> Result<Interface, MaasError> {
        self.json(Call::post(interface_path(system_id, interface_id)).op("link_subnet").form(link.params())).await
    }

    /// `POST /nodes/{id}/interfaces/{iface}/?op=unlink_subnet` with the link's id.
    pub async fn unlink_subnet(&self, system_id: &str, interface_id: i64, link_id: i64) -> Result<Interface, MaasError> {
        let mut p = Params::new();
        p.text("id", link_id.to_string());
        self.json(Call::post(interface_path(system_id, interface_id)).op("unlink_subnet").form(p)).await
    }

    /// `GET /subnets/`.
    pub async fn list_subnets(&self) -> Result<Vec<Subnet>, MaasError> {
        self.json(Call::get("/subnets/".to_owned())).await
    }

    /// `POST /subnets/` (admin).
    pub async fn create_subnet(&self, subnet: &NewSubnet) -> Result<Subnet, MaasError> {
        self.json(Call::post("/subnets/".to_owned()).form(subnet.params())).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_params() {
        let mut l = LinkSubnet::new(LinkMode::Static, Some("3"));
        l.ip_address = Some("10.0.0.7".into());
        l.default_gateway = true;
        assert_eq!(l.params().encode(), "mode=STATIC&subnet=3&ip_address=10.0.0.7&default_gateway=true");
        assert_eq!(LinkSubnet::new(LinkMode::LinkUp, None).params().encode(), "mode=LINK_UP");
        assert_eq!(LinkSubnet::new(LinkMode::Dhcp, None).params().encode(), "mode=DHCP");
        assert_eq!(LinkMode::Auto.as_param(), "AUTO");
    }

    #[test]
    fn subnet_params() {
        let s = NewSubnet {
            cidr: "10.9.0.0/31".into(),
            name: Some("p2p".into()),
            gateway_ip: Some("10.9.0.0".into()),
            dns_servers: vec!["1.1.1.1".into(), "9.9.9.9".into()],
            managed: Some(false),
            ..NewSubnet::default()
        };
        assert_eq!(s.params().encode(), "cidr=10.9.0.0%2F31&name=p2p&gateway_ip=10.9.0.0&dns_servers=1.1.1.1%2C9.9.9.9&managed=false");
    }

    #[test]
    fn interface_json_parses() {
        let i: Interface = serde_json::from_str(
            r#"{"id":7,"name":"eno1","type":"physical","mac_address":"52:54:00:00:00:01","enabled":true,
                "links":[{"id":3,"mode":"static","ip_address":"10.0.0.7",
                          "subnet":{"id":1,"name":"10.0.0.0/24","cidr":"10.0.0.0/24","vlan":{"id":5001,"vid":0,"fabric":"fabric-0"},
                                    "dns_servers":[],"space":"undefined"}},
                         {"id":4,"mode":"link_up"}],
                "vlan":null,"params":"","tags":[]}"#,
        )
        .expect("parse");
        assert_eq!(i.kind.as_deref(), Some("physical"));
        assert_eq!(i.links.len(), 2);
        assert_eq!(i.links[0].subnet.as_ref().map(|s| s.cidr.as_str()), Some("10.0.0.0/24"));
        assert_eq!(i.links[1].ip_address, None);
    }
}
