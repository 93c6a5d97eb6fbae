//! The shelf's state, with no I/O and no clock of its own: its identity, its outlets and how
//! each moves between power states, the switches the control API flips (stuck, locked, busy),
//! the log of accepted `PowerControl` requests, and its firmware ([`Firmware`]: updates and
//! their tasks). Every function that depends on time takes
//! `now`, so the transitions are tested by passing instants rather than by sleeping.
//!
//! An outlet is steady (`On`, `Off`) or moving. A move started at `since` reads its
//! transitional state (`PoweringOn`, `PoweringOff`) until `since + delay`, then its target. A
//! `PowerCycle` of an outlet that does not read `Off` reads `PoweringOff` for one delay, then
//! `PoweringOn` for another, then `On`; a `PowerCycle` of an outlet that reads `Off` powers
//! it on (one delay of `PoweringOn`). A request for the move already under way, or for the
//! steady state the outlet is in, changes nothing.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::resources::FIRMWARE_VERSION;
use super::update::{DEFAULT_UPDATE_MS, Firmware};

/// A steady power state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Power {
    /// Powered.
    On,
    /// Not powered.
    Off,
}

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
}

/// Why a `PowerControl` body was refused (all 400).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyError {
    /// Not JSON, or not a JSON object.
    Malformed(String),
    /// No `PowerState`.
    Missing,
    /// `PowerState` is not one of [`ALLOWED_CONTROLS`] (the value as JSON text).
    NotInList(String),
}

/// Parses the body of `#Outlet.PowerControl`: a JSON object with `PowerState`.
pub fn parse_control(body: &[u8]) -> Result<Control, BodyError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| BodyError::Malformed(e.to_string()))?;
    let Value::Object(map) = value else {
        return Err(BodyError::Malformed("the body is not a JSON object".into()));
    };
    match map.get("PowerState") {
        None => Err(BodyError::Missing),
        Some(Value::String(s)) => Control::parse(s).ok_or_else(|| BodyError::NotInList(Value::String(s.clone()).to_string())),
        Some(other) => Err(BodyError::NotInList(other.to_string())),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Steady(Power),
    /// Moving to `target` since `since`.
    Moving {
        target: Power,
        since: Instant,
    },
    /// Off, then on, since `since`.
    Cycling {
        since: Instant,
    },
}

/// What an accepted `PowerControl` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A move began.
    Started,
    /// The outlet was already there or on its way: nothing changed.
    Unchanged,
    /// The outlet is stuck: accepted, nothing changed.
    Ignored,
}

/// One outlet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outlet {
    /// Its `Id` (`A1`).
    pub id: String,
    /// `PowerControlLocked`: `PowerControl` is refused with 409.
    pub locked: bool,
    /// Accepts `PowerControl` and never moves (a device that never converges).
    pub stuck: bool,
    phase: Phase,
}

impl Outlet {
    /// A steady outlet.
    pub fn new(id: &str, power: Power) -> Outlet {
        Outlet { id: id.to_owned(), locked: false, stuck: false, phase: Phase::Steady(power) }
    }

    /// `PowerState` at `now` for a shelf whose moves take `delay`.
    pub fn power_state(&self, now: Instant, delay: Duration) -> &'static str {
        let elapsed = |since: Instant| now.saturating_duration_since(since);
        match self.phase {
            Phase::Steady(Power::On) => "On",
            Phase::Steady(Power::Off) => "Off",
            Phase::Moving { target, since } if elapsed(since) >= delay => steady_name(target),
            Phase::Moving { target: Power::On, .. } => "PoweringOn",
            Phase::Moving { target: Power::Off, .. } => "PoweringOff",
            Phase::Cycling { since } if elapsed(since) < delay => "PoweringOff",
            Phase::Cycling { since } if elapsed(since) < delay.saturating_mul(2) => "PoweringOn",
            Phase::Cycling { .. } => "On",
        }
    }

    /// Folds a finished move into a steady state.
    pub fn settle(&mut self, now: Instant, delay: Duration) {
        match self.power_state(now, delay) {
            "On" => self.phase = Phase::Steady(Power::On),
            "Off" => self.phase = Phase::Steady(Power::Off),
            _ => {}
        }
    }

    /// Applies an accepted, unlocked `PowerControl` at `now`.
    fn control(&mut self, control: Control, now: Instant, delay: Duration) -> Outcome {
        if self.stuck {
            return Outcome::Ignored;
        }
        self.settle(now, delay);
        let next = match (control, self.phase) {
            (Control::On, Phase::Steady(Power::On) | Phase::Moving { target: Power::On, .. } | Phase::Cycling { .. })
            | (Control::Off, Phase::Steady(Power::Off) | Phase::Moving { target: Power::Off, .. })
            | (Control::PowerCycle, Phase::Cycling { .. }) => return Outcome::Unchanged,
            (Control::On, _) => Phase::Moving { target: Power::On, since: now },
            (Control::Off, _) => Phase::Moving { target: Power::Off, since: now },
            (Control::PowerCycle, Phase::Steady(Power::Off)) => Phase::Moving { target: Power::On, since: now },
            (Control::PowerCycle, _) => Phase::Cycling { since: now },
        };
        self.phase = next;
        Outcome::Started
    }
}

fn steady_name(power: Power) -> &'static str {
    match power {
        Power::On => "On",
        Power::Off => "Off",
    }
}

/// Why `PowerControl` was refused after its body parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No such outlet.
    UnknownOutlet(String),
    /// The outlet has `PowerControlLocked` (409).
    Locked(String),
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
        Shelf { identity, delay, outlets, actions: Vec::new(), busy: 0, retry_after: 1, firmware }
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
        let outcome = outlet.control(control, now, delay);
        self.actions.push((id.to_owned(), control));
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
    fn settle_folds_a_finished_move_and_keeps_an_unfinished_one() {
        let t0 = Instant::now();
        let mut o = Outlet::new("A1", Power::On);
        assert_eq!(o.control(Control::Off, t0, D), Outcome::Started);
        o.settle(t0 + ms(10), D);
        assert_eq!(o.power_state(t0 + D, D), "Off");
        o.settle(t0 + D, D);
        // Settled: the reading no longer depends on the clock.
        assert_eq!(o.power_state(t0, D), "Off");
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
        s.outlet_mut("A1").unwrap().stuck = true;
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
