//! The secret store is the crate `drover-secrets`, re-exported here under its old path, with
//! the one function that needs the coordinator's whole [`Config`]: the store `[secrets]` asks
//! for, its file backend defaulting under the state directory.

use std::sync::Arc;

pub use drover_secrets::*;

use crate::config::Config;

/// The store `[secrets]` asks for ([`drover_secrets::open`]), the file backend's root defaulting
/// to `<state_dir>/secrets`.
pub fn from_config(config: &Config) -> Result<Arc<dyn SecretStore>, SecretError> {
    drover_secrets::open(&config.secrets, &config.state_dir)
}
