//! `drover operator-cert list|revoke` (admin): the operator certificates
//! `drover-coordinator operator-cert` issued, `GET /v1/operator-certs`, and revoking one,
//! `POST /v1/operator-certs/{serial}/revoke`.
//!
//! A revoked certificate is refused from its holder's next request on (the coordinator checks
//! the revoked set on every request and the CRL on every handshake): exit 77 for them.
//! Revoking a certificate of one's own name and role needs `--force`.

use clap::{Args, Subcommand};
use drover_proto::api::admin::OperatorCertView;
use serde_json::json;

use crate::answer::{decode, decode_all};
use crate::arg_checks::check_reason;
use crate::client::{ConnectArgs, Session};
use crate::exit::CliError;
use crate::output::{Output, OutputArgs, clean, dash, pretty, print, table};

/// Arguments of `drover operator-cert`.
#[derive(Args)]
pub struct OperatorCertArgs {
    #[command(subcommand)]
    command: OperatorCertCommand,
}

/// The `drover operator-cert` verbs.
#[derive(Subcommand)]
enum OperatorCertCommand {
    /// List issued operator certificates: serial, name, role, validity, revocation (admin).
    List(ListArgs),
    /// Revoke one by serial: its holder is refused from the next request on (admin).
    Revoke(RevokeArgs),
}

/// Arguments of `drover operator-cert list`.
#[derive(Args)]
struct ListArgs {
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    connect: ConnectArgs,
}

/// Arguments of `drover operator-cert revoke`.
#[derive(Args)]
struct RevokeArgs {
    /// The certificate's serial number (hex, as `list` shows it).
    #[arg(value_name = "SERIAL")]
    serial: String,
    /// Why (required; audited).
    #[arg(long, value_name = "TEXT")]
    reason: String,
    /// Revoke even a certificate issued to your own name and role.
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    connect: ConnectArgs,
}

/// Runs `drover operator-cert`.
pub fn run(args: &OperatorCertArgs) -> Result<(), CliError> {
    match &args.command {
        OperatorCertCommand::List(a) => list(a),
        OperatorCertCommand::Revoke(a) => revoke(a),
    }
}

fn list(args: &ListArgs) -> Result<(), CliError> {
    let s = Session::open(&args.connect)?;
    let raw = crate::listing::list_all(&s, "/v1/operator-certs", &[], None)?;
    let certs: Vec<OperatorCertView> = decode_all("/v1/operator-certs", &raw)?;
    match args.output.output {
        Output::Json => print(&pretty(&raw)?),
        _ if certs.is_empty() => {
            eprintln!("no operator certificates recorded");
            Ok(())
        }
        o => print(&render(&certs, o == Output::Wide)),
    }
}

/// The table: one row a certificate.
fn render(certs: &[OperatorCertView], wide: bool) -> String {
    let mut header = vec!["SERIAL", "NAME", "ROLE", "NOT AFTER", "REVOKED"];
    if wide {
        header.extend(["NOT BEFORE", "REASON"]);
    }
    let rows: Vec<Vec<String>> = certs
        .iter()
        .map(|c| {
            let mut row = vec![
                clean(&c.serial, 64),
                clean(&c.name, 64),
                clean(&c.role, 16),
                c.not_after.to_string(),
                c.revoked_at.map_or_else(|| "-".to_owned(), |t| t.to_string()),
            ];
            if wide {
                row.push(c.not_before.to_string());
                row.push(dash(&clean(c.revoked_reason.as_deref().unwrap_or(""), 120)).to_owned());
            }
            row
        })
        .collect();
    table(&header, &rows)
}

fn revoke(args: &RevokeArgs) -> Result<(), CliError> {
    let serial = args.serial.trim().to_ascii_lowercase();
    if serial.is_empty() || serial.len() > 64 || !serial.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(CliError::usage(format!("SERIAL {:?} is not a certificate serial (hex)", clean(&args.serial, 80))));
    }
    let reason = check_reason(&args.reason)?;
    let path = format!("/v1/operator-certs/{serial}/revoke");
    let value = crate::client::post_once(&args.connect, &path, &json!({ "reason": reason, "force": args.force }))?;
    let cert: OperatorCertView = decode(&path, &value)?;
    if args.output.output.is_json() {
        return print(&pretty(&value)?);
    }
    print(&format!(
        "operator certificate {} ({} {}) revoked at {}\n",
        clean(&cert.serial, 64),
        clean(&cert.role, 16),
        clean(&cert.name, 64),
        cert.revoked_at.map_or_else(|| "-".to_owned(), |t| t.to_string())
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certificates_render_with_their_revocation() {
        let certs = vec![
            json!({"serial": "0a1b", "name": "alice", "role": "admin", "notBefore": "2030-01-01T00:00:00Z",
                   "notAfter": "2031-01-01T00:00:00Z", "revokedAt": null, "revokedReason": null}),
            json!({"serial": "ff02", "name": "bob\u{1b}[31m", "role": "viewer", "notBefore": "2030-01-01T00:00:00Z",
                   "notAfter": "2031-01-01T00:00:00Z", "revokedAt": "2030-06-01T00:00:00Z", "revokedReason": "left"}),
        ];
        let certs: Vec<OperatorCertView> = decode_all("/v1/operator-certs", &certs).expect("certificates");
        let t = render(&certs, false);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("SERIAL  NAME") && lines[0].contains("REVOKED"), "{t}");
        assert!(lines[1].starts_with("0a1b") && lines[1].trim_end().ends_with('-'), "{t}");
        assert!(lines[2].contains("2030-06-01T00:00:00Z") && !lines[2].contains('\u{1b}'), "{t}");
        assert!(render(&certs, true).contains("left"));
    }
}
