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
use drover_proto::api::admin::TokenView;
use drover_proto::time::Time;
use serde_json::{Value, json};

use crate::answer::{decode, decode_all};
use crate::arg_checks::check_reason;
use crate::client::{ConnectArgs, Session};
use crate::exit::CliError;
use crate::listing::hostnames;
use crate::output::{Output, OutputArgs, clean, dash, pretty, print, table};

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
    let raw = crate::listing::list_all(&s, "/v1/tokens", &q, None)?;
    let tokens: Vec<TokenView> = decode_all("/v1/tokens", &raw)?;
    match args.output.output {
        Output::Json => print(&pretty(&raw)?),
        o => {
            if tokens.is_empty() {
                eprintln!("no enrollment tokens");
                return Ok(());
            }
            let names = hostnames(&s)?;
            print(&render(&tokens, &names, crate::clock::now()?, o == Output::Wide))
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
    let path = format!("/v1/tokens/{id}/revoke");
    let raw: Value = s.post(&path, &json!({ "reason": reason }))?;
    let token: TokenView = decode(&path, &raw)?;
    if args.output.output.is_json() {
        return print(&pretty(&raw)?);
    }
    let revoked = token.revoked_at.map_or_else(|| "-".to_owned(), |t| t.to_string());
    print(&format!("enrollment token {} (host {}) revoked at {revoked}\n", clean(&token.id, 40), clean(dash(&token.host_id), 40)))
}

/// The tokens table; hosts by name where known. The id leads: it is what `revoke` takes.
fn render(tokens: &[TokenView], names: &BTreeMap<String, String>, now: Time, wide: bool) -> String {
    let mut header = vec!["ID", "HOST", "STATE", "CREATED", "EXPIRES", "USED"];
    if wide {
        header.insert(2, "HOST ID");
        header.push("REVOKED");
    }
    let rows: Vec<Vec<String>> = tokens
        .iter()
        .map(|t| {
            let host_id = t.host_id.as_str();
            let host = names.get(host_id).map_or(host_id, String::as_str);
            let at = |v: Option<Time>| v.map_or_else(|| "-".to_owned(), |t| t.to_string());
            let mut row = vec![
                clean(dash(&t.id), 40),
                clean(dash(host), 64),
                t.state(now).to_owned(),
                t.created_at.to_string(),
                t.expires_at.to_string(),
                at(t.used_at),
            ];
            if wide {
                row.insert(2, clean(dash(host_id), 40));
                row.push(at(t.revoked_at));
            }
            row
        })
        .collect();
    table(&header, &rows)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use drover_proto::api::admin::TokenView;
    use drover_proto::time::Time;
    use serde_json::json;

    #[test]
    fn state_follows_use_then_expiry() {
        let now = Time::parse_lenient("2026-01-02T00:00:00Z").unwrap();
        let token = |v: serde_json::Value| -> TokenView { serde_json::from_value(v).expect("a token") };
        let base = json!({"id": "t-1", "hostId": "h-1", "createdAt": "2026-01-01T00:00:00Z", "expiresAt": "2026-01-03T00:00:00Z"});
        let with = |k: &str, v: &str| {
            let mut t = base.clone();
            t[k] = v.into();
            token(t)
        };
        assert_eq!(with("usedAt", "2025-12-31T00:00:00Z").state(now), "used");
        assert_eq!(with("revokedAt", "2026-01-01T12:00:00Z").state(now), "revoked");
        assert_eq!(with("expiresAt", "2026-01-01T00:00:00Z").state(now), "expired");
        assert_eq!(token(base.clone()).state(now), "pending");
        let names = BTreeMap::from([("h-1".to_owned(), "gpu01".to_owned())]);
        let t = token(base);
        let text = super::render(std::slice::from_ref(&t), &names, now, true);
        assert!(text.contains("gpu01") && text.contains("h-1") && text.contains("pending"), "{text}");
        assert!(text.starts_with("ID ") && text.lines().next().unwrap().ends_with("REVOKED"), "{text}");
        let narrow = super::render(&[t], &names, now, false);
        assert!(narrow.lines().nth(1).unwrap().starts_with("t-1 ") && !narrow.contains("h-1"), "{narrow}");
    }
}
