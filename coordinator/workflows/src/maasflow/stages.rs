//! What each onboarding stage does next, decided from what MAAS shows now (§4.3, §4.10,
//! §4.13): pure functions from an observation to one [`StageStep`].
//!
//! Every stage that touches MAAS is status-aware: the executor reads the machine afresh
//! before each decision, and a stage whose goal already holds is done without a call — so a
//! rerun from the top, or a coordinator restarted mid-stage, converges without repeating a
//! state-changing call. A machine in a state the stage does not expect (someone deployed it,
//! locked it, broke it out of band) fails closed as `state_ambiguity`.

use drover_maas::{BlockDevice, Interface, Machine, NodeStatus, Subnet};
use serde::Serialize;

use super::discovery::{self, Candidate, Discovery, Wanted};
use super::inspect::{self, BootDisk, DeployFailure};
use super::onboard::EraseMode;
use super::taxonomy::MaasFailureClass;

/// One MAAS change a stage asks for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "call")]
pub enum MaasAct {
    /// Create the machine with IPMI power parameters (no commissioning yet).
    Create,
    /// Accept a New machine (it commissions).
    Accept,
    /// Set the machine's hostname to the requested one.
    SetHostname,
    /// Start commissioning.
    Commission,
    /// Make this block device the boot disk.
    SetBootDisk {
        /// MAAS's id.
        id: i64,
        /// Its name.
        name: String,
    },
    /// Apply the flat storage layout.
    SetFlatLayout,
    /// Create the /31 (or other) subnet a RoCE address lives in.
    CreateSubnet {
        /// Its CIDR.
        cidr: String,
    },
    /// Link an interface STATIC with an address.
    LinkStatic {
        /// The interface's id.
        interface_id: i64,
        /// Its name.
        interface: String,
        /// The subnet's CIDR.
        cidr: String,
        /// The address.
        ip: String,
    },
    /// Remove a link from an interface.
    Unlink {
        /// The interface's id.
        interface_id: i64,
        /// The link's id.
        link_id: i64,
    },
    /// Link an interface AUTO on a subnet.
    LinkAuto {
        /// The interface's id.
        interface_id: i64,
        /// The subnet's id.
        subnet_id: i64,
    },
    /// Deploy with freshly rendered user data.
    Deploy,
    /// Release back to Ready with this erase (`none` for the compensation of a failed
    /// deployment and the first half of a datasource redeploy).
    Release {
        /// The erase.
        erase: EraseMode,
        /// Forced (the no-erase fallback after a failed erase).
        force: bool,
    },
    /// Power the machine off.
    PowerOff,
    /// Delete the machine from MAAS.
    DeleteMachine,
}

/// What a stage does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StageStep {
    /// The goal holds: move on.
    Done {
        /// What was found or done.
        details: String,
        /// Nothing was needed (already done, or off by policy).
        skipped: bool,
    },
    /// Discovery picked this machine.
    Claim {
        /// MAAS's id.
        system_id: String,
        /// Why this one.
        details: String,
    },
    /// Make this change, then look again.
    Act(MaasAct),
    /// Nothing to do yet; look again later (the stage's time limit still runs).
    Wait(String),
    /// Stop with this class.
    Fail {
        /// Why, as a class.
        class: MaasFailureClass,
        /// Why, in words (never a secret).
        message: String,
    },
    /// Issue `node.hw_sync_reseed` with MAAS's machine token to the enrolled agent.
    IssueReseed,
    /// Try the stage again (attempt + 1), for this reason.
    Retry(String),
    /// A datasource-class deploy failure with a redeploy left: release, then deploy again.
    RetryDeploy {
        /// Why.
        details: String,
    },
}

fn done(details: impl Into<String>) -> StageStep {
    StageStep::Done { details: details.into(), skipped: false }
}

fn skipped(details: impl Into<String>) -> StageStep {
    StageStep::Done { details: details.into(), skipped: true }
}

fn fail(class: MaasFailureClass, message: impl Into<String>) -> StageStep {
    StageStep::Fail { class, message: message.into() }
}

fn unexpected(m: &Machine, stage: &str) -> StageStep {
    fail(
        MaasFailureClass::StateAmbiguity,
        format!("machine {} is {} in MAAS, which {stage} does not expect: it changed outside Drover", m.system_id, m.status_name),
    )
}

