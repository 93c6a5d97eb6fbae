//! `[tasks]` in `agent.toml`: what the maintenance tasks may touch on this host. Every path
//! is configurable so the tasks run unchanged against a temporary root in tests (and in
//! `drover dev`'s sandboxes); the defaults are the real system's.
//!
//! ```toml
//! [tasks]
//! tenant_uid_min = 10000            # tenant users and processes: uid in [min, max]
//! tenant_uid_max = 59999
//! storage_roots = ["/scratch", "/var/tmp/tenant"]   # storage_cleanup empties these, keeps them
//! weka_fs_types = ["wekafs"]         # tenant mounts unmounted when the scope includes weka
//! drain_hook = ["/usr/local/bin/stop-tenant-workloads"]   # run by node.drain (argv, no shell)
//! ```

use std::path::PathBuf;

use serde::Deserialize;

/// The `[tasks]` settings.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TaskSettings {
    /// Lowest tenant uid (inclusive). Only users and processes in the tenant range are ever
    /// removed or stopped; root's and the system's never are.
    pub tenant_uid_min: u32,
    /// Highest tenant uid (inclusive).
    pub tenant_uid_max: u32,
    /// The passwd database read for users (and edited through `userdel`).
    pub passwd_file: PathBuf,
    /// Where processes are listed.
    pub proc_dir: PathBuf,
    /// The mount table read for tenant mounts and mount points.
    pub mountinfo_file: PathBuf,
    /// Scratch roots `node.storage_cleanup` empties (each root itself is kept, with its mode).
    pub storage_roots: Vec<PathBuf>,
    /// Filesystem types of tenant shared-storage mounts.
    pub weka_fs_types: Vec<String>,
    /// `nvidia-smi`.
    pub nvidia_smi: PathBuf,
    /// `amd-smi`.
    pub amd_smi: PathBuf,
    /// `rocm-smi` (older AMD stacks).
    pub rocm_smi: PathBuf,
    /// `dcgmi`.
    pub dcgmi: PathBuf,
    /// How long one GPU tool call may take (a reset takes tens of seconds).
    pub gpu_tool_timeout_secs: u64,
    /// How long to wait for tenant processes to exit after SIGTERM before SIGKILL.
    pub process_stop_grace_secs: u64,
    /// `node.drain`'s hook (argv, run without a shell); empty: no hook.
    pub drain_hook: Vec<String>,
    /// The marker `node.drain` writes to cordon the host locally.
    pub cordon_file: PathBuf,
    /// MAAS hardware-sync credentials.
    pub maas_creds_file: PathBuf,
    /// The MAAS hardware-sync timer unit.
    pub hw_sync_timer: String,
    /// The MAAS hardware-sync service unit.
    pub hw_sync_service: String,
    /// `userdel`.
    pub userdel: PathBuf,
    /// `loginctl` (ends a user's sessions).
    pub loginctl: PathBuf,
    /// `umount`.
    pub umount: PathBuf,
    /// The agent's own unit (`node.uninstall` disables and stops it).
    pub agent_unit: String,
    /// Files `node.uninstall` removes besides the state dir (the unit file, the binary, the
    /// config).
    pub uninstall_paths: Vec<PathBuf>,
}

impl Default for TaskSettings {
    fn default() -> Self {
        TaskSettings {
            tenant_uid_min: 10_000,
            tenant_uid_max: 59_999,
            passwd_file: "/etc/passwd".into(),
            proc_dir: "/proc".into(),
            mountinfo_file: "/proc/self/mountinfo".into(),
            storage_roots: Vec::new(),
            weka_fs_types: vec!["wekafs".to_owned()],
            nvidia_smi: "nvidia-smi".into(),
            amd_smi: "amd-smi".into(),
            rocm_smi: "rocm-smi".into(),
            dcgmi: "dcgmi".into(),
            gpu_tool_timeout_secs: 120,
            process_stop_grace_secs: 10,
            drain_hook: Vec::new(),
            cordon_file: "/run/drover/cordoned".into(),
            maas_creds_file: "/etc/maas/maas-machine-creds.yml".into(),
            hw_sync_timer: "maas_hardware_sync.timer".to_owned(),
            hw_sync_service: "maas_hardware_sync.service".to_owned(),
            userdel: "userdel".into(),
            loginctl: "loginctl".into(),
            umount: "umount".into(),
            agent_unit: "drover-agent.service".to_owned(),
            uninstall_paths: vec![
                "/etc/systemd/system/drover-agent.service".into(),
                "/usr/local/bin/drover-agent".into(),
                "/etc/drover/agent.toml".into(),
            ],
        }
    }
}

impl TaskSettings {
    /// Whether `uid` is a tenant's.
    pub fn is_tenant_uid(&self, uid: u32) -> bool {
        (self.tenant_uid_min..=self.tenant_uid_max).contains(&uid)
    }

    /// Checks the rules the types cannot: `(key, what is wrong)` of the first broken one.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        // Below 1000 are the system's accounts on every distribution: never a tenant's.
        if self.tenant_uid_min < 1000 || self.tenant_uid_min > self.tenant_uid_max {
            return Err(("tasks.tenant_uid_min", "must be at least 1000 and at most tenant_uid_max".to_owned()));
        }
        for root in &self.storage_roots {
            if !root.is_absolute() || root.parent().is_none() || root.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
                return Err(("tasks.storage_roots", format!("{} must be an absolute path below / without `..`", root.display())));
            }
        }
        if self.gpu_tool_timeout_secs == 0 || self.gpu_tool_timeout_secs > 3600 {
            return Err(("tasks.gpu_tool_timeout_secs", "must be between 1 and 3600".to_owned()));
        }
        if self.process_stop_grace_secs > 600 {
            return Err(("tasks.process_stop_grace_secs", "must be at most 600".to_owned()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_and_system_accounts_are_never_tenants() {
        let s = TaskSettings::default();
        assert!(!s.is_tenant_uid(0) && !s.is_tenant_uid(999) && !s.is_tenant_uid(65_534));
        assert!(s.is_tenant_uid(10_000) && s.is_tenant_uid(59_999));
        let bad = TaskSettings { tenant_uid_min: 0, ..TaskSettings::default() };
        assert_eq!(bad.validate().map_err(|(k, _)| k), Err("tasks.tenant_uid_min"));
    }

    #[test]
    fn storage_roots_must_be_absolute_and_not_the_root() {
        for root in ["scratch", "/", "/scratch/../etc"] {
            let s = TaskSettings { storage_roots: vec![root.into()], ..TaskSettings::default() };
            assert_eq!(s.validate().map_err(|(k, _)| k), Err("tasks.storage_roots"), "{root}");
        }
        let s = TaskSettings { storage_roots: vec!["/scratch".into()], ..TaskSettings::default() };
        assert!(s.validate().is_ok());
    }
}
