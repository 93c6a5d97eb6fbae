//! `drover describe host H | rollout R | job J | onboarding ID`: one object in full, in
//! sections, like `kubectl describe` (viewer role); `-o json` prints the coordinator's JSON for
//! the object unchanged (`GET /v1/hosts/{id}`, `GET /v1/rollouts/{id}/status`, `GET
//! /v1/jobs/{id}`, `GET /v1/maas/onboardings/{id}`).
//!
//! - host (hostname or id): identity, lifecycle, last check-in, certificates, the agent's
//!   latest health report (GPUs, disks, load, memory, failed units, probe results) as the
//!   coordinator stored it, its jobs and its latest events (`GET /v1/events?host=`).
//! - rollout (its id `CHANNEL@REF`, a unique prefix of it, or a channel: [`crate::resolve`]): state, per-wave progress with the bars of the `--watch` view,
//!   every host's state and target, the latest events (`GET /v1/events?rollout=`);
//!   `--watch` turns it into the live view of that rollout ([`crate::watch`]).
//! - job: the view of `drover job describe` (stages, history, events).
//! - onboarding: a MAAS onboarding's request, state, stage, failure, diagnostics and per-stage
//!   events ([`crate::onboarding::render_describe`]).

use std::fmt::Write as _;

use clap::{Args, Subcommand};
use serde_json::Value;

use crate::client::{ConnectArgs, Session};
use crate::exit::CliError;
use crate::get::{encode, list_all};
use crate::job::{check_job_id, clean};
use crate::output::{OutputArgs, age, dash, field, indented_table, pretty, print};

/// Arguments of `drover describe`.
#[derive(Args)]
pub struct DescribeArgs {
    #[command(subcommand)]
    what: DescribeWhat,
}

#[derive(Subcommand)]
enum DescribeWhat {
    /// A host: lifecycle, last check-in, certificates, health, jobs, latest events.
    Host(HostArgs),
    /// A rollout: state, per-wave progress, every host's state, latest events.
    Rollout(RolloutArgs),
    /// A job: stages, attempt, task, failure, history, events.
    Job(JobArgs),
    /// A MAAS onboarding: request, state, stage, failure, diagnostics, per-stage events.
    Onboarding(crate::onboarding::DescribeArgs),
}

/// Arguments of `drover describe host`.
#[derive(Args)]
struct HostArgs {
    /// The host: its hostname or its id.
    host: String,
    /// How many of the latest events to show.
    #[arg(long, value_name = "N", default_value_t = 20)]
    events: usize,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    connect: ConnectArgs,
}

/// Arguments of `drover describe rollout`.
#[derive(Args)]
struct RolloutArgs {
    /// The rollout: its id (CHANNEL@REF), a unique prefix of it, or a channel (its current
    /// rollout).
    rollout: String,
    /// How many of the latest events to show.
    #[arg(long, value_name = "N", default_value_t = 20)]
    events: usize,
    /// Live progress of this rollout until it finishes or --timeout passes.
    #[arg(short = 'w', long)]
    watch: bool,
    /// With --watch: give up after this many seconds (exit 75).
    #[arg(long, value_name = "SECS", default_value_t = 3600, requires = "watch")]
    timeout: u64,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    connect: ConnectArgs,
}

/// Arguments of `drover describe job`.
#[derive(Args)]
struct JobArgs {
    /// The job's id.
    job: String,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    connect: ConnectArgs,
}

/// One `Name:  value` line (at least one space after a long name).
fn line(out: &mut String, name: &str, value: &str) {
    let _ = writeln!(out, "{:<14} {}", format!("{name}:"), clean(dash(value), 300));
}

/// The latest `n` events, as a section.
fn events_section(out: &mut String, events: &[Value], n: usize) {
    let _ = writeln!(out, "Events (latest {}):", n.min(events.len()));
    let start = events.len().saturating_sub(n);
    let rows: Vec<Vec<String>> = events[start..]
        .iter()
        .map(|e| {
            vec![
                e.get("id").and_then(Value::as_i64).map_or_else(|| "-".to_owned(), |i| i.to_string()),
                clean(field(e, "at"), 40),
                clean(field(e, "kind"), 48),
                clean(dash(field(e, "message")), 120),
            ]
        })
        .collect();
    out.push_str(&indented_table(&["ID", "AT", "KIND", "MESSAGE"], &rows));
}

