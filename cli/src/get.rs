//! `drover get hosts|rollouts|jobs|tasks|events|onboardings|drift`: kubectl-like listings of the coordinator's
//! operator routes (viewer role), as a table (`-o table`, the default), a wider table
//! (`-o wide`) or the coordinator's JSON (`-o json`: every page merged into one array).
//!
//! - `get hosts [--state S] [--limit N]`: `GET /v1/hosts`, paged by the opaque `next` cursor;
//!   `get host HOST` (a hostname or an id): that one host's row (`GET /v1/hosts/{id}`), or its
//!   JSON object with `-o json`.
//! - `get rollouts [--state S] [--channel C] [--watch [--timeout SECS]]`: `GET /v1/rollouts`;
//!   `--watch` is the live progress view of [`crate::watch`]; `--watch --release VERSION`
//!   waits for that release's rollouts ([`crate::wait`]).
//! - `get jobs [--host H] [--state S] [--kind K]`: `GET /v1/jobs`.
//! - `get tasks [--host H] [--job J] [--state S]`: `GET /v1/tasks`.
//! - `get events …`: the same as `drover events` ([`crate::events`]).
//! - `get onboardings [--batch ID] [--host H] [--state S] [--site SITE]`: MAAS onboardings
//!   ([`crate::onboarding`]), with the batch's counts by state under `--batch`.
//! - `get drift [--site SITE]`: hosts with an open MAAS drift ([`crate::drift`]).
//!
//! A host, as a filter or as `get host HOST`, is a hostname or an id ([`crate::resolve`]). The
//! listing helpers here ([`list_all`], [`all_hosts`]) are shared with `describe`, `events`,
//! `explain` and the resolver.

use std::collections::BTreeMap;

use clap::{Args, Subcommand};
use serde_json::Value;

use crate::client::{ConnectArgs, Session};
use crate::exit::{CliError, codes};
use crate::job::{JobKind, JobState, clean};
use crate::output::{ListOutputArgs, age, dash, field, print, table};

/// Most pages one listing follows: a coordinator that keeps answering `next` forever (a bug)
/// must not keep `drover` running forever.
const MAX_PAGES: usize = 100_000;
/// The page size asked for (the coordinator clamps it to its own maximum).
const PAGE: usize = 500;

/// Arguments of `drover get`.
#[derive(Args)]
pub struct GetArgs {
    #[command(subcommand)]
    what: GetWhat,
}

#[derive(Subcommand)]
enum GetWhat {
    /// Hosts: name, lifecycle state, schedulable, last check-in; `get host HOST` shows one.
    #[command(alias = "host")]
    Hosts(HostsArgs),
    /// Rollouts: id, channel, state, age; `--watch` shows live wave progress.
    #[command(alias = "rollout")]
    Rollouts(RolloutsArgs),
    /// Jobs (decommissions and maintenance): kind, host, state, stage, attempt.
    #[command(alias = "job")]
    Jobs(JobsArgs),
    /// Tasks issued to hosts: type, host, state, attempts.
    #[command(alias = "task")]
    Tasks(TasksArgs),
    /// Events (the same as `drover events`).
    #[command(alias = "event")]
    Events(crate::events::EventsArgs),
    /// MAAS onboardings: hostname, site, state, stage, failure class; `--batch` adds the
    /// batch's counts by state.
    #[command(alias = "onboarding")]
    Onboardings(crate::onboarding::ListArgs),
    /// Hosts whose MAAS machine disagrees with Drover: rule, severity, MAAS status.
    Drift(crate::drift::DriftListArgs),
}

/// Arguments of `drover get hosts`.
#[derive(Args)]
struct HostsArgs {
    /// One host (a hostname or an id): its row, or its JSON object with -o json.
    #[arg(value_name = "HOST", conflicts_with_all = ["state", "limit"])]
    host: Option<String>,
    /// Only hosts in this lifecycle state (active, offline, quarantined, retired, …).
    #[arg(long, value_name = "STATE")]
    state: Option<String>,
    /// Show at most this many hosts.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    limit: Option<u32>,
    /// Hosts asked for per request (tests use it to exercise paging).
    #[arg(long, hide = true, default_value_t = PAGE as u32, value_parser = clap::value_parser!(u32).range(1..))]
    page_size: u32,
    #[command(flatten)]
    output: ListOutputArgs,
    #[command(flatten)]
    connect: ConnectArgs,
}

