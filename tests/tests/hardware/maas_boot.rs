//! A MAAS deployment that boots for real: the coordinator renders the first-boot user data
//! (`drover_engine::cloudinit::render`) with a bootstrap command made for a host it
//! created (fresh enrollment token) and the machine's MAAS token, Drover's MAAS client deploys
//! it to the fake MAAS with hardware sync on, and the fake, started with `--boot-dir`, boots
//! it: `write_files` under a sandbox root, then the agent bootstrap part with real `curl` and
//! `sh` (the coordinator's `bootstrap.sh`, its test hooks, `sudo` neutralised), then the real
//! `drover-agent` the bootstrap downloaded, sandboxed (no system bus, activation under the
//! root). The host becomes active in the coordinator's store — an agent enrolled over mTLS —
//! and the machine's hardware sync is healthy through the client, because the creds file the
//! user data wrote names the machine and its token. Release stops the agent.
//!
//! Needs `curl` and the workspace's `fake-maas` and `drover-agent` builds (`cargo test
//! --workspace` builds them; alone: `cargo build -p drover-devkit --bin fake-maas -p drover-agent`).

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use drover_devkit::fake_maas::boot::{AGENT_BIN_PATH, AGENT_CONFIG_PATH, AGENT_PART_PATH, MAAS_CREDS_PATH};
use drover_devkit::fake_maas::{BootOptions, FakeMaas, FakeMaasOptions};
use drover_engine::cloudinit::{self, DeployUser, FirstBoot, HwSync, HwSyncToken, Part, Shares, salt_from_bytes};
use drover_maas::{ApiKey, ClientConfig, DeployOptions, MaasClient, NodeStatus, ReleaseOptions};
use drover_proto::task::Secret;
use drover_tests::{Harness, workspace_binary};
use serde_json::{Value, json};
use uuid::Uuid;

/// The bound on every wait.
const WAIT: Duration = Duration::from_secs(120);

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// `GET /_fake/machines/{id}` (blocking, but short: the fake is another process).
fn inspect(fake: &FakeMaas, id: &str) -> Value {
    fake.control("GET", &format!("machines/{id}"), None).unwrap_or_else(|e| panic!("inspect {id}: {e}"))
}

/// What a failed wait shows: the boot as the fake sees it and the two logs.
fn boot_report(boot: &Value) -> String {
    let log = |k: &str| boot[k].as_str().map(|p| read(Path::new(p))).unwrap_or_default();
    format!("boot: {boot}\n--- boot.log\n{}\n--- agent.log\n{}", log("boot_log"), log("agent_log"))
}

