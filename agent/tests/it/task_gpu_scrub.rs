//! `node.gpu_scrub` end to end through the real [`SystemRunner`] against the fake tools in
//! `tests/fake-tools/` (`nvidia-smi`, `amd-smi`, `dcgmi`): shell scripts that accept exactly
//! the arguments the real tools take, print their formats (`tests/fixtures/gpu/`) and exit
//! with their codes. Each test gets a temp dir with `bin/<tool>` symlinks to the scripts (a
//! symlink, never a file this process writes and then executes: no ETXTBSY) and a `state/`
//! dir saying the scenario; the scripts log every call to `state/log`.
//!
//! Compute processes are real processes. As root (how these tests run here) a tenant's
//! process is started through `setpriv --reuid/--regid 40000 --clear-groups`, so the agent
//! reads a real tenant uid from the real `/proc` and signals a real process of another uid,
//! and a root-owned one is a plain child. Without root the tenant range is set to the test's
//! own uid and the "root-owned" process is pid 1 (never signalled: the plan refuses first, and
//! a non-root test could not signal it anyway).

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use drover_agent::exec::SystemRunner;
use drover_agent::systemd::fake::FakeSystemd;
use drover_agent::tasks::gpu_scrub::{self, Params};
use drover_agent::tasks::{TaskEnv, TaskSettings};
use drover_agent::timekeeping::{Clock, SystemClock};
use drover_proto::report::{StepOutcome, StepResult};
use drover_proto::task::{ComputeProcessPolicy, GpuVendor};
use drover_proto::time::Time;

const TENANT_UID: u32 = 40_000;
const BUS0: &str = "00000000:07:00.0";
const BUS1: &str = "00000000:0F:00.0";
const UUID0: &str = "GPU-5b1e3c2d-0a9f-4e8d-b7c6-a5f4e3d2c1b0";

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

