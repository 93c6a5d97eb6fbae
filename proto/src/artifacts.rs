//! The signed release artifacts: `fleet.resolved.json`, one `RolloutManifest` per channel,
//! and `timestamp.json` (freshness, TUF's timestamp role).
//!
//! Arrays whose order JCS cannot fix (host sets, budget host lists, wave host lists) are
//! sorted by their producer; `check_sorted` lets a verifier refuse any other order.
//!
//! # Schema rule: safe integers
//!
//! Every signed document — these artifacts and the `signed` part of a per-host envelope
//! (intents, tasks) — carries integers within ±(2^53 − 1) only ([`check_safe_integers`]).
//! RFC 8785 reads every number as a double, so a larger integer is signed as the double
//! nearest to it, and readers disagree about its value: Rust reads `1152921504606847000`
//! as that u64, a JavaScript or Python JCS reader as 2^60. The canonicaliser writes such
//! numbers as RFC 8785 says; producers refuse to sign them and verifiers refuse to read
//! them (`VerifyError::UnsafeInteger`), so a signature never covers a number whose value
//! depends on who reads it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::names::RolloutId;
use crate::selector::Selector;
use crate::spec::{Compliance, Edge, HealthGate, HostSpec, OnHealthFailure, ProbeSpec};
use crate::time::Time;

/// Schema version of every artifact this crate writes.
pub const SCHEMA_VERSION: u64 = 1;

/// The largest integer magnitude a signed document may carry: 2^53 − 1, the largest `n`
/// such that every integer up to `n` is exactly an IEEE-754 double (I-JSON's limit).
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// A document that breaks a rule of the artifact schema before it is even typed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// An integer beyond ±(2^53 − 1) (schema rule: safe integers).
    #[error("integer {number} at {pointer:?} is outside ±(2^53 - 1): signed documents carry only integers every JSON reader holds exactly")]
    UnsafeInteger {
        /// Where it is, as a JSON pointer (RFC 6901), cut to a bound.
        pointer: String,
        /// The number as parsed.
        number: String,
    },
}

/// Schema rule: no integer beyond ±(2^53 − 1) anywhere in `value`. A double written without
/// a fraction (`1e17`, `9007199254740992.0`) counts as the integer it is. The first offender
/// in document order (members in key order) is reported.
pub fn check_safe_integers(value: &Value) -> Result<(), SchemaError> {
    let Some((mut path, number)) = first_unsafe_integer(value) else {
        return Ok(());
    };
    path.reverse();
    let pointer: String = path.iter().map(|segment| format!("/{}", segment.replace('~', "~0").replace('/', "~1"))).collect();
    Err(SchemaError::UnsafeInteger { pointer: crate::text::echo(&pointer).into_owned(), number: number.to_string() })
}

/// Whether `n` is an integer of magnitude above [`MAX_SAFE_INTEGER`].
fn is_unsafe_integer(n: &serde_json::Number) -> bool {
    if let Some(u) = n.as_u64() {
        return u > MAX_SAFE_INTEGER;
    }
    if let Some(i) = n.as_i64() {
        return i.unsigned_abs() > MAX_SAFE_INTEGER;
    }
    n.as_f64().is_some_and(|f| f.trunc() == f && f.abs() > MAX_SAFE_INTEGER as f64)
}

/// The first unsafe integer and its path, innermost segment first (built while unwinding,
/// so the common case of a clean document allocates nothing).
fn first_unsafe_integer(value: &Value) -> Option<(Vec<String>, &serde_json::Number)> {
    match value {
        Value::Number(n) => is_unsafe_integer(n).then(|| (Vec::new(), n)),
        Value::Array(items) => items.iter().enumerate().find_map(|(i, item)| {
            first_unsafe_integer(item).map(|(mut path, n)| {
                path.push(i.to_string());
                (path, n)
            })
        }),
        Value::Object(map) => map.iter().find_map(|(key, item)| {
            first_unsafe_integer(item).map(|(mut path, n)| {
                path.push(key.clone());
                (path, n)
            })
        }),
        Value::Null | Value::Bool(_) | Value::String(_) => None,
    }
}

/// Provenance of a release.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResolvedMeta {
    /// Always [`SCHEMA_VERSION`].
    pub schema_version: u64,
    /// The CI commit the release was built from.
    pub ci_commit: String,
    /// When CI built (and signed) it.
    pub created_at: Time,
}

/// A wave with its hosts resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResolvedWave {
    /// 0-based position.
    pub index: u32,
    /// Soak time.
    pub soak_secs: u64,
    /// Hostnames, sorted.
    pub hosts: Vec<String>,
}

