//! The SQLite store: the whole conformance suite (one test per check, each on a fresh file in
//! its own temporary directory), plus what only SQLite has — WAL mode, migrations recorded in
//! the file and applied once, refusal of a file from a newer schema, and durability across
//! reopening.

use drover_proto::release::ReleaseFiles;
use drover_proto::states::HostLifecycle;
use drover_store::{Checkin, EnrollmentToken, ErrorKind, NewHost, Store, StoreError, TokenRefusal, hash_token};
use drover_store_conformance::{self as conformance, t};
use drover_store_sqlite::{SCHEMA_VERSION, SqliteStore};
use rusqlite::Connection;
use tempfile::TempDir;

/// A fresh store in its own temporary directory, removed when the store is dropped.
fn fresh() -> SqliteStore {
    let dir = TempDir::new().expect("tempdir");
    let store = SqliteStore::open(dir.path().join("drover.db")).expect("open store");
    store.keep_alive(dir)
}

mod conformance_suite {
    drover_store_conformance::store_conformance_tests!(Box::new(super::fresh()));
}

/// `run_all` runs every check too (the one-call form a backend may prefer).
#[test]
fn run_all_covers_every_check() {
    assert!(conformance::CHECKS.len() >= 25, "only {} checks", conformance::CHECKS.len());
    conformance::run_all(&|| Box::new(fresh()));
}

#[test]
fn wal_mode_is_on() {
    let s = fresh();
    let c = Connection::open(s.path()).expect("second connection");
    let mode: String = c.query_row("PRAGMA journal_mode", [], |r| r.get(0)).expect("pragma");
    assert_eq!(mode, "wal");
    // Foreign keys are per connection: prove the store's own connection enforces them by
    // letting it refuse a token for a host that does not exist.
    let orphan = s.create_token(uuid::Uuid::new_v4(), &EnrollmentToken { token_hash: hash_token("x"), expires_at: t(10) }, t(0));
    assert!(matches!(orphan, Err(StoreError::NotFound { .. })), "{orphan:?}");
}

#[test]
fn reopening_keeps_data_and_does_not_rerun_migrations() {
    let dir = TempDir::new().expect("tempdir");
    let path = dir.path().join("drover.db");
    let (id, applied) = {
        let s = SqliteStore::open(&path).expect("open");
        let h = s
            .create_host(&NewHost {
                hostname: "gpu-01".into(),
                created_at: t(0),
                token: Some(EnrollmentToken { token_hash: hash_token("tok"), expires_at: t(100) }),
            })
            .expect("create");
        s.transition_host(h.id, HostLifecycle::BootstrapIssued, HostLifecycle::Enrolling, "enroll", t(1)).expect("transition");
        let release = ReleaseFiles { files: [("timestamp.json".to_string(), b"\x00\x01bytes".to_vec())].into() };
        s.put_release(7, t(2), &release).expect("release");
        let applied = s.applied_migrations().expect("migrations");
        assert_eq!(applied.iter().map(|(v, _)| *v).collect::<Vec<_>>(), (1..=SCHEMA_VERSION).collect::<Vec<_>>());
        (h.id, applied)
    };
    let s = SqliteStore::open(&path).expect("reopen");
    assert_eq!(s.applied_migrations().expect("migrations"), applied, "migrations ran again");
    let h = s.get_host(id).expect("get").expect("host survived reopening");
    assert_eq!(h.state, HostLifecycle::Enrolling);
    assert_eq!(
        s.latest_release().expect("latest").map(|r| (r.version, r.files.files["timestamp.json"].clone())),
        Some((7, b"\x00\x01bytes".to_vec()))
    );
    // The token's use state survives too: still usable once, then refused.
    assert_eq!(s.consume_token(&hash_token("tok"), Some(id), t(5)).expect("consume"), id);
    drop(s);
    let s = SqliteStore::open(&path).expect("reopen again");
    let again = s.consume_token(&hash_token("tok"), Some(id), t(6));
    assert!(matches!(again, Err(StoreError::TokenRefused { refusal: TokenRefusal::AlreadyUsed })), "{again:?}");
}

