//! `drover audit [--actor A] [--target T] [--since ID] [--limit N] [-o table|wide|json]`: the
//! coordinator's audit log of operator actions, `GET /v1/audit` (admin or viewer), paged by
//! record id.
//!
//! Every matching record is fetched page by page (oldest first); `--limit N` keeps the newest
//! N of them, still oldest first, so the last line is the most recent action. The table shows
//! when, who (actor and role), what (action and target) and why (the operator's reason);
//! `wide` adds the record id and the prior and expected states; `-o json` prints the
//! coordinator's records as one JSON array.

use clap::Args;
use drover_proto::api::Page;
use drover_proto::api::events::AuditView;
use serde_json::Value;

use crate::answer::{decode, decode_all};
use crate::client::{ConnectArgs, Session};
use crate::exit::{CliError, codes};
use crate::listing::with_query;
use crate::output::{Output, OutputArgs, clean, dash, pretty, print, table};

/// The page size asked for.
const PAGE: u32 = 500;

/// Pages read at most: a coordinator answering cursors forever must not hang the CLI.
const MAX_PAGES: usize = 100_000;

/// Arguments of `drover audit`.
#[derive(Args)]
pub struct AuditArgs {
    /// Only this actor's actions (the operator certificate's name).
    #[arg(long, value_name = "ACTOR")]
    actor: Option<String>,
    /// Only actions on this target (e.g. a host id).
    #[arg(long, value_name = "TARGET")]
    target: Option<String>,
    /// Only records after this audit record id.
    #[arg(long, value_name = "ID")]
    since: Option<i64>,
    /// Show only the newest N records (oldest first).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    limit: Option<u32>,
    /// Records asked for per request (tests use it to exercise paging).
    #[arg(long, hide = true, default_value_t = PAGE, value_parser = clap::value_parser!(u32).range(1..))]
    page_size: u32,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    connect: ConnectArgs,
}

/// Runs `drover audit`.
pub fn run(args: &AuditArgs) -> Result<(), CliError> {
    let s = Session::open(&args.connect)?;
    let mut q = vec![("limit", args.page_size.to_string())];
    if let Some(a) = &args.actor {
        q.push(("actor", a.clone()));
    }
    if let Some(t) = &args.target {
        q.push(("target", t.clone()));
    }
    let mut records = fetch(&s, &q, args.since)?;
    if let Some(n) = args.limit {
        let keep = usize::try_from(n).unwrap_or(usize::MAX);
        let drop = records.len().saturating_sub(keep);
        records.drain(..drop);
    }
    match args.output.output {
        Output::Json => print(&pretty(&Value::Array(records))?),
        o => {
            if records.is_empty() {
                eprintln!("no audit records");
                return Ok(());
            }
            print(&render(&decode_all("/v1/audit", &records)?, o == Output::Wide))
        }
    }
}

/// Every matching record after `since`, following the coordinator's `next` id: the cursor is
/// passed as the one `after` parameter, so `--since` and paging never send it twice.
fn fetch(s: &Session, query: &[(&str, String)], since: Option<i64>) -> Result<Vec<Value>, CliError> {
    let mut records = Vec::new();
    let mut after = since;
    for _ in 0..MAX_PAGES {
        let mut q = query.to_vec();
        if let Some(a) = after {
            q.push(("after", a.to_string()));
        }
        let path = with_query("/v1/audit", &q);
        // Rows stay as sent (for -o json); the page around them is the API's `Page`.
        let page: Page<Value, i64> = decode(&path, &s.get::<Value>(&path)?)?;
        let empty = page.items.is_empty();
        records.extend(page.items);
        let Some(next) = page.next else { return Ok(records) };
        // A page that does not advance would loop forever.
        if empty || after.is_some_and(|a| next <= a) {
            return Err(CliError::new(codes::PROTOCOL, format!("{path}: unexpected answer: `next` does not advance")));
        }
        after = Some(next);
    }
    Err(CliError::new(codes::PROTOCOL, format!("/v1/audit: more than {MAX_PAGES} pages")))
}

/// The audit table.
fn render(records: &[AuditView], wide: bool) -> String {
    let mut header = vec!["AT", "ACTOR", "ROLE", "ACTION", "TARGET", "REASON"];
    if wide {
        header.insert(0, "ID");
        header.extend(["PRIOR", "EXPECTED"]);
    }
    let rows: Vec<Vec<String>> = records
        .iter()
        .map(|r| {
            let mut row = vec![
                r.at.to_string(),
                clean(dash(&r.actor), 64),
                clean(dash(&r.role), 16),
                clean(dash(&r.action), 48),
                clean(dash(&r.target), 64),
                clean(dash(&r.reason), if wide { 400 } else { 80 }),
            ];
            if wide {
                row.insert(0, r.id.to_string());
                row.push(clean(dash(r.prior_state.as_deref().unwrap_or("")), 32));
                row.push(clean(dash(r.expected_state.as_deref().unwrap_or("")), 32));
            }
            row
        })
        .collect();
    table(&header, &rows)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn table_cleans_control_characters_and_keeps_every_column() {
        let r = json!({"id": 7, "at": "2026-01-01T00:00:00Z", "actor": "alice", "role": "admin",
            "action": "host.quarantine", "target": "h1", "reason": "bad\x1b[31mdisk",
            "priorState": "active", "expectedState": "quarantined"});
        let r: drover_proto::api::events::AuditView = serde_json::from_value(r).expect("an audit record");
        let narrow = super::render(std::slice::from_ref(&r), false);
        assert!(narrow.contains("host.quarantine") && narrow.contains("alice") && narrow.contains("bad [31mdisk"), "{narrow}");
        assert!(!narrow.contains('\x1b') && !narrow.contains("quarantined"), "{narrow}");
        let wide = super::render(&[r], true);
        assert!(wide.starts_with("ID") && wide.contains("quarantined") && wide.contains('7'), "{wide}");
    }
}
