//! AMD GPUs for `node.gpu_scrub` and `node.validate_clean`: `amd-smi` (ROCm 6 and later), else
//! `rocm-smi` (older stacks). Kept modest: inventory, compute processes (with the GPU each one
//! holds), reset by index, and a verification of processes, memory used and (with `amd-smi`)
//! uncorrectable ECC errors. AMD GPUs have no persistence mode to handle.
//!
//! `amd-smi` (JSON; ROCm 7 wraps the list in `{"gpu_data": [...]}`, both are read):
//!
//! - `amd-smi list --json` → `[{"gpu": 0, "bdf": "0000:0c:00.0", "uuid": "…", …}, …]`
//! - `amd-smi process --json` → `[{"gpu": 0, "process_list": [{"process_info": {"name": "python3",
//!   "pid": 1234, "mem_usage": {"value": …, "unit": "B"}, …}}]}, …]`; no process:
//!   `"process_list": []` or `[{"process_info": "No running processes detected"}]`
//! - `amd-smi metric --mem-usage --ecc --json` → `[{"gpu": 0, "mem_usage": {"used_vram":
//!   {"value": 283, "unit": "MB"}, …}, "ecc": {"total_uncorrectable_count": 0, …}}, …]`
//! - `amd-smi reset --gpureset -g N`
//!
//! `amd-smi` reports a library error (permission denied, a GPU that does not answer) as
//! `{"error": "AMDSMI has returned error '-1010' - 'Permission Denied'", "code": -1010}` on
//! stdout *with exit status 0*; that object is read as the tool's failure, never as "no GPU".
//! Without the driver it exits 255 with "Driver not initialized (amdgpu not found in modules)"
//! on stderr.
//!
//! Whether the driver is loaded ([`amdgpu_loaded`]) is read from `<proc_dir>/modules`, the
//! table `lsmod` prints: the same fact `amd-smi` checks (`/sys/module/amdgpu/initstate`,
//! which exists only for a loaded module), through the configurable `proc_dir`.
//!
//! `rocm-smi` (fallback): `--showbus --json` (`{"card0": {"PCI Bus": "0000:0C:00.0"}}`),
//! `--showpids --json` (`{"system": {"PID1234": "python3, 1, 4096, 0, 0"}}`, or the line "No KFD
//! PIDs currently running"), `--showmeminfo vram --json` (`{"card0": {"VRAM Total Used Memory
//! (B)": "11087872", …}}`), `--resetgpu -d N`. It has no ECC verification here (its RAS output
//! is not stable across versions); the step's data says so.

use std::path::Path;

use serde_json::Value;

use super::gpu_tools::{Backend, GpuState, ScrubApp, ScrubGpu, ToolError, Tools};
use super::steps::Done;
use crate::exec::{CommandOutput, ExecError};
use crate::gpu::tool_message;

fn run_json(tools: &Tools<'_>, program: &Path, args: &[&str]) -> Result<String, ToolError> {
    let command = std::iter::once(program.display().to_string()).chain(args.iter().map(|a| (*a).to_owned())).collect::<Vec<_>>().join(" ");
    match tools.call(program, args) {
        Ok(out) if out.success() => Ok(out.stdout),
        Ok(out) => Err(ToolError::Exit { command, code: code(&out), message: tool_message(&out) }),
        Err(ExecError::NotFound { program }) => Err(ToolError::NotInstalled(program)),
        Err(e) => Err(ToolError::Exec(e)),
    }
}

fn code(out: &CommandOutput) -> String {
    out.code.map_or("by signal".to_owned(), |c| c.to_string())
}

