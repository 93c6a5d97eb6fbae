//! The shelf's state, with no I/O and no clock of its own: its identity, its outlets (each a
//! [`Switch`] from [`power`](super::power)), the machines it may stand in for
//! ([`System`]s, none unless asked), the switches the control API flips (stuck, locked,
//! busy), the logs of accepted `PowerControl` and `Reset` requests, and its firmware
//! ([`Firmware`]: updates and their tasks). Every function that depends on time takes `now`,
//! so the transitions are tested by passing instants rather than by sleeping.
//!
//! Outlets and machines move the same way (the module docs of [`power`](super::power)):
//! `PowerControl`'s `On`/`Off`/`PowerCycle` are [`Target`]s `On`/`Off`/`Cycle`, and so are
//! `Reset`'s `On` / `ForceOff`, `GracefulShutdown` / `ForceRestart`. One `delay` serves both.

use std::time::{Duration, Instant};

pub use super::power::{BodyError, Outcome, Power};
use super::power::{Switch, Target, parse_param};
use super::resources::FIRMWARE_VERSION;
use super::system::{ResetType, System};
use super::update::{DEFAULT_UPDATE_MS, Firmware};

/// The `PowerState` parameter of `#Outlet.PowerControl`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// Power on.
    On,
    /// Power off.
    Off,
    /// Power off, then on.
    PowerCycle,
}

/// The values `#Outlet.PowerControl` allows, as advertised in `PowerState@Redfish.AllowableValues`.
pub const ALLOWED_CONTROLS: [&str; 3] = ["On", "Off", "PowerCycle"];

impl Control {
    /// The Redfish spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Control::On => "On",
            Control::Off => "Off",
            Control::PowerCycle => "PowerCycle",
        }
    }

    /// Parses an allowed value (exact spelling, as Redfish enums are case-sensitive).
    pub fn parse(value: &str) -> Option<Control> {
        match value {
            "On" => Some(Control::On),
            "Off" => Some(Control::Off),
            "PowerCycle" => Some(Control::PowerCycle),
            _ => None,
        }
    }

    /// Where it sends the outlet.
    pub fn target(self) -> Target {
        match self {
            Control::On => Target::On,
            Control::Off => Target::Off,
            Control::PowerCycle => Target::Cycle,
        }
    }
}

/// Parses the body of `#Outlet.PowerControl`: a JSON object with `PowerState`.
pub fn parse_control(body: &[u8]) -> Result<Control, BodyError> {
    parse_param(body, "PowerState", Control::parse)
}

/// One outlet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outlet {
    /// Its `Id` (`A1`).
    pub id: String,
    /// `PowerControlLocked`: `PowerControl` is refused with 409.
    pub locked: bool,
    /// Its power (`switch.stuck`: accepts `PowerControl` and never moves).
    pub switch: Switch,
}

impl Outlet {
    /// A steady outlet.
    pub fn new(id: &str, power: Power) -> Outlet {
        Outlet { id: id.to_owned(), locked: false, switch: Switch::new(power) }
    }

    /// `PowerState` at `now` for a shelf whose moves take `delay`.
    pub fn power_state(&self, now: Instant, delay: Duration) -> &'static str {
        self.switch.power_state(now, delay)
    }
}

/// Why `PowerControl` was refused after its body parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No such outlet.
    UnknownOutlet(String),
    /// The outlet has `PowerControlLocked` (409).
    Locked(String),
    /// No such system.
    UnknownSystem(String),
}

/// What the shelf says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// `Name` of the shelf.
    pub name: String,
    /// `SerialNumber`.
    pub serial: String,
}

impl Default for Identity {
    fn default() -> Identity {
        Identity { name: "Power Shelf".into(), serial: "FS-0000001".into() }
    }
}

