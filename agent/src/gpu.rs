//! GPUs as the agent sees them: inventory, compute processes and a health summary, behind the
//! [`GpuTool`] trait (the vendor tool). Reset, persistence mode and AMD's tools are
//! `node.gpu_scrub`'s, in `tasks::gpu_tools` and `tasks::amd`.
//!
//! [`NvidiaSmi`] is the NVIDIA implementation. It runs `nvidia-smi` through a
//! [`CommandRunner`] (no shell, bounded wait) and parses its CSV form
//! (`--format=csv,noheader,nounits`): values separated by `", "`, unavailable values written
//! `[N/A]`, `[Not Supported]`, `[Unknown Error]`, …, flags written `Enabled`/`Disabled` and
//! `Yes`/`No`.
//!
//! Two queries make the inventory, because `remapped_rows.pending` is not a `--query-gpu`
//! property (NVIDIA documents it only under `--query-remapped-rows`; asking `--query-gpu`
//! for it makes the whole query fail):
//!
//! - `nvidia-smi --query-gpu=index,uuid,name,pci.bus_id,memory.used,memory.total,persistence_mode,ecc.errors.uncorrected.volatile.total,retired_pages.pending --format=csv,noheader,nounits`
//! - `nvidia-smi --query-remapped-rows=gpu_uuid,remapped_rows.pending --format=csv,noheader,nounits`
//!   (joined on the UUID; a GPU or driver without row remapping leaves it unknown)
//!
//! and compute processes come from
//! `nvidia-smi --query-compute-apps=pid,process_name,gpu_uuid,used_memory --format=csv,noheader,nounits`
//! (empty output: none).
//!
//! Failures keep their meaning: the tool missing is [`GpuError::NoTool`] (the host has no
//! NVIDIA tool, not a broken one), exit 9 is [`GpuError::DriverUnreachable`], a GPU that
//! fell off the bus ("Unable to determine the device handle for GPU…") is
//! [`GpuError::GpusLost`] carrying what the other GPUs reported, and a line that does not
//! parse is [`GpuError::Parse`] naming the line.

use std::path::PathBuf;
use std::time::Duration;

use drover_proto::report::GpuSummary;

use crate::exec::{CommandOutput, CommandRunner, CommandSpec, ExecError};

/// The default `nvidia-smi` program (looked up on `PATH`).
pub const DEFAULT_NVIDIA_SMI: &str = "nvidia-smi";
/// How long one `nvidia-smi` query may run (it hangs on a wedged driver).
pub const DEFAULT_QUERY_TIMEOUT: Duration = Duration::from_secs(60);

/// The `--query-gpu` properties, in the order [`parse_gpu_line`] reads them.
pub const QUERY_GPU_FIELDS: &str =
    "index,uuid,name,pci.bus_id,memory.used,memory.total,persistence_mode,ecc.errors.uncorrected.volatile.total,retired_pages.pending";
/// The `--query-remapped-rows` properties.
pub const QUERY_REMAPPED_ROWS_FIELDS: &str = "gpu_uuid,remapped_rows.pending";
/// The `--query-compute-apps` properties.
pub const QUERY_COMPUTE_APPS_FIELDS: &str = "pid,process_name,gpu_uuid,used_memory";
/// `nvidia-smi`'s exit code when it cannot talk to the driver.
pub const EXIT_DRIVER_UNREACHABLE: i32 = 9;
/// What `nvidia-smi` prints for each GPU whose handle it cannot get (fallen off the bus, …).
const LOST_PREFIX: &str = "Unable to determine the device handle for";

