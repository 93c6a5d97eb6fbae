//! The rollout executor's reads and writes in SQLite: the planner's snapshot, one plan as one
//! transaction, and hosts' reports.

use std::collections::BTreeMap;

use drover_proto::states::JobState;
use rusqlite::{Connection, OptionalExtension, Row, params};

use super::hosts::{HOST_COLS, host_row};
use super::log::{insert_audit, insert_event};
use super::releases::{
    HOST_ROLLOUT_COLS, ROLLOUT_COLS, get_host_rollout, get_rollout, host_rollout_row, rollout_row, update_rollout_state,
};
use super::*;

fn report_row(r: &Row<'_>, at: usize) -> rusqlite::Result<HostReport> {
    let probes: String = r.get(at + 1)?;
    let activation: Option<String> = r.get(at + 2)?;
    Ok(HostReport {
        failed_units: r.get(at)?,
        probes: serde_json::from_str(&probes).map_err(|e| conversion(at + 1, Type::Text, e))?,
        activation: activation.map(|a| serde_json::from_str(&a).map_err(|e| conversion(at + 2, Type::Text, e))).transpose()?,
    })
}

pub(super) fn get_host_report(c: &Connection, host_id: Uuid) -> Result<Option<HostReport>, StoreError> {
    let mut stmt = c.prepare_cached("SELECT failed_units, probes, activation FROM host_reports WHERE host_id = ?1").db()?;
    stmt.query_row([host_id.to_string()], |r| report_row(r, 0)).optional().db()
}

pub(super) fn record_host_report(c: &Connection, host_id: Uuid, report: &HostReport, at: Time) -> Result<(), StoreError> {
    if super::hosts::get_host(c, host_id)?.is_none() {
        return Err(StoreError::not_found("host", host_id));
    }
    let probes = serde_json::to_string(&report.probes).map_err(StoreError::backend)?;
    let activation = report.activation.as_ref().map(serde_json::to_string).transpose().map_err(StoreError::backend)?;
    c.prepare_cached(
        "INSERT INTO host_reports (host_id, failed_units, probes, activation, updated_at) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (host_id) DO UPDATE SET failed_units = ?2, probes = ?3, activation = ?4, updated_at = ?5",
    )
    .db()?
    .execute(params![host_id.to_string(), report.failed_units, probes, activation, at.unix()])
    .db()?;
    Ok(())
}

pub(super) fn plan_snapshot(c: &Connection) -> Result<PlanSnapshot, StoreError> {
    let cols = HOST_COLS.split(", ").map(|col| format!("h.{col}")).collect::<Vec<_>>().join(", ");
    let sql = format!(
        "SELECT {cols}, r.failed_units, r.probes, r.activation FROM hosts h LEFT JOIN host_reports r ON r.host_id = h.id
         WHERE h.state <> 'deleted' ORDER BY h.hostname"
    );
    let mut stmt = c.prepare_cached(&sql).db()?;
    let hosts = stmt
        .query_map([], |r| {
            let host = host_row(r)?;
            let has_report = r.get::<_, Option<String>>(11)?.is_some();
            Ok(PlanHost {
                id: host.id,
                hostname: host.hostname,
                state: host.state,
                last_checkin: host.last_checkin.map(|c| c.at),
                report: if has_report { Some(report_row(r, 10)?) } else { None },
            })
        })
        .db()?
        .collect::<Result<Vec<_>, _>>()
        .db()?;

    let sql = format!("SELECT {ROLLOUT_COLS} FROM rollouts WHERE state <> 'Pruned' ORDER BY opened_at, rollout_id");
    let mut stmt = c.prepare_cached(&sql).db()?;
    let rows = stmt.query_map([], rollout_row).db()?.collect::<Result<Vec<_>, _>>().db()?;
    let hr_sql = format!("SELECT {HOST_ROLLOUT_COLS} FROM host_rollouts WHERE rollout_id = ?1 ORDER BY hostname");
    let mut hr = c.prepare_cached(&hr_sql).db()?;
    let mut rollouts = Vec::with_capacity(rows.len());
    for rollout in rows {
        let hosts = hr.query_map([rollout.rollout_id.as_str()], host_rollout_row).db()?.collect::<Result<Vec<_>, _>>().db()?;
        rollouts.push(PlanRollout { rollout, hosts });
    }

    let mut stmt = c.prepare_cached("SELECT channel, last_rolled_ref, deferral, stale_alert FROM channels").db()?;
    let channels = stmt
        .query_map([], |r| {
            let deferral: Option<String> = r.get(2)?;
            Ok((
                r.get::<_, String>(0)?,
                ChannelRecord {
                    last_rolled_ref: r.get(1)?,
                    deferral: deferral.map(|d| serde_json::from_str(&d).map_err(|e| conversion(2, Type::Text, e))).transpose()?,
                    stale_alert: opt_time_col(r, 3)?,
                },
            ))
        })
        .db()?
        .collect::<Result<BTreeMap<_, _>, _>>()
        .db()?;

    // A started, unfinished job owns its host (DESIGN: one owner of disruptive work), and
    // counts against the budgets that select it. Two exceptions: a `pending` job has not taken
    // the host out of service yet — counting it would let queued jobs eat the budget their
    // own pacing waits on, a deadlock — and during a job's `activate` stage the host is *lent*
    // to the rollout engine: still counted against budgets (it is out of service), but
    // dispatchable, since the job waits for exactly that intent.
    let mut stmt = c
        .prepare_cached("SELECT job_id, kind, host_id, state, progress FROM jobs WHERE host_id IS NOT NULL ORDER BY created_at, job_id")
        .db()?;
    let mut held = BTreeMap::new();
    let mut lent = std::collections::BTreeSet::new();
    let rows = stmt
        .query_map([], |r| Ok((uuid_col(r, 0)?, r.get::<_, String>(1)?, uuid_col(r, 2)?, parse_col::<JobState>(r, 3)?, json_col(r, 4)?)))
        .db()?;
    for row in rows {
        let (job, kind, host, state, progress) = row.db()?;
        let activating = state == JobState::Running && progress.get("stage").and_then(Value::as_str) == Some("activate");
        if activating {
            lent.insert(host);
        } else if !state.is_terminal() && state != JobState::Pending {
            held.entry(host).or_insert_with(|| format!("job {job} ({kind}, {state})"));
        }
    }
    // A rack in a maintenance cycle (or validating after one) has its scoped machines out of
    // service: held like a job's host, counted against every budget that selects them.
    let mut stmt = c
        .prepare_cached("SELECT name, maintenance FROM racks WHERE state IN ('maintenance', 'validating') AND maintenance IS NOT NULL")
        .db()?;
    let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, json_col(r, 1)?))).db()?;
    for row in rows {
        let (rack, m) = row.db()?;
        let machines = m.pointer("/targets/machines").and_then(Value::as_array).cloned().unwrap_or_default();
        for id in machines.iter().filter_map(Value::as_str).filter_map(|s| Uuid::parse_str(s).ok()) {
            held.entry(id).or_insert_with(|| format!("rack {rack} maintenance"));
        }
    }
    Ok(PlanSnapshot { hosts, rollouts, channels, held, lent })
}

