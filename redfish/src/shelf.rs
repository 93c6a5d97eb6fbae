//! Power a power shelf on or off. DMTF has no shelf-level switch (`redfish-facts.md` §5): a
//! shelf is a `PowerDistribution` (`/redfish/v1/PowerEquipment/PowerShelves/{id}`, with
//! `EquipmentType` `PowerShelf`) whose outlets carry `PowerState` and `#Outlet.PowerControl`
//! (body `{"PowerState": "On" | "Off"}` — the parameter is `PowerState`, not `ResetType`). So
//! the shelf's power-on is `PowerControl` on every outlet not already there, and it has
//! converged when every outlet reads the target. An outlet with `PowerControlLocked` is refused
//! before anything is sent: the service would reject it, and a half-switched shelf is worse
//! than one left alone.

use std::time::Instant;

use serde_json::{Value, json};

use crate::client::RedfishClient;
use crate::error::RedfishError;
use crate::power::PowerTarget;

/// One outlet as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outlet {
    /// Its `@odata.id`.
    pub uri: String,
    /// `PowerState` (On, Off, PoweringOn, PoweringOff; absent when the service does not know).
    pub power_state: Option<String>,
    /// `PowerControlLocked`: the service refuses power control.
    pub locked: bool,
    /// The `#Outlet.PowerControl` target.
    pub control_target: Option<String>,
}

/// A power shelf as read: identity and its outlets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shelf {
    /// Its `@odata.id`.
    pub uri: String,
    /// `EquipmentType` (`PowerShelf` for a shelf).
    pub equipment_type: String,
    /// `Manufacturer`, `Model`, `SerialNumber`, `FirmwareVersion` where the service gives them.
    pub manufacturer: Option<String>,
    /// The model.
    pub model: Option<String>,
    /// The serial number.
    pub serial_number: Option<String>,
    /// The firmware version.
    pub firmware_version: Option<String>,
    /// Its outlets.
    pub outlets: Vec<Outlet>,
}

impl Shelf {
    /// The shelf's power state: the outlets' common `PowerState`, or `Mixed`.
    pub fn power_state(&self) -> String {
        let mut states = self.outlets.iter().map(|o| o.power_state.as_deref().unwrap_or("Unknown"));
        match states.next() {
            None => "Unknown".into(),
            Some(first) if states.all(|s| s == first) => first.to_owned(),
            Some(_) => "Mixed".into(),
        }
    }
}

fn text(v: &Value, key: &str) -> Option<String> {
    v[key].as_str().map(str::to_owned)
}

fn members(v: &Value) -> Vec<String> {
    v["Members"].as_array().map(|m| m.iter().filter_map(|x| x["@odata.id"].as_str()).map(str::to_owned).collect()).unwrap_or_default()
}

fn outlet_of(uri: &str, v: &Value) -> Outlet {
    Outlet {
        uri: v["@odata.id"].as_str().unwrap_or(uri).to_owned(),
        power_state: text(v, "PowerState"),
        locked: v["PowerControlLocked"].as_bool().unwrap_or(false),
        control_target: v["Actions"]["#Outlet.PowerControl"]["target"].as_str().map(str::to_owned),
    }
}

impl RedfishClient {
    /// The power shelves the service lists (service root → `PowerEquipment` →
    /// `PowerShelves`, following the links, never built paths).
    pub async fn power_shelves(&self) -> Result<Vec<String>, RedfishError> {
        let root = self.get("/redfish/v1/").await?;
        let Some(pe) = root["PowerEquipment"]["@odata.id"].as_str() else {
            return Ok(Vec::new());
        };
        let pe = self.get(pe).await?;
        let Some(shelves) = pe["PowerShelves"]["@odata.id"].as_str() else {
            return Ok(Vec::new());
        };
        Ok(members(&self.get(shelves).await?))
    }

