//! The servers of one fleet run: one `drover-coordinator serve` on SQLite (the baseline), or
//! N replicas on one PostgreSQL database (Debian's, started in the run's directory by the
//! devkit) sharing one state dir — and what is read off them as a whole: CPU and memory of
//! the replicas and of the database's processes, `/metrics` summed over the replicas (each
//! counts only the check-ins and long-polls it serves itself), every replica's log (the
//! leader logs the dispatch decisions, and which replica leads is the election's business),
//! and the events the store holds at the end.

use std::path::{Path, PathBuf};
use std::time::Duration;

use drover_client::{ClientIdentity, CoordinatorClient};
use drover_devkit::fleet::Coordinator;
use drover_devkit::postgres::{self as pg, PostgresServer};
use rustls::pki_types::CertificateDer;

use super::FleetError;
use super::measure::{self, ProcSample, Scrape};
use super::scenario::StoreBackend;

/// Connections each replica's pool opens at most (the coordinator's default).
const POOL_SIZE: u32 = 16;

/// The coordinator processes and, on PostgreSQL, the database.
pub struct Servers {
    // Before `db`: fields drop in order, so the replicas stop before their database.
    replicas: Vec<Coordinator>,
    db: Option<PostgresServer>,
    /// One admin client per replica, each listing that replica alone (for its `/metrics`).
    per_replica: Vec<CoordinatorClient>,
    /// The coordinator CA, which every replica's server certificate chains to.
    pub ca: Vec<CertificateDer<'static>>,
    /// The same, as the PEM file the coordinator wrote (for simulator processes).
    pub ca_pem: String,
    /// Where the database's log is saved when the servers go (its own directory goes with it).
    db_log: PathBuf,
}

impl Drop for Servers {
    fn drop(&mut self) {
        // The database's log is evidence of a failed run, as the replicas' logs are.
        if let Some(db) = &self.db {
            let _ = std::fs::write(&self.db_log, db.log());
        }
    }
}

/// CPU and memory of the servers at one moment.
#[derive(Debug, Clone, Default)]
pub struct ServersSample {
    /// The replicas together: CPU and resident memory summed (peak: the sum of their peaks).
    pub coordinators: ProcSample,
    /// Each replica.
    pub replicas: Vec<ProcSample>,
    /// The database's postmaster and its backends: CPU (the exited ones' included), and
    /// proportional memory (`Pss`) as `rss_mib`; zero on SQLite, which is in the coordinator.
    pub database: ProcSample,
}

impl Servers {
    /// Starts the servers of `store` in `dir`: the coordinator(s) from `coordinator`, serving
    /// `agent`, trusting `trust_file`, configured with `sections`.
    pub fn start(
        store: StoreBackend,
        dir: &Path,
        coordinator: &Path,
        agent: &Path,
        trust_file: &Path,
        sections: &str,
    ) -> Result<Servers, FleetError> {
        let setup = |e: drover_devkit::DevkitError| FleetError::Setup(e.to_string());
        let (replicas, db) = match store {
            StoreBackend::Sqlite => (vec![Coordinator::start(dir, coordinator, agent, trust_file, sections).map_err(setup)?], None),
            StoreBackend::Postgres { replicas } => {
                // Room for every replica's pool, and for psql and the odd extra connection.
                let max_connections = Some(POOL_SIZE * replicas as u32 + 20);
                let db = PostgresServer::start(pg::PgOptions { max_connections, ..Default::default() }).map_err(setup)?;
                let store_table = |i: usize| {
                    format!(
                        "[store]\nbackend = \"postgres\"\nurl = \"{}\"\npassword_file = \"{}\"\npool_size = {POOL_SIZE}\nreplica = \"r{i}\"\n",
                        db.url(),
                        db.password_file().display()
                    )
                };
                let started =
                    Coordinator::start_replicas(dir, coordinator, agent, trust_file, sections, replicas, store_table).map_err(setup)?;
                (started, Some(db))
            }
        };
        let first = &replicas[0];
        let read = |p: &Path| std::fs::read(p).map_err(|source| FleetError::Io { path: p.display().to_string(), source });
        let ca_bytes = read(&first.ca)?;
        let ca = drover_client::parse_certificates("ca", &ca_bytes).map_err(FleetError::client("ca.crt"))?;
        let ca_pem = String::from_utf8_lossy(&ca_bytes).into_owned();
        let mut per_replica = Vec::new();
        for r in &replicas {
            let identity =
                ClientIdentity::from_pem(&read(&first.admin.0)?, &read(&first.admin.1)?).map_err(FleetError::client("admin credential"))?;
            let client =
                CoordinatorClient::new("drover-bench", std::slice::from_ref(&r.url), &ca, Some(identity), Duration::from_secs(120))
                    .map_err(FleetError::client("admin client"))?;
            per_replica.push(client);
        }
        Ok(Servers { replicas, db, per_replica, ca, ca_pem, db_log: dir.join("coordinator/postgres.log") })
    }

