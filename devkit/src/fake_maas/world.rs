//! The fake MAAS's whole state and the one place a machine's status changes: every change
//! is checked against the transition table, logs MAAS-like events, and applies what MAAS
//! ties to it (the owner cleared on New and Ready, the metadata token deleted when the
//! owner changes and minted at deploy when there is none, power following the operation, addresses handed out
//! at deployment and taken back at release, `last_sync` set when a deployment ends).
//!
//! In-flight statuses (Commissioning, Deploying, Releasing, Disk erasing) complete when a
//! test calls `/_fake/advance`, or after the configured delay; there are no timers: every
//! request first calls [`World::tick`] with the current time, which completes what is due.
//! With `--state FILE` the persistent part is written atomically after each change.
//!
//! With booting on ([`super::boot`]), a deployment that ends boots the machine's user data,
//! the tick records what the boots reported as events, and hardware sync is reported only by
//! booted machines whose credentials check out; release, mark broken and delete stop them.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::auth::{ApiKey, Nonces};
use super::boot::Booter;
use super::boot::userdata::CredsCheck;
use super::events::{Event, Level};
use super::lifecycle::{self, Refusal, View};
use super::machine::{Ids, Link, Machine, SYNC_INTERVAL_SECS, default_disks, random_mac, random_string};
use super::reply::Millis;
use super::status::{Power, Status};
use super::subnets::{Cidr, Subnet};

/// How long each in-flight status lasts before it completes by itself; 0 = until
/// `/_fake/advance`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Delays {
    /// Commissioning.
    pub commission_secs: u64,
    /// Deploying.
    pub deploy_secs: u64,
    /// Releasing.
    pub release_secs: u64,
    /// Disk erasing.
    pub erase_secs: u64,
}

impl Delays {
    fn for_status(&self, s: Status) -> u64 {
        match s {
            Status::Commissioning => self.commission_secs,
            Status::Deploying => self.deploy_secs,
            Status::Releasing => self.release_secs,
            Status::DiskErasing => self.erase_secs,
            _ => 0,
        }
    }
}

/// What the API does instead of answering (`/_fake/outage`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Outage {
    /// Answers normally.
    #[default]
    None,
    /// Every API request is 503 with `Retry-After: 10`.
    Unavailable,
    /// Every API request is accepted and left unanswered.
    Hang,
}

/// The part of the state that `--state FILE` keeps.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Data {
    /// Id counters.
    pub ids: Ids,
    /// Machines, by internal id.
    pub machines: Vec<Machine>,
    /// Subnets.
    pub subnets: Vec<Subnet>,
    /// Events, oldest first.
    pub events: Vec<Event>,
    /// Server settings (`/maas/?op=set_config`).
    #[serde(default)]
    pub config: std::collections::BTreeMap<String, String>,
}

/// Everything the fake knows.
#[derive(Debug)]
pub struct World {
    /// The API keys (each its own admin user).
    pub keys: Vec<ApiKey>,
    /// In-flight durations.
    pub delays: Delays,
    /// Where to persist [`Data`].
    pub state_file: Option<PathBuf>,
    /// The persistent state.
    pub data: Data,
    /// OAuth nonces seen.
    pub nonces: Nonces,
    /// Every API request seen (`/_fake/requests`).
    pub requests: Vec<Value>,
    /// The outage mode.
    pub outage: Outage,
    /// Boots deployed machines' user data (`--boot-dir`); `None`: deploy only changes status.
    pub boot: Option<Booter>,
    dirty: bool,
}

/// The subnet commissioned machines' boot interfaces are linked AUTO on.
pub const PXE_SUBNET: &str = "10.20.0.0/16";

/// The stages `/_fake/machines/{id}/fail` names, and the in-flight status each fails.
pub fn stage_status(stage: &str) -> Option<Status> {
    Some(match stage {
        "commissioning" => Status::Commissioning,
        "deployment" => Status::Deploying,
        "releasing" => Status::Releasing,
        "disk_erasing" => Status::DiskErasing,
        _ => return None,
    })
}

fn stage_of(s: Status) -> Option<&'static str> {
    ["commissioning", "deployment", "releasing", "disk_erasing"].into_iter().find(|st| stage_status(st) == Some(s))
}

