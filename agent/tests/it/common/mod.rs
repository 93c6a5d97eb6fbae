//! Shared fixtures of the pull-loop tests: a scripted fake coordinator over real TLS 1.3 on
//! 127.0.0.1 (client certificates required, HTTP/1.1, one request per connection), a fake
//! [`HostOps`] that records every activation, a manual clock, an enrolled state directory as
//! enrollment leaves it, and real CI-signed releases with director-signed intents and tasks.
//!
//! The fake records every request (line and body) and answers check-ins from a queue the test
//! fills (an empty queue answers "nothing to do"), and every other `GET` from a per-path table.

#![allow(dead_code)]

/// Mounting only inside a private mount namespace (the mount tests; also included by the
/// end-to-end full-disk test in `drover-tests`).
pub mod mount_ns;

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use drover_agent::admit::Admitted;
use drover_agent::pull::{ActivationOutcome, Agent, CHECKIN_PATH, ClientFactory, Clock, HostOps, PullSettings, SharedClient};
use drover_agent::state::{Identity, StateDir};
use drover_client::{ClientIdentity, CoordinatorClient};
use drover_proto::artifacts::RolloutManifest;
use drover_proto::enroll::ProofBundle;
use drover_proto::intent::Intent;
use drover_proto::keys::{KeySigner, Signer as _, signing_key_from_pem, verifying_key_to_pem};
use drover_proto::merkle::{EntryProof, Tree};
use drover_proto::names::RolloutId;
use drover_proto::release::{ReleaseFiles, ReleaseParams, TIMESTAMP, build_release, manifest_path, root_path, sig_path};
use drover_proto::report::{ActivationPhase, ActivationStatus, CheckinRequest, CheckinResponse, HealthReport, ProbeResult, ReportEvent};
use drover_proto::resolve::ReleaseMeta;
use drover_proto::sig::Envelope;
use drover_proto::spec::{FleetSpec, ProbeSpec};
use drover_proto::task::{StorageScope, Task, TaskKind};
use drover_proto::time::Time;
use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, PKCS_ED25519, SanType};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The agent's host id.
pub const HOST_ID: &str = "5b0f2c7e-4d4e-4f51-9a36-0d6c1f4f3a10";
/// Another host's id.
pub const OTHER_HOST_ID: &str = "c1a9d3b2-8f1e-4b7a-a2c4-6e5d7f8a9b01";
/// The agent's hostname: wave 1 of the small spec.
pub const HOSTNAME: &str = "gpu-02";
/// The CI commit (and so the channel ref) of the fixture releases.
pub const COMMIT: &str = "c0ffee1";
/// The closure the fake host runs now.
pub const CURRENT_GENERATION: &str = "/nix/store/dddddddddddddddddddddddddddddddd-nixos-system-gpu-02";
/// What the fake answers a check-in by default.
pub const NEXT_CHECKIN_SECS: u64 = 30;

// ---------------------------------------------------------------------------------------
// Keys, releases, intents, tasks.
// ---------------------------------------------------------------------------------------

/// A fresh Ed25519 signer.
pub fn new_signer() -> KeySigner {
    let pem = KeyPair::generate_for(&PKCS_ED25519).expect("ed25519 key").serialize_pem();
    KeySigner::new(signing_key_from_pem(&pem).expect("pkcs8"))
}

/// `trust.json` listing `ci` alone, threshold 1.
pub fn trust_json(ci: &KeySigner) -> Vec<u8> {
    let public = verifying_key_to_pem(&ci.verifying_key()).expect("pem");
    serde_json::to_vec(&json!({
        "schemaVersion": 1,
        "ci": {"threshold": 1, "keys": [{"keyId": ci.key_id().as_str(), "alg": "ed25519", "publicKey": public}]}
    }))
    .expect("json")
}

