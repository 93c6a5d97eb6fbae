//! The latest stored release, verified once and read by everything that needs it: the rollout
//! executor's tick, the job tick, the rack controller, maintenance requests and `/readyz`'s
//! background check. The fleet read model ([`FleetView`]: budgets, targets, tags) is built
//! from it once per verified release, too.
//!
//! A full verification is proportional to the fleet (76 ms at 10,000 hosts, BENCHMARKS.md),
//! so it runs once per version: a kept release is used again while its version is still the
//! store's latest, the clock has not gone back, and every trusted CI key is valid now exactly
//! when it was valid at verification — the one way time can change a passed verification (a
//! key expiring or starting). Staleness is left to each reader (the context reports it, never
//! refuses it): the planner stops new dispatch for a stale channel, `/readyz` goes unready.
//! A release that did not verify is not kept, so the next reader tries again; `/readyz`'s
//! check spaces its own retries ([`crate::readiness::RETRY_UNVERIFIED_SECS`]).
//!
//! Verification runs on the caller's blocking thread (the async entry point hands it to the
//! blocking pool), one at a time: readers that miss together wait for the one verification
//! instead of each doing it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use drover_proto::names::RolloutId;
use drover_proto::release::{VerifiedRelease, verify_release};
use drover_proto::time::Time;
use drover_proto::trust::TrustRoots;
use drover_proto::verify::{VerifyContext, VerifyError};

use crate::jobs::pacing::{self, PaceBudget};
use crate::store::{self, Store, StoreError};

/// The latest release, verified at `verified_at`.
#[derive(Debug)]
pub struct Latest {
    /// Its version.
    pub version: u64,
    /// When it was verified.
    pub verified_at: Time,
    /// The verified release.
    pub release: Arc<VerifiedRelease>,
    view: OnceLock<Arc<FleetView>>,
}

impl Latest {
    /// The fleet read model of this release, built the first time it is asked for.
    pub fn view(&self) -> Arc<FleetView> {
        self.view.get_or_init(|| Arc::new(FleetView::from_release(&self.release))).clone()
    }
}

/// Why the latest release could not be had.
#[derive(Debug, thiserror::Error)]
pub enum LatestError {
    /// The store did not answer.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The latest release does not verify (nothing is kept; the next reader tries again).
    #[error("release {version} does not verify: {source}")]
    Unverified {
        /// Its version.
        version: u64,
        /// The rule it breaks.
        #[source]
        source: VerifyError,
    },
}

/// The one cache of the latest verified release (owned by [`crate::app::AppState`]).
#[derive(Default)]
pub struct LatestRelease {
    kept: Mutex<Option<Arc<Latest>>>,
    /// Held while a miss reads and verifies, so concurrent misses verify once.
    verifying: Mutex<()>,
    verifications: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl LatestRelease {
    /// Releases read and verified in full since start (a miss: a new version, the first
    /// reader, or a key's validity changed since).
    pub fn verifications(&self) -> u64 {
        self.verifications.load(Ordering::Relaxed)
    }

    /// Drops the kept release, so the next reader verifies again (benchmarks measure that).
    pub fn forget(&self) {
        *lock(&self.kept) = None;
    }

    /// The kept release when it is `version` and still good at `now`.
    fn kept(&self, version: u64, now: Time, trust: &TrustRoots) -> Option<Arc<Latest>> {
        let kept = lock(&self.kept);
        let k = kept.as_ref()?;
        (k.version == version && now >= k.verified_at && trust.ci.same_validity(k.verified_at, now)).then(|| k.clone())
    }

    /// Release `version`, verified: the kept one while it is still good, else read from
    /// `store` and verified (and kept). `None` when the store no longer has it. Blocking.
    pub fn version(&self, store: &dyn Store, trust: &TrustRoots, version: u64, now: Time) -> Result<Option<Arc<Latest>>, LatestError> {
        if let Some(kept) = self.kept(version, now, trust) {
            return Ok(Some(kept));
        }
        let _one = lock(&self.verifying);
        if let Some(kept) = self.kept(version, now, trust) {
            return Ok(Some(kept));
        }
        let Some(release) = store.get_release(version)? else { return Ok(None) };
        self.verifications.fetch_add(1, Ordering::Relaxed);
        match verify_release(&release.files, trust, &VerifyContext::at(now).reporting_stale()) {
            Ok(verified) => {
                let latest = Arc::new(Latest { version, verified_at: now, release: Arc::new(verified), view: OnceLock::new() });
                *lock(&self.kept) = Some(latest.clone());
                Ok(Some(latest))
            }
            Err(source) => {
                *lock(&self.kept) = None;
                Err(LatestError::Unverified { version, source })
            }
        }
    }

    /// The store's latest release, verified; `None` before any release. Blocking.
    pub fn latest(&self, store: &dyn Store, trust: &TrustRoots, now: Time) -> Result<Option<Arc<Latest>>, LatestError> {
        match store.latest_release_version()? {
            Some(version) => self.version(store, trust, version, now),
            None => Ok(None),
        }
    }

    /// [`LatestRelease::latest`] on the blocking pool.
    pub async fn load(
        this: &Arc<Self>,
        store: &Arc<dyn Store>,
        trust: &Arc<TrustRoots>,
        now: Time,
    ) -> Result<Option<Arc<Latest>>, LatestError> {
        let (this, trust) = (this.clone(), trust.clone());
        store::blocking(store.clone(), move |s| Ok(this.latest(s, &trust, now))).await?
    }
}

/// What the latest release says that jobs need: budgets, each host's channel's current
/// rollout and target, each host's tags (the maintenance request's group labels).
#[derive(Debug, Clone, Default)]
pub struct FleetView {
    /// The release's disruption budgets.
    pub budgets: Vec<PaceBudget>,
    /// hostname → (its channel's current rollout, the closure it should run).
    pub targets: BTreeMap<String, (Option<RolloutId>, String)>,
    /// hostname → tags.
    pub tags: BTreeMap<String, Vec<String>>,
}

impl FleetView {
    /// From a verified release.
    pub fn from_release(v: &VerifiedRelease) -> FleetView {
        let fleet = &v.fleet.fleet;
        let mut targets: BTreeMap<String, (Option<RolloutId>, String)> =
            fleet.hosts.iter().map(|(h, spec)| (h.clone(), (None, spec.closure.clone()))).collect();
        for m in v.manifests.values() {
            for e in &m.manifest.host_set {
                targets.insert(e.hostname.clone(), (Some(m.manifest.rollout_id.clone()), e.target_closure.clone()));
            }
        }
        FleetView {
            budgets: pacing::budgets_of(&fleet.disruption_budgets),
            targets,
            tags: fleet.hosts.iter().map(|(h, spec)| (h.clone(), spec.tags.clone())).collect(),
        }
    }

