//! The rollout executor's reads and writes in PostgreSQL, as `store-sqlite/src/plans.rs`: the planner's snapshot (one read-only
//! snapshot: the caller reads under `REPEATABLE READ`), one plan as one transaction, and hosts'
//! reports.

use std::collections::{BTreeMap, BTreeSet};

use drover_proto::states::{HostRolloutState, JobState, RolloutState};
use drover_proto::time::Time;
use serde_json::Value;
use uuid::Uuid;

use super::cols::{col, json_col, opt_time_col, parse_col, uuid_col};
use super::hosts::{HOST_COLS, host_row};
use super::log::{insert_audit, insert_event};
use super::postgres::{Row, Transaction};
use super::releases::{
    HOST_ROLLOUT_COLS, ROLLOUT_COLS, get_host_rollout, get_rollout, host_rollout_row, rollout_row, update_rollout_state,
};
use crate::DbResult;
use drover_store::rules::check_sha256;
use drover_store::{ChannelRecord, HostReport, NewAudit, PlanHost, PlanOp, PlanRollout, PlanSnapshot, PlanWrite, StoreError};

pub(crate) fn report_row(r: &Row, at: usize) -> Result<HostReport, StoreError> {
    let probes: String = col(r, at + 1)?;
    let activation: Option<String> = col(r, at + 2)?;
    let bad = |e: serde_json::Error| StoreError::backend(format!("host_reports: {e}"));
    Ok(HostReport {
        failed_units: u32::try_from(col::<i64>(r, at)?).map_err(|e| StoreError::backend(format!("host_reports.failed_units: {e}")))?,
        probes: serde_json::from_str(&probes).map_err(bad)?,
        activation: activation.map(|a| serde_json::from_str(&a).map_err(bad)).transpose()?,
    })
}

pub(crate) fn record_host_report(c: &mut Transaction<'_>, host_id: Uuid, report: &HostReport, at: Time) -> Result<(), StoreError> {
    if super::hosts::get_host(c, host_id)?.is_none() {
        return Err(StoreError::not_found("host", host_id));
    }
    let probes = serde_json::to_string(&report.probes).map_err(StoreError::backend)?;
    let activation = report.activation.as_ref().map(serde_json::to_string).transpose().map_err(StoreError::backend)?;
    c.execute(
        "INSERT INTO host_reports (host_id, failed_units, probes, activation, updated_at) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (host_id) DO UPDATE SET failed_units = $2, probes = $3, activation = $4, updated_at = $5",
        &[&host_id.to_string(), &i64::from(report.failed_units), &probes, &activation, &at.unix()],
    )
    .db()?;
    Ok(())
}

pub(crate) fn plan_snapshot(c: &mut Transaction<'_>) -> Result<PlanSnapshot, StoreError> {
    let cols = HOST_COLS.split(", ").map(|col| format!("h.{col}")).collect::<Vec<_>>().join(", ");
    let sql = format!(
        "SELECT {cols}, r.failed_units, r.probes, r.activation FROM hosts h LEFT JOIN host_reports r ON r.host_id = h.id
         WHERE h.state <> 'deleted' ORDER BY h.hostname"
    );
    let hosts = c
        .query(sql.as_str(), &[])
        .db()?
        .iter()
        .map(|r| {
            let host = host_row(r)?;
            let has_report = col::<Option<String>>(r, 11)?.is_some();
            Ok(PlanHost {
                id: host.id,
                hostname: host.hostname,
                state: host.state,
                last_checkin: host.last_checkin.map(|c| c.at),
                report: if has_report { Some(report_row(r, 10)?) } else { None },
            })
        })
        .collect::<Result<Vec<_>, StoreError>>()?;

    let sql = format!("SELECT {ROLLOUT_COLS} FROM rollouts WHERE state <> 'Pruned' ORDER BY opened_at, rollout_id");
    let rows = c.query(sql.as_str(), &[]).db()?.iter().map(rollout_row).collect::<Result<Vec<_>, _>>()?;
    let hr_sql = format!("SELECT {HOST_ROLLOUT_COLS} FROM host_rollouts WHERE rollout_id = $1 ORDER BY hostname");
    let hr = c.prepare(&hr_sql).db()?;
    let mut rollouts = Vec::with_capacity(rows.len());
    for rollout in rows {
        let hosts = c.query(&hr, &[&rollout.rollout_id.as_str()]).db()?.iter().map(host_rollout_row).collect::<Result<Vec<_>, _>>()?;
        rollouts.push(PlanRollout { rollout, hosts });
    }

    let channels = c
        .query("SELECT channel, last_rolled_ref, deferral, stale_alert FROM channels", &[])
        .db()?
        .iter()
        .map(|r| {
            let deferral: Option<String> = col(r, 2)?;
            Ok((
                col::<String>(r, 0)?,
                ChannelRecord {
                    last_rolled_ref: col(r, 1)?,
                    deferral: deferral
                        .map(|d| serde_json::from_str(&d).map_err(|e| StoreError::backend(format!("channels.deferral: {e}"))))
                        .transpose()?,
                    stale_alert: opt_time_col(r, 3)?,
                },
            ))
        })
        .collect::<Result<BTreeMap<_, _>, StoreError>>()?;

    // Held and lent hosts: see `store-sqlite/src/plans.rs` for why pending jobs do not count and a
    // job's `activate` stage lends its host to the rollout engine.
    let mut held = BTreeMap::new();
    let mut lent = BTreeSet::new();
    let rows = c
        .query("SELECT job_id, kind, host_id, state, progress FROM jobs WHERE host_id IS NOT NULL ORDER BY created_at, job_id", &[])
        .db()?;
    for r in &rows {
        let (job, kind, host, state, progress) =
            (uuid_col(r, 0)?, col::<String>(r, 1)?, uuid_col(r, 2)?, parse_col::<JobState>(r, 3)?, json_col(r, 4)?);
        let activating = state == JobState::Running && progress.get("stage").and_then(Value::as_str) == Some("activate");
        if activating {
            lent.insert(host);
        } else if !state.is_terminal() && state != JobState::Pending {
            held.entry(host).or_insert_with(|| format!("job {job} ({kind}, {state})"));
        }
    }
    let rows = c
        .query("SELECT name, maintenance FROM racks WHERE state IN ('maintenance', 'validating') AND maintenance IS NOT NULL", &[])
        .db()?;
    for r in &rows {
        let (rack, m) = (col::<String>(r, 0)?, json_col(r, 1)?);
        let machines = m.pointer("/targets/machines").and_then(Value::as_array).cloned().unwrap_or_default();
        for id in machines.iter().filter_map(Value::as_str).filter_map(|s| Uuid::parse_str(s).ok()) {
            held.entry(id).or_insert_with(|| format!("rack {rack} maintenance"));
        }
    }
    Ok(PlanSnapshot { hosts, rollouts, channels, held, lent })
}

