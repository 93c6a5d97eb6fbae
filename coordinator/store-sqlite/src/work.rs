//! Intents and tasks with leases in SQLite (jobs are in `jobs`).
//!
//! Everything a host may read or write here is looked up by (host id, record id): a record of
//! another host is "not found", never "forbidden", so one host cannot even learn another's
//! ids exist. Leases live in one column per task, so a task can never hold two live leases.

use rusqlite::{Connection, OptionalExtension, Row, params};
use serde_json::json;

use super::log::insert_event;
use super::*;

fn require_host(c: &Connection, id: Uuid) -> Result<(), StoreError> {
    match super::hosts::get_host(c, id)? {
        Some(_) => Ok(()),
        None => Err(StoreError::not_found("host", id)),
    }
}

// ---- intents ------------------------------------------------------------------------------

const INTENT_COLS: &str = "intent_id, host_id, rollout_id, envelope, confirm_deadline, created_at, status, updated_at, is_current";

fn intent_row(r: &Row<'_>) -> rusqlite::Result<IntentRecord> {
    Ok(IntentRecord {
        intent: NewIntent {
            intent_id: uuid_col(r, 0)?,
            host_id: uuid_col(r, 1)?,
            rollout_id: rollout_col(r, 2)?,
            envelope: r.get(3)?,
            confirm_deadline: opt_time_col(r, 4)?,
            created_at: time_col(r, 5)?,
        },
        status: parse_col(r, 6)?,
        updated_at: time_col(r, 7)?,
        current: r.get(8)?,
    })
}

fn intent_by_id(c: &Connection, intent_id: Uuid) -> Result<Option<IntentRecord>, StoreError> {
    let sql = format!("SELECT {INTENT_COLS} FROM intents WHERE intent_id = ?1");
    c.prepare_cached(&sql).db()?.query_row([intent_id.to_string()], intent_row).optional().db()
}

pub(super) fn put_intent(c: &Connection, new: &NewIntent) -> Result<IntentRecord, StoreError> {
    require_host(c, new.host_id)?;
    if let Some(stored) = intent_by_id(c, new.intent_id)? {
        let i = &stored.intent;
        // A retried dispatch (same content, any created_at) is a no-op, and does not make an
        // old intent current again.
        if i.host_id == new.host_id
            && i.rollout_id == new.rollout_id
            && i.envelope == new.envelope
            && i.confirm_deadline == new.confirm_deadline
        {
            return Ok(stored);
        }
        return Err(StoreError::conflict("intent", new.intent_id, "already stored with other content"));
    }
    let at = new.created_at.unix();
    // The previous current intent stops being current; if it still stood, it is superseded.
    c.prepare_cached(
        "UPDATE intents SET is_current = 0, updated_at = ?1,
             status = CASE WHEN status IN ('wanted', 'confirmed') THEN 'superseded' ELSE status END
         WHERE host_id = ?2 AND is_current = 1",
    )
    .db()?
    .execute(params![at, new.host_id.to_string()])
    .db()?;
    c.prepare_cached(
        "INSERT INTO intents (intent_id, host_id, rollout_id, envelope, status, is_current, confirm_deadline, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, 1, ?6, ?7, ?7)",
    )
    .db()?
    .execute(params![
        new.intent_id.to_string(),
        new.host_id.to_string(),
        new.rollout_id.as_str(),
        new.envelope,
        IntentStatus::Wanted.as_str(),
        new.confirm_deadline.map(Time::unix),
        at
    ])
    .db()?;
    intent_by_id(c, new.intent_id)?.ok_or_else(|| StoreError::not_found("intent", new.intent_id))
}

pub(super) fn current_intent(c: &Connection, host_id: Uuid) -> Result<Option<IntentRecord>, StoreError> {
    let sql = format!("SELECT {INTENT_COLS} FROM intents WHERE host_id = ?1 AND is_current = 1");
    c.prepare_cached(&sql).db()?.query_row([host_id.to_string()], intent_row).optional().db()
}

pub(super) fn get_intent(c: &Connection, host_id: Uuid, intent_id: Uuid) -> Result<Option<IntentRecord>, StoreError> {
    let sql = format!("SELECT {INTENT_COLS} FROM intents WHERE intent_id = ?1 AND host_id = ?2");
    c.prepare_cached(&sql).db()?.query_row([intent_id.to_string(), host_id.to_string()], intent_row).optional().db()
}

