//! The power shelf's controller and its on-demand maintenance request, pure
//! (`power-shelf-state-machine.md`): what one controller tick does with a shelf, from its
//! stored record and the outcome of the device work its state asked for, and the rules of
//! `SetPowerShelfMaintenance` (ids, operation, the whole request refused if any shelf is
//! unknown or marked for deletion, the initiator string).
//!
//! A tick moves a shelf at most one state ([`tick`]), each move with its reason, so the loop
//! that drives it is restart-safe: everything it needs is the stored record plus what the
//! device says now. Unlike the seed's own handler (which "does not drive the hardware yet"),
//! `maintenance` asks for the real power operation and leaves only once the device reports it
//! done — or failed, into `error`.

use drover_proto::states::PowerShelfState as S;
use drover_proto::time::Time;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The power operations a maintenance request may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PowerOp {
    /// Power the shelf on through its BMC / PMC.
    PowerOn,
    /// Power the shelf off through its BMC / PMC.
    PowerOff,
}

impl PowerOp {
    /// The stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            PowerOp::PowerOn => "power_on",
            PowerOp::PowerOff => "power_off",
        }
    }
}

/// A pending maintenance request (the seed's `power_shelf_maintenance_requested`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceRequest {
    /// What to do.
    pub operation: PowerOp,
    /// Who asked and why ([`initiator`]).
    pub initiator: String,
    /// When.
    pub requested_at: Time,
}

/// A shelf as the controller reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShelfView {
    /// Its state.
    pub state: S,
    /// The operation a `maintenance` shelf performs.
    pub operation: Option<PowerOp>,
    /// Marked for deletion.
    pub marked_for_deletion: bool,
    /// A request not yet taken up (or the one `maintenance` performs).
    pub requested: Option<MaintenanceRequest>,
}

/// Where the device work of the current state stands (read from the device each tick).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Work {
    /// Not asked for yet in this state.
    NotStarted,
    /// Asked for; the device has not finished.
    Running,
    /// Finished as asked (e.g. the power state reads as requested).
    Done,
    /// Failed, in the device's words.
    Failed(String),
}

/// Device work a state asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceAct {
    /// Read the shelf's data (identity, firmware, power state) from its BMC / PMC.
    FetchData,
    /// Configure it (credentials, monitoring).
    Configure,
    /// The power operation.
    Power(PowerOp),
}

/// What one tick does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing to do now; why.
    Wait(String),
    /// Start the current state's device work.
    Act(DeviceAct),
    /// Move to `to` (one legal transition), with the reason for its event.
    Move {
        /// The new state.
        to: S,
        /// Its operation (`maintenance` only).
        operation: Option<PowerOp>,
        /// Clear the maintenance request (the operation finished, either way).
        clear_request: bool,
        /// Why, for the event.
        reason: String,
    },
    /// Remove the record (the end of `deleting`).
    FinalDelete,
}

fn to(state: S, reason: impl Into<String>) -> Step {
    Step::Move { to: state, operation: None, clear_request: false, reason: reason.into() }
}

/// Device work through the usual arc: start it, wait for it, retry it after a failure.
fn work_then(work: &Work, act: DeviceAct, what: &str, done: Step) -> Step {
    match work {
        Work::NotStarted => Step::Act(act),
        Work::Running => Step::Wait(format!("{what} in progress")),
        Work::Done => done,
        // The seed names no failure state before `ready`: the controller asks again.
        Work::Failed(_) => Step::Act(act),
    }
}

