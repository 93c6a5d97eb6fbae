//! `[secrets]` and `[secrets.vault]` in `coordinator.toml`: which backend holds the secrets and
//! how to reach it. The coordinator's `Config` embeds [`SecretsConfig`]; parsing and the errors
//! naming file and key are the coordinator's (`drover_engine::config`).

use std::path::PathBuf;

use serde::Deserialize;

/// Which secret backend the coordinator uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SecretsBackend {
    /// One 0600 JSON file per secret under `secrets.dir` (a single coordinator).
    #[default]
    File,
    /// HashiCorp Vault / OpenBao KV v2 (`[secrets.vault]`).
    Vault,
}

/// `[secrets]`: where MAAS API tokens, power credentials and deploy passwords live. The store
/// keeps their paths only; values are read at use time.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretsConfig {
    /// `file` (the default) or `vault`.
    #[serde(default)]
    pub backend: SecretsBackend,
    /// The file backend's root (default `<state_dir>/secrets`; created 0700).
    #[serde(default)]
    pub dir: Option<PathBuf>,
    /// The Vault backend's settings (required with `backend = "vault"`).
    #[serde(default)]
    pub vault: Option<VaultConfig>,
}

/// `[secrets.vault]`: a Vault or OpenBao server with a KV v2 mount.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VaultConfig {
    /// `https://HOST[:PORT]` (`http://` only with `allow_insecure_http`).
    pub addr: String,
    /// The KV v2 mount (default `secret`).
    #[serde(default = "default_vault_mount")]
    pub mount: String,
    /// The folder under the mount Drover's secrets live in (default `drover`; may be empty).
    #[serde(default = "default_vault_prefix")]
    pub prefix: String,
    /// The CA (PEM) the server's certificate chains to; required with `https://`.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// A file holding a Vault token, read at every call (so a renewed token is picked up).
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// AppRole: the file holding the role id.
    #[serde(default)]
    pub approle_role_id_file: Option<PathBuf>,
    /// AppRole: the file holding the secret id.
    #[serde(default)]
    pub approle_secret_id_file: Option<PathBuf>,
    /// The longest one call may take, in seconds.
    #[serde(default = "default_vault_timeout")]
    pub timeout_secs: u64,
    /// The longest connecting may take, in seconds.
    #[serde(default = "default_vault_timeout")]
    pub connect_timeout_secs: u64,
    /// Allows a plain `http://` addr (the token and secrets then travel unencrypted).
    #[serde(default)]
    pub allow_insecure_http: bool,
}

fn default_vault_mount() -> String {
    "secret".to_owned()
}

fn default_vault_prefix() -> String {
    "drover".to_owned()
}

fn default_vault_timeout() -> u64 {
    10
}
