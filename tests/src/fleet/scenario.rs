//! What `drover-bench fleet` simulates: how many hosts, in how many channels and waves, which
//! of them misbehave and how, and the signed release that rolls every host from its first
//! system generation to its second.
//!
//! Everything here is a pure function of the [`Scenario`]: the same flags give the same
//! hostnames, channels, waves and roles, so runs at different sizes differ only in size.

use std::time::Duration;

use drover_proto::keys::KeySigner;
use drover_proto::release::{ReleaseFiles, ReleaseParams, build_release};
use drover_proto::resolve::ReleaseMeta;
use drover_proto::spec::FleetSpec;
use drover_proto::time::Time;
use serde_json::{Value, json};

use crate::sim_agent::Behaviour;

/// The probe every channel's health gate requires.
pub const PROBE: &str = "node-check";

/// One run's shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scenario {
    /// Simulated hosts.
    pub agents: usize,
    /// Channels the hosts are dealt into (round robin); one rollout each.
    pub channels: usize,
    /// Waves per rollout; wave sizes grow 1 : 2 : 4 : …, the last wave takes the rest.
    pub waves: usize,
    /// Each wave's soak.
    pub soak_secs: u64,
    /// The fleet's disruption budget: at most this percentage of hosts activating or soaking
    /// at once (none: a whole wave is dispatched at once).
    pub max_in_flight_pct: Option<u32>,
    /// The coordinator's long-poll: how long an idle check-in is held.
    pub long_poll_secs: u64,
    /// How long the idle fleet is watched before the rollout.
    pub idle_secs: u64,
    /// Hosts whose switch takes [`Scenario::slow_secs`].
    pub slow: usize,
    /// The slow hosts' switch time.
    pub slow_secs: u64,
    /// Hosts that switch but fail the health gate's required probe (the gate tolerates this
    /// many per wave, so the rollout still converges around them).
    pub failing: usize,
    /// Hosts that drop their connection when the rollout starts and rejoin (a new connection,
    /// as after an agent restart) [`Scenario::rejoin_secs`] later.
    pub offline: usize,
    /// How long the offline hosts stay away.
    pub rejoin_secs: u64,
    /// Agents started (each opening its connection) per second while the fleet ramps up.
    pub ramp_per_sec: usize,
    /// The longest the rollout may take to converge.
    pub timeout_secs: u64,
    /// What the agents' TLS offers in ALPN, so which of the coordinator's HTTP stacks serves them.
    pub http: Http,
    /// The coordinator's `[connections] tcp_nodelay`: whether the sockets it accepts set
    /// `TCP_NODELAY` (false: Nagle's algorithm, the sockets as they were before it was set).
    pub tcp_nodelay: bool,
    /// The coordinator's store, and how many replicas serve the fleet.
    pub store: StoreBackend,
    /// Hosts created and enrolled at once during enrollment.
    pub enroll_concurrency: usize,
    /// Simulator processes the agents are split over, each from its own loopback address
    /// ([`super::parts`]); 0 runs them in this process.
    pub processes: usize,
}

impl Scenario {
    /// `agents` hosts in `drover-bench fleet`'s default shape: 3 channels of 4 waves, 5 s soak,
    /// a 10 % budget, 60 s long-polls and idle window, every host healthy, HTTP/1.1, SQLite,
    /// the agents in this process.
    pub fn of(agents: usize) -> Scenario {
        Scenario {
            agents,
            channels: 3,
            waves: 4,
            soak_secs: 5,
            max_in_flight_pct: Some(10),
            long_poll_secs: 60,
            idle_secs: 60,
            slow: 0,
            slow_secs: 3,
            failing: 0,
            offline: 0,
            rejoin_secs: 10,
            ramp_per_sec: 500,
            timeout_secs: 600,
            http: Http::Http11,
            tcp_nodelay: true,
            store: StoreBackend::Sqlite,
            enroll_concurrency: 16,
            processes: 0,
        }
    }
}

/// Where the coordinator keeps its state: `sqlite` (one coordinator, its store in its state
/// dir: the baseline) or `postgres-N` (N replicas on one PostgreSQL database, sharing one
/// state dir's CA and server identity, one of them leading).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StoreBackend {
    /// One coordinator on SQLite.
    #[default]
    Sqlite,
    /// Replicas on PostgreSQL.
    Postgres {
        /// How many (1 to [`StoreBackend::MAX_REPLICAS`]).
        replicas: usize,
    },
}

impl StoreBackend {
    /// The most replicas a run starts (each one a process with its connection pool).
    pub const MAX_REPLICAS: usize = 8;

