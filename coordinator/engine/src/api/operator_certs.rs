//! Operator certificates (admin): `GET /v1/operator-certs` lists every one
//! `drover-coordinator operator-cert` issued (serial, name, role, validity, revocation), and
//! `POST /v1/operator-certs/{serial}/revoke` with `{"reason", "force"}` revokes one.
//!
//! A revoked serial joins the CRL every handshake checks and the revoked set every request's
//! caller is checked against (`auth::peer`), so a connection already open is refused from its
//! next request, not only the next connection. Revoking a certificate issued to the caller's
//! own name and role needs `"force": true`: an admin locking themselves out by a typo in the
//! serial is the mistake this guards against (the coordinator cannot tell which of several
//! certificates of one name the caller holds, so it asks for all of them).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use serde::Deserialize;

use crate::api::auth::Admin;
use crate::api::error::{ApiError, JsonBody};
use crate::api::lifecycle::check_reason;
use crate::app::AppState;
use crate::store::{self, CertKind, CertRecord, NewAudit};

pub use drover_proto::api::admin::OperatorCertView;

use crate::api::operator::Page;

fn view(r: CertRecord) -> OperatorCertView {
    // Issued with the subject "ROLE:NAME" (drover-coordinator operator-cert).
    let (role, name) =
        r.cert.subject.split_once(':').map_or((String::new(), r.cert.subject.clone()), |(r, n)| (r.to_owned(), n.to_owned()));
    OperatorCertView {
        serial: r.cert.serial,
        name,
        role,
        not_before: r.cert.not_before,
        not_after: r.cert.not_after,
        revoked_at: r.revoked.as_ref().map(|v| v.at),
        revoked_reason: r.revoked.map(|v| v.reason),
    }
}

/// `GET /v1/operator-certs`.
pub async fn list(State(app): State<Arc<AppState>>, _admin: Admin) -> Result<Json<Page<OperatorCertView, String>>, ApiError> {
    let certs = store::blocking(app.store.clone(), |s| s.list_certs(None)).await?;
    let items = certs.into_iter().filter(|c| c.cert.kind == CertKind::Operator).map(view).collect();
    Ok(Json(Page { items, next: None }))
}

/// The body of a revocation.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RevokeBody {
    /// Why (required; audited).
    pub reason: Option<String>,
    /// Revoke even a certificate of the caller's own name and role.
    #[serde(default)]
    pub force: bool,
}

/// `POST /v1/operator-certs/{serial}/revoke`.
pub async fn revoke(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    Path(serial): Path<String>,
    JsonBody(body): JsonBody<RevokeBody>,
) -> Result<Json<OperatorCertView>, ApiError> {
    let serial = serial.trim().to_ascii_lowercase();
    if serial.is_empty() || serial.len() > 64 || !serial.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ApiError::bad_request("serial must be the certificate's serial number in hex"));
    }
    let reason = check_reason(body.reason.as_deref())?;
    let lookup = serial.clone();
    let found = store::blocking(app.store.clone(), move |s| s.get_cert(&lookup))
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no certificate with serial {serial}")))?;
    if found.cert.kind != CertKind::Operator {
        return Err(ApiError::bad_request(format!(
            "certificate {serial} is a {} certificate; hosts are revoked with POST /v1/hosts/{{id}}/revoke",
            found.cert.kind.as_str()
        )));
    }
    let own = format!("{}:{}", op.role.as_str(), op.name);
    if found.cert.subject == own && !body.force {
        return Err(ApiError::conflict(format!(
            "certificate {serial} is issued to you ({own}); revoking it locks this certificate out too if it is the one you \
             hold: pass force to revoke it anyway"
        )));
    }
    let now = app.clock.now();
    let why = format!("revoked by operator {}: {reason}", op.name);
    let audit = NewAudit {
        at: now,
        actor: op.name.clone(),
        role: op.role.as_str().to_owned(),
        action: "operator_cert.revoke".to_owned(),
        target: serial.clone(),
        reason: reason.clone(),
        prior_state: None,
        expected_state: None,
    };
    let target = serial.clone();
    store::blocking(app.store.clone(), move |s| {
        s.revoke_cert(&target, now, &why)?;
        s.append_audit(&audit)
    })
    .await?;
    app.revocations_changed().await.map_err(|e| {
        tracing::error!(error = %e, "CRL refresh failed after revocation");
        ApiError::internal()
    })?;
    tracing::info!(%serial, operator = %op.name, "operator certificate revoked");
    let lookup = serial.clone();
    let after = store::blocking(app.store.clone(), move |s| s.get_cert(&lookup))
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no certificate with serial {serial}")))?;
    Ok(Json(view(after)))
}
