//! Time for the agent: the [`Clock`] every part reads, and the time decisions, pure (time and
//! randomness are parameters): noticing the clock
//! stepping back, the time that verification runs at, when to renew the certificate, and the
//! jittered exponential backoff between failed check-ins.

use std::time::Duration;

use drover_proto::report::ReportEvent;
use drover_proto::time::Time;

/// Where time comes from: the wall clock in production, a controlled one in tests.
pub trait Clock: Send + Sync {
    /// Now.
    fn now(&self) -> Time;
    /// Waits `d` (between an activation's confirmation attempts); a test clock may instead
    /// move itself forward.
    fn sleep(&self, d: Duration) {
        std::thread::sleep(d);
    }
}

/// The wall clock. A clock before 1970 reads as the epoch, which fails every freshness check
/// loudly rather than passing one.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Time {
        let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        Time::EPOCH.plus_secs(secs)
    }
}

/// How far the clock may go back (NTP slews, a leap second) before it counts as a step.
pub const CLOCK_STEP_TOLERANCE_SECS: u64 = 5;

/// What one look at the clock concluded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClockReading {
    /// The time to verify at: never earlier than a time already seen, so winding the clock
    /// back cannot make a stale timestamp or an expired intent acceptable again.
    pub effective: Time,
    /// The new latest time seen (persist it).
    pub latest: Time,
    /// Set when the clock went back past the tolerance: report it.
    pub stepped_back: Option<ReportEvent>,
}

/// Reads `now` against the latest time seen before.
pub fn read_clock(latest: Option<Time>, now: Time) -> ClockReading {
    match latest {
        Some(last) if last.secs_since(now) > i64::try_from(CLOCK_STEP_TOLERANCE_SECS).unwrap_or(i64::MAX) => {
            ClockReading { effective: last, latest: last, stepped_back: Some(ReportEvent::ClockSteppedBack { last_seen: last, now }) }
        }
        Some(last) if last > now => ClockReading { effective: last, latest: last, stepped_back: None },
        _ => ClockReading { effective: now, latest: now, stepped_back: None },
    }
}

/// When to renew a certificate valid `not_before..not_after`: at two thirds of its life, moved
/// by up to ±5 % of the life by `jitter` (in `[0, 1)`) so a fleet enrolled together does not
/// renew together.
pub fn renew_at(not_before: Time, not_after: Time, jitter: f64) -> Time {
    let life = not_after.secs_since(not_before).max(0) as f64;
    let fraction = 2.0 / 3.0 - 0.05 + 0.1 * jitter.clamp(0.0, 1.0);
    not_before.plus_secs((life * fraction) as u64)
}

/// Backoff after `failures` consecutive failed check-ins: `base · 2^(failures-1)` capped at
/// `max`, then "full jitter" scaled into `[½, 1]` of that by `jitter` in `[0, 1)` — enough
/// spread that a coordinator restart is not met by the whole fleet in one second, never so
/// little that an agent hammers it.
pub fn backoff(failures: u32, base: Duration, max: Duration, jitter: f64) -> Duration {
    if failures == 0 {
        return Duration::ZERO;
    }
    let exp = base.saturating_mul(1u32.checked_shl(failures.saturating_sub(1).min(20)).unwrap_or(u32::MAX));
    let capped = exp.min(max);
    capped.mul_f64(0.5 + 0.5 * jitter.clamp(0.0, 1.0))
}

/// Why a certificate's validity window could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CertValidityError {
    /// The PEM holds no readable certificate.
    #[error(transparent)]
    Pem(#[from] drover_client::ClientError),
    /// The PEM holds no certificate at all.
    #[error("no certificate")]
    Empty,
    /// The certificate is not X.509.
    #[error("not valid X.509: {source}")]
    X509 {
        /// The parser's error.
        #[source]
        source: x509_parser::nom::Err<x509_parser::error::X509Error>,
    },
    /// A bound is outside the times the wire can carry.
    #[error(transparent)]
    Time(#[from] drover_proto::time::TimeError),
}

/// Reads a certificate's validity window from its PEM.
pub fn cert_validity(pem: &[u8]) -> Result<(Time, Time), CertValidityError> {
    let chain = drover_client::tls::parse_certificates("certificate", pem)?;
    let leaf = chain.first().ok_or(CertValidityError::Empty)?;
    let (_, cert) = x509_parser::parse_x509_certificate(leaf).map_err(|source| CertValidityError::X509 { source })?;
    let v = cert.validity();
    Ok((Time::from_unix(v.not_before.timestamp())?, Time::from_unix(v.not_after.timestamp())?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: i64) -> Time {
        Time::from_unix(1_800_000_000 + secs).expect("time")
    }

    #[test]
    fn a_clock_moving_forward_is_taken_as_it_is() {
        let r = read_clock(Some(t(10)), t(20));
        assert_eq!((r.effective, r.latest, r.stepped_back), (t(20), t(20), None));
        assert_eq!(read_clock(None, t(3)).effective, t(3));
    }

    #[test]
    fn a_small_slew_back_is_tolerated_but_never_lowers_the_effective_time() {
        let r = read_clock(Some(t(100)), t(97));
        assert_eq!((r.effective, r.latest, r.stepped_back), (t(100), t(100), None));
    }

    #[test]
    fn the_clock_stepping_back_is_reported_and_verification_keeps_the_latest_time() {
        let r = read_clock(Some(t(10_000)), t(0));
        assert_eq!(r.effective, t(10_000));
        assert_eq!(r.latest, t(10_000));
        assert_eq!(r.stepped_back, Some(ReportEvent::ClockSteppedBack { last_seen: t(10_000), now: t(0) }));
    }

    #[test]
    fn renewal_falls_around_two_thirds_of_the_life() {
        let (nb, na) = (t(0), t(30 * 86_400));
        let life = 30 * 86_400i64;
        let lo = renew_at(nb, na, 0.0).secs_since(nb);
        let hi = renew_at(nb, na, 0.999).secs_since(nb);
        assert!(lo >= life * 61 / 100 && lo <= life * 62 / 100, "{lo}");
        assert!(hi >= life * 71 / 100 && hi <= life * 72 / 100, "{hi}");
        assert!(renew_at(nb, na, 0.5).secs_since(nb).abs_diff(life * 2 / 3) < 2);
    }

    #[test]
    fn backoff_doubles_to_its_cap_with_jitter_in_the_upper_half() {
        let (base, max) = (Duration::from_secs(1), Duration::from_secs(300));
        assert_eq!(backoff(0, base, max, 0.3), Duration::ZERO);
        assert_eq!(backoff(1, base, max, 1.0), Duration::from_secs(1));
        assert_eq!(backoff(4, base, max, 1.0), Duration::from_secs(8));
        assert_eq!(backoff(4, base, max, 0.0), Duration::from_secs(4));
        assert_eq!(backoff(40, base, max, 1.0), max, "capped, and no overflow");
        assert_eq!(backoff(u32::MAX, base, max, 0.0), max / 2);
    }
}