/// One channel `stable` (freshness 1d) with two hosts in two waves: `gpu-01` (canary, wave 0)
/// and `gpu-02` (wave 1).
pub fn small_spec_json() -> Value {
    json!({
        "hosts": {
            "gpu-01": { "system": "x86_64-linux", "tags": ["canary"], "channel": "stable", "closure": "/nix/store/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-nixos-system-gpu-01" },
            "gpu-02": { "system": "x86_64-linux", "channel": "stable", "closure": "/nix/store/bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb-nixos-system-gpu-02" }
        },
        "channels": {
            "stable": { "rolloutPolicy": "canary-first", "freshnessWindowSecs": "1d", "signingIntervalSecs": "4h" }
        },
        "rolloutPolicies": {
            "canary-first": {
                "waves": [
                    { "selector": { "tags": ["canary"] }, "soakSecs": "5m" },
                    { "selector": { "all": true }, "soakSecs": 0 }
                ]
            }
        }
    })
}

/// Parses a spec (panics if refused).
pub fn spec_from(json: &Value) -> FleetSpec {
    FleetSpec::from_json(&serde_json::to_vec(json).expect("json")).unwrap_or_else(|e| panic!("fixture spec refused: {e}"))
}

/// A release of `spec` as commit [`COMMIT`], created (signed) at `created_at`, timestamp
/// `version`, signed by `ci`.
pub fn release_of(spec: &Value, created_at: Time, version: u64, ci: &KeySigner) -> ReleaseFiles {
    let params = ReleaseParams { meta: ReleaseMeta { ci_commit: COMMIT.to_owned(), created_at }, version, previous: None };
    build_release(&spec_from(spec), &params, std::slice::from_ref(ci)).unwrap_or_else(|e| panic!("fixture release failed: {e}"))
}

/// The small spec's release (see [`release_of`]).
pub fn release(created_at: Time, version: u64, ci: &KeySigner) -> ReleaseFiles {
    release_of(&small_spec_json(), created_at, version, ci)
}

/// The rollout id of the fixture releases.
pub fn rollout_id() -> RolloutId {
    RolloutId::new("stable", COMMIT).expect("id")
}

fn text(files: &ReleaseFiles, path: &str) -> String {
    String::from_utf8(files.get(path).unwrap_or_else(|| panic!("no {path} in the release")).to_vec()).expect("utf8")
}

/// The proof bundle the coordinator serves [`HOSTNAME`] for `id` out of `files`.
pub fn bundle(files: &ReleaseFiles, id: &RolloutId) -> ProofBundle {
    bundle_for(files, id, HOSTNAME)
}

/// The proof bundle the coordinator serves `hostname` for `id` out of `files`: its entry and
/// audit path, cut from the tree over the manifest's host set, with the signed root.
pub fn bundle_for(files: &ReleaseFiles, id: &RolloutId, hostname: &str) -> ProofBundle {
    let m = manifest(files, id);
    let tree = Tree::from_entries(&m.host_set).expect("tree");
    let index = m.host_set.iter().position(|e| e.hostname == hostname).unwrap_or_else(|| panic!("{hostname} not in the manifest"));
    let r = root_path(id);
    ProofBundle {
        proof: EntryProof::of(&tree, &m.host_set, index).expect("proof"),
        root: text(files, &r),
        root_sig: text(files, &sig_path(&r)),
        timestamp: text(files, TIMESTAMP),
        timestamp_sig: text(files, &sig_path(TIMESTAMP)),
    }
}

/// The parsed manifest of `id`.
pub fn manifest(files: &ReleaseFiles, id: &RolloutId) -> RolloutManifest {
    serde_json::from_slice(files.get(&manifest_path(id)).expect("manifest")).expect("manifest parses")
}

/// sha256 (hex) of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// A valid intent for `hostname` (as the manifest lists it) issued at `now`, valid 15 minutes.
pub fn intent_for(files: &ReleaseFiles, hostname: &str, intent_id: &str, now: Time) -> Intent {
    let id = rollout_id();
    let m = manifest(files, &id);
    let entry = m.host(hostname).unwrap_or_else(|| panic!("{hostname} not in the manifest"));
    Intent {
        intent_id: intent_id.to_owned(),
        host_id: HOST_ID.to_owned(),
        hostname: hostname.to_owned(),
        rollout_id: id.clone(),
        manifest_sha256: sha256_hex(files.get(&manifest_path(&id)).expect("manifest")),
        wave_index: entry.wave_index,
        target_closure: entry.target_closure.clone(),
        issued_at: now,
        expires_at: now.plus_secs(900),
        confirm_window_secs: 300,
    }
}