/// Why an AMD tool's output is not what the tool writes.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// Not JSON.
    #[error("cannot parse {what} JSON: {source}")]
    Json {
        /// The command.
        what: &'static str,
        /// The parser's error.
        #[source]
        source: serde_json::Error,
    },
    /// amd-smi's error object: the tool failed (with exit status 0).
    #[error("{what} reported an error: {message} (code {code})")]
    Reported {
        /// The command.
        what: &'static str,
        /// The tool's message.
        message: String,
        /// The tool's code, `none` when it gave none.
        code: String,
    },
    /// Neither a GPU array nor ROCm 7's wrapper of one.
    #[error("{what}: expected a JSON array of GPUs")]
    NotAnArray {
        /// The command.
        what: &'static str,
    },
    /// Not the JSON object the tool writes.
    #[error("{what}: expected a JSON object")]
    NotAnObject {
        /// The command.
        what: &'static str,
    },
    /// A GPU entry without its index.
    #[error("{what}: an entry has no \"gpu\" index")]
    NoGpuIndex {
        /// The command.
        what: &'static str,
    },
    /// A process entry without its pid.
    #[error("amd-smi process: an entry has no pid: {entry}")]
    NoPid {
        /// The entry, as JSON.
        entry: String,
    },
    /// A `PID<n>` key whose `<n>` is not a pid.
    #[error("rocm-smi --showpids: bad pid key PID{pid}")]
    BadPidKey {
        /// What follows `PID`.
        pid: String,
    },
}

fn parse(text: &str, what: &'static str) -> Result<Value, OutputError> {
    serde_json::from_str(text.trim()).map_err(|source| OutputError::Json { what, source })
}

/// The per-GPU array: the top-level array, or ROCm 7's `{"gpu_data": [...]}`. amd-smi's error
/// object (`{"error": "…", "code": -1010}`, printed with exit status 0) is the tool's failure.
fn gpu_array<'v>(v: &'v Value, what: &'static str) -> Result<&'v Vec<Value>, OutputError> {
    if let Some(error) = v.get("error") {
        let message = error.as_str().map_or_else(|| error.to_string(), str::to_owned);
        let code = v.get("code").map_or_else(|| "none".to_owned(), Value::to_string);
        return Err(OutputError::Reported { what, message, code });
    }
    v.as_array().or_else(|| v.get("gpu_data").and_then(Value::as_array)).ok_or(OutputError::NotAnArray { what })
}

fn as_u64(v: &Value) -> Option<u64> {
    v.as_u64().or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
}

/// A size in MiB from `{"value": N, "unit": "B"|"KB"|"MB"|"GB"}` or a bare number of MB
/// (amd-smi's "MB" are MiB). `None` for `"N/A"`.
fn mib(v: &Value) -> Option<u64> {
    let (value, unit) = match v.get("value") {
        Some(value) => (as_u64(value)?, v.get("unit").and_then(Value::as_str).unwrap_or("MB")),
        None => (as_u64(v)?, "MB"),
    };
    match unit {
        "B" => Some(value / (1024 * 1024)),
        "KB" | "KiB" => Some(value / 1024),
        "MB" | "MiB" => Some(value),
        "GB" | "GiB" => value.checked_mul(1024),
        _ => None,
    }
}

fn gpu_index(item: &Value, what: &'static str) -> Result<u32, OutputError> {
    item.get("gpu").and_then(as_u64).and_then(|n| u32::try_from(n).ok()).ok_or(OutputError::NoGpuIndex { what })
}

/// Parses `amd-smi list --json`.
pub fn parse_amd_list(text: &str) -> Result<Vec<ScrubGpu>, OutputError> {
    let v = parse(text, "amd-smi list")?;
    gpu_array(&v, "amd-smi list")?
        .iter()
        .map(|item| {
            let index = gpu_index(item, "amd-smi list")?;
            let bus_id = item.get("bdf").and_then(Value::as_str).unwrap_or_default().to_owned();
            Ok(ScrubGpu { index, bus_id, persistence_mode: None })
        })
        .collect()
}

/// A compute process on an AMD GPU, as `node.validate_clean` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmdProcess {
    /// The tool's GPU index; `None` from `rocm-smi`, which lists processes for the whole host.
    pub gpu: Option<u32>,
    /// Its pid.
    pub pid: u32,
    /// Its name.
    pub name: String,
    /// Device memory it holds, MiB, where the tool says.
    pub vram_mib: Option<u64>,
}

