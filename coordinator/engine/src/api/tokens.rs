//! Enrollment tokens as operators manage them: `GET /v1/tokens?hostId=` lists them (admin or
//! viewer), `POST /v1/tokens/{id}/revoke` with `{"reason"}` ends one (admin, audited).
//!
//! A token is a one-time credential that lets whoever holds it enroll one host. `drover
//! enroll` prints it once; if it leaked (pasted in a ticket, left in a shell history) before
//! the host used it, revoking it is how the operator takes it back: `POST /v1/enroll` refuses
//! it from then on, and the host can be given a fresh one. A token already used cannot be
//! revoked (409): its host holds a certificate by then, and that is what to revoke.
//! Revoking a revoked token answers it unchanged (the first revocation stays), so a retried
//! request is harmless; each call is audited.
//!
//! Neither the token nor its hash is ever served, logged or audited: the record's id names
//! it, and neither is needed to manage it.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use serde::Deserialize;

use crate::api::auth::{Admin, Reader};
use crate::api::error::{ApiError, JsonBody};
use crate::api::lifecycle::check_reason;
use crate::api::operator::{Page, QueryParams, parse_uuid};
use crate::app::AppState;
use crate::store::{self, NewAudit, TokenInfo};

/// `GET /v1/tokens` query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TokensQuery {
    host_id: Option<String>,
}

pub use drover_proto::api::admin::TokenView;

/// A token record as the API shows it.
fn token_view(t: TokenInfo) -> TokenView {
    TokenView {
        id: t.id.to_string(),
        host_id: t.host_id.to_string(),
        created_at: t.created_at,
        expires_at: t.expires_at,
        used_at: t.used_at,
        revoked_at: t.revoked_at,
    }
}

/// `GET /v1/tokens?hostId=`: tokens, newest first.
pub async fn list(
    State(app): State<Arc<AppState>>,
    _caller: Reader,
    QueryParams(q): QueryParams<TokensQuery>,
) -> Result<Json<Page<TokenView, String>>, ApiError> {
    let host = q.host_id.as_deref().map(|h| parse_uuid("hostId", h)).transpose()?;
    let tokens = store::blocking(app.store.clone(), move |s| s.list_tokens(host)).await?;
    Ok(Json(Page { items: tokens.into_iter().map(token_view).collect(), next: None }))
}

/// The body of a revocation.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RevokeBody {
    /// Why (required; audited).
    pub reason: Option<String>,
}

/// `POST /v1/tokens/{id}/revoke`: the token as it now stands.
pub async fn revoke(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<RevokeBody>,
) -> Result<Json<TokenView>, ApiError> {
    let id = uuid::Uuid::parse_str(id.trim())
        .map_err(|_| ApiError::bad_request("token id must be the token record's id (a UUID, as GET /v1/tokens lists it)"))?;
    let reason = check_reason(body.reason.as_deref())?;
    let now = app.clock.now();
    let audit = NewAudit {
        at: now,
        actor: op.name.clone(),
        role: op.role.as_str().to_owned(),
        action: "token.revoke".to_owned(),
        target: id.to_string(),
        reason,
        prior_state: None,
        expected_state: Some("revoked".to_owned()),
    };
    let token = store::blocking(app.store.clone(), move |s| {
        let token = s.revoke_token(id, now)?;
        s.append_audit(&audit)?;
        Ok(token)
    })
    .await?;
    tracing::info!(token_id = %id, host_id = %token.host_id, operator = %op.name, "enrollment token revoked");
    Ok(Json(token_view(token)))
}
