//! The leader lease for coordinator replicas on one PostgreSQL database: one
//! replica at a time runs the rollout executor, the job engine, the sweeps and reconcilers.
//!
//! A lease is a row (`leader_lease`: name, holder, fencing token, expiry). Taking or renewing
//! it is one statement that succeeds only while the row is free, expired or already ours;
//! every change of holder raises the **fencing token**. The expiry is measured on the
//! database's clock, so replicas whose clocks disagree still agree on who leads.
//!
//! The token is what makes a lost lease safe: a leader's writes run in its term
//! ([`drover_store::fence`]; [`PgStore::fenced_write`] for one write), and every such write
//! locks the lease row and checks, inside the same
//! transaction, that the token is still the current one and unexpired. A leader paused past its
//! lease (a stalled VM, a SIGSTOP, a long GC) and resumed cannot commit anything: its
//! transaction finds a newer token and fails with [`StoreError::NotLeader`]; a takeover that
//! races an in-flight leader transaction waits on the row lock until that transaction ends, so
//! the new leader's first read already sees the old leader's last write.
//!
//! A replica also stops leading on its own clock before the database would let another take
//! over: [`leads_until`] is the instant it must stop, counted from when it *sent* the renewal
//! that succeeded, less a margin.

use std::time::{Duration, Instant};

use super::cols::col;
use super::{PgStore, postgres};
use crate::DbResult;
use drover_store::StoreError;
use drover_store::fence::Fence;

/// The database's clock in milliseconds since the epoch, as SQL.
const DB_NOW_MS: &str = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

/// A lease as the database holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// Which lease (`executor`).
    pub name: String,
    /// The replica holding it.
    pub holder: String,
    /// Raised on every change of holder; a leader's writes carry it.
    pub token: i64,
    /// When it lapses, database clock, milliseconds since the epoch.
    pub expires_at_ms: i64,
}

fn ttl_ms(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX)
}

impl PgStore {
    /// Takes lease `name` for `holder` for `ttl`, or renews it if `holder` has it: `Some`
    /// with the lease when this replica holds it now, `None` when another replica holds an
    /// unexpired one. The token rises only when the holder changes.
    pub fn acquire_lease(&self, name: &str, holder: &str, ttl: Duration) -> Result<Option<Lease>, StoreError> {
        let sql = format!(
            "INSERT INTO leader_lease AS l (name, holder, token, expires_at_ms) VALUES ($1, $2, 1, {DB_NOW_MS} + $3)
             ON CONFLICT (name) DO UPDATE SET
                 holder = EXCLUDED.holder,
                 token = l.token + CASE WHEN l.holder = EXCLUDED.holder THEN 0 ELSE 1 END,
                 expires_at_ms = EXCLUDED.expires_at_ms
             WHERE l.holder = EXCLUDED.holder OR l.expires_at_ms <= {DB_NOW_MS}
             RETURNING token, expires_at_ms"
        );
        let row = self.write_concurrently(|tx| tx.query_opt(sql.as_str(), &[&name, &holder, &ttl_ms(ttl)]).db())?;
        row.map(|r| Ok(Lease { name: name.to_owned(), holder: holder.to_owned(), token: col(&r, 0)?, expires_at_ms: col(&r, 1)? }))
            .transpose()
    }

    /// Gives `lease` up at once (a replica shutting down), so another takes over without
    /// waiting for it to lapse; `false` when it was no longer ours, or had lapsed already.
    pub fn release_lease(&self, lease: &Lease) -> Result<bool, StoreError> {
        let sql = format!(
            "UPDATE leader_lease SET expires_at_ms = 0 WHERE name = $1 AND holder = $2 AND token = $3 AND expires_at_ms > {DB_NOW_MS}"
        );
        let n = self.write_concurrently(|tx| tx.execute(sql.as_str(), &[&lease.name, &lease.holder, &lease.token]).db())?;
        Ok(n == 1)
    }

