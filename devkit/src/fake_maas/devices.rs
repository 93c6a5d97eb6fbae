//! A machine's block devices and interfaces under `/nodes/{system_id}/`: listing and
//! reading them, `set_boot_disk` (Ready only, answers the text `OK`), and `link_subnet` /
//! `unlink_subnet` with MAAS's modes (AUTO, DHCP, STATIC, LINK_UP, case-insensitive and
//! stored lowercase), its allowed states and its form errors.

use std::net::IpAddr;

use serde_json::Value;

use super::forms::Params;
use super::lifecycle;
use super::machine::Link;
use super::reply::Reply;
use super::subnets;
use super::world::World;

/// `GET /nodes/{id}/blockdevices/`.
pub fn list_disks(world: &World, i: usize) -> Reply {
    let m = &world.data.machines[i];
    Reply::ok(&Value::Array(m.block_devices.iter().map(|d| m.block_device_json(d)).collect()))
}

/// `GET /nodes/{id}/blockdevices/{bid}/`.
pub fn read_disk(world: &World, i: usize, key: &str) -> Reply {
    let m = &world.data.machines[i];
    m.block_device(key).map_or_else(|| Reply::not_found("BlockDevice"), |d| Reply::ok(&m.block_device_json(d)))
}

/// `POST /nodes/{id}/blockdevices/{bid}/?op=set_boot_disk`.
pub fn set_boot_disk(world: &mut World, i: usize, key: &str) -> Reply {
    let Some(id) = world.data.machines[i].block_device(key).map(|d| d.id) else { return Reply::not_found("BlockDevice") };
    if let Err(r) = lifecycle::set_boot_disk(&world.view(i)) {
        return r.into();
    }
    world.data.machines[i].boot_disk = Some(id);
    world.touch();
    Reply::text(200, "OK")
}

/// `GET /nodes/{id}/interfaces/`.
pub fn list_interfaces(world: &World, i: usize) -> Reply {
    let m = &world.data.machines[i];
    Reply::ok(&Value::Array(m.interfaces.iter().map(|n| m.interface_json(n, &world.data.subnets)).collect()))
}

/// `GET /nodes/{id}/interfaces/{iid}/`.
pub fn read_interface(world: &World, i: usize, key: &str) -> Reply {
    let m = &world.data.machines[i];
    m.interface_index(key)
        .map_or_else(|| Reply::not_found("Interface"), |n| Reply::ok(&m.interface_json(&m.interfaces[n], &world.data.subnets)))
}

fn interface_reply(world: &World, i: usize, n: usize) -> Reply {
    let m = &world.data.machines[i];
    Reply::ok(&m.interface_json(&m.interfaces[n], &world.data.subnets))
}

/// `POST /nodes/{id}/interfaces/{iid}/?op=link_subnet`.
pub fn link_subnet(world: &mut World, i: usize, key: &str, p: &Params) -> Reply {
    let Some(n) = world.data.machines[i].interface_index(key) else { return Reply::not_found("Interface") };
    if let Err(r) = lifecycle::edit_links(&world.view(i), "link") {
        return r.into();
    }
    let Some(mode_text) = p.non_empty("mode") else { return Reply::field_error("mode", "This field is required.") };
    let mode = mode_text.to_ascii_lowercase();
    if !matches!(mode.as_str(), "auto" | "dhcp" | "static" | "link_up") {
        return Reply::field_error("mode", format!("Select a valid choice. {mode_text} is not one of the available choices."));
    }
    let force = match p.string_bool("force") {
        Ok(f) => f.unwrap_or(false),
        Err(r) => return r,
    };
    let subnet = match p.non_empty("subnet") {
        Some(key) => match subnets::find(&world.data.subnets, key) {
            Some(s) => Some(s.clone()),
            None => return Reply::field_error("subnet", "Select a valid choice. That choice is not one of the available choices."),
        },
        None if matches!(mode.as_str(), "auto" | "static") => return Reply::field_error("subnet", "This field is required."),
        None => None,
    };
    // A boolean: `default_gateway=false` asks for nothing, so only a true value is refused.
    if p.checkbox("default_gateway") && !matches!(mode.as_str(), "auto" | "static") {
        return Reply::field_error("default_gateway", format!("Cannot use in mode '{mode}'."));
    }
    let links = &world.data.machines[i].interfaces[n].links;
    if mode == "dhcp" && links.iter().any(|l| l.mode == "dhcp") {
        return Reply::field_error("mode", "Interface can only have one DHCP link.");
    }
    let others = links.iter().any(|l| l.mode != "link_up");
    if mode == "link_up" && others && !force {
        return Reply::field_error("mode", "Cannot link interface in LINK_UP mode when other links exist; use force to replace them.");
    }
    let ip_address = if mode == "static" {
        let cidr = subnet.as_ref().and_then(subnets::Subnet::cidr);
        let used: std::collections::HashSet<String> = world.data.machines.iter().flat_map(|m| m.ip_addresses()).collect();
        match p.non_empty("ip_address") {
            Some(text) => match text.parse::<IpAddr>() {
                Err(_) => return Reply::field_error("ip_address", "Enter a valid IPv4 or IPv6 address."),
                Ok(ip) if !cidr.is_some_and(|c| c.contains(ip)) => {
                    let name = subnet.as_ref().map(|s| s.cidr.clone()).unwrap_or_default();
                    return Reply::field_error("ip_address", format!("IP address is not in the given subnet '{name}'."));
                }
                Ok(ip) if used.contains(&ip.to_string()) => return Reply::field_error("ip_address", "IP address is already in use."),
                Ok(ip) => Some(ip.to_string()),
            },
            None => match cidr.and_then(|c| c.first_free(&used)) {
                Some(ip) => Some(ip),
                None => return Reply::field_error("ip_address", "No more IPs available in subnet."),
            },
        }
    } else {
        None
    };
    let id = world.data.ids.link();
    let links = &mut world.data.machines[i].interfaces[n].links;
    // A real link replaces the placeholder LINK_UP one; a forced LINK_UP replaces everything.
    if mode == "link_up" {
        links.clear();
    } else {
        links.retain(|l| l.mode != "link_up");
    }
    links.push(Link { id, mode, subnet: subnet.map(|s| s.id), ip_address });
    world.touch();
    interface_reply(world, i, n)
}

