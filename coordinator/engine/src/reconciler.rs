//! The MAAS drift reconciler's runtime (`bare-metal-lifecycle.md` §6.3): per site, list
//! MAAS's machines, read the bound hosts, plan ([`crate::maasflow::reconcile::plan`]) and
//! write the plan in batches, one store transaction per batch.
//!
//! - **One pass per site at a time**: each site has a lock; a pass asked for while one runs
//!   waits for it and then runs afresh, so an on-demand pass always reflects MAAS after the
//!   request.
//! - **Periodic, jittered**: every `[maas] reconcile_interval_secs` (default 5 min), each
//!   wait drawn within ±10 % so sites do not list their MAAS in lockstep; 0 turns periodic
//!   passes off (on-demand passes still run). Disabled sites are skipped.
//! - **Bounded**: a pass that takes longer than `[maas] reconcile_timeout_secs` is abandoned
//!   (batches already written stay: each is whole) and reported `upstream_transient`.
//! - **MAAS down changes nothing**: a listing that fails is reported with its class
//!   (`upstream_transient` when MAAS is unreachable or answers 5xx) and no write is made —
//!   in particular no host is judged "deleted from MAAS" because MAAS did not answer.
//!
//! The last run of each site is kept in memory for the status API and the metrics.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use drover_proto::time::Time;
use uuid::Uuid;

use crate::app::AppState;
use crate::maasflow::reconcile::{self, MachineSnap, PassReport, SiteRef};
use crate::maasflow::taxonomy::MaasFailureClass;
use crate::store::{self, Site, SiteStatus};

/// How a pass ended, and one pass as the status API and the CLI show it: the API's own types.
pub use drover_proto::api::reconciliation::{PassOutcome as Outcome, RunRecord};

#[derive(Default)]
struct Slot {
    running: tokio::sync::Mutex<()>,
    last: Mutex<Option<RunRecord>>,
}

/// Per-site locks and last runs.
#[derive(Default)]
pub struct Reconciler {
    slots: Mutex<HashMap<Uuid, Arc<Slot>>>,
}

impl Reconciler {
    fn slot(&self, site: Uuid) -> Arc<Slot> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner).entry(site).or_default().clone()
    }

    /// The last pass over `site`, if one ran since this process started.
    pub fn last(&self, site: Uuid) -> Option<RunRecord> {
        self.slot(site).last.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Every site's last pass, by site name.
    pub fn all_last(&self) -> Vec<RunRecord> {
        let slots: Vec<Arc<Slot>> = self.slots.lock().unwrap_or_else(PoisonError::into_inner).values().cloned().collect();
        let mut out: Vec<RunRecord> = slots.iter().filter_map(|s| s.last.lock().unwrap_or_else(PoisonError::into_inner).clone()).collect();
        out.sort_by(|a, b| a.site.cmp(&b.site));
        out
    }
}

/// A failed step: its outcome and why.
type Stop = (Outcome, String);

fn stop_of(class: MaasFailureClass, why: String) -> Stop {
    let outcome = if class == MaasFailureClass::UpstreamTransient { Outcome::UpstreamTransient } else { Outcome::Failed };
    (outcome, why)
}

/// Runs one pass over `site` (waiting for a pass already running there) and returns it.
pub async fn pass(app: &Arc<AppState>, site: &Site) -> RunRecord {
    let slot = app.reconciler.slot(site.id);
    let _running = slot.running.lock().await;
    let started = Instant::now();
    let started_at = app.clock.now();
    let limit = Duration::from_secs(app.config.maas.reconcile_timeout_secs);
    let result = match tokio::time::timeout(limit, pass_inner(app, site, started_at)).await {
        Ok(r) => r,
        Err(_) => Err((Outcome::UpstreamTransient, format!("the pass took longer than {}s and was abandoned", limit.as_secs()))),
    };
    let mut record = RunRecord {
        site: site.name.clone(),
        started_at,
        duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        outcome: Outcome::Ok,
        message: String::new(),
        report: PassReport::default(),
        changes: 0,
        batches: 0,
        skipped: 0,
    };
    match result {
        Ok(done) => {
            record.report = done.report;
            (record.changes, record.batches, record.skipped) = (done.changes, done.batches, done.skipped);
            let r = &record.report;
            tracing::info!(site = %site.name, machines = r.machines, hosts = r.hosts, detected = r.detected,
                healed = r.healed, changes = record.changes, batches = record.batches, duration_ms = record.duration_ms,
                "MAAS drift reconciliation pass");
        }
        Err((outcome, message)) => {
            tracing::warn!(site = %site.name, outcome = ?outcome, %message, "MAAS drift reconciliation pass changed nothing");
            record.outcome = outcome;
            record.message = message;
            // The drift gauges keep the last pass that saw MAAS.
            if let Some(prev) = slot.last.lock().unwrap_or_else(PoisonError::into_inner).as_ref() {
                record.report.open_by_rule = prev.report.open_by_rule.clone();
            }
        }
    }
    let ok = record.outcome == Outcome::Ok;
    app.metrics.record_reconcile(&record.site, started_at.unix(), started.elapsed(), ok, &record.report.open_by_rule);
    *slot.last.lock().unwrap_or_else(PoisonError::into_inner) = Some(record.clone());
    record
}

