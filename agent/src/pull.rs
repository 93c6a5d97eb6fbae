//! The pull loop: check in (long-poll), verify, act, report — and again. Every pass re-decides
//! from what the coordinator says now and what the host is now; nothing the coordinator sends
//! is acted on before [`crate::admit`] admitted it.
//!
//! - A check-in carries the agent's version, boot id, current generation, health, probe
//!   results, unacknowledged task results, the activation status and pending events, and the
//!   intent already handled (so the coordinator can hold the request until something new
//!   exists). Events and task results are dropped only after a check-in carrying them
//!   succeeded.
//! - Failures back off exponentially with jitter ([`timekeeping::backoff`]); a success waits
//!   what the coordinator asked (`nextCheckinSecs`, bounded). Several coordinator URLs are
//!   tried in order by the client (fail-over).
//! - Each pass looks at the clock first: a step back is reported and verification keeps the
//!   latest time seen; the certificate is renewed at about two thirds of its life.
//!
//! The host side (health, probes, activation) sits behind [`HostOps`], so the loop runs the
//! same in tests against fakes as in production against the real parts.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use drover_client::{ClientError, ClientIdentity, CoordinatorClient};
use drover_proto::enroll::{ProofBundle, RenewRequest, RenewResponse};
use drover_proto::report::{
    ActivationStatus, CheckinRequest, CheckinResponse, HealthReport, MAX_EVENTS_PER_CHECKIN, ProbeResult, ReportEvent, TaskResult,
};
use drover_proto::sig::Envelope;
use drover_proto::spec::ProbeSpec;
use drover_proto::time::Time;
use drover_proto::verify::HostIdentity;
use tokio::sync::watch;

use crate::admit::{self, Admitted, Anchors};
use crate::director::{DirectorError, Followed};
use crate::records::{JournalEntry, Records};
use crate::state::{Identity, StateDir, StateError};
use crate::timekeeping::{self, read_clock};

/// The check-in route.
pub const CHECKIN_PATH: &str = "/v1/agent/checkin";
/// The renewal route.
pub const RENEW_PATH: &str = "/v1/agent/renew";
/// The longest wait between check-ins the agent accepts from the coordinator.
pub const MAX_NEXT_CHECKIN_SECS: u64 = 3600;
/// Most events kept while the coordinator is unreachable (the oldest are dropped first).
pub const MAX_PENDING_EVENTS: usize = 256;
/// How long journal entries outlive their task's expiry (covers clock skew).
pub const JOURNAL_GRACE_SECS: u64 = 86_400;

/// The activation side's answer to an intent or a resumed activation.
#[derive(Debug, Clone, PartialEq)]
pub struct ActivationOutcome {
    /// Where the activation stands.
    pub status: ActivationStatus,
    /// What to report (a roll-back, …).
    pub events: Vec<ReportEvent>,
}

/// The host's side of the loop. Blocking calls: the loop runs them on tokio's blocking pool.
pub trait HostOps: Send + Sync + 'static {
    /// Health now.
    fn health(&self) -> Option<HealthReport>;
    /// The closure `/run/current-system` points to.
    fn current_generation(&self) -> Option<String>;
    /// Runs `probes` (the manifest's and the local observe-only ones).
    fn probes(&self, probes: &[ProbeSpec]) -> Vec<ProbeResult>;
    /// Acts on an admitted intent (switch, confirm, roll back); may take minutes.
    fn activate(&self, admitted: &Admitted) -> ActivationOutcome;
    /// Resolves an activation a previous run left pending (at start-up).
    fn resume(&self) -> Option<ActivationOutcome>;
    /// Runs an admitted maintenance task (plan, then execute); may take minutes.
    fn run_task(&self, task: &drover_proto::task::Task) -> TaskResult;
    /// The last act of `node.uninstall`, once its result was reported: stop the agent's own
    /// unit. An error means the caller must exit by itself.
    fn finish_uninstall(&self) -> Result<(), crate::systemd::SystemdError>;
    /// `subject` signed with the host's evidence key, made `at`; `None` where the host has
    /// no evidence key (or signing failed, which is logged).
    fn evidence(&self, at: drover_proto::time::Time, subject: drover_proto::evidence::Subject) -> Option<drover_proto::evidence::Evidence> {
        let _ = (at, subject);
        None
    }
}

