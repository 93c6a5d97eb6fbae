//! The JSON shapes MAAS answers with: the version, rack controllers, machines, machine tokens
//! and power parameters.
//!
//! Every struct ignores fields it does not name and reads `null` (or absence) as the field's
//! empty value, so one odd machine or a newer MAAS never fails a whole fleet listing. Values
//! that are credentials (the machine token's secret, BMC passwords) are redacted in `Debug`.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer};

use crate::hwsync::HwSync;
use crate::network::Interface;
use crate::status::{NodeStatus, PowerState};
use crate::storage::BlockDevice;

/// Reads `null` as `T::default()` (serde's `default` covers only absence).
pub(crate) fn nullable<'de, D: Deserializer<'de>, T: Default + Deserialize<'de>>(d: D) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// `GET /api/2.0/version/` (anonymous: it proves MAAS is there, not that the key works).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Version {
    /// Capability names (`networks-management`, `authenticate-api`, …).
    #[serde(default, deserialize_with = "nullable")]
    pub capabilities: Vec<String>,
    /// `major.minor.point`, plus `~<qualifier><n>` for pre-releases.
    #[serde(default, deserialize_with = "nullable")]
    pub version: String,
    /// Always empty in current MAAS.
    #[serde(default, deserialize_with = "nullable")]
    pub subversion: String,
}

/// A `name`d reference object (zone, pool, domain).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
pub struct NamedRef {
    /// Its name.
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    /// Its id, when MAAS gives one.
    #[serde(default)]
    pub id: Option<i64>,
}

/// One entry of `GET /api/2.0/rackcontrollers/`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct RackController {
    /// Its system id.
    pub system_id: String,
    /// Its hostname.
    #[serde(default, deserialize_with = "nullable")]
    pub hostname: String,
    /// Its FQDN.
    #[serde(default)]
    pub fqdn: Option<String>,
    /// The MAAS version it runs.
    #[serde(default)]
    pub version: Option<String>,
    /// Its IP addresses.
    #[serde(default, deserialize_with = "nullable")]
    pub ip_addresses: Vec<String>,
    /// `node_type_name` (`Rack controller`, `Region and rack controller`).
    #[serde(default)]
    pub node_type_name: Option<String>,
}

/// A machine, with the fields Drover's workflows use.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Machine {
    /// MAAS's id (6 characters), the handle of every machine call.
    pub system_id: String,
    /// Hostname.
    #[serde(default, deserialize_with = "nullable")]
    pub hostname: String,
    /// Fully qualified name.
    #[serde(default)]
    pub fqdn: Option<String>,
    /// Free text.
    #[serde(default)]
    pub description: Option<String>,
    /// Status (codes unknown to this client kept as [`NodeStatus::Unknown`]).
    #[serde(default = "unknown_status")]
    pub status: NodeStatus,
    /// MAAS's label of the status.
    #[serde(default, deserialize_with = "nullable")]
    pub status_name: String,
    /// The latest progress message (`Loading ephemeral`, …).
    #[serde(default)]
    pub status_message: Option<String>,
    /// Power state as MAAS last saw it.
    #[serde(default)]
    pub power_state: PowerState,
    /// Power driver (`ipmi`, `manual`, …).
    #[serde(default)]
    pub power_type: Option<String>,
    /// Addresses MAAS knows for it.
    #[serde(default, deserialize_with = "nullable")]
    pub ip_addresses: Vec<String>,
    /// The PXE interface.
    #[serde(default)]
    pub boot_interface: Option<Interface>,
    /// All interfaces.
    #[serde(default, deserialize_with = "nullable")]
    pub interface_set: Vec<Interface>,
    /// All block devices.
    #[serde(default, deserialize_with = "nullable")]
    pub blockdevice_set: Vec<BlockDevice>,
    /// Physical block devices.
    #[serde(default, deserialize_with = "nullable")]
    pub physicalblockdevice_set: Vec<BlockDevice>,
    /// The boot disk.
    #[serde(default)]
    pub boot_disk: Option<BlockDevice>,
    /// Owner's username (`None` when New or Ready).
    #[serde(default)]
    pub owner: Option<String>,
    /// Deployed OS (empty when not deployed).
    #[serde(default, deserialize_with = "nullable")]
    pub osystem: String,
    /// Deployed series (empty when not deployed).
    #[serde(default, deserialize_with = "nullable")]
    pub distro_series: String,
    /// `arch/subarch`.
    #[serde(default)]
    pub architecture: Option<String>,
    /// Tags.
    #[serde(default, deserialize_with = "nullable")]
    pub tag_names: Vec<String>,
    /// Why it is Broken, when it is.
    #[serde(default)]
    pub error_description: Option<String>,
    /// Resource pool.
    #[serde(default)]
    pub pool: Option<NamedRef>,
    /// Zone.
    #[serde(default)]
    pub zone: Option<NamedRef>,
    /// Domain.
    #[serde(default)]
    pub domain: Option<NamedRef>,
    /// Whether it is locked against changes.
    #[serde(default, deserialize_with = "nullable")]
    pub locked: bool,
    /// Hardware sync on (set by deploy).
    #[serde(default, deserialize_with = "nullable")]
    pub enable_hw_sync: bool,
    /// Hardware-sync interval, seconds.
    #[serde(default)]
    pub sync_interval: Option<u64>,
    /// Last hardware-sync report (Django ISO datetime), as sent.
    #[serde(default)]
    pub last_sync: Option<String>,
    /// Next expected report, as sent.
    #[serde(default)]
    pub next_sync: Option<String>,
}

