//! A machine's block devices (`/nodes/{system_id}/blockdevices/`) and choosing its boot disk.
//!
//! `set_boot_disk` is admin-only, Ready-only (409 otherwise), physical disks only (400), and
//! answers `200 text/plain OK` rather than JSON (facts §0i, §11), so its body is not parsed.

use serde::Deserialize;

use crate::client::{Call, MaasClient, seg};
use crate::error::MaasError;
use crate::types::nullable;

/// A block device.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct BlockDevice {
    /// Its id (the handle of `set_boot_disk`).
    pub id: i64,
    /// Kernel name, e.g. `sda`, `nvme0n1`.
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    /// Model string.
    #[serde(default)]
    pub model: Option<String>,
    /// Serial number.
    #[serde(default)]
    pub serial: Option<String>,
    /// Size in bytes.
    #[serde(default, deserialize_with = "nullable")]
    pub size: u64,
    /// Sector size in bytes.
    #[serde(default)]
    pub block_size: Option<u64>,
    /// `physical` or `virtual`.
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    /// Device path, e.g. `/dev/disk/by-dname/sda`.
    #[serde(default)]
    pub path: Option<String>,
    /// Stable path, e.g. `/dev/disk/by-id/…`.
    #[serde(default)]
    pub id_path: Option<String>,
    /// Tags (`ssd`, `rotary`, …).
    #[serde(default, deserialize_with = "nullable")]
    pub tags: Vec<String>,
}

impl BlockDevice {
    /// Whether this is a physical disk (the only kind that can be the boot disk).
    pub fn is_physical(&self) -> bool {
        self.kind.as_deref().is_none_or(|k| k == "physical")
    }

    /// Whether `wanted` is this device's name, serial or `id_path`.
    pub fn matches(&self, wanted: &str) -> bool {
        self.name == wanted || self.serial.as_deref() == Some(wanted) || self.id_path.as_deref() == Some(wanted)
    }
}

fn devices_path(system_id: &str) -> String {
    format!("/nodes/{}/blockdevices/", seg(system_id))
}

impl MaasClient {
    /// `GET /nodes/{id}/blockdevices/`.
    pub async fn list_block_devices(&self, system_id: &str) -> Result<Vec<BlockDevice>, MaasError> {
        self.json(Call::get(devices_path(system_id))).await
    }

    /// The block device of `system_id` whose name (`nvme0n1`), serial or stable `id_path`
    /// equals `wanted`: names change between boots and kernels, serials do not, so workflows
    /// that pick a boot disk by its serial use this before [`MaasClient::set_boot_disk`].
    pub async fn find_block_device(&self, system_id: &str, wanted: &str) -> Result<Option<BlockDevice>, MaasError> {
        let devices = self.list_block_devices(system_id).await?;
        Ok(devices.into_iter().find(|d| d.matches(wanted)))
    }

    /// `POST /nodes/{id}/blockdevices/{device}/?op=set_boot_disk` (admin, Ready only).
    pub async fn set_boot_disk(&self, system_id: &str, device_id: i64) -> Result<(), MaasError> {
        let path = format!("{}{device_id}/", devices_path(system_id));
        self.empty(Call::post(path).op("set_boot_disk")).await.map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_device_parses_tolerantly() {
        let d: BlockDevice = serde_json::from_str(
            r#"{"id":12,"name":"nvme0n1","model":"Samsung PM9A3","serial":"S1","size":3840755982336,"block_size":4096,
                "type":"physical","path":"/dev/disk/by-dname/nvme0n1","id_path":null,"tags":null,"partitions":[],
                "filesystem":null,"storage_pool":null,"used_for":"GPT partitioned"}"#,
        )
        .expect("parse");
        assert_eq!(d.size, 3_840_755_982_336);
        assert!(d.is_physical() && d.tags.is_empty());
        let v: BlockDevice = serde_json::from_str(r#"{"id":13,"name":"md0","type":"virtual","size":null}"#).expect("parse");
        assert!(!v.is_physical());
        assert_eq!(v.size, 0);
        assert!(d.matches("nvme0n1") && d.matches("S1") && !d.matches("sda") && !d.matches(""));
    }

    #[test]
    fn paths() {
        assert_eq!(devices_path("abc123"), "/nodes/abc123/blockdevices/");
    }
}
