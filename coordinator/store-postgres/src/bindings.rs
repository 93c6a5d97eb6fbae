//! Hosts bound to MAAS machines in PostgreSQL, as `store-sqlite/src/bindings.rs` (`bare-metal-lifecycle.md`
//! §6.5): one binding per host, one host per machine of a site, what MAAS last reported, and the open drift; a
//! reconciler pass's read (one query for the bindings and hosts, one for their unfinished
//! jobs) and its batched write (one transaction per batch).

use drover_proto::states::{HostLifecycle, JobState};
use drover_proto::time::Time;
use serde_json::Value;
use uuid::Uuid;

use super::cols::{col, json_col, opt_time_col, time_col, uuid_col};
use super::hosts;
use super::log::{insert_audit, insert_event};
use super::postgres::{Row, Transaction};
use crate::DbResult;
use drover_store::{ChangeLog, DriftWrite, MaasBinding, MaasObservation, ReconcileApplied, ReconcileChange, ReconcileRow, StoreError};

const COLS: &str = "host_id, site_id, system_id, ipmi_ip, pxe_mac, last_status, last_power_state, last_ips, last_observed_at, drift, \
                    drift_detected_at, drift_resolved_at, created_at, updated_at, acknowledged_drift";

fn row(r: &Row) -> Result<MaasBinding, StoreError> {
    let status: Option<String> = col(r, 5)?;
    let ips: String = col(r, 7)?;
    let ips: Vec<String> = serde_json::from_str(&ips).map_err(|e| StoreError::backend(format!("maas_bindings.last_ips: {e}")))?;
    let observed_at = opt_time_col(r, 8)?;
    let observed = match (status, observed_at) {
        (Some(status), Some(at)) => {
            Some(MaasObservation { status, power_state: col::<Option<String>>(r, 6)?.unwrap_or_default(), ips, at })
        }
        _ => None,
    };
    let drift = match col::<Option<String>>(r, 9)? {
        Some(_) => Some(json_col(r, 9)?),
        None => None,
    };
    let acknowledged = match col::<Option<String>>(r, 14)? {
        Some(_) => Some(json_col(r, 14)?),
        None => None,
    };
    Ok(MaasBinding {
        host_id: uuid_col(r, 0)?,
        site_id: uuid_col(r, 1)?,
        system_id: col(r, 2)?,
        ipmi_ip: col(r, 3)?,
        pxe_mac: col(r, 4)?,
        observed,
        drift,
        drift_detected_at: opt_time_col(r, 10)?,
        drift_resolved_at: opt_time_col(r, 11)?,
        created_at: time_col(r, 12)?,
        updated_at: time_col(r, 13)?,
        acknowledged,
    })
}

pub(crate) fn get(c: &mut Transaction<'_>, host_id: Uuid) -> Result<Option<MaasBinding>, StoreError> {
    c.query_opt(format!("SELECT {COLS} FROM maas_bindings WHERE host_id = $1").as_str(), &[&host_id.to_string()])
        .db()?
        .map(|r| row(&r))
        .transpose()
}

pub(crate) fn get_by_machine(c: &mut Transaction<'_>, site_id: Uuid, system_id: &str) -> Result<Option<MaasBinding>, StoreError> {
    c.query_opt(
        format!("SELECT {COLS} FROM maas_bindings WHERE site_id = $1 AND system_id = $2").as_str(),
        &[&site_id.to_string(), &system_id],
    )
    .db()?
    .map(|r| row(&r))
    .transpose()
}

pub(crate) fn list(c: &mut Transaction<'_>, site_id: Option<Uuid>) -> Result<Vec<MaasBinding>, StoreError> {
    let sql = format!("SELECT {COLS} FROM maas_bindings WHERE ($1::TEXT IS NULL OR site_id = $1) ORDER BY host_id");
    c.query(sql.as_str(), &[&site_id.map(|s| s.to_string())]).db()?.iter().map(row).collect()
}