    /// `sqlite` or `postgres-N`.
    pub fn parse(s: &str) -> Option<StoreBackend> {
        if s == "sqlite" {
            return Some(StoreBackend::Sqlite);
        }
        let replicas = s.strip_prefix("postgres-")?.parse().ok()?;
        (1..=Self::MAX_REPLICAS).contains(&replicas).then_some(StoreBackend::Postgres { replicas })
    }

    /// As `parse` reads it.
    pub fn as_string(self) -> String {
        match self {
            StoreBackend::Sqlite => "sqlite".to_owned(),
            StoreBackend::Postgres { replicas } => format!("postgres-{replicas}"),
        }
    }

    /// Coordinator processes serving the fleet.
    pub fn replicas(self) -> usize {
        match self {
            StoreBackend::Sqlite => 1,
            StoreBackend::Postgres { replicas } => replicas,
        }
    }
}

/// `on` or `off`, as `--nodelay` takes a `tcp_nodelay` setting and reports print it.
pub fn nodelay_str(on: bool) -> &'static str {
    if on { "on" } else { "off" }
}

/// `on` (true) or `off` (false).
pub fn parse_nodelay(s: &str) -> Option<bool> {
    match s {
        "on" => Some(true),
        "off" => Some(false),
        _ => None,
    }
}

/// The HTTP version the simulated agents ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Http {
    /// ALPN `h2, http/1.1`, as `drover-agent` sends: the coordinator picks HTTP/1.1.
    #[default]
    Http11,
    /// ALPN `h2` only: the coordinator's HTTP/2 stack (hyper).
    Http2,
    /// ALPN `h2, http/1.1` against a coordinator configured with `connections.http1 =
    /// "hyper"`: hyper's HTTP/1.1 instead of the coordinator's own.
    HyperHttp11,
}

impl Http {
    /// As written on the command line and in reports: `1.1` or `2`.
    pub fn as_str(self) -> &'static str {
        match self {
            Http::Http11 => "1.1",
            Http::Http2 => "2",
            Http::HyperHttp11 => "1.1-hyper",
        }
    }

    /// `1.1`, `2` or `1.1-hyper`.
    pub fn parse(s: &str) -> Option<Http> {
        match s {
            "1.1" => Some(Http::Http11),
            "2" => Some(Http::Http2),
            "1.1-hyper" => Some(Http::HyperHttp11),
            _ => None,
        }
    }

    /// The client's ALPN list.
    pub fn alpn(self) -> Vec<Vec<u8>> {
        match self {
            Http::Http11 | Http::HyperHttp11 => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
            Http::Http2 => vec![b"h2".to_vec()],
        }
    }

    /// The coordinator's `connections.http1` for this run.
    pub fn coordinator_http1(self) -> &'static str {
        match self {
            Http::HyperHttp11 => "hyper",
            Http::Http11 | Http::Http2 => "drover",
        }
    }
}

/// What one simulated host does in the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Switches at once and passes its probes.
    Healthy,
    /// Switches slowly.
    Slow,
    /// Fails its required probe after switching.
    Failing,
    /// Away when the rollout starts, back later.
    Offline,
}

impl Role {
    /// The simulated agent's behaviour for this role.
    pub fn behaviour(self, scenario: &Scenario) -> Behaviour {
        match self {
            Role::Healthy | Role::Offline => Behaviour::Healthy,
            Role::Slow => Behaviour::Slow(Duration::from_secs(scenario.slow_secs)),
            Role::Failing => Behaviour::FailsProbes,
        }
    }

    /// A short name for reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Healthy => "healthy",
            Role::Slow => "slow",
            Role::Failing => "failing",
            Role::Offline => "offline",
        }
    }
}

/// One simulated host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimHost {
    /// `sim-00001`, …
    pub hostname: String,
    /// `ch-1`, …
    pub channel: String,
    /// 1-based wave.
    pub wave: usize,
    /// What it does.
    pub role: Role,
}

/// Why a scenario cannot run.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// A count or duration out of range.
    #[error("{flag}: {message}")]
    Invalid {
        /// The flag.
        flag: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The fleet spec or release was refused (a bug in this module).
    #[error("release: {0}")]
    Release(String),
}