fn upsert_channel(c: &mut Transaction<'_>, channel: &str, at: Time) -> Result<(), StoreError> {
    c.execute(
        "INSERT INTO channels (channel, updated_at) VALUES ($1, $2) ON CONFLICT (channel) DO UPDATE SET updated_at = $2",
        &[&channel, &at.unix()],
    )
    .db()?;
    Ok(())
}

fn apply_op(c: &mut Transaction<'_>, op: &PlanOp, at: Time) -> Result<(), StoreError> {
    match op {
        PlanOp::OpenRollout { rollout_id, manifest_sha256 } => {
            check_sha256("manifest sha256", manifest_sha256)?;
            if get_rollout(c, rollout_id)?.is_some() {
                return Err(StoreError::conflict("rollout", rollout_id, "already opened"));
            }
            c.execute(
                "INSERT INTO rollouts (rollout_id, channel, state, manifest_sha256, opened_at, updated_at) VALUES ($1, $2, $3, $4, $5, $5)",
                &[&rollout_id.as_str(), &rollout_id.channel(), &RolloutState::Opening.as_str(), manifest_sha256, &at.unix()],
            )
            .db()?;
            upsert_channel(c, rollout_id.channel(), at)?;
            c.execute(
                "UPDATE channels SET last_rolled_ref = $2, deferral = NULL WHERE channel = $1",
                &[&rollout_id.channel(), &rollout_id.channel_ref()],
            )
            .db()?;
        }
        PlanOp::RolloutState { rollout_id, from, to } => update_rollout_state(c, rollout_id, *from, *to, at)?,
        PlanOp::HostState { rollout_id, hostname, wave_index, from, to, intent_target } => {
            let what = "host rollout";
            let key = || format!("{rollout_id}/{hostname}");
            if from != to && !from.can_transition_to(*to) {
                return Err(StoreError::IllegalTransition { what, from: from.as_str().into(), to: to.as_str().into() });
            }
            if get_rollout(c, rollout_id)?.is_none() {
                return Err(StoreError::not_found("rollout", rollout_id));
            }
            let stored = get_host_rollout(c, rollout_id, hostname)?;
            let actual = stored.as_ref().map_or(HostRolloutState::Pending, |s| s.state);
            if actual != *from {
                return Err(StoreError::StaleState { what, id: key(), expected: from.as_str().into(), actual: actual.as_str().into() });
            }
            let since = match &stored {
                Some(s) if from == to => s.since,
                _ => at,
            };
            let target = intent_target.clone().or_else(|| stored.and_then(|s| s.intent_target));
            c.execute(
                "INSERT INTO host_rollouts (rollout_id, hostname, state, wave_index, since, intent_target) VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (rollout_id, hostname) DO UPDATE SET state = $3, wave_index = $4, since = $5, intent_target = $6",
                &[&rollout_id.as_str(), hostname, &to.as_str(), &i64::from(*wave_index), &since.unix(), &target],
            )
            .db()?;
        }
        PlanOp::Intent(intent) => {
            super::work::put_intent(c, intent)?;
        }
        PlanOp::Deferral { channel, deferral } => {
            upsert_channel(c, channel, at)?;
            let text = deferral.as_ref().map(|d| d.to_string());
            c.execute("UPDATE channels SET deferral = $2 WHERE channel = $1", &[channel, &text]).db()?;
        }
        PlanOp::StaleAlert { channel, signed_at } => {
            upsert_channel(c, channel, at)?;
            c.execute("UPDATE channels SET stale_alert = $2 WHERE channel = $1", &[channel, &signed_at.unix()]).db()?;
        }
        PlanOp::CancelIntents { rollout_id } => {
            c.execute(
                "UPDATE intents SET status = 'cancelled', updated_at = $2 WHERE rollout_id = $1 AND status = 'wanted'",
                &[&rollout_id.as_str(), &at.unix()],
            )
            .db()?;
        }
    }
    Ok(())
}

pub(crate) fn apply_plan(c: &mut Transaction<'_>, write: &PlanWrite, audits: &[NewAudit]) -> Result<(), StoreError> {
    for op in &write.ops {
        apply_op(c, op, write.at)?;
    }
    for e in &write.events {
        insert_event(c, e)?;
    }
    for a in audits {
        insert_audit(c, a)?;
    }
    Ok(())
}
