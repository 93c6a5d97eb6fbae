//! The per-machine ops on `/machines/{system_id}/`: `commission`, `deploy`, `release`,
//! `abort`, `power_on`, `power_off`, `mark_broken`, `mark_fixed`, `set_storage_layout`
//! (POST) and `power_parameters`, `query_power_state`, `get_token` (GET). Each parses its
//! form the way MAAS does (checkbox or `StringBool` booleans, `distro_series` spellings),
//! asks [`lifecycle`] for the decision and applies it through [`World::change`]. `None`
//! means the op is unknown for that method (the router answers `Unrecognised signature`).

use serde_json::{Value, json};

use super::events::Level;
use super::forms::Params;
use super::lifecycle::{self, Refusal};
use super::reply::{Millis, Reply};
use super::status::{Power, Status};
use super::world::World;

/// The Ubuntu series the fake's "boot images" offer: name and version.
const SERIES: [(&str, &str); 3] = [("focal", "20.04"), ("jammy", "22.04"), ("noble", "24.04")];

/// MAAS's default deploy series (config `default_distro_series`).
const DEFAULT_SERIES: &str = "noble";

/// The storage layouts `set_storage_layout` takes.
const LAYOUTS: [&str; 7] = ["flat", "lvm", "bcache", "vmfs6", "vmfs7", "custom", "blank"];

/// Reads `distro_series` as `jammy`, `ubuntu/jammy` or `22.04`.
pub fn parse_series(text: &str) -> Option<&'static str> {
    let t = text.strip_prefix("ubuntu/").unwrap_or(text);
    SERIES.iter().find(|(name, version)| *name == t || *version == t).map(|(name, _)| *name)
}

/// GET ops.
pub fn get_op(world: &World, i: usize, op: &str) -> Option<Reply> {
    let m = &world.data.machines[i];
    Some(match op {
        "power_parameters" => Reply::ok(&json!(m.power_parameters)),
        "query_power_state" => {
            let state = if m.power_queryable() { m.power.as_str() } else { "unknown" };
            Reply::ok(&json!({ "state": state }))
        }
        "get_token" => Reply::ok(
            &m.token.as_ref().map_or(Value::Null, |(ck, tk, ts)| json!({ "token_key": tk, "token_secret": ts, "consumer_key": ck })),
        ),
        _ => return None,
    })
}

/// POST ops.
pub fn post_op(world: &mut World, i: usize, op: &str, p: &Params, user: &str, now: Millis) -> Option<Reply> {
    let result = match op {
        "commission" => commission(world, i, p, user, now),
        "deploy" => deploy(world, i, p, user, now),
        "release" => release(world, i, p, user, now),
        "abort" => abort(world, i, user, now),
        "power_on" => power_on(world, i, p, user, now),
        "power_off" => return Some(power_off(world, i, user, now)),
        "mark_broken" => mark_broken(world, i, p, user, now),
        "mark_fixed" => mark_fixed(world, i, user, now),
        "set_storage_layout" => set_storage_layout(world, i, p),
        _ => return None,
    };
    Some(match result {
        Ok(Some(body)) => Reply::ok(&body),
        Ok(None) => Reply::ok(&world.machine_json(i)),
        Err(r) => r,
    })
}

/// An op's outcome: `Ok(None)` answers the machine as it now is, `Ok(Some(v))` answers `v`.
type OpResult = Result<Option<Value>, Reply>;

fn refused(r: Refusal) -> Reply {
    r.into()
}

fn commission(world: &mut World, i: usize, p: &Params, user: &str, now: Millis) -> OpResult {
    // The checkbox flags are accepted (and `0` means true, as in MAAS) but change nothing here.
    let _flags = ["enable_ssh", "skip_bmc_config", "skip_networking", "skip_storage"].map(|k| p.checkbox(k));
    let to = lifecycle::commission(&world.view(i)).map_err(refused)?;
    world.event(i, Level::Debug, "User starting commissioning", "", Some(user), now);
    world.change(i, to, Some(user), now).map_err(refused)?;
    Ok(None)
}