fn manifest(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// A host with fake GPU tools and the processes a test started (killed and reaped on drop).
struct Host {
    _dir: tempfile::TempDir,
    state: PathBuf,
    settings: TaskSettings,
    children: Vec<Child>,
}

impl Host {
    fn new() -> Host {
        let dir = tempfile::tempdir().expect("tempdir");
        let bin = dir.path().join("bin");
        let state = dir.path().join("state");
        std::fs::create_dir_all(&bin).expect("bin");
        std::fs::create_dir_all(&state).expect("state");
        for tool in ["nvidia-smi", "amd-smi", "dcgmi"] {
            std::os::unix::fs::symlink(manifest(&format!("tests/fake-tools/{tool}")), bin.join(tool)).expect("symlink");
        }
        let own = nix::unistd::geteuid().as_raw();
        let (min, max) = if is_root() { (10_000, 59_999) } else { (own, own) };
        let settings = TaskSettings {
            tenant_uid_min: min,
            tenant_uid_max: max,
            nvidia_smi: bin.join("nvidia-smi"),
            amd_smi: bin.join("amd-smi"),
            rocm_smi: bin.join("rocm-smi"), // not installed
            dcgmi: bin.join("dcgmi"),
            gpu_tool_timeout_secs: 20,
            process_stop_grace_secs: 1,
            ..TaskSettings::default()
        };
        Host { _dir: dir, state, settings, children: Vec::new() }
    }

    /// Two A100s with persistence mode on; after a reset, clean (unless a test says otherwise).
    fn nvidia() -> Host {
        let host = Host::new();
        host.fixture("nvidia-query-gpu.csv", "gpus");
        host.fixture("nvidia-query-gpu.after.csv", "gpus.after");
        host.fixture("nvidia-remapped.csv", "remapped");
        host
    }

    fn fixture(&self, name: &str, as_name: &str) {
        std::fs::copy(manifest(&format!("tests/fixtures/gpu/{name}")), self.state.join(as_name)).expect("copy fixture");
    }

    fn write(&self, name: &str, text: &str) {
        std::fs::write(self.state.join(name), text).expect("write state");
    }

    /// Lists `pid` as a compute app on GPU 0 (shown while it lives).
    fn add_app(&self, pid: u32) {
        let path = self.state.join("apps");
        let mut text = std::fs::read_to_string(&path).unwrap_or_default();
        text.push_str(&format!("{pid}, /usr/bin/python3, {UUID0}, 40560\n"));
        std::fs::write(path, text).expect("apps");
    }

    /// Starts `sh -c script` as a tenant and waits until it runs as the tenant's `sleep`.
    fn spawn_tenant(&mut self, script: &str) -> u32 {
        let mut cmd = if is_root() {
            let mut c = Command::new("setpriv");
            c.args([&format!("--reuid={TENANT_UID}"), &format!("--regid={TENANT_UID}"), "--clear-groups", "sh", "-c", script]);
            c
        } else {
            let mut c = Command::new("sh");
            c.args(["-c", script]);
            c
        };
        let child = cmd.spawn().expect("spawn tenant process");
        let pid = child.id();
        self.children.push(child);
        wait_until(|| std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "sleep"));
        let want_uid = if is_root() { TENANT_UID } else { nix::unistd::geteuid().as_raw() };
        assert_eq!(uid_of(pid), Some(want_uid));
        pid
    }

    /// A process owned by root: a plain child as root, else pid 1.
    fn spawn_root_owned(&mut self) -> u32 {
        if !is_root() {
            return 1;
        }
        let child = Command::new("sleep").arg("300").spawn().expect("spawn sleep");
        let pid = child.id();
        self.children.push(child);
        wait_until(|| std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "sleep"));
        pid
    }

    fn child(&mut self, pid: u32) -> &mut Child {
        self.children.iter_mut().find(|c| c.id() == pid).expect("our child")
    }

    fn alive(&mut self, pid: u32) -> bool {
        if pid == 1 {
            return true;
        }
        self.child(pid).try_wait().expect("try_wait").is_none()
    }

    fn run(&self, params: Params) -> Vec<StepResult> {
        self.run_with(params, &SystemClock)
    }

    fn run_with(&self, params: Params, clock: &dyn Clock) -> Vec<StepResult> {
        let systemd = FakeSystemd::new();
        let env = TaskEnv { settings: &self.settings, runner: &SystemRunner, systemd: &systemd, clock, state_dir: self.state.as_path() };
        gpu_scrub::run(&params, &env)
    }

    fn log(&self) -> Vec<String> {
        std::fs::read_to_string(self.state.join("log")).unwrap_or_default().lines().map(str::to_owned).collect()
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn wait_until(mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn uid_of(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix("Uid:"))?.split_whitespace().next()?.parse().ok()
}

fn params(policy: ComputeProcessPolicy) -> Params {
    Params { vendor: GpuVendor::Auto, policy, memory_used_threshold_mib: 16, dcgm_diag_level: None }
}

fn outcomes(steps: &[StepResult]) -> Vec<(&str, StepOutcome)> {
    steps.iter().map(|s| (s.name.as_str(), s.outcome)).collect()
}

fn step<'s>(steps: &'s [StepResult], name: &str) -> &'s StepResult {
    steps.iter().find(|s| s.name == name).unwrap_or_else(|| panic!("no step {name} in {steps:#?}"))
}

fn resets(host: &Host) -> usize {
    host.log().iter().filter(|l| l.contains("--gpu-reset") || l.contains("reset --gpureset")).count()
}

#[test]
fn clean_gpus_scrub_and_verify() {
    let host = Host::nvidia();
    let steps = host.run(params(ComputeProcessPolicy::Refuse));
    let r0 = format!("reset {BUS0}");
    let r1 = format!("reset {BUS1}");
    let (off0, off1) = (format!("persistence-off {BUS0}"), format!("persistence-off {BUS1}"));
    let (on0, on1) = (format!("persistence-restore {BUS0}"), format!("persistence-restore {BUS1}"));
    assert_eq!(
        outcomes(&steps),
        vec![
            (off0.as_str(), StepOutcome::Ok),
            (off1.as_str(), StepOutcome::Ok),
            (r0.as_str(), StepOutcome::Ok),
            (r1.as_str(), StepOutcome::Ok),
            (on0.as_str(), StepOutcome::Ok),
            (on1.as_str(), StepOutcome::Ok),
            ("verify", StepOutcome::Ok),
        ],
        "{steps:#?}"
    );
    let log = host.log();
    assert!(log.contains(&format!("nvidia-smi -i {BUS0} -pm 0")) && log.contains(&format!("nvidia-smi --gpu-reset -i {BUS1}")), "{log:#?}");
    assert_eq!(step(&steps, "verify").data["gpus"][0]["memoryUsedMib"], 0);
}

