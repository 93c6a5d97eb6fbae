//! `node.storage_cleanup` (`local` | `weka` | `all`): removes what tenants left on the host's
//! storage.
//!
//! - **weka** (`weka` and `all`): every mount whose type is one of `tasks.weka_fs_types`
//!   (`wekafs` by default) **anywhere in the mount table** counts as a tenant's mount and is
//!   unmounted with `tasks.umount` (run without a shell, the mount point its one argument),
//!   deepest first. Tenant shared storage is mounted wherever the tenant's tooling chose, not
//!   only below the scratch roots, so the type is what identifies it; a host whose own
//!   data lives on one of those types must not list it in `weka_fs_types`. A failed unmount
//!   stops the task (the roots are not emptied while tenant storage is still mounted).
//! - **local** (`local` and `all`): each of `tasks.storage_roots` is emptied by
//!   [`fsops::empty_root`]: never following a symlink, never crossing a mount point
//!   (`st_dev` and the `statx` mount id), keeping the root itself with its mode. A missing
//!   root is a skipped step; a root that is (or whose path holds) a symlink is an error
//!   and nothing in it is touched.
//!
//! The plan is computed first by the pure [`plan`]; a second run finds nothing to do and
//! reports every step skipped. Each root's step reports
//! `{"root", "freedBytes", "entries", "skippedMounts", "mountIdChecked", "errors"}`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use drover_proto::report::StepResult;
use drover_proto::task::StorageScope;
use serde_json::json;

use super::fsops::{self, Hook, RootError};
use super::mounts::{self, Mount};
use super::steps::{self, Done, Step};
use super::{TaskEnv, TaskSettings};
use crate::exec::{CommandRunner, CommandSpec};

/// How long one `umount` may take (a wekafs unmount flushes its write cache).
pub const UMOUNT_TIMEOUT: Duration = Duration::from_secs(120);

/// One step of the cleanup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Unmount a tenant mount.
    Unmount {
        /// Where it is mounted.
        mount_point: PathBuf,
        /// Its type (one of `weka_fs_types`).
        fs_type: String,
    },
    /// The scope includes weka but no mount of those types exists (a re-run).
    NoTenantMounts {
        /// The types looked for.
        fs_types: Vec<String>,
    },
    /// Empty a storage root, keeping it.
    EmptyRoot {
        /// The root.
        root: PathBuf,
    },
}

fn includes_weka(scope: StorageScope) -> bool {
    matches!(scope, StorageScope::Weka | StorageScope::All)
}

fn includes_local(scope: StorageScope) -> bool {
    matches!(scope, StorageScope::Local | StorageScope::All)
}

/// The steps for `scope`, from the settings and the mount table (pure): unmounts of the
/// tenant-type mounts first (deepest first; among mounts stacked on one point, the latest
/// first), then one step per storage root.
pub fn plan(scope: StorageScope, settings: &TaskSettings, mounts: &[Mount]) -> Vec<Step<Action>> {
    let mut out = Vec::new();
    if includes_weka(scope) {
        let mut tenant: Vec<&Mount> = mounts.iter().rev().filter(|m| settings.weka_fs_types.contains(&m.fs_type)).collect();
        tenant.sort_by_key(|m| std::cmp::Reverse(m.mount_point.components().count()));
        if tenant.is_empty() {
            out.push(Step::new("unmount-tenant-mounts", Action::NoTenantMounts { fs_types: settings.weka_fs_types.clone() }));
        }
        for m in tenant {
            out.push(Step::new(
                format!("unmount {}", m.mount_point.display()),
                Action::Unmount { mount_point: m.mount_point.clone(), fs_type: m.fs_type.clone() },
            ));
        }
    }
    if includes_local(scope) {
        for root in &settings.storage_roots {
            out.push(Step::new(format!("empty {}", root.display()), Action::EmptyRoot { root: root.clone() }));
        }
    }
    out
}

/// Runs the task.
pub fn run(scope: StorageScope, env: &TaskEnv<'_>) -> Vec<StepResult> {
    cleanup(scope, env.settings, env.runner, None)
}

