//! The coordinator's state directory: the CA, the server credential, the director key and
//! (written by the store, not here) the database.
//!
//! ```text
//! ca.crt          CA certificate, PEM                    0644
//! ca.key          CA private key, PKCS#8 PEM             0600
//! server.crt      server certificate, PEM                0644
//! server.key      server private key, PKCS#8 PEM         0600
//! director.key    director Ed25519 key, PKCS#8 v1 PEM    0600
//! director.pub    director public key, SPKI PEM          0644
//! coordinator.db  the SQLite store
//! ```
//!
//! `init` never replaces anything: one existing file and it refuses, because a second CA
//! would silently orphan every certificate the first one issued. `open` refuses a private
//! key that group or others can read.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use drover_proto::keys::{self, KeyError, KeyId};
use drover_proto::time::Time;
use ed25519_dalek::SigningKey;

use crate::pki::{self, Ca, PkiError, San};

/// CA certificate.
pub const CA_CERT_FILE: &str = "ca.crt";
/// CA private key.
pub const CA_KEY_FILE: &str = "ca.key";
/// Server certificate.
pub const SERVER_CERT_FILE: &str = "server.crt";
/// Server private key.
pub const SERVER_KEY_FILE: &str = "server.key";
/// Director signing key (Ed25519, PKCS#8 v1).
pub const DIRECTOR_KEY_FILE: &str = "director.key";
/// Director public key (SPKI PEM): what agents pin at enrollment.
pub const DIRECTOR_PUB_FILE: &str = "director.pub";
/// The store's database; `init` refuses when it exists but does not create it.
pub const DB_FILE: &str = "coordinator.db";

/// Mode of private key files.
pub const PRIVATE_MODE: u32 = drover_fsio::PRIVATE_FILE_MODE;
/// Mode of certificates and public keys.
pub const PUBLIC_MODE: u32 = 0o644;
/// Mode of a state directory `init` creates.
pub const DIR_MODE: u32 = drover_fsio::PRIVATE_DIR_MODE;

/// Every file of a state directory, in the order `init` writes them.
const ALL_FILES: [&str; 7] = [CA_KEY_FILE, CA_CERT_FILE, SERVER_KEY_FILE, SERVER_CERT_FILE, DIRECTOR_KEY_FILE, DIRECTOR_PUB_FILE, DB_FILE];
/// Larger than any PEM this directory holds; keeps a wrong path from being read whole.
const MAX_FILE_BYTES: u64 = 1 << 20;

/// Why a state directory could not be created or loaded. Every variant names its file.
#[derive(Debug, thiserror::Error)]
pub enum StateDirError {
    /// A file `init` would create exists already.
    #[error("{} already exists; refusing to overwrite it", path.display())]
    Exists {
        /// The file.
        path: PathBuf,
    },
    /// A state file is missing.
    #[error("{} is missing (run `drover-coordinator init` first?)", path.display())]
    Missing {
        /// The file.
        path: PathBuf,
    },
    /// The directory could not be created.
    #[error("cannot create directory {}", path.display())]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A file could not be read.
    #[error("cannot read {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A file could not be written.
    #[error("cannot write {}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Not a regular file (a directory, a device, …) or larger than any state file.
    #[error("{} is not a regular file of at most 1 MiB", path.display())]
    NotRegularFile {
        /// The file.
        path: PathBuf,
    },
    /// Not UTF-8 text.
    #[error("{} is not UTF-8 text", path.display())]
    NotText {
        /// The file.
        path: PathBuf,
    },
    /// A private key file that group or others can read or write.
    #[error(
        "{} has mode {mode:04o}: a private key must not be accessible to group or others (chmod 600 {})",
        path.display(),
        path.display()
    )]
    KeyPermissions {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// A certificate or key that does not parse or does not fit the rest of the directory.
    #[error("{} is not usable", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        #[source]
        source: PkiError,
    },
    /// The director key file does not hold an Ed25519 PKCS#8 key.
    #[error("{} is not a usable director key", path.display())]
    BadDirectorKey {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        #[source]
        source: KeyError,
    },
    /// `director.pub` is not the public half of `director.key`.
    #[error("{} is not the public key of {DIRECTOR_KEY_FILE}", path.display())]
    DirectorKeyMismatch {
        /// The file.
        path: PathBuf,
    },
    /// Generating the CA or a certificate failed (nothing was written).
    #[error("cannot create the coordinator's certificates")]
    Generate {
        /// The cause.
        #[source]
        source: PkiError,
    },
}

/// A loaded state directory.
pub struct StateDir {
    path: PathBuf,
    ca: Ca,
    server_cert_pem: String,
    server_cert_der: Vec<u8>,
    server_key_pem: String,
    server_key_der: Vec<u8>,
    director_key: SigningKey,
}

