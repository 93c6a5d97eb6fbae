//! Releases and rollouts: the listings (`GET /v1/releases`, `GET /v1/rollouts`), one
//! rollout's hosts (`GET /v1/rollouts/{id}/status`) and what a rollout verb answers
//! (`POST /v1/rollouts/{id}/halt`, …).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::states::{HostRolloutState, RolloutState};
use crate::time::Time;

/// A stored release without its bytes: who published it (`None` where the audit log holds
/// no record of it), how many rollouts it opened and on which channels.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseView {
    /// Its version (the signed timestamp's).
    pub version: u64,
    /// When CI signed it.
    pub signed_at: Time,
    /// Its files.
    pub paths: Vec<String>,
    /// Who published it.
    pub publisher: Option<String>,
    /// The channels it opened rollouts on.
    pub channels: Vec<String>,
    /// How many rollouts it opened.
    pub rollouts: u64,
}

/// A rollout row of `GET /v1/rollouts`: the rollout, with its hosts counted by state.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolloutView {
    /// The rollout.
    #[serde(flatten)]
    pub rollout: RolloutStateResponse,
    /// Hosts per state in this rollout (`{"Converged": 8, "Skipped": 2}`), so a listing can
    /// say a converged rollout went without some of its hosts.
    pub hosts: BTreeMap<HostRolloutState, u64>,
}

/// A rollout as its verbs answer it and as its status starts.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStateResponse {
    /// `channel@ref`.
    pub rollout_id: String,
    /// Its channel.
    pub channel: String,
    /// Its state.
    pub state: RolloutState,
    /// Its manifest's sha256.
    pub manifest_sha256: String,
    /// When it was opened.
    pub opened_at: Time,
    /// Its last state change.
    pub updated_at: Time,
}

/// One host of a rollout.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutHostView {
    /// The host.
    pub hostname: String,
    /// Its wave.
    pub wave_index: u32,
    /// Its state.
    pub state: HostRolloutState,
    /// Since when.
    pub since: Time,
    /// The closure of its last intent in this rollout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intent_target: Option<String>,
}

/// `GET /v1/rollouts/{id}/status`: the rollout and its hosts with a recorded state (a host of
/// the manifest missing here is Pending).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    /// The rollout.
    #[serde(flatten)]
    pub rollout: RolloutStateResponse,
    /// Its hosts.
    pub hosts: Vec<RolloutHostView>,
}
