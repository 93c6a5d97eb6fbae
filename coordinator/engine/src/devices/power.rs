//! How the device controllers reach BMCs and PMCs: the narrow [`PowerControl`] trait they
//! drive, and [`RedfishPower`], its implementation over `drover-redfish`.
//!
//! A device is named by its endpoint and a secret-store path ([`Bmc`]). The secret holds
//! `username`, `password` and, for a BMC whose certificate is not signed by a public CA (most
//! of them), `caPem`: the CA or the self-signed certificate it presents. The secret is read at
//! each use and never cached, so rotating it needs no restart; its values never reach an error,
//! a log line or an event.
//!
//! An endpoint is the BMC's base URL (`https://10.0.4.17`) — the service must then list exactly
//! one power shelf (or system) — or the resource's own URL
//! (`https://pmc.c07/redfish/v1/PowerEquipment/PowerShelves/1`) when it lists several.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use drover_redfish::{PowerTarget, RedfishClient, RedfishConfig, RedfishError};
use serde_json::{Value, json};

use crate::config::DevicesConfig;
use crate::secrets::{SecretPath, SecretStore};

/// A device to reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bmc {
    /// How events and errors name it (`power shelf c07-ps1`, `machine gpu-07`).
    pub name: String,
    /// Its endpoint.
    pub endpoint: String,
    /// Where its credentials live.
    pub credentials_path: String,
}

/// Why a device call failed; the message names the device, never a credential.
#[derive(Debug, thiserror::Error)]
pub enum PowerError {
    /// Its credentials cannot be had.
    #[error("{device}: credentials at {path}: {reason}")]
    Credentials {
        /// The device.
        device: String,
        /// The secret path.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The endpoint does not say which resource to drive.
    #[error("{device}: {reason}")]
    Endpoint {
        /// The device.
        device: String,
        /// What is wrong.
        reason: String,
    },
    /// The device refused, did not answer or did not converge.
    #[error("{device}: {source}")]
    Device {
        /// The device.
        device: String,
        /// The Redfish error.
        #[source]
        source: RedfishError,
    },
}

/// What a [`PowerControl`] call returns.
pub type PowerFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, PowerError>> + Send + 'a>>;

/// What the controllers ask of devices. Each call is idempotent (a device already in the
/// asked-for state is left alone), which is what makes re-issuing it after a coordinator
/// restart safe.
pub trait PowerControl: Send + Sync {
    /// Reads a power shelf's data (identity, firmware, outlets and their power).
    fn shelf_facts<'a>(&'a self, shelf: &'a Bmc) -> PowerFuture<'a, Value>;
    /// Powers a shelf on or off and waits, bounded, until every outlet reads it.
    fn shelf_power<'a>(&'a self, shelf: &'a Bmc, target: PowerTarget) -> PowerFuture<'a, ()>;
    /// Powers a machine on or off through its BMC and waits, bounded, until it reads so.
    fn machine_power<'a>(&'a self, machine: &'a Bmc, target: PowerTarget) -> PowerFuture<'a, ()>;
    /// A machine's `PowerState` as its BMC reads it now.
    fn machine_power_state<'a>(&'a self, machine: &'a Bmc) -> PowerFuture<'a, String>;
    /// Has the machine's BMC apply the firmware image at `image_uri` to the machine, waiting
    /// (bounded) for the update to finish.
    fn machine_firmware<'a>(&'a self, machine: &'a Bmc, image_uri: &'a str) -> PowerFuture<'a, ()>;
    /// Has a shelf's PMC apply the firmware image at `image_uri` to the shelf, waiting
    /// (bounded) for the update to finish.
    fn shelf_firmware<'a>(&'a self, shelf: &'a Bmc, image_uri: &'a str) -> PowerFuture<'a, ()>;
}

/// [`PowerControl`] over Redfish, with credentials from the secret store.
pub struct RedfishPower {
    secrets: Arc<dyn SecretStore>,
    settings: DevicesConfig,
}