/// One controller tick over `shelf`, given where its state's device work stands.
pub fn tick(shelf: &ShelfView, work: &Work) -> Step {
    match shelf.state {
        S::Initializing => to(S::FetchingData, "controller processes power shelf"),
        S::FetchingData => work_then(work, DeviceAct::FetchData, "data fetch", to(S::Configuring, "data fetch complete")),
        S::Configuring => work_then(work, DeviceAct::Configure, "configuration", to(S::Ready, "configuration complete")),
        S::Ready if shelf.marked_for_deletion => to(S::Deleting, "marked for deletion"),
        S::Ready => match &shelf.requested {
            Some(r) => Step::Move {
                to: S::Maintenance,
                operation: Some(r.operation),
                clear_request: false,
                reason: format!("maintenance requested: {} by {}", r.operation.as_str(), r.initiator),
            },
            None => Step::Wait("ready".into()),
        },
        S::Maintenance => {
            let Some(op) = shelf.operation.or(shelf.requested.as_ref().map(|r| r.operation)) else {
                // Only reachable through a hand-edited record: finish rather than guess.
                return Step::Move { to: S::Ready, operation: None, clear_request: true, reason: "no operation recorded".into() };
            };
            match work {
                Work::NotStarted => Step::Act(DeviceAct::Power(op)),
                Work::Running => Step::Wait(format!("{} in progress", op.as_str())),
                Work::Done => Step::Move {
                    to: S::Ready,
                    operation: None,
                    clear_request: true,
                    reason: format!("BMC operation complete: {}", op.as_str()),
                },
                Work::Failed(why) => Step::Move {
                    to: S::Error,
                    operation: None,
                    clear_request: true,
                    reason: format!("BMC operation failed: {}: {why}", op.as_str()),
                },
            }
        }
        S::Error if shelf.marked_for_deletion => to(S::Deleting, "marked for deletion"),
        S::Error => Step::Wait("error: waiting for an operator (or deletion)".into()),
        S::Deleting => Step::FinalDelete,
    }
}

/// Why a `SetPowerShelfMaintenance` request is refused (nothing is changed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// No shelf id.
    #[error("power_shelf_ids must name at least one power shelf")]
    NoIds,
    /// More ids than allowed.
    #[error("power_shelf_ids names {given} power shelves; at most {max} per request")]
    TooMany {
        /// How many were given (distinct).
        given: usize,
        /// The limit.
        max: usize,
    },
    /// An id that is not a UUID.
    #[error("power shelf id {id:?} is not a UUID")]
    BadId {
        /// The text.
        id: String,
    },
    /// Not PowerOn or PowerOff.
    #[error("operation must be power_on or power_off, not {given:?}")]
    BadOperation {
        /// What was given.
        given: String,
    },
    /// A shelf that does not exist.
    #[error("power shelf {id} does not exist; no shelf was changed")]
    Unknown {
        /// Its id.
        id: Uuid,
    },
    /// A shelf marked for deletion.
    #[error("power shelf {id} is marked for deletion; no shelf was changed")]
    MarkedForDeletion {
        /// Its id.
        id: Uuid,
    },
}

/// Parses a request's ids (repeats collapse, order kept) and operation against the limit.
pub fn parse_request(ids: &[String], operation: &str, max_ids: usize) -> Result<(Vec<Uuid>, PowerOp), RequestError> {
    let op = match operation.trim().to_ascii_lowercase().replace('-', "_").as_str() {
        "power_on" | "poweron" => PowerOp::PowerOn,
        "power_off" | "poweroff" => PowerOp::PowerOff,
        _ => return Err(RequestError::BadOperation { given: operation.to_owned() }),
    };
    let mut out: Vec<Uuid> = Vec::new();
    for id in ids {
        let parsed = Uuid::parse_str(id.trim()).map_err(|_| RequestError::BadId { id: id.clone() })?;
        if !out.contains(&parsed) {
            out.push(parsed);
        }
    }
    if out.is_empty() {
        return Err(RequestError::NoIds);
    }
    if out.len() > max_ids {
        return Err(RequestError::TooMany { given: out.len(), max: max_ids });
    }
    Ok((out, op))
}

/// Every listed shelf must exist and not be marked for deletion, or the whole request is
/// refused: `found` pairs each id with whether it exists and is marked (`None`: unknown).
pub fn admit(found: &[(Uuid, Option<bool>)]) -> Result<(), RequestError> {
    for (id, marked) in found {
        match marked {
            None => return Err(RequestError::Unknown { id: *id }),
            Some(true) => return Err(RequestError::MarkedForDeletion { id: *id }),
            Some(false) => {}
        }
    }
    Ok(())
}

/// The initiator string the seed stores: `user (reference)`, `user`, `reference`, or
/// `admin-cli` when neither is known. Blank values count as absent.
pub fn initiator(user: Option<&str>, reference: Option<&str>) -> String {
    let user = user.map(str::trim).filter(|s| !s.is_empty());
    let reference = reference.map(str::trim).filter(|s| !s.is_empty());
    match (user, reference) {
        (Some(u), Some(r)) => format!("{u} ({r})"),
        (Some(u), None) => u.to_owned(),
        (None, Some(r)) => r.to_owned(),
        (None, None) => "admin-cli".to_owned(),
    }
}

#[cfg(test)]
#[path = "shelf_tests.rs"]
mod tests;
