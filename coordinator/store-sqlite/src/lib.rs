//! The SQLite backend of the Drover coordinator's store (the crate `drover-store-sqlite`):
//! [`SqliteStore`] implements `drover_store::Store` over one WAL-mode SQLite file in the state
//! dir, with the SQL migrations of `migrations/` embedded and applied at open; [`backup`] is
//! online backup and restore of that file.
//!
//! Connections: one writer behind a `Mutex`, plus a small pool of read-only connections.
//! SQLite admits one writer at a time anyway, so serialising writes in-process costs nothing
//! and makes every write transaction `BEGIN IMMEDIATE` without busy retries; WAL lets readers
//! run beside the writer on their own snapshots, so check-in reads never queue behind a
//! rollout's writes. A full pool crate would buy nothing over this.
//!
//! Durability: `synchronous=NORMAL` in WAL mode can lose the last transactions on power loss
//! but never corrupts the file — acceptable because agents re-report and the reconciler
//! re-derives actions from state (DESIGN: a cold start converges to the same actions).
//!
//! Private submodules hold the SQL by concern: `hosts` (hosts, tokens, certificates),
//! `releases` (releases, manifests, rollouts, per-host rollout state), `work` (intents, tasks),
//! `jobs` (jobs, job steps, maintenance requests), `log` (events, audit), `sites` (MAAS sites,
//! profiles, power-credential overrides, RoCE assignments), `bindings` (hosts bound to MAAS machines).
//!
//! The conformance suite every backend passes (the crate `drover-store-conformance`) runs on
//! this one in `tests/store_sqlite.rs`.

#![forbid(unsafe_code)]

pub mod backup;
mod bindings;
mod evidence;
mod health;
mod hosts;
mod jobs;
mod log;
mod plans;
mod racks;
mod releases;
mod sites;
mod work;

use std::any::Any;
use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use drover_proto::names::RolloutId;
use drover_proto::release::ReleaseFiles;
use drover_proto::states::{HostLifecycle, HostRolloutState, JobState, RolloutState};
use drover_proto::time::Time;
use rusqlite::types::Type;
use rusqlite::{Connection, OpenFlags, Row, Transaction, TransactionBehavior};
use serde_json::Value;
use uuid::Uuid;

use drover_store::rules::{check_sha256, page};
use drover_store::*;

/// Migrations, in order; each runs once, in one transaction with its `schema_migrations` row.
const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("../migrations/0001_init.sql")),
    (2, include_str!("../migrations/0002_rollout_engine.sql")),
    (3, include_str!("../migrations/0003_maintenance.sql")),
    (4, include_str!("../migrations/0004_maas_sites.sql")),
    (5, include_str!("../migrations/0005_maas_bindings.sql")),
    (6, include_str!("../migrations/0006_maas_drift_ack.sql")),
    (7, include_str!("../migrations/0007_racks.sql")),
    (8, include_str!("../migrations/0008_device_control.sql")),
    (9, include_str!("../migrations/0009_host_keys_and_evidence.sql")),
    (10, include_str!("../migrations/0010_host_health.sql")),
    (11, include_str!("../migrations/0011_token_revocation.sql")),
];

/// The schema version this build writes; a file with a higher one is refused.
pub const SCHEMA_VERSION: i64 = 11;

/// How long a connection waits for another process's lock before failing: only a second
/// process on the same file (an operator's `sqlite3` shell, a backup) ever holds one.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Idle read connections kept open; more are opened on demand and closed after use.
const MAX_IDLE_READERS: usize = 8;

/// Free space below which the store reports itself not writable ([`Store::check_writable`]):
/// the WAL grows to about this much between checkpoints (SQLite's default of 1,000 pages of
/// 4 KiB), so with less room a burst of writes can fail before the next checkpoint.
pub const MIN_FREE_BYTES: u64 = 4 << 20;

/// The mode of the store's files, the database, its `-wal` and its `-shm`, as of the state
/// directory's keys: they hold every host's record, the audit log and, until erased, task
/// secrets. The directory around them is 0700 too, but a file is not to rely on the
/// directory it happens to be in (a backup is copied elsewhere, a restore may make the dir).
pub const STORE_FILE_MODE: u32 = drover_fsio::PRIVATE_FILE_MODE;

