//! Racks and their devices as the store keeps them: a rack (name, hardware type,
//! labels, its lifecycle), its switches and power shelves (BMC/PMC endpoint, credentials by
//! secret-store path), and which hosts are placed in it.

use std::collections::BTreeMap;

use drover_proto::states::{PowerShelfState, RackState};
use drover_proto::time::Time;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// A rack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rack {
    /// Its id.
    pub id: Uuid,
    /// Unique name.
    pub name: String,
    /// Hardware type (selects the default firmware).
    pub hardware_type: String,
    /// Free labels.
    pub labels: BTreeMap<String, String>,
    /// Its lifecycle.
    pub state: RackState,
    /// A pending or running maintenance request (JSON), if any.
    pub maintenance: Option<serde_json::Value>,
    /// Created.
    pub created_at: Time,
    /// Last changed.
    pub updated_at: Time,
}

/// What kind of rack device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceKind {
    /// A network switch.
    Switch,
    /// A power shelf.
    PowerShelf,
}

impl DeviceKind {
    /// The stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            DeviceKind::Switch => "switch",
            DeviceKind::PowerShelf => "power_shelf",
        }
    }

    /// From the stable name.
    pub fn parse(s: &str) -> Option<DeviceKind> {
        match s {
            "switch" => Some(DeviceKind::Switch),
            "power_shelf" => Some(DeviceKind::PowerShelf),
            _ => None,
        }
    }
}

/// A switch or a power shelf.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// Its id.
    pub id: Uuid,
    /// Switch or power shelf.
    pub kind: DeviceKind,
    /// Its rack.
    pub rack_id: Uuid,
    /// Unique among devices of its kind.
    pub name: String,
    /// Its BMC / PMC (`https://…`).
    pub endpoint: String,
    /// Where its credentials live in the secret store (a path, never a value).
    pub credentials_path: String,
    /// A power shelf's lifecycle (`None` for a switch).
    pub shelf_state: Option<PowerShelfState>,
    /// The power operation a `maintenance` shelf performs.
    pub operation: Option<String>,
    /// A pending maintenance request (JSON: operation, initiator, requestedAt).
    pub maintenance_requested: Option<serde_json::Value>,
    /// What the shelf's controller last fetched from its PMC (identity, firmware, outlets).
    pub facts: Option<serde_json::Value>,
    /// Marked for deletion (a shelf's controller deletes it from `ready` or `error`).
    pub marked_for_deletion: bool,
    /// Created.
    pub created_at: Time,
    /// Last changed.
    pub updated_at: Time,
}

/// One controller step of a power shelf (`power-shelf-state-machine.md`), written
/// compare-and-set: it applies only while the shelf is still in `from`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShelfStep {
    /// The shelf.
    pub id: Uuid,
    /// The state the step was planned from.
    pub from: PowerShelfState,
    /// The new state; `None` is the final delete (only from `deleting`).
    pub to: Option<PowerShelfState>,
    /// The operation a `maintenance` shelf performs (cleared otherwise).
    pub operation: Option<String>,
    /// Clear the maintenance request (the operation finished, either way).
    pub clear_request: bool,
    /// New data fetched from the PMC, if any.
    pub facts: Option<serde_json::Value>,
}

/// A host's BMC: how a rack's power sequence reaches the machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostBmc {
    /// The host.
    pub host_id: Uuid,
    /// `https://bmc` or the system's own URL (`https://bmc/redfish/v1/Systems/1`).
    pub endpoint: String,
    /// Where its credentials live in the secret store.
    pub credentials_path: String,
}

/// A firmware record a rack's firmware upgrade resolves (`rack_firmware`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirmwareRecord {
    /// Its id (what a request names, e.g. `fw-v2.1`).
    pub id: String,
    /// The rack hardware type it is for.
    pub hardware_type: String,
    /// Where the BMCs fetch the image (`UpdateService.SimpleUpdate`'s `ImageURI`).
    pub image_uri: String,
    /// Marked available for use.
    pub available: bool,
    /// The default for its hardware type (at most one per type).
    pub default: bool,
    /// When it was recorded.
    pub created_at: Time,
}
