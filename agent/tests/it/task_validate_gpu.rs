//! `node.validate_clean`'s GPU check on AMD hosts, and on hosts with both vendors, through the
//! real [`SystemRunner`] against the fake tools in `tests/fake-tools/` (`amd-smi` and
//! `nvidia-smi` print the real tools' formats from `tests/fixtures/gpu/` and exit with their
//! codes). Each test gets a temp dir with `bin/<tool>` symlinks to the scripts, their `state/`
//! scenario dir, and a clean host (root-only passwd, `/proc`, mount table) so that the `gpu`
//! step is the only one with anything to say. "Driver loaded" is an `amdgpu` line in the fake
//! `<proc_dir>/modules`, as the kernel prints it.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use drover_agent::exec::SystemRunner;
use drover_agent::systemd::fake::FakeSystemd;
use drover_agent::tasks::validate::{self, Params};
use drover_agent::tasks::{TaskEnv, TaskSettings, steps};
use drover_agent::timekeeping::SystemClock;
use drover_proto::report::{StepOutcome, StepResult, TaskOutcome};
use serde_json::Value;

const UUID0: &str = "GPU-5b1e3c2d-0a9f-4e8d-b7c6-a5f4e3d2c1b0";
const AMDGPU_MODULE_LINE: &str = "amdgpu 15241216 0 - Live 0xffffffffc0e00000\n";
/// Above an idle MI300X's reported use in the fixtures (283 MB), as an operator of an AMD
/// fleet sets the scrub's threshold.
const AMD_THRESHOLD_MIB: u64 = 512;

