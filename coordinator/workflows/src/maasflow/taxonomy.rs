//! The failure taxonomy of MAAS workflows (`bare-metal-lifecycle.md` §4.7) and the stages of
//! onboarding (§4.3) with their re-entry and compensation rules (§4.6, §4.10, §4.14).
//!
//! Recovery is decided from these typed values, never from error text: a failure's class
//! says whether automation may retry ([`MaasFailureClass::default_handling`]), and a stage
//! says what a failure there leaves MAAS in ([`MaasStage::compensation`]) — the key
//! principle of §4.6: pre-deploy failures retry in place, deploy failures release the machine
//! back to Ready, post-deploy failures leave MAAS alone.

use std::fmt;

use serde::{Deserialize, Serialize};

use drover_store::ProfilePolicy;

/// Why a MAAS workflow failed (§4.7), stored as a first-class field of the read model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MaasFailureClass {
    /// Invalid input, disabled site: fail at once.
    InputConfigError,
    /// A required site policy or MAAS capability is absent.
    SiteCapabilityMissing,
    /// MAAS or the secret store timed out or answered 5xx.
    UpstreamTransient,
    /// The BMC is unreachable or a power cycle failed.
    BmcPowerFailure,
    /// The machine never appeared in MAAS.
    PxeDiscoveryFailure,
    /// The hardware is not what the profile expects (no BOSS disk, a missing interface).
    HardwareMismatch,
    /// Failed deployment, including datasource / cloud-init class failures.
    DeployCloudInitFailure,
    /// The deployed host cannot be reached to seed it.
    PostDeployConnectivityFailure,
    /// MAAS never emitted the machine token, or sync stays unhealthy.
    HardwareSyncFailure,
    /// The agent never enrolled.
    AgentEnrollmentFailure,
    /// Conflicting candidates, an out-of-band MAAS change, a late success after a failure.
    StateAmbiguity,
}

/// What automation does with a failure of a class, by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Handling {
    /// Fail at once; an operator fixes the input or site, then reruns.
    FailImmediately,
    /// Retry automatically within the stage's bound, then stop for an operator.
    BoundedRetry,
    /// Stop automation: an operator must decide (adopt, fix hardware, clean up).
    ManualIntervention,
}

impl MaasFailureClass {
    /// Every class, in §4.7's order.
    pub const ALL: [MaasFailureClass; 11] = [
        MaasFailureClass::InputConfigError,
        MaasFailureClass::SiteCapabilityMissing,
        MaasFailureClass::UpstreamTransient,
        MaasFailureClass::BmcPowerFailure,
        MaasFailureClass::PxeDiscoveryFailure,
        MaasFailureClass::HardwareMismatch,
        MaasFailureClass::DeployCloudInitFailure,
        MaasFailureClass::PostDeployConnectivityFailure,
        MaasFailureClass::HardwareSyncFailure,
        MaasFailureClass::AgentEnrollmentFailure,
        MaasFailureClass::StateAmbiguity,
    ];

