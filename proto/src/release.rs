//! A release as a set of files (the directory `drover release` writes, the body of a publish,
//! the layout of `--releases-dir`): building and signing one, re-signing its timestamp, and
//! verifying all of it together.
//!
//! Files are held in memory by relative path so that this stays free of I/O; the CLI and
//! the coordinator read and write directories.

use std::collections::BTreeMap;

use crate::artifacts::{ManifestRoot, RevertableRollout, SCHEMA_VERSION, TimestampChannel, TimestampDoc};
use crate::canonical::{self, CanonicalError};
use crate::keys::Signer;
use crate::names::RolloutId;
use crate::resolve::{ReleaseMeta, ResolveError, resolve, sha256_hex, signed_bytes_of};
use crate::sig::{SignError, sign_bytes};
use crate::spec::FleetSpec;
use crate::time::Time;
use crate::trust::{KeySet, TrustRoots};
use crate::verify::root::{VerifiedRoot, check_root_matches, verify_root};
use crate::verify::{
    ManifestAnchors, Proof, VerifiedFleet, VerifiedManifest, VerifiedTimestamp, VerifyContext, VerifyError, check_canonical,
    check_detached, check_safe_integers, verify_fleet_resolved, verify_manifest, verify_timestamp,
};

/// Path of the resolved fleet inside a release.
pub const FLEET_RESOLVED: &str = "fleet.resolved.json";
/// Path of the timestamp inside a release.
pub const TIMESTAMP: &str = "timestamp.json";
/// Directory of the manifests inside a release.
pub const ROLLOUTS_DIR: &str = "rollouts";
/// Directory of the manifests' signed roots inside a release (`docs/manifest-proofs.md`).
pub const ROOTS_DIR: &str = "roots";
/// How many earlier rollouts per channel a timestamp keeps revertable.
pub const MAX_REVERTABLE: usize = 5;

/// Path of a manifest inside a release.
pub fn manifest_path(id: &RolloutId) -> String {
    format!("{ROLLOUTS_DIR}/{id}.json")
}

/// Path of a manifest's signed root inside a release.
pub fn root_path(id: &RolloutId) -> String {
    format!("{ROOTS_DIR}/{id}.json")
}

/// Path of an artifact's detached signature.
pub fn sig_path(path: &str) -> String {
    format!("{path}.sig")
}

/// Why a release could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    /// The spec could not be projected.
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    /// Signing failed.
    #[error(transparent)]
    Sign(#[from] SignError),
    /// Canonicalisation failed.
    #[error(transparent)]
    Canonical(#[from] CanonicalError),
    /// A file the operation needs is absent.
    #[error("release is missing {path}")]
    Missing {
        /// The path.
        path: String,
    },
    /// The existing timestamp could not be read.
    #[error("{path}: {message}")]
    Malformed {
        /// The path.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A timestamp version cannot go backwards or overflow.
    #[error("timestamp version {requested} must be greater than the previous {previous}")]
    VersionNotIncreasing {
        /// Requested.
        requested: u64,
        /// Previous.
        previous: u64,
    },
    /// No signer was given.
    #[error("no signing key given")]
    NoSigner,
    /// A re-signing dated before the signing it replaces.
    #[error("signing time {requested} is before the previous timestamp's {previous}")]
    TimeGoesBackwards {
        /// Requested signing time.
        requested: Time,
        /// The previous one.
        previous: Time,
    },
    /// A rollout id the previous release already used for other manifest bytes.
    #[error(
        "rollout {rollout_id} was already released with other bytes (sha256 {previous_sha256}); a manifest never changes under its id: use a new CI commit or channel ref"
    )]
    RolloutIdReused {
        /// The id.
        rollout_id: RolloutId,
        /// The sha256 it had.
        previous_sha256: String,
    },
    /// The timestamp to re-sign or build on is not signed by any of the keys signing now.
    #[error("the existing timestamp does not verify under the given key(s), and CI only re-signs or builds on its own: {source}")]
    NotOurs {
        /// Why it did not verify.
        #[source]
        source: VerifyError,
    },
}

/// A release's files by relative path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReleaseFiles {
    /// Path → bytes.
    pub files: BTreeMap<String, Vec<u8>>,
}

impl ReleaseFiles {
    /// The bytes at `path`.
    pub fn get(&self, path: &str) -> Option<&[u8]> {
        self.files.get(path).map(Vec::as_slice)
    }

    fn require(&self, path: &str) -> Result<&[u8], VerifyError> {
        self.get(path)
            .ok_or_else(|| VerifyError::Malformed { artifact: path.to_owned(), message: "file is missing from the release".to_owned() })
    }