pub(crate) fn put(c: &mut Transaction<'_>, b: &MaasBinding, log: &ChangeLog) -> Result<MaasBinding, StoreError> {
    let host = hosts::get_host(c, b.host_id)?.ok_or_else(|| StoreError::not_found("host", b.host_id))?;
    if host.state == HostLifecycle::Deleted {
        return Err(StoreError::not_found("host", b.host_id));
    }
    if c.query_opt("SELECT 1 FROM maas_sites WHERE site_id = $1", &[&b.site_id.to_string()]).db()?.is_none() {
        return Err(StoreError::not_found("site", b.site_id));
    }
    if let Some(existing) = get(c, b.host_id)? {
        if existing.site_id == b.site_id && existing.system_id == b.system_id {
            return Ok(existing);
        }
        return Err(StoreError::conflict(
            "MAAS binding",
            b.host_id,
            format!("host {} is already bound to machine {} of site {}", host.hostname, existing.system_id, existing.site_id),
        ));
    }
    if let Some(other) = get_by_machine(c, b.site_id, &b.system_id)? {
        return Err(StoreError::conflict(
            "MAAS binding",
            &b.system_id,
            format!("machine {} is already bound to host {}", b.system_id, other.host_id),
        ));
    }
    c.execute(
        "INSERT INTO maas_bindings (host_id, site_id, system_id, ipmi_ip, pxe_mac, last_ips, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, '[]', $6, $6)",
        &[&b.host_id.to_string(), &b.site_id.to_string(), &b.system_id, &b.ipmi_ip, &b.pxe_mac, &b.created_at.unix()],
    )
    .db()?;
    insert_event(c, &log.event)?;
    insert_audit(c, &log.audit)?;
    get(c, b.host_id)?.ok_or_else(|| StoreError::backend("binding vanished inside its own transaction"))
}

fn require(c: &mut Transaction<'_>, host_id: Uuid) -> Result<MaasBinding, StoreError> {
    get(c, host_id)?.ok_or_else(|| StoreError::not_found("MAAS binding", host_id))
}

pub(crate) fn observe(c: &mut Transaction<'_>, host_id: Uuid, o: &MaasObservation) -> Result<MaasBinding, StoreError> {
    require(c, host_id)?;
    write_observation(c, host_id, o)?;
    require(c, host_id)
}

/// Records `o` unless the stored observation is newer: a slow reader never rolls state back.
fn write_observation(c: &mut Transaction<'_>, host_id: Uuid, o: &MaasObservation) -> Result<(), StoreError> {
    let ips = serde_json::to_string(&o.ips).map_err(StoreError::backend)?;
    c.execute(
        "UPDATE maas_bindings SET last_status = $2, last_power_state = $3, last_ips = $4, last_observed_at = $5,
         updated_at = $5 WHERE host_id = $1 AND (last_observed_at IS NULL OR last_observed_at <= $5)",
        &[&host_id.to_string(), &o.status, &o.power_state, &ips, &o.at.unix()],
    )
    .db()?;
    Ok(())
}

pub(crate) fn set_drift(c: &mut Transaction<'_>, host_id: Uuid, drift: Option<&Value>, at: Time) -> Result<MaasBinding, StoreError> {
    let current = require(c, host_id)?;
    match drift {
        Some(details) => {
            let detected = current.drift_detected_at.filter(|_| current.drift.is_some()).unwrap_or(at);
            c.execute(
                "UPDATE maas_bindings SET drift = $2, drift_detected_at = $3, updated_at = $4 WHERE host_id = $1",
                &[&host_id.to_string(), &details.to_string(), &detected.unix(), &at.unix()],
            )
            .db()?;
        }
        None if current.drift.is_some() => {
            c.execute(
                "UPDATE maas_bindings SET drift = NULL, drift_resolved_at = $2, updated_at = $2 WHERE host_id = $1",
                &[&host_id.to_string(), &at.unix()],
            )
            .db()?;
        }
        None => return Ok(current),
    }
    require(c, host_id)
}

pub(crate) fn delete(c: &mut Transaction<'_>, host_id: Uuid, log: &ChangeLog) -> Result<MaasBinding, StoreError> {
    let current = require(c, host_id)?;
    c.execute("DELETE FROM maas_bindings WHERE host_id = $1", &[&host_id.to_string()]).db()?;
    insert_event(c, &log.event)?;
    insert_audit(c, &log.audit)?;
    Ok(current)
}

