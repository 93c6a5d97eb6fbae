//! One fleet run, start to finish: a fresh site and `drover-coordinator serve` as its own
//! process (the devkit's `Coordinator`: `init`, an admin credential, the CI trust file), or
//! several replicas of it on PostgreSQL ([`Servers`]); every host enrolled through the API,
//! the agents ramped up at a fixed rate until the coordinator holds a long-poll for each, the
//! idle fleet watched, then a signed release published and rolled to convergence. The
//! [`Report`] holds what was measured in each phase.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use drover_client::CoordinatorClient;
use drover_proto::keys::KeySigner;
use drover_proto::publish::PublishRequest;
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::FleetError;
use super::enroll::enroll_all;
use super::measure;
use super::parts::{PartSetup, Parts};
use super::scenario::{Role, Scenario};
use super::servers::Servers;
use super::swarm::Swarm;

/// The binaries a run starts.
#[derive(Debug, Clone)]
pub struct Binaries {
    /// `drover-coordinator`.
    pub coordinator: PathBuf,
    /// `drover-agent` (the coordinator serves it to bootstrap scripts; never run here).
    pub agent: PathBuf,
    /// `drover-bench` itself, run as `swarm-part` when the agents are split over processes.
    pub bench: PathBuf,
}

/// The agents: in this process, or split over child processes.
enum Agents {
    Here(Swarm),
    Parts(Parts),
}

impl Agents {
    fn shared(&self) -> std::sync::Arc<super::swarm::Shared> {
        match self {
            Agents::Here(s) => s.shared.clone(),
            Agents::Parts(p) => p.shared.clone(),
        }
    }

    fn len(&self) -> usize {
        match self {
            Agents::Here(s) => s.len(),
            Agents::Parts(p) => p.len(),
        }
    }

    fn rollout_started(&mut self) {
        match self {
            Agents::Here(s) => s.rollout_started(),
            Agents::Parts(p) => p.rollout_started(),
        }
    }

    async fn stop(self) {
        match self {
            Agents::Here(s) => s.stop().await,
            Agents::Parts(p) => {
                let _ = tokio::task::spawn_blocking(move || p.stop()).await;
            }
        }
    }
}