#[test]
fn newer_schema_is_refused_with_a_clear_error() {
    let dir = TempDir::new().expect("tempdir");
    let path = dir.path().join("drover.db");
    drop(SqliteStore::open(&path).expect("open"));
    let c = Connection::open(&path).expect("raw connection");
    c.execute("INSERT INTO schema_migrations (version, applied_at) VALUES (?1, 0)", [SCHEMA_VERSION + 1]).expect("simulate newer");
    drop(c);
    match SqliteStore::open(&path) {
        Err(e @ StoreError::SchemaTooNew { .. }) => {
            assert_eq!(e.kind(), ErrorKind::Backend);
            let msg = e.to_string();
            assert!(msg.contains(&(SCHEMA_VERSION + 1).to_string()) && msg.contains("newer"), "unclear error: {msg}");
            let StoreError::SchemaTooNew { found, supported } = e else { unreachable!() };
            assert_eq!((found, supported), (SCHEMA_VERSION + 1, SCHEMA_VERSION));
        }
        Err(other) => panic!("wrong error for a newer schema: {other}"),
        Ok(_) => panic!("a store from a newer schema was opened"),
    }
}

#[test]
fn unopenable_path_is_a_backend_error_naming_the_file() {
    let dir = TempDir::new().expect("tempdir");
    let path = dir.path().join("missing-dir").join("drover.db");
    let err = SqliteStore::open(&path).expect_err("no such directory");
    assert_eq!(err.kind(), ErrorKind::Backend);
    assert!(err.to_string().contains("missing-dir"), "{err}");
}

#[test]
fn writes_are_visible_to_pooled_readers_immediately() {
    // Reads go through separate read-only connections; a committed write must be visible to
    // the very next read, or check-ins would serve stale intents.
    let s = fresh();
    let h = s.create_host(&NewHost { hostname: "gpu-01".into(), created_at: t(0), token: None }).expect("create");
    for i in 0..50 {
        let ck = Checkin { at: t(i), agent_version: format!("v{i}"), boot_id: "b".into(), current_generation: None };
        s.record_checkin(h.id, &ck).expect("checkin");
        assert_eq!(s.get_host(h.id).expect("get").and_then(|h| h.last_checkin), Some(ck));
    }
    s.ping().expect("ping");
}

/// The mode bits of `path`.
fn mode(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).permissions().mode() & 0o7777
}

/// The live database, its WAL and its shared-memory index hold every host's record and the
/// audit log: another local user reads none of them. SQLite itself would have made the
/// database 0644 and given the `-wal` and `-shm` the database's mode.
#[test]
fn the_live_store_and_its_wal_and_shm_are_not_readable_by_other_users() {
    let dir = TempDir::new().expect("tempdir");
    let db = dir.path().join("coordinator.db");
    let (wal, shm) = (dir.path().join("coordinator.db-wal"), dir.path().join("coordinator.db-shm"));
    let s = SqliteStore::open(&db).expect("open store");
    s.create_host(&NewHost { hostname: "gpu-01".into(), created_at: t(0), token: None }).expect("a write, so the WAL has frames");
    for file in [&db, &wal, &shm] {
        assert_eq!(mode(file), 0o600, "{}", file.display());
    }
    drop(s);

    // A store an older coordinator left readable (0644) is made private when opened again,
    // and its WAL and index come back private with it.
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let s = SqliteStore::open(&db).expect("reopen");
    s.create_host(&NewHost { hostname: "gpu-02".into(), created_at: t(1), token: None }).expect("write");
    for file in [&db, &wal, &shm] {
        assert_eq!(mode(file), 0o600, "{}", file.display());
    }
    assert_eq!(s.list_hosts(&Default::default()).expect("list").len(), 2, "nothing lost");
}
