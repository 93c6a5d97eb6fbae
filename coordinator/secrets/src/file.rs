//! The file backend: one JSON file per secret, `<root>/<path>.json`, for a single coordinator.
//!
//! Directories are 0700 and files 0600; a file or directory open to group or others is
//! refused, naming it and its mode. Every step below the root goes through a directory file
//! descriptor with `O_NOFOLLOW` (`openat`, `mkdirat`, `renameat`, `unlinkat`), so a symbolic
//! link — the root, a directory above a secret, or the secret itself — is never followed out
//! of the root. Writes are atomic: a temporary file in the same directory, fsync, rename over
//! the old file, fsync of the directory. Nothing is cached: every read opens the file.

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nix::errno::Errno;
use nix::fcntl::{OFlag, openat, renameat};
use nix::sys::stat::{Mode, SFlag, fchmod, fstat, mkdirat};
use nix::unistd::{UnlinkatFlags, unlinkat};

use super::{SecretError, SecretFuture, SecretPath, SecretStore, SecretValue};

/// The largest secret file read, in bytes (values are at most 64 KiB; JSON escaping adds some).
const MAX_FILE_BYTES: u64 = 1024 * 1024;
/// Permission bits of a secret directory.
const DIR_MODE: u32 = 0o700;
/// Permission bits of a secret file.
const FILE_MODE: u32 = 0o600;

/// Secrets as 0600 JSON files under a 0700 root.
#[derive(Debug, Clone)]
pub struct FileSecretStore {
    root: Arc<PathBuf>,
}

impl FileSecretStore {
    /// Opens (creating it 0700 when absent) the root directory. A root that is a symbolic
    /// link, not a directory, or open to group or others is refused.
    pub fn open(root: impl Into<PathBuf>) -> Result<FileSecretStore, SecretError> {
        let root = root.into();
        match std::fs::symlink_metadata(&root) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                use std::os::unix::fs::DirBuilderExt;
                std::fs::DirBuilder::new().recursive(true).mode(DIR_MODE).create(&root).map_err(|source| SecretError::Io {
                    file: root.clone(),
                    action: "create directory",
                    source,
                })?;
            }
            Err(source) => return Err(SecretError::Io { file: root, action: "inspect", source }),
        }
        let store = FileSecretStore { root: Arc::new(root) };
        store.open_root()?;
        Ok(store)
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The file that holds `path`.
    pub fn file_of(&self, path: &SecretPath) -> PathBuf {
        self.root.join(format!("{}.json", path.as_str()))
    }

    fn open_root(&self) -> Result<OwnedFd, SecretError> {
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = nix::fcntl::open(self.root.as_path(), flags, Mode::empty())
            .map_err(|e| open_error(&self.root, e, "the secrets root is a symbolic link", "the secrets root is not a directory"))?;
        check_mode(&fd, &self.root, SFlag::S_IFDIR, DIR_MODE)?;
        Ok(fd)
    }

    /// The directory holding `path`'s file, walking from the root without following links;
    /// `None` when a directory is missing and `create` is false.
    fn parent_dir(&self, path: &SecretPath, create: bool) -> Result<Option<(OwnedFd, PathBuf)>, SecretError> {
        let mut dir = self.open_root()?;
        let mut shown = self.root.to_path_buf();
        let segments: Vec<&str> = path.segments().collect();
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        for segment in &segments[..segments.len() - 1] {
            shown.push(segment);
            let next = match openat(&dir, *segment, flags, Mode::empty()) {
                Ok(fd) => fd,
                Err(Errno::ENOENT) if create => {
                    match mkdirat(&dir, *segment, Mode::from_bits_truncate(DIR_MODE)) {
                        Ok(()) | Err(Errno::EEXIST) => {}
                        Err(e) => return Err(io(&shown, "create directory", e)),
                    }
                    let fd = openat(&dir, *segment, flags, Mode::empty())
                        .map_err(|e| open_error(&shown, e, "a directory above the secret is a symbolic link", "not a directory"))?;
                    // mkdir's mode passes through the umask, which can only remove bits.
                    fchmod(&fd, Mode::from_bits_truncate(DIR_MODE)).map_err(|e| io(&shown, "set the mode of", e))?;
                    fd
                }
                Err(Errno::ENOENT) => return Ok(None),
                Err(e) => return Err(open_error(&shown, e, "a directory above the secret is a symbolic link", "not a directory")),
            };
            check_mode(&next, &shown, SFlag::S_IFDIR, DIR_MODE)?;
            dir = next;
        }
        Ok(Some((dir, shown)))
    }

    fn read_blocking(&self, path: &SecretPath) -> Result<Option<SecretValue>, SecretError> {
        let Some((dir, _)) = self.parent_dir(path, false)? else { return Ok(None) };
        let name = file_name(path);
        let file = self.file_of(path);
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
        let fd = match openat(&dir, name.as_str(), flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => return Ok(None),
            Err(e) => return Err(open_error(&file, e, "the secret file is a symbolic link", "not a regular file")),
        };
        check_mode(&fd, &file, SFlag::S_IFREG, FILE_MODE)?;
        let mut bytes = Vec::new();
        std::fs::File::from(fd).take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes).map_err(|source| SecretError::Io {
            file: file.clone(),
            action: "read",
            source,
        })?;
        if bytes.len() as u64 > MAX_FILE_BYTES {
            return Err(SecretError::Malformed {
                path: path.clone(),
                backend: "file",
                message: format!("{} is larger than {MAX_FILE_BYTES} bytes", file.display()),
            });
        }
        let value = SecretValue::from_json_bytes(&bytes).map_err(|message| SecretError::Malformed {
            path: path.clone(),
            backend: "file",
            message: format!("{}: {message}", file.display()),
        })?;
        Ok(Some(value))
    }

    fn write_blocking(&self, path: &SecretPath, value: &SecretValue) -> Result<(), SecretError> {
        value.check(path)?;
        let Some((dir, dir_shown)) = self.parent_dir(path, true)? else { unreachable!("parent_dir creates what is missing") };
        let name = file_name(path);
        let file = self.file_of(path);
        let tmp_name = format!(".{name}.tmp-{:016x}", rand::random::<u64>());
        let tmp = dir_shown.join(&tmp_name);
        let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = openat(&dir, tmp_name.as_str(), flags, Mode::from_bits_truncate(FILE_MODE)).map_err(|e| io(&tmp, "create", e))?;
        let written = (|| {
            fchmod(&fd, Mode::from_bits_truncate(FILE_MODE)).map_err(|e| io(&tmp, "set the mode of", e))?;
            let mut f = std::fs::File::from(fd);
            f.write_all(&value.to_json()).map_err(|source| SecretError::Io { file: tmp.clone(), action: "write", source })?;
            f.sync_all().map_err(|source| SecretError::Io { file: tmp.clone(), action: "fsync", source })?;
            renameat(&dir, tmp_name.as_str(), &dir, name.as_str()).map_err(|e| io(&file, "rename into place", e))
        })();
        if let Err(e) = written {
            let _ = unlinkat(&dir, tmp_name.as_str(), UnlinkatFlags::NoRemoveDir);
            return Err(e);
        }
        sync_dir(dir, &dir_shown)
    }

    fn delete_blocking(&self, path: &SecretPath) -> Result<(), SecretError> {
        let Some((dir, dir_shown)) = self.parent_dir(path, false)? else { return Ok(()) };
        let name = file_name(path);
        match unlinkat(&dir, name.as_str(), UnlinkatFlags::NoRemoveDir) {
            Ok(()) => sync_dir(dir, &dir_shown),
            Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(io(&self.file_of(path), "remove", e)),
        }
    }

    /// Runs `f` on the blocking pool (file-system calls must not stall the runtime).
    fn blocking<'a, T: Send + 'static>(
        &'a self,
        path: &SecretPath,
        f: impl FnOnce(&FileSecretStore) -> Result<T, SecretError> + Send + 'static,
    ) -> SecretFuture<'a, T> {
        let store = self.clone();
        let file = self.file_of(path);
        Box::pin(async move {
            tokio::task::spawn_blocking(move || f(&store)).await.map_err(|e| SecretError::Io {
                file,
                action: "finish the file operation",
                source: std::io::Error::other(e.to_string()),
            })?
        })
    }
}