/// One GPU. Values the tool could not give (`[N/A]`, `[Not Supported]`, …) are `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuInfo {
    /// The tool's index (may change at each boot).
    pub index: u32,
    /// `GPU-…`, stable.
    pub uuid: String,
    /// Product name.
    pub name: String,
    /// PCI bus id, `domain:bus:device.function`.
    pub pci_bus_id: String,
    /// Memory allocated by active contexts, MiB.
    pub memory_used_mib: Option<u64>,
    /// Total memory, MiB.
    pub memory_total_mib: Option<u64>,
    /// Persistence mode enabled.
    pub persistence_mode: Option<bool>,
    /// Uncorrectable ECC errors since the driver loaded.
    pub ecc_uncorrected_volatile: Option<u64>,
    /// Pages pending retirement (older GPUs).
    pub retired_pages_pending: Option<bool>,
    /// Rows pending remapping (Ampere and later); needs a reset to take effect.
    pub remapped_rows_pending: Option<bool>,
}

impl GpuInfo {
    /// Why this GPU is unhealthy (pending retired pages, pending remapped rows, volatile
    /// uncorrectable ECC errors); empty when it is not.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.retired_pages_pending == Some(true) {
            out.push("retired pages pending".to_owned());
        }
        if self.remapped_rows_pending == Some(true) {
            out.push("remapped rows pending".to_owned());
        }
        if let Some(n) = self.ecc_uncorrected_volatile.filter(|n| *n > 0) {
            out.push(format!("{n} volatile uncorrectable ECC error(s)"));
        }
        out
    }

    /// No problem found.
    pub fn is_healthy(&self) -> bool {
        self.problems().is_empty()
    }
}

/// A process holding a GPU context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComputeApp {
    /// Its pid (in the tool's pid namespace).
    pub pid: u32,
    /// Its name (usually the executable path).
    pub process_name: String,
    /// The GPU it uses.
    pub gpu_uuid: String,
    /// GPU memory it holds, MiB (`None` where the tool cannot tell, e.g. some MIG setups).
    pub used_memory_mib: Option<u64>,
}

/// A GPU the tool could not reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostGpu {
    /// The tool's line about it, e.g. `Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error`.
    pub message: String,
}

/// Why a GPU query failed.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// The tool is not installed: the host has no NVIDIA tool.
    #[error("no NVIDIA tool ({program} not found)")]
    NoTool {
        /// The program looked for.
        program: String,
    },
    /// The tool could not be started for another reason.
    #[error("{program}: cannot start: {message}")]
    Spawn {
        /// The program.
        program: String,
        /// The OS error.
        message: String,
    },
    /// The tool could not talk to the driver (exit 9: driver not loaded or wedged).
    #[error("NVIDIA driver unreachable: {message}")]
    DriverUnreachable {
        /// What the tool said.
        message: String,
    },
    /// The tool ran past its timeout.
    #[error("{command}: no answer within {secs} s")]
    TimedOut {
        /// The command line.
        command: String,
        /// The timeout.
        secs: u64,
    },
    /// The tool failed otherwise.
    #[error("{command} failed (exit {code}): {message}", code = code.map_or("by signal".to_owned(), |c| c.to_string()))]
    ToolFailed {
        /// The command line.
        command: String,
        /// Its exit code; `None` when a signal ended it.
        code: Option<i32>,
        /// What it said (stderr, else stdout), trimmed.
        message: String,
    },
    /// A line of the tool's output does not have the expected shape.
    #[error("cannot parse nvidia-smi output line {line:?}: {reason}")]
    Parse {
        /// The line.
        line: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Some GPUs could not be reached; `seen` holds what the others reported.
    #[error("{} GPU(s) lost: {}", lost.len(), lost.iter().map(|l| l.message.as_str()).collect::<Vec<_>>().join("; "))]
    GpusLost {
        /// The GPUs the tool could not reach.
        lost: Vec<LostGpu>,
        /// The GPUs it did report.
        seen: Vec<GpuInfo>,
    },
}

/// A vendor GPU tool. Blocking calls: run them off the async runtime.
pub trait GpuTool: Send + Sync {
    /// `nvidia` | `amd`, as in [`GpuSummary::vendor`].
    fn vendor(&self) -> &'static str;
    /// Every GPU, in the tool's order.
    fn query_gpus(&self) -> Result<Vec<GpuInfo>, GpuError>;
    /// Every process holding a GPU context; empty when none.
    fn query_compute_apps(&self) -> Result<Vec<ComputeApp>, GpuError>;
}

