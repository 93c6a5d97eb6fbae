//! The simulated fleet at run time: one tokio task per agent, each a [`SimAgent`] with its own
//! client (its own certificate, its own TLS connection) checking in again as soon as the
//! coordinator answers, as `drover-agent run` does. What the agents see is gathered in
//! [`Shared`]: every intent received (when, and whether the coordinator took the
//! confirmation), check-ins answered, errors.
//!
//! Offline hosts take part until the rollout starts ([`Swarm::rollout_started`]); then each
//! drops its connection mid-long-poll, stays away for the scenario's `rejoin_secs`, and comes
//! back on a new connection with everything it had seen, as an agent whose network (or
//! process) came back.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use drover_agent::admit::Anchors;
use drover_client::{CoordinatorClient, tls_config};
use rustls::pki_types::CertificateDer;
use tokio::sync::watch;

use super::FleetError;
use super::enroll::{ClientIdentityPem, Enrolled};
use super::scenario::{Http, Role, Scenario, SimHost, closure};
use crate::sim_agent::{SimAgent, VerifyCache};

/// An intent one simulated agent received.
#[derive(Debug, Clone)]
pub struct Receipt {
    /// The host.
    pub hostname: String,
    /// Its role in the scenario.
    pub role: Role,
    /// The intent's rollout.
    pub rollout_id: String,
    /// When the check-in answer carrying it arrived.
    pub received: SystemTime,
    /// Whether the coordinator accepted the confirmation.
    pub confirmed: bool,
    /// Body bytes the coordinator sent for it (the check-in answer and the proof bundle).
    pub bytes: u64,
}

/// What the agents saw, shared between their tasks and the runner.
#[derive(Default)]
pub struct Shared {
    /// Every intent received, in arrival order.
    pub receipts: Mutex<Vec<Receipt>>,
    /// Check-ins the coordinator answered.
    pub checkins_answered: AtomicU64,
    /// Requests that failed (the agent retried after a second).
    pub errors: AtomicU64,
    /// The last failure, for the report.
    pub last_error: Mutex<Option<String>>,
    /// Intents or tasks the admission code refused, with why.
    pub refused: Mutex<Vec<String>>,
    /// Offline hosts back on a new connection.
    pub rejoined: AtomicU64,
    /// Bundle verifications shared by every agent.
    pub cache: Arc<VerifyCache>,
}

/// The running agents.
pub struct Swarm {
    tasks: tokio::task::JoinSet<()>,
    /// What they saw.
    pub shared: Arc<Shared>,
    started: watch::Sender<bool>,
    ca: Arc<Vec<CertificateDer<'static>>>,
    urls: Vec<String>,
    local: Option<IpAddr>,
}

