//! A fake Nix toolchain and fake NixOS closures inside a sandbox root, for agents that run
//! real activations without Nix.
//!
//! The agent's activation backend is pointed at the root (`[activation] root`): every
//! absolute Nix path (`/nix/store/…`, `/nix/var/nix/profiles/system`, `/run/current-system`)
//! is taken under it. `nix-store --realise P` succeeds when the closure exists there and
//! fails as Nix does ("path '…' is not valid", exit 1) otherwise; `nix-env -p PROFILE --set
//! P` makes a new `system-N-link` generation and repoints the profile atomically, like Nix.
//! A closure's `bin/switch-to-configuration switch` repoints `/run/current-system`, as
//! NixOS's does; `boot` succeeds; anything else prints the real usage line and exits 1. A
//! closure made with a `broken` mark switches fine but makes `node-check` fail — a health
//! gate failure after a good switch, the case rollback-and-halt exists for.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::{DevkitError, io_at, sq, write_file};

/// `/nix/store/<32 nix-base-32 chars>-<name>`, the hash derived from the name.
pub fn store_path(name: &str) -> String {
    const NIX32: &[u8] = b"0123456789abcdfghijklmnpqrsvwxyz";
    let digest = Sha256::digest(name.as_bytes());
    let hash: String = digest.iter().take(32).map(|b| NIX32[usize::from(*b) % 32] as char).collect();
    format!("/nix/store/{hash}-{name}")
}

/// The fake toolchain installed in one root.
#[derive(Debug, Clone)]
pub struct NixKit {
    root: PathBuf,
}

impl NixKit {
    /// Installs `nix-store` and `nix-env` under `root/nix-tools/` and the directories Nix
    /// expects; every call is logged to `root/nix-calls.log`.
    pub fn install(root: &Path) -> Result<NixKit, DevkitError> {
        let kit = NixKit { root: root.to_path_buf() };
        for dir in ["nix/store", "nix/var/nix/profiles", "run"] {
            std::fs::create_dir_all(root.join(dir)).map_err(io_at(root.join(dir)))?;
        }
        let (r, log) = (sq(root), sq(&kit.calls_log()));
        write_file(
            &kit.nix_store(),
            &format!(
                r#"#!/bin/sh
R={r}
echo "nix-store $*" >> {log}
if [ "$#" -ne 2 ] || [ "$1" != --realise ]; then echo "error: unrecognised arguments: $*" >&2; exit 1; fi
if [ -e "$R$2" ]; then echo "$2"; else echo "error: path '$2' is not valid" >&2; exit 1; fi
"#
            ),
            0o755,
        )?;
        write_file(
            &kit.nix_env(),
            &format!(
                r#"#!/bin/sh
R={r}
echo "nix-env $*" >> {log}
if [ "$#" -ne 4 ] || [ "$1" != -p ] || [ "$3" != --set ]; then echo "error: unrecognised arguments: $*" >&2; exit 1; fi
if [ ! -e "$R$4" ]; then echo "error: path '$4' is not valid" >&2; exit 1; fi
dir=$(dirname "$2"); base=$(basename "$2"); n=1
while [ -e "$dir/$base-$n-link" ] || [ -L "$dir/$base-$n-link" ]; do n=$((n+1)); done
ln -s "$4" "$dir/$base-$n-link"
ln -sfn "$base-$n-link" "$dir/.$base.tmp" && mv -T "$dir/.$base.tmp" "$2"
"#
            ),
            0o755,
        )?;
        Ok(kit)
    }

    /// The fake `nix-store`.
    pub fn nix_store(&self) -> PathBuf {
        self.root.join("nix-tools/nix-store")
    }

    /// The fake `nix-env`.
    pub fn nix_env(&self) -> PathBuf {
        self.root.join("nix-tools/nix-env")
    }

    /// Every tool call so far, one per line.
    pub fn calls_log(&self) -> PathBuf {
        self.root.join("nix-calls.log")
    }

    fn on_disk(&self, abs: &str) -> PathBuf {
        self.root.join(abs.trim_start_matches('/'))
    }

