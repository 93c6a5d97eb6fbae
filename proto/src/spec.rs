//! The fleet spec: what CI evaluates (`nix eval --json .#fleet`) and `drover release` reads.
//!
//! Durations may be written `"15m"` here; every artifact carries integer seconds. Validation
//! reports the first problem with the JSON path of the offending field, so a CI log says
//! exactly which line of the Nix config to fix.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::duration::{de_opt_secs, de_secs};
use crate::names::{check_channel, check_hostname, check_ref, check_store_path, check_tag};
use crate::selector::{Selectable, Selector};

/// Why a fleet spec was refused. `path` is a JSON path such as `channels.stable.freshnessWindowSecs`.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// Not JSON of the spec's shape (unknown field, wrong type, bad duration…).
    #[error("fleet spec is malformed at {path}: {source}")]
    Malformed {
        /// Where, as a JSON path (`.` for the document itself).
        path: String,
        /// What the parser reported (it names line and column).
        #[source]
        source: serde_json::Error,
    },
    /// A field's value breaks a rule.
    #[error("fleet spec {path}: {message}")]
    Invalid {
        /// Where.
        path: String,
        /// What is wrong.
        message: String,
    },
}

fn invalid(path: impl Into<String>, message: impl Into<String>) -> SpecError {
    SpecError::Invalid { path: path.into(), message: message.into() }
}

/// One host of the fleet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HostSpec {
    /// Nix system double, e.g. `x86_64-linux`.
    pub system: String,
    /// Free-form labels used by selectors.
    #[serde(default)]
    pub tags: Vec<String>,
    /// The channel the host follows.
    pub channel: String,
    /// The system closure (`/nix/store/…`) the host should run.
    pub closure: String,
}

/// Whether a compliance result or probe blocks (`enforce`) or is only reported (`observe`).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Failing blocks.
    #[default]
    Enforce,
    /// Failing is reported only.
    Observe,
}

/// One statically evaluated compliance control.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StaticResult {
    /// Control id, e.g. `cis-5.2.1`.
    pub control: String,
    /// Whether failing it must block the rollout.
    pub required: bool,
    /// The evaluation's outcome.
    pub passed: bool,
}

/// A channel's compliance settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Compliance {
    /// Frameworks claimed, e.g. `["cis-level1"]`.
    #[serde(default)]
    pub frameworks: Vec<String>,
    /// Enforce or observe static results.
    #[serde(default)]
    pub mode: Mode,
    /// Results of static controls evaluated by CI.
    #[serde(default)]
    pub static_results: Vec<StaticResult>,
}

/// How a probe checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProbeKind {
    /// Runs a command; exit 0 passes.
    Exec,
    /// GETs a URL; the expected status passes.
    Http,
    /// Connects to host:port.
    Tcp,
}

/// A health probe. The fields that apply depend on `kind`: `command` for exec, `url` (and
/// `expectStatus`) for http, `host` and `port` for tcp.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProbeSpec {
    /// Unique within the channel.
    pub name: String,
    /// exec, http or tcp.
    pub kind: ProbeKind,
    /// exec: argv, the program first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// http: the URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// http: the status that passes (default 200).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect_status: Option<u16>,
    /// tcp: the host to connect to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// tcp: the port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// Give up after this many seconds (a timeout is a probe-error).
    #[serde(deserialize_with = "de_secs")]
    pub timeout_secs: u64,
    /// Enforce (gates the rollout) or observe.
    #[serde(default)]
    pub mode: Mode,
}

impl ProbeSpec {
    /// The rules a probe obeys wherever it is defined (a fleet spec, an agent's local
    /// configuration): a name, a timeout of at least a second, and exactly the fields its kind
    /// uses. On a refusal, the message names `path` and the field; its `message` is the rule.
    pub fn validate(&self, path: &str) -> Result<(), (String, String)> {
        match self.check(path) {
            Ok(()) => Ok(()),
            Err(SpecError::Invalid { path, message }) => Err((path, message)),
            Err(e) => Err((path.to_owned(), e.to_string())),
        }
    }