/// A client for one agent: its own connection pool (so its own TLS connection), presenting
/// its certificate, trying `urls` in order (failing over as `drover-agent` does); requests
/// may take the long-poll plus a margin.
fn agent_client(
    urls: &[String],
    ca: &[CertificateDer<'static>],
    identity: &ClientIdentityPem,
    long_poll_secs: u64,
    http: Http,
    local: Option<IpAddr>,
) -> Result<CoordinatorClient, FleetError> {
    let timeout = Duration::from_secs(long_poll_secs + 30);
    let mut tls = tls_config(ca, Some(identity.identity()?)).map_err(FleetError::client("agent client"))?;
    tls.alpn_protocols = http.alpn();
    CoordinatorClient::with_tls_from("drover-sim-agent", urls, tls, timeout, local).map_err(FleetError::client("agent client"))
}

impl Swarm {
    /// No agents yet; they will talk to the coordinator replicas at `urls`, trusting `ca`.
    /// Agents are dealt across the replicas in turn: the n-th lists `urls` rotated by n, so
    /// each replica is first for an equal share and the others follow as fail-overs.
    pub fn new(urls: &[String], ca: Vec<CertificateDer<'static>>) -> Swarm {
        let (started, _) = watch::channel(false);
        Swarm {
            tasks: tokio::task::JoinSet::new(),
            shared: Arc::new(Shared::default()),
            started,
            ca: Arc::new(ca),
            urls: urls.to_vec(),
            local: None,
        }
    }

    /// The agents' connections are made from the local address `local` (one loopback address
    /// per simulator process, so that no address runs out of ephemeral ports).
    pub fn from_address(mut self, local: IpAddr) -> Swarm {
        self.local = Some(local);
        self
    }

    /// Starts `host`'s agent: it runs generation 1 and checks in at once (its first check-in
    /// opens its connection and makes the host active).
    pub fn start(&mut self, enrolled: &Enrolled, host: &SimHost, anchors: &Anchors, scenario: &Scenario) -> Result<(), FleetError> {
        let mut urls = self.urls.clone();
        urls.rotate_left(self.tasks.len() % self.urls.len().max(1));
        let client = agent_client(&urls, &self.ca, &enrolled.identity, scenario.long_poll_secs, scenario.http, self.local)?;
        let agent = SimAgent::with_client(client, &enrolled.hostname, enrolled.host_id, anchors.clone(), host.role.behaviour(scenario))
            .running(&closure(&enrolled.hostname, 1))
            .sharing(self.shared.cache.clone());
        let away = (host.role == Role::Offline).then(|| Away {
            rejoin: Duration::from_secs(scenario.rejoin_secs),
            started: self.started.subscribe(),
            reconnect: Reconnect {
                urls,
                ca: self.ca.clone(),
                identity: enrolled.identity.clone(),
                long_poll_secs: scenario.long_poll_secs,
                http: scenario.http,
                local: self.local,
            },
        });
        let shared = self.shared.clone();
        let role = host.role;
        self.tasks.spawn(agent_loop(agent, role, away, shared));
        Ok(())
    }

    /// Agents started.
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// Whether none were started.
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// The rollout has started: offline hosts drop their connections now.
    pub fn rollout_started(&self) {
        self.started.send_replace(true);
    }

    /// Stops every agent (their connections close).
    pub async fn stop(mut self) {
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
    }
}

/// How an offline host leaves and comes back.
struct Away {
    rejoin: Duration,
    started: watch::Receiver<bool>,
    reconnect: Reconnect,
}

/// What a new connection needs.
struct Reconnect {
    urls: Vec<String>,
    ca: Arc<Vec<CertificateDer<'static>>>,
    identity: ClientIdentityPem,
    long_poll_secs: u64,
    http: Http,
    local: Option<IpAddr>,
}

/// One agent, until aborted: check in, handle what comes, check in again.
async fn agent_loop(mut agent: SimAgent, role: Role, mut away: Option<Away>, shared: Arc<Shared>) {
    loop {
        if let Some(a) = away.as_mut().filter(|a| *a.started.borrow()) {
            // Gone: the old client (and its connection) is dropped with the replacement, and
            // the host is silent until it comes back.
            let r = &a.reconnect;
            match agent_client(&r.urls, &r.ca, &r.identity, r.long_poll_secs, r.http, r.local) {
                Ok(client) => agent.replace_client(client),
                Err(e) => note_error(&shared, &agent.hostname, &e.to_string()),
            }
            tokio::time::sleep(a.rejoin).await;
            shared.rejoined.fetch_add(1, Ordering::Relaxed);
            away = None;
        }
        let before = agent.handled.len();
        let outcome = match away.as_mut() {
            // Until the rollout starts, an offline host's long-poll is cut the moment it does.
            Some(a) => {
                let mut started = a.started.clone();
                tokio::select! {
                    r = agent.step(crate::wall_now()) => Some(r),
                    _ = started.wait_for(|s| *s) => None,
                }
            }
            None => Some(agent.step(crate::wall_now()).await),
        };
        match outcome {
            None => continue,
            Some(Ok(_)) => {
                shared.checkins_answered.fetch_add(1, Ordering::Relaxed);
                if agent.handled.len() > before {
                    let h = agent.handled.last().cloned();
                    if let (Some(h), Some(received)) = (h, agent.last_receipt) {
                        let receipt = Receipt {
                            hostname: agent.hostname.clone(),
                            role,
                            rollout_id: h.rollout_id,
                            received,
                            confirmed: h.confirmed,
                            bytes: agent.last_intent_bytes,
                        };
                        shared.receipts.lock().unwrap_or_else(|e| e.into_inner()).push(receipt);
                    }
                }
                let refused = std::mem::take(&mut agent.refused);
                if !refused.is_empty() {
                    shared
                        .refused
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .extend(refused.into_iter().map(|r| format!("{}: {r}", agent.hostname)));
                }
            }
            Some(Err(e)) => {
                note_error(&shared, &agent.hostname, &e.to_string());
                // A real agent backs off before trying again; so does this one.
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

fn note_error(shared: &Shared, hostname: &str, message: &str) {
    shared.errors.fetch_add(1, Ordering::Relaxed);
    *shared.last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(format!("{hostname}: {message}"));
}