async fn host_state(h: &Harness, id: Uuid) -> String {
    h.get_json(&format!("/v1/hosts/{id}")).await["state"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployed_machine_boots_its_user_data_enrolls_its_agent_and_syncs_hardware() {
    // The fake's paths are the renderer's.
    assert_eq!((AGENT_PART_PATH, MAAS_CREDS_PATH), (cloudinit::AGENT_PART_PATH, cloudinit::MAAS_CREDS_PATH));

    let h = Harness::start().await;
    let boot_dir = h.dir.path().join("maas-boot");
    let options =
        FakeMaasOptions { bin: workspace_binary("fake-maas"), boot: Some(BootOptions::new(&boot_dir)), ..FakeMaasOptions::default() };
    let fake = FakeMaas::start(&options).expect("fake-maas starts");
    let key: ApiKey = fake.api_key().parse().expect("key");
    let maas = MaasClient::new(ClientConfig::new(fake.url(), key)).expect("client");

    // A Ready machine. Its token: MAAS mints it inside deploy and keeps it across an abort by
    // the same owner, so deploy, abort, read it, render, deploy again.
    let m = fake.control("POST", "machines", Some(&json!({ "hostname": "maas-gpu-01", "status": "Ready" }))).expect("machine");
    let id = m["system_id"].as_str().expect("system_id").to_owned();
    maas.deploy(&id, &DeployOptions::default()).await.expect("first deploy");
    maas.abort(&id, None).await.expect("abort");
    let token = maas.get_token(&id).await.expect("get_token").expect("a token after deploy");

    // The coordinator's host and its bootstrap command, with a fresh enrollment token.
    let created = h.create_host("maas-gpu-01").await;
    let host = Uuid::parse_str(created["hostId"].as_str().expect("hostId")).expect("uuid");
    let command = created["command"].as_str().expect("command");
    assert!(command.contains("| sudo sh -c "), "{command}");
    let input = FirstBoot {
        hostname: "maas-gpu-01".into(),
        site_bundle: None,
        deploy_user: DeployUser {
            name: "hpcadmin".into(),
            password: Secret::new("correct horse battery staple"),
            salt: salt_from_bytes(&[7u8; 12]),
        },
        deploy_ssh_iface: None,
        agent_bootstrap: Secret::new(command),
        hw_sync: HwSync {
            maas_url: fake.url().to_owned(),
            system_id: id.clone(),
            token: Some(HwSyncToken {
                consumer_key: Secret::new(token.consumer_key.clone()),
                token_key: Secret::new(token.token_key.clone()),
                token_secret: Secret::new(token.token_secret.clone()),
            }),
            interval_secs: 900,
        },
        shares: Shares::Off,
        roce: Vec::new(),
    };
    let user_data = cloudinit::render(&input).expect("render");
    assert!(user_data.includes(Part::AgentBootstrap) && user_data.includes(Part::MaasHwSync));

    let deploy = DeployOptions { user_data: Some(user_data.text().as_bytes().to_vec()), enable_hw_sync: true, ..DeployOptions::default() };
    assert_eq!(maas.deploy(&id, &deploy).await.expect("deploy").status, NodeStatus::Deploying);
    fake.control("POST", "advance", Some(&json!({ "system_id": id }))).expect("advance");
    assert_eq!(maas.read_machine(&id).await.expect("read").status, NodeStatus::Deployed);

    // The host becomes active: the real agent enrolled over mTLS and checked in. A failed boot
    // ends the wait at once, with the logs.
    let deadline = Instant::now() + WAIT;
    let boot = loop {
        let boot = inspect(&fake, &id)["_fake"]["boot"].clone();
        assert_ne!(boot["state"], "failed", "the boot failed:\n{}", boot_report(&boot));
        assert_ne!(boot["state"], "agent_exited", "the agent exited:\n{}", boot_report(&boot));
        if boot["state"] == "running" && host_state(&h, host).await == "active" {
            break boot;
        }
        assert!(Instant::now() < deadline, "host {host} never became active:\n{}", boot_report(&boot));
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let root = PathBuf::from(boot["root"].as_str().expect("root"));
    let sandbox = std::fs::canonicalize(&boot_dir).expect("boot dir").join(&id).join("root");
    assert_eq!(root, sandbox);
    let record = h.running.app.store.get_host(host).expect("store").expect("host");
    assert_eq!(record.hostname, "maas-gpu-01");

    // What ran is what the coordinator served, into the sandbox: its agent binary, its CA, an
    // identity for this host; the bootstrap part (it holds the token) is gone, as on a node.
    let under = |p: &str| root.join(p.trim_start_matches('/'));
    assert_eq!(std::fs::read(under(AGENT_BIN_PATH)).expect("agent"), std::fs::read(workspace_binary("drover-agent")).expect("build"));
    assert_eq!(read(&under("/etc/drover/ca.crt")), read(&h.ca));
    assert!(read(&under("/var/lib/drover/identity.json")).contains(&host.to_string()));
    assert!(!under(AGENT_PART_PATH).exists());
    assert!(read(&under(MAAS_CREDS_PATH)).contains(&format!("/metadata/status/{id}'")));
    // The agent's own parser takes the sandboxed config: no system bus, activation in the root.
    let config = drover_agent::config::Config::load(&under(AGENT_CONFIG_PATH)).expect("agent.toml");
    assert_eq!(config.activation.root, root);
    assert_eq!(config.systemd_bus, Some(format!("unix:path={}/no-bus", root.display())));
    assert_eq!(config.state_dir, under("/var/lib/drover"));
    assert!(!root.join("nix").exists(), "nothing Nix was created");

    // Hardware sync: healthy through the client, from the creds the user data wrote.
    let deadline = Instant::now() + WAIT;
    loop {
        let m = maas.read_machine(&id).await.expect("read");
        if m.hw_sync().is_healthy(time::OffsetDateTime::now_utc()) {
            break;
        }
        assert!(Instant::now() < deadline, "hardware sync never became healthy: {:?}\n{}", m.hw_sync(), boot_report(&boot));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(inspect(&fake, &id)["_fake"]["boot"]["hw_sync"], "ok");

    // Release powers the machine off: the agent is killed and reaped.
    let pid = boot["agent_pid"].as_u64().expect("agent pid");
    assert!(Path::new(&format!("/proc/{pid}")).exists());
    maas.release(&id, &ReleaseOptions::default()).await.expect("release");
    let deadline = Instant::now() + WAIT;
    while Path::new(&format!("/proc/{pid}")).exists() {
        assert!(Instant::now() < deadline, "the agent (pid {pid}) outlived the release");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let m = maas.read_machine(&id).await.expect("read");
    assert!(!m.hw_sync().is_healthy(time::OffsetDateTime::now_utc()), "released: no sync");
    assert_eq!(inspect(&fake, &id)["_fake"]["boot"], Value::Null);
}
