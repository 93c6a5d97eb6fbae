//! Carrying out what a stage decided: one MAAS call per [`MaasAct`], the Drover host record
//! (found again when it exists), and the deploy with freshly rendered first-boot user data —
//! a fresh enrollment token whose lifetime is the profile's, the deploy password from the
//! secret store, the site's RoCE assignments. The rendered text lives only in the deploy
//! request; the read model keeps its sha256.

use std::sync::Arc;

use base64::Engine as _;
use drover_maas::{DeployOptions, LinkMode, LinkSubnet, MachineFilter, NewMachine, NewSubnet, PowerParameters, ReleaseOptions};
use drover_proto::states::HostLifecycle;
use drover_proto::task::Secret;
use rand::RngCore as _;
use sha2::Digest as _;
use uuid::Uuid;

use super::site::{Failure, SiteCtx, maas_failure, read_secret};
use crate::app::AppState;
use crate::cloudinit::{self, DeployUser, FirstBoot, HwSync, RoceLink, Shares, SiteBundle};
use crate::maasflow::onboard::{EraseMode, OnboardProgress, OnboardingRequest};
use crate::maasflow::stages::MaasAct;
use crate::maasflow::taxonomy::MaasFailureClass;
use crate::sites::{NodeKeys, PowerSource, select_power_credentials};
use crate::store::{self, ChangeLog, EnrollmentToken, MaasBinding, NewAudit, NewEvent, NewHost, hash_token};

fn store_failure(e: store::StoreError) -> Failure {
    (MaasFailureClass::UpstreamTransient, format!("the coordinator's store failed: {e}"))
}

/// The BMC login for this node (§3.2.1): an override's secret path, else the site default.
/// Returns (user, password, where from).
pub async fn power_credentials(app: &Arc<AppState>, ctx: &SiteCtx, req: &OnboardingRequest) -> Result<(String, String, String), Failure> {
    let site_id = ctx.site.id;
    let overrides = store::blocking(app.store.clone(), move |s| s.list_overrides(site_id)).await.map_err(store_failure)?;
    let keys = NodeKeys { pxe_mac: req.pxe_mac.as_deref(), ipmi_ip: Some(&req.ipmi_ip), hostname: Some(&req.hostname) };
    let (path, from) = match select_power_credentials(&overrides, &keys) {
        PowerSource::Override(o) => (o.secret_path.clone(), format!("override {} ({})", o.id, o.selector_type.as_str())),
        PowerSource::SiteDefault => (ctx.site.secrets.default_power_path.clone(), "the site default".to_owned()),
    };
    let user = read_secret(app, &path, "user", &format!("BMC credentials ({from})")).await?;
    let pass = read_secret(app, &path, "pass", &format!("BMC credentials ({from})")).await?;
    Ok((user, pass, from))
}

