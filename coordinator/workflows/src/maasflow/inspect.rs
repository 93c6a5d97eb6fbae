//! Reading MAAS's answers for the onboarding's decisions (`bare-metal-lifecycle.md` §4.3):
//! which block device is the boot disk (ConfigureStorage) and what kind of deploy failure
//! MAAS's events describe (ClassifyDeployFailure). Pure functions over the client's types.
//!
//! **Boot disk.** The BOSS card (Dell's Boot Optimized Storage Solution, an M.2 mirror) is
//! where the OS goes; the NVMe drives are tenants' scratch. A disk is a candidate when its
//! model, name or `id_path` contains the profile's pattern, or one of the seed's markers
//! (`boss`, `boot optimized`, `m.2`), case-insensitively. Exactly one candidate is the boot
//! disk; none, or several, is `hardware_mismatch` for an operator — guessing would install
//! the OS over a tenant's disk.
//!
//! **Deploy failures.** A failed deployment whose events or status message speak of the
//! datasource or cloud-init (the OS booted but first boot did not finish) may be retried
//! within the profile's bound (§4.6); anything else is generic and stops automatic retries.

use drover_maas::{BlockDevice, Event};
use serde::Serialize;

use super::taxonomy::MaasFailureClass;

/// Markers of a boot-optimised device, beside the profile's own pattern.
const BOOT_MARKERS: [&str; 3] = ["boss", "boot optimized", "m.2"];

/// The boot disk, or why there is none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub enum BootDisk {
    /// This device.
    Found {
        /// MAAS's block-device id.
        id: i64,
        /// Its name, e.g. `sda`.
        name: String,
    },
    /// No device, or more than one, matches.
    Mismatch {
        /// What was seen (names and models), for the diagnostics.
        detail: String,
    },
}

impl BootDisk {
    /// The failure class of a mismatch.
    pub const CLASS: MaasFailureClass = MaasFailureClass::HardwareMismatch;
}

fn matches(d: &BlockDevice, needles: &[String]) -> bool {
    let fields = [Some(d.name.as_str()), d.model.as_deref(), d.id_path.as_deref()];
    fields.into_iter().flatten().map(str::to_ascii_lowercase).any(|f| needles.iter().any(|n| f.contains(n.as_str())))
}

/// Picks the boot disk among a machine's physical block devices by `pattern` (the profile's
/// `boot_disk_pattern`) and the seed's markers.
pub fn boot_disk(devices: &[BlockDevice], pattern: &str) -> BootDisk {
    let mut needles: Vec<String> = BOOT_MARKERS.iter().map(|s| (*s).to_owned()).collect();
    let p = pattern.trim().to_ascii_lowercase();
    if !p.is_empty() && !needles.contains(&p) {
        needles.push(p);
    }
    let physical = devices.iter().filter(|d| d.kind.as_deref().is_none_or(|k| k == "physical"));
    let found: Vec<&BlockDevice> = physical.filter(|d| matches(d, &needles)).collect();
    match found.as_slice() {
        [one] => BootDisk::Found { id: one.id, name: one.name.clone() },
        [] => BootDisk::Mismatch { detail: format!("no block device matches {}: saw {}", needles.join(" | "), seen(devices)) },
        many => BootDisk::Mismatch {
            detail: format!(
                "{} block devices match {}: {}; refusing to guess",
                many.len(),
                needles.join(" | "),
                many.iter().map(|d| d.name.as_str()).collect::<Vec<_>>().join(", ")
            ),
        },
    }
}

fn seen(devices: &[BlockDevice]) -> String {
    if devices.is_empty() {
        return "no block devices".into();
    }
    devices.iter().map(|d| format!("{} ({})", d.name, d.model.as_deref().unwrap_or("no model"))).collect::<Vec<_>>().join(", ")
}

/// What kind of deploy failure MAAS describes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeployFailure {
    /// The datasource / cloud-init class: the bounded redeploy of the profile applies.
    DatasourceLike,
    /// Anything else: no automatic retry.
    Generic,
}

