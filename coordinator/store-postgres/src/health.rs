//! Each host's latest health report in PostgreSQL (`host_health`), as `store-sqlite/src/health.rs`: the
//! store keeps the JSON and only replaces it with a report at least as new.

use uuid::Uuid;

use super::cols::{col, time_col};
use super::postgres::Transaction;
use crate::DbResult;
use drover_store::{HostHealth, StoreError};

pub(crate) fn record_host_health(c: &mut Transaction<'_>, batch: &[HostHealth]) -> Result<u64, StoreError> {
    let stmt = c.prepare(
        "INSERT INTO host_health (host_id, reported_at, report) SELECT $1::TEXT, $2::BIGINT, $3::TEXT WHERE EXISTS (SELECT 1 FROM hosts WHERE id = $1) \
         ON CONFLICT (host_id) DO UPDATE SET reported_at = excluded.reported_at, report = excluded.report \
         WHERE excluded.reported_at >= host_health.reported_at",
    ).db()?;
    let mut n = 0;
    for h in batch {
        n += c.execute(&stmt, &[&h.host_id.to_string(), &h.reported_at.unix(), &h.report]).db()?;
    }
    Ok(n)
}

pub(crate) fn host_health(c: &mut Transaction<'_>, host_id: Uuid) -> Result<Option<HostHealth>, StoreError> {
    let row = c.query_opt("SELECT reported_at, report FROM host_health WHERE host_id = $1", &[&host_id.to_string()]).db()?;
    row.map(|r| Ok(HostHealth { host_id, reported_at: time_col(&r, 0)?, report: col(&r, 1)? })).transpose()
}
