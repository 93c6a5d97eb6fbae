//! Prometheus metrics, hand-written in the text exposition format (version 0.0.4).
//!
//! Two kinds live here:
//! - **Event counters** (check-ins, their durations, verification failures) are atomics in
//!   [`Metrics`], held by `AppState`: they count what this process saw since it started, which
//!   is what Prometheus' `rate()` expects of a counter.
//! - **State gauges** (hosts, rollouts and tasks by state, certificates about to expire) are
//!   computed from the store at scrape time ([`Snapshot`]), never cached: the store is the only
//!   state, so a replica or a restarted coordinator reports the same numbers.
//!
//! Names follow Prometheus conventions: `drover_` prefix, base units (seconds), `_total` on
//! counters, a HELP and a TYPE line for every family, even when it has no sample yet, so a
//! dashboard can tell "zero" from "not exported".
//!
//! No client crate: the format is a few lines of text and the families are fixed.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use drover_proto::states::{HostLifecycle, RolloutState};

use crate::store::TaskState;

/// Upper bounds (seconds) of the check-in duration histogram. A check-in with work answers in
/// milliseconds; an idle one is held for the long-poll (seconds to a minute), so the buckets
/// span both.
pub const CHECKIN_BUCKETS: [f64; 14] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0];

/// Upper bounds (seconds) of the check-in work histogram: the handling of a check-in without
/// its long-poll hold — reading the view, writing what changed, leasing, answering — which
/// takes from tens of microseconds (a cached view) to a second (a database in trouble).
pub const CHECKIN_WORK_BUCKETS: [f64; 12] = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0];

/// Longest verification-failure reason kept as a label; longer ones are cut, so a caller
/// passing free text by mistake cannot grow a label without bound.
const MAX_REASON_LABEL: usize = 64;
/// Most distinct reasons kept; further ones are counted under `other`, bounding cardinality.
const MAX_REASONS: usize = 64;

/// The process's event counters.
#[derive(Debug, Default)]
pub struct Metrics {
    checkins_total: AtomicU64,
    /// Check-in views read: `[from the replica's cache, from the store]`.
    checkin_views: [AtomicU64; 2],
    /// Per-bucket (not cumulative) counts; the last slot is `+Inf`.
    checkin_buckets: [AtomicU64; CHECKIN_BUCKETS.len() + 1],
    /// Sum of durations in microseconds (integers add exactly; rendered as seconds).
    checkin_micros: AtomicU64,
    /// The same for the check-in's work alone (the hold left out): per-bucket counts, the
    /// last slot `+Inf`, and the sum in nanoseconds (the work is often microseconds).
    checkin_work_buckets: [AtomicU64; CHECKIN_WORK_BUCKETS.len() + 1],
    checkin_work_nanos: AtomicU64,
    verification_failures: Mutex<BTreeMap<String, u64>>,
    /// The MAAS drift reconciler's last pass per site.
    reconcile: Mutex<BTreeMap<String, ReconcileSample>>,
    /// Hosts whose agent is more minor releases from this coordinator than agents may be,
    /// with the version they last checked in with: one `host.version_skew` event per host and
    /// version, and the gauge of how many there are now.
    skewed_agents: Mutex<BTreeMap<uuid::Uuid, String>>,
    /// How many entries `skewed_agents` holds, written under its lock, read without it.
    any_skewed: AtomicUsize,
    /// HTTP requests by route, method and status (shared with the router's counting layer).
    pub http: std::sync::Arc<crate::http_metrics::HttpCounts>,
}

/// What the metrics keep of a site's reconciler passes.
#[derive(Debug, Clone, Default)]
struct ReconcileSample {
    last_run_unix: i64,
    last_duration: Duration,
    runs_ok: u64,
    runs_failed: u64,
    open_by_rule: BTreeMap<String, u64>,
}

/// Records one check-in's duration, and its work without the long-poll hold, when dropped, so
/// a long-poll whose client went away (the request future is dropped mid-wait) is still
/// counted and timed.
#[must_use = "the check-in is recorded when the timer is dropped"]
pub struct CheckinTimer<'a> {
    metrics: &'a Metrics,
    started: Instant,
    /// Work timed so far, and since when it runs (`None` while held).
    worked: Duration,
    working_since: Option<Instant>,
}