/// `db` with `suffix` appended: SQLite's `-wal` and `-shm` beside it.
pub(crate) fn sidecar(db: &Path, suffix: &str) -> PathBuf {
    let mut s = db.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// Makes the store's files [`STORE_FILE_MODE`] before SQLite opens them. SQLite creates a new
/// database 0644 (less the umask) and each `-wal` and `-shm` with the mode of the database
/// file, so the database is created here first, empty (SQLite takes an empty file for a new
/// database), with the mode set exactly; a store made by an older coordinator has its files
/// tightened, and says so.
fn make_store_files_private(db: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    let failed = |what: &str, p: &Path, e: std::io::Error| {
        StoreError::backend(std::io::Error::new(e.kind(), format!("{what} {}: {e}", p.display())))
    };
    match std::fs::OpenOptions::new().write(true).create_new(true).mode(STORE_FILE_MODE).open(db) {
        // The umask may have cleared bits of the mode (never added any): set it exactly.
        Ok(file) => {
            file.set_permissions(std::fs::Permissions::from_mode(STORE_FILE_MODE)).map_err(|e| failed("setting the mode of", db, e))?
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(failed("creating", db, e)),
    }
    for file in [db.to_path_buf(), sidecar(db, "-wal"), sidecar(db, "-shm")] {
        let mode = match std::fs::metadata(&file) {
            // Not a file (a directory named by mistake): SQLite refuses it, with its own words.
            Ok(meta) if !meta.is_file() => continue,
            Ok(meta) => meta.permissions().mode() & 0o7777,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(failed("reading the mode of", &file, e)),
        };
        if mode & 0o077 != 0 {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(STORE_FILE_MODE))
                .map_err(|e| failed("making private", &file, e))?;
            tracing::warn!(file = %file.display(), was = format!("{mode:04o}"), now = format!("{STORE_FILE_MODE:04o}"), "a store file was readable by others: made private");
        }
    }
    Ok(())
}

/// The SQLite [`Store`].
pub struct SqliteStore {
    path: PathBuf,
    writer: Mutex<Connection>,
    readers: Mutex<Vec<Connection>>,
    /// Set when a write failed for want of space, to the bytes then free (0 when that could
    /// not be read); cleared by the next write that succeeds. While set, the store stays not
    /// writable until the filesystem has more room than it had then.
    out_of_space: Mutex<Option<u64>>,
    /// Whatever must live as long as the store (see [`SqliteStore::keep_alive`]).
    _guard: Option<Box<dyn Any + Send + Sync>>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").field("path", &self.path).finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens (creating if needed) the store file at `path` and applies pending migrations.
    /// Refuses a file written by a newer schema ([`StoreError::SchemaTooNew`]). The file, its
    /// WAL and its shared-memory index are [`STORE_FILE_MODE`], an older store's made so.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        make_store_files_private(&path)?;
        let mut writer = Connection::open_with_flags(&path, OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE)
            .map_err(|e| StoreError::backend(format!("opening {}: {e}", path.display())))?;
        configure(&writer)?;
        // WAL is a property of the file, set once by the writer; readers inherit it.
        let mode: String = writer.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0)).db()?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::backend(format!("{}: SQLite refused WAL mode (journal_mode is {mode})", path.display())));
        }
        migrate(&mut writer, unix_now())?;
        Ok(SqliteStore { path, writer: Mutex::new(writer), readers: Mutex::new(Vec::new()), out_of_space: Mutex::new(None), _guard: None })
    }

    /// Ties `guard` to the store's lifetime, e.g. the temporary directory holding its file in
    /// tests, so the directory outlives every connection.
    pub fn keep_alive(mut self, guard: impl Any + Send + Sync) -> Self {
        self._guard = Some(Box::new(guard));
        self
    }

    /// The file this store lives in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The schema versions applied to the file, with when each was applied.
    pub fn applied_migrations(&self) -> Result<Vec<(i64, Time)>, StoreError> {
        self.read(|c| {
            let mut stmt = c.prepare("SELECT version, applied_at FROM schema_migrations ORDER BY version").db()?;
            let rows = stmt.query_map([], |r| Ok((r.get(0)?, time_col(r, 1)?))).db()?;
            rows.collect::<Result<_, _>>().db()
        })
    }

    /// Runs `f` in one `BEGIN IMMEDIATE` transaction on the writer; an error rolls it back.
    fn write<T>(&self, f: impl FnOnce(&Transaction<'_>) -> Result<T, StoreError>) -> Result<T, StoreError> {
        // A panic while holding the lock poisons it, but the transaction was rolled back when
        // it unwound, so the connection is as good as before.
        let mut conn = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        let result = (|| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).db()?;
            let out = f(&tx)?;
            tx.commit().db()?;
            Ok(out)
        })();
        match result {
            Ok(out) => {
                *self.out_of_space.lock().unwrap_or_else(PoisonError::into_inner) = None;
                Ok(out)
            }
            Err(StoreError::StorageFull { source, .. }) => {
                // SQLite does not know how much room is left; the filesystem does.
                let free = self.space().map(|s| s.available_bytes).ok();
                *self.out_of_space.lock().unwrap_or_else(PoisonError::into_inner) = Some(free.unwrap_or(0));
                tracing::error!(store = %self.path.display(), free_bytes = ?free, "a store write failed: no space left; it was rolled back whole");
                Err(StoreError::StorageFull { available_bytes: free, source })
            }
            Err(e) => Err(e),
        }
    }

    /// Checkpoints the whole WAL into the database file and truncates it to zero bytes, so a
    /// row just overwritten (a task's erased secret) survives in neither. Best effort: a
    /// reader still holding an old snapshot makes SQLite refuse (`SQLITE_BUSY`); the WAL is
    /// then truncated by a later erasure, and its frames are overwritten as it is reused.
    fn truncate_wal(&self) {
        let conn = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        match conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get::<_, i64>(0)) {
            Ok(0) => {}
            Ok(_) => {
                tracing::debug!(store = %self.path.display(), "WAL not truncated after an erasure: a reader holds it; a later one will")
            }
            Err(e) => tracing::warn!(store = %self.path.display(), error = %e, "WAL truncation after an erasure failed"),
        }
    }

    /// The space of the filesystem holding the store.
    fn space(&self) -> std::io::Result<drover_fsio::Space> {
        drover_fsio::space(self.path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new(".")))
    }

    /// Runs `f` on a pooled read-only connection inside one read transaction, so a read of
    /// several rows (a release and its files) sees one snapshot.
    fn read<T>(&self, f: impl FnOnce(&Transaction<'_>) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let pooled = self.readers.lock().unwrap_or_else(PoisonError::into_inner).pop();
        let mut conn = match pooled {
            Some(conn) => conn,
            None => self.open_reader()?,
        };
        let out = (|| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Deferred).db()?;
            let out = f(&tx)?;
            tx.commit().db()?;
            Ok(out)
        })();
        let mut pool = self.readers.lock().unwrap_or_else(PoisonError::into_inner);
        if pool.len() < MAX_IDLE_READERS {
            pool.push(conn);
        }
        out
    }

    fn open_reader(&self) -> Result<Connection, StoreError> {
        let conn = Connection::open_with_flags(&self.path, OpenFlags::SQLITE_OPEN_READ_WRITE).db()?;
        configure(&conn)?;
        // Read-write open (a read-only one cannot create the WAL index after a crash), but
        // query_only guarantees no statement on it ever writes.
        conn.pragma_update(None, "query_only", true).db()?;
        Ok(conn)
    }
}

