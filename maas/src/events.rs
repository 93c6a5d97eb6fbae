//! MAAS's event log: `GET /events/?op=query` (a GET: `POST` is 405), paged by event ids.
//!
//! Pages are always newest first. With neither `before` nor `after` MAAS gives the newest
//! `limit` events; `before=N` the newest below N; `after=N` the oldest `limit` above N. The
//! default level (INFO) hides request events such as "User releasing node", which are DEBUG.
//! `created` is not ISO but `%a, %d %b. %Y %H:%M:%S` (facts §10); it is kept as sent, and
//! [`parse_event_created`] reads it.

use serde::Deserialize;
use time::PrimitiveDateTime;
use time::macros::format_description;

use crate::client::{Call, MaasClient};
use crate::error::MaasError;
use crate::form::Params;
use crate::types::nullable;

/// The `level=` of an event query: that level and above (never AUDIT), or only AUDIT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventLevel {
    /// DEBUG and above (includes request events).
    Debug,
    /// INFO and above (MAAS's default).
    Info,
    /// WARNING and above.
    Warning,
    /// ERROR and above.
    Error,
    /// CRITICAL.
    Critical,
    /// Audit events only.
    Audit,
}

impl EventLevel {
    /// MAAS's (case-sensitive) name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventLevel::Debug => "DEBUG",
            EventLevel::Info => "INFO",
            EventLevel::Warning => "WARNING",
            EventLevel::Error => "ERROR",
            EventLevel::Critical => "CRITICAL",
            EventLevel::Audit => "AUDIT",
        }
    }
}

/// An event query.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventQuery {
    /// Machines (`id=`, repeated); unknown ids match nothing.
    pub system_ids: Vec<String>,
    /// Minimum level (MAAS's default INFO when absent).
    pub level: Option<EventLevel>,
    /// Page size (MAAS's default 100, at most 1000).
    pub limit: Option<u32>,
    /// Events with ids below this.
    pub before: Option<i64>,
    /// Events with ids above this (MAAS refuses `before` and `after` together).
    pub after: Option<i64>,
}

impl EventQuery {
    fn params(&self) -> Params {
        let mut p = Params::new();
        p.list("id", &self.system_ids);
        p.opt_text("level", self.level.map(EventLevel::as_str));
        if let Some(limit) = self.limit {
            p.text("limit", limit.to_string());
        }
        if let Some(before) = self.before {
            p.text("before", before.to_string());
        }
        if let Some(after) = self.after {
            p.text("after", after.to_string());
        }
        p
    }
}

/// One event.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Event {
    /// Its id (paging key).
    pub id: i64,
    /// The machine's system id.
    #[serde(default, deserialize_with = "nullable")]
    pub node: String,
    /// The machine's hostname.
    #[serde(default, deserialize_with = "nullable")]
    pub hostname: String,
    /// Who caused it (`unknown` when nobody).
    #[serde(default, deserialize_with = "nullable")]
    pub username: String,
    /// `DEBUG`, `INFO`, …, `AUDIT`.
    #[serde(default, deserialize_with = "nullable")]
    pub level: String,
    /// When, as MAAS wrote it (`Fri, 07 Dec. 2018 20:11:08`).
    #[serde(default, deserialize_with = "nullable")]
    pub created: String,
    /// The event type's description (`Deploying`, `Released`, …).
    #[serde(default, rename = "type", deserialize_with = "nullable")]
    pub event_type: String,
    /// Details.
    #[serde(default, deserialize_with = "nullable")]
    pub description: String,
}

impl Event {
    /// [`Event::created`] parsed (see [`parse_event_created`]).
    pub fn created_at(&self) -> Option<PrimitiveDateTime> {
        parse_event_created(&self.created)
    }
}