/// Counts GPUs and unhealthy GPUs (see [`GpuInfo::problems`]).
pub fn summary(vendor: &str, gpus: &[GpuInfo]) -> GpuSummary {
    let count = u32::try_from(gpus.len()).unwrap_or(u32::MAX);
    let unhealthy = u32::try_from(gpus.iter().filter(|g| !g.is_healthy()).count()).unwrap_or(u32::MAX);
    GpuSummary { vendor: vendor.to_owned(), count, unhealthy }
}

/// The summary for a query's result: lost GPUs count as GPUs and as unhealthy. `Ok(None)`
/// when the host has no tool; other errors are passed back.
pub fn summarize(vendor: &str, result: Result<Vec<GpuInfo>, GpuError>) -> Result<Option<GpuSummary>, GpuError> {
    match result {
        Ok(gpus) => Ok(Some(summary(vendor, &gpus))),
        Err(GpuError::NoTool { .. }) => Ok(None),
        Err(GpuError::GpusLost { lost, seen }) => {
            let mut s = summary(vendor, &seen);
            let lost = u32::try_from(lost.len()).unwrap_or(u32::MAX);
            s.count = s.count.saturating_add(lost);
            s.unhealthy = s.unhealthy.saturating_add(lost);
            Ok(Some(s))
        }
        Err(e) => Err(e),
    }
}

/// `nvidia-smi` through a [`CommandRunner`].
pub struct NvidiaSmi<R> {
    runner: R,
    program: PathBuf,
    timeout: Duration,
}

impl<R: CommandRunner> NvidiaSmi<R> {
    /// `nvidia-smi` from `PATH`, [`DEFAULT_QUERY_TIMEOUT`].
    pub fn new(runner: R) -> Self {
        Self::with_program(runner, DEFAULT_NVIDIA_SMI, DEFAULT_QUERY_TIMEOUT)
    }

    /// A given program (path or bare name) and timeout per query.
    pub fn with_program(runner: R, program: impl Into<PathBuf>, timeout: Duration) -> Self {
        NvidiaSmi { runner, program: program.into(), timeout }
    }

    /// Runs `nvidia-smi args…` and maps the failures every query shares. Returns the output
    /// (whatever its exit code) for the caller to judge.
    fn invoke(&self, args: &[&str]) -> Result<(CommandSpec, CommandOutput), GpuError> {
        let spec = CommandSpec::new(&self.program, args, self.timeout);
        let out = self.runner.run(&spec).map_err(|e| match e {
            ExecError::NotFound { program } => GpuError::NoTool { program },
            ExecError::Spawn { program, source } => GpuError::Spawn { program, message: source.to_string() },
            ExecError::TimedOut { command, secs } => GpuError::TimedOut { command, secs },
        })?;
        if out.code == Some(EXIT_DRIVER_UNREACHABLE) {
            return Err(GpuError::DriverUnreachable { message: tool_message(&out) });
        }
        Ok((spec, out))
    }

    /// Runs a query whose failure is an error; returns stdout.
    fn query(&self, args: &[&str]) -> Result<String, GpuError> {
        let (spec, out) = self.invoke(args)?;
        if !out.success() {
            return Err(GpuError::ToolFailed { command: spec.display(), code: out.code, message: tool_message(&out) });
        }
        Ok(out.stdout)
    }

    /// `uuid → remapped_rows.pending`; empty where the GPU or driver has no row remapping.
    fn remapped_rows(&self) -> Result<Vec<(String, Option<bool>)>, GpuError> {
        let fields = format!("--query-remapped-rows={QUERY_REMAPPED_ROWS_FIELDS}");
        let (_, out) = self.invoke(&[&fields, "--format=csv,noheader,nounits"])?;
        if !out.success() {
            // Pre-Ampere GPUs and old drivers refuse the query; the value is then unknown.
            return Ok(Vec::new());
        }
        parse_remapped_rows(&out.stdout)
    }
}

