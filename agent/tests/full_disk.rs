//! The agent's state directory on a full filesystem (issue 23, point 5): a small tmpfs in a
//! private mount namespace, filled by a filler file, under the agent's real state directory
//! code (`StateDir`, its records, `drover-fsio`'s atomic write) and health report.
//!
//! - `a_full_state_dir_fails_writes_by_name_keeps_the_old_record_and_recovers`: a record
//!   write on the full disk fails with an error naming the file and the lack of space; the
//!   previous record stays whole and no temporary is left; the state directory's health is
//!   not ready with the reason; once space returns it is ready again and the write succeeds.
//!
//! The outer test re-runs this binary's `#[ignore]`d inner test under `unshare`, so the tmpfs
//! is never mounted in the namespace the tests run in.

use std::io::Write as _;
use std::path::Path;
use std::process::Command;

use drover_agent::health::{MIN_STATE_FREE_BYTES, state_dir_health};
use drover_agent::records::{Records as _, SEEN, Seen};
use drover_agent::state::StateDir;

/// Set for the inner half: the outer test's mount namespace, which the inner one must not be.
const INNER_ENV: &str = "DROVER_AGENT_FULL_DISK_OUTER_MOUNT_NS";
const INNER_MARK: &str = "agent full-disk inner test ran in a private mount namespace";

/// Runs the `#[ignore]`d test `inner` of this binary in a private mount namespace: as root
/// with `unshare -m`; otherwise in a user namespace too (`-r`), where mounting a tmpfs is
/// allowed unprivileged. Where neither can be made, says so and returns.
fn in_private_mount_namespace(inner: &str) {
    let root = nix::unistd::geteuid().is_root();
    let mut cmd = Command::new("unshare");
    if !root {
        cmd.arg("--map-root-user");
    }
    cmd.args(["--mount", "--propagation", "private"])
        .arg(std::env::current_exe().expect("test executable"))
        .args(["--exact", inner, "--ignored", "--nocapture", "--test-threads=1"])
        .env(INNER_ENV, std::fs::read_link("/proc/self/ns/mnt").expect("own mount namespace"));
    let out = cmd.output().unwrap_or_else(|e| panic!("`unshare` (util-linux) is required for the full-disk tests and could not run: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !root && !stdout.contains(INNER_MARK) && stderr.contains("unshare:") {
        eprintln!("not run: this user cannot make a private mount namespace here: {stderr}");
        return;
    }
    assert!(out.status.success(), "inner test {inner} failed ({:?}):\n{stdout}\n{stderr}", out.status);
    assert!(stdout.contains("1 passed") && stdout.contains(INNER_MARK), "inner test {inner} did not run:\n{stdout}\n{stderr}");
}

/// Whether this is the inner half, inside its own mount namespace.
fn inside_private_mount_namespace() -> bool {
    let Some(outer) = std::env::var_os(INNER_ENV) else {
        eprintln!("not run: this test mounts, and runs only inside a private mount namespace (started by its outer test)");
        return false;
    };
    let mine = std::fs::read_link("/proc/self/ns/mnt").expect("own mount namespace");
    assert_ne!(mine.as_os_str(), outer, "refusing to mount in the outer test's mount namespace");
    println!("{INNER_MARK}");
    true
}

fn run(program: &str, args: &[&str]) {
    let status = Command::new(program).args(args).status().unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(status.success(), "{program} {args:?}: {status}");
}

/// Writes `path` until the filesystem has no room left.
fn fill(path: &Path) {
    let mut f = std::fs::File::create(path).expect("filler");
    let chunk = vec![0x5au8; 256 << 10];
    loop {
        match f.write(&chunk) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(nix::libc::ENOSPC) => return,
            Err(e) => panic!("filling {}: {e}", path.display()),
        }
    }
}

fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).expect("list").map(|e| e.expect("entry").file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

#[test]
fn a_full_state_dir_fails_writes_by_name_keeps_the_old_record_and_recovers() {
    in_private_mount_namespace("a_full_state_dir_fails_writes_by_name_keeps_the_old_record_and_recovers_inner");
}

#[test]
#[ignore = "runs inside a private mount namespace, started by a_full_state_dir_fails_writes_by_name_keeps_the_old_record_and_recovers"]
fn a_full_state_dir_fails_writes_by_name_keeps_the_old_record_and_recovers_inner() {
    if !inside_private_mount_namespace() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("state");
    std::fs::create_dir(&dir).expect("mkdir");
    run("mount", &["-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", dir.to_str().expect("utf-8")]);

    let state = StateDir::open(&dir).expect("state dir");
    let old = Seen { highest_timestamp_version: 7, last_intent_id: Some("intent-7".to_owned()), ..Seen::default() };
    state.put_seen(&old).expect("a record written while there is room");
    let before = std::fs::read(state.file(SEEN)).expect("seen.json");
    let h = state_dir_health(&state);
    assert!(h.ready && h.reason.is_none() && h.available_bytes >= MIN_STATE_FREE_BYTES, "{h:?}");

    let filler = dir.join("filler");
    fill(&filler);
    // Not ready before any write has failed: the filesystem has no room.
    let h = state_dir_health(&state);
    assert!(!h.ready && h.available_bytes == 0, "{h:?}");
    assert!(h.reason.as_deref().is_some_and(|r| r.starts_with("disk full: 0 bytes free")), "{h:?}");

    // A record bigger than what the tmpfs's last page can hold: the write needs new blocks.
    let new = Seen { highest_timestamp_version: 8, last_intent_id: Some("i".repeat(16 << 10)), ..Seen::default() };
    let err = state.put_seen(&new).expect_err("no room for the new record");
    let message = err.to_string();
    assert!(message.contains(&*state.file(SEEN).to_string_lossy()), "the error names the file: {message}");
    assert!(message.contains("No space left on device") && message.contains("nothing was replaced"), "{message}");
    assert_eq!(std::fs::read(state.file(SEEN)).expect("seen.json"), before, "the previous record is whole");
    assert_eq!(state.seen().expect("still readable"), old);
    assert_eq!(listing(&dir), ["filler", SEEN], "no temporary is left behind");
    let h = state_dir_health(&state);
    assert!(!h.ready, "{h:?}");
    let reason = h.reason.expect("a reason");
    assert!(reason.starts_with("disk full: writing") && reason.contains(SEEN), "the reason names the write that failed: {reason}");

    // Space returns: ready again, and the same write succeeds.
    std::fs::remove_file(&filler).expect("remove the filler");
    let h = state_dir_health(&state);
    assert!(h.ready && h.reason.is_none(), "{h:?}");
    state.put_seen(&new).expect("the write succeeds once space returns");
    assert_eq!(state.seen().expect("seen"), new);
    assert_eq!(listing(&dir), [SEEN]);
    assert!(state.out_of_space().is_none(), "a write that succeeded clears the failure");

    drop(state);
    run("umount", &[dir.to_str().expect("utf-8")]);
}