    fn put_signed<S: Signer>(&mut self, path: String, bytes: Vec<u8>, signers: &[S]) -> Result<(), ReleaseError> {
        let sig = sign_bytes(&bytes, signers)?;
        self.files.insert(sig_path(&path), canonical::to_vec_of(&sig)?);
        self.files.insert(path, bytes);
        Ok(())
    }
}

/// Inputs of a release besides the spec.
#[derive(Debug, Clone)]
pub struct ReleaseParams {
    /// CI commit and creation time.
    pub meta: ReleaseMeta,
    /// Timestamp version (strictly greater than the previous one's).
    pub version: u64,
    /// The previous release's timestamp, to carry revertable rollouts forward.
    pub previous: Option<TimestampDoc>,
}

/// Builds and signs a whole release.
pub fn build_release<S: Signer>(spec: &FleetSpec, params: &ReleaseParams, signers: &[S]) -> Result<ReleaseFiles, ReleaseError> {
    if signers.is_empty() {
        return Err(ReleaseError::NoSigner);
    }
    if let Some(prev) = &params.previous {
        if params.version <= prev.version {
            return Err(ReleaseError::VersionNotIncreasing { requested: params.version, previous: prev.version });
        }
        if params.meta.created_at < prev.signed_at {
            return Err(ReleaseError::TimeGoesBackwards { requested: params.meta.created_at, previous: prev.signed_at });
        }
    }
    let resolved = resolve(spec, &params.meta)?;
    let mut files = ReleaseFiles::default();
    let mut channels = BTreeMap::new();
    for (name, (manifest, bytes)) in &resolved.manifests {
        let sha = sha256_hex(bytes);
        let freshness = resolved.fleet.channels.get(name).map_or(0, |c| c.freshness_window_secs);
        let previous = params.previous.as_ref().and_then(|p| p.channels.get(name));
        check_not_reused(previous, &manifest.rollout_id, &sha)?;
        let revertable = carry_revertable(previous, &manifest.rollout_id);
        channels.insert(
            name.clone(),
            TimestampChannel {
                rollout_id: manifest.rollout_id.clone(),
                manifest_sha256: sha.clone(),
                freshness_window_secs: freshness,
                revertable,
            },
        );
        files.put_signed(manifest_path(&manifest.rollout_id), bytes.clone(), signers)?;
        let root = ManifestRoot::of(manifest, &sha)?;
        files.put_signed(root_path(&manifest.rollout_id), signed_bytes_of(&root_path(&manifest.rollout_id), &root)?, signers)?;
    }
    let timestamp = TimestampDoc {
        schema_version: SCHEMA_VERSION,
        version: params.version,
        signed_at: params.meta.created_at,
        fleet_resolved_sha256: resolved.fleet_sha256.clone(),
        channels,
    };
    files.put_signed(FLEET_RESOLVED.to_owned(), resolved.fleet_bytes, signers)?;
    files.put_signed(TIMESTAMP.to_owned(), signed_bytes_of(TIMESTAMP, &timestamp)?, signers)?;
    Ok(files)
}

/// Refuses a rollout id the previous timestamp lists (current or revertable) with other
/// manifest bytes: agents and the coordinator cache manifests by id.
fn check_not_reused(prev: Option<&TimestampChannel>, id: &RolloutId, sha: &str) -> Result<(), ReleaseError> {
    let Some(prev) = prev else { return Ok(()) };
    let listed = std::iter::once((&prev.rollout_id, &prev.manifest_sha256))
        .chain(prev.revertable.iter().map(|r| (&r.rollout_id, &r.manifest_sha256)));
    for (listed_id, listed_sha) in listed {
        if listed_id == id && listed_sha != sha {
            return Err(ReleaseError::RolloutIdReused { rollout_id: id.clone(), previous_sha256: listed_sha.clone() });
        }
    }
    Ok(())
}

/// The revertable list of a channel's new timestamp entry: the previous current rollout
/// first, then what it could already revert to, without the new id, newest first, bounded.
fn carry_revertable(prev: Option<&TimestampChannel>, new_id: &RolloutId) -> Vec<RevertableRollout> {
    let Some(prev) = prev else { return Vec::new() };
    let mut out: Vec<RevertableRollout> = Vec::new();
    let head = RevertableRollout { rollout_id: prev.rollout_id.clone(), manifest_sha256: prev.manifest_sha256.clone() };
    for r in std::iter::once(head).chain(prev.revertable.iter().cloned()) {
        if r.rollout_id != *new_id && !out.iter().any(|o| o.rollout_id == r.rollout_id) && out.len() < MAX_REVERTABLE {
            out.push(r);
        }
    }
    out
}