/// A task for this host issued at `now`.
pub fn task(task_id: &str, now: Time) -> Task {
    Task {
        task_id: task_id.to_owned(),
        host_id: HOST_ID.to_owned(),
        job_id: None,
        issued_at: now,
        expires_at: now.plus_secs(600),
        kind: TaskKind::StorageCleanup { scope: StorageScope::Local },
    }
}

/// `message` sealed by `by`.
pub fn seal<T: serde::Serialize>(message: &T, by: &KeySigner) -> Envelope {
    Envelope::seal(message, std::slice::from_ref(by)).expect("seal")
}

/// A check-in answer carrying `intent` and `tasks`.
pub fn checkin_answer(intent: Option<Envelope>, tasks: Vec<Envelope>) -> Vec<u8> {
    serde_json::to_vec(&CheckinResponse { intent, tasks, next_checkin_secs: NEXT_CHECKIN_SECS, director_rotations: vec![] }).expect("json")
}

/// The route the agent fetches its proof of a rollout from.
pub fn bundle_path(id: &str) -> String {
    format!("/v1/rollouts/{id}/proof")
}

// ---------------------------------------------------------------------------------------
// The fake coordinator.
// ---------------------------------------------------------------------------------------

/// One scripted answer.
#[derive(Debug, Clone)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// Body (sent as `application/json`).
    pub body: Vec<u8>,
}

impl Reply {
    /// 200 with `body`.
    pub fn ok(body: Vec<u8>) -> Reply {
        Reply { status: 200, body }
    }

    /// 200 with `value` as JSON.
    pub fn json<T: serde::Serialize>(value: &T) -> Reply {
        Reply::ok(serde_json::to_vec(value).expect("json"))
    }
}

/// One request the fake received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// The request line (`POST /v1/agent/checkin HTTP/1.1`).
    pub line: String,
    /// The body.
    pub body: Vec<u8>,
}

/// The fake coordinator.
pub struct Fake {
    pub ca_cert: rcgen::Certificate,
    pub ca_key: KeyPair,
    /// Check-in answers, in order; when empty, `{"nextCheckinSecs":30}`.
    pub checkins: Mutex<VecDeque<Reply>>,
    /// `GET` answers by path (percent-decoded); a missing path answers 404.
    pub routes: Mutex<HashMap<String, Reply>>,
    /// Every request, in order.
    pub requests: Mutex<Vec<Recorded>>,
}

impl Fake {
    pub fn new() -> Fake {
        let ca_key = KeyPair::generate().expect("ca key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.distinguished_name.push(DnType::CommonName, "fake drover CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::CrlSign];
        let ca_cert = params.self_signed(&ca_key).expect("ca");
        Fake {
            ca_cert,
            ca_key,
            checkins: Mutex::new(VecDeque::new()),
            routes: Mutex::new(HashMap::new()),
            requests: Mutex::new(Vec::new()),
        }
    }

    /// Queues the answer to a coming check-in.
    pub fn push_checkin(&self, reply: Reply) {
        self.checkins.lock().expect("lock").push_back(reply);
    }

    /// Serves `reply` for `GET path`.
    pub fn route(&self, path: &str, reply: Reply) {
        self.routes.lock().expect("lock").insert(path.to_owned(), reply);
    }

    /// Serves `bundle` for the rollout `id`.
    pub fn serve_bundle(&self, id: &str, bundle: &ProofBundle) {
        self.route(&bundle_path(id), Reply::json(bundle));
    }

    /// Every check-in body received, parsed, in order.
    pub fn checkin_bodies(&self) -> Vec<CheckinRequest> {
        let line = format!("POST {CHECKIN_PATH} HTTP/1.1");
        self.requests
            .lock()
            .expect("lock")
            .iter()
            .filter(|r| r.line == line)
            .map(|r| serde_json::from_slice(&r.body).unwrap_or_else(|e| panic!("check-in body does not parse: {e}")))
            .collect()
    }

