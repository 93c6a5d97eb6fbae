//! What a tick keeps for the next one, so that an unchanged release is neither read from the
//! store nor verified again, and a stored manifest is read and parsed once.
//!
//! Nothing here decides anything; it holds only what the store holds, verified:
//! - the latest release, verified, keyed by its version (a version's files never change);
//!   it is used again only while the clock has not gone back and every trusted CI key is
//!   valid now exactly when it was valid at verification, the one way time can change a
//!   passed verification (a key expiring or starting). Staleness is the planner's to judge
//!   (`Freshness::ReportStale`), so it does not enter;
//! - stored manifests by rollout id (a manifest's bytes never change under its id), only those
//!   the last tick used.
//!
//! A coordinator started again begins with an empty cache and reads everything once.

use std::collections::BTreeMap;
use std::sync::Arc;

use drover_proto::names::RolloutId;
use drover_proto::release::VerifiedRelease;
use drover_proto::time::Time;
use drover_proto::trust::TrustRoots;

use super::input::StoredManifest;

/// The verified release and the stored manifests the last tick used.
#[derive(Default)]
pub struct ReleaseCache {
    release: Option<(u64, Time, Arc<VerifiedRelease>)>,
    manifests: BTreeMap<RolloutId, Arc<StoredManifest>>,
    /// Releases read and verified in full (a miss: a new version, the first tick, or a key's
    /// validity changed since).
    pub verifications: u64,
}

impl ReleaseCache {
    /// The verified release of `version`, when the one kept is still good at `now`.
    pub fn release(&self, version: u64, now: Time, trust: &TrustRoots) -> Option<Arc<VerifiedRelease>> {
        let (v, verified_at, release) = self.release.as_ref()?;
        (*v == version && now >= *verified_at && trust.ci.same_validity(*verified_at, now)).then(|| release.clone())
    }

    /// Keeps `release` (of `version`, verified at `now`) for the ticks after.
    pub fn keep_release(&mut self, version: u64, now: Time, release: Arc<VerifiedRelease>) {
        self.verifications += 1;
        self.release = Some((version, now, release));
    }

    /// Drops the kept release (it no longer verifies).
    pub fn forget_release(&mut self) {
        self.release = None;
    }

    /// The stored manifest of `id`, if a tick read it.
    pub fn manifest(&self, id: &RolloutId) -> Option<Arc<StoredManifest>> {
        self.manifests.get(id).cloned()
    }

    /// Keeps exactly `used`: the manifests this tick planned with.
    pub fn keep_manifests(&mut self, used: BTreeMap<RolloutId, Arc<StoredManifest>>) {
        self.manifests = used;
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use drover_proto::keys::{KeyId, verifying_key_to_pem};
    use drover_proto::trust::{KeySetDoc, TrustDoc, TrustKeyDoc};

    fn t(secs: i64) -> Time {
        Time::from_unix(1_800_000_000 + secs).expect("time")
    }

    fn trust(not_after: Option<Time>) -> TrustRoots {
        trust_of(3, not_after)
    }

    /// Trust roots of one CI key, the Ed25519 key of `[seed; 32]`, valid until `not_after`.
    pub(crate) fn trust_of(seed: u8, not_after: Option<Time>) -> TrustRoots {
        let key = ed25519_dalek::SigningKey::from_bytes(&[seed; 32]).verifying_key();
        let doc = TrustDoc {
            schema_version: 1,
            ci: KeySetDoc {
                threshold: 1,
                keys: vec![TrustKeyDoc {
                    key_id: KeyId::of(&key),
                    alg: "ed25519".into(),
                    public_key: verifying_key_to_pem(&key).expect("pem"),
                    not_before: None,
                    not_after,
                }],
                reject_before: None,
            },
        };
        TrustRoots::from_doc(&doc).expect("trust")
    }

    fn release() -> Arc<VerifiedRelease> {
        let spec = drover_proto::spec::FleetSpec::from_json(include_bytes!("../../../../examples/fleet.json")).expect("spec");
        let meta = drover_proto::resolve::ReleaseMeta { ci_commit: "c0ffee".into(), created_at: t(0) };
        let signer = drover_proto::keys::KeySigner::new(ed25519_dalek::SigningKey::from_bytes(&[3u8; 32]));
        let params = drover_proto::release::ReleaseParams { meta, version: 1, previous: None };
        let files = drover_proto::release::build_release(&spec, &params, &[signer]).expect("release");
        let ctx = drover_proto::verify::VerifyContext::at(t(1)).reporting_stale();
        Arc::new(drover_proto::release::verify_release(&files, &trust(None), &ctx).expect("verifies"))
    }

    #[test]
    fn an_unchanged_release_is_used_again_and_a_new_version_is_not() {
        let mut cache = ReleaseCache::default();
        let trust = trust(None);
        assert!(cache.release(1, t(1), &trust).is_none(), "nothing kept yet");
        cache.keep_release(1, t(1), release());
        assert!(cache.release(1, t(3600), &trust).is_some(), "the same version an hour later");
        assert!(cache.release(2, t(3600), &trust).is_none(), "a new version is read and verified");
        assert!(cache.release(1, t(0), &trust).is_none(), "the clock went back: verify again");
        cache.forget_release();
        assert!(cache.release(1, t(3600), &trust).is_none());
        assert_eq!(cache.verifications, 1);
    }

    #[test]
    fn a_key_that_expires_after_verification_forces_a_new_one() {
        let mut cache = ReleaseCache::default();
        let trust = trust(Some(t(100)));
        cache.keep_release(1, t(1), release());
        assert!(cache.release(1, t(100), &trust).is_some(), "still valid at its last instant");
        assert!(cache.release(1, t(101), &trust).is_none(), "expired: the release must be verified again (and fail)");
    }
}