impl CheckinTimer<'_> {
    /// The long-poll hold begins: what follows is not work until [`CheckinTimer::work`].
    pub fn hold(&mut self) {
        if let Some(since) = self.working_since.take() {
            self.worked += since.elapsed();
        }
    }

    /// The hold is over: timing work again.
    pub fn work(&mut self) {
        self.working_since.get_or_insert_with(Instant::now);
    }
}

impl Drop for CheckinTimer<'_> {
    fn drop(&mut self) {
        self.hold();
        self.metrics.record_checkin(self.started.elapsed());
        self.metrics.record_checkin_work(self.worked);
    }
}

impl Metrics {
    /// Notes the version `host`'s agent checked in with; `true` when it is skewed (see
    /// [`drover_proto::version::agent_is_skewed`]) and was not already known skewed at that
    /// version, i.e. when an event is due. A host back within range leaves the gauge.
    pub fn note_agent_version(&self, host: uuid::Uuid, version: &str) -> bool {
        let is_skewed = drover_proto::version::agent_is_skewed(drover_proto::version::VERSION, version);
        // Every check-in passes here: in the usual fleet (no agent skewed) it takes no lock.
        if !is_skewed && self.any_skewed.load(Ordering::Relaxed) == 0 {
            return false;
        }
        let mut skewed = self.skewed_agents.lock().unwrap_or_else(|e| e.into_inner());
        if !is_skewed {
            skewed.remove(&host);
            self.any_skewed.store(skewed.len(), Ordering::Relaxed);
            return false;
        }
        if skewed.get(&host).is_some_and(|v| v == version) {
            return false;
        }
        skewed.insert(host, version.to_owned());
        self.any_skewed.store(skewed.len(), Ordering::Relaxed);
        true
    }

    /// How many agents are skewed now.
    pub fn skewed_agents(&self) -> usize {
        self.skewed_agents.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Starts timing a check-in; it is counted when the returned guard drops.
    pub fn checkin_timer(&self) -> CheckinTimer<'_> {
        let now = Instant::now();
        CheckinTimer { metrics: self, started: now, worked: Duration::ZERO, working_since: Some(now) }
    }

