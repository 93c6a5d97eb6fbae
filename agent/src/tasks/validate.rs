//! `node.validate_clean`: is anything of the last tenant left on the host? Five checks —
//! users, processes, mounts, scratch residue and (when asked) GPUs, NVIDIA and AMD — each reported
//! as one step: `ok` "clean", or `error` with `data: {"residues": [...]}` listing what was
//! found (an object per residue, with a `kind`).
//!
//! Decisions:
//! - **Every check runs.** Unlike the other tasks, validation does not stop at the first
//!   failing step: the coordinator quarantines on any residue and the operator needs the
//!   whole list, so the checks are run one after another here (not through
//!   [`super::steps::execute`]) and the task fails when any of them reports residue.
//! - A check that cannot read its facts (passwd unreadable, `/proc` unlistable, a GPU tool
//!   failing) is an error too: a host that cannot be shown clean is not clean.
//! - A malformed passwd line is a residue: it may hide a tenant user.
//! - Tenant processes include zombies (their uid still names a tenant).
//! - Mounts: every mount of a `weka_fs_types` type anywhere, and every mount strictly below a
//!   storage root (the root itself being a mount point is the normal layout).
//! - Scratch: any entry directly inside a storage root, except a root-owned `lost+found`
//!   directory (mkfs creates it); at most [`MAX_SCRATCH_NAMES`] names are listed, with the
//!   total count. A storage root that does not exist holds nothing.
//! - GPU: every vendor whose tool or driver is on the host is checked, both when both are
//!   (one `gpu` step; each residue names its `vendor`). Clean means the same on both: no
//!   compute process on any GPU (`gpuProcess`: pid, name, and the GPU — NVIDIA's UUID, AMD's
//!   index) and, when the task gives a threshold, no GPU with more memory used than it
//!   (`gpuMemory`; memory the tool cannot tell counts as used) — the scrub's verification
//!   without the health part (ECC, remapped rows are not a tenant's residue).
//!   - NVIDIA: `nvidia-smi --query-compute-apps`, and `--query-gpu` for memory.
//!   - AMD: `amd-smi process --json` and `amd-smi metric --mem-usage --ecc --json`, else (not
//!     installed) `rocm-smi --showpids` / `--showmeminfo vram`, as `node.gpu_scrub` picks them.
//!
//!   A vendor whose tool is missing is **skipped** when its driver is not loaded (NVIDIA:
//!   `<proc_dir>/driver/nvidia/gpus` absent or empty; AMD: no `amdgpu` line in
//!   `<proc_dir>/modules`): no tenant can hold a GPU context. With the driver loaded it
//!   **fails**, naming the tool. An installed tool that fails, times out, prints an error or
//!   output that does not parse fails the step too, naming the tool and what it said: it is
//!   never read as "no GPU". The step is skipped only when no vendor had anything to check.
//!   The `checked` list in the step's data names the tools that answered.
//!
//!   The task kind (`ValidateClean { check_gpu }`) carries no memory threshold yet, so the
//!   runner passes `None` and memory is not judged; [`Params::memory_used_threshold_mib`]
//!   is where the scrub's threshold goes once the task carries it. A fixed agent-side number
//!   would be wrong: what an idle GPU reports used (driver and firmware reservations) differs
//!   by model, which is why the scrub's threshold is the operator's setting.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use drover_proto::report::StepResult;
use serde_json::{Value, json};

use super::TaskEnv;
use super::amd;
use super::gpu_tools::{Backend, Borrowed, GpuState, Tools};
use super::host_facts;
use super::mounts;
use super::steps::{Done, Step};
use crate::gpu::{GpuError, GpuTool, NvidiaSmi};

/// Most scratch entry names listed per storage root.
pub const MAX_SCRATCH_NAMES: usize = 20;

/// One check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// No passwd entry in the tenant uid range (and no malformed line).
    Users,
    /// No process of a tenant uid.
    Processes,
    /// No tenant-type mount and no mount below a storage root.
    Mounts,
    /// Every storage root empty.
    Scratch,
    /// No GPU compute process and, with a threshold, no GPU memory in use above it.
    Gpu,
}

/// The task's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Params {
    /// Run the GPU check.
    pub check_gpu: bool,
    /// Memory used per GPU above this (MiB) is residue; `None`: memory is not judged (the
    /// task carries no threshold yet, see the module doc).
    pub memory_used_threshold_mib: Option<u64>,
}