    /// The stable string form.
    pub const fn as_str(self) -> &'static str {
        match self {
            MaasFailureClass::InputConfigError => "input_config_error",
            MaasFailureClass::SiteCapabilityMissing => "site_capability_missing",
            MaasFailureClass::UpstreamTransient => "upstream_transient",
            MaasFailureClass::BmcPowerFailure => "bmc_power_failure",
            MaasFailureClass::PxeDiscoveryFailure => "pxe_discovery_failure",
            MaasFailureClass::HardwareMismatch => "hardware_mismatch",
            MaasFailureClass::DeployCloudInitFailure => "deploy_cloud_init_failure",
            MaasFailureClass::PostDeployConnectivityFailure => "post_deploy_connectivity_failure",
            MaasFailureClass::HardwareSyncFailure => "hardware_sync_failure",
            MaasFailureClass::AgentEnrollmentFailure => "agent_enrollment_failure",
            MaasFailureClass::StateAmbiguity => "state_ambiguity",
        }
    }

    /// §4.7's default handling.
    pub const fn default_handling(self) -> Handling {
        match self {
            MaasFailureClass::InputConfigError | MaasFailureClass::SiteCapabilityMissing => Handling::FailImmediately,
            MaasFailureClass::HardwareMismatch | MaasFailureClass::StateAmbiguity => Handling::ManualIntervention,
            MaasFailureClass::UpstreamTransient
            | MaasFailureClass::BmcPowerFailure
            | MaasFailureClass::PxeDiscoveryFailure
            | MaasFailureClass::DeployCloudInitFailure
            | MaasFailureClass::PostDeployConnectivityFailure
            | MaasFailureClass::HardwareSyncFailure
            | MaasFailureClass::AgentEnrollmentFailure => Handling::BoundedRetry,
        }
    }

    /// The operator action the read model recommends once automation has stopped (§4.12).
    pub const fn recommended_action(self) -> &'static str {
        match self {
            MaasFailureClass::InputConfigError => "fix the request or the site (drover site get/update), then rerun",
            MaasFailureClass::SiteCapabilityMissing => "have MAAS's operators provide the missing capability, then rerun",
            MaasFailureClass::UpstreamTransient => "wait for MAAS / the secret store to answer again, then resume",
            MaasFailureClass::BmcPowerFailure => "check the BMC address and credentials (drover site override), then retry the stage",
            MaasFailureClass::PxeDiscoveryFailure => "check the node's PXE wiring and IPMI boot order, then rerun",
            MaasFailureClass::HardwareMismatch => "fix the hardware or the profile (boot disk pattern, interfaces), then rerun",
            MaasFailureClass::DeployCloudInitFailure => "read the deploy events in the diagnostics, fix the image or bundle, then rerun",
            MaasFailureClass::PostDeployConnectivityFailure => "check the deployed host's network, then resume",
            MaasFailureClass::HardwareSyncFailure => "check maas-agent and the hardware-sync timer on the host, then resume",
            MaasFailureClass::AgentEnrollmentFailure => "check the host can reach the coordinator, then resume (a fresh token is issued)",
            MaasFailureClass::StateAmbiguity => "inspect MAAS, then adopt the observed state or restart clean",
        }
    }
}

impl fmt::Display for MaasFailureClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a failure at a stage leaves behind in MAAS (§4.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Compensation {
    /// Nothing to undo: the machine stays where it is (pre-deploy: retry in place).
    None,
    /// Release the machine back to Ready (a failed or stuck deployment).
    ReleaseToReady,
    /// The OS is running: never touch MAAS; only Drover's state changes.
    LeaveMaasAlone,
}

/// The stages of onboarding, in order (§4.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MaasStage {
    /// Read the site and its secrets; MAAS reachable.
    LoadSite,
    /// Pick the BMC credentials (overrides, then the site default).
    ResolvePowerCredentials,
    /// Find the machine (hostname, BMC address, PXE MAC) or create it; discovery policy.
    CreateOrFind,
    /// Accept / commission as the machine's status requires.
    Commission,
    /// Wait for Ready.
    WaitReady,
    /// Boot disk by the profile's pattern, flat layout.
    ConfigureStorage,
    /// The site's RoCE assignments as STATIC links.
    RocePhase2,
    /// The node PXE interface linked AUTO.
    PxeInterfaceAuto,
    /// The Drover host and the rendered first-boot user data.
    CreateHostAndRenderCloudInit,
    /// `deploy` with the user data.
    Deploy,
    /// Wait for Deployed; classify and recover a datasource-class failure.
    WaitDeployed,
    /// Wait for the agent to enroll (a late enrollment is adopted).
    WaitAgentEnrollment,
    /// Hardware sync enabled, MAAS's fresh machine token seeded through the enrolled agent
    /// (`node.hw_sync_reseed`): MAAS mints the token inside the deploy call, so no user data
    /// rendered before it can carry it.
    EnsureHardwareSync,
    /// Wait for MAAS to report sync healthy.
    WaitHardwareSyncHealthy,
    /// Release the machine in MAAS with the requested erase (reimage, decommission).
    ReleaseMachine,
    /// Wait for Ready; an erase that fails falls back to a release without erase when the
    /// profile allows it.
    WaitReleased,
    /// Power the machine off through MAAS and wait until it is off (decommission).
    PowerOff,
    /// Delete the machine from MAAS when asked (decommission; kept by default).
    RemoveMaasRecord,
    /// Re-assert the site's hardware-sync interval in MAAS (`set_config`) and check that the
    /// deployed machine still has `enable_hw_sync` (MAAS sets it only at deploy, §9.1).
    AssertHardwareSync,
}

