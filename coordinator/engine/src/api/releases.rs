//! Publishing releases: `POST /v1/releases` (publisher or admin), and [`publish_release`], the
//! one path every release takes into the store — the API and the watched `releases_dir`
//! alike — so there is exactly one set of rules to get right.
//!
//! The coordinator holds no CI key and trusts no publisher: a release is stored only after
//! `verify_release` accepted all of it (layout, canonical bytes, CI signatures and threshold,
//! timestamp freshness, a version above every stored one, manifest ↔ fleet.resolved anchors,
//! every manifest listed in the timestamp) against the trust roots read at start. A refusal
//! names the rule broken, as the HTTP error code and in a `release.refused` event.
//!
//! The latest release published again byte-for-byte is a no-op success (a retried publish,
//! CI run twice): nothing is written, and the answer is the stored release. It is still
//! verified (freshness aside — it is already what the coordinator serves), so a release the
//! trust roots no longer accept is never answered as accepted. Every other version at or below
//! the latest — a replay of an older release, or the latest version with other content — is
//! refused as `VersionRollback`.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use drover_proto::publish::{PublishRequest, PublishResponse};
use drover_proto::release::{ReleaseFiles, verify_release};
use drover_proto::verify::{VerifyContext, VerifyError, VersionFloor};
use serde_json::json;

use crate::api::auth::Publisher;
use crate::api::error::{ApiError, JsonBody};
use crate::app::AppState;
use crate::store::{self, NewAudit, NewEvent, StoreError};

/// The largest publish body: a release for 10,000 hosts is about 4 MiB, and carried as JSON
/// strings its quotes are escaped; this leaves room for that and for growth. Every other
/// route keeps [`crate::api::MAX_BODY_BYTES`].
pub const MAX_RELEASE_BODY_BYTES: usize = 16 << 20;

/// Longest audit reason accepted (it is stored and listed, not a place for payloads).
pub const MAX_REASON_CHARS: usize = 1024;

/// Who publishes, for the audit record and events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    /// The operator's certificate name, or the watcher's name.
    pub name: String,
    /// Their role (`admin`, `publisher`, or `system` for the watched directory).
    pub role: String,
}

/// A stored release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// Its timestamp version.
    pub version: u64,
    /// Every rollout id whose manifest it carries, sorted.
    pub rollouts: Vec<String>,
    /// False when it was the latest release already, byte-for-byte, and nothing was written.
    pub created: bool,
}

/// Why a release was not stored.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// Verification refused it; the rule is [`VerifyError::rule`].
    #[error(transparent)]
    Refused(#[from] VerifyError),
    /// The store refused it (a concurrent publish of the same version, a manifest id reused
    /// with other bytes) or failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<PublishError> for ApiError {
    fn from(e: PublishError) -> Self {
        match e {
            PublishError::Refused(v) => ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, v.rule(), refusal_message(&v)),
            PublishError::Store(s) => ApiError::from(s),
        }
    }
}

/// What a refusal says. Only the latest release's own bytes pass its version (they are a
/// no-op), so an equal version refused here always came with other content: say so, rather
/// than the generic "not above the highest accepted".
fn refusal_message(refusal: &VerifyError) -> String {
    match refusal {
        VerifyError::VersionRollback { version, floor, .. } if version == floor => {
            format!("timestamp version {version} was already accepted with different content: a new release needs a version above {floor}")
        }
        other => other.to_string(),
    }
}

