//! Operator arguments checked before anything is sent (exit 64, EX_USAGE, otherwise): ids that
//! go into a URL path ([`check_id`], [`check_job_id`], [`parse_host_id`]) and the `--reason`
//! every admin action records ([`check_reason`]). The coordinator checks them again; checking
//! here first fails early and keeps a malformed id out of a request line.

use uuid::Uuid;

use crate::exit::CliError;
use crate::output::clean;

/// Longest reason the coordinator accepts, in characters (checked here too, to fail early).
const MAX_REASON_CHARS: usize = 500;

/// Checks a job id before it goes into a URL path (64 otherwise).
pub fn check_job_id(id: &str) -> Result<&str, CliError> {
    check_id("JOB_ID", "job id", id)
}

/// Checks a coordinator id (1 to 128 of `A-Za-z0-9-_.:`) before it goes into a URL path (64
/// otherwise, `what` naming the argument and `noun` what it should be).
pub fn check_id<'a>(what: &str, noun: &str, id: &'a str) -> Result<&'a str, CliError> {
    let ok = !id.is_empty() && id.len() <= 128 && id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'));
    if ok { Ok(id) } else { Err(CliError::usage(format!("{what} {:?} is not a {noun}", clean(id, 80)))) }
}

/// Parses a host id (64 otherwise), `what` naming the argument.
pub fn parse_host_id(what: &str, id: &str) -> Result<Uuid, CliError> {
    Uuid::parse_str(id).map_err(|_| CliError::usage(format!("{what} {:?} is not a UUID", clean(id, 80))))
}

/// Checks the `--reason` of an admin action (64 otherwise): not blank, one line of plain text,
/// at most [`MAX_REASON_CHARS`] characters. Returns it trimmed.
pub fn check_reason(reason: &str) -> Result<&str, CliError> {
    let reason = reason.trim();
    if reason.is_empty() {
        return Err(CliError::usage("--reason must say why (it is recorded in the events and the audit log)"));
    }
    if reason.chars().count() > MAX_REASON_CHARS || !drover_proto::text::is_plain(reason) {
        return Err(CliError::usage(format!(
            "--reason must be at most {MAX_REASON_CHARS} characters on one line, without bidirectional controls or zero-width characters"
        )));
    }
    Ok(reason)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit::codes;

    #[test]
    fn reasons_are_checked_before_connecting() {
        assert_eq!(check_reason("  ").expect_err("blank").code(), codes::USAGE);
        assert_eq!(check_reason("a\nb").expect_err("two lines").code(), codes::USAGE);
        assert_eq!(check_reason(&"x".repeat(501)).expect_err("long").code(), codes::USAGE);
        assert_eq!(check_reason(" disk swap ").expect("ok"), "disk swap");
    }
}