    fn check(&self, path: &str) -> Result<(), SpecError> {
        if self.name.is_empty() {
            return Err(invalid(format!("{path}.name"), "probe name is empty"));
        }
        if self.timeout_secs == 0 {
            return Err(invalid(format!("{path}.timeoutSecs"), "must be at least 1 second"));
        }
        type Fields<'a> = &'a [(&'a str, bool)];
        let (need, forbid): (Fields<'_>, Fields<'_>) = match self.kind {
            ProbeKind::Exec => (
                &[("command", self.command.as_ref().is_some_and(|c| !c.is_empty()))],
                &[
                    ("url", self.url.is_some()),
                    ("expectStatus", self.expect_status.is_some()),
                    ("host", self.host.is_some()),
                    ("port", self.port.is_some()),
                ],
            ),
            ProbeKind::Http => (
                &[("url", self.url.as_ref().is_some_and(|u| u.starts_with("http://") || u.starts_with("https://")))],
                &[("command", self.command.is_some()), ("host", self.host.is_some()), ("port", self.port.is_some())],
            ),
            ProbeKind::Tcp => (
                &[("host", self.host.as_ref().is_some_and(|h| !h.is_empty())), ("port", self.port.is_some_and(|p| p > 0))],
                &[("command", self.command.is_some()), ("url", self.url.is_some()), ("expectStatus", self.expect_status.is_some())],
            ),
        };
        for (field, ok) in need {
            if !ok {
                return Err(invalid(format!("{path}.{field}"), format!("required (and non-empty) for a {:?} probe", self.kind)));
            }
        }
        for (field, present) in forbid {
            if *present {
                return Err(invalid(format!("{path}.{field}"), format!("does not apply to a {:?} probe", self.kind)));
            }
        }
        Ok(())
    }
}

/// A channel: a stream of targets with its own policy and freshness.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChannelSpec {
    /// Name of the rollout policy in `rolloutPolicies`.
    pub rollout_policy: String,
    /// Explicit channel ref; by default the release's CI commit.
    #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
    pub channel_ref: Option<String>,
    /// A timestamp older than this is stale for this channel.
    #[serde(deserialize_with = "de_secs")]
    pub freshness_window_secs: u64,
    /// How often CI re-signs the timestamp.
    #[serde(deserialize_with = "de_secs")]
    pub signing_interval_secs: u64,
    /// How often the coordinator reconciles this channel (default 30 s).
    #[serde(default, deserialize_with = "de_opt_secs", skip_serializing_if = "Option::is_none")]
    pub reconcile_interval_secs: Option<u64>,
    /// Compliance frameworks and static results.
    #[serde(default)]
    pub compliance: Compliance,
    /// Health probes.
    #[serde(default)]
    pub probes: Vec<ProbeSpec>,
}

/// One wave of a policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WaveSpec {
    /// Which hosts (of the channel) the wave takes; a host joins the first wave that matches.
    pub selector: Selector,
    /// How long the wave soaks before the next starts.
    #[serde(deserialize_with = "de_secs")]
    pub soak_secs: u64,
}

/// The health gate a wave must pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HealthGate {
    /// A host with more failed systemd units fails the gate.
    #[serde(default)]
    pub max_failed_units: u32,
    /// Probes that must pass (by name).
    #[serde(default)]
    pub required_probes: Vec<String>,
    /// Failed hosts tolerated per wave before `onHealthFailure` fires.
    #[serde(default)]
    pub max_failures: u32,
}

/// What a rollout does when the health gate fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum OnHealthFailure {
    /// Freeze the rollout.
    #[default]
    #[serde(rename = "halt")]
    Halt,
    /// Revert every touched host to the previous rollout, then halt.
    #[serde(rename = "rollback-and-halt")]
    RollbackAndHalt,
}

/// A rollout policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RolloutPolicySpec {
    /// Waves in order.
    pub waves: Vec<WaveSpec>,
    /// The gate.
    #[serde(default)]
    pub health_gate: HealthGate,
    /// halt | rollback-and-halt.
    #[serde(default)]
    pub on_health_failure: OnHealthFailure,
}

/// An ordering constraint: `after` waits for `before`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Edge {
    /// Goes first (a hostname, or a channel for channelEdges).
    pub before: String,
    /// Goes second.
    pub after: String,
    /// Why, for the report.
    #[serde(default)]
    pub reason: String,
}

/// A cap on concurrent disruption.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BudgetSpec {
    /// Which hosts the budget covers.
    pub selector: Selector,
    /// At most this many in flight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<u32>,
    /// At most floor(pct × n / 100) in flight, at least 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight_pct: Option<u32>,
}