/// Arguments of `drover get rollouts`.
#[derive(Args)]
struct RolloutsArgs {
    /// Only rollouts in this state (Active, Converged, Halted, …).
    #[arg(long, value_name = "STATE")]
    state: Option<String>,
    /// Only this channel's rollouts.
    #[arg(long, value_name = "CHANNEL")]
    channel: Option<String>,
    /// Live progress of the rollouts not yet finished (waves, hosts per state), redrawn every
    /// second, until they all finish or --timeout passes.
    #[arg(short = 'w', long)]
    watch: bool,
    /// With --watch: give up after this many seconds (exit 75).
    #[arg(long, value_name = "SECS", default_value_t = 3600, requires = "watch")]
    timeout: u64,
    /// With --watch: wait for the rollouts release VERSION opens (they open a moment after
    /// publishing), one line per change; exit 0 when all converge, 2 when one halts, reverts,
    /// fails or is cancelled.
    #[arg(long, value_name = "VERSION", requires = "watch")]
    release: Option<u64>,
    #[command(flatten)]
    output: ListOutputArgs,
    #[command(flatten)]
    connect: ConnectArgs,
}

/// Arguments of `drover get jobs`.
#[derive(Args)]
struct JobsArgs {
    /// Only this host's jobs (hostname or id).
    #[arg(long, value_name = "HOST")]
    host: Option<String>,
    /// Only jobs in this state.
    #[arg(long, value_enum)]
    state: Option<JobState>,
    /// Only jobs of this kind.
    #[arg(long, value_enum)]
    kind: Option<JobKind>,
    #[command(flatten)]
    output: ListOutputArgs,
    #[command(flatten)]
    connect: ConnectArgs,
}

/// Arguments of `drover get tasks`.
#[derive(Args)]
struct TasksArgs {
    /// Only this host's tasks (hostname or id).
    #[arg(long, value_name = "HOST")]
    host: Option<String>,
    /// Only this job's tasks.
    #[arg(long, value_name = "JOB_ID")]
    job: Option<String>,
    /// Only tasks in this state (queued, leased, completed).
    #[arg(long, value_name = "STATE")]
    state: Option<String>,
    #[command(flatten)]
    output: ListOutputArgs,
    #[command(flatten)]
    connect: ConnectArgs,
}

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

/// Every item of a listing: `GET base?query`, following `next` (passed back as `after`, a
/// cursor for hosts and an id for events) until it is `null` or `limit` items are read. The
/// items are under `items_key` (`items` on every listing).
pub fn list_all(s: &Session, base: &str, query: &[(&str, String)], items_key: &str, limit: Option<usize>) -> Result<Vec<Value>, CliError> {
    let mut items = Vec::new();
    let mut after: Option<String> = None;
    for _ in 0..MAX_PAGES {
        // A caller's own `after` (events --since) starts the first page; the cursor replaces it.
        let mut q: Vec<(&str, String)> = query.iter().filter(|(k, _)| after.is_none() || *k != "after").cloned().collect();
        if let Some(a) = &after {
            q.push(("after", a.clone()));
        }
        let path = with_query(base, &q);
        let page = s.get(&path)?;
        let Some(rows) = page.get(items_key).and_then(Value::as_array) else {
            return Err(CliError::new(codes::PROTOCOL, format!("{path}: unexpected answer: no {items_key:?} array")));
        };
        items.extend(rows.iter().cloned());
        if limit.is_some_and(|l| items.len() >= l) {
            items.truncate(limit.unwrap_or(usize::MAX));
            return Ok(items);
        }
        let next = match page.get("next") {
            None | Some(Value::Null) => return Ok(items),
            Some(Value::String(c)) => c.clone(),
            Some(Value::Number(n)) => n.to_string(),
            Some(_) => return Err(CliError::new(codes::PROTOCOL, format!("{path}: unexpected answer: `next` is not a cursor"))),
        };
        if rows.is_empty() || after.as_deref() == Some(next.as_str()) {
            // A page that does not advance would loop forever.
            return Ok(items);
        }
        after = Some(next);
    }
    Err(CliError::new(codes::PROTOCOL, format!("{base}: more than {MAX_PAGES} pages")))
}

/// Every host (`GET /v1/hosts`, all pages).
pub fn all_hosts(s: &Session) -> Result<Vec<Value>, CliError> {
    list_all(s, "/v1/hosts", &[("limit", PAGE.to_string())], "items", None)
}

/// Host id → hostname, for tables that show tasks and events by host.
pub fn hostnames(s: &Session) -> Result<BTreeMap<String, String>, CliError> {
    Ok(all_hosts(s)?.iter().map(|h| (field(h, "id").to_owned(), field(h, "hostname").to_owned())).collect())
}

