//! Director-signed per-host messages: the rollout intent.
//!
//! The coordinator's director key signs an intent for one host; the agent acts on it only if
//! it also agrees with the CI-signed manifest (target and wave), so the director can stall a
//! host but never choose what it runs.

use serde::{Deserialize, Serialize};

use crate::names::RolloutId;
use crate::time::Time;

/// "Host X: run target Y, within rollout R, wave W."
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Intent {
    /// Unique id (UUID) of this intent, for replay detection and confirmation.
    pub intent_id: String,
    /// The host it is for (UUID from its certificate).
    pub host_id: String,
    /// The host's name, as in the manifest's host set.
    pub hostname: String,
    /// The rollout.
    pub rollout_id: RolloutId,
    /// sha256 (hex) of the rollout's manifest bytes.
    pub manifest_sha256: String,
    /// The host's wave in that manifest.
    pub wave_index: u32,
    /// The closure to activate: must equal the manifest's target for the host.
    pub target_closure: String,
    /// When the director signed it.
    pub issued_at: Time,
    /// Not to be acted on after this instant.
    pub expires_at: Time,
    /// The agent must confirm (`POST /v1/agent/confirm`) within this many seconds of
    /// switching, or roll back.
    pub confirm_window_secs: u64,
}