impl Scenario {
    /// Checks the counts fit together.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        let bad = |flag, message: String| Err(ScenarioError::Invalid { flag, message });
        if self.agents == 0 {
            return bad("--agents", "at least one agent".into());
        }
        if self.channels == 0 || self.channels > self.agents {
            return bad("--channels", format!("between 1 and the number of agents ({})", self.agents));
        }
        if self.waves == 0 || self.waves > 16 {
            return bad("--waves", "between 1 and 16".into());
        }
        if self.agents / self.channels < self.waves {
            return bad(
                "--waves",
                format!("every wave needs a host: {} per channel is fewer than {} waves", self.agents / self.channels, self.waves),
            );
        }
        if self.slow + self.failing + self.offline > self.agents {
            return bad(
                "--slow/--failing/--offline",
                format!("{} misbehaving hosts is more than {} agents", self.slow + self.failing + self.offline, self.agents),
            );
        }
        if self.max_in_flight_pct.is_some_and(|p| p == 0 || p > 100) {
            return bad("--max-in-flight", "a percentage between 1% and 100%".into());
        }
        if self.long_poll_secs == 0 || self.long_poll_secs > 300 {
            return bad("--long-poll-secs", "between 1 and 300".into());
        }
        if self.ramp_per_sec == 0 {
            return bad("--ramp-per-sec", "at least 1".into());
        }
        Ok(())
    }

    /// Every host: hostnames in order, channels round robin, waves by position in the
    /// channel, roles spread evenly over the fleet (failing first, then slow, then offline,
    /// each on the next free host after its even spot).
    pub fn hosts(&self) -> Vec<SimHost> {
        let mut roles = vec![Role::Healthy; self.agents];
        for (role, count) in [(Role::Failing, self.failing), (Role::Slow, self.slow), (Role::Offline, self.offline)] {
            for j in 0..count {
                let mut i = j * self.agents / count;
                while roles[i] != Role::Healthy {
                    i = (i + 1) % self.agents;
                }
                roles[i] = role;
            }
        }
        let total_weight: usize = (0..self.waves).map(|w| 1usize << w).sum();
        let mut seen_in_channel = vec![0usize; self.channels];
        (0..self.agents)
            .map(|i| {
                let c = i % self.channels;
                let members = self.agents / self.channels + usize::from(c < self.agents % self.channels);
                let k = seen_in_channel[c];
                seen_in_channel[c] += 1;
                SimHost {
                    hostname: hostname(i),
                    channel: format!("ch-{}", c + 1),
                    wave: wave_of(k, members, self.waves, total_weight),
                    role: roles[i],
                }
            })
            .collect()
    }

    /// The fleet spec with every host on `generation`.
    pub fn fleet_spec(&self, hosts: &[SimHost], generation: u32) -> Value {
        let host_specs: serde_json::Map<String, Value> = hosts
            .iter()
            .map(|h| {
                let tags = vec![format!("w{}", h.wave), "gpu".to_owned()];
                (
                    h.hostname.clone(),
                    json!({"system": "x86_64-linux", "tags": tags, "channel": h.channel, "closure": closure(&h.hostname, generation)}),
                )
            })
            .collect();
        let channels: serde_json::Map<String, Value> = (1..=self.channels)
            .map(|c| {
                (
                    format!("ch-{c}"),
                    json!({
                        "rolloutPolicy": "waves", "freshnessWindowSecs": "1d", "signingIntervalSecs": "4h",
                        "probes": [{"name": PROBE, "kind": "exec", "command": [PROBE], "timeoutSecs": 5, "mode": "enforce"}]
                    }),
                )
            })
            .collect();
        let waves: Vec<Value> = (1..=self.waves)
            .map(|w| {
                let selector = if w == self.waves { json!({"all": true}) } else { json!({"tags": [format!("w{w}")]}) };
                json!({"selector": selector, "soakSecs": self.soak_secs})
            })
            .collect();
        let budgets: Vec<Value> =
            self.max_in_flight_pct.iter().map(|pct| json!({"selector": {"tags": ["gpu"]}, "maxInFlightPct": pct})).collect();
        json!({
            "hosts": host_specs,
            "channels": channels,
            "disruptionBudgets": budgets,
            "rolloutPolicies": {
                "waves": {
                    "waves": waves,
                    "healthGate": {"requiredProbes": [PROBE], "maxFailures": self.failing},
                    "onHealthFailure": "halt"
                }
            }
        })
    }

    /// The release moving every host to `generation`, signed by `signer` as CI signs.
    pub fn release(&self, hosts: &[SimHost], generation: u32, signer: &KeySigner, now: Time) -> Result<ReleaseFiles, ScenarioError> {
        let bytes = serde_json::to_vec(&self.fleet_spec(hosts, generation)).map_err(|e| ScenarioError::Release(e.to_string()))?;
        let spec = FleetSpec::from_json(&bytes).map_err(|e| ScenarioError::Release(format!("fleet spec refused: {e}")))?;
        let params = ReleaseParams {
            meta: ReleaseMeta { ci_commit: format!("{:040x}", generation), created_at: now },
            version: u64::from(generation),
            previous: None,
        };
        build_release(&spec, &params, std::slice::from_ref(signer)).map_err(|e| ScenarioError::Release(e.to_string()))
    }
}

/// The `i`th host's name (0-based).
pub fn hostname(i: usize) -> String {
    format!("sim-{:05}", i + 1)
}