fn upsert_channel(c: &Connection, channel: &str, at: Time) -> Result<(), StoreError> {
    c.prepare_cached("INSERT INTO channels (channel, updated_at) VALUES (?1, ?2) ON CONFLICT (channel) DO UPDATE SET updated_at = ?2")
        .db()?
        .execute(params![channel, at.unix()])
        .db()?;
    Ok(())
}

fn apply_op(c: &Connection, op: &PlanOp, at: Time) -> Result<(), StoreError> {
    match op {
        PlanOp::OpenRollout { rollout_id, manifest_sha256 } => {
            check_sha256("manifest sha256", manifest_sha256)?;
            if get_rollout(c, rollout_id)?.is_some() {
                return Err(StoreError::conflict("rollout", rollout_id, "already opened"));
            }
            c.prepare_cached(
                "INSERT INTO rollouts (rollout_id, channel, state, manifest_sha256, opened_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?5)",
            )
            .db()?
            .execute(params![rollout_id.as_str(), rollout_id.channel(), RolloutState::Opening.as_str(), manifest_sha256, at.unix()])
            .db()?;
            upsert_channel(c, rollout_id.channel(), at)?;
            c.prepare_cached("UPDATE channels SET last_rolled_ref = ?2, deferral = NULL WHERE channel = ?1")
                .db()?
                .execute(params![rollout_id.channel(), rollout_id.channel_ref()])
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
            // The state's `since` moves only with the state; recording a revert intent keeps it.
            let since = match &stored {
                Some(s) if from == to => s.since,
                _ => at,
            };
            let target = intent_target.clone().or_else(|| stored.and_then(|s| s.intent_target));
            c.prepare_cached(
                "INSERT INTO host_rollouts (rollout_id, hostname, state, wave_index, since, intent_target) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (rollout_id, hostname) DO UPDATE SET state = ?3, wave_index = ?4, since = ?5, intent_target = ?6",
            )
            .db()?
            .execute(params![rollout_id.as_str(), hostname, to.as_str(), wave_index, since.unix(), target])
            .db()?;
        }
        PlanOp::Intent(intent) => {
            super::work::put_intent(c, intent)?;
        }
        PlanOp::Deferral { channel, deferral } => {
            upsert_channel(c, channel, at)?;
            let text = deferral.as_ref().map(|d| d.to_string());
            c.prepare_cached("UPDATE channels SET deferral = ?2 WHERE channel = ?1").db()?.execute(params![channel, text]).db()?;
        }
        PlanOp::StaleAlert { channel, signed_at } => {
            upsert_channel(c, channel, at)?;
            c.prepare_cached("UPDATE channels SET stale_alert = ?2 WHERE channel = ?1")
                .db()?
                .execute(params![channel, signed_at.unix()])
                .db()?;
        }
        PlanOp::CancelIntents { rollout_id } => {
            c.prepare_cached("UPDATE intents SET status = 'cancelled', updated_at = ?2 WHERE rollout_id = ?1 AND status = 'wanted'")
                .db()?
                .execute(params![rollout_id.as_str(), at.unix()])
                .db()?;
        }
    }
    Ok(())
}

pub(super) fn apply_plan(c: &Connection, write: &PlanWrite, audits: &[NewAudit]) -> Result<(), StoreError> {
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
