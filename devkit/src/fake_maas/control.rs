//! The control API under `/_fake/`: what only hardware, a BMC or time could do to a real
//! MAAS, made callable by tests (no authentication, JSON in and out, errors as
//! `{"error": "..."}`). See the module documentation of `fake_maas` for the list.

use serde::Deserialize;
use serde_json::{Value, json};

use super::machine::{BlockDevice, Machine, default_disks, new_system_id, normalise_mac, random_hostname, random_mac};
use super::machines;
use super::reply::{Millis, Reply, parse_iso};
use super::status::{Power, Status};
use super::world::{Outage, World, stage_status};

fn error(status: u16, message: impl Into<String>) -> Reply {
    Reply::json(status, &json!({ "error": message.into() }))
}

fn body<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, Reply> {
    let bytes = if bytes.iter().all(u8::is_ascii_whitespace) { b"{}".as_slice() } else { bytes };
    serde_json::from_slice(bytes).map_err(|e| error(400, format!("bad JSON body: {e}")))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewDisk {
    name: String,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    serial: Option<String>,
    #[serde(default)]
    size: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewInterface {
    name: String,
    mac_address: String,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct NewMachine {
    hostname: Option<String>,
    power_type: Option<String>,
    power_address: Option<String>,
    power_user: Option<String>,
    power_pass: Option<String>,
    #[serde(default)]
    mac_addresses: Vec<String>,
    status: Option<String>,
    block_devices: Option<Vec<NewDisk>>,
    interfaces: Option<Vec<NewInterface>>,
    architecture: Option<String>,
}

/// Answers a control request; `path` is what follows `/_fake`.
pub fn handle(world: &mut World, method: &str, path: &str, bytes: &[u8], now: Millis) -> Reply {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let result = match (method, parts.as_slice()) {
        ("POST", ["machines"]) => create(world, bytes, now),
        ("GET", ["machines", id]) => with_machine(world, id, |w, i| Ok(inspect(w, i))),
        ("POST", ["advance"]) => advance(world, bytes, now),
        ("POST", ["machines", id, "fail"]) => with_machine(world, id, |w, i| fail(w, i, bytes, now)),
        ("POST", ["machines", id, "ip"]) => with_machine(world, id, |w, i| ip(w, i, bytes)),
        ("POST", ["machines", id, "hw_sync"]) => with_machine(world, id, |w, i| hw_sync(w, i, bytes)),
        ("POST", ["machines", id, "power"]) => with_machine(world, id, |w, i| power(w, i, bytes, now)),
        ("GET", ["machines", id, "user_data"]) => return user_data(world, id),
        ("POST", ["outage"]) => outage(world, bytes),
        ("GET", ["requests"]) => Ok(Value::Array(world.requests.clone())),
        ("DELETE", ["requests"]) => {
            world.requests.clear();
            Ok(json!([]))
        }
        _ => Err(error(404, format!("no control endpoint {method} /_fake{path}"))),
    };
    match result {
        Ok(v) => Reply::ok(&v),
        Err(r) => r,
    }
}

fn with_machine(world: &mut World, id: &str, f: impl FnOnce(&mut World, usize) -> Result<Value, Reply>) -> Result<Value, Reply> {
    let i = world.find(id).ok_or_else(|| error(404, format!("no machine {id}")))?;
    let out = f(world, i)?;
    world.touch();
    Ok(out)
}

/// The machine's JSON plus what the REST API never shows.
fn inspect(world: &World, i: usize) -> Value {
    let m = &world.data.machines[i];
    let mut v = world.machine_json(i);
    v["_fake"] = json!({
        "storage_layout": m.storage_layout, "armed_failures": m.armed_failures, "user_data": m.user_data,
        "token": m.token.as_ref().map(|(ck, tk, ts)| json!({"consumer_key": ck, "token_key": tk, "token_secret": ts})),
        "commissioned": m.commissioned, "power_parameters": m.power_parameters,
        "boot": world.boot.as_ref().map_or(Value::Null, |b| b.status_json(&m.system_id, m.token.as_ref())),
    });
    v
}

fn create(world: &mut World, bytes: &[u8], now: Millis) -> Result<Value, Reply> {
    let req: NewMachine = body(bytes)?;
    let status = match &req.status {
        None => Status::New,
        Some(s) => Status::parse_loose(s).ok_or_else(|| error(400, format!("unknown status {s}")))?,
    };
    let hostname = req.hostname.unwrap_or_else(random_hostname);
    if world.data.machines.iter().any(|m| m.hostname == hostname) {
        return Err(error(400, format!("hostname {hostname} is taken")));
    }
    let mut nics: Vec<(String, String)> = match req.interfaces {
        Some(list) => list.into_iter().map(|n| (n.name, n.mac_address)).collect(),
        None => req.mac_addresses.iter().enumerate().map(|(k, mac)| (format!("eno{}", k + 1), mac.clone())).collect(),
    };
    if nics.is_empty() {
        nics.push(("eno1".into(), random_mac()));
    }
    for (_, mac) in &mut nics {
        let norm = normalise_mac(mac).ok_or_else(|| error(400, format!("bad MAC {mac}")))?;
        if world.data.machines.iter().any(|m| m.interfaces.iter().any(|i| i.mac_address == norm)) {
            return Err(error(400, format!("MAC {norm} is in use")));
        }
        *mac = norm;
    }
    let taken: Vec<&str> = world.data.machines.iter().map(|m| m.system_id.as_str()).collect();
    let mut m = Machine::new(world.data.ids.machine(), new_system_id(&taken), hostname);
    if let Some(a) = req.architecture {
        m.architecture = a;
    }
    let power_type = req.power_type.unwrap_or_else(|| if req.power_address.is_some() { "ipmi".into() } else { String::new() });
    m.power_type = power_type;
    for (k, v) in [("power_address", req.power_address), ("power_user", req.power_user), ("power_pass", req.power_pass)] {
        if let Some(v) = v {
            m.power_parameters.insert(k.into(), v);
        }
    }
    for (name, mac) in &nics {
        m.add_interface(&mut world.data.ids, name, mac);
    }
    let disks = match req.block_devices {
        None => default_disks(&mut world.data.ids),
        Some(list) => list
            .into_iter()
            .map(|d| BlockDevice {
                id: world.data.ids.block(),
                model: d.model.unwrap_or_else(|| "QEMU HARDDISK".into()),
                serial: d.serial.unwrap_or_else(|| format!("SN-{}", d.name)),
                size: d.size.unwrap_or(480_103_981_056),
                name: d.name,
            })
            .collect(),
    };
    m.set_disks(disks);
    let i = machines::control_create(world, m, status, now);
    Ok(world.machine_json(i))
}

#[derive(Deserialize, Default)]
struct Advance {
    system_id: Option<String>,
}

fn advance(world: &mut World, bytes: &[u8], now: Millis) -> Result<Value, Reply> {
    let req: Advance = body(bytes)?;
    let targets: Vec<usize> = match &req.system_id {
        Some(id) => vec![world.find(id).ok_or_else(|| error(404, format!("no machine {id}")))?],
        None => (0..world.data.machines.len()).collect(),
    };
    let mut advanced = Vec::new();
    for i in targets {
        let before = world.data.machines[i].status;
        world.complete(i, now).map_err(Reply::from)?;
        if world.data.machines[i].status != before {
            advanced.push(json!({"system_id": world.data.machines[i].system_id, "from": before.label(),
                                 "to": world.data.machines[i].status.label()}));
        }
    }
    world.touch();
    Ok(json!({ "advanced": advanced }))
}

#[derive(Deserialize)]
struct Fail {
    stage: String,
    #[serde(default)]
    message: Option<String>,
}

fn fail(world: &mut World, i: usize, bytes: &[u8], now: Millis) -> Result<Value, Reply> {
    let req: Fail = body(bytes)?;
    let target = stage_status(&req.stage)
        .ok_or_else(|| error(400, format!("unknown stage {}: commissioning, deployment, disk_erasing or releasing", req.stage)))?;
    let failed_now = world.data.machines[i].status == target;
    if let Some(m) = req.message {
        world.data.machines[i].armed_messages.insert(req.stage.clone(), m);
    }
    if failed_now {
        world.fail(i, now).map_err(Reply::from)?;
    } else {
        world.data.machines[i].armed_failures.insert(req.stage);
    }
    Ok(json!({ "failed_now": failed_now, "machine": world.machine_json(i) }))
}

#[derive(Deserialize)]
struct Ip {
    ip: Option<String>,
}

fn ip(world: &mut World, i: usize, bytes: &[u8]) -> Result<Value, Reply> {
    let req: Ip = body(bytes)?;
    if let Some(ip) = &req.ip {
        ip.parse::<std::net::IpAddr>().map_err(|_| error(400, format!("bad IP {ip}")))?;
    }
    world.data.machines[i].pinned_ip = req.ip;
    Ok(world.machine_json(i))
}

#[derive(Deserialize)]
struct HwSync {
    last_sync: Option<String>,
    enable_hw_sync: Option<bool>,
}

fn hw_sync(world: &mut World, i: usize, bytes: &[u8]) -> Result<Value, Reply> {
    let req: HwSync = body(bytes)?;
    let last = match &req.last_sync {
        None => None,
        Some(t) => Some(parse_iso(t).ok_or_else(|| error(400, format!("bad datetime {t}")))?),
    };
    let m = &mut world.data.machines[i];
    if let Some(on) = req.enable_hw_sync {
        m.enable_hw_sync = on;
        m.sync_interval = on.then_some(super::machine::SYNC_INTERVAL_SECS);
    }
    m.last_sync = last;
    Ok(world.machine_json(i))
}

#[derive(Deserialize)]
struct PowerReq {
    state: String,
}

fn power(world: &mut World, i: usize, bytes: &[u8], now: Millis) -> Result<Value, Reply> {
    let req: PowerReq = body(bytes)?;
    let state = Power::parse(&req.state).ok_or_else(|| error(400, format!("bad power state {}", req.state)))?;
    world.data.machines[i].power = state;
    // MAAS finishes a release once it sees the power off.
    if state == Power::Off && world.data.machines[i].status == Status::Releasing {
        world.complete(i, now).map_err(Reply::from)?;
    }
    Ok(world.machine_json(i))
}

fn user_data(world: &World, id: &str) -> Reply {
    let Some(i) = world.find(id) else { return error(404, format!("no machine {id}")) };
    let Some(raw) = &world.data.machines[i].user_data else { return error(404, format!("machine {id} has no user_data")) };
    // As MAAS's metadata server: decoded when it is valid base64, else as given.
    let bytes = super::boot::userdata::decode_user_data(raw);
    Reply { status: 200, content_type: "application/octet-stream", body: bytes, headers: Vec::new() }
}

#[derive(Deserialize)]
struct OutageReq {
    mode: String,
}

fn outage(world: &mut World, bytes: &[u8]) -> Result<Value, Reply> {
    let req: OutageReq = body(bytes)?;
    world.outage = match req.mode.as_str() {
        "none" => Outage::None,
        "503" => Outage::Unavailable,
        "hang" => Outage::Hang,
        other => return Err(error(400, format!("unknown outage mode {other}: none, 503 or hang"))),
    };
    Ok(json!({ "mode": req.mode }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(w: &mut World, method: &str, path: &str, body: &str) -> (u16, Value) {
        let r = handle(w, method, path, body.as_bytes(), 1000);
        (r.status, serde_json::from_slice(&r.body).unwrap_or(Value::Null))
    }

    #[test]
    fn create_advance_fail() {
        let mut w = World::for_tests();
        let (s, m) =
            call(&mut w, "POST", "/machines", r#"{"hostname":"gpu-01","power_address":"10.0.0.9","mac_addresses":["AA:BB:CC:00:00:01"]}"#);
        assert_eq!(s, 200);
        assert_eq!(m["status_name"], "New");
        assert_eq!(m["power_type"], "ipmi");
        assert_eq!(m["interface_set"][0]["name"], "eno1");
        assert_eq!(m["boot_disk"]["model"], "DELLBOSS VD");
        let id = m["system_id"].as_str().unwrap().to_owned();
        assert_eq!(call(&mut w, "POST", "/machines", r#"{"mac_addresses":["aa:bb:cc:00:00:01"]}"#).0, 400);
        let (_, d) = call(&mut w, "POST", "/machines", r#"{"hostname":"gpu-02","status":"Deployed"}"#);
        assert_eq!((d["status_name"].as_str(), d["power_state"].as_str()), (Some("Deployed"), Some("on")));
        assert!(!d["ip_addresses"].as_array().unwrap().is_empty());
        let (_, r) = call(&mut w, "POST", "/machines", r#"{"hostname":"gpu-03","status":"Ready"}"#);
        assert_eq!((r["status_name"].as_str(), r["owner"].clone()), (Some("Ready"), Value::Null));
        w.change(0, Status::Commissioning, Some("admin"), 1000).unwrap();
        let (_, f) = call(&mut w, "POST", &format!("/machines/{id}/fail"), r#"{"stage":"deployment"}"#);
        assert_eq!(f["failed_now"], false);
        let (_, a) = call(&mut w, "POST", "/advance", "");
        assert_eq!(a["advanced"][0]["to"], "Ready");
        assert_eq!(call(&mut w, "POST", "/machines/nope/fail", r#"{"stage":"deployment"}"#).0, 404);
        assert_eq!(call(&mut w, "POST", "/outage", r#"{"mode":"503"}"#).0, 200);
        assert_eq!(w.outage, Outage::Unavailable);
    }

    #[test]
    fn user_data_read_back() {
        let mut w = World::for_tests();
        let (_, m) = call(&mut w, "POST", "/machines", "{}");
        let id = m["system_id"].as_str().unwrap().to_owned();
        w.data.machines[0].user_data = Some("I2Nsb3VkLWNvbmZpZwo=".into());
        assert_eq!(handle(&mut w, "GET", &format!("/machines/{id}/user_data"), b"", 0).body, b"#cloud-config\n");
        w.data.machines[0].user_data = Some("#!/bin/sh\necho hi\n".into());
        assert_eq!(handle(&mut w, "GET", &format!("/machines/{id}/user_data"), b"", 0).body, b"#!/bin/sh\necho hi\n");
    }
}
