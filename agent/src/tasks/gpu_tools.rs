//! The vendor tools `node.gpu_scrub` drives, behind one small surface ([`Tools`]) so the
//! task's plan and executor do not care which vendor answered.
//!
//! - NVIDIA: the inventory and compute processes come from [`NvidiaSmi`] (the [`GpuTool`]
//!   trait); persistence mode is `nvidia-smi -i <bus> -pm 0|1`; the reset is
//!   `nvidia-smi --gpu-reset -i <bus>`, whose exit codes keep their meaning (255 with
//!   "In use by another client": busy; 15: "GPU is lost", the host needs a power cycle);
//!   `dcgmi diag -r N` is the optional deeper check.
//! - AMD: `amd-smi`, else `rocm-smi` (see [`super::amd`]).
//!
//! Every call goes through the task's [`CommandRunner`] (no shell, bounded by
//! `gpu_tool_timeout_secs`).

use std::time::Duration;

use drover_proto::task::GpuVendor;
use serde_json::json;

use super::TaskSettings;
use super::amd;
use super::steps::Done;
use crate::exec::{CommandOutput, CommandRunner, CommandSpec, ExecError};
use crate::gpu::{GpuError, GpuTool, NvidiaSmi, tool_message};

/// `nvidia-smi`'s exit code for "GPU is lost" (fallen off the bus; only a power cycle helps).
pub const NVIDIA_EXIT_GPU_LOST: i32 = 15;
/// `nvidia-smi`'s exit code for "other error", which is also what a busy reset returns.
pub const NVIDIA_EXIT_OTHER: i32 = 255;

/// A borrowed runner usable where an owned [`CommandRunner`] is expected.
pub struct Borrowed<'a>(pub &'a dyn CommandRunner);

impl CommandRunner for Borrowed<'_> {
    fn run(&self, cmd: &CommandSpec) -> Result<CommandOutput, ExecError> {
        self.0.run(cmd)
    }
}

/// Which tool answers for the host's GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// `nvidia-smi`.
    Nvidia,
    /// `amd-smi`.
    AmdSmi,
    /// `rocm-smi` (older AMD stacks).
    RocmSmi,
}

impl Backend {
    /// The tool's name, for messages.
    pub fn tool(self) -> &'static str {
        match self {
            Backend::Nvidia => "nvidia-smi",
            Backend::AmdSmi => "amd-smi",
            Backend::RocmSmi => "rocm-smi",
        }
    }

    /// Whether the vendor has a persistence mode to turn off around the reset.
    pub fn has_persistence_mode(self) -> bool {
        self == Backend::Nvidia
    }
}

/// One GPU as the scrub sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScrubGpu {
    /// The tool's index (AMD tools reset by index).
    pub index: u32,
    /// PCI bus id (NVIDIA resets and sets persistence mode by bus id, which survives reboots).
    pub bus_id: String,
    /// Persistence mode (NVIDIA); `None` where unknown or not a thing.
    pub persistence_mode: Option<bool>,
}

/// A process holding a GPU context, as the tool lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScrubApp {
    /// Its pid.
    pub pid: u32,
    /// Its name.
    pub name: String,
}

/// One GPU's state after the reset, for verification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuState {
    /// `GPU 0 (0000:07:00.0)`.
    pub label: String,
    /// Memory used, MiB; `None` when the tool cannot tell (fails verification).
    pub memory_used_mib: Option<u64>,
    /// Pending retired pages / remapped rows, volatile uncorrectable ECC, …
    pub problems: Vec<String>,
}

/// Judges the post-reset state: no compute process, memory used at most `threshold_mib` on
/// every GPU, no problem. Pure.
pub fn judge_verify(apps: &[ScrubApp], states: &[GpuState], threshold_mib: u64) -> Done {
    let mut failures = Vec::new();
    if !apps.is_empty() {
        let pids: Vec<String> = apps.iter().map(|a| a.pid.to_string()).collect();
        failures.push(format!("compute processes still running: pids {}", pids.join(", ")));
    }
    for s in states {
        match s.memory_used_mib {
            Some(used) if used > threshold_mib => failures.push(format!("{}: {used} MiB used (threshold {threshold_mib} MiB)", s.label)),
            Some(_) => {}
            None => failures.push(format!("{}: memory used unknown", s.label)),
        }
        failures.extend(s.problems.iter().map(|p| format!("{}: {p}", s.label)));
    }
    let data = json!({
        "gpus": states.iter().map(|s| json!({"gpu": s.label, "memoryUsedMib": s.memory_used_mib, "problems": s.problems})).collect::<Vec<_>>(),
        "computeProcesses": apps.iter().map(|a| a.pid).collect::<Vec<_>>(),
    });
    if failures.is_empty() {
        Done::ok(format!("{} GPU(s) clean: no compute process, memory used ≤ {threshold_mib} MiB, no pending page retirement or row remapping, no volatile uncorrectable ECC", states.len())).with_data(data)
    } else {
        Done::error(failures.join("; ")).with_data(data)
    }
}

