//! The host's health as the agent reports it at each check-in ([`HealthReport`]): uptime, load,
//! memory, CPU and disk usage (sysinfo), failed systemd units, the GPU summary and the MAAS
//! hardware-sync state.
//!
//! [`HealthCollector`] keeps the one `sysinfo` state the agent needs between collections
//! (CPU counters, so CPU usage is the average over the check-in interval) and refreshes only
//! what the report uses: memory, CPU usage and disk space. It never loads the process list,
//! which would cost more memory than the whole agent is allowed (< 15 MiB RSS).
//!
//! The agent's own state directory is reported too ([`state_dir_health`]): not ready while
//! its filesystem has less than [`MIN_STATE_FREE_BYTES`] free, or while the agent's last
//! write there failed for want of space and no room has been freed since. An agent that
//! cannot write its records cannot raise its version floors or journal the tasks it took.
//!
//! A part that cannot be collected (systemd unreachable, GPU driver down, a configured disk
//! not mounted) does not fail the report: it is left out and named in
//! [`HealthReport::collect_errors`]. The calls are blocking (D-Bus, `nvidia-smi`): run
//! [`collect`] (the process-wide collector) or [`HealthCollector::collect`] off the async
//! runtime.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use drover_proto::report::{DiskUsage, GpuSummary, HealthReport, HwSyncState, StateDirHealth};
use drover_proto::time::Time;
use serde::Deserialize;
use sysinfo::{DiskRefreshKind, Disks, MemoryRefreshKind, System};

use crate::exec::{CommandRunner, SystemRunner};
use crate::gpu::{self, GpuError, GpuTool, NvidiaSmi};
use crate::state::StateDir;
use crate::systemd::{Systemd, SystemdError};

/// Free space below which the state directory is reported not ready: its largest record, a
/// cached manifest, is a few hundred KiB, and an atomic write needs room for the old file
/// and the new one at once.
pub const MIN_STATE_FREE_BYTES: u64 = 1 << 20;

/// Where MAAS keeps the machine's hardware-sync credentials.
pub const DEFAULT_MAAS_CREDS_FILE: &str = "/etc/maas/maas-machine-creds.yml";
/// The MAAS hardware-sync timer (MAAS installs `/lib/systemd/system/maas_hardware_sync.timer`;
/// the same unit `node.hw_sync_reseed` restarts, `[tasks].hw_sync_timer`).
pub const DEFAULT_HW_SYNC_TIMER: &str = "maas_hardware_sync.timer";

/// The configurable parts of health collection (the `[health]` table of `agent.toml`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HealthSettings {
    /// The MAAS hardware-sync credentials file whose presence is reported.
    pub maas_creds_file: PathBuf,
    /// The hardware-sync timer unit whose activity is reported.
    pub hw_sync_timer: String,
    /// The `nvidia-smi` program (a bare name is looked up on `PATH`).
    pub nvidia_smi: PathBuf,
    /// Mount points whose usage is reported; empty: every filesystem sysinfo lists.
    pub disks: Vec<PathBuf>,
}

impl Default for HealthSettings {
    fn default() -> Self {
        HealthSettings {
            maas_creds_file: PathBuf::from(DEFAULT_MAAS_CREDS_FILE),
            hw_sync_timer: DEFAULT_HW_SYNC_TIMER.to_owned(),
            nvidia_smi: PathBuf::from(gpu::DEFAULT_NVIDIA_SMI),
            disks: vec![PathBuf::from("/")],
        }
    }
}

impl HealthSettings {
    /// The GPU tool these settings name ([`NvidiaSmi`] on the real [`SystemRunner`]).
    pub fn gpu_tool(&self) -> NvidiaSmi<SystemRunner> {
        NvidiaSmi::with_program(SystemRunner, &self.nvidia_smi, gpu::DEFAULT_QUERY_TIMEOUT)
    }
}

/// A part of the report that could not be collected; its text goes to
/// [`HealthReport::collect_errors`].
#[derive(Debug, thiserror::Error)]
pub enum HealthError {
    /// A systemd query failed.
    #[error("{what}: {source}")]
    Systemd {
        /// What was asked (`failed units`, `hardware-sync timer maas_hardware_sync.timer`).
        what: String,
        /// The failure.
        #[source]
        source: SystemdError,
    },
    /// The GPU tool failed (a missing tool is not an error: the host has no GPUs).
    #[error("GPU summary: {source}")]
    Gpu {
        /// The failure.
        #[source]
        source: GpuError,
    },
    /// A configured disk is not a mounted filesystem.
    #[error("disk {}: not a mount point sysinfo lists", mount_point.display())]
    DiskNotMounted {
        /// The mount point configured.
        mount_point: PathBuf,
    },
}

