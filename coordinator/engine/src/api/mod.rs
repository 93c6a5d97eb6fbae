//! The HTTP API: error shape, route guards, and the routes themselves.

pub mod agent;
pub mod agent_proofs;
pub mod auth;
pub mod dashboard;
pub mod enroll;
pub mod error;
pub mod event_stream;
pub mod evidence;
pub mod jobs;
pub mod lifecycle;
pub mod maintenance;
pub mod metrics_route;
pub mod onboardings;
pub mod openapi;
pub mod openapi_routes;
pub mod openapi_schemas;
pub mod operator;
pub mod operator_certs;
pub mod rack_maintenance;
pub mod racks;
pub mod reconciliation;
pub mod releases;
pub mod rollouts;
pub mod site_items;
pub mod sites;
pub mod strict_json;
pub mod tasks;
pub mod tokens;
pub mod version;

use std::sync::Arc;

use axum::Router;
use axum::extract::Request;
use axum::response::Response;
use axum::routing::{get, post, put};

use crate::app::AppState;

/// The transport's body rules (the crate `drover-http`), under their old paths.
pub use drover_http::body::{MAX_ANONYMOUS_BODY_BYTES, MAX_DRAIN_BYTES, too_large};

/// Reads the request body before any handler runs, bounded by [`body_limit`]
/// ([`drover_http::body::read_whole_body`]).
pub async fn read_whole_body(req: Request) -> Result<Request, Response> {
    drover_http::body::read_whole_body(req, body_limit).await
}

