//! Projection of a fleet spec into `fleet.resolved` and one manifest per channel.
//!
//! Pure and deterministic: the same spec and [`ReleaseMeta`] give the same bytes, which is
//! what lets anyone rebuild a release from the CI commit and compare.

use std::collections::BTreeMap;

use crate::artifacts::{
    self, FleetResolved, FrozenBudget, HostSetEntry, ManifestWave, ResolvedChannel, ResolvedMeta, ResolvedWave, RolloutManifest,
    SCHEMA_VERSION, SchemaError,
};
use crate::canonical::{self, CanonicalError};
use crate::names::{NameError, RolloutId, check_ref};
use crate::spec::FleetSpec;
use crate::time::Time;

/// Reconcile interval when a channel does not set one.
pub const DEFAULT_RECONCILE_INTERVAL_SECS: u64 = 30;

/// What a release is stamped with besides the spec.
#[derive(Debug, Clone)]
pub struct ReleaseMeta {
    /// The CI commit (also every channel's default ref).
    pub ci_commit: String,
    /// Build and signing time.
    pub created_at: Time,
}

/// Why a spec could not be projected.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The commit or a ref has characters a rollout id cannot hold.
    #[error("{0}")]
    Name(#[from] NameError),
    /// A channel's policy vanished (validation should have caught it).
    #[error("channel {channel:?}: unknown rollout policy {policy:?}")]
    UnknownPolicy {
        /// The channel.
        channel: String,
        /// The policy named.
        policy: String,
    },
    /// A channel the fleet does not have.
    #[error("unknown channel {channel:?}")]
    UnknownChannel {
        /// The channel.
        channel: String,
    },
    /// A host matched no wave, or a wave names a host the fleet does not have (validation
    /// should have caught it).
    #[error("host {host:?} is in no wave of its channel's policy")]
    HostInNoWave {
        /// The host.
        host: String,
    },
    /// Canonicalisation failed.
    #[error(transparent)]
    Canonical(#[from] CanonicalError),
    /// A document to sign breaks the artifact schema (an integer beyond ±(2^53 − 1), e.g. a
    /// soak time of 2^60 seconds in the spec).
    #[error("{artifact}: refusing to sign: {source}")]
    Schema {
        /// Which artifact.
        artifact: String,
        /// The rule broken.
        #[source]
        source: SchemaError,
    },
}

/// `fleet.resolved` and the manifests, as values and as canonical bytes.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The resolved fleet.
    pub fleet: FleetResolved,
    /// Its canonical bytes.
    pub fleet_bytes: Vec<u8>,
    /// sha256 (hex) of `fleet_bytes`.
    pub fleet_sha256: String,
    /// One manifest per channel with its canonical bytes, by channel name.
    pub manifests: BTreeMap<String, (RolloutManifest, Vec<u8>)>,
}

/// Hex sha256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(bytes))
}

/// Canonical bytes of a document CI is about to sign, held to the artifact schema's
/// safe-integer rule so that CI never signs what every verifier refuses.
pub fn signed_bytes_of<T: serde::Serialize>(artifact: &str, doc: &T) -> Result<Vec<u8>, ResolveError> {
    let value = serde_json::to_value(doc).map_err(|source| CanonicalError::Serialize { source })?;
    artifacts::check_safe_integers(&value).map_err(|source| ResolveError::Schema { artifact: artifact.to_owned(), source })?;
    Ok(canonical::to_vec(&value)?)
}

