//! The dashboard tested the way a person uses it: headless Chromium (Debian's `chromium`),
//! driven over the DevTools protocol by `tests/browser/dashboard.mjs`, against two real
//! `drover ui` proxies (an admin's and a viewer's) in front of a real coordinator whose
//! simulated agents roll a release out while the browser watches.
//!
//! What the browser checks: the overview's counts match the API; a rollout's wave bars
//! advance while it runs; an admin halts it from the page (with a reason); an event appears
//! on the live page within a second; every page renders; a viewer is shown no action button.
//! Then this test checks with the CLI that the rollout is halted and the audit log holds the
//! page's reason. Screenshots of each page are kept under `target/dashboard-screenshots/`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use drover_engine::app::Clock as _;
use drover_proto::release::{ReleaseParams, build_release};
use drover_proto::resolve::ReleaseMeta;
use drover_proto::spec::FleetSpec;
use drover_tests::sim_agent::{Behaviour, SimAgent};
use drover_tests::{Harness, KillOnDrop};
use serde_json::json;

const ROLLOUT: &str = "gpu@d45b0a4d";
const HOSTS: usize = 16;

fn closure(i: usize, host: &str) -> String {
    format!("/nix/store/{i:0>32}-nixos-system-{host}-25.05")
}

/// Sixteen hosts, one per wave, one in flight at a time, a minute's soak each: a rollout
/// long enough to watch and halt, whose clock the test advances.
fn spec(names: &[String]) -> FleetSpec {
    let mut hosts = serde_json::Map::new();
    let mut waves = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let tag = format!("w{i:02}");
        hosts.insert(
            name.clone(),
            json!({ "system": "x86_64-linux", "tags": ["gpu", tag], "channel": "gpu", "closure": closure(i + 1, name) }),
        );
        waves.push(json!({ "selector": { "tags": [tag] }, "soakSecs": 60 }));
    }
    let spec = json!({
        "hosts": hosts,
        "channels": { "gpu": { "rolloutPolicy": "one-by-one", "freshnessWindowSecs": "1d", "signingIntervalSecs": "4h" } },
        "rolloutPolicies": { "one-by-one": { "waves": waves } },
        "disruptionBudgets": [ { "selector": { "tags": ["gpu"] }, "maxInFlight": 1 } ]
    });
    FleetSpec::from_json(spec.to_string().as_bytes()).expect("spec")
}

/// A `drover ui` process for `creds`; the URL it printed.
fn ui(h: &Harness, creds: &(PathBuf, PathBuf)) -> (KillOnDrop, String) {
    let port = drover_tests::free_loopback_port();
    let mut child = Command::new(drover_tests::workspace_binary("drover"))
        .args(["ui", "--listen", &format!("127.0.0.1:{port}"), "--coordinator", &h.url])
        .arg("--cert")
        .arg(&creds.0)
        .arg("--key")
        .arg(&creds.1)
        .arg("--ca")
        .arg(&h.ca)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("drover ui starts");
    let out = child.stdout.take().expect("stdout");
    let reaped = KillOnDrop(child);
    let mut lines = BufReader::new(out).lines();
    let url = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|l| l.trim().strip_prefix("http://").map(|rest| format!("http://{rest}")))
        .expect("drover ui prints its URL");
    // The rest of its output is read too, so its pipe never fills.
    std::thread::spawn(move || lines.for_each(drop));
    (reaped, url)
}