    /// Counts one check-in's work (its long-poll hold left out) that took `took`.
    pub fn record_checkin_work(&self, took: Duration) {
        let secs = took.as_secs_f64();
        let slot = CHECKIN_WORK_BUCKETS.iter().position(|&le| secs <= le).unwrap_or(CHECKIN_WORK_BUCKETS.len());
        self.checkin_work_buckets[slot].fetch_add(1, Ordering::Relaxed);
        self.checkin_work_nanos.fetch_add(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// Counts one check-in that took `took`.
    pub fn record_checkin(&self, took: Duration) {
        let secs = took.as_secs_f64();
        let slot = CHECKIN_BUCKETS.iter().position(|&le| secs <= le).unwrap_or(CHECKIN_BUCKETS.len());
        self.checkin_buckets[slot].fetch_add(1, Ordering::Relaxed);
        self.checkin_micros.fetch_add(u64::try_from(took.as_micros()).unwrap_or(u64::MAX), Ordering::Relaxed);
        self.checkins_total.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a release (or artifact) that failed verification, by a short, stable reason
    /// code (e.g. the typed error's variant name: `stale_timestamp`, `version_rollback`).
    ///
    /// For the release publishing path (`POST /v1/releases`, the releases-dir watcher): call
    /// it once per refused release with the typed reason. Never pass free text: every distinct
    /// reason is a time series.
    pub fn record_verification_failure(&self, reason: &str) {
        let mut label: String = reason.chars().take(MAX_REASON_LABEL).collect();
        let mut map = self.verification_failures.lock().unwrap_or_else(|e| e.into_inner());
        if !map.contains_key(&label) && map.len() >= MAX_REASONS {
            label = "other".to_owned();
        }
        *map.entry(label).or_insert(0) += 1;
    }

    /// Records a reconciler pass over `site`: when it began, how long it took, whether it
    /// saw MAAS, and the open drifts by rule after it (the gauges keep the last pass that saw
    /// MAAS, so an outage does not read as "no drift").
    pub fn record_reconcile(&self, site: &str, started_unix: i64, took: Duration, ok: bool, open_by_rule: &BTreeMap<String, u64>) {
        let mut all = self.reconcile.lock().unwrap_or_else(|e| e.into_inner());
        let s = all.entry(site.to_owned()).or_default();
        s.last_run_unix = started_unix;
        s.last_duration = took;
        if ok {
            s.runs_ok += 1;
        } else {
            s.runs_failed += 1;
        }
        s.open_by_rule = open_by_rule.clone();
    }

    /// Counts a check-in view read from the replica's cache (`cached`) or the store.
    pub fn record_checkin_view(&self, cached: bool) {
        self.checkin_views[usize::from(!cached)].fetch_add(1, Ordering::Relaxed);
    }

    /// Check-ins counted so far.
    pub fn checkins_total(&self) -> u64 {
        self.checkins_total.load(Ordering::Relaxed)
    }
}

/// What the store (and this process's certificates) say at scrape time.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// The coordinator's clock at the scrape, Unix seconds.
    pub now: i64,
    /// Hosts per lifecycle state (every state present, zeros included).
    pub hosts: BTreeMap<&'static str, u64>,
    /// Hosts (not deleted) that take no new work: cordoned by an operator or a job.
    pub cordoned: u64,
    /// Rollouts per state.
    pub rollouts: BTreeMap<&'static str, u64>,
    /// Hosts of each rollout in flight, by wave and state.
    pub rollout_hosts: Vec<RolloutHosts>,
    /// Tasks per state.
    pub tasks: BTreeMap<&'static str, u64>,
    /// Jobs per kind and state.
    pub jobs: Vec<crate::store::JobCount>,
    /// When the newest stored release's timestamp was signed, Unix seconds.
    pub release_signed_at: Option<i64>,
    /// The end of validity of this coordinator's own certificates (`ca`, `server`).
    pub own_cert_expiry: BTreeMap<&'static str, Option<i64>>,
    /// The earliest end of validity among the client certificates in use (`host`: each live
    /// host's newest; `operator`: each operator's newest that has not ended).
    pub client_cert_expiry: BTreeMap<&'static str, Option<i64>>,
    /// Check-ins held open now.
    pub long_polls_held: u64,
}

/// How many hosts of one rollout's wave are in one state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolloutHosts {
    /// The rollout.
    pub rollout: String,
    /// The wave.
    pub wave: u32,
    /// The host state.
    pub state: &'static str,
    /// How many.
    pub count: u64,
}

impl Snapshot {
    /// Every state of every family at zero, so each series exists before its first member.
    pub fn zeroed() -> Self {
        Snapshot {
            hosts: HostLifecycle::ALL.iter().map(|s| (s.as_str(), 0)).collect(),
            rollouts: RolloutState::ALL.iter().map(|s| (s.as_str(), 0)).collect(),
            tasks: [TaskState::Queued, TaskState::Leased, TaskState::Completed].iter().map(|s| (s.as_str(), 0)).collect(),
            ..Snapshot::default()
        }
    }
}

/// The commit the running binary was built from, set once by the binary at start
/// ([`set_build_commit`]).
static BUILD_COMMIT: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();

/// Records the commit the binary was built from (the `drover-coordinator` package's `build.rs`:
/// `git`, or `DROVER_BUILD_COMMIT`). It is the binary's, not this library's, so that a new commit
/// recompiles the small binary crate and not the engine (BENCHMARKS.md, "The build loop"). A
/// second call is ignored: the first value is the one `/metrics` has shown.
pub fn set_build_commit(commit: &'static str) {
    let _ = BUILD_COMMIT.set(commit);
}

/// The commit set by [`set_build_commit`], or `unknown` (a coordinator embedded in a test).
pub fn build_commit() -> &'static str {
    BUILD_COMMIT.get().copied().unwrap_or("unknown")
}

