//! Reading the host's NixOS state under a root: which closure a link (the system profile,
//! `/run/current-system`) resolves to, and which switch inhibitors a target would change.
//!
//! Everything is resolved *within* the configured root, the way `realpath -m` would inside a
//! chroot: an absolute symlink target (`/nix/store/…`, as Nix writes them) is taken under the
//! root, `..` never climbs above it, and a missing component ends resolution lexically. So a
//! test's temporary root behaves like `/`, and nothing here follows a link out of the root.
//!
//! **Switch inhibitors** (what `switch` cannot change on a live system, so the target is
//! staged with `switch-to-configuration boot` instead): the resolved targets of the
//! closure's top-level `kernel`, `initrd` and `systemd` links, and of `sw/bin/dbus-daemon`
//! (the dbus daemon the system runs; `sw` is the system path's symlink farm, so resolving
//! the whole path lands in the dbus package). These are compared fully resolved, so two
//! closures built from the same kernel and systemd compare equal even though their own
//! store paths differ. The closure's `init` is *not* compared: it is a per-closure script
//! (it embeds the closure's path), different for every closure, and the `systemd` link is
//! what it starts. Kernel parameters and modules follow the kernel package here; a change of
//! only `kernel-params` is applied at the next boot by `switch` (it updates the boot entry)
//! and is not an inhibitor. A component missing from both closures compares equal; one
//! appearing or disappearing is a change.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

use drover_proto::names::check_store_path;

/// The most symlinks followed while resolving one path (Linux's own limit).
pub const MAX_SYMLINK_HOPS: usize = 40;

/// The switch inhibitors: a name and the path inside a closure whose resolved target is
/// compared.
pub const INHIBITORS: &[(&str, &str)] =
    &[("kernel", "kernel"), ("initrd", "initrd"), ("systemd", "systemd"), ("dbus", "sw/bin/dbus-daemon")];

/// Resolves `abs` (an absolute path as the host sees it) within `root`, following symlinks
/// (absolute targets taken under `root`); returns the resolved path as the host sees it.
/// `None` on a symlink loop (more than [`MAX_SYMLINK_HOPS`]) or an unreadable link.
pub fn resolve(root: &Path, abs: &Path) -> Option<PathBuf> {
    let mut queue: VecDeque<OsString> = components(abs).collect();
    let mut resolved = PathBuf::from("/");
    let mut hops = 0;
    while let Some(part) = queue.pop_front() {
        if part == ".." {
            resolved.pop();
            continue;
        }
        let candidate = resolved.join(&part);
        let on_disk = root.join(candidate.strip_prefix("/").unwrap_or(&candidate));
        match on_disk.symlink_metadata() {
            Ok(meta) if meta.file_type().is_symlink() => {
                hops += 1;
                if hops > MAX_SYMLINK_HOPS {
                    return None;
                }
                let target = std::fs::read_link(&on_disk).ok()?;
                if target.is_absolute() {
                    resolved = PathBuf::from("/");
                }
                for (i, c) in components(&target).enumerate() {
                    queue.insert(i, c);
                }
            }
            _ => resolved = candidate,
        }
    }
    Some(resolved)
}

/// The normal and `..` components of `p` (root and `.` dropped).
fn components(p: &Path) -> impl Iterator<Item = OsString> + '_ {
    p.components().filter_map(|c| match c {
        Component::Normal(s) => Some(s.to_owned()),
        Component::ParentDir => Some(OsString::from("..")),
        Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
    })
}

/// The closure `link` (an absolute path such as `/run/current-system`) resolves to within
/// `root`: `Some` only when it resolves to an existing top-level store path that passes
/// [`check_store_path`].
pub fn closure_of(root: &Path, link: &str) -> Option<String> {
    let resolved = resolve(root, Path::new(link))?;
    let text = resolved.to_str()?.to_owned();
    check_store_path(&text).ok()?;
    crate::activation::exists(&root.join(text.trim_start_matches('/'))).then_some(text)
}

/// The resolved target of `rel` inside `closure`, if it exists.
fn component_target(root: &Path, closure: &str, rel: &str) -> Option<PathBuf> {
    let resolved = resolve(root, &Path::new(closure).join(rel))?;
    let on_disk = root.join(resolved.strip_prefix("/").unwrap_or(&resolved));
    crate::activation::exists(&on_disk).then_some(resolved)
}

/// The switch inhibitors `target` would change relative to `running`, each as
/// `"name: old → new"`; empty when `switch` may run.
pub fn changed_inhibitors(root: &Path, running: &str, target: &str) -> Vec<String> {
    let show = |p: &Option<PathBuf>| p.as_ref().map_or_else(|| "(none)".to_owned(), |p| p.display().to_string());
    INHIBITORS
        .iter()
        .filter_map(|(name, rel)| {
            let old = component_target(root, running, rel);
            let new = component_target(root, target, rel);
            (old != new).then(|| format!("{name}: {} → {}", show(&old), show(&new)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    const A: &str = "/nix/store/6cp643dzvlxxpkgbg5kzmwj47sam9zs2-nixos-system-a";

    #[test]
    fn links_resolve_within_the_root_through_relative_and_absolute_targets() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path();
        std::fs::create_dir_all(root.join(A.trim_start_matches('/'))).expect("mkdir");
        std::fs::create_dir_all(root.join("nix/var/nix/profiles")).expect("mkdir");
        symlink(A, root.join("nix/var/nix/profiles/system-1-link")).expect("link");
        symlink("system-1-link", root.join("nix/var/nix/profiles/system")).expect("link");
        assert_eq!(closure_of(root, "/nix/var/nix/profiles/system").as_deref(), Some(A));
        // `..` cannot climb out of the root.
        symlink("../../../../../../..", root.join("nix/var/nix/profiles/up")).expect("link");
        assert_eq!(resolve(root, Path::new("/nix/var/nix/profiles/up")), Some(PathBuf::from("/")));
        // Missing: resolved lexically, but not a closure.
        assert_eq!(closure_of(root, "/run/current-system"), None);
        // A loop ends.
        symlink("loop", root.join("loop")).expect("link");
        assert_eq!(resolve(root, Path::new("/loop")), None);
    }

    #[test]
    fn a_link_to_something_that_is_not_a_top_level_store_path_is_no_closure() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path();
        std::fs::create_dir_all(root.join("etc")).expect("mkdir");
        std::fs::create_dir_all(root.join("run")).expect("mkdir");
        symlink("/etc", root.join("run/current-system")).expect("link");
        assert_eq!(closure_of(root, "/run/current-system"), None);
    }
}