fn screenshots_dir() -> PathBuf {
    // Beside the build's other outputs, where CI keeps artifacts.
    Path::new(env!("CARGO_TARGET_TMPDIR")).parent().expect("target dir").join("dashboard-screenshots")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_in_a_real_browser_shows_the_fleet_live_and_acts_by_role() {
    let h = Harness::start_with_long_poll(0).await;
    let names: Vec<String> = (1..=HOSTS).map(|i| format!("gpu-{i:02}")).collect();
    let agents = h.sim_agents(&names, |_| Behaviour::Healthy);
    let (agents, _) = drover_tests::sim_agent::step_all(agents, h.clock.now()).await;
    let now = h.clock.now();
    let params = ReleaseParams { meta: ReleaseMeta { ci_commit: "d45b0a4d".into(), created_at: now }, version: 1, previous: None };
    let ci = drover_proto::keys::KeySigner::new(ed25519_dalek::SigningKey::from_bytes(&[9u8; 32]));
    h.running.app.store.put_release(1, now, &build_release(&spec(&names), &params, &[ci]).expect("release")).expect("store release");
    let app = h.running.app.clone();
    app.executor.tick_now(&app).await.expect("tick");
    let host = h
        .running
        .app
        .store
        .list_hosts(&Default::default())
        .expect("hosts")
        .into_iter()
        .find(|x| x.hostname == "gpu-16")
        .expect("gpu-16")
        .id;

    let (_admin_ui, admin_url) = ui(&h, &h.admin);
    let (_viewer_ui, viewer_url) = ui(&h, &h.viewer);
    let scratch = tempfile::tempdir().expect("tempdir");
    let ready = scratch.path().join("ready");
    let shots = screenshots_dir();
    let config = json!({
        "admin": admin_url, "viewer": viewer_url, "rollout": ROLLOUT, "host": host.to_string(),
        "screenshots": shots, "ready": ready,
    });
    let browser = tokio::process::Command::new("node")
        .arg("--experimental-websocket")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("browser/dashboard.mjs"))
        .env("DROVER_UI_TEST", config.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("node runs (Debian's or NodeSource's nodejs)");

    // The rollout's clock starts once the browser shows the rollouts page: each round the
    // agents check in, the executor ticks and half a soak passes.
    let stop = Arc::new(AtomicBool::new(false));
    let driver = {
        let (stop, h_app, clock, ready) = (stop.clone(), app.clone(), h.clock.clone(), ready.clone());
        tokio::spawn(async move {
            let mut agents: Vec<SimAgent> = agents;
            let deadline = Instant::now() + Duration::from_secs(120);
            while !ready.exists() && !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
                (agents, _) = drover_tests::sim_agent::step_all(agents, clock.now()).await;
                let _ = h_app.executor.tick_now(&h_app).await;
                clock.advance(30);
                tokio::time::sleep(Duration::from_millis(400)).await;
            }
        })
    };
    let out = tokio::time::timeout(Duration::from_secs(240), browser.wait_with_output()).await.expect("the browser test ends in 4 min");
    stop.store(true, Ordering::SeqCst);
    let _ = driver.await;
    let out = out.expect("node ran");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    eprintln!("{text}");
    assert!(out.status.success(), "the browser checks failed ({}):\n{text}", out.status);

    // What the page did, seen from the CLI: the rollout halted, audited with the page's reason.
    let status = h.drover_ok(&h.admin, &["rollout", "status", ROLLOUT]).await;
    assert!(status.contains("Halted"), "{status}");
    let audit = h.drover_ok(&h.admin, &["audit", "-o", "json"]).await;
    assert!(audit.contains("halted from the dashboard by the browser test"), "{audit}");
    for page in ["fleet", "rollouts", "rollout", "events", "hosts", "host", "jobs", "maintenance", "viewer-rollouts"] {
        let png = shots.join(format!("{page}.png"));
        let bytes = std::fs::read(&png).unwrap_or_else(|e| panic!("{}: {e}", png.display()));
        assert!(bytes.starts_with(b"\x89PNG") && bytes.len() > 5_000, "{page}: a real screenshot");
    }
}

/// `curl` to the dashboard proxy: the status it answers.
fn curl_status(args: &[&str]) -> String {
    let out = Command::new("curl").args(["-sS", "-o", "/dev/null", "-w", "%{http_code}"]).args(args).output().expect("curl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The proxy holds an admin's credentials: what another local user, a web page in the
/// operator's browser, or a rebound DNS name could try with it is refused before anything
/// reaches the coordinator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_proxy_refuses_what_is_not_its_own_page() {
    let h = Harness::start().await;
    let (_ui, url) = ui(&h, &h.admin);
    let base = url.split('#').next().expect("base").trim_end_matches('/').to_owned();
    let token = url.split("token=").nth(1).expect("token").to_owned();
    let with_token = format!("X-Drover-Token: {token}");
    let whoami = format!("{base}/api/whoami");
    // The session's own page and token work.
    assert_eq!(curl_status(&[&base]), "200");
    assert_eq!(curl_status(&["-H", &with_token, &whoami]), "200");
    // request_without_the_session_token_is_refused, and with another token.
    assert_eq!(curl_status(&[&whoami]), "401");
    assert_eq!(curl_status(&["-H", "X-Drover-Token: 00", &whoami]), "401");
    assert_eq!(curl_status(&[&format!("{whoami}?token={token}")]), "401", "the query token is for the event stream only");
    // dns_rebinding_host_is_refused: a name that resolves here but is not the listener's.
    assert_eq!(curl_status(&["-H", &with_token, "-H", "Host: attacker.example:80", &whoami]), "403");
    assert_eq!(curl_status(&["-H", "Host: attacker.example:80", &base]), "403");
    // cross_site_form_post_is_refused: a form posts without the header and not as JSON.
    let halt = format!("{base}/api/rollouts/gpu@c0ffee/halt");
    assert_eq!(curl_status(&["-X", "POST", "-d", "reason=x", &halt]), "401");
    assert_eq!(curl_status(&["-X", "POST", "-H", &with_token, "-d", "reason=x", &halt]), "415");
    // Only reads and actions pass; no path leaves /v1.
    assert_eq!(curl_status(&["-X", "DELETE", "-H", &with_token, &format!("{base}/api/racks/r1")]), "405");
    assert_eq!(curl_status(&["-H", &with_token, "--path-as-is", &format!("{base}/api/../metrics")]), "400");
    assert_eq!(curl_status(&["-H", &with_token, "--path-as-is", &format!("{base}/api/hosts/%2e%2e/x")]), "400");
    // drover ui listens on loopback only.
    let out = Command::new(drover_tests::workspace_binary("drover"))
        .args(["ui", "--listen", "0.0.0.0:0", "--coordinator", &h.url])
        .arg("--cert")
        .arg(&h.admin.0)
        .arg("--key")
        .arg(&h.admin.1)
        .arg("--ca")
        .arg(&h.ca)
        .output()
        .expect("drover ui");
    assert_eq!(out.status.code(), Some(64), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("loopback"));
}
