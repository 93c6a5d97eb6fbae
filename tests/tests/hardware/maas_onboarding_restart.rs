//! A `drover-coordinator serve` process SIGKILLed in the middle of a MAAS onboarding batch and
//! started again: the batch finishes the same way, and MAAS sees no state-changing call twice
//! (each machine accepted once and deployed once — the one whose first deployment fails with
//! a datasource error exactly twice), because every step is one store transaction and every
//! stage reads MAAS before it acts.
//!
//! The agents are real `drover-agent` processes the fake MAAS boots from the rendered user
//! data; they back off while the coordinator is down and come back to the restarted one.
//! Needs `dbus-daemon` and `curl` (CI installs them).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use drover_devkit::fake_maas::boot::BootOptions;
use drover_devkit::fake_maas::{FakeMaas, FakeMaasOptions};
use drover_tests::Endpoint;
use drover_tests::bus::TestBus;
use drover_tests::maas::{settled, state_changes};
use drover_tests::procs::{SitePaths, fixed_port_site};
use serde_json::{Value, json};

const API_KEY: &str = "drover-consumer:drover-token:restart-token-secret";
const NODES: usize = 6;

struct Site {
    _dir: tempfile::TempDir,
    paths: SitePaths,
    endpoint: Endpoint,
}

impl Site {
    fn new() -> Site {
        let dir = tempfile::tempdir().expect("tempdir");
        let (paths, endpoint) = fixed_port_site(dir.path(), "[agent]\nlong_poll_secs = 2\n\n[maas]\npoll_ms = 200\n");
        Site { _dir: dir, paths, endpoint }
    }

    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (String, Value) {
        let body = body.map(|b| b.to_string());
        let (code, text) = self.endpoint.call(Some(&self.endpoint.admin), method, path, body.as_deref()).await;
        (code, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    /// The batch's rows, or `None` while the coordinator does not answer.
    async fn rows(&self, batch: &str) -> Option<Vec<Value>> {
        let (code, v) = self.call("GET", &format!("/v1/maas/onboardings?batch={batch}"), None).await;
        (code == "200").then(|| v["onboardings"].as_array().cloned().unwrap_or_default())
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.paths.dir.join("coordinator.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn coordinator_killed_mid_batch_finishes_the_same_way_without_repeating_maas_calls() {
    let site = Site::new();
    let mut server = site.paths.serve();
    assert_eq!(server.url, site.endpoint.url);
    let bus = TestBus::start_with(&[
        "maas_hardware_sync.timer;timer;inactive".to_owned(),
        "maas_hardware_sync.service;oneshot;inactive;true".to_owned(),
    ]);
    let extra = site.paths.dir.join("agent-extra.toml");
    // While the coordinator is down the agents back off; keep that short.
    std::fs::write(
        &extra,
        format!(
            "systemd_bus = \"{}\"\n\n[activation]\nroot = \"@ROOT@\"\n\n[checkin]\nbackoff_base_secs = 1\nbackoff_max_secs = 2\n",
            bus.address()
        ),
    )
    .expect("extra");
    let maas = FakeMaas::start(&FakeMaasOptions {
        api_key: API_KEY.into(),
        commission_secs: 2,
        deploy_secs: 2,
        release_secs: 1,
        boot: Some(BootOptions { dir: site.paths.dir.join("boot"), agent_extra_config: Some(extra) }),
        ..FakeMaasOptions::default()
    })
    .expect("fake MAAS");

    let body = json!({
        "name": "dc1", "regionCode": "eu-1", "apiBaseUrl": maas.url(), "pxeIface": "ens19", "pxeVlanVid": 46,
        "nodePxeIface": "eno1", "reason": "restart test",
        "defaultProfile": { "batchMaxParallel": 3, "hardwareSyncIntervalSecs": 60, "maxDeployRetryAttempts": 1 },
    });
    let (code, v) = site.call("POST", "/v1/maas/sites", Some(body)).await;
    assert_eq!(code, "201", "{v}");
    let creds = json!({ "apiToken": API_KEY, "defaultPower": { "user": "root", "pass": "bmc-pass" }, "deployPassword": "deploy-pass", "reason": "seed" });
    let (code, v) = site.call("POST", "/v1/maas/sites/dc1/credentials", Some(creds)).await;
    assert_eq!(code, "200", "{v}");

    let mut ids = BTreeMap::new();
    for i in 0..NODES {
        let body = json!({ "hostname": format!("r-{i:02}"), "power_address": format!("10.8.0.{}", 10 + i), "status": "New" });
        let m = maas.control("POST", "machines", Some(&body)).expect("enlist");
        ids.insert(format!("r-{i:02}"), m["system_id"].as_str().expect("id").to_owned());
    }
    maas.control(
        "POST",
        &format!("machines/{}/fail", ids["r-01"]),
        Some(&json!({ "stage": "deployment", "message": "cloud-init: no datasource found" })),
    )
    .expect("arm");
    let nodes: Vec<Value> =
        (0..NODES).map(|i| json!({ "hostname": format!("r-{i:02}"), "ipmiIp": format!("10.8.0.{}", 10 + i) })).collect();
    let (code, v) =
        site.call("POST", "/v1/maas/onboardings/batch", Some(json!({ "site": "dc1", "profile": "default", "nodes": nodes }))).await;
    assert_eq!(code, "201", "{v}");
    let batch = v["batchId"].as_str().expect("batch").to_owned();

    // Kill once the batch is well under way: some node past commissioning, none finished.
    let deadline = Instant::now() + Duration::from_secs(180);
    let at_kill = loop {
        let rows = site.rows(&batch).await.unwrap_or_default();
        let past = rows.iter().filter(|o| o["stageIndex"].as_u64().unwrap_or(0) >= 5).count();
        if past >= 1 {
            break rows;
        }
        assert!(Instant::now() < deadline, "the batch did not get going\n{}", site.log_tail());
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    server.child.kill().expect("SIGKILL");
    server.child.wait().expect("reaped");
    let _server = site.paths.serve();

    let deadline = Instant::now() + Duration::from_secs(300);
    let rows = loop {
        if let Some(rows) = site.rows(&batch).await
            && rows.len() == NODES
            && rows.iter().all(settled)
        {
            break rows;
        }
        if Instant::now() > deadline {
            let rows = site.rows(&batch).await.unwrap_or_default();
            let states: Vec<String> =
                rows.iter().map(|o| format!("{} {} {} {}", o["hostname"], o["state"], o["stage"], o["message"])).collect();
            panic!("the batch did not settle after the restart:\n{}\n{}", states.join("\n"), site.log_tail());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let stages_at_kill: Vec<String> = at_kill.iter().map(|o| format!("{}@{}", o["hostname"], o["stage"])).collect();
    for o in &rows {
        assert_eq!(o["state"], "completed", "killed at {stages_at_kill:?}: {o:#}");
    }
    let calls = state_changes(&maas);
    for (host, id) in &ids {
        let count = |op: &str| calls.get(id).map_or(0, |c| c.iter().filter(|c| *c == op).count());
        assert_eq!(count("deploy"), if host == "r-01" { 2 } else { 1 }, "{host} (killed at {stages_at_kill:?}): {calls:#?}");
        assert_eq!(count("accept"), 1, "{host}: {calls:#?}");
        assert_eq!(count("commission"), 0, "{host}: accepting commissions: {calls:#?}");
    }
    eprintln!("killed at {stages_at_kill:?}");
}
