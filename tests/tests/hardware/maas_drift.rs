//! MAAS drift reconciliation end to end: a real coordinator, the fake MAAS booting ten
//! onboarded machines into sandboxes (real agents), and every row of §6.4 caused the way it
//! happens — an admin releasing, redeploying, recommissioning, marking broken or deleting
//! through MAAS's API, an address change, or a machine powered off — then one reconciler pass (on
//! demand, as `drover reconcile run` asks) and the action, the alert and the record checked.
//!
//! - `every_row_of_the_drift_table_is_caught_as_it_happens`: the rows, the once-per-drift rule
//!   (a second pass adds nothing), a resolved drift not reopened while unchanged, the retired
//!   host released and powered off by a `maas_decommission` repair that then heals, unhealthy
//!   hardware sync repaired by a `maas_resync` (and one that cannot be: a second, critical
//!   alert, not retried),
//!   an in-flight reimage not flagged, and a pass while MAAS answers 503 that changes nothing
//!   and reports `upstream_transient` (the CLI exits 69).
//!
//! Commissioning and deployments here last until the test advances them (the fake's
//! `commission_secs = deploy_secs = 0`), so the recommissioning, the redeploy and the reimage
//! are seen in flight without racing a timer.
//!
//! Needs `dbus-daemon` and `curl` (CI installs them).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use drover_devkit::fake_maas::FakeMaas;
use drover_devkit::fake_maas::boot::MAAS_CREDS_PATH;
use drover_engine::app::Clock as _;
use drover_maas::{ClientConfig, CommissionOptions, DeployOptions, MaasClient, NodeStatus, ReleaseOptions};
use drover_tests::Harness;
use drover_tests::maas::{API_KEY, Env, call, enlist, wait_settled};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(120);

async fn pass(h: &Harness) -> Value {
    let (code, v) = call(h, "POST", "/v1/maas/reconciliation/run", Some(json!({ "site": "dc1" }))).await;
    assert_eq!(code, "200", "{v}");
    v["runs"][0].clone()
}

async fn drift(h: &Harness) -> BTreeMap<String, Value> {
    let (code, v) = call(h, "GET", "/v1/maas/reconciliation/drift", None).await;
    assert_eq!(code, "200", "{v}");
    v["drift"].as_array().cloned().unwrap_or_default().into_iter().map(|d| (d["hostname"].as_str().unwrap_or("").to_owned(), d)).collect()
}

async fn events(h: &Harness, kind: &str) -> Vec<Value> {
    let (code, v) = call(h, "GET", &format!("/v1/events?kind={kind}&limit=1000"), None).await;
    assert_eq!(code, "200", "{v}");
    v["items"].as_array().cloned().unwrap_or_default()
}

async fn host(h: &Harness, id: &str) -> Value {
    let (code, v) = call(h, "GET", &format!("/v1/hosts/{id}"), None).await;
    assert_eq!(code, "200", "{v}");
    v
}

async fn wait_for<F: std::future::Future<Output = bool>>(what: &str, mut check: impl FnMut() -> F) {
    let deadline = Instant::now() + WAIT;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn wait_status(client: &MaasClient, id: &str, want: NodeStatus) {
    wait_for(&format!("machine {id} to be {want}"), || async { client.read_machine(id).await.map(|m| m.status == want).unwrap_or(false) })
        .await;
}

async fn wait_job(h: &Harness, id: &str, states: &[&str]) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let (code, v) = call(h, "GET", &format!("/v1/maas/onboardings/{id}"), None).await;
        assert_eq!(code, "200", "{v}");
        let v = v["onboarding"].clone();
        if states.contains(&v["state"].as_str().unwrap_or("")) {
            return v;
        }
        assert!(Instant::now() < deadline, "job {id} did not reach {states:?}: {v:#}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Advances the fake's in-flight deployments every 300 ms until dropped.
struct Advancer(Arc<AtomicBool>);

impl Advancer {
    fn start(maas: &FakeMaas) -> Advancer {
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, control) = (stop.clone(), maas.controller());
        std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                let _ = control.control("POST", "advance", Some(&json!({})));
                std::thread::sleep(Duration::from_millis(300));
            }
        });
        Advancer(stop)
    }
}

