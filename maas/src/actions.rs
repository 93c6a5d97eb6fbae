//! Machine lifecycle and power ops: commission, deploy, release, abort, power on/off/query,
//! mark broken/fixed, storage layout, and the machine's hardware-sync token.
//!
//! All but the queries are `POST ?op=…` with form bodies, never retried (they change state).
//! Commission's and release's flags are Django checkboxes, for which `0` means *true* (facts
//! §0e, §0g): they are sent as `true` when set and left out otherwise.

use base64::Engine as _;
use serde::Deserialize;

use crate::client::{Call, MaasClient};
use crate::error::MaasError;
use crate::form::Params;
use crate::machines::machine_path;
use crate::status::PowerState;
use crate::types::{Machine, MachineToken};

/// Options of `op=commission`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommissionOptions {
    /// Keep SSH open on the ephemeral environment.
    pub enable_ssh: bool,
    /// Leave the BMC's configuration alone.
    pub skip_bmc_config: bool,
    /// Keep the current network configuration.
    pub skip_networking: bool,
    /// Keep the current storage configuration.
    pub skip_storage: bool,
    /// Commissioning scripts to run (comma-joined; empty = MAAS's default set).
    pub commissioning_scripts: Vec<String>,
    /// Testing scripts to run (comma-joined; `["none"]` runs no tests; empty = MAAS's default).
    pub testing_scripts: Vec<String>,
}

/// Options of `op=deploy`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeployOptions {
    /// Cloud-init user data (sent base64-encoded, as MAAS's docs ask).
    pub user_data: Option<Vec<u8>>,
    /// `jammy`, `ubuntu/jammy` or `22.04`.
    pub distro_series: Option<String>,
    /// Turn on hardware sync (Linux images only).
    pub enable_hw_sync: bool,
    /// HWE kernel.
    pub hwe_kernel: Option<String>,
    /// Agent name recorded on the machine (filterable).
    pub agent_name: Option<String>,
    /// Comment for the event log.
    pub comment: Option<String>,
}

/// Options of `op=release`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReleaseOptions {
    /// Erase the disks (→ Disk erasing).
    pub erase: bool,
    /// Quick erase (implies erasing).
    pub quick_erase: bool,
    /// Secure erase (implies erasing).
    pub secure_erase: bool,
    /// Release even when MAAS would refuse (e.g. unreachable BMC).
    pub force: bool,
    /// Comment for the event log.
    pub comment: Option<String>,
}

/// How `power_off` stops the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StopMode {
    /// Immediate power cut.
    #[default]
    Hard,
    /// ACPI shutdown.
    Soft,
}

impl StopMode {
    fn as_str(self) -> &'static str {
        match self {
            StopMode::Hard => "hard",
            StopMode::Soft => "soft",
        }
    }
}

impl CommissionOptions {
    fn params(&self) -> Params {
        let mut p = Params::new();
        p.flag("enable_ssh", self.enable_ssh)
            .flag("skip_bmc_config", self.skip_bmc_config)
            .flag("skip_networking", self.skip_networking)
            .flag("skip_storage", self.skip_storage);
        if !self.commissioning_scripts.is_empty() {
            p.text("commissioning_scripts", self.commissioning_scripts.join(","));
        }
        if !self.testing_scripts.is_empty() {
            p.text("testing_scripts", self.testing_scripts.join(","));
        }
        p
    }
}

impl DeployOptions {
    fn params(&self) -> Params {
        let mut p = Params::new();
        if let Some(data) = &self.user_data {
            p.text("user_data", base64::engine::general_purpose::STANDARD.encode(data));
        }
        p.opt_text("distro_series", self.distro_series.as_deref());
        // enable_hw_sync is a StringBool (`false` is false), but sent only when wanted so a
        // plain deploy carries nothing MAAS could question.
        if self.enable_hw_sync {
            p.boolean("enable_hw_sync", true);
        }
        p.opt_text("hwe_kernel", self.hwe_kernel.as_deref())
            .opt_text("agent_name", self.agent_name.as_deref())
            .opt_text("comment", self.comment.as_deref());
        p
    }
}

impl ReleaseOptions {
    fn params(&self) -> Params {
        let mut p = Params::new();
        p.flag("erase", self.erase)
            .flag("quick_erase", self.quick_erase)
            .flag("secure_erase", self.secure_erase)
            .flag("force", self.force)
            .opt_text("comment", self.comment.as_deref());
        p
    }
}

/// `{"state": "on"}` from `query_power_state`.
#[derive(Deserialize)]
struct PowerStateAnswer {
    state: PowerState,
}

fn comment(comment: Option<&str>) -> Params {
    let mut p = Params::new();
    p.opt_text("comment", comment);
    p
}

impl MaasClient {
    /// `POST op=commission` (admin; New, Failed commissioning, Ready, Broken). A wrong state is
    /// MAAS's 400 `__all__`, classed [`crate::ErrorClass::IllegalState`].
    pub async fn commission(&self, system_id: &str, options: &CommissionOptions) -> Result<Machine, MaasError> {
        self.json(Call::post(machine_path(system_id)).op("commission").form(options.params())).await
    }

    /// `POST op=deploy` (Ready → allocated to the caller → Deploying; Allocated → Deploying;
    /// anything else 409).
    pub async fn deploy(&self, system_id: &str, options: &DeployOptions) -> Result<Machine, MaasError> {
        self.json(Call::post(machine_path(system_id)).op("deploy").form(options.params())).await
    }