/// The whole fleet spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FleetSpec {
    /// Hosts by hostname.
    pub hosts: BTreeMap<String, HostSpec>,
    /// Channels by name.
    pub channels: BTreeMap<String, ChannelSpec>,
    /// Policies by name.
    pub rollout_policies: BTreeMap<String, RolloutPolicySpec>,
    /// Host ordering (within a rollout).
    #[serde(default)]
    pub edges: Vec<Edge>,
    /// Channel ordering.
    #[serde(default)]
    pub channel_edges: Vec<Edge>,
    /// Disruption budgets.
    #[serde(default)]
    pub disruption_budgets: Vec<BudgetSpec>,
}

/// A host as selectors see it.
pub struct NamedHost<'a> {
    /// Its hostname.
    pub name: &'a str,
    /// Its spec.
    pub spec: &'a HostSpec,
}

impl Selectable for NamedHost<'_> {
    fn hostname(&self) -> &str {
        self.name
    }
    fn has_tag(&self, tag: &str) -> bool {
        self.spec.tags.iter().any(|t| t == tag)
    }
    fn channel(&self) -> &str {
        &self.spec.channel
    }
}

impl FleetSpec {
    /// Parses and validates a spec.
    pub fn from_json(bytes: &[u8]) -> Result<Self, SpecError> {
        let mut de = serde_json::Deserializer::from_slice(bytes);
        let spec: FleetSpec = serde_path_to_error::deserialize(&mut de)
            .map_err(|e| SpecError::Malformed { path: e.path().to_string(), source: e.into_inner() })?;
        // Trailing bytes after the document.
        de.end().map_err(|source| SpecError::Malformed { path: ".".to_owned(), source })?;
        spec.validate()?;
        Ok(spec)
    }