impl Drop for Advancer {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_row_of_the_drift_table_is_caught_as_it_happens() {
    let env = Env::start_with(|c| c.hosts.offline_after_secs = 4, |o| (o.commission_secs, o.deploy_secs) = (0, 0)).await;
    let (h, maas) = (&env.h, &env.maas);
    let client = MaasClient::new(ClientConfig::new(maas.url(), API_KEY.parse().expect("key"))).expect("client");
    // Ten enlisted machines onboarded in one batch; one more never onboarded.
    let mut sid = BTreeMap::new();
    for i in 0..10 {
        sid.insert(i, enlist(maas, &format!("gpu-{i}"), &format!("10.9.2.{}", 10 + i), None));
    }
    enlist(maas, "spare", "10.9.2.99", None);
    let nodes: Vec<Value> = (0..10).map(|i| json!({ "hostname": format!("gpu-{i}"), "ipmiIp": format!("10.9.2.{}", 10 + i) })).collect();
    let (code, v) =
        call(h, "POST", "/v1/maas/onboardings/batch", Some(json!({ "site": "dc1", "profile": "default", "nodes": nodes }))).await;
    assert_eq!(code, "201", "{v}");
    let rows = {
        let _advance = Advancer::start(maas);
        wait_settled(h, v["batchId"].as_str().expect("batch"), maas).await
    };
    let mut hid = BTreeMap::new();
    for o in &rows {
        assert_eq!(o["state"], "completed", "{o:#}");
        let i: usize = o["hostname"].as_str().and_then(|n| n.strip_prefix("gpu-")).and_then(|n| n.parse().ok()).expect("name");
        hid.insert(i, o["hostId"].as_str().expect("host").to_owned());
    }
    let name = |i: usize| format!("gpu-{i}");

    // A first pass records what MAAS shows: nothing drifted, one unmanaged machine.
    let r = pass(h).await;
    assert_eq!(
        (r["outcome"].as_str(), r["hosts"].as_u64(), r["unmanaged"].as_u64(), r["detected"].as_u64()),
        (Some("ok"), Some(10), Some(1), Some(0)),
        "{r:#}"
    );
    assert!(drift(h).await.is_empty());
    assert!(events(h, "maas.drift.detected").await.is_empty(), "an unmanaged machine is DEBUG only");

    // The admin acts in MAAS; the machines change under Drover.
    client.release(&sid[&0], &ReleaseOptions::default()).await.expect("release gpu-0");
    client.mark_broken(&sid[&1], Some("PSU fault")).await.expect("mark gpu-1 broken");
    maas.control("POST", &format!("machines/{}/ip", sid[&2]), Some(&json!({ "ip": "10.20.77.7" }))).expect("new IP for gpu-2");
    client.delete_machine(&sid[&3]).await.expect("delete gpu-3");
    client.release(&sid[&4], &ReleaseOptions::default()).await.expect("release gpu-4");
    client.release(&sid[&5], &ReleaseOptions::default()).await.expect("release gpu-5");
    wait_status(&client, &sid[&4], NodeStatus::Ready).await;
    client.deploy(&sid[&4], &DeployOptions::default()).await.expect("redeploy gpu-4");
    wait_status(&client, &sid[&5], NodeStatus::Ready).await;
    client.commission(&sid[&5], &CommissionOptions::default()).await.expect("recommission gpu-5");

    let r = pass(h).await;
    assert_eq!(r["outcome"], "ok", "{r:#}");
    let d = drift(h).await;
    let want = [
        (0, "released_outside_workflow", "critical", "quarantined"),
        (1, "hardware_failure", "critical", "quarantined"),
        (3, "deleted_from_maas", "critical", "quarantined"),
        (4, "released_outside_workflow", "critical", "quarantined"),
        (5, "recommissioning", "warn", "active"),
    ];
    for (i, rule, severity, state) in want {
        let row = d.get(&name(i)).unwrap_or_else(|| panic!("{} not drifted: {d:#?}", name(i)));
        assert_eq!(
            (row["driftDetails"]["rule"].as_str(), row["driftDetails"]["severity"].as_str()),
            (Some(rule), Some(severity)),
            "{row:#}"
        );
        let hj = host(h, &hid[&i]).await;
        assert_eq!(hj["state"], state, "{hj:#}");
        // Auto-quarantine stops new work and releases no tenant: only the flag and the state.
        assert_eq!(hj["schedulable"], state != "quarantined", "{hj:#}");
    }
    assert_eq!(d[&name(3)]["lastMaasStatus"], "Absent");
    assert_eq!(d.len(), 5, "{d:#?}");
    // The IP change is followed at once: the new address recorded, an INFO note, no open drift.
    let ip = events(h, "maas.drift.ip_changed").await;
    assert_eq!(ip.len(), 1, "{ip:#?}");
    assert_eq!((ip[0]["hostId"].as_str(), ip[0]["data"]["severity"].as_str()), (Some(hid[&2].as_str()), Some("info")));
    let detected = events(h, "maas.drift.detected").await;
    assert_eq!(detected.len(), 5, "one alert per drift: {detected:#?}");
    assert!(detected.iter().all(|e| e["data"]["severity"].is_string() && e["data"]["rule"].is_string()));

