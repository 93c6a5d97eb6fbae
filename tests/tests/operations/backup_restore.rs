//! The store backed up while a real `drover-coordinator serve` process serves it, and
//! restored after the store was lost.
//!
//! - `a_backup_taken_while_serving_restores_to_what_it_held`: hosts created before the backup
//!   come back, the one created after it does not; a backup never replaces a file, a restore
//!   never replaces a store (exit 73).
//! - `a_backup_taken_mid_rollout_restored_on_a_fresh_state_dir_converges`: a rollout over
//!   simulated agents is backed up between its waves, goes on past the backup, and the process
//!   is killed; the backup is restored into a fresh state directory holding only the site's
//!   identity (CA, server and director keys), a new process serves it, the same agents find it,
//!   and the rollout converges to the end an undisturbed one reaches — every host on its
//!   target, the rollout `Converged` — with the disruption budget held at every dispatch and
//!   no host the backup had converged dispatched again.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
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
use drover_tests::procs::{SitePaths, fixed_port_site, init_site, log_tail};
use drover_tests::sim_agent::{Behaviour, SimAgent};
use drover_tests::{CI_KEY, key_and_csr, wall_now, workspace_binary};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use tokio::sync::watch;
use tokio::task::JoinSet;

fn coordinator(args: &[&str]) -> std::process::Output {
    Command::new(workspace_binary("drover-coordinator")).args(args).output().expect("drover-coordinator runs")
}

