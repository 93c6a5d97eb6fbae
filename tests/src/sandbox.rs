//! Sandboxed host roots for tests that run the real agent: scratch with tenant files, a
//! passwd with a tenant, and the tools at the edge of the machine (`userdel`, `loginctl`, the
//! drain hook, `nvidia-smi`) as scripts that behave like the real ones, exit codes included.

use std::path::{Path, PathBuf};

/// Writes an executable script.
pub fn write_exec(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, text).expect("write");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// A sandboxed host root: scratch with tenant files, a passwd with a tenant, fake tools;
/// returns the agent's `[tasks]` table for it.
pub fn sandbox(root: &Path) -> String {
    let scratch = root.join("scratch");
    std::fs::create_dir_all(scratch.join("job-1/out")).expect("mkdir");
    std::fs::write(scratch.join("job-1/out/weights.bin"), vec![7u8; 4096]).expect("write");
    std::fs::write(scratch.join("notes.txt"), b"tenant data").expect("write");
    std::fs::create_dir_all(root.join("etc")).expect("mkdir");
    std::fs::write(
        root.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/bash\nsyslog:x:104:110::/home/syslog:/usr/sbin/nologin\nalice:x:10001:10001:tenant:/home/alice:/bin/bash\n",
    )
    .expect("passwd");
    std::fs::create_dir_all(root.join("proc")).expect("proc");
    std::fs::write(root.join("mountinfo"), "22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw\n").expect("mountinfo");
    let passwd = root.join("etc/passwd");
    // userdel: exit 6 for an unknown user, as the real one does; removes the user's line.
    write_exec(
        &root.join("bin/userdel"),
        &format!(
            "#!/bin/sh\nfor last; do :; done\ngrep -q \"^$last:\" {p} || {{ echo \"userdel: user '$last' does not exist\" >&2; exit 6; }}\nsed -i \"/^$last:/d\" {p}\necho \"$@\" >> {log}\n",
            p = passwd.display(),
            log = root.join("userdel.log").display()
        ),
    );
    // loginctl terminate-user: the user has no session here — logind's answer, exit 1.
    write_exec(
        &root.join("bin/loginctl"),
        &format!(
            "#!/bin/sh\nfor last; do :; done\nuid=$(grep \"^$last:\" {p} | cut -d: -f3)\n\
             echo \"Could not terminate user: User ID $uid is not logged in or lingering\" >&2\nexit 1\n",
            p = passwd.display()
        ),
    );
    write_exec(&root.join("bin/drain-hook"), &format!("#!/bin/sh\necho drained > {}\n", root.join("drained").display()));
    format!(
        "[tasks]\nstorage_roots = [\"{scratch}\"]\npasswd_file = \"{passwd}\"\nproc_dir = \"{proc}\"\nmountinfo_file = \"{mi}\"\n\
         userdel = \"{ud}\"\nloginctl = \"{lc}\"\ndrain_hook = [\"{hook}\"]\ncordon_file = \"{cordon}\"\nnvidia_smi = \"{nv}\"\n",
        scratch = scratch.display(),
        passwd = passwd.display(),
        proc = root.join("proc").display(),
        mi = root.join("mountinfo").display(),
        ud = root.join("bin/userdel").display(),
        lc = root.join("bin/loginctl").display(),
        hook = root.join("bin/drain-hook").display(),
        cordon = root.join("run/drover/cordoned").display(),
        nv = root.join("bin/no-nvidia-smi").display(),
    )
}

/// Puts the fake `nvidia-smi` (agent/tests/fake-tools, real csv formats from the fixtures)
/// into the root and points `extra` (from [`sandbox`]) at it; returns the fake's state dir
/// (its scenario files and the `log` of every invocation).
pub fn gpu_tools(root: &Path, extra: &mut String) -> PathBuf {
    // The fake reads its scenario from ../state next to the path it is invoked as.
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let (bin, state) = (root.join("gpu/bin"), root.join("gpu/state"));
    std::fs::create_dir_all(&bin).expect("mkdir");
    std::fs::create_dir_all(&state).expect("mkdir");
    std::os::unix::fs::symlink(repo.join("agent/tests/fake-tools/nvidia-smi"), bin.join("nvidia-smi")).expect("symlink");
    for (from, to) in [("nvidia-query-gpu.csv", "gpus"), ("nvidia-query-gpu.after.csv", "gpus.after"), ("nvidia-remapped.csv", "remapped")]
    {
        std::fs::copy(repo.join("agent/tests/fixtures/gpu").join(from), state.join(to)).expect("fixture");
    }
    *extra = extra.replace(
        &format!("nvidia_smi = \"{}\"", root.join("bin/no-nvidia-smi").display()),
        &format!("nvidia_smi = \"{}\"", bin.join("nvidia-smi").display()),
    );
    state
}
