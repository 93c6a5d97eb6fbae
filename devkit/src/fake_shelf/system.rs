//! Optional `ComputerSystem`s, so the fake can also stand in for a machine's BMC — above all
//! one whose machine never reaches the power state it was asked for, which sushy-emulator
//! cannot do (`redfish-facts.md` §3: every accepted request lands within 11 s). With no I/O
//! and no clock of its own: the `ResetType` parameter and its body, one [`System`] (a
//! [`Switch`] like an outlet's), and its JSON.
//!
//! | URI | `@odata.type` |
//! |---|---|
//! | `/redfish/v1/Systems` | `#ComputerSystemCollection.ComputerSystemCollection` |
//! | `/redfish/v1/Systems/{id}` | `#ComputerSystem.v1_13_0.ComputerSystem` |
//!
//! Both exist only when the shelf has systems (`--systems`); the service root then links
//! `Systems`. `#ComputerSystem.Reset` (target `…/Systems/{id}/Actions/ComputerSystem.Reset`)
//! allows `On`, `ForceOff`, `GracefulShutdown`, `ForceRestart` and `PowerCycle`: `On` moves the
//! switch on, `ForceOff` and `GracefulShutdown` off, `ForceRestart` and `PowerCycle` cycle it (off, then on; an `Off`
//! machine just powers on, as sushy's restarts do), each after the shelf's delay with
//! `PoweringOn`/`PoweringOff` in between (sushy reports only `On`/`Off`).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::power::{BodyError, Outcome, Power, Switch, Target, parse_param};
use super::resources::{collection, enabled_ok, link};

/// The system collection.
pub const SYSTEMS_URI: &str = "/redfish/v1/Systems";
/// The action's name in messages.
pub const RESET: &str = "ComputerSystem.Reset";
/// The action path below a system.
const RESET_SUFFIX: &str = "/Actions/ComputerSystem.Reset";

/// The `ResetType` parameter of `#ComputerSystem.Reset`, as far as the fake takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetType {
    /// Power on.
    On,
    /// Power off at once.
    ForceOff,
    /// Shut down, then power off (the fake: power off).
    GracefulShutdown,
    /// Power off, then on.
    ForceRestart,
    /// Power off, then on (the schema's `PowerCycle`, v1_4_0).
    PowerCycle,
}

/// The values `#ComputerSystem.Reset` allows, as advertised in `ResetType@Redfish.AllowableValues`.
pub const ALLOWED_RESET_TYPES: [&str; 5] = ["On", "ForceOff", "GracefulShutdown", "ForceRestart", "PowerCycle"];

impl ResetType {
    /// The Redfish spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ResetType::On => "On",
            ResetType::ForceOff => "ForceOff",
            ResetType::GracefulShutdown => "GracefulShutdown",
            ResetType::ForceRestart => "ForceRestart",
            ResetType::PowerCycle => "PowerCycle",
        }
    }

    /// Parses an allowed value (exact spelling, as Redfish enums are case-sensitive).
    pub fn parse(value: &str) -> Option<ResetType> {
        match value {
            "On" => Some(ResetType::On),
            "ForceOff" => Some(ResetType::ForceOff),
            "GracefulShutdown" => Some(ResetType::GracefulShutdown),
            "ForceRestart" => Some(ResetType::ForceRestart),
            "PowerCycle" => Some(ResetType::PowerCycle),
            _ => None,
        }
    }

    /// Where it sends the machine.
    pub fn target(self) -> Target {
        match self {
            ResetType::On => Target::On,
            ResetType::ForceOff | ResetType::GracefulShutdown => Target::Off,
            ResetType::ForceRestart | ResetType::PowerCycle => Target::Cycle,
        }
    }
}

/// Parses the body of `#ComputerSystem.Reset`: a JSON object with `ResetType`.
pub fn parse_reset(body: &[u8]) -> Result<ResetType, BodyError> {
    parse_param(body, "ResetType", ResetType::parse)
}