/// Projects a validated spec.
pub fn resolve(spec: &FleetSpec, meta: &ReleaseMeta) -> Result<Resolved, ResolveError> {
    check_ref(&meta.ci_commit)?;
    let mut channels = BTreeMap::new();
    for (name, ch) in &spec.channels {
        let policy = spec
            .rollout_policies
            .get(&ch.rollout_policy)
            .ok_or_else(|| ResolveError::UnknownPolicy { channel: name.clone(), policy: ch.rollout_policy.clone() })?;
        let mut waves: Vec<ResolvedWave> = policy
            .waves
            .iter()
            .enumerate()
            .map(|(i, w)| ResolvedWave { index: i as u32, soak_secs: w.soak_secs, hosts: Vec::new() })
            .collect();
        for host in spec.named_hosts().filter(|h| &h.spec.channel == name) {
            let w = FleetSpec::wave_of(policy, &host).ok_or_else(|| ResolveError::HostInNoWave { host: host.name.to_owned() })?;
            // named_hosts() iterates in name order, so each wave's list stays sorted.
            waves[w].hosts.push(host.name.to_owned());
        }
        let channel_ref = ch.channel_ref.clone().unwrap_or_else(|| meta.ci_commit.clone());
        RolloutId::new(name, &channel_ref)?;
        channels.insert(
            name.clone(),
            ResolvedChannel {
                channel_ref,
                rollout_policy: ch.rollout_policy.clone(),
                freshness_window_secs: ch.freshness_window_secs,
                signing_interval_secs: ch.signing_interval_secs,
                reconcile_interval_secs: ch.reconcile_interval_secs.unwrap_or(DEFAULT_RECONCILE_INTERVAL_SECS),
                compliance: ch.compliance.clone(),
                probes: ch.probes.clone(),
                waves,
                health_gate: policy.health_gate.clone(),
                on_health_failure: policy.on_health_failure,
            },
        );
    }
    let budgets: Vec<FrozenBudget> = spec
        .disruption_budgets
        .iter()
        .map(|b| FrozenBudget {
            selector: b.selector.normalized(),
            hosts: spec.named_hosts().filter(|h| b.selector.matches(h)).map(|h| h.name.to_owned()).collect(),
            max_in_flight: b.max_in_flight,
            max_in_flight_pct: b.max_in_flight_pct,
        })
        .collect();
    let fleet = FleetResolved {
        meta: ResolvedMeta { schema_version: SCHEMA_VERSION, ci_commit: meta.ci_commit.clone(), created_at: meta.created_at },
        hosts: spec.hosts.clone(),
        channels,
        edges: spec.edges.clone(),
        channel_edges: spec.channel_edges.clone(),
        disruption_budgets: budgets,
    };
    let fleet_bytes = signed_bytes_of("fleet.resolved.json", &fleet)?;
    let fleet_sha256 = sha256_hex(&fleet_bytes);
    let mut manifests = BTreeMap::new();
    for name in fleet.channels.keys() {
        let manifest = project_manifest(&fleet, name, &fleet_sha256)?;
        let bytes = signed_bytes_of(&format!("rollouts/{}.json", manifest.rollout_id), &manifest)?;
        manifests.insert(name.clone(), (manifest, bytes));
    }
    Ok(Resolved { fleet, fleet_bytes, fleet_sha256, manifests })
}

/// The manifest of one channel: a deterministic projection of `fleet`.
pub fn project_manifest(fleet: &FleetResolved, channel: &str, fleet_sha256: &str) -> Result<RolloutManifest, ResolveError> {
    let ch = fleet.channels.get(channel).ok_or_else(|| ResolveError::UnknownChannel { channel: channel.to_owned() })?;
    let mut host_set = Vec::new();
    for w in &ch.waves {
        for h in &w.hosts {
            let spec = fleet.hosts.get(h).ok_or_else(|| ResolveError::HostInNoWave { host: h.clone() })?;
            host_set.push(HostSetEntry { hostname: h.clone(), wave_index: w.index, target_closure: spec.closure.clone() });
        }
    }
    host_set.sort_by(|a, b| a.hostname.cmp(&b.hostname));
    let in_channel = |h: &str| fleet.hosts.get(h).is_some_and(|s| s.channel == channel);
    let edges = fleet.edges.iter().filter(|e| in_channel(&e.before) && in_channel(&e.after)).cloned().collect();
    let disruption_budgets = fleet.disruption_budgets.iter().filter(|b| b.hosts.iter().any(|h| in_channel(h))).cloned().collect();
    Ok(RolloutManifest {
        schema_version: SCHEMA_VERSION,
        rollout_id: RolloutId::new(channel, &ch.channel_ref)?,
        channel: channel.to_owned(),
        channel_ref: ch.channel_ref.clone(),
        fleet_resolved_hash: fleet_sha256.to_owned(),
        created_at: fleet.meta.created_at,
        host_set,
        waves: ch.waves.iter().map(|w| ManifestWave { index: w.index, soak_secs: w.soak_secs }).collect(),
        health_gate: ch.health_gate.clone(),
        on_health_failure: ch.on_health_failure,
        probes: ch.probes.clone(),
        compliance_frameworks: ch.compliance.frameworks.clone(),
        edges,
        disruption_budgets,
    })
}
