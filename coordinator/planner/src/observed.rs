//! [`Observed`]: the observed part of a [`PlanInput`] — everything it holds that does not come
//! from the signed release (rollouts and their per-host states, hosts' check-ins, health,
//! probes and activation reports, each channel's last rolled ref and last deferral, held
//! hosts) — and
//! [`plan_input`], which joins it with a verified release into the full snapshot.
//!
//! This is the format of `observed.json`, the input of `drover plan` (an offline dry run of the
//! planner). It is serialised in camelCase with a `schemaVersion`, and unknown fields are
//! refused, as in every Drover document:
//!
//! ```json
//! {
//!   "schemaVersion": 1,
//!   "rollouts": {
//!     "gpu@c0ffee": {
//!       "state": "Active", "since": "2025-01-01T00:30:00Z", "manifestSha256": "…",
//!       "hosts": { "gpu-a-01": { "state": "Soaking", "since": "2025-01-01T00:40:00Z", "intent": "/nix/store/…" } }
//!     }
//!   },
//!   "hosts": {
//!     "gpu-a-01": { "lastCheckin": "2025-01-01T00:59:30Z", "connectivity": "online", "failedUnits": 0,
//!                   "probes": { "nvidia-persistenced": "passed" } }
//!   },
//!   "lastRolledRef": { "gpu": "c0ffee" },
//!   "held": { "gpu-b-02": "maintenance job 7" },
//!   "lastDeferrals": { "gpu": { "targetRef": "d00d", "blockedBy": "infra", "since": "2025-01-01T00:30:00Z" } },
//!   "settings": { "confirmDeadlineSecs": 1800, "retentionSecs": 604800 },
//!   "staleAlerts": { "gpu": "2025-01-01T00:00:00Z" }
//! }
//! ```
//!
//! Every field but `schemaVersion` may be left out (empty; `settings` then takes its
//! defaults, 1800 s and 7 days). The release side — per channel
//! the current manifest, its sha256, the timestamp's revertable list, `signedAt` and freshness
//! window, and fleet.resolved's compliance settings, the revertable
//! manifests that travel with the release, and fleet.resolved's channel edges — is taken
//! from the verified release only, never from this file.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use drover_proto::names::RolloutId;
use drover_proto::release::VerifiedRelease;

use drover_proto::time::Time;

use crate::input::{ChannelInput, Deferral, HostObserved, PlanInput, PlanSettings, RolloutObserved};

/// The `schemaVersion` of [`Observed`] this crate reads and writes.
pub const OBSERVED_SCHEMA_VERSION: u64 = 1;

/// The observed fleet state: [`PlanInput`] less what the signed release provides.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Observed {
    /// Always [`OBSERVED_SCHEMA_VERSION`].
    pub schema_version: u64,
    /// Rollouts known to the store (active and recent), by id.
    #[serde(default)]
    pub rollouts: BTreeMap<RolloutId, RolloutObserved>,
    /// Observed hosts, by hostname. A host of a manifest missing here is offline and has
    /// reported nothing.
    #[serde(default)]
    pub hosts: BTreeMap<String, HostObserved>,
    /// Per channel, the ref of the last rollout opened for it. A channel missing here has
    /// never been rolled.
    #[serde(default)]
    pub last_rolled_ref: BTreeMap<String, String>,
    /// Hosts held by a job or maintenance request (hostname → reason).
    #[serde(default)]
    pub held: BTreeMap<String, String>,
    /// Hosts a job lends to the rollout engine for its `activate` stage (counted, dispatchable).
    #[serde(default)]
    pub lent: std::collections::BTreeSet<String>,
    /// Per channel, the ref whose opening the planner last deferred, by what and since when
    /// (the store's `last_deferrals`).
    #[serde(default)]
    pub last_deferrals: BTreeMap<String, Deferral>,
    /// The coordinator's planning settings (`confirmDeadlineSecs`, `retentionSecs`).
    #[serde(default)]
    pub settings: PlanSettings,
    /// Per channel, the timestamp `signedAt` a stale-release alert was already raised for.
    #[serde(default)]
    pub stale_alerts: BTreeMap<String, Time>,
}

