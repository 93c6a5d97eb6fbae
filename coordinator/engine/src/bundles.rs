//! The rollout bundles agents fetch (`GET /v1/rollouts/{id}`: a manifest with the latest
//! timestamp), serialised once per (release, rollout) and shared; and, in the same kind of
//! cache, each rollout's host-set tree that `GET /v1/rollouts/{id}/proof` cuts proofs from.
//!
//! When a wave starts, every host in it fetches the same bundle within a second or two. Built
//! per request, each copy would load the latest release from the store and hold the manifest
//! several times over (a 3,000-host manifest is about half a megabyte): a few thousand at once
//! took gigabytes. Built once, every response is a reference to the same bytes.
//!
//! The cache holds nothing the store does not: an entry is keyed by the release version it
//! was built from, which every request reads from the store first, so a new release (from any
//! path) is served from its first request on. Entries of older versions are dropped then.

use std::collections::HashMap;
use std::future::Future;

use axum::body::Bytes;
use drover_proto::names::RolloutId;

/// Most bundles kept for one release: its current rollouts plus the revertable ones agents
/// may still ask for; a request beyond is answered but not kept.
pub const MAX_BUNDLES: usize = 64;

/// Serialised bundles (or, for the proof route, each rollout's tree) of one release version.
pub struct BundleCache<V = Bytes> {
    // A tokio mutex, held while a missing bundle is built, so a wave's simultaneous requests
    // build it once and the rest wait for it rather than each building their own.
    inner: tokio::sync::Mutex<Option<(u64, HashMap<RolloutId, V>)>>,
}

impl<V> Default for BundleCache<V> {
    fn default() -> Self {
        BundleCache { inner: tokio::sync::Mutex::new(None) }
    }
}

impl<V: Clone> BundleCache<V> {
    /// The bundle of `id` for release `version`: the cached bytes, or `build`'s, kept for the
    /// next request. An error from `build` is returned and nothing is kept.
    pub async fn get_or_build<E, F>(&self, version: u64, id: &RolloutId, build: impl FnOnce() -> F) -> Result<V, E>
    where
        F: Future<Output = Result<V, E>>,
    {
        let mut guard = self.inner.lock().await;
        if guard.as_ref().is_none_or(|(v, _)| *v != version) {
            *guard = Some((version, HashMap::new()));
        }
        if let Some(bytes) = guard.as_ref().and_then(|(_, m)| m.get(id)) {
            return Ok(bytes.clone());
        }
        let bytes = build().await?;
        if let Some((_, map)) = guard.as_mut().filter(|(_, m)| m.len() < MAX_BUNDLES) {
            map.insert(id.clone(), bytes.clone());
        }
        Ok(bytes)
    }

    /// Bundles kept now.
    pub async fn kept(&self) -> usize {
        self.inner.lock().await.as_ref().map_or(0, |(_, m)| m.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> RolloutId {
        RolloutId::parse(s).expect("id")
    }

    #[tokio::test]
    async fn a_bundle_is_built_once_per_release_and_rebuilt_for_the_next() {
        let cache = BundleCache::default();
        let builds = std::sync::atomic::AtomicU32::new(0);
        let build = |text: &'static str| {
            builds.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async move { Ok::<_, ()>(Bytes::from_static(text.as_bytes())) }
        };
        let a = id("stable@0123456789abcdef0123456789abcdef01234567");
        assert_eq!(cache.get_or_build(1, &a, || build("v1")).await, Ok(Bytes::from_static(b"v1")));
        assert_eq!(cache.get_or_build(1, &a, || build("other")).await, Ok(Bytes::from_static(b"v1")), "served from the cache");
        assert_eq!(builds.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(cache.get_or_build(2, &a, || build("v2")).await, Ok(Bytes::from_static(b"v2")), "a new release rebuilds");
        assert_eq!(cache.kept().await, 1, "the old version's entries are gone");
    }

    #[tokio::test]
    async fn a_failed_build_is_not_kept() {
        let cache = BundleCache::default();
        let a = id("stable@0123456789abcdef0123456789abcdef01234567");
        assert_eq!(cache.get_or_build(1, &a, || async { Err::<Bytes, _>("no manifest") }).await, Err("no manifest"));
        assert_eq!(cache.kept().await, 0);
        assert_eq!(cache.get_or_build(1, &a, || async { Ok::<_, &str>(Bytes::from_static(b"ok")) }).await, Ok(Bytes::from_static(b"ok")));
    }

    #[tokio::test]
    async fn the_cache_is_bounded() {
        let cache = BundleCache::default();
        for i in 0..(MAX_BUNDLES + 10) {
            let rid = id(&format!("ch{i}@0123456789abcdef0123456789abcdef01234567"));
            cache.get_or_build(1, &rid, || async { Ok::<_, ()>(Bytes::from_static(b"x")) }).await.expect("built");
        }
        assert_eq!(cache.kept().await, MAX_BUNDLES);
    }
}
