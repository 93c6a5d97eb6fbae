//! `node.validate_clean` against a fake host in a temporary root: a passwd file, a `/proc`
//! tree of `status` files, a mountinfo table, scratch roots and a fake `nvidia-smi` that prints
//! the real tool's CSV. Every residue is listed, every check runs, a clean host passes.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use drover_agent::exec::SystemRunner;
use drover_agent::systemd::fake::FakeSystemd;
use drover_agent::tasks::{TaskEnv, TaskSettings, host_facts, steps, users, validate};
use drover_agent::timekeeping::SystemClock;
use drover_proto::report::{StepOutcome, StepResult, TaskOutcome};
use serde_json::Value;

/// No task here talks to systemd: a manager with no units (every call is `NoSuchUnit`).
static NO_SYSTEMD: std::sync::LazyLock<FakeSystemd> = std::sync::LazyLock::new(FakeSystemd::new);

fn run_validate(settings: &TaskSettings, check_gpu: bool, state: &Path) -> Vec<StepResult> {
    let env = TaskEnv { settings, runner: &SystemRunner, systemd: &*NO_SYSTEMD, clock: &SystemClock, state_dir: state };
    validate::run(&validate::Params { check_gpu, memory_used_threshold_mib: None }, &env)
}

/// An executable written by a `cp` child (never through a descriptor of this process, which a
/// concurrently forking test thread could inherit: ETXTBSY).
fn executable(dir: &Path, name: &str, script: &str) -> PathBuf {
    let source = dir.join(format!("{name}.src"));
    std::fs::write(&source, script).expect("write script");
    let path = dir.join(name);
    assert!(std::process::Command::new("cp").arg(&source).arg(&path).status().expect("cp").success());
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

fn proc_entry(proc_dir: &Path, pid: u32, name: &str, uid: u32) {
    let dir = proc_dir.join(pid.to_string());
    std::fs::create_dir_all(&dir).expect("mkdir pid");
    let status = format!(
        "Name:\t{name}\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t{pid}\nPid:\t{pid}\nPPid:\t1\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t{uid}\t{uid}\t{uid}\t{uid}\n"
    );
    std::fs::write(dir.join("status"), status).expect("write status");
}

/// A fake host under `root`: settings pointing at it, a root-only passwd and `/proc`, and a
/// mount table with the root filesystem and the scratch root as its own filesystem.
fn fake_host(root: &Path) -> TaskSettings {
    let proc_dir = root.join("proc");
    std::fs::create_dir_all(&proc_dir).expect("mkdir proc");
    proc_entry(&proc_dir, 1, "systemd", 0);
    proc_entry(&proc_dir, 812, "sshd", 0);
    proc_entry(&proc_dir, 900, "systemd-resolve", 991);
    std::fs::create_dir_all(proc_dir.join("sys")).expect("non-pid entry");
    std::fs::create_dir_all(proc_dir.join("7777")).expect("a process that exited mid-scan: no status");
    let scratch = root.join("scratch");
    std::fs::create_dir_all(&scratch).expect("mkdir scratch");
    std::fs::write(root.join("passwd"), "root:x:0:0:root:/root:/bin/bash\nsystemd-resolve:x:991:991::/:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n").expect("passwd");
    let mountinfo = format!(
        "22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro\n\
         25 22 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw\n\
         40 22 259:5 / {} rw,relatime shared:20 - xfs /dev/nvme1n1 rw\n",
        scratch.display()
    );
    std::fs::write(root.join("mountinfo"), mountinfo).expect("mountinfo");
    TaskSettings {
        passwd_file: root.join("passwd"),
        proc_dir,
        mountinfo_file: root.join("mountinfo"),
        storage_roots: vec![scratch, root.join("var-tmp-tenant")],
        nvidia_smi: root.join("no-such-nvidia-smi"),
        amd_smi: root.join("no-such-amd-smi"),
        rocm_smi: root.join("no-such-rocm-smi"),
        gpu_tool_timeout_secs: 20,
        ..TaskSettings::default()
    }
}

fn residues(step: &StepResult) -> Vec<Value> {
    step.data["residues"].as_array().cloned().unwrap_or_default()
}

fn step<'a>(steps: &'a [StepResult], name: &str) -> &'a StepResult {
    steps.iter().find(|s| s.name == name).unwrap_or_else(|| panic!("no step {name}: {steps:?}"))
}

