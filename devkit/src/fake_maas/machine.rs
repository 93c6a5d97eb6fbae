//! The machine model and its JSON: what MAAS stores about a machine (status, owner, power,
//! interfaces with their subnet links, physical disks, the deployment's OS, user data and
//! hardware-sync fields, the metadata token) and how the REST API writes it out
//! (`DISPLAYED_MACHINE_FIELDS`' keys, ids and URIs, Django datetimes). The fake's own
//! knobs (armed failures, the address a test pinned) live here too, never in the JSON.

use std::collections::{BTreeMap, BTreeSet};

use rand::Rng;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::reply::{Millis, iso_or_null};
use super::status::{Power, Status};
use super::subnets::{Subnet, vlan_json};

/// The system_id alphabet (MAAS's znums: no vowels or look-alikes).
const ALPHABET: &[u8] = b"34678abcdefghkmnpqrstwxy";

/// The hardware-sync interval MAAS fills in when sync is on (config default `15m`).
pub const SYNC_INTERVAL_SECS: i64 = 900;

/// Per-table id counters, as MAAS's tables each have their own sequence.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Ids {
    machine: u64,
    interface: u64,
    link: u64,
    block: u64,
    /// Subnets.
    pub subnet: u64,
    /// Events.
    pub event: u64,
}

impl Ids {
    /// The next value of a counter.
    pub fn next(counter: &mut u64) -> u64 {
        *counter += 1;
        *counter
    }

    /// The next machine id.
    pub fn machine(&mut self) -> u64 {
        Ids::next(&mut self.machine)
    }

    /// The next interface id.
    pub fn interface(&mut self) -> u64 {
        Ids::next(&mut self.interface)
    }

    /// The next link id.
    pub fn link(&mut self) -> u64 {
        Ids::next(&mut self.link)
    }

    /// The next block device id.
    pub fn block(&mut self) -> u64 {
        Ids::next(&mut self.block)
    }
}

/// A subnet link on an interface.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Link {
    /// The link id (`unlink_subnet` takes it).
    pub id: u64,
    /// `auto`, `dhcp`, `static` or `link_up`.
    pub mode: String,
    /// The subnet's id.
    pub subnet: Option<u64>,
    /// The assigned address.
    pub ip_address: Option<String>,
}

/// A physical network interface.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Interface {
    /// The interface id.
    pub id: u64,
    /// Its name (`eno1`).
    pub name: String,
    /// Its MAC, lowercase with colons.
    pub mac_address: String,
    /// Its links.
    pub links: Vec<Link>,
}

/// A physical disk.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BlockDevice {
    /// The block device id.
    pub id: u64,
    /// Its name (`sda`).
    pub name: String,
    /// Its model.
    pub model: String,
    /// Its serial.
    pub serial: String,
    /// Its size in bytes.
    pub size: u64,
}

/// One machine as MAAS stores it, plus the fake's knobs.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[allow(missing_docs)] // the fields are MAAS's own, named as in the JSON
pub struct Machine {
    /// The internal id: the list is ordered by it.
    pub seq: u64,
    pub system_id: String,
    pub hostname: String,
    pub description: String,
    pub architecture: String,
    pub status: Status,
    pub owner: Option<String>,
    pub power_type: String,
    pub power_parameters: BTreeMap<String, String>,
    pub power: Power,
    pub interfaces: Vec<Interface>,
    pub boot_interface: Option<u64>,
    pub block_devices: Vec<BlockDevice>,
    pub boot_disk: Option<u64>,
    pub storage_layout: Option<String>,
    pub osystem: String,
    pub distro_series: String,
    pub hwe_kernel: Option<String>,
    pub agent_name: String,
    /// `user_data` exactly as deploy received it.
    pub user_data: Option<String>,
    pub enable_hw_sync: bool,
    pub sync_interval: Option<i64>,
    pub last_sync: Option<Millis>,
    pub ephemeral_deploy: bool,
    pub enable_kernel_crash_dump: bool,
    pub error_description: String,
    pub status_message: Option<String>,
    pub netboot: bool,
    pub cpu_count: i64,
    pub memory: i64,
    pub swap_size: Option<i64>,
    pub min_hwe_kernel: String,
    pub hardware_uuid: String,
    /// Whether it ever passed commissioning (release ends in Ready, else New).
    pub commissioned: bool,
    /// The status before it was marked broken.
    pub before_broken: Option<Status>,
    /// The metadata token `(consumer_key, token_key, token_secret)`, minted at deploy.
    pub token: Option<(String, String, String)>,
    /// The address a test pinned through the control API.
    pub pinned_ip: Option<String>,
    /// The address the fake handed out at deployment when no link had one.
    pub auto_ip: Option<String>,
    /// When the current in-flight status began.
    pub in_flight_since: Option<Millis>,
    /// Stages armed to fail (`commissioning`, `deployment`, `disk_erasing`, `releasing`).
    pub armed_failures: BTreeSet<String>,
    /// What an armed (or immediate) failure of a stage says, in its event and status message.
    #[serde(default)]
    pub armed_messages: BTreeMap<String, String>,
}

