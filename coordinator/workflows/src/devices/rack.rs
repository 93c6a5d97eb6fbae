//! On-demand rack maintenance, pure (`rack-on-demand-maintenance.md`): the request's
//! preconditions, the scope (full rack or listed devices), the activities (empty = all, run in
//! the seed's order, the machine always entering at the firmware upgrade's start and skipping
//! what was not asked for), the firmware resolution table, the rack's next phase, and the
//! power sequence's safe order.
//!
//! The rack's coarse lifecycle is [`RackState`]; inside `maintenance` the phase says which
//! activity runs ([`Phase`]). Leaving `maintenance` goes through `validating` to `ready`; a
//! failure goes to `error` and clears the request (the seed's rule: otherwise `error` would
//! re-enter `maintenance` on the same failing request forever).

use drover_proto::states::RackState;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// A maintenance activity, in the order a cycle runs them: the API's own type.
pub use drover_proto::api::racks::RackActivity as Activity;

/// One requested activity with its own configuration (the seed's oneof).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "activity", rename_all = "snake_case", rename_all_fields = "camelCase", deny_unknown_fields)]
pub enum ActivityConfig {
    /// Firmware upgrade; no version = the default firmware for the rack's hardware type.
    FirmwareUpgrade {
        /// A firmware record's id.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        firmware_version: Option<String>,
    },
    /// NMX cluster configuration.
    ConfigureNmxCluster {},
    /// Power sequencing.
    PowerSequence {},
}

impl ActivityConfig {
    /// Which activity.
    pub fn activity(&self) -> Activity {
        match self {
            ActivityConfig::FirmwareUpgrade { .. } => Activity::FirmwareUpgrade,
            ActivityConfig::ConfigureNmxCluster {} => Activity::ConfigureNmxCluster,
            ActivityConfig::PowerSequence {} => Activity::PowerSequence,
        }
    }
}

/// What a request asks for: device lists (all empty = the full rack) and activities (empty =
/// all).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Scope {
    /// Machines (host ids).
    #[serde(default)]
    pub machine_ids: Vec<String>,
    /// Switches.
    #[serde(default)]
    pub switch_ids: Vec<String>,
    /// Power shelves.
    #[serde(default)]
    pub power_shelf_ids: Vec<String>,
    /// Activities.
    #[serde(default)]
    pub activities: Vec<ActivityConfig>,
}

/// The rack's devices.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RackDevices {
    /// Hosts placed in the rack.
    pub machines: Vec<Uuid>,
    /// Its switches.
    pub switches: Vec<Uuid>,
    /// Its power shelves.
    pub power_shelves: Vec<Uuid>,
}

/// What a cycle works on, resolved.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Targets {
    /// Machines.
    pub machines: Vec<Uuid>,
    /// Switches.
    pub switches: Vec<Uuid>,
    /// Power shelves.
    pub power_shelves: Vec<Uuid>,
    /// Activities, in run order, each once.
    pub activities: Vec<Activity>,
    /// The firmware upgrade's requested version, if one was named.
    pub firmware_version: Option<String>,
}

/// Why a request is refused (nothing is written).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RackRequestError {
    /// Not Ready or Error.
    #[error("rack is {state}: maintenance can only be requested on a ready or errored rack")]
    WrongState {
        /// Its state.
        state: RackState,
    },
    /// A request is pending already.
    #[error("rack already has a maintenance request pending")]
    AlreadyPending,
    /// A malformed id.
    #[error("{kind} id {id:?} is not a UUID")]
    BadId {
        /// machine, switch or power shelf.
        kind: &'static str,
        /// The text.
        id: String,
    },
    /// A device not in this rack.
    #[error("{kind} {id} is not in this rack")]
    NotInRack {
        /// machine, switch or power shelf.
        kind: &'static str,
        /// Its id.
        id: Uuid,
    },
    /// The same activity twice.
    #[error("activity {activity:?} is listed twice")]
    DuplicateActivity {
        /// Which.
        activity: Activity,
    },
}

fn pick(kind: &'static str, ids: &[String], rack: &[Uuid], all: bool) -> Result<Vec<Uuid>, RackRequestError> {
    if all {
        return Ok(rack.to_vec());
    }
    let mut out = Vec::new();
    for id in ids {
        let parsed = Uuid::parse_str(id.trim()).map_err(|_| RackRequestError::BadId { kind, id: id.clone() })?;
        if !rack.contains(&parsed) {
            return Err(RackRequestError::NotInRack { kind, id: parsed });
        }
        if !out.contains(&parsed) {
            out.push(parsed);
        }
    }
    Ok(out)
}