struct Done {
    report: PassReport,
    changes: u64,
    batches: u64,
    skipped: u64,
}

async fn pass_inner(app: &Arc<AppState>, site: &Site, now: Time) -> Result<Done, Stop> {
    let store_failed = |e: store::StoreError| (Outcome::Failed, format!("the coordinator's store failed: {e}"));
    let (site_id, default_profile) = (site.id, site.default_profile_id);
    let profile = store::blocking(app.store.clone(), move |s| s.get_profile(default_profile))
        .await
        .map_err(store_failed)?
        .map(|p| p.name)
        .ok_or_else(|| (Outcome::Failed, format!("site {} has no default profile", site.name)))?;
    let client = crate::onboarding::site::client(app, site).await.map_err(|(class, why)| stop_of(class, why))?;
    let listed = client.list_machine_summaries(&drover_maas::MachineFilter::default()).await.map_err(|e| {
        let (class, why) = crate::onboarding::site::maas_failure(&format!("list site {}'s machines", site.name), &e);
        stop_of(class, why)
    })?;
    let at = time::OffsetDateTime::from_unix_timestamp(now.unix()).unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let machines: Vec<MachineSnap> = listed
        .iter()
        .map(|m| MachineSnap {
            system_id: m.system_id.clone(),
            status: m.status,
            status_name: m.status_name.clone(),
            power_state: m.power_state.as_str().to_owned(),
            ips: m.ip_addresses.clone(),
            sync_healthy: m.hw_sync().is_healthy(at),
        })
        .collect();
    drop(listed);
    let rows = store::blocking(app.store.clone(), move |s| s.maas_reconcile_snapshot(site_id)).await.map_err(store_failed)?;
    let site_ref = SiteRef { id: site.id, name: site.name.clone(), profile };
    let plan = reconcile::plan(&site_ref, &machines, &rows, now);
    if plan.report.unmanaged > 0 {
        tracing::debug!(site = %site.name, unmanaged = plan.report.unmanaged, "MAAS machines no Drover host is bound to");
    }
    let mut done = Done { report: plan.report, changes: 0, batches: 0, skipped: 0 };
    let batch = app.config.maas.reconcile_batch.max(1);
    let mut changes = plan.changes;
    while !changes.is_empty() {
        let rest = changes.split_off(batch.min(changes.len()));
        let chunk = std::mem::replace(&mut changes, rest);
        let applied = store::blocking(app.store.clone(), move |s| s.apply_maas_reconcile(&chunk, now)).await.map_err(store_failed)?;
        done.changes += applied.applied;
        done.skipped += applied.skipped.len() as u64;
        done.batches += 1;
    }
    Ok(done)
}

/// The wait before a site's next periodic pass: the interval, ±10 %.
pub fn jittered(interval: Duration, unit: f64) -> Duration {
    let factor = 0.9 + 0.2 * unit.clamp(0.0, 1.0);
    interval.mul_f64(factor)
}

/// The periodic passes: every active site, each on its own jittered schedule.
pub async fn run(app: Arc<AppState>) {
    let interval = Duration::from_secs(app.config.maas.reconcile_interval_secs);
    if interval.is_zero() {
        return;
    }
    let mut due: HashMap<Uuid, Instant> = HashMap::new();
    let check = interval.min(Duration::from_secs(5)).max(Duration::from_millis(200));
    loop {
        let sites = match store::blocking(app.store.clone(), |s| s.list_sites()).await {
            Ok(s) => {
                app.loops.ran(crate::loops::RECONCILER, app.clock.now(), Ok::<(), crate::store::StoreError>(()));
                s
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot list MAAS sites for reconciliation; trying again");
                app.loops.ran(crate::loops::RECONCILER, app.clock.now(), Err(e));
                Vec::new()
            }
        };
        let now = Instant::now();
        for site in sites.into_iter().filter(|s| s.status == SiteStatus::Active) {
            // A new site's first pass comes within one (jittered) interval of its creation.
            let next = *due.entry(site.id).or_insert_with(|| now + jittered(interval, rand::random::<f64>()));
            if next <= now {
                due.insert(site.id, now + jittered(interval, rand::random::<f64>()));
                let app = app.clone();
                // In the leader's term, like the loop: its repairs are fenced writes.
                crate::store::fence::spawn(async move {
                    pass(&app, &site).await;
                });
            }
        }
        tokio::time::sleep(check).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_a_tenth_of_the_interval() {
        let i = Duration::from_secs(300);
        assert_eq!(jittered(i, 0.0), Duration::from_secs(270));
        assert_eq!(jittered(i, 1.0), Duration::from_secs(330));
        assert_eq!(jittered(i, 7.0), Duration::from_secs(330), "out-of-range draws are clamped");
        assert_eq!(jittered(i, 0.5), Duration::from_secs(300));
    }
}