    /// The latest stored release's view (a stale timestamp is fine: budgets and targets still
    /// hold). No release, or one that does not verify: an empty view (no budgets, no
    /// targets), logged.
    pub async fn load(app: &Arc<crate::app::AppState>) -> Arc<FleetView> {
        match LatestRelease::load(&app.latest_release, &app.store, &app.trust, app.clock.now()).await {
            Ok(Some(latest)) => latest.view(),
            Ok(None) => Arc::default(),
            Err(LatestError::Store(e)) => {
                tracing::warn!(error = %e, "jobs: cannot read the latest release; no budgets this tick");
                Arc::default()
            }
            Err(LatestError::Unverified { source, .. }) => {
                tracing::warn!(rule = source.rule(), error = %source, "jobs: the latest release does not verify; no budgets this tick");
                Arc::default()
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use drover_proto::keys::{KeyId, verifying_key_to_pem};
    use drover_proto::trust::{KeySetDoc, TrustDoc, TrustKeyDoc};

    pub(crate) fn t(secs: i64) -> Time {
        Time::from_unix(1_800_000_000 + secs).expect("time")
    }

    pub(crate) fn trust(not_after: Option<Time>) -> TrustRoots {
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

    /// A release of the example fleet, version 1, signed by the key of [`trust_of`]`(3, …)`.
    pub(crate) fn release() -> Arc<VerifiedRelease> {
        let spec = drover_proto::spec::FleetSpec::from_json(include_bytes!("../../../examples/fleet.json")).expect("spec");
        let meta = drover_proto::resolve::ReleaseMeta { ci_commit: "c0ffee".into(), created_at: t(0) };
        let signer = drover_proto::keys::KeySigner::new(ed25519_dalek::SigningKey::from_bytes(&[3u8; 32]));
        let params = drover_proto::release::ReleaseParams { meta, version: 1, previous: None };
        let files = drover_proto::release::build_release(&spec, &params, &[signer]).expect("release");
        let ctx = drover_proto::verify::VerifyContext::at(t(1)).reporting_stale();
        Arc::new(drover_proto::release::verify_release(&files, &trust(None), &ctx).expect("verifies"))
    }

    /// A cache keeping `release()` as version 1, verified at `at`.
    fn keeping(at: Time) -> LatestRelease {
        let cache = LatestRelease::default();
        *lock(&cache.kept) = Some(Arc::new(Latest { version: 1, verified_at: at, release: release(), view: OnceLock::new() }));
        cache
    }

    #[test]
    fn an_unchanged_release_is_used_again_and_a_new_version_is_not() {
        let trust = trust(None);
        assert!(LatestRelease::default().kept(1, t(1), &trust).is_none(), "nothing kept yet");
        let cache = keeping(t(1));
        assert!(cache.kept(1, t(3600), &trust).is_some(), "the same version an hour later");
        assert!(cache.kept(2, t(3600), &trust).is_none(), "a new version is read and verified");
        assert!(cache.kept(1, t(0), &trust).is_none(), "the clock went back: verify again");
        cache.forget();
        assert!(cache.kept(1, t(3600), &trust).is_none());
    }

    #[test]
    fn a_key_that_expires_after_verification_forces_a_new_one() {
        let trust = trust(Some(t(100)));
        let cache = keeping(t(1));
        assert!(cache.kept(1, t(100), &trust).is_some(), "still valid at its last instant");
        assert!(cache.kept(1, t(101), &trust).is_none(), "expired: the release must be verified again (and fail)");
    }

    #[test]
    fn the_fleet_view_is_built_once_per_verified_release() {
        let cache = keeping(t(1));
        let kept = cache.kept(1, t(2), &trust(None)).expect("kept");
        let (a, b) = (kept.view(), kept.view());
        assert!(Arc::ptr_eq(&a, &b), "one view per release, shared");
        assert!(!a.targets.is_empty(), "the example fleet's hosts have targets");
    }
}