/// Per-connection settings (they are not stored in the file).
fn configure(conn: &Connection) -> Result<(), StoreError> {
    conn.busy_timeout(BUSY_TIMEOUT).db()?;
    conn.pragma_update(None, "foreign_keys", true).db()?;
    conn.pragma_update(None, "synchronous", "NORMAL").db()?;
    // Deleted and overwritten content is zeroed in the file rather than left in free pages:
    // an erased task secret must not be recoverable from a copy of the store.
    conn.pragma_update(None, "secure_delete", true).db()?;
    Ok(())
}

/// Applies every migration newer than the file's version, all in one transaction.
fn migrate(conn: &mut Connection, now: i64) -> Result<(), StoreError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).db()?;
    tx.execute_batch("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL) STRICT")
        .db()?;
    let current: i64 = tx.query_row("SELECT COALESCE(MAX(version), 0) FROM schema_migrations", [], |r| r.get(0)).db()?;
    if current > SCHEMA_VERSION {
        return Err(StoreError::SchemaTooNew { found: current, supported: SCHEMA_VERSION });
    }
    for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > current) {
        tx.execute_batch(sql).map_err(|e| StoreError::backend(format!("schema migration {version} failed: {e}")))?;
        tx.execute("INSERT INTO schema_migrations (version, applied_at) VALUES (?1, ?2)", (version, now)).db()?;
    }
    tx.commit().db()?;
    Ok(())
}

/// Wall-clock time for `schema_migrations.applied_at` only: bookkeeping, never a decision.
fn unix_now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// A rusqlite error as a store error. A function (and [`DbResult`]), not `From`: both types are
/// other crates', and the orphan rule leaves that impl to `drover-store`, which knows no driver.
fn db_error(e: rusqlite::Error) -> StoreError {
    // SQLITE_FULL: a write found no room (the OS said ENOSPC); the transaction is rolled
    // back. Kept apart so callers can say "disk full" instead of "internal error".
    if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull) {
        return StoreError::StorageFull { available_bytes: None, source: Box::new(e) };
    }
    StoreError::backend(e)
}

/// `.db()?` on a rusqlite result: `?` with its error made a [`StoreError`] ([`db_error`]).
trait DbResult<T> {
    /// The result with its error made a [`StoreError`] ([`db_error`]).
    fn db(self) -> Result<T, StoreError>;
}

impl<T> DbResult<T> for rusqlite::Result<T> {
    fn db(self) -> Result<T, StoreError> {
        self.map_err(db_error)
    }
}

// ---- column helpers: rows hold text and integers; these turn them back into typed values,
// and a value that does not parse surfaces as a conversion error (corruption), never a panic.

fn conversion(idx: usize, ty: Type, e: impl Display) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(idx, ty, e.to_string().into())
}

fn uuid_col(row: &Row<'_>, idx: usize) -> rusqlite::Result<Uuid> {
    let s: String = row.get(idx)?;
    Uuid::parse_str(&s).map_err(|e| conversion(idx, Type::Text, e))
}

fn opt_uuid_col(row: &Row<'_>, idx: usize) -> rusqlite::Result<Option<Uuid>> {
    let s: Option<String> = row.get(idx)?;
    s.map(|s| Uuid::parse_str(&s).map_err(|e| conversion(idx, Type::Text, e))).transpose()
}

fn time_col(row: &Row<'_>, idx: usize) -> rusqlite::Result<Time> {
    Time::from_unix(row.get(idx)?).map_err(|e| conversion(idx, Type::Integer, e))
}

