//! What the fleet proves it has seen of releases, so that a coordinator whose store is older
//! than its fleet knows it.
//!
//! Agents keep a version floor: they refuse a `timestamp.json` older than the highest they
//! verified. A coordinator restored from a backup taken before the latest release has an
//! older release in its store, and everything it dispatches from it is refused — for ever,
//! while `/readyz` said ready and never-confirmable hosts held the budget. Now an agent that
//! refuses an intent as a version rollback shows its highest release at its next check-ins
//! (the timestamp and its signature, byte for byte: `CheckinRequest::release_seen`). The
//! coordinator verifies it against the CI trust roots — only CI's keys make one verify, so a
//! host cannot claim a release that does not exist — and keeps the highest proven. While that
//! is newer than the store's latest release:
//!
//! - `/readyz` answers 503 `behind_fleet` ([`crate::readiness`]), `/metrics` has
//!   `drover_release_behind_fleet 1` (an alert in `examples/observability`);
//! - the executor opens no rollout and dispatches no host from the older release (its plans
//!   keep every other action: confirmations, failures, soaks);
//! - a host that refused its intent as a version rollback has its activation recorded as
//!   failed at once (it will never confirm), so its budget is free without waiting for the
//!   confirm deadline.
//!
//! The way forward is to publish the newest release again (CI's `drover release publish`,
//! or the release directory): once the store holds a release at least as new, all of this
//! ends by itself. The proven version lives in memory: a coordinator started again learns it
//! again from the first agent that refuses.

use std::sync::{Arc, Mutex};

use drover_proto::report::{ActivationPhase, ActivationStatus, CheckinRequest, ReleaseSeen, ReportEvent};
use drover_proto::time::Time;
use drover_proto::trust::TrustRoots;
use drover_proto::verify::{VerifyContext, VerifyError, VersionFloor, verify_timestamp};
use uuid::Uuid;

use crate::app::AppState;
use crate::store::IntentRecord;

/// The highest release an agent proved it verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProvenRelease {
    /// Its version.
    pub version: u64,
    /// The host that showed it first.
    pub host_id: Uuid,
    /// When.
    pub at: Time,
}

/// The highest proven release, and which store version was last warned about.
#[derive(Debug, Default)]
pub struct FleetRelease {
    proven: Mutex<Option<ProvenRelease>>,
    warned: Mutex<Option<(Option<u64>, u64)>>,
}

/// The store is behind the fleet: its latest release and the one the fleet proved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Behind {
    /// The store's latest release (None: it has none).
    pub latest: Option<u64>,
    /// What an agent proved it verified.
    pub proven: ProvenRelease,
}

impl FleetRelease {
    /// The highest release proven so far.
    pub fn proven(&self) -> Option<ProvenRelease> {
        self.proven.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Whether a claim of `version` is worth verifying: newer than the store's `latest` and
    /// than what is proven already (anything else changes nothing, so costs nothing).
    pub fn worth_checking(&self, version: u64, latest: Option<u64>) -> bool {
        version > latest.unwrap_or(0) && self.proven().is_none_or(|p| version > p.version)
    }

    /// Verifies `seen` (CI's signature and threshold, the schema; neither freshness nor a
    /// floor: an old timestamp is still proof the release exists) and keeps it when it is the
    /// highest. The version kept is the one the signed bytes say, not the claim's.
    pub fn prove(&self, trust: &TrustRoots, host_id: Uuid, seen: &ReleaseSeen, now: Time) -> Result<u64, VerifyError> {
        let ctx = VerifyContext::at(now).reporting_stale().with_floor(VersionFloor::None);
        let verified = verify_timestamp(seen.timestamp.as_bytes(), seen.timestamp_sig.as_bytes(), trust, &ctx)?;
        let version = verified.doc.version;
        let mut proven = self.proven.lock().unwrap_or_else(|p| p.into_inner());
        if proven.as_ref().is_none_or(|p| version > p.version) {
            *proven = Some(ProvenRelease { version, host_id, at: now });
        }
        Ok(version)
    }

    /// Whether the store, whose latest release is `latest`, is behind the fleet.
    pub fn behind(&self, latest: Option<u64>) -> Option<Behind> {
        self.proven().filter(|p| p.version > latest.unwrap_or(0)).map(|proven| Behind { latest, proven })
    }

    /// True the first time `behind` is seen for this pair of versions (to warn once).
    pub fn first_warning(&self, behind: &Behind) -> bool {
        let key = (behind.latest, behind.proven.version);
        let mut warned = self.warned.lock().unwrap_or_else(|p| p.into_inner());
        let first = *warned != Some(key);
        *warned = Some(key);
        first
    }
}

impl Behind {
    /// What an operator reads: what is wrong and the way forward.
    pub fn explain(&self) -> String {
        let latest = self.latest.map_or_else(|| "has no release".to_owned(), |v| format!("holds release version {v}"));
        format!(
            "this coordinator's store {latest}, but host {} proved it has verified CI-signed release version {}: the store is older than the fleet (restored from an older backup?) and agents refuse everything dispatched from it. Nothing is dispatched until a release of version {} or newer is published again (drover release publish DIR, or the releases directory); hosts refusing their intents are failed at once, freeing their budget, and a rollout left halted by them can be cancelled (drover rollout cancel ID)",
            self.proven.host_id, self.proven.version, self.proven.version
        )
    }
}

/// Takes out of `plan` what would issue anything from a release the fleet is past: opening a
/// rollout (and whatever the plan does to one it opens), dispatching, rolling back. What
/// remains — hosts confirming, failing, soaking, rollouts ending — is applied as planned.
/// Returns how many actions were held back.
pub fn hold_back(plan: &mut drover_planner::Plan) -> usize {
    use drover_planner::Action;
    let opened: Vec<drover_proto::names::RolloutId> = plan
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::OpenRollout { rollout_id, .. } => Some(rollout_id.clone()),
            _ => None,
        })
        .collect();
    let before = plan.actions.len();
    plan.actions.retain(|a| match a {
        Action::OpenRollout { .. } | Action::Dispatch { .. } | Action::Rollback { .. } => false,
        Action::RolloutTransition { rollout_id, .. } | Action::HostTransition { rollout_id, .. } => !opened.contains(rollout_id),
        _ => true,
    });
    before - plan.actions.len()
}

