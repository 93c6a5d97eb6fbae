//! Power on a `ComputerSystem`: read it, choose a `ResetType` it allows, post to its action's
//! target, read `PowerState` until it matches, bounded.

use std::time::Instant;

use serde_json::{Value, json};

use crate::client::RedfishClient;
use crate::error::RedfishError;

/// The state asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowerTarget {
    /// Powered on.
    On,
    /// Powered off.
    Off,
}

impl PowerTarget {
    /// Redfish's `PowerState` value.
    pub fn as_str(self) -> &'static str {
        match self {
            PowerTarget::On => "On",
            PowerTarget::Off => "Off",
        }
    }

    /// Reset types that reach the state, most preferred first. Off is a power cut first: the
    /// callers (a power sequence, a shelf's maintenance) have drained the machine already, and
    /// a graceful shutdown can hang on the OS and never converge; `GracefulShutdown` is the
    /// fallback for a BMC that allows only it.
    fn reset_types(self) -> &'static [&'static str] {
        match self {
            PowerTarget::On => &["On", "ForceOn"],
            PowerTarget::Off => &["ForceOff", "GracefulShutdown"],
        }
    }
}

/// A system as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct System {
    /// Its `@odata.id`.
    pub uri: String,
    /// `PowerState` (On, Off, PoweringOn, PoweringOff, …).
    pub power_state: String,
    /// The Reset action's target.
    pub reset_target: Option<String>,
    /// `ResetType@Redfish.AllowableValues` (empty when the BMC does not say).
    pub allowed: Vec<String>,
}

fn system_of(uri: &str, v: &Value) -> Result<System, RedfishError> {
    let power_state =
        v["PowerState"].as_str().ok_or_else(|| RedfishError::Protocol { uri: uri.to_owned(), reason: "no PowerState".into() })?.to_owned();
    let action = &v["Actions"]["#ComputerSystem.Reset"];
    let allowed = action["ResetType@Redfish.AllowableValues"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        .unwrap_or_default();
    Ok(System {
        uri: v["@odata.id"].as_str().unwrap_or(uri).to_owned(),
        power_state,
        reset_target: action["target"].as_str().map(str::to_owned),
        allowed,
    })
}

impl RedfishClient {
    /// Reads a system (`/redfish/v1/Systems/{id}`, or any `@odata.id`).
    pub async fn system(&self, uri: &str) -> Result<System, RedfishError> {
        let v = self.get(uri).await?;
        system_of(uri, &v)
    }

    /// The systems the service lists (service root → `Systems`, following the link).
    pub async fn systems(&self) -> Result<Vec<String>, RedfishError> {
        let root = self.get("/redfish/v1/").await?;
        let Some(systems) = root["Systems"]["@odata.id"].as_str() else {
            return Ok(Vec::new());
        };
        let v = self.get(systems).await?;
        Ok(v["Members"]
            .as_array()
            .map(|m| m.iter().filter_map(|x| x["@odata.id"].as_str()).map(str::to_owned).collect())
            .unwrap_or_default())
    }

    /// Powers a system on or off and waits until its `PowerState` says so (bounded by the
    /// configuration's `converge_timeout`). A system already there is left alone.
    pub async fn set_power(&self, uri: &str, target: PowerTarget) -> Result<System, RedfishError> {
        let sys = self.system(uri).await?;
        if sys.power_state == target.as_str() {
            return Ok(sys);
        }
        let action = sys.reset_target.clone().ok_or_else(|| RedfishError::Protocol {
            uri: sys.uri.clone(),
            reason: "the system advertises no #ComputerSystem.Reset action".into(),
        })?;
        // Only a value the BMC advertises (an emulator 501s some it does not support); with no
        // list, the schema's plain value.
        let reset =
            target.reset_types().iter().find(|t| sys.allowed.is_empty() || sys.allowed.iter().any(|a| a == *t)).ok_or_else(|| {
                RedfishError::NoResetType { uri: sys.uri.clone(), target: target.as_str().into(), allowed: sys.allowed.clone() }
            })?;
        tracing::info!(system = %sys.uri, reset_type = %reset, "redfish reset");
        self.post(&action, &json!({ "ResetType": reset })).await?;
        self.wait_for(&sys.uri, target).await
    }

    /// Reads the system until its `PowerState` is `target` (transitional values keep it
    /// waiting), bounded by `converge_timeout`.
    async fn wait_for(&self, uri: &str, target: PowerTarget) -> Result<System, RedfishError> {
        let started = Instant::now();
        loop {
            let now = self.system(uri).await?;
            if now.power_state == target.as_str() {
                return Ok(now);
            }
            if started.elapsed() >= self.config.converge_timeout {
                return Err(RedfishError::NotConverged {
                    uri: uri.to_owned(),
                    target: target.as_str().into(),
                    last: now.power_state,
                    waited_secs: started.elapsed().as_secs(),
                });
            }
            tokio::time::sleep(self.config.poll_interval).await;
        }
    }
}

impl RedfishClient {
    /// Power-cycles a system. With `PowerCycle` among the reset types the BMC advertises, that
    /// one reset is sent and the system read until it is `On` again (bounded); otherwise — the
    /// DMTF emulator advertises none — it is powered off, then on, each change waited for.
    /// A system that is off is simply powered on.
    pub async fn power_cycle(&self, uri: &str) -> Result<System, RedfishError> {
        let sys = self.system(uri).await?;
        if sys.power_state == PowerTarget::Off.as_str() {
            return self.set_power(uri, PowerTarget::On).await;
        }
        match (&sys.reset_target, sys.allowed.iter().any(|a| a == "PowerCycle")) {
            (Some(action), true) => {
                tracing::info!(system = %sys.uri, reset_type = "PowerCycle", "redfish reset");
                self.post(action, &json!({ "ResetType": "PowerCycle" })).await?;
                self.wait_for(&sys.uri, PowerTarget::On).await
            }
            _ => {
                self.set_power(uri, PowerTarget::Off).await?;
                self.set_power(uri, PowerTarget::On).await
            }
        }
    }
}
