//! `[store]`: which database the coordinator keeps its state in, and how to reach it.
//!
//! ```toml
//! [store]
//! backend = "postgres"            # default "sqlite": <state_dir>/coordinator.db, one replica
//! url = "postgres://drover@db.example:5432/drover"   # no password in it
//! password_file = "/run/credentials/drover-coordinator/pg"  # or:
//! password_secret = "store/postgres"   # a secret store path; its field `password`
//! ca_file = "/etc/drover/pg-ca.pem"    # TLS, verify-full against this CA
//! pool_size = 16                  # connections from this replica
//! connect_timeout_secs = 10       # opening a connection, waiting for a free one
//! lease_ms = 10000                # the leader lease; a crashed leader is replaced within it
//! replica = "coord-a"             # names this replica in events and metrics (default: hostname)
//! cache_checkin_views = true      # answer routine check-ins from memory (see view_cache)
//! ```
//!
//! The password is read once at start, from a file or the secret store, and lives only in a
//! [`Password`], whose `Debug` is redacted; a URL that carries one is refused.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use crate::secrets::{SecretPath, SecretStore};
use crate::store::postgres::{Password, PgOptions};

/// Which backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreBackend {
    /// One SQLite file in the state dir: one coordinator process.
    #[default]
    Sqlite,
    /// A PostgreSQL database: any number of replicas, one leader.
    Postgres,
}

/// The `[store]` section.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// The backend.
    #[serde(default)]
    pub backend: StoreBackend,
    /// The PostgreSQL URL (libpq URL or key=value form), without a password.
    #[serde(default)]
    pub url: Option<String>,
    /// A file holding the database password (one line).
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// A secret store path whose field `password` is the database password.
    #[serde(default)]
    pub password_secret: Option<String>,
    /// The CA the database server's certificate must chain to (TLS required when set).
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// Connections this replica opens at most.
    #[serde(default = "default_pool_size")]
    pub pool_size: u32,
    /// The bound on opening a connection and on waiting for a free one.
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout_secs: u64,
    /// How long the leader lease lasts without a renewal.
    #[serde(default = "default_lease_ms")]
    pub lease_ms: u64,
    /// This replica's name in events, metrics and the lease row (default: the host name).
    #[serde(default)]
    pub replica: Option<String>,
    /// Whether this replica answers routine check-ins from its cache of check-in views
    /// (`store::postgres::view_cache`); off, every check-in reads the database.
    #[serde(default = "default_cache_checkin_views")]
    pub cache_checkin_views: bool,
}

fn default_cache_checkin_views() -> bool {
    true
}

fn default_pool_size() -> u32 {
    16
}

fn default_connect_timeout() -> u64 {
    10
}

fn default_lease_ms() -> u64 {
    10_000
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            backend: StoreBackend::Sqlite,
            url: None,
            password_file: None,
            password_secret: None,
            ca_file: None,
            pool_size: default_pool_size(),
            connect_timeout_secs: default_connect_timeout(),
            lease_ms: default_lease_ms(),
            replica: None,
            cache_checkin_views: default_cache_checkin_views(),
        }
    }
}

/// Checks `[store]` as a whole; `Err((key, message))` names the first key that is wrong.
pub fn validate(c: &StoreConfig) -> Result<(), (&'static str, String)> {
    let postgres_only = [
        ("store.url", c.url.is_some()),
        ("store.password_file", c.password_file.is_some()),
        ("store.password_secret", c.password_secret.is_some()),
        ("store.ca_file", c.ca_file.is_some()),
    ];
    match c.backend {
        StoreBackend::Sqlite => {
            if let Some((key, _)) = postgres_only.iter().find(|(_, set)| *set) {
                return Err((key, "only meaningful with store.backend = \"postgres\"".to_owned()));
            }
        }
        StoreBackend::Postgres => {
            let Some(url) = &c.url else {
                return Err(("store.url", "required when store.backend = \"postgres\"".to_owned()));
            };
            if url.trim().is_empty() {
                return Err(("store.url", "must not be empty".to_owned()));
            }
            if c.password_file.is_some() && c.password_secret.is_some() {
                return Err(("store.password_secret", "give the password one way: password_file or password_secret".to_owned()));
            }
            if let Some(p) = &c.password_secret {
                SecretPath::new(p).map_err(|e| ("store.password_secret", e.to_string()))?;
            }
        }
    }
    if !(1..=1000).contains(&c.pool_size) {
        return Err(("store.pool_size", "must be between 1 and 1000".to_owned()));
    }
    if !(1..=600).contains(&c.connect_timeout_secs) {
        return Err(("store.connect_timeout_secs", "must be between 1 and 600 seconds".to_owned()));
    }
    if !(300..=600_000).contains(&c.lease_ms) {
        return Err(("store.lease_ms", "must be between 300 and 600000 milliseconds".to_owned()));
    }
    if let Some(r) = &c.replica
        && (r.is_empty() || r.len() > 64 || !r.chars().all(|ch| ch.is_ascii_alphanumeric() || "-_.".contains(ch)))
    {
        return Err(("store.replica", "must be 1 to 64 letters, digits, '-', '_' or '.'".to_owned()));
    }
    Ok(())
}

