//! What a tick keeps for the next one, so that a stored manifest is read and parsed once: the
//! stored manifests by rollout id (a manifest's bytes never change under its id), only those the
//! last tick used. The verified release itself is the engine's one cache
//! ([`crate::latest_release`]), shared with every other reader.
//!
//! Nothing here decides anything; it holds only what the store holds. A coordinator started
//! again begins with an empty cache and reads everything once.

use std::collections::BTreeMap;
use std::sync::Arc;

use drover_proto::names::RolloutId;

use super::input::StoredManifest;

/// The stored manifests the last tick used.
#[derive(Default)]
pub struct ManifestCache {
    manifests: BTreeMap<RolloutId, Arc<StoredManifest>>,
}

impl ManifestCache {
    /// The stored manifest of `id`, if a tick read it.
    pub fn manifest(&self, id: &RolloutId) -> Option<Arc<StoredManifest>> {
        self.manifests.get(id).cloned()
    }

    /// Keeps exactly `used`: the manifests this tick planned with.
    pub fn keep_manifests(&mut self, used: BTreeMap<RolloutId, Arc<StoredManifest>>) {
        self.manifests = used;
    }
}
