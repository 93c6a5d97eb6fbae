//! RFC-0002's crash-safety promise over real processes: a `drover-coordinator serve` process
//! SIGKILLed mid-rollout and started again on the same state dir converges to the same outcome
//! as an undisturbed run — the same rollout and host states, every host dispatched exactly once
//! with its manifest's target, no duplicate `Pending -> Activating`.
//!
//! Everything is real but the activations: `init` and `operator-cert` as processes, hosts
//! created and enrolled through the API (token + CSR), a CI-signed release published by the
//! admin, the executor running on its own clock (wall time), and simulated agents
//! ([`SimAgent`]) checking in concurrently with the real protocol and admission code.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use drover_client::{ClientIdentity, CoordinatorClient};
use drover_proto::enroll::{CreateHostRequest, CreateHostResponse, EnrollRequest, EnrollResponse};
use drover_proto::keys::KeySigner;
use drover_proto::publish::PublishRequest;
use drover_proto::release::{ReleaseParams, build_release};
use drover_proto::resolve::ReleaseMeta;
use drover_proto::spec::FleetSpec;
use drover_tests::procs::{Proc, SitePaths, init_site, log_tail};
use drover_tests::sim_agent::{Behaviour, SimAgent};
use drover_tests::{key_and_csr, wall_now};
use ed25519_dalek::SigningKey;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::sync::watch;
use tokio::task::JoinSet;

const COMMIT: &str = "c0ffee";
const GPU_HOSTS: [&str; 6] = ["gpu-a-01", "gpu-a-02", "gpu-a-03", "gpu-b-01", "gpu-b-02", "gpu-b-03"];

/// A store path for `host`'s system (the hash part is a valid Nix base-32 digest).
fn closure(i: usize, host: &str) -> String {
    format!("/nix/store/{i:0>32}-nixos-system-{host}-25.05")
}

/// Seven hosts in two channels; infra before gpu; gpu in three waves (canary, rack a, all)
/// under a budget of two in flight, with the host edge gpu-b-01 → gpu-b-02.
fn fleet_spec() -> Vec<u8> {
    let mut hosts = serde_json::Map::new();
    hosts.insert(
        "infra-01".into(),
        serde_json::json!({ "system": "x86_64-linux", "tags": ["infra"], "channel": "infra", "closure": closure(0, "infra-01") }),
    );
    for (i, name) in GPU_HOSTS.iter().enumerate() {
        let rack = if name.starts_with("gpu-a") { "rack-a" } else { "rack-b" };
        let mut tags = vec!["gpu", rack];
        if i == 0 {
            tags.push("canary");
        }
        hosts.insert(
            (*name).into(),
            serde_json::json!({ "system": "x86_64-linux", "tags": tags, "channel": "gpu", "closure": closure(i + 1, name) }),
        );
    }
    serde_json::to_vec(&serde_json::json!({
        "hosts": hosts,
        "channels": {
            "infra": { "rolloutPolicy": "all-at-once", "freshnessWindowSecs": "1d", "signingIntervalSecs": "4h" },
            "gpu": {
                "rolloutPolicy": "canary-then-racks",
                "freshnessWindowSecs": "1d",
                "signingIntervalSecs": "4h",
                "probes": [
                    { "name": "nvidia-persistenced", "kind": "exec", "command": ["systemctl", "is-active", "nvidia-persistenced"], "timeoutSecs": 10 }
                ]
            }
        },
        "rolloutPolicies": {
            "all-at-once": { "waves": [ { "selector": { "all": true }, "soakSecs": 1 } ] },
            "canary-then-racks": {
                "waves": [
                    { "selector": { "tags": ["canary"] }, "soakSecs": 1 },
                    { "selector": { "tags": ["rack-a"] }, "soakSecs": 1 },
                    { "selector": { "all": true }, "soakSecs": 1 }
                ],
                "healthGate": { "maxFailedUnits": 0, "requiredProbes": ["nvidia-persistenced"], "maxFailures": 0 },
                "onHealthFailure": "rollback-and-halt"
            }
        },
        "edges": [ { "before": "gpu-b-01", "after": "gpu-b-02", "reason": "scheduler replica" } ],
        "channelEdges": [ { "before": "infra", "after": "gpu", "reason": "caches" } ],
        "disruptionBudgets": [ { "selector": { "tags": ["gpu"] }, "maxInFlight": 2 } ]
    }))
    .expect("json")
}

