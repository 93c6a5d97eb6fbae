//! The one place the CLI reads the clock, and parses the RFC 3339 instants given in its
//! place (`--signed-at`, `--now`).

use drover_proto::time::Time;

use crate::exit::{CliError, codes};

/// The current time, to the second. A clock before 1970 or beyond what [`Time`] holds is an
/// error rather than a silent stand-in: signing or verifying "as of 1970" would be wrong
/// either way.
pub fn now() -> Result<Time, CliError> {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| CliError::new(codes::SOFTWARE, "system clock is before 1970"))?
        .as_secs();
    let secs = i64::try_from(secs).map_err(|_| CliError::new(codes::SOFTWARE, "system clock is out of range"))?;
    Time::from_unix(secs).map_err(|e| CliError::new(codes::SOFTWARE, format!("system clock: {e}")))
}

/// The instant given to `flag` (RFC 3339; a bad value is a usage error), or [`now`].
pub fn given_or_now(flag: &str, value: Option<&str>) -> Result<Time, CliError> {
    match value {
        Some(s) => Time::parse_lenient(s).map_err(|e| CliError::usage(format!("{flag}: {e}"))),
        None => now(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_reads_after_2024() {
        assert!(now().expect("a sane clock").unix() > 1_700_000_000);
    }

    #[test]
    fn a_given_instant_wins_and_a_bad_one_is_a_usage_error() {
        let t = given_or_now("--now", Some("2025-01-01T00:00:00Z")).expect("parses");
        assert_eq!(t.unix(), 1_735_689_600);
        let e = given_or_now("--now", Some("tomorrow")).expect_err("refused");
        assert_eq!(e.code(), codes::USAGE);
        assert!(e.to_string().starts_with("--now: "), "{e}");
    }
}
