//! `drover version [--client] [-o table|json]`: this client's release and, when a coordinator
//! is configured (flags, `DROVER_*`, the config file), the coordinator's (`GET /v1/version`),
//! with a warning on stderr when they are a minor release or more apart: the operator API
//! may have moved between minor releases, and a mismatched client is the first thing to rule
//! out when a verb misbehaves.
//!
//! With no coordinator configured it prints the client alone and says why on stderr (exit
//! 0); a coordinator that is configured but cannot be asked is an error with its usual code.

use clap::Args;
use drover_proto::api::admin::VersionView;
use drover_proto::version::{VERSION, minor_releases_apart};
use serde_json::{Value, json};

use crate::answer::decode;
use crate::client::{ConnectArgs, Session};
use crate::exit::{CliError, codes};
use crate::output::{Output, OutputArgs, pretty, print};

/// Arguments of `drover version`.
#[derive(Args)]
pub struct VersionArgs {
    /// Print this client's version only; do not ask the coordinator.
    #[arg(long)]
    client: bool,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    connect: ConnectArgs,
}

/// The warning for a client `client` talking to a coordinator `server`, if they are a minor
/// release or more apart (a patch apart is compatible and says nothing).
pub fn skew_warning(client: &str, server: &str) -> Option<String> {
    let apart = minor_releases_apart(client, server)?;
    let how_far = match apart {
        0 => return None,
        1 => "a minor release".to_owned(),
        u64::MAX => "a major release".to_owned(),
        n => format!("{n} minor releases"),
    };
    Some(format!("client {client} and coordinator {server} are {how_far} apart: use the drover of the coordinator's release"))
}

/// Runs `drover version`.
pub fn run(args: &VersionArgs) -> Result<(), CliError> {
    let server = if args.client {
        None
    } else {
        match args.connect.resolve() {
            Ok(target) => {
                let session = Session::open(&args.connect)?;
                let raw: Value = session.get("/v1/version")?;
                let view: VersionView = decode("/v1/version", &raw)?;
                Some((target.url, raw, view))
            }
            // Nothing configured (or not usably): the client's version is still an answer.
            Err(e) if e.code() == codes::USAGE => {
                eprintln!("drover: not asking a coordinator: {e}");
                None
            }
            Err(e) => return Err(e),
        }
    };
    let server_version = server.as_ref().map(|(_, _, v)| v.version.clone());
    if let Some(w) = server_version.as_deref().and_then(|s| skew_warning(VERSION, s)) {
        eprintln!("drover: warning: {w}");
    }
    if args.output.output.is_json() {
        let server = server.map(|(url, raw, _)| json!({ "url": url, "answer": raw }));
        return print(&pretty(&json!({ "client": { "version": VERSION }, "server": server.unwrap_or(Value::Null) }))?);
    }
    let mut text = format!("client  {VERSION}\n");
    if let Some((url, _, v)) = &server {
        text.push_str(&format!("server  {} ({url})\n", crate::output::clean(&v.version, 64)));
    }
    if args.output.output == Output::Wide
        && let Some((_, _, v)) = &server
    {
        text.push_str(&format!("api     {}\n", crate::output::clean(&v.api_version, 64)));
    }
    print(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minor_release_apart_or_more_warns_and_a_patch_does_not() {
        assert_eq!(skew_warning("0.4.0", "0.4.9"), None);
        let w = skew_warning("0.4.0", "0.5.0").expect("a minor apart");
        assert!(w.contains("client 0.4.0") && w.contains("coordinator 0.5.0") && w.contains("a minor release apart"), "{w}");
        assert!(skew_warning("0.7.0", "0.4.0").expect("three").contains("3 minor releases apart"));
        assert!(skew_warning("2.0.0", "1.9.0").expect("major").contains("a major release apart"));
        assert_eq!(skew_warning("0.4.0", "a custom build"), None, "an unknown version cannot be compared");
    }
}
