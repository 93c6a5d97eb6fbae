//! The Redfish resources the shelf serves, as JSON built from the [`Shelf`] at a given
//! instant, and the Redfish error body. URIs and property names follow the DMTF
//! `public-power-shelf` mockup (`redfish-facts.md` §6) except that action targets carry
//! `/Actions/` as DSP0266 §7.11 requires. Collections carry no `Id`: the collection schemas
//! have none.
//!
//! | URI | `@odata.type` |
//! |---|---|
//! | `/redfish/v1/` | `#ServiceRoot.v1_20_0.ServiceRoot` |
//! | `/redfish/v1/PowerEquipment` | `#PowerEquipment.v1_2_0.PowerEquipment` |
//! | `/redfish/v1/PowerEquipment/PowerShelves` | `#PowerDistributionCollection.PowerDistributionCollection` |
//! | `/redfish/v1/PowerEquipment/PowerShelves/1` | `#PowerDistribution.v1_6_0.PowerDistribution` |
//! | `…/PowerShelves/1/Outlets` | `#OutletCollection.OutletCollection` |
//! | `…/PowerShelves/1/Outlets/{id}` | `#Outlet.v1_4_4.Outlet` |
//! | `/redfish/v1/Chassis` | `#ChassisCollection.ChassisCollection` |
//! | `/redfish/v1/Chassis/PowerShelf` | `#Chassis.v1_25_0.Chassis` (no `PowerState`, no `Reset`) |
//!
//! The `UpdateService`, the firmware inventory and the `TaskService` are in [`update`]; the
//! optional `ComputerSystem`s (`/redfish/v1/Systems`, linked from the root only when there
//! are some) in [`system`].

use std::time::Instant;

use serde_json::{Value, json};

use super::shelf::{ALLOWED_CONTROLS, Outlet, Shelf};
use super::system;
use super::update::{self, TASK_SERVICE_URI, UPDATE_SERVICE_URI};

/// The service root.
pub const ROOT_URI: &str = "/redfish/v1/";
/// The power equipment.
pub const POWER_EQUIPMENT_URI: &str = "/redfish/v1/PowerEquipment";
/// The power shelf collection.
pub const SHELVES_URI: &str = "/redfish/v1/PowerEquipment/PowerShelves";
/// The one shelf.
pub const SHELF_URI: &str = "/redfish/v1/PowerEquipment/PowerShelves/1";
/// Its outlet collection.
pub const OUTLETS_URI: &str = "/redfish/v1/PowerEquipment/PowerShelves/1/Outlets";
/// The chassis collection.
pub const CHASSIS_COLLECTION_URI: &str = "/redfish/v1/Chassis";
/// The shelf's chassis.
pub const CHASSIS_URI: &str = "/redfish/v1/Chassis/PowerShelf";
/// The action path below an outlet.
const ACTION_SUFFIX: &str = "/Actions/Outlet.PowerControl";

/// The manufacturer the shelf reports.
pub const MANUFACTURER: &str = "Drover Fake Power";
/// The model.
pub const MODEL: &str = "FS-6000";
/// The firmware version before any update.
pub const FIRMWARE_VERSION: &str = "1.0.0";
/// The `RedfishVersion` of the service root.
pub const REDFISH_VERSION: &str = "1.21.0";

/// An outlet's URI.
pub fn outlet_uri(id: &str) -> String {
    format!("{OUTLETS_URI}/{id}")
}

/// An outlet's `#Outlet.PowerControl` target.
pub fn action_target(id: &str) -> String {
    format!("{OUTLETS_URI}/{id}{ACTION_SUFFIX}")
}

/// The outlet id if `path` (no trailing slash) is an outlet's action target.
pub fn action_outlet(path: &str) -> Option<&str> {
    let id = path.strip_prefix(OUTLETS_URI)?.strip_prefix('/')?.strip_suffix(ACTION_SUFFIX)?;
    (!id.is_empty() && !id.contains('/')).then_some(id)
}

/// `{"@odata.id": uri}`.
pub(super) fn link(uri: &str) -> Value {
    json!({ "@odata.id": uri })
}

/// `Status`: enabled and healthy.
pub(super) fn enabled_ok() -> Value {
    json!({ "State": "Enabled", "Health": "OK" })
}

