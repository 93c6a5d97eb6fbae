//! Secret storage (the crate `drover-secrets`): MAAS API tokens, default and per-node power credentials, deploy passwords.
//!
//! The coordinator's store keeps only secret *paths*; the values live behind a
//! [`SecretStore`]: HashiCorp Vault / OpenBao KV v2 ([`vault::VaultSecretStore`]) or one 0600
//! JSON file per secret for a single coordinator ([`file::FileSecretStore`]). Nothing is cached:
//! every [`SecretStore::read`] goes to the backend, so a rotated value is seen by the next
//! workflow step without a restart (`bare-metal-lifecycle.md` §3.2, §3.5).
//!
//! - [`SecretPath`]: a validated relative path (`maas-sites/<uuid>/api-token`); the same rules
//!   guard both backends against traversal.
//! - [`SecretValue`]: a JSON object of string fields whose `Debug` and `Display` never show a
//!   value.
//! - [`SecretError`]: every failure names the path (or file, or key) and what went wrong, never a
//!   value or a token.
//! - [`config`]: `[secrets]` in `coordinator.toml`, and [`open`]: the store it asks for.

#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

pub mod config;
pub use config::{SecretsBackend, SecretsConfig, VaultConfig};

pub mod file;
pub mod vault;

pub use file::FileSecretStore;
pub use vault::VaultSecretStore;

/// The longest [`SecretPath`], in bytes.
pub const MAX_PATH_LEN: usize = 255;
/// The most segments a [`SecretPath`] may have.
pub const MAX_SEGMENTS: usize = 16;
/// The longest field name of a [`SecretValue`], in bytes.
pub const MAX_FIELD_NAME_LEN: usize = 64;
/// The most fields a [`SecretValue`] may have.
pub const MAX_FIELDS: usize = 64;
/// The largest [`SecretValue`] (names and values together), in bytes.
pub const MAX_VALUE_BYTES: usize = 64 * 1024;