/// Collects [`HealthReport`]s; keep one for the agent's lifetime.
pub struct HealthCollector {
    settings: HealthSettings,
    system: System,
    disks: Disks,
    /// When the CPU counters were last read; usage is measured from there.
    cpu_read_at: Instant,
}

impl std::fmt::Debug for HealthCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HealthCollector").field("settings", &self.settings).finish_non_exhaustive()
    }
}

impl HealthCollector {
    /// A collector; reads the CPU counters once so the first report can measure from here.
    pub fn new(settings: HealthSettings) -> Self {
        let mut system = System::new();
        system.refresh_cpu_usage();
        HealthCollector { settings, system, disks: Disks::new(), cpu_read_at: Instant::now() }
    }

    /// Its settings.
    pub fn settings(&self) -> &HealthSettings {
        &self.settings
    }

    /// Collects a report stamped `now`. `gpu` is the host's GPU tool, if it may have one.
    pub fn collect(&mut self, now: Time, systemd: &dyn Systemd, gpu: Option<&dyn GpuTool>) -> HealthReport {
        let mut errors: Vec<HealthError> = Vec::new();
        self.system.refresh_memory_specifics(MemoryRefreshKind::nothing().with_ram());
        let failed_units = systemd.failed_units().unwrap_or_else(|source| {
            errors.push(HealthError::Systemd { what: "failed units".to_owned(), source });
            Vec::new()
        });
        let hw_sync = self.hw_sync(systemd, &mut errors);
        let gpu = gpu.and_then(|tool| gpu_summary(tool, &mut errors));
        let disks = self.disk_usage(&mut errors);
        let cpu_usage_pct = self.cpu_usage();
        HealthReport {
            collected_at: now,
            uptime_secs: System::uptime(),
            load_avg_1m: System::load_average().one,
            mem_total_bytes: self.system.total_memory(),
            mem_available_bytes: self.system.available_memory(),
            cpu_usage_pct,
            disks,
            failed_units,
            gpu,
            hw_sync,
            collect_errors: errors.iter().map(ToString::to_string).collect(),
            state_dir: None,
        }
    }

    /// CPU busy share since the last reading; `None` when too little time passed for the
    /// kernel's counters to mean anything.
    fn cpu_usage(&mut self) -> Option<f64> {
        let elapsed = self.cpu_read_at.elapsed();
        if elapsed < sysinfo::MINIMUM_CPU_UPDATE_INTERVAL {
            return None;
        }
        self.system.refresh_cpu_usage();
        self.cpu_read_at = Instant::now();
        Some(f64::from(self.system.global_cpu_usage()).clamp(0.0, 100.0))
    }

    fn disk_usage(&mut self, errors: &mut Vec<HealthError>) -> Vec<DiskUsage> {
        self.disks.refresh_specifics(true, DiskRefreshKind::nothing().with_storage());
        let usage = |d: &sysinfo::Disk| DiskUsage {
            mount_point: d.mount_point().display().to_string(),
            total_bytes: d.total_space(),
            available_bytes: d.available_space(),
        };
        if self.settings.disks.is_empty() {
            return self.disks.list().iter().map(usage).collect();
        }
        let mut out = Vec::new();
        for wanted in &self.settings.disks {
            // The last entry wins: a later mount hides an earlier one on the same point.
            match self.disks.list().iter().rev().find(|d| d.mount_point() == wanted.as_path()) {
                Some(d) => out.push(usage(d)),
                None => errors.push(HealthError::DiskNotMounted { mount_point: wanted.clone() }),
            }
        }
        out
    }

    /// `None` on a host that is not MAAS-managed (no credentials and no timer unit).
    fn hw_sync(&self, systemd: &dyn Systemd, errors: &mut Vec<HealthError>) -> Option<HwSyncState> {
        let creds_present = is_file(&self.settings.maas_creds_file);
        let timer = &self.settings.hw_sync_timer;
        let (timer_known, timer_active) = match systemd.unit_status(timer) {
            Ok(Some(status)) => (true, status.active_state == "active"),
            Ok(None) => (false, false),
            Err(source) => {
                errors.push(HealthError::Systemd { what: format!("hardware-sync timer {timer}"), source });
                (false, false)
            }
        };
        (creds_present || timer_known).then_some(HwSyncState { creds_present, timer_active })
    }
}

/// The agent's one collector, kept between check-ins so CPU usage covers the interval since
/// the previous report.
static COLLECTOR: Mutex<Option<HealthCollector>> = Mutex::new(None);

