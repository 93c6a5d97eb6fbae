//! Subnets: the model, CIDR arithmetic (containment, overlap, the next free address for
//! AUTO and STATIC links) and `GET`/`POST /subnets/`, `GET`/`DELETE /subnets/{id}/` with
//! MAAS's form errors (`cidr` required, a prefix of at least 1 so `/31` and `/32` are
//! fine, overlap refused under `__all__`, the gateway inside the subnet).

use std::net::IpAddr;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::forms::{Params, checkbox_value};
use super::reply::Reply;
use super::world::World;

/// A subnet.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[allow(missing_docs)] // MAAS's fields
pub struct Subnet {
    pub id: u64,
    pub name: String,
    pub description: String,
    pub cidr: String,
    pub gateway_ip: Option<String>,
    pub dns_servers: Vec<String>,
    pub rdns_mode: i64,
    pub allow_dns: bool,
    pub allow_proxy: bool,
    pub managed: bool,
    pub active_discovery: bool,
}

/// The one VLAN the fake has (fabric-0, untagged).
pub fn vlan_json() -> Value {
    json!({"vid": 0, "mtu": 1500, "dhcp_on": true, "external_dhcp": null, "relay_vlan": null, "fabric": "fabric-0",
           "fabric_id": 0, "space": "undefined", "primary_rack": super::server::RACK_ID, "secondary_rack": null,
           "name": "untagged", "id": 5001, "resource_uri": "/MAAS/api/2.0/vlans/5001/"})
}

/// A parsed CIDR: the network address as a number, its width (32 or 128) and the prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    net: u128,
    bits: u8,
    prefix: u8,
}

impl Cidr {
    /// Parses `a.b.c.d/n` or an IPv6 CIDR; host bits are masked off. `None` when malformed
    /// or the prefix is 0 or too long.
    pub fn parse(text: &str) -> Option<Cidr> {
        let (addr, prefix) = text.trim().split_once('/')?;
        let prefix: u8 = prefix.parse().ok()?;
        let (value, bits) = to_number(addr.parse().ok()?);
        if prefix == 0 || prefix > bits {
            return None;
        }
        Some(Cidr { net: value & mask(bits, prefix), bits, prefix })
    }

    /// The canonical text.
    pub fn text(&self) -> String {
        format!("{}/{}", from_number(self.net, self.bits), self.prefix)
    }

    /// Whether `ip` lies inside.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let (v, bits) = to_number(ip);
        bits == self.bits && v & mask(bits, self.prefix) == self.net
    }

    /// Whether the two share any address.
    pub fn overlaps(&self, other: &Cidr) -> bool {
        let p = self.prefix.min(other.prefix);
        self.bits == other.bits && self.net & mask(self.bits, p) == other.net & mask(self.bits, p)
    }

    /// The first address not in `used`, skipping the network address (and, for IPv4
    /// subnets wider than /31, the broadcast address).
    pub fn first_free(&self, used: &std::collections::HashSet<String>) -> Option<String> {
        let size: u128 = if self.bits - self.prefix >= 127 { u128::MAX } else { 1u128 << (self.bits - self.prefix) };
        let (start, end) = if size <= 2 { (0, size) } else { (1, if self.bits == 32 { size - 1 } else { size }) };
        (start..end.min(start + 65_536)).map(|i| from_number(self.net + i, self.bits).to_string()).find(|ip| !used.contains(ip))
    }
}

fn mask(bits: u8, prefix: u8) -> u128 {
    let all = if bits == 128 { u128::MAX } else { (1u128 << bits) - 1 };
    if prefix == 0 { 0 } else { all & !((1u128 << (bits - prefix)).wrapping_sub(1)) & all }
}

fn to_number(ip: IpAddr) -> (u128, u8) {
    match ip {
        IpAddr::V4(a) => (u128::from(u32::from(a)), 32),
        IpAddr::V6(a) => (u128::from(a), 128),
    }
}

fn from_number(v: u128, bits: u8) -> IpAddr {
    if bits == 32 { IpAddr::V4(u32::try_from(v).unwrap_or(0).into()) } else { IpAddr::V6(v.into()) }
}

impl Subnet {
    /// The parsed CIDR.
    pub fn cidr(&self) -> Option<Cidr> {
        Cidr::parse(&self.cidr)
    }

    /// The subnet object.
    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id, "name": self.name, "description": self.description, "vlan": vlan_json(),
            "space": "undefined", "cidr": self.cidr, "gateway_ip": self.gateway_ip, "dns_servers": self.dns_servers,
            "rdns_mode": self.rdns_mode, "active_discovery": self.active_discovery, "allow_dns": self.allow_dns,
            "allow_proxy": self.allow_proxy, "managed": self.managed, "disabled_boot_architectures": [],
            "resource_uri": format!("/MAAS/api/2.0/subnets/{}/", self.id),
        })
    }
}

/// Finds a subnet by MAAS's specifiers: its id, `cidr:…`, `name:…`, or a bare CIDR or name.
pub fn find<'a>(subnets: &'a [Subnet], key: &str) -> Option<&'a Subnet> {
    let key = key.trim();
    if let Some(c) = key.strip_prefix("cidr:") {
        let c = Cidr::parse(c)?;
        return subnets.iter().find(|s| s.cidr() == Some(c));
    }
    if let Some(n) = key.strip_prefix("name:") {
        return subnets.iter().find(|s| s.name == n);
    }
    subnets.iter().find(|s| s.id.to_string() == key || s.name == key || (Cidr::parse(key).is_some() && s.cidr() == Cidr::parse(key)))
}

