//! `GET /v1/version` (viewer or admin): the coordinator's release, so that `drover version`
//! can show the server beside the client and warn when they are a minor release or more
//! apart. Behind an operator certificate like every other read: an anonymous caller learns
//! nothing about which build to attack.

use axum::Json;
use serde::Serialize;

use crate::api::auth::Reader;

/// The answer.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VersionView {
    /// The coordinator's release (the workspace version it was built from).
    pub version: &'static str,
    /// The operator API's version, the `/v1` of every route.
    pub api_version: &'static str,
    /// How many minor releases an agent may be from this coordinator before
    /// `host.version_skew` is raised.
    pub agent_minor_skew: u64,
}

/// `GET /v1/version`.
pub async fn version(_caller: Reader) -> Json<VersionView> {
    Json(VersionView {
        version: drover_proto::version::VERSION,
        api_version: "v1",
        agent_minor_skew: drover_proto::version::AGENT_MINOR_SKEW,
    })
}