/// Collects a report now with the process-wide [`HealthCollector`] (created on first use, and
/// again if `settings` change), asking `nvidia-smi` (as `settings` names it) through `runner`.
/// Blocking: call it off the async runtime.
/// The report carries the state directory `state`'s health ([`state_dir_health`]).
pub fn collect<R: CommandRunner + Clone>(settings: &HealthSettings, state: &StateDir, systemd: &dyn Systemd, runner: &R) -> HealthReport {
    let gpu = NvidiaSmi::with_program(runner.clone(), &settings.nvidia_smi, gpu::DEFAULT_QUERY_TIMEOUT);
    let mut slot = COLLECTOR.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let collector = match slot.take() {
        Some(c) if c.settings == *settings => slot.insert(c),
        _ => slot.insert(HealthCollector::new(settings.clone())),
    };
    let mut report = collector.collect(crate::probes::wall_clock(), systemd, Some(&gpu));
    report.state_dir = Some(state_dir_health(state));
    report
}

/// Whether the agent can keep its records in `state` (see the module docs). A filesystem
/// whose space cannot be read is not ready either, with the error as the reason.
pub fn state_dir_health(state: &StateDir) -> StateDirHealth {
    let path = state.path().display().to_string();
    let space = match drover_fsio::space(state.path()) {
        Ok(s) => s,
        Err(e) => {
            let reason = Some(format!("cannot read the free space of the state directory: {e}"));
            return StateDirHealth { path, total_bytes: 0, available_bytes: 0, ready: false, reason };
        }
    };
    let failed = state.out_of_space().filter(|f| space.available_bytes <= f.available_bytes);
    let reason = if let Some(f) = failed {
        Some(format!("disk full: writing {} failed for want of space and no room has been freed since", f.file.display()))
    } else if space.available_bytes < MIN_STATE_FREE_BYTES {
        Some(format!("disk full: {} bytes free, below the {MIN_STATE_FREE_BYTES} the agent's records need", space.available_bytes))
    } else {
        None
    };
    StateDirHealth { path, total_bytes: space.total_bytes, available_bytes: space.available_bytes, ready: reason.is_none(), reason }
}

fn is_file(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file())
}