/// Phrases of datasource / cloud-init failures in MAAS's events and status messages.
const DATASOURCE_MARKERS: [&str; 5] = ["datasource", "cloud-init", "cloudinit", "modules-final", "final stage"];

/// Classifies a failed deployment from the machine's status message and its recent events
/// (any order). The events' `description` and `type` are searched, case-insensitively.
pub fn classify_deploy_failure(status_message: Option<&str>, events: &[Event]) -> DeployFailure {
    let texts =
        status_message.into_iter().map(str::to_owned).chain(events.iter().flat_map(|e| [e.event_type.clone(), e.description.clone()]));
    for text in texts {
        let t = text.to_ascii_lowercase();
        if DATASOURCE_MARKERS.iter().any(|m| t.contains(m)) {
            return DeployFailure::DatasourceLike;
        }
    }
    DeployFailure::Generic
}

/// A bounded, single-line extract of upstream text for the read model (§4.12): control
/// characters replaced, at most `max` characters. Never pass it a secret.
pub fn snippet(text: &str, max: usize) -> String {
    let mut out: String = text.chars().take(max).map(|c| if c.is_control() { ' ' } else { c }).collect();
    if text.chars().count() > max {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disk(id: i64, name: &str, model: &str) -> BlockDevice {
        serde_json::from_value(
            serde_json::json!({ "id": id, "name": name, "model": model, "size": 480_000_000_000u64, "type": "physical" }),
        )
        .expect("block device")
    }

    #[test]
    fn the_boss_card_is_the_boot_disk() {
        let devices =
            vec![disk(1, "nvme0n1", "Dell Ent NVMe P5600"), disk(2, "sda", "DELLBOSS VD"), disk(3, "nvme1n1", "Dell Ent NVMe P5600")];
        assert_eq!(boot_disk(&devices, "BOSS"), BootDisk::Found { id: 2, name: "sda".into() });
    }

    #[test]
    fn no_boss_card_is_a_hardware_mismatch_naming_what_was_seen() {
        let devices = vec![disk(1, "nvme0n1", "Dell Ent NVMe P5600")];
        match boot_disk(&devices, "BOSS") {
            BootDisk::Mismatch { detail } => assert!(detail.contains("nvme0n1") && detail.contains("P5600"), "{detail}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn two_candidates_are_refused_rather_than_guessed() {
        let devices = vec![disk(1, "sda", "DELLBOSS VD"), disk(2, "sdb", "M.2 SATA SSD")];
        assert!(matches!(boot_disk(&devices, "BOSS"), BootDisk::Mismatch { .. }));
    }

    #[test]
    fn a_profile_pattern_finds_other_boot_devices() {
        let devices = vec![disk(1, "sda", "SuperBoot 240"), disk(2, "nvme0n1", "scratch")];
        assert_eq!(boot_disk(&devices, "superboot"), BootDisk::Found { id: 1, name: "sda".into() });
    }

    fn event(kind: &str, description: &str) -> Event {
        serde_json::from_value(serde_json::json!({
            "id": 1, "node": "abc123", "hostname": "gpu-07", "username": "admin", "level": "ERROR",
            "created": "Fri, 07 Dec. 2018 20:11:08", "type": kind, "description": description,
        }))
        .expect("event")
    }

    #[test]
    fn datasource_failures_are_told_apart() {
        let ds = [event("Failed deployment", "cloud-init modules-final did not complete")];
        assert_eq!(classify_deploy_failure(None, &ds), DeployFailure::DatasourceLike);
        assert_eq!(classify_deploy_failure(Some("No datasource found"), &[]), DeployFailure::DatasourceLike);
        let power = [event("Failed deployment", "Power on failed: BMC did not answer")];
        assert_eq!(classify_deploy_failure(Some("Failed deployment"), &power), DeployFailure::Generic);
    }

    #[test]
    fn snippets_are_bounded_single_lines() {
        assert_eq!(snippet("a\nb\tc", 10), "a b c");
        assert_eq!(snippet("abcdef", 3), "abc…");
    }
}
