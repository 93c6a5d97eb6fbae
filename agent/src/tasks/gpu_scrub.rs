//! `node.gpu_scrub`: leave the GPUs as a new tenant should find them.
//!
//! 1. **Facts** ([`gather`]): which vendor tool answers (`Auto`: `nvidia-smi`, then `amd-smi`,
//!    then `rocm-smi`), the GPUs (bus id, persistence mode), the compute processes, and each
//!    process's owner read from `<proc_dir>/<pid>/status` (`Uid:` real, effective, saved, fs).
//! 2. **Plan** ([`plan`], pure, unit-tested): compute processes running →
//!    - policy `refuse`: one failing step naming the pids;
//!    - policy `stopTenant`: one failing step if any process is not a tenant's (a uid of root,
//!      of the system, or one that cannot be read — *every* uid of the `Uid:` line must be in
//!      the tenant range, so a setuid-root binary a tenant started is not a tenant's); else
//!      one `stop pid N` step each;
//!
//!    then `persistence-off <bus>` for each NVIDIA GPU with persistence mode on,
//!    `reset <bus>` per GPU, `persistence-restore <bus>`, `verify` (re-query: no compute
//!    process, memory used ≤ the threshold, no pending retired pages / remapped rows, no
//!    volatile uncorrectable ECC) and, when asked, `dcgm-diag -r N`.
//! 3. **Execute** ([`execute_plan`]): [`steps::execute`] stops at the first error, but persistence
//!    mode must come back even when a reset failed. So the plan is run in three parts: the
//!    steps before the `persistence-restore` block stop at their first error as usual; the
//!    restore block then runs whenever a `persistence-off` step ran (each restore on its own,
//!    so one failing restore does not skip the others); the steps after it (`verify`,
//!    `dcgm-diag`) run only if nothing failed, else they are reported "not run". The failed
//!    reset stays an error in the result and the task fails.
//!
//! Stopping a process ([`stop_process`]): re-read its owner right before each signal (the pid
//! may have been reused), SIGTERM, poll `<proc_dir>/<pid>/status` every
//! [`POLL_INTERVAL`] through the task's clock for up to `process_stop_grace_secs`, then
//! SIGKILL and poll up to [`KILL_WAIT`]; still alive (e.g. stuck in uninterruptible sleep in
//! the driver) → the step fails. A zombie counts as gone: it holds no GPU context.

use std::path::Path;
use std::time::Duration;

use drover_proto::report::StepResult;
use drover_proto::task::{ComputeProcessPolicy, GpuVendor};
use nix::errno::Errno;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;

use super::TaskEnv;
use super::TaskSettings;
use super::gpu_tools::{Backend, DetectError, ScrubGpu, ToolError, Tools};
use super::steps::{self, Done, Step};
use crate::timekeeping::Clock;

/// How often a stopping process is looked at.
pub const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// How long a process may take to disappear after SIGKILL.
pub const KILL_WAIT: Duration = Duration::from_secs(5);

/// The task's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    /// Which vendor's tools.
    pub vendor: GpuVendor,
    /// What to do about running compute processes.
    pub policy: ComputeProcessPolicy,
    /// After the reset, memory used above this (MiB) per GPU fails verification.
    pub memory_used_threshold_mib: u64,
    /// `dcgmi diag -r N` when set.
    pub dcgm_diag_level: Option<u8>,
}

/// Who owns a process, from `<proc_dir>/<pid>/status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// The `Uid:` line: real, effective, saved set, filesystem.
    Uids(Vec<u32>),
    /// No such process (it exited), or a zombie.
    Gone,
    /// The status could not be read or parsed.
    Unknown(String),
}

impl Owner {
    /// The first uid that is not a tenant's, if any (`None` when all are).
    fn non_tenant_uid(&self, settings: &TaskSettings) -> Option<u32> {
        match self {
            Owner::Uids(uids) => uids.iter().copied().find(|u| !settings.is_tenant_uid(*u)),
            _ => None,
        }
    }
}