/// Everything one run measured. "Coordinator" figures are summed over the replicas (one on
/// SQLite); the database's own processes (PostgreSQL) are reported apart, and together with
/// the replicas in the `total_*` figures.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// Simulated agents.
    pub agents: usize,
    /// The store: `sqlite` or `postgres-N`.
    pub store: String,
    /// Coordinator processes serving the fleet.
    pub replicas: usize,
    /// The HTTP version they spoke (`1.1` or `2`).
    pub http: String,
    /// Whether the coordinator's accepted sockets set `TCP_NODELAY` (false: Nagle's
    /// algorithm, the baseline).
    pub tcp_nodelay: bool,
    /// Channels (one rollout each).
    pub channels: usize,
    /// Waves per rollout.
    pub waves: usize,
    /// Each wave's soak, seconds.
    pub soak_secs: u64,
    /// The disruption budget, percent of the fleet in flight (none: whole waves at once).
    pub max_in_flight_pct: Option<u32>,
    /// The coordinator's long-poll, seconds.
    pub long_poll_secs: u64,
    /// Creating and enrolling every host: wall seconds.
    pub enroll_secs: f64,
    /// Ramp-up: from the first agent started to a long-poll held for every agent, seconds.
    pub ramp_secs: f64,
    /// Long-polls the coordinator held at the end of the ramp.
    pub connected: u64,
    /// The idle window, seconds.
    pub idle_secs: f64,
    /// Check-ins answered per second while idle.
    pub idle_checkins_per_sec: f64,
    /// Check-in views served from a replica's cache while idle, percent (0 on SQLite).
    pub idle_views_cached_pct: f64,
    /// Coordinator CPU while idle, percent of one core.
    pub idle_cpu_pct: f64,
    /// Coordinator resident memory at the end of the idle window, MiB.
    pub idle_rss_mib: f64,
    /// Database CPU while idle, percent of one core (0 on SQLite).
    pub idle_database_cpu_pct: f64,
    /// Coordinators' and database's CPU while idle, percent of one core.
    pub idle_total_cpu_pct: f64,
    /// Database memory (proportional, `Pss`, of all its processes) at the end of the idle
    /// window, MiB.
    pub idle_database_mib: f64,
    /// Publish to every rollout converged and every host confirmed, seconds.
    pub rollout_secs: f64,
    /// The soak the rollout had to wait at least (waves × soak; a budget that splits a wave
    /// into several batches makes each batch soak too), seconds.
    pub soak_total_secs: u64,
    /// `rollout_secs` beyond the soak.
    pub beyond_soak_secs: f64,
    /// Check-ins answered per second during the rollout.
    pub rollout_checkins_per_sec: f64,
    /// Check-in views served from a replica's cache during the rollout, percent.
    pub rollout_views_cached_pct: f64,
    /// Coordinator CPU seconds during the rollout.
    pub rollout_cpu_secs: f64,
    /// Database CPU seconds during the rollout.
    pub rollout_database_cpu_secs: f64,
    /// Dispatches measured (decision and receipt both seen; offline hosts left out).
    pub dispatches: usize,
    /// Dispatch latency, decision → receipt: median, ms.
    pub dispatch_p50_ms: f64,
    /// 99th percentile, ms.
    pub dispatch_p99_ms: f64,
    /// Worst, ms.
    pub dispatch_max_ms: f64,
    /// Body bytes the coordinator sent a host for its intent (the check-in answer carrying
    /// it and the proof bundle), median over the hosts, bytes.
    pub bytes_per_host_p50: f64,
    /// The same, the largest.
    pub bytes_per_host_max: f64,
    /// Coordinator CPU seconds over the whole run (enrollment included).
    pub coordinator_cpu_secs: f64,
    /// Database CPU seconds over the whole run (its start and migrations included).
    pub database_cpu_secs: f64,
    /// Coordinators' and database's CPU seconds over the whole run.
    pub total_cpu_secs: f64,
    /// Each replica's CPU seconds over the whole run.
    pub replica_cpu_secs: Vec<f64>,
    /// Each replica's peak resident memory, MiB.
    pub replica_peak_rss_mib: Vec<f64>,
    /// Database memory (`Pss` of all its processes) at the end of the rollout, MiB.
    pub database_mib: f64,
    /// Coordinator peak resident memory, MiB.
    pub peak_rss_mib: f64,
    /// Coordinator peak RSS once every host was enrolled, MiB.
    pub enroll_peak_rss_mib: f64,
    /// Coordinator peak RSS once every agent held a long-poll, MiB.
    pub ramp_peak_rss_mib: f64,
    /// Events in the store at the end.
    pub events_written: u64,
    /// Offline hosts that came back.
    pub rejoined: u64,
    /// Agent requests that failed (and were retried).
    pub agent_errors: u64,
    /// The last of them.
    pub last_agent_error: Option<String>,
    /// Intents or tasks refused by admission (should be none).
    pub refused: Vec<String>,
    /// (manifest, timestamp) pairs verified in full; every other admission used the cache.
    pub full_verifications: u64,
    /// Rollouts and the state each ended in.
    pub rollouts: Vec<(String, String)>,
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), FleetError> {
    std::fs::write(path, bytes).map_err(|source| FleetError::Io { path: path.display().to_string(), source })
}

/// The agent binary as a deployment ships it, without debug information (`strip`, as Nix
/// does): the coordinator holds the binary it serves in memory, and a release build's line
/// tables would triple what it holds. A copy as built when `strip` is missing.
fn shipped_agent(dir: &Path, built: &Path) -> Result<PathBuf, FleetError> {
    let out = dir.join("drover-agent");
    let stripped = Command::new("strip").arg("-o").arg(&out).arg(built).output().is_ok_and(|o| o.status.success());
    if !stripped {
        std::fs::copy(built, &out).map_err(|source| FleetError::Io { path: built.display().to_string(), source })?;
    }
    Ok(out)
}

/// Polls `check` every `every` until it yields a value or `bound` passes; the last state it
/// reported goes into the error. An error from `check` ends the wait at once.
async fn wait_for<T>(
    bound: Duration,
    every: Duration,
    mut check: impl AsyncFnMut() -> Result<Result<T, String>, FleetError>,
) -> Result<T, (String, Duration)> {
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < bound {
        match check().await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(state)) => last = state,
            Err(e) => return Err((e.to_string(), start.elapsed())),
        }
        tokio::time::sleep(every).await;
    }
    Err((last, bound))
}

/// The coordinator's configuration sections for `scenario` (after the listener, state and
/// agent lines every site has).
pub fn coordinator_sections(scenario: &Scenario) -> String {
    // Every simulated agent connects from this one machine's loopback address: a source cap
    // sized for distinct hosts would throttle the whole fleet, so it is lifted here.
    format!(
        "[agent]\nlong_poll_secs = {}\n\n[connections]\nmax_open = 100000\nmax_unauthenticated = 100000\nmax_unauthenticated_per_source = 100000\nmax_handshakes = 100000\nhttp1 = \"{}\"\ntcp_nodelay = {}\n",
        scenario.long_poll_secs,
        scenario.http.coordinator_http1(),
        scenario.tcp_nodelay
    )
}