/// The human view of a host (`GET /v1/hosts/{id}`), its jobs and events.
pub fn render_host(now: drover_proto::time::Time, host: &Value, jobs: &[Value], events: &[Value], n: usize) -> String {
    let mut out = String::new();
    line(&mut out, "Name", field(host, "hostname"));
    line(&mut out, "ID", field(host, "id"));
    line(&mut out, "State", field(host, "state"));
    let schedulable = host.get("schedulable").and_then(Value::as_bool).unwrap_or(false);
    line(&mut out, "Schedulable", if schedulable { "yes" } else { "no (cordoned)" });
    line(&mut out, "Created", field(host, "createdAt"));
    line(&mut out, "Updated", field(host, "updatedAt"));
    // The rollout opened last that names the host: which channel and wave it is in.
    match host.get("wave").and_then(Value::as_u64) {
        None => line(&mut out, "Channel", "none (no rollout names this host)"),
        Some(wave) => {
            let place =
                format!("{} (wave {wave}; {} in {})", field(host, "channel"), field(host, "rolloutState"), field(host, "rolloutId"));
            line(&mut out, "Channel", &place);
        }
    }
    match host.get("lastCheckin").filter(|c| !c.is_null()) {
        None => line(&mut out, "Last check-in", "never"),
        Some(c) => {
            let at = field(c, "at");
            line(&mut out, "Last check-in", &format!("{at} ({} ago)", age(now, Some(at))));
            line(&mut out, "  Agent", field(c, "agentVersion"));
            line(&mut out, "  Boot ID", field(c, "bootId"));
            line(&mut out, "  Generation", field(c, "currentGeneration"));
        }
    }
    out.push_str("Certificates:\n");
    let certs: Vec<Vec<String>> = host
        .get("certificates")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| {
            let revoked = if c.get("revoked").and_then(Value::as_bool).unwrap_or(false) {
                format!("yes {}", field(c, "revokedAt"))
            } else {
                "no".to_owned()
            };
            vec![
                clean(field(c, "serial"), 64),
                clean(field(c, "kind"), 16),
                clean(field(c, "notBefore"), 40),
                clean(field(c, "notAfter"), 40),
                clean(revoked.trim(), 60),
            ]
        })
        .collect();
    out.push_str(&indented_table(&["SERIAL", "KIND", "NOT-BEFORE", "NOT-AFTER", "REVOKED"], &certs));
    health_section(&mut out, now, host.get("health").filter(|h| !h.is_null()));
    out.push_str("Jobs:\n");
    let jobs: Vec<Vec<String>> = jobs
        .iter()
        .map(|j| {
            vec![
                clean(field(j, "jobId"), 40),
                clean(field(j, "kind"), 32),
                clean(field(j, "state"), 32),
                clean(dash(field(j, "stage")), 32),
            ]
        })
        .collect();
    out.push_str(&indented_table(&["JOB", "KIND", "STATE", "STAGE"], &jobs));
    events_section(&mut out, events, n);
    out
}

/// Bytes in GiB with one decimal, the unit a GPU host's disks and memory read in.
fn gib(v: Option<&Value>) -> String {
    v.and_then(Value::as_u64).map_or_else(|| "-".to_owned(), |b| format!("{:.1} GiB", b as f64 / f64::from(1u32 << 30)))
}

