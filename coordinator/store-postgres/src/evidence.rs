//! PostgreSQL side of [`drover_store::evidence_records`], as `store-sqlite/src/evidence.rs`: host keys on
//! the `hosts` row, evidence in its own append-only table.

use uuid::Uuid;

use super::cols::{col, opt_uuid_col, time_col, uuid_col};
use super::postgres::types::ToSql;
use super::postgres::{Row, Transaction};
use crate::DbResult;
use drover_store::{EvidenceFilter, EvidenceRecord, HostKeys, NewEvidence, StoreError};

pub(crate) fn set_host_keys(c: &mut Transaction<'_>, host_id: Uuid, keys: &HostKeys) -> Result<(), StoreError> {
    c.execute(
        "UPDATE hosts SET seal_key = $1, evidence_cert = $2 WHERE id = $3",
        &[&keys.seal_key, &keys.evidence_cert, &host_id.to_string()],
    )
    .db()?;
    Ok(())
}

pub(crate) fn host_keys(c: &mut Transaction<'_>, host_id: Uuid) -> Result<HostKeys, StoreError> {
    let row = c
        .query_opt("SELECT seal_key, evidence_cert FROM hosts WHERE id = $1", &[&host_id.to_string()])
        .db()?
        .ok_or_else(|| StoreError::not_found("host", host_id))?;
    Ok(HostKeys { seal_key: col(&row, 0)?, evidence_cert: col(&row, 1)? })
}

pub(crate) fn put_evidence(c: &mut Transaction<'_>, e: &NewEvidence) -> Result<i64, StoreError> {
    let row = c
        .query_one(
            "INSERT INTO evidence (host_id, task_id, job_id, kind, signed_at, received_at, document)
         VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING seq",
            &[
                &e.host_id.to_string(),
                &e.task_id.map(|t| t.to_string()),
                &e.job_id.map(|j| j.to_string()),
                &e.kind,
                &e.signed_at.unix(),
                &e.received_at.unix(),
                &e.document,
            ],
        )
        .db()?;
    col(&row, 0)
}

fn evidence_row(r: &Row) -> Result<EvidenceRecord, StoreError> {
    Ok(EvidenceRecord {
        seq: col(r, 0)?,
        evidence: NewEvidence {
            host_id: uuid_col(r, 1)?,
            task_id: opt_uuid_col(r, 2)?,
            job_id: opt_uuid_col(r, 3)?,
            kind: col(r, 4)?,
            signed_at: time_col(r, 5)?,
            received_at: time_col(r, 6)?,
            document: col(r, 7)?,
        },
    })
}

pub(crate) fn list_evidence(c: &mut Transaction<'_>, f: &EvidenceFilter) -> Result<Vec<EvidenceRecord>, StoreError> {
    let after: i64 = f.after.unwrap_or(0);
    let limit = i64::try_from(f.limit.min(10_000)).unwrap_or(10_000);
    let ids: Vec<Option<String>> = [f.host_id, f.job_id, f.task_id].iter().map(|v| v.map(|v| v.to_string())).collect();
    let params: [&(dyn ToSql + Sync); 5] = [&after, &ids[0], &ids[1], &ids[2], &limit];
    let rows = c
        .query(
            "SELECT seq, host_id, task_id, job_id, kind, signed_at, received_at, document FROM evidence
         WHERE seq > $1 AND ($2::TEXT IS NULL OR host_id = $2) AND ($3::TEXT IS NULL OR job_id = $3)
           AND ($4::TEXT IS NULL OR task_id = $4)
         ORDER BY seq LIMIT $5",
            &params,
        )
        .db()?;
    rows.iter().map(evidence_row).collect()
}