/// `POST /nodes/{id}/interfaces/{iid}/?op=unlink_subnet`.
pub fn unlink_subnet(world: &mut World, i: usize, key: &str, p: &Params) -> Reply {
    let Some(n) = world.data.machines[i].interface_index(key) else { return Reply::not_found("Interface") };
    if let Err(r) = lifecycle::edit_links(&world.view(i), "unlink") {
        return r.into();
    }
    let Some(id) = p.non_empty("id") else { return Reply::field_error("id", "This field is required.") };
    let links = &world.data.machines[i].interfaces[n].links;
    let Some(at) = links.iter().position(|l| l.id.to_string() == id) else {
        return Reply::field_error("id", "Select a valid choice. That choice is not one of the available choices.");
    };
    let next = world.data.ids.link();
    let links = &mut world.data.machines[i].interfaces[n].links;
    links.remove(at);
    // MAAS keeps an interface "up" with a LINK_UP link once its last link is gone.
    if links.is_empty() {
        links.push(Link { id: next, mode: "link_up".into(), subnet: None, ip_address: None });
    }
    world.touch();
    interface_reply(world, i, n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_maas::status::Status;

    fn world(status: Status) -> World {
        let mut w = World::with_machine(status, |_| {});
        assert_eq!(subnets::create(&mut w, &Params::from_query("cidr=10.9.0.0/31")).status, 200);
        w
    }

    fn json(r: &Reply) -> Value {
        serde_json::from_slice(&r.body).unwrap()
    }

    #[test]
    fn boot_disk_ready_only() {
        let mut w = world(Status::Deployed);
        assert_eq!(set_boot_disk(&mut w, 0, "nvme0n1").status, 409);
        w.data.machines[0].status = Status::Ready;
        let r = set_boot_disk(&mut w, 0, "nvme0n1");
        assert_eq!((r.status, r.body.as_slice()), (200, b"OK".as_slice()));
        assert_eq!(w.machine_json(0)["boot_disk"]["name"], "nvme0n1");
        assert_eq!(set_boot_disk(&mut w, 0, "sdz").status, 404);
    }

    #[test]
    fn links() {
        let mut w = world(Status::Ready);
        let r = link_subnet(&mut w, 0, "eno1", &Params::from_query("mode=STATIC&subnet=10.9.0.0/31&ip_address=10.9.0.1"));
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        let v = json(&r);
        assert_eq!(v["links"][0]["mode"], "static");
        assert_eq!(v["links"][0]["ip_address"], "10.9.0.1");
        assert_eq!(v["links"][0]["subnet"]["cidr"], "10.9.0.0/31");
        let link_id = v["links"][0]["id"].to_string();
        assert_eq!(link_subnet(&mut w, 0, "eno1", &Params::from_query("mode=static&subnet=1&ip_address=10.8.0.1")).status, 400);
        assert_eq!(link_subnet(&mut w, 0, "eno1", &Params::from_query("mode=auto")).status, 400);
        assert_eq!(link_subnet(&mut w, 0, "eno1", &Params::from_query("mode=dhcp&default_gateway=true")).status, 400);
        assert_eq!(
            link_subnet(&mut w, 0, "eno1", &Params::from_query("mode=dhcp&default_gateway=false")).status,
            200,
            "false asks for nothing"
        );
        assert_eq!(link_subnet(&mut w, 0, "eno1", &Params::from_query("mode=dhcp")).status, 400);
        assert_eq!(link_subnet(&mut w, 0, "eno1", &Params::from_query("mode=link_up")).status, 400);
        let r = unlink_subnet(&mut w, 0, "eno1", &Params::from_query(&format!("id={link_id}")));
        assert_eq!(json(&r)["links"].as_array().unwrap().len(), 1);
        w.data.machines[0].status = Status::Deployed;
        let r = link_subnet(&mut w, 0, "eno1", &Params::from_query("mode=dhcp"));
        assert_eq!(
            (r.status, String::from_utf8(r.body).unwrap().as_str()),
            (409, "Cannot link subnet interface because the machine is not New, Ready, Allocated, or Broken.")
        );
    }
}
