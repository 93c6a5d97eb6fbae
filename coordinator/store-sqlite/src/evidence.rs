//! SQLite side of [`drover_store::evidence_records`]: host keys on the `hosts` row, evidence
//! in its own append-only table.

use rusqlite::{Connection, OptionalExtension as _, Row, params};
use uuid::Uuid;

use super::{DbResult, opt_uuid_col, time_col, uuid_col};
use drover_store::{EvidenceFilter, EvidenceRecord, HostKeys, NewEvidence, StoreError};

pub(super) fn set_host_keys(c: &Connection, host_id: Uuid, keys: &HostKeys) -> Result<(), StoreError> {
    c.prepare_cached("UPDATE hosts SET seal_key = ?1, evidence_cert = ?2 WHERE id = ?3")
        .db()?
        .execute(params![keys.seal_key, keys.evidence_cert, host_id.to_string()])
        .db()?;
    Ok(())
}

pub(super) fn host_keys(c: &Connection, host_id: Uuid) -> Result<HostKeys, StoreError> {
    c.prepare_cached("SELECT seal_key, evidence_cert FROM hosts WHERE id = ?1")
        .db()?
        .query_row([host_id.to_string()], |r| Ok(HostKeys { seal_key: r.get(0)?, evidence_cert: r.get(1)? }))
        .optional()
        .db()?
        .ok_or_else(|| StoreError::not_found("host", host_id))
}

pub(super) fn put_evidence(c: &Connection, e: &NewEvidence) -> Result<i64, StoreError> {
    c.prepare_cached(
        "INSERT INTO evidence (host_id, task_id, job_id, kind, signed_at, received_at, document) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )
    .db()?
    .execute(params![
        e.host_id.to_string(),
        e.task_id.map(|t| t.to_string()),
        e.job_id.map(|j| j.to_string()),
        e.kind,
        e.signed_at.unix(),
        e.received_at.unix(),
        e.document
    ])
    .db()?;
    Ok(c.last_insert_rowid())
}

fn evidence_row(r: &Row<'_>) -> rusqlite::Result<EvidenceRecord> {
    Ok(EvidenceRecord {
        seq: r.get(0)?,
        evidence: NewEvidence {
            host_id: uuid_col(r, 1)?,
            task_id: opt_uuid_col(r, 2)?,
            job_id: opt_uuid_col(r, 3)?,
            kind: r.get(4)?,
            signed_at: time_col(r, 5)?,
            received_at: time_col(r, 6)?,
            document: r.get(7)?,
        },
    })
}

pub(super) fn list_evidence(c: &Connection, f: &EvidenceFilter) -> Result<Vec<EvidenceRecord>, StoreError> {
    let mut sql = String::from("SELECT seq, host_id, task_id, job_id, kind, signed_at, received_at, document FROM evidence WHERE seq > ?1");
    let mut args: Vec<String> = vec![f.after.unwrap_or(0).to_string()];
    for (column, value) in [("host_id", f.host_id), ("job_id", f.job_id), ("task_id", f.task_id)] {
        if let Some(v) = value {
            args.push(v.to_string());
            sql.push_str(&format!(" AND {column} = ?{}", args.len()));
        }
    }
    sql.push_str(&format!(" ORDER BY seq LIMIT {}", f.limit.min(10_000)));
    let mut stmt = c.prepare_cached(&sql).db()?;
    let rows = stmt.query_map(rusqlite::params_from_iter(args.iter()), evidence_row).db()?;
    rows.collect::<Result<_, _>>().db()
}