/// Which MAAS workflow a job runs; each has its own stage list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Workflow {
    /// §4.3: a new node into the fleet.
    #[default]
    Onboard,
    /// §5.3: the same host, a fresh OS (the MAAS half of a reimage job).
    Reimage,
    /// §5.4: the MAAS half of a full decommission.
    Decommission,
    /// §9.1: the re-sync the drift reconciler issues for a deployed host whose hardware sync
    /// is unhealthy.
    Resync,
}

impl Workflow {
    /// The job kind of this workflow's jobs.
    pub const fn kind(self) -> &'static str {
        match self {
            Workflow::Onboard => "maas_onboarding",
            Workflow::Reimage => "maas_reimage",
            Workflow::Decommission => "maas_decommission",
            Workflow::Resync => "maas_resync",
        }
    }

    /// The stable name (the serde form).
    pub const fn name(self) -> &'static str {
        match self {
            Workflow::Onboard => "onboard",
            Workflow::Reimage => "reimage",
            Workflow::Decommission => "decommission",
            Workflow::Resync => "resync",
        }
    }

    /// Every workflow.
    pub const ALL: [Workflow; 4] = [Workflow::Onboard, Workflow::Reimage, Workflow::Decommission, Workflow::Resync];

    /// The workflow of a job kind.
    pub fn of_kind(kind: &str) -> Option<Workflow> {
        Workflow::ALL.into_iter().find(|w| w.kind() == kind)
    }

    /// Its stages, in order.
    pub const fn stages(self) -> &'static [MaasStage] {
        use MaasStage::*;
        match self {
            Workflow::Onboard => &MaasStage::ALL,
            Workflow::Reimage => &[
                LoadSite,
                ReleaseMachine,
                WaitReleased,
                ConfigureStorage,
                RocePhase2,
                PxeInterfaceAuto,
                CreateHostAndRenderCloudInit,
                Deploy,
                WaitDeployed,
                WaitAgentEnrollment,
                EnsureHardwareSync,
                WaitHardwareSyncHealthy,
            ],
            Workflow::Decommission => &[LoadSite, ReleaseMachine, WaitReleased, PowerOff, RemoveMaasRecord],
            Workflow::Resync => &[LoadSite, AssertHardwareSync, EnsureHardwareSync, WaitHardwareSyncHealthy],
        }
    }
}

impl MaasStage {
    /// Every onboarding stage, in order.
    pub const ALL: [MaasStage; 14] = [
        MaasStage::LoadSite,
        MaasStage::ResolvePowerCredentials,
        MaasStage::CreateOrFind,
        MaasStage::Commission,
        MaasStage::WaitReady,
        MaasStage::ConfigureStorage,
        MaasStage::RocePhase2,
        MaasStage::PxeInterfaceAuto,
        MaasStage::CreateHostAndRenderCloudInit,
        MaasStage::Deploy,
        MaasStage::WaitDeployed,
        MaasStage::WaitAgentEnrollment,
        MaasStage::EnsureHardwareSync,
        MaasStage::WaitHardwareSyncHealthy,
    ];

    /// What a failure here leaves MAAS in (§4.6's key principle).
    pub const fn compensation(self) -> Compensation {
        match self {
            MaasStage::Deploy | MaasStage::WaitDeployed => Compensation::ReleaseToReady,
            MaasStage::EnsureHardwareSync | MaasStage::WaitHardwareSyncHealthy | MaasStage::WaitAgentEnrollment => {
                Compensation::LeaveMaasAlone
            }
            _ => Compensation::None,
        }
    }