/// The host's latest health report (`health` of `GET /v1/hosts/{id}`): when it arrived, the
/// agent's own view (GPUs, load, memory, disks, failed units) and each probe's last result.
fn health_section(out: &mut String, now: drover_proto::time::Time, health: Option<&Value>) {
    let Some(h) = health else {
        line(out, "Health", "no health report yet");
        return;
    };
    let at = field(h, "reportedAt");
    line(out, "Health", &format!("reported {at} ({} ago)", age(now, Some(at))));
    match h.get("health").filter(|r| !r.is_null()) {
        // A check-in may carry probe results without a health report.
        None => line(out, "  Report", "none in the latest check-in"),
        Some(r) => {
            let gpu = match r.get("gpu").filter(|g| !g.is_null()) {
                None => "none".to_owned(),
                Some(g) => {
                    let n = |k: &str| g.get(k).and_then(Value::as_u64).unwrap_or(0);
                    format!("{} {} ({} unhealthy)", field(g, "vendor"), n("count"), n("unhealthy"))
                }
            };
            line(out, "  GPUs", &gpu);
            let load = r.get("loadAvg1m").and_then(Value::as_f64).map_or_else(|| "-".to_owned(), |l| format!("{l:.2}"));
            let cpu = r.get("cpuUsagePct").and_then(Value::as_f64).map(|c| format!(", CPU {c:.0}% busy")).unwrap_or_default();
            line(out, "  Load (1m)", &format!("{load}{cpu}"));
            line(out, "  Memory", &format!("{} available of {}", gib(r.get("memAvailableBytes")), gib(r.get("memTotalBytes"))));
            let units: Vec<&str> = r.get("failedUnits").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
            line(out, "  Failed units", &if units.is_empty() { "none".to_owned() } else { units.join(", ") });
            out.push_str("  Disks:\n");
            let disks: Vec<Vec<String>> = r
                .get("disks")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|d| vec![clean(field(d, "mountPoint"), 120), gib(d.get("totalBytes")), gib(d.get("availableBytes"))])
                .collect();
            for l in indented_table(&["MOUNT", "SIZE", "AVAILABLE"], &disks).lines() {
                let _ = writeln!(out, "  {l}");
            }
        }
    }
    out.push_str("  Probes:\n");
    let probes: Vec<Vec<String>> = h
        .get("probes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|p| {
            vec![
                clean(field(p, "name"), 64),
                clean(field(p, "outcome"), 16),
                clean(field(p, "mode"), 16),
                age(now, p.get("observedAt").and_then(Value::as_str)),
                clean(dash(field(p, "message")), 120),
            ]
        })
        .collect();
    for l in indented_table(&["NAME", "OUTCOME", "MODE", "AGE", "MESSAGE"], &probes).lines() {
        let _ = writeln!(out, "  {l}");
    }
}

/// The human view of a rollout's `/status`, its manifest's hosts (hostname → wave, when
/// known) and its events.
pub fn render_rollout(status: &Value, manifest: Option<&std::collections::BTreeMap<String, u32>>, events: &[Value], n: usize) -> String {
    let mut out = String::new();
    line(&mut out, "Rollout", field(status, "rolloutId"));
    line(&mut out, "Channel", field(status, "channel"));
    let skipped =
        status.get("hosts").and_then(Value::as_array).map_or(0, |hs| hs.iter().filter(|h| field(h, "state") == "Skipped").count());
    line(&mut out, "State", &crate::rollout::state_label(field(status, "state"), skipped));
    line(&mut out, "Manifest", field(status, "manifestSha256"));
    line(&mut out, "Opened", field(status, "openedAt"));
    line(&mut out, "Updated", field(status, "updatedAt"));
    out.push_str("Waves:\n");
    let progress = crate::watch::progress_of(status, manifest);
    if progress.waves.is_empty() {
        out.push_str("  (none)\n");
    }
    for l in crate::watch::render(&crate::watch::Snapshot { at: String::new(), rollouts: vec![progress] }).lines().skip(2) {
        let _ = writeln!(out, "{l}");
    }
    out.push_str("Hosts:\n");
    let mut rows: Vec<Vec<String>> = status
        .get("hosts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|h| {
            vec![
                clean(field(h, "hostname"), 64),
                h.get("waveIndex").and_then(Value::as_u64).map_or_else(|| "-".to_owned(), |w| w.to_string()),
                clean(field(h, "state"), 32),
                clean(field(h, "since"), 40),
                clean(dash(field(h, "intentTarget")), 120),
            ]
        })
        .collect();
    let recorded: std::collections::BTreeSet<String> = rows.iter().map(|r| r[0].clone()).collect();
    for (host, wave) in manifest.into_iter().flatten() {
        if !recorded.contains(host) {
            rows.push(vec![clean(host, 64), wave.to_string(), "Pending".to_owned(), "-".to_owned(), "-".to_owned()]);
        }
    }
    rows.sort_by(|a, b| (a[1].parse::<u32>().unwrap_or(u32::MAX), &a[0]).cmp(&(b[1].parse::<u32>().unwrap_or(u32::MAX), &b[0])));
    out.push_str(&indented_table(&["HOST", "WAVE", "STATE", "SINCE", "TARGET"], &rows));
    events_section(&mut out, events, n);
    out
}