/// A random string from `alphabet`.
pub fn random_string(alphabet: &[u8], len: usize) -> String {
    let mut rng = rand::thread_rng();
    (0..len).map(|_| char::from(alphabet[rng.gen_range(0..alphabet.len())])).collect()
}

/// A fresh system_id, not in `taken`.
pub fn new_system_id(taken: &[&str]) -> String {
    loop {
        let id = random_string(ALPHABET, 6);
        if !taken.contains(&id.as_str()) {
            return id;
        }
    }
}

/// A random locally administered MAC.
pub fn random_mac() -> String {
    let mut rng = rand::thread_rng();
    format!("52:54:00:{:02x}:{:02x}:{:02x}", rng.r#gen::<u8>(), rng.r#gen::<u8>(), rng.r#gen::<u8>())
}

/// A MAAS-style random hostname (`adjective-noun`).
pub fn random_hostname() -> String {
    const ADJ: [&str; 8] = ["calm", "brave", "quick", "sharp", "keen", "bold", "fond", "wise"];
    const NOUN: [&str; 8] = ["otter", "mole", "lark", "heron", "lynx", "wren", "bison", "crane"];
    let mut rng = rand::thread_rng();
    format!("{}-{}-{}", ADJ[rng.gen_range(0..8)], NOUN[rng.gen_range(0..8)], random_string(ALPHABET, 3))
}

/// Normalises a MAC (`AA-BB-…` or `aabb…` → `aa:bb:…`); `None` when it is not one.
pub fn normalise_mac(text: &str) -> Option<String> {
    let hex: String = text.chars().filter(|c| !matches!(c, ':' | '-' | '.')).collect();
    if hex.len() != 12 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    let hex = hex.to_ascii_lowercase();
    Some((0..6).map(|i| &hex[2 * i..2 * i + 2]).collect::<Vec<_>>().join(":"))
}

/// The disks a freshly commissioned GPU host reports: a BOSS boot volume and one NVMe.
pub fn default_disks(ids: &mut Ids) -> Vec<BlockDevice> {
    let serial = random_string(b"0123456789ABCDEF", 16);
    vec![
        BlockDevice { id: ids.block(), name: "sda".into(), model: "DELLBOSS VD".into(), serial, size: 480_103_981_056 },
        BlockDevice {
            id: ids.block(),
            name: "nvme0n1".into(),
            model: "Dell Ent NVMe CM6 RI 3.84TB".into(),
            serial: random_string(b"0123456789ABCDEF", 12),
            size: 3_840_755_982_336,
        },
    ]
}

impl Machine {
    /// A New machine with no hardware yet.
    pub fn new(seq: u64, system_id: String, hostname: String) -> Machine {
        Machine {
            seq,
            hardware_uuid: uuid::Uuid::new_v4().to_string(),
            system_id,
            hostname,
            description: String::new(),
            architecture: "amd64/generic".into(),
            status: Status::New,
            owner: None,
            power_type: String::new(),
            power_parameters: BTreeMap::new(),
            power: Power::Unknown,
            interfaces: Vec::new(),
            boot_interface: None,
            block_devices: Vec::new(),
            boot_disk: None,
            storage_layout: None,
            osystem: String::new(),
            distro_series: String::new(),
            hwe_kernel: None,
            agent_name: String::new(),
            user_data: None,
            enable_hw_sync: false,
            sync_interval: None,
            last_sync: None,
            ephemeral_deploy: false,
            enable_kernel_crash_dump: false,
            error_description: String::new(),
            status_message: None,
            netboot: true,
            cpu_count: 0,
            memory: 0,
            swap_size: None,
            min_hwe_kernel: String::new(),
            commissioned: false,
            before_broken: None,
            token: None,
            pinned_ip: None,
            auto_ip: None,
            in_flight_since: None,
            armed_failures: BTreeSet::new(),
            armed_messages: BTreeMap::new(),
        }
    }

    /// Adds an interface; the first one becomes the boot interface.
    pub fn add_interface(&mut self, ids: &mut Ids, name: &str, mac: &str) {
        let id = ids.interface();
        self.interfaces.push(Interface { id, name: name.into(), mac_address: mac.into(), links: Vec::new() });
        self.boot_interface.get_or_insert(id);
    }

    /// Sets the disks; the first becomes the boot disk.
    pub fn set_disks(&mut self, disks: Vec<BlockDevice>) {
        self.boot_disk = disks.first().map(|d| d.id);
        self.block_devices = disks;
    }

    /// Whether MAAS can query this machine's power (no for `manual` and no power type).
    pub fn power_queryable(&self) -> bool {
        !matches!(self.power_type.as_str(), "" | "manual")
    }

    /// `hostname.maas`.
    pub fn fqdn(&self) -> String {
        format!("{}.maas", self.hostname)
    }

    /// Every address the machine has: link addresses, then the pinned or handed-out one.
    pub fn ip_addresses(&self) -> Vec<String> {
        let mut out: Vec<String> = self.interfaces.iter().flat_map(|i| i.links.iter().filter_map(|l| l.ip_address.clone())).collect();
        for ip in [&self.pinned_ip, &self.auto_ip].into_iter().flatten() {
            if !out.contains(ip) {
                out.push(ip.clone());
            }
        }
        out
    }

    /// `last_sync + sync_interval` when both are set.
    pub fn next_sync(&self) -> Option<Millis> {
        Some(self.last_sync? + self.sync_interval? * 1000)
    }

    /// A block device by numeric id or name.
    pub fn block_device(&self, key: &str) -> Option<&BlockDevice> {
        self.block_devices.iter().find(|d| d.id.to_string() == key || d.name == key)
    }

    /// An interface's index by numeric id or name.
    pub fn interface_index(&self, key: &str) -> Option<usize> {
        self.interfaces.iter().position(|i| i.id.to_string() == key || i.name == key)
    }

    /// A block device's JSON.
    pub fn block_device_json(&self, d: &BlockDevice) -> Value {
        let boot = self.boot_disk == Some(d.id);
        let partitioned = boot && self.storage_layout.is_some();
        json!({
            "id": d.id, "name": d.name, "model": d.model, "serial": d.serial, "size": d.size,
            "block_size": 512, "tags": if d.name.starts_with("nvme") { json!(["ssd"]) } else { json!([]) },
            "path": format!("/dev/disk/by-dname/{}", d.name),
            "id_path": format!("/dev/disk/by-id/wwn-0x{}", d.serial.to_ascii_lowercase()),
            "type": "physical", "uuid": null, "partitions": [],
            "partition_table_type": if partitioned { json!("GPT") } else { Value::Null },
            "filesystem": null, "storage_pool": null,
            "used_for": if partitioned { "GPT partitioned with 2 partitions" } else { "Unused" },
            "used_size": 0, "available_size": d.size, "numa_node": 0, "firmware_version": "1.0",
            "system_id": self.system_id,
            "resource_uri": format!("/MAAS/api/2.0/nodes/{}/blockdevices/{}/", self.system_id, d.id),
        })
    }

    /// An interface's JSON, links rendered with their subnets.
    pub fn interface_json(&self, i: &Interface, subnets: &[Subnet]) -> Value {
        let links: Vec<Value> = i
            .links
            .iter()
            .map(|l| {
                let mut v = json!({ "id": l.id, "mode": l.mode });
                if let Some(s) = l.subnet.and_then(|id| subnets.iter().find(|s| s.id == id)) {
                    v["subnet"] = s.to_json();
                }
                if let Some(ip) = &l.ip_address {
                    v["ip_address"] = json!(ip);
                }
                v
            })
            .collect();
        json!({
            "id": i.id, "name": i.name, "type": "physical", "mac_address": i.mac_address, "enabled": true,
            "links": links, "vlan": vlan_json(), "params": "", "tags": [], "parents": [], "children": [],
            "discovered": null, "effective_mtu": 1500, "link_connected": true, "interface_speed": 25000,
            "link_speed": 25000, "vendor": "Mellanox Technologies", "product": "MT2894 Family [ConnectX-6 Lx]",
            "firmware_version": "26.36.1010", "numa_node": 0, "sriov_max_vf": 0, "system_id": self.system_id,
            "resource_uri": format!("/MAAS/api/2.0/nodes/{}/interfaces/{}/", self.system_id, i.id),
        })
    }

    /// The machine object as `GET /machines/{id}/` answers it.
    pub fn to_json(&self, subnets: &[Subnet]) -> Value {
        let (script_status, script_name) = if self.status == Status::Commissioning {
            (1, "Running")
        } else if self.status == Status::FailedCommissioning {
            (3, "Failed")
        } else if self.commissioned {
            (2, "Passed")
        } else {
            (-1, "Unknown")
        };
        let interfaces: Vec<Value> = self.interfaces.iter().map(|i| self.interface_json(i, subnets)).collect();
        let boot_interface = self.interfaces.iter().find(|i| Some(i.id) == self.boot_interface).map(|i| self.interface_json(i, subnets));
        let disks: Vec<Value> = self.block_devices.iter().map(|d| self.block_device_json(d)).collect();
        let boot_disk = self.block_devices.iter().find(|d| Some(d.id) == self.boot_disk).map(|d| self.block_device_json(d));
        let storage_mb: u64 = self.block_devices.iter().map(|d| d.size / 1_000_000).sum();
        let mut v = json!({
            "system_id": self.system_id, "hostname": self.hostname, "description": self.description,
            "hardware_uuid": self.hardware_uuid,
            "domain": {"authoritative": true, "ttl": null, "resource_record_count": 0, "name": "maas", "id": 0,
                       "is_default": true, "resource_uri": "/MAAS/api/2.0/domains/0/"},
            "fqdn": self.fqdn(), "owner": self.owner, "owner_data": {}, "locked": false,
            "architecture": self.architecture, "cpu_count": self.cpu_count, "cpu_speed": if self.commissioned { 2400 } else { 0 },
            "memory": self.memory, "swap_size": self.swap_size, "storage": storage_mb,
            "status": self.status.code(), "status_name": self.status.label(), "status_message": self.status_message,
            "status_action": "", "osystem": self.osystem, "distro_series": self.distro_series,
            "ephemeral_deploy": self.ephemeral_deploy, "error_description": self.error_description,
            "netboot": self.netboot, "power_type": self.power_type, "power_state": self.power.as_str(),
            "tag_names": [], "address_ttl": null, "ip_addresses": self.ip_addresses(),
        });
        let more = json!({
            "interface_set": interfaces, "boot_interface": boot_interface, "boot_disk": boot_disk,
            "blockdevice_set": disks.clone(), "physicalblockdevice_set": disks, "virtualblockdevice_set": [],
            "iscsiblockdevice_set": [], "special_filesystems": [], "cache_sets": [], "raids": [],
            "volume_groups": [], "bcaches": [],
            "zone": {"name": "default", "description": "", "id": 1, "resource_uri": "/MAAS/api/2.0/zones/default/"},
            "pool": {"name": "default", "description": "Default pool", "id": 0, "resource_uri": "/MAAS/api/2.0/resourcepool/0/"},
            "min_hwe_kernel": self.min_hwe_kernel, "hwe_kernel": self.hwe_kernel,
            "node_type": 0, "node_type_name": "Machine",
            "commissioning_status": script_status, "commissioning_status_name": script_name,
            "testing_status": script_status, "testing_status_name": script_name,
            "hardware_info": {"system_vendor": "Dell Inc.", "system_product": "PowerEdge XE9680",
                              "system_serial": "FAKE000", "mainboard_vendor": "Dell Inc.", "cpu_model": "Intel(R) Xeon(R) Platinum 8480+"},
        });
        let rest = json!({
            "numanode_set": [{"index": 0, "memory": self.memory, "cores": (0..self.cpu_count).collect::<Vec<_>>(), "hugepages_set": []}],
            "workload_annotations": {}, "enable_hw_sync": self.enable_hw_sync, "sync_interval": self.sync_interval,
            "last_sync": iso_or_null(self.last_sync), "next_sync": iso_or_null(self.next_sync()),
            "enable_kernel_crash_dump": self.enable_kernel_crash_dump, "is_dpu": false, "pod": null,
            "virtualmachine_id": null, "bios_boot_method": "uefi",
            "last_applied_storage_layout": self.storage_layout.clone().unwrap_or_default(),
            "default_gateways": {"ipv4": {"gateway_ip": null, "link_id": null}, "ipv6": {"gateway_ip": null, "link_id": null}},
            "resource_uri": format!("/MAAS/api/2.0/machines/{}/", self.system_id),
        });
        for part in [more, rest] {
            if let (Some(obj), Value::Object(extra)) = (v.as_object_mut(), part) {
                obj.extend(extra);
            }
        }
        for k in [
            "cpu_test_status",
            "memory_test_status",
            "storage_test_status",
            "network_test_status",
            "interface_test_status",
            "other_test_status",
        ] {
            v[k] = json!(-1);
            v[format!("{k}_name")] = json!("Unknown");
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_macs_and_defaults() {
        let id = new_system_id(&[]);
        assert_eq!(id.len(), 6);
        assert!(id.bytes().all(|b| ALPHABET.contains(&b)));
        assert_eq!(normalise_mac("AA-bb-CC-00-11-22").as_deref(), Some("aa:bb:cc:00:11:22"));
        assert_eq!(normalise_mac("zz"), None);
        assert!(normalise_mac(&random_mac()).is_some());
        let mut ids = Ids::default();
        let disks = default_disks(&mut ids);
        assert_eq!((disks[0].name.as_str(), disks[0].model.as_str(), disks[1].name.as_str()), ("sda", "DELLBOSS VD", "nvme0n1"));
    }

    #[test]
    fn json_keys_and_sync_fields() {
        let mut ids = Ids::default();
        let mut m = Machine::new(1, "abc123".into(), "gpu-01".into());
        m.add_interface(&mut ids, "eno1", "52:54:00:00:00:01");
        m.set_disks(default_disks(&mut ids));
        m.enable_hw_sync = true;
        m.sync_interval = Some(SYNC_INTERVAL_SECS);
        m.last_sync = Some(1_767_322_800_000);
        let v = m.to_json(&[]);
        for k in [
            "system_id",
            "status",
            "status_name",
            "owner",
            "power_state",
            "interface_set",
            "boot_interface",
            "blockdevice_set",
            "physicalblockdevice_set",
            "boot_disk",
            "ip_addresses",
            "osystem",
            "distro_series",
            "enable_hw_sync",
            "sync_interval",
            "last_sync",
            "next_sync",
            "resource_uri",
        ] {
            assert!(v.get(k).is_some(), "{k}");
        }
        assert_eq!(v["status_name"], "New");
        assert_eq!(v["fqdn"], "gpu-01.maas");
        assert_eq!(v["last_sync"], "2026-01-02T03:00:00.000Z");
        assert_eq!(v["next_sync"], "2026-01-02T03:15:00.000Z");
        assert_eq!(v["boot_disk"]["name"], "sda");
        assert_eq!(v["boot_interface"]["mac_address"], "52:54:00:00:00:01");
        assert_eq!(v["resource_uri"], "/MAAS/api/2.0/machines/abc123/");
    }
}