/// Judges `nvidia-smi --gpu-reset -i <bus>`'s output. Pure.
pub fn judge_nvidia_reset(bus: &str, out: &CommandOutput) -> Done {
    let said = format!("{}\n{}", out.stdout, out.stderr);
    let message = tool_message(out);
    match out.code {
        Some(0) => Done::ok(format!("GPU {bus} reset")),
        Some(NVIDIA_EXIT_GPU_LOST) => Done::error(format!("reset of GPU {bus}: GPU lost; the host needs a power cycle ({message})")),
        Some(NVIDIA_EXIT_OTHER) if said.to_ascii_lowercase().contains("in use by another") => {
            Done::error(format!("GPU {bus} busy, reset refused: In use by another client ({message})"))
        }
        code => {
            Done::error(format!("reset of GPU {bus} failed (exit {}): {message}", code.map_or("by signal".to_owned(), |c| c.to_string())))
        }
    }
}

/// Judges `dcgmi diag -r N`'s output: a non-zero exit or any `Fail` row fails. Pure.
pub fn judge_dcgm(level: u8, out: &CommandOutput) -> Done {
    let failed: Vec<String> = out
        .stdout
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.trim().trim_matches('|').split('|').map(str::trim).collect();
            match cells.as_slice() {
                [test, result] if result.starts_with("Fail") => Some(format!("{test}: {result}")),
                _ => None,
            }
        })
        .collect();
    let data = json!({ "level": level, "failed": failed });
    if out.success() && failed.is_empty() {
        Done::ok(format!("dcgmi diag -r {level} passed")).with_data(data)
    } else if failed.is_empty() {
        let code = out.code.map_or("by signal".to_owned(), |c| c.to_string());
        Done::error(format!("dcgmi diag -r {level} failed (exit {code}): {}", tool_message(out))).with_data(data)
    } else {
        Done::error(format!("dcgmi diag -r {level} failed: {}", failed.join("; "))).with_data(data)
    }
}

/// The tools, as configured in `[tasks]`.
pub struct Tools<'a> {
    settings: &'a TaskSettings,
    runner: &'a dyn CommandRunner,
}

impl<'a> Tools<'a> {
    /// The tools of `settings`, run through `runner`.
    pub fn new(settings: &'a TaskSettings, runner: &'a dyn CommandRunner) -> Self {
        Tools { settings, runner }
    }