fn deploy(world: &mut World, i: usize, p: &Params, user: &str, now: Millis) -> OpResult {
    let hw_sync = p.string_bool("enable_hw_sync")?.unwrap_or(false);
    let ephemeral = p.string_bool("ephemeral_deploy")?.unwrap_or(false);
    let crash_dump = p.string_bool("enable_kernel_crash_dump")?.unwrap_or(false);
    for k in ["install_kvm", "install_rackd", "register_vmhost"] {
        if p.string_bool(k)? == Some(true) {
            return Err(Reply::text(400, format!("{k} is not supported by this MAAS: it has no KVM or rack images.")));
        }
    }
    if let Some(os) = p.non_empty("osystem").filter(|o| *o != "ubuntu") {
        return Err(Reply::field_error("osystem", format!("'{os}' is not a valid osystem.  It should be one of: '', 'ubuntu'.")));
    }
    let series = match p.non_empty("distro_series") {
        None => DEFAULT_SERIES,
        Some(s) => parse_series(s).ok_or_else(|| {
            let names: Vec<String> = SERIES.iter().map(|(n, _)| format!("'ubuntu/{n}'")).collect();
            Reply::field_error(
                "distro_series",
                format!("'{s}' is not a valid distro_series.  It should be one of: '', {}.", names.join(", ")),
            )
        })?,
    };
    if let Some(b) = p.non_empty("bridge_type").filter(|b| !matches!(*b, "standard" | "ovs")) {
        return Err(Reply::field_error("bridge_type", format!("Select a valid choice. {b} is not one of the available choices.")));
    }
    let steps = lifecycle::deploy(&world.view(i), user).map_err(refused)?;
    world.event(i, Level::Debug, "User starting deployment", "", Some(user), now);
    world.walk(i, &steps, Some(user), now).map_err(refused)?;
    let m = &mut world.data.machines[i];
    m.osystem = "ubuntu".into();
    m.distro_series = series.into();
    m.user_data = p.get("user_data").map(str::to_owned);
    m.hwe_kernel = p.non_empty("hwe_kernel").map(str::to_owned);
    if let Some(a) = p.get("agent_name") {
        m.agent_name = a.to_owned();
    }
    m.enable_hw_sync = hw_sync;
    let interval = world.hw_sync_interval_secs();
    let m = &mut world.data.machines[i];
    m.sync_interval = hw_sync.then_some(interval);
    m.last_sync = None;
    m.ephemeral_deploy = ephemeral;
    m.enable_kernel_crash_dump = crash_dump;
    world.touch();
    Ok(None)
}

fn release(world: &mut World, i: usize, p: &Params, user: &str, now: Millis) -> OpResult {
    let erase = p.checkbox("erase") || p.checkbox("secure_erase") || p.checkbox("quick_erase");
    let plan = lifecycle::release(&world.view(i), erase).map_err(refused)?;
    world.start_release(i, &plan, Some(user), now).map_err(refused)?;
    Ok(None)
}

fn abort(world: &mut World, i: usize, user: &str, now: Millis) -> OpResult {
    let to = lifecycle::abort(&world.view(i)).map_err(refused)?;
    // MAAS applies the abort after powering off, so its answer still shows the old status.
    let before = world.machine_json(i);
    world.event(i, Level::Debug, "User aborting operation", "", Some(user), now);
    // Deploying → Allocated keeps the machine with its owner (and its token), whoever aborts.
    let owner = world.data.machines[i].owner.clone();
    world.change(i, to, owner.as_deref(), now).map_err(refused)?;
    world.data.machines[i].power = Power::Off;
    Ok(Some(before))
}

fn power_on(world: &mut World, i: usize, p: &Params, user: &str, now: Millis) -> OpResult {
    let start = lifecycle::power_on(&world.view(i)).map_err(refused)?;
    world.event(i, Level::Debug, "User powering up node", "", Some(user), now);
    if let Some(to) = start {
        world.change(i, to, Some(user), now).map_err(refused)?;
        let m = &mut world.data.machines[i];
        if let Some(u) = p.get("user_data") {
            m.user_data = Some(u.to_owned());
        }
        if m.osystem.is_empty() {
            (m.osystem, m.distro_series) = ("ubuntu".into(), DEFAULT_SERIES.into());
        }
    }
    world.data.machines[i].power = Power::On;
    world.touch();
    Ok(None)
}

