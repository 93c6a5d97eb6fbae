//! `drover host VERB HOST_ID --reason TEXT`: the operator verbs of the host lifecycle
//! (quarantine, unquarantine, retire, reactivate, remove, cordon, uncordon) against the
//! coordinator's admin routes `POST /v1/hosts/{id}/<verb>`.
//!
//! The coordinator decides legality (only the transitions of the host state machine, no
//! reactivation after removal) and answers a refusal with a 409 and the guardrail, which this
//! prints with exit 65; a viewer certificate gets 403 (exit 77). On success stdout carries one
//! line: `HOST_ID HOSTNAME STATE schedulable|cordoned`, so scripts can read the new state.

use std::io::Write;

use clap::{Args, ValueEnum};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::client::{self, ConnectArgs};
use crate::exit::{CliError, codes};

/// Longest reason the coordinator accepts, in characters (checked here too, to fail early).
const MAX_REASON_CHARS: usize = 500;

/// A lifecycle verb.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Verb {
    /// active, offline or enrolling → quarantined.
    Quarantine,
    /// quarantined → active.
    Unquarantine,
    /// active, offline or quarantined → draining → retired.
    Retire,
    /// retired → active (never after removal).
    Reactivate,
    /// retired → removing → deleted; revokes the host's certificates. Irreversible.
    Remove,
    /// Mark the host not schedulable.
    Cordon,
    /// Mark the host schedulable again.
    Uncordon,
}

impl Verb {
    fn path_segment(self) -> &'static str {
        match self {
            Verb::Quarantine => "quarantine",
            Verb::Unquarantine => "unquarantine",
            Verb::Retire => "retire",
            Verb::Reactivate => "reactivate",
            Verb::Remove => "remove",
            Verb::Cordon => "cordon",
            Verb::Uncordon => "uncordon",
        }
    }
}

/// Arguments of `drover host`.
#[derive(Args)]
pub struct HostArgs {
    /// What to do.
    #[arg(value_enum)]
    verb: Verb,
    /// The host's id (as `drover enroll` printed it).
    host_id: String,
    /// Why (required; recorded in the host's events and the audit log).
    #[arg(long, value_name = "TEXT")]
    reason: String,
    #[command(flatten)]
    connect: ConnectArgs,
}

#[derive(Serialize)]
struct LifecycleRequest<'a> {
    reason: &'a str,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct HostState {
    host_id: String,
    hostname: String,
    state: String,
    schedulable: bool,
}

pub(crate) fn check_reason(reason: &str) -> Result<&str, CliError> {
    let reason = reason.trim();
    if reason.is_empty() {
        return Err(CliError::usage("--reason must say why (it is recorded in the events and the audit log)"));
    }
    if reason.chars().count() > MAX_REASON_CHARS || reason.chars().any(char::is_control) {
        return Err(CliError::usage(format!("--reason must be at most {MAX_REASON_CHARS} characters on one line")));
    }
    Ok(reason)
}

/// Runs `drover host`.
pub fn run(args: &HostArgs) -> Result<(), CliError> {
    let host_id = Uuid::parse_str(&args.host_id).map_err(|_| CliError::usage(format!("HOST_ID {:?} is not a UUID", args.host_id)))?;
    let reason = check_reason(&args.reason)?;
    let target = args.connect.resolve()?;
    let client = client::connect(&target)?;
    let path = format!("/v1/hosts/{host_id}/{}", args.verb.path_segment());
    let host: HostState = crate::client::block_on(client.post_json(&path, &LifecycleRequest { reason }))?;
    let flag = if host.schedulable { "schedulable" } else { "cordoned" };
    let mut out = std::io::stdout().lock();
    writeln!(out, "{} {} {} {flag}", host.host_id, host.hostname, host.state)
        .and_then(|()| out.flush())
        .map_err(|e| CliError::new(codes::IO, format!("cannot write stdout: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_checked_before_connecting() {
        assert_eq!(check_reason("  ").expect_err("blank").code(), codes::USAGE);
        assert_eq!(check_reason("a\nb").expect_err("two lines").code(), codes::USAGE);
        assert_eq!(check_reason(&"x".repeat(501)).expect_err("long").code(), codes::USAGE);
        assert_eq!(check_reason(" disk swap ").expect("ok"), "disk swap");
    }
}