pub(super) fn set_intent_status(
    c: &Connection,
    host_id: Uuid,
    intent_id: Uuid,
    to: IntentStatus,
    at: Time,
) -> Result<IntentRecord, StoreError> {
    let stored = get_intent(c, host_id, intent_id)?.ok_or_else(|| StoreError::not_found("intent", intent_id))?;
    if stored.status == to {
        return Ok(stored);
    }
    if !stored.status.can_transition_to(to) {
        return Err(StoreError::IllegalTransition { what: "intent", from: stored.status.as_str().into(), to: to.as_str().into() });
    }
    c.prepare_cached("UPDATE intents SET status = ?1, updated_at = ?2 WHERE intent_id = ?3 AND host_id = ?4")
        .db()?
        .execute(params![to.as_str(), at.unix(), intent_id.to_string(), host_id.to_string()])
        .db()?;
    get_intent(c, host_id, intent_id)?.ok_or_else(|| StoreError::not_found("intent", intent_id))
}

// ---- tasks --------------------------------------------------------------------------------

const TASK_COLS: &str = "task_id, host_id, job_id, envelope, created_at, state, lease_expires_at, attempts, result, completed_at";

fn task_row(r: &Row<'_>) -> rusqlite::Result<TaskRecord> {
    let result = match r.get::<_, Option<String>>(8)? {
        Some(_) => Some(json_col(r, 8)?),
        None => None,
    };
    Ok(TaskRecord {
        task: NewTask {
            task_id: uuid_col(r, 0)?,
            host_id: uuid_col(r, 1)?,
            job_id: opt_uuid_col(r, 2)?,
            envelope: r.get(3)?,
            created_at: time_col(r, 4)?,
        },
        state: parse_col(r, 5)?,
        lease_expires_at: opt_time_col(r, 6)?,
        attempts: r.get(7)?,
        result,
        completed_at: opt_time_col(r, 9)?,
    })
}

pub(super) fn get_task(c: &Connection, task_id: Uuid) -> Result<Option<TaskRecord>, StoreError> {
    let sql = format!("SELECT {TASK_COLS} FROM tasks WHERE task_id = ?1");
    c.prepare_cached(&sql).db()?.query_row([task_id.to_string()], task_row).optional().db()
}

pub(super) fn enqueue_task(c: &Connection, new: &NewTask) -> Result<bool, StoreError> {
    if let Some(stored) = get_task(c, new.task_id)? {
        let t = &stored.task;
        if t.host_id == new.host_id && t.job_id == new.job_id && t.envelope == new.envelope {
            return Ok(false);
        }
        return Err(StoreError::conflict("task", new.task_id, "already queued with other content"));
    }
    require_host(c, new.host_id)?;
    if let Some(job_id) = new.job_id {
        super::jobs::get_job(c, job_id)?.ok_or_else(|| StoreError::not_found("job", job_id))?;
    }
    c.prepare_cached(
        "INSERT INTO tasks (task_id, host_id, job_id, envelope, state, created_at, attempts) VALUES (?1, ?2, ?3, ?4, 'queued', ?5, 0)",
    )
    .db()?
    .execute(params![
        new.task_id.to_string(),
        new.host_id.to_string(),
        new.job_id.map(|j| j.to_string()),
        new.envelope,
        new.created_at.unix()
    ])
    .db()?;
    Ok(true)
}

/// Whether the host has a task to lease now (queued, or with a lapsed lease). A read, so the
/// common answer — nothing — costs no write transaction.
pub(super) fn has_leasable_task(c: &Connection, host_id: Uuid, now: Time) -> Result<bool, StoreError> {
    c.prepare_cached(
        "SELECT EXISTS (SELECT 1 FROM tasks
             WHERE host_id = ?1 AND (state = 'queued' OR (state = 'leased' AND lease_expires_at <= ?2)))",
    )
    .db()?
    .query_row(params![host_id.to_string(), now.unix()], |r| r.get(0))
    .db()
}

