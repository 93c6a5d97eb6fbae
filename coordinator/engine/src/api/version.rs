//! `GET /v1/version` (viewer or admin): the coordinator's release, so that `drover version`
//! can show the server beside the client and warn when they are a minor release or more
//! apart. Behind an operator certificate like every other read: an anonymous caller learns
//! nothing about which build to attack.

use axum::Json;

use crate::api::auth::Reader;

pub use drover_proto::api::admin::VersionView;

/// `GET /v1/version`.
pub async fn version(_caller: Reader) -> Json<VersionView> {
    Json(VersionView {
        version: drover_proto::version::VERSION.to_owned(),
        api_version: "v1".to_owned(),
        agent_minor_skew: drover_proto::version::AGENT_MINOR_SKEW,
    })
}