/// Why the state file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StateFileError {
    /// Reading, writing or renaming it failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// It does not hold a saved world.
    #[error("{}: {source}", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// The parser's error.
        #[source]
        source: serde_json::Error,
    },
    /// The world could not be encoded.
    #[error(transparent)]
    Encode {
        /// The encoder's error.
        #[from]
        source: serde_json::Error,
    },
}

impl World {
    /// A fresh world, loading `state_file` when it exists.
    pub fn new(keys: Vec<ApiKey>, delays: Delays, state_file: Option<PathBuf>) -> Result<World, StateFileError> {
        let data = match &state_file {
            Some(p) if p.exists() => {
                let text = std::fs::read_to_string(p).map_err(|source| StateFileError::Io { path: p.clone(), source })?;
                serde_json::from_str(&text).map_err(|source| StateFileError::Json { path: p.clone(), source })?
            }
            _ => Data::default(),
        };
        Ok(World {
            keys,
            delays,
            state_file,
            data,
            nonces: Nonces::default(),
            requests: Vec::new(),
            outage: Outage::None,
            boot: None,
            dirty: false,
        })
    }

    /// A world with one key and no persistence, for unit tests.
    #[cfg(test)]
    pub fn for_tests() -> World {
        World::new(vec![ApiKey::parse("admin:tk:ts").unwrap()], Delays::default(), None).unwrap()
    }

    /// A test world holding one machine `abc123` (`gpu-01`, interface `eno1`, the default
    /// disks) in `status`, passed through `adjust` before it is added.
    #[cfg(test)]
    pub fn with_machine(status: crate::fake_maas::status::Status, adjust: impl FnOnce(&mut crate::fake_maas::machine::Machine)) -> World {
        let mut w = World::for_tests();
        let mut m = crate::fake_maas::machine::Machine::new(1, "abc123".into(), "gpu-01".into());
        m.add_interface(&mut w.data.ids, "eno1", "52:54:00:00:00:01");
        m.set_disks(crate::fake_maas::machine::default_disks(&mut w.data.ids));
        m.status = status;
        adjust(&mut m);
        w.data.machines.push(m);
        w
    }

    /// Marks the persistent state changed.
    pub fn touch(&mut self) {
        self.dirty = true;
    }