/// The activation to record for a host that will never confirm its current intent because
/// its release is older than the host's floor: the host refused it as a version rollback
/// (it says so in `req`, naming that intent as the one it handled), or it shows a release
/// newer than the store's `latest` (every intent this store issued is older). Failed, so the
/// planner frees its budget now instead of at the confirm deadline; None otherwise (`latest`,
/// the store's latest release read for this check-in, is None when it was not read). A host
/// can say this only of itself, so its word is taken without a proof.
pub fn refused_activation(current: Option<&IntentRecord>, req: &CheckinRequest, latest: Option<u64>) -> Option<ActivationStatus> {
    let current = current.filter(|i| i.current)?;
    let names_current = req.known_intent_id.as_deref() == Some(current.intent.intent_id.to_string().as_str());
    let refusal = req.events.iter().find(|e| e.is_version_rollback()).filter(|_| names_current);
    // Only against a latest release the store was read to hold: an unknown one (the store
    // not answering since the start) proves nothing.
    let ahead = req.release_seen.as_ref().filter(|r| latest.is_some_and(|l| r.version > l));
    let reason = match (refusal, ahead) {
        (Some(ReportEvent::VerificationFailed { reason, .. } | ReportEvent::ManifestMismatch { reason, .. }), _) => {
            format!("the agent refused the intent: {reason}")
        }
        (_, Some(r)) => format!(
            "the agent has verified release version {}, newer than this store's latest ({}): it refuses every intent issued from it",
            r.version,
            latest.unwrap_or(0)
        ),
        _ => return None,
    };
    let envelope: drover_proto::sig::Envelope = serde_json::from_slice(&current.intent.envelope).ok()?;
    let intent: drover_proto::intent::Intent = envelope.payload().ok()?;
    Some(ActivationStatus {
        intent_id: current.intent.intent_id.to_string(),
        rollout_id: intent.rollout_id,
        target_closure: intent.target_closure,
        phase: ActivationPhase::Failed,
        message: reason,
    })
}

/// The store's latest release version as the last readiness check read it; None when it
/// holds none or could not be read yet.
pub fn store_latest(app: &AppState) -> Option<u64> {
    match &app.readiness.verdict().release {
        crate::readiness::ReleaseHealth::Verified { version, .. } | crate::readiness::ReleaseHealth::Unverified { version, .. } => {
            Some(*version)
        }
        crate::readiness::ReleaseHealth::None => None,
    }
}

