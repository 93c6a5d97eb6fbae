//! One way to write a file atomically, used by the agent (its state, the drain marker, the
//! MAAS credentials file), the CLI (keys, releases) and the coordinator (the director key's
//! rotations, a restored store).
//!
//! [`write_atomic`] writes a temporary file beside the target and moves it into place, so a
//! reader sees the old file or the new one, never half of one, and a crash leaves at worst a
//! stray temporary. The temporary's name is fresh (process id and 64 random bits), it is
//! created exclusively (`O_CREAT|O_EXCL`, which never follows a symbolic link) and with
//! `O_NOFOLLOW`, with its final mode from the first instant (then set exactly, whatever the
//! umask), written, fsynced, then renamed over the target — or, with [`Mode::Exclusive`],
//! hard-linked to it, which fails if the target exists even if it appeared after a check — and
//! the directory is fsynced so the rename itself survives a crash. A planted symbolic link at a
//! predictable temporary name, the old drain marker's weakness, is never followed: there is no
//! predictable name, and a link there would make the create fail.
//!
//! A failed write says which step failed, and when the filesystem is full it says so and that
//! nothing was replaced: the temporary is removed and the target is as it was. [`space`] reads
//! how much room the filesystem under a path has, for health reports (the agent's, the
//! store's) that go not-ready before a write fails.

#![forbid(unsafe_code)]

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

mod space;
pub use space::{Space, is_out_of_space, space};

/// The mode of a file only its owner may read (keys, the store, backups).
pub const PRIVATE_FILE_MODE: u32 = 0o600;
/// The mode of a directory only its owner may enter (a state directory).
pub const PRIVATE_DIR_MODE: u32 = 0o700;

/// Whether the target may be replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Replace the target if it exists (rename).
    Replace,
    /// Refuse if the target exists (hard link; `AlreadyExists`).
    Exclusive,
}

/// The temporary beside `path`: a fresh, unpredictable name.
fn temporary(dir: &Path, path: &Path) -> std::io::Result<PathBuf> {
    let name = path.file_name().ok_or_else(|| std::io::Error::other(format!("{} has no file name", path.display())))?;
    Ok(dir.join(format!(".{}.tmp-{}-{:016x}", name.to_string_lossy(), std::process::id(), rand::random::<u64>())))
}

/// Writes `bytes` to `path` atomically with permission bits `perm`, creating the parent
/// directories (see the module docs). An error keeps the kind of the step's error and says
/// which step failed; the target is then as it was.
pub fn write_atomic(path: &Path, bytes: &[u8], perm: u32, mode: Mode) -> std::io::Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(|e| step("creating its directory", &e))?;
    let tmp = temporary(dir, path)?;
    let result = (|| {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(perm)
            .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
            .open(&tmp)
            .map_err(|e| step("creating a temporary beside it", &e))?;
        // The umask may have cleared bits of `perm`; set them exactly.
        f.set_permissions(fs::Permissions::from_mode(perm)).map_err(|e| step("setting the temporary's mode", &e))?;
        f.write_all(bytes).map_err(|e| step("writing a temporary beside it", &e))?;
        f.sync_all().map_err(|e| step("syncing a temporary beside it", &e))?;
        drop(f);
        match mode {
            Mode::Replace => fs::rename(&tmp, path).map_err(|e| step("moving the temporary into place", &e))?,
            Mode::Exclusive => {
                fs::hard_link(&tmp, path).map_err(|e| step("linking the temporary into place", &e))?;
                fs::remove_file(&tmp).map_err(|e| step("removing the temporary", &e))?;
            }
        }
        fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| step("syncing its directory", &e))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// `e` with the step that failed in front, its kind kept (callers match on `AlreadyExists`,
/// [`is_out_of_space`] on `StorageFull`). A full filesystem is named as such, with what it
/// means for the target: the old file, if any, is untouched.
fn step(what: &str, e: &std::io::Error) -> std::io::Error {
    let full = if is_out_of_space(e) { " (no space left on the filesystem; nothing was replaced)" } else { "" };
    std::io::Error::new(e.kind(), format!("{what}: {e}{full}"))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt as _;

    use super::*;

    #[test]
    fn the_file_is_replaced_whole_with_its_exact_mode_and_no_temporary_stays() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("sub/state.json");
        write_atomic(&p, b"one", 0o600, Mode::Replace).unwrap();
        write_atomic(&p, b"two", 0o640, Mode::Replace).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        assert_eq!(fs::metadata(&p).unwrap().mode() & 0o777, 0o640);
        let left: Vec<_> = fs::read_dir(p.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left.len(), 1, "{left:?}");
    }

    #[test]
    fn exclusive_never_replaces() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("key");
        write_atomic(&p, b"first", 0o600, Mode::Exclusive).unwrap();
        let e = write_atomic(&p, b"second", 0o600, Mode::Exclusive).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists);
        assert_eq!(fs::read(&p).unwrap(), b"first");
    }

    #[test]
    fn a_symlink_planted_at_the_old_temporary_name_is_not_followed() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        fs::write(&victim, b"precious").unwrap();
        // The drain marker used to write `.cordon.tmp` (a fixed name) with a plain create.
        std::os::unix::fs::symlink(&victim, d.path().join(".cordon.tmp")).unwrap();
        write_atomic(&d.path().join("cordon"), b"{}", 0o644, Mode::Replace).unwrap();
        assert_eq!(fs::read(&victim).unwrap(), b"precious", "the link's target is untouched");
        assert_eq!(fs::read(d.path().join("cordon")).unwrap(), b"{}");
    }
}