/// CreateOrFind (§4.16): claim, create, keep waiting, or fail closed. `adopt` is an
/// operator's explicit pick (adopt_observed_state with a system id), which must exist.
pub fn create_or_find(machines: &[Candidate], wanted: &Wanted<'_>, created: bool, auto_claim: bool, adopt: Option<&str>) -> StageStep {
    if let Some(id) = adopt {
        return match machines.iter().find(|m| m.system_id == id) {
            Some(_) => StageStep::Claim { system_id: id.to_owned(), details: format!("adopted {id} as an operator chose") },
            None => fail(MaasFailureClass::StateAmbiguity, format!("the adopted machine {id} is not in MAAS")),
        };
    }
    match discovery::decide(machines, wanted, created, auto_claim) {
        Discovery::Claim { system_id, by } => {
            let by = serde_json::to_value(by).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
            StageStep::Claim { details: format!("claimed {system_id} (matched by {by})"), system_id }
        }
        Discovery::Create => StageStep::Act(MaasAct::Create),
        Discovery::KeepWaiting => StageStep::Wait("waiting for the machine to appear in MAAS".into()),
        Discovery::Ambiguous { candidates, reason } => {
            fail(MaasFailureClass::StateAmbiguity, format!("{reason} (candidates: {})", candidates.join(", ")))
        }
    }
}

/// Commission (§4.3, status-aware): accept a New machine, fix its hostname, start
/// commissioning unless it is Ready or already commissioning.
pub fn commission(m: &Machine, hostname: &str) -> StageStep {
    match m.status {
        NodeStatus::New => StageStep::Act(MaasAct::Accept),
        _ if m.locked => unexpected(m, "commissioning"),
        NodeStatus::Ready | NodeStatus::Commissioning | NodeStatus::Testing if !m.hostname.eq_ignore_ascii_case(hostname) => {
            StageStep::Act(MaasAct::SetHostname)
        }
        NodeStatus::Ready => skipped("already Ready"),
        NodeStatus::Commissioning | NodeStatus::Testing => done(format!("{} (waiting for Ready)", m.status_name)),
        // MAAS commissions only New, Failed commissioning, Ready and Broken (maas-facts §5).
        NodeStatus::FailedCommissioning => StageStep::Act(MaasAct::Commission),
        _ => unexpected(m, "commissioning"),
    }
}

/// WaitReady: Ready ends it; a failed commissioning is commissioned again while attempts
/// remain, then fails (the BMC or the hardware needs a look).
pub fn wait_ready(m: &Machine, attempt: u32, max_attempts: u32) -> StageStep {
    match m.status {
        NodeStatus::Ready => done("Ready"),
        NodeStatus::Commissioning | NodeStatus::Testing => StageStep::Wait(format!("{}: {}", m.status_name, msg(m))),
        NodeStatus::FailedCommissioning if attempt < max_attempts => StageStep::Act(MaasAct::Commission),
        NodeStatus::FailedCommissioning | NodeStatus::FailedTesting => {
            fail(MaasFailureClass::BmcPowerFailure, format!("{} after {attempt} attempt(s): {}", m.status_name, msg(m)))
        }
        NodeStatus::Broken => fail(MaasFailureClass::StateAmbiguity, format!("machine {} was marked Broken: {}", m.system_id, msg(m))),
        _ => unexpected(m, "waiting for Ready"),
    }
}

fn msg(m: &Machine) -> &str {
    m.status_message.as_deref().or(m.error_description.as_deref()).unwrap_or("no message")
}

/// ConfigureStorage: the boot disk by the profile's pattern, then the flat layout. Only while
/// the machine is Ready (MAAS refuses storage changes otherwise).
pub fn configure_storage(m: &Machine, devices: &[BlockDevice], pattern: &str, layout_applied: bool) -> StageStep {
    if m.status != NodeStatus::Ready {
        return unexpected(m, "storage configuration");
    }
    match inspect::boot_disk(devices, pattern) {
        BootDisk::Mismatch { detail } => fail(
            MaasFailureClass::HardwareMismatch,
            format!("no single boot disk matches the pattern {pattern:?} (nor boss / boot optimized / m.2): {detail}"),
        ),
        BootDisk::Found { id, name } => {
            if m.boot_disk.as_ref().map(|d| d.id) != Some(id) {
                StageStep::Act(MaasAct::SetBootDisk { id, name })
            } else if !layout_applied {
                StageStep::Act(MaasAct::SetFlatLayout)
            } else {
                done(format!("boot disk {name} (id {id}), flat layout"))
            }
        }
    }
}