/// Runs `scenario` in `dir` (empty; everything the run makes stays there), printing each
/// phase on `progress`.
pub async fn run(scenario: &Scenario, bins: &Binaries, dir: &Path, progress: &mut dyn FnMut(&str)) -> Result<Report, FleetError> {
    scenario.validate()?;
    let mut report = Report {
        agents: scenario.agents,
        http: scenario.http.as_str().to_owned(),
        tcp_nodelay: scenario.tcp_nodelay,
        channels: scenario.channels,
        waves: scenario.waves,
        soak_secs: scenario.soak_secs,
        max_in_flight_pct: scenario.max_in_flight_pct,
        long_poll_secs: scenario.long_poll_secs,
        store: scenario.store.as_string(),
        replicas: scenario.store.replicas(),
        ..Report::default()
    };
    let trust_file = dir.join("trust.json");
    write(&trust_file, &crate::ci_trust_json())?;
    let sections = coordinator_sections(scenario);
    let agent = shipped_agent(dir, &bins.agent)?;
    // Blocking (processes started and waited for): nothing else runs on the runtime yet.
    let mut servers = Servers::start(scenario.store, dir, &bins.coordinator, &agent, &trust_file, &sections)?;
    let (urls, ca) = (servers.urls(), servers.ca.clone());
    // Enrollment goes to the first replica; the operator's calls fail over like the agents'.
    let url = urls[0].clone();
    let admin_identity = || servers.admin_identity();
    let admin = CoordinatorClient::new("drover-bench", &urls, &ca, Some(admin_identity()?), Duration::from_secs(120))
        .map_err(FleetError::client("admin client"))?;

    // Enrollment.
    let hosts = scenario.hosts();
    let names: Vec<String> = hosts.iter().map(|h| h.hostname.clone()).collect();
    let trust_sha256 = hex::encode(Sha256::digest(crate::ci_trust_json()));
    let started = Instant::now();
    let (enrolled, anchors) = enroll_all(&url, &ca, admin_identity()?, &trust_sha256, &names, scenario.enroll_concurrency).await?;
    report.enroll_secs = started.elapsed().as_secs_f64();
    report.enroll_peak_rss_mib = servers.sample().coordinators.peak_rss_mib;
    progress(&format!("enrolled {} hosts in {:.1} s (peak RSS {:.0} MiB)", enrolled.len(), report.enroll_secs, report.enroll_peak_rss_mib));
    let director =
        drover_proto::keys::verifying_key_from_text(&anchors.director_pem).map_err(|e| FleetError::Setup(format!("director key: {e}")))?;
    let ci = drover_proto::trust::TrustRoots::from_json(&crate::ci_trust_json()).map_err(|e| FleetError::Setup(e.to_string()))?;
    let agent_anchors = drover_agent::admit::Anchors { ci, director: drover_agent::director::DirectorKeys::pinned(director) };

    // Ramp-up: agents started at a steady rate (each opens its connection with its first
    // check-in), until the coordinator holds a long-poll for every one.
    let started = Instant::now();
    let mut swarm = if scenario.processes > 0 {
        let setup =
            PartSetup { bench: &bins.bench, dir, urls: &urls, ca_pem: servers.ca_pem.clone(), director_pem: anchors.director_pem.clone() };
        Agents::Parts(Parts::start(&setup, scenario, &hosts, &enrolled)?)
    } else {
        let mut swarm = Swarm::new(&urls, ca.clone());
        // Ten starts a second, each of a tenth of the rate.
        let batch = (scenario.ramp_per_sec / 10).max(1);
        let mut pace = tokio::time::interval(Duration::from_secs_f64(batch as f64 / scenario.ramp_per_sec as f64));
        let pairs: Vec<_> = hosts.iter().zip(&enrolled).collect();
        for chunk in pairs.chunks(batch) {
            pace.tick().await;
            for (host, e) in chunk {
                swarm.start(e, host, &agent_anchors, scenario)?;
            }
        }
        Agents::Here(swarm)
    };
    let wanted = swarm.len() as u64;
    let ramp_bound = Duration::from_secs(120 + scenario.agents as u64 / 50);
    report.connected = wait_for(ramp_bound, Duration::from_millis(200), async || {
        let s = servers.scrape().await?;
        Ok(if s.long_polls_held >= wanted { Ok(s.long_polls_held) } else { Err(s.long_polls_held.to_string()) })
    })
    .await
    .map_err(|(last, bound)| FleetError::NotConnected {
        connected: last.parse().unwrap_or(0),
        wanted: swarm.len(),
        secs: bound.as_secs(),
    })?;
    report.ramp_secs = started.elapsed().as_secs_f64();
    report.ramp_peak_rss_mib = servers.sample().coordinators.peak_rss_mib;
    progress(&format!(
        "{} agents hold a long-poll after {:.1} s (peak RSS {:.0} MiB)",
        report.connected, report.ramp_secs, report.ramp_peak_rss_mib
    ));

    // The idle fleet.
    let (a, sa) = (servers.sample(), servers.scrape().await?);
    let window = Instant::now();
    tokio::time::sleep(Duration::from_secs(scenario.idle_secs)).await;
    let (b, sb) = (servers.sample(), servers.scrape().await?);
    report.idle_secs = window.elapsed().as_secs_f64();
    if report.idle_secs > 0.0 && scenario.idle_secs > 0 {
        report.idle_cpu_pct = 100.0 * (b.coordinators.cpu_secs - a.coordinators.cpu_secs) / report.idle_secs;
        report.idle_database_cpu_pct = 100.0 * (b.database.cpu_secs - a.database.cpu_secs) / report.idle_secs;
        report.idle_total_cpu_pct = report.idle_cpu_pct + report.idle_database_cpu_pct;
        report.idle_checkins_per_sec = sb.checkins_total.saturating_sub(sa.checkins_total) as f64 / report.idle_secs;
        report.idle_views_cached_pct = sb.cached_pct_since(&sa);
    }
    report.idle_rss_mib = b.coordinators.rss_mib;
    report.idle_database_mib = b.database.rss_mib;
    progress(&format!(
        "idle {:.0} s: {:.1} % of a core, {:.0} check-ins/s, {:.0} MiB",
        report.idle_secs, report.idle_cpu_pct, report.idle_checkins_per_sec, report.idle_rss_mib
    ));

    // The rollout.
    let signer = KeySigner::new(ed25519_dalek::SigningKey::from_bytes(&crate::CI_KEY));
    let files = scenario.release(&hosts, 2, &signer, crate::wall_now())?;
    let request = PublishRequest::from_files(&files, Some("drover-bench".into()))
        .ok_or_else(|| FleetError::Setup("release file not UTF-8".into()))?;
    let before = (servers.sample(), servers.scrape().await?);
    let started = Instant::now();
    let _: serde_json::Value = admin.post_json("/v1/releases", &request).await.map_err(FleetError::client("publish"))?;
    swarm.rollout_started();
    let shared = swarm.shared();
    let channels = scenario.channels;
    let agents = scenario.agents;
    let converged = wait_for(Duration::from_secs(scenario.timeout_secs), Duration::from_millis(100), async || {
        let page: serde_json::Value = admin.get_json("/v1/rollouts").await.map_err(FleetError::client("GET /v1/rollouts"))?;
        let states: Vec<(String, String)> = page["items"]
            .as_array()
            .map(|a| {
                a.iter().map(|r| (r["rolloutId"].as_str().unwrap_or("").to_owned(), r["state"].as_str().unwrap_or("").to_owned())).collect()
            })
            .unwrap_or_default();
        let confirmed: std::collections::HashSet<String> =
            shared.receipts.lock().unwrap_or_else(|e| e.into_inner()).iter().filter(|r| r.confirmed).map(|r| r.hostname.clone()).collect();
        let done = states.len() == channels && states.iter().all(|(_, s)| s == "Converged") && confirmed.len() == agents;
        let stuck = states.iter().any(|(_, s)| matches!(s.as_str(), "Halted" | "Failed" | "Reverting" | "Reverted" | "Cancelled"));
        let summary = format!("rollouts {states:?}; {} of {agents} hosts confirmed", confirmed.len());
        if stuck {
            return Err(FleetError::NotConverged { secs: 0, state: summary });
        }
        Ok(if done { Ok(states) } else { Err(summary) })
    })
    .await;
    let after = (servers.sample(), servers.scrape().await?);
    report.rollout_secs = started.elapsed().as_secs_f64();
    report.soak_total_secs = scenario.waves as u64 * scenario.soak_secs;
    report.beyond_soak_secs = report.rollout_secs - report.soak_total_secs as f64;
    report.rollout_cpu_secs = after.0.coordinators.cpu_secs - before.0.coordinators.cpu_secs;
    report.rollout_database_cpu_secs = after.0.database.cpu_secs - before.0.database.cpu_secs;
    report.rollout_checkins_per_sec = after.1.checkins_total.saturating_sub(before.1.checkins_total) as f64 / report.rollout_secs.max(1e-9);
    report.rollout_views_cached_pct = after.1.cached_pct_since(&before.1);

    // Wind down, then read what the coordinator wrote.
    let last = servers.sample();
    report.coordinator_cpu_secs = last.coordinators.cpu_secs;
    report.peak_rss_mib = last.coordinators.peak_rss_mib;
    report.database_cpu_secs = last.database.cpu_secs;
    report.total_cpu_secs = last.coordinators.cpu_secs + last.database.cpu_secs;
    report.database_mib = last.database.rss_mib;
    report.replica_cpu_secs = last.replicas.iter().map(|r| r.cpu_secs).collect();
    report.replica_peak_rss_mib = last.replicas.iter().map(|r| r.peak_rss_mib).collect();
    swarm.stop().await;
    let logs = servers.logs();
    // Stopped as systemd stops them (SIGTERM: each writes its buffered check-ins), then read.
    report.events_written = servers.stop_and_count_events()?;
    drop(servers);
    let receipts = shared.receipts.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let decisions = measure::dispatch_decisions_in(&logs)?;
    let latencies = measure::latencies_ms(&receipts, &decisions, |r| r.role == Role::Offline);
    report.dispatches = latencies.len();
    report.dispatch_p50_ms = measure::percentile(&latencies, 50.0);
    report.dispatch_p99_ms = measure::percentile(&latencies, 99.0);
    report.dispatch_max_ms = latencies.last().copied().unwrap_or(0.0);
    let mut bytes: Vec<f64> = receipts.iter().map(|r| r.bytes as f64).collect();
    bytes.sort_by(f64::total_cmp);
    report.bytes_per_host_p50 = measure::percentile(&bytes, 50.0);
    report.bytes_per_host_max = bytes.last().copied().unwrap_or(0.0);
    report.rejoined = shared.rejoined.load(Ordering::Relaxed);
    report.agent_errors = shared.errors.load(Ordering::Relaxed);
    report.last_agent_error = shared.last_error.lock().unwrap_or_else(|e| e.into_inner()).clone();
    report.refused = shared.refused.lock().unwrap_or_else(|e| e.into_inner()).clone();
    report.full_verifications = shared.cache.full_verifications.load(Ordering::Relaxed);
    match converged {
        Ok(states) => {
            report.rollouts = states;
            progress(&format!(
                "converged in {:.1} s ({:.1} s beyond {} s of soak)",
                report.rollout_secs, report.beyond_soak_secs, report.soak_total_secs
            ));
            Ok(report)
        }
        Err((state, bound)) => Err(FleetError::NotConverged { secs: bound.as_secs(), state }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::scenario::Http;
    use drover_engine::config::{Config, Http1Stack};

    fn scenario(http: Http, tcp_nodelay: bool) -> Scenario {
        Scenario {
            agents: 10,
            channels: 1,
            waves: 1,
            soak_secs: 1,
            max_in_flight_pct: None,
            long_poll_secs: 42,
            idle_secs: 0,
            slow: 0,
            slow_secs: 1,
            failing: 0,
            offline: 0,
            rejoin_secs: 1,
            ramp_per_sec: 10,
            timeout_secs: 10,
            http,
            tcp_nodelay,
            store: crate::fleet::scenario::StoreBackend::Sqlite,
            enroll_concurrency: 16,
            processes: 0,
        }
    }

    /// The sections, as the coordinator itself parses them after the lines every site has.
    fn parsed(s: &Scenario) -> Config {
        let text = format!(
            "listen = \"127.0.0.1:1\"\nstate_dir = \"s\"\npublic_urls = [\"https://127.0.0.1:1\"]\ntrust_file = \"t\"\nagent_binary = \"a\"\n\n{}",
            coordinator_sections(s)
        );
        Config::parse(Path::new("coordinator.toml"), &text).expect("the coordinator takes the bench's config")
    }

    #[test]
    fn nodelay_off_reaches_the_coordinators_config_and_on_is_its_default() {
        let off = parsed(&scenario(Http::Http11, false));
        assert!(!off.connections.tcp_nodelay, "--nodelay off is the Nagle baseline");
        let on = parsed(&scenario(Http::HyperHttp11, true));
        assert!(on.connections.tcp_nodelay);
        assert_eq!(on.connections.http1, Http1Stack::Hyper);
        assert_eq!((on.agent.long_poll_secs, on.connections.max_unauthenticated_per_source), (42, 100_000));
    }
}
