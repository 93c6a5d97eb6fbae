//! The rack controller's tick, pure (`rack-on-demand-maintenance.md`): from the rack's state,
//! its maintenance record and where the current device step stands, what one tick does.
//!
//! A cycle is a [`RackMaintenance`] stored on the rack: the request (initiator, resolved
//! [`Targets`]), then the phase and the index of the device step within the running activity.
//! Each device step (one machine's firmware, one device's power change, the final check) is
//! committed before the next starts, so a coordinator restarted mid-cycle resumes at the step
//! it was on — re-issuing it, which the idempotent device calls make safe — and never repeats
//! a finished one (a power sequence does not power machines off a second time).
//!
//! - `ready` (or `error`) with a request not taken up → `maintenance`, at the start phase.
//! - The start phase consumes the scope: the firmware resolution table when a firmware upgrade
//!   was asked for (unknown → `error`; not available → the upgrade is skipped, with the reason);
//!   then the first requested activity. Activities not requested are skipped.
//! - Each activity runs its device steps in order; one that fails sends the rack to `error`
//!   with the device named and clears the request (else `error` would re-enter `maintenance`
//!   on the same failing request forever, as the seed warns).
//! - After the last activity: `validating` checks every scoped device reads powered on, then
//!   `ready`.

use drover_proto::states::RackState;
use drover_proto::time::Time;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::rack::{Activity, Firmware, FirmwareChoice, Phase, PowerStep, Targets, next_activity, power_sequence, resolve_firmware};
use super::shelf::Work;

/// A rack's maintenance cycle as stored on the rack.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RackMaintenance {
    /// Who asked and why.
    pub initiator: String,
    /// When.
    pub requested_at: Time,
    /// What the cycle works on.
    pub targets: Targets,
    /// Where it is; `None` until the controller takes the request up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// The device step within the running activity.
    #[serde(default)]
    pub step: usize,
    /// The firmware record the upgrade uses (resolved at the start phase).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firmware: Option<String>,
    /// Why the request has not been taken up yet (a full disruption budget), as last reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<String>,
}

/// One unit of device work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceStep {
    /// Upgrade a machine's firmware through its BMC.
    Firmware {
        /// The machine.
        machine: Uuid,
        /// The firmware record.
        firmware: String,
    },
    /// One device's power change.
    Power(PowerStep),
    /// Check that every scoped machine and shelf reads powered on.
    Validate,
}

impl DeviceStep {
    /// A stable name for the step (the work table's stage, and events).
    pub fn label(&self) -> String {
        match self {
            DeviceStep::Firmware { machine, firmware } => format!("firmware {firmware} on machine {machine}"),
            DeviceStep::Power(PowerStep::MachineOff(m)) => format!("machine {m} off"),
            DeviceStep::Power(PowerStep::ShelfOff(s)) => format!("power shelf {s} off"),
            DeviceStep::Power(PowerStep::ShelfOn(s)) => format!("power shelf {s} on"),
            DeviceStep::Power(PowerStep::MachineOn(m)) => format!("machine {m} on"),
            DeviceStep::Validate => "validation".into(),
        }
    }
}

/// The device steps of an activity, in order. The NMX cluster configuration has none: Drover
/// has no NMX backend, and the start phase says so in its reason rather than pretending.
pub fn steps(activity: Activity, m: &RackMaintenance) -> Vec<DeviceStep> {
    match activity {
        Activity::FirmwareUpgrade => match &m.firmware {
            Some(f) => m.targets.machines.iter().map(|machine| DeviceStep::Firmware { machine: *machine, firmware: f.clone() }).collect(),
            None => Vec::new(),
        },
        Activity::ConfigureNmxCluster => Vec::new(),
        Activity::PowerSequence => power_sequence(&m.targets).into_iter().map(DeviceStep::Power).collect(),
    }
}

/// What one tick does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RackStep {
    /// Nothing now; why.
    Wait(String),
    /// Start this device step.
    Act(DeviceStep),
    /// Write the rack's new state and maintenance (the same state when only the phase or
    /// step advances), with the reason for its event.
    Move {
        /// The state.
        to: RackState,
        /// The maintenance record (`None` clears it).
        maintenance: Option<Box<RackMaintenance>>,
        /// Why.
        reason: String,
    },
}

fn goto(to: RackState, maintenance: Option<RackMaintenance>, reason: impl Into<String>) -> RackStep {
    RackStep::Move { to, maintenance: maintenance.map(Box::new), reason: reason.into() }
}

/// The phase after `done` (or the first one, from the start): the next requested activity,
/// or `validating`.
fn after(m: &RackMaintenance, done: Option<Activity>, reason: String) -> RackStep {
    match next_activity(&m.targets.activities, done) {
        Some(a) => goto(RackState::Maintenance, Some(RackMaintenance { phase: Some(Phase::Running(a)), step: 0, ..m.clone() }), reason),
        None => goto(RackState::Validating, Some(RackMaintenance { step: 0, ..m.clone() }), reason),
    }
}