/// One machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct System {
    /// Its `Id` (`node-1`).
    pub id: String,
    /// Its power (`switch.stuck`: accepts `Reset` and never moves).
    pub switch: Switch,
}

impl System {
    /// A steady machine.
    pub fn new(id: &str, power: Power) -> System {
        System { id: id.to_owned(), switch: Switch::new(power) }
    }

    /// `PowerState` at `now` for a shelf whose moves take `delay`.
    pub fn power_state(&self, now: Instant, delay: Duration) -> &'static str {
        self.switch.power_state(now, delay)
    }

    /// Applies an accepted `Reset` at `now`.
    pub fn reset(&mut self, reset: ResetType, now: Instant, delay: Duration) -> Outcome {
        self.switch.request(reset.target(), now, delay)
    }
}

/// A system's URI.
pub fn system_uri(id: &str) -> String {
    format!("{SYSTEMS_URI}/{id}")
}

/// A system's `#ComputerSystem.Reset` target.
pub fn reset_target(id: &str) -> String {
    format!("{SYSTEMS_URI}/{id}{RESET_SUFFIX}")
}

/// The system id if `path` (no trailing slash) is a system's reset target.
pub fn reset_system(path: &str) -> Option<&str> {
    let id = path.strip_prefix(SYSTEMS_URI)?.strip_prefix('/')?.strip_suffix(RESET_SUFFIX)?;
    (!id.is_empty() && !id.contains('/')).then_some(id)
}

/// The collection or a system at `path` (no trailing slash) as read at `now`; None when
/// there is none (always, for a shelf without systems).
pub fn get(systems: &[System], path: &str, now: Instant, delay: Duration) -> Option<Value> {
    if systems.is_empty() {
        return None;
    }
    if path == SYSTEMS_URI {
        let members: Vec<String> = systems.iter().map(|s| system_uri(&s.id)).collect();
        return Some(collection(SYSTEMS_URI, "ComputerSystemCollection", "Computer System Collection", &members));
    }
    let id = path.strip_prefix(SYSTEMS_URI)?.strip_prefix('/')?;
    let system = systems.iter().find(|s| s.id == id)?;
    Some(json!({
        "@odata.id": system_uri(id),
        "@odata.type": "#ComputerSystem.v1_13_0.ComputerSystem",
        "Id": id,
        "Name": format!("System {id}"),
        "SystemType": "Physical",
        "Status": enabled_ok(),
        "PowerState": system.power_state(now, delay),
        "Actions": {
            "#ComputerSystem.Reset": {
                "target": reset_target(id),
                "ResetType@Redfish.AllowableValues": ALLOWED_RESET_TYPES,
            }
        },
        "Links": {},
    }))
}

