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
//!   events ([`crate::onboarding_manage::render_describe`]).

use std::fmt::Write as _;

use std::collections::BTreeMap;

use clap::{Args, Subcommand};
use drover_proto::api::events::EventView;
use drover_proto::api::hosts::{HealthView, HostDetail};
use drover_proto::api::jobs::JobJson;
use drover_proto::api::rollouts::RolloutStatus;
use drover_proto::states::HostRolloutState;
use drover_proto::time::Time;
use serde_json::Value;

use crate::answer::{decode, decode_all};
use crate::arg_checks::check_job_id;
use crate::client::{ConnectArgs, Session};
use crate::exit::CliError;
use crate::listing::{encode, list_all};
use crate::output::{OutputArgs, age_of, clean, dash, indented_table, pretty, print, wire};

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
    Onboarding(crate::onboarding_manage::DescribeArgs),
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
fn events_section(out: &mut String, events: &[EventView], n: usize) {
    let _ = writeln!(out, "Events (latest {}):", n.min(events.len()));
    let start = events.len().saturating_sub(n);
    let rows: Vec<Vec<String>> = events[start..]
        .iter()
        .map(|e| vec![e.id.to_string(), e.at.to_string(), clean(&e.kind, 48), clean(dash(&e.message), 120)])
        .collect();
    out.push_str(&indented_table(&["ID", "AT", "KIND", "MESSAGE"], &rows));
}

/// The human view of a host (`GET /v1/hosts/{id}`), its jobs and events.
pub fn render_host(now: Time, detail: &HostDetail, jobs: &[JobJson], events: &[EventView], n: usize) -> String {
    let host = &detail.host;
    let mut out = String::new();
    line(&mut out, "Name", &host.hostname);
    line(&mut out, "ID", &host.id);
    line(&mut out, "State", host.state.as_str());
    line(&mut out, "Schedulable", if host.schedulable { "yes" } else { "no (cordoned)" });
    line(&mut out, "Created", &host.created_at.to_string());
    line(&mut out, "Updated", &host.updated_at.to_string());
    // The rollout opened last that names the host: which channel and wave it is in.
    match host.wave {
        None => line(&mut out, "Channel", "none (no rollout names this host)"),
        Some(wave) => {
            let state = host.rollout_state.map_or("-", |s| s.as_str());
            let opt = |v: &Option<String>| v.clone().unwrap_or_default();
            let place = format!("{} (wave {wave}; {state} in {})", opt(&host.channel), opt(&host.rollout_id));
            line(&mut out, "Channel", &place);
        }
    }
    match &host.last_checkin {
        None => line(&mut out, "Last check-in", "never"),
        Some(c) => {
            line(&mut out, "Last check-in", &format!("{} ({} ago)", c.at, age_of(now, c.at)));
            line(&mut out, "  Agent", &c.agent_version);
            line(&mut out, "  Boot ID", &c.boot_id);
            line(&mut out, "  Generation", c.current_generation.as_deref().unwrap_or(""));
        }
    }
    out.push_str("Certificates:\n");
    let certs: Vec<Vec<String>> = detail
        .certificates
        .iter()
        .map(|c| {
            let revoked = match (c.revoked, c.revoked_at) {
                (true, Some(at)) => format!("yes {at}"),
                (true, None) => "yes".to_owned(),
                (false, _) => "no".to_owned(),
            };
            vec![clean(&c.serial, 64), clean(&c.kind, 16), c.not_before.to_string(), c.not_after.to_string(), revoked]
        })
        .collect();
    out.push_str(&indented_table(&["SERIAL", "KIND", "NOT-BEFORE", "NOT-AFTER", "REVOKED"], &certs));
    health_section(&mut out, now, detail.health.as_ref());
    out.push_str("Jobs:\n");
    let jobs: Vec<Vec<String>> = jobs
        .iter()
        .map(|j| vec![clean(&j.job_id, 40), clean(&j.kind, 32), j.state.as_str().to_owned(), clean(dash(&j.stage), 32)])
        .collect();
    out.push_str(&indented_table(&["JOB", "KIND", "STATE", "STAGE"], &jobs));
    events_section(&mut out, events, n);
    out
}

/// Bytes in GiB with one decimal, the unit a GPU host's disks and memory read in.
fn gib(b: u64) -> String {
    format!("{:.1} GiB", b as f64 / f64::from(1u32 << 30))
}

