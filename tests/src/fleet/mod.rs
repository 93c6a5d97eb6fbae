//! The fleet simulator behind `drover-bench fleet`: thousands of simulated agents in one
//! process, each enrolled through the real API with its own key and certificate and holding
//! its own mTLS connection, against a real `drover-coordinator serve` process on loopback.
//!
//! - [`scenario`]: the fleet's shape and the release rolled through it (pure);
//! - [`enroll`]: hosts created and enrolled through `POST /v1/hosts` and `POST /v1/enroll`;
//! - [`swarm`]: one task per simulated agent: long-poll check-ins, proof fetch, admission,
//!   confirmation, probe results, and the scripted slow, failing and offline hosts;
//! - [`parts`]: the swarm split over child processes, each from its own loopback address;
//! - [`measure`]: what is read off the coordinator (`/proc`, `/metrics`, its log, its store)
//!   and the percentiles;
//! - [`servers`]: the coordinator on SQLite, or replicas on PostgreSQL and the database,
//!   started and measured as a whole;
//! - [`run`]: one run from an empty directory to a converged rollout, and its report.
//!
//! The coordinator does not know it is being simulated: no route, flag or code path exists
//! for the simulator. Dispatch latency is taken from the line the coordinator logs for every
//! decision (after the plan is committed, before any agent is woken) to the moment the
//! simulated agent has the check-in answer carrying the intent.

pub mod enroll;
pub mod measure;
pub mod parts;
pub mod run;
pub mod scenario;
pub mod servers;
pub mod swarm;

/// Why a simulated run failed.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// The scenario is not runnable.
    #[error(transparent)]
    Scenario(#[from] scenario::ScenarioError),
    /// A request to the coordinator failed.
    #[error("{what}: {source}")]
    Client {
        /// What was being done.
        what: String,
        /// The client's error.
        #[source]
        source: drover_client::ClientError,
    },
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// Setting up the site or the coordinator failed.
    #[error("setup: {0}")]
    Setup(String),
    /// The rollout did not converge in time.
    #[error("the rollout did not converge within {secs} s: {state}")]
    NotConverged {
        /// The bound.
        secs: u64,
        /// Where it stood.
        state: String,
    },
    /// The fleet did not connect in time.
    #[error("only {connected} of {wanted} agents held a long-poll after {secs} s")]
    NotConnected {
        /// Held long-polls the coordinator reported last.
        connected: u64,
        /// Agents started.
        wanted: usize,
        /// The bound.
        secs: u64,
    },
}

impl FleetError {
    /// A client error while doing `what`.
    pub fn client(what: impl Into<String>) -> impl FnOnce(drover_client::ClientError) -> FleetError {
        let what = what.into();
        move |source| FleetError::Client { what, source }
    }
}
