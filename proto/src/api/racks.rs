//! Racks and their devices: racks (`/v1/racks`), switches and power shelves
//! (`/v1/switches`, `/v1/power-shelves`), rack maintenance and component firmware
//! (`POST /v1/racks/{rack}/maintenance`, `POST /v1/components/firmware`), firmware records
//! (`/v1/rack-firmware`), and a host's rack and BMC (`POST /v1/hosts/{id}/rack`,
//! `PUT|DELETE /v1/hosts/{id}/bmc`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::states::{PowerShelfState, RackState};
use crate::time::Time;

/// A rack maintenance activity, in the order a cycle runs them.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RackActivity {
    /// Reprovision and upgrade firmware.
    FirmwareUpgrade,
    /// Configure the NMX (NVLink) cluster.
    ConfigureNmxCluster,
    /// Power sequencing.
    PowerSequence,
}

impl RackActivity {
    /// Every activity, in the order a cycle runs them.
    pub const ALL: [RackActivity; 3] = [RackActivity::FirmwareUpgrade, RackActivity::ConfigureNmxCluster, RackActivity::PowerSequence];

    /// The stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            RackActivity::FirmwareUpgrade => "firmware_upgrade",
            RackActivity::ConfigureNmxCluster => "configure_nmx_cluster",
            RackActivity::PowerSequence => "power_sequence",
        }
    }
}

/// Where a maintenance cycle is.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "phase", content = "activity", rename_all = "snake_case")]
pub enum RackPhase {
    /// The cycle's entry point: it consumes the scope.
    Start,
    /// Running an activity.
    Running(RackActivity),
}

/// What a cycle works on, resolved: device ids and activities.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RackTargets {
    /// Machines (host ids).
    pub machines: Vec<String>,
    /// Switches.
    pub switches: Vec<String>,
    /// Power shelves.
    pub power_shelves: Vec<String>,
    /// Activities, in run order, each once.
    pub activities: Vec<RackActivity>,
    /// The firmware upgrade's requested version, if one was named.
    pub firmware_version: Option<String>,
}

/// A rack's maintenance cycle.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RackMaintenanceView {
    /// Who asked and why.
    pub initiator: String,
    /// When.
    pub requested_at: Time,
    /// What the cycle works on.
    pub targets: RackTargets,
    /// Where it is; `None` until the controller takes the request up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<RackPhase>,
    /// The device step within the running activity.
    #[serde(default)]
    pub step: usize,
    /// The firmware record the upgrade uses (resolved at the start phase).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firmware: Option<String>,
    /// Why the request has not been taken up yet (a full disruption budget).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<String>,
}

/// A rack.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RackView {
    /// Its id.
    pub rack_id: String,
    /// Its unique name.
    pub name: String,
    /// Its hardware type (selects the default firmware).
    pub hardware_type: String,
    /// Free labels.
    pub labels: BTreeMap<String, String>,
    /// Its lifecycle state.
    pub state: RackState,
    /// Its pending or running maintenance cycle.
    pub maintenance: Option<RackMaintenanceView>,
    /// Created.
    pub created_at: Time,
    /// Last changed.
    pub updated_at: Time,
}

/// `GET /v1/racks/{rack}`: the rack with its devices and the hosts placed in it.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RackDetail {
    /// The rack.
    #[serde(flatten)]
    pub rack: RackView,
    /// Its switches and power shelves.
    pub devices: Vec<DeviceView>,
    /// The ids of the hosts placed in it.
    pub hosts: Vec<String>,
}

/// `{"racks": […]}`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RackList {
    /// Every rack.
    pub racks: Vec<RackView>,
}

/// A pending power operation on a shelf.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShelfMaintenanceView {
    /// `power_on` or `power_off`.
    pub operation: String,
    /// Who asked and why.
    pub initiator: String,
    /// When.
    pub requested_at: Time,
}

/// A switch or a power shelf.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceView {
    /// Its id.
    pub id: String,
    /// `switch` or `power_shelf`.
    pub kind: String,
    /// Its rack.
    pub rack_id: String,
    /// Unique among devices of its kind.
    pub name: String,
    /// Its BMC / PMC (`https://…`).
    pub endpoint: String,
    /// Where its credentials live in the secret store (a path, never a value).
    pub credentials_path: String,
    /// A power shelf's lifecycle state (`None` for a switch).
    pub state: Option<PowerShelfState>,
    /// The power operation a shelf in maintenance performs.
    pub operation: Option<String>,
    /// A pending power operation.
    pub maintenance_requested: Option<ShelfMaintenanceView>,
    /// Marked for deletion (a shelf's controller deletes it from `ready` or `error`).
    pub marked_for_deletion: bool,
    /// What the shelf's controller last read from its PMC (identity, firmware, outlets), as
    /// the PMC reported it.
    pub facts: Option<serde_json::Value>,
    /// Created.
    pub created_at: Time,
    /// Last changed.
    pub updated_at: Time,
}

/// `{"items": […]}`: a device listing.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceList {
    /// The devices.
    pub items: Vec<DeviceView>,
}

/// What `POST /v1/power-shelves/maintenance` answers: the shelves, each with its request.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShelfMaintenanceAnswer {
    /// Who asked and why.
    pub initiator: String,
    /// The shelves.
    pub items: Vec<DeviceView>,
}

/// What a rack maintenance request answers: the rack and its cycle.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RackMaintenanceAnswer {
    /// The rack's id.
    pub rack_id: String,
    /// Its name.
    pub name: String,
    /// Its state.
    pub state: RackState,
    /// The cycle requested.
    pub maintenance: Option<RackMaintenanceView>,
}

/// What a power shelf firmware update answers: it went straight to the shelves' PMCs.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShelfFirmwareAnswer {
    /// The firmware record sent.
    pub firmware: String,
    /// The shelves.
    pub power_shelf_ids: Vec<String>,
    /// Who asked and why.
    pub initiator: String,
}

/// What `POST /v1/components/firmware` answers: compute trays and switches go through their
/// rack's maintenance cycle; power shelves straight to their PMCs.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ComponentFirmwareAnswer {
    /// Compute trays or switches: a rack maintenance cycle.
    Rack(RackMaintenanceAnswer),
    /// Power shelves.
    Shelves(ShelfFirmwareAnswer),
}

/// A firmware record.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FirmwareView {
    /// Its id (what a request names, e.g. `fw-v2.1`).
    pub id: String,
    /// The rack hardware type it is for.
    pub hardware_type: String,
    /// Where the BMCs fetch the image.
    pub image_uri: String,
    /// Marked available for use.
    pub available: bool,
    /// The default for its hardware type.
    pub default: bool,
    /// When it was recorded.
    pub created_at: Time,
}

/// `{"firmware": […]}`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FirmwareList {
    /// Every record.
    pub firmware: Vec<FirmwareView>,
}

/// Where a host is placed (`rack: None`: in no rack).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostPlacement {
    /// The host.
    pub host_id: String,
    /// Its rack's name.
    pub rack: Option<String>,
}

/// A host's BMC after `PUT` (both set) or `DELETE` (both `None`).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostBmcView {
    /// The host.
    pub host_id: String,
    /// Its BMC's Redfish endpoint.
    pub endpoint: Option<String>,
    /// Where its credentials live in the secret store.
    pub credentials_path: Option<String>,
}
