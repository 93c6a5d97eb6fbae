//! Intents and tasks with leases in PostgreSQL, as `store-sqlite/src/work.rs`.
//!
//! Everything a host may read or write here is looked up by (host id, record id): a record of
//! another host is "not found", never "forbidden". Leases live in one column per task.

use drover_proto::time::Time;
use serde_json::{Value, json};
use uuid::Uuid;

use super::cols::{col, json_col, opt_time_col, opt_uuid_col, page, parse_col, rollout_col, time_col, uuid_col};
use super::log::insert_event;
use super::postgres::types::Type;
use super::postgres::{Row, Transaction};
use crate::DbResult;
use drover_store::{IntentRecord, IntentStatus, NewEvent, NewIntent, NewTask, StoreError, TaskFilter, TaskRecord, TaskState};

fn require_host(c: &mut Transaction<'_>, id: Uuid) -> Result<(), StoreError> {
    match super::hosts::get_host(c, id)? {
        Some(_) => Ok(()),
        None => Err(StoreError::not_found("host", id)),
    }
}

// ---- intents ------------------------------------------------------------------------------

pub(crate) const INTENT_COLS: &str =
    "intent_id, host_id, rollout_id, envelope, confirm_deadline, created_at, status, updated_at, is_current";

fn intent_row(r: &Row) -> Result<IntentRecord, StoreError> {
    intent_row_at(r, 0)
}

/// An intent from [`INTENT_COLS`] starting at column `at`.
pub(crate) fn intent_row_at(r: &Row, at: usize) -> Result<IntentRecord, StoreError> {
    Ok(IntentRecord {
        intent: NewIntent {
            intent_id: uuid_col(r, at)?,
            host_id: uuid_col(r, at + 1)?,
            rollout_id: rollout_col(r, at + 2)?,
            envelope: col(r, at + 3)?,
            confirm_deadline: opt_time_col(r, at + 4)?,
            created_at: time_col(r, at + 5)?,
        },
        status: parse_col(r, at + 6)?,
        updated_at: time_col(r, at + 7)?,
        current: col::<i64>(r, at + 8)? != 0,
    })
}

fn intent_by_id(c: &mut Transaction<'_>, intent_id: Uuid) -> Result<Option<IntentRecord>, StoreError> {
    let sql = format!("SELECT {INTENT_COLS} FROM intents WHERE intent_id = $1");
    c.query_opt(sql.as_str(), &[&intent_id.to_string()]).db()?.map(|r| intent_row(&r)).transpose()
}

