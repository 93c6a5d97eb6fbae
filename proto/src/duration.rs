//! Durations as the fleet spec may write them: integer seconds or `"15m"`, `"1h30m"`, `"2d"`.
//!
//! Artifacts and APIs only ever carry integer seconds (`…Secs`); this is the one place a
//! human spelling is turned into them.

use serde::{Deserialize, Deserializer};

/// Why a duration does not parse; each names the duration as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Nothing but blanks.
    #[error("empty duration")]
    Empty,
    /// A unit that is none of s, m, h, d, w.
    #[error("duration {duration:?}: unknown unit {unit:?} (use s, m, h, d or w)")]
    UnknownUnit {
        /// The duration.
        duration: String,
        /// The unit.
        unit: char,
    },
    /// A unit with no number before it.
    #[error("duration {duration:?}: a number must precede {unit:?}")]
    NoNumber {
        /// The duration.
        duration: String,
        /// The unit.
        unit: char,
    },
    /// More seconds than a `u64` holds.
    #[error("duration {duration:?} overflows")]
    Overflow {
        /// The duration.
        duration: String,
    },
    /// A number at the end without a unit.
    #[error("duration {duration:?}: trailing number without a unit")]
    NoUnit {
        /// The duration.
        duration: String,
    },
}

/// Parses `"90"`, `"90s"`, `"15m"`, `"2h"`, `"1d"`, or a sum such as `"1h30m"`, into seconds.
pub fn parse_duration(s: &str) -> Result<u64, DurationError> {
    let s = s.trim();
    if s.is_empty() {
        return Err(DurationError::Empty);
    }
    if let Ok(n) = s.parse::<u64>() {
        return Ok(n);
    }
    let mut total: u64 = 0;
    let mut digits = String::new();
    for c in s.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let unit = match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            'w' => 604_800,
            _ => return Err(DurationError::UnknownUnit { duration: s.to_owned(), unit: c }),
        };
        let n: u64 = digits.parse().map_err(|_| DurationError::NoNumber { duration: s.to_owned(), unit: c })?;
        total = n.checked_mul(unit).and_then(|v| total.checked_add(v)).ok_or_else(|| DurationError::Overflow { duration: s.to_owned() })?;
        digits.clear();
    }
    if !digits.is_empty() {
        return Err(DurationError::NoUnit { duration: s.to_owned() });
    }
    Ok(total)
}

/// Serde helper: a duration field that accepts integer seconds or a duration string.
pub fn de_secs<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Int(u64),
        Text(String),
    }
    match Raw::deserialize(d).map_err(|_| serde::de::Error::custom("expected seconds (integer) or a duration like \"15m\""))? {
        Raw::Int(n) => Ok(n),
        Raw::Text(s) => parse_duration(&s).map_err(serde::de::Error::custom),
    }
}

/// Like [`de_secs`], for optional fields.
pub fn de_opt_secs<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    de_secs(d).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings() {
        assert_eq!(parse_duration("90"), Ok(90));
        assert_eq!(parse_duration("15m"), Ok(900));
        assert_eq!(parse_duration("1h30m"), Ok(5400));
        assert_eq!(parse_duration("2d"), Ok(172_800));
        assert!(parse_duration("15x").is_err());
        assert!(parse_duration("m").is_err());
        assert!(parse_duration("15m3").is_err());
        assert!(parse_duration("99999999999999999999w").is_err());
    }
}
