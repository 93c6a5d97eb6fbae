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
//!   ([`crate::onboarding_manage`]), with the batch's counts by state under `--batch`.
//! - `get drift [--site SITE]`: hosts with an open MAAS drift ([`crate::drift`]).
//!
//! A host, as a filter or as `get host HOST`, is a hostname or an id ([`crate::resolve`]).
//! Every listing reads all its pages through [`crate::listing`]; the jobs table is
//! [`crate::job_view`]'s.

use std::collections::BTreeMap;

use clap::{Args, Subcommand};
use drover_proto::api::hosts::{HostDetail, HostView};
use drover_proto::api::jobs::JobJson;
use drover_proto::api::rollouts::RolloutView;
use drover_proto::api::tasks::TaskView;
use drover_proto::report::TaskOutcome;
use drover_proto::states::HostRolloutState;
use drover_proto::time::Time;
use serde_json::Value;

use crate::answer::decode_all;
use crate::client::{ConnectArgs, Session};
use crate::exit::CliError;
use crate::job_view::{host_of, render_job_table};
use crate::listing::{PAGE, hostnames, list_all};
use crate::output::{ListOutputArgs, age_of, clean, dash, print, table};
use crate::workflow::{JobKind, JobState};

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
    Onboardings(crate::onboarding_manage::ListArgs),
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
pub fn render_hosts(now: Time, hosts: &[HostView], wide: bool) -> String {
    let rows: Vec<Vec<String>> = hosts
        .iter()
        .map(|h| {
            let c = h.last_checkin.as_ref();
            let mut row = vec![
                clean(&h.hostname, 64),
                h.state.as_str().to_owned(),
                if h.schedulable { "yes" } else { "no (cordoned)" }.to_owned(),
                c.map_or_else(|| "never".to_owned(), |c| age_of(now, c.at)),
                age_of(now, h.created_at),
            ];
            if wide {
                let opt = |v: Option<&str>, max: usize| clean(dash(v.unwrap_or("")), max);
                row.extend([
                    clean(&h.id, 40),
                    opt(c.map(|c| c.agent_version.as_str()), 80),
                    opt(h.channel.as_deref(), 64),
                    h.wave.map_or_else(|| "-".to_owned(), |w| w.to_string()),
                    opt(c.and_then(|c| c.current_generation.as_deref()), 80),
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
pub fn render_rollouts(now: Time, rollouts: &[RolloutView], wide: bool) -> String {
    let rows: Vec<Vec<String>> = rollouts
        .iter()
        .map(|r| {
            let skipped = r.hosts.get(&HostRolloutState::Skipped).map_or(0, |n| usize::try_from(*n).unwrap_or(usize::MAX));
            let mut row = vec![
                clean(&r.rollout.rollout_id, 80),
                clean(&r.rollout.channel, 64),
                crate::watch::state_label(r.rollout.state.as_str(), skipped),
                age_of(now, r.rollout.opened_at),
                age_of(now, r.rollout.updated_at),
            ];
            if wide {
                row.extend([r.rollout.opened_at.to_string(), clean(&r.rollout.manifest_sha256, 64)]);
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

/// The tasks table (`names`: host id → hostname).
pub fn render_tasks(now: Time, tasks: &[TaskView], names: &BTreeMap<String, String>, wide: bool) -> String {
    let rows: Vec<Vec<String>> = tasks
        .iter()
        .map(|t| {
            let outcome = t.result.as_ref().map_or("-", |r| match r.outcome {
                TaskOutcome::Succeeded => "succeeded",
                TaskOutcome::Failed => "failed",
                TaskOutcome::Refused => "refused",
            });
            let at = |v: Option<Time>| v.map_or_else(|| "-".to_owned(), |t| t.to_string());
            let mut row = vec![
                clean(&t.task_id, 40),
                clean(&t.kind, 48),
                clean(names.get(&t.host_id).unwrap_or(&t.host_id), 64),
                t.state.as_str().to_owned(),
                t.attempts.to_string(),
                outcome.to_owned(),
                age_of(now, t.created_at),
            ];
            if wide {
                row.extend([clean(dash(t.job_id.as_deref().unwrap_or("")), 40), at(t.lease_expires_at), at(t.completed_at)]);
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
fn render_jobs(jobs: &[JobJson], wide: bool) -> String {
    if !wide {
        return render_job_table(jobs);
    }
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|j| {
            vec![
                clean(&j.job_id, 40),
                clean(&j.kind, 32),
                host_of(j),
                j.state.as_str().to_owned(),
                clean(dash(&j.stage), 32),
                j.attempt.to_string(),
                clean(dash(j.host_id.as_deref().unwrap_or("")), 40),
                clean(dash(j.request_id.as_deref().unwrap_or("")), 40),
                j.updated_at.to_string(),
                clean(dash(&j.message), 60),
            ]
        })
        .collect();
    table(&["JOB", "KIND", "HOST", "STATE", "STAGE", "ATTEMPT", "HOST-ID", "REQUEST", "UPDATED", "MESSAGE"], &rows)
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
                let path = format!("/v1/hosts/{id}");
                let host: Value = s.get(&path)?;
                let detail: HostDetail = crate::answer::decode(&path, &host)?;
                if a.output.is_json() {
                    return print(&crate::output::pretty(&host)?);
                }
                return show(a.output, std::slice::from_ref(&host), "host", "hostname", "no host", |_| {
                    Ok(render_hosts(now, std::slice::from_ref(&detail.host), a.output.is_wide()))
                });
            }
            let page = a.page_size as usize;
            let mut q = vec![("limit", a.limit.map_or(page, |l| (l as usize).min(page)).to_string())];
            if let Some(st) = &a.state {
                q.push(("state", st.clone()));
            }
            let hosts = list_all(&s, "/v1/hosts", &q, a.limit.map(|l| l as usize))?;
            show(a.output, &hosts, "host", "hostname", "no hosts", |h| {
                Ok(render_hosts(now, &decode_all("/v1/hosts", h)?, a.output.is_wide()))
            })
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
            let rollouts = list_all(&s, "/v1/rollouts", &q, None)?;
            show(a.output, &rollouts, "rollout", "rolloutId", "no rollouts", |r| {
                Ok(render_rollouts(now, &decode_all("/v1/rollouts", r)?, a.output.is_wide()))
            })
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
            let jobs = list_all(&s, "/v1/jobs", &q, None)?;
            show(a.output, &jobs, "job", "jobId", "no jobs", |j| Ok(render_jobs(&decode_all("/v1/jobs", j)?, a.output.is_wide())))
        }
        GetWhat::Tasks(a) => {
            let s = Session::open(&a.connect)?;
            let mut q = Vec::new();
            if let Some(h) = &a.host {
                q.push(("host", crate::resolve::host(&s, "--host", h)?.id.to_string()));
            }
            if let Some(j) = &a.job {
                q.push(("job", crate::arg_checks::parse_host_id("--job", j)?.to_string()));
            }
            if let Some(st) = &a.state {
                q.push(("state", st.clone()));
            }
            let tasks = list_all(&s, "/v1/tasks", &q, None)?;
            show(a.output, &tasks, "task", "taskId", "no tasks", |t| {
                Ok(render_tasks(now, &decode_all("/v1/tasks", t)?, &hostnames(&s)?, a.output.is_wide()))
            })
        }
        GetWhat::Events(a) => crate::events::run(a),
        GetWhat::Onboardings(a) => crate::onboarding_manage::run_list(a),
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

    /// Rows as the coordinator writes them, decoded as the CLI reads them.
    fn rows<T: serde::de::DeserializeOwned>(v: Vec<Value>) -> Vec<T> {
        decode_all("/v1/test", &v).expect("rows the coordinator would write")
    }

    #[test]
    fn hosts_render_with_and_without_wide_columns() {
        let hosts = vec![
            json!({"id": "0b1c", "hostId": "0b1c", "hostname": "gpu-a-01", "state": "active", "schedulable": true,
                   "createdAt": "2025-01-01T00:00:00Z", "updatedAt": "2025-01-01T00:00:00Z",
                   "lastCheckin": {"at": "2025-01-01T00:59:30Z", "agentVersion": "0.1.0", "bootId": "b", "currentGeneration": null},
                   "channel": "training", "wave": 2}),
            json!({"id": "9f9f", "hostId": "9f9f", "hostname": "infra-01\u{1b}[2J", "state": "quarantined", "schedulable": false,
                   "createdAt": "2025-01-01T00:30:00Z", "updatedAt": "2025-01-01T00:30:00Z", "lastCheckin": null}),
        ];
        let hosts: Vec<HostView> = rows(hosts);
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
        let r: Vec<RolloutView> =
            rows(vec![json!({"rolloutId": "gpu@c0ffee", "channel": "gpu", "state": "Active", "manifestSha256": "ab",
                             "openedAt": "2025-01-01T00:00:00Z", "updatedAt": "2025-01-01T00:58:00Z", "hosts": {}})]);
        assert_eq!(render_rollouts(now(), &r, false), "ROLLOUT     CHANNEL  STATE   AGE  CHANGED\ngpu@c0ffee  gpu      Active  60m  2m\n");
        assert!(render_rollouts(now(), &r, true).contains("MANIFEST-SHA256"));
        let skipped: Vec<RolloutView> = rows(vec![json!({"rolloutId": "gpu@c0ffee", "channel": "gpu", "state": "Converged",
            "manifestSha256": "ab", "hosts": {"Converged": 8, "Skipped": 2},
            "openedAt": "2025-01-01T00:00:00Z", "updatedAt": "2025-01-01T00:58:00Z"})]);
        assert!(
            render_rollouts(now(), &skipped, false).contains("gpu@c0ffee  gpu      Converged (2 skipped)  60m"),
            "a rollout that skipped hosts says so"
        );
        let t: Vec<TaskView> = rows(vec![json!({"taskId": "t1", "hostId": "h1", "type": "node.gpu_scrub", "state": "completed",
            "attempts": 1, "createdAt": "2025-01-01T00:59:00Z",
            "result": {"taskId": "t1", "outcome": "succeeded", "steps": [],
                       "startedAt": "2025-01-01T00:59:10Z", "finishedAt": "2025-01-01T00:59:20Z"}})]);
        let names = BTreeMap::from([("h1".to_owned(), "gpu-a-01".to_owned())]);
        let out = render_tasks(now(), &t, &names, false);
        assert!(out.contains("t1    node.gpu_scrub  gpu-a-01  completed  1         succeeded  60s"), "{out}");
    }
}
