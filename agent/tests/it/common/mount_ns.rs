//! Tests that mount (a tmpfs to fill, bind mounts to cross) do so only in a private mount
//! namespace: the outer test re-runs the same test binary's `#[ignore]`d inner test under
//! `unshare`, so nothing is ever mounted in the namespace the test suite runs in. Shared by
//! the agent's mount tests and the end-to-end full-disk test (included by `#[path]`, since
//! test targets of two packages share no library).

// Each test file that includes this uses only part of it.
#![allow(dead_code)]

use std::io::Write as _;
use std::path::Path;
use std::process::Command;

/// Set for the inner half: the outer test's mount namespace, which the inner one must not be.
const INNER_ENV: &str = "DROVER_TEST_OUTER_MOUNT_NS";
/// Printed by the inner half, so the outer one knows it ran rather than being filtered out.
const INNER_MARK: &str = "inner test ran in a private mount namespace";

/// Runs the `#[ignore]`d test `inner` of this binary in a private mount namespace: as root
/// with `unshare --mount`; otherwise in a user namespace too (`--map-root-user`), where
/// mounting is allowed unprivileged. Where neither can be made, says so and returns.
/// `inner` is the test's path, `concat!(module_path!(), "::name")`: a test binary holds
/// many files' tests, and libtest names each by its path less the crate's name.
pub fn in_private_mount_namespace(inner: &str) {
    let inner = inner.split_once("::").map_or(inner, |(_, path)| path);
    let root = nix::unistd::geteuid().is_root();
    let mut cmd = Command::new("unshare");
    if !root {
        cmd.arg("--map-root-user");
    }
    cmd.args(["--mount", "--propagation", "private"])
        .arg(std::env::current_exe().expect("test executable"))
        .args(["--exact", inner, "--ignored", "--nocapture", "--test-threads=1"])
        .env(INNER_ENV, std::fs::read_link("/proc/self/ns/mnt").expect("own mount namespace"));
    let out = cmd.output().unwrap_or_else(|e| panic!("`unshare` (util-linux) is required for the mount tests and could not run: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !root && !stdout.contains(INNER_MARK) && stderr.contains("unshare:") {
        eprintln!("not run: this user cannot make a private mount namespace here: {stderr}");
        return;
    }
    assert!(out.status.success(), "inner test {inner} failed ({:?}):\n{stdout}\n{stderr}", out.status);
    assert!(stdout.contains("1 passed") && stdout.contains(INNER_MARK), "inner test {inner} did not run:\n{stdout}\n{stderr}");
}

/// Whether this is the inner half, inside its own mount namespace (run directly with
/// `--ignored` it does nothing, and never mounts in the namespace it was started in).
pub fn inside_private_mount_namespace() -> bool {
    let Some(outer) = std::env::var_os(INNER_ENV) else {
        eprintln!("not run: this test mounts, and runs only inside a private mount namespace (started by its outer test)");
        return false;
    };
    let mine = std::fs::read_link("/proc/self/ns/mnt").expect("own mount namespace");
    assert_ne!(mine.as_os_str(), outer, "refusing to mount in the outer test's mount namespace");
    println!("{INNER_MARK}");
    true
}

/// Runs `program args`, which must succeed (`mount`, `umount`).
pub fn run(program: &str, args: &[&str]) {
    let status = Command::new(program).args(args).status().unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(status.success(), "{program} {args:?}: {status}");
}

/// Writes `path` until the filesystem has no room left; returns how many bytes it took.
pub fn fill(path: &Path) -> u64 {
    let mut f = std::fs::File::create(path).expect("filler");
    let chunk = vec![0xa5u8; 1 << 20];
    let mut written = 0u64;
    loop {
        match f.write(&chunk) {
            Ok(0) => return written,
            Ok(n) => written += n as u64,
            Err(e) if e.raw_os_error() == Some(nix::libc::ENOSPC) => return written,
            Err(e) => panic!("filling {}: {e}", path.display()),
        }
    }
}
