//! One reconciler pass over a site, as a pure plan (`bare-metal-lifecycle.md` §6.3–§6.5):
//! MAAS's machines and the store's bound hosts in, the store changes (in batches), the
//! repair jobs and a report out. Time is a parameter; nothing here does I/O.
//!
//! Each bound host is paired with its machine by system id and judged ([`drift::judge`]).
//! What the pass writes follows three rules:
//! - **once per drift**: a drift already open under the same rule, or one an operator
//!   resolved while its condition still held (same rule, same MAAS status), is not opened or
//!   acted on again; a different rule is a new drift;
//! - **heal by itself**: a pair seen healthy again closes its open drift and forgets an
//!   acknowledged one, so a recurrence is new;
//! - **nothing when nothing changed**: planning again over what a pass wrote yields no
//!   change at all (checked by the tests), so a quiet site costs one read and no write.
//!
//! The repairs are jobs created in the same transaction as the drift they answer: a retired
//! host's machine is released and powered off by a `maas_decommission` workflow that keeps
//! the MAAS record, and unhealthy hardware sync is re-synced by a `maas_resync` workflow
//! (§9.1), both run by the MAAS executor with its retries, time limits and failure events.

use std::collections::HashMap;

use drover_maas::NodeStatus;
use drover_proto::api::reconciliation::DriftDetails;
use drover_proto::states::HostLifecycle;
use drover_proto::time::Time;
use serde_json::{Value, json};
use uuid::Uuid;

use super::drift::{self, Action, HostSide, MachineSide, Rule, Severity, Verdict};
use super::onboard::{EraseMode, OnboardingRequest};
use super::taxonomy::Workflow;
use drover_store::{DriftWrite, MaasObservation, NewEvent, NewJob, ReconcileChange, ReconcileRow};

/// The MAAS status recorded for a bound machine MAAS no longer lists.
pub const ABSENT: &str = "Absent";

/// A machine as MAAS listed it, reduced to what the rules read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineSnap {
    /// MAAS's id.
    pub system_id: String,
    /// Its status.
    pub status: NodeStatus,
    /// MAAS's label of it.
    pub status_name: String,
    /// `on`, `off`, `unknown`, `error`.
    pub power_state: String,
    /// Its addresses.
    pub ips: Vec<String>,
    /// MAAS's `is_sync_healthy` rule at the pass's time.
    pub sync_healthy: bool,
}

/// The site a pass runs for.
#[derive(Debug, Clone)]
pub struct SiteRef {
    /// Its id.
    pub id: Uuid,
    /// Its name (the repair jobs' input names it).
    pub name: String,
    /// The profile the repair jobs run with (the site's default).
    pub profile: String,
}

/// What a pass found, for the status API, the metrics and the logs: the API's own type.
pub use drover_proto::api::reconciliation::PassReport;

/// The plan of one pass.
#[derive(Debug, Clone, Default)]
pub struct PassPlan {
    /// Store changes, one per host that changes.
    pub changes: Vec<ReconcileChange>,
    /// What was found.
    pub report: PassReport,
}

/// The MAAS workflow a host's unfinished jobs put it in, if any (§7.3).
pub fn workflow_of(job_kinds: &[String]) -> Option<Workflow> {
    job_kinds.iter().find_map(|k| match k.as_str() {
        "reimage" => Some(Workflow::Reimage),
        "full_decommission" => Some(Workflow::Decommission),
        other => Workflow::of_kind(other),
    })
}

fn rule_named(name: &str) -> Option<Rule> {
    serde_json::from_value(Value::String(name.to_owned())).ok()
}

fn open_rule(details: Option<&Value>) -> Option<Rule> {
    details.and_then(|d| d.get("rule")).and_then(Value::as_str).and_then(rule_named)
}

/// Whether `v` on a machine in `status` is the drift an operator already resolved.
fn acknowledged(details: Option<&Value>, v: &Verdict, status: &str) -> bool {
    details.is_some_and(|d| open_rule(Some(d)) == Some(v.rule) && d.get("maasStatus").and_then(Value::as_str) == Some(status))
}

/// The drift record's details.
pub fn details(v: &Verdict, status: &str, system_id: &str) -> Value {
    let details = DriftDetails {
        rule: v.rule.as_str().to_owned(),
        severity: v.severity.as_str().to_owned(),
        alert: v.rule.alert().to_owned(),
        maas_status: status.to_owned(),
        system_id: system_id.to_owned(),
        expected: v.expected.clone(),
        observed: v.observed.clone(),
        action: v.action.clone(),
    };
    serde_json::to_value(details).unwrap_or(Value::Null)
}

fn event(at: Time, kind: &str, host_id: Uuid, job_id: Option<Uuid>, message: String, data: Value) -> NewEvent {
    NewEvent { at, kind: kind.to_owned(), host_id: Some(host_id), rollout_id: None, job_id, message, data }
}

