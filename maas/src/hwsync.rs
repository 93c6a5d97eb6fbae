//! Hardware sync as the REST API shows it, and its health computed client-side.
//!
//! MAAS's REST 2.0 machine carries `enable_hw_sync`, `sync_interval` (seconds), `last_sync` and
//! `next_sync`; the `is_sync_healthy` flag exists only in the web UI's websocket API (facts §0,
//! §9), so [`HwSync::is_healthy`] recomputes MAAS's rule: healthy iff sync is enabled, both
//! `last_sync` and `sync_interval` are set, and now ≤ `last_sync + 1.5 × sync_interval`.
//! Datetimes come from Django's JSON encoder: ISO 8601 with milliseconds and `Z`.

use time::format_description::well_known::Rfc3339;
use time::macros::format_description;
use time::{OffsetDateTime, PrimitiveDateTime};

/// A machine's hardware-sync settings and last report.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HwSync {
    /// `enable_hw_sync`: set by `deploy`, cleared by release.
    pub enabled: bool,
    /// `sync_interval` in seconds, when set.
    pub sync_interval: Option<u64>,
    /// `last_sync`, when set (an unparseable value reads as unset, so as unhealthy).
    pub last_sync: Option<OffsetDateTime>,
    /// `next_sync` (`last_sync + sync_interval`), when set.
    pub next_sync: Option<OffsetDateTime>,
}

impl HwSync {
    /// Builds the view from the raw REST fields.
    pub fn from_fields(enabled: bool, sync_interval: Option<u64>, last_sync: Option<&str>, next_sync: Option<&str>) -> HwSync {
        HwSync {
            enabled,
            sync_interval,
            last_sync: last_sync.and_then(parse_maas_datetime),
            next_sync: next_sync.and_then(parse_maas_datetime),
        }
    }

    /// When the machine stops being healthy without a new report: `last_sync + 1.5 ×
    /// sync_interval`, or `None` when sync is off or either field is unset.
    pub fn deadline(&self) -> Option<OffsetDateTime> {
        if !self.enabled {
            return None;
        }
        // MAAS tests these fields for truth (Python), so an interval of 0 counts as unset.
        let interval = self.sync_interval.filter(|&s| s > 0)?;
        let last = self.last_sync?;
        // 1.5 × interval in whole milliseconds: exact, no float rounding at the boundary.
        let grace_ms = i64::try_from(interval).ok()?.checked_mul(1500)?;
        last.checked_add(time::Duration::milliseconds(grace_ms))
    }

    /// MAAS's `is_sync_healthy` at `now`.
    pub fn is_healthy(&self, now: OffsetDateTime) -> bool {
        self.deadline().is_some_and(|deadline| now <= deadline)
    }
}

/// Parses a Django JSON datetime (`2026-01-02T03:04:05.678Z`, any RFC 3339 offset, or a naive
/// value, taken as UTC since MAAS runs its database in UTC).
pub fn parse_maas_datetime(s: &str) -> Option<OffsetDateTime> {
    let s = s.trim();
    if let Ok(t) = OffsetDateTime::parse(s, &Rfc3339) {
        return Some(t);
    }
    let naive = format_description!("[year]-[month]-[day]T[hour]:[minute]:[second][optional [.[subsecond]]]");
    PrimitiveDateTime::parse(s, naive).ok().map(PrimitiveDateTime::assume_utc)
}

/// Formats a datetime the way Django's JSON encoder does: UTC, milliseconds, `Z`.
pub fn format_maas_datetime(t: OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.millisecond()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    fn sync(last: &str, interval: Option<u64>) -> HwSync {
        HwSync::from_fields(true, interval, Some(last), None)
    }

    #[test]
    fn django_datetimes_parse() {
        assert_eq!(parse_maas_datetime("2026-01-02T03:04:05.678Z"), Some(datetime!(2026-01-02 03:04:05.678 UTC)));
        assert_eq!(parse_maas_datetime("2026-01-02T03:04:05Z"), Some(datetime!(2026-01-02 03:04:05 UTC)));
        assert_eq!(parse_maas_datetime("2026-01-02T03:04:05.678"), Some(datetime!(2026-01-02 03:04:05.678 UTC)));
        assert_eq!(parse_maas_datetime("2026-01-02T05:04:05+02:00"), Some(datetime!(2026-01-02 03:04:05 UTC)));
        assert_eq!(parse_maas_datetime("Fri, 07 Dec. 2018 20:11:08"), None);
        assert_eq!(parse_maas_datetime(""), None);
    }

    #[test]
    fn format_round_trips() {
        let t = datetime!(2026-01-02 03:04:05.678 UTC);
        assert_eq!(format_maas_datetime(t), "2026-01-02T03:04:05.678Z");
        assert_eq!(parse_maas_datetime(&format_maas_datetime(t)), Some(t));
        assert_eq!(format_maas_datetime(datetime!(2026-01-02 05:04:05 +02:00)), "2026-01-02T03:04:05.000Z");
    }

    #[test]
    fn healthy_until_one_and_a_half_intervals() {
        let h = sync("2026-01-02T03:00:00.000Z", Some(900));
        // 1.5 × 900 s = 22 min 30 s.
        assert_eq!(h.deadline(), Some(datetime!(2026-01-02 03:22:30 UTC)));
        assert!(h.is_healthy(datetime!(2026-01-02 03:00:00 UTC)));
        assert!(h.is_healthy(datetime!(2026-01-02 03:22:30 UTC)), "the boundary itself is healthy");
        assert!(!h.is_healthy(datetime!(2026-01-02 03:22:30.001 UTC)));
        // Odd intervals: 1.5 × 901 s = 1351.5 s, kept exact.
        let odd = sync("2026-01-02T03:00:00.000Z", Some(901));
        assert!(odd.is_healthy(datetime!(2026-01-02 03:22:31.500 UTC)));
        assert!(!odd.is_healthy(datetime!(2026-01-02 03:22:31.501 UTC)));
    }

    #[test]
    fn unhealthy_when_anything_is_missing() {
        let now = datetime!(2026-01-02 03:00:01 UTC);
        let mut h = sync("2026-01-02T03:00:00.000Z", Some(900));
        assert!(h.is_healthy(now));
        h.enabled = false;
        assert!(!h.is_healthy(now));
        assert!(!sync("2026-01-02T03:00:00.000Z", None).is_healthy(now));
        assert!(!sync("2026-01-02T03:00:00.000Z", Some(0)).is_healthy(now));
        assert!(!HwSync::from_fields(true, Some(900), None, None).is_healthy(now));
        assert!(!sync("garbage", Some(900)).is_healthy(now));
        assert!(!HwSync::default().is_healthy(now));
        // An absurd interval does not overflow into a panic.
        assert!(sync("2026-01-02T03:00:00.000Z", Some(u64::MAX)).deadline().is_none());
    }
}