/// Prometheus label-value escaping: backslash, double quote and newline.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// One histogram's samples: cumulative buckets over `bounds` (`counts` per bucket, its last
/// slot `+Inf`), the sum and the count.
fn histogram(out: &mut String, name: &str, bounds: &[f64], counts: &[AtomicU64], sum: f64) {
    let mut cumulative = 0u64;
    for (le, n) in bounds.iter().zip(counts) {
        cumulative += n.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {cumulative}");
    }
    cumulative += counts.get(bounds.len()).map_or(0, |n| n.load(Ordering::Relaxed));
    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {cumulative}");
    let _ = writeln!(out, "{name}_sum {sum}");
    let _ = writeln!(out, "{name}_count {cumulative}");
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn by_label(out: &mut String, name: &str, label: &str, values: &BTreeMap<&'static str, u64>) {
    for (v, n) in values {
        let _ = writeln!(out, "{name}{{{label}=\"{}\"}} {n}", escape(v));
    }
}

impl Metrics {
    /// The whole exposition: this process's counters plus the store snapshot.
    pub fn render(&self, snap: &Snapshot) -> String {
        let mut out = String::with_capacity(4096);
        family(&mut out, "drover_build_info", "gauge", "Build of this coordinator; always 1.");
        let _ =
            writeln!(out, "drover_build_info{{version=\"{}\",commit=\"{}\"}} 1", escape(env!("CARGO_PKG_VERSION")), escape(build_commit()));

        family(
            &mut out,
            "drover_agents_version_skewed",
            "gauge",
            "Agents more than one minor release from this coordinator, as of their last check-in here.",
        );
        let _ = writeln!(out, "drover_agents_version_skewed {}", self.skewed_agents());

        family(&mut out, "drover_hosts", "gauge", "Hosts by lifecycle state.");
        by_label(&mut out, "drover_hosts", "state", &snap.hosts);
        family(&mut out, "drover_hosts_cordoned", "gauge", "Hosts (not deleted) that take no new work: cordoned by an operator or a job.");
        let _ = writeln!(out, "drover_hosts_cordoned {}", snap.cordoned);

        family(&mut out, "drover_checkins_total", "counter", "Agent check-ins handled by this process.");
        let _ = writeln!(out, "drover_checkins_total {}", self.checkins_total());

        family(
            &mut out,
            "drover_checkin_views_total",
            "counter",
            "Check-in views read, from this replica's cache (PostgreSQL only) or from the store.",
        );
        for (source, n) in ["cache", "store"].iter().zip(&self.checkin_views) {
            let _ = writeln!(out, "drover_checkin_views_total{{source=\"{source}\"}} {}", n.load(Ordering::Relaxed));
        }

        family(&mut out, "drover_checkin_duration_seconds", "histogram", "Check-in duration, long-poll hold included.");
        let sum = self.checkin_micros.load(Ordering::Relaxed) as f64 / 1e6;
        histogram(&mut out, "drover_checkin_duration_seconds", &CHECKIN_BUCKETS, &self.checkin_buckets, sum);
        family(
            &mut out,
            "drover_checkin_work_seconds",
            "histogram",
            "Check-in handling time without the long-poll hold: view read, writes, leases, answer.",
        );
        let sum = self.checkin_work_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        histogram(&mut out, "drover_checkin_work_seconds", &CHECKIN_WORK_BUCKETS, &self.checkin_work_buckets, sum);

        family(&mut out, "drover_long_polls_held", "gauge", "Check-ins held open waiting for work.");
        let _ = writeln!(out, "drover_long_polls_held {}", snap.long_polls_held);

        family(&mut out, "drover_rollouts", "gauge", "Rollouts by state.");
        by_label(&mut out, "drover_rollouts", "state", &snap.rollouts);

        family(
            &mut out,
            "drover_rollout_hosts",
            "gauge",
            "Hosts of each rollout in flight, by wave and state (Pending: not dispatched yet).",
        );
        for r in &snap.rollout_hosts {
            let _ = writeln!(
                out,
                "drover_rollout_hosts{{rollout=\"{}\",wave=\"{}\",state=\"{}\"}} {}",
                escape(&r.rollout),
                r.wave,
                r.state,
                r.count
            );
        }

        family(&mut out, "drover_tasks", "gauge", "Maintenance tasks by state.");
        by_label(&mut out, "drover_tasks", "state", &snap.tasks);

        family(&mut out, "drover_jobs", "gauge", "Jobs by kind and state.");
        for j in &snap.jobs {
            let _ = writeln!(out, "drover_jobs{{kind=\"{}\",state=\"{}\"}} {}", escape(&j.kind), j.state.as_str(), j.count);
        }

        if let Some(signed) = snap.release_signed_at {
            family(
                &mut out,
                "drover_release_signed_timestamp_seconds",
                "gauge",
                "When the newest stored release's timestamp was signed by CI.",
            );
            let _ = writeln!(out, "drover_release_signed_timestamp_seconds {signed}");
            family(&mut out, "drover_release_age_seconds", "gauge", "Age of the newest stored release's timestamp at this scrape.");
            let _ = writeln!(out, "drover_release_age_seconds {}", snap.now - signed);
        }

        family(&mut out, "drover_verification_failures_total", "counter", "Releases refused by verification, by reason.");
        for (reason, n) in self.verification_failures.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            let _ = writeln!(out, "drover_verification_failures_total{{reason=\"{}\"}} {n}", escape(reason));
        }

        family(&mut out, "drover_certificate_expiry_timestamp_seconds", "gauge", "End of validity of this coordinator's own certificates.");
        for (which, end) in &snap.own_cert_expiry {
            if let Some(end) = end {
                let _ = writeln!(out, "drover_certificate_expiry_timestamp_seconds{{certificate=\"{which}\"}} {end}");
            }
        }
        family(
            &mut out,
            "drover_client_certificates_earliest_expiry_timestamp_seconds",
            "gauge",
            "Earliest end of validity among the client certificates in use, by kind (host, operator).",
        );
        for (kind, end) in &snap.client_cert_expiry {
            if let Some(end) = end {
                let _ = writeln!(out, "drover_client_certificates_earliest_expiry_timestamp_seconds{{kind=\"{kind}\"}} {end}");
            }
        }

        let reconcile = self.reconcile.lock().unwrap_or_else(|e| e.into_inner()).clone();
        family(
            &mut out,
            "drover_maas_drifted_hosts",
            "gauge",
            "Hosts with an open MAAS drift, by site and rule, after the last pass that saw MAAS.",
        );
        for (site, s) in &reconcile {
            for (rule, n) in &s.open_by_rule {
                let _ = writeln!(out, "drover_maas_drifted_hosts{{site=\"{}\",rule=\"{}\"}} {n}", escape(site), escape(rule));
            }
        }
        family(&mut out, "drover_maas_reconcile_last_run_timestamp_seconds", "gauge", "When the last reconciler pass over the site began.");
        for (site, s) in &reconcile {
            let _ = writeln!(out, "drover_maas_reconcile_last_run_timestamp_seconds{{site=\"{}\"}} {}", escape(site), s.last_run_unix);
        }
        family(&mut out, "drover_maas_reconcile_last_duration_seconds", "gauge", "How long the last reconciler pass over the site took.");
        for (site, s) in &reconcile {
            let _ =
                writeln!(out, "drover_maas_reconcile_last_duration_seconds{{site=\"{}\"}} {}", escape(site), s.last_duration.as_secs_f64());
        }
        family(
            &mut out,
            "drover_maas_reconcile_runs_total",
            "counter",
            "Reconciler passes by site and outcome (ok, or failed: MAAS not seen).",
        );
        for (site, s) in &reconcile {
            let _ = writeln!(out, "drover_maas_reconcile_runs_total{{site=\"{}\",outcome=\"ok\"}} {}", escape(site), s.runs_ok);
            let _ = writeln!(out, "drover_maas_reconcile_runs_total{{site=\"{}\",outcome=\"failed\"}} {}", escape(site), s.runs_failed);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_is_cumulative_and_counts_match() {
        let m = Metrics::default();
        m.record_checkin(Duration::from_millis(3));
        m.record_checkin(Duration::from_secs(2));
        m.record_checkin(Duration::from_secs(120));
        let text = m.render(&Snapshot::zeroed());
        assert!(text.contains("drover_checkin_duration_seconds_bucket{le=\"0.005\"} 1\n"), "{text}");
        assert!(text.contains("drover_checkin_duration_seconds_bucket{le=\"2.5\"} 2\n"), "{text}");
        assert!(text.contains("drover_checkin_duration_seconds_bucket{le=\"60\"} 2\n"), "{text}");
        assert!(text.contains("drover_checkin_duration_seconds_bucket{le=\"+Inf\"} 3\n"), "{text}");
        assert!(text.contains("drover_checkin_duration_seconds_count 3\n"), "{text}");
        assert!(text.contains("drover_checkins_total 3\n"), "{text}");
        // The work histogram leaves the hold out: a check-in held 30 ms for microseconds of work.
        {
            let mut timer = m.checkin_timer();
            timer.hold();
            std::thread::sleep(Duration::from_millis(30));
            timer.work();
        }
        let text = m.render(&Snapshot::zeroed());
        assert!(text.contains("drover_checkin_duration_seconds_count 4\n"), "{text}");
        assert!(text.contains("drover_checkin_work_seconds_bucket{le=\"0.025\"} 1\n"), "the 30 ms hold counted as work: {text}");
        assert!(text.contains("drover_checkin_work_seconds_count 1\n"), "{text}");
        m.record_checkin_view(true);
        m.record_checkin_view(false);
        m.record_checkin_view(false);
        let text = m.render(&Snapshot::zeroed());
        assert!(text.contains("drover_checkin_views_total{source=\"cache\"} 1\n"), "{text}");
        assert!(text.contains("drover_checkin_views_total{source=\"store\"} 2\n"), "{text}");
    }

    #[test]
    fn verification_reasons_are_bounded_and_escaped() {
        let m = Metrics::default();
        m.record_verification_failure("stale \"ts\"");
        for i in 0..(MAX_REASONS + 5) {
            m.record_verification_failure(&format!("r{i}"));
        }
        let text = m.render(&Snapshot::zeroed());
        assert!(text.contains("drover_verification_failures_total{reason=\"stale \\\"ts\\\"\"} 1\n"), "{text}");
        assert!(text.contains("drover_verification_failures_total{reason=\"other\"}"), "{text}");
    }

    #[test]
    fn reconciler_gauges_by_site_and_rule() {
        let m = Metrics::default();
        let open: BTreeMap<String, u64> = [("hardware_failure".to_owned(), 2)].into();
        m.record_reconcile("dc1", 1_900_000_000, Duration::from_millis(1500), true, &open);
        m.record_reconcile("dc1", 1_900_000_300, Duration::from_millis(250), false, &open);
        let text = m.render(&Snapshot::zeroed());
        assert!(text.contains("drover_maas_drifted_hosts{site=\"dc1\",rule=\"hardware_failure\"} 2\n"), "{text}");
        assert!(text.contains("drover_maas_reconcile_last_run_timestamp_seconds{site=\"dc1\"} 1900000300\n"), "{text}");
        assert!(text.contains("drover_maas_reconcile_last_duration_seconds{site=\"dc1\"} 0.25\n"), "{text}");
        assert!(text.contains("drover_maas_reconcile_runs_total{site=\"dc1\",outcome=\"failed\"} 1\n"), "{text}");
    }

    #[test]
    fn a_skewed_agent_raises_one_event_per_version_and_counts_until_it_upgrades() {
        let m = Metrics::default();
        let (a, b) = (uuid::Uuid::from_u128(1), uuid::Uuid::from_u128(2));
        let far = "99.0.0";
        assert!(!m.note_agent_version(a, drover_proto::version::VERSION), "the coordinator's own version");
        assert!(m.note_agent_version(a, far), "first check-in at a skewed version");
        assert!(!m.note_agent_version(a, far), "the same version again: no second event");
        assert!(m.note_agent_version(a, "98.0.0"), "another skewed version: a new event");
        assert!(m.note_agent_version(b, far));
        assert_eq!(m.skewed_agents(), 2);
        assert!(m.render(&Snapshot::default()).contains("drover_agents_version_skewed 2\n"));
        assert!(!m.note_agent_version(a, drover_proto::version::VERSION), "upgraded");
        assert_eq!(m.skewed_agents(), 1);
        assert!(m.note_agent_version(a, far), "skewed again after an upgrade: a new event");
    }
}
