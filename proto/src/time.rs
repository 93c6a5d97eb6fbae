//! Points in time on the wire: RFC 3339, whole seconds, UTC, written `2026-11-21T10:00:00Z`.
//!
//! One spelling per instant keeps artifacts byte-stable; time itself is always a parameter
//! (`now`), never read here, so verification is a pure function.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use time::{OffsetDateTime, UtcOffset, format_description::well_known::Rfc3339};

/// Why a timestamp string was refused.
#[derive(Debug, thiserror::Error)]
pub enum TimeError {
    /// Not RFC 3339 at all.
    #[error("{value:?} is not an RFC 3339 timestamp (expected e.g. 2026-11-21T10:00:00Z)")]
    NotRfc3339 {
        /// The text given.
        value: String,
    },
    /// RFC 3339 but not in the one form artifacts use.
    #[error("{value:?} must be whole seconds in UTC with a 'Z' suffix, e.g. 2026-11-21T10:00:00Z")]
    NotCanonicalForm {
        /// The text given.
        value: String,
    },
    /// Outside the years 0000–9999.
    #[error("unix time {secs} is outside the representable range")]
    OutOfRange {
        /// The seconds given.
        secs: i64,
    },
}

/// 9999-12-31T23:59:59Z, the last instant the artifact form can write.
const MAX_UNIX: i64 = 253_402_300_799;
/// 0000-01-01T00:00:00Z, the first.
const MIN_UNIX: i64 = -62_167_219_200;

/// An instant, as seconds since the Unix epoch, always within years 0000–9999.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time(i64);

impl Time {
    /// 1970-01-01T00:00:00Z.
    pub const EPOCH: Time = Time(0);

    /// From seconds since the Unix epoch (must lie within years 0000–9999).
    pub fn from_unix(secs: i64) -> Result<Self, TimeError> {
        if (MIN_UNIX..=MAX_UNIX).contains(&secs) { Ok(Time(secs)) } else { Err(TimeError::OutOfRange { secs }) }
    }

    /// Seconds since the Unix epoch.
    pub fn unix(self) -> i64 {
        self.0
    }

    /// This instant plus `secs` seconds (saturating).
    pub fn plus_secs(self, secs: u64) -> Time {
        // Clamped to the last representable second, so every `Time` stays printable even when
        // an untrusted duration is added to it.
        Time(self.0.saturating_add(i64::try_from(secs).unwrap_or(i64::MAX)).min(MAX_UNIX))
    }

    /// Seconds from `earlier` to `self`; negative when `earlier` is later.
    pub fn secs_since(self, earlier: Time) -> i64 {
        self.0.saturating_sub(earlier.0)
    }

    /// Parses the strict artifact form `YYYY-MM-DDTHH:MM:SSZ`.
    pub fn parse_strict(value: &str) -> Result<Self, TimeError> {
        let t = Self::parse_lenient(value)?;
        if t.to_string() != value {
            return Err(TimeError::NotCanonicalForm { value: value.to_owned() });
        }
        Ok(t)
    }

    /// Parses any RFC 3339 timestamp (any offset; fractions of a second are dropped). For
    /// command-line flags, never for artifacts.
    pub fn parse_lenient(value: &str) -> Result<Self, TimeError> {
        let dt = OffsetDateTime::parse(value, &Rfc3339).map_err(|_| TimeError::NotRfc3339 { value: value.to_owned() })?;
        Self::from_unix(dt.unix_timestamp())
    }
}

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Every constructor keeps the value within years 0000–9999, where the conversion
        // holds; the fallback to the epoch is unreachable and keeps formatting infallible.
        let dt = OffsetDateTime::from_unix_timestamp(self.0).unwrap_or(OffsetDateTime::UNIX_EPOCH).to_offset(UtcOffset::UTC);
        write!(f, "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z", dt.year(), u8::from(dt.month()), dt.day(), dt.hour(), dt.minute(), dt.second())
    }
}

impl fmt::Debug for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl Serialize for Time {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// An RFC 3339 UTC instant with whole seconds (`2030-01-01T00:00:00Z`), as [`Serialize`] writes it.
#[cfg(feature = "schema")]
impl schemars::JsonSchema for Time {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Time".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "string", "format": "date-time" })
    }
}

impl<'de> Deserialize<'de> for Time {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Time::parse_strict(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adding_huge_durations_stays_printable() {
        let t = Time::parse_strict("2026-11-21T10:00:00Z").expect("valid");
        assert_eq!(t.plus_secs(u64::MAX).to_string(), "9999-12-31T23:59:59Z");
        assert_eq!(Time::from_unix(MAX_UNIX).expect("edge").to_string(), "9999-12-31T23:59:59Z");
        assert_eq!(Time::from_unix(MIN_UNIX).expect("edge").to_string(), "0000-01-01T00:00:00Z");
        assert!(Time::from_unix(MAX_UNIX + 1).is_err());
        assert!(Time::from_unix(MIN_UNIX - 1).is_err());
    }

    #[test]
    fn strict_form_round_trips() {
        let t = Time::parse_strict("2026-11-21T10:00:00Z").expect("valid");
        assert_eq!(t.unix(), 1_795_255_200);
        assert_eq!(t.to_string(), "2026-11-21T10:00:00Z");
    }

    #[test]
    fn other_spellings_are_refused_in_artifacts() {
        for bad in ["2026-11-21T10:00:00.5Z", "2026-11-21T11:00:00+01:00", "2026-11-21 10:00:00Z", "yesterday"] {
            assert!(Time::parse_strict(bad).is_err(), "{bad}");
        }
        assert_eq!(
            Time::parse_lenient("2026-11-21T11:00:00+01:00").expect("valid"),
            Time::parse_strict("2026-11-21T10:00:00Z").expect("valid")
        );
    }
}
