//! `/readyz`'s verdict, computed in the background so that the anonymous probe costs O(1).
//!
//! Ready means "can serve agents what they need": the store answers and has room for writes,
//! and the latest stored release verifies against the CI trust roots (signatures, threshold)
//! and is fresh. Reading and verifying a release is proportional to the fleet (76 ms at
//! 10,000 hosts), so no request does it: [`watch`] checks the store every
//! [`CHECK_INTERVAL`] on the blocking pool and takes the release from the engine's one
//! verified-release cache ([`crate::latest_release`], shared with the executor and the job
//! tick: a version is verified once, again only when a trusted key's validity changed or the
//! clock went back; one that failed is tried again at most every [`RETRY_UNVERIFIED_SECS`]),
//! and keeps the outcome.
//! `/readyz` reads that outcome and the clock and does nothing else ([`judge`]).
//!
//! Freshness is judged at answer time from the verdict (when the timestamp goes stale), so a
//! release going stale shows at once, not at the next check. A verdict older than
//! [`STALE_VERDICT_SECS`] means the store stopped answering the checks: unready.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use drover_proto::time::Time;
use serde::Serialize;

use crate::app::AppState;
use crate::latest_release::LatestError;
use crate::store::StoreError;

/// How often the store and the latest release are checked.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(1);
/// How long a release that did not verify waits before it is verified again.
pub const RETRY_UNVERIFIED_SECS: i64 = 60;
/// A verdict this old is no verdict: the checks are not finishing (a store that hangs).
pub const STALE_VERDICT_SECS: i64 = 15;

/// What the store answered at the last check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreHealth {
    /// It answers, and writes can be expected to succeed.
    Ok,
    /// Its disk is full.
    Full {
        /// Free bytes, when known.
        available_bytes: Option<u64>,
    },
    /// It does not answer.
    Unavailable,
}

/// What the latest release was found to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReleaseHealth {
    /// None is stored.
    None,
    /// It verifies; its timestamp goes stale after `stale_after` (never, for a channel
    /// without a window).
    Verified {
        /// Its version.
        version: u64,
        /// When it was verified.
        verified_at: Time,
        /// The last instant it is fresh, by its tightest channel window.
        stale_after: Option<Time>,
        /// The channel of that window and the window.
        window: Option<(String, u64)>,
    },
    /// It does not verify.
    Unverified {
        /// Its version.
        version: u64,
        /// Why.
        message: String,
        /// When verification was last tried.
        tried_at: Time,
    },
}

/// The last check's findings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// When the check ended; None before the first.
    pub checked_at: Option<Time>,
    /// The store.
    pub store: StoreHealth,
    /// The latest release.
    pub release: ReleaseHealth,
    /// The store is older than what agents proved they verified ([`crate::fleet_release`]).
    pub behind_fleet: Option<crate::fleet_release::Behind>,
}

impl Default for Verdict {
    fn default() -> Self {
        Verdict { checked_at: None, store: StoreHealth::Unavailable, release: ReleaseHealth::None, behind_fleet: None }
    }
}

/// `/readyz`'s body when ready.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Ready {
    /// Always true.
    pub ready: bool,
    /// The latest release's version.
    pub release_version: u64,
}

/// Why the coordinator is not ready: an error code and a message for an anonymous caller
/// (no path, no secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unready {
    /// The API error code.
    pub code: &'static str,
    /// What is wrong.
    pub message: String,
}

fn unready(code: &'static str, message: impl Into<String>) -> Unready {
    Unready { code, message: message.into() }
}

/// Whether `verdict` means ready at `now`. Pure and O(1): all `/readyz` does.
pub fn judge(verdict: &Verdict, now: Time) -> Result<Ready, Unready> {
    let Some(at) = verdict.checked_at else {
        return Err(unready("starting", "the coordinator has not finished its first readiness check"));
    };
    if now.secs_since(at) > STALE_VERDICT_SECS {
        return Err(unready("store_unavailable", format!("the store has not answered a readiness check for {} s", now.secs_since(at))));
    }
    match &verdict.store {
        StoreHealth::Ok => {}
        StoreHealth::Full { available_bytes } => {
            let free = available_bytes.map(|b| format!(" ({b} bytes free)")).unwrap_or_default();
            return Err(unready(
                "disk_full",
                format!("the disk under the coordinator's store is full{free}: writes fail until space is freed"),
            ));
        }
        StoreHealth::Unavailable => return Err(unready("store_unavailable", "the store does not answer")),
    }
    if let Some(behind) = &verdict.behind_fleet {
        return Err(unready("behind_fleet", behind.explain()));
    }
    match &verdict.release {
        ReleaseHealth::None => Err(unready("no_release", "no release has been published yet; nothing to serve")),
        ReleaseHealth::Unverified { version, message, .. } => {
            Err(unready("release_unverified", format!("latest release (version {version}) does not verify: {message}")))
        }
        ReleaseHealth::Verified { version, stale_after: Some(last), window: Some((channel, window)), .. } if now > *last => Err(unready(
            "release_unverified",
            format!(
                "latest release (version {version}) does not verify: timestamp.json is older than the {window}s freshness window of channel {channel:?} (fresh until {last}, now {now})"
            ),
        )),
        ReleaseHealth::Verified { version, .. } => Ok(Ready { ready: true, release_version: *version }),
    }
}