/// Opens the timestamp of a release directory that CI itself signed, for re-signing or as
/// the `previous` of a new release: it must carry a valid signature by one of `signers`'
/// keys (freshness aside: a stale timestamp is why one re-signs), and the fleet.resolved and
/// current manifests it lists must be present with the sha256 it lists.
///
/// CI signs whatever it is handed, so this is what stops someone able to write to a release
/// directory from having CI bless a timestamp that points at other artifacts, or a
/// `revertable` list with a rollback target of their choosing.
pub fn open_own_timestamp<S: Signer>(files: &ReleaseFiles, signers: &[S], at: Time) -> Result<TimestampDoc, ReleaseError> {
    if signers.is_empty() {
        return Err(ReleaseError::NoSigner);
    }
    let bytes = files.get(TIMESTAMP).ok_or_else(|| ReleaseError::Missing { path: TIMESTAMP.to_owned() })?;
    let sig = files.get(&sig_path(TIMESTAMP)).ok_or_else(|| ReleaseError::Missing { path: sig_path(TIMESTAMP) })?;
    let ours = KeySet::any_of(signers.iter().map(Signer::verifying_key));
    let value = check_canonical(TIMESTAMP, bytes).map_err(|source| ReleaseError::NotOurs { source })?;
    check_safe_integers(TIMESTAMP, &value).map_err(|source| ReleaseError::NotOurs { source })?;
    check_detached(TIMESTAMP, bytes, sig, &ours, at).map_err(|source| ReleaseError::NotOurs { source })?;
    let doc: TimestampDoc =
        serde_json::from_value(value).map_err(|e| ReleaseError::Malformed { path: TIMESTAMP.to_owned(), message: e.to_string() })?;
    let listed = std::iter::once((FLEET_RESOLVED.to_owned(), doc.fleet_resolved_sha256.clone()))
        .chain(doc.channels.values().map(|c| (manifest_path(&c.rollout_id), c.manifest_sha256.clone())));
    for (path, sha) in listed {
        let actual = files.get(&path).map(sha256_hex).ok_or_else(|| ReleaseError::Missing { path: path.clone() })?;
        if actual != sha {
            return Err(ReleaseError::Malformed { path, message: format!("sha256 {actual} is not the {sha} the timestamp lists") });
        }
    }
    Ok(doc)
}

/// Re-signs only the timestamp of a release: same channels, `version` (default previous + 1),
/// new `signed_at`, which may not precede the previous signing. The existing timestamp must
/// be CI's own and intact ([`open_own_timestamp`]).
pub fn resign_timestamp<S: Signer>(
    files: &mut ReleaseFiles,
    version: Option<u64>,
    signed_at: Time,
    signers: &[S],
) -> Result<TimestampDoc, ReleaseError> {
    let mut doc = open_own_timestamp(files, signers, signed_at)?;
    if signed_at < doc.signed_at {
        return Err(ReleaseError::TimeGoesBackwards { requested: signed_at, previous: doc.signed_at });
    }
    let next = match version {
        Some(v) => v,
        None => doc.version.checked_add(1).ok_or(ReleaseError::VersionNotIncreasing { requested: u64::MAX, previous: doc.version })?,
    };
    if next <= doc.version {
        return Err(ReleaseError::VersionNotIncreasing { requested: next, previous: doc.version });
    }
    doc.version = next;
    doc.signed_at = signed_at;
    files.put_signed(TIMESTAMP.to_owned(), signed_bytes_of(TIMESTAMP, &doc)?, signers)?;
    Ok(doc)
}

/// Rule: a release holds only its layout's files — `fleet.resolved.json`, `timestamp.json`,
/// `rollouts/<rolloutId>.json`, `roots/<rolloutId>.json`, each with its `.sig`. Whoever stores a verified release by
/// these paths can then never be led outside it.
pub fn check_layout(files: &ReleaseFiles) -> Result<(), VerifyError> {
    for path in files.files.keys() {
        let artifact = path.strip_suffix(".sig").unwrap_or(path);
        let in_dir = |dir: &str| {
            artifact
                .strip_prefix(dir)
                .and_then(|p| p.strip_prefix('/'))
                .and_then(|p| p.strip_suffix(".json"))
                .is_some_and(|id| RolloutId::parse(id).is_ok())
        };
        let known = artifact == FLEET_RESOLVED || artifact == TIMESTAMP || in_dir(ROLLOUTS_DIR) || in_dir(ROOTS_DIR);
        if !known {
            return Err(VerifyError::Malformed { artifact: path.clone(), message: "not a file of the release layout".to_owned() });
        }
    }
    Ok(())
}

/// A release whose every artifact verified and agrees with the others.
#[derive(Debug, Clone)]
pub struct VerifiedRelease {
    /// The resolved fleet.
    pub fleet: VerifiedFleet,
    /// The timestamp.
    pub timestamp: VerifiedTimestamp,
    /// The current manifests by channel.
    pub manifests: BTreeMap<String, VerifiedManifest>,
    /// Revertable manifests that travelled with the release, by rollout id.
    pub revertable: BTreeMap<RolloutId, VerifiedManifest>,
    /// The signed root of every manifest above, by rollout id.
    pub roots: BTreeMap<RolloutId, VerifiedRoot>,
    /// Only verification makes one.
    _proof: Proof,
}

