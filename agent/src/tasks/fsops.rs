//! The one module that removes files for `node.storage_cleanup`: it empties a directory the
//! tenant just had write access to, so every name in it is hostile.
//!
//! The walk goes by directory file descriptor, never by path:
//!
//! - the root is opened with `openat2(RESOLVE_NO_SYMLINKS)` (`O_DIRECTORY|O_NOFOLLOW`), so
//!   neither the root nor any component of its path may be a symlink (kernels before 5.6
//!   lack `openat2`: there only the last component is checked, with `O_NOFOLLOW`);
//! - its device (`st_dev`) and its mount id (`statx` `STATX_MNT_ID`) are recorded; a kernel
//!   that does not report the mount id (before 5.8) leaves only `st_dev`, and the result
//!   says so ([`Emptied::mount_id_checked`]);
//! - each entry is opened with `openat(dirfd, name, O_DIRECTORY|O_NOFOLLOW)`: a directory
//!   opens (a symlink never does — it fails with `ELOOP`, a file with `ENOTDIR`); a directory
//!   on another device **or** another mount (a bind mount of the same filesystem has the
//!   same `st_dev`, only the mount id differs) is reported in
//!   [`Emptied::skipped_mounts`] and neither entered nor removed; any other directory is
//!   emptied the same way and removed with `unlinkat(AT_REMOVEDIR)`;
//! - everything else (files, symlinks, sockets, fifos, device nodes) is looked at with
//!   `statx(AT_SYMLINK_NOFOLLOW)` and removed with `unlinkat(dirfd, name, 0)`: a symlink is
//!   removed itself, never followed; a file bind-mounted over a name is a mount and kept.
//!
//! A name swapped for something else between two of those calls is handled by the calls
//! themselves: `openat` with `O_NOFOLLOW` never follows, `unlinkat` never follows, and an
//! entry whose type changed (`EISDIR`, `ELOOP`) is looked at again, a few times at most.
//! A test hook ([`empty_root`]'s `hook`) runs between reading a directory and opening each
//! of its entries, so tests can make such a swap at exactly that point.
//!
//! Bytes freed are the sizes of the regular files unlinked (`stx_size`); entries are every
//! name removed. No `unsafe` here: `rustix`'s safe API covers every call.

use std::ffi::{CStr, CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::{self, AtFlags, CWD, Dir, FileType, Mode, OFlags, ResolveFlags, Statx, StatxFlags};
use rustix::io::Errno;

/// Deepest directory nesting walked below a root; deeper trees are left in place and
/// reported as an error (one open descriptor per level).
pub const MAX_DEPTH: usize = 256;

/// Most error messages kept in an [`Emptied`] (all are counted).
const MAX_ERRORS_KEPT: usize = 20;

/// How often one entry is looked at again when its type keeps changing under us.
const MAX_ATTEMPTS: usize = 4;

/// Called with an entry's path after its directory was read and before the entry is
/// opened (tests only; `None` in production).
pub type Hook<'a> = &'a mut dyn FnMut(&Path);

/// What emptying a root did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Emptied {
    /// Sizes of the regular files unlinked.
    pub freed_bytes: u64,
    /// Names removed (files, symlinks, directories, …).
    pub entries: u64,
    /// Mount points found below the root: neither crossed nor removed.
    pub skipped_mounts: Vec<PathBuf>,
    /// Whether mount ids were compared too (`false`: the kernel does not report them, so
    /// only `st_dev` was, and a bind mount of the root's own filesystem is not caught).
    pub mount_id_checked: bool,
    /// What could not be removed (the first few).
    pub errors: Vec<String>,
    /// How many things could not be removed.
    pub error_count: u64,
}

