//! The agent's durable state directory (`/var/lib/drover` by default).
//!
//! | file | mode | what |
//! |---|---|---|
//! | `key.pem` | 0600 | the agent's private key (PKCS#8 PEM), generated on this host, never sent anywhere |
//! | `cert.pem` | 0644 | its client certificate from the coordinator CA |
//! | `ca.crt` | 0644 | the coordinator CA the certificate chains to |
//! | `trust.json` | 0644 | the CI trust roots, the exact bytes whose sha256 the operator pinned |
//! | `director.pub` | 0644 | the director's public key (SPKI PEM), pinned for intents and tasks |
//! | `identity.json` | 0644 | `{"hostId","hostname"}` as the certificate names them |
//!
//! The directory is created 0700 (and tightened to 0700 if it exists looser). Every write is
//! atomic: a temporary file in the same directory is created with its final mode, written,
//! fsynced, renamed over the target, and the directory is fsynced — a crash leaves the old
//! file or the new one, never a torn one, and a symlink planted at a target is replaced, not
//! followed. `identity.json` is written last by enrollment, so its presence (with the key and
//! certificate) means enrollment completed.

use std::fs;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use crate::exit::{ExitStatus, codes};

/// The private key file.
pub const KEY: &str = "key.pem";
/// The client certificate file.
pub const CERT: &str = "cert.pem";
/// The coordinator CA file.
pub const CA: &str = "ca.crt";
/// The CI trust roots file.
pub const TRUST: &str = "trust.json";
/// The director public key file.
pub const DIRECTOR: &str = "director.pub";
/// The identity file.
pub const IDENTITY: &str = "identity.json";

/// Mode of private files.
pub const PRIVATE_MODE: u32 = 0o600;
/// Mode of public files.
pub const PUBLIC_MODE: u32 = 0o644;
/// Mode of the directory.
pub const DIR_MODE: u32 = 0o700;

/// Why the state directory could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The directory could not be created or opened.
    #[error("state directory {dir}: {source}", dir = dir.display())]
    Dir {
        /// The directory.
        dir: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The path exists and is not a directory.
    #[error("state directory {dir} is not a directory", dir = dir.display())]
    NotADirectory {
        /// The path.
        dir: PathBuf,
    },
    /// A file could not be written.
    #[error("cannot write {file}: {source}", file = file.display())]
    Write {
        /// The file.
        file: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A file could not be read.
    #[error("cannot read {file}: {source}", file = file.display())]
    Read {
        /// The file.
        file: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A file holds something it should not.
    #[error("{file}: {message}", file = file.display())]
    Corrupt {
        /// The file.
        file: PathBuf,
        /// What is wrong.
        message: String,
    },
}

impl ExitStatus for StateError {
    fn exit_code(&self) -> u8 {
        match self {
            StateError::Dir { .. } | StateError::NotADirectory { .. } | StateError::Write { .. } => codes::CANT_CREATE,
            StateError::Read { .. } => codes::NO_INPUT,
            StateError::Corrupt { .. } => codes::DATA,
        }
    }
}

/// `identity.json`: who this host is, as its certificate says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Identity {
    /// The host id (UUID) the certificate names.
    pub host_id: String,
    /// The hostname the certificate names.
    pub hostname: String,
}

/// An open state directory.
#[derive(Debug, Clone)]
pub struct StateDir {
    dir: PathBuf,
    /// The last write that failed for want of space, until a write succeeds; shared by every
    /// clone, so the health report sees what the pull loop's writes met.
    out_of_space: Arc<Mutex<Option<OutOfSpace>>>,
}

/// A write to the state directory that failed because its filesystem is full.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutOfSpace {
    /// The file that could not be written (it is as it was before).
    pub file: PathBuf,
    /// Bytes free on the filesystem when it failed (0 where that could not be read).
    pub available_bytes: u64,
}

