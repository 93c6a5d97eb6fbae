//! `node.validate_clean`: is anything of the last tenant left on the host? Five checks —
//! users, processes, mounts, scratch residue and (when asked) GPU allocations — each reported
//! as one step: `ok` "clean", or `error` with `data: {"residues": [...]}` listing what was
//! found (an object per residue, with a `kind`).
//!
//! Decisions:
//! - **Every check runs.** Unlike the other tasks, validation does not stop at the first
//!   failing step: the coordinator quarantines on any residue and the operator needs the
//!   whole list, so the checks are run one after another here (not through
//!   [`super::steps::execute`]) and the task fails when any of them reports residue.
//! - A check that cannot read its facts (passwd unreadable, `/proc` unlistable, nvidia-smi
//!   failing) is an error too: a host that cannot be shown clean is not clean.
//! - A malformed passwd line is a residue: it may hide a tenant user.
//! - Tenant processes include zombies (their uid still names a tenant).
//! - Mounts: every mount of a `weka_fs_types` type anywhere, and every mount strictly below a
//!   storage root (the root itself being a mount point is the normal layout).
//! - Scratch: any entry directly inside a storage root, except a root-owned `lost+found`
//!   directory (mkfs creates it); at most [`MAX_SCRATCH_NAMES`] names are listed, with the
//!   total count. A storage root that does not exist holds nothing.
//! - GPU: compute apps from `nvidia-smi --query-compute-apps`. When nvidia-smi is missing the
//!   check is **skipped** if the host has no NVIDIA driver loaded (`<proc_dir>/driver/nvidia/gpus`
//!   absent or empty: no tenant can hold a GPU context), and **fails** if the driver reports
//!   GPUs (they cannot be verified). Other vendors' tools are not queried here.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use drover_proto::report::StepResult;
use serde_json::{Value, json};

use super::TaskEnv;
use super::host_facts;
use super::mounts;
use super::steps::{Done, Step};
use crate::exec::{CommandOutput, CommandRunner, CommandSpec, ExecError};
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
    /// No GPU compute app.
    Gpu,
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
pub fn run(check_gpu: bool, env: &TaskEnv<'_>) -> Vec<StepResult> {
    plan(check_gpu)
        .iter()
        .map(|step| {
            let done = check(step.action, env);
            StepResult { name: step.name.clone(), outcome: done.outcome, message: done.message, data: done.data }
        })
        .collect()
}

/// Runs one check.
pub fn check(c: Check, env: &TaskEnv<'_>) -> Done {
    match c {
        Check::Users => users(env),
        Check::Processes => processes(env),
        Check::Mounts => mount_residues(env),
        Check::Scratch => scratch(env),
        Check::Gpu => gpu(env),
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
        Err(e) => Done::error(e),
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

/// `&dyn CommandRunner` as a [`CommandRunner`] value (what [`NvidiaSmi`] holds).
struct Borrowed<'a>(&'a dyn CommandRunner);

impl CommandRunner for Borrowed<'_> {
    fn run(&self, cmd: &CommandSpec) -> Result<CommandOutput, ExecError> {
        self.0.run(cmd)
    }
}

/// GPUs the NVIDIA driver reports (`<proc_dir>/driver/nvidia/gpus/<bus id>`).
fn nvidia_driver_gpus(proc_dir: &Path) -> usize {
    std::fs::read_dir(proc_dir.join("driver/nvidia/gpus")).map_or(0, |d| d.filter_map(Result::ok).count())
}

fn gpu(env: &TaskEnv<'_>) -> Done {
    let s = env.settings;
    let tool = NvidiaSmi::with_program(Borrowed(env.runner), &s.nvidia_smi, Duration::from_secs(s.gpu_tool_timeout_secs));
    match tool.query_compute_apps() {
        Ok(apps) => verdict(
            "GPU",
            apps.iter()
                .map(|a| {
                    json!({ "kind": "gpuProcess", "pid": a.pid, "processName": a.process_name, "gpuUuid": a.gpu_uuid, "usedMemoryMib": a.used_memory_mib })
                })
                .collect(),
        ),
        Err(GpuError::NoTool { program }) => match nvidia_driver_gpus(&s.proc_dir) {
            0 => Done::skipped(format!("{program} not found and no NVIDIA driver GPUs: nothing to check")),
            n => Done::error(format!("{program} not found but the NVIDIA driver reports {n} GPU(s): cannot verify them")),
        },
        Err(e) => Done::error(format!("cannot query GPU compute apps: {e}")),
    }
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
}
