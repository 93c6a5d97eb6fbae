//! The mount table, from `/proc/self/mountinfo` (proc(5)): which mounts exist, their
//! filesystem types and mount ids — what `storage_cleanup` unmounts and never crosses, and
//! what `validate_clean` reports as residue.
//!
//! Line format: `36 35 98:0 /mnt1 /mnt/parent rw,noatime master:1 - ext3 /dev/root rw,errors=continue`
//! — mount id, parent id, major:minor, root, mount point, options, optional fields up to a
//! lone `-`, then type, source and super options. Paths escape space, tab, newline and
//! backslash as octal (`\040`).

use std::path::{Path, PathBuf};

/// One mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// Its mount id (what `statx` reports as `stx_mnt_id`).
    pub mount_id: u64,
    /// Its parent's mount id.
    pub parent_id: u64,
    /// `major:minor` of the filesystem.
    pub dev: String,
    /// The root of the mount within its filesystem.
    pub root: PathBuf,
    /// Where it is mounted.
    pub mount_point: PathBuf,
    /// Filesystem type (`wekafs`, `tmpfs`, `ext4`, …).
    pub fs_type: String,
    /// The mount source.
    pub source: String,
}

/// Why the table could not be read.
#[derive(Debug, thiserror::Error)]
pub enum MountsError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}", path = path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A line does not have mountinfo's shape.
    #[error("{path} line {line}: {message}", path = path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
}

/// Undoes mountinfo's octal escapes (`\040` → space).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 3 < bytes.len() && bytes[i + 1..i + 4].iter().all(|b| (b'0'..=b'7').contains(b)) {
            let v = (bytes[i + 1] - b'0') * 64 + (bytes[i + 2] - b'0') * 8 + (bytes[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses mountinfo text; `path` only names the source in errors.
pub fn parse(path: &Path, text: &str) -> Result<Vec<Mount>, MountsError> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |message: &str| MountsError::Malformed { path: path.to_owned(), line: n + 1, message: message.to_owned() };
        let fields: Vec<&str> = line.split(' ').collect();
        let sep = fields.iter().position(|f| *f == "-").ok_or_else(|| bad("no ` - ` separator"))?;
        if sep < 6 || fields.len() < sep + 3 {
            return Err(bad("too few fields"));
        }
        out.push(Mount {
            mount_id: fields[0].parse().map_err(|_| bad("mount id is not a number"))?,
            parent_id: fields[1].parse().map_err(|_| bad("parent id is not a number"))?,
            dev: fields[2].to_owned(),
            root: PathBuf::from(unescape(fields[3])),
            mount_point: PathBuf::from(unescape(fields[4])),
            fs_type: fields[sep + 1].to_owned(),
            source: unescape(fields[sep + 2]),
        });
    }
    Ok(out)
}

/// Reads and parses the table at `path`.
pub fn read(path: &Path) -> Result<Vec<Mount>, MountsError> {
    let text = std::fs::read_to_string(path).map_err(|source| MountsError::Read { path: path.to_owned(), source })?;
    parse(path, &text)
}

/// The mounts at or below `dir` (not `dir`'s own parents), deepest first — the order they
/// must be unmounted in.
pub fn below<'a>(mounts: &'a [Mount], dir: &Path) -> Vec<&'a Mount> {
    let mut v: Vec<&Mount> = mounts.iter().filter(|m| m.mount_point.starts_with(dir)).collect();
    v.sort_by_key(|m| std::cmp::Reverse(m.mount_point.components().count()));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Real lines: a root, a tmpfs, a bind mount of the same filesystem, and two `wekafs`
    /// tenant mounts as the Weka client creates them (one path with a space).
    pub const FIXTURE: &str = "\
22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro
25 22 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
61 22 0:52 / /scratch/tmpfs-in-root rw,nosuid,nodev shared:33 - tmpfs tmpfs rw,size=1048576k
62 22 259:2 /srv/other /scratch/bind-of-root rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro
310 22 0:98 / /mnt/weka/tenant-a rw,relatime shared:150 - wekafs 10.0.0.5/fs01 rw,relatime,writecache,inode_bits=auto,dentry_max_age_positive=1000
311 22 0:99 / /mnt/weka/tenant\\040b rw,relatime shared:151 - wekafs 10.0.0.5/fs02 rw,relatime,readcache
";

    #[test]
    fn real_mountinfo_lines_parse_with_types_ids_and_escapes() {
        let m = parse(Path::new("mountinfo"), FIXTURE).expect("parses");
        assert_eq!(m.len(), 6);
        assert_eq!((m[2].mount_id, m[2].fs_type.as_str()), (61, "tmpfs"));
        assert_eq!(m[3].dev, "259:2", "a bind mount shares the root's device: only the mount id tells them apart");
        let weka: Vec<&Path> = m.iter().filter(|m| m.fs_type == "wekafs").map(|m| m.mount_point.as_path()).collect();
        assert_eq!(weka, [Path::new("/mnt/weka/tenant-a"), Path::new("/mnt/weka/tenant b")]);
        assert_eq!(m[4].source, "10.0.0.5/fs01");
    }

    #[test]
    fn mounts_below_a_directory_come_deepest_first() {
        let text = "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n2 1 0:5 / /s/a rw - tmpfs t rw\n3 2 0:6 / /s/a/b rw - tmpfs t rw\n4 1 0:7 / /sx rw - tmpfs t rw\n";
        let m = parse(Path::new("m"), text).expect("parses");
        let below: Vec<u64> = below(&m, Path::new("/s")).iter().map(|m| m.mount_id).collect();
        assert_eq!(below, vec![3, 2], "/sx is not below /s");
    }

    #[test]
    fn a_malformed_line_names_its_number() {
        let e = parse(Path::new("mountinfo"), "22 1 259:2 / / rw shared:1 ext4\n").expect_err("no separator");
        assert!(e.to_string().contains("mountinfo line 1"), "{e}");
    }
}