/// One RoCE assignment of the host, as the step needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoceWant {
    /// The interface name.
    pub interface: String,
    /// `a.b.c.d/len`.
    pub ipv4_cidr: String,
}

/// The network a `a.b.c.d/len` address lives in, as a CIDR (`172.30.9.61/31` →
/// `172.30.9.60/31`); `None` when it does not parse.
pub fn network_of(ipv4_cidr: &str) -> Option<String> {
    let (addr, len) = ipv4_cidr.split_once('/')?;
    let ip: std::net::Ipv4Addr = addr.parse().ok()?;
    let len: u32 = len.parse().ok().filter(|l| *l <= 32)?;
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    Some(format!("{}/{len}", std::net::Ipv4Addr::from(u32::from(ip) & mask)))
}

/// RocePhase2: each assignment's interface must exist; its subnet is created when missing;
/// its address linked STATIC unless already linked. No assignments, or off by policy: skipped.
pub fn roce_phase2(m: &Machine, wants: &[RoceWant], subnets: &[Subnet], enabled: bool) -> StageStep {
    if !enabled {
        return skipped("RoCE phase 2 is off in the profile");
    }
    if wants.is_empty() {
        return skipped("the site has no RoCE assignments for this host");
    }
    if m.status != NodeStatus::Ready {
        return unexpected(m, "RoCE configuration");
    }
    for w in wants {
        let Some(iface) = m.interface_set.iter().find(|i| i.name == w.interface) else {
            return fail(
                MaasFailureClass::HardwareMismatch,
                format!("the RoCE interface {} is not on machine {}", w.interface, m.system_id),
            );
        };
        let Some(cidr) = network_of(&w.ipv4_cidr) else {
            return fail(MaasFailureClass::InputConfigError, format!("the RoCE address {} is not an IPv4 CIDR", w.ipv4_cidr));
        };
        let ip = w.ipv4_cidr.split('/').next().unwrap_or_default().to_owned();
        if iface.links.iter().any(|l| l.ip_address.as_deref() == Some(ip.as_str())) {
            continue;
        }
        if !subnets.iter().any(|s| s.cidr == cidr) {
            return StageStep::Act(MaasAct::CreateSubnet { cidr });
        }
        return StageStep::Act(MaasAct::LinkStatic { interface_id: iface.id, interface: iface.name.clone(), cidr, ip });
    }
    done(format!("{} RoCE address(es) linked", wants.len()))
}

/// PxeInterfaceAuto: the node's PXE interface (by name, else MAAS's boot interface) must be
/// linked AUTO or DHCP on a subnet; other links are removed first; no subnet at all fails.
pub fn pxe_interface_auto(m: &Machine, iface_name: Option<&str>) -> StageStep {
    if m.status != NodeStatus::Ready {
        return unexpected(m, "PXE interface configuration");
    }
    let iface: Option<&Interface> = match iface_name {
        Some(n) => m.interface_set.iter().find(|i| i.name == n),
        None => m.boot_interface.as_ref(),
    };
    let Some(iface) = iface else {
        return fail(
            MaasFailureClass::HardwareMismatch,
            format!("machine {} has no PXE interface {}", m.system_id, iface_name.unwrap_or("(MAAS names no boot interface)")),
        );
    };
    let mode = |l: &drover_maas::Link| l.mode.to_ascii_lowercase();
    if iface.links.iter().any(|l| matches!(mode(l).as_str(), "auto" | "dhcp") && l.subnet.is_some()) {
        return done(format!("{} is linked AUTO/DHCP", iface.name));
    }
    let Some(subnet_id) = iface.links.iter().find_map(|l| l.subnet.as_ref().map(|s| s.id)) else {
        return fail(MaasFailureClass::HardwareMismatch, format!("the PXE interface {} has no subnet association in MAAS", iface.name));
    };
    if let Some(link) = iface.links.first() {
        return StageStep::Act(MaasAct::Unlink { interface_id: iface.id, link_id: link.id });
    }
    StageStep::Act(MaasAct::LinkAuto { interface_id: iface.id, subnet_id })
}