impl RedfishPower {
    /// Devices reached with `settings`' bounds, credentials read from `secrets`.
    pub fn new(secrets: Arc<dyn SecretStore>, settings: DevicesConfig) -> RedfishPower {
        RedfishPower { secrets, settings }
    }

    /// A client for the device and the resource path its endpoint names (if any).
    async fn client(&self, bmc: &Bmc) -> Result<(RedfishClient, Option<String>), PowerError> {
        let cred = |reason: String| PowerError::Credentials { device: bmc.name.clone(), path: bmc.credentials_path.clone(), reason };
        let path = SecretPath::new(&bmc.credentials_path).map_err(|e| cred(e.to_string()))?;
        let secret = self.secrets.read(&path).await.map_err(|e| cred(e.to_string()))?.ok_or_else(|| cred("no such secret".into()))?;
        let field = |name: &str| secret.get(name).filter(|v| !v.is_empty()).map(str::to_owned);
        let username = field("username").ok_or_else(|| cred("no username field".into()))?;
        let password = field("password").ok_or_else(|| cred("no password field".into()))?;
        let (base, resource) = split_endpoint(&bmc.endpoint).map_err(|reason| PowerError::Endpoint { device: bmc.name.clone(), reason })?;
        let mut config = RedfishConfig::new(&base, &username, &password);
        config.ca_pem = field("caPem").map(String::into_bytes);
        config.timeout = Duration::from_secs(self.settings.request_timeout_secs);
        config.converge_timeout = Duration::from_secs(self.settings.converge_timeout_secs);
        config.poll_interval = Duration::from_millis(self.settings.poll_ms);
        let client = RedfishClient::new(config).map_err(|source| PowerError::Device { device: bmc.name.clone(), source })?;
        Ok((client, resource))
    }

    /// The one resource an endpoint names, or the only member the service lists.
    fn only(bmc: &Bmc, what: &str, listed: Vec<String>) -> Result<String, PowerError> {
        match listed.as_slice() {
            [one] => Ok(one.clone()),
            _ => Err(PowerError::Endpoint {
                device: bmc.name.clone(),
                reason: format!("the service lists {} {what}: name one in the endpoint URL", listed.len()),
            }),
        }
    }

    /// A client and the resource to drive: the one the endpoint names, or the only member of
    /// the service's systems (`shelf` false) or power shelves.
    async fn resource(&self, bmc: &Bmc, shelf: bool) -> Result<(RedfishClient, String), PowerError> {
        let (client, resource) = self.client(bmc).await?;
        if let Some(r) = resource {
            return Ok((client, r));
        }
        let listed = if shelf { client.power_shelves().await } else { client.systems().await };
        let listed = listed.map_err(|source| PowerError::Device { device: bmc.name.clone(), source })?;
        let uri = Self::only(bmc, if shelf { "power shelves" } else { "systems" }, listed)?;
        Ok((client, uri))
    }

    async fn system_uri(&self, bmc: &Bmc) -> Result<(RedfishClient, String), PowerError> {
        self.resource(bmc, false).await
    }

    async fn shelf_uri(&self, bmc: &Bmc) -> Result<(RedfishClient, String), PowerError> {
        self.resource(bmc, true).await
    }
}

/// Splits `https://host[:port][/path]` into the base URL and the resource path, if any.
pub fn split_endpoint(endpoint: &str) -> Result<(String, Option<String>), String> {
    let url = reqwest::Url::parse(endpoint).map_err(|e| format!("endpoint {endpoint}: {e}"))?;
    if url.query().is_some() || url.fragment().is_some() || !url.username().is_empty() || url.password().is_some() {
        return Err(format!("endpoint {endpoint}: only scheme, host, port and path are allowed"));
    }
    let host = url.host_str().ok_or_else(|| format!("endpoint {endpoint}: no host"))?;
    let host = if host.contains(':') && !host.starts_with('[') { format!("[{host}]") } else { host.to_owned() };
    let base = match url.port() {
        Some(p) => format!("{}://{host}:{p}", url.scheme()),
        None => format!("{}://{host}", url.scheme()),
    };
    let path = url.path().trim_end_matches('/');
    Ok((base, (!path.is_empty()).then(|| path.to_owned())))
}