/// Appends the readiness families to a Prometheus exposition: whether the store is behind
/// the fleet (the alert `DroverStoreBehindFleet`), and the versions involved.
pub fn render_into(verdict: &Verdict, out: &mut String) {
    use std::fmt::Write as _;
    let behind = verdict.behind_fleet.as_ref();
    let _ = writeln!(
        out,
        "# HELP drover_release_behind_fleet 1 while agents proved they verified a newer release than the store's latest (restored from an older backup): nothing is dispatched until it is published again.\n# TYPE drover_release_behind_fleet gauge\ndrover_release_behind_fleet {}",
        u8::from(behind.is_some())
    );
    let _ = writeln!(
        out,
        "# HELP drover_release_fleet_proven_version The newest release version an agent proved it verified, when newer than the store's (0 otherwise).\n# TYPE drover_release_fleet_proven_version gauge\ndrover_release_fleet_proven_version {}",
        behind.map_or(0, |b| b.proven.version)
    );
}

/// The verdict every `/readyz` reads; [`watch`] replaces it.
#[derive(Default)]
pub struct Readiness {
    verdict: RwLock<Arc<Verdict>>,
    wake: tokio::sync::Notify,
}

impl Readiness {
    /// The last verdict.
    pub fn verdict(&self) -> Arc<Verdict> {
        self.verdict.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Replaces the verdict.
    pub fn set(&self, verdict: Verdict) {
        *self.verdict.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(verdict);
    }

    /// Asks for a check now rather than at the next interval (a release was published).
    pub fn poke(&self) {
        self.wake.notify_one();
    }
}

/// Checks the store and the latest release every [`CHECK_INTERVAL`], for ever; every check
/// runs on the blocking pool.
pub async fn watch(app: Arc<AppState>) {
    let mut every = tokio::time::interval(CHECK_INTERVAL);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = every.tick() => {}
            () = app.readiness.wake.notified() => {}
        }
        let previous = app.readiness.verdict();
        let checker = app.clone();
        match tokio::task::spawn_blocking(move || check(&checker, &previous)).await {
            Ok(verdict) => {
                app.readiness.set(verdict);
                app.loops.ran(crate::loops::READINESS, app.clock.now(), Ok::<(), tokio::task::JoinError>(()));
            }
            Err(e) => {
                tracing::error!(error = %e, "readiness check panicked");
                app.loops.ran(crate::loops::READINESS, app.clock.now(), Err(e));
            }
        }
    }
}

/// One check: the store's health, and the latest release verified unless `previous`
/// verified the same version under the same key validity.
pub fn check(app: &AppState, previous: &Verdict) -> Verdict {
    let now = app.clock.now();
    let probed = (|| {
        app.store.ping()?;
        app.store.check_writable()?;
        app.store.latest_release_version()
    })();
    let latest = match probed {
        Ok(v) => v,
        Err(StoreError::StorageFull { available_bytes, .. }) => {
            tracing::warn!("readiness: the store's disk is full");
            return Verdict {
                checked_at: Some(now),
                store: StoreHealth::Full { available_bytes },
                release: previous.release.clone(),
                behind_fleet: previous.behind_fleet.clone(),
            };
        }
        Err(e) => {
            tracing::warn!(error = %e, "readiness: store does not answer");
            return Verdict {
                checked_at: Some(now),
                store: StoreHealth::Unavailable,
                release: previous.release.clone(),
                behind_fleet: previous.behind_fleet.clone(),
            };
        }
    };
    let release = match latest {
        None => ReleaseHealth::None,
        Some(version) => match &previous.release {
            // A release that did not verify is tried again at most every
            // RETRY_UNVERIFIED_SECS (a future-dated timestamp, a key not valid yet, may pass
            // later), not every second: a full verification is proportional to the fleet.
            ReleaseHealth::Unverified { version: v, tried_at, .. }
                if *v == version && now >= *tried_at && now.secs_since(*tried_at) < RETRY_UNVERIFIED_SECS =>
            {
                previous.release.clone()
            }
            _ => verify(app, version, now),
        },
    };
    let behind_fleet = app.fleet_release.behind(latest);
    if let Some(b) = behind_fleet.as_ref().filter(|b| app.fleet_release.first_warning(b)) {
        tracing::error!(latest = ?b.latest, proven = b.proven.version, host = %b.proven.host_id, "{}", b.explain());
    }
    Verdict { checked_at: Some(now), store: StoreHealth::Ok, release, behind_fleet }
}

