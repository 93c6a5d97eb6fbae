//! The coordinator's shared state and the few operations that both write the store and wake
//! the agents they concern (so a long-polling agent learns of new work within the request).
//!
//! The process holds nothing the store does not: the hub only routes wake-ups, and a cold
//! start converges to the same answers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use drover_proto::time::Time;
use tokio::sync::Notify;
use uuid::Uuid;

use crate::config::Config;
use crate::pki::Ca;
use crate::store::{self, NewIntent, NewTask, Store, StoreError};
use crate::tls::{TlsError, TlsState};

/// Where time comes from: the system clock in production, a controlled one in tests.
pub trait Clock: Send + Sync {
    /// The current instant.
    fn now(&self) -> Time;
}

/// The system clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Time {
        // A clock before 1970 or past 9999 is a broken host; the epoch makes every
        // freshness check fail loudly rather than pass.
        let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        Time::from_unix(i64::try_from(secs).unwrap_or(0)).unwrap_or(Time::EPOCH)
    }
}

/// Per-host wake-ups for long-polling check-ins.
#[derive(Default)]
pub struct Hub {
    waiters: Mutex<HashMap<Uuid, Arc<Notify>>>,
    held: std::sync::atomic::AtomicUsize,
    /// The other replicas (PostgreSQL only): told of every wake-up, since the host's agent
    /// may be long-polling on one of them.
    pub peers: std::sync::OnceLock<crate::peers::WakeSender>,
}

impl Hub {
    fn slot(&self, host: Uuid) -> Arc<Notify> {
        self.waiters.lock().unwrap_or_else(|e| e.into_inner()).entry(host).or_default().clone()
    }

    /// Wakes `host`'s waiting check-in, here and on the other replicas, or makes its next
    /// wait return at once.
    pub fn notify(&self, host: Uuid) {
        self.notify_local(host);
        if let Some(peers) = self.peers.get() {
            let _ = peers.send(crate::peers::Wake::Host(host));
        }
    }

    /// [`Hub::notify`] on this replica only (what another replica told it).
    pub fn notify_local(&self, host: Uuid) {
        // notify_one stores a permit when nobody waits yet, closing the race between an
        // agent's "nothing for me" query and its wait.
        self.slot(host).notify_one();
    }

    /// Wakes every check-in held here now (wake-ups may have been missed); each re-reads.
    pub fn wake_all_local(&self) {
        for slot in self.waiters.lock().unwrap_or_else(|e| e.into_inner()).values() {
            slot.notify_waiters();
        }
    }