    /// Creates the closure at `store_path` (a `/nix/store/…-nixos-system-…` path, as a fleet
    /// spec names it): the kernel, initrd, systemd and dbus links the agent's switch
    /// inhibitors compare (the same versions in every closure, so a switch is never deferred
    /// to a reboot) and `bin/switch-to-configuration`. With `broken`, the closure carries the
    /// mark `node-check` fails on.
    pub fn closure(&self, store_path: &str, broken: Option<&str>) -> Result<(), DevkitError> {
        let dir = self.on_disk(store_path);
        let package = |name: &str, file: &str| -> Result<String, DevkitError> {
            let sp = crate::nixkit::store_path(name);
            write_file(&self.on_disk(&sp).join(file), "x", 0o644)?;
            Ok(format!("{sp}/{file}"))
        };
        let kernel = package("linux-6.6.60", "bzImage")?;
        let initrd = package("initrd-linux-6.6.60", "initrd")?;
        let dbus = package("dbus-1.14.10", "bin/dbus-daemon")?;
        let systemd = crate::nixkit::store_path("systemd-256.8");
        std::fs::create_dir_all(self.on_disk(&systemd)).map_err(io_at(self.on_disk(&systemd)))?;
        std::fs::create_dir_all(dir.join("sw/bin")).map_err(io_at(&dir))?;
        let links = [("kernel", kernel.as_str()), ("initrd", initrd.as_str()), ("systemd", systemd.as_str())];
        for (link, to) in links {
            let at = dir.join(link);
            if !at.is_symlink() {
                symlink(to, &at).map_err(io_at(&at))?;
            }
        }
        let sw_dbus = dir.join("sw/bin/dbus-daemon");
        if !sw_dbus.is_symlink() {
            symlink(&dbus, &sw_dbus).map_err(io_at(&sw_dbus))?;
        }
        if let Some(why) = broken {
            write_file(&dir.join("broken"), &format!("{why}\n"), 0o644)?;
        }
        let (r, log) = (sq(&self.root), sq(&self.calls_log()));
        write_file(
            &dir.join("bin/switch-to-configuration"),
            &format!(
                r#"#!/bin/sh
R={r}; P='{store_path}'
echo "$P $*" >> {log}
case "$1" in
  switch)
    ln -sfn "$P" "$R/run/.current-system.tmp" && mv -T "$R/run/.current-system.tmp" "$R/run/current-system"
    ;;
  boot) ;;
  *) echo "usage: switch-to-configuration [switch|boot|test|dry-activate]" >&2; exit 1 ;;
esac
"#
            ),
            0o755,
        )
    }

    /// Makes `store_path` (made by [`NixKit::closure`]) the running system and the profile's
    /// first generation, as on a freshly installed host.
    pub fn install_running(&self, store_path: &str) -> Result<(), DevkitError> {
        let profiles = self.on_disk("/nix/var/nix/profiles");
        for (link, to) in [
            (profiles.join("system-1-link"), PathBuf::from(store_path)),
            (profiles.join("system"), PathBuf::from("system-1-link")),
            (self.on_disk("/run/current-system"), PathBuf::from(store_path)),
        ] {
            symlink(&to, &link).map_err(io_at(&link))?;
        }
        Ok(())
    }

    /// The store path `/run/current-system` points at.
    pub fn running(&self) -> Option<String> {
        std::fs::read_link(self.on_disk("/run/current-system")).ok().map(|p| p.display().to_string())
    }

    /// The agent's `[activation]` table for this root.
    pub fn activation_toml(&self) -> String {
        use crate::hostroot::toml_str;
        format!(
            "[activation]\nroot = {}\nnix_store = {}\nnix_env = {}\nswitch_timeout_secs = 30\nconfirm_retry_secs = 1\n",
            toml_str(&self.root),
            toml_str(&self.nix_store()),
            toml_str(&self.nix_env())
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(cmd: &Path, args: &[&str]) -> std::process::Output {
        std::process::Command::new(cmd).args(args).output().expect("runs")
    }

    #[test]
    fn the_fake_tools_behave_like_nix() {
        let dir = tempfile::tempdir().expect("tmp");
        let kit = NixKit::install(dir.path()).expect("install");
        let (v1, v2) = (store_path("nixos-system-a-v1"), store_path("nixos-system-a-v2"));
        kit.closure(&v1, None).expect("v1");
        kit.install_running(&v1).expect("running");
        let missing = sh(&kit.nix_store(), &["--realise", &v2]);
        assert_eq!(missing.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&missing.stderr).contains("is not valid"));
        kit.closure(&v2, None).expect("v2");
        let ok = sh(&kit.nix_store(), &["--realise", &v2]);
        assert!(ok.status.success());
        assert_eq!(String::from_utf8_lossy(&ok.stdout).trim(), v2);
        let profile = dir.path().join("nix/var/nix/profiles/system");
        assert!(sh(&kit.nix_env(), &["-p", profile.to_str().expect("utf8"), "--set", &v2]).status.success());
        assert_eq!(std::fs::read_link(dir.path().join("nix/var/nix/profiles/system-2-link")).expect("link"), PathBuf::from(&v2));
        assert_eq!(kit.running().as_deref(), Some(v1.as_str()));
        let stc = kit.on_disk(&v2).join("bin/switch-to-configuration");
        assert_eq!(sh(&stc, &["dance"]).status.code(), Some(1));
        assert!(sh(&stc, &["switch"]).status.success());
        assert_eq!(kit.running().as_deref(), Some(v2.as_str()));
    }
}