impl<R: CommandRunner> GpuTool for NvidiaSmi<R> {
    fn vendor(&self) -> &'static str {
        "nvidia"
    }

    fn query_gpus(&self) -> Result<Vec<GpuInfo>, GpuError> {
        let fields = format!("--query-gpu={QUERY_GPU_FIELDS}");
        let (spec, out) = self.invoke(&[&fields, "--format=csv,noheader,nounits"])?;
        let lost: Vec<LostGpu> = out
            .stdout
            .lines()
            .chain(out.stderr.lines())
            .map(str::trim)
            .filter(|l| l.starts_with(LOST_PREFIX))
            .map(|l| LostGpu { message: l.to_owned() })
            .collect();
        if !out.success() && lost.is_empty() {
            if is_no_devices(&out) {
                return Ok(Vec::new());
            }
            return Err(GpuError::ToolFailed { command: spec.display(), code: out.code, message: tool_message(&out) });
        }
        let mut gpus = parse_gpus(&out.stdout)?;
        let remapped = self.remapped_rows()?;
        for gpu in &mut gpus {
            gpu.remapped_rows_pending = remapped.iter().find(|(uuid, _)| *uuid == gpu.uuid).and_then(|(_, p)| *p);
        }
        if lost.is_empty() { Ok(gpus) } else { Err(GpuError::GpusLost { lost, seen: gpus }) }
    }

    fn query_compute_apps(&self) -> Result<Vec<ComputeApp>, GpuError> {
        let fields = format!("--query-compute-apps={QUERY_COMPUTE_APPS_FIELDS}");
        parse_compute_apps(&self.query(&[&fields, "--format=csv,noheader,nounits"])?)
    }
}

/// What the tool said: stderr, else stdout, trimmed.
pub fn tool_message(out: &CommandOutput) -> String {
    let err = out.stderr.trim();
    if err.is_empty() { out.stdout.trim().to_owned() } else { err.to_owned() }
}

/// `nvidia-smi` with the driver loaded but no GPU says "No devices were found" (exit 6).
fn is_no_devices(out: &CommandOutput) -> bool {
    out.stdout.contains("No devices were found") || out.stderr.contains("No devices were found")
}

fn parse_error(line: &str, reason: impl Into<String>) -> GpuError {
    GpuError::Parse { line: line.to_owned(), reason: reason.into() }
}

/// A bracketed value (`[N/A]`, `[Not Supported]`, `[Unknown Error]`, …): not available.
fn unavailable(value: &str) -> bool {
    value.starts_with('[') && value.ends_with(']') || value == "N/A"
}

fn opt_u64(line: &str, field: &str, value: &str) -> Result<Option<u64>, GpuError> {
    if unavailable(value) {
        return Ok(None);
    }
    value.parse().map(Some).map_err(|_| parse_error(line, format!("{field}: {value:?} is not a number")))
}

fn opt_flag(line: &str, field: &str, value: &str) -> Result<Option<bool>, GpuError> {
    if unavailable(value) {
        return Ok(None);
    }
    match value.to_ascii_lowercase().as_str() {
        "enabled" | "yes" | "1" => Ok(Some(true)),
        "disabled" | "no" | "0" => Ok(Some(false)),
        _ => Err(parse_error(line, format!("{field}: {value:?} is not Enabled/Disabled or Yes/No"))),
    }
}

/// Splits a CSV line into `head` leading fields, one middle field that may itself contain
/// `", "` (a product or process name), and `tail` trailing fields.
fn split_around(line: &str, head: usize, tail: usize) -> Result<(Vec<&str>, &str, Vec<&str>), GpuError> {
    let want = head + 1 + tail;
    let mut front: Vec<&str> = line.splitn(head + 1, ", ").collect();
    if front.len() < head + 1 {
        return Err(parse_error(line, format!("expected {want} comma-separated values")));
    }
    let rest = front.pop().unwrap_or_default();
    let mut back: Vec<&str> = rest.rsplitn(tail + 1, ", ").collect();
    if back.len() < tail + 1 {
        return Err(parse_error(line, format!("expected {want} comma-separated values")));
    }
    let middle = back.pop().unwrap_or_default();
    back.reverse();
    Ok((front.into_iter().map(str::trim).collect(), middle.trim(), back.into_iter().map(str::trim).collect()))
}