    /// Hosts in name order, as selectors see them.
    pub fn named_hosts(&self) -> impl Iterator<Item = NamedHost<'_>> {
        self.hosts.iter().map(|(name, spec)| NamedHost { name, spec })
    }

    /// Index of the first wave of `policy` whose selector matches `host`.
    pub fn wave_of(policy: &RolloutPolicySpec, host: &NamedHost<'_>) -> Option<usize> {
        policy.waves.iter().position(|w| w.selector.matches(host))
    }

    /// Checks every rule; the first broken one is returned.
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.hosts.is_empty() {
            return Err(invalid("hosts", "the fleet has no hosts"));
        }
        for (name, host) in &self.hosts {
            let path = format!("hosts.{name}");
            check_hostname(name).map_err(|e| invalid(&path, e.to_string()))?;
            if !self.channels.contains_key(&host.channel) {
                return Err(invalid(format!("{path}.channel"), format!("unknown channel {:?}", host.channel)));
            }
            check_store_path(&host.closure).map_err(|e| invalid(format!("{path}.closure"), e.to_string()))?;
            if host.system.is_empty() {
                return Err(invalid(format!("{path}.system"), "empty"));
            }
            for t in &host.tags {
                check_tag(t).map_err(|e| invalid(format!("{path}.tags"), e.to_string()))?;
            }
        }
        // Policies before channels: a policy without waves or with a selector that matches
        // nothing must be reported at the policy, not at the first host it failed to place.
        for (name, policy) in &self.rollout_policies {
            let path = format!("rolloutPolicies.{name}");
            if policy.waves.is_empty() {
                return Err(invalid(format!("{path}.waves"), "a policy needs at least one wave"));
            }
            for (i, w) in policy.waves.iter().enumerate() {
                w.selector.check().map_err(|e| invalid(format!("{path}.waves[{i}].selector"), e.to_string()))?;
            }
        }
        for (name, ch) in &self.channels {
            let path = format!("channels.{name}");
            check_channel(name).map_err(|e| invalid(&path, e.to_string()))?;
            if let Some(r) = &ch.channel_ref {
                check_ref(r).map_err(|e| invalid(format!("{path}.ref"), e.to_string()))?;
            }
            let policy = self
                .rollout_policies
                .get(&ch.rollout_policy)
                .ok_or_else(|| invalid(format!("{path}.rolloutPolicy"), format!("unknown rollout policy {:?}", ch.rollout_policy)))?;
            if ch.signing_interval_secs == 0 {
                return Err(invalid(format!("{path}.signingIntervalSecs"), "must be at least 1 second"));
            }
            if ch.freshness_window_secs < ch.signing_interval_secs.saturating_mul(2) {
                return Err(invalid(
                    format!("{path}.freshnessWindowSecs"),
                    format!(
                        "freshness window {}s is less than 2 × signing interval {}s: one late signing would make every host refuse",
                        ch.freshness_window_secs, ch.signing_interval_secs
                    ),
                ));
            }
            if ch.reconcile_interval_secs == Some(0) {
                return Err(invalid(format!("{path}.reconcileIntervalSecs"), "must be at least 1 second"));
            }
            let mut probe_names = BTreeSet::new();
            for (i, p) in ch.probes.iter().enumerate() {
                p.check(&format!("{path}.probes[{i}]"))?;
                if !probe_names.insert(p.name.as_str()) {
                    return Err(invalid(format!("{path}.probes[{i}].name"), format!("duplicate probe {:?}", p.name)));
                }
            }
            for req in &policy.health_gate.required_probes {
                if !probe_names.contains(req.as_str()) {
                    return Err(invalid(
                        format!("rolloutPolicies.{}.healthGate.requiredProbes", ch.rollout_policy),
                        format!("probe {req:?} is not defined on channel {name:?}, which uses this policy"),
                    ));
                }
            }
            for host in self.named_hosts().filter(|h| &h.spec.channel == name) {
                if Self::wave_of(policy, &host).is_none() {
                    return Err(invalid(
                        format!("hosts.{}", host.name),
                        format!("host is in no wave of policy {:?} (channel {name:?})", ch.rollout_policy),
                    ));
                }
            }
        }
        self.check_edges("edges", &self.edges, |n| self.hosts.contains_key(n), "host")?;
        self.check_edges("channelEdges", &self.channel_edges, |n| self.channels.contains_key(n), "channel")?;
        for (i, b) in self.disruption_budgets.iter().enumerate() {
            let path = format!("disruptionBudgets[{i}]");
            b.selector.check().map_err(|e| invalid(format!("{path}.selector"), e.to_string()))?;
            if b.max_in_flight.is_none() && b.max_in_flight_pct.is_none() {
                return Err(invalid(&path, "budget sets neither maxInFlight nor maxInFlightPct"));
            }
            if b.max_in_flight == Some(0) {
                return Err(invalid(format!("{path}.maxInFlight"), "0 would block every host forever"));
            }
            if b.max_in_flight_pct.is_some_and(|p| p == 0 || p > 100) {
                return Err(invalid(format!("{path}.maxInFlightPct"), "must be between 1 and 100"));
            }
        }
        Ok(())
    }

    fn check_edges(&self, field: &str, edges: &[Edge], known: impl Fn(&str) -> bool, what: &str) -> Result<(), SpecError> {
        let mut graph: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (i, e) in edges.iter().enumerate() {
            for (end, name) in [("before", &e.before), ("after", &e.after)] {
                if !known(name) {
                    return Err(invalid(format!("{field}[{i}].{end}"), format!("unknown {what} {name:?}")));
                }
            }
            if e.before == e.after {
                return Err(invalid(format!("{field}[{i}]"), format!("{what} {:?} cannot come before itself", e.before)));
            }
            graph.entry(&e.before).or_default().push(&e.after);
        }
        if let Some(cycle) = find_cycle(&graph) {
            return Err(invalid(field, format!("cycle: {}", cycle.join(" -> "))));
        }
        Ok(())
    }
}

/// A cycle in a directed graph, as the node path that closes it, if any.
fn find_cycle<'a>(graph: &BTreeMap<&'a str, Vec<&'a str>>) -> Option<Vec<&'a str>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    let mut marks: BTreeMap<&str, Mark> = BTreeMap::new();
    for &start in graph.keys() {
        if marks.contains_key(start) {
            continue;
        }
        // Iterative DFS: (node, next child index), with the current path for reporting.
        let mut stack: Vec<(&str, usize)> = vec![(start, 0)];
        marks.insert(start, Mark::Open);
        while let Some((node, idx)) = stack.last_mut() {
            let children = graph.get(*node).map(Vec::as_slice).unwrap_or(&[]);
            if let Some(&child) = children.get(*idx) {
                *idx += 1;
                match marks.get(child) {
                    Some(Mark::Open) => {
                        let mut path: Vec<&str> = stack.iter().map(|(n, _)| *n).skip_while(|n| *n != child).collect();
                        path.push(child);
                        return Some(path);
                    }
                    Some(Mark::Done) => {}
                    None => {
                        marks.insert(child, Mark::Open);
                        stack.push((child, 0));
                    }
                }
            } else {
                marks.insert(node, Mark::Done);
                stack.pop();
            }
        }
    }
    None
}
