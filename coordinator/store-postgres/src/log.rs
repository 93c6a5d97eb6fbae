//! Events and audit records in PostgreSQL: append-only, paged by their never-reused identity
//! ids, as in SQLite (`store-sqlite/src/log.rs`).

use super::cols::{col, json_col, opt_uuid_col, page, rollout_col, time_col};
use super::postgres::{Row, Transaction};
use crate::DbResult;
use drover_store::{AuditFilter, AuditRecord, Event, EventFilter, NewAudit, NewEvent, StoreError};

/// Appends an event; also the helper every transition uses inside its own transaction.
pub(crate) fn insert_event(c: &mut Transaction<'_>, e: &NewEvent) -> Result<i64, StoreError> {
    let row = c
        .query_one(
            "INSERT INTO events (at, kind, host_id, rollout_id, job_id, message, data) VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
            &[
                &e.at.unix(),
                &e.kind,
                &e.host_id.map(|h| h.to_string()),
                &e.rollout_id.as_ref().map(|r| r.as_str().to_owned()),
                &e.job_id.map(|j| j.to_string()),
                &e.message,
                &e.data.to_string(),
            ],
        )
        .db()?;
    col(&row, 0)
}

fn event_row(r: &Row) -> Result<Event, StoreError> {
    let rollout_id = match col::<Option<String>>(r, 4)? {
        Some(_) => Some(rollout_col(r, 4)?),
        None => None,
    };
    Ok(Event {
        id: col(r, 0)?,
        event: NewEvent {
            at: time_col(r, 1)?,
            kind: col(r, 2)?,
            host_id: opt_uuid_col(r, 3)?,
            rollout_id,
            job_id: opt_uuid_col(r, 5)?,
            message: col(r, 6)?,
            data: json_col(r, 7)?,
        },
    })
}

pub(crate) fn list_events(c: &mut Transaction<'_>, f: &EventFilter) -> Result<Vec<Event>, StoreError> {
    // Fixed SQL with "$n IS NULL OR" guards, typed so a NULL parameter still has a type.
    let rows = c
        .query(
            "SELECT id, at, kind, host_id, rollout_id, job_id, message, data FROM events
         WHERE ($1::TEXT IS NULL OR host_id = $1) AND ($2::TEXT IS NULL OR rollout_id = $2) AND ($3::TEXT IS NULL OR job_id = $3)
           AND ($4::TEXT IS NULL OR kind = $4) AND id > $5
         ORDER BY id LIMIT $6",
            &[
                &f.host_id.map(|h| h.to_string()),
                &f.rollout_id.as_ref().map(|r| r.as_str().to_owned()),
                &f.job_id.map(|j| j.to_string()),
                &f.kind,
                &f.after_id.unwrap_or(0),
                &page(f.limit),
            ],
        )
        .db()?;
    rows.iter().map(event_row).collect()
}

pub(crate) fn insert_audit(c: &mut Transaction<'_>, a: &NewAudit) -> Result<i64, StoreError> {
    let row = c
        .query_one(
            "INSERT INTO audit (at, actor, role, action, target, reason, prior_state, expected_state)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id",
            &[&a.at.unix(), &a.actor, &a.role, &a.action, &a.target, &a.reason, &a.prior_state, &a.expected_state],
        )
        .db()?;
    col(&row, 0)
}

pub(crate) fn list_audit(c: &mut Transaction<'_>, f: &AuditFilter) -> Result<Vec<AuditRecord>, StoreError> {
    let rows = c
        .query(
            "SELECT id, at, actor, role, action, target, reason, prior_state, expected_state FROM audit
         WHERE ($1::TEXT IS NULL OR actor = $1) AND ($2::TEXT IS NULL OR target = $2) AND id > $3
         ORDER BY id LIMIT $4",
            &[&f.actor, &f.target, &f.after_id.unwrap_or(0), &page(f.limit)],
        )
        .db()?;
    rows.iter()
        .map(|r| {
            Ok(AuditRecord {
                id: col(r, 0)?,
                audit: NewAudit {
                    at: time_col(r, 1)?,
                    actor: col(r, 2)?,
                    role: col(r, 3)?,
                    action: col(r, 4)?,
                    target: col(r, 5)?,
                    reason: col(r, 6)?,
                    prior_state: col(r, 7)?,
                    expected_state: col(r, 8)?,
                },
            })
        })
        .collect()
}