/// Lines that carry data: not blank, not the tool's notes about lost GPUs.
fn data_lines(text: &str) -> impl Iterator<Item = &str> {
    text.lines().map(|l| l.trim_end_matches('\r')).filter(|l| !l.trim().is_empty() && !l.trim().starts_with(LOST_PREFIX))
}

/// Parses one `--query-gpu=`[`QUERY_GPU_FIELDS`] line (`remapped_rows_pending` left `None`).
pub fn parse_gpu_line(line: &str) -> Result<GpuInfo, GpuError> {
    let (head, name, tail) = split_around(line, 2, 6)?;
    let index = head[0].parse().map_err(|_| parse_error(line, format!("index: {:?} is not a number", head[0])))?;
    let uuid = head[1];
    if !uuid.starts_with("GPU-") {
        return Err(parse_error(line, format!("uuid: {uuid:?} does not start with GPU-")));
    }
    Ok(GpuInfo {
        index,
        uuid: uuid.to_owned(),
        name: name.to_owned(),
        pci_bus_id: tail[0].to_owned(),
        memory_used_mib: opt_u64(line, "memory.used", tail[1])?,
        memory_total_mib: opt_u64(line, "memory.total", tail[2])?,
        persistence_mode: opt_flag(line, "persistence_mode", tail[3])?,
        ecc_uncorrected_volatile: opt_u64(line, "ecc.errors.uncorrected.volatile.total", tail[4])?,
        retired_pages_pending: opt_flag(line, "retired_pages.pending", tail[5])?,
        remapped_rows_pending: None,
    })
}

/// Parses `--query-gpu` output, one GPU a line.
pub fn parse_gpus(text: &str) -> Result<Vec<GpuInfo>, GpuError> {
    data_lines(text).map(parse_gpu_line).collect()
}

/// Parses `--query-remapped-rows=`[`QUERY_REMAPPED_ROWS_FIELDS`] output: `(uuid, pending)`.
pub fn parse_remapped_rows(text: &str) -> Result<Vec<(String, Option<bool>)>, GpuError> {
    data_lines(text)
        .map(|line| {
            let fields: Vec<&str> = line.split(", ").map(str::trim).collect();
            match fields.as_slice() {
                [uuid, pending] if uuid.starts_with("GPU-") => Ok(((*uuid).to_owned(), opt_flag(line, "remapped_rows.pending", pending)?)),
                _ => Err(parse_error(line, "expected gpu_uuid, remapped_rows.pending")),
            }
        })
        .collect()
}