/// Performs one MAAS change; returns a line for the history (never a secret).
pub async fn act(
    app: &Arc<AppState>,
    ctx: &SiteCtx,
    req: &OnboardingRequest,
    p: &mut OnboardProgress,
    act: &MaasAct,
) -> Result<String, Failure> {
    let c = &ctx.client;
    let sid = p.system_id.clone().unwrap_or_default();
    let sid = sid.as_str();
    match act {
        MaasAct::Create => {
            let (user, pass, from) = power_credentials(app, ctx, req).await?;
            let new = NewMachine {
                hostname: Some(req.hostname.clone()),
                architecture: Some(ctx.profile.policy.architecture.clone()),
                mac_addresses: req.pxe_mac.iter().cloned().collect(),
                power_type: "ipmi".into(),
                power_parameters: PowerParameters::ipmi(&req.ipmi_ip, &user, &pass),
                commission: Some(false),
                description: Some(format!("onboarded by Drover ({})", req.sku.as_deref().unwrap_or("no sku"))),
                domain: None,
            };
            let m = c.create_machine(&new).await.map_err(|e| maas_failure("create the machine", &e))?;
            p.created_in_maas = true;
            p.system_id = Some(m.system_id.clone());
            Ok(format!("created machine {} (BMC {}, credentials from {from})", m.system_id, req.ipmi_ip))
        }
        MaasAct::Accept => {
            c.accept(&[sid.to_owned()]).await.map_err(|e| maas_failure("accept", &e))?;
            Ok(format!("accepted {sid}"))
        }
        MaasAct::SetHostname => {
            let update = drover_maas::MachineUpdate { hostname: Some(req.hostname.clone()), ..Default::default() };
            c.update_machine(sid, &update).await.map_err(|e| maas_failure("set the hostname", &e))?;
            Ok(format!("hostname set to {}", req.hostname))
        }
        MaasAct::Commission => {
            let options = drover_maas::CommissionOptions { enable_ssh: true, skip_bmc_config: true, ..Default::default() };
            c.commission(sid, &options).await.map_err(|e| maas_failure("commission", &e))?;
            Ok(format!("commissioning {sid}"))
        }
        MaasAct::SetBootDisk { id, name } => {
            c.set_boot_disk(sid, *id).await.map_err(|e| maas_failure("set the boot disk", &e))?;
            p.boot_disk = Some(name.clone());
            Ok(format!("boot disk {name} (id {id})"))
        }
        MaasAct::SetFlatLayout => {
            c.set_storage_layout(sid, "flat").await.map_err(|e| maas_failure("apply the flat layout", &e))?;
            p.layout_applied = true;
            Ok("flat storage layout applied".into())
        }
        MaasAct::CreateSubnet { cidr } => {
            let new = NewSubnet { cidr: cidr.clone(), name: Some(format!("roce-{cidr}")), ..Default::default() };
            c.create_subnet(&new).await.map_err(|e| maas_failure("create the RoCE subnet", &e))?;
            Ok(format!("subnet {cidr} created"))
        }
        MaasAct::LinkStatic { interface_id, interface, cidr, ip } => {
            let mut link = LinkSubnet::new(LinkMode::Static, Some(cidr));
            link.ip_address = Some(ip.clone());
            c.link_subnet(sid, *interface_id, &link).await.map_err(|e| maas_failure("link the RoCE address", &e))?;
            Ok(format!("{interface} linked STATIC {ip} on {cidr}"))
        }
        MaasAct::Unlink { interface_id, link_id } => {
            c.unlink_subnet(sid, *interface_id, *link_id).await.map_err(|e| maas_failure("unlink the PXE interface", &e))?;
            Ok(format!("link {link_id} removed from interface {interface_id}"))
        }
        MaasAct::LinkAuto { interface_id, subnet_id } => {
            let link = LinkSubnet::new(LinkMode::Auto, Some(&subnet_id.to_string()));
            c.link_subnet(sid, *interface_id, &link).await.map_err(|e| maas_failure("link the PXE interface AUTO", &e))?;
            Ok(format!("interface {interface_id} linked AUTO on subnet {subnet_id}"))
        }
        MaasAct::Deploy => deploy(app, ctx, req, p).await,
        MaasAct::Release { erase, force } => {
            let options = ReleaseOptions {
                erase: *erase != EraseMode::None,
                quick_erase: *erase == EraseMode::Quick,
                secure_erase: *erase == EraseMode::Secure,
                force: *force,
                comment: Some(format!("Drover: {}", req.workflow_name())),
            };
            c.release(sid, &options).await.map_err(|e| maas_failure("release", &e))?;
            if *force {
                p.erase_fallback_used = true;
            }
            Ok(format!("release of {sid} asked (erase {}{})", erase.as_str(), if *force { ", forced after the erase failed" } else { "" }))
        }
        MaasAct::PowerOff => {
            c.power_off(sid, drover_maas::StopMode::Hard, Some("Drover decommission")).await.map_err(|e| maas_failure("power off", &e))?;
            p.power_off_asked = true;
            Ok(format!("power-off of {sid} asked"))
        }
        MaasAct::DeleteMachine => {
            c.delete_machine(sid).await.map_err(|e| maas_failure("delete the machine", &e))?;
            Ok(format!("machine {sid} deleted from MAAS"))
        }
    }
}

