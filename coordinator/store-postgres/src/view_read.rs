//! A check-in view read from PostgreSQL in one round trip: the path a check-in takes when its
//! replica's cache ([`super::view_cache`]) cannot answer — the first check-in after anything
//! about its host changed.
//!
//! Read as four statements in a `REPEATABLE READ` transaction it cost seven round trips (the
//! pool's liveness check, `BEGIN`, four statements each parsed and planned afresh, `COMMIT`),
//! about thirty times SQLite's CPU per check-in with the database's. Here it is one statement —
//! the host, its current intent and its report joined on the host id, and its tasks summed in a
//! lateral subquery — which sees one snapshot on its own, so no transaction is opened; and it
//! is prepared once per pooled connection (kept in the connection's r2d2 extensions), so each
//! check-in only binds and executes it, and PostgreSQL plans it once: 7.4 times SQLite's CPU
//! per check-in, down from 31 (`BENCHMARKS.md`).

use r2d2_postgres::postgres::Statement;
use r2d2_postgres::postgres::types::Type;
use uuid::Uuid;

use super::cols::col;
use super::hosts::{HOST_COLS, host_row_at};
use super::plans::report_row;
use super::view_cache::CachedView;
use super::work::{INTENT_COLS, intent_row_at};
use super::{Manager, PgStore};
use crate::DbResult;
use drover_store::StoreError;

/// Where each part starts in the row: the host's 10 columns, the intent's 9, the report's 3,
/// then whether a task is queued and the earliest lease's lapse.
const HOST_AT: usize = 0;
const INTENT_AT: usize = 10;
const REPORT_AT: usize = 19;
const TASKS_AT: usize = 22;

/// The statement: every part is a left join on the asked id, so a missing host, intent or
/// report is a row of NULLs, never no row.
fn sql() -> String {
    let prefixed = |alias: &str, cols: &str| cols.split(", ").map(|c| format!("{alias}.{c}")).collect::<Vec<_>>().join(", ");
    format!(
        "SELECT {}, {}, r.failed_units, r.probes, r.activation, t.queued, t.lapses
         FROM (SELECT $1::TEXT AS id) k
         LEFT JOIN hosts h ON h.id = k.id
         LEFT JOIN intents i ON i.host_id = k.id AND i.is_current = 1
         LEFT JOIN host_reports r ON r.host_id = k.id
         CROSS JOIN LATERAL (
             SELECT COALESCE(bool_or(state = 'queued'), false) AS queued, MIN(lease_expires_at) AS lapses
             FROM tasks WHERE host_id = k.id AND state IN ('queued', 'leased')
         ) t",
        prefixed("h", HOST_COLS),
        prefixed("i", INTENT_COLS)
    )
}

/// The statement as prepared on one connection.
struct Prepared(Statement);

impl PgStore {
    /// `host_id`'s check-in view as the database holds it now.
    pub(crate) fn read_view(&self, host_id: Uuid) -> Result<CachedView, StoreError> {
        let mut conn = self.conn()?;
        let statement = prepared(&mut conn)?;
        let row = conn.query_one(&statement, &[&host_id.to_string()]).db()?;
        let present = |at: usize| col::<Option<String>>(&row, at).map(|v| v.is_some());
        let queued: bool = col(&row, TASKS_AT)?;
        let lapses: Option<i64> = col(&row, TASKS_AT + 1)?;
        Ok(CachedView {
            host: if present(HOST_AT)? { Some(host_row_at(&row, HOST_AT)?) } else { None },
            intent: if present(INTENT_AT)? { Some(intent_row_at(&row, INTENT_AT)?) } else { None },
            leasable_from: if queued { Some(i64::MIN) } else { lapses },
            report: if col::<Option<i64>>(&row, REPORT_AT)?.is_some() { Some(report_row(&row, REPORT_AT)?) } else { None },
        })
    }
}

/// The statement prepared on `conn`, preparing it the first time this connection is asked.
fn prepared(conn: &mut r2d2::PooledConnection<Manager>) -> Result<Statement, StoreError> {
    if let Some(Prepared(statement)) = r2d2::PooledConnection::extensions(conn).get::<Prepared>() {
        return Ok(statement.clone());
    }
    let statement = conn.prepare_typed(&sql(), &[Type::TEXT]).db()?;
    r2d2::PooledConnection::extensions_mut(conn).insert(Prepared(statement.clone()));
    Ok(statement)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offsets_match_the_column_lists() {
        assert_eq!(HOST_COLS.split(", ").count(), INTENT_AT - HOST_AT);
        assert_eq!(INTENT_COLS.split(", ").count(), REPORT_AT - INTENT_AT);
        assert_eq!(TASKS_AT - REPORT_AT, 3, "failed_units, probes, activation");
        let sql = sql();
        assert!(sql.contains("h.id, h.hostname") && sql.contains("i.intent_id, i.host_id"), "{sql}");
    }
}