/// The plan: every check, the GPU one only when asked.
pub fn plan(check_gpu: bool) -> Vec<Step<Check>> {
    let mut p = vec![
        Step::new("users", Check::Users),
        Step::new("processes", Check::Processes),
        Step::new("mounts", Check::Mounts),
        Step::new("scratch", Check::Scratch),
    ];
    if check_gpu {
        p.push(Step::new("gpu", Check::Gpu));
    }
    p
}

/// Runs the task: every check, whatever the others found.
pub fn run(params: &Params, env: &TaskEnv<'_>) -> Vec<StepResult> {
    plan(params.check_gpu)
        .iter()
        .map(|step| {
            let done = check(step.action, params, env);
            StepResult { name: step.name.clone(), outcome: done.outcome, message: done.message, data: done.data }
        })
        .collect()
}

/// Runs one check.
pub fn check(c: Check, params: &Params, env: &TaskEnv<'_>) -> Done {
    match c {
        Check::Users => users(env),
        Check::Processes => processes(env),
        Check::Mounts => mount_residues(env),
        Check::Scratch => scratch(env),
        Check::Gpu => gpu(env, params.memory_used_threshold_mib),
    }
}

/// `ok` "clean" when there is nothing, else `error` with the residues.
fn verdict(what: &str, residues: Vec<Value>) -> Done {
    if residues.is_empty() {
        Done::ok("clean")
    } else {
        Done::error(format!("{} {what} residue(s)", residues.len())).with_data(json!({ "residues": residues }))
    }
}

fn users(env: &TaskEnv<'_>) -> Done {
    let s = env.settings;
    let text = match std::fs::read_to_string(&s.passwd_file) {
        Ok(t) => t,
        Err(e) => return Done::error(format!("cannot read {}: {e}", s.passwd_file.display())),
    };
    let p = host_facts::tenant_users(&text, s);
    let mut residues: Vec<Value> =
        p.users.iter().map(|u| json!({ "kind": "user", "name": u.name, "uid": u.uid, "home": u.home.display().to_string() })).collect();
    residues.extend(p.malformed.iter().map(|m| json!({ "kind": "malformedPasswdLine", "line": m.line, "message": m.message })));
    verdict("user", residues)
}

fn processes(env: &TaskEnv<'_>) -> Done {
    match host_facts::tenant_processes(&env.settings.proc_dir, env.settings) {
        Err(e) => Done::error(e.to_string()),
        Ok(procs) => verdict(
            "process",
            procs.iter().map(|p| json!({ "kind": "process", "pid": p.pid, "uid": p.uid, "comm": p.comm, "zombie": p.zombie })).collect(),
        ),
    }
}

fn mount_residues(env: &TaskEnv<'_>) -> Done {
    let s = env.settings;
    let table = match mounts::read(&s.mountinfo_file) {
        Ok(t) => t,
        Err(e) => return Done::error(e.to_string()),
    };
    let residues = table
        .iter()
        .filter_map(|m| {
            let tenant_type = s.weka_fs_types.contains(&m.fs_type);
            let root = s.storage_roots.iter().find(|r| m.mount_point.starts_with(r) && m.mount_point != **r);
            (tenant_type || root.is_some()).then(|| {
                json!({
                    "kind": "mount",
                    "mountPoint": m.mount_point.display().to_string(),
                    "fsType": m.fs_type,
                    "source": m.source,
                    "reason": if tenant_type { "tenant filesystem type" } else { "below a storage root" },
                })
            })
        })
        .collect();
    verdict("mount", residues)
}

fn kept_entry(dir: &Path, name: &str) -> bool {
    name == "lost+found" && std::fs::symlink_metadata(dir.join(name)).is_ok_and(|m| m.is_dir() && m.uid() == 0)
}

fn scratch(env: &TaskEnv<'_>) -> Done {
    let mut residues = Vec::new();
    for root in &env.settings.storage_roots {
        let entries = match std::fs::read_dir(root) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Done::error(format!("cannot list {}: {e}", root.display())),
        };
        let mut names: Vec<String> =
            entries.filter_map(Result::ok).map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| !kept_entry(root, n)).collect();
        if names.is_empty() {
            continue;
        }
        names.sort();
        let count = names.len();
        names.truncate(MAX_SCRATCH_NAMES);
        residues.push(json!({ "kind": "scratch", "root": root.display().to_string(), "count": count, "entries": names }));
    }
    verdict("scratch", residues)
}

/// What one vendor's GPUs showed.
#[derive(Debug, Clone, PartialEq)]
pub enum VendorCheck {
    /// Nothing to check: neither the tool nor the driver is there.
    Absent(String),
    /// The tool answered: the residues it showed (none: clean).
    Checked {
        /// The tool that answered.
        tool: &'static str,
        /// Compute processes, memory in use.
        residues: Vec<Value>,
    },
    /// The GPUs could not be shown clean (the tool missing with the driver loaded, failing, or
    /// unreadable).
    Failed(String),
}