/// Parses `amd-smi process --json`: one entry per (GPU, process), so a process holding two
/// GPUs is listed twice.
pub fn parse_amd_process_entries(text: &str) -> Result<Vec<AmdProcess>, OutputError> {
    let v = parse(text, "amd-smi process")?;
    let mut out = Vec::new();
    for item in gpu_array(&v, "amd-smi process")? {
        let Some(list) = item.get("process_list").and_then(Value::as_array) else { continue };
        let gpu = gpu_index(item, "amd-smi process")?;
        for entry in list {
            let info = entry.get("process_info").unwrap_or(entry);
            if info.is_string() {
                continue; // "No running processes detected"
            }
            let pid = info
                .get("pid")
                .and_then(as_u64)
                .and_then(|p| u32::try_from(p).ok())
                .ok_or_else(|| OutputError::NoPid { entry: info.to_string() })?;
            // ROCm 6.1+ splits the memory by kind; older versions give one `mem_usage` total.
            let vram_mib = info.get("memory_usage").and_then(|m| m.get("vram_mem")).or_else(|| info.get("mem_usage")).and_then(mib);
            let name = info.get("name").and_then(Value::as_str).unwrap_or_default().to_owned();
            out.push(AmdProcess { gpu: Some(gpu), pid, name, vram_mib });
        }
    }
    Ok(out)
}

/// Parses `amd-smi process --json` into the scrub's view: each process once.
pub fn parse_amd_processes(text: &str) -> Result<Vec<ScrubApp>, OutputError> {
    Ok(unique_apps(parse_amd_process_entries(text)?))
}

fn unique_apps(entries: Vec<AmdProcess>) -> Vec<ScrubApp> {
    let mut apps: Vec<ScrubApp> = Vec::new();
    for p in entries {
        if !apps.iter().any(|a| a.pid == p.pid) {
            apps.push(ScrubApp { pid: p.pid, name: p.name });
        }
    }
    apps
}

/// Parses `amd-smi metric --mem-usage --ecc --json`.
pub fn parse_amd_metrics(text: &str) -> Result<Vec<GpuState>, OutputError> {
    let v = parse(text, "amd-smi metric")?;
    gpu_array(&v, "amd-smi metric")?
        .iter()
        .map(|item| {
            let index = gpu_index(item, "amd-smi metric")?;
            let memory_used_mib = item.get("mem_usage").and_then(|m| m.get("used_vram")).and_then(mib);
            let mut problems = Vec::new();
            match item.get("ecc").and_then(|e| e.get("total_uncorrectable_count")).map(as_u64) {
                Some(Some(0)) => {}
                Some(Some(n)) => problems.push(format!("{n} uncorrectable ECC error(s)")),
                Some(None) | None => {} // N/A: a GPU without ECC
            }
            Ok(GpuState { label: format!("GPU {index}"), memory_used_mib, problems })
        })
        .collect()
}

/// Parses `rocm-smi --showbus --json`.
pub fn parse_rocm_bus(text: &str) -> Result<Vec<ScrubGpu>, OutputError> {
    let v = parse(text, "rocm-smi --showbus")?;
    let obj = v.as_object().ok_or(OutputError::NotAnObject { what: "rocm-smi --showbus" })?;
    let mut gpus: Vec<ScrubGpu> = obj
        .iter()
        .filter_map(|(card, fields)| {
            let index = card.strip_prefix("card")?.parse().ok()?;
            let bus_id = fields.get("PCI Bus").and_then(Value::as_str).unwrap_or_default().to_owned();
            Some(ScrubGpu { index, bus_id, persistence_mode: None })
        })
        .collect();
    gpus.sort_by_key(|g| g.index);
    Ok(gpus)
}

/// Parses `rocm-smi --showpids --json`: `"PID<n>": "<name>, <GPUs>, <VRAM bytes>, <SDMA>, <CU
/// occupancy>"`, host-wide (no GPU index).
pub fn parse_rocm_pid_entries(text: &str) -> Result<Vec<AmdProcess>, OutputError> {
    if text.contains("No KFD PIDs currently running") {
        return Ok(Vec::new());
    }
    let v = parse(text, "rocm-smi --showpids")?;
    let Some(system) = v.get("system").and_then(Value::as_object) else { return Ok(Vec::new()) };
    system
        .iter()
        .filter_map(|(key, value)| key.strip_prefix("PID").map(|pid| (pid, value)))
        .map(|(pid, value)| {
            let pid = pid.parse().map_err(|_| OutputError::BadPidKey { pid: pid.to_owned() })?;
            let fields: Vec<&str> = value.as_str().map(|s| s.split(", ").collect()).unwrap_or_default();
            let name = fields.first().copied().unwrap_or_default().to_owned();
            let vram_mib = fields.get(2).and_then(|b| b.trim().parse::<u64>().ok()).map(|b| b / (1024 * 1024));
            Ok(AmdProcess { gpu: None, pid, name, vram_mib })
        })
        .collect()
}