/// The whole shelf.
#[derive(Debug, Clone)]
pub struct Shelf {
    /// Name and serial number.
    pub identity: Identity,
    /// How long a move takes.
    pub delay: Duration,
    /// The outlets, in the order given on the command line.
    pub outlets: Vec<Outlet>,
    /// Every accepted `PowerControl`, in order: (outlet, requested `PowerState`).
    pub actions: Vec<(String, Control)>,
    /// The machines it stands in for (`/redfish/v1/Systems`; none unless asked).
    pub systems: Vec<System>,
    /// Every accepted `#ComputerSystem.Reset`, in order: (system, `ResetType`).
    pub resets: Vec<(String, ResetType)>,
    /// How many more Redfish requests answer 503.
    pub busy: u32,
    /// The `Retry-After` seconds those 503s carry.
    pub retry_after: u64,
    /// Its firmware and the updates asked of it (update time [`DEFAULT_UPDATE_MS`] unless set).
    pub firmware: Firmware,
}

impl Shelf {
    /// A shelf whose outlets all start at `power`.
    pub fn new(identity: Identity, outlet_ids: &[String], power: Power, delay: Duration) -> Shelf {
        let outlets = outlet_ids.iter().map(|id| Outlet::new(id, power)).collect();
        let firmware = Firmware::new(FIRMWARE_VERSION, Duration::from_millis(DEFAULT_UPDATE_MS));
        Shelf { identity, delay, outlets, actions: Vec::new(), systems: Vec::new(), resets: Vec::new(), busy: 0, retry_after: 1, firmware }
    }

    /// The same shelf, also serving the machines `system_ids`, all starting at `power`.
    pub fn with_systems(mut self, system_ids: &[String], power: Power) -> Shelf {
        self.systems = system_ids.iter().map(|id| System::new(id, power)).collect();
        self
    }

    /// The outlet named `id`.
    pub fn outlet(&self, id: &str) -> Option<&Outlet> {
        self.outlets.iter().find(|o| o.id == id)
    }

    /// The outlet named `id`, to change.
    pub fn outlet_mut(&mut self, id: &str) -> Option<&mut Outlet> {
        self.outlets.iter_mut().find(|o| o.id == id)
    }

    /// `PowerControl` on outlet `id` at `now`: refused when locked, else logged and applied.
    pub fn power_control(&mut self, id: &str, control: Control, now: Instant) -> Result<Outcome, Refusal> {
        let delay = self.delay;
        let outlet = self.outlets.iter_mut().find(|o| o.id == id).ok_or_else(|| Refusal::UnknownOutlet(id.to_owned()))?;
        if outlet.locked {
            return Err(Refusal::Locked(id.to_owned()));
        }
        let outcome = outlet.switch.request(control.target(), now, delay);
        self.actions.push((id.to_owned(), control));
        Ok(outcome)
    }

    /// The system named `id`.
    pub fn system(&self, id: &str) -> Option<&System> {
        self.systems.iter().find(|s| s.id == id)
    }

    /// The system named `id`, to change.
    pub fn system_mut(&mut self, id: &str) -> Option<&mut System> {
        self.systems.iter_mut().find(|s| s.id == id)
    }

    /// `#ComputerSystem.Reset` of system `id` at `now`: logged and applied (a stuck system
    /// logs it and stays as it is).
    pub fn reset(&mut self, id: &str, reset: ResetType, now: Instant) -> Result<Outcome, Refusal> {
        let delay = self.delay;
        let system = self.systems.iter_mut().find(|s| s.id == id).ok_or_else(|| Refusal::UnknownSystem(id.to_owned()))?;
        let outcome = system.reset(reset, now, delay);
        self.resets.push((id.to_owned(), reset));
        Ok(outcome)
    }

    /// Counts one Redfish request against the busy spell: its `Retry-After` seconds while busy.
    pub fn take_busy(&mut self) -> Option<u64> {
        if self.busy == 0 {
            return None;
        }
        self.busy -= 1;
        Some(self.retry_after)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: Duration = Duration::from_millis(1500);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn shelf(power: Power) -> Shelf {
        Shelf::new(Identity::default(), &["A1".into(), "B1".into()], power, D)
    }

    fn state(s: &Shelf, id: &str, now: Instant) -> &'static str {
        s.outlet(id).unwrap().power_state(now, s.delay)
    }