/// Checks a request on a rack in `state` (with or without a request pending) and resolves
/// what it works on.
pub fn admit(state: RackState, pending: bool, scope: &Scope, rack: &RackDevices) -> Result<Targets, RackRequestError> {
    if !matches!(state, RackState::Ready | RackState::Error) {
        return Err(RackRequestError::WrongState { state });
    }
    if pending {
        return Err(RackRequestError::AlreadyPending);
    }
    let full = scope.machine_ids.is_empty() && scope.switch_ids.is_empty() && scope.power_shelf_ids.is_empty();
    let mut activities: Vec<Activity> = Vec::new();
    let mut firmware_version = None;
    for a in &scope.activities {
        if activities.contains(&a.activity()) {
            return Err(RackRequestError::DuplicateActivity { activity: a.activity() });
        }
        activities.push(a.activity());
        if let ActivityConfig::FirmwareUpgrade { firmware_version: Some(v) } = a {
            firmware_version = Some(v.trim().to_owned()).filter(|v| !v.is_empty());
        }
    }
    if activities.is_empty() {
        activities = Activity::ALL.to_vec();
    }
    activities.sort();
    Ok(Targets {
        machines: pick("machine", &scope.machine_ids, &rack.machines, full)?,
        switches: pick("switch", &scope.switch_ids, &rack.switches, full)?,
        power_shelves: pick("power shelf", &scope.power_shelf_ids, &rack.power_shelves, full)?,
        activities,
        firmware_version,
    })
}

/// A firmware record as the rack's firmware table holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Firmware {
    /// Its id (what a request names).
    pub id: String,
    /// The hardware type it is for.
    pub hardware_type: String,
    /// Marked available for use.
    pub available: bool,
    /// The default for its hardware type.
    pub default: bool,
}

/// What the firmware upgrade uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FirmwareChoice {
    /// This record.
    Use(String),
    /// The upgrade is skipped (with an event saying why); the cycle goes on.
    Skip(String),
    /// The rack goes to `error`.
    Fail(String),
}

/// The seed's resolution table: no version → the default firmware for the rack's hardware
/// type; a version → the record by id: unknown → `error`, present but not available → skipped.
pub fn resolve_firmware(version: Option<&str>, hardware_type: &str, table: &[Firmware]) -> FirmwareChoice {
    match version {
        Some(v) => match table.iter().find(|f| f.id == v) {
            None => FirmwareChoice::Fail(format!("firmware {v} does not exist")),
            Some(f) if !f.available => FirmwareChoice::Skip(format!("firmware {v} is not marked available: upgrade skipped")),
            Some(f) => FirmwareChoice::Use(f.id.clone()),
        },
        None => match table.iter().find(|f| f.default && f.hardware_type == hardware_type) {
            Some(f) if f.available => FirmwareChoice::Use(f.id.clone()),
            Some(f) => FirmwareChoice::Skip(format!("the default firmware {} for {hardware_type} is not available: upgrade skipped", f.id)),
            None => FirmwareChoice::Fail(format!("no default firmware for hardware type {hardware_type}")),
        },
    }
}

/// Where a maintenance cycle is: the API's own type.
pub use drover_proto::api::racks::RackPhase as Phase;

/// The next activity after `done` (or the first, from the start) among those requested: the
/// cycle always enters at the firmware upgrade's start and skips what was not asked for.
pub fn next_activity(requested: &[Activity], done: Option<Activity>) -> Option<Activity> {
    Activity::ALL.into_iter().filter(|a| requested.contains(a)).find(|a| done.is_none_or(|d| *a > d))
}

/// One device power step of a power sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowerStep {
    /// Power a machine off (through its BMC).
    MachineOff(Uuid),
    /// Power a shelf off.
    ShelfOff(Uuid),
    /// Power a shelf on.
    ShelfOn(Uuid),
    /// Power a machine on.
    MachineOn(Uuid),
}

/// The power sequence's safe order: every machine off before any shelf goes off, every shelf
/// on before any machine comes on (a machine never loses power under it, nor is started
/// without it).
pub fn power_sequence(t: &Targets) -> Vec<PowerStep> {
    let mut out: Vec<PowerStep> = t.machines.iter().map(|m| PowerStep::MachineOff(*m)).collect();
    out.extend(t.power_shelves.iter().map(|s| PowerStep::ShelfOff(*s)));
    out.extend(t.power_shelves.iter().map(|s| PowerStep::ShelfOn(*s)));
    out.extend(t.machines.iter().map(|m| PowerStep::MachineOn(*m)));
    out
}

#[cfg(test)]
#[path = "rack_tests.rs"]
mod tests;