/// Largest request body accepted, but on the routes [`body_limit`] names.
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// Every route. Which ones need which certificate is decided by each handler's extractor
/// (`HostCaller`, `Admin`, …); the anonymous ones are the enrollment path and `/healthz`.
pub fn router(app: Arc<AppState>) -> Router {
    let counts = app.metrics.http.clone();
    let (unmatched, wrong_method) = (counts.clone(), counts.clone());
    Router::new()
        .route("/healthz", get(agent::healthz))
        .route("/readyz", get(operator::readyz))
        .route("/metrics", get(metrics_route::metrics))
        .route("/v1/hosts", get(operator::list_hosts))
        .route("/v1/hosts/{id}", get(operator::get_host))
        .route("/v1/tokens", get(tokens::list))
        .route("/v1/tokens/{id}/revoke", post(tokens::revoke))
        .route("/v1/releases", get(operator::list_releases))
        .route("/v1/rollouts", get(operator::list_rollouts))
        .route("/v1/events", get(operator::list_events))
        .route("/v1/events/stream", get(event_stream::stream))
        .route("/v1/whoami", get(dashboard::whoami))
        .route("/v1/fleet/summary", get(dashboard::fleet_summary))
        .route("/v1/audit", get(operator::list_audit))
        .route("/v1/version", get(version::version))
        .route("/v1/loops", get(operator::list_loops))
        .route("/v1/openapi.json", get(openapi::openapi))
        .route("/v1/bootstrap.sh", get(enroll::bootstrap_script))
        .route("/v1/agent/binary", get(enroll::agent_binary))
        .route("/v1/agent/package.deb", get(enroll::agent_package))
        .route("/v1/ca.crt", get(enroll::ca_certificate))
        .route("/v1/trust.json", get(enroll::trust_json))
        .route("/v1/enroll", post(enroll::enroll))
        .route("/v1/hosts", post(enroll::create_host))
        .route("/v1/hosts/{id}/revoke", post(enroll::revoke_host))
        .route("/v1/operator-certs", get(operator_certs::list))
        .route("/v1/operator-certs/{serial}/revoke", post(operator_certs::revoke))
        .route("/v1/hosts/{id}/quarantine", post(lifecycle::quarantine))
        .route("/v1/hosts/{id}/unquarantine", post(lifecycle::unquarantine))
        .route("/v1/hosts/{id}/retire", post(lifecycle::retire))
        .route("/v1/hosts/{id}/reactivate", post(lifecycle::reactivate))
        .route("/v1/hosts/{id}/remove", post(lifecycle::remove))
        .route("/v1/hosts/{id}/cordon", post(lifecycle::cordon))
        .route("/v1/hosts/{id}/uncordon", post(lifecycle::uncordon))
        .route("/v1/agent/checkin", post(agent::checkin))
        .route("/v1/agent/confirm", post(agent::confirm))
        .route("/v1/agent/renew", post(agent::renew))
        .route("/v1/rollouts/{id}", get(agent::rollout))
        .route("/v1/rollouts/{id}/proof", get(agent_proofs::proof))
        .route("/v1/rollouts/{id}/status", get(rollouts::status))
        .route("/v1/rollouts/{id}/progress", get(dashboard::rollout_progress))
        .route("/v1/rollouts/{id}/halt", post(rollouts::halt))
        .route("/v1/rollouts/{id}/resume", post(rollouts::resume))
        .route("/v1/rollouts/{id}/cancel", post(rollouts::cancel))
        .route("/v1/rollouts/{id}/rollback", post(rollouts::rollback))
        .route("/v1/plan-input", get(rollouts::plan_input))
        .route("/v1/hosts/{id}/tasks", post(tasks::issue_route))
        .route("/v1/hosts/{id}/decommission", post(jobs::decommission))
        .route("/v1/jobs", get(jobs::list))
        .route("/v1/jobs/{id}", get(jobs::get))
        .route("/v1/jobs/{id}/evidence", get(evidence::for_job))
        .route("/v1/hosts/{id}/evidence", get(evidence::for_host))
        .route("/v1/jobs/{id}/{action}", post(jobs::action))
        .route("/v1/maintenance", post(maintenance::request).get(maintenance::list))
        .route("/v1/maintenance/{id}", get(maintenance::get))
        .route("/v1/tasks", get(tasks::list))
        .route("/v1/tasks/{id}", get(tasks::get))
        .route("/v1/maas/onboardings", post(onboardings::create_one).get(onboardings::list))
        .route("/v1/maas/onboardings/batch", post(onboardings::create_batch))
        .route("/v1/maas/onboardings/batches/{id}", get(onboardings::batch))
        .route("/v1/maas/onboardings/{id}", get(onboardings::get))
        .route("/v1/maas/onboardings/{id}/{action}", post(onboardings::action))
        .route("/v1/maas/reconciliation/status", get(reconciliation::status))
        .route("/v1/maas/reconciliation/drift", get(reconciliation::drift))
        .route("/v1/maas/reconciliation/drift/{host}/resolve", post(reconciliation::resolve))
        .route("/v1/maas/reconciliation/run", post(reconciliation::run))
        .route("/v1/racks", post(racks::create_rack).get(racks::list_racks))
        .route("/v1/racks/{rack}", get(racks::get_rack).delete(racks::delete_rack))
        .route("/v1/switches", post(racks::create_switch).get(racks::list_switches))
        .route("/v1/switches/{id}", get(racks::get_switch).delete(racks::delete_switch))
        .route("/v1/power-shelves", post(racks::create_shelf).get(racks::list_shelves))
        .route("/v1/power-shelves/maintenance", post(racks::shelf_maintenance))
        .route("/v1/power-shelves/{id}", get(racks::get_shelf).delete(racks::delete_shelf))
        .route("/v1/hosts/{id}/rack", post(racks::place_host))
        .route("/v1/hosts/{id}/bmc", put(rack_maintenance::set_bmc).delete(rack_maintenance::delete_bmc))
        .route("/v1/racks/{rack}/maintenance", post(rack_maintenance::request_maintenance))
        .route("/v1/components/firmware", post(rack_maintenance::component_firmware))
        .route("/v1/rack-firmware", post(rack_maintenance::create_firmware).get(rack_maintenance::list_firmware))
        .route("/v1/maas/sites", post(sites::create).get(sites::list))
        .route("/v1/maas/sites/{site}", get(sites::get).patch(sites::patch).delete(sites::delete))
        .route("/v1/maas/sites/{site}/disable", post(sites::disable))
        .route("/v1/maas/sites/{site}/enable", post(sites::enable))
        .route("/v1/maas/sites/{site}/credentials", post(sites::credentials))
        .route("/v1/maas/sites/{site}/probe", post(sites::probe))
        .route("/v1/maas/sites/{site}/preflight", post(sites::run_preflight))
        .route("/v1/maas/sites/{site}/profiles", get(site_items::list_profiles).post(site_items::create_profile))
        .route("/v1/maas/sites/{site}/profiles/{profile}", get(site_items::get_profile).patch(site_items::patch_profile))
        .route("/v1/maas/sites/{site}/overrides", get(site_items::list_overrides).post(site_items::create_override))
        .route("/v1/maas/sites/{site}/overrides/{id}", axum::routing::delete(site_items::delete_override))
        .route("/v1/maas/sites/{site}/overrides/{id}/credentials", post(site_items::override_credentials))
        .route("/v1/maas/sites/{site}/roce-assignments", get(site_items::list_roce).post(site_items::upsert_roce))
        .route("/v1/maas/sites/{site}/roce-assignments/{id}", axum::routing::delete(site_items::delete_roce))
        .route(RELEASES_PATH, post(releases::publish).layer(axum::extract::DefaultBodyLimit::max(releases::MAX_RELEASE_BODY_BYTES)))
        // Counted by matched route; what no route matches is counted apart (see http_metrics).
        .route_layer(crate::http_metrics::CountRequests(counts))
        .fallback(async move |method: axum::http::Method| {
            unmatched.record_unmatched(&method, 404);
            error::no_such_route().await
        })
        .method_not_allowed_fallback(async move |method: axum::http::Method| {
            wrong_method.record_unmatched(&method, 405);
            error::wrong_method().await
        })
        .with_state(app)
}

/// The publish route: the only one whose body may exceed [`MAX_BODY_BYTES`].
pub const RELEASES_PATH: &str = "/v1/releases";

/// The body limit of a request: a release is megabytes, everything else stays small, and
/// nothing without a certificate is more than [`MAX_ANONYMOUS_BODY_BYTES`]. The larger limit
/// is granted only to an operator certificate, so an anonymous or host caller cannot make
/// the coordinator buffer megabytes before its role is even checked.
pub fn body_limit(parts: &axum::http::request::Parts) -> usize {
    match parts.extensions.get::<auth::Peer>() {
        Some(auth::Peer::Verified { identity: Ok(crate::identity::Identity::Operator { .. }), .. })
            if parts.uri.path() == RELEASES_PATH =>
        {
            releases::MAX_RELEASE_BODY_BYTES
        }
        Some(auth::Peer::Verified { .. }) => MAX_BODY_BYTES,
        _ => MAX_ANONYMOUS_BODY_BYTES,
    }
}
