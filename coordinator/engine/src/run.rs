//! Putting the coordinator together: state dir, store, trust roots, agent binary, TLS, and
//! the listener. `drover-coordinator serve` and the end-to-end tests start it the same way;
//! `drover-coordinator check-config` runs [`prepare`], the part of it that only reads and
//! checks, so it refuses exactly what `serve` would refuse before binding.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::app::{AgentBinary, AppState, Clock, CrlError, Hub};
use crate::config::Config;
use crate::leader::Leadership;
use crate::state_dir::{StateDir, StateDirError};
use crate::store::postgres::{PgOptions, PgStore};
use crate::store::{SqliteStore, Store, StoreError};
use crate::store_config::StoreBackend;
use crate::tls::{TlsError, TlsMaterial, TlsState};

/// Why the coordinator could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The state dir is missing or broken. Not transparent: the caller's exit code comes from
    /// the [`StateDirError`] it finds in the chain.
    #[error("key `state_dir` ({})", path.display())]
    StateDir {
        /// The configured directory.
        path: PathBuf,
        /// What is missing or broken in it.
        #[source]
        source: StateDirError,
    },
    /// The director key's rotation is broken (its message names the file in the state dir).
    #[error("key `state_dir`")]
    Director {
        /// What is wrong with the rotation.
        #[source]
        source: crate::director::DirectorError,
    },
    /// The store could not be opened.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// The PostgreSQL store could not be opened (`[store]`; never the password).
    #[error(transparent)]
    Database(#[from] crate::store::postgres::PgOpenError),
    /// The database password could not be read.
    #[error(transparent)]
    StoreConfig(#[from] crate::store_config::StoreConfigError),
    /// The leader election could not start.
    #[error("cannot start the leader election: {0}")]
    Election(#[source] std::io::Error),
    /// A file the configuration names could not be read (the OS error is the source, so it
    /// is printed once, after this).
    #[error("key `{key}`: cannot read {}", path.display())]
    Read {
        /// The configuration key naming the file.
        key: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The configured trust file is not valid trust roots.
    #[error("key `trust_file`: {} is not valid trust roots: {message}", path.display())]
    Trust {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// The configured agent package is not a Debian package.
    #[error("key `agent_package`: {} is not a Debian package (build one with packaging/deb/build-debs.sh)", path.display())]
    NotAPackage {
        /// The file.
        path: PathBuf,
    },
    /// TLS could not be configured.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The CRL could not be built.
    #[error(transparent)]
    Crl(#[from] CrlError),
    /// The secret store could not be set up (`[secrets]`).
    #[error("secrets: {message}")]
    Secrets {
        /// Why (never a secret).
        message: String,
    },
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// How often the CRL is re-signed without a revocation (it is valid for
/// [`crate::app::CRL_VALIDITY_SECS`]).
pub const CRL_REFRESH_SECS: u64 = 86_400;

/// How often lapsed task leases are put back in the queue.
pub const TASK_REQUEUE_SECS: u64 = 30;

/// A started coordinator.
pub struct Running {
    /// Where it listens (the real port when the config said 0).
    pub addr: SocketAddr,
    /// Its shared state (tests dispatch intents and tasks through it).
    pub app: Arc<AppState>,
    /// The accept loop.
    pub task: JoinHandle<std::io::Result<()>>,
}

fn read(key: &'static str, path: &Path) -> Result<Vec<u8>, StartError> {
    std::fs::read(path).map_err(|source| StartError::Read { key, path: path.to_owned(), source })
}

/// Everything [`prepare`] read and checked, ready for [`start_prepared`].
pub struct Prepared {
    config: Config,
    state: StateDir,
    director: crate::director::Director,
    trust_json: Vec<u8>,
    trust: drover_proto::trust::TrustRoots,
    agent: AgentBinary,
    agent_package: Option<AgentBinary>,
    tls: Arc<TlsState>,
}

/// Reads and checks everything the configuration names — the state dir (CA, server
/// certificate and key, director key and rotations), the trust file, the agent binary — and
/// builds the TLS configuration, writing nothing. `check-config` stops here; `serve` goes on
/// to open the store and the secret store (which may create files) and to bind.
pub fn prepare(config: Config) -> Result<Prepared, StartError> {
    let state_error = |source| StartError::StateDir { path: config.state_dir.clone(), source };
    // Without this the first file looked for inside it is what is reported missing.
    if let Err(e) = std::fs::metadata(&config.state_dir)
        && e.kind() == std::io::ErrorKind::NotFound
    {
        return Err(state_error(StateDirError::Missing { path: config.state_dir.clone() }));
    }
    let state = StateDir::open(&config.state_dir).map_err(state_error)?;
    let director =
        crate::director::Director::load(state.path(), state.director_key().clone()).map_err(|source| StartError::Director { source })?;
    let trust_json = read("trust_file", &config.trust_file)?;
    let trust = drover_proto::trust::TrustRoots::from_json(&trust_json)
        .map_err(|e| StartError::Trust { path: config.trust_file.clone(), message: e.to_string() })?;
    let agent_bytes = read("agent_binary", &config.agent_binary)?;
    if let Some(path) = &config.store.password_file {
        // Read again at start; checked here so `check-config` refuses a missing one.
        read("store.password_file", path)?;
    }
    let downloads = config.enrollment.max_agent_downloads;
    let agent = AgentBinary::new(agent_bytes, downloads);
    let agent_package = match &config.agent_package {
        Some(path) => {
            let bytes = read("agent_package", path)?;
            // A Debian package is an ar archive: catches a binary or a tarball named by mistake.
            if !bytes.starts_with(b"!<arch>\ndebian-binary") {
                return Err(StartError::NotAPackage { path: path.clone() });
            }
            Some(AgentBinary::new(bytes, downloads))
        }
        None => None,
    };
    let material =
        TlsMaterial::from_pem(state.ca().cert_pem().as_bytes(), state.server_cert_pem().as_bytes(), state.server_key_pem().as_bytes())?;
    let tls = Arc::new(TlsState::new(material, None)?);
    Ok(Prepared { config, state, director, trust_json, trust, agent, agent_package, tls })
}

impl Prepared {
    /// What `check-config` and `serve` warn of in what the configuration names: an agent
    /// binary that carries debug sections.
    pub fn agent_warning(&self) -> Option<String> {
        self.agent.debug.as_ref().map(|d| crate::agent_download::debug_warning(&self.config.agent_binary, self.agent.bytes.len(), d))
    }
}

/// Connections the kernel queues for `accept` (capped by `net.core.somaxconn`). After a
/// coordinator restart every agent of the fleet reconnects within seconds; tokio's default of
/// 1024 would drop the SYNs beyond it, and each dropped one costs its agent a retransmit
/// timeout (a second or more) before it tries again.
pub const LISTEN_BACKLOG: u32 = 4096;

/// A listener on `addr` with [`LISTEN_BACKLOG`].
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    // As `TcpListener::bind` does: a restart may bind while the old sockets sit in TIME_WAIT.
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Raises this process's soft limit on open files to its hard limit and returns the limits as
/// they were (soft, hard). Every agent holds a connection open (its long-poll), so the common
/// soft default of 1024 would cap a coordinator at about a thousand hosts; the hard limit is
/// what the administrator (or systemd's `LimitNOFILE=`) allows.
pub fn raise_open_files_limit() -> Result<(u64, u64), nix::Error> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard)?;
    }
    Ok((soft, hard))
}

/// Binds the configured address of what [`prepare`] checked, then [`start_prepared`] on it.
pub async fn start(prepared: Prepared, clock: Arc<dyn Clock>) -> Result<Running, StartError> {
    let listen = prepared.config.listen;
    let listener = bind(listen).map_err(|source| StartError::Bind { addr: listen, source })?;
    start_prepared(listener, prepared, clock).await
}

/// Opens everything the config names and serves on an already bound listener (tests bind
/// port 0 first so the URL they put in the config is the real one).
pub async fn start_on(listener: TcpListener, config: Config, clock: Arc<dyn Clock>) -> Result<Running, StartError> {
    start_prepared(listener, prepare(config)?, clock).await
}

/// The store `[store]` names: SQLite in the state dir, or PostgreSQL (then also the pool
/// itself and its options, for the election and the wake-ups).
pub type OpenedStore = (Arc<dyn Store>, Option<(PgStore, PgOptions)>);

/// Opens the store `[store]` names: SQLite at `sqlite_path`, or the PostgreSQL database (its
/// password read from the file or the secret store; schema migrations applied).
pub async fn open_store(
    config: &Config,
    sqlite_path: &Path,
    secrets: &Arc<dyn crate::secrets::SecretStore>,
) -> Result<OpenedStore, StartError> {
    match config.store.backend {
        StoreBackend::Sqlite => Ok((Arc::new(SqliteStore::open(sqlite_path)?), None)),
        StoreBackend::Postgres => {
            let options = crate::store_config::pg_options(&config.store, secrets).await?;
            // Connecting blocks (up to the connect timeout): off the runtime's threads.
            let opening = options.clone();
            let store = tokio::task::spawn_blocking(move || PgStore::open(&opening))
                .await
                .map_err(|e| StoreError::backend(format!("opening the database did not finish: {e}")))??;
            Ok((Arc::new(store.clone()), Some((store, options))))
        }
    }
}

/// This replica's leadership: always the leader on SQLite; on PostgreSQL, elected among the
/// replicas on the lease.
fn leadership(config: &Config, database: Option<&(PgStore, PgOptions)>) -> Result<Leadership, StartError> {
    let replica = crate::store_config::replica_name(&config.store);
    let Some((store, _)) = database else { return Ok(Leadership::single(replica)) };
    if config.secrets.backend == crate::config::SecretsBackend::File {
        // Each replica would keep its own files: a MAAS token stored through one replica
        // would be missing on the others.
        tracing::warn!("secrets.backend = \"file\" keeps secrets on this replica only; with more than one replica use \"vault\"");
    }
    let ttl = std::time::Duration::from_millis(config.store.lease_ms);
    let leader = Leadership::elected(store.clone(), replica, ttl).map_err(StartError::Election)?;
    tracing::info!(replica = leader.replica(), lease_ms = config.store.lease_ms, "store: PostgreSQL; electing a leader among the replicas");
    Ok(leader)
}

/// The leader's work, started when this replica is elected and aborted when it stops leading:
/// the rollout executor (with the job engine), MAAS onboarding, the drift reconciler, the rack
/// device controllers, and the sweeps (lapsed task leases, silent hosts).
fn start_leader_work(app: &Arc<AppState>) -> Vec<JoinHandle<()>> {
    use crate::loops::{DEVICES, EXECUTOR, LEASE_SWEEP, ONBOARDING, RECONCILER};
    let sweeper = app.clone();
    let (loops, clock) = (&app.loops, || app.clock.clone());
    // The job tick runs inside the executor's loop, after each of its ticks.
    vec![
        loops.spawn(EXECUTOR, clock(), crate::executor::trigger::run(app.clone())),
        loops.spawn(ONBOARDING, clock(), crate::onboarding::exec::run(app.clone())),
        loops.spawn(RECONCILER, clock(), crate::reconciler::run(app.clone())),
        loops.spawn(DEVICES, clock(), crate::devices::run(app.clone())),
        // Silent hosts become `offline`; their next check-in brings them back.
        crate::api::lifecycle::spawn_offline_reconciler(app.clone()),
        // Lapsed task leases are leasable again at once; the sweep also puts them back in the
        // queue so listings show them queued, not leased by a host that went quiet.
        loops.spawn(LEASE_SWEEP, clock(), async move {
            let mut every = tokio::time::interval(std::time::Duration::from_secs(TASK_REQUEUE_SECS));
            loop {
                every.tick().await;
                let now = sweeper.clock.now();
                let outcome = crate::store::blocking(sweeper.store.clone(), move |s| s.requeue_expired(now)).await;
                match &outcome {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(requeued = n, "lapsed task leases requeued"),
                    Err(e) => tracing::error!(error = %e, "requeuing lapsed task leases failed"),
                }
                sweeper.loops.ran(LEASE_SWEEP, sweeper.clock.now(), outcome.map(|_| ()));
            }
        }),
    ]
}

/// Opens the store and the secret store and serves what [`prepare`] checked on `listener`.
pub async fn start_prepared(listener: TcpListener, prepared: Prepared, clock: Arc<dyn Clock>) -> Result<Running, StartError> {
    if let Some(warning) = prepared.agent_warning() {
        tracing::warn!(agent_binary = %prepared.config.agent_binary.display(), "{warning}");
    }
    let Prepared { config, state, director, trust_json, trust, agent, agent_package, tls } = prepared;
    let secrets = crate::secrets::from_config(&config).map_err(|e| StartError::Secrets { message: e.to_string() })?;
    let (store, database) = open_store(&config, &state.db_path(), &secrets).await?;
    let leader = leadership(&config, database.as_ref())?;
    let addr = listener.local_addr().map_err(|source| StartError::Bind { addr: config.listen, source })?;
    let power = Arc::new(crate::devices::power::RedfishPower::new(secrets.clone(), config.devices.clone()));
    let connections = config.connections.clone();
    let app = Arc::new(AppState {
        server_pin: state.server_spki_pin(),
        director: Arc::new(director),
        ca: Arc::new(state.into_ca()),
        config,
        store,
        tls: tls.clone(),
        trust_json: trust_json.into(),
        trust: Arc::new(trust),
        agent,
        agent_package,
        hub: Hub::default(),
        leader,
        peers: Default::default(),
        bundles: Default::default(),
        proofs: Default::default(),
        clock,
        revoked: Default::default(),
        crl_lock: Default::default(),
        pending_checkins: Default::default(),
        pending_health: Default::default(),
        metrics: Default::default(),
        executor: Default::default(),
        manifest_cache: Default::default(),
        latest_release: Default::default(),
        power,
        secrets,
        maas: Arc::new(crate::sites::probe::LiveProbe),
        reconciler: Default::default(),
        device_work: Default::default(),
        connections: crate::conn_limits::ConnLimits::new(connections, crate::api::body_limit),
        readiness: Default::default(),
        loops: Default::default(),
        fleet_release: Default::default(),
    });
    if let Some((db, options)) = database {
        let (peers, sender) = crate::peers::start(db, &options, Arc::downgrade(&app))?;
        let _ = app.hub.peers.set(sender.clone());
        let _ = app.executor.peers.set(sender);
        let _ = app.peers.set(peers);
    }
    // Revocations made before this start must bind from the first handshake.
    app.refresh_crl().await?;
    // The CRL says how long it is good for; re-sign it well before that, revocations or not.
    use crate::loops::{CHECKIN_FLUSH, CRL_REFRESH, LEADER_SUPERVISION, MEMORY_TRIM, READINESS, RELEASES_DIR};
    let (loops, clock) = (app.loops.clone(), || app.clock.clone());
    let refresher = app.clone();
    loops.spawn(CRL_REFRESH, clock(), async move {
        let mut every = tokio::time::interval(std::time::Duration::from_secs(CRL_REFRESH_SECS));
        every.tick().await;
        loop {
            every.tick().await;
            let outcome = refresher.refresh_crl().await;
            if let Err(e) = &outcome {
                tracing::error!(error = %e, "periodic CRL refresh failed");
            }
            refresher.loops.ran(CRL_REFRESH, refresher.clock.now(), outcome);
        }
    });
    if let Some(dir) = app.config.releases_dir.clone() {
        loops.spawn(RELEASES_DIR, clock(), crate::releases_dir::watch(app.clone(), dir));
    }
    let flusher = app.clone();
    loops.spawn(CHECKIN_FLUSH, clock(), async move {
        let mut every = tokio::time::interval(std::time::Duration::from_millis(crate::app::CHECKIN_FLUSH_MS));
        loop {
            every.tick().await;
            let outcome = flusher.flush_checkins().await;
            if let Err(e) = &outcome {
                tracing::error!(error = %e, "writing buffered check-ins failed");
            }
            flusher.loops.ran(CHECKIN_FLUSH, flusher.clock.now(), outcome.map(|_| ()));
        }
    });
    // `/readyz` answers from this verdict; the first check is made before the listener opens.
    // On the blocking pool: a PostgreSQL store's client blocks (and may not run on a worker).
    let checker = app.clone();
    match tokio::task::spawn_blocking(move || crate::readiness::check(&checker, &crate::readiness::Verdict::default())).await {
        Ok(first) => app.readiness.set(first),
        Err(e) => tracing::error!(error = %e, "the first readiness check panicked"),
    }
    loops.spawn(READINESS, clock(), crate::readiness::watch(app.clone()));
    // Memory that anonymous bodies used goes back to the system once they are done.
    let trimmer = app.connections.clone();
    let trim_app = app.clone();
    loops.spawn(MEMORY_TRIM, clock(), async move {
        let mut every = tokio::time::interval(std::time::Duration::from_secs(10));
        loop {
            every.tick().await;
            // Checked here: only a trim (a walk of the heap) goes to the blocking pool.
            let mut outcome = Ok(());
            if trimmer.trim_due() {
                let limits = trimmer.clone();
                outcome = tokio::task::spawn_blocking(move || limits.trim_if_due()).await.map(|_| ());
            }
            trim_app.loops.ran(MEMORY_TRIM, trim_app.clock.now(), outcome);
        }
    });
    // The executor, the job engine, the sweeps and the reconcilers run on the leader only.
    loops.spawn(LEADER_SUPERVISION, clock(), crate::leader::supervise(app.clone(), start_leader_work));
    let router = crate::api::router(app.clone());
    let limits = app.connections.clone();
    let task = tokio::spawn(crate::server::serve(listener, tls, router, limits, app.config.connections.http1));
    tracing::info!(%addr, "coordinator listening (TLS 1.3 only)");
    Ok(Running { addr, app, task })
}