/// The Drover host for the node: the one this onboarding created, else a live one with the
/// hostname (a rerun or a restarted coordinator finds it again), else a new one; and the
/// binding of the host to its MAAS machine.
pub async fn ensure_host(app: &Arc<AppState>, ctx: &SiteCtx, req: &OnboardingRequest, p: &mut OnboardProgress) -> Result<String, Failure> {
    let now = app.clock.now();
    let hostname = req.hostname.clone();
    let known = p.host_id;
    let (host, created) = store::blocking(app.store.clone(), move |s| {
        if let Some(id) = known
            && let Some(h) = s.get_host(id)?
            && h.state != HostLifecycle::Deleted
        {
            return Ok((h, false));
        }
        if let Some(h) = s.get_host_by_hostname(&hostname)? {
            return Ok((h, false));
        }
        Ok((s.create_host(&NewHost { hostname, created_at: now, token: None })?, true))
    })
    .await
    .map_err(store_failure)?;
    p.host_id = Some(host.id);
    let system_id = p.system_id.clone().unwrap_or_default();
    let binding = MaasBinding::new(host.id, ctx.site.id, &system_id, Some(req.ipmi_ip.clone()), req.pxe_mac.clone(), now);
    let log = ChangeLog {
        event: NewEvent {
            at: now,
            kind: "maas.binding".into(),
            host_id: Some(host.id),
            rollout_id: None,
            job_id: None,
            message: format!("{} bound to MAAS machine {system_id} on site {}", host.hostname, ctx.site.name),
            data: serde_json::json!({ "siteId": ctx.site.id, "systemId": system_id }),
        },
        audit: NewAudit {
            at: now,
            actor: "onboarding".into(),
            role: "system".into(),
            action: "maas.bind".into(),
            target: host.id.to_string(),
            reason: format!("onboarding of {}", req.hostname),
            prior_state: None,
            expected_state: Some(system_id.clone()),
        },
    };
    store::blocking(app.store.clone(), move |s| s.put_maas_binding(&binding, &log)).await.map_err(store_failure)?;
    Ok(if created {
        format!("host {} created ({}), bound to {system_id}", host.id, host.state.as_str())
    } else {
        format!("host {} found again ({}), bound to {system_id}", host.id, host.state.as_str())
    })
}

/// A fresh enrollment token for `host_id` (the profile's lifetime) and the bootstrap command
/// that spends it.
async fn fresh_bootstrap(app: &Arc<AppState>, host_id: Uuid, ttl_secs: u64) -> Result<Secret, Failure> {
    let mut raw = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut raw);
    let token = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw);
    let now = app.clock.now();
    let record = EnrollmentToken { token_hash: hash_token(&token), expires_at: now.plus_secs(ttl_secs) };
    store::blocking(app.store.clone(), move |s| s.create_token(host_id, &record, now)).await.map_err(store_failure)?;
    let url = app.config.public_urls.first().cloned().unwrap_or_default();
    let trust_sha = hex::encode(sha2::Sha256::digest(&app.trust_json));
    Ok(Secret::new(drover_proto::enroll::bootstrap_command(&url, &app.server_pin, &host_id.to_string(), &token, &trust_sha)))
}