async fn hostnames(e: &drover_tests::Endpoint) -> Vec<String> {
    let (code, text) = e.call(Some(&e.admin), "GET", "/v1/hosts?limit=1000", None).await;
    assert_eq!(code, "200", "{text}");
    let v: Value = serde_json::from_str(&text).expect("json");
    let mut names: Vec<String> =
        v["items"].as_array().expect("items").iter().filter_map(|h| h["hostname"].as_str().map(str::to_owned)).collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_taken_while_serving_restores_to_what_it_held() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (paths, e) = fixed_port_site(dir.path(), "");
    let mut server = paths.serve();
    for i in 0..5 {
        let body = json!({ "hostname": format!("before-{i}"), "trustSha256": e.trust_sha256 }).to_string();
        assert_eq!(e.call(Some(&e.admin), "POST", "/v1/hosts", Some(&body)).await.0, "201");
    }
    let backup = dir.path().join("backup.db");
    let state = paths.state.display().to_string();
    let out = coordinator(&["backup", "--state-dir", &state, "--out", &backup.display().to_string()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let again = coordinator(&["backup", "--state-dir", &state, "--out", &backup.display().to_string()]);
    assert_eq!(again.status.code(), Some(73), "an existing backup is never replaced: {}", String::from_utf8_lossy(&again.stderr));
    let body = json!({ "hostname": "after-0", "trustSha256": e.trust_sha256 }).to_string();
    assert_eq!(e.call(Some(&e.admin), "POST", "/v1/hosts", Some(&body)).await.0, "201");

    // The store is lost with the process.
    server.child.kill().expect("SIGKILL");
    let _ = server.child.wait();
    let refused = coordinator(&["restore", "--state-dir", &state, "--from", &backup.display().to_string()]);
    assert_eq!(refused.status.code(), Some(73), "a store in place is never replaced: {}", String::from_utf8_lossy(&refused.stderr));
    for f in ["coordinator.db", "coordinator.db-wal", "coordinator.db-shm"] {
        let _ = std::fs::remove_file(paths.state.join(f));
    }
    let out = coordinator(&["restore", "--state-dir", &state, "--from", &backup.display().to_string()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let _server = paths.serve();
    assert_eq!(hostnames(&e).await, ["before-0", "before-1", "before-2", "before-3", "before-4"]);
}

// ---- mid-rollout -------------------------------------------------------------------------

const ROLLOUT: &str = "gpu@c0ffee";
const HOSTS: [&str; 6] = ["gpu-a-01", "gpu-a-02", "gpu-a-03", "gpu-b-01", "gpu-b-02", "gpu-b-03"];

/// A store path for `host`'s system (the hash part is a valid Nix base-32 digest).
fn closure(i: usize, host: &str) -> String {
    format!("/nix/store/{i:0>32}-nixos-system-{host}-25.05")
}

/// Six hosts in three waves (canary, the rest of rack a, all) under a budget of two in flight.
fn publish_request() -> PublishRequest {
    release_request(1, "c0ffee", 1)
}

/// The same fleet as release `version` (CI commit `commit`), every host on generation `generation`.
fn release_request(version: u64, commit: &str, generation: usize) -> PublishRequest {
    let mut hosts = serde_json::Map::new();
    for (i, name) in HOSTS.iter().enumerate() {
        let rack = &name[..5];
        let tags = if i == 0 { json!(["gpu", rack, "canary"]) } else { json!(["gpu", rack]) };
        hosts.insert(
            (*name).into(),
            json!({ "system": "x86_64-linux", "tags": tags, "channel": "gpu", "closure": closure(generation * 100 + i + 1, name) }),
        );
    }
    let spec = json!({
        "hosts": hosts,
        "channels": { "gpu": { "rolloutPolicy": "waves", "freshnessWindowSecs": "1d", "signingIntervalSecs": "4h" } },
        "rolloutPolicies": { "waves": { "waves": [
            { "selector": { "tags": ["canary"] }, "soakSecs": 1 },
            { "selector": { "tags": ["gpu-a"] }, "soakSecs": 1 },
            { "selector": { "all": true }, "soakSecs": 1 }
        ] } },
        "disruptionBudgets": [ { "selector": { "tags": ["gpu"] }, "maxInFlight": 2 } ]
    });
    let spec = FleetSpec::from_json(spec.to_string().as_bytes()).expect("spec");
    let params = ReleaseParams { meta: ReleaseMeta { ci_commit: commit.into(), created_at: wall_now() }, version, previous: None };
    let files = build_release(&spec, &params, &[KeySigner::new(ed25519_dalek::SigningKey::from_bytes(&CI_KEY))]).expect("release");
    PublishRequest::from_files(&files, Some("test".into())).expect("utf-8")
}

fn client(paths: &SitePaths, url: &str, admin: bool) -> CoordinatorClient {
    let read = |p: &Path| std::fs::read(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
    let ca = drover_client::parse_certificates("ca", &read(&paths.ops.join("ca.crt"))).expect("ca");
    let identity =
        admin.then(|| ClientIdentity::from_pem(&read(&paths.ops.join("alice.crt")), &read(&paths.ops.join("alice.key"))).expect("admin"));
    CoordinatorClient::new("backup-restore-test", &[url.to_owned()], &ca, identity, Duration::from_secs(30)).expect("client")
}

/// Every host created by the admin and enrolled like an agent (token + CSR), as a healthy
/// simulated agent.
async fn enroll_all(paths: &SitePaths, url: &str) -> Vec<SimAgent> {
    let (admin, anonymous) = (client(paths, url, true), client(paths, url, false));
    let trust_sha256 = hex::encode(Sha256::digest(&paths.trust));
    let mut agents = Vec::new();
    for hostname in HOSTS {
        let req = CreateHostRequest { hostname: hostname.into(), trust_sha256: trust_sha256.clone(), token_ttl_secs: None };
        let created: CreateHostResponse = admin.post_json("/v1/hosts", &req).await.expect("create host");
        let (key_pem, csr) = key_and_csr(hostname);
        let req = EnrollRequest { host_id: created.host_id.clone(), token: created.token, csr, seal_key: None, evidence_csr: None };
        let enrolled: EnrollResponse = anonymous.post_json("/v1/enroll", &req).await.expect("enroll");
        let (crt, key) = (paths.dir.join(format!("{hostname}.crt")), paths.dir.join(format!("{hostname}.key")));
        std::fs::write(&crt, &enrolled.certificate).expect("cert");
        std::fs::write(&key, &key_pem).expect("key");
        let id = uuid::Uuid::parse_str(&enrolled.host_id).expect("uuid");
        let director = &enrolled.director_public_key;
        agents.push(SimAgent::new(url, &paths.ops.join("ca.crt"), (&crt, &key), hostname, id, &paths.trust, director, Behaviour::Healthy));
    }
    agents
}

/// The agents, each checking in on its own task until told to stop, following the URL in
/// `url` when it changes; a failed step (the coordinator is gone) is retried shortly.
struct Fleet {
    url: watch::Sender<String>,
    stop: Arc<AtomicBool>,
    tasks: JoinSet<SimAgent>,
}

impl Fleet {
    fn run(agents: Vec<SimAgent>, url: &str) -> Fleet {
        let (tx, rx) = watch::channel(url.to_owned());
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = JoinSet::new();
        for mut agent in agents {
            let (mut rx, stop) = (rx.clone(), stop.clone());
            tasks.spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    if rx.has_changed().unwrap_or(false) {
                        agent.reconnect(&rx.borrow_and_update().clone());
                    }
                    if agent.step(wall_now()).await.is_err() {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
                agent
            });
        }
        Fleet { url: tx, stop, tasks }
    }

    async fn stop(mut self) -> Vec<SimAgent> {
        self.stop.store(true, Ordering::SeqCst);
        let mut out = Vec::new();
        while let Some(joined) = self.tasks.join_next().await {
            out.push(joined.expect("agent task"));
        }
        out
    }
}

/// Polls `check` every 100 ms until it returns `Some`, for at most `secs`.
async fn wait_for<T>(what: &str, log: &Path, secs: u64, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not after {secs} s; coordinator log:\n{}", log_tail(log, 40));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Hostname → (state, intent target) of the rollout, from `GET /v1/rollouts/{id}/status`.
async fn host_states(admin: &CoordinatorClient) -> Option<BTreeMap<String, (String, String)>> {
    states_of(admin, ROLLOUT).await
}

/// The same for rollout `id`.
async fn states_of(admin: &CoordinatorClient, id: &str) -> Option<BTreeMap<String, (String, String)>> {
    let status: Value = admin.get_json(&format!("/v1/rollouts/{id}/status")).await.ok()?;
    let s = |h: &Value, k: &str| h[k].as_str().unwrap_or("").to_owned();
    Some(status["hosts"].as_array()?.iter().map(|h| (s(h, "hostname"), (s(h, "state"), s(h, "intentTarget")))).collect())
}

fn count(hosts: &BTreeMap<String, (String, String)>, state: &str) -> usize {
    hosts.values().filter(|(s, _)| s == state).count()
}

/// Hostname → state of the rollout's hosts as the backup holds them.
fn backed_up_states(backup: &Path) -> BTreeMap<String, String> {
    let c = rusqlite::Connection::open_with_flags(backup, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).expect("open the backup");
    let mut stmt = c.prepare("SELECT hostname, state FROM host_rollouts WHERE rollout_id = ?1").expect("query");
    let rows = stmt.query_map([ROLLOUT], |r| Ok((r.get(0)?, r.get(1)?))).expect("rows");
    rows.collect::<Result<_, _>>().expect("host states")
}

/// A fresh state directory with the site's identity alone (CA, server and director keys), the
/// backup restored in it, and a config with `sections`.
fn restore_fresh(paths: &SitePaths, backup: &Path, sections: &str) -> SitePaths {
    let fresh = paths.dir.join("fresh-state");
    std::fs::create_dir(&fresh).expect("mkdir");
    std::fs::set_permissions(&fresh, std::os::unix::fs::PermissionsExt::from_mode(0o700)).expect("chmod");
    for f in ["ca.crt", "ca.key", "server.crt", "server.key", "director.key", "director.pub"] {
        std::fs::copy(paths.state.join(f), fresh.join(f)).unwrap_or_else(|e| panic!("copy {f}: {e}"));
    }
    let out = coordinator(&["restore", "--state-dir", &fresh.display().to_string(), "--from", &backup.display().to_string()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let restored = SitePaths { dir: paths.dir.clone(), state: fresh, ops: paths.ops.clone(), trust: paths.trust.clone() };
    restored.write_config("127.0.0.1:0", "https://127.0.0.1:1", sections);
    restored
}

/// The coordinator's settings for these tests: fast ticks and long-polls, a confirm deadline
/// of `confirm_deadline_secs`.
fn sections(confirm_deadline_secs: u64) -> String {
    format!(
        "[agent]\nlong_poll_secs = 1\n\n[hosts]\noffline_after_secs = 30\n\n\
         [rollouts]\ninterval_secs = 1\ndebounce_ms = 50\nconfirm_window_secs = 10\nconfirm_deadline_secs = {confirm_deadline_secs}\n"
    )
}

/// A site serving the six agents, its release 1 rolling, backed up between its waves.
struct Site {
    paths: SitePaths,
    log: std::path::PathBuf,
    server: drover_tests::procs::Proc,
    fleet: Fleet,
    admin: CoordinatorClient,
    backup: std::path::PathBuf,
}

/// Starts a site in `dir` with `sections`, publishes release 1 and backs the store up between
/// its waves: the canary converged, two hosts or more not dispatched yet (the status lists a
/// host once it has been dispatched).
async fn backed_up_mid_rollout(dir: &Path, sections: &str) -> Site {
    let paths = init_site(dir);
    let log = dir.join("coordinator.log");
    paths.write_config("127.0.0.1:0", "https://127.0.0.1:1", sections);
    let server = paths.serve();
    let fleet = Fleet::run(enroll_all(&paths, &server.url).await, &server.url);
    let admin = client(&paths, &server.url, true);
    let _: Value = admin.post_json("/v1/releases", &publish_request()).await.expect("publish");
    wait_for("the rollout between its waves", &log, 45, async || {
        let hosts = host_states(&admin).await?;
        let undispatched = HOSTS.len() - hosts.values().filter(|(s, _)| s != "Pending").count();
        (count(&hosts, "Converged") >= 1 && undispatched >= 2).then_some(())
    })
    .await;
    let backup = dir.join("mid-rollout.db");
    let state = paths.state.display().to_string();
    let out = coordinator(&["backup", "--state-dir", &state, "--out", &backup.display().to_string()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    Site { paths, log, server, fleet, admin, backup }
}

/// The process and its store lost (SIGKILL), the backup restored on a fresh state dir and
/// served, the agents sent to it; the new process and an admin client of it.
fn lose_and_restore(
    mut server: drover_tests::procs::Proc,
    paths: &SitePaths,
    backup: &Path,
    sections: &str,
    fleet: &Fleet,
) -> (drover_tests::procs::Proc, CoordinatorClient) {
    server.child.kill().expect("SIGKILL");
    server.child.wait().expect("reaped");
    let restored = restore_fresh(paths, backup, sections);
    let server = restored.serve();
    fleet.url.send_replace(server.url.clone());
    let admin = client(&restored, &server.url, true);
    (server, admin)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backup_taken_mid_rollout_restored_on_a_fresh_state_dir_converges() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sections = sections(120);
    let Site { paths, log, server, fleet, admin, backup } = backed_up_mid_rollout(dir.path(), &sections).await;
    let at_backup = backed_up_states(&backup);
    let converged_at_backup: Vec<&String> = at_backup.iter().filter(|(_, s)| *s == "Converged").map(|(h, _)| h).collect();
    assert!(!converged_at_backup.is_empty() && converged_at_backup.len() < HOSTS.len(), "the backup is mid-rollout: {at_backup:?}");

    // The rollout goes on past the backup; then the process and its store are lost.
    wait_for("progress past the backup", &log, 45, async || {
        let hosts = host_states(&admin).await?;
        (count(&hosts, "Converged") > converged_at_backup.len()).then_some(())
    })
    .await;
    let (_server, admin) = lose_and_restore(server, &paths, &backup, &sections, &fleet);

    let hosts = wait_for("the restored rollout Converged", &log, 60, async || {
        let rollouts: Value = admin.get_json("/v1/rollouts").await.ok()?;
        let converged = rollouts["items"].as_array()?.iter().any(|r| r["rolloutId"] == ROLLOUT && r["state"] == "Converged");
        if converged { host_states(&admin).await } else { None }
    })
    .await;
    let agents = fleet.stop().await;

    // The end an undisturbed rollout reaches: every host converged on its target.
    for (i, name) in HOSTS.iter().enumerate() {
        assert_eq!(hosts[*name], ("Converged".to_owned(), closure(100 + i + 1, name)), "{name}");
    }
    for a in &agents {
        let i = HOSTS.iter().position(|h| *h == a.hostname).expect("a fleet host");
        assert!(a.refused.is_empty(), "{}: admission refused: {:?}", a.hostname, a.refused);
        assert!(!a.handled.is_empty(), "{} was never dispatched", a.hostname);
        for h in &a.handled {
            assert_eq!((h.rollout_id.as_str(), h.target.as_str()), (ROLLOUT, closure(100 + i + 1, &a.hostname).as_str()), "{}", a.hostname);
        }
    }

    // The budget held at every dispatch the restored store records, and a host the backup had
    // converged was never dispatched again.
    let mut dispatched: BTreeMap<String, usize> = BTreeMap::new();
    for e in drover_tests::api::all_events(&admin, &format!("rollout={ROLLOUT}&kind=rollout.host")).await {
        let d = &e["data"];
        if d["transition"] != "Pending -> Activating" {
            continue;
        }
        *dispatched.entry(d["host"].as_str().unwrap_or("?").to_owned()).or_default() += 1;
        for (budget, text) in d["budgets"].as_object().expect("budgets") {
            let figures = text.as_str().and_then(|t| t.strip_suffix(" in flight")).and_then(|t| t.split_once('/'));
            let (n, m) = figures.map(|(n, m)| (n.parse::<u32>(), m.parse::<u32>())).expect("n/m in flight");
            assert!(n.expect("n") <= m.expect("m"), "budget {budget} broken at {d}");
        }
    }
    for h in &converged_at_backup {
        assert_eq!(dispatched.get(*h), Some(&1), "{h} converged before the backup: dispatched once, never again: {dispatched:?}");
    }
    assert_eq!(dispatched.len(), HOSTS.len(), "{dispatched:?}");
    let redispatched: Vec<_> = agents.iter().filter(|a| a.handled.len() > 1).map(|a| a.hostname.as_str()).collect();
    eprintln!("backed up at {at_backup:?}; hosts handed their intent again after the restore: {redispatched:?}");
}

/// Every `Pending -> Activating` the store records for rollout `id`, by host.
async fn dispatches(admin: &CoordinatorClient, id: &str) -> BTreeMap<String, usize> {
    let mut out: BTreeMap<String, usize> = BTreeMap::new();
    for e in drover_tests::api::all_events(admin, &format!("rollout={id}&kind=rollout.host")).await {
        if e["data"]["transition"] == "Pending -> Activating" {
            *out.entry(e["data"]["host"].as_str().unwrap_or("?").to_owned()).or_default() += 1;
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backup_older_than_the_fleets_release_dispatches_nothing_until_the_newest_is_published_again() {
    const NEWER: &str = "gpu@beef02";
    let dir = tempfile::tempdir().expect("tempdir");
    // A confirm deadline far past the test: a refusing host must free its budget at once, not
    // when the deadline passes.
    let sections = sections(1800);
    // Backed up mid-rollout of release 1 ...
    let Site { paths, log, server, fleet, admin, backup } = backed_up_mid_rollout(dir.path(), &sections).await;
    // ... and the fleet goes on: release 1 ends, then release 2, every agent's floor now 2.
    wait_for("release 1 converged", &log, 60, async || {
        let hosts = host_states(&admin).await?;
        (count(&hosts, "Converged") == HOSTS.len()).then_some(())
    })
    .await;
    let newer = release_request(2, "beef02", 2);
    let _: Value = admin.post_json("/v1/releases", &newer).await.expect("publish 2");
    wait_for("release 2 converged on every host", &log, 90, async || {
        let hosts = states_of(&admin, NEWER).await?;
        (count(&hosts, "Converged") == HOSTS.len()).then_some(())
    })
    .await;
    // Restored from the release-1 backup: the store holds release 1 and its rollout mid-way.
    let (server, admin) = lose_and_restore(server, &paths, &backup, &sections, &fleet);
    let e = drover_tests::Endpoint {
        url: server.url.clone(),
        ca: paths.ops.join("ca.crt"),
        admin: (paths.ops.join("alice.crt"), paths.ops.join("alice.key")),
        trust_sha256: hex::encode(Sha256::digest(&paths.trust)),
        tmp: paths.dir.clone(),
    };

    // The agents refuse what it dispatches and show release 2: it knows it is behind.
    let why = wait_for("/readyz says the store is behind the fleet", &log, 60, async || {
        let (code, text) = e.call(None, "GET", "/readyz", None).await;
        let v: Value = serde_json::from_str(&text).ok()?;
        (code == "503" && v["error"]["code"] == "behind_fleet").then(|| v["error"]["message"].as_str().unwrap_or("").to_owned())
    })
    .await;
    assert!(why.contains("holds release version 1") && why.contains("version 2 or newer"), "{why}");
    let (_, metrics) = e.call(Some(&e.admin), "GET", "/metrics", None).await;
    assert!(metrics.contains("drover_release_behind_fleet 1"), "{metrics}");
    // Hosts that refused their intent hold no budget: failed at once, not at the 1,800 s
    // confirm deadline; and nothing more is dispatched from release 1.
    let hosts = wait_for("refusing hosts failed and none left activating", &log, 60, async || {
        let hosts = host_states(&admin).await?;
        (count(&hosts, "Activating") == 0).then_some(hosts)
    })
    .await;
    let dispatched_while_behind = dispatches(&admin, ROLLOUT).await;
    // The status lists a host once it was dispatched: those the restored rollout had not
    // reached are not there, and stay so.
    assert!(hosts.len() < HOSTS.len(), "hosts the restored rollout had not reached stay undispatched: {hosts:?}");

    // The way forward: release 2 published again (CI's same files), the halted rollout of
    // release 1 cancelled.
    let _: Value = admin.post_json("/v1/releases", &newer).await.expect("publish 2 again");
    wait_for("/readyz ready again", &log, 30, async || (e.call(None, "GET", "/readyz", None).await.0 == "200").then_some(())).await;
    let (code, text) = e.call(Some(&e.admin), "GET", "/v1/rollouts", None).await;
    assert_eq!(code, "200", "{text}");
    let rollouts: Value = serde_json::from_str(&text).expect("json");
    let old_state = rollouts["items"].as_array().expect("items").iter().find(|r| r["rolloutId"] == ROLLOUT).map(|r| r["state"].clone());
    if old_state.is_some_and(|s| s != "Converged" && s != "Cancelled") {
        let body = json!({ "reason": "restored from an older backup; release 2 published again" }).to_string();
        let (code, text) = e.call(Some(&e.admin), "POST", &format!("/v1/rollouts/{ROLLOUT}/cancel"), Some(&body)).await;
        // 409: it ended between the listing and the cancel.
        assert!(code == "200" || code == "409", "{code} {text}");
    }
    let hosts = wait_for("release 2 converged after the restore", &log, 90, async || {
        let hosts = states_of(&admin, NEWER).await?;
        (count(&hosts, "Converged") == HOSTS.len()).then_some(hosts)
    })
    .await;
    let agents = fleet.stop().await;
    for (i, name) in HOSTS.iter().enumerate() {
        assert_eq!(hosts[*name].1, closure(200 + i + 1, name), "{name} on release 2's target");
    }
    // No agent ran release 1 once it had run release 2: whatever of release 1 the restored
    // coordinator handed it, it refused.
    for a in &agents {
        let first_newer = a.handled.iter().position(|h| h.rollout_id == NEWER).expect("release 2 handled");
        assert!(a.handled[first_newer..].iter().all(|h| h.rollout_id == NEWER), "{}: {:?}", a.hostname, a.handled);
        assert!(
            a.refused.iter().all(|r| r.contains("VersionRollback")),
            "{}: refused only as version rollbacks: {:?}",
            a.hostname,
            a.refused
        );
    }
    // Nothing of release 1 was dispatched once the store knew it was behind.
    assert_eq!(dispatches(&admin, ROLLOUT).await, dispatched_while_behind, "no release-1 dispatch after the fleet proved release 2");
}
