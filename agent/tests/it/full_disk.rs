//! The agent's state directory on a full filesystem: a small tmpfs in a private mount
//! namespace, filled by a filler file, under the agent's real state directory code
//! (`StateDir`, its records, `drover-fsio`'s atomic write) and health report.
//!
//! - `a_full_state_dir_fails_writes_by_name_keeps_the_old_record_and_recovers`: a record
//!   write on the full disk fails with an error naming the file and the lack of space; the
//!   previous record stays whole and no temporary is left; the state directory's health is
//!   not ready with the reason; once space returns it is ready again and the write succeeds.
//!
//! The outer test re-runs this binary's `#[ignore]`d inner test under `unshare`, so the tmpfs
//! is never mounted in the namespace the tests run in.

use std::path::Path;

use crate::common::mount_ns;

use drover_agent::health::{MIN_STATE_FREE_BYTES, state_dir_health};
use drover_agent::records::{Records as _, SEEN, Seen};
use drover_agent::state::StateDir;
use mount_ns::{fill, in_private_mount_namespace, inside_private_mount_namespace, run};

fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).expect("list").map(|e| e.expect("entry").file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

#[test]
fn a_full_state_dir_fails_writes_by_name_keeps_the_old_record_and_recovers() {
    in_private_mount_namespace(concat!(module_path!(), "::a_full_state_dir_fails_writes_by_name_keeps_the_old_record_and_recovers_inner"));
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
