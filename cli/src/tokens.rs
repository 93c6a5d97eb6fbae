//! `drover tokens list [--host H] [-o table|wide|json]`: the coordinator's enrollment tokens,
//! `GET /v1/tokens` (admin or viewer), newest first; `drover tokens revoke TOKEN_ID --reason
//! TEXT`: ends one, `POST /v1/tokens/{id}/revoke` (admin, audited).
//!
//! A row says which token (its record's id), which host it was issued for, when, until when
//! it is good, and whether it was used (the host enrolled with it), revoked, expired, or is
//! still pending. Revoking is for a token that leaked before its host used it: enrollment
//! refuses it from then on. A used token cannot be revoked (the host's certificate is what
//! to revoke then); revoking a revoked one changes nothing. One token at a time, by id: a
//! host that never enrolled is ended with all its tokens by `drover host remove HOST`, and
//! `drover enroll` gives it a fresh one. The coordinator never serves the token or its hash,
//! so neither can reach this output.

use std::collections::BTreeMap;

use clap::{Args, Subcommand};
use drover_proto::time::Time;
use serde_json::{Value, json};

use crate::client::{ConnectArgs, Session};
use crate::exit::CliError;
use crate::get::hostnames;
use crate::host::check_reason;
use crate::job::clean;
use crate::output::{Output, OutputArgs, dash, field, pretty, print, table};

/// Arguments of `drover tokens`.
#[derive(Args)]
pub struct TokensArgs {
    #[command(subcommand)]
    command: TokensCommand,
}

/// The `drover tokens` verbs.
#[derive(Subcommand)]
enum TokensCommand {
    /// List enrollment tokens: id, host, state, created, expires, used (never the token itself).
    List(ListArgs),
    /// Revoke an unused token by its id (as `list` shows it): enrollment refuses it from then on (admin).
    Revoke(RevokeArgs),
}

/// Arguments of `drover tokens list`.
#[derive(Args)]
struct ListArgs {
    /// Only this host's tokens (hostname or id).
    #[arg(long, value_name = "HOST")]
    host: Option<String>,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    connect: ConnectArgs,
}

/// Arguments of `drover tokens revoke`.
#[derive(Args)]
struct RevokeArgs {
    /// The token's id (the ID column of `drover tokens list`; not the token itself).
    #[arg(value_name = "TOKEN_ID")]
    id: String,
    /// Why (required; audited).
    #[arg(long, value_name = "TEXT")]
    reason: String,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    connect: ConnectArgs,
}

/// Runs `drover tokens`.
pub fn run(args: &TokensArgs) -> Result<(), CliError> {
    match &args.command {
        TokensCommand::List(a) => list(a),
        TokensCommand::Revoke(a) => revoke(a),
    }
}

fn list(args: &ListArgs) -> Result<(), CliError> {
    let s = Session::open(&args.connect)?;
    let mut q = Vec::new();
    if let Some(h) = &args.host {
        q.push(("hostId", crate::resolve::host(&s, "--host", h)?.id.to_string()));
    }
    let tokens = &crate::get::list_all(&s, "/v1/tokens", &q, None)?;
    match args.output.output {
        Output::Json => print(&pretty(&Value::Array(tokens.clone()))?),
        o => {
            if tokens.is_empty() {
                eprintln!("no enrollment tokens");
                return Ok(());
            }
            let names = hostnames(&s)?;
            print(&render(tokens, &names, crate::clock::now()?, o == Output::Wide))
        }
    }
}