/// A channel with its waves resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResolvedChannel {
    /// The ref this release rolls the channel to.
    pub channel_ref: String,
    /// The policy's name.
    pub rollout_policy: String,
    /// Freshness window of the channel's timestamp entries.
    pub freshness_window_secs: u64,
    /// How often CI re-signs.
    pub signing_interval_secs: u64,
    /// How often the coordinator reconciles.
    pub reconcile_interval_secs: u64,
    /// Compliance settings.
    pub compliance: Compliance,
    /// Probes.
    pub probes: Vec<ProbeSpec>,
    /// Waves with their hosts.
    pub waves: Vec<ResolvedWave>,
    /// The gate.
    pub health_gate: HealthGate,
    /// halt | rollback-and-halt.
    pub on_health_failure: OnHealthFailure,
}

/// A disruption budget frozen against the hosts of a release.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FrozenBudget {
    /// The selector in normal form (matched across rollouts by canonical equality).
    pub selector: Selector,
    /// The hosts it selected, sorted.
    pub hosts: Vec<String>,
    /// Absolute cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<u32>,
    /// Percentage cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight_pct: Option<u32>,
}

impl FrozenBudget {
    /// The number of hosts this budget lets be in flight at once: the smaller of the
    /// absolute cap and `floor(pct × n / 100)` (at least 1).
    pub fn allowed(&self) -> usize {
        let n = self.hosts.len();
        let by_count = self.max_in_flight.map(|m| m as usize);
        let by_pct = self.max_in_flight_pct.map(|p| ((p as usize).saturating_mul(n) / 100).max(1));
        match (by_count, by_pct) {
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) => a,
            (None, Some(b)) => b,
            // Validation refuses budgets with neither limit; treat one as "no cap".
            (None, None) => usize::MAX,
        }
    }
}

/// The desired state of the whole fleet for one CI commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FleetResolved {
    /// Provenance.
    pub meta: ResolvedMeta,
    /// Hosts by hostname.
    pub hosts: BTreeMap<String, HostSpec>,
    /// Channels by name, waves resolved.
    pub channels: BTreeMap<String, ResolvedChannel>,
    /// Host ordering.
    pub edges: Vec<Edge>,
    /// Channel ordering.
    pub channel_edges: Vec<Edge>,
    /// Budgets frozen against `hosts`.
    pub disruption_budgets: Vec<FrozenBudget>,
}

/// One host's place in a rollout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HostSetEntry {
    /// The host.
    pub hostname: String,
    /// Its wave.
    pub wave_index: u32,
    /// The closure it must run.
    pub target_closure: String,
}

/// A wave of a manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ManifestWave {
    /// 0-based position.
    pub index: u32,
    /// Soak time.
    pub soak_secs: u64,
}

/// The frozen, signed plan of one rollout: who is in which wave, with which target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RolloutManifest {
    /// Always [`SCHEMA_VERSION`].
    pub schema_version: u64,
    /// `"{channel}@{channelRef}"`, recomputed by every verifier.
    pub rollout_id: RolloutId,
    /// The channel.
    pub channel: String,
    /// The ref.
    pub channel_ref: String,
    /// sha256 (hex) of the canonical bytes of the fleet.resolved this was projected from.
    pub fleet_resolved_hash: String,
    /// When CI built it (checked against the trust's rejectBefore).
    pub created_at: Time,
    /// Hosts sorted by hostname.
    pub host_set: Vec<HostSetEntry>,
    /// Waves in order.
    pub waves: Vec<ManifestWave>,
    /// The gate.
    pub health_gate: HealthGate,
    /// halt | rollback-and-halt.
    pub on_health_failure: OnHealthFailure,
    /// Probes.
    pub probes: Vec<ProbeSpec>,
    /// Compliance frameworks claimed.
    pub compliance_frameworks: Vec<String>,
    /// Edges between this rollout's hosts.
    pub edges: Vec<Edge>,
    /// Budgets covering any of this rollout's hosts, frozen.
    pub disruption_budgets: Vec<FrozenBudget>,
}

impl RolloutManifest {
    /// The entry of `hostname`, by binary search over the sorted host set.
    pub fn host(&self, hostname: &str) -> Option<&HostSetEntry> {
        self.host_set.binary_search_by(|e| e.hostname.as_str().cmp(hostname)).ok().map(|i| &self.host_set[i])
    }