/// Verifies `files` against the coordinator's trust roots, at the app clock's now, with a
/// version floor strictly above the highest stored release, and stores them byte-exact with
/// an audit record and a `release.published` event. A refusal is recorded as a
/// `release.refused` event naming the rule, and nothing else is written. The latest release
/// again, byte-for-byte, verifies (staleness aside) and writes nothing (`created: false`).
pub async fn publish_release(app: &Arc<AppState>, files: ReleaseFiles, actor: Actor, reason: String) -> Result<Published, PublishError> {
    let now = app.clock.now();
    let trust = app.trust.clone();
    let audit_actor = actor.clone();
    // Verification parses and checks megabytes of signed JSON: run it on the blocking pool
    // with the store calls, never on a runtime worker.
    let outcome = store::blocking(app.store.clone(), move |s| {
        let latest = s.latest_release()?;
        let unchanged = latest.as_ref().is_some_and(|r| r.files == files);
        let prior = latest.map(|r| r.version);
        let ctx = VerifyContext::at(now);
        let ctx = match prior {
            // Already what is served: checked again against today's trust roots, but a
            // timestamp gone stale since is the readiness check's business, not a refusal.
            Some(_) if unchanged => ctx.reporting_stale(),
            Some(v) => ctx.with_floor(VersionFloor::Above(v)),
            None => ctx,
        };
        let verified = match verify_release(&files, &trust, &ctx) {
            Ok(v) => v,
            Err(e) => return Ok(Err(e)),
        };
        let version = verified.timestamp.doc.version;
        let mut rollouts: Vec<String> = verified
            .manifests
            .values()
            .map(|m| m.manifest.rollout_id.to_string())
            .chain(verified.revertable.keys().map(ToString::to_string))
            .collect();
        rollouts.sort();
        rollouts.dedup();
        if unchanged {
            return Ok(Ok(Published { version, rollouts, created: false }));
        }
        // The store re-checks that the version increases, inside its transaction: two
        // concurrent publishes verified against the same floor cannot both land.
        s.put_release(version, verified.timestamp.doc.signed_at, &files)?;
        s.append_audit(&NewAudit {
            at: now,
            actor: audit_actor.name.clone(),
            role: audit_actor.role.clone(),
            action: store::RELEASE_PUBLISH_ACTION.to_owned(),
            target: version.to_string(),
            reason,
            prior_state: prior.map(|v| format!("release version {v}")),
            expected_state: Some(format!("release version {version}")),
        })?;
        s.append_event(&NewEvent {
            at: now,
            kind: "release.published".to_owned(),
            host_id: None,
            rollout_id: None,
            job_id: None,
            message: format!("release version {version} published by {} ({})", audit_actor.name, audit_actor.role),
            data: json!({ "version": version, "rollouts": rollouts, "actor": audit_actor.name }),
        })?;
        Ok(Ok(Published { version, rollouts, created: true }))
    })
    .await?;
    // `/readyz` reports the new release as soon as it is checked, not a second later.
    app.readiness.poke();
    match outcome {
        Ok(published) if !published.created => {
            tracing::info!(version = published.version, actor = %actor.name, "release published again unchanged: nothing to do");
            Ok(published)
        }
        Ok(published) => {
            tracing::info!(version = published.version, rollouts = ?published.rollouts, actor = %actor.name, "release published");
            // A new ref for a channel: plan now (RFC-0002 §6).
            app.executor.poke();
            Ok(published)
        }
        Err(refusal) => {
            // The refusal repeats what it refused (a file name, a value): bounded in the log
            // and the event, whatever the release held.
            let said = refusal_message(&refusal);
            let said = drover_proto::text::bounded(&said, 1024);
            tracing::warn!(rule = refusal.rule(), error = %said, actor = %actor.name, "release refused");
            app.metrics.record_verification_failure(refusal.rule());
            let event = NewEvent {
                at: now,
                kind: "release.refused".to_owned(),
                host_id: None,
                rollout_id: None,
                job_id: None,
                message: format!("release from {} refused: {}: {said}", actor.name, refusal.rule()),
                data: json!({ "rule": refusal.rule(), "actor": actor.name }),
            };
            store::blocking(app.store.clone(), move |s| s.append_event(&event)).await?;
            Err(PublishError::Refused(refusal))
        }
    }
}

/// `POST /v1/releases` (publisher or admin): 201 with the stored version and rollout ids; 200
/// with the same when it is the latest release again, byte-for-byte (nothing written); 422
/// with the broken rule as the error code when verification refuses; 409 when the store
/// already holds that version or a manifest id with other bytes.
pub async fn publish(
    State(app): State<Arc<AppState>>,
    Publisher(op): Publisher,
    JsonBody(req): JsonBody<PublishRequest>,
) -> Result<(StatusCode, Json<PublishResponse>), ApiError> {
    let reason = match &req.reason {
        Some(r) if r.chars().count() > MAX_REASON_CHARS => {
            return Err(ApiError::bad_request(format!("reason is longer than {MAX_REASON_CHARS} characters")));
        }
        Some(r) => r.clone(),
        None => "published through POST /v1/releases".to_owned(),
    };
    let actor = Actor { name: op.name.clone(), role: op.role.as_str().to_owned() };
    let published = publish_release(&app, req.to_files(), actor, reason).await?;
    let status = if published.created { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, Json(PublishResponse { version: published.version, rollouts: published.rollouts })))
}
