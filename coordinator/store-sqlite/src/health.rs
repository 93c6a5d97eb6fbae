//! Each host's latest health report in SQLite (`host_health`, one row per host).
//!
//! The report is kept as the JSON the coordinator built from the agent's check-in: the store
//! does not interpret it, only replaces it (a later report never loses to an earlier one).

use rusqlite::{Connection, OptionalExtension, params};

use super::*;

pub(super) fn record_host_health(c: &Connection, batch: &[HostHealth]) -> Result<u64, StoreError> {
    let mut stmt = c
        .prepare_cached(
            "INSERT INTO host_health (host_id, reported_at, report) SELECT ?1, ?2, ?3 WHERE EXISTS (SELECT 1 FROM hosts WHERE id = ?1) \
         ON CONFLICT (host_id) DO UPDATE SET reported_at = excluded.reported_at, report = excluded.report \
         WHERE excluded.reported_at >= host_health.reported_at",
        )
        .db()?;
    let mut n = 0;
    for h in batch {
        n += stmt.execute(params![h.host_id.to_string(), h.reported_at.unix(), h.report]).db()? as u64;
    }
    Ok(n)
}

pub(super) fn host_health(c: &Connection, host_id: Uuid) -> Result<Option<HostHealth>, StoreError> {
    let row = c
        .prepare_cached("SELECT reported_at, report FROM host_health WHERE host_id = ?1")
        .db()?
        .query_row([host_id.to_string()], |r| Ok((time_col(r, 0)?, r.get::<_, String>(1)?)))
        .optional()
        .db()?;
    Ok(row.map(|(reported_at, report)| HostHealth { host_id, reported_at, report }))
}