fn revoke(args: &RevokeArgs) -> Result<(), CliError> {
    // Checked here so a pasted token (or anything else that is not an id) never travels in a
    // request path, where proxies and access logs keep it.
    let id = uuid::Uuid::parse_str(args.id.trim()).map_err(|_| {
        CliError::usage("TOKEN_ID is not a token id: give the ID column of `drover tokens list` (a UUID), not the token itself")
    })?;
    let reason = check_reason(&args.reason)?;
    let s = Session::open(&args.connect)?;
    let token: Value = s.post(&format!("/v1/tokens/{id}/revoke"), &json!({ "reason": reason }))?;
    if args.output.output.is_json() {
        return print(&pretty(&token)?);
    }
    print(&format!(
        "enrollment token {} (host {}) revoked at {}\n",
        clean(field(&token, "id"), 40),
        clean(dash(field(&token, "hostId")), 40),
        clean(dash(field(&token, "revokedAt")), 40)
    ))
}

/// Where a token stands at `now`: `used`, `revoked`, `expired` or `pending`.
fn state(t: &Value, now: Time) -> &'static str {
    if !field(t, "usedAt").is_empty() {
        return "used";
    }
    if !field(t, "revokedAt").is_empty() {
        return "revoked";
    }
    match Time::parse_lenient(field(t, "expiresAt")) {
        Ok(expires) if expires <= now => "expired",
        Ok(_) => "pending",
        // A coordinator answer without a readable expiry: say so rather than guess.
        Err(_) => "unknown",
    }
}

/// The tokens table; hosts by name where known. The id leads: it is what `revoke` takes.
fn render(tokens: &[Value], names: &BTreeMap<String, String>, now: Time, wide: bool) -> String {
    let mut header = vec!["ID", "HOST", "STATE", "CREATED", "EXPIRES", "USED"];
    if wide {
        header.insert(2, "HOST ID");
        header.push("REVOKED");
    }
    let rows: Vec<Vec<String>> = tokens
        .iter()
        .map(|t| {
            let host_id = field(t, "hostId");
            let host = names.get(host_id).map_or(host_id, String::as_str);
            let mut row = vec![
                clean(dash(field(t, "id")), 40),
                clean(dash(host), 64),
                state(t, now).to_owned(),
                clean(dash(field(t, "createdAt")), 40),
                clean(dash(field(t, "expiresAt")), 40),
                clean(dash(field(t, "usedAt")), 40),
            ];
            if wide {
                row.insert(2, clean(dash(host_id), 40));
                row.push(clean(dash(field(t, "revokedAt")), 40));
            }
            row
        })
        .collect();
    table(&header, &rows)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use drover_proto::time::Time;
    use serde_json::json;

    #[test]
    fn state_follows_use_then_expiry() {
        let now = Time::parse_lenient("2026-01-02T00:00:00Z").unwrap();
        let used = json!({"expiresAt": "2026-01-01T00:00:00Z", "usedAt": "2025-12-31T00:00:00Z"});
        let expired = json!({"expiresAt": "2026-01-01T00:00:00Z"});
        let pending = json!({"expiresAt": "2026-01-03T00:00:00Z"});
        let revoked = json!({"expiresAt": "2026-01-03T00:00:00Z", "revokedAt": "2026-01-01T12:00:00Z"});
        assert_eq!(super::state(&used, now), "used");
        assert_eq!(super::state(&revoked, now), "revoked");
        assert_eq!(super::state(&expired, now), "expired");
        assert_eq!(super::state(&pending, now), "pending");
        assert_eq!(super::state(&json!({}), now), "unknown");
        let names = BTreeMap::from([("h-1".to_owned(), "gpu01".to_owned())]);
        let t = json!({"id": "t-1", "hostId": "h-1", "createdAt": "2026-01-01T00:00:00Z", "expiresAt": "2026-01-03T00:00:00Z"});
        let text = super::render(std::slice::from_ref(&t), &names, now, true);
        assert!(text.contains("gpu01") && text.contains("h-1") && text.contains("pending"), "{text}");
        assert!(text.starts_with("ID ") && text.lines().next().unwrap().ends_with("REVOKED"), "{text}");
        let narrow = super::render(&[t], &names, now, false);
        assert!(narrow.lines().nth(1).unwrap().starts_with("t-1 ") && !narrow.contains("h-1"), "{narrow}");
    }
}
