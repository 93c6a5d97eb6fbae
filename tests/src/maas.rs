//! Helpers of the MAAS workflow tests: a coordinator with the fake MAAS booting deployed
//! machines into sandboxes and site `dc1` ([`Env`]), what the fake MAAS's request log says each
//! machine was asked to change, and when an onboarding has stopped moving.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use drover_devkit::fake_maas::boot::BootOptions;
use drover_devkit::fake_maas::{FakeMaas, FakeMaasOptions};
use serde_json::{Value, json};

use crate::Harness;
use crate::bus::TestBus;

/// The site's MAAS API key.
pub const API_KEY: &str = "drover-consumer:drover-token:onboarding-token-secret";
/// The site's deploy password.
pub const DEPLOY_PASS: &str = "deploy-Pa55-onboarding";
/// The machines' BMC password.
pub const POWER_PASS: &str = "bmc-Pa55-onboarding";
/// How long a batch may take to settle.
pub const WAIT: Duration = Duration::from_secs(300);

/// An admin call; the answer as JSON (or the text as a JSON string).
pub async fn call(h: &Harness, method: &str, path: &str, body: Option<Value>) -> (String, Value) {
    let body = body.map(|b| b.to_string());
    let (code, text) = h.call(Some(&h.admin), method, path, body.as_deref()).await;
    (code, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// Enlists a machine in the fake MAAS as New; returns its system id.
pub fn enlist(maas: &FakeMaas, hostname: &str, bmc: &str, disks: Option<Value>) -> String {
    let mut body = json!({ "hostname": hostname, "power_address": bmc, "power_user": "root", "power_pass": POWER_PASS, "status": "New" });
    if let Some(d) = disks {
        body["block_devices"] = d;
    }
    let m = maas.control("POST", "machines", Some(&body)).expect("enlist");
    m["system_id"].as_str().expect("system id").to_owned()
}

/// A batch's onboardings.
pub async fn onboardings(h: &Harness, batch: &str) -> Vec<Value> {
    let (code, v) = call(h, "GET", &format!("/v1/maas/onboardings?batch={batch}"), None).await;
    assert_eq!(code, "200", "{v}");
    v["onboardings"].as_array().cloned().unwrap_or_default()
}

/// Waits (bounded by [`WAIT`]) for every onboarding of the batch to settle.
pub async fn wait_settled(h: &Harness, batch: &str, maas: &FakeMaas) -> Vec<Value> {
    let deadline = Instant::now() + WAIT;
    loop {
        let rows = onboardings(h, batch).await;
        if !rows.is_empty() && rows.iter().all(settled) {
            return rows;
        }
        if Instant::now() > deadline {
            let states: Vec<String> =
                rows.iter().map(|o| format!("{} {} {} {}", o["hostname"], o["state"], o["stage"], o["message"])).collect();
            let boots: Vec<Value> = rows
                .iter()
                .filter_map(|o| o["systemId"].as_str())
                .filter_map(|id| maas.control("GET", &format!("machines/{id}"), None).ok())
                .map(|m| m["_fake"]["boot"].clone())
                .collect();
            panic!("the batch did not settle:\n{}\nboots: {boots:#?}", states.join("\n"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A coordinator, a private bus for the booted agents, the fake MAAS booting into sandboxes,
/// and site `dc1` with its credentials.
pub struct Env {
    /// The coordinator.
    pub h: Harness,
    /// The fake MAAS.
    pub maas: FakeMaas,
    _bus: TestBus,
}

impl Env {
    /// The environment with the coordinator's default test configuration.
    pub async fn start() -> Env {
        Self::start_with(|_| {}, |_| {}).await
    }

    /// The environment, the coordinator's configuration adjusted by `tweak` and the fake
    /// MAAS's options by `fake` first.
    pub async fn start_with(tweak: impl FnOnce(&mut drover_engine::config::Config), fake: impl FnOnce(&mut FakeMaasOptions)) -> Env {
        let h = Harness::start_with_config(move |_, c| {
            c.agent.long_poll_secs = 1;
            tweak(c);
        })
        .await;
        let boot_dir = h.dir.path().join("boot");
        let bus = TestBus::start_with(&[
            "maas_hardware_sync.timer;timer;inactive".to_owned(),
            "maas_hardware_sync.service;oneshot;inactive;true".to_owned(),
            "drover-agent.service;simple;active;exec sleep 600".to_owned(),
        ]);
        let extra = h.dir.path().join("agent-extra.toml");
        std::fs::write(&extra, format!("systemd_bus = \"{bus}\"\n\n[activation]\nroot = \"@ROOT@\"\n", bus = bus.address()))
            .expect("extra config");
        let mut options = FakeMaasOptions {
            api_key: API_KEY.into(),
            commission_secs: 1,
            deploy_secs: 1,
            release_secs: 1,
            erase_secs: 1,
            boot: Some(BootOptions { dir: boot_dir, agent_extra_config: Some(extra) }),
            ..FakeMaasOptions::default()
        };
        fake(&mut options);
        let maas = FakeMaas::start(&options).expect("fake MAAS starts");
        let site = json!({
            "name": "dc1", "regionCode": "eu-1", "apiBaseUrl": maas.url(), "pxeIface": "ens19", "pxeVlanVid": 46,
            "nodePxeIface": "eno1", "reason": "onboarding test",
            "defaultProfile": { "batchMaxParallel": 4, "hardwareSyncIntervalSecs": 60, "maxDeployRetryAttempts": 1 },
        });
        let (code, v) = call(&h, "POST", "/v1/maas/sites", Some(site)).await;
        assert_eq!(code, "201", "{v}");
        let creds = json!({
            "apiToken": API_KEY, "defaultPower": { "user": "root", "pass": POWER_PASS }, "deployPassword": DEPLOY_PASS, "reason": "seed",
        });
        let (code, v) = call(&h, "POST", "/v1/maas/sites/dc1/credentials", Some(creds)).await;
        assert_eq!(code, "200", "{v}");
        Env { h, maas, _bus: bus }
    }
}

/// State-changing MAAS calls per machine, from the fake's request log: each POST's `op=`
/// (`create` for a POST without one), keyed by the machine's system id — from the path, or for
/// a collection op such as `accept` from the `machines=` field of its body.
pub fn state_changes(maas: &FakeMaas) -> BTreeMap<String, Vec<String>> {
    let log = maas.control("GET", "requests", None).expect("the fake's request log");
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in log.as_array().cloned().unwrap_or_default() {
        if r["method"] != "POST" {
            continue;
        }
        let path = r["path"].as_str().unwrap_or_default();
        let query = r["query"].as_str().unwrap_or_default();
        let op = query.split('&').find_map(|kv| kv.strip_prefix("op=")).unwrap_or("create").to_owned();
        let mut id = path.split('/').skip_while(|s| *s != "machines" && *s != "nodes").nth(1).unwrap_or("").to_owned();
        if id.is_empty() {
            let body = r["body"].as_str().unwrap_or_default();
            id = body.split('&').find_map(|kv| kv.strip_prefix("machines=")).unwrap_or_default().to_owned();
        }
        out.entry(id).or_default().push(op);
    }
    out
}

/// The onboarding (its API JSON) has stopped: completed, reconciled, cancelled or failed.
pub fn settled(o: &Value) -> bool {
    matches!(o["state"].as_str(), Some("completed" | "failed_manual_intervention" | "failed_retryable" | "cancelled" | "reconciled"))
}
