//! Online backup and restore of the SQLite store.
//!
//! [`backup`] copies the store while a coordinator may be serving it: `VACUUM INTO` runs in
//! one read transaction, so the copy is one consistent snapshot (WAL mode lets the writer go
//! on meanwhile), compacted, with no WAL beside it. [`restore`] checks a copy — SQLite's own
//! `integrity_check`, a schema this build knows — and installs it as the state directory's
//! store, only where there is none (the coordinator must be stopped; a store in place is never
//! replaced). Neither ever writes over an existing file.

use std::path::Path;

use rusqlite::{Connection, OpenFlags};

use super::{SCHEMA_VERSION, STORE_FILE_MODE, sidecar};
use drover_store::StoreError;

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
/// while a coordinator may be serving it; checks the copy. The copy is [`STORE_FILE_MODE`]
/// from its first byte: it holds what the store holds.
pub fn backup(db: &Path, out: &Path) -> Result<BackupInfo, StoreError> {
    refuse_existing(out)?;
    if !db.is_file() {
        return Err(StoreError::not_found("store", db.display()));
    }
    let c =
        Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY).map_err(|e| backend(format!("opening {}: {e}", db.display())))?;
    let target = out.to_str().ok_or_else(|| backend(format!("{} is not UTF-8", out.display())))?;
    // `VACUUM INTO` would create the file 0644 (less the umask); it writes into an empty one.
    create_private(out)?;
    if let Err(e) = c.execute("VACUUM INTO ?1", [target]) {
        let _ = std::fs::remove_file(out);
        return Err(backend(format!("copying {} to {}: {e}", db.display(), out.display())));
    }
    info(out)
}

/// Creates `path` empty and [`STORE_FILE_MODE`], refusing one that exists.
fn create_private(path: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    let file = std::fs::OpenOptions::new().write(true).create_new(true).mode(STORE_FILE_MODE).open(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            StoreError::conflict("file", path.display(), format!("{} exists; it is never replaced", path.display()))
        } else {
            backend(format!("creating {}: {e}", path.display()))
        }
    })?;
    // The umask may have cleared bits of the mode: set it exactly.
    file.set_permissions(std::fs::Permissions::from_mode(STORE_FILE_MODE)).map_err(|e| backend(format!("{}: {e}", path.display())))
}

/// Installs the backup `from` as the store `db` (which must not exist, nor its WAL): checked
/// first, copied beside it, fsynced, then moved into place. A state directory that does not
/// exist yet is created 0700, as `init` makes one: it will hold the store and the keys.
pub fn restore(from: &Path, db: &Path) -> Result<BackupInfo, StoreError> {
    for p in [db.to_path_buf(), sidecar(db, "-wal"), sidecar(db, "-shm")] {
        refuse_existing(&p)?;
    }
    let seen = info(from)?;
    let bytes = std::fs::read(from).map_err(|e| backend(format!("reading {}: {e}", from.display())))?;
    if let Some(dir) = db.parent().filter(|d| !d.as_os_str().is_empty()) {
        use std::os::unix::fs::DirBuilderExt as _;
        // Every directory this creates gets the mode (less the umask, which only removes bits);
        // one that exists is left as the operator made it.
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(drover_fsio::PRIVATE_DIR_MODE)
            .create(dir)
            .map_err(|e| backend(format!("creating {}: {e}", dir.display())))?;
    }
    drover_fsio::write_atomic(db, &bytes, STORE_FILE_MODE, drover_fsio::Mode::Exclusive)
        .map_err(|e| backend(format!("writing {}: {e}", db.display())))?;
    Ok(seen)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SqliteStore;
    use drover_store::Store as _;

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

    fn mode(path: &Path) -> u32 {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).permissions().mode() & 0o7777
    }

    /// A restore into a state directory that does not exist yet creates it (and any parent it
    /// needs) 0700, as `init` does, not 0755: it will hold the store and the keys. A backup
    /// and the restored store are 0600 from their first byte.
    #[test]
    fn a_restore_into_a_new_directory_and_a_backup_are_not_readable_by_other_users() {
        let d = tempfile::tempdir().unwrap();
        let db = d.path().join("coordinator.db");
        SqliteStore::open(&db).unwrap();
        let copy = d.path().join("backup.db");
        backup(&db, &copy).unwrap();
        assert_eq!(mode(&copy), 0o600, "the backup");
        let fresh = d.path().join("new/state/coordinator.db");
        restore(&copy, &fresh).unwrap();
        assert_eq!(mode(&d.path().join("new")), 0o700);
        assert_eq!(mode(&d.path().join("new/state")), 0o700);
        assert_eq!(mode(&fresh), 0o600);
        // A directory that exists is the operator's: left as it is.
        let mine = d.path().join("mine");
        std::fs::create_dir(&mine).unwrap();
        std::fs::set_permissions(&mine, std::os::unix::fs::PermissionsExt::from_mode(0o750)).unwrap();
        restore(&copy, &mine.join("coordinator.db")).unwrap();
        assert_eq!(mode(&mine), 0o750);
        // A failed copy leaves no empty file behind to be mistaken for a backup.
        let junk = d.path().join("junk.db");
        std::fs::write(&junk, b"not a database at all, just bytes").unwrap();
        assert!(backup(&junk, &d.path().join("b2.db")).is_err());
        assert!(!d.path().join("b2.db").exists());
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