/// Deploy (never blind, §4.10): deploy only a Ready or Allocated machine; one already
/// deploying or deployed was deployed by an earlier attempt; a release in flight is waited for.
/// `redeploy_pending`: a datasource redeploy was decided and not yet deployed — the failed
/// deployment is released first (decided and persisted before any call, so a coordinator
/// killed in between finds the same decision, not an unexplained Ready machine).
pub fn deploy(m: &Machine, redeploy_pending: bool) -> StageStep {
    match m.status {
        NodeStatus::Ready | NodeStatus::Allocated => StageStep::Act(MaasAct::Deploy),
        NodeStatus::FailedDeployment if redeploy_pending => StageStep::Act(MaasAct::Release { erase: EraseMode::None, force: false }),
        NodeStatus::Deploying | NodeStatus::Deployed | NodeStatus::FailedDeployment => skipped(format!("already {}", m.status_name)),
        NodeStatus::Releasing | NodeStatus::DiskErasing => StageStep::Wait(format!("{}: waiting for Ready", m.status_name)),
        _ => unexpected(m, "deployment"),
    }
}

/// WaitDeployed: Deployed ends it; a failed deployment is classified from MAAS's words, and a
/// datasource-class one is redeployed while the profile allows.
pub fn wait_deployed(m: &Machine, events: &[drover_maas::Event], retries_done: u32, retry_enabled: bool, max_retries: u32) -> StageStep {
    match m.status {
        NodeStatus::Deployed => done("Deployed"),
        NodeStatus::Deploying => StageStep::Wait(format!("Deploying: {}", msg(m))),
        NodeStatus::FailedDeployment => match inspect::classify_deploy_failure(m.status_message.as_deref(), events) {
            DeployFailure::DatasourceLike if retry_enabled && retries_done < max_retries => StageStep::RetryDeploy {
                details: format!("datasource-class deploy failure ({}); redeploy {} of {max_retries}", msg(m), retries_done + 1),
            },
            DeployFailure::DatasourceLike => fail(
                MaasFailureClass::DeployCloudInitFailure,
                format!("datasource-class deploy failure after {retries_done} redeploy(s): {}", msg(m)),
            ),
            DeployFailure::Generic => fail(MaasFailureClass::DeployCloudInitFailure, format!("deployment failed: {}", msg(m))),
        },
        _ => unexpected(m, "waiting for Deployed"),
    }
}

/// Where the seeding `node.hw_sync_reseed` task of EnsureHardwareSync stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reseed {
    /// None issued in this attempt.
    NotIssued,
    /// Queued or leased by the agent.
    Live,
    /// The agent wrote the credentials and restarted the timer.
    Succeeded,
    /// It failed or was refused (the agent's words).
    Failed(String),
}

/// EnsureHardwareSync: MAAS deployed the machine with sync on and minted its token inside
/// the deploy call; the enrolled agent writes it and restarts the timer (`node.hw_sync_reseed`).
/// A failed task is issued again while attempts remain. Off by policy: skipped.
pub fn ensure_hw_sync(m: &Machine, token_present: bool, required: bool, reseed: &Reseed, attempt: u32, max_attempts: u32) -> StageStep {
    if !required {
        return skipped("hardware sync is not required by the profile");
    }
    if m.status != NodeStatus::Deployed {
        return unexpected(m, "hardware sync");
    }
    if !m.enable_hw_sync {
        return fail(MaasFailureClass::HardwareSyncFailure, "MAAS reports enable_hw_sync=false for the deployed machine");
    }
    if !token_present {
        return StageStep::Wait("waiting for MAAS to mint the machine token".into());
    }
    match reseed {
        Reseed::NotIssued => StageStep::IssueReseed,
        Reseed::Live => StageStep::Wait("the agent is seeding the hardware-sync credentials".into()),
        Reseed::Succeeded => done("the machine token is seeded; the hardware-sync timer runs"),
        Reseed::Failed(why) if attempt < max_attempts => StageStep::Retry(format!("seeding failed ({why}); issuing it again")),
        Reseed::Failed(why) => {
            fail(MaasFailureClass::HardwareSyncFailure, format!("seeding the credentials failed {attempt} time(s): {why}"))
        }
    }
}

/// The profile's interval as MAAS's `hardware_sync_interval` setting (a systemd time span).
pub fn hw_sync_interval_setting(secs: u64) -> String {
    if secs % 60 == 0 { format!("{}m", secs / 60) } else { format!("{secs}s") }
}

/// AssertHardwareSync (a re-sync, §9.1), once the site's interval is re-asserted: the machine
/// must still be deployed with sync on. MAAS sets `enable_hw_sync` only when deploying (and
/// release clears it), so a deployed machine with it off cannot be repaired by a re-sync:
/// only a reimage turns it on again — the failure says so.
pub fn assert_hw_sync(m: &Machine, required: bool) -> StageStep {
    if !required {
        return skipped("hardware sync is not required by the profile");
    }
    if m.status != NodeStatus::Deployed {
        return unexpected(m, "re-asserting hardware sync");
    }
    if !m.enable_hw_sync {
        return fail(
            MaasFailureClass::HardwareSyncFailure,
            "MAAS reports enable_hw_sync=false; MAAS turns it on only when deploying, so only a reimage restores it",
        );
    }
    done(format!("hardware sync on, every {}s", m.sync_interval.unwrap_or_default()))
}