/// One page of events.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct EventPage {
    /// Number of events in this page.
    #[serde(default, deserialize_with = "nullable")]
    pub count: u64,
    /// The events, newest first.
    #[serde(default, deserialize_with = "nullable")]
    pub events: Vec<Event>,
    /// URI of the newer events (`after=` the newest here).
    #[serde(default)]
    pub next_uri: Option<String>,
    /// URI of the older events (`before=` the oldest here); `None` when there are none.
    #[serde(default)]
    pub prev_uri: Option<String>,
}

impl EventPage {
    /// The highest event id in the page (what `after=` takes to continue forward).
    pub fn newest_id(&self) -> Option<i64> {
        self.events.iter().map(|e| e.id).max()
    }

    /// The lowest event id in the page (what `before=` takes to go back).
    pub fn oldest_id(&self) -> Option<i64> {
        self.events.iter().map(|e| e.id).min()
    }
}

/// Parses MAAS's event time, `%a, %d %b. %Y %H:%M:%S` (e.g. `Fri, 07 Dec. 2018 20:11:08`).
/// It carries no zone: it is the region's local time, UTC on a default install.
pub fn parse_event_created(s: &str) -> Option<PrimitiveDateTime> {
    let format = format_description!("[weekday repr:short], [day] [month repr:short]. [year] [hour repr:24]:[minute]:[second]");
    let s = s.trim();
    let t = PrimitiveDateTime::parse(s, format).ok()?;
    // `time` does not check the weekday against the date; a mismatch means a misread field.
    let day = t.weekday().to_string();
    s.get(..3).is_some_and(|w| day.starts_with(w)).then_some(t)
}

impl MaasClient {
    /// `GET /events/?op=query`: one page.
    pub async fn events(&self, query: &EventQuery) -> Result<EventPage, MaasError> {
        self.json(Call::get("/events/".to_owned()).op("query").query(query.params())).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn created_parses() {
        assert_eq!(parse_event_created("Fri, 07 Dec. 2018 20:11:08"), Some(datetime!(2018-12-07 20:11:08)));
        assert_eq!(parse_event_created("Thu, 01 Jan. 2026 00:00:00"), Some(datetime!(2026-01-01 00:00:00)));
        // A wrong weekday is refused rather than silently accepted.
        assert_eq!(parse_event_created("Mon, 07 Dec. 2018 20:11:08"), None);
        assert_eq!(parse_event_created("2018-12-07T20:11:08Z"), None);
        assert_eq!(parse_event_created("Fri, 07 Dec 2018 20:11:08"), None);
    }

    #[test]
    fn query_params() {
        let q = EventQuery {
            system_ids: vec!["abc123".into(), "def456".into()],
            level: Some(EventLevel::Debug),
            limit: Some(50),
            after: Some(1234),
            ..EventQuery::default()
        };
        assert_eq!(q.params().encode(), "id=abc123&id=def456&level=DEBUG&limit=50&after=1234");
        assert_eq!(EventQuery::default().params().encode(), "");
    }

    #[test]
    fn page_parses() {
        let p: EventPage = serde_json::from_str(
            r#"{"count":2,"events":[
                {"username":"admin","node":"abc123","hostname":"gpu-01","id":12,"level":"INFO",
                 "created":"Fri, 07 Dec. 2018 20:11:08","type":"Deploying","description":""},
                {"username":"unknown","node":"abc123","hostname":"gpu-01","id":11,"level":"INFO",
                 "created":"Fri, 07 Dec. 2018 20:10:08","type":"Ready","description":"x"}],
              "next_uri":"/MAAS/api/2.0/events/?op=query&after=12","prev_uri":null}"#,
        )
        .expect("parse");
        assert_eq!(p.count, 2);
        assert_eq!(p.events[0].event_type, "Deploying");
        assert_eq!((p.newest_id(), p.oldest_id()), (Some(12), Some(11)));
        assert_eq!(p.events[1].created_at(), Some(datetime!(2018-12-07 20:10:08)));
        assert_eq!(p.prev_uri, None);
    }
}
