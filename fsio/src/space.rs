//! How much room the filesystem under a path has, and whether an error means it has none.
//!
//! Health checks read [`space`] so they can report a full disk before, not only after, a
//! write fails on it; [`is_out_of_space`] recognises the failure itself, whether the error
//! came straight from the OS or through [`crate::write_atomic`], which keeps its kind.

use std::path::Path;

/// Space on one filesystem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Space {
    /// Bytes an unprivileged process may still write (`f_bavail`: root's reserve excluded).
    pub available_bytes: u64,
    /// The filesystem's size in bytes.
    pub total_bytes: u64,
}

/// The space of the filesystem holding `path` (`statvfs`).
// The conversions are no-ops on 64-bit targets only: the libc types are 32 bits elsewhere.
#[allow(clippy::useless_conversion)]
pub fn space(path: &Path) -> std::io::Result<Space> {
    let st = nix::sys::statvfs::statvfs(path).map_err(std::io::Error::from)?;
    let unit = u64::from(st.fragment_size());
    Ok(Space {
        available_bytes: u64::from(st.blocks_available()).saturating_mul(unit),
        total_bytes: u64::from(st.blocks()).saturating_mul(unit),
    })
}

/// Whether `e` says the filesystem (or the user's quota on it) is full.
pub fn is_out_of_space(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::StorageFull || matches!(e.raw_os_error(), Some(nix::libc::ENOSPC | nix::libc::EDQUOT))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_space_of_a_real_filesystem_is_read_and_a_missing_path_is_an_error() {
        let d = tempfile::tempdir().unwrap();
        let s = space(d.path()).unwrap();
        assert!(s.total_bytes > 0 && s.available_bytes <= s.total_bytes, "{s:?}");
        assert_eq!(space(&d.path().join("missing")).unwrap_err().kind(), std::io::ErrorKind::NotFound);
    }

    #[test]
    fn enospc_and_edquot_are_out_of_space_and_other_errors_are_not() {
        for errno in [nix::libc::ENOSPC, nix::libc::EDQUOT] {
            assert!(is_out_of_space(&std::io::Error::from_raw_os_error(errno)), "{errno}");
        }
        let wrapped = std::io::Error::new(std::io::ErrorKind::StorageFull, "writing: no space");
        assert!(is_out_of_space(&wrapped));
        assert!(!is_out_of_space(&std::io::Error::from_raw_os_error(nix::libc::EACCES)));
    }
}