impl SecretStore for FileSecretStore {
    fn read<'a>(&'a self, path: &'a SecretPath) -> SecretFuture<'a, Option<SecretValue>> {
        let p = path.clone();
        self.blocking(path, move |s| s.read_blocking(&p))
    }

    fn write<'a>(&'a self, path: &'a SecretPath, value: &'a SecretValue) -> SecretFuture<'a, ()> {
        let (p, v) = (path.clone(), value.clone());
        self.blocking(path, move |s| s.write_blocking(&p, &v))
    }

    fn delete<'a>(&'a self, path: &'a SecretPath) -> SecretFuture<'a, ()> {
        let p = path.clone();
        self.blocking(path, move |s| s.delete_blocking(&p))
    }

    fn backend(&self) -> &'static str {
        "file"
    }
}

/// The last segment plus `.json`.
fn file_name(path: &SecretPath) -> String {
    format!("{}.json", path.segments().last().unwrap_or_default())
}

fn io(file: &Path, action: &'static str, errno: Errno) -> SecretError {
    SecretError::Io { file: file.to_owned(), action, source: std::io::Error::from(errno) }
}

/// An `open` failure: `ELOOP` (O_NOFOLLOW met a link) and `ENOTDIR` (O_DIRECTORY met a link or
/// a file) are refusals, the rest I/O errors.
fn open_error(file: &Path, errno: Errno, link: &'static str, wrong_kind: &'static str) -> SecretError {
    match errno {
        Errno::ELOOP => SecretError::NotFollowed { file: file.to_owned(), what: link },
        Errno::ENOTDIR => {
            let is_link = std::fs::symlink_metadata(file).is_ok_and(|m| m.file_type().is_symlink());
            SecretError::NotFollowed { file: file.to_owned(), what: if is_link { link } else { wrong_kind } }
        }
        e => io(file, "open", e),
    }
}

/// Refuses `fd` unless it is of `kind` and has no permission bits for group or others.
fn check_mode(fd: &OwnedFd, file: &Path, kind: SFlag, expected: u32) -> Result<(), SecretError> {
    let st = fstat(fd).map_err(|e| io(file, "inspect", e))?;
    let format = SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits());
    if format != kind {
        let what = if kind == SFlag::S_IFDIR { "not a directory" } else { "not a regular file" };
        return Err(SecretError::NotFollowed { file: file.to_owned(), what });
    }
    let mode = st.st_mode & 0o7777;
    if mode & 0o077 != 0 {
        return Err(SecretError::InsecureMode { file: file.to_owned(), mode, expected });
    }
    Ok(())
}

fn sync_dir(dir: OwnedFd, shown: &Path) -> Result<(), SecretError> {
    std::fs::File::from(dir).sync_all().map_err(|source| SecretError::Io { file: shown.to_owned(), action: "fsync directory", source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_of_a_path_is_under_the_root() {
        let store = FileSecretStore { root: Arc::new(PathBuf::from("r")) };
        let p = SecretPath::new("maas-sites/s1/power/default").expect("valid");
        assert_eq!(store.file_of(&p), PathBuf::from("r/maas-sites/s1/power/default.json"));
        assert_eq!(file_name(&p), "default.json");
    }
}