/// Parses `rocm-smi --showpids --json` into the scrub's view.
pub fn parse_rocm_pids(text: &str) -> Result<Vec<ScrubApp>, OutputError> {
    Ok(unique_apps(parse_rocm_pid_entries(text)?))
}

/// Parses `rocm-smi --showmeminfo vram --json`.
pub fn parse_rocm_vram(text: &str) -> Result<Vec<GpuState>, OutputError> {
    let v = parse(text, "rocm-smi --showmeminfo")?;
    let obj = v.as_object().ok_or(OutputError::NotAnObject { what: "rocm-smi --showmeminfo" })?;
    let mut states: Vec<(u32, GpuState)> = obj
        .iter()
        .filter_map(|(card, fields)| {
            let index: u32 = card.strip_prefix("card")?.parse().ok()?;
            let used = fields.get("VRAM Total Used Memory (B)").and_then(as_u64).map(|b| b / (1024 * 1024));
            Some((index, GpuState { label: format!("GPU {index}"), memory_used_mib: used, problems: Vec::new() }))
        })
        .collect();
    states.sort_by_key(|(i, _)| *i);
    Ok(states.into_iter().map(|(_, s)| s).collect())
}

fn judge_reset(tool: &str, gpu: &ScrubGpu, result: Result<CommandOutput, ExecError>) -> Done {
    match result {
        Ok(out) if out.success() && !out.stdout.contains("AMDSMI_STATUS_") && !out.stdout.contains("ERROR") => {
            Done::ok(format!("GPU {} ({}) reset", gpu.index, gpu.bus_id))
        }
        Ok(out) => Done::error(format!("{tool} reset of GPU {} failed (exit {}): {}", gpu.index, code(&out), tool_message(&out))),
        Err(e) => Done::error(e.to_string()),
    }
}

/// `amd-smi`.
pub struct AmdSmi<'t, 'a> {
    tools: &'t Tools<'a>,
}

impl<'t, 'a> AmdSmi<'t, 'a> {
    /// Through `tools`.
    pub fn new(tools: &'t Tools<'a>) -> Self {
        AmdSmi { tools }
    }

    fn program(&self) -> &Path {
        &self.tools.settings().amd_smi
    }

    /// The GPUs.
    pub fn gpus(&self) -> Result<Vec<ScrubGpu>, ToolError> {
        parse_amd_list(&run_json(self.tools, self.program(), &["list", "--json"])?).map_err(ToolError::Output)
    }

    /// The compute processes.
    pub fn apps(&self) -> Result<Vec<ScrubApp>, ToolError> {
        self.processes().map(unique_apps)
    }

    /// The compute processes, per GPU.
    pub fn processes(&self) -> Result<Vec<AmdProcess>, ToolError> {
        parse_amd_process_entries(&run_json(self.tools, self.program(), &["process", "--json"])?).map_err(ToolError::Output)
    }

    /// Memory used and ECC per GPU.
    pub fn states(&self) -> Result<Vec<GpuState>, ToolError> {
        let text = run_json(self.tools, self.program(), &["metric", "--mem-usage", "--ecc", "--json"])?;
        parse_amd_metrics(&text).map_err(ToolError::Output)
    }

    /// `amd-smi reset --gpureset -g N`.
    pub fn reset(&self, gpu: &ScrubGpu) -> Done {
        let index = gpu.index.to_string();
        judge_reset("amd-smi", gpu, self.tools.call(self.program(), &["reset", "--gpureset", "-g", &index]))
    }
}

