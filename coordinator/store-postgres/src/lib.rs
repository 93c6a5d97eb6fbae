//! The PostgreSQL backend of the Drover coordinator's store (the crate `drover-store-postgres`):
//! what several coordinator replicas on one database stand on. [`PgStore`] implements
//! [`drover_store::Store`] with the same functions over the same
//! schema as SQLite, area by area (`hosts`, `work`, `jobs`, `releases`, `plans`, `sites`,
//! `bindings`, `racks`, `evidence`, `health`, `log`), and passes the same conformance suite.
//! `serve` uses it with `[store] backend = "postgres"` (the engine's `store_config`).
//!
//! - **Driver**: the synchronous `postgres` crate (rust-postgres, the same protocol code as
//!   `tokio-postgres`). Every store call already runs on a blocking thread
//!   (the engine's `store::blocking`) behind a synchronous trait, as SQLite's do; an async driver
//!   would need a runtime bridge inside that thread for nothing. Its `LISTEN` stream (for
//!   waking long-polls across replicas) reads from a dedicated connection the same way.
//! - **Pool**: `r2d2` with a bound on connections and on the wait for one
//!   ([`PgOptions::pool_size`], [`PgOptions::connect_timeout`]); a broken connection is
//!   tested on checkout and replaced, so a restarted PostgreSQL is reconnected to without a
//!   coordinator restart.
//! - **TLS**: with [`PgOptions::ca_file`], every connection is TLS (rustls, TLS 1.2 or 1.3)
//!   and the server's certificate must chain to that CA and name the host — PostgreSQL's
//!   `verify-full`; without it, plain TCP or a Unix socket, for a database on the same host
//!   or network segment.
//! - **Secrets**: the password never appears in the URL (refused there, so it cannot reach a
//!   log line or a listing); it comes from a file or the secret store, and is held in a type
//!   whose `Debug` is redacted.
//! - **Migrations**: numbered SQL files in `schema/`, applied at start in one transaction
//!   holding a transaction-scoped advisory lock ([`MIGRATION_LOCK`]), so replicas starting
//!   together apply each version once and the others wait, then find nothing to do. A
//!   database whose schema is newer than this build is refused, as SQLite's is.
//! - **Leadership**: [`lease`], a lease row with a fencing token that every leader write checks.
//! - **Wake-ups across replicas**: [`notify`], `NOTIFY` sent with a write's commit and a
//!   `LISTEN`ing connection per replica.
//! - **Check-in views cached per replica**: [`view_cache`], dropped by triggers' notifications.
//!
//! The conformance suite every backend passes (the crate `drover-store-conformance`) runs on
//! this one in `tests/store_postgres.rs`, against a PostgreSQL the test starts itself.

#![forbid(unsafe_code)]

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use drover_proto::time::Time;
use r2d2_postgres::PostgresConnectionManager;
pub use r2d2_postgres::postgres;
use r2d2_postgres::postgres::Config;
use r2d2_postgres::postgres::config::SslMode;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use tokio_postgres_rustls::MakeRustlsConnect;

// The Store methods, area by area, mirroring sqlite/ (the trait impl is `store_impl`).
mod bindings;
mod cols;
mod evidence;
mod health;
mod hosts;
mod jobs;
mod log;
mod plans;
mod racks;
mod releases;
mod sites;
mod store_impl;
mod view_read;
mod work;

pub mod election;
pub mod elector;
pub mod lease;
pub mod notify;
pub mod view_cache;

use drover_store::StoreError;

/// The migrations, in order; each runs once, in the transaction that records it.
const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("schema/0001_init.sql")),
    (2, include_str!("schema/0002_leader_lease.sql")),
    (3, include_str!("schema/0003_view_notify.sql")),
];

/// The advisory-lock key the migration transaction holds: `drover` in ASCII, so another
/// application sharing the database is unlikely to pick it.
pub const MIGRATION_LOCK: i64 = i64::from_be_bytes(*b"\0\0drover");

/// The database password: its `Debug` never shows it.
#[derive(Clone)]
pub struct Password(String);

impl Password {
    /// Wraps a password read from a file or the secret store (a trailing newline, as an
    /// editor leaves it, is not part of it).
    pub fn new(raw: &str) -> Password {
        Password(raw.trim_end_matches(['\n', '\r']).to_owned())
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Password(<redacted>)")
    }
}

