//! What a fleet run reads off a coordinator: CPU time and memory from `/proc`, check-ins and
//! held long-polls from its `/metrics`, every dispatch decision (with its time) from its JSON
//! log (or the logs of all replicas), the events it wrote from its SQLite store; and the
//! percentiles of dispatch latency. [`super::servers`] sums them over replicas.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, SystemTime};

use drover_client::CoordinatorClient;

use super::FleetError;
use super::swarm::Receipt;

/// The counters read from `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Scrape {
    /// `drover_checkins_total`.
    pub checkins_total: u64,
    /// `drover_long_polls_held`.
    pub long_polls_held: u64,
    /// `drover_checkin_views_total{source="cache"}`.
    pub views_cached: u64,
    /// `drover_checkin_views_total{source="store"}`.
    pub views_read: u64,
}

impl Scrape {
    /// The share of check-in views served from a replica's cache since `before`, percent.
    pub fn cached_pct_since(&self, before: &Scrape) -> f64 {
        let cached = self.views_cached.saturating_sub(before.views_cached) as f64;
        let read = self.views_read.saturating_sub(before.views_read) as f64;
        if cached + read == 0.0 { 0.0 } else { 100.0 * cached / (cached + read) }
    }
}

/// Reads `/metrics` as the admin.
pub async fn scrape(admin: &CoordinatorClient) -> Result<Scrape, FleetError> {
    let bytes = admin.get_bytes("/metrics").await.map_err(FleetError::client("GET /metrics"))?;
    Ok(parse_metrics(&String::from_utf8_lossy(&bytes)))
}

/// The samples this benchmark needs from a Prometheus text exposition (missing ones are 0).
pub fn parse_metrics(text: &str) -> Scrape {
    let sample = |name: &str| {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map(|v| v as u64)
            .unwrap_or(0)
    };
    Scrape {
        checkins_total: sample("drover_checkins_total"),
        long_polls_held: sample("drover_long_polls_held"),
        views_cached: sample("drover_checkin_views_total{source=\"cache\"}"),
        views_read: sample("drover_checkin_views_total{source=\"store\"}"),
    }
}

/// A process's CPU seconds (user + system) and resident memory, as `/proc` has them now.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcSample {
    /// CPU seconds so far.
    pub cpu_secs: f64,
    /// Resident now, MiB.
    pub rss_mib: f64,
    /// Peak resident so far, MiB.
    pub peak_rss_mib: f64,
}

/// Samples process `pid`.
pub fn sample(pid: u32) -> ProcSample {
    let (rss, peak) = crate::procs::rss_kib(pid);
    ProcSample { cpu_secs: crate::procs::cpu_secs(pid, false), rss_mib: rss as f64 / 1024.0, peak_rss_mib: peak as f64 / 1024.0 }
}

/// Every host dispatch (`→ Activating`) the coordinator's JSON log records, by
/// (hostname, rollout id), with the time of the line: the decision, committed and not yet
/// announced to the agent. A host dispatched twice keeps its first.
pub fn dispatch_decisions(log: &Path) -> Result<HashMap<(String, String), SystemTime>, FleetError> {
    let text = std::fs::read_to_string(log).map_err(|source| FleetError::Io { path: log.display().to_string(), source })?;
    let mut out = HashMap::new();
    for line in text.lines() {
        // Cheap filter before parsing: most lines are something else.
        if !line.contains("rollout action applied") || !line.contains("\"Activating\"") {
            continue;
        }
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        let fields = &v["fields"];
        if fields["to"] != "Activating" {
            continue;
        }
        let (Some(host), Some(rollout), Some(ts)) = (fields["host"].as_str(), fields["rollout_id"].as_str(), v["timestamp"].as_str())
        else {
            continue;
        };
        let Ok(at) = time::OffsetDateTime::parse(ts, &time::format_description::well_known::Rfc3339) else { continue };
        let at = SystemTime::UNIX_EPOCH + Duration::from_nanos(u64::try_from(at.unix_timestamp_nanos()).unwrap_or(0));
        out.entry((host.to_owned(), rollout.to_owned())).or_insert(at);
    }
    Ok(out)
}

/// [`dispatch_decisions`] of every replica's log, merged: a host's decision is the earliest
/// any replica logged (only the leader decides; a new leader after a takeover may log a host
/// again).
pub fn dispatch_decisions_in(logs: &[std::path::PathBuf]) -> Result<HashMap<(String, String), SystemTime>, FleetError> {
    let mut out: HashMap<(String, String), SystemTime> = HashMap::new();
    for log in logs {
        for (key, at) in dispatch_decisions(log)? {
            out.entry(key).and_modify(|first| *first = (*first).min(at)).or_insert(at);
        }
    }
    Ok(out)
}

