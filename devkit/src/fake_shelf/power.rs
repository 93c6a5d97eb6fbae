//! The pure pieces outlets and machines share, with no I/O and no clock of its own: a steady
//! [`Power`] state, the [`Switch`] that moves to a [`Target`] after a delay (and can be made
//! to never move), and the parser of an action body whose one parameter is an enumeration.
//! Every function that depends on time takes `now`, so the transitions are tested by passing
//! instants rather than by sleeping.
//!
//! A switch is steady (`On`, `Off`) or moving. A move started at `since` reads its
//! transitional state (`PoweringOn`, `PoweringOff`) until `since + delay`, then its target. A
//! [`Target::Cycle`] of a switch that does not read `Off` reads `PoweringOff` for one delay,
//! then `PoweringOn` for another, then `On`; a cycle of a switch that reads `Off` powers it on
//! (one delay of `PoweringOn`). A request for the move already under way, or for the steady
//! state the switch is in, changes nothing. A stuck switch accepts every request and never
//! moves (a device that never converges).
//!
//! Outlets map `#Outlet.PowerControl`'s `On`/`Off`/`PowerCycle` onto the targets, machines
//! `#ComputerSystem.Reset`'s `On` / `ForceOff`, `GracefulShutdown` / `ForceRestart`.

use std::time::{Duration, Instant};

use serde_json::Value;

/// A steady power state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Power {
    /// Powered.
    On,
    /// Not powered.
    Off,
}

impl Power {
    /// The Redfish `PowerState` spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Power::On => "On",
            Power::Off => "Off",
        }
    }
}

/// Where a request sends a switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Power on.
    On,
    /// Power off.
    Off,
    /// Power off, then on (just on from `Off`).
    Cycle,
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

/// What an accepted request did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A move began.
    Started,
    /// The switch was already there or on its way: nothing changed.
    Unchanged,
    /// The switch is stuck: accepted, nothing changed.
    Ignored,
}

/// One power switch: an outlet's relay or a machine's power.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Switch {
    /// Accepts every request and never moves (a device that never converges).
    pub stuck: bool,
    phase: Phase,
}

impl Switch {
    /// A steady switch.
    pub fn new(power: Power) -> Switch {
        Switch { stuck: false, phase: Phase::Steady(power) }
    }

    /// `PowerState` at `now` when moves take `delay`.
    pub fn power_state(&self, now: Instant, delay: Duration) -> &'static str {
        let elapsed = |since: Instant| now.saturating_duration_since(since);
        match self.phase {
            Phase::Steady(power) => power.as_str(),
            Phase::Moving { target, since } if elapsed(since) >= delay => target.as_str(),
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

    /// Applies an accepted request for `target` at `now`.
    pub fn request(&mut self, target: Target, now: Instant, delay: Duration) -> Outcome {
        if self.stuck {
            return Outcome::Ignored;
        }
        self.settle(now, delay);
        let next = match (target, self.phase) {
            (Target::On, Phase::Steady(Power::On) | Phase::Moving { target: Power::On, .. } | Phase::Cycling { .. })
            | (Target::Off, Phase::Steady(Power::Off) | Phase::Moving { target: Power::Off, .. })
            | (Target::Cycle, Phase::Cycling { .. }) => return Outcome::Unchanged,
            (Target::On, _) | (Target::Cycle, Phase::Steady(Power::Off)) => Phase::Moving { target: Power::On, since: now },
            (Target::Off, _) => Phase::Moving { target: Power::Off, since: now },
            (Target::Cycle, _) => Phase::Cycling { since: now },
        };
        self.phase = next;
        Outcome::Started
    }
}

/// Why an action body was refused (all 400).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyError {
    /// Not JSON, or not a JSON object.
    Malformed(String),
    /// The parameter is absent.
    Missing,
    /// The parameter is not one of the allowed values (the value as JSON text).
    NotInList(String),
}

