//! `drover dev --maas`: the demo's MAAS site. A fake MAAS (the devkit's `fake-maas`, next to
//! `drover`) with a fresh API key, printed in the banner as `vault server -dev` prints its root
//! token; a site `dev-maas` with its credentials in the coordinator's secret store; a few
//! machines enlisted (PXE-booted into MAAS as New) and onboarded through MAAS in one batch.
//! The fake "deploys" by booting the rendered first-boot user data into a sandbox root, so each
//! host's real `drover-agent` enrolls over mutual TLS, and gets its hardware-sync credentials
//! through `node.hw_sync_reseed` on a private D-Bus with `fake-systemd`. Then an admin
//! releases one machine behind Drover's back, through MAAS's API, and the drift reconciler
//! catches it ([`show_drift`]).

use std::path::Path;
use std::time::{Duration, Instant};

use drover_devkit::bus::PrivateBus;
use drover_devkit::fake_maas::boot::BootOptions;
use drover_devkit::fake_maas::{FakeMaas, FakeMaasOptions};
use drover_devkit::fleet::LocalFleet;
use drover_proto::api::onboardings::{CreatedBatch, OnboardingList, OnboardingView};
use drover_proto::api::reconciliation::{DriftList, RunList};
use drover_proto::states::JobState;
use rand::RngCore as _;
use serde_json::json;

use crate::answer::decode;
use crate::exit::{CliError, codes};

/// The site's name.
pub const SITE: &str = "dev-maas";

/// What keeps running for the rest of the demo.
pub struct MaasDemo {
    /// The fake MAAS.
    pub maas: FakeMaas,
    /// The booted agents' bus.
    _bus: PrivateBus,
    /// The batch's id.
    pub batch_id: String,
    /// The onboarded hosts: (hostname, host id).
    pub hosts: Vec<(String, String)>,
}

fn software(message: impl Into<String>) -> CliError {
    CliError::new(codes::SOFTWARE, message.into())
}

fn random_hex(bytes: usize) -> String {
    let mut raw = vec![0u8; bytes];
    rand::rngs::OsRng.fill_bytes(&mut raw);
    raw.iter().map(|b| format!("{b:02x}")).collect()
}

/// Starts the fake MAAS and onboards `nodes` machines through it; `say` prints a line.
pub fn onboard(
    fleet: &mut LocalFleet,
    dir: &Path,
    bin_dir: &Path,
    fake_systemd: &Path,
    nodes: usize,
    say: impl Fn(String),
) -> Result<MaasDemo, CliError> {
    let api_key = format!("drover-dev:{}:{}", random_hex(9), random_hex(16));
    let maas_dir = dir.join("maas");
    std::fs::create_dir_all(&maas_dir).map_err(|e| CliError::new(codes::CANT_CREATE, format!("{}: {e}", maas_dir.display())))?;
    let bus = PrivateBus::start_with(
        &maas_dir,
        fake_systemd,
        &["maas_hardware_sync.timer;timer;inactive".to_owned(), "maas_hardware_sync.service;oneshot;inactive;true".to_owned()],
    )
    .map_err(|e| software(format!("dev: the MAAS hosts' bus: {e}")))?;
    let extra = maas_dir.join("agent-extra.toml");
    std::fs::write(&extra, format!("systemd_bus = \"{}\"\n\n[activation]\nroot = \"@ROOT@\"\n", bus.address()))
        .map_err(|e| CliError::new(codes::IO, format!("{}: {e}", extra.display())))?;
    let maas = FakeMaas::start(&FakeMaasOptions {
        bin: bin_dir.join("fake-maas"),
        api_key: api_key.clone(),
        commission_secs: 2,
        deploy_secs: 2,
        release_secs: 1,
        erase_secs: 1,
        state_file: None,
        boot: Some(BootOptions { dir: maas_dir.join("boot"), agent_extra_config: Some(extra) }),
    })
    .map_err(|e| software(format!("dev: the fake MAAS: {e}")))?;
    say(String::new());
    say("==================================================================================".into());
    say(format!(" fake MAAS:   {}", maas.url()));
    say(format!(" API key:     {api_key}"));
    say(" (a demo MAAS: its machines boot their user data into sandboxes under the state dir)".into());
    say("==================================================================================".into());

    let api = |what: &str, e: drover_devkit::DevkitError| software(format!("dev: {what}: {e}"));
    let site = json!({
        "name": SITE, "regionCode": "dev", "apiBaseUrl": maas.url(), "pxeIface": "ens19", "pxeVlanVid": 46,
        "nodePxeIface": "eno1", "reason": "drover dev --maas",
        "defaultProfile": { "batchMaxParallel": 3, "hardwareSyncIntervalSecs": 60 },
    });
    fleet.post("/v1/maas/sites", &site).map_err(|e| api("create the site", e))?;
    let creds = json!({
        "apiToken": api_key, "defaultPower": { "user": "root", "pass": random_hex(12) },
        "deployPassword": random_hex(12), "reason": "drover dev --maas",
    });
    fleet.post(&format!("/v1/maas/sites/{SITE}/credentials"), &creds).map_err(|e| api("store the site's credentials", e))?;
    say(format!("site {SITE} created; its MAAS API key, BMC and deploy passwords are in the coordinator's secret store"));

    let hostnames: Vec<String> = (1..=nodes).map(|i| format!("maas-{i:02}")).collect();
    let mut rows = Vec::new();
    for (i, h) in hostnames.iter().enumerate() {
        let bmc = format!("10.250.0.{}", 10 + i);
        let body = json!({ "hostname": h, "power_address": bmc, "power_user": "root", "status": "New" });
        maas.control("POST", "machines", Some(&body)).map_err(|e| api("enlist a machine", e))?;
        rows.push(json!({ "hostname": h, "ipmiIp": bmc }));
    }
    say(format!("{nodes} machines enlisted in MAAS (New); onboarding them through MAAS in one batch"));
    let created = fleet
        .post("/v1/maas/onboardings/batch", &json!({ "site": SITE, "profile": "default", "nodes": rows }))
        .map_err(|e| api("start the onboarding batch", e))?;
    let batch_id = decode::<CreatedBatch>("/v1/maas/onboardings/batch", &created)?.batch_id;
    let rows = watch(fleet, &batch_id, nodes, &say)?;
    let hosts = hostnames
        .iter()
        .map(|h| {
            let id = rows.iter().find(|o| o.hostname == *h).and_then(|o| o.host_id.as_deref()).unwrap_or("?");
            (h.clone(), id.to_owned())
        })
        .collect();
    Ok(MaasDemo { maas, _bus: bus, batch_id, hosts })
}