/// The closure `hostname` runs at `generation`.
pub fn closure(hostname: &str, generation: u32) -> String {
    drover_devkit::nixkit::store_path(&format!("nixos-system-{hostname}-g{generation}"))
}

/// The 1-based wave of the `k`th of `members` hosts of a channel, waves weighted 1 : 2 : 4 …
/// (out of `total_weight`), each wave at least one host.
fn wave_of(k: usize, members: usize, waves: usize, total_weight: usize) -> usize {
    let mut end = 0;
    let mut cumulative = 0;
    for w in 0..waves {
        cumulative += 1usize << w;
        // At least one host per wave, and the last wave ends at the channel's end.
        end = (members * cumulative / total_weight).max(end + 1);
        if w + 1 == waves {
            end = members;
        }
        if k < end {
            return w + 1;
        }
    }
    waves
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(agents: usize) -> Scenario {
        Scenario {
            agents,
            channels: 3,
            waves: 4,
            soak_secs: 1,
            max_in_flight_pct: Some(10),
            long_poll_secs: 60,
            idle_secs: 0,
            slow: 10,
            slow_secs: 2,
            failing: 3,
            offline: 5,
            rejoin_secs: 5,
            ramp_per_sec: 500,
            timeout_secs: 60,
            http: Http::Http11,
            tcp_nodelay: true,
            store: StoreBackend::Sqlite,
            enroll_concurrency: 16,
            processes: 0,
        }
    }

    #[test]
    fn stores_parse_as_the_command_line_writes_them() {
        assert_eq!(StoreBackend::parse("sqlite"), Some(StoreBackend::Sqlite));
        assert_eq!(StoreBackend::parse("postgres-2"), Some(StoreBackend::Postgres { replicas: 2 }));
        for bad in ["postgres", "postgres-0", "postgres-99", "postgres-x", "mysql", ""] {
            assert_eq!(StoreBackend::parse(bad), None, "{bad}");
        }
        assert_eq!(StoreBackend::Postgres { replicas: 3 }.as_string(), "postgres-3");
        assert_eq!((StoreBackend::Sqlite.replicas(), StoreBackend::Postgres { replicas: 2 }.replicas()), (1, 2));
    }

    #[test]
    fn waves_grow_one_two_four_eight_and_every_wave_has_hosts() {
        let hosts = scenario(1500).hosts();
        let in_wave = |w: usize| hosts.iter().filter(|h| h.channel == "ch-1" && h.wave == w).count();
        assert_eq!((in_wave(1), in_wave(2), in_wave(3), in_wave(4)), (33, 67, 133, 267));
        let tiny = Scenario { agents: 12, slow: 0, failing: 0, offline: 0, ..scenario(12) };
        for w in 1..=4 {
            assert_eq!(tiny.hosts().iter().filter(|h| h.channel == "ch-1" && h.wave == w).count(), 1, "wave {w}");
        }
    }

    #[test]
    fn roles_are_spread_and_counted_exactly() {
        let hosts = scenario(1000).hosts();
        let count = |r: Role| hosts.iter().filter(|h| h.role == r).count();
        assert_eq!((count(Role::Failing), count(Role::Slow), count(Role::Offline)), (3, 10, 5));
        assert_eq!(scenario(1000).hosts(), hosts, "the same flags give the same fleet");
    }

    #[test]
    fn the_release_signs_and_lists_one_rollout_per_channel() {
        let s = scenario(60);
        let hosts = s.hosts();
        let signer = KeySigner::new(ed25519_dalek::SigningKey::from_bytes(&crate::CI_KEY));
        let files = s.release(&hosts, 2, &signer, crate::wall_now()).expect("release");
        let manifests = files.files.keys().filter(|p| p.starts_with("rollouts/") && p.ends_with(".json")).count();
        assert_eq!(manifests, 3, "{:?}", files.files.keys().collect::<Vec<_>>());
    }

    #[test]
    fn nodelay_is_on_or_off_and_nothing_else() {
        assert_eq!((parse_nodelay("on"), parse_nodelay("off")), (Some(true), Some(false)));
        assert_eq!((parse_nodelay("true"), parse_nodelay("")), (None, None));
        assert_eq!((nodelay_str(true), nodelay_str(false)), ("on", "off"));
    }

    #[test]
    fn impossible_shapes_are_refused_naming_the_flag() {
        let e = Scenario { waves: 30, ..scenario(100) }.validate().expect_err("too many waves");
        assert!(e.to_string().starts_with("--waves"), "{e}");
        let e = Scenario { slow: 90, failing: 20, ..scenario(100) }.validate().expect_err("too many misbehaving");
        assert!(e.to_string().contains("115 misbehaving"), "{e}");
    }
}
