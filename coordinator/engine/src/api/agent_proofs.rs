//! `GET /v1/rollouts/{id}/proof` (`docs/manifest-proofs.md`): a host's entry in a rollout,
//! proven under the rollout's CI-signed Merkle root, with the current timestamp — about 3 KB
//! where the whole manifest is half a megabyte at 10,000 hosts.
//!
//! Each rollout's tree is built once per release version (the manifest parsed, its host set
//! hashed: milliseconds at 10,000 hosts) and shared by every request; a request cuts its
//! host's audit path from it in O(log N). The host is the one its client certificate names,
//! never one the request names, so no host can ask for another's proof.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use drover_proto::artifacts::{HostSetEntry, RolloutManifest};
use drover_proto::enroll::ProofBundle;
use drover_proto::merkle::{EntryProof, Tree};
use drover_proto::names::RolloutId;

use crate::api::agent::{rollout_and_release, stored_text, timestamp_text};
use crate::api::auth::KnownHost;
use crate::api::error::ApiError;
use crate::app::AppState;
use crate::store;

/// What every proof of one rollout in one release shares.
#[derive(Debug)]
pub struct RolloutProofs {
    /// The manifest's host set, sorted by hostname (the tree's leaves, in order).
    pub entries: Vec<HostSetEntry>,
    /// The tree over them.
    pub tree: Tree,
    /// `roots/<id>.json` and its `.sig`, as CI wrote them.
    pub root: String,
    /// The root's signature file.
    pub root_sig: String,
    /// The release's `timestamp.json`.
    pub timestamp: String,
    /// Its signature file.
    pub timestamp_sig: String,
}

impl RolloutProofs {
    /// `hostname`'s bundle, or `None` when it is not in the rollout.
    pub fn bundle_for(&self, hostname: &str) -> Option<ProofBundle> {
        let index = self.entries.binary_search_by(|e| e.hostname.as_str().cmp(hostname)).ok()?;
        Some(ProofBundle {
            proof: EntryProof::of(&self.tree, &self.entries, index)?,
            root: self.root.clone(),
            root_sig: self.root_sig.clone(),
            timestamp: self.timestamp.clone(),
            timestamp_sig: self.timestamp_sig.clone(),
        })
    }
}

/// `GET /v1/rollouts/{rolloutId}/proof`: the calling host's [`ProofBundle`]; 404 when no
/// release is published, the rollout has no manifest or root, or the host is not in it.
pub async fn proof(State(app): State<Arc<AppState>>, KnownHost(caller): KnownHost, Path(id): Path<String>) -> Result<Response, ApiError> {
    let (id, version) = rollout_and_release(&app, &id).await?;
    let proofs = app.proofs.get_or_build(version, &id, || build(app.clone(), id.clone(), version)).await?;
    let bundle = proofs
        .bundle_for(&caller.hostname)
        .ok_or_else(|| ApiError::not_found(format!("host {} is not in rollout {id}", caller.hostname)))?;
    let body = serde_json::to_vec(&bundle).map_err(|e| {
        tracing::error!(error = %e, "cannot serialise a proof bundle");
        ApiError::internal()
    })?;
    Ok(([(axum::http::header::CONTENT_TYPE, "application/json")], body).into_response())
}

/// The tree and shared files of `id` with release `version`'s timestamp.
async fn build(app: Arc<AppState>, id: RolloutId, version: u64) -> Result<Arc<RolloutProofs>, ApiError> {
    let lookup = id.clone();
    let (manifest, root, release) =
        store::blocking(app.store.clone(), move |s| Ok((s.get_manifest(&lookup)?, s.get_manifest_root(&lookup)?, s.get_release(version)?)))
            .await?;
    let manifest = manifest.ok_or_else(|| ApiError::not_found(format!("rollout {id} has no manifest")))?;
    let (root, root_sig) =
        root.ok_or_else(|| ApiError::not_found(format!("rollout {id} has no signed root (a release from before proofs)")))?;
    let release = release.ok_or_else(|| ApiError::not_found("no release has been published"))?;
    // The stored manifest and root were verified together when their release was published
    // (`verify_release` recomputes the root); parsing the manifest again only to hash it.
    let parsed: RolloutManifest = serde_json::from_slice(&manifest.bytes).map_err(|e| {
        tracing::error!(rollout = %id, error = %e, "stored manifest does not parse");
        ApiError::internal()
    })?;
    let tree = Tree::from_entries(&parsed.host_set).map_err(|e| {
        tracing::error!(rollout = %id, error = %e, "cannot hash a stored manifest's host set");
        ApiError::internal()
    })?;
    let (timestamp, timestamp_sig) = timestamp_text(&release)?;
    tracing::debug!(rollout = %id, version, hosts = parsed.host_set.len(), tree_bytes = tree.heap_bytes(), "rollout tree built");
    Ok(Arc::new(RolloutProofs {
        entries: parsed.host_set,
        tree,
        root: stored_text(&root, "root")?,
        root_sig: stored_text(&root_sig, "root signature")?,
        timestamp,
        timestamp_sig,
    }))
}
