//! What the agent admits to act on. An intent from the coordinator is only a director's claim;
//! it becomes something the agent acts on only when, in this order:
//!
//! 1. `timestamp.json` verifies against the operator's CI trust roots: signed to threshold,
//!    fresh for its channels, not future-dated, its version not below the highest accepted;
//! 2. the rollout's signed root (`docs/manifest-proofs.md`) has the bytes cached under its
//!    rollout id, if any were (a root never changes under its id);
//! 3. the root verifies: CI-signed to threshold, not before `rejectBefore`, not future-dated,
//!    `rolloutId` recomputed from its `channel` and `channelRef` equal to the one advertised,
//!    its `(rolloutId, manifestSha256)` listed by the fresh timestamp, anchored to the
//!    timestamp's `fleetResolvedSha256`;
//! 4. this host's entry and its audit path lead to the root (RFC 9162, exact path length), and
//!    the entry is this host's hostname's;
//! 5. the intent verifies: director-signed, for this host's id **and** hostname, not expired,
//!    naming the root's manifest by sha256, its wave and target those of the proven entry.
//!
//! The agent never fetches the whole manifest: its entry, proven, is all it checks, as the
//! manifest's entry was before.
//!
//! Each refusal becomes a typed [`ReportEvent`] (`ManifestMismatch` when intent, manifest and
//! host disagree; `VerificationFailed` for a broken signature, freshness or version rule) and
//! nothing runs. The checks themselves are `drover_proto::verify`'s; this module only orders
//! them and carries the agent's persisted floors into them. No I/O: the caller fetches and
//! persists.

use drover_proto::enroll::ProofBundle;
use drover_proto::intent::Intent;
use drover_proto::names::RolloutId;
use drover_proto::release::root_path;
use drover_proto::report::ReportEvent;
use drover_proto::sig::Envelope;
use drover_proto::time::Time;
use drover_proto::trust::TrustRoots;
use drover_proto::verify::{
    HostIdentity, ManifestAnchors, VerifiedPlace, VerifiedRoot, VerifiedTimestamp, VerifyContext, VerifyError, VersionFloor,
    verify_intent_at, verify_place, verify_root, verify_task, verify_timestamp,
};
use sha2::{Digest, Sha256};

use crate::director::DirectorKeys;
use crate::records::{CachedRoot, Seen};
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
    /// This host's entry in the rollout, proven under the signed root.
    pub place: VerifiedPlace,
    /// The rollout's signed root (its probes are the channel's, the only ones that may gate).
    pub root: VerifiedRoot,
    /// The timestamp that lists it (its version becomes the new floor).
    pub timestamp: VerifiedTimestamp,
    /// The root as it is to be cached.
    pub cache: CachedRoot,
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
            | VerifyError::ProofInvalid { .. }
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

/// Records an admitted intent's timestamp as the highest verified when it is (the floor for
/// every later admission, and the proof shown to a coordinator that is behind).
pub fn note_admitted(seen: &mut crate::records::Seen, bundle: &ProofBundle, version: u64) {
    if version >= seen.highest_timestamp_version {
        seen.highest_timestamp_version = version;
        seen.highest_release = Some(drover_proto::report::ReleaseSeen {
            version,
            timestamp: bundle.timestamp.clone(),
            timestamp_sig: bundle.timestamp_sig.clone(),
        });
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

/// Runs every rule of the module doc over an intent and the proof bundle fetched for it.
pub fn admit_intent(
    env: &Envelope,
    bundle: &ProofBundle,
    anchors: &Anchors,
    host: HostIdentity<'_>,
    seen: &Seen,
    cached: Option<&CachedRoot>,
    now: Time,
) -> Result<Admitted, ReportEvent> {
    let rollout = advertised_rollout(env)?;
    let rid = rollout.to_string();
    let floor =
        if seen.highest_timestamp_version == 0 { VersionFloor::None } else { VersionFloor::AtLeast(seen.highest_timestamp_version) };
    let ctx = VerifyContext::at(now).with_floor(floor);
    let timestamp = verify_timestamp(bundle.timestamp.as_bytes(), bundle.timestamp_sig.as_bytes(), &anchors.ci, &ctx)
        .map_err(|e| refusal(&rid, "timestamp.json", &e))?;
    let sha256 = sha256_hex(bundle.root.as_bytes());
    if let Some(c) = cached.filter(|c| c.sha256 != sha256) {
        return Err(ReportEvent::ManifestMismatch {
            rollout_id: rid,
            reason: format!("RootChanged: the signed root of this rollout id was {} and is now {sha256}", c.sha256),
        });
    }
    let anchors_r = ManifestAnchors { advertised_id: Some(&rollout), timestamp: &timestamp, fleet: None };
    let root = verify_root(bundle.root.as_bytes(), bundle.root_sig.as_bytes(), &anchors.ci, &ctx, anchors_r)
        .map_err(|e| refusal(&rid, &root_path(&rollout), &e))?;
    admit_proven(env, bundle, anchors, host, root, timestamp, &ctx)
}

/// The per-host rules of [`admit_intent`] (rules 4 and 5) over a root and a timestamp that
/// already verified: this host's proof, then the intent against the proven entry.
pub fn admit_proven(
    env: &Envelope,
    bundle: &ProofBundle,
    anchors: &Anchors,
    host: HostIdentity<'_>,
    root: VerifiedRoot,
    timestamp: VerifiedTimestamp,
    ctx: &VerifyContext,
) -> Result<Admitted, ReportEvent> {
    let rid = root.root.rollout_id.to_string();
    let place = verify_place(&root, &bundle.proof, host.hostname).map_err(|e| refusal(&rid, "proof", &e))?;
    let intent =
        verify_intent_at(env, anchors.director.key_set(), host, &place, &timestamp, ctx).map_err(|e| refusal(&rid, "intent", &e))?;
    let cache = CachedRoot {
        rollout_id: root.root.rollout_id.clone(),
        sha256: root.sha256.clone(),
        root: bundle.root.clone(),
        root_sig: bundle.root_sig.clone(),
    };
    Ok(Admitted { intent, place, root, timestamp, cache })
}

/// A task that passed the director's signature, host and window rules.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskAdmission {
    /// Its id was never taken: run it.
    New(drover_proto::task::Task),
    /// Its id is in the journal: it never runs again; it is answered with its recorded result
    /// or refused as a replay ([`crate::recorded::answer_again`]).
    Taken(drover_proto::task::Task),
}

/// The director's signature, host and window rules over a task, then the journal: a task
/// that fails a rule is refused (with its rule) before its id is looked up, so a taken id is
/// only ever answered for a task that verified again as a new one would.
pub fn admit_task(
    env: &Envelope,
    anchors: &Anchors,
    host_id: &str,
    journal: &crate::records::Journal,
    now: Time,
) -> Result<TaskAdmission, (String, ReportEvent)> {
    let id_hint = env.payload::<serde_json::Value>().ok().and_then(|v| v.get("taskId").and_then(|t| t.as_str()).map(str::to_owned));
    let id = id_hint.unwrap_or_default();
    let task = verify_task(env, anchors.director.key_set(), host_id, &VerifyContext::at(now))
        .map_err(|e| (id.clone(), ReportEvent::TaskRefused { task_id: id.clone(), reason: format!("{}: {e}", e.rule()) }))?;
    Ok(if journal.contains(&task.task_id) { TaskAdmission::Taken(task) } else { TaskAdmission::New(task) })
}