/// Prints `items` as `output` asks (see [`ListOutputArgs::render`]), with `none` on stderr
/// when there is nothing to print.
fn show(
    output: ListOutputArgs,
    items: &[Value],
    kind: &str,
    name_key: &str,
    none: &str,
    render: impl FnOnce(&[Value]) -> Result<String, CliError>,
) -> Result<(), CliError> {
    match output.render(items, kind, name_key, render)? {
        Some(text) => print(&text),
        None => {
            eprintln!("{none}");
            Ok(())
        }
    }
}

/// The hosts table.
pub fn render_hosts(now: drover_proto::time::Time, hosts: &[Value], wide: bool) -> String {
    let rows: Vec<Vec<String>> = hosts
        .iter()
        .map(|h| {
            let c = h.get("lastCheckin").filter(|c| !c.is_null());
            let last = c.map(|c| age(now, c.get("at").and_then(Value::as_str))).unwrap_or_else(|| "never".to_owned());
            let mut row = vec![
                clean(field(h, "hostname"), 64),
                clean(field(h, "state"), 32),
                if h.get("schedulable").and_then(Value::as_bool).unwrap_or(false) { "yes" } else { "no (cordoned)" }.to_owned(),
                last,
                age(now, h.get("createdAt").and_then(Value::as_str)),
            ];
            if wide {
                let cf = |k: &str| clean(dash(c.map(|c| field(c, k)).unwrap_or("")), 80);
                let wave = h.get("wave").and_then(Value::as_u64).map_or_else(|| "-".to_owned(), |w| w.to_string());
                row.extend([
                    clean(field(h, "id"), 40),
                    cf("agentVersion"),
                    clean(dash(field(h, "channel")), 64),
                    wave,
                    cf("currentGeneration"),
                ]);
            }
            row
        })
        .collect();
    let mut header = vec!["NAME", "STATE", "SCHEDULABLE", "LAST-CHECKIN", "AGE"];
    if wide {
        header.extend(["ID", "AGENT", "CHANNEL", "WAVE", "GENERATION"]);
    }
    table(&header, &rows)
}

/// The rollouts table.
pub fn render_rollouts(now: drover_proto::time::Time, rollouts: &[Value], wide: bool) -> String {
    let rows: Vec<Vec<String>> = rollouts
        .iter()
        .map(|r| {
            let mut row = vec![
                clean(field(r, "rolloutId"), 80),
                clean(field(r, "channel"), 64),
                crate::rollout::state_label(field(r, "state"), skipped(r)),
                age(now, r.get("openedAt").and_then(Value::as_str)),
                age(now, r.get("updatedAt").and_then(Value::as_str)),
            ];
            if wide {
                row.extend([clean(field(r, "openedAt"), 40), clean(field(r, "manifestSha256"), 64)]);
            }
            row
        })
        .collect();
    let mut header = vec!["ROLLOUT", "CHANNEL", "STATE", "AGE", "CHANGED"];
    if wide {
        header.extend(["OPENED", "MANIFEST-SHA256"]);
    }
    table(&header, &rows)
}

/// How many of a listed rollout's hosts were skipped (its `hosts` counts by state).
fn skipped(r: &Value) -> usize {
    r.pointer("/hosts/Skipped").and_then(Value::as_u64).map_or(0, |n| usize::try_from(n).unwrap_or(usize::MAX))
}

/// The tasks table (`names`: host id → hostname).
pub fn render_tasks(now: drover_proto::time::Time, tasks: &[Value], names: &BTreeMap<String, String>, wide: bool) -> String {
    let rows: Vec<Vec<String>> = tasks
        .iter()
        .map(|t| {
            let host = field(t, "hostId");
            let outcome = t.get("result").and_then(|r| r.get("outcome")).and_then(Value::as_str).unwrap_or("");
            let mut row = vec![
                clean(field(t, "taskId"), 40),
                clean(field(t, "type"), 48),
                clean(names.get(host).map_or(host, String::as_str), 64),
                clean(field(t, "state"), 16),
                t.get("attempts").and_then(Value::as_u64).unwrap_or(0).to_string(),
                clean(dash(outcome), 32),
                age(now, t.get("createdAt").and_then(Value::as_str)),
            ];
            if wide {
                row.extend([
                    clean(dash(field(t, "jobId")), 40),
                    clean(dash(field(t, "leaseExpiresAt")), 40),
                    clean(dash(field(t, "completedAt")), 40),
                ]);
            }
            row
        })
        .collect();
    let mut header = vec!["TASK", "TYPE", "HOST", "STATE", "ATTEMPTS", "OUTCOME", "AGE"];
    if wide {
        header.extend(["JOB", "LEASE-EXPIRES", "COMPLETED"]);
    }
    table(&header, &rows)
}

