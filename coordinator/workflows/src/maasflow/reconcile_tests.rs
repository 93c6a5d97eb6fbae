//! Scenario tests of the pass planner: every write is checked, a pass planned again over what
//! the previous one wrote yields nothing, and a resolved drift comes back only on recurrence.

use drover_proto::states::HostLifecycle as L;

use super::*;
use drover_store::MaasBinding;

fn t(s: i64) -> Time {
    Time::from_unix(1_900_000_000 + s).expect("time")
}

fn site() -> SiteRef {
    SiteRef { id: Uuid::from_u128(1), name: "dc1".into(), profile: "default".into() }
}

fn machine(id: &str, status: NodeStatus, ip: &str, sync: bool) -> MachineSnap {
    MachineSnap {
        system_id: id.into(),
        status,
        status_name: status.to_string(),
        power_state: "on".into(),
        ips: vec![ip.into()],
        sync_healthy: sync,
    }
}

fn row(n: u128, id: &str, state: L) -> ReconcileRow {
    ReconcileRow {
        binding: MaasBinding::new(Uuid::from_u128(n), site().id, id, Some("10.9.0.1".into()), None, t(0)),
        hostname: format!("gpu-{n}"),
        state,
        schedulable: true,
        jobs: vec![],
    }
}

/// Applies a plan to the rows as the store would (the tests' model of `apply_maas_reconcile`).
fn apply(rows: &mut [ReconcileRow], plan: &PassPlan, at: Time) {
    for ch in &plan.changes {
        let r = rows.iter_mut().find(|r| r.binding.host_id == ch.host_id).expect("row");
        if let Some(o) = &ch.observation {
            r.binding.observed = Some(o.clone());
        }
        match &ch.drift {
            DriftWrite::Keep => {}
            DriftWrite::Open(d) => r.binding.drift = Some(d.clone()),
            DriftWrite::Heal => {
                if r.binding.drift.take().is_some() {
                    r.binding.drift_resolved_at = Some(at);
                }
                r.binding.acknowledged = None;
            }
        }
        if ch.quarantine.is_some() {
            r.state = L::Quarantined;
            r.schedulable = false;
        }
        if let Some(j) = &ch.job {
            r.jobs.push(j.kind.clone());
        }
    }
}

fn kinds(plan: &PassPlan) -> Vec<String> {
    plan.changes.iter().flat_map(|c| c.events.iter().map(|e| e.kind.clone())).collect()
}

#[test]
fn a_quiet_site_records_once_then_writes_nothing() {
    let machines = vec![machine("aaa", NodeStatus::Deployed, "10.0.0.1", true), machine("zzz", NodeStatus::Ready, "", true)];
    let mut rows = vec![row(1, "aaa", L::Active)];
    let first = plan(&site(), &machines, &rows, t(10));
    assert_eq!(first.changes.len(), 1, "the first observation is recorded");
    assert!(first.changes[0].events.is_empty() && first.changes[0].drift == DriftWrite::Keep);
    assert_eq!((first.report.unmanaged, first.report.detected), (1, 0));
    apply(&mut rows, &first, t(10));
    let again = plan(&site(), &machines, &rows, t(20));
    assert!(again.changes.is_empty(), "re-planning unchanged input yields nothing: {:?}", again.changes);
}

#[test]
fn a_release_outside_the_workflow_quarantines_once_and_stays_open() {
    let mut rows = vec![row(1, "aaa", L::Active)];
    let first = plan(&site(), &[machine("aaa", NodeStatus::Deployed, "10.0.0.1", true)], &rows, t(1));
    apply(&mut rows, &first, t(1));
    let released = [machine("aaa", NodeStatus::Ready, "10.0.0.1", true)];
    let p = plan(&site(), &released, &rows, t(2));
    assert_eq!(kinds(&p), ["maas.drift.detected"]);
    let ch = &p.changes[0];
    assert!(ch.quarantine.is_some() && ch.job.is_none());
    assert_eq!(ch.events[0].data["severity"], "critical");
    assert_eq!((p.report.detected, p.report.quarantined), (1, 1));
    apply(&mut rows, &p, t(2));
    assert_eq!((rows[0].state, rows[0].schedulable), (L::Quarantined, false));
    // The quarantined host is parked: the drift stays open and nothing more happens.
    let p = plan(&site(), &released, &rows, t(3));
    assert!(p.changes.is_empty(), "{:?}", p.changes);
    assert_eq!(p.report.open_by_rule.get("released_outside_workflow"), Some(&1));
}