/// Why the `[store]` settings could not be turned into connection options.
#[derive(Debug, thiserror::Error)]
pub enum StoreConfigError {
    /// The password file could not be read.
    #[error("key `store.password_file`: cannot read {}", path.display())]
    PasswordFile {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The password secret could not be read, or has no `password` field.
    #[error("key `store.password_secret`: {message}")]
    PasswordSecret {
        /// Why (never the secret).
        message: String,
    },
}

/// The connection options `[store]` describes, the password read from where it says.
pub async fn pg_options(c: &StoreConfig, secrets: &Arc<dyn SecretStore>) -> Result<PgOptions, StoreConfigError> {
    let mut options = PgOptions::new(c.url.clone().unwrap_or_default());
    options.ca_file = c.ca_file.clone();
    options.pool_size = c.pool_size;
    options.connect_timeout = Duration::from_secs(c.connect_timeout_secs);
    options.cache_checkin_views = c.cache_checkin_views;
    if let Some(path) = &c.password_file {
        let text = std::fs::read_to_string(path).map_err(|source| StoreConfigError::PasswordFile { path: path.clone(), source })?;
        options.password = Some(Password::new(&text));
    }
    if let Some(p) = &c.password_secret {
        let path = SecretPath::new(p).map_err(|e| StoreConfigError::PasswordSecret { message: e.to_string() })?;
        let value = secrets.read(&path).await.map_err(|e| StoreConfigError::PasswordSecret { message: e.to_string() })?;
        let value = value.ok_or_else(|| StoreConfigError::PasswordSecret { message: format!("no secret at {p}") })?;
        let password = value
            .get("password")
            .ok_or_else(|| StoreConfigError::PasswordSecret { message: format!("the secret at {p} has no field `password`") })?;
        options.password = Some(Password::new(password));
    }
    Ok(options)
}

/// This replica's name: `[store] replica`, else the host name.
pub fn replica_name(c: &StoreConfig) -> String {
    c.replica.clone().unwrap_or_else(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let host: String = host.trim().chars().filter(|ch| ch.is_ascii_alphanumeric() || "-_.".contains(*ch)).take(64).collect();
        if host.is_empty() { "replica".to_owned() } else { host }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secrets::{FileSecretStore, SecretValue};

    fn postgres() -> StoreConfig {
        StoreConfig { backend: StoreBackend::Postgres, url: Some("postgres://drover@db/drover".into()), ..Default::default() }
    }

    #[tokio::test]
    async fn the_password_comes_from_its_file_or_its_secret_and_never_shows() {
        let dir = tempfile::tempdir().expect("tempdir");
        let secrets: Arc<dyn SecretStore> = Arc::new(FileSecretStore::open(dir.path().join("secrets")).expect("secrets"));
        let file = dir.path().join("pg");
        std::fs::write(&file, "hunter2-from-file\n").expect("write");
        let c = StoreConfig { password_file: Some(file), ..postgres() };
        let o = pg_options(&c, &secrets).await.expect("options");
        assert!(!format!("{o:?}").contains("hunter2"), "{o:?}");
        assert_eq!(o.pool_size, 16);
        assert!(o.cache_checkin_views, "views are cached unless turned off");
        let off: StoreConfig =
            toml::from_str("backend = \"postgres\"\nurl = \"postgres://drover@db/drover\"\ncache_checkin_views = false").expect("parses");
        assert!(!pg_options(&off, &secrets).await.expect("options").cache_checkin_views);

        let path = SecretPath::new("store/postgres").expect("path");
        secrets.write(&path, &SecretValue::from_pairs([("password", "hunter2-from-vault")])).await.expect("write");
        let c = StoreConfig { password_secret: Some("store/postgres".into()), ..postgres() };
        let o = pg_options(&c, &secrets).await.expect("options");
        assert!(!format!("{o:?}").contains("hunter2"), "{o:?}");

        secrets.write(&path, &SecretValue::from_pairs([("pass", "hunter2-wrong-field")])).await.expect("write");
        let e = pg_options(&c, &secrets).await.expect_err("no password field").to_string();
        assert!(e.contains("key `store.password_secret`") && e.contains("no field `password`") && !e.contains("hunter2"), "{e}");
        let c = StoreConfig { password_secret: Some("store/absent".into()), ..postgres() };
        let e = pg_options(&c, &secrets).await.expect_err("absent").to_string();
        assert!(e.contains("no secret at store/absent"), "{e}");
        let c = StoreConfig { password_file: Some(dir.path().join("missing")), ..postgres() };
        let e = pg_options(&c, &secrets).await.expect_err("missing file").to_string();
        assert!(e.contains("key `store.password_file`"), "{e}");
    }

    #[test]
    fn a_replica_is_named_by_its_setting_or_its_host() {
        assert_eq!(replica_name(&StoreConfig { replica: Some("coord-a".into()), ..Default::default() }), "coord-a");
        let host = replica_name(&StoreConfig::default());
        assert!(!host.is_empty() && validate(&StoreConfig { replica: Some(host.clone()), ..Default::default() }).is_ok(), "{host}");
    }
}