/// GPUs the NVIDIA driver reports (`<proc_dir>/driver/nvidia/gpus/<bus id>`).
fn nvidia_driver_gpus(proc_dir: &Path) -> usize {
    std::fs::read_dir(proc_dir.join("driver/nvidia/gpus")).map_or(0, |d| d.filter_map(Result::ok).count())
}

/// A memory residue, or `None` when the GPU's memory used is at most `threshold`. Memory the
/// tool cannot tell is a residue too: the GPU cannot be shown clean.
fn memory_residue(vendor: &str, state: &GpuState, threshold: u64) -> Option<Value> {
    let over = state.memory_used_mib.is_none_or(|used| used > threshold);
    over.then(|| json!({ "kind": "gpuMemory", "vendor": vendor, "gpu": state.label, "memoryUsedMib": state.memory_used_mib, "thresholdMib": threshold }))
}

/// NVIDIA: compute apps from `nvidia-smi --query-compute-apps`, memory used from `--query-gpu`.
pub fn nvidia_check(env: &TaskEnv<'_>, threshold_mib: Option<u64>) -> VendorCheck {
    let s = env.settings;
    let tool = NvidiaSmi::with_program(Borrowed(env.runner), &s.nvidia_smi, Duration::from_secs(s.gpu_tool_timeout_secs));
    let apps = match tool.query_compute_apps() {
        Ok(apps) => apps,
        Err(GpuError::NoTool { program }) => {
            return match nvidia_driver_gpus(&s.proc_dir) {
                0 => VendorCheck::Absent(format!("{program} not found and no NVIDIA driver GPUs")),
                n => VendorCheck::Failed(format!("{program} not found but the NVIDIA driver reports {n} GPU(s): cannot verify them")),
            };
        }
        Err(e) => return VendorCheck::Failed(format!("cannot query GPU compute apps: {e}")),
    };
    let mut residues: Vec<Value> = apps
        .iter()
        .map(|a| {
            json!({ "kind": "gpuProcess", "vendor": "nvidia", "pid": a.pid, "processName": a.process_name, "gpuUuid": a.gpu_uuid, "usedMemoryMib": a.used_memory_mib })
        })
        .collect();
    if let Some(threshold) = threshold_mib {
        match tool.query_gpus() {
            Ok(gpus) => residues.extend(gpus.iter().filter_map(|g| {
                let state = GpuState {
                    label: format!("GPU {} ({})", g.index, g.pci_bus_id),
                    memory_used_mib: g.memory_used_mib,
                    problems: Vec::new(),
                };
                memory_residue("nvidia", &state, threshold)
            })),
            Err(e) => return VendorCheck::Failed(format!("cannot query NVIDIA GPU memory used: {e}")),
        }
    }
    VendorCheck::Checked { tool: Backend::Nvidia.tool(), residues }
}

/// AMD: compute processes from `amd-smi process` (else `rocm-smi --showpids`), memory used from
/// `amd-smi metric --mem-usage` (else `rocm-smi --showmeminfo vram`). With neither tool, the
/// check fails if the `amdgpu` driver is loaded.
pub fn amd_check(env: &TaskEnv<'_>, threshold_mib: Option<u64>) -> VendorCheck {
    let s = env.settings;
    let tools = Tools::new(s, env.runner);
    let report = match amd::validation_report(&tools, threshold_mib.is_some()) {
        Ok(Some(r)) => r,
        Ok(None) => {
            let (amd_smi, rocm_smi) = (s.amd_smi.display(), s.rocm_smi.display());
            return match amd::amdgpu_loaded(&s.proc_dir) {
                Ok(false) => VendorCheck::Absent(format!("{amd_smi} and {rocm_smi} not found and no amdgpu driver loaded")),
                Ok(true) => VendorCheck::Failed(format!(
                    "{amd_smi} not found (nor {rocm_smi}) but the amdgpu driver is loaded: cannot verify the AMD GPUs"
                )),
                Err(e) => VendorCheck::Failed(format!(
                    "{amd_smi} and {rocm_smi} not found, and whether the amdgpu driver is loaded is unknown: {e}"
                )),
            };
        }
        Err(e) => return VendorCheck::Failed(e.to_string()),
    };
    let mut residues: Vec<Value> = report
        .processes
        .iter()
        .map(|p| json!({ "kind": "gpuProcess", "vendor": "amd", "pid": p.pid, "processName": p.name, "gpu": p.gpu, "usedMemoryMib": p.vram_mib }))
        .collect();
    if let (Some(threshold), Some(memory)) = (threshold_mib, &report.memory) {
        residues.extend(memory.iter().filter_map(|state| memory_residue("amd", state, threshold)));
    }
    VendorCheck::Checked { tool: report.backend.tool(), residues }
}