/// `allow_dns` / `allow_proxy`: true only for `true`, `t` or `1`; true when absent.
fn special_bool(p: &Params, key: &str) -> bool {
    p.get(key).is_none_or(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "true" | "t" | "1"))
}

/// `GET /subnets/`.
pub fn list(world: &World) -> Reply {
    Reply::ok(&Value::Array(world.data.subnets.iter().map(Subnet::to_json).collect()))
}

/// `GET /subnets/{id}/`.
pub fn read(world: &World, key: &str) -> Reply {
    find(&world.data.subnets, key).map_or_else(|| Reply::not_found("Subnet"), |s| Reply::ok(&s.to_json()))
}

/// `DELETE /subnets/{id}/`: the links on it go with it.
pub fn delete(world: &mut World, key: &str) -> Reply {
    let Some(id) = find(&world.data.subnets, key).map(|s| s.id) else { return Reply::not_found("Subnet") };
    world.data.subnets.retain(|s| s.id != id);
    for m in &mut world.data.machines {
        for i in &mut m.interfaces {
            i.links.retain(|l| l.subnet != Some(id));
        }
    }
    world.touch();
    Reply::no_content()
}

/// `POST /subnets/`.
pub fn create(world: &mut World, p: &Params) -> Reply {
    let Some(cidr_text) = p.non_empty("cidr") else { return Reply::field_error("cidr", "This field is required.") };
    let Some(cidr) = Cidr::parse(cidr_text) else {
        return Reply::field_error("cidr", "Required format: <network>/<prefixlen>.");
    };
    if world.data.subnets.iter().any(|s| s.cidr().is_some_and(|c| c.overlaps(&cidr))) {
        return Reply::field_error("__all__", format!("Subnet {} would overlap with existing subnets.", cidr.text()));
    }
    let gateway_ip = match p.non_empty("gateway_ip") {
        None => None,
        Some(g) => match g.parse::<IpAddr>() {
            Ok(ip) if cidr.contains(ip) => Some(ip.to_string()),
            Ok(_) => return Reply::field_error("gateway_ip", "Gateway IP must be within CIDR range."),
            Err(_) => return Reply::field_error("gateway_ip", "Enter a valid IPv4 or IPv6 address."),
        },
    };
    let rdns_mode = match p.integer("rdns_mode") {
        Ok(Some(m @ 0..=2)) => m,
        Ok(None) => 2,
        Ok(Some(m)) => return Reply::field_error("rdns_mode", format!("Select a valid choice. {m} is not one of the available choices.")),
        Err(r) => return r,
    };
    let dns_servers = p
        .all("dns_servers")
        .iter()
        .flat_map(|v| v.split([',', ' ']).filter(|s| !s.is_empty()).map(str::to_owned).collect::<Vec<_>>())
        .collect();
    let id = super::machine::Ids::next(&mut world.data.ids.subnet);
    let subnet = Subnet {
        id,
        name: p.non_empty("name").map_or_else(|| cidr.text(), str::to_owned),
        description: p.get("description").unwrap_or_default().to_owned(),
        cidr: cidr.text(),
        gateway_ip,
        dns_servers,
        rdns_mode,
        allow_dns: special_bool(p, "allow_dns"),
        allow_proxy: special_bool(p, "allow_proxy"),
        managed: p.get("managed").is_none_or(checkbox_value),
        active_discovery: p.checkbox("active_discovery"),
    };
    let json = subnet.to_json();
    world.data.subnets.push(subnet);
    world.touch();
    Reply::ok(&json)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr_arithmetic() {
        let c = Cidr::parse("10.1.2.3/24").unwrap();
        assert_eq!(c.text(), "10.1.2.0/24");
        assert!(c.contains("10.1.2.200".parse().unwrap()));
        assert!(!c.contains("10.1.3.1".parse().unwrap()));
        assert!(c.overlaps(&Cidr::parse("10.1.0.0/16").unwrap()));
        assert!(!c.overlaps(&Cidr::parse("10.1.3.0/24").unwrap()));
        assert_eq!(Cidr::parse("10.0.0.0/0"), None);
        assert_eq!(Cidr::parse("10.0.0.0/33"), None);
        let p31 = Cidr::parse("192.168.7.4/31").unwrap();
        let used = |ips: &[&str]| ips.iter().map(|s| (*s).to_owned()).collect::<std::collections::HashSet<String>>();
        assert_eq!(p31.first_free(&used(&[])).as_deref(), Some("192.168.7.4"));
        assert_eq!(p31.first_free(&used(&["192.168.7.4"])).as_deref(), Some("192.168.7.5"));
        assert_eq!(p31.first_free(&used(&["192.168.7.4", "192.168.7.5"])), None);
        assert_eq!(c.first_free(&used(&[])).as_deref(), Some("10.1.2.1"));
        let v6 = Cidr::parse("fd00::/64").unwrap();
        assert!(v6.contains("fd00::5".parse().unwrap()));
        assert_eq!(v6.first_free(&used(&[])).as_deref(), Some("fd00::1"));
    }

    #[test]
    fn specifiers() {
        let s = Subnet {
            id: 3,
            name: "pxe".into(),
            description: String::new(),
            cidr: "10.0.0.0/24".into(),
            gateway_ip: None,
            dns_servers: vec![],
            rdns_mode: 2,
            allow_dns: true,
            allow_proxy: true,
            managed: true,
            active_discovery: false,
        };
        let all = [s];
        for key in ["3", "pxe", "name:pxe", "cidr:10.0.0.0/24", "10.0.0.0/24"] {
            assert!(find(&all, key).is_some(), "{key}");
        }
        assert!(find(&all, "4").is_none());
    }
}
