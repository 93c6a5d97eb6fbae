//! `drover host VERB HOST --reason TEXT`: the operator verbs of the host lifecycle
//! (quarantine, unquarantine, retire, reactivate, remove, cordon, uncordon) against the
//! coordinator's admin routes `POST /v1/hosts/{id}/<verb>`. HOST is a hostname or an id
//! ([`crate::resolve`]); an unknown hostname is exit 65 before anything is asked of the host.
//!
//! The coordinator decides legality (only the transitions of the host state machine, no
//! reactivation after removal) and answers a refusal with a 409 and the guardrail, which this
//! prints with exit 65; a viewer certificate gets 403 (exit 77). On success stdout carries one
//! line: `HOST_ID HOSTNAME STATE schedulable|cordoned`, so scripts can read the new state.
//! `retire` and `remove` are carried out by a job (a drain, an uninstall on the host's agent):
//! their line ends with the job's id — `HOST_ID HOSTNAME draining|removing FLAG JOB_ID` — and
//! the host reaches `retired` / `deleted` when that job completes (`drover job describe
//! JOB_ID` follows it). Asking again resumes the same job.

use std::io::Write;

use crate::client::{ConnectArgs, Session};
use crate::exit::{CliError, codes};
use clap::{Args, ValueEnum};
use drover_proto::api::hosts::HostStateResponse as HostState;
use serde::Serialize;

/// A lifecycle verb.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Verb {
    /// active, offline or enrolling → quarantined.
    Quarantine,
    /// quarantined → active.
    Unquarantine,
    /// active, offline or quarantined → draining; its drain job then retires the host
    /// (asked again on a draining host: resumes that job).
    Retire,
    /// retired → active (never after removal).
    Reactivate,
    /// retired → removing; its job uninstalls the agent, revokes the host's certificates and
    /// deletes it (asked again on a removing host: resumes that job). Irreversible.
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
    /// The host: its hostname or its id.
    #[arg(value_name = "HOST")]
    host: String,
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

/// The line `drover host` prints: `HOST_ID HOSTNAME STATE schedulable|cordoned [JOB_ID]`.
fn render(host: &HostState) -> String {
    let flag = if host.schedulable { "schedulable" } else { "cordoned" };
    match &host.job_id {
        Some(job) => format!("{} {} {} {flag} {job}", host.host_id, host.hostname, host.state),
        None => format!("{} {} {} {flag}", host.host_id, host.hostname, host.state),
    }
}

/// Runs `drover host`.
pub fn run(args: &HostArgs) -> Result<(), CliError> {
    crate::resolve::HostName::parse("HOST", &args.host)?;
    let reason = crate::arg_checks::check_reason(&args.reason)?;
    let session = Session::open(&args.connect)?;
    let host_id = crate::resolve::host_id(&session, "HOST", &args.host)?;
    let path = format!("/v1/hosts/{host_id}/{}", args.verb.path_segment());
    let host: HostState = session.post(&path, &LifecycleRequest { reason })?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", render(&host)).and_then(|()| out.flush()).map_err(|e| CliError::new(codes::IO, format!("cannot write stdout: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_ends_with_the_job_when_a_job_carries_the_verb() {
        let parse = |v: serde_json::Value| serde_json::from_value::<HostState>(v).expect("host state");
        let plain = parse(serde_json::json!({"hostId": "h1", "hostname": "gpu-1", "state": "quarantined", "schedulable": false}));
        assert_eq!(render(&plain), "h1 gpu-1 quarantined cordoned");
        let retire =
            parse(serde_json::json!({"hostId": "h1", "hostname": "gpu-1", "state": "draining", "schedulable": true, "jobId": "j-7"}));
        assert_eq!(render(&retire), "h1 gpu-1 draining schedulable j-7");
    }
}