    /// Reads a shelf and every one of its outlets.
    pub async fn shelf(&self, uri: &str) -> Result<Shelf, RedfishError> {
        let v = self.get(uri).await?;
        let protocol = |reason: &str| RedfishError::Protocol { uri: uri.to_owned(), reason: reason.to_owned() };
        let equipment_type = text(&v, "EquipmentType").ok_or_else(|| protocol("no EquipmentType: not a PowerDistribution"))?;
        let mut outlets = Vec::new();
        if let Some(coll) = v["Outlets"]["@odata.id"].as_str() {
            for o in members(&self.get(coll).await?) {
                let ov = self.get(&o).await?;
                outlets.push(outlet_of(&o, &ov));
            }
        }
        Ok(Shelf {
            uri: v["@odata.id"].as_str().unwrap_or(uri).to_owned(),
            equipment_type,
            manufacturer: text(&v, "Manufacturer"),
            model: text(&v, "Model"),
            serial_number: text(&v, "SerialNumber"),
            firmware_version: text(&v, "FirmwareVersion"),
            outlets,
        })
    }

    /// Powers every outlet of a shelf on or off and waits until all of them read the target
    /// (bounded by `converge_timeout`); outlets already there are left alone. A shelf without
    /// outlets, or with a locked outlet that needs switching, is refused with nothing sent.
    pub async fn set_shelf_power(&self, uri: &str, target: PowerTarget) -> Result<Shelf, RedfishError> {
        let shelf = self.shelf(uri).await?;
        if shelf.outlets.is_empty() {
            return Err(RedfishError::Protocol { uri: shelf.uri, reason: "the shelf lists no outlets to switch".into() });
        }
        let pending: Vec<&Outlet> = shelf.outlets.iter().filter(|o| o.power_state.as_deref() != Some(target.as_str())).collect();
        if let Some(locked) = pending.iter().find(|o| o.locked) {
            return Err(RedfishError::Protocol {
                uri: locked.uri.clone(),
                reason: "PowerControlLocked: the outlet refuses power control".into(),
            });
        }
        for o in &pending {
            let action = o.control_target.clone().ok_or_else(|| RedfishError::Protocol {
                uri: o.uri.clone(),
                reason: "the outlet advertises no #Outlet.PowerControl action".into(),
            })?;
            tracing::info!(outlet = %o.uri, power_state = target.as_str(), "redfish outlet power control");
            self.post(&action, &json!({ "PowerState": target.as_str() })).await?;
        }
        let started = Instant::now();
        loop {
            let mut laggard = None;
            for o in &shelf.outlets {
                let now = outlet_of(&o.uri, &self.get(&o.uri).await?);
                if now.power_state.as_deref() != Some(target.as_str()) {
                    laggard = Some(now);
                    break;
                }
            }
            let Some(late) = laggard else {
                return self.shelf(&shelf.uri).await;
            };
            if started.elapsed() >= self.config.converge_timeout {
                return Err(RedfishError::NotConverged {
                    uri: late.uri,
                    target: target.as_str().into(),
                    last: late.power_state.unwrap_or_else(|| "unknown".into()),
                    waited_secs: started.elapsed().as_secs(),
                });
            }
            tokio::time::sleep(self.config.poll_interval).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outlet(state: Option<&str>) -> Outlet {
        Outlet { uri: "/o".into(), power_state: state.map(str::to_owned), locked: false, control_target: None }
    }

    #[test]
    fn a_shelf_reads_as_its_outlets_common_state() {
        let mut s = Shelf {
            uri: "/s".into(),
            equipment_type: "PowerShelf".into(),
            manufacturer: None,
            model: None,
            serial_number: None,
            firmware_version: None,
            outlets: vec![],
        };
        assert_eq!(s.power_state(), "Unknown");
        s.outlets = vec![outlet(Some("On")), outlet(Some("On"))];
        assert_eq!(s.power_state(), "On");
        s.outlets.push(outlet(Some("PoweringOff")));
        assert_eq!(s.power_state(), "Mixed");
    }

    #[test]
    fn an_outlet_is_read_from_the_schema_fields() {
        let v = json!({"@odata.id": "/redfish/v1/PowerEquipment/PowerShelves/1/Outlets/A1", "PowerState": "Off",
            "PowerControlLocked": true,
            "Actions": {"#Outlet.PowerControl": {"target": "/redfish/v1/PowerEquipment/PowerShelves/1/Outlets/A1/Actions/Outlet.PowerControl"}}});
        let o = outlet_of("/x", &v);
        assert_eq!(o.uri, "/redfish/v1/PowerEquipment/PowerShelves/1/Outlets/A1");
        assert_eq!(o.power_state.as_deref(), Some("Off"));
        assert!(o.locked);
        assert!(o.control_target.unwrap().ends_with("/Actions/Outlet.PowerControl"));
    }
}