/// Shows a drift being caught: an admin releases the last onboarded machine directly through
/// MAAS's API (as from its UI), then a reconciler pass (the periodic one runs every
/// `[maas] reconcile_interval_secs`; the demo asks for one now) finds it Ready while Drover has
/// it active: the host is quarantined (no new work; tenants are not released) with a CRITICAL
/// alert. Returns the drifted host's name.
pub fn show_drift(fleet: &mut LocalFleet, demo: &MaasDemo, say: impl Fn(String)) -> Result<String, CliError> {
    let (name, _) = demo.hosts.last().ok_or_else(|| software("dev: no MAAS host to drift"))?;
    let key = demo.maas.api_key().parse().map_err(|e| software(format!("dev: the fake's API key: {e}")))?;
    let client = drover_maas::MaasClient::new(drover_maas::ClientConfig::new(demo.maas.url(), key))
        .map_err(|e| software(format!("dev: a MAAS client: {e}")))?;
    let rt = crate::client::runtime()?;
    let filter = drover_maas::MachineFilter { hostname: vec![name.clone()], ..Default::default() };
    let found = rt.block_on(client.list_machine_summaries(&filter)).map_err(|e| software(format!("dev: find {name} in MAAS: {e}")))?;
    let system_id = found.first().map(|m| m.system_id.clone()).ok_or_else(|| software(format!("dev: {name} is not in the fake MAAS")))?;
    rt.block_on(
        client.release(&system_id, &drover_maas::ReleaseOptions { comment: Some("released by hand".into()), ..Default::default() }),
    )
    .map_err(|e| software(format!("dev: release {name} in MAAS: {e}")))?;
    say(format!("an admin released {name} directly in MAAS (outside any Drover workflow); reconciling site {SITE}"));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let run =
            fleet.post("/v1/maas/reconciliation/run", &json!({ "site": SITE })).map_err(|e| software(format!("dev: reconcile: {e}")))?;
        let run = decode::<RunList>("/v1/maas/reconciliation/run", &run)?;
        let path = format!("/v1/maas/reconciliation/drift?site={SITE}");
        let drift: DriftList = decode(&path, &fleet.get(&path).map_err(|e| software(format!("dev: drift: {e}")))?)?;
        if let Some(d) = drift.drift.iter().find(|d| d.hostname == *name) {
            let details = d.drift_details.as_ref();
            say(format!(
                "drift caught in {} ms: {name} {} ({}): MAAS shows {}, Drover had it active; host now {}, schedulable {}",
                run.runs.first().map_or(0, |r| r.duration_ms),
                details.map_or("?", |d| d.rule.as_str()),
                details.map_or("?", |d| d.severity.as_str()),
                d.last_maas_status.as_deref().unwrap_or("?"),
                d.state,
                d.schedulable,
            ));
            return Ok(name.clone());
        }
        if Instant::now() > deadline {
            return Err(software(format!("dev: the reconciler did not catch {name}'s release within 60 s")));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Prints each onboarding's stage as it moves until all are completed (bounded); returns the
/// rows.
fn watch(fleet: &mut LocalFleet, batch: &str, nodes: usize, say: &impl Fn(String)) -> Result<Vec<OnboardingView>, CliError> {
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut last = String::new();
    loop {
        let path = format!("/v1/maas/onboardings?batch={batch}");
        let v = fleet.get(&path).map_err(|e| software(format!("dev: onboardings: {e}")))?;
        let rows = decode::<OnboardingList>(&path, &v)?.onboardings;
        let line = rows.iter().map(|o| format!("{} {}", o.hostname, o.stage)).collect::<Vec<_>>().join(" | ");
        if line != last {
            say(format!("  {line}"));
            last = line;
        }
        let stopped = |s: JobState| matches!(s, JobState::FailedRetryable | JobState::FailedManualIntervention | JobState::Cancelled);
        if let Some(bad) = rows.iter().find(|o| stopped(o.state)) {
            let class = bad.failure_class.as_deref().unwrap_or("-");
            return Err(software(format!("dev: onboarding of {} stopped: {} ({class})", bad.hostname, bad.message)));
        }
        if rows.len() == nodes && rows.iter().all(|o| o.state == JobState::Completed) {
            return Ok(rows);
        }
        if Instant::now() > deadline {
            return Err(software("dev: the onboarding batch did not complete within 300 s"));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}