/// The task with its parts spelled out: `hook` runs inside the walk between reading a
/// directory and opening each entry (tests only; [`run`] passes `None`).
pub fn cleanup(scope: StorageScope, settings: &TaskSettings, runner: &dyn CommandRunner, mut hook: Option<Hook<'_>>) -> Vec<StepResult> {
    // The mount table is only needed to find tenant mounts; the walk itself tells mounts
    // apart by st_dev and mount id, so a local cleanup does not depend on reading it.
    let table = if includes_weka(scope) {
        match mounts::read(&settings.mountinfo_file) {
            Ok(t) => t,
            Err(e) => return steps::not_planned("read-mounts", e.to_string()),
        }
    } else {
        Vec::new()
    };
    let plan = plan(scope, settings, &table);
    steps::execute(&plan, |action| match action {
        Action::Unmount { mount_point, fs_type } => unmount(runner, &settings.umount, mount_point, fs_type),
        Action::NoTenantMounts { fs_types } => {
            Done::skipped(format!("no mounts of type {} to unmount", fs_types.join(", "))).with_data(json!({ "fsTypes": fs_types }))
        }
        Action::EmptyRoot { root } => empty_root(root, hook.as_mut().map(|h| &mut **h as Hook<'_>)),
    })
}

fn unmount(runner: &dyn CommandRunner, umount: &Path, mount_point: &Path, fs_type: &str) -> Done {
    let data = json!({ "mountPoint": mount_point, "fsType": fs_type });
    // Mount points from the table are absolute, so the argument can never read as an option.
    let Some(arg) = mount_point.to_str().filter(|p| p.starts_with('/')) else {
        return Done::error(format!("mount point {} is not an absolute UTF-8 path", mount_point.display())).with_data(data);
    };
    let spec = CommandSpec::new(umount, &[arg], UMOUNT_TIMEOUT);
    match runner.run(&spec) {
        Ok(out) if out.success() => Done::ok(format!("unmounted {fs_type} at {arg}")).with_data(data),
        Ok(out) => Done::error(format!("{} failed ({:?}): {}", spec.display(), out.code, out.stderr.trim())).with_data(data),
        Err(e) => Done::error(e.to_string()).with_data(data),
    }
}

fn empty_root(root: &Path, hook: Option<Hook<'_>>) -> Done {
    let report = |e: &fsops::Emptied| {
        json!({
            "root": root,
            "freedBytes": e.freed_bytes,
            "entries": e.entries,
            "skippedMounts": e.skipped_mounts,
            "mountIdChecked": e.mount_id_checked,
            "errors": e.errors,
        })
    };
    match fsops::empty_root(root, hook) {
        Err(RootError::Missing(_)) => {
            Done::skipped(format!("{} does not exist: nothing to clean", root.display())).with_data(report(&fsops::Emptied::default()))
        }
        Err(e) => Done::error(format!("{e}; nothing removed")).with_data(json!({ "root": root })),
        Ok(e) => {
            let mut note = String::new();
            if !e.skipped_mounts.is_empty() {
                note.push_str(&format!("; {} mount point(s) left in place", e.skipped_mounts.len()));
            }
            if !e.mount_id_checked {
                note.push_str("; the kernel reports no mount ids: mount points told apart by st_dev only");
            }
            let data = report(&e);
            if e.error_count > 0 {
                Done::error(format!(
                    "{}: {} thing(s) could not be removed (freed {} bytes in {} entries){note}",
                    root.display(),
                    e.error_count,
                    e.freed_bytes,
                    e.entries
                ))
                .with_data(data)
            } else if e.entries == 0 {
                Done::skipped(format!("{}: already empty{note}", root.display())).with_data(data)
            } else {
                Done::ok(format!("{}: freed {} bytes in {} entries{note}", root.display(), e.freed_bytes, e.entries)).with_data(data)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Real lines: a root, a tmpfs and a bind mount under /scratch, and `wekafs` tenant
    /// mounts as the Weka client creates them (one nested, one path with a space).
    const MOUNTINFO: &str = "\
22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro
61 22 0:52 / /scratch/tmpfs-in-root rw,nosuid,nodev shared:33 - tmpfs tmpfs rw,size=1048576k
62 22 259:2 /srv/other /scratch/bind-of-root rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro
310 22 0:98 / /mnt/weka/tenant-a rw,relatime shared:150 - wekafs 10.0.0.5/fs01 rw,relatime,writecache,inode_bits=auto,dentry_max_age_positive=1000
311 22 0:99 / /mnt/weka/tenant\\040b rw,relatime shared:151 - wekafs 10.0.0.5/fs02 rw,relatime,readcache
312 310 0:100 / /mnt/weka/tenant-a/nested rw,relatime shared:152 - wekafs 10.0.0.5/fs03 rw,relatime
";

    fn settings() -> TaskSettings {
        TaskSettings { storage_roots: vec!["/scratch".into(), "/var/tmp/tenant".into()], ..TaskSettings::default() }
    }

    fn table() -> Vec<Mount> {
        mounts::parse(Path::new("mountinfo"), MOUNTINFO).expect("fixture parses")
    }

    fn names(plan: &[Step<Action>]) -> Vec<&str> {
        plan.iter().map(|s| s.name.as_str()).collect()
    }

    #[test]
    fn local_scope_only_empties_the_roots() {
        let p = plan(StorageScope::Local, &settings(), &table());
        assert_eq!(names(&p), ["empty /scratch", "empty /var/tmp/tenant"]);
    }

    #[test]
    fn weka_scope_unmounts_every_wekafs_mount_deepest_first_and_leaves_the_roots() {
        let p = plan(StorageScope::Weka, &settings(), &table());
        assert_eq!(names(&p), ["unmount /mnt/weka/tenant-a/nested", "unmount /mnt/weka/tenant b", "unmount /mnt/weka/tenant-a"]);
        assert!(p.iter().all(|s| matches!(&s.action, Action::Unmount { fs_type, .. } if fs_type == "wekafs")));
    }

    #[test]
    fn all_scope_unmounts_before_emptying() {
        let p = plan(StorageScope::All, &settings(), &table());
        assert_eq!(p.len(), 5);
        assert!(matches!(p[2].action, Action::Unmount { .. }));
        assert_eq!(p[3].action, Action::EmptyRoot { root: "/scratch".into() });
    }

    #[test]
    fn tmpfs_and_bind_mounts_are_never_unmounted_and_types_are_configurable() {
        let s = TaskSettings { weka_fs_types: vec!["tmpfs".into()], ..settings() };
        let p = plan(StorageScope::Weka, &s, &table());
        assert_eq!(names(&p), ["unmount /scratch/tmpfs-in-root"]);
    }

    #[test]
    fn no_tenant_mounts_is_one_skippable_step() {
        let p = plan(StorageScope::Weka, &settings(), &table()[..3]);
        assert_eq!(p, vec![Step::new("unmount-tenant-mounts", Action::NoTenantMounts { fs_types: vec!["wekafs".into()] })]);
        assert!(plan(StorageScope::Local, &TaskSettings::default(), &table()).is_empty(), "no roots, no steps");
    }
}
