//! From the store's snapshot and the verified release to the planner's `PlanInput`.
//!
//! What the store's rows mean to the planner:
//! - a host is online when its lifecycle state is `active`; every other state (offline,
//!   quarantined, draining, retired, …) is offline to a rollout: its wave does not wait for
//!   it (`Skipped`), and it takes the channel's current target when it is active again;
//! - a host held by a started job is held (counted against budgets, never dispatched); one a
//!   job lends for its `activate` stage is counted but dispatchable;
//! - a rollout's `since` is its last state change; a host's is its last state change.
//!
//! Manifests: the release carries each channel's current manifest and the revertable ones
//! that travelled with it. A rollout opened from an older ref, or a revert target from an
//! older release, is read from the store, which kept it byte-exact when its own release was
//! verified (once, then kept by [`super::cache`]); a revert target is used only if its sha256
//! is the one the fresh timestamp lists.

use std::collections::BTreeMap;

use drover_planner::Plan;
use drover_planner::input::{Deferral, HostObserved, HostProgress, PlanInput, PlanSettings, RolloutObserved};
use drover_planner::observed::{Observed, plan_input};
use std::sync::Arc;

use drover_proto::artifacts::RolloutManifest;
use drover_proto::names::RolloutId;
use drover_proto::release::VerifiedRelease;
use drover_proto::states::{HostLifecycle, HostRolloutState, RolloutState};
use drover_proto::time::Time;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::config::RolloutsConfig;
use crate::store::{PlanSnapshot, Store, StoreError};

/// A manifest read from the store, with the sha256 of its bytes.
#[derive(Debug, Clone)]
pub struct StoredManifest {
    /// Parsed.
    pub manifest: RolloutManifest,
    /// sha256 (hex) of the stored bytes.
    pub sha256: String,
}

/// The planner's input with what the executor needs to act on its plan.
#[derive(Debug, Clone)]
pub struct Built {
    /// The snapshot planned over.
    pub input: PlanInput,
    /// Host ids by hostname (hosts that are not deleted).
    pub host_ids: BTreeMap<String, Uuid>,
    /// Every known manifest's sha256, by rollout id (intents carry it).
    pub manifest_sha256: BTreeMap<RolloutId, String>,
}

/// The planner settings of the configuration.
pub fn settings(config: &RolloutsConfig) -> PlanSettings {
    PlanSettings { confirm_deadline_secs: config.confirm_deadline_secs, retention_secs: config.retention_secs }
}

/// The manifests the release does not carry that a tick may need: those of the snapshot's
/// rollouts opened from an older release, and of the revertable rollouts the verified
/// timestamp lists (checked against it in [`build`]). Each is taken from `cached` when a tick
/// read it before (a manifest never changes under its id), else read from the store once.
pub fn stored_manifests(
    store: &dyn Store,
    release: &VerifiedRelease,
    snapshot: &PlanSnapshot,
    cached: impl Fn(&RolloutId) -> Option<Arc<StoredManifest>>,
) -> Result<BTreeMap<RolloutId, Arc<StoredManifest>>, StoreError> {
    let mut ids: Vec<RolloutId> = snapshot.rollouts.iter().map(|r| r.rollout.rollout_id.clone()).collect();
    ids.extend(release.timestamp.doc.channels.values().flat_map(|c| c.revertable.iter().map(|r| r.rollout_id.clone())));
    let carried = |id: &RolloutId| release.manifests.values().any(|m| m.manifest.rollout_id == *id) || release.revertable.contains_key(id);
    let mut out = BTreeMap::new();
    for id in ids {
        if out.contains_key(&id) || carried(&id) {
            continue;
        }
        if let Some(m) = cached(&id) {
            out.insert(id, m);
            continue;
        }
        if let Some(m) = store.get_manifest(&id)? {
            match serde_json::from_slice::<RolloutManifest>(&m.bytes) {
                Ok(manifest) => {
                    out.insert(id, Arc::new(StoredManifest { manifest, sha256: hex::encode(Sha256::digest(&m.bytes)) }));
                }
                Err(e) => tracing::error!(rollout = %id, error = %e, "stored manifest does not parse; left out"),
            }
        }
    }
    Ok(out)
}

