//! [`NvidiaSmi`] through the real [`SystemRunner`] against a fake `nvidia-smi`: a shell script
//! that answers each query the way the real tool does (same argument spelling, same output
//! format, same exit codes), one script per situation.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;

use drover_agent::exec::SystemRunner;
use drover_agent::gpu::{self, GpuError, GpuTool, NvidiaSmi};

/// How the fake answers one kind of query.
struct Answer {
    stdout: &'static str,
    stderr: &'static str,
    code: i32,
}

const OK_EMPTY: Answer = Answer { stdout: "", stderr: "", code: 0 };

const DRIVER_DOWN: Answer = Answer {
    stdout: "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.\n\n",
    stderr: "",
    code: 9,
};

const A100_GPUS: &str = "\
0, GPU-5b1e3c2d-0a9f-4e8d-b7c6-a5f4e3d2c1b0, NVIDIA A100-SXM4-80GB, 00000000:07:00.0, 0, 81920, Enabled, 0, [N/A]
1, GPU-6c2f4d3e-1b0a-4f9e-c8d7-b6a5f4e3d2c1, NVIDIA A100-SXM4-80GB, 00000000:0F:00.0, 0, 81920, Enabled, 0, [N/A]
";

/// Writes a fake `nvidia-smi` answering `--query-gpu`, `--query-remapped-rows` and
/// `--query-compute-apps`; it checks the exact arguments and fails like the real tool
/// (exit 2, "is not a valid field") on anything else.
fn fake(dir: &tempfile::TempDir, gpus: Answer, remapped: Answer, apps: Answer) -> PathBuf {
    let case = |a: &Answer| {
        format!("printf '%s' '{}'; printf '%s' '{}' >&2; exit {}", a.stdout.replace('\'', r"'\''"), a.stderr.replace('\'', r"'\''"), a.code)
    };
    let script = format!(
        "#!/bin/sh\n\
         [ \"$2\" = \"--format=csv,noheader,nounits\" ] && [ $# -eq 2 ] || {{ echo 'Invalid combination of input arguments.' ; exit 2; }}\n\
         case \"$1\" in\n\
         --query-gpu={gpu_fields}) {g} ;;\n\
         --query-remapped-rows={rr_fields}) {r} ;;\n\
         --query-compute-apps={app_fields}) {a} ;;\n\
         *) echo \"Field \\\"$1\\\" is not a valid field to query.\"; exit 2 ;;\n\
         esac\n",
        gpu_fields = gpu::QUERY_GPU_FIELDS,
        rr_fields = gpu::QUERY_REMAPPED_ROWS_FIELDS,
        app_fields = gpu::QUERY_COMPUTE_APPS_FIELDS,
        g = case(&gpus),
        r = case(&remapped),
        a = case(&apps),
    );
    // The executable is written by a `cp` child, never through a descriptor of this process:
    // a test thread forking meanwhile would inherit that descriptor, and exec of a file open
    // for writing fails with ETXTBSY ("Text file busy").
    let source = dir.path().join("nvidia-smi.sh");
    std::fs::write(&source, script).expect("write fake");
    let path = dir.path().join("nvidia-smi");
    let copied = std::process::Command::new("cp").arg(&source).arg(&path).status().expect("cp");
    assert!(copied.success(), "cp failed");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

fn tool(path: PathBuf) -> NvidiaSmi<SystemRunner> {
    NvidiaSmi::with_program(SystemRunner, path, Duration::from_secs(20))
}

#[test]
fn a_healthy_node_is_inventoried_with_remapped_rows_joined_by_uuid() {
    let dir = tempfile::tempdir().expect("tempdir");
    let remapped = Answer {
        stdout: "GPU-5b1e3c2d-0a9f-4e8d-b7c6-a5f4e3d2c1b0, No\nGPU-6c2f4d3e-1b0a-4f9e-c8d7-b6a5f4e3d2c1, Yes\n",
        stderr: "",
        code: 0,
    };
    let smi = tool(fake(&dir, Answer { stdout: A100_GPUS, stderr: "", code: 0 }, remapped, OK_EMPTY));
    let gpus = smi.query_gpus().expect("inventory");
    assert_eq!(gpus.len(), 2);
    assert_eq!((gpus[0].remapped_rows_pending, gpus[1].remapped_rows_pending), (Some(false), Some(true)));
    let s = gpu::summary(smi.vendor(), &gpus);
    assert_eq!((s.vendor.as_str(), s.count, s.unhealthy), ("nvidia", 2, 1));
    assert_eq!(smi.query_compute_apps().expect("apps"), Vec::new());
}

#[test]
fn a_gpu_without_row_remapping_leaves_it_unknown_instead_of_failing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let refused = Answer { stdout: "This operation is not supported on this GPU.\n", stderr: "", code: 3 };
    let smi = tool(fake(&dir, Answer { stdout: A100_GPUS, stderr: "", code: 0 }, refused, OK_EMPTY));
    let gpus = smi.query_gpus().expect("inventory");
    assert!(gpus.iter().all(|g| g.remapped_rows_pending.is_none()));
}