    /// Whether the stage reads MAAS's state before acting (§4.10: every stage that touches
    /// MAAS does; the destructive ones must).
    pub const fn refreshes_first(self) -> bool {
        !matches!(self, MaasStage::LoadSite | MaasStage::ResolvePowerCredentials)
    }

    /// Whether re-running the stage from the top is safe without looking at what it did
    /// before (§4.10): `deploy` never is — MAAS may already have advanced.
    pub const fn blindly_rerunnable(self) -> bool {
        !matches!(self, MaasStage::Deploy)
    }

    /// The stage's time limit from the profile (§4.14) and the class its expiry carries, for
    /// the waiting stages.
    pub fn timeout(self, policy: &ProfilePolicy) -> Option<(u64, MaasFailureClass)> {
        match self {
            MaasStage::CreateOrFind => Some((policy.discovery_timeout_secs, MaasFailureClass::PxeDiscoveryFailure)),
            MaasStage::WaitReady => Some((policy.commission_timeout_secs, MaasFailureClass::BmcPowerFailure)),
            MaasStage::WaitDeployed => Some((policy.deploy_timeout_secs, MaasFailureClass::DeployCloudInitFailure)),
            MaasStage::EnsureHardwareSync => Some((policy.hw_sync_seed_timeout_secs, MaasFailureClass::HardwareSyncFailure)),
            MaasStage::WaitHardwareSyncHealthy => Some((policy.hw_sync_health_timeout_secs, MaasFailureClass::HardwareSyncFailure)),
            MaasStage::WaitAgentEnrollment => Some((policy.enrollment_timeout_secs, MaasFailureClass::AgentEnrollmentFailure)),
            // A release (with its erase) or a power-off that does not converge: an operator
            // must reconcile (§5.8).
            MaasStage::WaitReleased | MaasStage::PowerOff => Some((policy.deploy_timeout_secs, MaasFailureClass::StateAmbiguity)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_round_trip_their_names() {
        for c in MaasFailureClass::ALL {
            let json = serde_json::to_value(c).expect("serialize");
            assert_eq!(json, serde_json::json!(c.as_str()));
            assert_eq!(serde_json::from_value::<MaasFailureClass>(json).expect("parse"), c);
            assert!(!c.recommended_action().is_empty());
        }
    }

    #[test]
    fn only_mismatch_and_ambiguity_stop_automation_outright() {
        let manual: Vec<_> = MaasFailureClass::ALL.into_iter().filter(|c| c.default_handling() == Handling::ManualIntervention).collect();
        assert_eq!(manual, [MaasFailureClass::HardwareMismatch, MaasFailureClass::StateAmbiguity]);
    }

    #[test]
    fn compensation_follows_the_key_principle() {
        let deploy_at = MaasStage::ALL.iter().position(|s| *s == MaasStage::Deploy).expect("deploy");
        for (i, s) in MaasStage::ALL.into_iter().enumerate() {
            let want = match i {
                _ if i < deploy_at => Compensation::None,
                _ if i <= deploy_at + 1 => Compensation::ReleaseToReady,
                _ => Compensation::LeaveMaasAlone,
            };
            assert_eq!(s.compensation(), want, "{s:?}");
        }
        assert!(!MaasStage::Deploy.blindly_rerunnable());
        assert!(MaasStage::WaitDeployed.blindly_rerunnable());
    }

    #[test]
    fn waiting_stages_take_their_limits_from_the_profile() {
        let p = ProfilePolicy { deploy_timeout_secs: 1234, ..ProfilePolicy::default() };
        assert_eq!(MaasStage::WaitDeployed.timeout(&p), Some((1234, MaasFailureClass::DeployCloudInitFailure)));
        assert_eq!(MaasStage::ConfigureStorage.timeout(&p), None);
    }
}