    /// Writes the state file (atomically: a temporary file renamed over it) if anything
    /// changed since the last save.
    pub fn save_if_dirty(&mut self) -> Result<(), StateFileError> {
        if !std::mem::take(&mut self.dirty) {
            return Ok(());
        }
        let Some(path) = &self.state_file else { return Ok(()) };
        let text = serde_json::to_vec_pretty(&self.data).map_err(|source| StateFileError::Encode { source })?;
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, path))
            .map_err(|source| StateFileError::Io { path: path.clone(), source })
    }

    /// The index of a machine by system_id.
    pub fn find(&self, system_id: &str) -> Option<usize> {
        self.data.machines.iter().position(|m| m.system_id == system_id)
    }

    /// What the state machine looks at.
    pub fn view(&self, i: usize) -> View<'_> {
        let m = &self.data.machines[i];
        View {
            system_id: &m.system_id,
            status: m.status,
            owner: m.owner.as_deref(),
            power: m.power,
            power_queryable: m.power_queryable(),
            interfaces: m.interfaces.len(),
            before_broken: m.before_broken,
            commissioned: m.commissioned,
        }
    }

    /// Machine `i`'s JSON.
    pub fn machine_json(&self, i: usize) -> Value {
        self.data.machines[i].to_json(&self.data.subnets)
    }

    /// Every machine's metadata token, for the OAuth check.
    pub fn machine_tokens(&self) -> Vec<(String, String, String)> {
        self.data.machines.iter().filter_map(|m| m.token.clone()).collect()
    }

    /// The first API user: who owns machines the control API creates already allocated.
    pub fn default_user(&self) -> String {
        self.keys.first().map_or_else(|| "admin".to_owned(), |k| k.username().to_owned())
    }

    /// Appends an event about machine `i`.
    pub fn event(&mut self, i: usize, level: Level, kind: &str, description: &str, user: Option<&str>, now: Millis) {
        let id = Ids::next(&mut self.data.ids.event);
        let m = &mut self.data.machines[i];
        if level != Level::Debug {
            m.status_message = Some(kind.to_owned());
        }
        let event = Event {
            id,
            system_id: m.system_id.clone(),
            hostname: m.hostname.clone(),
            username: user.map(str::to_owned),
            level,
            created: now,
            kind: kind.to_owned(),
            description: description.to_owned(),
        };
        self.data.events.push(event);
        self.touch();
    }

    /// Sets machine `i`'s owner; a different owner deletes its metadata token.
    pub(super) fn set_owner(&mut self, i: usize, owner: Option<String>) {
        let m = &mut self.data.machines[i];
        if m.owner != owner {
            m.token = None;
            m.owner = owner;
        }
    }

    /// Changes machine `i`'s status to `to`, as `user`: checked against the table, logged,
    /// and with what MAAS ties to entering `to`.
    pub fn change(&mut self, i: usize, to: Status, user: Option<&str>, now: Millis) -> Result<(), Refusal> {
        let from = self.data.machines[i].status;
        lifecycle::step(from, to)?;
        match to {
            Status::Commissioning | Status::Allocated => self.set_owner(i, user.map(str::to_owned)),
            s if lifecycle::clears_owner(s) => self.set_owner(i, None),
            _ => {}
        }
        let m = &mut self.data.machines[i];
        m.status = to;
        m.in_flight_since = stage_of(to).is_some().then_some(now);
        match to {
            Status::Commissioning | Status::DiskErasing => m.power = Power::On,
            Status::Deploying => {
                m.power = Power::On;
                // MAAS gets or creates the token: a redeploy by the same owner (after an
                // abort) keeps it; an owner change has already deleted it.
                m.token.get_or_insert_with(|| {
                    (
                        random_string(b"ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789", 18),
                        random_string(b"ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789", 18),
                        random_string(b"ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789", 32),
                    )
                });
                self.assign_addresses(i);
            }
            _ => {}
        }
        let released = matches!(from, Status::Releasing | Status::DiskErasing) && matches!(to, Status::Ready | Status::New);
        let kind = if released { "Released" } else { to.label() };
        self.event(i, Level::Info, kind, &format!("From '{}' to '{}'", from.label(), to.label()), user, now);
        Ok(())
    }

    /// Walks machine `i` through `steps`.
    pub fn walk(&mut self, i: usize, steps: &[Status], user: Option<&str>, now: Millis) -> Result<(), Refusal> {
        steps.iter().try_for_each(|s| self.change(i, *s, user, now))
    }

    /// Hands out addresses at deployment: AUTO links get the next free address of their
    /// subnet; a machine left with no address at all gets one from 198.18.0.0/15 (the
    /// benchmarking range), so a deployed host always has somewhere to be reached.
    fn assign_addresses(&mut self, i: usize) {
        // A set: a linear scan per candidate address made a site of 10,000 machines cubic.
        let mut used: std::collections::HashSet<String> = self.data.machines.iter().flat_map(Machine::ip_addresses).collect();
        let subnets = self.data.subnets.clone();
        let m = &mut self.data.machines[i];
        for link in m.interfaces.iter_mut().flat_map(|i| i.links.iter_mut()) {
            if link.mode == "auto" && link.ip_address.is_none() {
                let cidr = link.subnet.and_then(|id| subnets.iter().find(|s| s.id == id)).and_then(Subnet::cidr);
                if let Some(ip) = cidr.and_then(|c| c.first_free(&used)) {
                    used.insert(ip.clone());
                    link.ip_address = Some(ip);
                }
            }
        }
        if m.ip_addresses().is_empty() {
            m.auto_ip = Cidr::parse("198.18.0.0/15").and_then(|c| c.first_free(&used));
        }
    }

    /// Takes back what deployment handed out.
    fn release_addresses(&mut self, i: usize) {
        let m = &mut self.data.machines[i];
        m.auto_ip = None;
        for link in m.interfaces.iter_mut().flat_map(|i| i.links.iter_mut()) {
            if link.mode == "auto" {
                link.ip_address = None;
            }
        }
    }

    /// Clears what release clears at its start; a booted machine powers off.
    pub fn clear_deployment(&mut self, i: usize) {
        self.stop_boot(i);
        let m = &mut self.data.machines[i];
        m.osystem.clear();
        m.distro_series.clear();
        m.hwe_kernel = None;
        m.agent_name.clear();
        m.enable_hw_sync = false;
        m.sync_interval = None;
        m.last_sync = None;
        m.netboot = true;
    }

    /// Completes machine `i`'s in-flight status, or fails it when that stage was armed.
    pub fn complete(&mut self, i: usize, now: Millis) -> Result<(), Refusal> {
        let status = self.data.machines[i].status;
        if stage_of(status).is_some_and(|st| self.data.machines[i].armed_failures.remove(st)) {
            return self.fail(i, now);
        }
        let Some(to) = lifecycle::completes_to(&self.view(i)) else { return Ok(()) };
        if status == Status::DiskErasing && to == Status::New {
            // MAAS's table has no Disk erasing -> New: an erased, never-commissioned machine
            // ends its release through Releasing (12 -> 0 is allowed).
            self.change(i, Status::Releasing, None, now)?;
        }
        self.change(i, to, None, now)?;
        let m = &mut self.data.machines[i];
        match status {
            Status::Commissioning => {
                m.commissioned = true;
                m.power = Power::Off;
                // Commissioning is where MAAS learns the hardware.
                if m.interfaces.is_empty() {
                    m.add_interface(&mut self.data.ids, "eno1", &random_mac());
                }
                if m.block_devices.is_empty() {
                    m.set_disks(default_disks(&mut self.data.ids));
                }
                if m.cpu_count == 0 {
                    (m.cpu_count, m.memory) = (112, 2_097_152);
                }
                m.storage_layout.get_or_insert_with(|| "flat".to_owned());
                self.link_boot_interface(i);
            }
            Status::Deploying => {
                if m.enable_hw_sync {
                    m.sync_interval.get_or_insert(SYNC_INTERVAL_SECS);
                    // Booting: only the booted machine's own timer reports (see `boot`).
                    if self.boot.is_none() {
                        m.last_sync = Some(now);
                    }
                }
                m.netboot = false;
                if let (Some(booter), Some(user_data)) = (&self.boot, &m.user_data) {
                    booter.start(&m.system_id, user_data);
                }
            }
            Status::Releasing | Status::DiskErasing => {
                m.power = Power::Off;
                self.release_addresses(i);
            }
            _ => {}
        }
        self.touch();
        Ok(())
    }

    /// MAAS's initial networking after commissioning: the boot interface, when it has no
    /// link yet, is linked AUTO on the PXE subnet (the one it booted from; created as
    /// [`PXE_SUBNET`] the first time). Other interfaces stay unlinked.
    fn link_boot_interface(&mut self, i: usize) {
        let subnet = match self.data.subnets.iter().find(|s| s.cidr == PXE_SUBNET) {
            Some(s) => s.id,
            None => {
                let id = super::machine::Ids::next(&mut self.data.ids.subnet);
                self.data.subnets.push(Subnet {
                    id,
                    name: "pxe".into(),
                    description: "the PXE subnet machines boot from".into(),
                    cidr: PXE_SUBNET.into(),
                    gateway_ip: None,
                    dns_servers: Vec::new(),
                    rdns_mode: 2,
                    allow_dns: true,
                    allow_proxy: true,
                    managed: true,
                    active_discovery: false,
                });
                id
            }
        };
        let link = self.data.ids.link();
        let m = &mut self.data.machines[i];
        let boot = m.boot_interface.or_else(|| m.interfaces.first().map(|n| n.id));
        if let Some(n) = m.interfaces.iter_mut().find(|n| Some(n.id) == boot)
            && n.links.is_empty()
        {
            n.links.push(Link { id: link, mode: "auto".into(), subnet: Some(subnet), ip_address: None });
        }
    }

    /// Fails machine `i`'s in-flight status now (the failure map).
    pub fn fail(&mut self, i: usize, now: Millis) -> Result<(), Refusal> {
        let stage = stage_of(self.data.machines[i].status).unwrap_or_default();
        let message = self.data.machines[i].armed_messages.remove(stage);
        let status = self.data.machines[i].status;
        let Some(to) = status.failed() else { return Ok(()) };
        self.change(i, to, None, now)?;
        if let Some(msg) = &message {
            // What MAAS's own event says about the failure (e.g. cloud-init's complaint).
            self.event(i, Level::Error, &format!("{} failed", status.label()), msg, None, now);
        }
        let m = &mut self.data.machines[i];
        if let Some(msg) = message {
            m.status_message = Some(msg);
        }
        m.error_description = format!("{} failed", status.label());
        if status == Status::Commissioning {
            m.power = Power::Off;
        }
        Ok(())
    }

    /// Completes every in-flight status whose delay has passed, then takes in what the
    /// boots did.
    pub fn tick(&mut self, now: Millis) {
        for i in 0..self.data.machines.len() {
            let m = &self.data.machines[i];
            let delay = i64::try_from(self.delays.for_status(m.status)).unwrap_or(i64::MAX);
            if delay > 0 && m.in_flight_since.is_some_and(|since| now >= since + delay * 1000) {
                let _ = self.complete(i, now);
            }
        }
        self.boot_tick(now);
    }

    /// Records the boots' events, and reports hardware sync for each booted machine whose
    /// creds name it and its current token: `last_sync` now, again every `sync_interval`.
    fn boot_tick(&mut self, now: Millis) {
        let Some(booter) = self.boot.clone() else { return };
        for (system_id, e) in booter.drain() {
            if let Some(i) = self.find(&system_id) {
                self.event(i, e.level, e.kind, &e.description, None, e.at);
            }
        }
        for i in 0..self.data.machines.len() {
            let m = &self.data.machines[i];
            let due = m.next_sync().is_none_or(|next| now >= next);
            if m.status != Status::Deployed || !m.enable_hw_sync || !due {
                continue;
            }
            if booter.creds_check(&m.system_id, m.token.as_ref()) == Some(CredsCheck::Ok) {
                let m = &mut self.data.machines[i];
                m.sync_interval.get_or_insert(SYNC_INTERVAL_SECS);
                m.last_sync = Some(now);
                self.touch();
            }
        }
    }

    /// Stops machine `i`'s boot (its agent or bootstrap is killed), when booting is on.
    pub fn stop_boot(&mut self, i: usize) {
        if let Some(booter) = &self.boot {
            booter.stop(&self.data.machines[i].system_id);
        }
    }

    /// A release has started on machine `i` according to `plan`.
    pub fn start_release(&mut self, i: usize, plan: &lifecycle::ReleasePlan, user: Option<&str>, now: Millis) -> Result<(), Refusal> {
        use lifecycle::ReleasePlan::*;
        if *plan == NoOp {
            return Ok(());
        }
        self.event(i, Level::Debug, "User releasing node", "", user, now);
        self.clear_deployment(i);
        match plan {
            Erase => self.change(i, Status::DiskErasing, user, now),
            Wait => self.change(i, Status::Releasing, user, now),
            // The power is already off (or cannot be queried): MAAS finishes at once.
            AtOnce(_) => {
                self.change(i, Status::Releasing, user, now)?;
                self.complete(i, now)
            }
            NoOp => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn world_with(status: Status) -> World {
        World::with_machine(status, |m| m.commissioned = true)
    }

    #[test]
    fn an_erased_never_commissioned_machine_ends_in_new_through_releasing() {
        let mut w = World::with_machine(Status::DiskErasing, |m| m.commissioned = false);
        w.complete(0, 1000).expect("Disk erasing -> Releasing -> New is MAAS's path");
        assert_eq!(w.data.machines[0].status, Status::New);
    }

    #[test]
    fn a_full_lifecycle_with_tokens_and_sync() {
        let mut w = world_with(Status::New);
        w.change(0, Status::Commissioning, Some("admin"), 1000).unwrap();
        assert_eq!(w.data.machines[0].owner.as_deref(), Some("admin"));
        w.complete(0, 2000).unwrap();
        let m = &w.data.machines[0];
        assert_eq!((m.status, m.owner.as_deref(), m.power), (Status::Ready, None, Power::Off));
        assert_eq!(m.block_devices.len(), 2);
        w.walk(0, &[Status::Allocated, Status::Deploying], Some("admin"), 3000).unwrap();
        let first = w.data.machines[0].token.clone().unwrap();
        w.data.machines[0].enable_hw_sync = true;
        w.complete(0, 4000).unwrap();
        let m = &w.data.machines[0];
        assert_eq!((m.status, m.last_sync, m.sync_interval), (Status::Deployed, Some(4000), Some(900)));
        // Commissioning linked the boot interface AUTO on the PXE subnet: deploy gave it an address there.
        assert_eq!(m.ip_addresses(), vec!["10.20.0.1".to_owned()]);
        w.start_release(0, &lifecycle::ReleasePlan::Wait, Some("admin"), 5000).unwrap();
        assert_eq!(w.data.machines[0].status, Status::Releasing);
        assert_eq!(w.data.machines[0].token.as_ref(), Some(&first), "the token lives until the owner changes");
        w.complete(0, 6000).unwrap();
        let m = &w.data.machines[0];
        assert_eq!((m.status, m.owner.as_deref(), m.token.as_ref(), m.enable_hw_sync), (Status::Ready, None, None, false));
        assert!(m.ip_addresses().is_empty());
        w.walk(0, &[Status::Allocated, Status::Deploying], Some("admin"), 7000).unwrap();
        assert_ne!(w.data.machines[0].token.as_ref(), Some(&first), "each deployment mints a new token");
        let kinds: Vec<&str> = w.data.events.iter().map(|e| e.kind.as_str()).collect();
        assert!(kinds.contains(&"Released") && kinds.contains(&"Deployed"), "{kinds:?}");
    }

    #[test]
    fn a_redeploy_by_the_same_owner_keeps_the_token() {
        let mut w = world_with(Status::Ready);
        w.walk(0, &[Status::Allocated, Status::Deploying], Some("admin"), 1000).unwrap();
        let first = w.data.machines[0].token.clone().unwrap();
        // Abort (Deploying → Allocated keeps the owner), then deploy again.
        w.change(0, Status::Allocated, Some("admin"), 2000).unwrap();
        w.change(0, Status::Deploying, Some("admin"), 3000).unwrap();
        assert_eq!(w.data.machines[0].token.as_ref(), Some(&first), "same owner, same token");
        w.change(0, Status::Releasing, Some("admin"), 4000).unwrap();
        w.complete(0, 5000).unwrap();
        w.walk(0, &[Status::Allocated, Status::Deploying], Some("admin"), 6000).unwrap();
        assert_ne!(w.data.machines[0].token.as_ref(), Some(&first), "the release's owner change deleted it");
    }

    #[test]
    fn armed_failures_and_delays() {
        let mut w = world_with(Status::New);
        w.delays.commission_secs = 10;
        w.change(0, Status::Commissioning, Some("admin"), 0).unwrap();
        w.tick(9_999);
        assert_eq!(w.data.machines[0].status, Status::Commissioning);
        w.tick(10_000);
        assert_eq!(w.data.machines[0].status, Status::Ready);
        w.walk(0, &[Status::Allocated, Status::Deploying], Some("admin"), 0).unwrap();
        w.data.machines[0].armed_failures.insert("deployment".into());
        w.complete(0, 1).unwrap();
        assert_eq!(w.data.machines[0].status, Status::FailedDeployment);
        assert!(w.data.machines[0].armed_failures.is_empty());
        assert_eq!(
            w.change(0, Status::Deploying, None, 2),
            Err(Refusal::Conflict("Invalid transition: Failed deployment -> Deploying.".into()))
        );
    }

    #[test]
    fn state_file_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let mut w = world_with(Status::Ready);
        w.state_file = Some(path.clone());
        w.touch();
        w.save_if_dirty().unwrap();
        let back = World::new(vec![], Delays::default(), Some(path)).unwrap();
        assert_eq!(back.data.machines[0].system_id, "abc123");
        assert_eq!(back.data.machines[0].status, Status::Ready);
    }
}
