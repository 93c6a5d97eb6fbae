//! A simulated agent: speaks the real agent protocol over its own mTLS connection (check-in
//! with long-poll, proof bundle fetch, confirm) and runs the agent's own admission code
//! (`drover_agent::admit::admit_intent`: timestamp, signed root, its entry's inclusion proof,
//! intent, wave membership) on
//! every intent it is handed, and the director-signature, host, window and replay rules on
//! every task. Only the work itself is simulated: a host "switches" instantly and reports
//! what its script says — healthy, failing its required probes, or failing the switch — and
//! a task "runs" instantly and succeeds (a slow host takes the time its script says to switch).
//!
//! Thousands of them share one process in `drover-bench`: a [`VerifyCache`] shared between
//! them verifies the signatures of each (root, timestamp) pair once, while every agent still
//! fetches its own proof bundle and checks its own inclusion proof, intent, host and wave.
//!
//! It is the building block of the executor's end-to-end tests and of the fleet simulator;
//! nothing in the coordinator knows it is not a real agent.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use drover_agent::admit::{Admitted, Anchors, admit_intent, admit_proven, refusal};
use drover_agent::records::Seen;
use drover_client::{ClientError, ClientIdentity, CoordinatorClient};
use drover_proto::enroll::ProofBundle;
use drover_proto::report::{
    ActivationPhase, ActivationStatus, CheckinRequest, CheckinResponse, ConfirmRequest, HealthReport, ProbeOutcome, ProbeResult,
    StepOutcome, StepResult, TaskOutcome, TaskResult,
};
use drover_proto::spec::Mode;
use drover_proto::time::Time;
use drover_proto::verify::{HostIdentity, VerifiedRoot, VerifiedTimestamp, VerifyContext, VersionFloor};
use uuid::Uuid;

/// How a simulated host behaves when it is handed an intent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    /// Switches, confirms, reports every required probe passed.
    Healthy,
    /// Like `Healthy`, but its switch takes this long between receiving the intent and
    /// confirming it (a big closure to fetch, a slow boot).
    Slow(Duration),
    /// Switches and confirms, then reports its required probes failed.
    FailsProbes,
    /// Does not report at all (its check-ins stop): offline.
    Offline,
    /// Checks in, but the tasks handed over never arrive (the answer is lost on the way): their
    /// leases lapse.
    LosesTasks,
}

/// What happened to one intent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handled {
    /// The intent's rollout.
    pub rollout_id: String,
    /// Its target.
    pub target: String,
    /// Whether the coordinator accepted the confirmation (204) — else it answered 410.
    pub confirmed: bool,
}

/// One simulated host.
pub struct SimAgent {
    /// Its hostname.
    pub hostname: String,
    /// Its host id.
    pub host_id: Uuid,
    /// Its behaviour.
    pub behaviour: Behaviour,
    /// Every intent it was handed and admitted, in order.
    pub handled: Vec<Handled>,
    /// Intents the admission code refused, with why.
    pub refused: Vec<String>,
    client: CoordinatorClient,
    anchors: Anchors,
    seen: Seen,
    running: Option<String>,
    activation: Option<ActivationStatus>,
    probes: BTreeMap<String, ProbeOutcome>,
    boot_id: String,
    /// The CA, certificate and key files, to connect again ([`SimAgent::reconnect`]); none
    /// for an agent made from a client ([`SimAgent::with_client`]).
    files: Option<[PathBuf; 3]>,
    /// Verifications shared with other simulated agents, if any.
    cache: Option<Arc<VerifyCache>>,
    /// When the last check-in that brought an intent was answered.
    pub last_receipt: Option<SystemTime>,
    /// Body bytes the coordinator sent for the last intent: the check-in answer carrying it
    /// and the proof bundle fetched for it.
    pub last_intent_bytes: u64,
    /// An admitted intent whose confirmation has not been answered yet (the coordinator was
    /// unreachable): sent again on the next step, as a real agent retries within its window.
    pending: Option<PendingConfirm>,
    /// Every task it was handed and admitted (director signature, host, window, not a replay),
    /// by id, in order. Tasks "run" instantly and succeed.
    pub tasks_run: Vec<String>,
    /// Results not yet delivered: sent with the next check-in.
    task_results: Vec<TaskResult>,
    /// Refusals to report with the next check-in (version rollbacks, as the real agent
    /// reports them; other refusals are only kept in `refused`).
    events: Vec<drover_proto::report::ReportEvent>,
    /// The coordinator served a release older than this agent's floor: check-ins carry the
    /// highest release seen, as the real agent's do.
    coordinator_behind: bool,
    /// When the highest release seen was last shown (as the real agent: again after a start
    /// or a failed check-in).
    release_shown_at: Option<Time>,
}

