//! Events and audit records in SQLite: append-only, paged by their never-reused ids.
//!
//! Paging by id rather than by offset keeps pages stable while rows are appended: a reader
//! that continues "after id N" never sees a row twice or skips one, however much was written
//! in between.

use rusqlite::{Connection, Row, params};

use super::*;

/// Appends an event; also the helper every transition uses inside its own transaction.
pub(super) fn insert_event(c: &Connection, e: &NewEvent) -> Result<i64, StoreError> {
    c.prepare_cached("INSERT INTO events (at, kind, host_id, rollout_id, job_id, message, data) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)")
        .db()?
        .execute(params![
            e.at.unix(),
            e.kind,
            e.host_id.map(|h| h.to_string()),
            e.rollout_id.as_ref().map(|r| r.as_str().to_owned()),
            e.job_id.map(|j| j.to_string()),
            e.message,
            e.data.to_string()
        ])
        .db()?;
    Ok(c.last_insert_rowid())
}

fn event_row(r: &Row<'_>) -> rusqlite::Result<Event> {
    let rollout_id = match r.get::<_, Option<String>>(4)? {
        Some(_) => Some(rollout_col(r, 4)?),
        None => None,
    };
    Ok(Event {
        id: r.get(0)?,
        event: NewEvent {
            at: time_col(r, 1)?,
            kind: r.get(2)?,
            host_id: opt_uuid_col(r, 3)?,
            rollout_id,
            job_id: opt_uuid_col(r, 5)?,
            message: r.get(6)?,
            data: json_col(r, 7)?,
        },
    })
}

pub(super) fn list_events(c: &Connection, f: &EventFilter) -> Result<Vec<Event>, StoreError> {
    let limit = page(f.limit);
    // Fixed SQL with "?n IS NULL OR" guards: one cached statement serves every filter mix.
    let mut stmt = c
        .prepare_cached(
            "SELECT id, at, kind, host_id, rollout_id, job_id, message, data FROM events
         WHERE (?1 IS NULL OR host_id = ?1) AND (?2 IS NULL OR rollout_id = ?2) AND (?3 IS NULL OR job_id = ?3)
           AND (?4 IS NULL OR kind = ?4) AND id > ?5
         ORDER BY id LIMIT ?6",
        )
        .db()?;
    let rows = stmt
        .query_map(
            params![
                f.host_id.map(|h| h.to_string()),
                f.rollout_id.as_ref().map(|r| r.as_str().to_owned()),
                f.job_id.map(|j| j.to_string()),
                f.kind,
                f.after_id.unwrap_or(0),
                limit
            ],
            event_row,
        )
        .db()?;
    rows.collect::<Result<_, _>>().db()
}

pub(super) fn insert_audit(c: &Connection, a: &NewAudit) -> Result<i64, StoreError> {
    c.prepare_cached(
        "INSERT INTO audit (at, actor, role, action, target, reason, prior_state, expected_state)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )
    .db()?
    .execute(params![a.at.unix(), a.actor, a.role, a.action, a.target, a.reason, a.prior_state, a.expected_state])
    .db()?;
    Ok(c.last_insert_rowid())
}

pub(super) fn list_audit(c: &Connection, f: &AuditFilter) -> Result<Vec<AuditRecord>, StoreError> {
    let limit = page(f.limit);
    let mut stmt = c
        .prepare_cached(
            "SELECT id, at, actor, role, action, target, reason, prior_state, expected_state FROM audit
         WHERE (?1 IS NULL OR actor = ?1) AND (?2 IS NULL OR target = ?2) AND id > ?3
         ORDER BY id LIMIT ?4",
        )
        .db()?;
    let rows = stmt
        .query_map(params![f.actor, f.target, f.after_id.unwrap_or(0), limit], |r| {
            Ok(AuditRecord {
                id: r.get(0)?,
                audit: NewAudit {
                    at: time_col(r, 1)?,
                    actor: r.get(2)?,
                    role: r.get(3)?,
                    action: r.get(4)?,
                    target: r.get(5)?,
                    reason: r.get(6)?,
                    prior_state: r.get(7)?,
                    expected_state: r.get(8)?,
                },
            })
        })
        .db()?;
    rows.collect::<Result<_, _>>().db()
}