/// Why a root could not be emptied at all.
#[derive(Debug, thiserror::Error)]
pub enum RootError {
    /// It does not exist (nothing to clean).
    #[error("{} does not exist", .0.display())]
    Missing(PathBuf),
    /// It, or a component of its path, is a symlink.
    #[error("{} is a symlink or has one in its path: refused", .0.display())]
    Symlink(PathBuf),
    /// It is not a directory.
    #[error("{} is not a directory", .0.display())]
    NotADirectory(PathBuf),
    /// It could not be opened or examined.
    #[error("{}: {source}", path.display())]
    Io {
        /// The root.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// Where a file lives: its filesystem and, where the kernel says, its mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ident {
    dev: (u32, u32),
    mnt_id: Option<u64>,
}

const STATX_MASK: StatxFlags = StatxFlags::BASIC_STATS.union(StatxFlags::MNT_ID);

fn ident(st: &Statx) -> Ident {
    let has_mnt_id = StatxFlags::from_bits_retain(st.stx_mask).contains(StatxFlags::MNT_ID);
    Ident { dev: (st.stx_dev_major, st.stx_dev_minor), mnt_id: has_mnt_id.then_some(st.stx_mnt_id) }
}

fn file_type(st: &Statx) -> FileType {
    FileType::from_raw_mode(st.stx_mode.into())
}

/// `statx` of an open descriptor itself.
fn statx_fd(fd: impl AsFd) -> Result<Statx, Errno> {
    fs::statx(fd, c"", AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW, STATX_MASK)
}

const DIR_FLAGS: OFlags =
    OFlags::RDONLY.union(OFlags::DIRECTORY).union(OFlags::NOFOLLOW).union(OFlags::CLOEXEC).union(OFlags::NONBLOCK).union(OFlags::NOCTTY);

fn open_root(root: &Path) -> Result<OwnedFd, RootError> {
    let opened = match fs::openat2(CWD, root, DIR_FLAGS, Mode::empty(), ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS) {
        Err(Errno::NOSYS) => fs::openat(CWD, root, DIR_FLAGS, Mode::empty()),
        other => other,
    };
    opened.map_err(|e| match e {
        Errno::NOENT => RootError::Missing(root.to_owned()),
        // `O_DIRECTORY` on a symlink may fail with either; say which it was (the answer
        // only shapes the message: nothing was opened).
        Errno::LOOP | Errno::NOTDIR if root.ancestors().any(|a| a.symlink_metadata().is_ok_and(|m| m.file_type().is_symlink())) => {
            RootError::Symlink(root.to_owned())
        }
        Errno::LOOP | Errno::NOTDIR => RootError::NotADirectory(root.to_owned()),
        e => RootError::Io { path: root.to_owned(), source: e.into() },
    })
}

/// Empties `root` (which is kept, with its mode and owner): removes everything below it
/// except other mounts, never following a symlink and never crossing a mount point.
/// `hook` runs between reading each directory and opening each of its entries (tests).
pub fn empty_root(root: &Path, hook: Option<Hook<'_>>) -> Result<Emptied, RootError> {
    let fd = open_root(root)?;
    let st = statx_fd(&fd).map_err(|e| RootError::Io { path: root.to_owned(), source: e.into() })?;
    if file_type(&st) != FileType::Directory {
        return Err(RootError::NotADirectory(root.to_owned()));
    }
    let root_id = ident(&st);
    let mut walk = Walk { root_id, hook, out: Emptied { mount_id_checked: root_id.mnt_id.is_some(), ..Emptied::default() } };
    walk.empty_dir(&fd, root, 0);
    Ok(walk.out)
}

/// What became of one entry.
enum Entry {
    /// Removed, or already gone.
    Gone,
    /// Left in place (a mount, an error).
    Kept,
    /// Its type changed between two calls: look again.
    Again,
}

struct Walk<'h> {
    root_id: Ident,
    hook: Option<Hook<'h>>,
    out: Emptied,
}