/// Parses `--query-compute-apps=`[`QUERY_COMPUTE_APPS_FIELDS`] output; empty output (or the
/// old "No running processes found") is no process.
pub fn parse_compute_apps(text: &str) -> Result<Vec<ComputeApp>, GpuError> {
    data_lines(text)
        .filter(|l| !l.trim().eq_ignore_ascii_case("No running processes found"))
        .map(|line| {
            let (head, name, tail) = split_around(line, 1, 2)?;
            let pid = head[0].parse().map_err(|_| parse_error(line, format!("pid: {:?} is not a number", head[0])))?;
            if !tail[0].starts_with("GPU-") {
                return Err(parse_error(line, format!("gpu_uuid: {:?} does not start with GPU-", tail[0])));
            }
            Ok(ComputeApp {
                pid,
                process_name: name.to_owned(),
                gpu_uuid: tail[0].to_owned(),
                used_memory_mib: opt_u64(line, "used_memory", tail[1])?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An 8-GPU HGX H100 node as `--query-gpu` prints it; GPU 5 has a volatile uncorrectable
    /// ECC error.
    const H100_GPUS: &str = "\
0, GPU-3c4e1b2a-7f0e-6d5c-9b8a-1f2e3d4c5b6a, NVIDIA H100 80GB HBM3, 00000000:18:00.0, 0, 81559, Enabled, 0, [N/A]
1, GPU-8a7b6c5d-4e3f-2a1b-0c9d-8e7f6a5b4c3d, NVIDIA H100 80GB HBM3, 00000000:2A:00.0, 0, 81559, Enabled, 0, [N/A]
2, GPU-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d, NVIDIA H100 80GB HBM3, 00000000:3A:00.0, 0, 81559, Enabled, 0, [N/A]
3, GPU-2b3c4d5e-6f7a-8b9c-0d1e-2f3a4b5c6d7e, NVIDIA H100 80GB HBM3, 00000000:5D:00.0, 0, 81559, Enabled, 0, [N/A]
4, GPU-3c4d5e6f-7a8b-9c0d-1e2f-3a4b5c6d7e8f, NVIDIA H100 80GB HBM3, 00000000:9A:00.0, 0, 81559, Enabled, 0, [N/A]
5, GPU-4d5e6f7a-8b9c-0d1e-2f3a-4b5c6d7e8f9a, NVIDIA H100 80GB HBM3, 00000000:AB:00.0, 0, 81559, Enabled, 2, [N/A]
6, GPU-5e6f7a8b-9c0d-1e2f-3a4b-5c6d7e8f9a0b, NVIDIA H100 80GB HBM3, 00000000:BA:00.0, 0, 81559, Enabled, 0, [N/A]
7, GPU-6f7a8b9c-0d1e-2f3a-4b5c-6d7e8f9a0b1c, NVIDIA H100 80GB HBM3, 00000000:DB:00.0, 4, 81559, Enabled, 0, [N/A]
";

    #[test]
    fn an_h100_node_parses_with_not_available_pages_as_none() {
        let gpus = parse_gpus(H100_GPUS).expect("parses");
        assert_eq!(gpus.len(), 8);
        assert_eq!(
            gpus[0],
            GpuInfo {
                index: 0,
                uuid: "GPU-3c4e1b2a-7f0e-6d5c-9b8a-1f2e3d4c5b6a".to_owned(),
                name: "NVIDIA H100 80GB HBM3".to_owned(),
                pci_bus_id: "00000000:18:00.0".to_owned(),
                memory_used_mib: Some(0),
                memory_total_mib: Some(81559),
                persistence_mode: Some(true),
                ecc_uncorrected_volatile: Some(0),
                retired_pages_pending: None,
                remapped_rows_pending: None,
            }
        );
        assert_eq!(summary("nvidia", &gpus), GpuSummary { vendor: "nvidia".to_owned(), count: 8, unhealthy: 1 });
    }

    #[test]
    fn a_consumer_card_without_ecc_reports_not_supported_as_none() {
        let gpu = parse_gpu_line(
            "0, GPU-9f8e7d6c-5b4a-3928-1706-f5e4d3c2b1a0, NVIDIA GeForce RTX 3090, 00000000:01:00.0, 1187, 24576, Disabled, [N/A], [Not Supported]",
        )
        .expect("parses");
        assert_eq!(gpu.persistence_mode, Some(false));
        assert_eq!((gpu.ecc_uncorrected_volatile, gpu.retired_pages_pending), (None, None));
        assert!(gpu.is_healthy());
    }

    #[test]
    fn pending_retired_pages_make_a_v100_unhealthy() {
        let gpu = parse_gpu_line(
            "3, GPU-0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d, Tesla V100-SXM2-32GB, 00000000:89:00.0, 0, 32768, Enabled, 0, Yes",
        )
        .expect("parses");
        assert_eq!(gpu.problems(), vec!["retired pages pending".to_owned()]);
    }

    #[test]
    fn a_product_name_containing_a_comma_separator_still_parses() {
        let gpu = parse_gpu_line("0, GPU-0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d, Odd, Name, 00000000:01:00.0, 1, 2, Enabled, 0, No")
            .expect("parses");
        assert_eq!((gpu.name.as_str(), gpu.pci_bus_id.as_str(), gpu.retired_pages_pending), ("Odd, Name", "00000000:01:00.0", Some(false)));
    }

    #[test]
    fn a_truncated_gpu_line_is_a_parse_error_naming_the_line() {
        let err = parse_gpus("0, GPU-3c4e1b2a-7f0e-6d5c-9b8a-1f2e3d4c5b6a, NVIDIA H100 80GB HBM3, 00000000:18:00.0, 0\n").unwrap_err();
        assert!(matches!(&err, GpuError::Parse { line, .. } if line.ends_with("00000000:18:00.0, 0")), "{err:?}");
        assert!(err.to_string().contains("NVIDIA H100 80GB HBM3"), "{err}");
    }

    #[test]
    fn a_garbage_flag_is_a_parse_error_naming_the_field() {
        let err =
            parse_gpu_line("0, GPU-3c4e1b2a-7f0e-6d5c-9b8a-1f2e3d4c5b6a, NVIDIA A100-SXM4-80GB, 00000000:07:00.0, 0, 81920, Maybe, 0, No")
                .unwrap_err();
        assert!(err.to_string().contains("persistence_mode"), "{err}");
    }

    #[test]
    fn remapped_rows_accept_yes_no_and_numeric_forms() {
        let rows = parse_remapped_rows("GPU-a, No\nGPU-b, Yes\nGPU-c, 0\nGPU-d, [N/A]\n").expect("parses");
        let pending: Vec<Option<bool>> = rows.iter().map(|(_, p)| *p).collect();
        assert_eq!(pending, vec![Some(false), Some(true), Some(false), None]);
    }

    #[test]
    fn compute_apps_parse_and_empty_output_means_none() {
        assert_eq!(parse_compute_apps("").expect("empty"), Vec::new());
        assert_eq!(parse_compute_apps("No running processes found\n").expect("old form"), Vec::new());
        let apps = parse_compute_apps(
            "41872, /usr/bin/python3, GPU-3c4e1b2a-7f0e-6d5c-9b8a-1f2e3d4c5b6a, 70212\n41990, ./train, run 2, GPU-8a7b6c5d-4e3f-2a1b-0c9d-8e7f6a5b4c3d, [N/A]\n",
        )
        .expect("parses");
        assert_eq!(apps[0].pid, 41872);
        assert_eq!(apps[0].used_memory_mib, Some(70212));
        assert_eq!((apps[1].process_name.as_str(), apps[1].used_memory_mib), ("./train, run 2", None));
    }

    #[test]
    fn a_compute_app_line_without_a_pid_is_a_parse_error() {
        let err = parse_compute_apps("python3, GPU-3c4e1b2a-7f0e-6d5c-9b8a-1f2e3d4c5b6a, 1024\n").unwrap_err();
        assert!(matches!(err, GpuError::Parse { .. }), "{err:?}");
    }

    #[test]
    fn lost_gpus_count_as_unhealthy_gpus_and_a_missing_tool_as_no_summary() {
        let seen = parse_gpus(H100_GPUS).expect("parses");
        let lost = vec![LostGpu { message: format!("{LOST_PREFIX} GPU0000:3B:00.0: Unknown Error") }];
        let s = summarize("nvidia", Err(GpuError::GpusLost { lost, seen })).expect("summary").expect("some");
        assert_eq!((s.count, s.unhealthy), (9, 2));
        assert_eq!(summarize("nvidia", Err(GpuError::NoTool { program: "nvidia-smi".to_owned() })).expect("ok"), None);
        assert!(summarize("nvidia", Err(GpuError::DriverUnreachable { message: String::new() })).is_err());
    }
}