fn power_off(world: &mut World, i: usize, user: &str, now: Millis) -> Reply {
    if !world.data.machines[i].power_queryable() {
        // No power driver to send the action through: MAAS answers null.
        return Reply::ok(&Value::Null);
    }
    world.event(i, Level::Debug, "User powering down node", "", Some(user), now);
    world.data.machines[i].power = Power::Off;
    // The OS goes down with the power: a booted machine's agent stops.
    world.stop_boot(i);
    world.touch();
    // A release waits for the power to go off; now it has.
    if world.data.machines[i].status == Status::Releasing {
        if let Err(r) = world.complete(i, now) {
            return r.into();
        }
    }
    Reply::ok(&world.machine_json(i))
}

fn mark_broken(world: &mut World, i: usize, p: &Params, user: &str, now: Millis) -> OpResult {
    let to = lifecycle::mark_broken(&world.view(i), user).map_err(refused)?;
    let comment = p.get("comment").or_else(|| p.get("error_description")).unwrap_or_default().to_owned();
    let from = world.data.machines[i].status;
    world.event(i, Level::Debug, "User marking node broken", &comment, Some(user), now);
    // Releasable machines, a deployed one included, are released first (MAAS's `_release`):
    // the deployment and its hardware-sync settings go, and when the power is already off or
    // cannot be queried the release finishes at once, taking the owner (and so the token).
    // mark_fixed still returns a machine that was Deployed to Deployed.
    if from.is_releasable() {
        let at_once = world.data.machines[i].power == Power::Off || !world.data.machines[i].power_queryable();
        world.clear_deployment(i);
        world.data.machines[i].power = Power::Off;
        if at_once {
            world.set_owner(i, None);
        }
    }
    world.change(i, to, Some(user), now).map_err(refused)?;
    let m = &mut world.data.machines[i];
    // Marking a Broken machine broken again keeps what it was before it first broke, so
    // mark_fixed still returns a Deployed machine to Deployed.
    if from != Status::Broken {
        m.before_broken = Some(from);
    }
    m.error_description = comment;
    Ok(None)
}

fn mark_fixed(world: &mut World, i: usize, user: &str, now: Millis) -> OpResult {
    let to = lifecycle::mark_fixed(&world.view(i)).map_err(refused)?;
    world.event(i, Level::Debug, "User marking node fixed", "", Some(user), now);
    let owner = world.data.machines[i].owner.clone();
    world.change(i, to, owner.as_deref(), now).map_err(refused)?;
    let m = &mut world.data.machines[i];
    m.before_broken = None;
    m.error_description.clear();
    Ok(None)
}

