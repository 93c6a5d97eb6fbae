//! MAAS's server configuration (`/MAAS/api/2.0/maas/`), as far as Drover uses it:
//! `op=set_config` / `op=get_config` of `hardware_sync_interval`, which MAAS copies into a
//! machine's `sync_interval` when deploying it with hardware sync.
//!
//! As MAAS: `set_config` is a POST answering 200 `OK` text, a missing `name` or `value` is a
//! 400 naming it, an unknown name is a 400 JSON error keyed by `name`, a malformed interval
//! a 400 JSON error keyed by the setting; `get_config` is a GET answering the value as JSON.
//! The interval is systemd-style (`15m`, `1h30m`, `900s`), stored as given.

use serde_json::Value;

use super::forms::Params;
use super::reply::Reply;
use super::world::World;

/// The setting's name.
pub const HW_SYNC_INTERVAL: &str = "hardware_sync_interval";

/// MAAS's default (`15m`).
const DEFAULT_INTERVAL: &str = "15m";

/// Seconds of a systemd-style interval: one or more `<digits><unit>` with units `h`, `m`,
/// `s` (and their long forms); `None` when malformed or zero.
pub fn interval_secs(s: &str) -> Option<i64> {
    let mut total: i64 = 0;
    let mut rest = s.trim();
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        if digits == 0 {
            return None;
        }
        let n: i64 = rest[..digits].parse().ok()?;
        rest = rest[digits..].trim_start();
        let unit = rest.find(|c: char| c.is_ascii_digit() || c.is_whitespace()).unwrap_or(rest.len());
        let factor = match &rest[..unit] {
            "h" | "hr" | "hour" | "hours" => 3600,
            "m" | "min" | "minute" | "minutes" => 60,
            "s" | "sec" | "second" | "seconds" => 1,
            _ => return None,
        };
        total = total.checked_add(n.checked_mul(factor)?)?;
        rest = rest[unit..].trim_start();
    }
    (total > 0).then_some(total)
}

impl World {
    /// The interval deploy gives a machine's `sync_interval`, in seconds.
    pub fn hw_sync_interval_secs(&self) -> i64 {
        self.data.config.get(HW_SYNC_INTERVAL).and_then(|v| interval_secs(v)).unwrap_or(super::machine::SYNC_INTERVAL_SECS)
    }
}

/// `POST /maas/?op=set_config`.
pub fn set_config(world: &mut World, p: &Params) -> Reply {
    let Some(name) = p.non_empty("name") else { return Reply::text(400, "No provided name!") };
    let Some(value) = p.get("value") else { return Reply::text(400, "No provided value!") };
    if name != HW_SYNC_INTERVAL {
        return Reply::field_error("name", format!("{name} is not a valid config setting (valid settings are: {HW_SYNC_INTERVAL})."));
    }
    if interval_secs(value).is_none() {
        return Reply::field_error(HW_SYNC_INTERVAL, format!("Invalid interval {value:?}: use a systemd time span such as 15m or 1h30m."));
    }
    world.data.config.insert(name.to_owned(), value.to_owned());
    world.touch();
    Reply::text(200, "OK")
}

/// `GET /maas/?op=get_config`.
pub fn get_config(world: &World, p: &Params) -> Reply {
    let Some(name) = p.non_empty("name") else { return Reply::text(400, "No provided name!") };
    if name != HW_SYNC_INTERVAL {
        return Reply::field_error("name", format!("{name} is not a valid config setting (valid settings are: {HW_SYNC_INTERVAL})."));
    }
    let value = world.data.config.get(name).map_or(DEFAULT_INTERVAL, String::as_str);
    Reply::ok(&Value::String(value.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_parse_like_systemd_spans() {
        assert_eq!(interval_secs("15m"), Some(900));
        assert_eq!(interval_secs("1h30m"), Some(5400));
        assert_eq!(interval_secs("90s"), Some(90));
        assert_eq!(interval_secs("1h 5m"), Some(3900));
        for bad in ["", "m", "15", "15x", "0m", "-5m"] {
            assert_eq!(interval_secs(bad), None, "{bad:?}");
        }
    }
}