/// What the rack controller reads besides the rack: the firmware table, and whether the
/// scoped machines may all be taken out of service now (`Err`: which budget is full).
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// The rack's hardware type.
    pub hardware_type: &'a str,
    /// The firmware records.
    pub firmware: &'a [Firmware],
    /// The disruption budgets' answer for the scoped machines.
    pub budget: Result<(), &'a str>,
}

/// One controller tick over a rack.
pub fn tick(state: RackState, m: Option<&RackMaintenance>, work: &Work, cx: Context<'_>) -> RackStep {
    let (hardware_type, table) = (cx.hardware_type, cx.firmware);
    match (state, m) {
        (RackState::Discovering, _) => goto(RackState::Ready, m.cloned(), "topology discovered"),
        (RackState::Ready | RackState::Error, None) => RackStep::Wait(format!("{state}: no maintenance requested")),
        // Machines taken down by the cycle count against every budget that selects them: the
        // whole scope waits until all of it fits, and says which budget it waits on (written
        // once per new reason, so re-planning an unchanged wait writes nothing).
        (RackState::Ready | RackState::Error, Some(m)) => match cx.budget {
            Err(why) if m.waiting.as_deref() == Some(why) => RackStep::Wait(format!("waits for a disruption-budget slot: {why}")),
            Err(why) => goto(
                state,
                Some(RackMaintenance { waiting: Some(why.to_owned()), ..m.clone() }),
                format!("waits for a disruption-budget slot: {why}"),
            ),
            Ok(()) => goto(
                RackState::Maintenance,
                Some(RackMaintenance { phase: Some(Phase::Start), step: 0, firmware: None, waiting: None, ..m.clone() }),
                format!("maintenance requested by {}", m.initiator),
            ),
        },
        (RackState::Maintenance | RackState::Validating, None) => {
            // Only reachable through a hand-edited record: finish rather than guess.
            goto(RackState::Error, None, "no maintenance recorded")
        }
        (RackState::Maintenance, Some(m)) => match m.phase {
            None | Some(Phase::Start) => start(m, hardware_type, table),
            Some(Phase::Running(a)) => {
                let all = steps(a, m);
                let Some(s) = all.get(m.step) else {
                    return after(m, Some(a), format!("{} complete", a.as_str()));
                };
                match work {
                    Work::NotStarted => RackStep::Act(s.clone()),
                    Work::Running => RackStep::Wait(format!("{} in progress", s.label())),
                    Work::Done => goto(
                        RackState::Maintenance,
                        Some(RackMaintenance { step: m.step + 1, ..m.clone() }),
                        format!("{}: {} done ({}/{})", a.as_str(), s.label(), m.step + 1, all.len()),
                    ),
                    Work::Failed(why) => goto(RackState::Error, None, format!("{} failed: {why}", a.as_str())),
                }
            }
        },
        (RackState::Validating, Some(_)) => match work {
            Work::NotStarted => RackStep::Act(DeviceStep::Validate),
            Work::Running => RackStep::Wait("validation in progress".into()),
            Work::Done => goto(RackState::Ready, None, "validation passed: maintenance complete"),
            Work::Failed(why) => goto(RackState::Error, None, format!("validation failed: {why}")),
        },
    }
}

/// The start phase: consume the scope (resolve the firmware if an upgrade was asked for).
fn start(m: &RackMaintenance, hardware_type: &str, table: &[Firmware]) -> RackStep {
    let mut notes = Vec::new();
    if m.targets.activities.contains(&Activity::ConfigureNmxCluster) {
        notes.push("configure_nmx_cluster: Drover has no NMX backend, nothing is configured".to_owned());
    }
    if !m.targets.activities.contains(&Activity::FirmwareUpgrade) {
        return after(m, Some(Activity::FirmwareUpgrade), join("firmware upgrade not requested", notes));
    }
    if !m.targets.switches.is_empty() {
        notes.push(format!("{} switch(es) in scope: switch firmware is not driven (no switch update backend)", m.targets.switches.len()));
    }
    match resolve_firmware(m.targets.firmware_version.as_deref(), hardware_type, table) {
        FirmwareChoice::Fail(why) => goto(RackState::Error, None, why),
        FirmwareChoice::Skip(why) => after(m, Some(Activity::FirmwareUpgrade), join(&why, notes)),
        FirmwareChoice::Use(id) => goto(
            RackState::Maintenance,
            Some(RackMaintenance {
                phase: Some(Phase::Running(Activity::FirmwareUpgrade)),
                step: 0,
                firmware: Some(id.clone()),
                ..m.clone()
            }),
            join(&format!("firmware upgrade with {id}"), notes),
        ),
    }
}

fn join(first: &str, notes: Vec<String>) -> String {
    std::iter::once(first.to_owned()).chain(notes).collect::<Vec<_>>().join("; ")
}

#[cfg(test)]
#[path = "rack_tick_tests.rs"]
mod tests;