impl std::fmt::Debug for StateDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print key material.
        f.debug_struct("StateDir").field("path", &self.path).field("ca", &self.ca).finish_non_exhaustive()
    }
}

impl StateDir {
    /// Creates a state directory: the directory itself (0700, with missing parents) if
    /// absent, a new CA, a server certificate for `sans`, and a director key. Refuses, naming
    /// the file, when any state file (the database included) exists; nothing is written
    /// then. Each file is written atomically with its final mode from creation on.
    pub fn init(dir: &Path, sans: &[San], now: Time) -> Result<StateDir, StateDirError> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(dir)
            .map_err(|source| StateDirError::CreateDir { path: dir.to_owned(), source })?;
        for name in ALL_FILES {
            let path = dir.join(name);
            if path.symlink_metadata().is_ok() {
                return Err(StateDirError::Exists { path });
            }
        }
        let generate = |source| StateDirError::Generate { source };
        let ca = Ca::generate(now).map_err(generate)?;
        let server = ca.issue_server(sans, now).map_err(generate)?;
        let director = SigningKey::generate(&mut rand::rngs::OsRng);
        let bad_key = |source| StateDirError::BadDirectorKey { path: dir.join(DIRECTOR_KEY_FILE), source };
        let director_pem = keys::signing_key_to_pem(&director).map_err(bad_key)?;
        let director_pub = keys::verifying_key_to_pem(&director.verifying_key()).map_err(bad_key)?;

        let ca_key_pem = ca.key_pem();
        let files: [(&str, &[u8], u32); 6] = [
            (CA_KEY_FILE, ca_key_pem.as_bytes(), PRIVATE_MODE),
            (CA_CERT_FILE, ca.cert_pem().as_bytes(), PUBLIC_MODE),
            (SERVER_KEY_FILE, server.key_pem.as_bytes(), PRIVATE_MODE),
            (SERVER_CERT_FILE, server.cert.pem.as_bytes(), PUBLIC_MODE),
            (DIRECTOR_KEY_FILE, director_pem.as_bytes(), PRIVATE_MODE),
            (DIRECTOR_PUB_FILE, director_pub.as_bytes(), PUBLIC_MODE),
        ];
        let mut written = Vec::new();
        for (name, bytes, mode) in files {
            let path = dir.join(name);
            if let Err(e) = write_new_file(&path, bytes, mode) {
                // Leave no half-made state behind: a later `init` would refuse it, and
                // `open` could not use it.
                for done in &written {
                    let _ = fs::remove_file(done);
                }
                return Err(e);
            }
            written.push(path);
        }
        // Reading back what was written proves that `open` accepts exactly what `init` makes.
        StateDir::open(dir)
    }

    /// Loads a state directory made by [`StateDir::init`], checking that each key belongs to
    /// its certificate, that the server certificate was issued by the CA, and that no
    /// private key is accessible to group or others.
    pub fn open(dir: &Path) -> Result<StateDir, StateDirError> {
        let invalid = |name: &str| {
            let path = dir.join(name);
            move |source| StateDirError::Invalid { path, source }
        };
        let ca_cert = read_state_file(&dir.join(CA_CERT_FILE), false)?;
        let ca_key = read_state_file(&dir.join(CA_KEY_FILE), true)?;
        let ca = Ca::load(&ca_cert, &ca_key).map_err(|e| match e {
            PkiError::BadCaKey { .. } | PkiError::KeyMismatch { .. } => invalid(CA_KEY_FILE)(e),
            e => invalid(CA_CERT_FILE)(e),
        })?;

        let server_cert_pem = read_state_file(&dir.join(SERVER_CERT_FILE), false)?;
        let server_key_pem = read_state_file(&dir.join(SERVER_KEY_FILE), true)?;
        let server_cert_der = pki::pem_to_der(&server_cert_pem, "CERTIFICATE").map_err(invalid(SERVER_CERT_FILE))?;
        ca.verify_issued(&server_cert_der).map_err(invalid(SERVER_CERT_FILE))?;
        pki::check_key_matches(&server_cert_der, &server_key_pem, "server").map_err(invalid(SERVER_KEY_FILE))?;
        // PKCS#8 is what rustls gets (`PrivateKeyDer::Pkcs8`), so no other form is accepted.
        let server_key_der = pki::pem_to_der(&server_key_pem, "PRIVATE KEY").map_err(invalid(SERVER_KEY_FILE))?;

        let key_path = dir.join(DIRECTOR_KEY_FILE);
        let director_pem = read_state_file(&key_path, true)?;
        let director_key =
            keys::signing_key_from_pem(&director_pem).map_err(|source| StateDirError::BadDirectorKey { path: key_path, source })?;
        let pub_path = dir.join(DIRECTOR_PUB_FILE);
        let director_pub = read_state_file(&pub_path, false)?;
        match keys::verifying_key_from_text(&director_pub) {
            Ok(vk) if vk == director_key.verifying_key() => {}
            Ok(_) => return Err(StateDirError::DirectorKeyMismatch { path: pub_path }),
            Err(source) => return Err(StateDirError::BadDirectorKey { path: pub_path, source }),
        }
        Ok(StateDir { path: dir.to_owned(), ca, server_cert_pem, server_cert_der, server_key_pem, server_key_der, director_key })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where the store's database lives.
    pub fn db_path(&self) -> PathBuf {
        self.path.join(DB_FILE)
    }

    /// The CA.
    pub fn ca(&self) -> &Ca {
        &self.ca
    }

    /// Consumes the state dir, keeping the CA (the server holds it for the process's life).
    pub fn into_ca(self) -> Ca {
        self.ca
    }

    /// The server certificate, PEM.
    pub fn server_cert_pem(&self) -> &str {
        &self.server_cert_pem
    }

    /// The server certificate, DER.
    pub fn server_cert_der(&self) -> &[u8] {
        &self.server_cert_der
    }

    /// The server private key, PKCS#8 PEM.
    pub fn server_key_pem(&self) -> &str {
        &self.server_key_pem
    }

    /// The server private key, PKCS#8 DER (for `rustls::pki_types::PrivatePkcs8KeyDer`).
    pub fn server_key_der(&self) -> &[u8] {
        &self.server_key_der
    }

    /// The server key's pin in curl's `--pinnedpubkey` form, `sha256//<base64>`.
    pub fn server_spki_pin(&self) -> String {
        // The certificate parsed when the directory was opened; it cannot fail now.
        pki::spki_sha256_pin(&self.server_cert_der).unwrap_or_default()
    }

    /// The director signing key (signs per-host intents and tasks).
    pub fn director_key(&self) -> &SigningKey {
        &self.director_key
    }

    /// The director key's id.
    pub fn director_key_id(&self) -> KeyId {
        KeyId::of(&self.director_key.verifying_key())
    }
}