    /// The latest check-in body.
    pub fn last_checkin(&self) -> CheckinRequest {
        self.checkin_bodies().pop().expect("no check-in received")
    }

    /// Every request line, in order.
    pub fn lines(&self) -> Vec<String> {
        self.requests.lock().expect("lock").iter().map(|r| r.line.clone()).collect()
    }

    /// Issues this host's client certificate for `key`: the host id as a URI SAN, the hostname
    /// as CN and DNS SAN, valid from an hour ago for 30 days (no renewal in reach).
    pub fn issue_client_cert(&self, key: &KeyPair, hostname: &str) -> String {
        let mut params = CertificateParams::new(vec![hostname.to_owned()]).expect("params");
        params.subject_alt_names.push(SanType::URI(format!("urn:drover:host:{HOST_ID}").try_into().expect("ia5")));
        params.distinguished_name.push(DnType::CommonName, hostname);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::hours(1);
        params.not_after = params.not_before + time::Duration::days(30);
        params.signed_by(key, &self.ca_cert, &self.ca_key).expect("issue").pem()
    }

    /// Starts serving TLS 1.3 on 127.0.0.1:0 (client certificates from the CA required).
    pub async fn start(self: &Arc<Self>) -> SocketAddr {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let server_key = KeyPair::generate().expect("server key");
        let server_cert = CertificateParams::new(vec!["127.0.0.1".to_owned()])
            .expect("params")
            .signed_by(&server_key, &self.ca_cert, &self.ca_key)
            .expect("server cert");
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca_cert.der().clone()).expect("root");
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .build()
            .expect("client verifier");
        let tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .expect("tls13")
            .with_client_cert_verifier(verifier)
            .with_single_cert(vec![server_cert.der().clone()], rustls::pki_types::PrivateKeyDer::Pkcs8(server_key.serialize_der().into()))
            .expect("server config");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let me = Arc::clone(self);
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else { return };
                let (acceptor, me) = (acceptor.clone(), Arc::clone(&me));
                tokio::spawn(async move {
                    if let Ok(mut tls) = acceptor.accept(tcp).await {
                        me.handle(&mut tls).await;
                    }
                });
            }
        });
        addr
    }

    /// One HTTP/1.1 request, one answer, then close.
    async fn handle<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(&self, io: &mut S) {
        let mut buf = Vec::new();
        let head_end = loop {
            let mut chunk = [0u8; 4096];
            let n = io.read(&mut chunk).await.unwrap_or(0);
            if n == 0 {
                return;
            }
            buf.extend_from_slice(&chunk[..n]);
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        let line = head.lines().next().unwrap_or_default().to_owned();
        let len: usize = head
            .lines()
            .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap_or(0)))
            .unwrap_or(0);
        while buf.len() < head_end + len {
            let mut chunk = [0u8; 4096];
            let n = io.read(&mut chunk).await.unwrap_or(0);
            if n == 0 {
                return;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        let body = buf[head_end..head_end + len].to_vec();
        self.requests.lock().expect("lock").push(Recorded { line: line.clone(), body });
        let mut parts = line.split(' ');
        let (method, path) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default().replace("%40", "@"));
        let reply = if method == "POST" && path == CHECKIN_PATH {
            self.checkins.lock().expect("lock").pop_front().unwrap_or_else(|| Reply::ok(checkin_answer(None, Vec::new())))
        } else if method == "GET" {
            self.routes
                .lock()
                .expect("lock")
                .get(&path)
                .cloned()
                .unwrap_or(Reply { status: 404, body: br#"{"error":{"code":"not_found","message":"no such route"}}"#.to_vec() })
        } else {
            Reply { status: 404, body: br#"{"error":{"code":"not_found","message":"no such route"}}"#.to_vec() }
        };
        let head = format!(
            "HTTP/1.1 {} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            reply.status,
            reply.body.len()
        );
        let _ = io.write_all(head.as_bytes()).await;
        let _ = io.write_all(&reply.body).await;
        let _ = io.shutdown().await;
    }
}

// ---------------------------------------------------------------------------------------
// The host side and the clock.
// ---------------------------------------------------------------------------------------

/// A host that records every activation and answers each with `Confirmed`.
#[derive(Default)]
pub struct FakeHost {
    pub activations: Mutex<Vec<Admitted>>,
    /// Every task run, in order.
    pub tasks: Mutex<Vec<drover_proto::task::Task>>,
}

impl FakeHost {
    /// How many times `activate` ran.
    pub fn activation_count(&self) -> usize {
        self.activations.lock().expect("lock").len()
    }

    /// The targets activated, in order.
    pub fn targets(&self) -> Vec<String> {
        self.activations.lock().expect("lock").iter().map(|a| a.intent.target_closure.clone()).collect()
    }
}

/// The fixed outcome the fake host answers an activation with.
pub fn confirmed(admitted: &Admitted) -> ActivationStatus {
    ActivationStatus {
        intent_id: admitted.intent.intent_id.clone(),
        rollout_id: admitted.intent.rollout_id.clone(),
        target_closure: admitted.intent.target_closure.clone(),
        phase: ActivationPhase::Confirmed,
        message: "switched (fake)".to_owned(),
    }
}

impl HostOps for FakeHost {
    fn health(&self) -> Option<HealthReport> {
        None
    }

    fn current_generation(&self) -> Option<String> {
        Some(CURRENT_GENERATION.to_owned())
    }

    fn probes(&self, _probes: &[ProbeSpec]) -> Vec<ProbeResult> {
        Vec::new()
    }

    fn activate(&self, admitted: &Admitted) -> ActivationOutcome {
        self.activations.lock().expect("lock").push(admitted.clone());
        ActivationOutcome { status: confirmed(admitted), events: Vec::new() }
    }

    fn resume(&self) -> Option<ActivationOutcome> {
        None
    }

    /// Records the task and reports it done in one step (the tasks themselves are tested
    /// on their own; this host exercises the loop around them).
    fn run_task(&self, task: &drover_proto::task::Task) -> drover_proto::report::TaskResult {
        self.tasks.lock().expect("lock").push(task.clone());
        drover_proto::report::TaskResult {
            task_id: task.task_id.clone(),
            outcome: drover_proto::report::TaskOutcome::Succeeded,
            steps: vec![drover_proto::report::StepResult {
                name: task.kind.type_name().to_owned(),
                outcome: drover_proto::report::StepOutcome::Ok,
                message: "done (fake)".to_owned(),
                data: serde_json::Value::Null,
            }],
            started_at: task.issued_at,
            finished_at: task.issued_at,
            evidence: None,
        }
    }

    fn finish_uninstall(&self) -> Result<(), drover_agent::systemd::SystemdError> {
        Ok(())
    }
}

/// A clock the test moves.
pub struct ManualClock(pub Mutex<Time>);

impl ManualClock {
    pub fn set(&self, t: Time) {
        *self.0.lock().expect("lock") = t;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Time {
        *self.0.lock().expect("lock")
    }
}

/// Now, to the second.
pub fn wall_now() -> Time {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after 1970").as_secs();
    Time::from_unix(i64::try_from(secs).expect("secs")).expect("time")
}

// ---------------------------------------------------------------------------------------
// The whole setup.
// ---------------------------------------------------------------------------------------

/// An enrolled agent talking to a started fake, with its keys.
pub struct Harness {
    pub _tmp: tempfile::TempDir,
    pub fake: Arc<Fake>,
    pub state: StateDir,
    pub host: Arc<FakeHost>,
    pub clock: Arc<ManualClock>,
    pub agent: Agent,
    /// The CI release key (`trust.json`).
    pub ci: KeySigner,
    /// The director key (`director.pub`).
    pub director: KeySigner,
    /// The time the clock started at (releases and intents are made around it).
    pub t0: Time,
}

impl Harness {
    /// An agent enrolled as [`HOST_ID`] / [`HOSTNAME`].
    pub async fn new() -> Harness {
        Harness::named(HOSTNAME).await
    }

    /// An agent enrolled as [`HOST_ID`] / `hostname`.
    pub async fn named(hostname: &str) -> Harness {
        let fake = Arc::new(Fake::new());
        let addr = fake.start().await;
        let tmp = tempfile::tempdir().expect("tempdir");
        let state = StateDir::open(&tmp.path().join("state")).expect("state");
        let (ci, director) = (new_signer(), new_signer());
        let key = KeyPair::generate().expect("agent key");
        let cert = fake.issue_client_cert(&key, hostname);
        state.write_key(&key.serialize_pem()).expect("key");
        state.write_cert(&cert).expect("cert");
        state.write_ca(&fake.ca_cert.pem()).expect("ca");
        state.write_trust(&trust_json(&ci)).expect("trust");
        state.write_director_pub(&verifying_key_to_pem(&director.verifying_key()).expect("pem")).expect("director");
        state.write_identity(&Identity { host_id: HOST_ID.to_owned(), hostname: hostname.to_owned() }).expect("identity");
        assert!(state.is_enrolled());

        let urls = vec![format!("https://{addr}")];
        let ca = vec![fake.ca_cert.der().clone()];
        let make_client: ClientFactory = Arc::new(move |identity: ClientIdentity| {
            CoordinatorClient::new(drover_agent::USER_AGENT, &urls, &ca, Some(identity), Duration::from_secs(30))
        });
        let identity = ClientIdentity::from_pem(cert.as_bytes(), key.serialize_pem().as_bytes()).expect("identity");
        let client = SharedClient::new(make_client(identity).expect("client"));
        let t0 = wall_now();
        let clock = Arc::new(ManualClock(Mutex::new(t0)));
        let host = Arc::new(FakeHost::default());
        let agent = Agent::new(
            state.clone(),
            client,
            make_client,
            host.clone(),
            clock.clone(),
            PullSettings::default(),
            "0f7e3c52-6a1b-4d2e-9c8f-7b6a5d4c3b2a".to_owned(),
            Vec::new(),
        )
        .expect("agent");
        Harness { _tmp: tmp, fake, state, host, clock, agent, ci, director, t0 }
    }

    /// One pass that must succeed; returns the wait it asked for.
    pub async fn pass_ok(&mut self) -> Duration {
        self.agent.pass().await.unwrap_or_else(|e| panic!("pass failed: {e}"))
    }

    /// The events carried by the latest check-in.
    pub fn last_events(&self) -> Vec<ReportEvent> {
        self.fake.last_checkin().events
    }

    /// Serves `files`' bundle under the fixture rollout id.
    pub fn serve(&self, files: &ReleaseFiles) {
        self.fake.serve_bundle(rollout_id().as_str(), &bundle(files, &rollout_id()));
    }

    /// The fixture release at the start time, version 1.
    pub fn release(&self) -> ReleaseFiles {
        release(self.t0, 1, &self.ci)
    }

    /// Sends `intent` (sealed by `by`) in the next check-in answer, runs that pass, then runs
    /// one more pass (which reports what the first one concluded); returns that report's events.
    pub async fn deliver_intent(&mut self, env: Envelope) -> Vec<ReportEvent> {
        self.fake.push_checkin(Reply::ok(checkin_answer(Some(env), Vec::new())));
        self.pass_ok().await;
        self.pass_ok().await;
        self.last_events()
    }
}

/// Asserts `events` holds exactly one refusal: a `ManifestMismatch` or `VerificationFailed`
/// (per `mismatch`) whose reason starts with `rule`; returns its artifact or rollout id.
#[track_caller]
pub fn assert_refusal(events: &[ReportEvent], mismatch: bool, rule: &str) -> String {
    assert_eq!(events.len(), 1, "expected exactly one event, got {events:?}");
    match (&events[0], mismatch) {
        (ReportEvent::ManifestMismatch { rollout_id, reason }, true) => {
            assert!(reason.starts_with(&format!("{rule}:")), "expected a {rule} refusal, got {reason:?}");
            rollout_id.clone()
        }
        (ReportEvent::VerificationFailed { artifact, reason }, false) => {
            assert!(reason.starts_with(&format!("{rule}:")), "expected a {rule} refusal, got {reason:?}");
            artifact.clone()
        }
        (other, _) => {
            panic!("expected a {} {rule} refusal, got {other:?}", if mismatch { "ManifestMismatch" } else { "VerificationFailed" })
        }
    }
}
