//! `node.storage_cleanup` against real files, named after the attacks it must survive: a
//! tenant's symlinks (planted, or swapped in between listing a directory and opening an
//! entry), bind mounts of the same filesystem and tmpfs mounts inside a root (in a private
//! mount namespace, made with `unshare -m`), tenant `wekafs` mounts (a mountinfo fixture and
//! a fake `umount`), and the boring cases: missing roots, re-runs, the root's mode.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use crate::common::mount_ns;

use drover_agent::exec::SystemRunner;
use drover_agent::tasks::TaskSettings;
use drover_agent::tasks::storage;
use drover_proto::report::{StepOutcome, StepResult};
use drover_proto::task::StorageScope;
use mount_ns::{in_private_mount_namespace, inside_private_mount_namespace, run};
use serde_json::Value;

/// Tests here write scripts and start processes; one at a time, so no child forked by one
/// test holds another's script open for writing (`ETXTBSY`).
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn roots(roots: &[&Path]) -> TaskSettings {
    TaskSettings { storage_roots: roots.iter().map(|r| r.to_path_buf()).collect(), ..TaskSettings::default() }
}

fn clean(scope: StorageScope, settings: &TaskSettings) -> Vec<StepResult> {
    storage::cleanup(scope, settings, &SystemRunner, None)
}

fn write(path: &Path, bytes: usize) {
    fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    fs::write(path, vec![b'x'; bytes]).expect("write");
}

fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        fs::read_dir(dir).expect("read_dir").map(|e| e.expect("entry").file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

fn num(step: &StepResult, key: &str) -> u64 {
    step.data[key].as_u64().unwrap_or_else(|| panic!("{key} in {:?}", step.data))
}

fn skipped_mounts(step: &StepResult) -> Vec<PathBuf> {
    step.data["skippedMounts"].as_array().expect("skippedMounts").iter().map(|v| PathBuf::from(v.as_str().expect("path"))).collect()
}

/// A directory outside every root with something precious in it.
fn precious(dir: &Path) -> PathBuf {
    let outside = dir.join("outside");
    write(&outside.join("precious"), 7);
    write(&outside.join("sub/also-precious"), 3);
    outside
}

fn assert_precious_intact(outside: &Path) {
    assert_eq!(fs::read(outside.join("precious")).expect("precious survives"), b"xxxxxxx");
    assert_eq!(fs::read(outside.join("sub/also-precious")).expect("also-precious survives"), b"xxx");
}

#[test]
fn symlink_in_scratch_does_not_escape() {
    let _g = serial();
    let tmp = tempfile::tempdir().expect("tempdir");
    let outside = precious(tmp.path());
    let root = tmp.path().join("scratch");
    write(&root.join("sub/data.bin"), 1000);
    symlink(&outside, root.join("dir-link")).expect("symlink");
    symlink(outside.join("precious"), root.join("file-link")).expect("symlink");
    symlink(&outside, root.join("sub/deep-link")).expect("symlink");
    symlink("/nonexistent/dangling", root.join("dangling")).expect("symlink");

    let steps = clean(StorageScope::Local, &roots(&[&root]));
    assert_eq!(steps.len(), 1);
    assert_eq!(steps[0].outcome, StepOutcome::Ok, "{steps:?}");
    assert_precious_intact(&outside);
    assert!(listing(&root).is_empty(), "the links themselves are gone");
    assert_eq!(num(&steps[0], "entries"), 6, "4 links, a file, a directory");
    assert_eq!(num(&steps[0], "freedBytes"), 1000, "a symlink's target is never counted");
    assert_eq!(steps[0].data["root"], Value::from(root.to_str().expect("utf-8")));
}

#[test]
fn symlink_swapped_in_after_listing_does_not_escape() {
    let _g = serial();
    let tmp = tempfile::tempdir().expect("tempdir");
    let outside = precious(tmp.path());
    let root = tmp.path().join("scratch");
    write(&root.join("victim/a.txt"), 5);
    write(&root.join("file.txt"), 5);
    let moved = tmp.path().join("moved-victim");

    // The tenant's race, won every time: right after the walk listed a directory and just
    // before it opens the entry, the directory becomes a symlink to the outside (and a file
    // becomes a symlink to a precious file).
    let mut swapped = Vec::new();
    let mut hook = |p: &Path| {
        if p == root.join("victim") {
            fs::rename(p, &moved).expect("move the directory away");
            symlink(&outside, p).expect("swap in a symlink");
            swapped.push(p.to_owned());
        } else if p == root.join("file.txt") {
            fs::remove_file(p).expect("remove");
            symlink(outside.join("precious"), p).expect("swap in a symlink");
            swapped.push(p.to_owned());
        }
    };
    let steps = storage::cleanup(StorageScope::Local, &roots(&[&root]), &SystemRunner, Some(&mut hook));
    assert_eq!(swapped.len(), 2, "the hook ran for both entries");
    assert_eq!(steps[0].outcome, StepOutcome::Ok, "{steps:?}");
    assert_precious_intact(&outside);
    assert_eq!(listing(&outside), ["precious", "sub"]);
    assert_eq!(fs::read(moved.join("a.txt")).expect("the moved directory was not entered"), b"xxxxx");
    assert!(listing(&root).is_empty(), "the swapped-in links are removed: {:?}", listing(&root));
    assert_eq!(num(&steps[0], "entries"), 2);
    assert_eq!(num(&steps[0], "freedBytes"), 0, "only links were removed");
}

fn p(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

#[test]
fn bind_mount_of_the_same_filesystem_is_not_crossed() {
    let _g = serial();
    in_private_mount_namespace(concat!(module_path!(), "::bind_mount_of_the_same_filesystem_is_not_crossed_inner"));
}

#[test]
#[ignore = "runs inside a private mount namespace, started by bind_mount_of_the_same_filesystem_is_not_crossed"]
fn bind_mount_of_the_same_filesystem_is_not_crossed_inner() {
    if !inside_private_mount_namespace() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let outside = precious(tmp.path());
    let root = tmp.path().join("scratch");
    write(&root.join("plain.txt"), 10);
    fs::create_dir_all(root.join("bound")).expect("mkdir");
    fs::create_dir_all(root.join("deep/er/bound")).expect("mkdir");
    write(&root.join("deep/er/sibling.txt"), 20);
    write(&root.join("file-bound"), 1);
    run("mount", &["--bind", p(&outside), p(&root.join("bound"))]);
    run("mount", &["--bind", p(&outside.join("sub")), p(&root.join("deep/er/bound"))]);
    run("mount", &["--bind", p(&outside.join("precious")), p(&root.join("file-bound"))]);
    let dev = |p: &Path| fs::metadata(p).expect("stat").dev();
    assert_eq!(dev(&root), dev(&root.join("bound")), "same filesystem: st_dev alone cannot tell");

    let steps = clean(StorageScope::Local, &roots(&[&root]));
    assert_eq!(steps[0].outcome, StepOutcome::Ok, "{steps:?}");
    assert_eq!(steps[0].data["mountIdChecked"], Value::Bool(true), "this kernel reports mount ids");
    let mut skipped = skipped_mounts(&steps[0]);
    skipped.sort();
    assert_eq!(skipped, [root.join("bound"), root.join("deep/er/bound"), root.join("file-bound")]);
    assert_precious_intact(&outside);
    assert_eq!(listing(&root), ["bound", "deep", "file-bound"], "mount points and their parents stay");
    assert_eq!(listing(&root.join("deep/er")), ["bound"], "everything else below is removed");
    assert_eq!(num(&steps[0], "freedBytes"), 30);

    for m in ["bound", "deep/er/bound", "file-bound"] {
        run("umount", &[p(&root.join(m))]);
    }
    assert_precious_intact(&outside);
}

#[test]
fn tmpfs_inside_a_root_is_not_crossed() {
    let _g = serial();
    in_private_mount_namespace(concat!(module_path!(), "::tmpfs_inside_a_root_is_not_crossed_inner"));
}

#[test]
#[ignore = "runs inside a private mount namespace, started by tmpfs_inside_a_root_is_not_crossed"]
fn tmpfs_inside_a_root_is_not_crossed_inner() {
    if !inside_private_mount_namespace() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().join("scratch");
    write(&root.join("plain.txt"), 10);
    let mnt = root.join("ram");
    fs::create_dir_all(&mnt).expect("mkdir");
    run("mount", &["-t", "tmpfs", "-o", "size=1m", "tenant-tmpfs", p(&mnt)]);
    write(&mnt.join("on-tmpfs/file"), 4);

    let steps = clean(StorageScope::Local, &roots(&[&root]));
    assert_eq!(steps[0].outcome, StepOutcome::Ok, "{steps:?}");
    assert_eq!(skipped_mounts(&steps[0]), std::slice::from_ref(&mnt));
    assert_eq!(fs::read(mnt.join("on-tmpfs/file")).expect("the tmpfs was not entered"), b"xxxx");
    assert_eq!(listing(&root), ["ram"]);
    assert_eq!((num(&steps[0], "entries"), num(&steps[0], "freedBytes")), (1, 10));
    run("umount", &[p(&mnt)]);
}

/// Real `wekafs` lines as the Weka client writes them (one path with an escaped space, one
/// nested mount), among a root filesystem and a tmpfs.
const MOUNTINFO: &str = "\
22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro
25 22 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
61 22 0:52 / /dev/shm rw,nosuid,nodev shared:33 - tmpfs tmpfs rw,size=1048576k
310 22 0:98 / /mnt/weka/tenant-a rw,relatime shared:150 - wekafs 10.0.0.5/fs01 rw,relatime,writecache,inode_bits=auto,dentry_max_age_positive=1000
311 22 0:99 / /mnt/weka/tenant\\040b rw,relatime shared:151 - wekafs 10.0.0.5/fs02 rw,relatime,readcache
312 310 0:100 / /mnt/weka/tenant-a/scratch rw,relatime shared:152 - wekafs 10.0.0.5/fs03 rw,relatime
";

#[test]
fn weka_mounts_are_unmounted_only_when_the_scope_includes_weka() {
    let _g = serial();
    let tmp = tempfile::tempdir().expect("tempdir");
    let log = tmp.path().join("umount.log");
    let fake = tmp.path().join("fake-umount");
    fs::write(&fake, format!("#!/bin/sh\nprintf '%s\\n' \"$*\" >> '{}'\n", log.display())).expect("script");
    fs::set_permissions(&fake, fs::Permissions::from_mode(0o755)).expect("chmod");
    let mountinfo = tmp.path().join("mountinfo");
    fs::write(&mountinfo, MOUNTINFO).expect("fixture");
    let root = tmp.path().join("scratch");
    let settings = TaskSettings { umount: fake, mountinfo_file: mountinfo, ..roots(&[&root]) };
    let unmounted = || {
        let text = fs::read_to_string(&log).unwrap_or_default();
        let _ = fs::remove_file(&log);
        text.lines().map(str::to_owned).collect::<Vec<_>>()
    };
    let weka_order = ["/mnt/weka/tenant-a/scratch", "/mnt/weka/tenant b", "/mnt/weka/tenant-a"];

    write(&root.join("f"), 3);
    let steps = clean(StorageScope::Local, &settings);
    assert!(unmounted().is_empty(), "local never unmounts");
    assert_eq!(steps.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), [format!("empty {}", root.display())]);
    assert!(listing(&root).is_empty());

    write(&root.join("f"), 3);
    let steps = clean(StorageScope::Weka, &settings);
    assert_eq!(unmounted(), weka_order, "every wekafs mount, deepest first, one argument each");
    assert!(steps.iter().all(|s| s.outcome == StepOutcome::Ok && s.name.starts_with("unmount ")), "{steps:?}");
    assert_eq!(steps[1].data["fsType"], "wekafs");
    assert_eq!(listing(&root), ["f"], "weka alone leaves the local roots");

    let steps = clean(StorageScope::All, &settings);
    assert_eq!(unmounted(), weka_order);
    assert_eq!(steps.len(), 4);
    assert!(steps.iter().all(|s| s.outcome == StepOutcome::Ok), "{steps:?}");
    assert!(listing(&root).is_empty());

    // A failing umount stops the task before the roots are touched.
    write(&root.join("f"), 3);
    let failing = TaskSettings { umount: "/bin/false".into(), ..settings.clone() };
    let steps = clean(StorageScope::All, &failing);
    assert_eq!(steps[0].outcome, StepOutcome::Error, "{steps:?}");
    assert!(steps[1..].iter().all(|s| s.outcome == StepOutcome::Skipped && s.message.starts_with("not run")));
    assert_eq!(listing(&root), ["f"]);

    // No tenant mounts left: the weka half is one skipped step.
    fs::write(&settings.mountinfo_file, MOUNTINFO.lines().take(3).collect::<Vec<_>>().join("\n")).expect("fixture");
    let steps = clean(StorageScope::Weka, &settings);
    assert!(unmounted().is_empty());
    assert_eq!(steps.len(), 1);
    assert_eq!(steps[0].outcome, StepOutcome::Skipped);
}

#[test]
fn missing_root_is_skipped() {
    let _g = serial();
    let tmp = tempfile::tempdir().expect("tempdir");
    let missing = tmp.path().join("never-created");
    let present = tmp.path().join("scratch");
    write(&present.join("f"), 3);
    let steps = clean(StorageScope::Local, &roots(&[&missing, &present]));
    assert_eq!(steps[0].outcome, StepOutcome::Skipped, "{steps:?}");
    assert!(steps[0].message.contains("does not exist"), "{}", steps[0].message);
    assert_eq!(num(&steps[0], "freedBytes"), 0);
    assert_eq!(steps[1].outcome, StepOutcome::Ok, "the next root is still cleaned");
    assert!(!missing.exists(), "a missing root is not created");
}

#[test]
fn root_that_is_a_symlink_is_refused() {
    let _g = serial();
    let tmp = tempfile::tempdir().expect("tempdir");
    let outside = precious(tmp.path());
    let root = tmp.path().join("scratch");
    symlink(&outside, &root).expect("symlink");
    let steps = clean(StorageScope::Local, &roots(&[&root]));
    assert_eq!(steps[0].outcome, StepOutcome::Error, "{steps:?}");
    assert!(steps[0].message.contains("symlink"), "{}", steps[0].message);
    assert_precious_intact(&outside);

    // A symlink higher up the root's path is refused too.
    let real = tmp.path().join("real");
    write(&real.join("scratch/f"), 1);
    symlink(&real, tmp.path().join("via")).expect("symlink");
    let steps = clean(StorageScope::Local, &roots(&[&tmp.path().join("via/scratch")]));
    assert_eq!(steps[0].outcome, StepOutcome::Error, "{steps:?}");
    assert_eq!(listing(&real.join("scratch")), ["f"]);
}

#[test]
fn second_run_finds_nothing() {
    let _g = serial();
    let tmp = tempfile::tempdir().expect("tempdir");
    let a = tmp.path().join("a");
    let b = tmp.path().join("b");
    write(&a.join("x/y/z"), 100);
    write(&b.join("w"), 1);
    symlink("/etc", a.join("etc-link")).expect("symlink");
    let mountinfo = tmp.path().join("mountinfo");
    fs::write(&mountinfo, MOUNTINFO.lines().take(3).collect::<Vec<_>>().join("\n")).expect("fixture");
    let settings = TaskSettings { mountinfo_file: mountinfo, umount: "/bin/false".into(), ..roots(&[&a, &b]) };

    let first = clean(StorageScope::All, &settings);
    assert_eq!(first.iter().map(|s| s.outcome).collect::<Vec<_>>(), [StepOutcome::Skipped, StepOutcome::Ok, StepOutcome::Ok]);
    assert_eq!((num(&first[1], "entries"), num(&first[1], "freedBytes")), (4, 100));

    let second = clean(StorageScope::All, &settings);
    assert!(second.iter().all(|s| s.outcome == StepOutcome::Skipped), "{second:?}");
    for step in &second[1..] {
        assert_eq!((num(step, "entries"), num(step, "freedBytes")), (0, 0), "{step:?}");
    }
}

#[test]
fn root_is_kept_with_its_mode() {
    let _g = serial();
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().join("scratch");
    write(&root.join("sub/f"), 2);
    fs::set_permissions(&root, fs::Permissions::from_mode(0o1777)).expect("chmod");
    let uid = if nix::unistd::geteuid().is_root() {
        nix::unistd::chown(&root, Some(12_345.into()), Some(12_345.into())).expect("chown");
        12_345
    } else {
        fs::metadata(&root).expect("stat").uid()
    };
    let before = fs::metadata(&root).expect("stat");

    let steps = clean(StorageScope::Local, &roots(&[&root]));
    assert_eq!(steps[0].outcome, StepOutcome::Ok, "{steps:?}");
    let after = fs::metadata(&root).expect("the root is kept");
    assert_eq!(after.mode() & 0o7777, 0o1777, "with its mode");
    assert_eq!((after.ino(), after.uid()), (before.ino(), uid), "the same directory, same owner");
    assert!(listing(&root).is_empty());
}