#[test]
fn validate_clean_lists_every_residue() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let mut settings = fake_host(root);
    let scratch = settings.storage_roots[0].clone();
    // A tenant user, and a malformed line.
    let mut passwd = std::fs::read_to_string(&settings.passwd_file).expect("passwd");
    passwd.push_str("alice:x:10001:10001:Alice:/home/alice:/bin/bash\nbroken-line-without-fields\n");
    std::fs::write(&settings.passwd_file, passwd).expect("passwd");
    // Tenant processes (one of them a deleted user's).
    proc_entry(&settings.proc_dir, 4242, "python3", 10001);
    proc_entry(&settings.proc_dir, 4300, "sleep", 20077);
    // A Weka mount, and a tmpfs a tenant left below the scratch root.
    let mut mi = std::fs::read_to_string(&settings.mountinfo_file).expect("mountinfo");
    mi.push_str("310 22 0:98 / /mnt/weka/tenant-a rw,relatime shared:150 - wekafs 10.0.0.5/fs01 rw,relatime,writecache\n");
    mi.push_str(&format!("61 40 0:52 / {}/job-17/tmp rw,nosuid,nodev shared:33 - tmpfs tmpfs rw,size=1048576k\n", scratch.display()));
    std::fs::write(&settings.mountinfo_file, mi).expect("mountinfo");
    // Scratch residue: more entries than are listed.
    for i in 0..25 {
        std::fs::write(scratch.join(format!("file-{i:02}")), b"x").expect("residue");
    }
    std::fs::create_dir_all(scratch.join("job-17/tmp")).expect("residue dir");
    // A GPU compute app, as nvidia-smi prints it.
    settings.nvidia_smi = executable(
        root,
        "nvidia-smi",
        "#!/bin/sh\ncase \"$1\" in\n--query-compute-apps=*) echo '4242, python3, GPU-5b1e3c2d-0a9f-4e8d-b7c6-a5f4e3d2c1b0, 30512' ;;\n*) exit 2 ;;\nesac\n",
    );

    let steps = run_validate(&settings, true, root);

    let names: Vec<&str> = steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["users", "processes", "mounts", "scratch", "gpu"], "every check runs, none is 'not run'");
    assert!(steps.iter().all(|s| s.outcome == StepOutcome::Error), "{steps:#?}");
    assert_eq!(steps::outcome(&steps), TaskOutcome::Failed);

    let users = residues(step(&steps, "users"));
    assert_eq!(users.len(), 2, "{users:?}");
    assert_eq!(
        (users[0]["kind"].as_str(), users[0]["name"].as_str(), users[0]["uid"].as_u64()),
        (Some("user"), Some("alice"), Some(10001))
    );
    assert_eq!((users[1]["kind"].as_str(), users[1]["line"].as_u64()), (Some("malformedPasswdLine"), Some(5)));

    let procs = residues(step(&steps, "processes"));
    let pids: Vec<i64> = procs.iter().filter_map(|p| p["pid"].as_i64()).collect();
    assert_eq!(pids, [4242, 4300], "root's and the system's processes are not residue: {procs:?}");
    assert_eq!(procs[0]["comm"], "python3");

    let mounts = residues(step(&steps, "mounts"));
    let points: Vec<&str> = mounts.iter().filter_map(|m| m["mountPoint"].as_str()).collect();
    let below = format!("{}/job-17/tmp", scratch.display());
    assert_eq!(points, ["/mnt/weka/tenant-a", below.as_str()], "the scratch root's own mount is not residue");

    let scratch_res = residues(step(&steps, "scratch"));
    assert_eq!(scratch_res.len(), 1, "a missing storage root holds nothing: {scratch_res:?}");
    assert_eq!(scratch_res[0]["count"], 26);
    assert_eq!(scratch_res[0]["entries"].as_array().map(Vec::len), Some(validate::MAX_SCRATCH_NAMES));

    let gpu = residues(step(&steps, "gpu"));
    assert_eq!((gpu.len(), gpu[0]["pid"].as_u64(), gpu[0]["usedMemoryMib"].as_u64()), (1, Some(4242), Some(30512)));
}