/// The observed part of the planner's input, from the store's snapshot.
pub fn observed(snapshot: &PlanSnapshot, settings: PlanSettings) -> Observed {
    let mut o = Observed::empty();
    o.settings = settings;
    for h in &snapshot.hosts {
        let report = h.report.clone().unwrap_or_default();
        let connectivity =
            if h.state == HostLifecycle::Active { drover_planner::Connectivity::Online } else { drover_planner::Connectivity::Offline };
        o.hosts.insert(
            h.hostname.clone(),
            HostObserved {
                last_checkin: h.last_checkin,
                connectivity,
                failed_units: report.failed_units,
                probes: report.probes,
                activation: report.activation,
            },
        );
    }
    let names: BTreeMap<Uuid, &str> = snapshot.hosts.iter().map(|h| (h.id, h.hostname.as_str())).collect();
    for (id, reason) in &snapshot.held {
        if let Some(name) = names.get(id) {
            o.held.insert((*name).to_owned(), reason.clone());
        }
    }
    o.lent = snapshot.lent.iter().filter_map(|id| names.get(id).map(|n| (*n).to_owned())).collect();
    for r in &snapshot.rollouts {
        let hosts = r
            .hosts
            .iter()
            .map(|h| (h.hostname.clone(), HostProgress { state: h.state, since: h.since, intent: h.intent_target.clone() }))
            .collect();
        o.rollouts.insert(
            r.rollout.rollout_id.clone(),
            RolloutObserved {
                state: r.rollout.state,
                since: r.rollout.updated_at,
                manifest_sha256: r.rollout.manifest_sha256.clone(),
                hosts,
            },
        );
    }
    for (channel, c) in &snapshot.channels {
        if let Some(r) = &c.last_rolled_ref {
            o.last_rolled_ref.insert(channel.clone(), r.clone());
        }
        match c.deferral.clone().map(serde_json::from_value::<Deferral>) {
            Some(Ok(d)) => {
                o.last_deferrals.insert(channel.clone(), d);
            }
            Some(Err(e)) => tracing::error!(%channel, error = %e, "stored deferral does not parse; treated as none"),
            None => {}
        }
        if let Some(at) = c.stale_alert {
            o.stale_alerts.insert(channel.clone(), at);
        }
    }
    o
}

/// Joins the verified release, the snapshot and the stored manifests into the planner's input.
pub fn build(
    release: &VerifiedRelease,
    snapshot: &PlanSnapshot,
    stored: &BTreeMap<RolloutId, Arc<StoredManifest>>,
    settings: PlanSettings,
) -> Result<Built, String> {
    let mut input = plan_input(release, observed(snapshot, settings)).map_err(|e| e.to_string())?;
    let mut manifest_sha256: BTreeMap<RolloutId, String> = BTreeMap::new();
    for c in input.channels.values() {
        manifest_sha256.insert(c.manifest.rollout_id.clone(), c.manifest_sha256.clone());
    }
    for (id, m) in &release.revertable {
        manifest_sha256.insert(id.clone(), m.sha256.clone());
    }
    let listed: BTreeMap<&RolloutId, &str> = release
        .timestamp
        .doc
        .channels
        .values()
        .flat_map(|c| c.revertable.iter().map(|r| (&r.rollout_id, r.manifest_sha256.as_str())))
        .collect();
    for (id, m) in stored {
        if input.manifest(id).is_some() {
            continue;
        }
        let opened_with = snapshot.rollouts.iter().find(|r| r.rollout.rollout_id == *id).map(|r| r.rollout.manifest_sha256.as_str());
        // A rollout's own manifest (the one it was opened with), or a revert target the
        // fresh timestamp lists with these exact bytes: nothing else reaches the planner.
        if opened_with == Some(m.sha256.as_str()) || listed.get(id) == Some(&m.sha256.as_str()) {
            manifest_sha256.insert(id.clone(), m.sha256.clone());
            input.manifests.insert(id.clone(), m.manifest.clone());
        }
    }
    let host_ids = snapshot.hosts.iter().map(|h| (h.hostname.clone(), h.id)).collect();
    Ok(Built { input, host_ids, manifest_sha256 })
}

/// `input` with `plan` applied (the executor's semantics), at `now`.
pub fn applied(input: &PlanInput, plan: &Plan, now: Time) -> PlanInput {
    let mut after = input.clone();
    for a in &plan.actions {
        drover_planner::apply(&mut after, a, now);
    }
    after
}