/// A compute process and its owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppFact {
    /// Its pid.
    pub pid: u32,
    /// Its name, as the tool lists it.
    pub name: String,
    /// Its owner.
    pub owner: Owner,
}

/// What the plan is made from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    /// The tool that answered.
    pub backend: Backend,
    /// The GPUs.
    pub gpus: Vec<ScrubGpu>,
    /// The compute processes (one entry per pid).
    pub apps: Vec<AppFact>,
}

/// What one step does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Fail with this message (policy refusal, a non-tenant process, a bad parameter).
    Refuse(String),
    /// Nothing to do; reported skipped with this message.
    Nothing(String),
    /// SIGTERM, wait, SIGKILL a tenant's process.
    StopProcess {
        /// The pid.
        pid: u32,
    },
    /// `nvidia-smi -i <bus> -pm 0`.
    PersistenceOff {
        /// The GPU.
        bus: String,
    },
    /// Reset one GPU.
    Reset {
        /// The GPU.
        gpu: ScrubGpu,
    },
    /// `nvidia-smi -i <bus> -pm 1`.
    PersistenceRestore {
        /// The GPU.
        bus: String,
    },
    /// Re-query and check.
    Verify,
    /// `dcgmi diag -r <level>`.
    Dcgm {
        /// 1–4.
        level: u8,
    },
}

/// The plan. Pure: no I/O.
pub fn plan(params: &Params, settings: &TaskSettings, facts: &Facts) -> Vec<Step<Action>> {
    if let Some(level) = params.dcgm_diag_level.filter(|l| !(1..=4).contains(l)) {
        return vec![Step::new("parameters", Action::Refuse(format!("dcgm diag level {level} is not 1–4")))];
    }
    if facts.gpus.is_empty() {
        return vec![Step::new("gpus", Action::Nothing(format!("no GPU reported by {}", facts.backend.tool())))];
    }
    let mut out = Vec::new();
    let running: Vec<&AppFact> = facts.apps.iter().filter(|a| a.owner != Owner::Gone).collect();
    if !running.is_empty() {
        let pids = running.iter().map(|a| a.pid.to_string()).collect::<Vec<_>>().join(", ");
        match params.policy {
            ComputeProcessPolicy::Refuse => {
                let msg = format!("{} compute process(es) running (pids {pids}); policy is refuse", running.len());
                return vec![Step::new("compute-processes", Action::Refuse(msg))];
            }
            ComputeProcessPolicy::StopTenant => {
                let refusals: Vec<String> = running
                    .iter()
                    .filter_map(|a| match &a.owner {
                        Owner::Unknown(why) => Some(format!("refusing to kill pid {} ({}): owner unknown: {why}", a.pid, a.name)),
                        owner => owner
                            .non_tenant_uid(settings)
                            .map(|uid| format!("refusing to kill pid {} ({}) owned by uid {uid}", a.pid, a.name)),
                    })
                    .collect();
                if !refusals.is_empty() {
                    return vec![Step::new("compute-processes", Action::Refuse(refusals.join("; ")))];
                }
                out.extend(running.iter().map(|a| Step::new(format!("stop pid {}", a.pid), Action::StopProcess { pid: a.pid })));
            }
        }
    }
    let persistent: Vec<&ScrubGpu> =
        facts.gpus.iter().filter(|g| facts.backend.has_persistence_mode() && g.persistence_mode == Some(true)).collect();
    out.extend(
        persistent.iter().map(|g| Step::new(format!("persistence-off {}", g.bus_id), Action::PersistenceOff { bus: g.bus_id.clone() })),
    );
    out.extend(facts.gpus.iter().map(|g| Step::new(format!("reset {}", label(g)), Action::Reset { gpu: g.clone() })));
    out.extend(
        persistent
            .iter()
            .map(|g| Step::new(format!("persistence-restore {}", g.bus_id), Action::PersistenceRestore { bus: g.bus_id.clone() })),
    );
    out.push(Step::new("verify", Action::Verify));
    if let Some(level) = params.dcgm_diag_level {
        let action = if facts.backend == Backend::Nvidia {
            Action::Dcgm { level }
        } else {
            Action::Nothing("dcgmi is NVIDIA's; not run on AMD GPUs".to_owned())
        };
        out.push(Step::new(format!("dcgm-diag -r {level}"), action));
    }
    out
}