/// The release CI would publish for [`fleet_spec`], signed with the key trust.json names.
fn publish_request() -> PublishRequest {
    let spec = FleetSpec::from_json(&fleet_spec()).expect("spec");
    let params = ReleaseParams { meta: ReleaseMeta { ci_commit: COMMIT.into(), created_at: wall_now() }, version: 1, previous: None };
    let files = build_release(&spec, &params, &[KeySigner::new(SigningKey::from_bytes(&[9u8; 32]))]).expect("release");
    PublishRequest::from_files(&files, Some("test".into())).expect("utf-8")
}

/// A state dir from `drover-coordinator init`, an admin credential from `operator-cert`, the
/// CI trust file and a `coordinator.toml` with short intervals, all under one directory.
struct Site {
    _dir: tempfile::TempDir,
    paths: SitePaths,
}

impl Site {
    fn new() -> Site {
        let dir = tempfile::tempdir().expect("tempdir");
        let paths = init_site(dir.path());
        paths.write_config(
            "127.0.0.1:0",
            "https://127.0.0.1:1",
            "[agent]\nlong_poll_secs = 1\n\n[hosts]\noffline_after_secs = 30\n\n\
             [rollouts]\ninterval_secs = 1\ndebounce_ms = 50\nconfirm_window_secs = 10\nconfirm_deadline_secs = 120\n",
        );
        Site { _dir: dir, paths }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.paths.dir.join(rel)
    }

    /// `serve --config`, its log appended to `coordinator.log`.
    fn serve(&self) -> Proc {
        self.paths.serve()
    }

    /// The last lines of the coordinator's log, for failure messages.
    fn log_tail(&self) -> String {
        log_tail(&self.path("coordinator.log"), 40)
    }