pub(crate) fn put_intent(c: &mut Transaction<'_>, new: &NewIntent) -> Result<IntentRecord, StoreError> {
    require_host(c, new.host_id)?;
    if let Some(stored) = intent_by_id(c, new.intent_id)? {
        let i = &stored.intent;
        // A retried dispatch (same content, any created_at) is a no-op.
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
    c.execute(
        "UPDATE intents SET is_current = 0, updated_at = $1,
             status = CASE WHEN status IN ('wanted', 'confirmed') THEN 'superseded' ELSE status END
         WHERE host_id = $2 AND is_current = 1",
        &[&at, &new.host_id.to_string()],
    )
    .db()?;
    c.execute(
        "INSERT INTO intents (intent_id, host_id, rollout_id, envelope, status, is_current, confirm_deadline, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, 1, $6, $7, $7)",
        &[
            &new.intent_id.to_string(),
            &new.host_id.to_string(),
            &new.rollout_id.as_str(),
            &new.envelope,
            &IntentStatus::Wanted.as_str(),
            &new.confirm_deadline.map(Time::unix),
            &at,
        ],
    )
    .db()?;
    intent_by_id(c, new.intent_id)?.ok_or_else(|| StoreError::not_found("intent", new.intent_id))
}

pub(crate) fn current_intent(c: &mut Transaction<'_>, host_id: Uuid) -> Result<Option<IntentRecord>, StoreError> {
    let sql = format!("SELECT {INTENT_COLS} FROM intents WHERE host_id = $1 AND is_current = 1");
    c.query_typed_opt(sql.as_str(), &[(&host_id.to_string(), Type::TEXT)]).db()?.map(|r| intent_row(&r)).transpose()
}

pub(crate) fn get_intent(c: &mut Transaction<'_>, host_id: Uuid, intent_id: Uuid) -> Result<Option<IntentRecord>, StoreError> {
    let sql = format!("SELECT {INTENT_COLS} FROM intents WHERE intent_id = $1 AND host_id = $2");
    c.query_opt(sql.as_str(), &[&intent_id.to_string(), &host_id.to_string()]).db()?.map(|r| intent_row(&r)).transpose()
}

pub(crate) fn set_intent_status(
    c: &mut Transaction<'_>,
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
    c.execute(
        "UPDATE intents SET status = $1, updated_at = $2 WHERE intent_id = $3 AND host_id = $4",
        &[&to.as_str(), &at.unix(), &intent_id.to_string(), &host_id.to_string()],
    )
    .db()?;
    get_intent(c, host_id, intent_id)?.ok_or_else(|| StoreError::not_found("intent", intent_id))
}

// ---- tasks --------------------------------------------------------------------------------

const TASK_COLS: &str = "task_id, host_id, job_id, envelope, created_at, state, lease_expires_at, attempts, result, completed_at";

fn task_row(r: &Row) -> Result<TaskRecord, StoreError> {
    let result = match col::<Option<String>>(r, 8)? {
        Some(_) => Some(json_col(r, 8)?),
        None => None,
    };
    Ok(TaskRecord {
        task: NewTask {
            task_id: uuid_col(r, 0)?,
            host_id: uuid_col(r, 1)?,
            job_id: opt_uuid_col(r, 2)?,
            envelope: col(r, 3)?,
            created_at: time_col(r, 4)?,
        },
        state: parse_col(r, 5)?,
        lease_expires_at: opt_time_col(r, 6)?,
        attempts: u32::try_from(col::<i64>(r, 7)?).map_err(|e| StoreError::backend(format!("tasks.attempts: {e}")))?,
        result,
        completed_at: opt_time_col(r, 9)?,
    })
}

pub(crate) fn get_task(c: &mut Transaction<'_>, task_id: Uuid) -> Result<Option<TaskRecord>, StoreError> {
    let sql = format!("SELECT {TASK_COLS} FROM tasks WHERE task_id = $1");
    c.query_opt(sql.as_str(), &[&task_id.to_string()]).db()?.map(|r| task_row(&r)).transpose()
}

pub(crate) fn enqueue_task(c: &mut Transaction<'_>, new: &NewTask) -> Result<bool, StoreError> {
    if let Some(stored) = get_task(c, new.task_id)? {
        let t = &stored.task;
        if t.host_id == new.host_id && t.job_id == new.job_id && t.envelope == new.envelope {
            return Ok(false);
        }
        return Err(StoreError::conflict("task", new.task_id, "already queued with other content"));
    }
    require_host(c, new.host_id)?;
    if let Some(job_id) = new.job_id {
        let exists = c.query_opt("SELECT 1 FROM jobs WHERE job_id = $1", &[&job_id.to_string()]).db()?.is_some();
        if !exists {
            return Err(StoreError::not_found("job", job_id));
        }
    }
    c.execute(
        "INSERT INTO tasks (task_id, host_id, job_id, envelope, state, created_at, attempts) VALUES ($1, $2, $3, $4, 'queued', $5, 0)",
        &[&new.task_id.to_string(), &new.host_id.to_string(), &new.job_id.map(|j| j.to_string()), &new.envelope, &new.created_at.unix()],
    )
    .db()?;
    Ok(true)
}

/// Whether the host has a task to lease now (queued, or with a lapsed lease).
pub(crate) fn has_leasable_task(c: &mut Transaction<'_>, host_id: Uuid, now: Time) -> Result<bool, StoreError> {
    // Typed: one round trip (asked before every lease).
    let row = c
        .query_typed_one(
            "SELECT EXISTS (SELECT 1 FROM tasks
             WHERE host_id = $1 AND (state = 'queued' OR (state = 'leased' AND lease_expires_at <= $2)))",
            &[(&host_id.to_string(), Type::TEXT), (&now.unix(), Type::INT8)],
        )
        .db()?;
    col(&row, 0)
}