    /// Every replica's URL, in order.
    pub fn urls(&self) -> Vec<String> {
        self.replicas.iter().map(|r| r.url.clone()).collect()
    }

    /// The admin credential (certificate, key) every replica accepts.
    pub fn admin_identity(&self) -> Result<ClientIdentity, FleetError> {
        let admin = &self.replicas[0].admin;
        let read = |p: &Path| std::fs::read(p).map_err(|source| FleetError::Io { path: p.display().to_string(), source });
        ClientIdentity::from_pem(&read(&admin.0)?, &read(&admin.1)?).map_err(FleetError::client("admin credential"))
    }

    /// Every replica's log.
    pub fn logs(&self) -> Vec<PathBuf> {
        self.replicas.iter().map(|r| r.log.clone()).collect()
    }

    /// CPU and memory of the replicas and the database now.
    pub fn sample(&self) -> ServersSample {
        let replicas: Vec<ProcSample> = self.replicas.iter().map(|r| measure::sample(r.pid())).collect();
        let coordinators = ProcSample {
            cpu_secs: replicas.iter().map(|s| s.cpu_secs).sum(),
            rss_mib: replicas.iter().map(|s| s.rss_mib).sum(),
            peak_rss_mib: replicas.iter().map(|s| s.peak_rss_mib).sum(),
        };
        let database = self
            .db
            .as_ref()
            .and_then(|db| crate::procs::postmaster_pid(&db.data_dir()))
            .map(|pid| {
                let pss = crate::procs::tree_pss_kib(pid) as f64 / 1024.0;
                ProcSample { cpu_secs: crate::procs::tree_cpu_secs(pid), rss_mib: pss, peak_rss_mib: pss }
            })
            .unwrap_or_default();
        ServersSample { coordinators, replicas, database }
    }

    /// `/metrics` of every replica, summed.
    pub async fn scrape(&self) -> Result<Scrape, FleetError> {
        let mut sum = Scrape::default();
        for admin in &self.per_replica {
            let s = measure::scrape(admin).await?;
            sum.checkins_total += s.checkins_total;
            sum.long_polls_held += s.long_polls_held;
            sum.views_cached += s.views_cached;
            sum.views_read += s.views_read;
        }
        Ok(sum)
    }

    /// Stops every replica as systemd stops it (SIGTERM: each writes its buffered
    /// check-ins), then counts the events the store holds.
    pub fn stop_and_count_events(&mut self) -> Result<u64, FleetError> {
        let db_file = self.replicas[0].state_dir.join(drover_engine::state_dir::DB_FILE);
        self.replicas.clear();
        match &self.db {
            None => measure::events_written(&db_file),
            Some(db) => {
                let count = db.psql("SELECT count(*) FROM events").map_err(|e| FleetError::Setup(format!("counting events: {e}")))?;
                count.trim().parse().map_err(|_| FleetError::Setup(format!("counting events: psql answered {count:?}")))
            }
        }
    }
}
