//! Enrollment: the operator creates a host and gets a one-time bootstrap command; the host
//! runs it, fetches the agent and the trust roots (pinned to this server's key), and trades
//! the token and a CSR for a 30-day certificate. Also: revoking a host's certificates.
//!
//! These routes (but `POST /v1/hosts` and revocation) take no client certificate: the pin in
//! the command authenticates the server, the single-use, host-bound, expiring token the host.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use drover_proto::enroll::{CreateHostRequest, CreateHostResponse, EnrollRequest, EnrollResponse};
use drover_proto::names::check_hostname;
use drover_proto::states::HostLifecycle;
use drover_proto::task::Secret;
use rand::RngCore as _;
use uuid::Uuid;

use crate::api::auth::Admin;
use crate::api::error::{ApiError, JsonBody};
use crate::app::{AppState, CrlError};
use crate::identity::Role;
use crate::store::{self, CertKind, Enrolled, EnrollmentToken, HostKeys, NewAudit, NewCert, NewHost, StoreError, hash_token};

/// The bootstrap script, with the agent binary's sha256 filled in per server.
const BOOTSTRAP_TEMPLATE: &str = include_str!("../enroll/bootstrap.sh");

/// Longest token lifetime an operator may ask for.
pub const MAX_TOKEN_TTL_SECS: u64 = 7 * 86_400;

/// `GET /v1/bootstrap.sh`.
pub async fn bootstrap_script(State(app): State<Arc<AppState>>) -> Response {
    let package = app.agent_package.as_ref().map_or("", |p| p.sha256.as_str());
    let script = BOOTSTRAP_TEMPLATE.replace("@AGENT_SHA256@", &app.agent.sha256).replace("@AGENT_PACKAGE_SHA256@", package);
    ([(header::CONTENT_TYPE, "text/x-shellscript; charset=utf-8")], script).into_response()
}

/// `GET /v1/agent/binary`: at most `enrollment.max_agent_downloads` at once, 503 with
/// `Retry-After` past that ([`crate::agent_download`]).
pub async fn agent_binary(State(app): State<Arc<AppState>>) -> Response {
    app.agent.downloads.answer(&app.agent.bytes, "application/octet-stream")
}

/// `GET /v1/agent/package.deb`: the agent's Debian package, 404 when none is configured.
pub async fn agent_package(State(app): State<Arc<AppState>>) -> Response {
    match &app.agent_package {
        Some(p) => p.downloads.answer(&p.bytes, "application/vnd.debian.binary-package"),
        None => {
            crate::api::error::ApiError::not_found("this coordinator serves no agent package (agent_package is not set)").into_response()
        }
    }
}

/// `GET /v1/ca.crt`.
pub async fn ca_certificate(State(app): State<Arc<AppState>>) -> Response {
    ([(header::CONTENT_TYPE, "application/x-pem-file")], app.ca.cert_pem().to_owned()).into_response()
}

/// `GET /v1/trust.json`: byte-exact, so the agent can compare its hash with the operator's.
pub async fn trust_json(State(app): State<Arc<AppState>>) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], app.trust_json.clone()).into_response()
}

/// `POST /v1/hosts` (admin): a new host in `bootstrap_issued` with a one-time token.
pub async fn create_host(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    JsonBody(req): JsonBody<CreateHostRequest>,
) -> Result<(StatusCode, Json<CreateHostResponse>), ApiError> {
    check_hostname(&req.hostname).map_err(|e| ApiError::bad_request(e.to_string()))?;
    // `HOST` arguments (the CLI's, the drift routes') are tried as an id first: a hostname
    // shaped like one would name some other host.
    drover_proto::names::check_not_an_id("hostname", &req.hostname)?;
    if !drover_proto::names::is_sha256_hex(&req.trust_sha256) {
        return Err(ApiError::bad_request("trustSha256 must be 64 lowercase hex digits (sha256 of your trust.json)"));
    }
    let ttl = req.token_ttl_secs.unwrap_or(app.config.enrollment.token_ttl_secs);
    if ttl == 0 || ttl > MAX_TOKEN_TTL_SECS {
        return Err(ApiError::bad_request(format!("tokenTtlSecs must be between 1 and {MAX_TOKEN_TTL_SECS}")));
    }
    let mut raw = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut raw);
    let token = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw);
    let now = app.clock.now();
    let expires_at = now.plus_secs(ttl);
    let new = NewHost {
        hostname: req.hostname.clone(),
        created_at: now,
        token: Some(EnrollmentToken { token_hash: hash_token(&token), expires_at }),
    };
    let audit_actor = op.name.clone();
    let host = store::blocking(app.store.clone(), move |s| {
        let host = s.create_host(&new)?;
        s.append_audit(&NewAudit {
            at: now,
            actor: audit_actor,
            role: Role::Admin.as_str().to_owned(),
            action: "host.create".to_owned(),
            target: host.id.to_string(),
            reason: format!("enroll {}", host.hostname),
            prior_state: None,
            expected_state: Some(HostLifecycle::BootstrapIssued.as_str().to_owned()),
        })?;
        Ok(host)
    })
    .await?;
    let url = app.config.public_urls.first().cloned().unwrap_or_default();
    let command = drover_proto::enroll::bootstrap_command(&url, &app.server_pin, &host.id.to_string(), &token, &req.trust_sha256);
    tracing::info!(host_id = %host.id, hostname = %host.hostname, operator = %op.name, "host created; bootstrap token issued");
    Ok((
        StatusCode::CREATED,
        Json(CreateHostResponse {
            host_id: host.id.to_string(),
            hostname: host.hostname,
            token: Secret::new(token),
            expires_at,
            command: Secret::new(command),
        }),
    ))
}