/// Folds the vendors' checks into the `gpu` step: skipped when no vendor has anything to
/// check, an error when one could not be shown clean (with whatever residues the others
/// showed), else the residues' verdict. The data names the tools that answered.
pub fn judge_gpu(checks: Vec<VendorCheck>) -> Done {
    let mut absent = Vec::new();
    let mut failures = Vec::new();
    let mut tools = Vec::new();
    let mut residues = Vec::new();
    for check in checks {
        match check {
            VendorCheck::Absent(why) => absent.push(why),
            VendorCheck::Failed(why) => failures.push(why),
            VendorCheck::Checked { tool, residues: r } => {
                tools.push(tool);
                residues.extend(r);
            }
        }
    }
    if failures.is_empty() && tools.is_empty() {
        return Done::skipped(format!("{}: nothing to check", absent.join("; ")));
    }
    let count = residues.len();
    let data = json!({ "residues": residues, "checked": tools });
    if !failures.is_empty() {
        Done::error(failures.join("; ")).with_data(data)
    } else if count > 0 {
        // The same message as `verdict`'s, so both vendors read like the other checks.
        Done::error(format!("{count} GPU residue(s)")).with_data(data)
    } else {
        Done::ok("clean").with_data(data)
    }
}

fn gpu(env: &TaskEnv<'_>, threshold_mib: Option<u64>) -> Done {
    judge_gpu(vec![nvidia_check(env, threshold_mib), amd_check(env, threshold_mib)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gpu_check_is_planned_only_when_asked() {
        let names = |p: Vec<Step<Check>>| p.into_iter().map(|s| s.name).collect::<Vec<_>>();
        assert_eq!(names(plan(false)), ["users", "processes", "mounts", "scratch"]);
        assert_eq!(names(plan(true)).last().map(String::as_str), Some("gpu"));
    }

    #[test]
    fn gpu_verdict_fails_on_any_failure_skips_only_when_no_vendor_is_there() {
        use drover_proto::report::StepOutcome;
        let absent = |w: &str| VendorCheck::Absent(w.to_owned());
        let process = json!({ "kind": "gpuProcess", "vendor": "amd", "pid": 7, "gpu": 1 });
        let d = judge_gpu(vec![absent("no nvidia"), absent("no amd")]);
        assert_eq!((d.outcome, d.message.as_str()), (StepOutcome::Skipped, "no nvidia; no amd: nothing to check"));
        let d = judge_gpu(vec![absent("no nvidia"), VendorCheck::Checked { tool: "amd-smi", residues: vec![] }]);
        assert_eq!((d.outcome, d.message.as_str(), d.data["checked"].clone()), (StepOutcome::Ok, "clean", json!(["amd-smi"])));
        let d = judge_gpu(vec![
            VendorCheck::Checked { tool: "nvidia-smi", residues: vec![] },
            VendorCheck::Checked { tool: "amd-smi", residues: vec![process.clone()] },
        ]);
        assert_eq!((d.outcome, d.message.as_str(), d.data["residues"].clone()), (StepOutcome::Error, "1 GPU residue(s)", json!([process])));
        // A failing vendor fails the step, and the other's residues are still listed.
        let d = judge_gpu(vec![
            VendorCheck::Failed("nvidia-smi: exit 9".into()),
            VendorCheck::Checked { tool: "amd-smi", residues: vec![process.clone()] },
        ]);
        assert_eq!(
            (d.outcome, d.message.as_str(), d.data["residues"].clone()),
            (StepOutcome::Error, "nvidia-smi: exit 9", json!([process]))
        );
    }

    #[test]
    fn memory_above_the_threshold_or_unknown_is_residue() {
        let state = |used: Option<u64>| GpuState { label: "GPU 0".into(), memory_used_mib: used, problems: vec!["ignored here".into()] };
        assert_eq!(memory_residue("amd", &state(Some(512)), 512), None, "at the threshold is clean");
        let over = memory_residue("amd", &state(Some(513)), 512).expect("over");
        assert_eq!(
            (over["kind"].clone(), over["memoryUsedMib"].clone(), over["thresholdMib"].clone()),
            (json!("gpuMemory"), json!(513), json!(512))
        );
        assert_eq!(memory_residue("nvidia", &state(None), 512).map(|r| r["memoryUsedMib"].clone()), Some(Value::Null));
    }
}