/// When time alone will next change a decision over `after`: a soak ending, a confirm
/// deadline passing, a finished rollout reaching its retention. `None` when nothing waits on
/// time. The trigger ticks then even without an event.
pub fn next_due(after: &PlanInput, now: Time) -> Option<Time> {
    let mut due: Option<Time> = None;
    let mut note = |t: Time| {
        if t > now && due.is_none_or(|d| t < d) {
            due = Some(t);
        }
    };
    for (id, r) in &after.rollouts {
        // Hosts in flight in any rollout that is not pruned (a straggler of a converged one
        // included) soak and have deadlines.
        if drover_planner::budget::may_hold_in_flight(r.state) {
            let Some(m) = after.manifest(id) else { continue };
            for (host, p) in &r.hosts {
                match p.state {
                    HostRolloutState::Soaking => {
                        let wave = m.host(host).map_or(0, |e| e.wave_index);
                        let soak = m.waves.get(wave as usize).map_or(0, |w| w.soak_secs);
                        note(p.since.plus_secs(soak));
                    }
                    HostRolloutState::Activating => note(p.since.plus_secs(after.settings.confirm_deadline_secs).plus_secs(1)),
                    _ => {}
                }
            }
        }
        if !drover_planner::budget::is_live(r.state) && r.state != RolloutState::Pruned {
            note(r.since.plus_secs(after.settings.retention_secs));
        }
    }
    due
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{ChannelRecord, HostReport, PlanHost};

    fn t(secs: i64) -> Time {
        Time::from_unix(1_700_000_000 + secs).expect("time")
    }

    fn host(name: &str, state: HostLifecycle) -> PlanHost {
        PlanHost { id: Uuid::new_v4(), hostname: name.to_owned(), state, last_checkin: Some(t(0)), report: None }
    }

    #[test]
    fn only_active_hosts_are_online_to_a_rollout() {
        let mut snap = PlanSnapshot::default();
        for (name, state) in [
            ("a", HostLifecycle::Active),
            ("b", HostLifecycle::Offline),
            ("c", HostLifecycle::Quarantined),
            ("d", HostLifecycle::Draining),
            ("e", HostLifecycle::Enrolling),
        ] {
            snap.hosts.push(host(name, state));
        }
        let o = observed(&snap, PlanSettings::default());
        let online: Vec<&str> = o.hosts.iter().filter(|(_, h)| h.is_online()).map(|(n, _)| n.as_str()).collect();
        assert_eq!(online, vec!["a"]);
    }

    #[test]
    fn reports_held_hosts_and_channel_bookkeeping_carry_over() {
        let mut snap = PlanSnapshot::default();
        let mut a = host("gpu-a", HostLifecycle::Active);
        a.report = Some(HostReport { failed_units: 3, ..Default::default() });
        let held = a.id;
        snap.hosts.push(a);
        snap.held.insert(held, "job 7 (soft_reset, running)".to_owned());
        // A job on a host that is gone (deleted) holds nothing the planner can name.
        snap.held.insert(Uuid::new_v4(), "job 8".to_owned());
        let deferral = serde_json::json!({ "targetRef": "r2", "blockedBy": "infra", "since": t(5) });
        snap.channels.insert(
            "gpu".to_owned(),
            ChannelRecord { last_rolled_ref: Some("r1".to_owned()), deferral: Some(deferral), stale_alert: Some(t(1)) },
        );
        // A deferral that does not parse is treated as none, not as an error.
        snap.channels.insert("infra".to_owned(), ChannelRecord { deferral: Some(serde_json::json!(42)), ..Default::default() });
        let o = observed(&snap, PlanSettings::default());
        assert_eq!(o.hosts["gpu-a"].failed_units, 3);
        assert_eq!(o.held.len(), 1);
        assert_eq!(o.held["gpu-a"], "job 7 (soft_reset, running)");
        assert_eq!(o.last_rolled_ref["gpu"], "r1");
        assert_eq!(o.last_deferrals["gpu"].target_ref, "r2");
        assert!(!o.last_deferrals.contains_key("infra"));
        assert_eq!(o.stale_alerts["gpu"], t(1));
    }
}