    /// Lease `name` as the database holds it (expired or not).
    pub fn current_lease(&self, name: &str) -> Result<Option<Lease>, StoreError> {
        let row = self.read(|tx| tx.query_opt("SELECT holder, token, expires_at_ms FROM leader_lease WHERE name = $1", &[&name]).db())?;
        row.map(|r| Ok(Lease { name: name.to_owned(), holder: col(&r, 0)?, token: col(&r, 1)?, expires_at_ms: col(&r, 2)? })).transpose()
    }

    /// How long until lease `name` lapses unless renewed (zero when it has), on the
    /// database's clock; `None` when there is no such lease.
    pub fn lease_remaining(&self, name: &str) -> Result<Option<Duration>, StoreError> {
        let sql = format!("SELECT expires_at_ms - {DB_NOW_MS} FROM leader_lease WHERE name = $1");
        let row = self.read(|tx| tx.query_opt(sql.as_str(), &[&name]).db())?;
        row.map(|r| col::<i64>(&r, 0).map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0)))).transpose()
    }

    /// The database's clock, milliseconds since the epoch (leases are measured on it).
    pub fn database_now_ms(&self) -> Result<i64, StoreError> {
        self.read(|tx| col(&tx.query_one(format!("SELECT {DB_NOW_MS}").as_str(), &[]).db()?, 0))
    }

    /// [`PgStore::write`] as the holder of `lease`: the transaction first locks the lease row
    /// and checks that `lease`'s token is current and unexpired, else fails with
    /// [`StoreError::NotLeader`] having written nothing. The lock keeps a takeover from
    /// committing until this transaction has.
    pub fn fenced_write<T>(
        &self,
        lease: &Lease,
        f: impl FnMut(&mut postgres::Transaction<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        drover_store::fence::on_thread(Some(lease.fence()), || self.write(f))
    }
}

impl Lease {
    /// The term this lease makes: what leader work carries and its writes are checked against.
    pub fn fence(&self) -> Fence {
        Fence { lease: self.name.clone(), holder: self.holder.clone(), token: self.token }
    }
}

/// Fails with [`StoreError::NotLeader`] unless `term`'s token is the lease's current one and
/// unexpired on the database's clock; the row stays locked `FOR SHARE` until `tx` ends, so a
/// takeover (which updates it) waits for this transaction.
pub(super) fn check_term(tx: &mut postgres::Transaction<'_>, term: &Fence) -> Result<(), StoreError> {
    let check = format!("SELECT token, expires_at_ms > {DB_NOW_MS} FROM leader_lease WHERE name = $1 AND holder = $2 FOR SHARE");
    let row = tx.query_opt(check.as_str(), &[&term.lease, &term.holder]).db()?;
    let held = row.map(|r| Ok::<_, StoreError>((col::<i64>(&r, 0)?, col::<bool>(&r, 1)?))).transpose()?;
    match held {
        Some((token, true)) if token == term.token => Ok(()),
        _ => Err(StoreError::NotLeader { lease: term.lease.clone(), token: term.token }),
    }
}

/// Until when a replica may act as leader: the moment it sent the renewal that succeeded,
/// plus the lease's time to live, less `margin` for the clocks' drift over one lease and the
/// time an in-flight write may still take. After it, the replica stops leading even if it
/// cannot reach the database to learn whether another has taken over.
pub fn leads_until(renewal_sent: Instant, ttl: Duration, margin: Duration) -> Instant {
    renewal_sent + ttl.saturating_sub(margin)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_stops_leading_before_its_lease_can_lapse() {
        let sent = Instant::now();
        let ttl = Duration::from_secs(10);
        assert_eq!(leads_until(sent, ttl, Duration::from_secs(2)), sent + Duration::from_secs(8));
        // A margin as long as the lease means never leading on it, not leading forever.
        assert_eq!(leads_until(sent, ttl, Duration::from_secs(30)), sent);
    }
}