/// Why an [`Observed`] cannot be joined with a release.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ObservedError {
    /// The document is of a schema version this crate does not read.
    #[error("observed schemaVersion {found} is not supported (this build reads {expected})")]
    SchemaVersion {
        /// The version found.
        found: u64,
        /// The version read.
        expected: u64,
    },
}

impl Observed {
    /// Nothing observed yet: no rollouts, no hosts, nothing rolled, nothing held.
    pub fn empty() -> Self {
        Observed {
            schema_version: OBSERVED_SCHEMA_VERSION,
            rollouts: BTreeMap::new(),
            hosts: BTreeMap::new(),
            last_rolled_ref: BTreeMap::new(),
            held: BTreeMap::new(),
            lent: Default::default(),
            last_deferrals: BTreeMap::new(),
            settings: PlanSettings::default(),
            stale_alerts: BTreeMap::new(),
        }
    }

    /// The observed part of a full snapshot (the inverse of [`plan_input`]'s join).
    pub fn of(input: &PlanInput) -> Self {
        Observed {
            schema_version: OBSERVED_SCHEMA_VERSION,
            rollouts: input.rollouts.clone(),
            hosts: input.hosts.clone(),
            last_rolled_ref: input.last_rolled_ref.clone(),
            held: input.held.clone(),
            lent: input.lent.clone(),
            last_deferrals: input.last_deferrals.clone(),
            settings: input.settings,
            stale_alerts: input.stale_alerts.clone(),
        }
    }
}

/// Joins a verified release with the observed state into the planner's snapshot: per
/// channel of the timestamp, the current manifest with its sha256, the timestamp's
/// revertable list (newest first), its `signedAt` and the channel's freshness window, and
/// fleet.resolved's compliance settings of the channel; the revertable manifests the release directory carries
/// go to [`PlanInput::manifests`]; fleet.resolved's `channelEdges` to
/// [`PlanInput::channel_edges`]. A rollout whose manifest is in neither (opened from an
/// older ref no longer carried) stays as observed: the planner reports it as waiting on a
/// missing manifest.
pub fn plan_input(release: &VerifiedRelease, observed: Observed) -> Result<PlanInput, ObservedError> {
    if observed.schema_version != OBSERVED_SCHEMA_VERSION {
        return Err(ObservedError::SchemaVersion { found: observed.schema_version, expected: OBSERVED_SCHEMA_VERSION });
    }
    let channels = release
        .manifests
        .iter()
        .map(|(channel, m)| {
            let ts = release.timestamp.doc.channels.get(channel);
            let resolved = release.fleet.fleet.channels.get(channel);
            let revertable = ts.map(|c| c.revertable.clone()).unwrap_or_default();
            // The timestamp's window is the one CI signed for the channel; fleet.resolved's
            // is the same number (release copies it), kept as the fallback.
            let freshness_window_secs = ts.map(|c| c.freshness_window_secs).or(resolved.map(|c| c.freshness_window_secs)).unwrap_or(0);
            let input = ChannelInput {
                manifest: m.manifest.clone(),
                manifest_sha256: m.sha256.clone(),
                revertable,
                signed_at: release.timestamp.doc.signed_at,
                freshness_window_secs,
                compliance: resolved.map(|c| c.compliance.clone()).unwrap_or_default(),
            };
            (channel.clone(), input)
        })
        .collect();
    let manifests = release.revertable.iter().map(|(id, m)| (id.clone(), m.manifest.clone())).collect();
    let mut input = PlanInput::empty();
    input.channels = channels;
    input.manifests = manifests;
    input.channel_edges = release.fleet.fleet.channel_edges.clone();
    input.rollouts = observed.rollouts;
    input.hosts = observed.hosts;
    input.last_rolled_ref = observed.last_rolled_ref;
    input.held = observed.held;
    input.lent = observed.lent;
    input.last_deferrals = observed.last_deferrals;
    input.settings = observed.settings;
    input.stale_alerts = observed.stale_alerts;
    Ok(input)
}