/// Runs `drover describe`.
pub fn run(args: &DescribeArgs) -> Result<(), CliError> {
    match &args.what {
        DescribeWhat::Host(a) => {
            let s = Session::open(&a.connect)?;
            // An id goes straight to the host's route, which refuses an unknown one itself.
            let id = crate::resolve::host_id(&s, "HOST", &a.host)?;
            let host = s.get(&format!("/v1/hosts/{id}"))?;
            if a.output.output.is_json() {
                return print(&pretty(&host)?);
            }
            let jobs = list_all(&s, "/v1/jobs", &[("host", id.to_string())], "items", None)?;
            let events = list_all(&s, "/v1/events", &[("host", id.to_string()), ("limit", "500".into())], "items", None)?;
            print(&render_host(crate::clock::now()?, &host, &jobs, &events, a.events))
        }
        DescribeWhat::Rollout(a) => {
            let s = Session::open(&a.connect)?;
            let id = crate::resolve::rollout(&s, "ROLLOUT", &a.rollout)?;
            if a.watch {
                let opts = crate::watch::WatchOptions::new(Some(id), true, std::time::Duration::from_secs(a.timeout));
                return crate::watch::watch_stdout(&s, &opts);
            }
            let status = s.get(&format!("/v1/rollouts/{}/status", encode(&id.to_string())))?;
            if a.output.output.is_json() {
                return print(&pretty(&status)?);
            }
            let events = list_all(&s, "/v1/events", &[("rollout", id.to_string()), ("limit", "500".into())], "items", None)?;
            let manifests = crate::watch::manifests(&s.client, &s.runtime);
            print(&render_rollout(&status, manifests.get(&id.to_string()), &events, a.events))
        }
        DescribeWhat::Job(a) => {
            let path = format!("/v1/jobs/{}", check_job_id(&a.job)?);
            let s = Session::open(&a.connect)?;
            let value = s.get(&path)?;
            crate::job::print_answer(a.output.output, &path, &value, crate::job::render_describe)
        }
        DescribeWhat::Onboarding(a) => crate::onboarding::run_describe(a),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_host_is_described_in_sections() {
        let now = drover_proto::time::Time::parse_lenient("2025-01-01T01:00:00Z").expect("time");
        let host = json!({"id": "h1", "hostname": "gpu-a-01", "state": "active", "schedulable": true,
            "createdAt": "2025-01-01T00:00:00Z", "updatedAt": "2025-01-01T00:10:00Z",
            "channel": "gpu", "wave": 1, "rolloutId": "gpu@c0ffee", "rolloutState": "Soaking",
            "lastCheckin": {"at": "2025-01-01T00:59:00Z", "agentVersion": "0.1.0", "bootId": "b1", "currentGeneration": "/nix/store/x"},
            "certificates": [{"serial": "0a", "kind": "host", "notBefore": "2025-01-01T00:00:00Z", "notAfter": "2025-02-01T00:00:00Z", "revoked": false}]});
        let events: Vec<Value> =
            (1..=3).map(|i| json!({"id": i, "at": "2025-01-01T00:00:00Z", "kind": "host.state", "message": format!("m{i}")})).collect();
        let out = render_host(now, &host, &[], &events, 2);
        for needle in [
            "Name:          gpu-a-01\n",
            "Channel:       gpu (wave 1; Soaking in gpu@c0ffee)\n",
            "Last check-in: 2025-01-01T00:59:00Z (60s ago)\n",
            "  Generation:  /nix/store/x\n",
            "  0a      host",
            "Jobs:\n  (none)\n",
            "Events (latest 2):\n",
            "  3   2025-01-01T00:00:00Z  host.state  m3\n",
        ] {
            assert!(out.contains(needle), "{needle:?} in\n{out}");
        }
        assert!(!out.contains("m1"), "{out}");
        assert!(out.contains("Health:        no health report yet\n"), "{out}");
    }

    #[test]
    fn a_hosts_stored_health_report_is_shown() {
        let now = drover_proto::time::Time::parse_lenient("2025-01-01T01:00:00Z").expect("time");
        let host = json!({"id": "h1", "hostname": "gpu-a-01", "state": "active", "schedulable": true, "certificates": [],
            "health": {"reportedAt": "2025-01-01T00:59:30Z",
                "health": {"collectedAt": "2025-01-01T00:59:29Z", "uptimeSecs": 60, "loadAvg1m": 1.5, "cpuUsagePct": 12.0,
                    "memTotalBytes": 68_719_476_736u64, "memAvailableBytes": 34_359_738_368u64,
                    "disks": [{"mountPoint": "/", "totalBytes": 107_374_182_400u64, "availableBytes": 10_737_418_240u64}],
                    "failedUnits": ["nvidia-persistenced.service"], "gpu": {"vendor": "nvidia", "count": 8, "unhealthy": 1}},
                "probes": [{"name": "nccl", "outcome": "failed", "mode": "enforce", "message": "exit 3", "durationMs": 5,
                    "observedAt": "2025-01-01T00:59:00Z"}]}});
        let out = render_host(now, &host, &[], &[], 20);
        for needle in [
            "Health:        reported 2025-01-01T00:59:30Z (30s ago)\n",
            "  GPUs:        nvidia 8 (1 unhealthy)\n",
            "  Load (1m):   1.50, CPU 12% busy\n",
            "  Memory:      32.0 GiB available of 64.0 GiB\n",
            "  Failed units: nvidia-persistenced.service\n",
            "    MOUNT  SIZE       AVAILABLE\n    /      100.0 GiB  10.0 GiB\n",
            "    NAME  OUTCOME  MODE     AGE  MESSAGE\n    nccl  failed   enforce  60s  exit 3\n",
        ] {
            assert!(out.contains(needle), "{needle:?} in\n{out}");
        }
    }

    #[test]
    fn a_rollout_lists_pending_manifest_hosts_by_wave() {
        let status = json!({"rolloutId": "gpu@c0ffee", "channel": "gpu", "state": "Active", "manifestSha256": "ab",
            "openedAt": "2025-01-01T00:00:00Z", "updatedAt": "2025-01-01T00:00:00Z",
            "hosts": [{"hostname": "gpu-a-01", "waveIndex": 0, "state": "Activating", "since": "2025-01-01T00:01:00Z", "intentTarget": "/nix/store/t"}]});
        let manifest = std::collections::BTreeMap::from([("gpu-a-01".to_owned(), 0), ("gpu-b-01".to_owned(), 1)]);
        let out = render_rollout(&status, Some(&manifest), &[], 20);
        assert!(out.contains("  wave 0  [~~~~~~~~~~~~~~~~~~~~]  0/1  Activating 1\n"), "{out}");
        assert!(out.contains("  wave 1  [--------------------]  0/1  Pending 1\n"), "{out}");
        assert!(out.contains("  gpu-a-01  0     Activating  2025-01-01T00:01:00Z  /nix/store/t\n  gpu-b-01  1     Pending     -"), "{out}");
        assert!(out.contains("Events (latest 0):\n  (none)\n"), "{out}");
    }

    #[test]
    fn a_converged_rollout_that_skipped_hosts_says_so() {
        let host = |name: &str, state: &str| json!({"hostname": name, "waveIndex": 0, "state": state, "since": "2025-01-01T00:01:00Z"});
        let status = json!({"rolloutId": "gpu@c0ffee", "channel": "gpu", "state": "Converged", "manifestSha256": "ab",
            "openedAt": "2025-01-01T00:00:00Z", "updatedAt": "2025-01-01T00:00:00Z",
            "hosts": [host("gpu-a-01", "Converged"), host("gpu-a-02", "Skipped")]});
        let out = render_rollout(&status, None, &[], 20);
        assert!(out.contains("State:         Converged (1 skipped)\n"), "{out}");
    }
}
