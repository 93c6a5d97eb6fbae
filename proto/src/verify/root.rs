//! A manifest's signed root and a host's place proven under it (`docs/manifest-proofs.md`):
//! what an agent verifies instead of the whole manifest. The root is held to every rule a
//! manifest is (canonical bytes, safe integers, the CI threshold, schema, rejectBefore, no
//! future date, the rollout id recomputed, listed by the fresh timestamp, anchored to its
//! fleet.resolved); the entry to RFC 9162's inclusion rule and to this host's hostname.

use super::{
    ManifestAnchors, Proof, VerifiedManifest, VerifyContext, VerifyError, check_listed_and_anchored, check_rollout_id, malformed,
    open_ci_artifact,
};
use crate::artifacts::{HostSetEntry, ManifestRoot};
use crate::canonical;
use crate::merkle::{EntryProof, Hash, parse_hash};
use crate::names::RolloutId;
use crate::release::root_path;
use crate::resolve::sha256_hex;
use crate::trust::TrustRoots;

/// A verified `roots/<rolloutId>.json`.
#[derive(Debug, Clone)]
pub struct VerifiedRoot {
    /// Its content.
    pub root: ManifestRoot,
    /// sha256 (hex) of its bytes.
    pub sha256: String,
    /// `root.root_hash`, parsed.
    hash: Hash,
    /// Only verification makes one.
    _proof: Proof,
}

impl VerifiedRoot {
    /// The Merkle Tree Hash it signs.
    pub fn hash(&self) -> &Hash {
        &self.hash
    }
}

/// Verifies a signed root with the rules of [`super::verify_manifest`]: canonical, signed to
/// threshold, schema, rejectBefore, not future-dated, its rollout id recomputed from its
/// fields and equal to the one asked for, its `(rolloutId, manifestSha256)` listed by the fresh
/// timestamp, and a channel's current root anchored to the timestamp's fleet.resolved.
pub fn verify_root(
    bytes: &[u8],
    sig: &[u8],
    trust: &TrustRoots,
    ctx: &VerifyContext,
    anchors: ManifestAnchors<'_>,
) -> Result<VerifiedRoot, VerifyError> {
    let artifact = match anchors.advertised_id {
        Some(id) => root_path(id),
        None => "manifest root".to_owned(),
    };
    let root: ManifestRoot = open_ci_artifact(&artifact, bytes, sig, trust, ctx, |r: &ManifestRoot| (r.schema_version, r.created_at))?;
    let computed = check_rollout_id(&artifact, &root.rollout_id, &root.channel, &root.channel_ref, anchors.advertised_id)?;
    let hash = parse_hash("rootHash", &root.root_hash).map_err(|e| malformed(&artifact, e))?;
    check_listed_and_anchored(&computed, &root.channel, &root.manifest_sha256, &root.fleet_resolved_hash, &anchors)?;
    Ok(VerifiedRoot { root, sha256: sha256_hex(bytes), hash, _proof: Proof(()) })
}

/// Rule (release): a signed root is the exact projection of the manifest it names — same
/// bytes as [`ManifestRoot::of`] gives — so whoever verifies a root verifies that manifest's
/// host set. Checked wherever the manifest itself is at hand.
pub fn check_root_matches(root: &VerifiedRoot, root_bytes: &[u8], manifest: &VerifiedManifest) -> Result<(), VerifyError> {
    let rollout_id = manifest.manifest.rollout_id.clone();
    let mismatch = |reason: String| VerifyError::RootMismatch { rollout_id: rollout_id.clone(), reason };
    if root.root.manifest_sha256 != manifest.sha256 {
        return Err(mismatch(format!("it names manifest {}, the manifest is {}", root.root.manifest_sha256, manifest.sha256)));
    }
    let expected = ManifestRoot::of(&manifest.manifest, &manifest.sha256).map_err(|e| mismatch(e.to_string()))?;
    let expected_bytes = canonical::to_vec_of(&expected).map_err(|e| mismatch(e.to_string()))?;
    if expected_bytes != root_bytes {
        let reason = if expected.root_hash != root.root.root_hash {
            format!("rootHash {} over the manifest's {} hosts is {}", root.root.root_hash, expected.tree_size, expected.root_hash)
        } else {
            "its fields differ from the manifest's".to_owned()
        };
        return Err(mismatch(reason));
    }
    Ok(())
}

/// A host's entry in a rollout, proven: from a verified root and an inclusion proof
/// ([`verify_place`]) or read from a verified manifest ([`VerifiedManifest::place`]).
#[derive(Debug, Clone)]
pub struct VerifiedPlace {
    /// The rollout.
    pub rollout_id: RolloutId,
    /// sha256 (hex) of the rollout's manifest.
    pub manifest_sha256: String,
    /// This host's entry.
    pub entry: HostSetEntry,
    /// Only verification makes one.
    _proof: Proof,
}

/// Rule: the entry and its audit path lead to the verified root (RFC 9162 §2.1.3.2, exact
/// path length), and the entry is `hostname`'s — a valid proof of another host's entry is
/// refused as `WrongHost`.
pub fn verify_place(root: &VerifiedRoot, proof: &EntryProof, hostname: &str) -> Result<VerifiedPlace, VerifyError> {
    proof.verify(root.root.tree_size, &root.hash).map_err(|source| VerifyError::ProofInvalid {
        hostname: crate::text::echo(&proof.entry.hostname).into_owned(),
        rollout_id: root.root.rollout_id.clone(),
        source: Box::new(source),
    })?;
    if proof.entry.hostname != hostname {
        return Err(VerifyError::WrongHost {
            artifact: "proof".to_owned(),
            addressed: proof.entry.hostname.clone(),
            actual: hostname.to_owned(),
        });
    }
    Ok(VerifiedPlace {
        rollout_id: root.root.rollout_id.clone(),
        manifest_sha256: root.root.manifest_sha256.clone(),
        entry: proof.entry.clone(),
        _proof: Proof(()),
    })
}

impl VerifiedManifest {
    /// `hostname`'s place in this manifest.
    pub fn place(&self, hostname: &str) -> Result<VerifiedPlace, VerifyError> {
        let m = &self.manifest;
        let entry = m
            .host(hostname)
            .ok_or_else(|| VerifyError::HostNotInManifest { hostname: hostname.to_owned(), rollout_id: m.rollout_id.clone() })?;
        Ok(VerifiedPlace {
            rollout_id: m.rollout_id.clone(),
            manifest_sha256: self.sha256.clone(),
            entry: entry.clone(),
            _proof: Proof(()),
        })
    }
}