impl StateDir {
    /// Opens `dir`, creating it (and missing parents) with mode 0700; an existing directory
    /// with group or other permissions is tightened to 0700.
    pub fn open(dir: &Path) -> Result<StateDir, StateError> {
        let dir_err = |source| StateError::Dir { dir: dir.to_owned(), source };
        match fs::metadata(dir) {
            Ok(meta) if !meta.is_dir() => return Err(StateError::NotADirectory { dir: dir.to_owned() }),
            Ok(meta) => {
                if meta.permissions().mode() & 0o077 != 0 {
                    fs::set_permissions(dir, fs::Permissions::from_mode(DIR_MODE)).map_err(dir_err)?;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                fs::DirBuilder::new().recursive(true).mode(DIR_MODE).create(dir).map_err(dir_err)?;
                // The umask may have narrowed the mode further; make it exactly 0700.
                fs::set_permissions(dir, fs::Permissions::from_mode(DIR_MODE)).map_err(dir_err)?;
            }
            Err(e) => return Err(dir_err(e)),
        }
        let state = StateDir { dir: dir.to_owned(), out_of_space: Arc::default() };
        state.remove_stale_temporaries();
        Ok(state)
    }

    /// Removes temporary files a killed process left mid-write (`.NAME.tmp-PID-SEQ` of another
    /// pid): they were never renamed into place, so nothing refers to them. Best effort: a
    /// file that cannot be removed now is tried again at the next start.
    fn remove_stale_temporaries(&self) {
        let Ok(entries) = fs::read_dir(&self.dir) else { return };
        let ours = format!("-{}-", std::process::id());
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some((_, tail)) = name.strip_prefix('.').and_then(|n| n.rsplit_once(".tmp-")) else { continue };
            let tail = format!("-{tail}");
            if !tail.starts_with(&ours) && entry.file_type().is_ok_and(|t| t.is_file()) {
                let _ = fs::remove_file(entry.path());
            }
        }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// `name` inside the directory.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Whether enrollment completed: the key, the certificate and the identity are present.
    pub fn is_enrolled(&self) -> bool {
        [KEY, CERT, IDENTITY].iter().all(|name| self.file(name).symlink_metadata().is_ok())
    }

    /// Writes `name` atomically with `mode` (see the module doc).
    /// A write that fails for want of space is remembered ([`StateDir::out_of_space`]) until
    /// one succeeds.
    pub fn write_atomic(&self, name: &str, bytes: &[u8], mode: u32) -> Result<(), StateError> {
        let path = self.file(name);
        let result = drover_fsio::write_atomic(&path, bytes, mode, drover_fsio::Mode::Replace);
        let mut latch = self.out_of_space.lock().unwrap_or_else(PoisonError::into_inner);
        match result {
            Ok(()) => {
                *latch = None;
                Ok(())
            }
            Err(source) => {
                if drover_fsio::is_out_of_space(&source) {
                    let available_bytes = drover_fsio::space(&self.dir).map_or(0, |s| s.available_bytes);
                    *latch = Some(OutOfSpace { file: path.clone(), available_bytes });
                }
                Err(StateError::Write { file: path, source })
            }
        }
    }

    /// The last write that failed because the filesystem is full, if no write has succeeded
    /// since.
    pub fn out_of_space(&self) -> Option<OutOfSpace> {
        self.out_of_space.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Reads `name`.
    pub fn read(&self, name: &str) -> Result<Vec<u8>, StateError> {
        let file = self.file(name);
        fs::read(&file).map_err(|source| StateError::Read { file, source })
    }

    /// Writes the private key (0600).
    pub fn write_key(&self, pem: &str) -> Result<(), StateError> {
        self.write_atomic(KEY, pem.as_bytes(), PRIVATE_MODE)
    }

    /// Writes the client certificate.
    pub fn write_cert(&self, pem: &str) -> Result<(), StateError> {
        self.write_atomic(CERT, pem.as_bytes(), PUBLIC_MODE)
    }

    /// Writes the coordinator CA.
    pub fn write_ca(&self, pem: &str) -> Result<(), StateError> {
        self.write_atomic(CA, pem.as_bytes(), PUBLIC_MODE)
    }

    /// Writes the CI trust roots, byte for byte.
    pub fn write_trust(&self, bytes: &[u8]) -> Result<(), StateError> {
        self.write_atomic(TRUST, bytes, PUBLIC_MODE)
    }

    /// Writes the director's public key.
    pub fn write_director_pub(&self, pem: &str) -> Result<(), StateError> {
        self.write_atomic(DIRECTOR, pem.as_bytes(), PUBLIC_MODE)
    }

    /// Writes `identity.json`.
    pub fn write_identity(&self, identity: &Identity) -> Result<(), StateError> {
        let mut bytes =
            serde_json::to_vec_pretty(identity).map_err(|e| StateError::Corrupt { file: self.file(IDENTITY), message: e.to_string() })?;
        bytes.push(b'\n');
        self.write_atomic(IDENTITY, &bytes, PUBLIC_MODE)
    }

    /// Reads `identity.json`.
    pub fn read_identity(&self) -> Result<Identity, StateError> {
        let bytes = self.read(IDENTITY)?;
        serde_json::from_slice(&bytes).map_err(|e| StateError::Corrupt { file: self.file(IDENTITY), message: e.to_string() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        fs::symlink_metadata(path).expect("stat").permissions().mode() & 0o7777
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> =
            fs::read_dir(dir).expect("read_dir").map(|e| e.expect("entry").file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        names
    }

    #[test]
    fn the_directory_is_created_0700_and_tightened_when_looser() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("a/b/state");
        let state = StateDir::open(&dir).expect("open");
        assert_eq!(mode(state.path()), 0o700);
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).expect("chmod");
        StateDir::open(&dir).expect("reopen");
        assert_eq!(mode(&dir), 0o700);
        let file = tmp.path().join("file");
        fs::write(&file, "x").expect("write");
        assert!(matches!(StateDir::open(&file), Err(StateError::NotADirectory { .. })));
    }

    #[test]
    fn writes_have_their_modes_and_leave_no_temporary_files() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let state = StateDir::open(&tmp.path().join("state")).expect("open");
        state.write_key("KEY").expect("key");
        state.write_cert("CERT").expect("cert");
        state.write_ca("CA").expect("ca");
        state.write_trust(b"{}").expect("trust");
        state.write_director_pub("DIR").expect("director");
        let id = Identity { host_id: "7f0c6a56-1d51-4bb4-9a5e-3c8f1d2f9a10".into(), hostname: "gpu-a-01".into() };
        state.write_identity(&id).expect("identity");
        assert_eq!(mode(&state.file(KEY)), 0o600);
        for name in [CERT, CA, TRUST, DIRECTOR, IDENTITY] {
            assert_eq!(mode(&state.file(name)), 0o644, "{name}");
        }
        assert_eq!(entries(state.path()), vec![CA, CERT, DIRECTOR, IDENTITY, KEY, TRUST]);
        assert_eq!(state.read(KEY).expect("read"), b"KEY");
        assert_eq!(state.read_identity().expect("identity"), id);
        let json: serde_json::Value = serde_json::from_slice(&state.read(IDENTITY).expect("read")).expect("json");
        assert_eq!(json, serde_json::json!({"hostId": id.host_id, "hostname": "gpu-a-01"}));
    }

    #[test]
    fn a_write_replaces_the_file_by_rename_and_fixes_a_loose_mode() {
        use std::os::unix::fs::MetadataExt;
        let tmp = tempfile::tempdir().expect("tempdir");
        let state = StateDir::open(&tmp.path().join("state")).expect("open");
        fs::write(state.file(KEY), "OLD").expect("plant");
        fs::set_permissions(state.file(KEY), fs::Permissions::from_mode(0o644)).expect("chmod");
        let old_ino = fs::metadata(state.file(KEY)).expect("stat").ino();
        // A reader holding the old file keeps seeing the old bytes: the new file is a new
        // inode renamed into place, never the old one truncated and rewritten.
        let held = fs::File::open(state.file(KEY)).expect("hold");
        state.write_key("NEW").expect("write");
        assert_ne!(fs::metadata(state.file(KEY)).expect("stat").ino(), old_ino);
        assert_eq!(fs::read_to_string(state.file(KEY)).expect("read"), "NEW");
        assert_eq!(mode(&state.file(KEY)), 0o600);
        let mut old = String::new();
        std::io::Read::read_to_string(&mut &held, &mut old).expect("read held");
        assert_eq!(old, "OLD");
        assert_eq!(entries(state.path()), vec![KEY]);
    }

    #[test]
    fn a_symlink_at_the_target_is_replaced_not_followed() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let outside = tmp.path().join("outside");
        fs::write(&outside, "UNTOUCHED").expect("write");
        let state = StateDir::open(&tmp.path().join("state")).expect("open");
        std::os::unix::fs::symlink(&outside, state.file(KEY)).expect("symlink");
        state.write_key("KEY").expect("write");
        assert_eq!(fs::read_to_string(&outside).expect("read"), "UNTOUCHED");
        assert!(fs::symlink_metadata(state.file(KEY)).expect("stat").file_type().is_file());
        assert_eq!(mode(&state.file(KEY)), 0o600);
    }

    #[test]
    fn a_failed_write_leaves_neither_target_nor_temporary_file() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let state = StateDir::open(&tmp.path().join("state")).expect("open");
        // A directory at the target makes the rename fail after the temp file was written.
        fs::create_dir(state.file(CERT)).expect("mkdir");
        fs::write(state.file(CERT).join("x"), "x").expect("fill");
        let e = state.write_cert("CERT").expect_err("rename onto a non-empty directory fails");
        assert_eq!(e.exit_code(), codes::CANT_CREATE);
        assert!(e.to_string().contains(CERT), "{e}");
        assert_eq!(entries(state.path()), vec![CERT]);
    }

    #[test]
    fn enrolled_means_key_cert_and_identity() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let state = StateDir::open(&tmp.path().join("state")).expect("open");
        assert!(!state.is_enrolled());
        state.write_key("K").expect("key");
        state.write_cert("C").expect("cert");
        assert!(!state.is_enrolled(), "no identity yet: enrollment did not finish");
        state.write_identity(&Identity { host_id: "x".into(), hostname: "h".into() }).expect("identity");
        assert!(state.is_enrolled());
    }
}
