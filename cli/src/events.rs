//! `drover events [--follow] [--since ID|DURATION|TIME] [--host H] [--rollout R] [--kind K] [--limit N]`
//! (also `drover get events`): the coordinator's event log, `GET /v1/events`, paged by event
//! id.
//!
//! Without `--follow` it prints every matching event (or the newest `--limit`, oldest first) as
//! a table, or with `-o json` as one JSON array. With `--follow` it prints the last
//! [`FOLLOW_BACKLOG`] matching events (like `tail -f`), then polls every
//! `--interval` seconds (default 1) for events after the last one seen, printing each on its
//! own line as it arrives (fixed columns, no header re-alignment; `-o json` prints one JSON
//! object a line) and flushing per line, until SIGINT (exit 0) or stdout closes. A coordinator
//! briefly unreachable while following is reported on stderr and retried, not fatal: a
//! follower should survive a coordinator restart.
//!
//! `--since` starts earlier or later than that, with or without `--follow`: after an event id
//! (`--since 1234`), from a duration ago (`--since 10m`; `s`, `m`, `h`, `d`) or from an RFC 3339
//! instant. Events are paged by id, so an instant is found by reading the listing: the start
//! is after the last event dated before it.

use std::io::Write;
use std::time::Duration;

use clap::Args;
use drover_proto::api::events::EventView;
use drover_proto::event_kinds::{KindFilter, parse_filter};
use drover_proto::names::RolloutId;
use drover_proto::time::Time;

use crate::answer::decode_all;
use crate::client::{ConnectArgs, Session};
use crate::exit::{CliError, codes};
use crate::listing::{hostnames, list_all};
use crate::output::{Output, OutputArgs, clean, dash, pretty, print, table};

/// The page size asked for.
const PAGE: usize = 500;

/// Events `--follow` shows from before it started when no `--since` is given: enough context
/// to see where things stand without replaying the whole history.
const FOLLOW_BACKLOG: usize = 10;

/// Arguments of `drover events` and `drover get events`.
#[derive(Args)]
pub struct EventsArgs {
    /// Keep printing new events as they happen (until interrupted).
    #[arg(short = 'f', long, visible_alias = "watch")]
    follow: bool,
    /// Start after this event id, or from this long ago (30s, 10m, 2h, 1d), or from this RFC
    /// 3339 instant (with --follow: instead of the last few events).
    #[arg(long, value_name = "ID|DURATION|TIME", value_parser = parse_since)]
    since: Option<Since>,
    /// Only this host's events (hostname or id).
    #[arg(long, value_name = "HOST")]
    host: Option<String>,
    /// Only this rollout's events: its id (CHANNEL@REF), a unique prefix of it, or a channel
    /// (its current rollout).
    #[arg(long, value_name = "ROLLOUT")]
    rollout: Option<String>,
    /// Only events of this kind (e.g. rollout.opened, host.transition) or family (host.*).
    #[arg(long, value_name = "KIND", value_parser = parse_filter)]
    kind: Option<KindFilter>,
    /// Without --follow: show only the newest N events (oldest first).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    limit: Option<u32>,
    /// With --follow: seconds between polls (1 to 60).
    #[arg(long, value_name = "SECS", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=60))]
    interval: u64,
    /// Events asked for per request (tests use it to exercise paging).
    #[arg(long, hide = true, default_value_t = PAGE as u32, value_parser = clap::value_parser!(u32).range(1..))]
    page_size: u32,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    connect: ConnectArgs,
}

/// The query filters of the arguments (host resolved to its id).
fn filters(s: &Session, args: &EventsArgs) -> Result<Vec<(&'static str, String)>, CliError> {
    let mut q = vec![("limit", args.page_size.to_string())];
    if let Some(h) = &args.host {
        q.push(("host", crate::resolve::host(s, "--host", h)?.id.to_string()));
    }
    if let Some(r) = &args.rollout {
        let id = match crate::resolve::rollout(s, "--rollout", r) {
            Ok(id) => id,
            // Events outlive the rollouts they are about: a whole id is asked for as typed.
            Err(crate::resolve::ResolveError::UnknownRollout { .. }) if RolloutId::parse(r.trim()).is_ok() => {
                RolloutId::parse(r.trim()).map_err(|e| CliError::usage(format!("--rollout: {e}")))?
            }
            Err(e) => return Err(e.into()),
        };
        q.push(("rollout", id.to_string()));
    }
    // A family is filtered here: the coordinator matches kinds exactly.
    if let Some(KindFilter::Exact(k)) = &args.kind {
        q.push(("kind", k.clone()));
    }
    Ok(q)
}

