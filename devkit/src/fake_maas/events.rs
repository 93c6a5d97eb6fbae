//! The event log and `GET /events/?op=query`: filters by node (`id`, `hostname`,
//! `mac_address`, `owner`, `agent_name`, `zone`, `pool`, `domain`), the level ladder (a
//! level returns itself and above, never AUDIT; AUDIT only audit), paging by `limit`
//! (default 100, at most 1000, below 1 read as 1) with `before`/`after` event ids, output
//! always newest first, `created` in MAAS's odd `Fri, 07 Dec. 2018 20:11:08` format and
//! `next_uri`/`prev_uri` built from the request's own filters.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::forms::Params;
use super::machine::normalise_mac;
use super::reply::{Millis, Reply, event_time};
use super::world::World;

/// An event's level; the numbers order the ladder (AUDIT sits apart from it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[allow(missing_docs)] // MAAS's level names
pub enum Level {
    Audit,
    Debug,
    Info,
    Warning,
    Error,
    Critical,
}

impl Level {
    /// The name MAAS writes and takes (case-sensitive).
    pub fn name(self) -> &'static str {
        match self {
            Level::Audit => "AUDIT",
            Level::Debug => "DEBUG",
            Level::Info => "INFO",
            Level::Warning => "WARNING",
            Level::Error => "ERROR",
            Level::Critical => "CRITICAL",
        }
    }

    fn parse(text: &str) -> Option<Level> {
        [Level::Audit, Level::Debug, Level::Info, Level::Warning, Level::Error, Level::Critical].into_iter().find(|l| l.name() == text)
    }

    /// Whether an event at `self` answers a query at `asked`.
    fn answers(self, asked: Level) -> bool {
        if asked == Level::Audit { self == Level::Audit } else { self != Level::Audit && self >= asked }
    }
}

/// One event.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Event {
    /// Its id (ascending with time).
    pub id: u64,
    /// The node's system_id.
    pub system_id: String,
    /// The node's hostname when it happened.
    pub hostname: String,
    /// Who caused it.
    pub username: Option<String>,
    /// Its level.
    pub level: Level,
    /// When.
    pub created: Millis,
    /// The event type's description (`Deploying`, `User releasing node`).
    pub kind: String,
    /// The text.
    pub description: String,
}

impl Event {
    fn to_json(&self) -> Value {
        json!({
            "username": self.username.as_deref().unwrap_or("unknown"), "node": self.system_id, "hostname": self.hostname,
            "id": self.id, "level": self.level.name(), "created": event_time(self.created), "type": self.kind,
            "description": self.description,
        })
    }
}

/// The largest `limit` MAAS serves.
const MAX_LIMIT: i64 = 1000;

fn int_param(p: &Params, key: &str) -> Result<Option<i64>, Reply> {
    match p.get(key) {
        None => Ok(None),
        Some(v) => v.trim().parse().map(Some).map_err(|_| Reply::text(400, format!("Invalid value for {key}: {v}"))),
    }
}

/// `GET /events/?op=query`.
pub fn query(world: &World, p: &Params) -> Reply {
    let level = match p.get("level") {
        None => Level::Info,
        Some(l) => match Level::parse(l) {
            Some(l) => l,
            None => return Reply::text(400, format!("Unrecognised log level: {l}")),
        },
    };
    let (limit, after, before) = match (int_param(p, "limit"), int_param(p, "after"), int_param(p, "before")) {
        (Ok(l), Ok(a), Ok(b)) => (l.unwrap_or(100), a, b),
        (Err(r), _, _) | (_, Err(r), _) | (_, _, Err(r)) => return r,
    };
    if limit > MAX_LIMIT {
        return Reply::text(400, format!("Requested number of events {limit} is greater than limit: {MAX_LIMIT}"));
    }
    let limit = usize::try_from(limit.max(1)).unwrap_or(1);
    if after.is_some() && before.is_some() {
        return Reply::text(400, "There is both an 'after' and a 'before' parameter; give at most one.");
    }
    let macs = p.all("mac_address");
    let bad: Vec<&str> = macs.iter().copied().filter(|m| normalise_mac(m).is_none()).collect();
    if !bad.is_empty() {
        return Reply::text(400, format!("Invalid MAC address(es): {}", bad.join(", ")));
    }
    let macs: Vec<String> = macs.iter().filter_map(|m| normalise_mac(m)).collect();
    let (ids, hostnames, owners, agents) = (p.all("id"), p.all("hostname"), p.all("owner"), p.all("agent_name"));
    let fixed = |key: &str, value: &str| p.all(key).iter().all(|v| *v == value);
    if !(fixed("zone", "default") && fixed("pool", "default") && fixed("domain", "maas")) {
        return Reply::ok(&page_json(&[], p, after));
    }
    let node_matches = |e: &Event| {
        let machine = world.data.machines.iter().find(|m| m.system_id == e.system_id);
        (ids.is_empty() || ids.contains(&e.system_id.as_str()))
            && (hostnames.is_empty() || hostnames.contains(&e.hostname.as_str()))
            && (macs.is_empty() || machine.is_some_and(|m| m.interfaces.iter().any(|i| macs.contains(&i.mac_address))))
            && (owners.is_empty() || machine.and_then(|m| m.owner.as_deref()).is_some_and(|o| owners.contains(&o)))
            && (agents.is_empty() || machine.is_some_and(|m| agents.contains(&m.agent_name.as_str())))
    };
    let matching = world.data.events.iter().filter(|e| e.level.answers(level) && node_matches(e));
    let mut page: Vec<&Event> = match (after, before) {
        (Some(a), _) => matching.filter(|e| i64::try_from(e.id).unwrap_or(i64::MAX) > a).take(limit).collect(),
        (None, b) => {
            let all: Vec<&Event> = matching.filter(|e| b.is_none_or(|b| i64::try_from(e.id).unwrap_or(i64::MAX) < b)).collect();
            all[all.len().saturating_sub(limit)..].to_vec()
        }
    };
    page.reverse();
    Reply::ok(&page_json(&page, p, after))
}