    // Once per drift: the same state again adds nothing.
    let r = pass(h).await;
    assert_eq!((r["detected"].as_u64(), r["changes"].as_u64()), (Some(0), Some(0)), "{r:#}");
    assert_eq!(events(h, "maas.drift.detected").await.len(), 5);

    // Resolved while it still holds: not reopened by the next pass (CLI as an operator types it).
    let out = h.drover_as(&h.admin, &["drift", "resolve", "gpu-5", "--reason", "firmware update, expected"]).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    pass(h).await;
    assert!(!drift(h).await.contains_key("gpu-5"));
    assert_eq!(events(h, "maas.drift.detected").await.len(), 5, "an acknowledged drift is not re-detected while unchanged");
    let audit = call(h, "GET", "/v1/audit?limit=1000", None).await.1;
    assert!(audit["items"].as_array().expect("audit").iter().any(|a| a["action"] == "maas.drift.resolve.acknowledge"), "{audit:#}");

    // Powered off from MAAS: the OS and its agent stop, MAAS still says Deployed; the host
    // goes offline, then "agent not polling" (WARN, no further MAAS call).
    client.power_off(&sid[&2], drover_maas::StopMode::Hard, Some("by hand")).await.expect("power off gpu-2");
    // The coordinator's clock is the test's: past the offline threshold, every live agent
    // checks in again at the new time and only the dead one stays silent.
    h.clock.advance(5);
    let after = h.clock.now().unix();
    wait_for("gpu-2 offline and the live agents checked in since", || async {
        if host(h, &hid[&2]).await["state"] != "offline" {
            return false;
        }
        for i in [6, 7, 8, 9] {
            let hj = host(h, &hid[&i]).await;
            let at = hj["lastCheckin"]["at"].as_str().and_then(|t| drover_proto::time::Time::parse_lenient(t).ok()).map(|t| t.unix());
            if hj["state"] != "active" || at.is_none_or(|t| t < after) {
                return false;
            }
        }
        true
    })
    .await;
    let before = drover_tests::maas::state_changes(maas).get(&sid[&2]).map_or(0, Vec::len);
    assert_eq!(client.read_machine(&sid[&2]).await.expect("gpu-2").status, NodeStatus::Deployed);
    pass(h).await;
    assert_eq!(drift(h).await[&name(2)]["driftDetails"]["rule"], "agent_not_polling");
    assert_eq!(drover_tests::maas::state_changes(maas).get(&sid[&2]).map_or(0, Vec::len), before, "no MAAS action for an agent issue");

    // A retired host still deployed: released and powered off in MAAS (the record kept), then healed.
    let (code, v) = call(h, "POST", &format!("/v1/hosts/{}/retire", hid[&6]), Some(json!({ "reason": "end of life" }))).await;
    assert_eq!(code, "200", "{v}");
    wait_for("gpu-6 retired", || async { host(h, &hid[&6]).await["state"] == "retired" }).await;
    pass(h).await;
    let job = events(h, "maas.drift.detected").await.into_iter().find(|e| e["hostId"] == hid[&6].as_str()).expect("gpu-6 alert");
    assert_eq!((job["data"]["rule"].as_str(), job["data"]["severity"].as_str()), (Some("retired_still_deployed"), Some("info")));
    let done = wait_job(h, job["jobId"].as_str().expect("repair job"), &["completed"]).await;
    assert_eq!(done["workflow"], "decommission", "{done:#}");
    let m = client.read_machine(&sid[&6]).await.expect("kept in MAAS");
    assert_eq!((m.status, m.power_state.as_str()), (NodeStatus::Ready, "off"));
    pass(h).await;
    assert!(!drift(h).await.contains_key("gpu-6"), "released and off: healed");
    assert!(events(h, "maas.drift.healed").await.iter().any(|e| e["hostId"] == hid[&6].as_str()));