/// The resource at `path` (no trailing slash, except the root `/redfish/v1/` which is
/// accepted either way) as read at `now`; None when there is none.
pub fn get(shelf: &Shelf, path: &str, now: Instant) -> Option<Value> {
    let value = match path {
        "/redfish/v1" | ROOT_URI => service_root(shelf),
        POWER_EQUIPMENT_URI => power_equipment(),
        SHELVES_URI => collection(SHELVES_URI, "PowerDistributionCollection", "Power Shelf Collection", &[SHELF_URI.to_owned()]),
        SHELF_URI => power_shelf(shelf, now),
        OUTLETS_URI => {
            let members: Vec<String> = shelf.outlets.iter().map(|o| outlet_uri(&o.id)).collect();
            collection(OUTLETS_URI, "OutletCollection", "Outlet Collection", &members)
        }
        CHASSIS_COLLECTION_URI => collection(CHASSIS_COLLECTION_URI, "ChassisCollection", "Chassis Collection", &[CHASSIS_URI.to_owned()]),
        CHASSIS_URI => chassis(shelf),
        _ => match path.strip_prefix(OUTLETS_URI).and_then(|rest| rest.strip_prefix('/')) {
            Some(id) => outlet(shelf.outlet(id)?, shelf, now),
            None => {
                return system::get(&shelf.systems, path, now, shelf.delay)
                    .or_else(|| update::get(&shelf.firmware, path, now, SHELF_URI, MANUFACTURER));
            }
        },
    };
    Some(value)
}

/// `GET /redfish`: the version map (unauthenticated, DSP0266 §6).
pub fn versions() -> Value {
    json!({ "v1": ROOT_URI })
}

/// The service root (unauthenticated). No `SessionService`: the shelf takes Basic only.
/// `UpdateService` and `Tasks` (the `TaskService`) serve firmware updates; `Systems` is there
/// only when the shelf has systems.
pub fn service_root(shelf: &Shelf) -> Value {
    let mut root = json!({
        "@odata.id": ROOT_URI,
        "@odata.type": "#ServiceRoot.v1_20_0.ServiceRoot",
        "Id": "RootService",
        "Name": "Root Service",
        "RedfishVersion": REDFISH_VERSION,
        "UUID": "5f6c8a3e-1b2d-4c7e-9a10-d20e5e1f0001",
        "Vendor": MANUFACTURER,
        "Product": MODEL,
        "PowerEquipment": link(POWER_EQUIPMENT_URI),
        "Chassis": link(CHASSIS_COLLECTION_URI),
        "UpdateService": link(UPDATE_SERVICE_URI),
        "Tasks": link(TASK_SERVICE_URI),
        "Links": {},
    });
    if let (Some(systems), Value::Object(map)) = (system::root_link(&shelf.systems), &mut root) {
        map.insert("Systems".into(), systems);
    }
    root
}

fn power_equipment() -> Value {
    json!({
        "@odata.id": POWER_EQUIPMENT_URI,
        "@odata.type": "#PowerEquipment.v1_2_0.PowerEquipment",
        "Id": "PowerEquipment",
        "Name": "Power Equipment",
        "Status": enabled_ok(),
        "PowerShelves": link(SHELVES_URI),
        "Links": {},
    })
}

/// A resource collection of `kind` (its `@odata.type` is `#{kind}.{kind}`).
pub(super) fn collection(uri: &str, kind: &str, name: &str, members: &[String]) -> Value {
    json!({
        "@odata.id": uri,
        "@odata.type": format!("#{kind}.{kind}"),
        "Name": name,
        "Members@odata.count": members.len(),
        "Members": members.iter().map(|m| link(m)).collect::<Vec<_>>(),
    })
}

fn power_shelf(shelf: &Shelf, now: Instant) -> Value {
    json!({
        "@odata.id": SHELF_URI,
        "@odata.type": "#PowerDistribution.v1_6_0.PowerDistribution",
        "Id": "1",
        "Name": shelf.identity.name,
        "EquipmentType": "PowerShelf",
        "Manufacturer": MANUFACTURER,
        "Model": MODEL,
        "SerialNumber": shelf.identity.serial,
        "FirmwareVersion": shelf.firmware.version(now),
        "Status": enabled_ok(),
        "Outlets": link(OUTLETS_URI),
        "Links": { "Chassis": [link(CHASSIS_URI)] },
    })
}