/// Verifies a whole release: timestamp first (freshness, version), then fleet.resolved (its
/// sha256 must be the timestamp's), then every manifest the timestamp lists (present,
/// anchored to this fleet.resolved), then any revertable manifest carried along. A manifest
/// file the timestamp does not list is refused rather than ignored, so nothing unlisted
/// travels inside a release. Last, every manifest's signed root: present, signed, and the
/// exact projection of its manifest (`docs/manifest-proofs.md`); a root without its manifest
/// is refused too.
pub fn verify_release(files: &ReleaseFiles, trust: &TrustRoots, ctx: &VerifyContext) -> Result<VerifiedRelease, VerifyError> {
    check_layout(files)?;
    let timestamp = verify_timestamp(files.require(TIMESTAMP)?, files.require(&sig_path(TIMESTAMP))?, trust, ctx)?;
    let fleet = verify_fleet_resolved(files.require(FLEET_RESOLVED)?, files.require(&sig_path(FLEET_RESOLVED))?, trust, ctx)?;
    if fleet.sha256 != timestamp.doc.fleet_resolved_sha256 {
        return Err(VerifyError::FleetResolvedNotInTimestamp {
            listed: timestamp.doc.fleet_resolved_sha256.clone(),
            actual: fleet.sha256.clone(),
        });
    }
    let mut manifests = BTreeMap::new();
    for (channel, entry) in &timestamp.doc.channels {
        let path = manifest_path(&entry.rollout_id);
        let (Some(bytes), Some(sig)) = (files.get(&path), files.get(&sig_path(&path))) else {
            return Err(VerifyError::ManifestMissing { channel: channel.clone(), rollout_id: entry.rollout_id.clone() });
        };
        let anchors = ManifestAnchors { advertised_id: Some(&entry.rollout_id), timestamp: &timestamp, fleet: Some(&fleet) };
        manifests.insert(channel.clone(), verify_manifest(bytes, sig, trust, ctx, anchors)?);
    }
    // Any other manifest file must be one the timestamp lists as revertable (a release
    // directory may carry them so a rollback target travels with it); it is verified on the
    // revertable path. Anything else is refused rather than ignored.
    let mut revertable = BTreeMap::new();
    for (path, bytes) in &files.files {
        let Some(name) = path.strip_prefix(&format!("{ROLLOUTS_DIR}/")).and_then(|p| p.strip_suffix(".json")) else { continue };
        if manifests.values().any(|m| m.manifest.rollout_id.as_str() == name) {
            continue;
        }
        let rollout_id = RolloutId::parse(name).map_err(|e| VerifyError::Malformed { artifact: path.clone(), message: e.to_string() })?;
        let sha = sha256_hex(bytes);
        if !timestamp.doc.lists(&rollout_id, &sha) {
            return Err(VerifyError::ManifestNotInTimestamp { rollout_id, manifest_sha256: sha });
        }
        let sig = files.require(&sig_path(path))?;
        let anchors = ManifestAnchors { advertised_id: Some(&rollout_id), timestamp: &timestamp, fleet: None };
        revertable.insert(rollout_id.clone(), verify_manifest(bytes, sig, trust, ctx, anchors)?);
    }
    let mut roots = BTreeMap::new();
    for (m, fleet) in manifests.values().map(|m| (m, Some(&fleet))).chain(revertable.values().map(|m| (m, None))) {
        let id = &m.manifest.rollout_id;
        let path = root_path(id);
        let (Some(bytes), Some(sig)) = (files.get(&path), files.get(&sig_path(&path))) else {
            return Err(VerifyError::RootMissing { rollout_id: id.clone() });
        };
        let anchors = ManifestAnchors { advertised_id: Some(id), timestamp: &timestamp, fleet };
        let root = verify_root(bytes, sig, trust, ctx, anchors)?;
        check_root_matches(&root, bytes, m)?;
        roots.insert(id.clone(), root);
    }
    for path in files.files.keys() {
        let Some(name) = path.strip_prefix(&format!("{ROOTS_DIR}/")).and_then(|p| p.strip_suffix(".json")) else { continue };
        if !roots.keys().any(|id| id.as_str() == name) {
            return Err(VerifyError::Malformed {
                artifact: path.clone(),
                message: "a root whose manifest the release does not carry".to_owned(),
            });
        }
    }
    Ok(VerifiedRelease { fleet, timestamp, manifests, revertable, roots, _proof: Proof(()) })
}
