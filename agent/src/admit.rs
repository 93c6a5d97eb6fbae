//! What the agent admits to act on. An intent from the coordinator is only a director's claim;
//! it becomes something the agent acts on only when, in this order:
//!
//! 1. `timestamp.json` verifies against the operator's CI trust roots: signed to threshold,
//!    fresh for its channels, not future-dated, its version not below the highest accepted;
//! 2. the manifest's bytes are the ones cached under its rollout id, if any were (a manifest
//!    never changes bytes under its id);
//! 3. the manifest verifies: CI-signed, `rolloutId` recomputed from its `channel` and
//!    `channelRef` equal to the one advertised, listed with its sha256 by the fresh timestamp,
//!    anchored to the timestamp's `fleetResolvedSha256`;
//! 4. the intent verifies: director-signed, for this host's id **and** hostname, not expired,
//!    naming this manifest by sha256, `(hostname, waveIndex)` in the manifest's host set, and
//!    its target equal to the manifest's target for this host.
//!
//! Each refusal becomes a typed [`ReportEvent`] (`ManifestMismatch` when intent, manifest and
//! host disagree; `VerificationFailed` for a broken signature, freshness or version rule) and
//! nothing runs. The checks themselves are `drover_proto::verify`'s; this module only orders
//! them and carries the agent's persisted floors into them. No I/O: the caller fetches and
//! persists.

use drover_proto::enroll::RolloutBundle;
use drover_proto::intent::Intent;
use drover_proto::names::RolloutId;
use drover_proto::report::ReportEvent;
use drover_proto::sig::Envelope;
use drover_proto::time::Time;
use drover_proto::trust::TrustRoots;
use drover_proto::verify::{
    HostIdentity, ManifestAnchors, VerifiedManifest, VerifiedTimestamp, VerifyContext, VerifyError, VersionFloor, verify_intent,
    verify_manifest, verify_task, verify_timestamp,
};
use sha2::{Digest, Sha256};

use crate::director::DirectorKeys;
use crate::records::{CachedManifest, Seen};
use crate::state::{StateDir, StateError, TRUST};

/// The keys the agent checks against, both pinned at enrollment from the operator's side.
#[derive(Debug, Clone)]
pub struct Anchors {
    /// The CI trust roots (`trust.json`).
    pub ci: TrustRoots,
    /// The director key (`director.pub`) and the rotation it signed, for intents and tasks.
    pub director: DirectorKeys,
}

impl Anchors {
    /// Loads both from the state directory.
    pub fn load(state: &StateDir, now: Time) -> Result<Anchors, StateError> {
        let corrupt = |name: &str, message: String| StateError::Corrupt { file: state.file(name), message };
        let ci = TrustRoots::from_json(&state.read(TRUST)?).map_err(|e| corrupt(TRUST, e.to_string()))?;
        Ok(Anchors { ci, director: DirectorKeys::load(state, now)? })
    }
}