/// A machine as a site-wide listing needs it: status, power, addresses and hardware sync,
/// nothing else. MAAS sends the whole object either way; this type lets the parser skip the
/// interface, block-device and hardware sets instead of building them (most of a 10,000-machine
/// listing's bytes).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct MachineSummary {
    /// MAAS's id.
    pub system_id: String,
    /// Hostname.
    #[serde(default, deserialize_with = "nullable")]
    pub hostname: String,
    /// Status (codes unknown to this client kept as [`NodeStatus::Unknown`]).
    #[serde(default = "unknown_status")]
    pub status: NodeStatus,
    /// MAAS's label of the status.
    #[serde(default, deserialize_with = "nullable")]
    pub status_name: String,
    /// Power state as MAAS last saw it.
    #[serde(default)]
    pub power_state: PowerState,
    /// Addresses MAAS knows for it.
    #[serde(default, deserialize_with = "nullable")]
    pub ip_addresses: Vec<String>,
    /// Hardware sync on.
    #[serde(default, deserialize_with = "nullable")]
    pub enable_hw_sync: bool,
    /// Hardware-sync interval, seconds.
    #[serde(default)]
    pub sync_interval: Option<u64>,
    /// Last hardware-sync report, as sent.
    #[serde(default)]
    pub last_sync: Option<String>,
    /// Next expected report, as sent.
    #[serde(default)]
    pub next_sync: Option<String>,
}

impl MachineSummary {
    /// The hardware-sync view of this machine (see [`HwSync::is_healthy`]).
    pub fn hw_sync(&self) -> HwSync {
        HwSync::from_fields(self.enable_hw_sync, self.sync_interval, self.last_sync.as_deref(), self.next_sync.as_deref())
    }
}

fn unknown_status() -> NodeStatus {
    NodeStatus::Unknown(-1)
}

impl Machine {
    /// The hardware-sync view of this machine (see [`HwSync::is_healthy`]).
    pub fn hw_sync(&self) -> HwSync {
        HwSync::from_fields(self.enable_hw_sync, self.sync_interval, self.last_sync.as_deref(), self.next_sync.as_deref())
    }

    /// The pool's name, if any.
    pub fn pool_name(&self) -> Option<&str> {
        self.pool.as_ref().map(|p| p.name.as_str())
    }

    /// The zone's name, if any.
    pub fn zone_name(&self) -> Option<&str> {
        self.zone.as_ref().map(|z| z.name.as_str())
    }
}

/// The machine's metadata token (what its hardware-sync agent signs with), from `get_token`.
/// `Debug` never shows the secret.
#[derive(Clone, PartialEq, Eq, Deserialize)]
pub struct MachineToken {
    /// Consumer key.
    pub consumer_key: String,
    /// Token key.
    pub token_key: String,
    /// Token secret.
    pub token_secret: String,
}

impl fmt::Debug for MachineToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MachineToken")
            .field("consumer_key", &self.consumer_key)
            .field("token_key", &self.token_key)
            .field("token_secret", &"<redacted>")
            .finish()
    }
}

/// BMC parameters (`power_address`, `power_user`, `power_pass`, …), sent as
/// `power_parameters_<name>` form fields and read back by `power_parameters`. `Debug` redacts
/// every value whose name looks like a credential.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct PowerParameters(pub BTreeMap<String, String>);

impl PowerParameters {
    /// IPMI parameters: address, user, password.
    pub fn ipmi(address: &str, user: &str, password: &str) -> PowerParameters {
        let mut map = BTreeMap::new();
        map.insert("power_address".to_owned(), address.to_owned());
        map.insert("power_user".to_owned(), user.to_owned());
        map.insert("power_pass".to_owned(), password.to_owned());
        PowerParameters(map)
    }

    /// Adds or replaces one parameter.
    pub fn with(mut self, name: &str, value: &str) -> PowerParameters {
        self.0.insert(name.to_owned(), value.to_owned());
        self
    }

    /// One parameter.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// `power_address` (the BMC's address for IPMI, Redfish, …).
    pub fn power_address(&self) -> Option<&str> {
        self.get("power_address")
    }