    #[test]
    fn bodies_parse_to_controls_or_the_right_refusal() {
        assert_eq!(parse_control(br#"{"PowerState":"On"}"#), Ok(Control::On));
        assert_eq!(parse_control(br#"{"PowerState":"Off","Other":1}"#), Ok(Control::Off));
        assert_eq!(parse_control(br#"{"PowerState":"PowerCycle"}"#), Ok(Control::PowerCycle));
        assert_eq!(parse_control(br#"{"PowerState":"on"}"#), Err(BodyError::NotInList("\"on\"".into())));
        assert_eq!(parse_control(br#"{"PowerState":"ForceOff"}"#), Err(BodyError::NotInList("\"ForceOff\"".into())));
        assert_eq!(parse_control(br#"{"PowerState":1}"#), Err(BodyError::NotInList("1".into())));
        assert_eq!(parse_control(br#"{"ResetType":"On"}"#), Err(BodyError::Missing));
        assert_eq!(parse_control(b"{}"), Err(BodyError::Missing));
        assert!(matches!(parse_control(b"PowerState=On"), Err(BodyError::Malformed(_))));
        assert!(matches!(parse_control(b""), Err(BodyError::Malformed(_))));
        assert!(matches!(parse_control(br#"["On"]"#), Err(BodyError::Malformed(_))));
        for v in ALLOWED_CONTROLS {
            assert_eq!(Control::parse(v).map(Control::as_str), Some(v));
        }
    }

    #[test]
    fn off_and_on_pass_through_their_transitional_states_for_the_delay() {
        let t0 = Instant::now();
        let mut s = shelf(Power::On);
        assert_eq!(s.power_control("A1", Control::Off, t0), Ok(Outcome::Started));
        assert_eq!(state(&s, "A1", t0), "PoweringOff");
        assert_eq!(state(&s, "A1", t0 + ms(1499)), "PoweringOff");
        assert_eq!(state(&s, "A1", t0 + D), "Off");
        assert_eq!(state(&s, "B1", t0 + D), "On");
        let t1 = t0 + ms(2000);
        assert_eq!(s.power_control("A1", Control::On, t1), Ok(Outcome::Started));
        assert_eq!(state(&s, "A1", t1 + ms(10)), "PoweringOn");
        assert_eq!(state(&s, "A1", t1 + D), "On");
        assert_eq!(s.actions, vec![("A1".into(), Control::Off), ("A1".into(), Control::On)]);
    }

    #[test]
    fn the_same_target_again_changes_nothing_but_is_logged() {
        let t0 = Instant::now();
        let mut s = shelf(Power::On);
        assert_eq!(s.power_control("A1", Control::On, t0), Ok(Outcome::Unchanged));
        assert_eq!(state(&s, "A1", t0), "On");
        assert_eq!(s.power_control("A1", Control::Off, t0), Ok(Outcome::Started));
        // Asking again half-way does not restart the clock.
        assert_eq!(s.power_control("A1", Control::Off, t0 + ms(1000)), Ok(Outcome::Unchanged));
        assert_eq!(state(&s, "A1", t0 + D), "Off");
        assert_eq!(s.power_control("A1", Control::Off, t0 + ms(5000)), Ok(Outcome::Unchanged));
        assert_eq!(s.actions.len(), 4);
    }

    #[test]
    fn a_reversal_mid_move_starts_a_new_move_from_then() {
        let t0 = Instant::now();
        let mut s = shelf(Power::On);
        s.power_control("A1", Control::Off, t0).unwrap();
        let t1 = t0 + ms(500);
        assert_eq!(s.power_control("A1", Control::On, t1), Ok(Outcome::Started));
        assert_eq!(state(&s, "A1", t1 + ms(1499)), "PoweringOn");
        assert_eq!(state(&s, "A1", t1 + D), "On");
    }

    #[test]
    fn power_cycle_goes_off_then_on_and_turns_an_off_outlet_on() {
        let t0 = Instant::now();
        let mut s = shelf(Power::On);
        assert_eq!(s.power_control("A1", Control::PowerCycle, t0), Ok(Outcome::Started));
        assert_eq!(state(&s, "A1", t0 + ms(100)), "PoweringOff");
        assert_eq!(state(&s, "A1", t0 + D), "PoweringOn");
        assert_eq!(s.power_control("A1", Control::PowerCycle, t0 + ms(1600)), Ok(Outcome::Unchanged));
        assert_eq!(s.power_control("A1", Control::On, t0 + ms(1700)), Ok(Outcome::Unchanged));
        assert_eq!(state(&s, "A1", t0 + ms(2999)), "PoweringOn");
        assert_eq!(state(&s, "A1", t0 + ms(3000)), "On");

        let mut off = shelf(Power::Off);
        assert_eq!(off.power_control("B1", Control::PowerCycle, t0), Ok(Outcome::Started));
        assert_eq!(state(&off, "B1", t0), "PoweringOn");
        assert_eq!(state(&off, "B1", t0 + D), "On");
    }

    #[test]
    fn systems_reset_through_the_same_switch_and_every_reset_is_logged() {
        let t0 = Instant::now();
        let ids = ["node-1".to_owned(), "node-2".to_owned()];
        let mut s = shelf(Power::On).with_systems(&ids, Power::Off);
        let read = |s: &Shelf, id: &str, now: Instant| s.system(id).unwrap().power_state(now, s.delay);
        assert_eq!(s.reset("node-1", ResetType::On, t0), Ok(Outcome::Started));
        assert_eq!(read(&s, "node-1", t0 + ms(1499)), "PoweringOn");
        assert_eq!(read(&s, "node-1", t0 + D), "On");
        assert_eq!(read(&s, "node-2", t0 + D), "Off");
        assert_eq!(s.reset("node-2", ResetType::GracefulShutdown, t0), Ok(Outcome::Unchanged));
        let t1 = t0 + D;
        assert_eq!(s.reset("node-1", ResetType::ForceRestart, t1), Ok(Outcome::Started));
        assert_eq!(read(&s, "node-1", t1), "PoweringOff");
        assert_eq!(read(&s, "node-1", t1 + D), "PoweringOn");
        assert_eq!(read(&s, "node-1", t1 + D + D), "On");
        s.system_mut("node-2").unwrap().switch.stuck = true;
        assert_eq!(s.reset("node-2", ResetType::On, t1), Ok(Outcome::Ignored));
        assert_eq!(read(&s, "node-2", t1 + ms(3_600_000)), "Off");
        assert_eq!(s.reset("node-3", ResetType::On, t1), Err(Refusal::UnknownSystem("node-3".into())));
        let logged: Vec<(&str, &str)> = s.resets.iter().map(|(id, r)| (id.as_str(), r.as_str())).collect();
        assert_eq!(logged, vec![("node-1", "On"), ("node-2", "GracefulShutdown"), ("node-1", "ForceRestart"), ("node-2", "On")]);
        assert!(s.actions.is_empty(), "resets are not outlet actions");
        assert!(shelf(Power::On).systems.is_empty(), "no systems unless asked");
    }

    #[test]
    fn a_zero_delay_converges_at_once() {
        let t0 = Instant::now();
        let mut s = Shelf::new(Identity::default(), &["A1".into()], Power::On, Duration::ZERO);
        s.power_control("A1", Control::Off, t0).unwrap();
        assert_eq!(state(&s, "A1", t0), "Off");
        s.power_control("A1", Control::PowerCycle, t0).unwrap();
        assert_eq!(state(&s, "A1", t0), "On");
    }

    #[test]
    fn stuck_accepts_and_never_moves_locked_refuses_and_is_not_logged() {
        let t0 = Instant::now();
        let mut s = shelf(Power::On);
        s.outlet_mut("A1").unwrap().switch.stuck = true;
        assert_eq!(s.power_control("A1", Control::Off, t0), Ok(Outcome::Ignored));
        assert_eq!(state(&s, "A1", t0 + ms(3_600_000)), "On");
        s.outlet_mut("B1").unwrap().locked = true;
        assert_eq!(s.power_control("B1", Control::Off, t0), Err(Refusal::Locked("B1".into())));
        assert_eq!(s.power_control("C1", Control::Off, t0), Err(Refusal::UnknownOutlet("C1".into())));
        assert_eq!(s.actions, vec![("A1".into(), Control::Off)]);
    }

    #[test]
    fn busy_counts_down() {
        let mut s = shelf(Power::On);
        assert_eq!(s.take_busy(), None);
        s.busy = 2;
        s.retry_after = 3;
        assert_eq!(s.take_busy(), Some(3));
        assert_eq!(s.take_busy(), Some(3));
        assert_eq!(s.take_busy(), None);
    }
}