fn label(g: &ScrubGpu) -> String {
    if g.bus_id.is_empty() { format!("gpu {}", g.index) } else { g.bus_id.clone() }
}

/// Runs `plan` with `run` so that the `persistence-restore` block runs whenever a
/// `persistence-off` step ran, even after a failure (see the module doc).
pub fn execute_plan(plan: &[Step<Action>], mut run: impl FnMut(&Action) -> Done) -> Vec<StepResult> {
    let is_restore = |s: &Step<Action>| matches!(s.action, Action::PersistenceRestore { .. });
    let Some(start) = plan.iter().position(is_restore) else { return steps::execute(plan, run) };
    let end = start + plan[start..].iter().take_while(|s| is_restore(s)).count();
    let mut touched = false;
    let mut results = steps::execute(&plan[..start], |a| {
        touched |= matches!(a, Action::PersistenceOff { .. });
        run(a)
    });
    for step in &plan[start..end] {
        if touched {
            results.extend(steps::execute(std::slice::from_ref(step), &mut run));
        } else {
            results.extend(steps::execute(std::slice::from_ref(step), |_| Done::skipped("not run: persistence mode was not changed")));
        }
    }
    match results.iter().find(|r| r.outcome == drover_proto::report::StepOutcome::Error).map(|r| r.name.clone()) {
        Some(failed) => results.extend(steps::execute(&plan[end..], |_| Done::skipped(format!("not run: step {failed} failed")))),
        None => results.extend(steps::execute(&plan[end..], run)),
    }
    results
}

/// Why a `/proc/<pid>/status` does not name the process's owner.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StatusError {
    /// No `Uid:` line.
    #[error("no Uid: line")]
    NoUid,
    /// A uid that is not a number.
    #[error("bad uid {uid:?}")]
    BadUid {
        /// The field.
        uid: String,
    },
    /// A `Uid:` line without uids.
    #[error("empty Uid: line")]
    EmptyUid,
}

/// Parses a `/proc/<pid>/status`: the `Uid:` line's uids, and whether the `State:` is a
/// zombie (or dead).
pub fn parse_status(text: &str) -> Result<(Vec<u32>, bool), StatusError> {
    let field = |name: &str| text.lines().find_map(|l| l.strip_prefix(name)).map(str::trim);
    let uids = field("Uid:")
        .ok_or(StatusError::NoUid)?
        .split_whitespace()
        .map(|u| u.parse::<u32>().map_err(|_| StatusError::BadUid { uid: u.to_owned() }))
        .collect::<Result<Vec<_>, _>>()?;
    if uids.is_empty() {
        return Err(StatusError::EmptyUid);
    }
    let dead = field("State:").is_some_and(|s| s.starts_with('Z') || s.starts_with('X'));
    Ok((uids, dead))
}