#[test]
fn running_compute_processes_are_listed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let apps = Answer { stdout: "52311, /opt/conda/bin/python, GPU-5b1e3c2d-0a9f-4e8d-b7c6-a5f4e3d2c1b0, 40560\n", stderr: "", code: 0 };
    let smi = tool(fake(&dir, OK_EMPTY, OK_EMPTY, apps));
    let apps = smi.query_compute_apps().expect("apps");
    assert_eq!(apps.len(), 1);
    assert_eq!((apps[0].pid, apps[0].process_name.as_str(), apps[0].used_memory_mib), (52311, "/opt/conda/bin/python", Some(40560)));
}

#[test]
fn an_unloaded_driver_is_reported_as_driver_unreachable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let smi = tool(fake(&dir, DRIVER_DOWN, DRIVER_DOWN, DRIVER_DOWN));
    let err = smi.query_gpus().unwrap_err();
    assert!(matches!(&err, GpuError::DriverUnreachable { message } if message.contains("couldn't communicate")), "{err:?}");
    assert!(matches!(smi.query_compute_apps().unwrap_err(), GpuError::DriverUnreachable { .. }));
}

#[test]
fn a_missing_tool_means_the_host_has_no_nvidia_tool() {
    let dir = tempfile::tempdir().expect("tempdir");
    let smi = tool(dir.path().join("nvidia-smi"));
    let err = smi.query_gpus().unwrap_err();
    assert!(matches!(err, GpuError::NoTool { .. }), "{err:?}");
    assert!(err.to_string().starts_with("no NVIDIA tool"), "{err}");
    assert_eq!(gpu::summarize(smi.vendor(), smi.query_gpus()).expect("no error"), None);
}

#[test]
fn a_gpu_fallen_off_the_bus_is_lost_and_the_others_are_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let gpus = Answer {
        stdout: "0, GPU-5b1e3c2d-0a9f-4e8d-b7c6-a5f4e3d2c1b0, NVIDIA A100-SXM4-80GB, 00000000:07:00.0, 0, 81920, Enabled, 0, [N/A]\n\
                 Unable to determine the device handle for GPU0000:0F:00.0: Unknown Error\n",
        stderr: "",
        code: 15,
    };
    let smi = tool(fake(&dir, gpus, OK_EMPTY, OK_EMPTY));
    let result = smi.query_gpus();
    assert!(matches!(&result, Err(GpuError::GpusLost { lost, seen }) if lost.len() == 1 && seen.len() == 1), "{result:?}");
    let s = gpu::summarize("nvidia", result).expect("summary").expect("some");
    assert_eq!((s.count, s.unhealthy), (2, 1));
}

#[test]
fn no_devices_found_is_an_empty_inventory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let smi = tool(fake(&dir, Answer { stdout: "No devices were found\n", stderr: "", code: 6 }, OK_EMPTY, OK_EMPTY));
    assert_eq!(smi.query_gpus().expect("inventory"), Vec::new());
}

#[test]
fn malformed_output_is_a_parse_error_naming_the_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let smi = tool(fake(&dir, Answer { stdout: "0, GPU-5b1e3c2d, garbage\n", stderr: "", code: 0 }, OK_EMPTY, OK_EMPTY));
    let err = smi.query_gpus().unwrap_err();
    assert!(matches!(&err, GpuError::Parse { line, .. } if line == "0, GPU-5b1e3c2d, garbage"), "{err:?}");
}

#[test]
fn another_failure_keeps_the_exit_code_and_message() {
    let dir = tempfile::tempdir().expect("tempdir");
    let apps = Answer { stdout: "", stderr: "Insufficient Permissions\n", code: 4 };
    let smi = tool(fake(&dir, OK_EMPTY, OK_EMPTY, apps));
    let err = smi.query_compute_apps().unwrap_err();
    assert!(matches!(&err, GpuError::ToolFailed { code: Some(4), message, .. } if message == "Insufficient Permissions"), "{err:?}");
}