/// The bindings of a site with their hosts (not deleted) and unfinished job kinds.
pub(crate) fn snapshot(c: &mut Transaction<'_>, site_id: Uuid) -> Result<Vec<ReconcileRow>, StoreError> {
    let cols = COLS.split(", ").map(|c| format!("b.{}", c.trim())).collect::<Vec<_>>().join(", ");
    let sql = format!(
        "SELECT {cols}, h.hostname, h.state, h.schedulable FROM maas_bindings b JOIN hosts h ON h.id = b.host_id
         WHERE b.site_id = $1 AND h.state <> 'deleted' ORDER BY b.host_id"
    );
    let mut out: Vec<ReconcileRow> = c
        .query(sql.as_str(), &[&site_id.to_string()])
        .db()?
        .iter()
        .map(|r| {
            let state = super::cols::parse_col::<HostLifecycle>(r, 16)?;
            Ok(ReconcileRow { binding: row(r)?, hostname: col(r, 15)?, state, schedulable: col::<i64>(r, 17)? != 0, jobs: Vec::new() })
        })
        .collect::<Result<_, StoreError>>()?;
    let terminal = JobState::ALL.iter().filter(|s| s.is_terminal()).map(|s| format!("'{}'", s.as_str())).collect::<Vec<_>>().join(", ");
    // A MAAS workflow that is the half of a reimage or decommission holds no host itself (its
    // parent does); its input names the host it works on.
    let sql = format!(
        "SELECT b.host_id, j.kind FROM jobs j JOIN maas_bindings b
           ON b.host_id = COALESCE(j.host_id, j.input::jsonb ->> 'hostId')
         WHERE b.site_id = $1 AND j.state NOT IN ({terminal}) ORDER BY j.created_at"
    );
    let mut jobs: std::collections::HashMap<String, Vec<String>> = std::collections::HashMap::new();
    for r in &c.query(sql.as_str(), &[&site_id.to_string()]).db()? {
        jobs.entry(col::<String>(r, 0)?).or_default().push(col(r, 1)?);
    }
    for r in &mut out {
        if let Some(kinds) = jobs.remove(&r.binding.host_id.to_string()) {
            r.jobs = kinds;
        }
    }
    Ok(out)
}

/// One batch of a pass; every change re-checks its host's lifecycle first. Written for the
/// common case (an observation and nothing else): one read and one update per host.
pub(crate) fn apply_reconcile(c: &mut Transaction<'_>, batch: &[ReconcileChange], at: Time) -> Result<ReconcileApplied, StoreError> {
    let mut done = ReconcileApplied::default();
    for ch in batch {
        let id = ch.host_id.to_string();
        let state: Option<String> = c
            .query_opt("SELECT h.state FROM maas_bindings b JOIN hosts h ON h.id = b.host_id WHERE b.host_id = $1", &[&id])
            .db()?
            .map(|r| col(&r, 0))
            .transpose()?;
        if state.as_deref() != Some(ch.expected_state.as_str()) {
            done.skipped.push(ch.host_id);
            continue;
        }
        if let Some(o) = &ch.observation {
            write_observation(c, ch.host_id, o)?;
        }
        match &ch.drift {
            DriftWrite::Keep => {}
            DriftWrite::Open(details) => {
                set_drift(c, ch.host_id, Some(details), at)?;
            }
            DriftWrite::Heal => {
                set_drift(c, ch.host_id, None, at)?;
                c.execute(
                    "UPDATE maas_bindings SET acknowledged_drift = NULL, updated_at = $2 WHERE host_id = $1 AND acknowledged_drift IS NOT NULL",
                    &[&id, &at.unix()],
                ).db()?;
            }
        }
        if let Some(reason) = &ch.quarantine {
            hosts::transition_host(c, ch.host_id, HostLifecycle::Active, HostLifecycle::Quarantined, reason, at)?;
            hosts::set_schedulable(c, ch.host_id, false, reason, at)?;
        }
        if let Some(job) = &ch.job {
            super::jobs::create_job(c, job)?;
        }
        for e in &ch.events {
            insert_event(c, e)?;
        }
        done.applied += 1;
    }
    Ok(done)
}

/// An operator's resolution: the open drift closes and is remembered as acknowledged.
pub(crate) fn resolve(c: &mut Transaction<'_>, host_id: Uuid, at: Time, log: &ChangeLog) -> Result<MaasBinding, StoreError> {
    let current = require(c, host_id)?;
    let Some(details) = current.drift else {
        return Err(StoreError::conflict("MAAS drift", host_id, format!("host {host_id} has no open drift to resolve")));
    };
    c.execute(
        "UPDATE maas_bindings SET drift = NULL, drift_resolved_at = $2, acknowledged_drift = $3, updated_at = $2 WHERE host_id = $1",
        &[&host_id.to_string(), &at.unix(), &details.to_string()],
    )
    .db()?;
    insert_event(c, &log.event)?;
    insert_audit(c, &log.audit)?;
    require(c, host_id)
}