/// The host's latest health report (`health` of `GET /v1/hosts/{id}`): when it arrived, the
/// agent's own view (GPUs, load, memory, disks, failed units) and each probe's last result.
fn health_section(out: &mut String, now: Time, health: Option<&HealthView>) {
    let Some(h) = health else {
        line(out, "Health", "no health report yet");
        return;
    };
    line(out, "Health", &format!("reported {} ({} ago)", h.reported_at, age_of(now, h.reported_at)));
    match &h.report.health {
        // A check-in may carry probe results without a health report.
        None => line(out, "  Report", "none in the latest check-in"),
        Some(r) => {
            let gpu = match &r.gpu {
                None => "none".to_owned(),
                Some(g) => format!("{} {} ({} unhealthy)", clean(&g.vendor, 32), g.count, g.unhealthy),
            };
            line(out, "  GPUs", &gpu);
            let cpu = r.cpu_usage_pct.map(|c| format!(", CPU {c:.0}% busy")).unwrap_or_default();
            line(out, "  Load (1m)", &format!("{:.2}{cpu}", r.load_avg_1m));
            line(out, "  Memory", &format!("{} available of {}", gib(r.mem_available_bytes), gib(r.mem_total_bytes)));
            let units = &r.failed_units;
            line(out, "  Failed units", &if units.is_empty() { "none".to_owned() } else { units.join(", ") });
            out.push_str("  Disks:\n");
            let disks: Vec<Vec<String>> =
                r.disks.iter().map(|d| vec![clean(&d.mount_point, 120), gib(d.total_bytes), gib(d.available_bytes)]).collect();
            for l in indented_table(&["MOUNT", "SIZE", "AVAILABLE"], &disks).lines() {
                let _ = writeln!(out, "  {l}");
            }
        }
    }
    out.push_str("  Probes:\n");
    let probes: Vec<Vec<String>> = h
        .report
        .probes
        .iter()
        .map(|p| vec![clean(&p.name, 64), wire(&p.outcome), wire(&p.mode), age_of(now, p.observed_at), clean(dash(&p.message), 120)])
        .collect();
    for l in indented_table(&["NAME", "OUTCOME", "MODE", "AGE", "MESSAGE"], &probes).lines() {
        let _ = writeln!(out, "  {l}");
    }
}