/// Parses an action body: a JSON object whose parameter `name` is a string that `parse`
/// takes (exact spelling, as Redfish enums are case-sensitive). Other members are ignored;
/// a value that is not a string is not in the list.
pub fn parse_param<T>(body: &[u8], name: &str, parse: impl Fn(&str) -> Option<T>) -> Result<T, BodyError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| BodyError::Malformed(e.to_string()))?;
    let Value::Object(map) = value else {
        return Err(BodyError::Malformed("the body is not a JSON object".into()));
    };
    match map.get(name) {
        None => Err(BodyError::Missing),
        Some(Value::String(s)) => parse(s).ok_or_else(|| BodyError::NotInList(Value::String(s.clone()).to_string())),
        Some(other) => Err(BodyError::NotInList(other.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: Duration = Duration::from_millis(1500);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_move_reads_its_transitional_state_for_the_delay() {
        let t0 = Instant::now();
        let mut s = Switch::new(Power::On);
        assert_eq!(s.request(Target::Off, t0, D), Outcome::Started);
        assert_eq!(s.power_state(t0 + ms(1499), D), "PoweringOff");
        assert_eq!(s.power_state(t0 + D, D), "Off");
        let t1 = t0 + ms(2000);
        assert_eq!(s.request(Target::On, t1, D), Outcome::Started);
        assert_eq!(s.power_state(t1, D), "PoweringOn");
        assert_eq!(s.power_state(t1 + D, D), "On");
    }

    #[test]
    fn the_state_it_is_in_or_moving_to_changes_nothing() {
        let t0 = Instant::now();
        let mut s = Switch::new(Power::Off);
        assert_eq!(s.request(Target::Off, t0, D), Outcome::Unchanged);
        assert_eq!(s.request(Target::On, t0, D), Outcome::Started);
        assert_eq!(s.request(Target::On, t0 + ms(1000), D), Outcome::Unchanged);
        assert_eq!(s.power_state(t0 + D, D), "On", "the clock was not restarted");
    }

    #[test]
    fn a_cycle_goes_off_then_on_and_from_off_just_on() {
        let t0 = Instant::now();
        let mut s = Switch::new(Power::On);
        assert_eq!(s.request(Target::Cycle, t0, D), Outcome::Started);
        assert_eq!(s.power_state(t0, D), "PoweringOff");
        assert_eq!(s.power_state(t0 + D, D), "PoweringOn");
        assert_eq!(s.request(Target::Cycle, t0 + D, D), Outcome::Unchanged);
        assert_eq!(s.request(Target::On, t0 + D, D), Outcome::Unchanged);
        assert_eq!(s.power_state(t0 + ms(3000), D), "On");
        let mut off = Switch::new(Power::Off);
        assert_eq!(off.request(Target::Cycle, t0, D), Outcome::Started);
        assert_eq!(off.power_state(t0, D), "PoweringOn");
        assert_eq!(off.power_state(t0 + D, D), "On");
        let mut zero = Switch::new(Power::On);
        zero.request(Target::Cycle, t0, Duration::ZERO);
        assert_eq!(zero.power_state(t0, Duration::ZERO), "On");
    }

    #[test]
    fn a_stuck_switch_accepts_and_never_moves() {
        let t0 = Instant::now();
        let mut s = Switch::new(Power::On);
        s.stuck = true;
        for target in [Target::Off, Target::Cycle, Target::On] {
            assert_eq!(s.request(target, t0, Duration::ZERO), Outcome::Ignored);
        }
        assert_eq!(s.power_state(t0 + ms(3_600_000), D), "On");
        s.stuck = false;
        assert_eq!(s.request(Target::Off, t0, Duration::ZERO), Outcome::Started);
        assert_eq!(s.power_state(t0, Duration::ZERO), "Off");
    }

    #[test]
    fn settle_folds_a_finished_move_and_keeps_an_unfinished_one() {
        let t0 = Instant::now();
        let mut s = Switch::new(Power::On);
        s.request(Target::Off, t0, D);
        s.settle(t0 + ms(10), D);
        assert_eq!(s.power_state(t0 + D, D), "Off");
        s.settle(t0 + D, D);
        // Settled: the reading no longer depends on the clock.
        assert_eq!(s.power_state(t0, D), "Off");
    }

    #[test]
    fn action_bodies_parse_to_the_parameter_or_the_right_refusal() {
        let on = |s: &str| (s == "On").then_some(1);
        assert_eq!(parse_param(br#"{"X":"On","Y":2}"#, "X", on), Ok(1));
        assert_eq!(parse_param(br#"{"X":"on"}"#, "X", on), Err(BodyError::NotInList("\"on\"".into())));
        assert_eq!(parse_param(br#"{"X":null}"#, "X", on), Err(BodyError::NotInList("null".into())));
        assert_eq!(parse_param(br#"{"Y":"On"}"#, "X", on), Err(BodyError::Missing));
        assert!(matches!(parse_param(b"X=On", "X", on), Err(BodyError::Malformed(_))));
        assert!(matches!(parse_param(br#"["On"]"#, "X", on), Err(BodyError::Malformed(_))));
    }
}
