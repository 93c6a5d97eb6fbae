//! The machines collection: the unpaged, filtered list (unknown parameters refused with
//! `No such constraint.`), create (admin → Commissioning unless `commission=false`;
//! anonymous enlistment → New), update, delete, and the collection ops `accept`, bulk
//! `release`, `allocate`, `power_parameters`, `is_registered` and `is_action_in_progress`.
//! Power types and their parameters are checked here as MAAS's power driver schema would.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::events::Level;
use super::forms::Params;
use super::lifecycle;
use super::machine::{Machine, new_system_id, normalise_mac, random_hostname};
use super::reply::{Millis, Reply};
use super::status::{Power, Status};
use super::world::World;

/// The list's filters (each also as `not_<name>`).
const FILTERS: [&str; 13] = [
    "id",
    "hostname",
    "mac_address",
    "domain",
    "zone",
    "pool",
    "agent_name",
    "status",
    "simple_status",
    "tags",
    "arch",
    "owner",
    "power_state",
];

/// Parameters the list lets through without filtering on them.
const PASS_THROUGH: [&str; 5] = ["op", "comment", "agent_name", "dry_run", "verbose"];

/// The power types the fake knows and the parameters each takes.
fn power_fields(power_type: &str) -> Option<&'static [&'static str]> {
    Some(match power_type {
        "ipmi" => &[
            "power_address",
            "power_user",
            "power_pass",
            "power_driver",
            "power_boot_type",
            "mac_address",
            "k_g",
            "cipher_suite_id",
            "privilege_level",
            "workaround_flags",
        ],
        "redfish" => &["power_address", "power_user", "power_pass", "node_id"],
        "virsh" => &["power_address", "power_id", "power_pass"],
        "manual" | "" => &[],
        _ => return None,
    })
}

/// Reads `power_type` and `power_parameters_*` (or one JSON `power_parameters`) into
/// `m`; 400 JSON on an unknown type or parameter unless `power_parameters_skip_check`.
fn apply_power(m: &mut Machine, p: &Params) -> Result<(), Reply> {
    if let Some(t) = p.get("power_type") {
        if power_fields(t).is_none() {
            return Err(Reply::field_error("power_type", format!("Select a valid choice. {t} is not one of the available choices.")));
        }
        if t != m.power_type {
            m.power_parameters.clear();
        }
        m.power_type = t.to_owned();
    }
    let mut given: BTreeMap<String, String> = BTreeMap::new();
    if let Some(j) = p.non_empty("power_parameters") {
        let Ok(Value::Object(obj)) = serde_json::from_str::<Value>(j) else {
            return Err(Reply::field_error("power_parameters", "Enter a valid JSON object."));
        };
        for (k, v) in obj {
            given.insert(k, v.as_str().map_or_else(|| v.to_string(), str::to_owned));
        }
    }
    for (k, v) in p.pairs() {
        if let Some(name) = k.strip_prefix("power_parameters_").filter(|n| *n != "skip_check") {
            given.insert(name.to_owned(), v.clone());
        }
    }
    let skip = p.get("power_parameters_skip_check").and_then(super::forms::parse_string_bool).unwrap_or(false);
    let known = power_fields(&m.power_type).unwrap_or(&[]);
    let unknown: Vec<&str> = given.keys().map(String::as_str).filter(|k| !known.contains(k)).collect();
    if !skip && !unknown.is_empty() {
        return Err(Reply::field_error("power_parameters", format!("Unknown parameter(s): {}.", unknown.join(", "))));
    }
    m.power_parameters.extend(given);
    Ok(())
}

fn valid_hostname(h: &str) -> bool {
    !h.is_empty() && h.len() <= 63 && h.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') && !h.starts_with('-') && !h.ends_with('-')
}

/// Checks a requested hostname against the syntax and the other machines.
fn check_hostname(world: &World, h: &str, except: Option<usize>) -> Result<(), Reply> {
    if !valid_hostname(h) {
        return Err(Reply::field_error("hostname", format!("Invalid hostname: {h}")));
    }
    if world.data.machines.iter().enumerate().any(|(i, m)| Some(i) != except && m.hostname == h) {
        return Err(Reply::field_error("hostname", "Node with this Hostname already exists."));
    }
    Ok(())
}

fn architecture(value: &str) -> Result<String, Reply> {
    let base = value.split('/').next().unwrap_or_default();
    if !["amd64", "arm64", "i386", "ppc64el", "s390x", "armhf"].contains(&base) {
        return Err(Reply::field_error(
            "architecture",
            format!("'{value}' is not a valid architecture.  It should be one of: 'amd64/generic', 'arm64/generic'."),
        ));
    }
    Ok(if value.contains('/') { value.to_owned() } else { format!("{value}/generic") })
}