    /// `POST op=release`. Ready and Releasing machines answer 200 unchanged (a no-op);
    /// releasable ones go to Releasing, or Disk erasing when erasing.
    pub async fn release(&self, system_id: &str, options: &ReleaseOptions) -> Result<Machine, MaasError> {
        self.json(Call::post(machine_path(system_id)).op("release").form(options.params())).await
    }

    /// `POST op=abort`: stops commissioning, deploying, disk erasing or testing. The answer may
    /// still show the old status (MAAS applies the change after powering off).
    pub async fn abort(&self, system_id: &str, comment_text: Option<&str>) -> Result<Machine, MaasError> {
        self.json(Call::post(machine_path(system_id)).op("abort").form(comment(comment_text))).await
    }

    /// `POST op=power_on` (the machine must be owned; on Allocated it starts a deployment).
    pub async fn power_on(&self, system_id: &str, comment_text: Option<&str>) -> Result<Machine, MaasError> {
        self.json(Call::post(machine_path(system_id)).op("power_on").form(comment(comment_text))).await
    }

    /// `POST op=power_off`; `None` when MAAS could send no power action (its `null` answer).
    pub async fn power_off(&self, system_id: &str, stop_mode: StopMode, comment_text: Option<&str>) -> Result<Option<Machine>, MaasError> {
        let mut p = comment(comment_text);
        p.text("stop_mode", stop_mode.as_str());
        self.json(Call::post(machine_path(system_id)).op("power_off").form(p)).await
    }

    /// `GET op=query_power_state`: asks the BMC now (503/504 when it cannot be reached).
    pub async fn query_power_state(&self, system_id: &str) -> Result<PowerState, MaasError> {
        let answer: PowerStateAnswer = self.json(Call::get(machine_path(system_id)).op("query_power_state")).await?;
        Ok(answer.state)
    }

    /// `GET op=get_token` (admin): the machine's metadata token, which its hardware-sync agent
    /// signs with; `None` until MAAS mints one (at deploy). A new one is minted per deployment.
    pub async fn get_token(&self, system_id: &str) -> Result<Option<MachineToken>, MaasError> {
        self.json(Call::get(machine_path(system_id)).op("get_token").secret_answer()).await
    }

    /// `POST op=set_storage_layout` with `storage_layout` = `flat`, `lvm`, `bcache`, `vmfs6`,
    /// `vmfs7`, `custom` or `blank` (Ready only, else 409).
    pub async fn set_storage_layout(&self, system_id: &str, layout: &str) -> Result<Machine, MaasError> {
        let mut p = Params::new();
        p.text("storage_layout", layout);
        self.json(Call::post(machine_path(system_id)).op("set_storage_layout").form(p)).await
    }

    /// `POST op=mark_broken` (owner only, even for admins); `comment` becomes the machine's
    /// `error_description`.
    pub async fn mark_broken(&self, system_id: &str, comment_text: Option<&str>) -> Result<Machine, MaasError> {
        self.json(Call::post(machine_path(system_id)).op("mark_broken").form(comment(comment_text))).await
    }

    /// `POST op=mark_fixed` (Broken → Ready, or Deployed if it was; else 409).
    pub async fn mark_fixed(&self, system_id: &str, comment_text: Option<&str>) -> Result<Machine, MaasError> {
        self.json(Call::post(machine_path(system_id)).op("mark_fixed").form(comment(comment_text))).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commission_flags_are_true_or_absent() {
        assert_eq!(CommissionOptions::default().params().encode(), "");
        let o = CommissionOptions {
            enable_ssh: true,
            skip_storage: true,
            testing_scripts: vec!["none".into()],
            commissioning_scripts: vec!["a".into(), "b".into()],
            ..CommissionOptions::default()
        };
        assert_eq!(o.params().encode(), "enable_ssh=true&skip_storage=true&commissioning_scripts=a%2Cb&testing_scripts=none");
    }

    #[test]
    fn release_flags_never_send_zero_or_false() {
        assert_eq!(ReleaseOptions::default().params().encode(), "");
        let o = ReleaseOptions { quick_erase: true, comment: Some("rma".into()), ..ReleaseOptions::default() };
        let body = o.params().encode();
        assert_eq!(body, "quick_erase=true&comment=rma");
        assert!(!body.contains("=0") && !body.contains("=false"));
    }

    #[test]
    fn deploy_base64s_user_data() {
        let o = DeployOptions {
            user_data: Some(b"#cloud-config\nruncmd: [true]\n".to_vec()),
            distro_series: Some("jammy".into()),
            enable_hw_sync: true,
            agent_name: Some("drover".into()),
            ..DeployOptions::default()
        };
        assert_eq!(
            o.params().encode(),
            "user_data=I2Nsb3VkLWNvbmZpZwpydW5jbWQ6IFt0cnVlXQo%3D&distro_series=jammy&enable_hw_sync=true&agent_name=drover"
        );
        assert_eq!(DeployOptions::default().params().encode(), "");
    }

    #[test]
    fn stop_modes() {
        assert_eq!(StopMode::default().as_str(), "hard");
        assert_eq!(StopMode::Soft.as_str(), "soft");
    }

    #[test]
    fn power_state_answer_parses() {
        let a: PowerStateAnswer = serde_json::from_str(r#"{"state":"off"}"#).expect("parse");
        assert_eq!(a.state, PowerState::Off);
    }
}