fn set_storage_layout(world: &mut World, i: usize, p: &Params) -> OpResult {
    lifecycle::set_storage_layout(&world.view(i)).map_err(refused)?;
    let Some(layout) = p.non_empty("storage_layout") else {
        return Err(Reply::field_error("storage_layout", "This field is required."));
    };
    if !LAYOUTS.contains(&layout) {
        return Err(Reply::field_error("storage_layout", format!("Select a valid choice. {layout} is not one of the available choices.")));
    }
    if world.data.machines[i].boot_disk.is_none() {
        return Err(Reply::text(400, "Machine is missing a boot disk; no storage layout can be applied."));
    }
    world.data.machines[i].storage_layout = Some(layout.to_owned());
    world.touch();
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn world(status: Status) -> World {
        World::with_machine(status, |m| {
            m.power_type = "ipmi".into();
            m.commissioned = true;
        })
    }

    fn post(w: &mut World, op: &str, q: &str) -> Reply {
        post_op(w, 0, op, &Params::from_query(q), "admin", 1000).unwrap()
    }

    #[test]
    fn series_spellings() {
        assert_eq!(parse_series("jammy"), Some("jammy"));
        assert_eq!(parse_series("ubuntu/jammy"), Some("jammy"));
        assert_eq!(parse_series("22.04"), Some("jammy"));
        assert_eq!(parse_series("hirsute"), None);
    }

    #[test]
    fn deploy_stores_options() {
        let mut w = world(Status::Ready);
        let r = post(&mut w, "deploy", "distro_series=22.04&user_data=aGVsbG8%3D&enable_hw_sync=yes");
        assert_eq!(r.status, 200);
        let m = &w.data.machines[0];
        assert_eq!((m.status, m.owner.as_deref(), m.distro_series.as_str()), (Status::Deploying, Some("admin"), "jammy"));
        assert_eq!(m.user_data.as_deref(), Some("aGVsbG8="));
        assert_eq!((m.enable_hw_sync, m.sync_interval), (true, Some(900)));
        assert_eq!(post(&mut w, "deploy", "").status, 409);
        let mut w = world(Status::Ready);
        assert_eq!(post(&mut w, "deploy", "enable_hw_sync=maybe").status, 400);
        assert_eq!(post(&mut w, "deploy", "distro_series=hirsute").status, 400);
        assert_eq!(w.data.machines[0].status, Status::Ready, "a refused deploy changes nothing");
    }

    #[test]
    fn mark_broken_releases_a_deployed_machine_first() {
        let mut w = world(Status::Deployed);
        {
            let m = &mut w.data.machines[0];
            m.owner = Some("admin".into());
            m.power = Power::On;
            (m.osystem, m.distro_series) = ("ubuntu".into(), "noble".into());
            (m.enable_hw_sync, m.sync_interval, m.last_sync) = (true, Some(super::super::machine::SYNC_INTERVAL_SECS), Some(500));
        }
        assert_eq!(post(&mut w, "mark_broken", "comment=fan").status, 200);
        let m = &w.data.machines[0];
        assert_eq!((m.status, m.osystem.as_str(), m.distro_series.as_str()), (Status::Broken, "", ""));
        assert_eq!((m.enable_hw_sync, m.sync_interval, m.last_sync), (false, None, None), "release clears hardware sync");
        assert_eq!(m.owner.as_deref(), Some("admin"), "powered on: the release was still under way");
        assert_eq!(post(&mut w, "mark_broken", "comment=still").status, 200, "broken twice");
        assert_eq!(post(&mut w, "mark_fixed", "").status, 200);
        assert_eq!(w.data.machines[0].status, Status::Deployed, "it was Deployed before, however often it was marked broken");

        // Power already off: the release finishes at once and the owner (with the token) goes.
        let mut w = world(Status::Deployed);
        {
            let m = &mut w.data.machines[0];
            m.owner = Some("admin".into());
            m.power = Power::Off;
            m.token = Some(("c".into(), "k".into(), "s".into()));
        }
        assert_eq!(post(&mut w, "mark_broken", "").status, 200);
        let m = &w.data.machines[0];
        assert_eq!((m.status, m.owner.as_deref(), m.token.is_none()), (Status::Broken, None, true));
    }

    #[test]
    fn release_abort_and_power() {
        let mut w = world(Status::Deployed);
        w.data.machines[0].owner = Some("admin".into());
        w.data.machines[0].power = Power::On;
        assert_eq!(post(&mut w, "release", "erase=0").status, 200);
        assert_eq!(w.data.machines[0].status, Status::DiskErasing, "erase=0 is a checkbox: it erases");
        let r = post(&mut w, "abort", "");
        let body: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(body["status_name"], "Disk erasing", "the answer shows the status before the abort");
        assert_eq!(w.data.machines[0].status, Status::FailedDiskErasing);
        assert_eq!(post(&mut w, "release", "").status, 200);
        assert_eq!(w.data.machines[0].status, Status::Ready, "power already off: released at once");
        assert_eq!(post(&mut w, "power_on", "").status, 409);
        assert_eq!(post(&mut w, "release", "").status, 200, "release of Ready is a no-op");
        assert!(post_op(&mut w, 0, "frobnicate", &Params::default(), "admin", 0).is_none());
        assert_eq!(post(&mut w, "mark_broken", "").status, 403, "only the owner may mark it broken");
    }
}
