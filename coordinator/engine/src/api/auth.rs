//! Route guards: the caller's identity comes from the TLS handshake (inserted into each
//! request by the server), never from the request itself; operator roles are checked per
//! route by the extractor the handler asks for.
//!
//! The handshake checked the CRL of its moment; a connection outlives it (keep-alive,
//! long-polls). So every request also checks the certificate's serial against the
//! revocations known now: a certificate revoked mid-connection can do nothing more.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use std::sync::Arc;

use uuid::Uuid;

use crate::app::AppState;

use crate::api::error::ApiError;
use crate::identity::{Identity, Role};

/// What the TLS layer learned about the peer of a connection (the crate `drover-pki`).
pub use drover_pki::Peer;

fn peer<'a>(parts: &'a Parts, app: &AppState) -> Result<&'a Identity, ApiError> {
    match parts.extensions.get::<Peer>() {
        Some(Peer::Verified { serial, .. }) if app.is_revoked(serial) => {
            Err(ApiError::unauthenticated("client certificate has been revoked"))
        }
        Some(Peer::Verified { identity: Ok(identity), .. }) => Ok(identity),
        Some(Peer::Verified { identity: Err(e), .. }) => Err(ApiError::unauthenticated(e.to_string())),
        Some(Peer::Anonymous) | None => Err(ApiError::unauthenticated("this route requires a client certificate")),
    }
}

/// An agent, identified by its host certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostCaller {
    /// The host id from the certificate.
    pub host_id: Uuid,
    /// The hostname from the certificate.
    pub hostname: String,
}

impl FromRequestParts<Arc<AppState>> for HostCaller {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, app: &Arc<AppState>) -> Result<Self, ApiError> {
        match peer(parts, app)? {
            Identity::Host { host_id, hostname } => Ok(HostCaller { host_id: *host_id, hostname: hostname.clone() }),
            Identity::Operator { .. } => Err(ApiError::forbidden("agent routes take a host certificate")),
        }
    }
}

/// An agent whose host this coordinator's store knows: a [`HostCaller`] checked against the
/// store, so a certificate naming a host the store has no record of (its state restored from
/// a backup older than the host's enrollment) is answered [`ApiError::host_unknown`] — never
/// renewed, never confirmed, never served a rollout — on every route that takes this. The
/// check-in reads the host row anyway and answers the same from it (`agent::checkin`).
///
/// A check, not a lookup: the CA signed the certificate, so the row can only be missing, not
/// another host's. The read is one indexed point read (a cached view where the backend keeps
/// them); these routes are called once per intent or renewal, not per check-in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownHost(pub HostCaller);

impl FromRequestParts<Arc<AppState>> for KnownHost {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, app: &Arc<AppState>) -> Result<Self, ApiError> {
        let caller = HostCaller::from_request_parts(parts, app).await?;
        let id = caller.host_id;
        let known = match app.store.checkin_view_cached(id, app.clock.now()) {
            Some(view) => view.host.is_some(),
            None => crate::store::read_now(&app.store, move |s| s.get_host(id)).await?.is_some(),
        };
        if known { Ok(KnownHost(caller)) } else { Err(ApiError::host_unknown(caller.host_id, &caller.hostname)) }
    }
}

/// An operator, with the role their certificate grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorCaller {
    /// Their name.
    pub name: String,
    /// Their role.
    pub role: Role,
}

fn operator(parts: &Parts, app: &AppState, allowed: &[Role]) -> Result<OperatorCaller, ApiError> {
    match peer(parts, app)? {
        Identity::Operator { name, role } if allowed.contains(role) => Ok(OperatorCaller { name: name.clone(), role: *role }),
        Identity::Operator { role, .. } => Err(ApiError::forbidden(format!(
            "role {role} may not use this route (allowed: {})",
            allowed.iter().map(|r| r.as_str()).collect::<Vec<_>>().join(", ")
        ))),
        Identity::Host { .. } => Err(ApiError::forbidden("operator routes take an operator certificate")),
    }
}

/// An operator with the admin role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admin(pub OperatorCaller);

impl FromRequestParts<Arc<AppState>> for Admin {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, app: &Arc<AppState>) -> Result<Self, ApiError> {
        operator(parts, app, &[Role::Admin]).map(Admin)
    }
}

/// An operator allowed to read (admin or viewer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reader(pub OperatorCaller);

impl FromRequestParts<Arc<AppState>> for Reader {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, app: &Arc<AppState>) -> Result<Self, ApiError> {
        operator(parts, app, &[Role::Admin, Role::Viewer]).map(Reader)
    }
}

/// An operator allowed to publish releases (admin or publisher).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publisher(pub OperatorCaller);

impl FromRequestParts<Arc<AppState>> for Publisher {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, app: &Arc<AppState>) -> Result<Self, ApiError> {
        operator(parts, app, &[Role::Admin, Role::Publisher]).map(Publisher)
    }
}