/// A confirmation still to be delivered.
struct PendingConfirm {
    confirm: ConfirmRequest,
    required_probes: Vec<String>,
}

/// A client for `urls` (tried in order, the next on a connection failure) presenting the
/// certificate and key files, trusting the CA file.
fn connect(urls: &[String], [ca, cert, key]: &[PathBuf; 3]) -> CoordinatorClient {
    let read = |p: &Path| std::fs::read(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
    let ca = drover_client::parse_certificates("ca", &read(ca)).expect("ca");
    let chain = drover_client::parse_certificates("cert", &read(cert)).expect("cert");
    let key = drover_client::parse_private_key("key", &read(key)).expect("key");
    CoordinatorClient::new("drover-sim-agent", urls, &ca, Some(ClientIdentity { chain, key }), std::time::Duration::from_secs(30))
        .expect("client")
}

impl SimAgent {
    /// An agent for `hostname` with the certificate and key files given, trusting `ca` for
    /// the coordinator, `trust_json` for CI and `director_pem` for intents.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        url: &str,
        ca: &Path,
        (cert, key): (&Path, &Path),
        hostname: &str,
        host_id: Uuid,
        trust_json: &[u8],
        director_pem: &str,
        behaviour: Behaviour,
    ) -> SimAgent {
        let files = [ca.to_path_buf(), cert.to_path_buf(), key.to_path_buf()];
        let client = connect(&[url.to_owned()], &files);
        let ci = drover_proto::trust::TrustRoots::from_json(trust_json).expect("trust");
        let director = drover_proto::keys::verifying_key_from_text(director_pem).expect("director key");
        let anchors = Anchors { ci, director: drover_agent::director::DirectorKeys::pinned(director) };
        let mut agent = SimAgent::with_client(client, hostname, host_id, anchors, behaviour);
        agent.files = Some(files);
        agent
    }

    /// An agent talking through `client` (which presents the host's certificate), checking
    /// against `anchors`.
    pub fn with_client(client: CoordinatorClient, hostname: &str, host_id: Uuid, anchors: Anchors, behaviour: Behaviour) -> SimAgent {
        SimAgent {
            hostname: hostname.to_owned(),
            host_id,
            behaviour,
            handled: Vec::new(),
            refused: Vec::new(),
            client,
            anchors,
            seen: Seen::default(),
            running: None,
            activation: None,
            probes: BTreeMap::new(),
            boot_id: Uuid::new_v4().to_string(),
            files: None,
            cache: None,
            last_receipt: None,
            last_intent_bytes: 0,
            pending: None,
            tasks_run: Vec::new(),
            task_results: Vec::new(),
            events: Vec::new(),
            coordinator_behind: false,
            release_shown_at: None,
        }
    }

    /// The agent runs `closure` before any intent (a host installed earlier, off target).
    pub fn running(mut self, closure: &str) -> SimAgent {
        self.running = Some(closure.to_owned());
        self
    }

    /// The agent reports `activation` as its last one until it handles an intent: an
    /// activation of an intent this coordinator may never have issued (a store restored from
    /// a backup older than it).
    pub fn remembering(mut self, activation: ActivationStatus) -> SimAgent {
        self.activation = Some(activation);
        self
    }

    /// Verifies bundles through `cache`, shared with other agents.
    pub fn sharing(mut self, cache: Arc<VerifyCache>) -> SimAgent {
        self.cache = Some(cache);
        self
    }

    /// Talks to the coordinator at `url` from now on (it restarted elsewhere), keeping
    /// everything the agent has seen, runs and reports.
    pub fn reconnect(&mut self, url: &str) {
        self.release_shown_at = None;
        self.reconnect_to(&[url.to_owned()]);
    }

    /// Talks to the coordinator replicas at `urls` from now on, as an agent whose config
    /// lists them all: each request goes to the first that accepts the connection.
    pub fn reconnect_to(&mut self, urls: &[String]) {
        self.release_shown_at = None;
        let files = self.files.as_ref().expect("an agent made from files");
        self.client = connect(urls, files);
    }

    /// Talks through `client` from now on (a fresh connection: the agent restarted or its
    /// network came back), keeping everything the agent has seen, runs and reports.
    pub fn replace_client(&mut self, client: CoordinatorClient) {
        self.client = client;
    }

    fn request(&self, now: Time) -> CheckinRequest {
        let health = HealthReport {
            collected_at: now,
            uptime_secs: 1000,
            load_avg_1m: 0.1,
            mem_total_bytes: 1 << 30,
            mem_available_bytes: 1 << 29,
            cpu_usage_pct: None,
            disks: Vec::new(),
            failed_units: Vec::new(),
            gpu: None,
            hw_sync: None,
            collect_errors: Vec::new(),
            state_dir: None,
        };
        let probe_results = self
            .probes
            .iter()
            .map(|(name, outcome)| ProbeResult {
                name: name.clone(),
                outcome: *outcome,
                mode: Mode::Enforce,
                message: String::new(),
                duration_ms: 1,
                observed_at: now,
            })
            .collect();
        CheckinRequest {
            agent_version: "sim".to_owned(),
            boot_id: self.boot_id.clone(),
            current_generation: self.running.clone(),
            health: Some(health),
            probe_results,
            probe_evidence: None,
            task_results: self.task_results.clone(),
            activation: self.activation.clone(),
            events: self.events.clone(),
            known_intent_id: self.seen.last_intent_id.clone(),
            release_seen: drover_agent::pull::show_release(self.coordinator_behind, self.release_shown_at, now)
                .then(|| self.seen.highest_release.clone())
                .flatten(),
        }
    }

    /// One check-in (held by the coordinator's long-poll when there is nothing new), and,
    /// when it brings an intent, admission, the simulated switch and the confirmation. `now`
    /// is the time the agent's checks run at. Returns whether an intent was handled. A
    /// confirmation the coordinator could not be reached for is retried by the next step
    /// (which then only does that).
    pub async fn step(&mut self, now: Time) -> Result<bool, ClientError> {
        if self.behaviour == Behaviour::Offline {
            return Ok(false);
        }
        if self.pending.is_some() {
            self.deliver_confirm().await?;
            return Ok(true);
        }
        let req = self.request(now);
        let resp: CheckinResponse = match self.client.post_json("/v1/agent/checkin", &req).await {
            Ok(r) => r,
            Err(e) => {
                self.release_shown_at = None;
                return Err(e);
            }
        };
        if req.release_seen.is_some() {
            self.release_shown_at = Some(now);
        }
        // Delivered: the coordinator has them now.
        self.task_results.clear();
        self.events.clear();
        self.take_tasks(&resp.tasks, now);
        // The answer's size as the coordinator wrote it: the same struct serialises to the
        // same bytes (measured only for answers that carry an intent).
        let answer_bytes = if resp.intent.is_some() { serde_json::to_vec(&resp).map_or(0, |b| b.len() as u64) } else { 0 };
        let Some(env) = resp.intent else { return Ok(false) };
        self.last_receipt = Some(SystemTime::now());
        let rollout = match drover_agent::admit::advertised_rollout(&env) {
            Ok(r) => r,
            Err(e) => {
                self.refused.push(format!("{e:?}"));
                return Ok(false);
            }
        };
        let raw = self.client.get_bytes(&format!("/v1/rollouts/{rollout}/proof")).await?;
        self.last_intent_bytes = answer_bytes + raw.len() as u64;
        let bundle: ProofBundle = match serde_json::from_slice(&raw) {
            Ok(b) => b,
            Err(e) => {
                self.refused.push(format!("proof bundle: {e}"));
                return Ok(false);
            }
        };
        let host_id = self.host_id.to_string();
        let host = HostIdentity { host_id: &host_id, hostname: &self.hostname };
        let admitted = match &self.cache {
            Some(cache) => cache.admit(&env, &bundle, &self.anchors, host, &self.seen, now),
            None => admit_intent(&env, &bundle, &self.anchors, host, &self.seen, None, now),
        };
        let admitted = match admitted {
            Ok(a) => a,
            Err(e) => {
                self.refused.push(format!("{e:?}"));
                if e.is_version_rollback() {
                    // As the real agent: handled (not asked for again), reported, and the
                    // newer release shown from now on.
                    let id = env.payload::<serde_json::Value>().ok().and_then(|v| v["intentId"].as_str().map(str::to_owned));
                    self.seen.last_intent_id = id.or(self.seen.last_intent_id.take());
                    self.events.push(e);
                    self.coordinator_behind = true;
                }
                return Ok(false);
            }
        };
        self.coordinator_behind = false;
        let intent = admitted.intent;
        drover_agent::admit::note_admitted(&mut self.seen, &bundle, admitted.timestamp.doc.version);
        self.seen.last_intent_id = Some(intent.intent_id.clone());
        // The switch, instantly; then the confirmation a real agent sends from the new system.
        let confirm = ConfirmRequest {
            intent_id: intent.intent_id.clone(),
            rollout_id: intent.rollout_id.clone(),
            closure: intent.target_closure.clone(),
            boot_id: self.boot_id.clone(),
        };
        // The channel's signed probes, from the root: a healthy host passes them all, a
        // failing one fails them all (the gate's required ones among them).
        let required_probes = admitted.root.root.probes.iter().map(|p| p.name.clone()).collect();
        if let Behaviour::Slow(switch) = self.behaviour {
            tokio::time::sleep(switch).await;
        }
        self.pending = Some(PendingConfirm { confirm, required_probes });
        self.deliver_confirm().await?;
        Ok(true)
    }

    /// Admits the tasks a check-in handed over with the director's signature, host and window
    /// rules of the real agent (and its replay rule), and "runs" each at once: a successful
    /// result with one step, delivered with the next check-in.
    fn take_tasks(&mut self, tasks: &[drover_proto::sig::Envelope], now: Time) {
        if self.behaviour == Behaviour::LosesTasks {
            return;
        }
        let host_id = self.host_id.to_string();
        for env in tasks {
            match drover_proto::verify::verify_task(
                env,
                self.anchors.director.key_set(),
                &host_id,
                &drover_proto::verify::VerifyContext::at(now),
            ) {
                Ok(task) if self.tasks_run.contains(&task.task_id) => self.refused.push(format!("replayed task {}", task.task_id)),
                Ok(task) => {
                    self.tasks_run.push(task.task_id.clone());
                    self.task_results.push(TaskResult {
                        task_id: task.task_id,
                        outcome: TaskOutcome::Succeeded,
                        steps: vec![StepResult {
                            name: task.kind.type_name().to_owned(),
                            outcome: StepOutcome::Ok,
                            message: "simulated".to_owned(),
                            data: serde_json::Value::Null,
                        }],
                        started_at: now,
                        finished_at: now,
                        evidence: None,
                    });
                }
                Err(e) => self.refused.push(format!("task refused: {e}")),
            }
        }
    }

    /// Sends the pending confirmation; on an answer (204 confirmed, 410 roll back) records the
    /// outcome. On a failure to reach the coordinator (a transient error) it stays pending for the
    /// next step; any other error drops it.
    async fn deliver_confirm(&mut self) -> Result<(), ClientError> {
        let Some(p) = &self.pending else { return Ok(()) };
        let confirmed = match self.client.post_for_status("/v1/agent/confirm", &p.confirm).await {
            Ok(status) => status == 204,
            Err(e) if e.status() == Some(410) => false,
            Err(e) => {
                if !e.is_transient() {
                    self.pending = None;
                }
                return Err(e);
            }
        };
        let Some(PendingConfirm { confirm, required_probes }) = self.pending.take() else { return Ok(()) };
        let phase = if confirmed { ActivationPhase::Confirmed } else { ActivationPhase::RolledBack };
        if confirmed {
            self.running = Some(confirm.closure.clone());
        }
        self.activation = Some(ActivationStatus {
            intent_id: confirm.intent_id.clone(),
            rollout_id: confirm.rollout_id.clone(),
            target_closure: confirm.closure.clone(),
            phase,
            message: String::new(),
        });
        let outcome = if self.behaviour == Behaviour::FailsProbes { ProbeOutcome::Failed } else { ProbeOutcome::Passed };
        self.probes = required_probes.into_iter().map(|p| (p, outcome)).collect();
        self.handled.push(Handled { rollout_id: confirm.rollout_id.to_string(), target: confirm.closure, confirmed });
        Ok(())
    }
}

