//! Online backup and restore of the SQLite store (issue 23).
//!
//! [`backup`] copies the store while a coordinator may be serving it: `VACUUM INTO` runs in
//! one read transaction, so the copy is one consistent snapshot (WAL mode lets the writer go
//! on meanwhile), compacted, with no WAL beside it. [`restore`] checks a copy — SQLite's own
//! `integrity_check`, a schema this build knows — and installs it as the state directory's
//! store, only where there is none (the coordinator must be stopped; a store in place is never
//! replaced). Neither ever writes over an existing file.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags};

use super::SCHEMA_VERSION;
use crate::store::StoreError;

/// What a backup or restore saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupInfo {
    /// The schema version of the copy.
    pub schema_version: i64,
    /// Its size in bytes.
    pub bytes: u64,
}

fn backend(what: String) -> StoreError {
    StoreError::backend(what)
}

fn info(path: &Path) -> Result<BackupInfo, StoreError> {
    let c = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(|e| backend(format!("opening {}: {e}", path.display())))?;
    let check: String = c.query_row("PRAGMA integrity_check", [], |r| r.get(0)).map_err(|e| backend(format!("{}: {e}", path.display())))?;
    if check != "ok" {
        return Err(backend(format!("{} fails SQLite's integrity check: {check}", path.display())));
    }
    let version: i64 = c
        .query_row("SELECT COALESCE(MAX(version), 0) FROM schema_migrations", [], |r| r.get(0))
        .map_err(|e| backend(format!("{} is not a Drover store: {e}", path.display())))?;
    if version > SCHEMA_VERSION {
        return Err(StoreError::SchemaTooNew { found: version, supported: SCHEMA_VERSION });
    }
    let bytes = std::fs::metadata(path).map_err(|e| backend(format!("{}: {e}", path.display())))?.len();
    Ok(BackupInfo { schema_version: version, bytes })
}

fn refuse_existing(path: &Path) -> Result<(), StoreError> {
    if path.symlink_metadata().is_ok() {
        return Err(StoreError::conflict("file", path.display(), format!("{} exists; it is never replaced", path.display())));
    }
    Ok(())
}

/// Copies the store at `db` into `out` (which must not exist) as one consistent snapshot,
/// while a coordinator may be serving it; checks the copy.
pub fn backup(db: &Path, out: &Path) -> Result<BackupInfo, StoreError> {
    refuse_existing(out)?;
    if !db.is_file() {
        return Err(StoreError::not_found("store", db.display()));
    }
    let c =
        Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY).map_err(|e| backend(format!("opening {}: {e}", db.display())))?;
    let target = out.to_str().ok_or_else(|| backend(format!("{} is not UTF-8", out.display())))?;
    c.execute("VACUUM INTO ?1", [target]).map_err(|e| backend(format!("copying {} to {}: {e}", db.display(), out.display())))?;
    info(out)
}

/// Installs the backup `from` as the store `db` (which must not exist, nor its WAL): checked
/// first, copied beside it, fsynced, then moved into place.
pub fn restore(from: &Path, db: &Path) -> Result<BackupInfo, StoreError> {
    for p in [db.to_path_buf(), sidecar(db, "-wal"), sidecar(db, "-shm")] {
        refuse_existing(&p)?;
    }
    let seen = info(from)?;
    let bytes = std::fs::read(from).map_err(|e| backend(format!("reading {}: {e}", from.display())))?;
    drover_fsio::write_atomic(db, &bytes, 0o600, drover_fsio::Mode::Exclusive)
        .map_err(|e| backend(format!("writing {}: {e}", db.display())))?;
    Ok(seen)
}

fn sidecar(db: &Path, suffix: &str) -> PathBuf {
    let mut s = db.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{SqliteStore, Store as _};

    #[test]
    fn a_backup_restores_to_the_same_store_and_nothing_is_overwritten() {
        let d = tempfile::tempdir().unwrap();
        let db = d.path().join("coordinator.db");
        let store = SqliteStore::open(&db).unwrap();
        let before = store.list_racks().unwrap();
        let copy = d.path().join("backup.db");
        let info = backup(&db, &copy).unwrap();
        assert_eq!(info.schema_version, SCHEMA_VERSION);
        assert!(matches!(backup(&db, &copy), Err(StoreError::Conflict { .. })), "an existing backup is never replaced");
        // The live store is in place: a restore over it is refused.
        assert!(matches!(restore(&copy, &db), Err(StoreError::Conflict { .. })));
        let fresh = d.path().join("fresh/coordinator.db");
        restore(&copy, &fresh).unwrap();
        assert_eq!(SqliteStore::open(&fresh).unwrap().list_racks().unwrap(), before);
    }

    #[test]
    fn a_corrupt_or_foreign_file_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let junk = d.path().join("junk.db");
        std::fs::write(&junk, b"not a database at all, just bytes").unwrap();
        assert!(restore(&junk, &d.path().join("coordinator.db")).is_err());
        assert!(!d.path().join("coordinator.db").exists(), "nothing was installed");
    }
}