pub(crate) fn lease_tasks(
    c: &mut Transaction<'_>,
    host_id: Uuid,
    now: Time,
    lease_secs: u64,
    max: u32,
) -> Result<Vec<TaskRecord>, StoreError> {
    if max == 0 {
        return Ok(Vec::new());
    }
    let until = now.plus_secs(lease_secs).unix();
    // One statement: pick the leasable tasks in order and lease them, returning the rows as
    // they now stand.
    let sql = format!(
        "WITH picked AS (
             SELECT task_id FROM tasks
             WHERE host_id = $1 AND (state = 'queued' OR (state = 'leased' AND lease_expires_at <= $2))
             ORDER BY created_at, task_id LIMIT $3)
         UPDATE tasks SET state = 'leased', lease_expires_at = $4, attempts = attempts + 1
         FROM picked WHERE tasks.task_id = picked.task_id
         RETURNING {}",
        TASK_COLS.split(", ").map(|c| format!("tasks.{c}")).collect::<Vec<_>>().join(", ")
    );
    let mut out: Vec<TaskRecord> = c
        .query(sql.as_str(), &[&host_id.to_string(), &now.unix(), &page(max), &until])
        .db()?
        .iter()
        .map(task_row)
        .collect::<Result<_, _>>()?;
    out.sort_by_key(|a| (a.task.created_at, a.task.task_id));
    Ok(out)
}

/// Completes a task; the flag says whether a secret was erased from its envelope.
pub(crate) fn complete_task(
    c: &mut Transaction<'_>,
    host_id: Uuid,
    task_id: Uuid,
    result: &Value,
    now: Time,
) -> Result<(TaskRecord, bool), StoreError> {
    let sql = format!("SELECT {TASK_COLS} FROM tasks WHERE task_id = $1 AND host_id = $2");
    let stored = c
        .query_opt(sql.as_str(), &[&task_id.to_string(), &host_id.to_string()])
        .db()?
        .map(|r| task_row(&r))
        .transpose()?
        .ok_or_else(|| StoreError::not_found("task", task_id))?;
    if stored.state == TaskState::Completed {
        if stored.result.as_ref() == Some(result) {
            return Ok((stored, false));
        }
        return Err(StoreError::conflict("task", task_id, "already completed with another result"));
    }
    c.execute(
        "UPDATE tasks SET state = 'completed', lease_expires_at = NULL, result = $1, completed_at = $2 WHERE task_id = $3",
        &[&result.to_string(), &now.unix(), &task_id.to_string()],
    )
    .db()?;
    // Acknowledged: secrets the task carried (a MAAS token) are not kept any longer.
    let erased = drover_store::erase::erase_task_secrets(&stored.task.envelope);
    if let Some(erased) = &erased {
        c.execute("UPDATE tasks SET envelope = $1 WHERE task_id = $2", &[erased, &task_id.to_string()]).db()?;
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

pub(crate) fn requeue_expired(c: &mut Transaction<'_>, now: Time) -> Result<u64, StoreError> {
    c.execute(
        "UPDATE tasks SET state = 'queued', lease_expires_at = NULL WHERE state = 'leased' AND lease_expires_at <= $1",
        &[&now.unix()],
    )
    .db()
}

pub(crate) fn list_tasks(c: &mut Transaction<'_>, f: &TaskFilter) -> Result<Vec<TaskRecord>, StoreError> {
    let sql = format!(
        "SELECT {TASK_COLS} FROM tasks
         WHERE ($1::TEXT IS NULL OR host_id = $1) AND ($2::TEXT IS NULL OR job_id = $2) AND ($3::TEXT IS NULL OR state = $3)
         ORDER BY created_at, task_id"
    );
    let rows = c
        .query(sql.as_str(), &[&f.host_id.map(|h| h.to_string()), &f.job_id.map(|j| j.to_string()), &f.state.map(TaskState::as_str)])
        .db()?;
    rows.iter().map(task_row).collect()
}