fn chassis(shelf: &Shelf) -> Value {
    json!({
        "@odata.id": CHASSIS_URI,
        "@odata.type": "#Chassis.v1_25_0.Chassis",
        "Id": "PowerShelf",
        "Name": shelf.identity.name,
        "ChassisType": "Shelf",
        "Manufacturer": MANUFACTURER,
        "Model": MODEL,
        "SerialNumber": shelf.identity.serial,
        "Status": enabled_ok(),
        "Links": {},
    })
}

fn outlet(o: &Outlet, shelf: &Shelf, now: Instant) -> Value {
    let delay_secs = shelf.delay.as_secs_f64();
    json!({
        "@odata.id": outlet_uri(&o.id),
        "@odata.type": "#Outlet.v1_4_4.Outlet",
        "Id": o.id,
        "Name": format!("Outlet {}", o.id),
        "Status": enabled_ok(),
        "PowerState": o.power_state(now, shelf.delay),
        "PowerEnabled": true,
        "PowerControlLocked": o.locked,
        "PowerOnDelaySeconds": delay_secs,
        "PowerOffDelaySeconds": delay_secs,
        "PowerCycleDelaySeconds": delay_secs,
        "Actions": {
            "#Outlet.PowerControl": {
                "target": action_target(&o.id),
                "PowerState@Redfish.AllowableValues": ALLOWED_CONTROLS,
            }
        },
    })
}