#[test]
fn validate_clean_passes_on_a_clean_host() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let mut settings = fake_host(root);
    if nix::unistd::geteuid().is_root() {
        // mkfs's lost+found at the root of the scratch filesystem is not residue.
        std::fs::create_dir(settings.storage_roots[0].join("lost+found")).expect("lost+found");
    }

    // No nvidia-smi and no NVIDIA driver: the GPU check has nothing to check.
    let steps = run_validate(&settings, true, root);
    assert_eq!(steps::outcome(&steps), TaskOutcome::Succeeded, "{steps:#?}");
    assert!(steps[..4].iter().all(|s| s.outcome == StepOutcome::Ok && s.message == "clean"), "{steps:#?}");
    assert_eq!(step(&steps, "gpu").outcome, StepOutcome::Skipped);

    // With a GPU tool that lists no compute apps, every check is clean.
    settings.nvidia_smi = executable(root, "nvidia-smi", "#!/bin/sh\nexit 0\n");
    let steps = run_validate(&settings, true, root);
    assert!(steps.iter().all(|s| s.outcome == StepOutcome::Ok), "{steps:#?}");
    assert_eq!(run_validate(&settings, false, root).len(), 4, "no GPU check unless asked");
}

#[test]
fn a_missing_nvidia_smi_on_a_host_whose_driver_reports_gpus_fails() {
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = fake_host(dir.path());
    std::fs::create_dir_all(settings.proc_dir.join("driver/nvidia/gpus/0000:3b:00.0")).expect("driver gpu");
    let steps = run_validate(&settings, true, dir.path());
    let gpu = step(&steps, "gpu");
    assert_eq!(gpu.outcome, StepOutcome::Error, "{gpu:?}");
    assert!(gpu.message.contains("1 GPU(s)"), "{}", gpu.message);
}

#[test]
fn malformed_passwd_line_is_reported_not_a_panic() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let settings = fake_host(root);
    let hostile = "root:x:0:0:root:/root:/bin/bash\n\
                   ::::::\n\
                   eve:x:99999999999999999999:1::/home/eve:/bin/sh\n\
                   mallory:x:10005\n\
                   -mallory:x:10006:10006::/home/m:/bin/sh\n\
                   \u{0}\u{1}:x:10007:1:\u{7f}:/h:/s:extra\n\
                   bob:x:10002:10002::/home/bob:/bin/sh\n";
    std::fs::write(&settings.passwd_file, hostile).expect("passwd");

    let parsed = host_facts::tenant_users(hostile, &settings);
    assert_eq!(parsed.users.iter().map(|u| u.name.as_str()).collect::<Vec<_>>(), ["bob"]);
    assert_eq!(parsed.malformed.iter().map(|m| m.line).collect::<Vec<_>>(), [2, 3, 4, 5, 6]);

    let steps = run_validate(&settings, false, root);
    let users = step(&steps, "users");
    assert_eq!(users.outcome, StepOutcome::Error);
    let kinds: Vec<&str> =
        residues(users).iter().filter_map(|r| r["kind"].as_str()).map(|k| if k == "user" { "user" } else { "malformed" }).collect();
    assert_eq!(kinds, ["user", "malformed", "malformed", "malformed", "malformed", "malformed"]);

    // revoke_user handles the users it can read and then fails on the lines it cannot.
    let env = TaskEnv {
        settings: &TaskSettings { userdel: root.join("no-userdel"), loginctl: root.join("no-loginctl"), ..settings.clone() },
        runner: &SystemRunner,
        systemd: &*NO_SYSTEMD,
        clock: &SystemClock,
        state_dir: root,
    };
    let only_root = ["root".to_owned()];
    let refused = users::run(Some(&only_root), &env);
    assert_eq!((refused.len(), refused[0].outcome), (1, StepOutcome::Error));
    let named_missing = ["nobody-here".to_owned()];
    let steps = users::run(Some(&named_missing), &env);
    let last = steps.last().expect("steps");
    assert_eq!((last.name.as_str(), last.outcome), ("passwd", StepOutcome::Error), "{steps:#?}");
    assert_eq!(last.data["malformed"].as_array().map(Vec::len), Some(5));
}
