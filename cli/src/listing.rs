//! Listings of the coordinator's operator routes as the CLI reads them: every page of a
//! paged route ([`list_all`], following the API's `next` cursor), the query strings they take
//! ([`with_query`], values percent-encoded by [`encode`]), and the host listings several verbs
//! need ([`all_hosts`], [`hostnames`]).
//!
//! Shared by `drover get`, `describe`, `events`, `explain`, the resolver and every other verb
//! that lists.

use std::collections::BTreeMap;

use drover_proto::api::Page;
use drover_proto::api::hosts::HostView;
use serde_json::Value;

use crate::answer::{decode, decode_all};
use crate::client::Session;
use crate::exit::{CliError, codes};

/// Most pages one listing follows: a coordinator that keeps answering `next` forever (a bug)
/// must not keep `drover` running forever.
const MAX_PAGES: usize = 100_000;
/// The page size asked for (the coordinator clamps it to its own maximum).
pub const PAGE: usize = 500;

/// `s` percent-encoded for a query value (everything but RFC 3986's unreserved characters).
pub fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') { (b as char).to_string() } else { format!("%{b:02X}") }
        })
        .collect()
}

/// `base` with `query` (name, value) appended, values encoded.
pub fn with_query(base: &str, query: &[(&str, String)]) -> String {
    if query.is_empty() {
        return base.to_owned();
    }
    let q: Vec<String> = query.iter().map(|(k, v)| format!("{k}={}", encode(v))).collect();
    format!("{base}?{}", q.join("&"))
}

/// A page's `next`: an opaque cursor (hosts, jobs, maintenance) or the last row's id (events,
/// audit).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(untagged)]
enum Cursor {
    /// An opaque cursor.
    Opaque(String),
    /// A row id.
    Id(i64),
}

/// Every item of a listing: `GET base?query`, following `next` (passed back as `after`, a
/// cursor for hosts and an id for events) until it is `null` or `limit` items are read. Each
/// page is the API's [`Page`]; its rows are kept as sent, for `-o json`.
pub fn list_all(s: &Session, base: &str, query: &[(&str, String)], limit: Option<usize>) -> Result<Vec<Value>, CliError> {
    let mut items = Vec::new();
    let mut after: Option<String> = None;
    for _ in 0..MAX_PAGES {
        // A caller's own `after` (events --since) starts the first page; the cursor replaces it.
        let mut q: Vec<(&str, String)> = query.iter().filter(|(k, _)| after.is_none() || *k != "after").cloned().collect();
        if let Some(a) = &after {
            q.push(("after", a.clone()));
        }
        let path = with_query(base, &q);
        // Rows stay as sent (for -o json); the page around them is the API's `Page`.
        let page: Page<Value, Cursor> = decode(&path, &s.get::<Value>(&path)?)?;
        let empty = page.items.is_empty();
        items.extend(page.items);
        if limit.is_some_and(|l| items.len() >= l) {
            items.truncate(limit.unwrap_or(usize::MAX));
            return Ok(items);
        }
        let next = match page.next {
            None => return Ok(items),
            Some(Cursor::Opaque(c)) => c,
            Some(Cursor::Id(n)) => n.to_string(),
        };
        if empty || after.as_deref() == Some(next.as_str()) {
            // A page that does not advance would loop forever.
            return Ok(items);
        }
        after = Some(next);
    }
    Err(CliError::new(codes::PROTOCOL, format!("{base}: more than {MAX_PAGES} pages")))
}

/// Every host (`GET /v1/hosts`, all pages).
pub fn all_hosts(s: &Session) -> Result<Vec<HostView>, CliError> {
    decode_all("/v1/hosts", &list_all(s, "/v1/hosts", &[("limit", PAGE.to_string())], None)?)
}

/// Host id → hostname, for tables that show tasks and events by host.
pub fn hostnames(s: &Session) -> Result<BTreeMap<String, String>, CliError> {
    Ok(all_hosts(s)?.into_iter().map(|h| (h.id, h.hostname)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_encoded() {
        assert_eq!(with_query("/v1/hosts", &[]), "/v1/hosts");
        assert_eq!(with_query("/v1/events", &[("kind", "a b&c".into()), ("after", "7".into())]), "/v1/events?kind=a%20b%26c&after=7");
    }
}