impl Walk<'_> {
    fn fail(&mut self, path: &Path, what: &str, e: impl std::fmt::Display) {
        self.out.error_count += 1;
        if self.out.errors.len() < MAX_ERRORS_KEPT {
            self.out.errors.push(format!("{}: {what}: {e}", path.display()));
        }
    }

    /// Whether `id` is on the root's own mount (a mount id the kernel did not report for
    /// the entry, where it did for the root, counts as another mount).
    fn same_mount(&self, id: Ident) -> bool {
        id.dev == self.root_id.dev && (self.root_id.mnt_id.is_none() || id.mnt_id == self.root_id.mnt_id)
    }

    /// Removes everything in `dir`; returns whether something was kept.
    fn empty_dir(&mut self, dir: &OwnedFd, path: &Path, depth: usize) -> bool {
        let names = match read_names(dir) {
            Ok(names) => names,
            Err(e) => {
                self.fail(path, "cannot list", e);
                return true;
            }
        };
        let mut kept = false;
        for name in names {
            let child = path.join(OsStr::from_bytes(name.to_bytes()));
            if let Some(hook) = self.hook.as_mut() {
                hook(&child);
            }
            kept |= self.remove_entry(dir, &name, &child, depth);
        }
        kept
    }

    /// Removes one entry of `dir`; returns whether something was kept.
    fn remove_entry(&mut self, dir: &OwnedFd, name: &CStr, child: &Path, depth: usize) -> bool {
        for _ in 0..MAX_ATTEMPTS {
            let entry = match fs::openat(dir, name, DIR_FLAGS, Mode::empty()) {
                Ok(fd) => self.remove_dir(dir, name, fd, child, depth),
                Err(Errno::NOENT) => Entry::Gone,
                // A symlink (never followed) or anything that is not a directory.
                Err(Errno::LOOP | Errno::NOTDIR) => self.remove_non_dir(dir, name, child),
                Err(e) => {
                    self.fail(child, "cannot open", e);
                    Entry::Kept
                }
            };
            match entry {
                Entry::Gone => return false,
                Entry::Kept => return true,
                Entry::Again => continue,
            }
        }
        self.fail(child, "cannot remove", "its type kept changing");
        true
    }

    fn remove_dir(&mut self, dir: &OwnedFd, name: &CStr, fd: OwnedFd, child: &Path, depth: usize) -> Entry {
        let st = match statx_fd(&fd) {
            Ok(st) => st,
            Err(e) => {
                self.fail(child, "cannot stat", e);
                return Entry::Kept;
            }
        };
        if !self.same_mount(ident(&st)) {
            self.out.skipped_mounts.push(child.to_owned());
            return Entry::Kept;
        }
        if depth + 1 >= MAX_DEPTH {
            self.fail(child, "left in place", format!("nested deeper than {MAX_DEPTH} directories"));
            return Entry::Kept;
        }
        let kept = self.empty_dir(&fd, child, depth + 1);
        drop(fd);
        if kept {
            // Something below stays (a mount, an error already reported): so does this.
            return Entry::Kept;
        }
        match fs::unlinkat(dir, name, AtFlags::REMOVEDIR) {
            Ok(()) => {
                self.out.entries += 1;
                Entry::Gone
            }
            Err(Errno::NOENT) => Entry::Gone,
            // Swapped for a symlink or a file since it was opened.
            Err(Errno::NOTDIR) => Entry::Again,
            Err(e) => {
                self.fail(child, "cannot remove directory", e);
                Entry::Kept
            }
        }
    }

    fn remove_non_dir(&mut self, dir: &OwnedFd, name: &CStr, child: &Path) -> Entry {
        let st = match fs::statx(dir, name, AtFlags::SYMLINK_NOFOLLOW | AtFlags::NO_AUTOMOUNT, STATX_MASK) {
            Ok(st) => st,
            Err(Errno::NOENT) => return Entry::Gone,
            Err(e) => {
                self.fail(child, "cannot stat", e);
                return Entry::Kept;
            }
        };
        let kind = file_type(&st);
        if kind == FileType::Directory {
            return Entry::Again;
        }
        if !self.same_mount(ident(&st)) {
            // A file bind-mounted over this name.
            self.out.skipped_mounts.push(child.to_owned());
            return Entry::Kept;
        }
        match fs::unlinkat(dir, name, AtFlags::empty()) {
            Ok(()) => {
                self.out.entries += 1;
                if kind == FileType::RegularFile {
                    self.out.freed_bytes += st.stx_size;
                }
                Entry::Gone
            }
            Err(Errno::NOENT) => Entry::Gone,
            // Swapped for a directory since it was looked at.
            Err(Errno::ISDIR) => Entry::Again,
            Err(e) => {
                self.fail(child, "cannot remove", e);
                Entry::Kept
            }
        }
    }
}

/// The names in `dir` (without `.` and `..`), read whole before anything is removed so
/// removal cannot disturb the listing.
fn read_names(dir: &OwnedFd) -> Result<Vec<CString>, Errno> {
    // `read_from` opens its own descriptor of the same directory (`openat(fd, ".")`).
    let mut listing = Dir::read_from(dir)?;
    let mut names = Vec::new();
    while let Some(entry) = listing.read() {
        let entry = entry?;
        let name = entry.file_name();
        if name != c"." && name != c".." {
            names.push(name.to_owned());
        }
    }
    Ok(names)
}