/// Where `--since` starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Since {
    /// After this event id.
    After(i64),
    /// From this many seconds before now.
    Ago(u64),
    /// From this instant.
    At(Time),
}

/// A `--since` that is none of its three forms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{given:?} is not an event id, a duration (30s, 10m, 2h, 1d) or an RFC 3339 time")]
struct BadSince {
    /// What was given.
    given: String,
}

fn parse_since(s: &str) -> Result<Since, BadSince> {
    let bad = || BadSince { given: s.to_owned() };
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s.parse().map(Since::After).map_err(|_| bad());
    }
    let unit = match s.as_bytes().last() {
        Some(b's') => Some(1),
        Some(b'm') => Some(60),
        Some(b'h') => Some(3600),
        Some(b'd') => Some(86_400),
        _ => None,
    };
    if let Some(unit) = unit {
        let digits = &s[..s.len() - 1];
        if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
            return digits.parse::<u64>().ok().and_then(|n| n.checked_mul(unit)).map(Since::Ago).ok_or_else(bad);
        }
    }
    Time::parse_lenient(s).map(Since::At).map_err(|_| bad())
}

/// The event id to start after for `since` (`None`: from the first), reading the listing
/// `base` for an instant.
fn start_after(s: &Session, base: &[(&'static str, String)], since: Since) -> Result<Option<i64>, CliError> {
    let from = match since {
        Since::After(id) => return Ok(Some(id)),
        Since::At(t) => t,
        Since::Ago(secs) => Time::from_unix(crate::clock::now()?.unix().saturating_sub(i64::try_from(secs).unwrap_or(i64::MAX)))
            .map_err(|e| CliError::usage(format!("--since: {e}")))?,
    };
    Ok(last_before(&list_events(s, base)?, from))
}

/// The id of the last of `events` dated before `from` (an event whose date does not parse
/// counts as before: it cannot be placed after).
fn last_before(events: &[EventView], from: Time) -> Option<i64> {
    events.iter().filter(|e| e.at < from).map(|e| e.id).max()
}

/// Every event the query matches, all pages, as the coordinator's [`EventView`]s.
fn list_events(s: &Session, query: &[(&str, String)]) -> Result<Vec<EventView>, CliError> {
    decode_all("/v1/events", &list_all(s, "/v1/events", query, None)?)
}

/// The events of `events` that pass `--kind`.
fn of_kind(events: Vec<EventView>, kind: Option<&KindFilter>) -> Vec<EventView> {
    match kind {
        Some(k) => events.into_iter().filter(|e| k.matches(&e.kind)).collect(),
        None => events,
    }
}

/// What an event is about: its host (by name when known), rollout or job.
fn object(e: &EventView, names: &std::collections::BTreeMap<String, String>) -> String {
    let host = e.host_id.as_deref().unwrap_or("");
    let host = names.get(host).map_or(host, String::as_str);
    let parts: Vec<String> =
        [("host/", host), ("rollout/", e.rollout_id.as_deref().unwrap_or("")), ("job/", e.job_id.as_deref().unwrap_or(""))]
            .into_iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| format!("{k}{}", clean(v, 64)))
            .collect();
    if parts.is_empty() { "-".to_owned() } else { parts.join(",") }
}

/// The events table.
pub fn render_events(events: &[EventView], names: &std::collections::BTreeMap<String, String>, wide: bool) -> String {
    let rows: Vec<Vec<String>> = events.iter().map(|e| row(e, names, wide)).collect();
    let mut header = vec!["ID", "AT", "KIND", "OBJECT", "MESSAGE"];
    if wide {
        header.push("DATA");
    }
    table(&header, &rows)
}

fn row(e: &EventView, names: &std::collections::BTreeMap<String, String>, wide: bool) -> Vec<String> {
    let mut row = vec![
        e.id.to_string(),
        e.at.to_string(),
        clean(&e.kind, 48),
        object(e, names),
        clean(dash(&e.message), if wide { 300 } else { 100 }),
    ];
    if wide {
        row.push(clean(&e.data.to_string(), 300));
    }
    row
}

/// One followed event as a line: the table's columns at fixed widths (a stream cannot
/// re-align earlier lines).
pub fn follow_line(e: &EventView, names: &std::collections::BTreeMap<String, String>, output: Output) -> Result<String, CliError> {
    if output.is_json() {
        return serde_json::to_string(e).map(|s| s + "\n").map_err(|err| CliError::new(codes::SOFTWARE, format!("internal error: {err}")));
    }
    Ok(fixed(&row(e, names, output == Output::Wide)))
}

/// Cells at the fixed widths of a followed stream.
fn fixed(r: &[String]) -> String {
    let cell = |i: usize| r.get(i).map_or("", String::as_str);
    let mut line = format!("{:<6}  {:<20}  {:<22}  {:<28}  {}", cell(0), cell(1), cell(2), cell(3), cell(4));
    if let Some(data) = r.get(5) {
        line.push_str("  ");
        line.push_str(data);
    }
    line.trim_end().to_owned() + "\n"
}

/// The last `limit` of `events` (all of them without a limit), in their order.
fn newest(mut events: Vec<EventView>, limit: Option<usize>) -> Vec<EventView> {
    if let Some(n) = limit {
        events.drain(..events.len().saturating_sub(n));
    }
    events
}

/// Where a follow without `--since` starts: after the event before the last `backlog` of
/// `events` (so those are shown first); `None` when there are no more than that.
fn follow_start(events: &[EventView], backlog: usize) -> Option<i64> {
    let skip = events.len().checked_sub(backlog + 1)?;
    last_id(&events[..=skip])
}

/// The id of the last event of `events`.
fn last_id(events: &[EventView]) -> Option<i64> {
    events.iter().map(|e| e.id).max()
}

/// Runs `drover events`.
pub fn run(args: &EventsArgs) -> Result<(), CliError> {
    let s = Session::open(&args.connect)?;
    let mut q = filters(&s, args)?;
    if let Some(since) = args.since
        && let Some(after) = start_after(&s, &q, since)?
    {
        q.push(("after", after.to_string()));
    }
    let output = args.output.output;
    // Host names make the OBJECT column readable; JSON keeps the coordinator's ids.
    let names = if output.is_json() { Default::default() } else { hostnames(&s)? };
    if !args.follow {
        // Events page oldest first by id: the newest N are the tail of the whole listing.
        let all = of_kind(list_events(&s, &q)?, args.kind.as_ref());
        let events = newest(all, args.limit.map(|l| l as usize));
        if output.is_json() {
            return print(&pretty(&events)?);
        }
        if events.is_empty() {
            eprintln!("no events");
            return Ok(());
        }
        return print(&render_events(&events, &names, output == Output::Wide));
    }
    follow(&s, args, q, names)
}

/// `--follow`: print, then poll for newer events until SIGINT or a closed stdout.
fn follow(
    s: &Session,
    args: &EventsArgs,
    base: Vec<(&'static str, String)>,
    mut names: std::collections::BTreeMap<String, String>,
) -> Result<(), CliError> {
    let output = args.output.output;
    let mut after = match args.since {
        // run() has already turned --since into an `after` filter.
        Some(_) => base.iter().find(|(k, _)| *k == "after").and_then(|(_, v)| v.parse().ok()),
        None => follow_start(&of_kind(list_events(s, &base)?, args.kind.as_ref()), FOLLOW_BACKLOG),
    };
    let mut stdout = std::io::stdout().lock();
    if !output.is_json() {
        let mut cols: Vec<String> = ["ID", "AT", "KIND", "OBJECT", "MESSAGE"].map(str::to_owned).to_vec();
        if output == Output::Wide {
            cols.push("DATA".to_owned());
        }
        let header = fixed(&cols);
        if !write_line(&mut stdout, &header)? {
            return Ok(());
        }
    }
    let interval = Duration::from_secs(args.interval);
    let mut sigint = crate::client::Interrupt::new(&s.runtime);
    loop {
        let mut q: Vec<(&str, String)> = base.iter().filter(|(k, _)| *k != "after").cloned().collect();
        if let Some(a) = after {
            q.push(("after", a.to_string()));
        }
        match list_events(s, &q) {
            Ok(events) => {
                // A host enrolled since the start: learn its name (best effort).
                let unknown = |e: &EventView| e.host_id.as_ref().is_some_and(|h| !names.contains_key(h));
                if !output.is_json() && events.iter().any(unknown) {
                    names = hostnames(s).unwrap_or(names);
                }
                for e in events.iter().filter(|e| args.kind.as_ref().is_none_or(|k| k.matches(&e.kind))) {
                    if !write_line(&mut stdout, &follow_line(e, &names, output)?)? {
                        return Ok(());
                    }
                }
                after = last_id(&events).or(after);
            }
            // A coordinator restarting or briefly unreachable: keep following.
            Err(e) if e.code() == codes::UNAVAILABLE => eprintln!("drover: {e} (retrying)"),
            Err(e) => return Err(e),
        }
        if sigint.sleep(&s.runtime, interval) {
            return Ok(());
        }
    }
}

/// Writes and flushes one line; `false` when stdout is closed (a reader like `head` left).
fn write_line(out: &mut dyn Write, line: &str) -> Result<bool, CliError> {
    match out.write_all(line.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(CliError::new(codes::IO, format!("cannot write stdout: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::{Value, json};

    use super::*;

    fn events() -> Vec<EventView> {
        decode_all(
            "/v1/events",
            &[
                json!({"id": 7, "at": "2025-01-01T00:00:00Z", "kind": "rollout.opened", "hostId": null, "rolloutId": "gpu@c0ffee",
                   "jobId": null, "message": "opened", "data": {"a": 1}}),
                json!({"id": 9, "at": "2025-01-01T00:01:00Z", "kind": "host.transition", "hostId": "h1", "rolloutId": null,
                   "jobId": null, "message": "active\nnow", "data": null}),
            ],
        )
        .expect("events")
    }

    #[test]
    fn events_render_with_objects_by_name() {
        let names = BTreeMap::from([("h1".to_owned(), "gpu-a-01".to_owned())]);
        let t = render_events(&events(), &names, false);
        assert_eq!(
            t,
            "ID  AT                    KIND             OBJECT              MESSAGE\n\
             7   2025-01-01T00:00:00Z  rollout.opened   rollout/gpu@c0ffee  opened\n\
             9   2025-01-01T00:01:00Z  host.transition  host/gpu-a-01       active now\n"
        );
        assert!(render_events(&events(), &names, true).contains("{\"a\":1}"));
        assert_eq!(last_id(&events()), Some(9));
    }

    fn numbered(n: i64) -> Vec<EventView> {
        let at = Time::parse_lenient("2025-01-01T00:00:00Z").expect("time");
        let event = |id| EventView {
            id,
            at,
            kind: "host.transition".to_owned(),
            host_id: None,
            rollout_id: None,
            job_id: None,
            message: String::new(),
            data: Value::Null,
        };
        (1..=n).map(event).collect()
    }

    fn ids(events: &[EventView]) -> Vec<i64> {
        events.iter().map(|e| e.id).collect()
    }

    #[test]
    fn limit_keeps_the_newest_in_order() {
        assert_eq!(ids(&newest(numbered(5), Some(2))), vec![4, 5]);
        assert_eq!(ids(&newest(numbered(2), Some(9))), vec![1, 2]);
        assert_eq!(ids(&newest(numbered(3), None)), vec![1, 2, 3]);
    }

    #[test]
    fn follow_starts_before_the_last_few() {
        // 25 events, backlog 10: start after event 15 so 16..=25 are shown first.
        assert_eq!(follow_start(&numbered(25), 10), Some(15));
        assert_eq!(follow_start(&numbered(11), 10), Some(1));
        assert_eq!(follow_start(&numbered(10), 10), None);
        assert_eq!(follow_start(&[], 10), None);
    }

    #[test]
    fn since_takes_an_id_a_duration_or_an_instant() {
        assert_eq!(parse_since("1234"), Ok(Since::After(1234)));
        assert_eq!(parse_since("90s"), Ok(Since::Ago(90)));
        assert_eq!(parse_since("10m"), Ok(Since::Ago(600)));
        assert_eq!(parse_since("2h"), Ok(Since::Ago(7200)));
        assert_eq!(parse_since("1d"), Ok(Since::Ago(86_400)));
        let at = parse_since("2025-01-01T00:00:30Z").expect("an instant");
        assert_eq!(at, Since::At(Time::parse_lenient("2025-01-01T00:00:30Z").expect("time")));
        for bad in ["", "m", "10x", "-5m", "yesterday", "99999999999999999999d"] {
            let e = parse_since(bad).expect_err(bad).to_string();
            assert!(e.contains("not an event id, a duration"), "{bad}: {e}");
        }
    }

    #[test]
    fn an_instant_starts_after_the_last_event_before_it() {
        let at = |s: &str| Time::parse_lenient(s).expect("time");
        assert_eq!(last_before(&events(), at("2025-01-01T00:00:30Z")), Some(7));
        assert_eq!(last_before(&events(), at("2024-12-31T00:00:00Z")), None, "every event is shown");
        assert_eq!(last_before(&events(), at("2025-01-01T00:00:00Z")), None, "an event at the instant is shown");
        assert_eq!(last_before(&events(), at("2026-01-01T00:00:00Z")), Some(9));
    }

    #[test]
    fn followed_events_are_one_line_each() {
        let names = BTreeMap::new();
        let line = follow_line(&events()[1], &names, Output::Table).expect("line");
        assert!(line.starts_with("9       2025-01-01T00:01:00Z  host.transition") && line.ends_with("active now\n"), "{line:?}");
        assert_eq!(line.matches('\n').count(), 1);
        let json = follow_line(&events()[0], &names, Output::Json).expect("json");
        assert_eq!(serde_json::from_str::<Value>(&json).expect("parses")["id"], 7);
        assert_eq!(json.matches('\n').count(), 1);
    }
}