/// `GET /v1/plan-input`: what `drover plan --from-coordinator` and `drover explain` plan over,
/// as the coordinator writes it and the CLI reads it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanInputResponse {
    /// The coordinator's clock when the snapshot was read.
    pub now: Time,
    /// The observed part of the planner's input (`observed.json`'s format).
    pub observed: Observed,
    /// The latest release's version.
    pub release_version: u64,
    /// The latest release's files, path → text, byte-exact (the caller verifies them).
    pub release: BTreeMap<String, String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example shipped in the repository and shown in the README.
    const EXAMPLE: &str = include_str!("../../../examples/observed.json");

    #[test]
    fn the_example_observed_json_parses_and_round_trips() {
        let o: Observed = serde_json::from_str(EXAMPLE).expect("examples/observed.json is an Observed");
        assert_eq!(o.schema_version, OBSERVED_SCHEMA_VERSION);
        assert!(!o.hosts.is_empty(), "the example lists hosts");
        let back: Observed = serde_json::from_value(serde_json::to_value(&o).expect("serialise")).expect("parse back");
        assert_eq!(back, o);
    }

    #[test]
    fn only_schema_version_is_required_and_unknown_fields_are_refused() {
        let o: Observed = serde_json::from_str(r#"{"schemaVersion":1}"#).expect("minimal");
        assert_eq!(o, Observed::empty());
        assert!(serde_json::from_str::<Observed>(r#"{"schemaVersion":1,"channels":{}}"#).is_err(), "channels come from the release");
        assert!(serde_json::from_str::<Observed>(r#"{"rollouts":{}}"#).is_err(), "schemaVersion is required");
    }

    /// Guards against drift: a field added to `PlanInput` must be either release-side (listed
    /// here and filled by `plan_input`) or observed (a field of `Observed`).
    #[test]
    fn observed_holds_every_field_of_plan_input_not_taken_from_the_release() {
        const FROM_RELEASE: [&str; 3] = ["channels", "manifests", "channelEdges"];
        let keys = |v: serde_json::Value| -> Vec<String> { v.as_object().expect("an object").keys().cloned().collect() };
        let mut input_keys = keys(serde_json::to_value(PlanInput::empty()).expect("serialise"));
        input_keys.retain(|k| !FROM_RELEASE.contains(&k.as_str()));
        assert_eq!(keys(serde_json::to_value(Observed::empty()).expect("serialise")), input_keys);
    }

    #[test]
    fn the_observed_part_of_a_snapshot_is_everything_but_the_release() {
        let mut input = PlanInput::empty();
        input.last_rolled_ref.insert("gpu".to_owned(), "c0ffee".to_owned());
        input.held.insert("gpu-a-01".to_owned(), "job 7".to_owned());
        let o = Observed::of(&input);
        assert_eq!(o.last_rolled_ref, input.last_rolled_ref);
        assert_eq!(o.held, input.held);
        assert_eq!(o.schema_version, OBSERVED_SCHEMA_VERSION);
    }

    #[test]
    fn settings_default_to_a_30_minute_confirm_deadline_and_7_day_retention() {
        let o: Observed = serde_json::from_str(r#"{"schemaVersion":1,"settings":{}}"#).expect("empty settings");
        assert_eq!(o.settings, PlanSettings { confirm_deadline_secs: 1800, retention_secs: 604_800 });
        let o: Observed = serde_json::from_str(r#"{"schemaVersion":1,"settings":{"confirmDeadlineSecs":60}}"#).expect("partial");
        assert_eq!((o.settings.confirm_deadline_secs, o.settings.retention_secs), (60, 604_800));
        assert!(serde_json::from_str::<Observed>(r#"{"schemaVersion":1,"settings":{"retention":1}}"#).is_err(), "unknown setting");
        let mut input = PlanInput::empty();
        input.settings.retention_secs = 5;
        input.stale_alerts.insert("gpu".to_owned(), Time::from_unix(0).expect("time"));
        let o = Observed::of(&input);
        assert_eq!((o.settings, &o.stale_alerts), (input.settings, &input.stale_alerts));
    }
}