/// Release `version`, verified through the engine's one cache ([`crate::latest_release`]: a
/// version verified there by any reader is not verified again); staleness left to [`judge`].
fn verify(app: &AppState, version: u64, now: Time) -> ReleaseHealth {
    match app.latest_release.version(&*app.store, &app.trust, version, now) {
        Ok(Some(latest)) => {
            let doc = &latest.release.timestamp.doc;
            let window = doc.tightest_window().map(|(c, w)| (c.to_owned(), w));
            let stale_after = window.as_ref().map(|(_, w)| doc.signed_at.plus_secs(*w));
            ReleaseHealth::Verified { version, verified_at: latest.verified_at, stale_after, window }
        }
        Ok(None) => ReleaseHealth::Unverified { version, message: "it is no longer in the store".to_owned(), tried_at: now },
        Err(LatestError::Store(e)) => {
            tracing::warn!(error = %e, version, "readiness: reading the latest release failed");
            ReleaseHealth::Unverified { version, message: "it could not be read from the store".to_owned(), tried_at: now }
        }
        Err(LatestError::Unverified { source, .. }) => ReleaseHealth::Unverified { version, message: source.to_string(), tried_at: now },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: i64) -> Time {
        Time::from_unix(1_800_000_000 + secs).expect("time")
    }

    fn verified(stale_after: i64) -> Verdict {
        Verdict {
            checked_at: Some(t(0)),
            store: StoreHealth::Ok,
            release: ReleaseHealth::Verified {
                version: 7,
                verified_at: t(0),
                stale_after: Some(t(stale_after)),
                window: Some(("prod".into(), 3600)),
            },
            behind_fleet: None,
        }
    }

    #[test]
    fn a_fresh_verified_release_is_ready_and_goes_unready_the_second_it_is_stale() {
        assert_eq!(judge(&verified(10), t(10)), Ok(Ready { ready: true, release_version: 7 }));
        let stale = judge(&verified(10), t(11)).expect_err("stale");
        assert_eq!(stale.code, "release_unverified");
        assert!(stale.message.contains("freshness window of channel \"prod\""), "{}", stale.message);
    }

    #[test]
    fn no_check_yet_or_a_check_that_stopped_finishing_is_unready() {
        assert_eq!(judge(&Verdict::default(), t(0)).expect_err("first").code, "starting");
        let old = verified(1_000);
        assert_eq!(judge(&old, t(STALE_VERDICT_SECS)).map(|r| r.release_version), Ok(7));
        assert_eq!(judge(&old, t(STALE_VERDICT_SECS + 1)).expect_err("stuck").code, "store_unavailable");
    }

    #[test]
    fn a_store_older_than_the_fleet_is_unready_naming_the_way_forward() {
        let mut v = verified(100);
        v.behind_fleet = Some(crate::fleet_release::Behind {
            latest: Some(7),
            proven: crate::fleet_release::ProvenRelease { version: 9, host_id: uuid::Uuid::nil(), at: t(0) },
        });
        let why = judge(&v, t(1)).expect_err("behind");
        assert_eq!(why.code, "behind_fleet");
        assert!(why.message.contains("holds release version 7") && why.message.contains("version 9 or newer"), "{}", why.message);
    }

    #[test]
    fn a_full_disk_and_no_release_are_named() {
        let mut v = verified(100);
        v.store = StoreHealth::Full { available_bytes: Some(4096) };
        let full = judge(&v, t(1)).expect_err("full");
        assert_eq!(full.code, "disk_full");
        assert!(full.message.contains("4096 bytes free"));
        v.store = StoreHealth::Ok;
        v.release = ReleaseHealth::None;
        assert_eq!(judge(&v, t(1)).expect_err("none").code, "no_release");
    }
}