pub(super) fn lease_tasks(c: &Connection, host_id: Uuid, now: Time, lease_secs: u64, max: u32) -> Result<Vec<TaskRecord>, StoreError> {
    if max == 0 {
        return Ok(Vec::new());
    }
    let limit = page(max);
    let until = now.plus_secs(lease_secs).unix();
    // A lease is live while now < lease_expires_at; a lapsed one is as good as queued.
    let ids: Vec<String> = c
        .prepare_cached(
            "SELECT task_id FROM tasks
             WHERE host_id = ?1 AND (state = 'queued' OR (state = 'leased' AND lease_expires_at <= ?2))
             ORDER BY created_at, task_id LIMIT ?3",
        )
        .db()?
        .query_map(params![host_id.to_string(), now.unix(), limit], |r| r.get(0))
        .db()?
        .collect::<Result<_, _>>()
        .db()?;
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        c.prepare_cached("UPDATE tasks SET state = 'leased', lease_expires_at = ?1, attempts = attempts + 1 WHERE task_id = ?2")
            .db()?
            .execute(params![until, id])
            .db()?;
        let sql = format!("SELECT {TASK_COLS} FROM tasks WHERE task_id = ?1");
        out.push(c.prepare_cached(&sql).db()?.query_row([&id], task_row).db()?);
    }
    Ok(out)
}

/// Completes a task; the flag says whether a secret was erased from its envelope (the
/// caller then truncates the WAL, which still holds the old row).
pub(super) fn complete_task(
    c: &Connection,
    host_id: Uuid,
    task_id: Uuid,
    result: &Value,
    now: Time,
) -> Result<(TaskRecord, bool), StoreError> {
    let sql = format!("SELECT {TASK_COLS} FROM tasks WHERE task_id = ?1 AND host_id = ?2");
    let stored = c
        .prepare_cached(&sql)
        .db()?
        .query_row([task_id.to_string(), host_id.to_string()], task_row)
        .optional()
        .db()?
        .ok_or_else(|| StoreError::not_found("task", task_id))?;
    if stored.state == TaskState::Completed {
        if stored.result.as_ref() == Some(result) {
            return Ok((stored, false));
        }
        return Err(StoreError::conflict("task", task_id, "already completed with another result"));
    }
    // A late result after the lease lapsed (task back in the queue) is still the host's real
    // outcome, so it is accepted from either live state.
    c.prepare_cached("UPDATE tasks SET state = 'completed', lease_expires_at = NULL, result = ?1, completed_at = ?2 WHERE task_id = ?3")
        .db()?
        .execute(params![result.to_string(), now.unix(), task_id.to_string()])
        .db()?;
    // Acknowledged: secrets the task carried (a MAAS token) are not kept any longer.
    let erased = drover_store::erase::erase_task_secrets(&stored.task.envelope);
    if let Some(erased) = &erased {
        c.prepare_cached("UPDATE tasks SET envelope = ?1 WHERE task_id = ?2").db()?.execute(params![erased, task_id.to_string()]).db()?;
    }
    insert_event(
        c,
        &NewEvent {
            at: now,
            kind: "task.completed".into(),
            host_id: Some(host_id),
            rollout_id: None,
            job_id: stored.task.job_id,
            message: "task completed".into(),
            data: json!({ "taskId": task_id.to_string() }),
        },
    )?;
    let record = get_task(c, task_id)?.ok_or_else(|| StoreError::not_found("task", task_id))?;
    Ok((record, erased.is_some()))
}

pub(super) fn requeue_expired(c: &Connection, now: Time) -> Result<u64, StoreError> {
    let n = c
        .prepare_cached("UPDATE tasks SET state = 'queued', lease_expires_at = NULL WHERE state = 'leased' AND lease_expires_at <= ?1")
        .db()?
        .execute([now.unix()])
        .db()?;
    Ok(n as u64)
}

pub(super) fn list_tasks(c: &Connection, f: &TaskFilter) -> Result<Vec<TaskRecord>, StoreError> {
    let sql = format!(
        "SELECT {TASK_COLS} FROM tasks WHERE (?1 IS NULL OR host_id = ?1) AND (?2 IS NULL OR job_id = ?2) AND (?3 IS NULL OR state = ?3)
         ORDER BY created_at, task_id"
    );
    let mut stmt = c.prepare_cached(&sql).db()?;
    let rows = stmt
        .query_map(params![f.host_id.map(|h| h.to_string()), f.job_id.map(|j| j.to_string()), f.state.map(TaskState::as_str)], task_row)
        .db()?;
    rows.collect::<Result<_, _>>().db()
}