impl PowerControl for RedfishPower {
    fn shelf_facts<'a>(&'a self, shelf: &'a Bmc) -> PowerFuture<'a, Value> {
        Box::pin(async move {
            let (client, uri) = self.shelf_uri(shelf).await?;
            let s = client.shelf(&uri).await.map_err(|source| PowerError::Device { device: shelf.name.clone(), source })?;
            Ok(json!({
                "uri": s.uri, "equipmentType": s.equipment_type, "manufacturer": s.manufacturer, "model": s.model,
                "serialNumber": s.serial_number, "firmwareVersion": s.firmware_version, "powerState": s.power_state(),
                "outlets": s.outlets.iter().map(|o| json!({"uri": o.uri, "powerState": o.power_state, "locked": o.locked})).collect::<Vec<_>>(),
            }))
        })
    }

    fn shelf_power<'a>(&'a self, shelf: &'a Bmc, target: PowerTarget) -> PowerFuture<'a, ()> {
        Box::pin(async move {
            let (client, uri) = self.shelf_uri(shelf).await?;
            client.set_shelf_power(&uri, target).await.map_err(|source| PowerError::Device { device: shelf.name.clone(), source })?;
            Ok(())
        })
    }

    fn machine_power<'a>(&'a self, machine: &'a Bmc, target: PowerTarget) -> PowerFuture<'a, ()> {
        Box::pin(async move {
            let (client, uri) = self.system_uri(machine).await?;
            client.set_power(&uri, target).await.map_err(|source| PowerError::Device { device: machine.name.clone(), source })?;
            Ok(())
        })
    }

    fn machine_power_state<'a>(&'a self, machine: &'a Bmc) -> PowerFuture<'a, String> {
        Box::pin(async move {
            let (client, uri) = self.system_uri(machine).await?;
            let sys = client.system(&uri).await.map_err(|source| PowerError::Device { device: machine.name.clone(), source })?;
            Ok(sys.power_state)
        })
    }

    fn shelf_firmware<'a>(&'a self, shelf: &'a Bmc, image_uri: &'a str) -> PowerFuture<'a, ()> {
        Box::pin(async move {
            let (client, uri) = self.shelf_uri(shelf).await?;
            client.simple_update(image_uri, &[uri]).await.map_err(|source| PowerError::Device { device: shelf.name.clone(), source })
        })
    }

    fn machine_firmware<'a>(&'a self, machine: &'a Bmc, image_uri: &'a str) -> PowerFuture<'a, ()> {
        Box::pin(async move {
            let (client, uri) = self.system_uri(machine).await?;
            client.simple_update(image_uri, &[uri]).await.map_err(|source| PowerError::Device { device: machine.name.clone(), source })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_is_a_base_url_and_an_optional_resource() {
        assert_eq!(split_endpoint("https://10.0.4.17").unwrap(), ("https://10.0.4.17".into(), None));
        assert_eq!(split_endpoint("https://10.0.4.17:8443/").unwrap(), ("https://10.0.4.17:8443".into(), None));
        assert_eq!(
            split_endpoint("https://pmc.c07/redfish/v1/PowerEquipment/PowerShelves/1").unwrap(),
            ("https://pmc.c07".into(), Some("/redfish/v1/PowerEquipment/PowerShelves/1".into()))
        );
        assert_eq!(split_endpoint("https://[fd00::5]:443/redfish/v1/Systems/1").unwrap().0, "https://[fd00::5]");
        for bad in ["https://u:p@bmc", "https://bmc/?x=1", "not a url", "https://bmc/#frag"] {
            assert!(split_endpoint(bad).is_err(), "{bad}");
        }
    }
}