/// An intent that passed every rule, with what was verified on the way.
#[derive(Debug, Clone)]
pub struct Admitted {
    /// The intent.
    pub intent: Intent,
    /// The manifest it names.
    pub manifest: VerifiedManifest,
    /// The timestamp that lists it (its version becomes the new floor).
    pub timestamp: VerifiedTimestamp,
    /// The manifest as it is to be cached.
    pub cache: CachedManifest,
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Whether a broken rule means "intent, manifest and host disagree" rather than "a signature,
/// freshness or version rule failed".
fn is_mismatch(e: &VerifyError) -> bool {
    matches!(
        e,
        VerifyError::RolloutIdMismatch { .. }
            | VerifyError::HostNotInManifest { .. }
            | VerifyError::WaveMismatch { .. }
            | VerifyError::TargetMismatch { .. }
            | VerifyError::ManifestHashMismatch { .. }
            | VerifyError::WrongHost { .. }
            | VerifyError::FleetResolvedHashMismatch { .. }
            | VerifyError::ManifestNotInTimestamp { .. }
    )
}

/// The event reporting `e`, broken while checking `artifact` of rollout `rollout`.
pub fn refusal(rollout: &str, artifact: &str, e: &VerifyError) -> ReportEvent {
    let reason = format!("{}: {e}", e.rule());
    if is_mismatch(e) {
        ReportEvent::ManifestMismatch { rollout_id: rollout.to_owned(), reason }
    } else {
        ReportEvent::VerificationFailed { artifact: artifact.to_owned(), reason }
    }
}

/// The rollout an intent names, read before its signature is checked, only to know which
/// bundle to ask for: it is a typed [`RolloutId`] (a closed alphabet, safe in a URL path), and
/// [`admit_intent`] checks everything afterwards.
pub fn advertised_rollout(env: &Envelope) -> Result<RolloutId, ReportEvent> {
    let refused = |reason: String| ReportEvent::VerificationFailed { artifact: "intent".to_owned(), reason };
    let value: serde_json::Value = env.payload().map_err(|e| refused(format!("Malformed: {e}")))?;
    let id = value.get("rolloutId").and_then(|v| v.as_str()).ok_or_else(|| refused("Malformed: no rolloutId".to_owned()))?;
    RolloutId::parse(id).map_err(|e| refused(format!("Malformed: rolloutId: {e}")))
}

/// Runs every rule of the module doc over an intent and the bundle fetched for it.
pub fn admit_intent(
    env: &Envelope,
    bundle: &RolloutBundle,
    anchors: &Anchors,
    host: HostIdentity<'_>,
    seen: &Seen,
    cached: Option<&CachedManifest>,
    now: Time,
) -> Result<Admitted, ReportEvent> {
    let rollout = advertised_rollout(env)?;
    let rid = rollout.to_string();
    let floor =
        if seen.highest_timestamp_version == 0 { VersionFloor::None } else { VersionFloor::AtLeast(seen.highest_timestamp_version) };
    let ctx = VerifyContext::at(now).with_floor(floor);
    let timestamp = verify_timestamp(bundle.timestamp.as_bytes(), bundle.timestamp_sig.as_bytes(), &anchors.ci, &ctx)
        .map_err(|e| refusal(&rid, "timestamp.json", &e))?;
    let sha256 = sha256_hex(bundle.manifest.as_bytes());
    if let Some(c) = cached.filter(|c| c.sha256 != sha256) {
        return Err(ReportEvent::ManifestMismatch {
            rollout_id: rid,
            reason: format!("ManifestChanged: the manifest of this rollout id was {} and is now {sha256}", c.sha256),
        });
    }
    let anchors_m = ManifestAnchors { advertised_id: Some(&rollout), timestamp: &timestamp, fleet: None };
    let manifest = verify_manifest(bundle.manifest.as_bytes(), bundle.manifest_sig.as_bytes(), &anchors.ci, &ctx, anchors_m)
        .map_err(|e| refusal(&rid, &format!("rollouts/{rid}.json"), &e))?;
    let intent =
        verify_intent(env, anchors.director.key_set(), host, &manifest, &timestamp, &ctx).map_err(|e| refusal(&rid, "intent", &e))?;
    let cache =
        CachedManifest { rollout_id: rollout, sha256, manifest: bundle.manifest.clone(), manifest_sig: bundle.manifest_sig.clone() };
    Ok(Admitted { intent, manifest, timestamp, cache })
}

/// A task that passed the director's signature, host and window rules, and is not a replay.
pub fn admit_task(
    env: &Envelope,
    anchors: &Anchors,
    host_id: &str,
    journal: &crate::records::Journal,
    now: Time,
) -> Result<drover_proto::task::Task, (String, ReportEvent)> {
    let id_hint = env.payload::<serde_json::Value>().ok().and_then(|v| v.get("taskId").and_then(|t| t.as_str()).map(str::to_owned));
    let id = id_hint.unwrap_or_default();
    let task = verify_task(env, anchors.director.key_set(), host_id, &VerifyContext::at(now))
        .map_err(|e| (id.clone(), ReportEvent::TaskRefused { task_id: id.clone(), reason: format!("{}: {e}", e.rule()) }))?;
    if journal.contains(&task.task_id) {
        return Err((
            task.task_id.clone(),
            ReportEvent::TaskRefused { task_id: task.task_id.clone(), reason: "Replayed: this task id was already taken".to_owned() },
        ));
    }
    Ok(task)
}