    /// The settings.
    pub fn settings(&self) -> &'a TaskSettings {
        self.settings
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(self.settings.gpu_tool_timeout_secs)
    }

    fn nvidia(&self) -> NvidiaSmi<Borrowed<'a>> {
        NvidiaSmi::with_program(Borrowed(self.runner), &self.settings.nvidia_smi, self.timeout())
    }

    /// Runs `program args…`; `Err` when it could not run at all.
    pub(crate) fn call(&self, program: &std::path::Path, args: &[&str]) -> Result<CommandOutput, ExecError> {
        self.runner.run(&CommandSpec::new(program, args, self.timeout()))
    }

    /// Finds the tool that answers for `vendor` (`Auto`: NVIDIA, then `amd-smi`, then
    /// `rocm-smi`; the first installed one that reports GPUs wins, else the first installed
    /// one) and lists its GPUs.
    pub fn detect(&self, vendor: GpuVendor) -> Result<(Backend, Vec<ScrubGpu>), DetectError> {
        let candidates: &[Backend] = match vendor {
            GpuVendor::Nvidia => &[Backend::Nvidia],
            GpuVendor::Amd => &[Backend::AmdSmi, Backend::RocmSmi],
            GpuVendor::Auto => &[Backend::Nvidia, Backend::AmdSmi, Backend::RocmSmi],
        };
        let mut installed: Option<(Backend, Vec<ScrubGpu>)> = None;
        let mut errors = Vec::new();
        for &backend in candidates {
            match self.gpus(backend) {
                Ok(gpus) if !gpus.is_empty() => return Ok((backend, gpus)),
                Ok(gpus) => {
                    installed.get_or_insert((backend, gpus));
                }
                Err(ToolError::NotInstalled(_)) => {}
                Err(e) => errors.push(e),
            }
        }
        if let Some(e) = errors.into_iter().next() {
            return Err(DetectError::Tool(e));
        }
        installed.ok_or_else(|| {
            let names: Vec<&str> = candidates.iter().map(|b| b.tool()).collect();
            DetectError::NoTool { tried: names.join(", ") }
        })
    }

    /// The GPUs `backend` reports.
    pub fn gpus(&self, backend: Backend) -> Result<Vec<ScrubGpu>, ToolError> {
        match backend {
            Backend::Nvidia => match self.nvidia().query_gpus() {
                Ok(gpus) => Ok(gpus
                    .into_iter()
                    .map(|g| ScrubGpu { index: g.index, bus_id: g.pci_bus_id, persistence_mode: g.persistence_mode })
                    .collect()),
                Err(GpuError::NoTool { program }) => Err(ToolError::NotInstalled(program)),
                Err(e) => Err(ToolError::Nvidia(e)),
            },
            Backend::AmdSmi => amd::AmdSmi::new(self).gpus(),
            Backend::RocmSmi => amd::RocmSmi::new(self).gpus(),
        }
    }

    /// The compute processes `backend` lists.
    pub fn apps(&self, backend: Backend) -> Result<Vec<ScrubApp>, ToolError> {
        match backend {
            Backend::Nvidia => self
                .nvidia()
                .query_compute_apps()
                .map(|apps| apps.into_iter().map(|a| ScrubApp { pid: a.pid, name: a.process_name }).collect())
                .map_err(ToolError::Nvidia),
            Backend::AmdSmi => amd::AmdSmi::new(self).apps(),
            Backend::RocmSmi => amd::RocmSmi::new(self).apps(),
        }
    }

    /// `nvidia-smi -i <bus> -pm 0|1`.
    pub fn set_persistence(&self, bus: &str, on: bool) -> Done {
        let mode = if on { "1" } else { "0" };
        let what = if on { "restored (enabled)" } else { "disabled" };
        match self.call(&self.settings.nvidia_smi, &["-i", bus, "-pm", mode]) {
            Ok(out) if out.success() => Done::ok(format!("persistence mode {what} on GPU {bus}")),
            Ok(out) => Done::error(format!(
                "nvidia-smi -i {bus} -pm {mode} failed (exit {}): {}",
                out.code.map_or("by signal".to_owned(), |c| c.to_string()),
                tool_message(&out)
            )),
            Err(e) => Done::error(e.to_string()),
        }
    }

    /// Resets one GPU.
    pub fn reset(&self, backend: Backend, gpu: &ScrubGpu) -> Done {
        match backend {
            Backend::Nvidia => match self.call(&self.settings.nvidia_smi, &["--gpu-reset", "-i", &gpu.bus_id]) {
                Ok(out) => judge_nvidia_reset(&gpu.bus_id, &out),
                Err(e) => Done::error(e.to_string()),
            },
            Backend::AmdSmi => amd::AmdSmi::new(self).reset(gpu),
            Backend::RocmSmi => amd::RocmSmi::new(self).reset(gpu),
        }
    }

    /// Re-queries and judges with [`judge_verify`].
    pub fn verify(&self, backend: Backend, threshold_mib: u64) -> Done {
        let states = match backend {
            Backend::Nvidia => self.nvidia().query_gpus().map_err(ToolError::Nvidia).map(|gpus| {
                gpus.iter()
                    .map(|g| GpuState {
                        label: format!("GPU {} ({})", g.index, g.pci_bus_id),
                        memory_used_mib: g.memory_used_mib,
                        problems: g.problems(),
                    })
                    .collect::<Vec<_>>()
            }),
            Backend::AmdSmi => amd::AmdSmi::new(self).states(),
            Backend::RocmSmi => amd::RocmSmi::new(self).states(),
        };
        let states = match states {
            Ok(s) => s,
            Err(e) => return Done::error(format!("cannot query the GPUs after the reset: {e}")),
        };
        match self.apps(backend) {
            Ok(apps) => judge_verify(&apps, &states, threshold_mib),
            Err(e) => Done::error(format!("cannot list compute processes after the reset: {e}")),
        }
    }

    /// `dcgmi diag -r <level>`.
    pub fn dcgm_diag(&self, level: u8) -> Done {
        let level_arg = level.to_string();
        match self.call(&self.settings.dcgmi, &["diag", "-r", &level_arg]) {
            Ok(out) => judge_dcgm(level, &out),
            Err(e) => Done::error(e.to_string()),
        }
    }
}