    // Hardware sync unhealthy (the creds file is wrong and the last sync is old): a re-sync
    // re-asserts the interval, reseeds the token through the agent and waits for a fresh sync.
    let root = h.dir.path().join("boot").join(&sid[&7]).join("root");
    std::fs::write(root.join(MAAS_CREDS_PATH.trim_start_matches('/')), "broken\n").expect("break creds");
    maas.control("POST", &format!("machines/{}/hw_sync", sid[&7]), Some(&json!({ "last_sync": "2020-01-01T00:00:00.000Z" })))
        .expect("stale");
    // And one MAAS deployed with sync off: only a reimage can turn it on.
    maas.control("POST", &format!("machines/{}/hw_sync", sid[&8]), Some(&json!({ "last_sync": null, "enable_hw_sync": false })))
        .expect("off");
    pass(h).await;
    let alerts = events(h, "maas.drift.detected").await;
    let resync = |i: usize| alerts.iter().find(|e| e["hostId"] == hid[&i].as_str()).and_then(|e| e["jobId"].as_str()).map(str::to_owned);
    let ok = wait_job(h, &resync(7).expect("gpu-7 re-sync"), &["completed"]).await;
    assert_eq!(ok["workflow"], "resync", "{ok:#}");
    let failed = wait_job(h, &resync(8).expect("gpu-8 re-sync"), &["failed_retryable", "failed_manual_intervention"]).await;
    assert_eq!(failed["failureClass"], "hardware_sync_failure", "{failed:#}");
    assert!(failed["message"].as_str().unwrap_or("").contains("reimage"), "{failed:#}");
    let gave_up = events(h, "maas.drift.repair_failed").await;
    assert_eq!((gave_up.len(), gave_up[0]["data"]["severity"].as_str()), (1, Some("critical")), "bounded, then alerted: {gave_up:#?}");
    let config = client.get_config("hardware_sync_interval").await.expect("config");
    assert_eq!(config, json!("1m"), "the site's interval was re-asserted in MAAS");
    pass(h).await;
    let d = drift(h).await;
    assert!(!d.contains_key("gpu-7"), "re-synced: healed");
    assert_eq!(d[&name(8)]["driftDetails"]["rule"], "hw_sync_unhealthy", "bounded, then left open for an operator");
    let (_, jobs) = call(h, "GET", "/v1/maas/onboardings?workflow=resync", None).await;
    assert_eq!(jobs["onboardings"].as_array().map(Vec::len), Some(2), "one re-sync per drift: {jobs:#}");

    // An in-flight reimage is judged against the reimage, not the table.
    let (code, v) =
        call(h, "POST", &format!("/v1/hosts/{}/decommission", hid[&9]), Some(json!({ "mode": "reimage", "reason": "fresh OS" }))).await;
    assert_eq!(code, "201", "{v}");
    wait_status(&client, &sid[&9], NodeStatus::Deploying).await;
    let r = pass(h).await;
    assert_eq!(r["detected"], 0, "{r:#}");
    assert!(!drift(h).await.contains_key("gpu-9"), "a reimaging host in Deploying is not drift");

    // MAAS down: the pass changes nothing and says why; the CLI exits 69.
    let before = (events(h, "maas.drift.detected").await.len(), drift(h).await);
    maas.control("POST", "outage", Some(&json!({ "mode": "503" }))).expect("outage");
    let r = pass(h).await;
    assert_eq!(r["outcome"], "upstream_transient", "{r:#}");
    assert_eq!(r["changes"], 0);
    let out = h.drover_as(&h.admin, &["reconcile", "run", "--site", "dc1"]).await;
    assert_eq!(out.status.code(), Some(69), "{}", String::from_utf8_lossy(&out.stdout));
    maas.control("POST", "outage", Some(&json!({ "mode": "none" }))).expect("outage over");
    assert_eq!((events(h, "maas.drift.detected").await.len(), drift(h).await), before, "nothing judged from a MAAS that did not answer");

    // The status, the metrics and the listing as an operator reads them.
    let (_, s) = call(h, "GET", "/v1/maas/reconciliation/status", None).await;
    let site = &s["sites"][0];
    assert_eq!((site["site"].as_str(), site["drifted"].as_u64()), (Some("dc1"), Some(before.1.len() as u64)), "{s:#}");
    assert_eq!(site["lastRun"]["outcome"], "upstream_transient");
    let (_, metrics) = h.call(Some(&h.admin), "GET", "/metrics", None).await;
    assert!(metrics.contains("drover_maas_drifted_hosts{site=\"dc1\",rule=\"released_outside_workflow\"} 2"), "{metrics}");
    assert!(metrics.contains("drover_maas_reconcile_last_duration_seconds{site=\"dc1\"}"), "{metrics}");
    let out = h.drover_as(&h.admin, &["get", "drift"]).await;
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && table.contains("gpu-3") && table.contains("deleted_from_maas"), "{table}");
}