/// WaitHardwareSyncHealthy: MAAS's own rule (`is_sync_healthy`), computed at `now`.
pub fn wait_hw_sync_healthy(m: &Machine, healthy: bool, required: bool) -> StageStep {
    if !required {
        return skipped("hardware sync is not required by the profile");
    }
    if m.status != NodeStatus::Deployed {
        return unexpected(m, "waiting for hardware sync");
    }
    if healthy {
        done(format!("last_sync {}", m.last_sync.as_deref().unwrap_or("?")))
    } else {
        StageStep::Wait(format!("hardware sync not healthy yet (last_sync {})", m.last_sync.as_deref().unwrap_or("never")))
    }
}

/// WaitAgentEnrollment: the host's agent enrolled and checked in (`active`).
pub fn wait_enrollment(m: &Machine, host_active: bool, host_state: &str) -> StageStep {
    if m.status != NodeStatus::Deployed {
        return unexpected(m, "waiting for the agent");
    }
    if host_active { done("the agent enrolled; the host is active") } else { StageStep::Wait(format!("the host is {host_state}")) }
}

/// ReleaseMachine (§5.3, §5.4): release a deployed (or failed, allocated) machine with the
/// requested erase; one already releasing, or already Ready, is past this stage.
pub fn release_machine(m: &Machine, erase: EraseMode) -> StageStep {
    match m.status {
        NodeStatus::Ready => skipped("already Ready"),
        NodeStatus::Releasing | NodeStatus::DiskErasing => done(format!("already {}", m.status_name)),
        NodeStatus::Deployed | NodeStatus::Allocated | NodeStatus::FailedDeployment | NodeStatus::FailedReleasing => {
            StageStep::Act(MaasAct::Release { erase, force: false })
        }
        NodeStatus::FailedDiskErasing => done("the erase already failed; the wait decides the fallback"),
        _ => unexpected(m, "release"),
    }
}

/// WaitReleased: Ready ends it. A failed erase is released again without erase when the
/// profile allows it (once); otherwise, or when the release itself fails, an operator must
/// reconcile (§5.8).
pub fn wait_released(m: &Machine, fallback_allowed: bool, fallback_used: bool) -> StageStep {
    match m.status {
        NodeStatus::Ready => done(if fallback_used { "Ready (released without erase after the erase failed)" } else { "Ready" }),
        NodeStatus::Releasing | NodeStatus::DiskErasing => StageStep::Wait(format!("{}: {}", m.status_name, msg(m))),
        NodeStatus::FailedDiskErasing if fallback_allowed && !fallback_used => {
            StageStep::Act(MaasAct::Release { erase: EraseMode::None, force: true })
        }
        NodeStatus::FailedDiskErasing => fail(
            MaasFailureClass::StateAmbiguity,
            format!("erasing failed ({}) and the profile does not allow releasing without erase", msg(m)),
        ),
        NodeStatus::FailedReleasing => fail(MaasFailureClass::StateAmbiguity, format!("the release failed: {}", msg(m))),
        _ => unexpected(m, "waiting for the release"),
    }
}

/// PowerOff: off ends it; otherwise ask once, then wait (the stage's limit bounds it).
pub fn power_off(m: &Machine, asked: bool) -> StageStep {
    if m.power_state.as_str() == "off" {
        return done("powered off");
    }
    if asked { StageStep::Wait(format!("power is {}", m.power_state.as_str())) } else { StageStep::Act(MaasAct::PowerOff) }
}

/// RemoveMaasRecord: kept unless asked (the default leaves it for MAAS-side audit); a machine
/// already gone is done.
pub fn remove_maas_record(m: Option<&Machine>, remove: bool) -> StageStep {
    match (remove, m) {
        (false, _) => skipped("the MAAS record is kept (removeMaasRecord was not asked)"),
        (true, None) => done("the machine is no longer in MAAS"),
        (true, Some(_)) => StageStep::Act(MaasAct::DeleteMachine),
    }
}

#[cfg(test)]
#[path = "stages_tests.rs"]
mod tests;