#[test]
fn a_resolved_drift_returns_only_when_it_happens_again() {
    let mut rows = vec![row(1, "aaa", L::Offline)];
    let deployed = [machine("aaa", NodeStatus::Deployed, "10.0.0.1", true)];
    let p = plan(&site(), &deployed, &rows, t(1));
    assert_eq!(kinds(&p), ["maas.drift.detected"], "an offline host on a deployed machine: agent not polling");
    apply(&mut rows, &p, t(1));
    // The operator resolves it while the agent is still silent.
    let details = rows[0].binding.drift.take();
    rows[0].binding.acknowledged = details;
    assert!(plan(&site(), &deployed, &rows, t(2)).changes.is_empty(), "an acknowledged drift is not reopened");
    // The agent comes back: healthy, the acknowledgement is forgotten.
    rows[0].state = L::Active;
    let p = plan(&site(), &deployed, &rows, t(3));
    assert_eq!(p.changes.len(), 1);
    assert_eq!(p.changes[0].drift, DriftWrite::Heal);
    apply(&mut rows, &p, t(3));
    // It goes silent again: a new drift.
    rows[0].state = L::Offline;
    assert_eq!(kinds(&plan(&site(), &deployed, &rows, t(4))), ["maas.drift.detected"]);
}

#[test]
fn a_retired_host_still_deployed_gets_one_release_job() {
    let mut rows = vec![row(1, "aaa", L::Retired)];
    let deployed = [machine("aaa", NodeStatus::Deployed, "10.0.0.1", true)];
    let p = plan(&site(), &deployed, &rows, t(1));
    let job = p.changes[0].job.clone().expect("a release job");
    assert_eq!(job.kind, "maas_decommission");
    let req: OnboardingRequest = serde_json::from_value(job.input).expect("input");
    assert_eq!((req.remove_maas_record, req.erase, req.host_id), (false, EraseMode::None, Some(Uuid::from_u128(1))));
    apply(&mut rows, &p, t(1));
    // The workflow is in flight: not drift, nothing new.
    assert!(plan(&site(), &deployed, &rows, t(2)).changes.is_empty());
    // Released: healthy for a retired host; the drift heals.
    rows[0].jobs.clear();
    let p = plan(&site(), &[machine("aaa", NodeStatus::Ready, "", true)], &rows, t(3));
    assert_eq!(p.changes[0].drift, DriftWrite::Heal);
    assert_eq!(kinds(&p), ["maas.drift.healed"]);
}

#[test]
fn unhealthy_sync_asks_for_one_resync_and_an_ip_change_is_followed() {
    let mut rows = vec![row(1, "aaa", L::Active), row(2, "bbb", L::Active)];
    let ok = [machine("aaa", NodeStatus::Deployed, "10.0.0.1", true), machine("bbb", NodeStatus::Deployed, "10.0.0.2", true)];
    let first = plan(&site(), &ok, &rows, t(1));
    apply(&mut rows, &first, t(1));
    let now = [machine("aaa", NodeStatus::Deployed, "10.0.0.1", false), machine("bbb", NodeStatus::Deployed, "10.0.0.9", true)];
    let p = plan(&site(), &now, &rows, t(2));
    let resync = p.changes.iter().find(|c| c.host_id == Uuid::from_u128(1)).expect("a");
    assert_eq!(resync.job.as_ref().map(|j| j.kind.as_str()), Some("maas_resync"));
    let ip = p.changes.iter().find(|c| c.host_id == Uuid::from_u128(2)).expect("b");
    assert_eq!(ip.observation.as_ref().map(|o| o.ips.clone()), Some(vec!["10.0.0.9".to_owned()]));
    assert_eq!((ip.drift.clone(), ip.events[0].kind.as_str()), (DriftWrite::Keep, "maas.drift.ip_changed"));
    apply(&mut rows, &p, t(2));
    assert!(plan(&site(), &now, &rows, t(3)).changes.is_empty(), "the re-sync is in flight; the new address is known");
}

#[test]
fn a_machine_deleted_from_maas_quarantines_and_an_in_flight_reimage_is_not_drift() {
    let mut rows = vec![row(1, "aaa", L::Active), row(2, "bbb", L::Offline)];
    rows[1].jobs = vec!["reimage".into()];
    let p = plan(&site(), &[machine("bbb", NodeStatus::Deploying, "", true)], &rows, t(1));
    let a = p.changes.iter().find(|c| c.host_id == Uuid::from_u128(1)).expect("a");
    assert!(a.quarantine.is_some());
    assert_eq!(a.observation.as_ref().map(|o| o.status.as_str()), Some(ABSENT));
    let b = p.changes.iter().find(|c| c.host_id == Uuid::from_u128(2)).expect("b");
    assert!(b.events.is_empty() && b.drift == DriftWrite::Keep, "a reimaging host in Deploying is not drift");
}