/// Dispatch latencies of `receipts` (those with a decision on record, and not from hosts that
/// were away by script), in milliseconds, sorted.
pub fn latencies_ms(receipts: &[Receipt], decisions: &HashMap<(String, String), SystemTime>, skip: impl Fn(&Receipt) -> bool) -> Vec<f64> {
    let mut out: Vec<f64> = receipts
        .iter()
        .filter(|r| !skip(r))
        .filter_map(|r| {
            let decided = decisions.get(&(r.hostname.clone(), r.rollout_id.clone()))?;
            // A receipt can only follow its decision; clock reads of two processes on one
            // machine can still be a few microseconds out of order.
            Some(r.received.duration_since(*decided).unwrap_or(Duration::ZERO).as_secs_f64() * 1000.0)
        })
        .collect();
    out.sort_by(f64::total_cmp);
    out
}

/// The `p`-th percentile (0–100) of sorted `values`, nearest rank; 0 for none.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Events in the coordinator's store (read-only, after it stopped).
pub fn events_written(db: &Path) -> Result<u64, FleetError> {
    let setup = |e: rusqlite::Error| FleetError::Setup(format!("{}: {e}", db.display()));
    let conn = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).map_err(setup)?;
    let n: i64 = conn.query_row("SELECT count(*) FROM events", [], |r| r.get(0)).map_err(setup)?;
    Ok(u64::try_from(n).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_samples_are_found_by_exact_name() {
        let text = "# HELP drover_checkins_total x\ndrover_checkins_total 1234\ndrover_checkins_total_bogus 9\ndrover_long_polls_held 77\n\
                    drover_checkin_views_total{source=\"cache\"} 30\ndrover_checkin_views_total{source=\"store\"} 10\n";
        let scrape = parse_metrics(text);
        assert_eq!(scrape, Scrape { checkins_total: 1234, long_polls_held: 77, views_cached: 30, views_read: 10 });
        assert_eq!(parse_metrics(""), Scrape::default());
        assert_eq!(scrape.cached_pct_since(&Scrape { views_cached: 10, views_read: 10, ..scrape }), 100.0);
        assert_eq!(scrape.cached_pct_since(&Scrape::default()), 75.0);
        assert_eq!(Scrape::default().cached_pct_since(&Scrape::default()), 0.0);
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!((percentile(&v, 50.0), percentile(&v, 99.0), percentile(&v, 100.0)), (50.0, 99.0, 100.0));
        assert_eq!(percentile(&[7.0], 99.0), 7.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
    }

    #[test]
    fn dispatch_lines_are_read_from_the_json_log_and_others_ignored() {
        let dir = tempfile::tempdir().expect("tmp");
        let log = dir.path().join("c.log");
        let line = |host: &str, from: &str, to: &str, ts: &str| {
            serde_json::json!({"timestamp": ts, "level": "INFO", "fields": {"message": "rollout action applied", "rollout_id": "ch-1@abc", "host": host, "from": from, "to": to}}).to_string()
        };
        let text = [
            line("sim-00001", "Pending", "Activating", "2026-11-21T10:00:00.250000Z"),
            line("sim-00001", "Pending", "Activating", "2026-11-21T10:00:09.000000Z"),
            line("sim-00002", "Activating", "Soaking", "2026-11-21T10:00:01Z"),
            "not json".to_owned(),
        ]
        .join("\n");
        std::fs::write(&log, text).expect("write");
        let d = dispatch_decisions(&log).expect("read");
        assert_eq!(d.len(), 1);
        let at = d[&("sim-00001".to_owned(), "ch-1@abc".to_owned())];
        let receipt = Receipt {
            hostname: "sim-00001".into(),
            role: super::super::scenario::Role::Healthy,
            rollout_id: "ch-1@abc".into(),
            received: at + Duration::from_millis(40),
            confirmed: true,
            bytes: 3000,
        };
        assert_eq!(latencies_ms(&[receipt], &d, |_| false), vec![40.0]);

        // Replicas' logs merged: a host's earliest decision in any of them.
        let other = dir.path().join("r1.log");
        let lines = [
            line("sim-00001", "Pending", "Activating", "2026-11-21T10:00:00.100000Z"),
            line("sim-00003", "Pending", "Activating", "2026-11-21T10:00:02Z"),
        ];
        std::fs::write(&other, lines.join("\n")).expect("write");
        let merged = dispatch_decisions_in(&[log, other]).expect("read");
        assert_eq!(merged.len(), 2);
        assert_eq!(merged[&("sim-00001".to_owned(), "ch-1@abc".to_owned())], at - Duration::from_millis(150));
    }
}