/// `GET /machines/` (and `/nodes/`).
pub fn list(world: &World, p: &Params) -> Reply {
    let mut errors = serde_json::Map::new();
    for (k, _) in p.pairs() {
        let base = k.strip_prefix("not_").unwrap_or(k);
        let known = FILTERS.contains(&base) || PASS_THROUGH.contains(&k.as_str()) || k.starts_with("bridge_") || k.starts_with("oauth_");
        if !known {
            errors.insert(k.clone(), json!(["No such constraint."]));
        }
    }
    for mac in p.all("mac_address").into_iter().chain(p.all("not_mac_address")) {
        if normalise_mac(mac).is_none() {
            errors.insert("mac_address".into(), json!([format!("'{mac}' is not a valid MAC address.")]));
        }
    }
    for s in p.all("status").into_iter().chain(p.all("not_status")) {
        if Status::from_filter_name(s).is_none() {
            errors.insert("status".into(), json!([format!("Select a valid choice. {s} is not one of the available choices.")]));
        }
    }
    if !errors.is_empty() {
        return Reply::json(400, &Value::Object(errors));
    }
    let out: Vec<Value> =
        (0..world.data.machines.len()).filter(|i| matches(&world.data.machines[*i], p)).map(|i| world.machine_json(i)).collect();
    Reply::ok(&Value::Array(out))
}

/// Whether `m` passes every filter in `p` (values of one key are alternatives).
fn matches(m: &Machine, p: &Params) -> bool {
    FILTERS.iter().all(|f| {
        let hit = |v: &str| -> bool {
            match *f {
                "id" => m.system_id == v,
                "hostname" => m.hostname == v || m.fqdn() == v,
                "mac_address" => normalise_mac(v).is_some_and(|mac| m.interfaces.iter().any(|i| i.mac_address == mac)),
                "domain" => v == "maas",
                "zone" | "pool" => v == "default",
                "agent_name" => m.agent_name == v,
                "status" => Status::from_filter_name(v) == Some(m.status),
                "simple_status" => match v {
                    "failed" => m.status.label().starts_with("Failed") || m.status == Status::FailedReleasing,
                    other => m.status.label().eq_ignore_ascii_case(other),
                },
                "arch" => m.architecture == v || m.architecture.split('/').next() == Some(v),
                "owner" => m.owner.as_deref() == Some(v),
                "power_state" => m.power.as_str() == v,
                _ => false, // tags: the fake's machines have none
            }
        };
        let (yes, no) = (p.all(f), p.all(&format!("not_{f}")));
        (yes.is_empty() || yes.iter().any(|v| hit(v))) && !no.iter().any(|v| hit(v))
    })
}

/// `POST /machines/`: create (as an admin `user`) or enlist (anonymous).
pub fn create(world: &mut World, p: &Params, user: Option<&str>, now: Millis) -> Reply {
    let power_type = p.get("power_type").unwrap_or_default();
    let arch = match p.non_empty("architecture") {
        Some(a) => match architecture(a) {
            Ok(a) => a,
            Err(r) => return r,
        },
        None if power_type == "ipmi" => "amd64/generic".to_owned(),
        None => return Reply::field_error("architecture", "This field is required."),
    };
    let mut macs = Vec::new();
    for raw in p.all("mac_addresses").into_iter().filter(|v| !v.is_empty()) {
        let Some(mac) = normalise_mac(raw) else {
            return Reply::field_error("mac_addresses", format!("'{raw}' is not a valid MAC address."));
        };
        if let Some(other) = world.data.machines.iter().find(|m| m.interfaces.iter().any(|i| i.mac_address == mac)) {
            return Reply::field_error("mac_addresses", format!("MAC address {mac} already in use on {}.", other.fqdn()));
        }
        macs.push(mac);
    }
    if macs.is_empty() && power_type != "ipmi" {
        return Reply::field_error("mac_addresses", "This field is required.");
    }
    let (commission, deployed) = match (p.string_bool("commission"), p.string_bool("deployed")) {
        (Ok(c), Ok(d)) => (c, d.unwrap_or(false)),
        (Err(r), _) | (_, Err(r)) => return r,
    };
    let hostname = match p.non_empty("hostname") {
        Some(h) => {
            if let Err(r) = check_hostname(world, h, None) {
                return r;
            }
            h.to_owned()
        }
        None => random_hostname(),
    };
    let taken: Vec<&str> = world.data.machines.iter().map(|m| m.system_id.as_str()).collect();
    let mut m = Machine::new(world.data.ids.machine(), new_system_id(&taken), hostname);
    m.architecture = arch;
    m.description = p.get("description").unwrap_or_default().to_owned();
    if let Err(r) = apply_power(&mut m, p) {
        return r;
    }
    for (n, mac) in macs.iter().enumerate() {
        m.add_interface(&mut world.data.ids, &format!("eth{n}"), mac);
    }
    world.data.machines.push(m);
    let i = world.data.machines.len() - 1;
    world.event(i, Level::Info, "New", "Enlisted", user, now);
    // Admins commission by default; anonymous enlistment only when asked.
    let start_commissioning = if user.is_some() { commission.unwrap_or(true) } else { commission.unwrap_or(false) };
    if deployed && user.is_some() {
        mark_deployed(world, i, user.unwrap_or_default(), now);
    } else if start_commissioning {
        if let Err(r) = world.change(i, Status::Commissioning, user, now) {
            return r.into();
        }
    }
    Reply::ok(&world.machine_json(i))
}

