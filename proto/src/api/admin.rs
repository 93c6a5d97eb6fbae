//! Administration answers: enrollment tokens (`GET /v1/tokens`, `POST /v1/tokens/{id}/revoke`),
//! operator certificates (`GET /v1/operator-certs`, `POST /v1/operator-certs/{serial}/revoke`)
//! and the coordinator's version (`GET /v1/version`).

use serde::{Deserialize, Serialize};

use crate::time::Time;

/// An enrollment token's record: when it was issued, expires, was used or revoked. Never the
/// token or its hash: either would be a credential in a listing.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenView {
    /// The record's id (what `revoke` takes).
    pub id: String,
    /// The host it enrolls.
    pub host_id: String,
    /// Issued.
    pub created_at: Time,
    /// Expires.
    pub expires_at: Time,
    /// When a host used it.
    pub used_at: Option<Time>,
    /// When an operator revoked it.
    pub revoked_at: Option<Time>,
}

impl TokenView {
    /// Where it stands at `now`: `used`, `revoked`, `expired` or `pending`.
    pub fn state(&self, now: Time) -> &'static str {
        if self.used_at.is_some() {
            "used"
        } else if self.revoked_at.is_some() {
            "revoked"
        } else if self.expires_at <= now {
            "expired"
        } else {
            "pending"
        }
    }
}

/// One operator certificate.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OperatorCertView {
    /// Serial, lowercase hex.
    pub serial: String,
    /// The operator's name.
    pub name: String,
    /// Their role (`admin`, `viewer`, `publisher`).
    pub role: String,
    /// Validity start.
    pub not_before: Time,
    /// Validity end.
    pub not_after: Time,
    /// When it was revoked, if it was.
    pub revoked_at: Option<Time>,
    /// Why, if it was.
    pub revoked_reason: Option<String>,
}

/// One background loop of the coordinator, as `GET /v1/loops` lists it.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoopView {
    /// Its name (`executor`, `reconciler`, `offline_sweep`, …).
    pub name: String,
    /// Whether it runs on this replica now (the leader's loops run on the leader only).
    pub running: bool,
    /// When it last started on this replica.
    pub started_at: Option<Time>,
    /// When it last stopped (this replica stopped leading), if it did.
    pub stopped_at: Option<Time>,
    /// Passes it made since this process started.
    pub runs: u64,
    /// Passes that ended in an error.
    pub failures: u64,
    /// When its last pass ended.
    pub last_run_at: Option<Time>,
    /// When its last error was.
    pub last_error_at: Option<Time>,
    /// The last error, bounded (never a secret: the loops' errors name what failed, not values).
    pub last_error: Option<String>,
}

/// `GET /v1/loops`: every background loop of the replica that answers.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoopList {
    /// The loops, in a fixed order.
    pub loops: Vec<LoopView>,
}

/// `GET /v1/version`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VersionView {
    /// The coordinator's release (the workspace version it was built from).
    pub version: String,
    /// The operator API's version, the `/v1` of every route.
    pub api_version: String,
    /// How many minor releases an agent may be from this coordinator before
    /// `host.version_skew` is raised.
    pub agent_minor_skew: u64,
}