/// How to reach the database.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// `postgres://USER@HOST:PORT/DB` (libpq URL or key=value form), without a password.
    pub url: String,
    /// The password, if the server asks for one.
    pub password: Option<Password>,
    /// The CA the server's certificate must chain to; TLS is required when set.
    pub ca_file: Option<PathBuf>,
    /// At most this many connections from this replica.
    pub pool_size: u32,
    /// The bound on opening a connection and on waiting for a free one.
    pub connect_timeout: Duration,
    /// Whether this replica answers check-ins from its cache of views ([`view_cache`]) once a
    /// listener feeds it.
    pub cache_checkin_views: bool,
}

impl PgOptions {
    /// Options for `url` with the defaults: no password, no TLS, 16 connections, 10 s, views
    /// cached.
    pub fn new(url: impl Into<String>) -> PgOptions {
        PgOptions {
            url: url.into(),
            password: None,
            ca_file: None,
            pool_size: 16,
            connect_timeout: Duration::from_secs(10),
            cache_checkin_views: true,
        }
    }
}

/// Why the database could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum PgOpenError {
    /// The URL does not parse, or carries a password.
    #[error("store url: {message}")]
    Url {
        /// What is wrong (never the password).
        message: String,
    },
    /// The CA file cannot be read or holds no certificate.
    #[error("store ca_file {}: {message}", path.display())]
    CaFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The first connection failed: the server's reason (never the password).
    #[error("cannot connect to the store's database: {message}")]
    Connect {
        /// The error and its causes.
        message: String,
    },
    /// No connection could be opened within the bound, or a query failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

type Manager = PostgresConnectionManager<MakeRustlsConnect>;

/// A pool of connections to one PostgreSQL database with the schema applied.
#[derive(Clone)]
pub struct PgStore {
    pool: r2d2::Pool<Manager>,
    /// Held by each write of this replica for its whole transaction: writes from one
    /// process go one at a time, as they do on SQLite. Under `SERIALIZABLE`, concurrent
    /// writes touching the same index pages (sixteen enrollments inserting hosts,
    /// certificates and events) abort each other as serialization failures far faster than
    /// retries resolve them; in line, they never conflict, and only writes from other
    /// replicas can, which retrying absorbs. Reads never take it.
    writer: Arc<std::sync::Mutex<()>>,
    /// This replica's check-in views (live once a listener feeds it, see [`view_cache`]).
    views: Arc<view_cache::ViewCache>,
}

impl fmt::Debug for PgStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.pool.state();
        f.debug_struct("PgStore").field("connections", &state.connections).field("idle", &state.idle_connections).finish()
    }
}

/// A driver error whose message carries the server's (the driver's own is often just "db
/// error"), so a log line says which statement failed and why; the driver's error stays the
/// source, for [`is_retryable`] to read its SQLSTATE.
#[derive(Debug)]
pub struct PgError(postgres::Error);

impl fmt::Display for PgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.0.code(), self.0.as_db_error()) {
            (Some(code), Some(db)) => write!(f, "{} (SQLSTATE {})", db.message(), code.code()),
            _ => f.write_str(&chain(&self.0)),
        }
    }
}

impl std::error::Error for PgError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// `.db()?` on the driver's and the pool's results, in this crate and in the closures given to
/// [`PgStore::write`]: `?` with the error made a [`StoreError`], a backend failure. A trait,
/// not `From`: both types are other crates', and the orphan rule leaves that impl to
/// `drover-store`, which knows no driver.
pub trait DbResult<T> {
    /// The result with its error made a [`StoreError`], a backend failure.
    fn db(self) -> Result<T, StoreError>;
}

impl<T> DbResult<T> for Result<T, postgres::Error> {
    fn db(self) -> Result<T, StoreError> {
        self.map_err(|e| StoreError::backend(PgError(e)))
    }
}

impl<T> DbResult<T> for Result<T, r2d2::Error> {
    fn db(self) -> Result<T, StoreError> {
        self.map_err(|e| StoreError::backend(format!("no database connection: {e}")))
    }
}

impl PgStore {
    /// Connects (within the bounds of `options`) and applies pending migrations.
    pub fn open(options: &PgOptions) -> Result<PgStore, PgOpenError> {
        let (config, tls) = connect_config(options)?;
        // One connection first, outside the pool: the pool would only report "timed out
        // waiting for connection", while the server's or the TLS layer's own reason (a wrong
        // password, an unknown CA) is what the operator needs.
        config.connect(tls.clone()).map_err(|e| PgOpenError::Connect { message: chain(&e) })?;
        let pool = r2d2::Pool::builder()
            .max_size(options.pool_size.max(1))
            .connection_timeout(options.connect_timeout)
            .test_on_check_out(true)
            .build(PostgresConnectionManager::new(config, tls))
            .db()?;
        let store = PgStore { pool, writer: Default::default(), views: Default::default() };
        store.migrate()?;
        Ok(store)
    }