/// The sha256s (hex) of a signed root's and a timestamp's bytes.
type PairKey = (String, String);

/// Verified (root, timestamp) pairs shared by simulated agents, keyed by both sha256s:
/// the first agent handed a pair runs the agent's whole admission
/// ([`drover_agent::admit::admit_intent`]); later ones check their bytes hash to a verified
/// pair and then run the per-host rules themselves — the timestamp version floor, and
/// the inclusion proof and the intent's signature, host, window, manifest hash, wave and target
/// checks ([`drover_agent::admit::admit_proven`]).
#[derive(Default)]
pub struct VerifyCache {
    verified: Mutex<HashMap<PairKey, Arc<(VerifiedRoot, VerifiedTimestamp)>>>,
    /// Pairs verified in full (cache misses).
    pub full_verifications: std::sync::atomic::AtomicU64,
}

impl VerifyCache {
    /// Admits `env` as [`admit_intent`] would, verifying the root's and the timestamp's
    /// signatures only when this pair of bytes was not verified before; the host's own proof
    /// and intent are checked every time.
    fn admit(
        &self,
        env: &drover_proto::sig::Envelope,
        bundle: &ProofBundle,
        anchors: &Anchors,
        host: HostIdentity<'_>,
        seen: &Seen,
        now: Time,
    ) -> Result<Admitted, drover_proto::report::ReportEvent> {
        use sha2::Digest;
        let key =
            (hex::encode(sha2::Sha256::digest(bundle.root.as_bytes())), hex::encode(sha2::Sha256::digest(bundle.timestamp.as_bytes())));
        let hit = self.verified.lock().unwrap_or_else(|e| e.into_inner()).get(&key).cloned();
        let Some(pair) = hit else {
            let admitted = admit_intent(env, bundle, anchors, host, seen, None, now)?;
            self.full_verifications.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let pair = Arc::new((admitted.root.clone(), admitted.timestamp.clone()));
            self.verified.lock().unwrap_or_else(|e| e.into_inner()).insert(key, pair);
            return Ok(admitted);
        };
        let (root, timestamp) = &*pair;
        let rid = root.root.rollout_id.to_string();
        let floor =
            if seen.highest_timestamp_version == 0 { VersionFloor::None } else { VersionFloor::AtLeast(seen.highest_timestamp_version) };
        let ctx = VerifyContext::at(now).with_floor(floor);
        if timestamp.doc.version < seen.highest_timestamp_version {
            return Err(refusal(
                &rid,
                "timestamp.json",
                &drover_proto::verify::VerifyError::VersionRollback {
                    version: timestamp.doc.version,
                    floor: seen.highest_timestamp_version,
                    equal_allowed: true,
                },
            ));
        }
        admit_proven(env, bundle, anchors, host, root.clone(), timestamp.clone(), &ctx)
    }
}