/// Records machine `i` as already deployed (create with `deployed=true`, or the control
/// API): MAAS sets the status directly, and mints the metadata token.
pub fn mark_deployed(world: &mut World, i: usize, user: &str, now: Millis) {
    {
        let m = &mut world.data.machines[i];
        m.commissioned = true;
        m.owner = Some(user.to_owned());
        m.osystem = "ubuntu".into();
        m.distro_series = "noble".into();
    }
    // Through Allocated → Deploying → Deployed so the token and addresses appear as they
    // would; the walk is the legal one, only its start (New → Allocated) is forced.
    world.data.machines[i].status = Status::Ready;
    let _ = world.walk(i, &[Status::Allocated, Status::Deploying], Some(user), now);
    let _ = world.complete(i, now);
}

/// `PUT /machines/{id}/`.
pub fn update(world: &mut World, i: usize, p: &Params) -> Reply {
    if let Some(h) = p.non_empty("hostname") {
        if let Err(r) = check_hostname(world, h, Some(i)) {
            return r;
        }
    }
    let arch = match p.non_empty("architecture").map(architecture) {
        Some(Err(r)) => return r,
        Some(Ok(a)) => Some(a),
        None => None,
    };
    let ints = ["cpu_count", "memory", "swap_size"].map(|k| p.integer(k));
    if let Some(Err(r)) = ints.iter().find(|r| r.is_err()) {
        return r.clone();
    }
    let mut m = world.data.machines[i].clone();
    if let Err(r) = apply_power(&mut m, p) {
        return r;
    }
    if let Some(h) = p.non_empty("hostname") {
        m.hostname = h.to_owned();
    }
    if let Some(d) = p.get("description") {
        m.description = d.to_owned();
    }
    if let Some(k) = p.get("min_hwe_kernel") {
        m.min_hwe_kernel = k.to_owned();
    }
    m.architecture = arch.unwrap_or(m.architecture);
    if let [Ok(cpu), Ok(mem), Ok(swap)] = ints {
        m.cpu_count = cpu.unwrap_or(m.cpu_count);
        m.memory = mem.unwrap_or(m.memory);
        m.swap_size = swap.or(m.swap_size);
    }
    world.data.machines[i] = m;
    world.touch();
    Reply::ok(&world.machine_json(i))
}

/// `DELETE /machines/{id}/`.
pub fn delete(world: &mut World, i: usize) -> Reply {
    world.stop_boot(i);
    world.data.machines.remove(i);
    world.touch();
    Reply::no_content()
}

/// Resolves `machines=` ids; 400 `Unknown machine(s): …` when any is unknown.
fn resolve(world: &World, p: &Params) -> Result<Vec<usize>, Reply> {
    let ids = p.all("machines");
    let unknown: Vec<&str> = ids.iter().copied().filter(|id| world.find(id).is_none()).collect();
    if !unknown.is_empty() {
        return Err(Reply::text(400, format!("Unknown machine(s): {}.", unknown.join(", "))));
    }
    Ok(ids.iter().filter_map(|id| world.find(id)).collect())
}

/// `POST /machines/?op=accept`.
pub fn accept(world: &mut World, p: &Params, user: &str, now: Millis) -> Reply {
    let idx = match resolve(world, p) {
        Ok(i) => i,
        Err(r) => return r,
    };
    let mut moves = Vec::new();
    for &i in &idx {
        match lifecycle::accept(&world.view(i)) {
            Ok(Some(to)) => moves.push((i, to)),
            Ok(None) => {}
            Err(r) => return r.into(),
        }
    }
    let mut out = Vec::new();
    for (i, to) in moves {
        if let Err(r) = world.change(i, to, Some(user), now) {
            return r.into();
        }
        out.push(world.machine_json(i));
    }
    Reply::ok(&Value::Array(out))
}