/// Creates `path` with `bytes` and `mode`, atomically, never replacing an existing file:
/// written to a temporary file in the same directory (created with `mode`, so a key is
/// never readable by others even for an instant), fsynced, linked into place, and the
/// directory fsynced. `link(2)` fails when the target exists, so a file created by someone
/// else between a check and this write is not replaced either (`rename(2)` would replace it).
pub fn write_new_file(path: &Path, bytes: &[u8], mode: u32) -> Result<(), StateDirError> {
    if path.symlink_metadata().is_ok() {
        return Err(StateDirError::Exists { path: path.to_owned() });
    }
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp-{}-{:016x}", std::process::id(), rand::random::<u64>()));
    let result = (|| {
        let mut f = OpenOptions::new().write(true).create_new(true).mode(mode).open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::hard_link(&tmp, path)?;
        fs::remove_file(&tmp)?;
        File::open(dir)?.sync_all()
    })();
    if let Err(source) = result {
        let _ = fs::remove_file(&tmp);
        if source.kind() == io::ErrorKind::AlreadyExists {
            return Err(StateDirError::Exists { path: path.to_owned() });
        }
        return Err(StateDirError::Write { path: path.to_owned(), source });
    }
    Ok(())
}

/// Reads a state file as text; with `private`, refuses it when group or others have any
/// access. The mode is taken from the open file, so it is the mode of what is read.
pub(crate) fn read_state_file(path: &Path, private: bool) -> Result<String, StateDirError> {
    let read_err = |source: io::Error| {
        if source.kind() == io::ErrorKind::NotFound {
            StateDirError::Missing { path: path.to_owned() }
        } else {
            StateDirError::Read { path: path.to_owned(), source }
        }
    };
    let file = File::open(path).map_err(read_err)?;
    let meta = file.metadata().map_err(read_err)?;
    if !meta.is_file() || meta.len() > MAX_FILE_BYTES {
        return Err(StateDirError::NotRegularFile { path: path.to_owned() });
    }
    if private && meta.mode() & 0o077 != 0 {
        return Err(StateDirError::KeyPermissions { path: path.to_owned(), mode: meta.mode() & 0o7777 });
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES).read_to_end(&mut bytes).map_err(read_err)?;
    String::from_utf8(bytes).map_err(|_| StateDirError::NotText { path: path.to_owned() })
}