fn gpu_summary(tool: &dyn GpuTool, errors: &mut Vec<HealthError>) -> Option<GpuSummary> {
    gpu::summarize(tool.vendor(), tool.query_gpus()).unwrap_or_else(|source| {
        errors.push(HealthError::Gpu { source });
        None
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::gpu::{ComputeApp, GpuInfo};
    use crate::systemd::UnitStatus;

    /// systemd with canned answers; `None` for a query means "the bus is down".
    struct FakeSystemd {
        failed: Option<Vec<String>>,
        units: Option<Vec<(String, UnitStatus)>>,
    }

    fn down(method: &'static str) -> SystemdError {
        SystemdError::Connect { address: "unix:path=/run/dbus/system_bus_socket".to_owned(), message: format!("{method}: refused") }
    }

    impl Systemd for FakeSystemd {
        fn start_transient_service(&self, _: &str, _: &str, _: &[String]) -> Result<(), SystemdError> {
            unreachable!("health never starts units")
        }
        fn unit_status(&self, unit: &str) -> Result<Option<UnitStatus>, SystemdError> {
            let units = self.units.as_ref().ok_or_else(|| down("GetUnit"))?;
            Ok(units.iter().find(|(n, _)| n == unit).map(|(_, s)| s.clone()))
        }
        fn wait_finished(&self, _: &str, _: Duration) -> Result<UnitStatus, SystemdError> {
            unreachable!("health never waits on units")
        }
        fn failed_units(&self) -> Result<Vec<String>, SystemdError> {
            self.failed.clone().ok_or_else(|| down("ListUnitsFiltered"))
        }
        fn restart_unit(&self, _: &str) -> Result<(), SystemdError> {
            unreachable!("health never restarts units")
        }
    }

    fn timer(active_state: &str) -> UnitStatus {
        UnitStatus { active_state: active_state.to_owned(), sub_state: "waiting".to_owned(), result: "success".to_owned() }
    }

    struct FakeGpus(Mutex<Option<Result<Vec<GpuInfo>, GpuError>>>);

    impl GpuTool for FakeGpus {
        fn vendor(&self) -> &'static str {
            "nvidia"
        }
        fn query_gpus(&self) -> Result<Vec<GpuInfo>, GpuError> {
            self.0.lock().expect("lock").take().expect("queried once")
        }
        fn query_compute_apps(&self) -> Result<Vec<ComputeApp>, GpuError> {
            Ok(Vec::new())
        }
    }

    fn settings(dir: &tempfile::TempDir) -> HealthSettings {
        HealthSettings { maas_creds_file: dir.path().join("maas-machine-creds.yml"), ..HealthSettings::default() }
    }

    fn now() -> Time {
        Time::from_unix(1_795_000_000).expect("time")
    }

    #[test]
    fn system_figures_are_real_and_the_first_report_has_no_cpu_interval_yet() {
        let dir = tempfile::tempdir().expect("tempdir");
        let systemd = FakeSystemd { failed: Some(vec![]), units: Some(vec![]) };
        let mut c = HealthCollector::new(settings(&dir));
        let r = c.collect(now(), &systemd, None);
        assert_eq!(r.collected_at, now());
        assert!(r.uptime_secs > 0 && r.mem_total_bytes > 0, "{r:?}");
        assert!(r.mem_available_bytes <= r.mem_total_bytes && r.load_avg_1m >= 0.0, "{r:?}");
        assert_eq!(r.cpu_usage_pct, None);
        assert_eq!((r.gpu, r.hw_sync), (None, None));
    }

    #[test]
    fn cpu_usage_is_measured_over_the_interval_since_the_last_reading() {
        let dir = tempfile::tempdir().expect("tempdir");
        let systemd = FakeSystemd { failed: Some(vec![]), units: Some(vec![]) };
        let mut c = HealthCollector::new(settings(&dir));
        c.cpu_read_at = Instant::now().checked_sub(Duration::from_secs(1)).expect("instant");
        let pct = c.collect(now(), &systemd, None).cpu_usage_pct.expect("an interval has passed");
        assert!((0.0..=100.0).contains(&pct), "{pct}");
    }

    #[test]
    fn the_root_filesystem_is_reported_and_an_unmounted_disk_is_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let systemd = FakeSystemd { failed: Some(vec![]), units: Some(vec![]) };
        let s = HealthSettings { disks: vec![PathBuf::from("/"), PathBuf::from("/nonexistent/drover-disk")], ..settings(&dir) };
        let r = HealthCollector::new(s).collect(now(), &systemd, None);
        assert_eq!(r.disks.len(), 1, "{r:?}");
        assert_eq!(r.disks[0].mount_point, "/");
        assert!(r.disks[0].total_bytes > 0 && r.disks[0].available_bytes <= r.disks[0].total_bytes, "{r:?}");
        assert_eq!(r.collect_errors, vec!["disk /nonexistent/drover-disk: not a mount point sysinfo lists".to_owned()]);
    }

    #[test]
    fn failed_units_are_listed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let systemd = FakeSystemd { failed: Some(vec!["nvidia-fabricmanager.service".to_owned()]), units: Some(vec![]) };
        let r = HealthCollector::new(settings(&dir)).collect(now(), &systemd, None);
        assert_eq!(r.failed_units, vec!["nvidia-fabricmanager.service".to_owned()]);
        assert!(r.collect_errors.is_empty(), "{:?}", r.collect_errors);
    }

    #[test]
    fn an_unreachable_systemd_is_reported_and_the_rest_is_still_collected() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("maas-machine-creds.yml"), "token_key: k\n").expect("creds");
        let systemd = FakeSystemd { failed: None, units: None };
        let gpus = FakeGpus(Mutex::new(Some(Ok(Vec::new()))));
        let r = HealthCollector::new(settings(&dir)).collect(now(), &systemd, Some(&gpus));
        assert!(r.failed_units.is_empty() && r.mem_total_bytes > 0);
        assert_eq!(r.hw_sync, Some(HwSyncState { creds_present: true, timer_active: false }));
        assert_eq!(r.gpu.map(|g| g.count), Some(0));
        assert_eq!(r.collect_errors.len(), 2, "{:?}", r.collect_errors);
        assert!(r.collect_errors[0].starts_with("failed units: cannot reach systemd"), "{:?}", r.collect_errors);
        assert!(r.collect_errors[1].starts_with("hardware-sync timer maas_hardware_sync.timer: "), "{:?}", r.collect_errors);
    }

    #[test]
    fn hw_sync_reports_creds_and_an_active_timer_on_a_maas_host() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("maas-machine-creds.yml"), "token_key: k\n").expect("creds");
        let systemd = FakeSystemd { failed: Some(vec![]), units: Some(vec![(DEFAULT_HW_SYNC_TIMER.to_owned(), timer("active"))]) };
        let r = HealthCollector::new(settings(&dir)).collect(now(), &systemd, None);
        assert_eq!(r.hw_sync, Some(HwSyncState { creds_present: true, timer_active: true }));
    }

    #[test]
    fn hw_sync_reports_missing_creds_and_an_inactive_timer() {
        let dir = tempfile::tempdir().expect("tempdir");
        let systemd = FakeSystemd { failed: Some(vec![]), units: Some(vec![(DEFAULT_HW_SYNC_TIMER.to_owned(), timer("inactive"))]) };
        let r = HealthCollector::new(settings(&dir)).collect(now(), &systemd, None);
        assert_eq!(r.hw_sync, Some(HwSyncState { creds_present: false, timer_active: false }));
    }

    #[test]
    fn the_gpu_summary_counts_unhealthy_gpus_and_a_missing_tool_means_no_gpus() {
        let dir = tempfile::tempdir().expect("tempdir");
        let systemd = FakeSystemd { failed: Some(vec![]), units: Some(vec![]) };
        let bad = gpu::parse_gpu_line("0, GPU-a, NVIDIA H100 80GB HBM3, 00000000:18:00.0, 0, 81559, Enabled, 3, [N/A]").expect("line");
        let gpus = FakeGpus(Mutex::new(Some(Ok(vec![bad]))));
        let r = HealthCollector::new(settings(&dir)).collect(now(), &systemd, Some(&gpus));
        assert_eq!(r.gpu, Some(GpuSummary { vendor: "nvidia".to_owned(), count: 1, unhealthy: 1 }));

        let none = FakeGpus(Mutex::new(Some(Err(GpuError::NoTool { program: "nvidia-smi".to_owned() }))));
        let r = HealthCollector::new(settings(&dir)).collect(now(), &systemd, Some(&none));
        assert_eq!(r.gpu, None);
        assert!(r.collect_errors.is_empty(), "{:?}", r.collect_errors);
    }

    #[test]
    fn a_down_gpu_driver_leaves_the_summary_out_and_says_why() {
        let dir = tempfile::tempdir().expect("tempdir");
        let systemd = FakeSystemd { failed: Some(vec![]), units: Some(vec![]) };
        let gpus = FakeGpus(Mutex::new(Some(Err(GpuError::DriverUnreachable { message: "NVIDIA-SMI has failed".to_owned() }))));
        let r = HealthCollector::new(settings(&dir)).collect(now(), &systemd, Some(&gpus));
        assert_eq!(r.gpu, None);
        assert_eq!(r.collect_errors, vec!["GPU summary: NVIDIA driver unreachable: NVIDIA-SMI has failed".to_owned()]);
    }

    #[test]
    fn the_shared_collector_measures_cpu_from_the_previous_report() {
        let dir = tempfile::tempdir().expect("tempdir");
        let systemd = FakeSystemd { failed: Some(vec![]), units: Some(vec![]) };
        let s = HealthSettings { nvidia_smi: dir.path().join("nvidia-smi"), ..settings(&dir) };
        let state = StateDir::open(&dir.path().join("state")).expect("state dir");
        let first = collect(&s, &state, &systemd, &SystemRunner);
        assert_eq!((first.cpu_usage_pct, &first.gpu), (None, &None), "{first:?}");
        if let Some(c) = COLLECTOR.lock().expect("lock").as_mut() {
            c.cpu_read_at = Instant::now().checked_sub(Duration::from_secs(1)).expect("instant");
        }
        let second = collect(&s, &state, &systemd, &SystemRunner);
        assert!(second.cpu_usage_pct.is_some(), "{second:?}");
        let sd = second.state_dir.expect("the state directory is reported");
        assert_eq!(sd.path, state.path().display().to_string());
        assert!(sd.total_bytes > 0 && sd.available_bytes <= sd.total_bytes, "{sd:?}");
        assert!(second.collect_errors.is_empty(), "{:?}", second.collect_errors);
    }

    #[test]
    fn settings_default_to_the_maas_paths_and_refuse_unknown_keys() {
        let s: HealthSettings = toml::from_str("").expect("empty");
        assert_eq!(s, HealthSettings::default());
        assert_eq!(s.maas_creds_file, PathBuf::from("/etc/maas/maas-machine-creds.yml"));
        assert_eq!((s.hw_sync_timer.as_str(), s.nvidia_smi.as_path()), ("maas_hardware_sync.timer", Path::new("nvidia-smi")));
        let s: HealthSettings =
            toml::from_str("nvidia_smi = \"/run/current-system/sw/bin/nvidia-smi\"\ndisks = [\"/\", \"/scratch\"]").expect("parse");
        assert_eq!(s.disks.len(), 2);
        assert!(toml::from_str::<HealthSettings>("nvidia-smi = \"x\"").is_err());
    }
}