/// `POST /machines/?op=release`: Ready skipped, Releasing refused (unlike the per-machine op).
pub fn bulk_release(world: &mut World, p: &Params, user: &str, now: Millis) -> Reply {
    let idx = match resolve(world, p) {
        Ok(i) => i,
        Err(r) => return r,
    };
    let mut plans = Vec::new();
    let mut refused = Vec::new();
    for &i in &idx {
        match lifecycle::bulk_release(&world.view(i)) {
            Ok(Some(plan)) => plans.push((i, plan)),
            Ok(None) => {}
            Err(lifecycle::Refusal::Conflict(which)) => refused.push(which),
            Err(other) => return other.into(),
        }
    }
    if !refused.is_empty() {
        return Reply::text(409, format!("Machine(s) cannot be released in their current state: {}.", refused.join(", ")));
    }
    let mut out = Vec::new();
    for (i, plan) in plans {
        if let Err(r) = world.start_release(i, &plan, Some(user), now) {
            return r.into();
        }
        out.push(json!(world.data.machines[i].system_id));
    }
    Reply::ok(&Value::Array(out))
}

/// `POST /machines/?op=allocate` with `system_id` or `name` (the fake's constraints).
pub fn allocate(world: &mut World, p: &Params, user: &str, now: Millis) -> Reply {
    let want_id = p.get("system_id");
    let want_name = p.get("name").or_else(|| p.get("hostname"));
    let found = world.data.machines.iter().position(|m| {
        m.status == Status::Ready
            && want_id.is_none_or(|id| m.system_id == id)
            && want_name.is_none_or(|n| m.hostname == n || m.fqdn() == n)
    });
    let Some(i) = found else {
        let asked: Vec<String> = p.pairs().iter().filter(|(k, _)| k != "op").map(|(k, v)| format!("{k}={v}")).collect();
        return Reply::text(409, format!("No available machine matches constraints: {}", asked.join(" ")));
    };
    if let Some(a) = p.get("agent_name") {
        world.data.machines[i].agent_name = a.to_owned();
    }
    match world.change(i, Status::Allocated, Some(user), now) {
        Ok(()) => Reply::ok(&world.machine_json(i)),
        Err(r) => r.into(),
    }
}

/// `GET /machines/?op=power_parameters`: every (or the `id`-named) machine's parameters.
pub fn power_parameters(world: &World, p: &Params) -> Reply {
    let ids = p.all("id");
    let out: serde_json::Map<String, Value> = world
        .data
        .machines
        .iter()
        .filter(|m| ids.is_empty() || ids.contains(&m.system_id.as_str()))
        .map(|m| (m.system_id.clone(), json!(m.power_parameters)))
        .collect();
    Reply::ok(&Value::Object(out))
}

/// `GET /machines/?op=is_registered&mac_address=…` (anonymous too).
pub fn is_registered(world: &World, p: &Params, in_progress: bool) -> Reply {
    let Some(mac) = p.get("mac_address").and_then(normalise_mac) else {
        return Reply::field_error("mac_address", "This field is required.");
    };
    let m = world.data.machines.iter().find(|m| m.interfaces.iter().any(|i| i.mac_address == mac));
    let answer = match m {
        None => false,
        Some(m) if in_progress => matches!(m.status, Status::Commissioning | Status::Deploying | Status::DiskErasing | Status::Releasing),
        Some(_) => true,
    };
    Reply::ok(&json!(answer))
}

/// A machine as the control API creates it, in `status`, owned by the first API user when
/// the status implies an owner.
pub fn control_create(world: &mut World, m: Machine, status: Status, now: Millis) -> usize {
    world.data.machines.push(m);
    let i = world.data.machines.len() - 1;
    world.event(i, Level::Info, "New", "Enlisted", None, now);
    let user = world.default_user();
    if status == Status::Deployed {
        mark_deployed(world, i, &user, now);
        return i;
    }
    let m = &mut world.data.machines[i];
    m.commissioned = !matches!(status, Status::New | Status::Commissioning | Status::FailedCommissioning);
    m.status = status;
    m.power = if matches!(status, Status::Commissioning | Status::Deploying | Status::DiskErasing) { Power::On } else { Power::Off };
    if m.commissioned {
        m.storage_layout = Some("flat".into());
        (m.cpu_count, m.memory) = (112, 2_097_152);
    }
    if !lifecycle::clears_owner(status) && status.is_releasable() || status == Status::Commissioning {
        m.owner = Some(user);
    }
    m.in_flight_since = Some(now);
    if status == Status::Deploying {
        // Mint the token and addresses the way a real deployment start does.
        world.data.machines[i].status = Status::Allocated;
        let owner = world.data.machines[i].owner.clone();
        let _ = world.change(i, Status::Deploying, owner.as_deref(), now);
    }
    i
}