/// The owner of `pid` under `proc_dir`.
pub fn owner(proc_dir: &Path, pid: u32) -> Owner {
    match std::fs::read_to_string(proc_dir.join(pid.to_string()).join("status")) {
        Ok(text) => match parse_status(&text) {
            Ok((_, true)) => Owner::Gone,
            Ok((uids, false)) => Owner::Uids(uids),
            Err(e) => Owner::Unknown(e.to_string()),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Owner::Gone,
        // ESRCH: the process went away between the directory lookup and the read.
        Err(e) if e.raw_os_error() == Some(Errno::ESRCH as i32) => Owner::Gone,
        Err(e) => Owner::Unknown(e.to_string()),
    }
}

fn wait_gone(proc_dir: &Path, pid: u32, clock: &dyn Clock, within: Duration) -> bool {
    let polls = within.as_millis().div_ceil(POLL_INTERVAL.as_millis()).max(1);
    for _ in 0..polls {
        if owner(proc_dir, pid) == Owner::Gone {
            return true;
        }
        clock.sleep(POLL_INTERVAL);
    }
    owner(proc_dir, pid) == Owner::Gone
}

/// Signals `pid` after re-checking that a tenant owns it; `Err` is the step's failure,
/// `Ok(false)` means the process is already gone.
fn signal_tenant(settings: &TaskSettings, pid: u32, signal: Signal) -> Result<bool, Done> {
    let owner = owner(&settings.proc_dir, pid);
    match &owner {
        Owner::Gone => return Ok(false),
        Owner::Unknown(why) => return Err(Done::error(format!("refusing to signal pid {pid}: owner unknown: {why}"))),
        Owner::Uids(_) => {
            if let Some(uid) = owner.non_tenant_uid(settings) {
                return Err(Done::error(format!("refusing to kill pid {pid} owned by uid {uid}")));
            }
        }
    }
    let raw = i32::try_from(pid).map_err(|_| Done::error(format!("pid {pid} out of range")))?;
    match kill(Pid::from_raw(raw), signal) {
        Ok(()) => Ok(true),
        Err(Errno::ESRCH) => Ok(false),
        Err(e) => Err(Done::error(format!("cannot send {signal} to pid {pid}: {e}"))),
    }
}

/// Stops a tenant's process: SIGTERM, up to `process_stop_grace_secs`, SIGKILL, up to
/// [`KILL_WAIT`].
pub fn stop_process(settings: &TaskSettings, clock: &dyn Clock, pid: u32) -> Done {
    let grace = Duration::from_secs(settings.process_stop_grace_secs);
    match signal_tenant(settings, pid, Signal::SIGTERM) {
        Err(d) => return d,
        Ok(false) => return Done::skipped(format!("pid {pid} already exited")),
        Ok(true) => {}
    }
    if wait_gone(&settings.proc_dir, pid, clock, grace) {
        return Done::ok(format!("pid {pid} exited after SIGTERM")).with_data(json!({"pid": pid, "signal": "SIGTERM"}));
    }
    match signal_tenant(settings, pid, Signal::SIGKILL) {
        Err(d) => return d,
        Ok(false) => return Done::ok(format!("pid {pid} exited after SIGTERM")).with_data(json!({"pid": pid, "signal": "SIGTERM"})),
        Ok(true) => {}
    }
    if wait_gone(&settings.proc_dir, pid, clock, KILL_WAIT) {
        Done::ok(format!("pid {pid} ignored SIGTERM for {} s; killed with SIGKILL", grace.as_secs()))
            .with_data(json!({"pid": pid, "signal": "SIGKILL"}))
    } else {
        Done::error(format!("pid {pid} still alive {} s after SIGKILL (uninterruptible sleep in the driver?)", KILL_WAIT.as_secs()))
            .with_data(json!({"pid": pid, "signal": "SIGKILL"}))
    }
}

/// Why the facts could not be gathered (the task plans nothing then).
#[derive(Debug, thiserror::Error)]
pub enum FactsError {
    /// No tool answers for the GPUs.
    #[error(transparent)]
    Detect(#[from] DetectError),
    /// The tool could not list the compute processes.
    #[error("cannot list compute processes: {source}")]
    Apps {
        /// The tool's failure.
        #[source]
        source: ToolError,
    },
}

/// Gathers the facts: the backend and its GPUs, the compute processes and their owners.
pub fn gather(params: &Params, env: &TaskEnv<'_>) -> Result<Facts, FactsError> {
    let tools = Tools::new(env.settings, env.runner);
    let (backend, gpus) = tools.detect(params.vendor)?;
    let mut apps: Vec<AppFact> = Vec::new();
    for app in tools.apps(backend).map_err(|source| FactsError::Apps { source })? {
        if apps.iter().all(|a| a.pid != app.pid) {
            apps.push(AppFact { pid: app.pid, owner: owner(&env.settings.proc_dir, app.pid), name: app.name });
        }
    }
    Ok(Facts { backend, gpus, apps })
}

/// Runs the task.
pub fn run(params: &Params, env: &TaskEnv<'_>) -> Vec<StepResult> {
    let facts = match gather(params, env) {
        Ok(f) => f,
        Err(e) => return steps::not_planned("gpu-facts", e.to_string()),
    };
    let tools = Tools::new(env.settings, env.runner);
    let plan = plan(params, env.settings, &facts);
    execute_plan(&plan, |action| match action {
        Action::Refuse(msg) => Done::error(msg.clone()),
        Action::Nothing(msg) => Done::skipped(msg.clone()),
        Action::StopProcess { pid } => stop_process(env.settings, env.clock, *pid),
        Action::PersistenceOff { bus } => tools.set_persistence(bus, false),
        Action::Reset { gpu } => tools.reset(facts.backend, gpu),
        Action::PersistenceRestore { bus } => tools.set_persistence(bus, true),
        Action::Verify => tools.verify(facts.backend, params.memory_used_threshold_mib),
        Action::Dcgm { level } => tools.dcgm_diag(*level),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_proto::report::StepOutcome;

    const BUS0: &str = "00000000:07:00.0";
    const BUS1: &str = "00000000:0F:00.0";

    fn params(policy: ComputeProcessPolicy, dcgm: Option<u8>) -> Params {
        Params { vendor: GpuVendor::Auto, policy, memory_used_threshold_mib: 16, dcgm_diag_level: dcgm }
    }

    fn gpu(index: u32, bus: &str, pm: bool) -> ScrubGpu {
        ScrubGpu { index, bus_id: bus.to_owned(), persistence_mode: Some(pm) }
    }

    fn facts(apps: Vec<AppFact>) -> Facts {
        Facts { backend: Backend::Nvidia, gpus: vec![gpu(0, BUS0, true), gpu(1, BUS1, false)], apps }
    }

    fn app(pid: u32, owner: Owner) -> AppFact {
        AppFact { pid, name: "python3".to_owned(), owner }
    }

    fn names(plan: &[Step<Action>]) -> Vec<String> {
        plan.iter().map(|s| s.name.clone()).collect()
    }

    #[test]
    fn clean_gpus_plan_persistence_off_reset_restore_verify_diag() {
        let p = plan(&params(ComputeProcessPolicy::Refuse, Some(2)), &TaskSettings::default(), &facts(vec![]));
        assert_eq!(
            names(&p),
            vec![
                format!("persistence-off {BUS0}"),
                format!("reset {BUS0}"),
                format!("reset {BUS1}"),
                format!("persistence-restore {BUS0}"),
                "verify".to_owned(),
                "dcgm-diag -r 2".to_owned(),
            ]
        );
    }

    #[test]
    fn refuse_policy_is_a_single_failing_step_naming_the_pids() {
        let f = facts(vec![app(4242, Owner::Uids(vec![20001; 4])), app(4343, Owner::Gone)]);
        let p = plan(&params(ComputeProcessPolicy::Refuse, None), &TaskSettings::default(), &f);
        assert_eq!(p.len(), 1);
        assert!(matches!(&p[0].action, Action::Refuse(m) if m.contains("pids 4242") && !m.contains("4343")), "{p:?}");
    }

    #[test]
    fn stop_tenant_refuses_root_system_and_unknown_owners_and_stops_tenants() {
        let s = TaskSettings::default();
        for (owner, want) in [
            (Owner::Uids(vec![0; 4]), "refusing to kill pid 9 (python3) owned by uid 0"),
            (Owner::Uids(vec![998; 4]), "owned by uid 998"),
            (Owner::Uids(vec![20001, 0, 0, 0]), "owned by uid 0"),
            (Owner::Unknown("permission denied".into()), "owner unknown"),
        ] {
            let p =
                plan(&params(ComputeProcessPolicy::StopTenant, None), &s, &facts(vec![app(8, Owner::Uids(vec![20001; 4])), app(9, owner)]));
            assert_eq!(p.len(), 1, "{p:?}");
            assert!(matches!(&p[0].action, Action::Refuse(m) if m.contains(want)), "{want}: {p:?}");
        }
        let p = plan(&params(ComputeProcessPolicy::StopTenant, None), &s, &facts(vec![app(8, Owner::Uids(vec![20001; 4]))]));
        assert_eq!(p[0], Step::new("stop pid 8", Action::StopProcess { pid: 8 }));
        assert_eq!(p[1].name, format!("persistence-off {BUS0}"));
    }

    #[test]
    fn amd_has_no_persistence_steps_and_skips_dcgm() {
        let f = Facts {
            backend: Backend::AmdSmi,
            gpus: vec![ScrubGpu { index: 0, bus_id: "0000:0c:00.0".into(), persistence_mode: None }],
            apps: vec![],
        };
        let p = plan(&params(ComputeProcessPolicy::Refuse, Some(1)), &TaskSettings::default(), &f);
        assert_eq!(names(&p), vec!["reset 0000:0c:00.0", "verify", "dcgm-diag -r 1"]);
        assert!(matches!(p[2].action, Action::Nothing(_)));
    }

    #[test]
    fn no_gpu_and_a_bad_dcgm_level() {
        let f = Facts { backend: Backend::Nvidia, gpus: vec![], apps: vec![] };
        let p = plan(&params(ComputeProcessPolicy::Refuse, None), &TaskSettings::default(), &f);
        assert!(matches!(p.as_slice(), [Step { action: Action::Nothing(_), .. }]));
        let p = plan(&params(ComputeProcessPolicy::Refuse, Some(9)), &TaskSettings::default(), &facts(vec![]));
        assert!(matches!(p.as_slice(), [Step { action: Action::Refuse(_), .. }]));
    }

    #[test]
    fn a_failed_reset_still_restores_persistence_and_skips_verification() {
        let p = plan(&params(ComputeProcessPolicy::Refuse, Some(1)), &TaskSettings::default(), &facts(vec![]));
        let mut ran = Vec::new();
        let results = execute_plan(&p, |a| {
            ran.push(format!("{a:?}"));
            match a {
                Action::Reset { gpu } if gpu.index == 0 => Done::error("busy"),
                _ => Done::ok("fine"),
            }
        });
        let outcomes: Vec<(String, StepOutcome)> = results.iter().map(|r| (r.name.clone(), r.outcome)).collect();
        assert_eq!(
            outcomes,
            vec![
                (format!("persistence-off {BUS0}"), StepOutcome::Ok),
                (format!("reset {BUS0}"), StepOutcome::Error),
                (format!("reset {BUS1}"), StepOutcome::Skipped),
                (format!("persistence-restore {BUS0}"), StepOutcome::Ok),
                ("verify".to_owned(), StepOutcome::Skipped),
                ("dcgm-diag -r 1".to_owned(), StepOutcome::Skipped),
            ]
        );
        assert_eq!(results[4].message, format!("not run: step reset {BUS0} failed"));
        assert_eq!(ran.len(), 3, "{ran:?}");
    }

    #[test]
    fn nothing_is_restored_when_persistence_was_never_turned_off() {
        let p = vec![
            Step::new("stop pid 8", Action::StopProcess { pid: 8 }),
            Step::new("persistence-off b", Action::PersistenceOff { bus: "b".into() }),
            Step::new("persistence-restore b", Action::PersistenceRestore { bus: "b".into() }),
        ];
        let results = execute_plan(&p, |a| if matches!(a, Action::StopProcess { .. }) { Done::error("alive") } else { Done::ok("x") });
        assert_eq!(results[2].message, "not run: persistence mode was not changed");
    }

    #[test]
    fn proc_status_uids_and_zombies_parse() {
        let status = "Name:\tsleep\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4242\nPid:\t4242\nPPid:\t1\nUid:\t20001\t20001\t20001\t20001\nGid:\t20001\t20001\t20001\t20001\n";
        assert_eq!(parse_status(status), Ok((vec![20001; 4], false)));
        assert_eq!(parse_status(&status.replace("S (sleeping)", "Z (zombie)")), Ok((vec![20001; 4], true)));
        assert!(parse_status("Name:\tx\n").is_err());
    }
}