/// `POST /v1/enroll`: token + CSR → certificate. The token is single-use, unexpired and
/// bound to the host id the command named; the certificate is built from this server's
/// parameters alone (host id, hostname, 30 days), never from what the CSR asks for.
pub async fn enroll(State(app): State<Arc<AppState>>, JsonBody(req): JsonBody<EnrollRequest>) -> Result<Json<EnrollResponse>, ApiError> {
    let host_id = Uuid::parse_str(&req.host_id).map_err(|_| ApiError::bad_request("hostId is not a UUID"))?;
    let now = app.clock.now();
    // Check the CSR before the token is spent, so a malformed request does not burn it. A
    // signature check is CPU work an anonymous caller asks for: it runs on the blocking pool,
    // never on the workers that serve operators and agents.
    let checked = (req.csr.clone(), req.seal_key.clone(), req.evidence_csr.clone());
    tokio::task::spawn_blocking(move || -> Result<(), ApiError> {
        let (csr, seal_key, evidence_csr) = checked;
        crate::pki::check_csr(&csr, crate::pki::CsrPurpose::Host).map_err(|e| ApiError::bad_request(format!("csr: {e}")))?;
        if let Some(key) = &seal_key {
            drover_proto::seal::check_public_b64(key).map_err(|e| ApiError::bad_request(format!("sealKey: {e}")))?;
        }
        if let Some(csr) = &evidence_csr {
            crate::pki::check_csr(csr, crate::pki::CsrPurpose::Evidence).map_err(|e| ApiError::bad_request(format!("evidenceCsr: {e}")))?;
        }
        Ok(())
    })
    .await
    .map_err(|e| {
        tracing::error!(error = %e, "enrollment CSR check panicked");
        ApiError::internal()
    })??;
    let token_hash = hash_token(req.token.expose());
    let ca = app.ca.clone();
    let csr = req.csr.clone();
    let seal_key = req.seal_key.clone();
    let evidence_csr = req.evidence_csr.clone();
    // Token, lifecycle and certificate in one transaction: a failure anywhere leaves the
    // token unspent, so the host can simply run its command again.
    let (host, cert, evidence_cert) = store::blocking(app.store.clone(), move |s| {
        let mut issued = None;
        let mut evidence_issued = None;
        let mut issue = |host: &crate::store::Host| {
            let cert = ca.issue_host_from_csr(&csr, host.id, &host.hostname, now).map_err(StoreError::backend)?;
            let record = NewCert {
                serial: cert.serial_hex.clone(),
                kind: CertKind::Host,
                host_id: Some(host.id),
                subject: host.hostname.clone(),
                not_before: cert.not_before,
                not_after: cert.not_after,
            };
            let evidence_cert = match &evidence_csr {
                Some(csr) => Some(
                    ca.issue_evidence_from_csr(csr, host.id, &host.hostname, now)
                        .map_err(|e| StoreError::Invalid { what: "evidenceCsr", message: e.to_string() })?,
                ),
                None => None,
            };
            let keys = HostKeys { seal_key: seal_key.clone(), evidence_cert: evidence_cert.as_ref().map(|c| c.pem.clone()) };
            issued = Some(cert);
            evidence_issued = evidence_cert.map(|c| c.pem);
            Ok(Enrolled { cert: record, keys })
        };
        let host = s.enroll_host(&token_hash, host_id, now, &mut issue)?;
        let cert = issued.ok_or_else(|| StoreError::backend("enrollment recorded no certificate"))?;
        Ok((host, cert, evidence_issued))
    })
    .await
    .map_err(|e| match e {
        StoreError::TokenRefused { .. } => ApiError::new(StatusCode::FORBIDDEN, "token_refused", e.to_string()),
        other => ApiError::from(other),
    })?;
    let director_public_key = drover_proto::keys::verifying_key_to_pem(&app.director.signing_key(now).verifying_key()).map_err(|e| {
        tracing::error!(error = %e, "cannot encode director key");
        ApiError::internal()
    })?;
    tracing::info!(host_id = %host.id, hostname = %host.hostname, serial = %cert.serial_hex, "host enrolled");
    Ok(Json(EnrollResponse {
        host_id: host.id.to_string(),
        hostname: host.hostname,
        certificate: cert.pem,
        ca_certificate: app.ca.cert_pem().to_owned(),
        director_public_key,
        coordinator_urls: app.config.public_urls.clone(),
        evidence_certificate: evidence_cert,
    }))
}

/// `POST /v1/hosts/{id}/revoke` (admin): revokes every certificate of the host; from the
/// next handshake on, none of them connects. Audited.
pub async fn revoke_host(State(app): State<Arc<AppState>>, Admin(op): Admin, Path(id): Path<String>) -> Result<Response, ApiError> {
    let host_id = Uuid::parse_str(&id).map_err(|_| ApiError::bad_request("host id is not a UUID"))?;
    let revoked = app.revoke_host(host_id, format!("revoked by operator {}", op.name)).await.map_err(|e| match e {
        CrlError::Store(e) => ApiError::from(e),
        other => {
            tracing::error!(error = %other, "CRL refresh failed after revocation");
            ApiError::internal()
        }
    })?;
    let now = app.clock.now();
    let audit = NewAudit {
        at: now,
        actor: op.name.clone(),
        role: Role::Admin.as_str().to_owned(),
        action: "host.revoke".to_owned(),
        target: host_id.to_string(),
        reason: format!("revoked {revoked} certificate(s)"),
        prior_state: None,
        expected_state: None,
    };
    store::blocking(app.store.clone(), move |s| s.append_audit(&audit)).await?;
    tracing::info!(%host_id, revoked, operator = %op.name, "host certificates revoked");
    Ok((StatusCode::OK, Json(serde_json::json!({ "hostId": host_id.to_string(), "revoked": revoked }))).into_response())
}