/// The service root's link to the collection, when there are systems.
pub fn root_link(systems: &[System]) -> Option<Value> {
    (!systems.is_empty()).then(|| link(SYSTEMS_URI))
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: Duration = Duration::from_millis(1500);

    fn systems() -> Vec<System> {
        vec![System::new("node-1", Power::On), System::new("node_2", Power::Off)]
    }

    #[test]
    fn reset_bodies_parse_to_reset_types_or_the_right_refusal() {
        assert_eq!(parse_reset(br#"{"ResetType":"ForceOff"}"#), Ok(ResetType::ForceOff));
        assert_eq!(parse_reset(br#"{"ResetType":"GracefulShutdown","X":1}"#), Ok(ResetType::GracefulShutdown));
        assert_eq!(parse_reset(br#"{"ResetType":"Nmi"}"#), Err(BodyError::NotInList("\"Nmi\"".into())));
        assert_eq!(parse_reset(br#"{"ResetType":"on"}"#), Err(BodyError::NotInList("\"on\"".into())));
        assert_eq!(parse_reset(br#"{"ResetType":3}"#), Err(BodyError::NotInList("3".into())));
        assert_eq!(parse_reset(br#"{"PowerState":"On"}"#), Err(BodyError::Missing));
        assert!(matches!(parse_reset(b"{"), Err(BodyError::Malformed(_))));
        for v in ALLOWED_RESET_TYPES {
            assert_eq!(ResetType::parse(v).map(ResetType::as_str), Some(v));
        }
    }

    #[test]
    fn reset_types_map_onto_switch_targets() {
        let t0 = Instant::now();
        let mut s = System::new("n", Power::On);
        assert_eq!(s.reset(ResetType::On, t0, D), Outcome::Unchanged);
        assert_eq!(s.reset(ResetType::GracefulShutdown, t0, D), Outcome::Started);
        assert_eq!(s.power_state(t0, D), "PoweringOff");
        assert_eq!(s.reset(ResetType::ForceOff, t0 + D, D), Outcome::Unchanged);
        assert_eq!(s.power_state(t0 + D, D), "Off");
        assert_eq!(s.reset(ResetType::ForceRestart, t0 + D, D), Outcome::Started);
        assert_eq!(s.power_state(t0 + D, D), "PoweringOn", "a restart of an Off machine powers it on");
        assert_eq!(s.power_state(t0 + D + D, D), "On");
    }

    #[test]
    fn the_collection_and_each_system_read_as_the_schema_says() {
        let t0 = Instant::now();
        let mut all = systems();
        let c = get(&all, SYSTEMS_URI, t0, D).unwrap();
        assert_eq!(c["@odata.type"], "#ComputerSystemCollection.ComputerSystemCollection");
        assert_eq!(c["Members@odata.count"], 2);
        assert_eq!(c["Members"][1]["@odata.id"], "/redfish/v1/Systems/node_2");
        all[0].reset(ResetType::ForceOff, t0, D);
        let s = get(&all, "/redfish/v1/Systems/node-1", t0, D).unwrap();
        assert_eq!(s["@odata.type"], "#ComputerSystem.v1_13_0.ComputerSystem");
        assert_eq!(
            (s["Id"].as_str(), s["Name"].as_str(), s["PowerState"].as_str()),
            (Some("node-1"), Some("System node-1"), Some("PoweringOff"))
        );
        let action = &s["Actions"]["#ComputerSystem.Reset"];
        assert_eq!(action["target"], "/redfish/v1/Systems/node-1/Actions/ComputerSystem.Reset");
        assert_eq!(
            action["ResetType@Redfish.AllowableValues"],
            json!(["On", "ForceOff", "GracefulShutdown", "ForceRestart", "PowerCycle"])
        );
        assert_eq!(get(&all, "/redfish/v1/Systems/node-1", t0 + D, D).unwrap()["PowerState"], "Off");
        assert_eq!(get(&all, "/redfish/v1/Systems/node_2", t0, D).unwrap()["PowerState"], "Off");
        assert!(get(&all, "/redfish/v1/Systems/node-3", t0, D).is_none());
        assert!(get(&all, "/redfish/v1/Systems/node-1/Actions/ComputerSystem.Reset", t0, D).is_none());
        assert!(get(&[], SYSTEMS_URI, t0, D).is_none());
        assert_eq!(root_link(&all), Some(json!({"@odata.id": "/redfish/v1/Systems"})));
        assert_eq!(root_link(&[]), None);
    }

    #[test]
    fn reset_targets_name_their_system() {
        assert_eq!(reset_system(&reset_target("node-1")), Some("node-1"));
        assert_eq!(reset_system("/redfish/v1/Systems/node-1/ComputerSystem.Reset"), None);
        assert_eq!(reset_system("/redfish/v1/Systems//Actions/ComputerSystem.Reset"), None);
        assert_eq!(reset_system("/redfish/v1/Systems/a/b/Actions/ComputerSystem.Reset"), None);
        assert_eq!(reset_system("/redfish/v1/Chassis/a/Actions/ComputerSystem.Reset"), None);
    }
}