/// Checks the release `host` showed at its check-in, on the blocking pool, when it could be
/// newer than what is known; a store found behind the fleet is re-judged at once (`/readyz`)
/// and the executor woken (it stops dispatching).
pub async fn note_release_seen(app: &Arc<AppState>, host: Uuid, seen: ReleaseSeen) {
    let latest = store_latest(app);
    if !app.fleet_release.worth_checking(seen.version, latest) {
        return;
    }
    let checker = app.clone();
    let now = app.clock.now();
    let proved = tokio::task::spawn_blocking(move || checker.fleet_release.prove(&checker.trust, host, &seen, now)).await;
    match proved {
        Ok(Ok(version)) => {
            tracing::warn!(%host, version, ?latest, "a host proved it verified a release newer than the store's");
            app.readiness.poke();
            app.executor.poke();
        }
        Ok(Err(e)) => tracing::warn!(%host, rule = e.rule(), error = %e, "a host showed a release that does not verify; ignored"),
        Err(e) => tracing::error!(error = %e, "checking a shown release panicked"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> Time {
        Time::from_unix(1_800_000_000 + s).expect("time")
    }

    fn trust(seed: u8) -> TrustRoots {
        crate::latest_release::tests::trust_of(seed, None)
    }

    /// Release `version`'s timestamp, signed by the key of `seed`.
    fn shown(version: u64, seed: u8) -> ReleaseSeen {
        let spec = drover_proto::spec::FleetSpec::from_json(include_bytes!("../../../examples/fleet.json")).expect("spec");
        let meta = drover_proto::resolve::ReleaseMeta { ci_commit: "c0ffee".into(), created_at: t(0) };
        let signer = drover_proto::keys::KeySigner::new(ed25519_dalek::SigningKey::from_bytes(&[seed; 32]));
        let params = drover_proto::release::ReleaseParams { meta, version, previous: None };
        let files = drover_proto::release::build_release(&spec, &params, &[signer]).expect("release");
        let text = |p: &str| String::from_utf8(files.get(p).expect("file").to_vec()).expect("utf-8");
        ReleaseSeen {
            version,
            timestamp: text(drover_proto::release::TIMESTAMP),
            timestamp_sig: text(&drover_proto::release::sig_path(drover_proto::release::TIMESTAMP)),
        }
    }

    #[test]
    fn a_forged_newer_release_proves_nothing() {
        let f = FleetRelease::default();
        let ci = trust(3);
        // Signed by a key CI does not hold: refused, nothing kept.
        assert!(f.prove(&ci, Uuid::nil(), &shown(9, 4), t(1)).is_err());
        // The claim says 99 but the signed bytes say 9: the bytes win.
        let mut claim = shown(9, 3);
        claim.version = 99;
        assert_eq!(f.prove(&ci, Uuid::nil(), &claim, t(1)).expect("CI signed it"), 9);
        assert_eq!(f.proven().map(|p| p.version), Some(9));
        // A bit flipped in the timestamp: refused, the proven one kept.
        let mut tampered = shown(12, 3);
        tampered.timestamp = tampered.timestamp.replacen("12", "13", 1);
        assert!(f.prove(&ci, Uuid::nil(), &tampered, t(1)).is_err());
        assert_eq!(f.proven().map(|p| p.version), Some(9));
        assert!(f.behind(Some(8)).is_some() && f.behind(Some(9)).is_none());
    }

    #[test]
    fn a_host_showing_a_release_is_failed_only_against_a_store_release_it_is_newer_than() {
        let key = ed25519_dalek::SigningKey::from_bytes(&[5; 32]);
        let intent = drover_proto::intent::Intent {
            intent_id: Uuid::nil().to_string(),
            host_id: Uuid::nil().to_string(),
            hostname: "h1".into(),
            rollout_id: drover_proto::names::RolloutId::parse("gpu@c0ffee").expect("id"),
            manifest_sha256: "0".repeat(64),
            wave_index: 0,
            target_closure: "/nix/store/x".into(),
            issued_at: t(0),
            expires_at: t(60),
            confirm_window_secs: 60,
        };
        let envelope = drover_proto::sig::Envelope::seal(&intent, &[drover_proto::keys::KeySigner::new(key)]).expect("sign");
        let record = IntentRecord {
            intent: crate::store::NewIntent {
                intent_id: Uuid::nil(),
                host_id: Uuid::nil(),
                rollout_id: intent.rollout_id.clone(),
                envelope: serde_json::to_vec(&envelope).expect("bytes"),
                confirm_deadline: None,
                created_at: t(0),
            },
            status: crate::store::IntentStatus::Wanted,
            updated_at: t(0),
            current: true,
        };
        let mut req: CheckinRequest = serde_json::from_value(serde_json::json!({ "agentVersion": "x", "bootId": "b" })).expect("req");
        req.release_seen = Some(ReleaseSeen { version: 2, timestamp: String::new(), timestamp_sig: String::new() });
        assert!(refused_activation(Some(&record), &req, None).is_none(), "the store's latest not known: nothing inferred");
        assert!(refused_activation(Some(&record), &req, Some(2)).is_none(), "not newer than the store's");
        let failed = refused_activation(Some(&record), &req, Some(1)).expect("newer than the store's");
        assert_eq!((failed.phase, failed.target_closure.as_str()), (ActivationPhase::Failed, "/nix/store/x"));
    }

    #[test]
    fn only_a_newer_release_than_the_store_and_the_proven_is_worth_checking() {
        let f = FleetRelease::default();
        assert!(!f.worth_checking(3, Some(3)), "not newer than the store");
        assert!(f.worth_checking(4, Some(3)));
        *f.proven.lock().expect("lock") = Some(ProvenRelease { version: 5, host_id: Uuid::nil(), at: t(0) });
        assert!(!f.worth_checking(5, Some(3)), "proven already");
        assert!(f.worth_checking(6, Some(3)));
        let behind = f.behind(Some(3)).expect("behind");
        assert!(f.first_warning(&behind));
        assert!(!f.first_warning(&behind), "once per pair of versions");
        assert!(f.behind(Some(5)).is_none(), "a release as new as the proven one ends it");
        assert!(behind.explain().contains("version 5 or newer"), "{}", behind.explain());
    }
}