    /// Waits until `host` is notified or `timeout` passes; true when notified.
    pub async fn wait(&self, host: Uuid, timeout: Duration) -> bool {
        use std::sync::atomic::Ordering;
        /// Counts a held check-in for exactly as long as it is held, even when the client
        /// disconnects and the request's future is dropped mid-wait.
        struct Held<'a>(&'a std::sync::atomic::AtomicUsize);
        impl Drop for Held<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        let slot = self.slot(host);
        self.held.fetch_add(1, Ordering::SeqCst);
        let _held = Held(&self.held);
        tokio::time::timeout(timeout, slot.notified()).await.is_ok()
    }

    /// Check-ins currently held open.
    pub fn held(&self) -> usize {
        self.held.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// The agent binary the coordinator serves to bootstrap scripts, with its sha256.
pub struct AgentBinary {
    /// The bytes (reference-counted: every download shares them, none copies them).
    pub bytes: axum::body::Bytes,
    /// Lowercase hex sha256, baked into every served bootstrap script.
    pub sha256: String,
    /// Its downloads in progress, bounded ([`crate::agent_download`]).
    pub downloads: crate::agent_download::Downloads,
    /// Its debug sections, when it carries any: warned of at start.
    pub debug: Option<crate::agent_download::DebugSections>,
}

/// Everything a request handler may use.
pub struct AppState {
    /// The parsed configuration.
    pub config: Config,
    /// The store.
    pub store: Arc<dyn Store>,
    /// The CA (issues host certificates, signs the CRL).
    pub ca: Arc<Ca>,
    /// The live TLS config (swapped on revocation).
    pub tls: Arc<TlsState>,
    /// The director keys (sign intents and tasks), with their rotation if one is in place.
    pub director: Arc<crate::director::Director>,
    /// The server key's pin, `sha256//…`, for bootstrap commands.
    pub server_pin: String,
    /// The CI trust roots served to enrolling agents, byte-exact.
    pub trust_json: axum::body::Bytes,
    /// The same trust roots, parsed once at start: what every published release verifies against.
    pub trust: Arc<drover_proto::trust::TrustRoots>,
    /// The agent binary.
    pub agent: AgentBinary,
    /// The agent's Debian package, when `agent_package` names one.
    pub agent_package: Option<AgentBinary>,
    /// Long-poll wake-ups.
    pub hub: Hub,
    /// Whether this replica runs the leader work (always, on SQLite).
    pub leader: crate::leader::Leadership,
    /// Wake-ups to and from the other replicas (PostgreSQL only; kept for the listener).
    pub peers: std::sync::OnceLock<crate::peers::Peers>,
    /// Rollout bundles as served, one copy per (release, rollout).
    pub bundles: crate::bundles::BundleCache,
    /// Each rollout's host-set tree, signed root and timestamp, one per (release, rollout).
    pub proofs: crate::bundles::BundleCache<Arc<crate::api::agent_proofs::RolloutProofs>>,
    /// Time.
    pub clock: Arc<dyn Clock>,
    /// Serials revoked as of the last CRL refresh, checked on every request.
    pub revoked: std::sync::RwLock<std::collections::HashSet<String>>,
    /// Serialises CRL refreshes, so an older list can never be installed after a newer one.
    pub crl_lock: tokio::sync::Mutex<()>,
    /// Check-ins of hosts whose state does not change, buffered and written in one
    /// transaction every [`CHECKIN_FLUSH_MS`] (see [`AppState::flush_checkins`]).
    pub pending_checkins: Mutex<HashMap<Uuid, store::Checkin>>,
    /// Hosts' latest health reports, buffered and written with the check-ins.
    pub pending_health: Mutex<HashMap<Uuid, store::HostHealth>>,
    /// Event counters for `/metrics` (state gauges are read from the store at scrape time).
    pub metrics: crate::metrics::Metrics,
    /// Wakes the rollout executor.
    pub executor: crate::executor::Trigger,
    /// The stored manifests the executor's last tick used.
    pub manifest_cache: Arc<std::sync::Mutex<crate::executor::cache::ManifestCache>>,
    /// The latest release, verified once and read by every subsystem ([`crate::latest_release`]).
    pub latest_release: Arc<crate::latest_release::LatestRelease>,
    /// Where MAAS sites' secrets live; read at use time, never cached.
    pub secrets: Arc<dyn crate::secrets::SecretStore>,
    /// How the coordinator reaches a site's MAAS.
    pub maas: Arc<dyn crate::sites::probe::MaasProbe>,
    /// The MAAS drift reconciler's per-site locks and last passes.
    pub reconciler: crate::reconciler::Reconciler,
    /// How the device controllers reach BMCs and PMCs.
    pub power: Arc<dyn crate::devices::power::PowerControl>,
    /// Device work in flight beside the shelf and rack controllers.
    pub device_work: crate::devices::work::WorkTable,
    /// The listener's connection bounds and their counters.
    pub connections: Arc<crate::conn_limits::ConnLimits>,
    /// `/readyz`'s verdict, kept by [`crate::readiness::watch`].
    pub readiness: crate::readiness::Readiness,
    /// Every background loop: running or not, passes, last error ([`crate::loops`]).
    pub loops: Arc<crate::loops::Loops>,
    /// The highest release agents proved they verified ([`crate::fleet_release`]).
    pub fleet_release: crate::fleet_release::FleetRelease,
}

/// Why the CRL could not be refreshed.
#[derive(Debug, thiserror::Error)]
pub enum CrlError {
    /// Reading revocations failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Signing the CRL failed.
    #[error(transparent)]
    Pki(#[from] crate::pki::PkiError),
    /// Installing it failed.
    #[error(transparent)]
    Tls(#[from] TlsError),
}

/// How often buffered check-ins are written. A crash loses at most this much of hosts'
/// last-seen times, which nothing decides on at that scale (offline takes minutes).
pub const CHECKIN_FLUSH_MS: u64 = 1000;

/// How long a CRL says it is good for; it is re-signed on every revocation and at start.
pub const CRL_VALIDITY_SECS: u64 = 7 * 86_400;

impl AppState {
    /// Signs a CRL from the store's revocations and installs it for every new handshake.
    pub async fn refresh_crl(self: &Arc<Self>) -> Result<(), CrlError> {
        let _one_at_a_time = self.crl_lock.lock().await;
        let revoked = store::blocking(self.store.clone(), |s| s.list_revoked()).await?;
        let entries: Vec<(String, Time)> = revoked.into_iter().map(|r| (r.serial, r.revoked_at)).collect();
        let crl = self.ca.crl(&entries, self.clock.now(), CRL_VALIDITY_SECS)?;
        self.tls.set_crl(&crl)?;
        let serials = entries.into_iter().map(|(serial, _)| serial).collect();
        *self.revoked.write().unwrap_or_else(|e| e.into_inner()) = serials;
        Ok(())
    }

    /// Buffers a routine check-in (the host's state does not change) for the next flush.
    pub fn note_checkin(&self, host: Uuid, checkin: store::Checkin) {
        self.pending_checkins.lock().unwrap_or_else(|e| e.into_inner()).insert(host, checkin);
    }

    /// Writes every buffered check-in in one store transaction. Called on a timer, before
    /// the offline sweep (so a host that just checked in is never marked silent), and at
    /// shutdown.
    pub async fn flush_checkins(self: &Arc<Self>) -> Result<u64, StoreError> {
        let batch: Vec<(Uuid, store::Checkin)> =
            std::mem::take(&mut *self.pending_checkins.lock().unwrap_or_else(|e| e.into_inner())).into_iter().collect();
        let health: Vec<store::HostHealth> =
            std::mem::take(&mut *self.pending_health.lock().unwrap_or_else(|e| e.into_inner())).into_values().collect();
        if batch.is_empty() && health.is_empty() {
            return Ok(0);
        }
        store::blocking(self.store.clone(), move |s| {
            if !health.is_empty() {
                s.record_host_health(&health)?;
            }
            if batch.is_empty() { Ok(0) } else { s.record_checkins(&batch) }
        })
        .await
    }

    /// Buffers a host's latest health report for the next flush (a later one replaces it).
    pub fn note_health(&self, health: store::HostHealth) {
        self.pending_health.lock().unwrap_or_else(|e| e.into_inner()).insert(health.host_id, health);
    }

    /// Whether a certificate serial is revoked (as of the last refresh).
    pub fn is_revoked(&self, serial: &str) -> bool {
        self.revoked.read().unwrap_or_else(|e| e.into_inner()).contains(serial)
    }

    /// Revokes every certificate of a host and installs the new CRL, so none of them
    /// completes another handshake. Operator revocation uses it now; removing a host (the
    /// lifecycle verbs) goes through it too. Returns how many certificates were revoked.
    pub async fn revoke_host(self: &Arc<Self>, host_id: Uuid, reason: String) -> Result<u64, CrlError> {
        let at = self.clock.now();
        let revoked = store::blocking(self.store.clone(), move |s| {
            if s.get_host(host_id)?.is_none() {
                return Err(StoreError::NotFound { what: "host", id: host_id.to_string() });
            }
            s.revoke_host_certs(host_id, at, &reason)
        })
        .await?;
        self.revocations_changed().await?;
        Ok(revoked)
    }

    /// After revocations were stored: signs and installs the CRL here, and has the other
    /// replicas re-read it too, so no replica accepts a revoked certificate.
    pub async fn revocations_changed(self: &Arc<Self>) -> Result<(), CrlError> {
        self.refresh_crl().await?;
        if let Some(peers) = self.hub.peers.get() {
            let _ = peers.send(crate::peers::Wake::Revocations);
        }
        Ok(())
    }

    /// Stores a signed intent as the host's current one and wakes its check-in.
    pub async fn dispatch_intent(self: &Arc<Self>, intent: NewIntent) -> Result<(), StoreError> {
        let host = intent.host_id;
        store::blocking(self.store.clone(), move |s| s.put_intent(&intent)).await?;
        self.hub.notify(host);
        Ok(())
    }

    /// Queues a signed task for its host and wakes its check-in.
    pub async fn dispatch_task(self: &Arc<Self>, task: NewTask) -> Result<(), StoreError> {
        let host = task.host_id;
        store::blocking(self.store.clone(), move |s| s.enqueue_task(&task)).await?;
        self.hub.notify(host);
        Ok(())
    }
}
