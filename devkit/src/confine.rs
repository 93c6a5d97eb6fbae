//! The start-up check that proves a sandboxed agent touches nothing outside its sandbox:
//! every path its parsed configuration names — the ones it writes, the ones it runs and the
//! ones it reads, defaults included — must lie under the sandbox root once `..` and symlinks
//! in the existing part of the path are resolved, and the systemd bus must be a socket there.
//!
//! It checks the configuration the agent itself will load (`drover_agent::config::Config`),
//! not the text the devkit wrote, so a key the devkit forgot (and the agent's default for it,
//! a real system path) is caught.

use std::path::{Component, Path, PathBuf};

use drover_agent::config::Config;

use crate::DevkitError;

/// Every path `config` names, with the key it comes from.
pub fn named_paths(config: &Config) -> Vec<(String, PathBuf)> {
    let t = &config.tasks;
    let a = &config.activation;
    let h = &config.health;
    let mut out: Vec<(String, PathBuf)> = vec![
        ("state_dir".into(), config.state_dir.clone()),
        ("ca_file".into(), config.ca_file.clone()),
        ("activation.root".into(), a.root.clone()),
        ("activation.nix_store".into(), a.nix_store.clone()),
        ("activation.nix_env".into(), a.nix_env.clone()),
        ("health.maas_creds_file".into(), h.maas_creds_file.clone()),
        ("health.nvidia_smi".into(), h.nvidia_smi.clone()),
        ("tasks.passwd_file".into(), t.passwd_file.clone()),
        ("tasks.proc_dir".into(), t.proc_dir.clone()),
        ("tasks.mountinfo_file".into(), t.mountinfo_file.clone()),
        ("tasks.nvidia_smi".into(), t.nvidia_smi.clone()),
        ("tasks.amd_smi".into(), t.amd_smi.clone()),
        ("tasks.rocm_smi".into(), t.rocm_smi.clone()),
        ("tasks.dcgmi".into(), t.dcgmi.clone()),
        ("tasks.cordon_file".into(), t.cordon_file.clone()),
        ("tasks.maas_creds_file".into(), t.maas_creds_file.clone()),
        ("tasks.userdel".into(), t.userdel.clone()),
        ("tasks.loginctl".into(), t.loginctl.clone()),
        ("tasks.umount".into(), t.umount.clone()),
    ];
    out.extend(h.disks.iter().map(|p| ("health.disks".to_owned(), p.clone())));
    out.extend(t.storage_roots.iter().map(|p| ("tasks.storage_roots".to_owned(), p.clone())));
    out.extend(t.uninstall_paths.iter().map(|p| ("tasks.uninstall_paths".to_owned(), p.clone())));
    out.extend(t.drain_hook.first().map(|p| ("tasks.drain_hook".to_owned(), PathBuf::from(p))));
    match config.systemd_bus.as_deref().and_then(|a| a.strip_prefix("unix:path=")) {
        Some(rest) => out.push(("systemd_bus".into(), PathBuf::from(rest.split(',').next().unwrap_or(rest)))),
        // No bus named means the machine's system bus, which is outside any sandbox.
        None => out.push(("systemd_bus".into(), PathBuf::from("/run/dbus/system_bus_socket"))),
    }
    out
}

/// `p` made absolute and normalised: its longest existing prefix canonicalised (symlinks
/// followed), the rest appended with `.` dropped and `..` popped.
fn resolve(p: &Path) -> PathBuf {
    // A bare program name is looked up on PATH, which is not under any sandbox.
    if !p.is_absolute() {
        return p.to_path_buf();
    }
    let mut existing = p.to_path_buf();
    let mut rest: Vec<std::ffi::OsString> = Vec::new();
    let base = loop {
        if let Ok(c) = existing.canonicalize() {
            break c;
        }
        match (existing.file_name().map(|n| n.to_owned()), existing.parent().map(Path::to_path_buf)) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = parent;
            }
            // Only `/` has no parent, and it always canonicalises.
            _ => break PathBuf::from("/"),
        }
    };
    let mut out = base;
    for name in rest.iter().rev() {
        match Path::new(name).components().next() {
            Some(Component::ParentDir) => {
                out.pop();
            }
            Some(Component::CurDir) | None => {}
            _ => out.push(name),
        }
    }
    out
}