/// `rocm-smi`.
pub struct RocmSmi<'t, 'a> {
    tools: &'t Tools<'a>,
}

impl<'t, 'a> RocmSmi<'t, 'a> {
    /// Through `tools`.
    pub fn new(tools: &'t Tools<'a>) -> Self {
        RocmSmi { tools }
    }

    fn program(&self) -> &Path {
        &self.tools.settings().rocm_smi
    }

    /// The GPUs.
    pub fn gpus(&self) -> Result<Vec<ScrubGpu>, ToolError> {
        parse_rocm_bus(&run_json(self.tools, self.program(), &["--showbus", "--json"])?).map_err(ToolError::Output)
    }

    /// The compute processes.
    pub fn apps(&self) -> Result<Vec<ScrubApp>, ToolError> {
        self.processes().map(unique_apps)
    }

    /// The compute processes (host-wide: no GPU index).
    pub fn processes(&self) -> Result<Vec<AmdProcess>, ToolError> {
        parse_rocm_pid_entries(&run_json(self.tools, self.program(), &["--showpids", "--json"])?).map_err(ToolError::Output)
    }

    /// Memory used per GPU (no ECC through rocm-smi).
    pub fn states(&self) -> Result<Vec<GpuState>, ToolError> {
        let text = run_json(self.tools, self.program(), &["--showmeminfo", "vram", "--json"])?;
        parse_rocm_vram(&text).map_err(ToolError::Output)
    }

    /// `rocm-smi --resetgpu -d N`.
    pub fn reset(&self, gpu: &ScrubGpu) -> Done {
        let index = gpu.index.to_string();
        judge_reset("rocm-smi", gpu, self.tools.call(self.program(), &["--resetgpu", "-d", &index]))
    }
}

/// Whether the `amdgpu` kernel module is loaded: its line in `<proc_dir>/modules`. No such
/// table (a kernel without modules, a test root without one) is "not loaded"; a table that
/// cannot be read is an error, so a host is never called AMD-free on a guess.
pub fn amdgpu_loaded(proc_dir: &Path) -> Result<bool, ModulesError> {
    let path = proc_dir.join("modules");
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(text.lines().any(|l| l.split_whitespace().next() == Some("amdgpu"))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(ModulesError { path, source }),
    }
}

/// The kernel's module table could not be read.
#[derive(Debug, thiserror::Error)]
#[error("cannot read {}: {source}", path.display())]
pub struct ModulesError {
    /// The table (`<proc_dir>/modules`).
    pub path: std::path::PathBuf,
    /// The OS error.
    #[source]
    pub source: std::io::Error,
}

/// Why the AMD tools could not report for `node.validate_clean`.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The installed tool could not list the compute processes.
    #[error("cannot list AMD compute processes: {source}")]
    Processes {
        /// The tool's failure.
        #[source]
        source: ToolError,
    },
    /// The tool could not report memory used.
    #[error("cannot read AMD GPU memory used: {source}")]
    Memory {
        /// The tool's failure.
        #[source]
        source: ToolError,
    },
}

/// What the host's AMD tool says for `node.validate_clean`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmdReport {
    /// The tool that answered.
    pub backend: Backend,
    /// The compute processes.
    pub processes: Vec<AmdProcess>,
    /// Memory used per GPU, when asked for.
    pub memory: Option<Vec<GpuState>>,
}