/// A Redfish error body (DSP0266 §9.6): `code` and one `@Message.ExtendedInfo` entry, both
/// naming `Base.1.0.{message}`.
pub fn error(message: &str, text: &str, args: &[&str], resolution: &str) -> Value {
    let id = format!("Base.1.0.{message}");
    json!({
        "error": {
            "code": id,
            "message": text,
            "@Message.ExtendedInfo": [{
                "@odata.type": "#Message.v1_1_1.Message",
                "MessageId": id,
                "Message": text,
                "MessageArgs": args,
                "Severity": "Warning",
                "MessageSeverity": "Warning",
                "Resolution": resolution,
            }],
        }
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::fake_shelf::shelf::{Control, Identity, Power};

    fn shelf() -> Shelf {
        Shelf::new(Identity::default(), &["A1".into(), "B1".into()], Power::On, Duration::from_millis(1500))
    }

    #[test]
    fn every_resource_has_the_common_properties_and_links_resolve() {
        let mut s = shelf().with_systems(&["node-1".into()], Power::Off);
        let now = Instant::now();
        let body = json!({ "ImageURI": "https://fw.example/x.bin", "Targets": [SHELF_URI] }).to_string();
        s.firmware.start(update::parse_simple_update(body.as_bytes(), SHELF_URI).unwrap(), now);
        let mut todo = vec![ROOT_URI.to_owned()];
        let mut seen = Vec::new();
        while let Some(uri) = todo.pop() {
            let v = get(&s, &uri, now).unwrap_or_else(|| panic!("{uri} resolves"));
            assert_eq!(v["@odata.id"], uri.as_str());
            assert!(v["@odata.type"].as_str().unwrap().starts_with('#'), "{uri}");
            assert!(v["Name"].is_string(), "{uri}");
            if v.get("Members").is_none() {
                assert!(v["Id"].is_string(), "{uri}");
            }
            let mut links = Vec::new();
            collect_links(&v, &mut links);
            for l in links {
                if l != uri && !seen.contains(&l) && !todo.contains(&l) {
                    todo.push(l);
                }
            }
            seen.push(uri);
        }
        let (a1, b1, task, node) = (outlet_uri("A1"), outlet_uri("B1"), update::task_uri(1), system::system_uri("node-1"));
        for uri in [SHELF_URI, &a1, &b1, CHASSIS_URI, update::SHELF_FIRMWARE_URI, update::UPDATE_SERVICE_URI, &task, &node] {
            let uri = uri.to_owned();
            assert!(seen.contains(&uri), "{uri} reachable from the root: {seen:?}");
        }
    }

    fn collect_links(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                for (k, x) in m {
                    match (k.as_str(), x) {
                        ("@odata.id", Value::String(s)) => out.push(s.clone()),
                        _ => collect_links(x, out),
                    }
                }
            }
            Value::Array(a) => a.iter().for_each(|x| collect_links(x, out)),
            _ => {}
        }
    }

    #[test]
    fn the_shelf_and_its_outlets_read_as_the_schema_says() {
        let mut s = shelf();
        let t0 = Instant::now();
        let shelf_json = get(&s, SHELF_URI, t0).unwrap();
        assert_eq!(shelf_json["EquipmentType"], "PowerShelf");
        assert!(shelf_json.get("PowerState").is_none() && shelf_json.get("Actions").is_none());
        let outlets = get(&s, OUTLETS_URI, t0).unwrap();
        assert_eq!(outlets["Members@odata.count"], 2);
        assert_eq!(outlets["Members"][1]["@odata.id"], outlet_uri("B1"));
        s.power_control("A1", Control::Off, t0).unwrap();
        s.outlet_mut("B1").unwrap().locked = true;
        let a1 = get(&s, &outlet_uri("A1"), t0).unwrap();
        assert_eq!(a1["PowerState"], "PoweringOff");
        assert_eq!(a1["PowerEnabled"], true);
        assert_eq!(a1["PowerOnDelaySeconds"], 1.5);
        let action = &a1["Actions"]["#Outlet.PowerControl"];
        assert_eq!(action["target"], "/redfish/v1/PowerEquipment/PowerShelves/1/Outlets/A1/Actions/Outlet.PowerControl");
        assert_eq!(action["PowerState@Redfish.AllowableValues"], json!(["On", "Off", "PowerCycle"]));
        assert_eq!(get(&s, &outlet_uri("A1"), t0 + Duration::from_secs(2)).unwrap()["PowerState"], "Off");
        assert_eq!(get(&s, &outlet_uri("B1"), t0).unwrap()["PowerControlLocked"], true);
        assert!(get(&s, &outlet_uri("C1"), t0).is_none());
        assert!(get(&s, "/redfish/v1/Systems", t0).is_none());
        assert!(get(&s, &format!("{}/x", outlet_uri("A1")), t0).is_none());
    }

    #[test]
    fn the_root_links_the_update_service_and_the_shelf_shows_its_firmware() {
        let mut s = shelf();
        let t0 = Instant::now();
        let root = get(&s, ROOT_URI, t0).unwrap();
        assert_eq!(root["UpdateService"], json!({"@odata.id": "/redfish/v1/UpdateService"}));
        assert!(root.get("Systems").is_none(), "no systems, no link");
        let with = shelf().with_systems(&["n1".into()], Power::On);
        assert_eq!(get(&with, ROOT_URI, t0).unwrap()["Systems"], json!({"@odata.id": "/redfish/v1/Systems"}));
        assert_eq!(root["Tasks"], json!({"@odata.id": "/redfish/v1/TaskService"}));
        assert_eq!(get(&s, SHELF_URI, t0).unwrap()["FirmwareVersion"], FIRMWARE_VERSION);
        let body = json!({ "ImageURI": "https://fw.example/ps-fw-2.1.bin", "Targets": [SHELF_URI] }).to_string();
        s.firmware.start(update::parse_simple_update(body.as_bytes(), SHELF_URI).unwrap(), t0);
        let done = t0 + s.firmware.time;
        assert_eq!(get(&s, SHELF_URI, done - Duration::from_millis(1)).unwrap()["FirmwareVersion"], FIRMWARE_VERSION);
        assert_eq!(get(&s, SHELF_URI, done).unwrap()["FirmwareVersion"], "ps-fw-2.1");
        assert!(get(&s, "/redfish/v1/TaskService/TaskMonitors/1", done).is_none(), "monitors are not resources");
    }

    #[test]
    fn action_targets_name_their_outlet() {
        assert_eq!(action_outlet(&action_target("A1")), Some("A1"));
        assert_eq!(action_outlet("/redfish/v1/PowerEquipment/PowerShelves/1/Outlets/A1/Outlet.PowerControl"), None);
        assert_eq!(action_outlet("/redfish/v1/PowerEquipment/PowerShelves/1/Outlets//Actions/Outlet.PowerControl"), None);
        assert_eq!(action_outlet("/redfish/v1/PowerEquipment/PowerShelves/1/Outlets/A/B/Actions/Outlet.PowerControl"), None);
    }

    #[test]
    fn errors_carry_the_message_id() {
        let e = error("ResourceInUse", "locked", &["A1"], "unlock it");
        assert_eq!(e["error"]["code"], "Base.1.0.ResourceInUse");
        assert_eq!(e["error"]["@Message.ExtendedInfo"][0]["MessageId"], "Base.1.0.ResourceInUse");
        assert_eq!(e["error"]["@Message.ExtendedInfo"][0]["MessageArgs"], json!(["A1"]));
    }
}