/// Why a secret could not be read, written or deleted. No variant carries a secret value or a
/// backend token; paths, files, addresses, modes and status codes are not secret.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SecretError {
    /// The path breaks the rules of [`SecretPath`].
    #[error("secret path {path:?}: {reason}")]
    InvalidPath {
        /// The refused path (at most the first 300 characters of it).
        path: String,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// The value cannot be stored (empty, too large, a bad field name).
    #[error("secret {path}: value refused: {reason}")]
    InvalidValue {
        /// The secret.
        path: SecretPath,
        /// Which rule it breaks (names a field, never a value).
        reason: String,
    },
    /// A file-system call failed.
    #[error("secret file {}: cannot {action}: {source}", file.display())]
    Io {
        /// The file or directory.
        file: PathBuf,
        /// What was being done (`open`, `create directory`, `rename`, …).
        action: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A secret file or directory is open to its group or to others.
    #[error("secret file {}: mode {mode:04o} gives access to group or others; refusing it (expected {expected:04o})", file.display())]
    InsecureMode {
        /// The file or directory.
        file: PathBuf,
        /// Its permission bits.
        mode: u32,
        /// What is expected (0600 for files, 0700 for directories).
        expected: u32,
    },
    /// A secret file, a directory above it, or the root is a symbolic link (or not what it
    /// should be: a regular file, a directory).
    #[error("secret file {}: {what}; refusing to follow it", file.display())]
    NotFollowed {
        /// The file or directory.
        file: PathBuf,
        /// What it is instead (`a symbolic link`, `not a directory`, …).
        what: &'static str,
    },
    /// A stored secret is not a JSON object of string fields.
    #[error("secret {path} ({backend}): malformed: {message}")]
    Malformed {
        /// The secret.
        path: SecretPath,
        /// `file` or `vault`.
        backend: &'static str,
        /// What is wrong (positions and field names, never content).
        message: String,
    },
    /// The backend refused the credentials (HTTP 403, or a refused AppRole login).
    #[error("vault {addr}: {op}{}: permission denied (HTTP {status})", show_path(.path))]
    Denied {
        /// The Vault address.
        addr: String,
        /// `read`, `write`, `delete`, `login`.
        op: &'static str,
        /// The secret, when the call was about one.
        path: Option<SecretPath>,
        /// The HTTP status.
        status: u16,
    },
    /// The backend could not be reached or answered 5xx/429: transient, retry later.
    #[error("vault {addr}: {op}{}: unavailable: {message}", show_path(.path))]
    Unavailable {
        /// The Vault address.
        addr: String,
        /// `read`, `write`, `delete`, `login`.
        op: &'static str,
        /// The secret, when the call was about one.
        path: Option<SecretPath>,
        /// What happened (timeout, connection refused, HTTP 503, …).
        message: String,
        /// The HTTP client's error, when there is one (it names the URL, never a header).
        #[source]
        source: Option<reqwest::Error>,
    },
    /// The TLS handshake with the backend failed (an untrusted certificate, a wrong name).
    #[error("vault {addr}: {op}{}: TLS handshake refused: {message}", show_path(.path))]
    Tls {
        /// The Vault address.
        addr: String,
        /// `read`, `write`, `delete`, `login`.
        op: &'static str,
        /// The secret, when the call was about one.
        path: Option<SecretPath>,
        /// The TLS library's reason.
        message: String,
    },
    /// The backend answered something this client does not understand.
    #[error("vault {addr}: {op}{}: unexpected answer: {message}", show_path(.path))]
    Protocol {
        /// The Vault address.
        addr: String,
        /// `read`, `write`, `delete`, `login`.
        op: &'static str,
        /// The secret, when the call was about one.
        path: Option<SecretPath>,
        /// What was unexpected (a status code, a missing field; never the body).
        message: String,
    },
    /// A credential file (Vault token, AppRole role or secret id) is unreadable or empty.
    #[error("{what} file {}: {message}", file.display())]
    Credential {
        /// The file.
        file: PathBuf,
        /// `token`, `AppRole role_id`, `AppRole secret_id`.
        what: &'static str,
        /// What is wrong.
        message: String,
        /// The OS error, when there is one.
        #[source]
        source: Option<std::io::Error>,
    },
    /// `[secrets]` cannot be used as configured.
    #[error("key `{key}`: {message}")]
    Config {
        /// The dotted configuration key.
        key: &'static str,
        /// What is wrong.
        message: String,
    },
}

fn show_path(path: &Option<SecretPath>) -> String {
    path.as_ref().map(|p| format!(" of `{p}`")).unwrap_or_default()
}

impl SecretError {
    /// A transient failure: the same call may succeed later (backend down, timing out, 5xx).
    pub fn is_transient(&self) -> bool {
        matches!(self, SecretError::Unavailable { .. })
    }
}

/// A validated relative secret path: `/`-separated segments of `[A-Za-z0-9._-]`, none empty,
/// none starting with `.` (so no `.` and `..`, and no clash with the file backend's temporary
/// files), no leading or trailing `/`, at most [`MAX_SEGMENTS`] segments and [`MAX_PATH_LEN`]
/// bytes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SecretPath(String);

impl SecretPath {
    /// Validates `path`.
    pub fn new(path: &str) -> Result<SecretPath, SecretError> {
        check_path(path).map_err(|reason| SecretError::InvalidPath { path: path.chars().take(300).collect(), reason })?;
        Ok(SecretPath(path.to_owned()))
    }

    /// The path as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Its segments, in order.
    pub fn segments(&self) -> impl Iterator<Item = &str> {
        self.0.split('/')
    }

    /// `self/child` (validated like [`SecretPath::new`]).
    pub fn join(&self, child: &str) -> Result<SecretPath, SecretError> {
        SecretPath::new(&format!("{}/{child}", self.0))
    }
}

impl fmt::Display for SecretPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for SecretPath {
    type Err = SecretError;
    fn from_str(s: &str) -> Result<SecretPath, SecretError> {
        SecretPath::new(s)
    }
}

/// The rules of [`SecretPath`] (also used for the Vault mount and prefix); `Err` says which
/// rule is broken.
pub(crate) fn check_path(path: &str) -> Result<(), &'static str> {
    if path.is_empty() {
        return Err("is empty");
    }
    if path.len() > MAX_PATH_LEN {
        return Err("is longer than 255 bytes");
    }
    if path.starts_with('/') {
        return Err("must be relative (no leading `/`)");
    }
    let mut count = 0;
    for segment in path.split('/') {
        count += 1;
        if segment.is_empty() {
            return Err("has an empty segment (`//` or a trailing `/`)");
        }
        if segment == "." || segment == ".." {
            return Err("has a `.` or `..` segment");
        }
        if segment.starts_with('.') {
            return Err("has a segment starting with `.`");
        }
        if !segment.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')) {
            return Err("has a character outside A-Z a-z 0-9 . _ - in a segment");
        }
    }
    if count > MAX_SEGMENTS {
        return Err("has more than 16 segments");
    }
    Ok(())
}