fn manifest(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// A clean host with fake GPU tools; which tools are "installed" is up to each test.
struct Host {
    _dir: tempfile::TempDir,
    state: PathBuf,
    settings: TaskSettings,
}

impl Host {
    /// No GPU tool installed, no driver loaded.
    fn bare() -> Host {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        let (bin, state, proc_dir) = (root.join("bin"), root.join("state"), root.join("proc"));
        for d in [&bin, &state, &proc_dir.join("1")] {
            std::fs::create_dir_all(d).expect("mkdir");
        }
        std::fs::write(proc_dir.join("1/status"), "Name:\tsystemd\nState:\tS (sleeping)\nUid:\t0\t0\t0\t0\n").expect("status");
        std::fs::write(root.join("passwd"), "root:x:0:0:root:/root:/bin/bash\n").expect("passwd");
        std::fs::write(root.join("mountinfo"), "22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw\n").expect("mountinfo");
        let settings = TaskSettings {
            passwd_file: root.join("passwd"),
            proc_dir,
            mountinfo_file: root.join("mountinfo"),
            nvidia_smi: bin.join("nvidia-smi"),
            amd_smi: bin.join("amd-smi"),
            rocm_smi: bin.join("rocm-smi"),
            gpu_tool_timeout_secs: 20,
            ..TaskSettings::default()
        };
        Host { _dir: dir, state, settings }
    }

    /// `tool` from `tests/fake-tools/` installed (a symlink: never a file this process wrote
    /// and then executes, so no ETXTBSY).
    fn install(&self, tool: &str) {
        let bin = self.settings.nvidia_smi.parent().expect("bin dir");
        std::os::unix::fs::symlink(manifest(&format!("tests/fake-tools/{tool}")), bin.join(tool)).expect("symlink");
    }

    /// Two MI300X with the amdgpu driver loaded and amd-smi installed; `process` and `metric`
    /// are the fixtures `amd-smi process` / `amd-smi metric` print.
    fn amd(process: &str, metric: &str) -> Host {
        let host = Host::bare();
        host.install("amd-smi");
        host.driver_loaded();
        host.fixture("amd-list.json", "amd-list.json");
        host.fixture(process, "amd-process.json");
        host.fixture(metric, "amd-metric.json");
        host
    }

    /// An executable `bin/<name>` running `script`, written by a `cp` child (never through a
    /// descriptor of this process, which a concurrently forking test thread could inherit).
    fn script(&self, name: &str, script: &str) {
        let bin = self.settings.nvidia_smi.parent().expect("bin dir");
        let source = self.state.join(format!("{name}.src"));
        std::fs::write(&source, script).expect("write script");
        assert!(std::process::Command::new("cp").arg(&source).arg(bin.join(name)).status().expect("cp").success());
        std::fs::set_permissions(bin.join(name), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }

    fn driver_loaded(&self) {
        let modules = format!("drm_ttm_helper 16384 1 amdgpu, Live 0xffffffffc0b40000\n{AMDGPU_MODULE_LINE}");
        std::fs::write(self.settings.proc_dir.join("modules"), modules).expect("modules");
    }

    fn fixture(&self, name: &str, as_name: &str) {
        std::fs::copy(manifest(&format!("tests/fixtures/gpu/{name}")), self.state.join(as_name)).expect("copy fixture");
    }

    fn write(&self, name: &str, text: &str) {
        std::fs::write(self.state.join(name), text).expect("write state");
    }

    fn run(&self, threshold: Option<u64>) -> Vec<StepResult> {
        let systemd = FakeSystemd::new();
        let env =
            TaskEnv { settings: &self.settings, runner: &SystemRunner, systemd: &systemd, clock: &SystemClock, state_dir: &self.state };
        validate::run(&Params { check_gpu: true, memory_used_threshold_mib: threshold }, &env)
    }

    fn log(&self) -> Vec<String> {
        std::fs::read_to_string(self.state.join("log")).unwrap_or_default().lines().map(str::to_owned).collect()
    }
}

/// The `gpu` step, after checking that every other check found the host clean.
fn gpu_step(steps: &[StepResult]) -> &StepResult {
    let names: Vec<&str> = steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["users", "processes", "mounts", "scratch", "gpu"]);
    assert!(steps[..4].iter().all(|s| s.outcome == StepOutcome::Ok), "only the GPU check has anything to say: {steps:#?}");
    &steps[4]
}

fn residues(step: &StepResult) -> Vec<Value> {
    step.data["residues"].as_array().cloned().unwrap_or_default()
}

fn checked(step: &StepResult) -> Vec<String> {
    step.data["checked"].as_array().map(|a| a.iter().filter_map(|t| t.as_str().map(str::to_owned)).collect()).unwrap_or_default()
}

#[test]
fn a_leftover_amd_compute_process_fails_naming_its_pid_and_gpu() {
    let host = Host::amd("amd-process-tenant.json", "amd-metric.after.json");
    let steps = host.run(Some(AMD_THRESHOLD_MIB));
    assert_eq!(steps::outcome(&steps), TaskOutcome::Failed);
    let gpu = gpu_step(&steps);
    assert_eq!((gpu.outcome, gpu.message.as_str()), (StepOutcome::Error, "1 GPU residue(s)"), "{gpu:?}");
    let r = residues(gpu);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(
        (r[0]["kind"].as_str(), r[0]["vendor"].as_str(), r[0]["pid"].as_u64(), r[0]["gpu"].as_u64()),
        (Some("gpuProcess"), Some("amd"), Some(41872), Some(1))
    );
    assert_eq!((r[0]["processName"].as_str(), r[0]["usedMemoryMib"].as_u64()), (Some("python3"), Some(61440)));
    assert_eq!(checked(gpu), ["amd-smi"]);
}

#[test]
fn amd_memory_used_above_the_threshold_fails_and_is_not_judged_without_one() {
    let host = Host::amd("amd-process-none.json", "amd-metric.json");
    let steps = host.run(Some(AMD_THRESHOLD_MIB));
    let gpu = gpu_step(&steps);
    assert_eq!(gpu.outcome, StepOutcome::Error, "{gpu:?}");
    let r = residues(gpu);
    assert_eq!(r.len(), 1, "only GPU 0 holds memory: {r:?}");
    assert_eq!(
        (r[0]["kind"].as_str(), r[0]["gpu"].as_str(), r[0]["memoryUsedMib"].as_u64(), r[0]["thresholdMib"].as_u64()),
        (Some("gpuMemory"), Some("GPU 0"), Some(61440), Some(AMD_THRESHOLD_MIB))
    );
    assert_eq!(host.log(), ["amd-smi process --json", "amd-smi metric --mem-usage --ecc --json"]);

    // The task as the runner builds it today carries no threshold: memory is not queried.
    std::fs::remove_file(host.state.join("log")).expect("rm log");
    let steps = host.run(None);
    assert_eq!(gpu_step(&steps).outcome, StepOutcome::Ok, "{steps:#?}");
    assert_eq!(host.log(), ["amd-smi process --json"]);
}

#[test]
fn a_clean_amd_host_passes() {
    let host = Host::amd("amd-process-none.json", "amd-metric.after.json");
    let steps = host.run(Some(AMD_THRESHOLD_MIB));
    assert_eq!(steps::outcome(&steps), TaskOutcome::Succeeded, "{steps:#?}");
    let gpu = gpu_step(&steps);
    assert_eq!((gpu.outcome, gpu.message.as_str()), (StepOutcome::Ok, "clean"));
    assert_eq!((residues(gpu).len(), checked(gpu)), (0, vec!["amd-smi".to_owned()]));
}

#[test]
fn amd_driver_loaded_without_amd_smi_fails_naming_the_tool() {
    let host = Host::bare();
    host.driver_loaded();
    let steps = host.run(Some(AMD_THRESHOLD_MIB));
    let gpu = gpu_step(&steps);
    assert_eq!(gpu.outcome, StepOutcome::Error, "{gpu:?}");
    let amd_smi = host.settings.amd_smi.display().to_string();
    assert!(
        gpu.message.starts_with(&format!("{amd_smi} not found")) && gpu.message.contains("the amdgpu driver is loaded"),
        "{}",
        gpu.message
    );
    assert_eq!(steps::outcome(&steps), TaskOutcome::Failed);

    // Without the driver (and without NVIDIA's) there is nothing to check.
    std::fs::remove_file(host.settings.proc_dir.join("modules")).expect("rm modules");
    let steps = host.run(Some(AMD_THRESHOLD_MIB));
    let gpu = gpu_step(&steps);
    assert_eq!(gpu.outcome, StepOutcome::Skipped, "{gpu:?}");
    assert!(gpu.message.contains("no amdgpu driver loaded") && gpu.message.contains("no NVIDIA driver GPUs"), "{}", gpu.message);
}

#[test]
fn a_failing_amd_smi_fails_naming_the_tool_and_its_error() {
    let host = Host::amd("amd-process-none.json", "amd-metric.after.json");
    // A library error: printed on stdout as JSON with exit status 0; never "no process".
    host.write("amd-error", "{\"error\": \"AMDSMI has returned error '-1010' - 'Permission Denied'\", \"code\": -1010}\n");
    let gpu = gpu_step(&host.run(Some(AMD_THRESHOLD_MIB))).clone();
    assert_eq!(gpu.outcome, StepOutcome::Error, "{gpu:?}");
    assert_eq!(
        gpu.message,
        "cannot list AMD compute processes: amd-smi process reported an error: AMDSMI has returned error '-1010' - 'Permission Denied' (code -1010)"
    );

    // The driver gone under a still-installed amd-smi: exit 255 and its stderr.
    std::fs::remove_file(host.state.join("amd-error")).expect("rm amd-error");
    host.write("amd-driver", "absent\n");
    let gpu = gpu_step(&host.run(Some(AMD_THRESHOLD_MIB))).clone();
    assert_eq!(gpu.outcome, StepOutcome::Error, "{gpu:?}");
    let amd_smi = host.settings.amd_smi.display().to_string();
    assert_eq!(
        gpu.message,
        format!(
            "cannot list AMD compute processes: {amd_smi} process --json failed (exit 255): ERROR: Driver not initialized (amdgpu not found in modules)"
        )
    );

    // Output that is not amd-smi's JSON at all.
    std::fs::remove_file(host.state.join("amd-driver")).expect("rm amd-driver");
    host.write("amd-process.json", "Traceback (most recent call last):\n");
    let gpu = gpu_step(&host.run(Some(AMD_THRESHOLD_MIB))).clone();
    assert!(gpu.outcome == StepOutcome::Error && gpu.message.contains("cannot parse amd-smi process JSON"), "{gpu:?}");
}

#[test]
fn a_host_with_both_vendors_tools_checks_both() {
    let host = Host::amd("amd-process-tenant.json", "amd-metric.after.json");
    host.install("nvidia-smi");
    host.fixture("nvidia-query-gpu.csv", "gpus");
    host.fixture("nvidia-remapped.csv", "remapped");
    // This test's own process stands for the tenant's: the fake lists only live pids.
    let pid = std::process::id();
    host.write("apps", &format!("{pid}, /usr/bin/python3, {UUID0}, 40560\n"));

    let steps = host.run(Some(AMD_THRESHOLD_MIB));
    let gpu = gpu_step(&steps);
    assert_eq!(gpu.outcome, StepOutcome::Error, "{gpu:?}");
    assert_eq!(checked(gpu), ["nvidia-smi", "amd-smi"]);
    let found: Vec<(String, String, Option<u64>)> = residues(gpu)
        .iter()
        .map(|r| (r["vendor"].as_str().unwrap_or("").to_owned(), r["kind"].as_str().unwrap_or("").to_owned(), r["pid"].as_u64()))
        .collect();
    let nv = |kind: &str, pid: Option<u64>| ("nvidia".to_owned(), kind.to_owned(), pid);
    assert_eq!(
        found,
        [nv("gpuProcess", Some(u64::from(pid))), nv("gpuMemory", None), ("amd".to_owned(), "gpuProcess".to_owned(), Some(41872)),],
        "NVIDIA's process and GPU 0's memory it holds, and AMD's process: {gpu:#?}"
    );
    assert_eq!(residues(gpu)[1]["gpu"], "GPU 0 (00000000:07:00.0)");
    let log = host.log();
    assert!(
        log.iter().any(|l| l.starts_with("nvidia-smi --query-compute-apps")) && log.contains(&"amd-smi process --json".to_owned()),
        "{log:?}"
    );

    // Both clean: both checked, the step passes.
    host.fixture("nvidia-query-gpu.after.csv", "gpus");
    host.write("apps", "");
    host.fixture("amd-process-none.json", "amd-process.json");
    let steps = host.run(Some(AMD_THRESHOLD_MIB));
    let gpu = gpu_step(&steps);
    assert_eq!((gpu.outcome, checked(gpu)), (StepOutcome::Ok, vec!["nvidia-smi".to_owned(), "amd-smi".to_owned()]), "{gpu:?}");

    // One vendor failing fails the step even though the other is clean, naming the failing one.
    host.write("amd-driver", "absent\n");
    let steps = host.run(Some(AMD_THRESHOLD_MIB));
    let gpu = gpu_step(&steps);
    assert_eq!((gpu.outcome, checked(gpu)), (StepOutcome::Error, vec!["nvidia-smi".to_owned()]), "{gpu:?}");
    assert!(gpu.message.contains("amd-smi process --json failed (exit 255)"), "{}", gpu.message);
}

#[test]
fn without_amd_smi_rocm_smi_answers_for_the_amd_gpus() {
    let host = Host::bare();
    host.driver_loaded();
    // rocm-smi's JSON: host-wide KFD pids ("name, GPUs, VRAM bytes, SDMA, CU occupancy") and
    // VRAM used per card, in bytes.
    host.script(
        "rocm-smi",
        "#!/bin/sh\ncase \"$*\" in\n\
         '--showpids --json') echo '{\"system\": {\"PID41872\": \"python3, 1, 64424509440, 0, 0\"}}' ;;\n\
         '--showmeminfo vram --json') echo '{\"card0\": {\"VRAM Total Memory (B)\": \"68702699520\", \"VRAM Total Used Memory (B)\": \"64435597312\"}}' ;;\n\
         *) echo \"rocm-smi: unrecognized arguments: $*\" >&2; exit 2 ;;\nesac\n",
    );
    let steps = host.run(Some(AMD_THRESHOLD_MIB));
    let gpu = gpu_step(&steps);
    assert_eq!((gpu.outcome, checked(gpu)), (StepOutcome::Error, vec!["rocm-smi".to_owned()]), "{gpu:?}");
    let r = residues(gpu);
    assert_eq!(
        (r[0]["kind"].as_str(), r[0]["pid"].as_u64(), r[0]["gpu"].clone(), r[0]["usedMemoryMib"].as_u64()),
        (Some("gpuProcess"), Some(41872), Value::Null, Some(61440)),
        "rocm-smi lists processes host-wide: no GPU index"
    );
    assert_eq!(
        (r[1]["kind"].as_str(), r[1]["gpu"].as_str(), r[1]["memoryUsedMib"].as_u64()),
        (Some("gpuMemory"), Some("GPU 0"), Some(61450))
    );
}