    /// A connection from the pool (waiting at most the connect timeout).
    pub fn conn(&self) -> Result<r2d2::PooledConnection<Manager>, StoreError> {
        self.pool.get().db()
    }

    /// Runs `f` in one `SERIALIZABLE` transaction and commits it — when the caller runs in a
    /// leader's term ([`drover_store::fence`]), only while that term's token is current; retried whole (at most
    /// [`WRITE_ATTEMPTS`] times) when PostgreSQL aborts it as a serialization failure or a
    /// deadlock.
    ///
    /// Why `SERIALIZABLE`: the store's writes are compare-and-set over several rows (a host's
    /// state and its job, a plan's every op) written for SQLite, where one writer at a time
    /// makes every transaction serial. Replicas on one database write concurrently;
    /// serializable isolation keeps the outcome the same as some serial order, so every check
    /// the SQLite backend relies on still holds, and the conformance suite runs unchanged.
    /// Retrying is safe because a store method is exactly one transaction with no effect
    /// outside the database.
    ///
    /// While this replica caches check-in views, the transaction ends by sending its marker
    /// ([`view_cache::ViewCache::begin_write`]): until the marker comes back, after the
    /// triggers' notifications of the same commit, the cache is not consulted.
    pub fn write<T>(&self, mut f: impl FnMut(&mut postgres::Transaction<'_>) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let _one_writer = self.writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some((marker, payload)) = self.views.begin_write() else {
            return self.write_concurrently(f);
        };
        let out = self.write_concurrently(|tx| {
            let out = f(tx)?;
            notify::notify(tx, view_cache::CHANNEL, &payload)?;
            Ok(out)
        });
        // An error: it did not commit, or its commit's answer was lost and its notifications
        // still drop what it changed when they arrive; the caller was told it failed either way.
        self.views.write_done(marker, out.is_ok(), std::time::Instant::now());
        out
    }