/// Every agent checks in once, concurrently (each check-in may be held for the long-poll);
/// returns them sorted by hostname, and how many handled an intent.
pub async fn step_all(agents: Vec<SimAgent>, now: Time) -> (Vec<SimAgent>, usize) {
    let mut set = tokio::task::JoinSet::new();
    for mut a in agents {
        set.spawn(async move {
            let r = a.step(now).await;
            (a, r)
        });
    }
    let mut out = Vec::new();
    let mut handled = 0;
    while let Some(joined) = set.join_next().await {
        let (a, r) = joined.expect("agent task");
        if r.unwrap_or_else(|e| panic!("{}: check-in failed: {e}", a.hostname)) {
            handled += 1;
        }
        out.push(a);
    }
    out.sort_by(|a, b| a.hostname.cmp(&b.hostname));
    (out, handled)
}

/// The hosts out of service now, by name: in flight in any rollout, or held by a started job
/// (the set every disruption budget counts).
pub fn disrupted(store: &dyn drover_engine::store::Store) -> std::collections::BTreeSet<String> {
    use drover_proto::states::{HostRolloutState, JobState};
    let mut out = std::collections::BTreeSet::new();
    for r in store.list_rollouts(&Default::default()).expect("rollouts") {
        for hr in store.list_host_rollouts(&r.rollout_id).expect("hosts") {
            if matches!(hr.state, HostRolloutState::Activating | HostRolloutState::Soaking) {
                out.insert(hr.hostname);
            }
        }
    }
    let jobs = store.list_jobs(&drover_engine::store::JobFilter { unfinished: true, ..Default::default() }).expect("jobs");
    for j in jobs.iter().filter(|j| j.state != JobState::Pending) {
        let host = store.get_host(j.job.host_id.expect("host")).expect("store").expect("host");
        out.insert(host.hostname);
    }
    out
}