/// Renders the first-boot bundle and deploys with it.
async fn deploy(app: &Arc<AppState>, ctx: &SiteCtx, req: &OnboardingRequest, p: &mut OnboardProgress) -> Result<String, Failure> {
    let policy = &ctx.profile.policy;
    let sid = p.system_id.clone().unwrap_or_default();
    let host_id = p.host_id.ok_or((MaasFailureClass::StateAmbiguity, "no Drover host was created before deploy".to_owned()))?;
    let password = read_secret(app, &ctx.site.secrets.deploy_password_path, "password", "the site's deploy password").await?;
    let (site_id, hostname) = (ctx.site.id, req.hostname.clone());
    let roce = if policy.enable_phase2_roce {
        store::blocking(app.store.clone(), move |s| s.list_roce(site_id, Some(&hostname))).await.map_err(store_failure)?
    } else {
        Vec::new()
    };
    let mut salt = [0u8; 12];
    rand::rngs::OsRng.fill_bytes(&mut salt);
    let agent_bootstrap = fresh_bootstrap(app, host_id, policy.enrollment_token_ttl_secs).await?;
    let input = FirstBoot {
        hostname: req.hostname.clone(),
        site_bundle: policy.site_bootstrap_bundle_ref.clone().map(|url| SiteBundle { url, sha256: None }),
        deploy_user: DeployUser {
            name: ctx.site.config.deploy_user.clone(),
            password: Secret::new(password),
            salt: cloudinit::validate::salt_from_bytes(&salt),
        },
        deploy_ssh_iface: Some(ctx.site.config.deploy_ssh_iface.clone()).filter(|s| !s.is_empty()),
        agent_bootstrap,
        hw_sync: HwSync {
            maas_url: ctx.site.config.api_base_url.clone(),
            system_id: sid.clone(),
            token: None,
            interval_secs: policy.hardware_sync_interval_secs,
        },
        shares: Shares::Off,
        roce: roce.into_iter().map(|r| RoceLink { interface: r.interface, ipv4_cidr: r.ipv4_cidr }).collect(),
    };
    let user_data = cloudinit::render(&input)
        .map_err(|e| (MaasFailureClass::InputConfigError, format!("the first-boot bundle does not render: {e}")))?;
    let options = DeployOptions {
        user_data: Some(user_data.text().as_bytes().to_vec()),
        distro_series: Some(policy.distro_series.clone()),
        enable_hw_sync: policy.require_hw_sync,
        comment: Some(format!("Drover onboarding of {}", req.hostname)),
        ..Default::default()
    };
    ctx.client.deploy(&sid, &options).await.map_err(|e| maas_failure("deploy", &e))?;
    p.deploy_calls += 1;
    p.user_data_sha256 = Some(user_data.sha256().to_owned());
    let parts: Vec<&str> = user_data.parts().iter().map(|p| p.as_str()).collect();
    Ok(format!(
        "deploying {} with {} user data sha256 {} (parts: {}; enrollment token valid {}s)",
        policy.distro_series,
        user_data.bundle_version(),
        user_data.sha256(),
        parts.join(", "),
        policy.enrollment_token_ttl_secs
    ))
}

/// The machines MAAS lists, as discovery candidates, with the BMC addresses of those whose
/// power parameters matter.
pub async fn candidates(ctx: &SiteCtx, known_before: Option<&[String]>) -> Result<Vec<crate::maasflow::discovery::Candidate>, Failure> {
    let machines = ctx.client.list_machines(&MachineFilter::default()).await.map_err(|e| maas_failure("list machines", &e))?;
    let ids: Vec<String> = machines.iter().map(|m| m.system_id.clone()).collect();
    let params = if ids.is_empty() {
        Default::default()
    } else {
        ctx.client.power_parameters_of(&ids).await.map_err(|e| maas_failure("read power parameters", &e))?
    };
    Ok(machines
        .into_iter()
        .map(|m| crate::maasflow::discovery::Candidate {
            power_address: params.get(&m.system_id).and_then(|p| p.get("power_address")).map(str::to_owned),
            macs: m.interface_set.iter().filter_map(|i| i.mac_address.clone()).map(|s| s.to_ascii_lowercase()).collect(),
            is_new: m.status == drover_maas::NodeStatus::New,
            appeared_this_run: known_before.is_some_and(|k| !k.contains(&m.system_id)),
            hostname: m.hostname.to_ascii_lowercase(),
            system_id: m.system_id,
        })
        .collect())
}