/// The repair job a verdict's action asks for, if it is one.
fn repair_job(site: &SiteRef, row: &ReconcileRow, action: &Action, now: Time) -> Option<NewJob> {
    let workflow = match action {
        Action::ReleaseAndPowerOff => Workflow::Decommission,
        Action::Resync => Workflow::Resync,
        Action::None | Action::Quarantine | Action::UpdateAddresses { .. } => return None,
    };
    let request = OnboardingRequest {
        site: site.name.clone(),
        profile: site.profile.clone(),
        sku: None,
        hostname: row.hostname.clone(),
        ipmi_ip: row.binding.ipmi_ip.clone().unwrap_or_default(),
        pxe_mac: row.binding.pxe_mac.clone(),
        batch_id: None,
        requester: Some("drift reconciler".to_owned()),
        host_id: Some(row.binding.host_id),
        system_id: Some(row.binding.system_id.clone()),
        parent_job_id: None,
        erase: EraseMode::None,
        remove_maas_record: false,
    };
    Some(NewJob {
        job_id: Uuid::new_v4(),
        kind: workflow.kind().to_owned(),
        // Held by no host: a repair must not block the operator's own jobs on it.
        host_id: None,
        input: serde_json::to_value(&request).ok()?,
        created_at: now,
        request_id: None,
    })
}

/// Plans one pass. `machines` is MAAS's whole list for the site; `rows` the store's bound
/// hosts (deleted ones excluded).
pub fn plan(site: &SiteRef, machines: &[MachineSnap], rows: &[ReconcileRow], now: Time) -> PassPlan {
    let by_id: HashMap<&str, &MachineSnap> = machines.iter().map(|m| (m.system_id.as_str(), m)).collect();
    let mut report = PassReport { machines: machines.len() as u64, hosts: rows.len() as u64, ..PassReport::default() };
    let mut bound = 0u64;
    let mut changes = Vec::new();
    for row in rows {
        let b = &row.binding;
        let machine = by_id.get(b.system_id.as_str()).copied();
        if machine.is_some() {
            bound += 1;
        }
        let side = machine.map(|m| MachineSide {
            status: m.status,
            status_name: m.status_name.clone(),
            ips: m.ips.clone(),
            sync_healthy: m.sync_healthy,
        });
        let host = HostSide {
            lifecycle: row.state,
            known_ips: b.observed.as_ref().map(|o| o.ips.clone()).unwrap_or_default(),
            workflow: workflow_of(&row.jobs),
        };
        let v = drift::judge(side.as_ref(), Some(&host));
        let status = machine.map_or(ABSENT, |m| m.status_name.as_str());
        let power = machine.map_or("unknown", |m| m.power_state.as_str());
        let ips = machine.map(|m| m.ips.clone()).unwrap_or_default();
        let seen_changed = b.observed.as_ref().is_none_or(|o| o.status != status || o.power_state != power || o.ips != ips);
        let observation = seen_changed.then(|| MaasObservation { status: status.to_owned(), power_state: power.to_owned(), ips, at: now });

        let open = open_rule(b.drift.as_ref());
        let mut write = DriftWrite::Keep;
        let mut quarantine = None;
        let mut events = Vec::new();
        let mut job = None;
        let mut final_rule = open;
        if v.is_healthy() {
            if b.drift.is_some() || b.acknowledged.is_some() {
                write = DriftWrite::Heal;
                final_rule = None;
            }
            if let Some(rule) = open {
                report.healed += 1;
                events.push(event(
                    now,
                    "maas.drift.healed",
                    b.host_id,
                    None,
                    format!("{}: {} no longer holds; MAAS shows {status}", row.hostname, rule.alert()),
                    json!({"severity": Severity::Info, "rule": rule, "site": site.name, "systemId": b.system_id}),
                ));
            }
            if v.rule == Rule::IpChanged && seen_changed {
                events.push(event(
                    now,
                    "maas.drift.ip_changed",
                    b.host_id,
                    None,
                    format!("{}: IP change detected, the host's addresses follow MAAS: {}", row.hostname, v.observed),
                    json!({"severity": Severity::Info, "rule": v.rule, "site": site.name, "systemId": b.system_id,
                           "previous": host.known_ips, "action": v.action}),
                ));
            }
        } else if drift::is_new(open, &v) && !acknowledged(b.acknowledged.as_ref(), &v, status) {
            write = DriftWrite::Open(details(&v, status, &b.system_id));
            final_rule = Some(v.rule);
            report.detected += 1;
            job = repair_job(site, row, &v.action, now);
            if v.action == Action::Quarantine && row.state == HostLifecycle::Active {
                quarantine = Some(format!("auto-quarantine: {} (MAAS shows {status}); tenants are not released", v.rule.alert()));
                report.quarantined += 1;
            }
            events.push(event(
                now,
                "maas.drift.detected",
                b.host_id,
                job.as_ref().map(|j| j.job_id),
                format!("{}: {} — MAAS shows {status}, expected {}", row.hostname, v.rule.alert(), v.expected),
                json!({
                    "severity": v.severity, "rule": v.rule, "site": site.name, "systemId": b.system_id,
                    "expected": v.expected, "observed": v.observed, "action": v.action,
                    "jobId": job.as_ref().map(|j| j.job_id.to_string()),
                }),
            ));
        }
        if let Some(rule) = final_rule {
            *report.open_by_rule.entry(rule.as_str().to_owned()).or_default() += 1;
        }
        if observation.is_some() || write != DriftWrite::Keep || quarantine.is_some() || !events.is_empty() {
            changes.push(ReconcileChange {
                host_id: b.host_id,
                expected_state: row.state,
                observation,
                drift: write,
                quarantine,
                events,
                job,
            });
        }
    }
    report.unmanaged = (machines.len() as u64).saturating_sub(bound);
    PassPlan { changes, report }
}

#[cfg(test)]
#[path = "reconcile_tests.rs"]
mod tests;