/// Loop settings (the `[checkin]` table of `agent.toml`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PullSettings {
    /// Longest a check-in request may take; must exceed the coordinator's long-poll hold.
    pub request_timeout_secs: u64,
    /// First backoff after a failure.
    pub backoff_base_secs: u64,
    /// Longest backoff.
    pub backoff_max_secs: u64,
}

impl Default for PullSettings {
    fn default() -> Self {
        PullSettings { request_timeout_secs: 330, backoff_base_secs: 1, backoff_max_secs: 300 }
    }
}

/// Why a pass failed (the loop backs off and tries again).
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    /// Talking to the coordinator failed.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The state directory failed.
    #[error(transparent)]
    State(#[from] StateError),
    /// A blocking host operation died.
    #[error("host operation failed: {0}")]
    Host(String),
}

/// Why a certificate renewal failed (the agent keeps its certificate and tries again on the
/// next pass).
#[derive(Debug, thiserror::Error)]
pub enum RenewError {
    /// The state directory failed (reading the certificate, key or CA, writing the new one).
    #[error(transparent)]
    State(#[from] StateError),
    /// The current certificate's validity window could not be read.
    #[error(transparent)]
    Validity(#[from] timekeeping::CertValidityError),
    /// The key file is not UTF-8.
    #[error(transparent)]
    KeyNotUtf8(#[from] std::string::FromUtf8Error),
    /// The key file does not hold a key.
    #[error("{}: {source}", crate::state::KEY)]
    Key {
        /// The parser's error.
        #[source]
        source: rcgen::Error,
    },
    /// The CSR could not be made, or the issued certificate is not this host's.
    #[error(transparent)]
    Enroll(#[from] crate::enroll::EnrollError),
    /// The coordinator refused or could not be reached, or the certificates do not parse.
    #[error(transparent)]
    Client(#[from] ClientError),
}

pub use crate::timekeeping::{Clock, SystemClock};

/// The coordinator client, replaced in place when the certificate is renewed.
#[derive(Debug, Clone)]
pub struct SharedClient(Arc<RwLock<CoordinatorClient>>);

impl SharedClient {
    /// Wraps `client`.
    pub fn new(client: CoordinatorClient) -> Self {
        SharedClient(Arc::new(RwLock::new(client)))
    }

    /// The current client (cheap: reqwest clients share their pool).
    pub fn get(&self) -> CoordinatorClient {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set(&self, client: CoordinatorClient) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = client;
    }
}

/// Builds a client for the coordinator with the certificate and key in `state`.
pub type ClientFactory = Arc<dyn Fn(ClientIdentity) -> Result<CoordinatorClient, ClientError> + Send + Sync>;

/// How often a check-in shows the highest release seen even when nothing suggests the
/// coordinator is behind.
pub const SHOW_RELEASE_EVERY_SECS: u64 = 600;

/// Whether this check-in carries the highest release seen: while the coordinator serves an
/// older one, on the first check-in (after a start or a failed one), and every
/// [`SHOW_RELEASE_EVERY_SECS`].
pub fn show_release(coordinator_behind: bool, shown_at: Option<Time>, now: Time) -> bool {
    coordinator_behind || shown_at.is_none_or(|at| now.secs_since(at) >= SHOW_RELEASE_EVERY_SECS as i64 || now < at)
}

/// The running agent.
pub struct Agent {
    state: StateDir,
    identity: Identity,
    anchors: Anchors,
    client: SharedClient,
    make_client: ClientFactory,
    host: Arc<dyn HostOps>,
    clock: Arc<dyn Clock>,
    settings: PullSettings,
    boot_id: String,
    local_probes: Vec<ProbeSpec>,
    manifest_probes: Vec<ProbeSpec>,
    events: Vec<ReportEvent>,
    activation: Option<ActivationStatus>,
    /// The coordinator served an intent from a release older than this agent's floor: until
    /// it serves one that passes, check-ins carry the highest release seen.
    coordinator_behind: bool,
    /// When the highest release seen was last shown: it is shown again at the first check-in
    /// after the agent starts or the coordinator could not be reached (a coordinator comes
    /// back restored from a backup only after being down) and every
    /// [`SHOW_RELEASE_EVERY_SECS`] besides.
    release_shown_at: Option<Time>,
    renew_at: Option<Time>,
    tasks: crate::task_worker::TaskWorker,
    /// Whether the coordinator said it has no record of this host (restored from an older
    /// backup): said once, asked again every few minutes.
    host_unknown: crate::host_unknown::HostUnknown,
    /// A completed `node.uninstall`'s result, held in memory (its task may have purged the
    /// state dir): reported by [`Agent::report_uninstall`], then the agent stops.
    uninstalled: Option<TaskResult>,
    /// Set once the uninstall was reported: the loop ends.
    stopping: bool,
}

impl Agent {
    /// An agent over an enrolled state directory. `local_probes` are forced to observe mode by
    /// the caller (only the signed manifest may define gating probes).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        state: StateDir,
        client: SharedClient,
        make_client: ClientFactory,
        host: Arc<dyn HostOps>,
        clock: Arc<dyn Clock>,
        settings: PullSettings,
        boot_id: String,
        local_probes: Vec<ProbeSpec>,
    ) -> Result<Agent, StateError> {
        let identity = state.read_identity()?;
        let anchors = Anchors::load(&state, clock.now())?;
        Ok(Agent {
            state,
            identity,
            anchors,
            client,
            make_client,
            host,
            clock,
            settings,
            boot_id,
            local_probes,
            manifest_probes: Vec::new(),
            events: Vec::new(),
            activation: None,
            coordinator_behind: false,
            release_shown_at: None,
            renew_at: None,
            tasks: Default::default(),
            host_unknown: Default::default(),
            uninstalled: None,
            stopping: false,
        })
    }

    /// Reports the agent's one-line status (not ready while the coordinator has no record of
    /// this host) to `sink`: systemd's `STATUS=` under `drover-agent run`.
    pub fn reporting_status(mut self, sink: crate::host_unknown::StatusSink) -> Agent {
        self.host_unknown = crate::host_unknown::HostUnknown::reporting_to(sink);
        self
    }

    /// The client the agent uses now (for the activation side's confirmations).
    pub fn client(&self) -> SharedClient {
        self.client.clone()
    }

    fn push_event(&mut self, e: ReportEvent) {
        tracing::warn!(event = ?e, "reporting");
        self.events.push(e.bounded());
        if self.events.len() > MAX_PENDING_EVENTS {
            self.events.remove(0);
        }
    }

    async fn blocking<T: Send + 'static>(&self, f: impl FnOnce(&dyn HostOps) -> T + Send + 'static) -> Result<T, PullError> {
        let host = self.host.clone();
        tokio::task::spawn_blocking(move || f(&*host)).await.map_err(|e| PullError::Host(e.to_string()))
    }

    /// Runs until `stop` turns true. A pending activation from a previous run is resolved
    /// first, before any new intent is looked at.
    pub async fn run(mut self, mut stop: watch::Receiver<bool>) -> Result<(), PullError> {
        if let Some(outcome) = self.blocking(|h| h.resume()).await? {
            self.activation = Some(outcome.status);
            for e in outcome.events {
                self.push_event(e);
            }
        }
        // Tasks a previous process left queued or running are reported, never run again.
        let mut journal = self.state.journal()?;
        let interrupted = journal.interrupted(self.clock.now());
        if interrupted > 0 {
            tracing::warn!(interrupted, "tasks interrupted by the last stop are reported failed");
            self.state.put_journal(&journal)?;
        }
        let task_done = self.tasks.done();
        let mut failures: u32 = 0;
        while !*stop.borrow() && !self.stopping {
            let wait = tokio::select! {
                r = self.pass() => match r {
                    Ok(wait) => {
                        failures = 0;
                        self.host_unknown.succeeded();
                        wait
                    }
                    Err(e) => {
                        failures = failures.saturating_add(1);
                        let wait = timekeeping::backoff(
                            failures,
                            Duration::from_secs(self.settings.backoff_base_secs),
                            Duration::from_secs(self.settings.backoff_max_secs),
                            rand::random::<f64>(),
                        );
                        // A coordinator that has no record of this host: said once, asked again in minutes.
                        if let Some(recheck) = self.host_unknown.failed(&e, rand::random::<f64>()) {
                            recheck
                        } else {
                            tracing::warn!(error = %e, failures, retry_in_ms = wait.as_millis() as u64, "check-in failed");
                            wait
                        }
                    }
                },
                // A finished task is reported at once: the held check-in is dropped (nothing it
                // carried is lost: results and events go only after a check-in succeeded).
                _ = task_done.notified() => Duration::ZERO,
                _ = stop.changed() => break,
            };
            if self.stopping {
                break;
            }
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = stop.changed() => break,
            }
        }
        Ok(())
    }

    /// One pass: clock, renewal, check-in, then the intent and tasks it returned. Returns how
    /// long to wait before the next.
    pub async fn pass(&mut self) -> Result<Duration, PullError> {
        if self.uninstalled.is_some() {
            return self.report_uninstall().await;
        }
        // A finished task first, before anything touches the state dir: a `node.uninstall`
        // may have purged it. Other results are journaled at once (no await in between), so
        // a pass dropped for the next wake-up never loses one.
        if let Some((task, result)) = self.tasks.finished(&self.host, self.clock.now()) {
            if crate::task_worker::is_completed_uninstall(&task, &result) {
                self.uninstalled = Some(result);
                return self.report_uninstall().await;
            }
            let mut journal = self.state.journal()?;
            journal.finish(result);
            self.state.put_journal(&journal)?;
        }
        let mut seen = self.state.seen()?;
        let reading = read_clock(seen.latest_time, self.clock.now());
        if let Some(e) = reading.stepped_back.clone() {
            self.push_event(e);
        }
        if seen.latest_time != Some(reading.latest) {
            seen.latest_time = Some(reading.latest);
            self.state.put_seen(&seen)?;
        }
        let now = reading.effective;
        // A coordinator with no record of this host refuses the renewal too (it was told once,
        // at error level): no CSR is sent, and no warning repeats every pass, until it knows
        // the host again.
        if !self.host_unknown.is_unknown()
            && let Err(e) = self.maybe_renew(now).await
        {
            tracing::warn!(error = %e, "certificate renewal failed; retrying next pass");
        }

        let probes: Vec<ProbeSpec> = self.manifest_probes.iter().chain(&self.local_probes).cloned().collect();
        let (health, generation, probe_results, probe_evidence) = self
            .blocking(move |h| {
                let results = if probes.is_empty() { Vec::new() } else { h.probes(&probes) };
                // What the probes said, in the host's own signed word (when it has a key).
                let evidence = if results.is_empty() {
                    None
                } else {
                    h.evidence(now, drover_proto::evidence::Subject::Probes { results: results.clone() })
                };
                (h.health(), h.current_generation(), results, evidence)
            })
            .await?;
        let mut journal = self.state.journal()?;
        let task_results = journal.unacknowledged();
        let take = self.events.len().min(MAX_EVENTS_PER_CHECKIN);
        let events: Vec<ReportEvent> = self.events.drain(..take).collect();
        let req = CheckinRequest {
            agent_version: env!("CARGO_PKG_VERSION").to_owned(),
            boot_id: self.boot_id.clone(),
            current_generation: generation,
            health,
            probe_results,
            probe_evidence,
            task_results: task_results.clone(),
            activation: self.activation.clone(),
            events: events.clone(),
            known_intent_id: seen.last_intent_id.clone(),
            release_seen: show_release(self.coordinator_behind, self.release_shown_at, now).then(|| seen.highest_release.clone()).flatten(),
        };
        let resp: CheckinResponse = match self.client.get().post_json(CHECKIN_PATH, &req).await {
            Ok(r) => {
                if req.release_seen.is_some() {
                    self.release_shown_at = Some(now);
                }
                r
            }
            Err(e) => {
                // Shown again once it is back: it may come back restored from a backup.
                self.release_shown_at = None;
                // Nothing was delivered: keep the events for the next check-in.
                self.events.splice(0..0, events);
                return Err(e.into());
            }
        };
        if !task_results.is_empty() {
            journal.acknowledge(&task_results);
            journal.prune(now, JOURNAL_GRACE_SECS);
            // Kept to answer a task handed out again (a coordinator restored from an older backup).
            crate::recorded::keep(&self.state, &task_results, &journal)?;
            self.state.put_journal(&journal)?;
        }
        // Before the intent and tasks: they may already be signed by the successor key.
        self.follow_director_rotations(&resp.director_rotations, now)?;
        if let Some(env) = resp.intent {
            self.handle_intent(env, now).await?;
        }
        for env in resp.tasks {
            self.handle_task(env, now)?;
        }
        Ok(Duration::from_secs(resp.next_checkin_secs.min(MAX_NEXT_CHECKIN_SECS)))
    }

    /// Follows the director-key rotations handed out on check-in, oldest first, promoting each
    /// successor once due, so an agent that missed several rotations walks the chain. A
    /// statement addressed to another key than the pinned one is passed over (an older step
    /// already followed, or a later one not yet reachable); a refused one is logged and changes
    /// nothing: it may be an attack, and the pinned key keeps working. Only a state directory
    /// that cannot be written is an error.
    fn follow_director_rotations(&mut self, envs: &[Envelope], now: Time) -> Result<(), StateError> {
        for env in envs {
            // Read afresh each turn: following a step changes the pinned key.
            if !self.anchors.director.addressed_to_pinned(env) {
                continue;
            }
            match self.anchors.director.follow(&self.state, env, now) {
                Ok(Followed::Stored { new_key_id, valid_from }) => {
                    tracing::info!(%new_key_id, %valid_from, "director key rotation stored");
                }
                Ok(Followed::Nothing) => {}
                Err(DirectorError::State(e)) => return Err(e),
                Err(DirectorError::Refused(e)) => tracing::warn!(error = %e, "director key rotation refused"),
            }
            self.promote_director_if_due(now)?;
        }
        // A rotation held from an earlier check-in may have come due since.
        self.promote_director_if_due(now)
    }

    fn promote_director_if_due(&mut self, now: Time) -> Result<(), StateError> {
        if self.anchors.director.promote_if_due(&self.state, now)? {
            tracing::info!("director key rotated: the successor key is now pinned");
        }
        Ok(())
    }

    /// The last check-in of an uninstalled agent: only the uninstall's result (its state dir
    /// may be gone; the HTTP client still holds the identity in memory). Once it is
    /// acknowledged, the agent's own unit is stopped and the loop ends; an error stopping it
    /// just ends the loop (the unit is already disabled, so nothing starts the agent again).
    async fn report_uninstall(&mut self) -> Result<Duration, PullError> {
        let Some(result) = self.uninstalled.clone() else { return Ok(Duration::ZERO) };
        let req = CheckinRequest {
            agent_version: env!("CARGO_PKG_VERSION").to_owned(),
            boot_id: self.boot_id.clone(),
            current_generation: None,
            health: None,
            probe_results: Vec::new(),
            probe_evidence: None,
            task_results: vec![result.clone()],
            activation: None,
            events: Vec::new(),
            known_intent_id: None,
            release_seen: None,
        };
        let _: CheckinResponse = self.client.get().post_json(CHECKIN_PATH, &req).await?;
        tracing::warn!(task_id = %result.task_id, "uninstall reported; stopping the agent for good");
        if let Err(e) = self.blocking(|h| h.finish_uninstall()).await? {
            tracing::error!(error = %e, "cannot stop the agent's unit; exiting instead");
        }
        self.stopping = true;
        Ok(Duration::ZERO)
    }

    fn mark_handled(&self, intent_id: Option<String>) -> Result<(), StateError> {
        let mut seen = self.state.seen()?;
        if intent_id.is_some() && seen.last_intent_id != intent_id {
            seen.last_intent_id = intent_id;
            self.state.put_seen(&seen)?;
        }
        Ok(())
    }

    async fn handle_intent(&mut self, env: Envelope, now: Time) -> Result<(), PullError> {
        // Only to remember which intent was handled; nothing else trusts it unverified.
        let intent_id = env.payload::<serde_json::Value>().ok().and_then(|v| v.get("intentId")?.as_str().map(str::to_owned));
        // An intent already acted on is never acted on again, whatever the coordinator
        // resends: its outcome was reported, and acting twice could switch back to a target
        // that was just rolled back. (A refused one is checked again, and refused again.)
        if intent_id.is_some() && intent_id == self.state.seen()?.acted_intent_id {
            tracing::debug!(intent_id = ?intent_id, "intent already handled");
            return Ok(());
        }
        let rollout = match admit::advertised_rollout(&env) {
            Ok(r) => r,
            Err(e) => {
                self.push_event(e);
                return Ok(self.mark_handled(intent_id)?);
            }
        };
        let bundle: ProofBundle = match self.client.get().get_json(&format!("/v1/rollouts/{rollout}/proof")).await {
            Ok(b) => b,
            Err(e) if e.is_transient() => return Err(e.into()),
            Err(e) => {
                self.push_event(ReportEvent::VerificationFailed { artifact: format!("rollouts/{rollout}/proof"), reason: e.to_string() });
                return Ok(self.mark_handled(intent_id)?);
            }
        };
        let seen = self.state.seen()?;
        let cached = self.state.cached_root(&rollout)?;
        let host = HostIdentity { host_id: &self.identity.host_id, hostname: &self.identity.hostname };
        let admitted = match admit::admit_intent(&env, &bundle, &self.anchors, host, &seen, cached.as_ref(), now) {
            Ok(a) => a,
            Err(e) => {
                if e.is_version_rollback() && !self.coordinator_behind {
                    tracing::warn!(
                        highest = seen.highest_timestamp_version,
                        "the coordinator serves a release older than one this host verified (restored from an older backup?); showing it the newer one"
                    );
                    self.coordinator_behind = true;
                }
                self.push_event(e);
                return Ok(self.mark_handled(intent_id)?);
            }
        };
        self.coordinator_behind = false;
        // Cache and floors (with the handled marks, in one atomic write) first, then the act:
        // a crash during the act is resolved by the activation's own pending record, never by
        // acting twice.
        if cached.is_none() {
            self.state.put_root(&admitted.cache)?;
        }
        let mut seen = self.state.seen()?;
        admit::note_admitted(&mut seen, &bundle, admitted.timestamp.doc.version);
        seen.last_intent_id = Some(admitted.intent.intent_id.clone());
        seen.acted_intent_id = Some(admitted.intent.intent_id.clone());
        self.state.put_seen(&seen)?;
        // The channel's signed probes: the only ones that may gate.
        self.manifest_probes = admitted.root.root.probes.clone();
        let outcome = self.blocking(move |h| h.activate(&admitted)).await?;
        self.activation = Some(outcome.status);
        for e in outcome.events {
            self.push_event(e);
        }
        Ok(())
    }

    fn handle_task(&mut self, env: Envelope, now: Time) -> Result<(), PullError> {
        let mut journal = self.state.journal()?;
        let task = match admit::admit_task(&env, &self.anchors, &self.identity.host_id, &journal, now) {
            Ok(admit::TaskAdmission::New(t)) => t,
            // Taken before: never run again; answered with the result it had, if one is kept.
            Ok(admit::TaskAdmission::Taken(t)) => {
                if let Some(refused) = crate::recorded::answer_again(&self.state, &mut journal, &t)? {
                    self.push_event(refused);
                }
                return Ok(());
            }
            Err((_, e)) => {
                self.push_event(e);
                return Ok(());
            }
        };
        // Journaled as taken before anything runs, so a crash can never make it run twice.
        journal.tasks.insert(task.task_id.clone(), JournalEntry { expires_at: task.expires_at, unacknowledged: None, running: true });
        self.state.put_journal(&journal)?;
        tracing::info!(task_id = %task.task_id, kind = task.kind.type_name(), "task admitted");
        self.tasks.push(task, &self.host);
        Ok(())
    }

    async fn maybe_renew(&mut self, now: Time) -> Result<(), RenewError> {
        let cert_pem = self.state.read(crate::state::CERT)?;
        let renew_at = match self.renew_at {
            Some(t) => t,
            None => {
                let (nb, na) = timekeeping::cert_validity(&cert_pem)?;
                let t = timekeeping::renew_at(nb, na, rand::random::<f64>());
                self.renew_at = Some(t);
                t
            }
        };
        if now < renew_at {
            return Ok(());
        }
        let key_pem = self.state.read(crate::state::KEY)?;
        let key_text = String::from_utf8(key_pem.clone())?;
        let key = rcgen::KeyPair::from_pem(&key_text).map_err(|source| RenewError::Key { source })?;
        let csr = crate::enroll::build_csr(&key)?;
        let resp: RenewResponse = self.client.get().post_json(RENEW_PATH, &RenewRequest { csr }).await?;
        let ca = self.state.read(crate::state::CA)?;
        let ca = drover_client::tls::parse_certificates("ca.crt", &ca)?;
        let chain = drover_client::tls::parse_certificates("certificate", resp.certificate.as_bytes())?;
        crate::enroll::check_public_key(&chain[0], &key.public_key_der())?;
        crate::enroll::check_chain(&chain, &ca, rustls::pki_types::UnixTime::now())?;
        crate::enroll::check_names(&chain[0], &self.identity.host_id, &self.identity.hostname)?;
        let identity = ClientIdentity::from_pem(resp.certificate.as_bytes(), &key_pem)?;
        let client = (self.make_client)(identity)?;
        self.state.write_cert(&resp.certificate)?;
        self.client.set(client);
        self.renew_at = None;
        tracing::info!(host_id = %self.identity.host_id, "certificate renewed");
        Ok(())
    }
}