/// A secret: a JSON object of string fields (`{"token": "…"}`, `{"user": "root", "pass":
/// "…"}`). `Debug` and `Display` show field names only; there is deliberately no `Serialize`,
/// so a value cannot slip into a response or a log by accident.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct SecretValue(BTreeMap<String, String>);

impl SecretValue {
    /// A value from its fields.
    pub fn new(fields: BTreeMap<String, String>) -> SecretValue {
        SecretValue(fields)
    }

    /// A value from `(field, value)` pairs.
    pub fn from_pairs<K: Into<String>, V: Into<String>>(pairs: impl IntoIterator<Item = (K, V)>) -> SecretValue {
        SecretValue(pairs.into_iter().map(|(k, v)| (k.into(), v.into())).collect())
    }

    /// One field's value.
    pub fn get(&self, field: &str) -> Option<&str> {
        self.0.get(field).map(String::as_str)
    }

    /// Sets one field, returning the previous value.
    pub fn insert(&mut self, field: impl Into<String>, value: impl Into<String>) -> Option<String> {
        self.0.insert(field.into(), value.into())
    }

    /// The field names, sorted.
    pub fn fields(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    /// How many fields there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are no fields.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every field, values included: for the code that uses the secret, never for output.
    pub fn expose(&self) -> &BTreeMap<String, String> {
        &self.0
    }

    /// Checks the rules a stored value follows: 1 to [`MAX_FIELDS`] fields, names of
    /// `[A-Za-z0-9_.-]` up to [`MAX_FIELD_NAME_LEN`] bytes, at most [`MAX_VALUE_BYTES`] in all.
    pub(crate) fn check(&self, path: &SecretPath) -> Result<(), SecretError> {
        let refuse = |reason: String| Err(SecretError::InvalidValue { path: path.clone(), reason });
        if self.0.is_empty() {
            return refuse("has no fields".to_owned());
        }
        if self.0.len() > MAX_FIELDS {
            return refuse(format!("has {} fields (at most {MAX_FIELDS})", self.0.len()));
        }
        let mut total = 0;
        for (name, value) in &self.0 {
            let ok_name = !name.is_empty()
                && name.len() <= MAX_FIELD_NAME_LEN
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
            if !ok_name {
                return refuse(format!(
                    "field name {:?} must be 1 to {MAX_FIELD_NAME_LEN} characters of A-Z a-z 0-9 . _ -",
                    name.chars().take(MAX_FIELD_NAME_LEN).collect::<String>()
                ));
            }
            total += name.len() + value.len();
        }
        if total > MAX_VALUE_BYTES {
            return refuse(format!("is larger than {MAX_VALUE_BYTES} bytes"));
        }
        Ok(())
    }

    /// The JSON object text.
    pub(crate) fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(&self.0).unwrap_or_default()
    }

    /// Parses a stored JSON object of string fields; `Err` describes what is wrong without
    /// quoting any content.
    pub(crate) fn from_json_value(value: serde_json::Value) -> Result<SecretValue, String> {
        let serde_json::Value::Object(map) = value else {
            return Err(format!("expected a JSON object, found {}", json_kind(&value)));
        };
        let mut fields = BTreeMap::new();
        for (name, v) in map {
            match v {
                serde_json::Value::String(s) => {
                    fields.insert(name, s);
                }
                other => {
                    let shown: String = name.chars().take(MAX_FIELD_NAME_LEN).collect();
                    return Err(format!("field {shown:?} is {}, not a string", json_kind(&other)));
                }
            }
        }
        Ok(SecretValue(fields))
    }

    /// Parses stored JSON text (see [`SecretValue::from_json_value`]).
    pub(crate) fn from_json_bytes(bytes: &[u8]) -> Result<SecretValue, String> {
        let value: serde_json::Value = serde_json::from_slice(bytes).map_err(redacted_json_error)?;
        SecretValue::from_json_value(value)
    }
}

/// A serde_json error as a position and a category: its own message may quote the input.
pub(crate) fn redacted_json_error(e: serde_json::Error) -> String {
    let kind = match e.classify() {
        serde_json::error::Category::Io => "I/O error",
        serde_json::error::Category::Syntax => "invalid JSON",
        serde_json::error::Category::Data => "unexpected JSON shape",
        serde_json::error::Category::Eof => "truncated JSON",
    };
    format!("{kind} at line {} column {}", e.line(), e.column())
}

fn json_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretValue").field("fields", &self.0.keys().collect::<Vec<_>>()).field("values", &"<redacted>").finish()
    }
}