/// The jobs table: `drover job get`'s, with the job's request and last change when wide.
fn render_jobs(jobs: &[Value], wide: bool) -> Result<String, CliError> {
    let decoded: Vec<crate::job::JobJson> = jobs.iter().map(|j| crate::job::decode("/v1/jobs", j)).collect::<Result<_, _>>()?;
    if !wide {
        return Ok(crate::job::render_job_table(&decoded));
    }
    let rows: Vec<Vec<String>> = decoded
        .iter()
        .map(|j| {
            vec![
                clean(&j.job_id, 40),
                clean(&j.kind, 32),
                clean(if j.hostname.is_empty() { &j.host_id } else { &j.hostname }, 64),
                clean(&j.state, 32),
                clean(dash(j.stage.as_deref().unwrap_or("")), 32),
                j.attempt.to_string(),
                clean(dash(&j.host_id), 40),
                clean(dash(j.request_id.as_deref().unwrap_or("")), 40),
                clean(dash(&j.updated_at), 40),
                clean(dash(&j.message), 60),
            ]
        })
        .collect();
    Ok(table(&["JOB", "KIND", "HOST", "STATE", "STAGE", "ATTEMPT", "HOST-ID", "REQUEST", "UPDATED", "MESSAGE"], &rows))
}

/// Runs `drover get`.
pub fn run(args: &GetArgs) -> Result<(), CliError> {
    let now = crate::clock::now()?;
    match &args.what {
        GetWhat::Hosts(a) => {
            let s = Session::open(&a.connect)?;
            if let Some(given) = &a.host {
                // An id goes straight to the host's route, which refuses an unknown one itself.
                let id = crate::resolve::host_id(&s, "HOST", given)?;
                let host = s.get(&format!("/v1/hosts/{id}"))?;
                if a.output.is_json() {
                    return print(&crate::output::pretty(&host)?);
                }
                return show(a.output, std::slice::from_ref(&host), "host", "hostname", "no host", |h| {
                    Ok(render_hosts(now, h, a.output.is_wide()))
                });
            }
            let page = a.page_size as usize;
            let mut q = vec![("limit", a.limit.map_or(page, |l| (l as usize).min(page)).to_string())];
            if let Some(st) = &a.state {
                q.push(("state", st.clone()));
            }
            let hosts = list_all(&s, "/v1/hosts", &q, "items", a.limit.map(|l| l as usize))?;
            show(a.output, &hosts, "host", "hostname", "no hosts", |h| Ok(render_hosts(now, h, a.output.is_wide())))
        }
        GetWhat::Rollouts(a) => {
            let s = Session::open(&a.connect)?;
            if let (true, Some(version)) = (a.watch, a.release) {
                let ids = crate::wait::release_rollouts(&s, version)?;
                return crate::wait::wait_rollouts(&s, &ids, std::time::Duration::from_secs(a.timeout), &mut std::io::stdout().lock());
            }
            if a.watch {
                let opts = crate::watch::WatchOptions::new(None, true, std::time::Duration::from_secs(a.timeout));
                return crate::watch::watch_stdout(&s, &opts);
            }
            let mut q = Vec::new();
            if let Some(st) = &a.state {
                q.push(("state", st.clone()));
            }
            if let Some(c) = &a.channel {
                q.push(("channel", c.clone()));
            }
            let rollouts = list_all(&s, "/v1/rollouts", &q, "items", None)?;
            show(a.output, &rollouts, "rollout", "rolloutId", "no rollouts", |r| Ok(render_rollouts(now, r, a.output.is_wide())))
        }
        GetWhat::Jobs(a) => {
            let s = Session::open(&a.connect)?;
            let mut q = Vec::new();
            if let Some(h) = &a.host {
                q.push(("host", crate::resolve::host(&s, "--host", h)?.id.to_string()));
            }
            if let Some(st) = a.state {
                q.push(("state", st.wire().to_owned()));
            }
            if let Some(k) = a.kind {
                q.push(("kind", k.wire().to_owned()));
            }
            let jobs = list_all(&s, "/v1/jobs", &q, "items", None)?;
            show(a.output, &jobs, "job", "jobId", "no jobs", |j| render_jobs(j, a.output.is_wide()))
        }
        GetWhat::Tasks(a) => {
            let s = Session::open(&a.connect)?;
            let mut q = Vec::new();
            if let Some(h) = &a.host {
                q.push(("host", crate::resolve::host(&s, "--host", h)?.id.to_string()));
            }
            if let Some(j) = &a.job {
                q.push(("job", crate::job::parse_host_id("--job", j)?.to_string()));
            }
            if let Some(st) = &a.state {
                q.push(("state", st.clone()));
            }
            let tasks = list_all(&s, "/v1/tasks", &q, "items", None)?;
            show(a.output, &tasks, "task", "taskId", "no tasks", |t| Ok(render_tasks(now, t, &hostnames(&s)?, a.output.is_wide())))
        }
        GetWhat::Events(a) => crate::events::run(a),
        GetWhat::Onboardings(a) => crate::onboarding::run_list(a),
        GetWhat::Drift(a) => crate::drift::run_list(a),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn now() -> drover_proto::time::Time {
        drover_proto::time::Time::parse_lenient("2025-01-01T01:00:00Z").expect("time")
    }

    #[test]
    fn queries_are_encoded() {
        assert_eq!(with_query("/v1/hosts", &[]), "/v1/hosts");
        assert_eq!(with_query("/v1/events", &[("kind", "a b&c".into()), ("after", "7".into())]), "/v1/events?kind=a%20b%26c&after=7");
    }

    #[test]
    fn hosts_render_with_and_without_wide_columns() {
        let hosts = vec![
            json!({"id": "0b1c", "hostname": "gpu-a-01", "state": "active", "schedulable": true, "createdAt": "2025-01-01T00:00:00Z",
                   "lastCheckin": {"at": "2025-01-01T00:59:30Z", "agentVersion": "0.1.0", "bootId": "b", "currentGeneration": null},
                   "channel": "training", "wave": 2}),
            json!({"id": "9f9f", "hostname": "infra-01\u{1b}[2J", "state": "quarantined", "schedulable": false,
                   "createdAt": "2025-01-01T00:30:00Z", "lastCheckin": null}),
        ];
        let t = render_hosts(now(), &hosts, false);
        assert_eq!(
            t,
            "NAME          STATE        SCHEDULABLE    LAST-CHECKIN  AGE\n\
             gpu-a-01      active       yes            30s           60m\n\
             infra-01 [2J  quarantined  no (cordoned)  never         30m\n"
        );
        let w = render_hosts(now(), &hosts, true);
        assert!(w.lines().next().expect("header").ends_with("AGE  ID    AGENT  CHANNEL   WAVE  GENERATION"), "{w}");
        assert!(w.contains("0b1c  0.1.0  training  2     -"), "{w}");
        assert!(w.contains("9f9f  -      -         -     -"), "a host no rollout names: {w}");
    }

    #[test]
    fn rollouts_and_tasks_render() {
        let r = vec![json!({"rolloutId": "gpu@c0ffee", "channel": "gpu", "state": "Active", "manifestSha256": "ab",
                             "openedAt": "2025-01-01T00:00:00Z", "updatedAt": "2025-01-01T00:58:00Z"})];
        assert_eq!(render_rollouts(now(), &r, false), "ROLLOUT     CHANNEL  STATE   AGE  CHANGED\ngpu@c0ffee  gpu      Active  60m  2m\n");
        assert!(render_rollouts(now(), &r, true).contains("MANIFEST-SHA256"));
        let skipped =
            vec![json!({"rolloutId": "gpu@c0ffee", "channel": "gpu", "state": "Converged", "hosts": {"Converged": 8, "Skipped": 2},
                                   "openedAt": "2025-01-01T00:00:00Z", "updatedAt": "2025-01-01T00:58:00Z"})];
        assert!(
            render_rollouts(now(), &skipped, false).contains("gpu@c0ffee  gpu      Converged (2 skipped)  60m"),
            "a rollout that skipped hosts says so"
        );
        let t = vec![json!({"taskId": "t1", "hostId": "h1", "type": "node.gpu_scrub", "state": "completed", "attempts": 1,
                             "createdAt": "2025-01-01T00:59:00Z", "result": {"outcome": "succeeded"}})];
        let names = BTreeMap::from([("h1".to_owned(), "gpu-a-01".to_owned())]);
        let out = render_tasks(now(), &t, &names, false);
        assert!(out.contains("t1    node.gpu_scrub  gpu-a-01  completed  1         succeeded  60s"), "{out}");
    }
}