/// The human view of a rollout's `/status`, its manifest's hosts (hostname → wave, when
/// known) and its events.
pub fn render_rollout(status: &RolloutStatus, manifest: Option<&BTreeMap<String, u32>>, events: &[EventView], n: usize) -> String {
    let r = &status.rollout;
    let mut out = String::new();
    line(&mut out, "Rollout", &r.rollout_id);
    line(&mut out, "Channel", &r.channel);
    let skipped = status.hosts.iter().filter(|h| h.state == HostRolloutState::Skipped).count();
    line(&mut out, "State", &crate::watch::state_label(r.state.as_str(), skipped));
    line(&mut out, "Manifest", &r.manifest_sha256);
    line(&mut out, "Opened", &r.opened_at.to_string());
    line(&mut out, "Updated", &r.updated_at.to_string());
    out.push_str("Waves:\n");
    let progress = crate::watch::progress_of(status, manifest);
    if progress.waves.is_empty() {
        out.push_str("  (none)\n");
    }
    for l in crate::watch::render(&crate::watch::Snapshot { at: String::new(), rollouts: vec![progress] }).lines().skip(2) {
        let _ = writeln!(out, "{l}");
    }
    out.push_str("Hosts:\n");
    let mut rows: Vec<(u32, Vec<String>)> = status
        .hosts
        .iter()
        .map(|h| {
            let row = vec![
                clean(&h.hostname, 64),
                h.wave_index.to_string(),
                h.state.as_str().to_owned(),
                h.since.to_string(),
                clean(dash(h.intent_target.as_deref().unwrap_or("")), 120),
            ];
            (h.wave_index, row)
        })
        .collect();
    let recorded: std::collections::BTreeSet<&str> = status.hosts.iter().map(|h| h.hostname.as_str()).collect();
    for (host, wave) in manifest.into_iter().flatten() {
        if !recorded.contains(host.as_str()) {
            rows.push((*wave, vec![clean(host, 64), wave.to_string(), "Pending".to_owned(), "-".to_owned(), "-".to_owned()]));
        }
    }
    rows.sort_by(|a, b| (a.0, &a.1[0]).cmp(&(b.0, &b.1[0])));
    let rows: Vec<Vec<String>> = rows.into_iter().map(|(_, r)| r).collect();
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
            let path = format!("/v1/hosts/{id}");
            let host: Value = s.get(&path)?;
            let detail: HostDetail = decode(&path, &host)?;
            if a.output.output.is_json() {
                return print(&pretty(&host)?);
            }
            let jobs = decode_all("/v1/jobs", &list_all(&s, "/v1/jobs", &[("host", id.to_string())], None)?)?;
            let q = [("host", id.to_string()), ("limit", "500".into())];
            let events = decode_all("/v1/events", &list_all(&s, "/v1/events", &q, None)?)?;
            print(&render_host(crate::clock::now()?, &detail, &jobs, &events, a.events))
        }
        DescribeWhat::Rollout(a) => {
            let s = Session::open(&a.connect)?;
            let id = crate::resolve::rollout(&s, "ROLLOUT", &a.rollout)?;
            if a.watch {
                let opts = crate::watch::WatchOptions::new(Some(id), true, std::time::Duration::from_secs(a.timeout));
                return crate::watch::watch_stdout(&s, &opts);
            }
            let path = format!("/v1/rollouts/{}/status", encode(&id.to_string()));
            let raw: Value = s.get(&path)?;
            let status: RolloutStatus = decode(&path, &raw)?;
            if a.output.output.is_json() {
                return print(&pretty(&raw)?);
            }
            let q = [("rollout", id.to_string()), ("limit", "500".into())];
            let events = decode_all("/v1/events", &list_all(&s, "/v1/events", &q, None)?)?;
            let manifests = crate::watch::manifests(&s.client, &s.runtime);
            print(&render_rollout(&status, manifests.get(&id.to_string()), &events, a.events))
        }
        DescribeWhat::Job(a) => {
            let path = format!("/v1/jobs/{}", check_job_id(&a.job)?);
            let s = Session::open(&a.connect)?;
            let value: Value = s.get(&path)?;
            crate::answer::print_answer(a.output.output, &path, &value, crate::job_view::render_describe)
        }
        DescribeWhat::Onboarding(a) => crate::onboarding_manage::run_describe(a),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// An answer as the coordinator writes it, decoded as the CLI reads it.
    fn decoded<T: serde::de::DeserializeOwned>(v: Value) -> T {
        decode("/v1/test", &v).expect("an answer the coordinator would write")
    }

    #[test]
    fn a_host_is_described_in_sections() {
        let now = drover_proto::time::Time::parse_lenient("2025-01-01T01:00:00Z").expect("time");
        let host = json!({"id": "h1", "hostId": "h1", "hostname": "gpu-a-01", "state": "active", "schedulable": true,
            "createdAt": "2025-01-01T00:00:00Z", "updatedAt": "2025-01-01T00:10:00Z",
            "channel": "gpu", "wave": 1, "rolloutId": "gpu@c0ffee", "rolloutState": "Soaking",
            "lastCheckin": {"at": "2025-01-01T00:59:00Z", "agentVersion": "0.1.0", "bootId": "b1", "currentGeneration": "/nix/store/x"},
            "certificates": [{"serial": "0a", "kind": "host", "notBefore": "2025-01-01T00:00:00Z", "notAfter": "2025-02-01T00:00:00Z", "revoked": false}]});
        let events: Vec<EventView> = (1..=3)
            .map(|i| {
                decoded(json!({"id": i, "at": "2025-01-01T00:00:00Z", "kind": "host.state", "message": format!("m{i}"), "data": null}))
            })
            .collect();
        let out = render_host(now, &decoded(host), &[], &events, 2);
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
        let host = json!({"id": "h1", "hostId": "h1", "hostname": "gpu-a-01", "state": "active", "schedulable": true, "certificates": [],
            "createdAt": "2025-01-01T00:00:00Z", "updatedAt": "2025-01-01T00:10:00Z",
            "health": {"reportedAt": "2025-01-01T00:59:30Z",
                "health": {"collectedAt": "2025-01-01T00:59:29Z", "uptimeSecs": 60, "loadAvg1m": 1.5, "cpuUsagePct": 12.0,
                    "memTotalBytes": 68_719_476_736u64, "memAvailableBytes": 34_359_738_368u64,
                    "disks": [{"mountPoint": "/", "totalBytes": 107_374_182_400u64, "availableBytes": 10_737_418_240u64}],
                    "failedUnits": ["nvidia-persistenced.service"], "gpu": {"vendor": "nvidia", "count": 8, "unhealthy": 1}},
                "probes": [{"name": "nccl", "outcome": "failed", "mode": "enforce", "message": "exit 3", "durationMs": 5,
                    "observedAt": "2025-01-01T00:59:00Z"}]}});
        let out = render_host(now, &decoded(host), &[], &[], 20);
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
        let out = render_rollout(&decoded(status), Some(&manifest), &[], 20);
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
        let out = render_rollout(&decoded(status), None, &[], 20);
        assert!(out.contains("State:         Converged (1 skipped)\n"), "{out}");
    }
}