impl fmt::Display for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<redacted secret with {} field(s)>", self.0.len())
    }
}

/// What a [`SecretStore`] call returns.
pub type SecretFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, SecretError>> + Send + 'a>>;

/// Where secrets live. Object-safe (used as `Arc<dyn SecretStore>`); implementations cache no
/// secret value, so each call sees the backend's current value.
pub trait SecretStore: Send + Sync {
    /// The current value at `path`, or `None` when there is none.
    fn read<'a>(&'a self, path: &'a SecretPath) -> SecretFuture<'a, Option<SecretValue>>;
    /// Stores `value` at `path`, replacing any previous value.
    fn write<'a>(&'a self, path: &'a SecretPath, value: &'a SecretValue) -> SecretFuture<'a, ()>;
    /// Removes `path` (every version); removing an absent path succeeds.
    fn delete<'a>(&'a self, path: &'a SecretPath) -> SecretFuture<'a, ()>;
    /// `file` or `vault`.
    fn backend(&self) -> &'static str;
}

/// The store `[secrets]` asks for: `backend = "file"` (the default) keeps 0600 files under
/// `secrets.dir` (default `<state_dir>/secrets`, created 0700); `backend = "vault"` talks to
/// `[secrets.vault]`.
pub fn open(secrets: &SecretsConfig, state_dir: &std::path::Path) -> Result<Arc<dyn SecretStore>, SecretError> {
    match secrets.backend {
        SecretsBackend::File => {
            let dir = secrets.dir.clone().unwrap_or_else(|| state_dir.join("secrets"));
            Ok(Arc::new(FileSecretStore::open(dir)?))
        }
        SecretsBackend::Vault => {
            let Some(vault) = &secrets.vault else {
                return Err(SecretError::Config { key: "secrets.vault", message: "required when secrets.backend = \"vault\"".to_owned() });
            };
            Ok(Arc::new(VaultSecretStore::new(vault)?))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_follow_the_rules() {
        for good in ["maas-sites/0b5d0c84-7c0f-4c0e-9a51-2f4a4f9f1d6e/api-token", "a", "a/b.c/d_e-f", "power/overrides/x..y"] {
            assert_eq!(SecretPath::new(good).expect(good).as_str(), good);
        }
        let long = "a/".repeat(200) + "a";
        let deep = vec!["a"; 17].join("/");
        for bad in
            ["", "/etc/passwd", "a//b", "a/", "../x", "a/../../x", "a/./b", ".hidden", "a/.b", "a b", "a\\b", "ä", "a\0b", &long, &deep]
        {
            let e = SecretPath::new(bad).expect_err(bad);
            assert!(matches!(e, SecretError::InvalidPath { .. }), "{bad:?}: {e}");
        }
        let p = SecretPath::new("maas-sites/x").expect("valid");
        assert_eq!(p.join("power/default").expect("join").as_str(), "maas-sites/x/power/default");
        assert!(p.join("../y").is_err());
    }

    #[test]
    fn values_never_print_their_contents() {
        let v = SecretValue::from_pairs([("user", "root"), ("pass", "hunter2-very-secret")]);
        assert_eq!(v.get("pass"), Some("hunter2-very-secret"));
        let shown = format!("{v:?} {v} {v:#?}");
        assert!(!shown.contains("hunter2") && !shown.contains("root"), "{shown}");
        assert!(shown.contains("pass") && shown.contains("<redacted"), "{shown}");
    }

    #[test]
    fn stored_values_are_checked_without_quoting_them() {
        let p = SecretPath::new("x").expect("valid");
        assert!(SecretValue::default().check(&p).is_err());
        assert!(SecretValue::from_pairs([("bad name", "v")]).check(&p).is_err());
        assert!(SecretValue::from_pairs([("k", "v".repeat(MAX_VALUE_BYTES))]).check(&p).is_err());
        SecretValue::from_pairs([("token", "a:b:c")]).check(&p).expect("valid");
        let e = SecretValue::from_json_bytes(br#"{"token": 12345678}"#).expect_err("a number");
        assert!(!e.contains("12345678") && e.contains("token"), "{e}");
        let e = SecretValue::from_json_bytes(br#"{"token": "topsecret"#).expect_err("truncated");
        assert!(!e.contains("topsecret"), "{e}");
        let e = SecretValue::from_json_bytes(br#"["topsecret"]"#).expect_err("an array");
        assert!(!e.contains("topsecret"), "{e}");
    }
}