    /// Whether every order-sensitive array is in its producer order and every host's wave
    /// exists (consumers index waves by `waveIndex`).
    pub fn check_sorted(&self) -> bool {
        self.host_set.windows(2).all(|w| w[0].hostname < w[1].hostname)
            && self.host_set.iter().all(|h| (h.wave_index as usize) < self.waves.len())
            && self.disruption_budgets.iter().all(|b| b.hosts.windows(2).all(|w| w[0] < w[1]))
            && self.waves.iter().enumerate().all(|(i, w)| w.index as usize == i)
    }
}

/// A rollout that may be reverted to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RevertableRollout {
    /// Its id.
    pub rollout_id: RolloutId,
    /// sha256 (hex) of its manifest's bytes.
    pub manifest_sha256: String,
}

/// A channel's entry in the timestamp.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TimestampChannel {
    /// The current rollout.
    pub rollout_id: RolloutId,
    /// sha256 (hex) of its manifest's bytes.
    pub manifest_sha256: String,
    /// The channel's freshness window.
    pub freshness_window_secs: u64,
    /// Earlier rollouts of the channel that may be reverted to, newest first.
    pub revertable: Vec<RevertableRollout>,
}

/// `timestamp.json`: re-signed every signing interval; lists what is current.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TimestampDoc {
    /// Always [`SCHEMA_VERSION`].
    pub schema_version: u64,
    /// Strictly increasing across signings.
    pub version: u64,
    /// When it was signed.
    pub signed_at: Time,
    /// sha256 (hex) of the canonical fleet.resolved bytes.
    pub fleet_resolved_sha256: String,
    /// Per channel.
    pub channels: BTreeMap<String, TimestampChannel>,
}

impl TimestampDoc {
    /// The smallest freshness window across channels, with its channel.
    pub fn tightest_window(&self) -> Option<(&str, u64)> {
        self.channels.iter().map(|(n, c)| (n.as_str(), c.freshness_window_secs)).min_by_key(|(_, w)| *w)
    }

    /// Whether `rollout_id` with manifest `sha256` is listed, as current or as revertable.
    pub fn lists(&self, rollout_id: &RolloutId, sha256: &str) -> bool {
        self.channels.get(rollout_id.channel()).is_some_and(|c| {
            (c.rollout_id == *rollout_id && c.manifest_sha256 == sha256)
                || c.revertable.iter().any(|r| r.rollout_id == *rollout_id && r.manifest_sha256 == sha256)
        })
    }
}

/// `roots/<rolloutId>.json`: the signed root of a manifest's host-set Merkle tree
/// (`docs/manifest-proofs.md`), what an agent verifies instead of the whole manifest. A
/// deterministic projection of the manifest ([`ManifestRoot::of`]); `verify_release` refuses
/// one that is not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ManifestRoot {
    /// Always [`SCHEMA_VERSION`].
    pub schema_version: u64,
    /// The manifest's rollout id, recomputed by every verifier.
    pub rollout_id: RolloutId,
    /// The channel.
    pub channel: String,
    /// The ref.
    pub channel_ref: String,
    /// The manifest's anchor to its fleet.resolved.
    pub fleet_resolved_hash: String,
    /// The manifest's creation time (checked against the trust's rejectBefore).
    pub created_at: Time,
    /// sha256 (hex) of the manifest's bytes: what the timestamp lists and intents name.
    pub manifest_sha256: String,
    /// Number of entries in the manifest's host set (the tree's leaves).
    pub tree_size: u64,
    /// The Merkle Tree Hash over the host set, lowercase hex.
    pub root_hash: String,
    /// The channel's signed probes (the only ones that may gate a host).
    pub probes: Vec<ProbeSpec>,
}

impl ManifestRoot {
    /// The root of `manifest`, whose bytes have sha256 `manifest_sha256`.
    pub fn of(manifest: &RolloutManifest, manifest_sha256: &str) -> Result<ManifestRoot, crate::canonical::CanonicalError> {
        let tree = crate::merkle::Tree::from_entries(&manifest.host_set)?;
        Ok(ManifestRoot {
            schema_version: SCHEMA_VERSION,
            rollout_id: manifest.rollout_id.clone(),
            channel: manifest.channel.clone(),
            channel_ref: manifest.channel_ref.clone(),
            fleet_resolved_hash: manifest.fleet_resolved_hash.clone(),
            created_at: manifest.created_at,
            manifest_sha256: manifest_sha256.to_owned(),
            tree_size: tree.size(),
            root_hash: hex::encode(tree.root()),
            probes: manifest.probes.clone(),
        })
    }
}