#[test]
fn busy_gpu_in_use_by_another_client_fails_the_reset() {
    let host = Host::nvidia();
    host.write("reset", "busy");
    let steps = host.run(params(ComputeProcessPolicy::Refuse));
    let reset = step(&steps, &format!("reset {BUS0}"));
    assert_eq!(reset.outcome, StepOutcome::Error);
    assert!(reset.message.contains("busy") && reset.message.contains("In use by another client"), "{}", reset.message);
    assert_eq!(step(&steps, &format!("reset {BUS1}")).outcome, StepOutcome::Skipped);
    assert_eq!(step(&steps, "verify").message, format!("not run: step reset {BUS0} failed"));
}

#[test]
fn lost_gpu_exit_15_fails_naming_a_power_cycle() {
    let host = Host::nvidia();
    host.write("reset", "lost");
    let steps = host.run(params(ComputeProcessPolicy::Refuse));
    let reset = step(&steps, &format!("reset {BUS0}"));
    assert_eq!(reset.outcome, StepOutcome::Error);
    assert!(reset.message.contains("GPU lost; the host needs a power cycle"), "{}", reset.message);
    assert!(reset.message.contains("GPU is lost"), "{}", reset.message);
}

#[test]
fn persistence_mode_is_restored_after_a_failed_reset() {
    let host = Host::nvidia();
    host.write("reset", "busy");
    let steps = host.run(params(ComputeProcessPolicy::Refuse));
    assert_eq!(step(&steps, &format!("persistence-restore {BUS0}")).outcome, StepOutcome::Ok);
    assert_eq!(step(&steps, &format!("persistence-restore {BUS1}")).outcome, StepOutcome::Ok);
    let log: Vec<String> = host.log().into_iter().filter(|l| !l.contains("--query")).collect();
    assert_eq!(
        log,
        vec![
            format!("nvidia-smi -i {BUS0} -pm 0"),
            format!("nvidia-smi -i {BUS1} -pm 0"),
            format!("nvidia-smi --gpu-reset -i {BUS0}"),
            format!("nvidia-smi -i {BUS0} -pm 1"),
            format!("nvidia-smi -i {BUS1} -pm 1"),
        ]
    );
}

#[test]
fn refuse_policy_refuses_while_compute_apps_run() {
    let mut host = Host::nvidia();
    let pid = host.spawn_tenant("exec sleep 300");
    host.add_app(pid);
    let steps = host.run(params(ComputeProcessPolicy::Refuse));
    assert_eq!(outcomes(&steps), vec![("compute-processes", StepOutcome::Error)]);
    assert!(steps[0].message.contains(&format!("pids {pid}")) && steps[0].message.contains("policy is refuse"), "{}", steps[0].message);
    assert!(host.alive(pid), "a refusing scrub signals nothing");
    assert_eq!(resets(&host), 0);
}

#[test]
fn root_owned_compute_process_is_never_killed() {
    let mut host = Host::nvidia();
    let tenant = host.spawn_tenant("exec sleep 300");
    let root = host.spawn_root_owned();
    host.add_app(tenant);
    host.add_app(root);
    let steps = host.run(params(ComputeProcessPolicy::StopTenant));
    assert_eq!(outcomes(&steps), vec![("compute-processes", StepOutcome::Error)], "{steps:#?}");
    let root_uid = uid_of(root).expect("root-owned process readable");
    assert!(
        steps[0].message.contains(&format!("refusing to kill pid {root} (/usr/bin/python3) owned by uid {root_uid}")),
        "{}",
        steps[0].message
    );
    if is_root() {
        assert_eq!(root_uid, 0);
    }
    assert!(host.alive(root), "the root-owned process still runs");
    assert!(host.alive(tenant), "nothing is stopped when the reset could not happen anyway");
    assert_eq!(resets(&host), 0);
}