    /// [`PgStore::write`] for a write that changes no column a check-in view reads (no
    /// trigger of `schema/0003_view_notify.sql` fires): there is no invalidation to wait for,
    /// so it sends no marker and the cache stays consulted meanwhile. For the once-a-second
    /// batches of last-seen fields and health reports: waiting for their markers sent a
    /// loaded replica's check-ins to the database for the length of every batch.
    pub(crate) fn write_outside_views<T>(
        &self,
        f: impl FnMut(&mut postgres::Transaction<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let _one_writer = self.writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        self.write_concurrently(f)
    }

    /// This replica's cache of check-in views.
    pub fn view_cache(&self) -> &Arc<view_cache::ViewCache> {
        &self.views
    }

    /// [`PgStore::write`] without waiting for this replica's other writes: for the leader
    /// lease alone, whose renewal must not queue behind a burst of writes (a leader whose
    /// renewals wait steps down).
    pub(crate) fn write_concurrently<T>(
        &self,
        mut f: impl FnMut(&mut postgres::Transaction<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        // Leader work's writes are checked against its term first (see `store::fence`).
        let term = drover_store::fence::current();
        let mut c = self.conn()?;
        let mut attempt = 1;
        loop {
            let result = (|| {
                let mut tx = c.build_transaction().isolation_level(postgres::IsolationLevel::Serializable).start().db()?;
                if let Some(term) = &term {
                    lease::check_term(&mut tx, term)?;
                }
                let out = f(&mut tx)?;
                tx.commit().db()?;
                Ok(out)
            })();
            match result {
                Err(e) if attempt < WRITE_ATTEMPTS && is_retryable(&e) => {
                    tracing::debug!(attempt, error = %e, "store write retried after a serialization conflict");
                    // Transactions that collided once collide again if they retry in step:
                    // back off, doubling up to 128 ms, with jitter to break the tie.
                    let base = 1u64 << attempt.min(7);
                    std::thread::sleep(Duration::from_millis(base / 2 + rand::random::<u64>() % base.max(1)));
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    /// Runs `f` in one read-only `REPEATABLE READ` transaction: every statement in it sees the
    /// same snapshot (a plan snapshot's hosts, rollouts and jobs agree with each other), and a
    /// read never blocks or aborts a write.
    pub fn read<T>(&self, f: impl FnOnce(&mut postgres::Transaction<'_>) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let mut c = self.conn()?;
        let mut tx = c.build_transaction().isolation_level(postgres::IsolationLevel::RepeatableRead).read_only(true).start().db()?;
        let out = f(&mut tx)?;
        tx.commit().db()?;
        Ok(out)
    }

    /// Applies the migrations this database lacks, under [`MIGRATION_LOCK`].
    fn migrate(&self) -> Result<(), StoreError> {
        let mut c = self.conn()?;
        let mut tx = c.transaction().db()?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK]).db()?;
        tx.batch_execute("CREATE TABLE IF NOT EXISTS schema_migrations (version BIGINT PRIMARY KEY, applied_at BIGINT NOT NULL)").db()?;
        let current: i64 = cols::col(&tx.query_one("SELECT COALESCE(MAX(version), 0) FROM schema_migrations", &[]).db()?, 0)?;
        let supported = MIGRATIONS.last().map_or(0, |(v, _)| *v);
        if current > supported {
            return Err(StoreError::SchemaTooNew { found: current, supported });
        }
        // The wall clock, read here rather than passed in: when a migration ran is a note for
        // operators, never an input to a rule.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > current) {
            tx.batch_execute(sql).db()?;
            tx.execute("INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)", &[version, &now]).db()?;
            tracing::info!(version, "store schema migrated (postgres)");
        }
        tx.commit().db()?;
        Ok(())
    }

    /// The applied migrations: version and when.
    pub fn applied_migrations(&self) -> Result<Vec<(i64, Time)>, StoreError> {
        let mut c = self.conn()?;
        let rows = c.query("SELECT version, applied_at FROM schema_migrations ORDER BY version", &[]).db()?;
        rows.iter()
            .map(|r| {
                let at: i64 = cols::col(r, 1)?;
                Ok((cols::col(r, 0)?, Time::from_unix(at).map_err(|e| StoreError::invalid("applied_at", e.to_string()))?))
            })
            .collect()
    }
}

/// An error and every cause under it, `: `-separated (the driver's own text is often just
/// "db error" or "error performing TLS handshake", with the reason a level down).
pub(crate) fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}

/// How many times [`PgStore::write`] runs a transaction PostgreSQL keeps aborting as a
/// serialization conflict before giving up with that error.
pub const WRITE_ATTEMPTS: u32 = 12;

/// Whether `e` is PostgreSQL aborting a transaction so that it can be run again:
/// `serialization_failure` (40001) or `deadlock_detected` (40P01).
fn is_retryable(e: &StoreError) -> bool {
    let StoreError::Backend { source } = e else { return false };
    source.downcast_ref::<PgError>().and_then(|e| e.0.code()).is_some_and(|code| {
        *code == postgres::error::SqlState::T_R_SERIALIZATION_FAILURE || *code == postgres::error::SqlState::T_R_DEADLOCK_DETECTED
    })
}

/// The driver's configuration and TLS connector for `options`: the URL with the password
/// added (one in the URL is refused), Drover's application name, the connect timeout, and TLS
/// required exactly when a CA is given.
pub(crate) fn connect_config(options: &PgOptions) -> Result<(Config, MakeRustlsConnect), PgOpenError> {
    let mut config: Config = options.url.parse().map_err(|e: postgres::Error| PgOpenError::Url { message: e.to_string() })?;
    if config.get_password().is_some() {
        return Err(PgOpenError::Url {
            message: "holds a password; give it in password_file (or the secret store) so it never reaches a log".into(),
        });
    }
    if let Some(p) = &options.password {
        config.password(p.0.as_bytes());
    }
    // A database that went away without closing the connection (a partition, a dead host)
    // is noticed after the connect timeout, not the kernel's retransmission limit of about
    // fifteen minutes: unacknowledged data then fails the connection, and so does an idle one
    // whose keepalives go unanswered.
    config
        .application_name("drover-coordinator")
        .connect_timeout(options.connect_timeout)
        .tcp_user_timeout(options.connect_timeout)
        .keepalives_idle(options.connect_timeout);
    let tls = match &options.ca_file {
        Some(path) => {
            config.ssl_mode(SslMode::Require);
            tls_connector(path)?
        }
        None => {
            config.ssl_mode(SslMode::Disable);
            MakeRustlsConnect::new(rustls_config(rustls::RootCertStore::empty())?)
        }
    };
    Ok((config, tls))
}

/// rustls with `roots` as the only trust anchors and the ring provider the rest of Drover uses.
fn rustls_config(roots: rustls::RootCertStore) -> Result<rustls::ClientConfig, PgOpenError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| PgOpenError::Store(StoreError::backend(e)))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// A TLS connector trusting only the CA in `path`.
fn tls_connector(path: &std::path::Path) -> Result<MakeRustlsConnect, PgOpenError> {
    let bad = |message: String| PgOpenError::CaFile { path: path.to_owned(), message };
    let pem = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        roots.add(cert.map_err(|e| bad(e.to_string()))?).map_err(|e| bad(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(bad("holds no PEM certificate".into()));
    }
    Ok(MakeRustlsConnect::new(rustls_config(roots)?))
}