/// The response for a page already ordered newest first.
fn page_json(page: &[&Event], p: &Params, after: Option<i64>) -> Value {
    let mut base = String::from("/MAAS/api/2.0/events/?op=query");
    for (k, v) in p.pairs().iter().filter(|(k, _)| !matches!(k.as_str(), "op" | "after" | "before") && !k.starts_with("oauth_")) {
        base.push('&');
        base.push_str(&serde_urlencoded::to_string([(k, v)]).unwrap_or_default());
    }
    let (next_uri, prev_uri) = match (page.first(), page.last()) {
        (Some(newest), Some(oldest)) => (format!("{base}&after={}", newest.id), json!(format!("{base}&before={}", oldest.id))),
        _ => {
            let a = after.unwrap_or(0);
            (format!("{base}&after={a}"), if after.is_some() { json!(format!("{base}&before={}", a + 1)) } else { Value::Null })
        }
    };
    json!({
        "count": page.len(),
        "events": page.iter().map(|e| e.to_json()).collect::<Vec<_>>(),
        "next_uri": next_uri,
        "prev_uri": prev_uri,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_level_ladder() {
        assert!(Level::Info.answers(Level::Info));
        assert!(Level::Error.answers(Level::Info));
        assert!(!Level::Debug.answers(Level::Info));
        assert!(Level::Debug.answers(Level::Debug));
        assert!(!Level::Audit.answers(Level::Debug));
        assert!(Level::Audit.answers(Level::Audit));
        assert!(!Level::Info.answers(Level::Audit));
        assert_eq!(Level::parse("info"), None, "level names are case-sensitive");
    }

    #[test]
    fn paging_newest_first() {
        let mut world = World::for_tests();
        for i in 1..=5 {
            world.data.events.push(Event {
                id: i,
                system_id: if i % 2 == 0 { "even00".into() } else { "odd000".into() },
                hostname: "h".into(),
                username: None,
                level: Level::Info,
                created: 1_544_213_468_000,
                kind: "Deploying".into(),
                description: String::new(),
            });
        }
        let ids = |q: &str| -> (Vec<u64>, Value) {
            let r = query(&world, &Params::from_query(q));
            assert_eq!(r.status, 200, "{q}: {}", String::from_utf8_lossy(&r.body));
            let v: Value = serde_json::from_slice(&r.body).unwrap();
            (v["events"].as_array().unwrap().iter().map(|e| e["id"].as_u64().unwrap()).collect(), v)
        };
        assert_eq!(ids("op=query").0, vec![5, 4, 3, 2, 1]);
        let (page, v) = ids("op=query&limit=2");
        assert_eq!(page, vec![5, 4]);
        assert_eq!(v["next_uri"], "/MAAS/api/2.0/events/?op=query&limit=2&after=5");
        assert_eq!(v["prev_uri"], "/MAAS/api/2.0/events/?op=query&limit=2&before=4");
        assert_eq!(v["events"][0]["created"], "Fri, 07 Dec. 2018 20:11:08");
        assert_eq!(v["events"][0]["username"], "unknown");
        assert_eq!(ids("op=query&limit=2&before=4").0, vec![3, 2]);
        assert_eq!(ids("op=query&limit=2&after=1").0, vec![3, 2]);
        assert_eq!(ids("op=query&limit=0").0, vec![5]);
        assert_eq!(ids("op=query&id=even00").0, vec![4, 2]);
        assert_eq!(ids("op=query&id=nope00").1["prev_uri"], Value::Null);
        assert_eq!(ids("op=query&level=WARNING").0, Vec::<u64>::new());
        for (q, text) in [
            ("op=query&limit=1001", "Requested number of events 1001 is greater than limit: 1000"),
            ("op=query&level=info", "Unrecognised log level: info"),
            ("op=query&mac_address=zz", "Invalid MAC address(es): zz"),
        ] {
            let r = query(&world, &Params::from_query(q));
            assert_eq!((r.status, String::from_utf8(r.body).unwrap().as_str()), (400, text));
        }
        assert_eq!(query(&world, &Params::from_query("after=1&before=3")).status, 400);
        assert_eq!(query(&world, &Params::from_query("limit=x")).status, 400);
    }
}