fn opt_time_col(row: &Row<'_>, idx: usize) -> rusqlite::Result<Option<Time>> {
    let s: Option<i64> = row.get(idx)?;
    s.map(|s| Time::from_unix(s).map_err(|e| conversion(idx, Type::Integer, e))).transpose()
}

fn parse_col<T: FromStr>(row: &Row<'_>, idx: usize) -> rusqlite::Result<T>
where
    T::Err: Display,
{
    let s: String = row.get(idx)?;
    s.parse().map_err(|e| conversion(idx, Type::Text, e))
}

fn json_col(row: &Row<'_>, idx: usize) -> rusqlite::Result<Value> {
    let s: String = row.get(idx)?;
    serde_json::from_str(&s).map_err(|e| conversion(idx, Type::Text, e))
}

fn rollout_col(row: &Row<'_>, idx: usize) -> rusqlite::Result<RolloutId> {
    let s: String = row.get(idx)?;
    RolloutId::parse(&s).map_err(|e| conversion(idx, Type::Text, e))
}

fn u64_col(row: &Row<'_>, idx: usize) -> rusqlite::Result<u64> {
    let v: i64 = row.get(idx)?;
    u64::try_from(v).map_err(|e| conversion(idx, Type::Integer, e))
}

impl Store for SqliteStore {
    fn ping(&self) -> Result<(), StoreError> {
        self.read(|c| c.query_row("SELECT 1", [], |_| Ok(())).db())
    }

    fn check_writable(&self) -> Result<(), StoreError> {
        let space = self.space().map_err(|e| StoreError::backend(format!("reading the free space under {}: {e}", self.path.display())))?;
        let failed_with = *self.out_of_space.lock().unwrap_or_else(PoisonError::into_inner);
        let why = if space.available_bytes < MIN_FREE_BYTES {
            format!("the filesystem has less than the {MIN_FREE_BYTES} bytes free the store needs to take writes")
        } else if failed_with.is_some_and(|then| space.available_bytes <= then) {
            "the last write failed for want of space and no room has been freed since".to_owned()
        } else {
            return Ok(());
        };
        Err(StoreError::StorageFull { available_bytes: Some(space.available_bytes), source: why.into() })
    }

    fn create_host(&self, new: &NewHost) -> Result<Host, StoreError> {
        self.write(|tx| hosts::create_host(tx, new))
    }
    fn get_host(&self, id: Uuid) -> Result<Option<Host>, StoreError> {
        self.read(|c| hosts::get_host(c, id))
    }
    fn get_host_by_hostname(&self, hostname: &str) -> Result<Option<Host>, StoreError> {
        self.read(|c| hosts::get_host_by_hostname(c, hostname))
    }
    fn list_hosts(&self, filter: &HostFilter) -> Result<Vec<Host>, StoreError> {
        self.read(|c| hosts::list_hosts(c, filter))
    }
    fn transition_host(&self, id: Uuid, from: HostLifecycle, to: HostLifecycle, reason: &str, at: Time) -> Result<Host, StoreError> {
        self.write(|tx| hosts::transition_host(tx, id, from, to, reason, at))
    }
    fn record_checkins(&self, batch: &[(Uuid, Checkin)]) -> Result<u64, StoreError> {
        // One write transaction for the whole batch: this is why check-ins are buffered.
        self.write(|tx| {
            let mut n = 0;
            for (id, checkin) in batch {
                match hosts::record_checkin(tx, *id, checkin) {
                    Ok(_) => n += 1,
                    Err(StoreError::NotFound { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(n)
        })
    }
    fn record_checkin(&self, id: Uuid, checkin: &Checkin) -> Result<Host, StoreError> {
        self.write(|tx| hosts::record_checkin(tx, id, checkin))
    }
    fn set_schedulable(&self, id: Uuid, schedulable: bool, reason: &str, at: Time) -> Result<Host, StoreError> {
        self.write(|tx| hosts::set_schedulable(tx, id, schedulable, reason, at))
    }

    fn create_token(&self, host_id: Uuid, token: &EnrollmentToken, at: Time) -> Result<TokenInfo, StoreError> {
        self.write(|tx| hosts::create_token(tx, host_id, token, at))
    }
    fn consume_token(&self, token_hash: &str, expected_host: Option<Uuid>, now: Time) -> Result<Uuid, StoreError> {
        self.write(|tx| hosts::consume_token(tx, token_hash, expected_host, now))
    }
    fn list_tokens(&self, host_id: Option<Uuid>) -> Result<Vec<TokenInfo>, StoreError> {
        self.read(|c| hosts::list_tokens(c, host_id))
    }
    fn revoke_token(&self, id: Uuid, at: Time) -> Result<TokenInfo, StoreError> {
        self.write(|tx| hosts::revoke_token(tx, id, at))
    }

    fn enroll_host(
        &self,
        token_hash: &str,
        host_id: Uuid,
        now: Time,
        issue: &mut dyn FnMut(&Host) -> Result<Enrolled, StoreError>,
    ) -> Result<Host, StoreError> {
        self.write(|tx| {
            let owner = hosts::consume_token(tx, token_hash, Some(host_id), now)?;
            let current = hosts::get_host(tx, owner)?.ok_or_else(|| StoreError::not_found("host", owner))?;
            let host = if current.state == HostLifecycle::Offline && !hosts::has_live_cert(tx, owner)? {
                // A re-enrollment (a reimage): the host's old identity was revoked with its OS;
                // it keeps its state — its first check-in brings it back `active` — and gets a
                // new certificate.
                current
            } else {
                hosts::transition_host(tx, owner, HostLifecycle::BootstrapIssued, HostLifecycle::Enrolling, "enrollment token used", now)?
            };
            let enrolled = issue(&host)?;
            hosts::record_cert(tx, &enrolled.cert)?;
            evidence::set_host_keys(tx, host.id, &enrolled.keys)?;
            Ok(host)
        })
    }
    fn host_keys(&self, host_id: Uuid) -> Result<HostKeys, StoreError> {
        self.read(|c| evidence::host_keys(c, host_id))
    }
    fn record_host_health(&self, batch: &[HostHealth]) -> Result<u64, StoreError> {
        self.write(|tx| health::record_host_health(tx, batch))
    }
    fn host_health(&self, host_id: Uuid) -> Result<Option<HostHealth>, StoreError> {
        self.read(|c| health::host_health(c, host_id))
    }
    fn put_evidence(&self, evidence: &NewEvidence) -> Result<i64, StoreError> {
        self.write(|tx| evidence::put_evidence(tx, evidence))
    }
    fn list_evidence(&self, filter: &EvidenceFilter) -> Result<Vec<EvidenceRecord>, StoreError> {
        self.read(|c| evidence::list_evidence(c, filter))
    }
    fn record_cert(&self, cert: &NewCert) -> Result<(), StoreError> {
        self.write(|tx| hosts::record_cert(tx, cert))
    }
    fn get_cert(&self, serial: &str) -> Result<Option<CertRecord>, StoreError> {
        self.read(|c| hosts::get_cert(c, serial))
    }
    fn list_certs(&self, host_id: Option<Uuid>) -> Result<Vec<CertRecord>, StoreError> {
        self.read(|c| hosts::list_certs(c, host_id))
    }
    fn revoke_cert(&self, serial: &str, at: Time, reason: &str) -> Result<bool, StoreError> {
        self.write(|tx| hosts::revoke_cert(tx, serial, at, reason))
    }
    fn revoke_host_certs(&self, host_id: Uuid, at: Time, reason: &str) -> Result<u64, StoreError> {
        self.write(|tx| hosts::revoke_host_certs(tx, host_id, at, reason))
    }
    fn list_revoked(&self) -> Result<Vec<RevokedCert>, StoreError> {
        self.read(|c| hosts::list_revoked(c))
    }

    fn put_release(&self, version: u64, signed_at: Time, files: &ReleaseFiles) -> Result<(), StoreError> {
        self.write(|tx| releases::put_release(tx, version, signed_at, files))
    }
    fn latest_release(&self) -> Result<Option<Release>, StoreError> {
        self.read(|c| releases::get_release(c, None))
    }
    fn latest_release_version(&self) -> Result<Option<u64>, StoreError> {
        self.read(|c| releases::latest_version(c))
    }
    fn get_release(&self, version: u64) -> Result<Option<Release>, StoreError> {
        self.read(|c| releases::get_release(c, Some(version)))
    }
    fn list_releases(&self) -> Result<Vec<ReleaseSummary>, StoreError> {
        self.read(|c| releases::list_releases(c))
    }
    fn get_manifest(&self, rollout_id: &RolloutId) -> Result<Option<Manifest>, StoreError> {
        self.read(|c| releases::get_manifest(c, rollout_id))
    }
    fn get_manifest_root(&self, rollout_id: &RolloutId) -> Result<Option<SignedBytes>, StoreError> {
        self.read(|c| releases::get_manifest_root(c, rollout_id))
    }

    fn open_rollout(&self, new: &NewRollout) -> Result<Rollout, StoreError> {
        self.write(|tx| releases::open_rollout(tx, new))
    }
    fn get_rollout(&self, rollout_id: &RolloutId) -> Result<Option<Rollout>, StoreError> {
        self.read(|c| releases::get_rollout(c, rollout_id))
    }
    fn list_rollouts(&self, filter: &RolloutFilter) -> Result<Vec<Rollout>, StoreError> {
        self.read(|c| releases::list_rollouts(c, filter))
    }
    fn set_rollout_state(
        &self,
        rollout_id: &RolloutId,
        from: RolloutState,
        to: RolloutState,
        reason: &str,
        at: Time,
    ) -> Result<Rollout, StoreError> {
        self.write(|tx| releases::set_rollout_state(tx, rollout_id, from, to, reason, at))
    }
    fn list_host_rollouts(&self, rollout_id: &RolloutId) -> Result<Vec<HostRollout>, StoreError> {
        self.read(|c| releases::list_host_rollouts(c, rollout_id))
    }
    fn latest_host_rollouts(&self, hostnames: &[String]) -> Result<Vec<HostRollout>, StoreError> {
        self.read(|c| releases::latest_host_rollouts(c, hostnames))
    }
    fn host_rollout_counts(&self, rollout_ids: &[RolloutId]) -> Result<Vec<(RolloutId, HostRolloutState, u64)>, StoreError> {
        self.read(|c| releases::host_rollout_counts(c, rollout_ids))
    }

    fn plan_snapshot(&self) -> Result<PlanSnapshot, StoreError> {
        self.read(|c| plans::plan_snapshot(c))
    }
    fn apply_plan(&self, write: &PlanWrite, audits: &[NewAudit]) -> Result<(), StoreError> {
        self.write(|tx| plans::apply_plan(tx, write, audits))
    }
    fn record_host_report(&self, host_id: Uuid, report: &HostReport, at: Time) -> Result<(), StoreError> {
        self.write(|tx| plans::record_host_report(tx, host_id, report, at))
    }

    fn put_intent(&self, new: &NewIntent) -> Result<IntentRecord, StoreError> {
        self.write(|tx| work::put_intent(tx, new))
    }
    fn current_intent(&self, host_id: Uuid) -> Result<Option<IntentRecord>, StoreError> {
        self.read(|c| work::current_intent(c, host_id))
    }
    fn checkin_view(&self, host_id: Uuid, now: Time) -> Result<CheckinView, StoreError> {
        self.read(|c| {
            Ok(CheckinView {
                host: hosts::get_host(c, host_id)?,
                intent: work::current_intent(c, host_id)?,
                leasable: work::has_leasable_task(c, host_id, now)?,
                report: plans::get_host_report(c, host_id)?,
            })
        })
    }
    fn get_intent(&self, host_id: Uuid, intent_id: Uuid) -> Result<Option<IntentRecord>, StoreError> {
        self.read(|c| work::get_intent(c, host_id, intent_id))
    }
    fn set_intent_status(&self, host_id: Uuid, intent_id: Uuid, status: IntentStatus, at: Time) -> Result<IntentRecord, StoreError> {
        self.write(|tx| work::set_intent_status(tx, host_id, intent_id, status, at))
    }

    fn enqueue_task(&self, new: &NewTask) -> Result<bool, StoreError> {
        self.write(|tx| work::enqueue_task(tx, new))
    }
    fn lease_tasks(&self, host_id: Uuid, now: Time, lease_secs: u64, max: u32) -> Result<Vec<TaskRecord>, StoreError> {
        // Almost every check-in finds nothing to lease: look on a reader first and take the
        // single writer only when there is work (the write re-checks under its lock).
        if max == 0 || !self.read(|c| work::has_leasable_task(c, host_id, now))? {
            return Ok(Vec::new());
        }
        self.write(|tx| work::lease_tasks(tx, host_id, now, lease_secs, max))
    }
    fn complete_task(&self, host_id: Uuid, task_id: Uuid, result: &Value, now: Time) -> Result<TaskRecord, StoreError> {
        let (record, erased) = self.write(|tx| work::complete_task(tx, host_id, task_id, result, now))?;
        if erased {
            self.truncate_wal();
        }
        Ok(record)
    }
    fn requeue_expired(&self, now: Time) -> Result<u64, StoreError> {
        self.write(|tx| work::requeue_expired(tx, now))
    }
    fn get_task(&self, task_id: Uuid) -> Result<Option<TaskRecord>, StoreError> {
        self.read(|c| work::get_task(c, task_id))
    }
    fn list_tasks(&self, filter: &TaskFilter) -> Result<Vec<TaskRecord>, StoreError> {
        self.read(|c| work::list_tasks(c, filter))
    }

    fn create_job(&self, new: &NewJob) -> Result<Job, StoreError> {
        self.write(|tx| jobs::create_job(tx, new))
    }
    fn create_job_checked(&self, new: &NewJob, allowed: &[HostLifecycle], audits: &[NewAudit]) -> Result<Job, StoreError> {
        self.write(|tx| jobs::create_job_checked(tx, new, allowed, audits))
    }
    fn check_job_start(&self, host_id: Uuid, allowed: &[HostLifecycle]) -> Result<(), StoreError> {
        self.read(|c| jobs::check_job_start(c, host_id, allowed))
    }
    fn get_job(&self, job_id: Uuid) -> Result<Option<Job>, StoreError> {
        self.read(|c| jobs::get_job(c, job_id))
    }
    fn set_job_state(&self, job_id: Uuid, from: JobState, to: JobState, reason: &str, at: Time) -> Result<Job, StoreError> {
        self.write(|tx| jobs::set_job_state(tx, job_id, from, to, reason, at))
    }
    fn set_job_progress(&self, job_id: Uuid, progress: &Value, at: Time) -> Result<Job, StoreError> {
        self.write(|tx| jobs::set_job_progress(tx, job_id, progress, at))
    }
    fn apply_job_step(&self, step: &JobStep) -> Result<Job, StoreError> {
        self.write(|tx| jobs::apply_job_step(tx, step))
    }
    fn list_jobs(&self, filter: &JobFilter) -> Result<Vec<Job>, StoreError> {
        self.read(|c| jobs::list_jobs(c, filter))
    }
    fn count_jobs(&self) -> Result<Vec<JobCount>, StoreError> {
        self.read(|c| jobs::count_jobs(c))
    }

    fn create_maintenance(&self, new: &NewMaintenance, allowed: &[HostLifecycle]) -> Result<(MaintenanceRecord, Vec<Job>), StoreError> {
        self.write(|tx| jobs::create_maintenance(tx, new, allowed))
    }
    fn get_maintenance(&self, request_id: Uuid) -> Result<Option<MaintenanceRecord>, StoreError> {
        self.read(|c| jobs::get_maintenance(c, request_id))
    }
    fn list_maintenance(&self, filter: &MaintenanceFilter) -> Result<Vec<MaintenanceRecord>, StoreError> {
        self.read(|c| jobs::list_maintenance(c, filter))
    }

    fn create_site(&self, site: &Site, profile: &Profile, log: &ChangeLog) -> Result<Site, StoreError> {
        self.write(|tx| sites::create_site(tx, site, profile, log))
    }
    fn get_site(&self, id: Uuid) -> Result<Option<Site>, StoreError> {
        self.read(|c| sites::get_site(c, id))
    }
    fn get_site_by_name(&self, name: &str) -> Result<Option<Site>, StoreError> {
        self.read(|c| sites::get_site_by_name(c, name))
    }
    fn list_sites(&self) -> Result<Vec<Site>, StoreError> {
        self.read(|c| sites::list_sites(c))
    }
    fn update_site(&self, site: &Site, expected_revision: u64, log: &ChangeLog) -> Result<Site, StoreError> {
        self.write(|tx| sites::update_site(tx, site, expected_revision, log))
    }
    fn create_profile(&self, profile: &Profile, log: &ChangeLog) -> Result<Profile, StoreError> {
        self.write(|tx| sites::create_profile(tx, profile, log))
    }
    fn get_profile(&self, id: Uuid) -> Result<Option<Profile>, StoreError> {
        self.read(|c| sites::get_profile(c, id))
    }
    fn list_profiles(&self, site_id: Uuid) -> Result<Vec<Profile>, StoreError> {
        self.read(|c| sites::list_profiles(c, site_id))
    }
    fn update_profile(&self, profile: &Profile, expected_revision: u64, log: &ChangeLog) -> Result<Profile, StoreError> {
        self.write(|tx| sites::update_profile(tx, profile, expected_revision, log))
    }
    fn create_override(&self, o: &PowerOverride, log: &ChangeLog) -> Result<PowerOverride, StoreError> {
        self.write(|tx| sites::create_override(tx, o, log))
    }
    fn list_overrides(&self, site_id: Uuid) -> Result<Vec<PowerOverride>, StoreError> {
        self.read(|c| sites::list_overrides(c, site_id))
    }
    fn delete_override(&self, site_id: Uuid, id: Uuid, log: &ChangeLog) -> Result<PowerOverride, StoreError> {
        self.write(|tx| sites::delete_override(tx, site_id, id, log))
    }
    fn upsert_roce(&self, site_id: Uuid, items: &[NewRoce], at: Time, log: &ChangeLog) -> Result<RoceUpsert, StoreError> {
        self.write(|tx| sites::upsert_roce(tx, site_id, items, at, log))
    }
    fn list_roce(&self, site_id: Uuid, hostname: Option<&str>) -> Result<Vec<RoceAssignment>, StoreError> {
        self.read(|c| sites::list_roce(c, site_id, hostname))
    }
    fn delete_roce(&self, site_id: Uuid, id: Uuid, log: &ChangeLog) -> Result<RoceAssignment, StoreError> {
        self.write(|tx| sites::delete_roce(tx, site_id, id, log))
    }

    fn put_maas_binding(&self, binding: &MaasBinding, log: &ChangeLog) -> Result<MaasBinding, StoreError> {
        self.write(|tx| bindings::put(tx, binding, log))
    }
    fn get_maas_binding(&self, host_id: Uuid) -> Result<Option<MaasBinding>, StoreError> {
        self.read(|c| bindings::get(c, host_id))
    }
    fn get_maas_binding_by_machine(&self, site_id: Uuid, system_id: &str) -> Result<Option<MaasBinding>, StoreError> {
        self.read(|c| bindings::get_by_machine(c, site_id, system_id))
    }
    fn list_maas_bindings(&self, site_id: Option<Uuid>) -> Result<Vec<MaasBinding>, StoreError> {
        self.read(|c| bindings::list(c, site_id))
    }
    fn observe_maas_binding(&self, host_id: Uuid, observation: &MaasObservation) -> Result<MaasBinding, StoreError> {
        self.write(|tx| bindings::observe(tx, host_id, observation))
    }
    fn set_maas_drift(&self, host_id: Uuid, drift: Option<&Value>, at: Time) -> Result<MaasBinding, StoreError> {
        self.write(|tx| bindings::set_drift(tx, host_id, drift, at))
    }
    fn delete_maas_binding(&self, host_id: Uuid, log: &ChangeLog) -> Result<MaasBinding, StoreError> {
        self.write(|tx| bindings::delete(tx, host_id, log))
    }
    fn maas_reconcile_snapshot(&self, site_id: Uuid) -> Result<Vec<ReconcileRow>, StoreError> {
        self.read(|c| bindings::snapshot(c, site_id))
    }
    fn apply_maas_reconcile(&self, batch: &[ReconcileChange], at: Time) -> Result<ReconcileApplied, StoreError> {
        self.write(|tx| bindings::apply_reconcile(tx, batch, at))
    }
    fn resolve_maas_drift(&self, host_id: Uuid, at: Time, log: &ChangeLog) -> Result<MaasBinding, StoreError> {
        self.write(|tx| bindings::resolve(tx, host_id, at, log))
    }

    fn create_rack(&self, rack: &Rack, log: &ChangeLog) -> Result<Rack, StoreError> {
        self.write(|tx| racks::create_rack(tx, rack, log))
    }
    fn get_rack(&self, id: Uuid) -> Result<Option<Rack>, StoreError> {
        self.read(|c| racks::get_rack(c, id))
    }
    fn list_racks(&self) -> Result<Vec<Rack>, StoreError> {
        self.read(|c| racks::list_racks(c))
    }
    fn delete_rack(&self, id: Uuid, log: &ChangeLog) -> Result<Rack, StoreError> {
        self.write(|tx| racks::delete_rack(tx, id, log))
    }
    fn create_device(&self, device: &Device, log: &ChangeLog) -> Result<Device, StoreError> {
        self.write(|tx| racks::create_device(tx, device, log))
    }
    fn get_device(&self, id: Uuid) -> Result<Option<Device>, StoreError> {
        self.read(|c| racks::get_device(c, id))
    }
    fn list_devices(&self, rack: Option<Uuid>, kind: Option<DeviceKind>) -> Result<Vec<Device>, StoreError> {
        self.read(|c| racks::list_devices(c, rack, kind))
    }
    fn delete_device(&self, id: Uuid, log: &ChangeLog) -> Result<Device, StoreError> {
        self.write(|tx| racks::delete_device(tx, id, log))
    }
    fn place_host(&self, host_id: Uuid, rack: Option<Uuid>, log: &ChangeLog) -> Result<(), StoreError> {
        self.write(|tx| racks::place_host(tx, host_id, rack, log))
    }
    fn rack_hosts(&self, rack: Uuid) -> Result<Vec<Uuid>, StoreError> {
        self.read(|c| racks::rack_hosts(c, rack))
    }
    fn host_rack(&self, host_id: Uuid) -> Result<Option<Uuid>, StoreError> {
        self.read(|c| racks::host_rack(c, host_id))
    }
    fn set_shelf_maintenance(&self, ids: &[Uuid], request: &Value, log: &ChangeLog) -> Result<Vec<Device>, StoreError> {
        self.write(|tx| racks::set_shelf_maintenance(tx, ids, request, log))
    }
    fn shelf_step(&self, step: &ShelfStep, event: &NewEvent) -> Result<bool, StoreError> {
        self.write(|tx| racks::shelf_step(tx, step, event))
    }
    fn set_host_bmc(&self, host_id: Uuid, bmc: Option<&HostBmc>, log: &ChangeLog) -> Result<(), StoreError> {
        self.write(|tx| racks::set_host_bmc(tx, host_id, bmc, log))
    }
    fn host_bmcs(&self, hosts: &[Uuid]) -> Result<Vec<HostBmc>, StoreError> {
        self.read(|c| racks::host_bmcs(c, hosts))
    }
    fn create_firmware(&self, firmware: &FirmwareRecord, log: &ChangeLog) -> Result<FirmwareRecord, StoreError> {
        self.write(|tx| racks::create_firmware(tx, firmware, log))
    }
    fn list_firmware(&self) -> Result<Vec<FirmwareRecord>, StoreError> {
        self.read(|c| racks::list_firmware(c))
    }
    fn request_rack_maintenance(&self, rack: Uuid, maintenance: &Value, log: &ChangeLog) -> Result<Rack, StoreError> {
        self.write(|tx| racks::request_rack_maintenance(tx, rack, maintenance, log))
    }
    fn rack_step(
        &self,
        expected: &Rack,
        to: drover_proto::states::RackState,
        maintenance: Option<&Value>,
        event: &NewEvent,
    ) -> Result<bool, StoreError> {
        self.write(|tx| racks::rack_step(tx, expected, to, maintenance, event))
    }

    fn append_event(&self, event: &NewEvent) -> Result<i64, StoreError> {
        self.write(|tx| log::insert_event(tx, event))
    }
    fn list_events(&self, filter: &EventFilter) -> Result<Vec<Event>, StoreError> {
        self.read(|c| log::list_events(c, filter))
    }
    fn latest_event_id(&self) -> Result<i64, StoreError> {
        self.read(|c| c.query_row("SELECT COALESCE(MAX(id), 0) FROM events", [], |r| r.get(0)).db())
    }
    fn append_audit(&self, audit: &NewAudit) -> Result<i64, StoreError> {
        self.write(|tx| log::insert_audit(tx, audit))
    }
    fn list_audit(&self, filter: &AuditFilter) -> Result<Vec<AuditRecord>, StoreError> {
        self.read(|c| log::list_audit(c, filter))
    }
}