/// Asks `amd-smi`, else (not installed) `rocm-smi`, for the compute processes and, when
/// `with_memory`, the memory used per GPU; `Ok(None)` when neither tool is installed. A tool
/// that is installed and fails is an error naming it: it is not replaced by the other.
pub fn validation_report(tools: &Tools<'_>, with_memory: bool) -> Result<Option<AmdReport>, ReportError> {
    let amd_smi = AmdSmi::new(tools);
    let rocm_smi = RocmSmi::new(tools);
    let (backend, processes) = match amd_smi.processes() {
        Ok(p) => (Backend::AmdSmi, p),
        Err(ToolError::NotInstalled(_)) => match rocm_smi.processes() {
            Ok(p) => (Backend::RocmSmi, p),
            Err(ToolError::NotInstalled(_)) => return Ok(None),
            Err(source) => return Err(ReportError::Processes { source }),
        },
        Err(source) => return Err(ReportError::Processes { source }),
    };
    let memory = if with_memory {
        let states = if backend == Backend::AmdSmi { amd_smi.states() } else { rocm_smi.states() };
        Some(states.map_err(|source| ReportError::Memory { source })?)
    } else {
        None
    };
    Ok(Some(AmdReport { backend, processes, memory }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amd_smi_list_and_rocm7_gpu_data_wrapper_parse() {
        let list = r#"[{"gpu": 0, "bdf": "0000:0c:00.0", "uuid": "6cff74a1-0000-1000-80b6-e9d4c53e3c8e", "kfd_id": 45412, "node_id": 2, "partition_id": 0},
                      {"gpu": 1, "bdf": "0000:22:00.0", "uuid": "a1ff74a1-0000-1000-8092-5ab5d1c7a2b4", "kfd_id": 9462, "node_id": 3, "partition_id": 0}]"#;
        let gpus = parse_amd_list(list).expect("parses");
        assert_eq!((gpus[1].index, gpus[1].bus_id.as_str()), (1, "0000:22:00.0"));
        let wrapped = format!(r#"{{"gpu_data": {list}}}"#);
        assert_eq!(parse_amd_list(&wrapped).expect("parses"), gpus);
    }

    #[test]
    fn amd_smi_processes_parse_and_the_none_marker_is_no_process() {
        let text = r#"[{"gpu": 0, "process_list": [{"process_info": {"name": "python3", "pid": 41872,
            "memory_usage": {"gtt_mem": {"value": 2097152, "unit": "B"}, "cpu_mem": {"value": 0, "unit": "B"}, "vram_mem": {"value": 1073741824, "unit": "B"}},
            "mem_usage": {"value": 1075838976, "unit": "B"}, "usage": {"gfx": {"value": 0, "unit": "ns"}, "enc": {"value": 0, "unit": "ns"}}}}]},
            {"gpu": 1, "process_list": [{"process_info": "No running processes detected"}]}]"#;
        assert_eq!(parse_amd_processes(text).expect("parses"), vec![ScrubApp { pid: 41872, name: "python3".into() }]);
        assert!(parse_amd_processes(r#"[{"gpu": 0, "process_list": []}]"#).expect("parses").is_empty());
    }

    #[test]
    fn amd_smi_metrics_give_memory_in_mib_and_uncorrectable_ecc() {
        let text = r#"[{"gpu": 0, "mem_usage": {"total_vram": {"value": 196592, "unit": "MB"}, "used_vram": {"value": 283, "unit": "MB"}, "free_vram": {"value": 196309, "unit": "MB"}},
                        "ecc": {"total_correctable_count": 4, "total_uncorrectable_count": 2, "total_deferred_count": 0, "cache_correctable_count": 0, "cache_uncorrectable_count": 0}},
                       {"gpu": 1, "mem_usage": {"used_vram": "N/A"}, "ecc": {"total_uncorrectable_count": "N/A"}}]"#;
        let s = parse_amd_metrics(text).expect("parses");
        assert_eq!((s[0].memory_used_mib, s[0].problems.clone()), (Some(283), vec!["2 uncorrectable ECC error(s)".to_owned()]));
        assert_eq!((s[1].memory_used_mib, s[1].problems.len()), (None, 0));
    }

    #[test]
    fn rocm_smi_fallback_outputs_parse() {
        let bus = parse_rocm_bus(r#"{"card1": {"PCI Bus": "0000:22:00.0"}, "card0": {"PCI Bus": "0000:0C:00.0"}}"#).expect("parses");
        assert_eq!(bus.iter().map(|g| g.index).collect::<Vec<_>>(), vec![0, 1]);
        let pids = parse_rocm_pids(r#"{"system": {"PID41872": "python3, 1, 1073741824, 0, 0"}}"#).expect("parses");
        assert_eq!(pids, vec![ScrubApp { pid: 41872, name: "python3".into() }]);
        assert!(parse_rocm_pids("No KFD PIDs currently running\n").expect("none").is_empty());
        let vram = parse_rocm_vram(r#"{"card0": {"VRAM Total Memory (B)": "68702699520", "VRAM Total Used Memory (B)": "11087872"}}"#)
            .expect("parses");
        assert_eq!(vram[0].memory_used_mib, Some(10));
    }

    #[test]
    fn amd_smi_process_entries_keep_the_gpu_and_the_vram_held() {
        let text = r#"{"gpu_data": [{"gpu": 0, "process_list": [{"process_info": {"name": "python3", "pid": 41872,
            "memory_usage": {"gtt_mem": {"value": 2097152, "unit": "B"}, "cpu_mem": {"value": 0, "unit": "B"}, "vram_mem": {"value": 1073741824, "unit": "B"}},
            "mem_usage": {"value": 1075838976, "unit": "B"}}}]},
            {"gpu": 3, "process_list": [{"process_info": {"name": "python3", "pid": 41872, "mem_usage": {"value": 2147483648, "unit": "B"}}},
                                        {"process_info": {"name": "torchrun", "pid": 41990}}]}]}"#;
        let entries = parse_amd_process_entries(text).expect("parses");
        let seen: Vec<(Option<u32>, u32, Option<u64>)> = entries.iter().map(|p| (p.gpu, p.pid, p.vram_mib)).collect();
        assert_eq!(seen, vec![(Some(0), 41872, Some(1024)), (Some(3), 41872, Some(2048)), (Some(3), 41990, None)]);
        // The scrub sees each process once.
        assert_eq!(parse_amd_processes(text).expect("parses").iter().map(|a| a.pid).collect::<Vec<_>>(), vec![41872, 41990]);
    }

    #[test]
    fn amd_smi_error_object_is_a_failure_not_an_empty_list() {
        let text = r#"{"error": "AMDSMI has returned error '-1010' - 'Permission Denied'", "code": -1010}"#;
        for result in [parse_amd_process_entries(text).map(|_| ()), parse_amd_metrics(text).map(|_| ()), parse_amd_list(text).map(|_| ())] {
            let e = result.expect_err("an error object").to_string();
            assert!(e.ends_with("reported an error: AMDSMI has returned error '-1010' - 'Permission Denied' (code -1010)"), "{e}");
        }
        let bare = parse_amd_process_entries(r#"{"error": {"detail": "x"}}"#).expect_err("an error object").to_string();
        assert!(bare.contains(r#"{"detail":"x"} (code none)"#), "{bare}");
    }

    #[test]
    fn rocm_smi_pid_entries_carry_the_vram_and_no_gpu() {
        let p = parse_rocm_pid_entries(r#"{"system": {"PID41872": "python3, 2, 1073741824, 0, 0", "PID7": "odd"}}"#).expect("parses");
        let seen: Vec<(Option<u32>, u32, &str, Option<u64>)> = p.iter().map(|e| (e.gpu, e.pid, e.name.as_str(), e.vram_mib)).collect();
        assert_eq!(seen, vec![(None, 41872, "python3", Some(1024)), (None, 7, "odd", None)]);
    }

    #[test]
    fn the_amdgpu_driver_is_loaded_when_proc_modules_lists_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(amdgpu_loaded(dir.path()).ok(), Some(false), "no modules table");
        let modules = dir.path().join("modules");
        std::fs::write(&modules, "drm_ttm_helper 16384 1 amdgpu, Live 0xffffffffc0b40000\namdgpu_extra 4096 0 - Live 0x0\n")
            .expect("write");
        assert_eq!(amdgpu_loaded(dir.path()).ok(), Some(false), "a module that only names amdgpu as a user, or shares its prefix");
        std::fs::write(&modules, "nvme 57344 3 - Live 0xffffffffc0400000\namdgpu 15241216 0 - Live 0xffffffffc0e00000\n").expect("write");
        assert_eq!(amdgpu_loaded(dir.path()).ok(), Some(true));
        std::fs::remove_file(&modules).expect("rm");
        std::fs::create_dir(&modules).expect("a directory where the table should be");
        assert!(
            amdgpu_loaded(dir.path()).is_err_and(|e| e.to_string().contains("cannot read")),
            "an unreadable table is not \"not loaded\""
        );
    }
}