    fn client(&self, url: &str, identity: bool) -> CoordinatorClient {
        let read = |p: &Path| std::fs::read(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
        let ca = drover_client::parse_certificates("ca", &read(&self.path("ops/ca.crt"))).expect("ca");
        let identity = identity.then(|| {
            ClientIdentity::from_pem(&read(&self.path("ops/alice.crt")), &read(&self.path("ops/alice.key"))).expect("admin identity")
        });
        CoordinatorClient::new("rollout-restart-test", &[url.to_owned()], &ca, identity, Duration::from_secs(30)).expect("client")
    }

    /// Every host of the fleet created by the admin and enrolled like an agent (token + CSR),
    /// as a healthy simulated agent.
    async fn enroll_all(&self, url: &str) -> Vec<SimAgent> {
        let admin = self.client(url, true);
        let anonymous = self.client(url, false);
        let trust_sha256 = hex::encode(Sha256::digest(&self.paths.trust));
        let mut agents = Vec::new();
        for hostname in std::iter::once("infra-01").chain(GPU_HOSTS) {
            let req = CreateHostRequest { hostname: hostname.into(), trust_sha256: trust_sha256.clone(), token_ttl_secs: None };
            let created: CreateHostResponse = admin.post_json("/v1/hosts", &req).await.expect("create host");
            let (key_pem, csr) = key_and_csr(hostname);
            let req = EnrollRequest { host_id: created.host_id.clone(), token: created.token, csr, seal_key: None, evidence_csr: None };
            let enrolled: EnrollResponse = anonymous.post_json("/v1/enroll", &req).await.expect("enroll");
            assert_eq!((enrolled.host_id.as_str(), enrolled.hostname.as_str()), (created.host_id.as_str(), hostname));
            let (crt, key) = (self.path(&format!("{hostname}.crt")), self.path(&format!("{hostname}.key")));
            std::fs::write(&crt, &enrolled.certificate).expect("cert");
            std::fs::write(&key, &key_pem).expect("key");
            let id = uuid::Uuid::parse_str(&enrolled.host_id).expect("uuid");
            agents.push(SimAgent::new(
                url,
                &self.path("ops/ca.crt"),
                (&crt, &key),
                hostname,
                id,
                &self.paths.trust,
                &enrolled.director_public_key,
                Behaviour::Healthy,
            ));
        }
        agents
    }
}

/// The agents, each checking in on its own task in a loop with the wall clock until told to
/// stop; on an error (the coordinator is gone) it retries shortly, and it follows the URL in
/// `url` when that changes, keeping its state.
struct Fleet {
    url: watch::Sender<String>,
    stop: Arc<AtomicBool>,
    tasks: JoinSet<(SimAgent, usize)>,
}

impl Fleet {
    fn run(agents: Vec<SimAgent>, url: &str) -> Fleet {
        let (tx, rx) = watch::channel(url.to_owned());
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = JoinSet::new();
        for mut agent in agents {
            let (mut rx, stop) = (rx.clone(), stop.clone());
            tasks.spawn(async move {
                let mut errors = 0;
                while !stop.load(Ordering::SeqCst) {
                    if rx.has_changed().unwrap_or(false) {
                        let url = rx.borrow_and_update().clone();
                        agent.reconnect(&url);
                    }
                    if agent.step(wall_now()).await.is_err() {
                        errors += 1;
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
                (agent, errors)
            });
        }
        Fleet { url: tx, stop, tasks }
    }

    /// Stops every loop (each ends after its current check-in) and hands the agents back,
    /// sorted by hostname, with how many of their steps failed.
    async fn stop(mut self) -> Vec<(SimAgent, usize)> {
        self.stop.store(true, Ordering::SeqCst);
        let mut out = Vec::new();
        while let Some(joined) = self.tasks.join_next().await {
            out.push(joined.expect("agent task"));
        }
        out.sort_by(|a, b| a.0.hostname.cmp(&b.0.hostname));
        out
    }
}

/// Polls `check` every 100 ms until it returns `Some`, for at most `secs`.
async fn wait_for<T>(site: &Site, what: &str, secs: u64, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not after {secs} s; coordinator log:\n{}", site.log_tail());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Rollout id → state, from `GET /v1/rollouts`.
async fn rollout_states(admin: &CoordinatorClient) -> Option<BTreeMap<String, String>> {
    let page: Value = admin.get_json("/v1/rollouts").await.ok()?;
    let items = page["items"].as_array()?;
    Some(items.iter().map(|r| (r["rolloutId"].as_str().unwrap_or("").to_owned(), r["state"].as_str().unwrap_or("").to_owned())).collect())
}

/// Hostname → (wave, state, intent target), from `GET /v1/rollouts/{id}/status`.
async fn host_states(admin: &CoordinatorClient, rollout: &str) -> Option<BTreeMap<String, (u64, String, String)>> {
    let status: Value = admin.get_json(&format!("/v1/rollouts/{rollout}/status")).await.ok()?;
    let hosts = status["hosts"].as_array()?;
    Some(
        hosts
            .iter()
            .map(|h| {
                let s = |k: &str| h[k].as_str().unwrap_or("").to_owned();
                (s("hostname"), (h["waveIndex"].as_u64().unwrap_or(u64::MAX), s("state"), s("intentTarget")))
            })
            .collect(),
    )
}

/// What a run ended with: rollout states, per rollout its hosts' final states, and per agent
/// the intents it handled (rollout, target, confirmed).
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    rollouts: BTreeMap<String, String>,
    hosts: BTreeMap<String, BTreeMap<String, (u64, String, String)>>,
    handled: BTreeMap<String, Vec<(String, String, bool)>>,
}

const ROLLOUTS: [&str; 2] = ["infra@c0ffee", "gpu@c0ffee"];

/// Waits for both rollouts to converge, stops the agents and reads the outcome; checks the
/// events show one dispatch per host. Also returns how many agent steps failed.
async fn converge(site: &Site, url: &str, fleet: Fleet) -> (Outcome, usize) {
    let admin = site.client(url, true);
    let rollouts = wait_for(site, "both rollouts Converged", 45, async || {
        let states = rollout_states(&admin).await?;
        (states.len() == 2 && states.values().all(|s| s == "Converged")).then_some(states)
    })
    .await;
    let agents = fleet.stop().await;
    let mut hosts = BTreeMap::new();
    for rollout in ROLLOUTS {
        hosts.insert(rollout.to_owned(), host_states(&admin, rollout).await.expect("status"));
        let mut dispatches: BTreeMap<String, usize> = BTreeMap::new();
        for e in drover_tests::api::all_events(&admin, &format!("rollout={rollout}&kind=rollout.host")).await {
            if e["data"]["transition"] == "Pending -> Activating" {
                *dispatches.entry(e["data"]["host"].as_str().unwrap_or("?").to_owned()).or_default() += 1;
            }
        }
        let want = if rollout.starts_with("infra") { 1 } else { GPU_HOSTS.len() };
        assert!(dispatches.len() == want && dispatches.values().all(|n| *n == 1), "{rollout}: one dispatch per host: {dispatches:?}");
    }
    let mut handled = BTreeMap::new();
    for (a, _) in &agents {
        assert!(a.refused.is_empty(), "{}: the agent's admission refused an intent: {:?}", a.hostname, a.refused);
        handled.insert(a.hostname.clone(), a.handled.iter().map(|h| (h.rollout_id.clone(), h.target.clone(), h.confirmed)).collect());
    }
    (Outcome { rollouts, hosts, handled }, agents.iter().map(|(_, errors)| errors).sum())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn coordinator_killed_mid_rollout_converges_to_the_same_outcome() {
    let started = Instant::now();
    // Run A, the reference: undisturbed.
    let site = Site::new();
    let server = site.serve();
    let agents = site.enroll_all(&server.url).await;
    let fleet = Fleet::run(agents, &server.url);
    let _: Value = site.client(&server.url, true).post_json("/v1/releases", &publish_request()).await.expect("publish");
    let (reference, _) = converge(&site, &server.url, fleet).await;
    drop(server);

    // The reference is the outcome the spec asks for: every host converged on its manifest's
    // target, dispatched once, confirmed.
    let spec: Value = serde_json::from_slice(&fleet_spec()).expect("json");
    assert_eq!(reference.rollouts.values().collect::<Vec<_>>(), ["Converged", "Converged"], "{reference:?}");
    for (hostname, handled) in &reference.handled {
        let host = &spec["hosts"][hostname];
        let rollout = format!("{}@{COMMIT}", host["channel"].as_str().expect("channel"));
        let target = host["closure"].as_str().expect("closure").to_owned();
        assert_eq!(handled, &[(rollout.clone(), target.clone(), true)], "{hostname}");
        let (_, state, intent_target) = &reference.hosts[&rollout][hostname];
        assert_eq!((state.as_str(), intent_target), ("Converged", &target), "{hostname}");
    }

    // Run B: the same fleet on a fresh site; SIGKILL the coordinator mid-rollout, start it
    // again on the same config and state dir, and let the same agents carry on.
    let site = Site::new();
    let mut server = site.serve();
    let agents = site.enroll_all(&server.url).await;
    let fleet = Fleet::run(agents, &server.url);
    let admin = site.client(&server.url, true);
    let _: Value = admin.post_json("/v1/releases", &publish_request()).await.expect("publish");
    let at_kill = wait_for(&site, "gpu rollout mid-way", 45, async || {
        let hosts = host_states(&admin, "gpu@c0ffee").await?;
        let converged = hosts.values().filter(|h| h.1 == "Converged").count();
        let pending = GPU_HOSTS.len() - hosts.values().filter(|h| h.1 != "Pending").count();
        (converged >= 1 && pending >= 1).then_some(hosts)
    })
    .await;
    server.child.kill().expect("SIGKILL");
    server.child.wait().expect("reaped");
    let server = site.serve();
    fleet.url.send_replace(server.url.clone());
    let (restarted, errors) = converge(&site, &server.url, fleet).await;
    assert_eq!(restarted, reference, "killed at {at_kill:?}; coordinator log:\n{}", site.log_tail());
    // The kill broke check-ins off under the agents (it happened mid-conversation).
    assert!(errors > 0, "no agent noticed the coordinator go");
    let secs = started.elapsed().as_secs_f64();
    eprintln!("killed with gpu hosts at {at_kill:?}; {errors} agent steps failed meanwhile; both runs took {secs:.1} s");
}