/// Why a tool could not answer.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// The tool is not installed.
    #[error("{0}: not found")]
    NotInstalled(String),
    /// It could not be run (or ran past its timeout).
    #[error(transparent)]
    Exec(ExecError),
    /// It ran and failed.
    #[error("{command} failed (exit {code}): {message}")]
    Exit {
        /// The command line.
        command: String,
        /// Its exit code, or `by signal`.
        code: String,
        /// What it said.
        message: String,
    },
    /// `nvidia-smi` failed.
    #[error(transparent)]
    Nvidia(GpuError),
    /// Its output is not what the tool writes.
    #[error(transparent)]
    Output(amd::OutputError),
}

/// Why no tool could be picked for the host's GPUs.
#[derive(Debug, thiserror::Error)]
pub enum DetectError {
    /// An installed tool failed.
    #[error(transparent)]
    Tool(ToolError),
    /// None of the vendor's tools is installed.
    #[error("no GPU tool found (tried {tried})")]
    NoTool {
        /// The tools tried, comma-separated.
        tried: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_proto::report::StepOutcome;

    fn out(code: i32, stdout: &str) -> CommandOutput {
        CommandOutput { code: Some(code), stdout: stdout.to_owned(), stderr: String::new() }
    }

    #[test]
    fn reset_exit_codes_keep_their_meaning() {
        let bus = "00000000:07:00.0";
        assert_eq!(judge_nvidia_reset(bus, &out(0, "GPU 00000000:07:00.0 was successfully reset.\nAll done.\n")).outcome, StepOutcome::Ok);
        let busy = judge_nvidia_reset(bus, &out(255, "Unable to reset GPU 00000000:07:00.0: In use by another client\n"));
        assert!(busy.outcome == StepOutcome::Error && busy.message.contains("In use by another client"), "{busy:?}");
        let lost = judge_nvidia_reset(bus, &out(15, "Unable to reset GPU 00000000:07:00.0: GPU is lost\n"));
        assert_eq!(
            lost.message,
            "reset of GPU 00000000:07:00.0: GPU lost; the host needs a power cycle (Unable to reset GPU 00000000:07:00.0: GPU is lost)"
        );
        let other = judge_nvidia_reset(bus, &out(3, "This operation is not supported on this GPU.\n"));
        assert_eq!(other.message, "reset of GPU 00000000:07:00.0 failed (exit 3): This operation is not supported on this GPU.");
        let unknown_255 = judge_nvidia_reset(bus, &out(255, "Unknown Error\n"));
        assert!(!unknown_255.message.contains("busy"), "{unknown_255:?}");
    }

    #[test]
    fn verification_names_every_failure() {
        let states = vec![
            GpuState { label: "GPU 0".into(), memory_used_mib: Some(3), problems: vec![] },
            GpuState { label: "GPU 1".into(), memory_used_mib: Some(900), problems: vec!["remapped rows pending".into()] },
            GpuState { label: "GPU 2".into(), memory_used_mib: None, problems: vec![] },
        ];
        let d = judge_verify(&[ScrubApp { pid: 7, name: "x".into() }], &states, 16);
        assert_eq!(d.outcome, StepOutcome::Error);
        for want in ["pids 7", "GPU 1: 900 MiB used", "GPU 1: remapped rows pending", "GPU 2: memory used unknown"] {
            assert!(d.message.contains(want), "{want} in {}", d.message);
        }
        assert_eq!(judge_verify(&[], &states[..1], 16).outcome, StepOutcome::Ok);
    }

    #[test]
    fn a_failing_dcgm_row_fails_the_diag_even_with_exit_zero() {
        let table = "| Diagnostic                | Result                                         |\n| PCIe                      | Pass - All                                     |\n| GPU Memory                | Fail - GPU: 0                                  |\n";
        let d = judge_dcgm(3, &out(0, table));
        assert_eq!((d.outcome, d.message.as_str()), (StepOutcome::Error, "dcgmi diag -r 3 failed: GPU Memory: Fail - GPU: 0"));
        assert_eq!(judge_dcgm(1, &out(0, "| PCIe | Pass - All |\n")).outcome, StepOutcome::Ok);
    }
}