    /// Whether a parameter name denotes a credential (`power_pass`, `*secret*`, `*key*`, `*token*`).
    pub fn is_secret_name(name: &str) -> bool {
        let n = name.to_ascii_lowercase();
        ["pass", "secret", "key", "token"].iter().any(|w| n.contains(w))
    }

    /// The credential values, for scrubbing from error messages.
    pub(crate) fn secret_values(&self) -> impl Iterator<Item = &str> {
        self.0.iter().filter(|(k, _)| PowerParameters::is_secret_name(k)).map(|(_, v)| v.as_str())
    }
}

impl fmt::Debug for PowerParameters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut m = f.debug_map();
        for (k, v) in &self.0 {
            if PowerParameters::is_secret_name(k) {
                m.entry(k, &"<redacted>");
            } else {
                m.entry(k, v);
            }
        }
        m.finish()
    }
}

impl<'de> Deserialize<'de> for PowerParameters {
    /// MAAS's power parameters are a JSON object whose values are mostly strings; others
    /// (numbers, booleans) are kept as their JSON text, `null` as empty.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<PowerParameters, D::Error> {
        let raw = Option::<BTreeMap<String, serde_json::Value>>::deserialize(d)?.unwrap_or_default();
        Ok(PowerParameters(
            raw.into_iter()
                .map(|(k, v)| {
                    let v = match v {
                        serde_json::Value::String(s) => s,
                        serde_json::Value::Null => String::new(),
                        other => other.to_string(),
                    };
                    (k, v)
                })
                .collect(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machine_tolerates_nulls_and_extra_fields() {
        let m: Machine = serde_json::from_str(
            r#"{"system_id":"abc123","hostname":null,"status":4,"status_name":"Ready","power_state":null,
                "tag_names":null,"ip_addresses":null,"interface_set":null,"boot_disk":null,"owner":null,
                "osystem":null,"enable_hw_sync":null,"sync_interval":null,"last_sync":null,
                "zone":{"name":"default","id":1,"description":""},"pool":{"name":"gpu"},
                "hardware_info":{"cpu_model":"x"},"numanode_set":[{"index":0}],"future_field":[1,2]}"#,
        )
        .expect("tolerant");
        assert_eq!(m.system_id, "abc123");
        assert_eq!(m.status, NodeStatus::Ready);
        assert_eq!(m.power_state, PowerState::Unknown);
        assert!(m.tag_names.is_empty() && m.hostname.is_empty() && !m.enable_hw_sync);
        assert_eq!(m.zone_name(), Some("default"));
        assert_eq!(m.pool_name(), Some("gpu"));
        assert!(!m.hw_sync().enabled);
    }

    #[test]
    fn machine_reads_hw_sync_and_unknown_status() {
        let m: Machine = serde_json::from_str(
            r#"{"system_id":"x","status":42,"enable_hw_sync":true,"sync_interval":900,
                "last_sync":"2026-01-02T03:04:05.678Z","next_sync":"2026-01-02T03:19:05.678Z"}"#,
        )
        .expect("parse");
        assert_eq!(m.status, NodeStatus::Unknown(42));
        let h = m.hw_sync();
        assert!(h.enabled && h.sync_interval == Some(900) && h.last_sync.is_some() && h.next_sync.is_some());
    }

    #[test]
    fn version_parses() {
        let v: Version =
            serde_json::from_str(r#"{"capabilities":["authenticate-api"],"version":"3.7.0~beta1","subversion":""}"#).expect("version");
        assert_eq!(v.version, "3.7.0~beta1");
        assert_eq!(v.capabilities, ["authenticate-api"]);
    }

    #[test]
    fn token_and_power_parameters_redact_in_debug() {
        let t: MachineToken = serde_json::from_str(r#"{"consumer_key":"c","token_key":"k","token_secret":"tok-secret-1"}"#).expect("token");
        assert!(!format!("{t:?}").contains("tok-secret-1"));
        let p = PowerParameters::ipmi("10.0.0.5", "admin", "bmc-pass-1").with("power_driver", "LAN_2_0");
        let shown = format!("{p:?}");
        assert!(!shown.contains("bmc-pass-1"), "{shown}");
        assert!(shown.contains("10.0.0.5") && shown.contains("LAN_2_0"), "{shown}");
        assert_eq!(p.secret_values().collect::<Vec<_>>(), ["bmc-pass-1"]);
    }

    #[test]
    fn power_parameters_keep_non_strings_as_text() {
        let p: PowerParameters = serde_json::from_str(r#"{"power_address":"10.0.0.5","port":623,"k_g":null,"flag":true}"#).expect("params");
        assert_eq!(p.power_address(), Some("10.0.0.5"));
        assert_eq!(p.get("port"), Some("623"));
        assert_eq!(p.get("k_g"), Some(""));
        assert_eq!(p.get("flag"), Some("true"));
    }
}