#[test]
fn tenant_process_ignoring_sigterm_is_killed() {
    let mut host = Host::nvidia();
    let stubborn = host.spawn_tenant(r#"trap "" TERM; exec sleep 300"#);
    let polite = host.spawn_tenant("exec sleep 300");
    host.add_app(stubborn);
    host.add_app(polite);
    let steps = host.run(params(ComputeProcessPolicy::StopTenant));
    let stop = step(&steps, &format!("stop pid {stubborn}"));
    assert_eq!(stop.outcome, StepOutcome::Ok, "{steps:#?}");
    assert!(stop.message.contains("ignored SIGTERM") && stop.message.contains("SIGKILL"), "{}", stop.message);
    assert_eq!(step(&steps, &format!("stop pid {polite}")).message, format!("pid {polite} exited after SIGTERM"));
    assert_eq!(host.child(stubborn).wait().expect("wait").signal(), Some(9));
    assert_eq!(host.child(polite).wait().expect("wait").signal(), Some(15));
    assert_eq!(step(&steps, "verify").outcome, StepOutcome::Ok, "{steps:#?}");
    assert_eq!(resets(&host), 2);
}

/// A clock whose sleeps are short, for waits that are simulated anyway.
struct FastClock;

impl Clock for FastClock {
    fn now(&self) -> Time {
        SystemClock.now()
    }
    fn sleep(&self, _d: Duration) {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A process stuck in uninterruptible sleep survives SIGKILL. That cannot be made on demand,
/// so it is simulated: `proc_dir` is a fake tree whose `<pid>/status` keeps saying `D` with a
/// tenant uid while the real process (this test's child) does receive both signals.
#[test]
fn a_process_that_survives_sigkill_fails_the_stop() {
    let mut host = Host::nvidia();
    let pid = host.spawn_tenant(r#"trap "" TERM; exec sleep 300"#);
    host.add_app(pid);
    let fake_proc = host.state.join("proc");
    std::fs::create_dir_all(fake_proc.join(pid.to_string())).expect("fake proc");
    let uid = host.settings.tenant_uid_min;
    std::fs::write(
        fake_proc.join(pid.to_string()).join("status"),
        format!("Name:\tpython3\nState:\tD (disk sleep)\nPid:\t{pid}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"),
    )
    .expect("status");
    host.settings.proc_dir = fake_proc;
    let steps = host.run_with(params(ComputeProcessPolicy::StopTenant), &FastClock);
    let stop = step(&steps, &format!("stop pid {pid}"));
    assert_eq!(stop.outcome, StepOutcome::Error);
    assert!(stop.message.contains("still alive") && stop.message.contains("after SIGKILL"), "{}", stop.message);
    assert_eq!(resets(&host), 0, "no reset after a failed stop");
}

#[test]
fn pending_remapped_rows_fail_verification() {
    let host = Host::nvidia();
    host.fixture("nvidia-remapped-pending.csv", "remapped.after");
    let steps = host.run(params(ComputeProcessPolicy::Refuse));
    let verify = step(&steps, "verify");
    assert_eq!(verify.outcome, StepOutcome::Error);
    assert!(verify.message.contains(&format!("GPU 1 ({BUS1}): remapped rows pending")), "{}", verify.message);
}

#[test]
fn volatile_uncorrectable_ecc_fails_verification() {
    let host = Host::nvidia();
    host.fixture("nvidia-query-gpu.after-ecc.csv", "gpus.after");
    let steps = host.run(params(ComputeProcessPolicy::Refuse));
    let verify = step(&steps, "verify");
    assert_eq!(verify.outcome, StepOutcome::Error);
    assert!(verify.message.contains("3 volatile uncorrectable ECC error(s)"), "{}", verify.message);
}

#[test]
fn memory_still_used_after_the_reset_fails_verification() {
    let host = Host::nvidia();
    host.fixture("nvidia-query-gpu.csv", "gpus.after");
    let steps = host.run(params(ComputeProcessPolicy::Refuse));
    let verify = step(&steps, "verify");
    assert!(verify.outcome == StepOutcome::Error && verify.message.contains("40560 MiB used (threshold 16 MiB)"), "{}", verify.message);
}

#[test]
fn amd_gpus_reset_through_amd_smi() {
    let mut host = Host::new();
    host.settings.nvidia_smi = host.state.join("no-such-nvidia-smi");
    host.fixture("amd-list.json", "amd-list.json");
    host.fixture("amd-process-none.json", "amd-process.json");
    host.fixture("amd-metric.json", "amd-metric.json");
    host.fixture("amd-metric.after.json", "amd-metric.after.json");
    // An idle MI300X still shows a few hundred MiB used (driver reservations): threshold 512.
    let steps = host.run(Params { dcgm_diag_level: Some(1), memory_used_threshold_mib: 512, ..params(ComputeProcessPolicy::Refuse) });
    assert_eq!(
        outcomes(&steps),
        vec![
            ("reset 0000:0c:00.0", StepOutcome::Ok),
            ("reset 0000:22:00.0", StepOutcome::Ok),
            ("verify", StepOutcome::Ok),
            ("dcgm-diag -r 1", StepOutcome::Skipped),
        ],
        "{steps:#?}"
    );
    let log = host.log();
    assert!(
        log.contains(&"amd-smi reset --gpureset -g 0".to_owned()) && log.contains(&"amd-smi reset --gpureset -g 1".to_owned()),
        "{log:#?}"
    );
    assert!(!log.iter().any(|l| l.starts_with("dcgmi")));
}

#[test]
fn amd_memory_left_allocated_fails_verification() {
    let mut host = Host::new();
    host.settings.nvidia_smi = host.state.join("no-such-nvidia-smi");
    host.fixture("amd-list.json", "amd-list.json");
    host.fixture("amd-process-none.json", "amd-process.json");
    host.fixture("amd-metric.json", "amd-metric.json");
    let steps = host.run(Params { vendor: GpuVendor::Amd, ..params(ComputeProcessPolicy::Refuse) });
    let verify = step(&steps, "verify");
    assert!(verify.outcome == StepOutcome::Error && verify.message.contains("GPU 0: 61440 MiB used"), "{}", verify.message);
}

#[test]
fn dcgm_diag_runs_at_the_requested_level() {
    let host = Host::nvidia();
    let steps = host.run(Params { dcgm_diag_level: Some(3), ..params(ComputeProcessPolicy::Refuse) });
    assert_eq!(step(&steps, "dcgm-diag -r 3").outcome, StepOutcome::Ok, "{steps:#?}");
    assert_eq!(host.log().last().map(String::as_str), Some("dcgmi diag -r 3"));

    let failing = Host::nvidia();
    failing.write("dcgm", "fail");
    let steps = failing.run(Params { dcgm_diag_level: Some(2), ..params(ComputeProcessPolicy::Refuse) });
    let diag = step(&steps, "dcgm-diag -r 2");
    assert_eq!(diag.outcome, StepOutcome::Error);
    assert!(diag.message.contains("GPU Memory: Fail - GPU: 0"), "{}", diag.message);
}

#[test]
fn no_gpu_tool_at_all_fails_the_task() {
    let mut host = Host::new();
    host.settings.nvidia_smi = host.state.join("none");
    host.settings.amd_smi = host.state.join("none");
    let steps = host.run(params(ComputeProcessPolicy::Refuse));
    assert_eq!(outcomes(&steps), vec![("gpu-facts", StepOutcome::Error)]);
    assert!(steps[0].message.starts_with("no GPU tool found"), "{}", steps[0].message);
}