/// Checks every [`named_paths`] entry of `config` is under `root`.
pub fn check(host: &str, config: &Config, root: &Path) -> Result<(), DevkitError> {
    let root = root.canonicalize().map_err(crate::io_at(root))?;
    for (key, path) in named_paths(config) {
        let resolved = resolve(&path);
        if !resolved.is_absolute() || !resolved.starts_with(&root) {
            return Err(DevkitError::Escapes { host: host.to_owned(), key, path, root });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_dot_and_symlinks_are_resolved_before_the_check() {
        let dir = tempfile::tempdir().expect("tmp");
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("etc")).expect("mkdir");
        assert!(resolve(&root.join("etc/../etc/passwd")).starts_with(root.canonicalize().expect("c")));
        assert!(!resolve(&root.join("etc/../../outside")).starts_with(root.canonicalize().expect("c")));
        std::os::unix::fs::symlink("/etc", root.join("escape")).expect("link");
        assert_eq!(resolve(&root.join("escape/passwd")), PathBuf::from("/etc/passwd"));
        assert_eq!(resolve(Path::new("userdel")), PathBuf::from("userdel"));
    }
}

#[cfg(test)]
mod attacks {
    use super::*;

    fn config(dir: &Path, extra: &str) -> Config {
        let text = format!(
            "coordinator_urls = [\"https://127.0.0.1:1\"]\nstate_dir = \"{root}/var/lib/drover\"\nca_file = \"{root}/etc/drover/ca.crt\"\n\
             systemd_bus = \"unix:path={root}/run/dbus/bus.sock\"\n\n[activation]\nroot = \"{root}\"\nnix_store = \"{root}/nix-tools/nix-store\"\n\
             nix_env = \"{root}/nix-tools/nix-env\"\n\n{extra}",
            root = dir.display()
        );
        Config::parse(&dir.join("agent.toml"), &text).expect("parses")
    }

    #[test]
    fn a_sandboxed_config_passes() {
        let dir = tempfile::tempdir().expect("tmp");
        let root = crate::hostroot::HostRoot::create(dir.path()).expect("root");
        check("h", &config(dir.path(), &root.tasks_toml()), dir.path()).expect("confined");
    }

    #[test]
    fn a_default_left_in_place_is_refused() {
        // No [tasks] table: the agent would use the machine's own `userdel` and `/etc/passwd`.
        let dir = tempfile::tempdir().expect("tmp");
        let e = check("h", &config(dir.path(), ""), dir.path()).expect_err("escapes");
        assert!(matches!(&e, DevkitError::Escapes { key, .. } if key.starts_with("health.") || key.starts_with("tasks.")), "{e}");
    }

    #[test]
    fn dot_dot_in_a_path_does_not_escape_the_sandbox() {
        let dir = tempfile::tempdir().expect("tmp");
        let root = crate::hostroot::HostRoot::create(dir.path()).expect("root");
        let tasks = root.tasks_toml().replace(
            &format!("passwd_file = \"{}/etc/passwd\"", dir.path().display()),
            &format!("passwd_file = \"{}/etc/../../../etc/passwd\"", dir.path().display()),
        );
        let e = check("h", &config(dir.path(), &tasks), dir.path()).expect_err("escapes");
        assert!(matches!(&e, DevkitError::Escapes { key, .. } if key == "tasks.passwd_file"), "{e}");
    }

    #[test]
    fn symlink_in_the_sandbox_does_not_escape() {
        let dir = tempfile::tempdir().expect("tmp");
        let root = crate::hostroot::HostRoot::create(dir.path()).expect("root");
        std::fs::remove_dir_all(root.path("scratch")).expect("rm");
        std::os::unix::fs::symlink("/var", root.path("scratch")).expect("link");
        let e = check("h", &config(dir.path(), &root.tasks_toml()), dir.path()).expect_err("escapes");
        assert!(matches!(&e, DevkitError::Escapes { key, .. } if key == "health.disks" || key == "tasks.storage_roots"), "{e}");
    }
}
