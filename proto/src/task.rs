//! Director-signed maintenance tasks, the catalog of `bare-metal-lifecycle.md` §5.6.
//!
//! A task is bound to one host id, carries a unique id and a validity window, and is
//! journaled by the agent so a replay is refused. Secrets inside a task (the MAAS token) are
//! wrapped in [`Secret`], whose `Debug` and `Display` never show the value.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::time::Time;

/// A value that must never reach a log line, an event or a listing.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The value, for the one place that must use it (writing the creds file).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Which storage a cleanup covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StorageScope {
    /// Local scratch roots.
    Local,
    /// Tenant `wekafs` mounts and their config.
    Weka,
    /// Both.
    All,
}

/// GPU vendor selection for a scrub.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum GpuVendor {
    /// Detect from the tools present.
    #[default]
    Auto,
    /// `nvidia-smi`.
    Nvidia,
    /// `amd-smi` / `rocm-smi`.
    Amd,
}

/// What to do about compute processes still holding a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum ComputeProcessPolicy {
    /// Refuse to scrub while any compute process runs (the safe default).
    #[default]
    Refuse,
    /// Stop processes whose uid is in the tenant range; refuse if any other remains.
    StopTenant,
}

/// The work a task asks for, tagged by its catalog name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
pub enum TaskKind {
    /// Reset GPU memory and state, then verify it is clean.
    #[serde(rename = "node.gpu_scrub", rename_all = "camelCase")]
    GpuScrub {
        /// Which vendor's tools.
        #[serde(default)]
        vendor: GpuVendor,
        /// What to do about running compute processes.
        #[serde(default)]
        compute_processes: ComputeProcessPolicy,
        /// After the reset, memory used above this (MiB) per GPU fails verification.
        memory_used_threshold_mib: u64,
        /// Run `dcgmi diag -r N` when set (1–4).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dcgm_diag_level: Option<u8>,
    },
    /// Remove tenant data inside the configured roots.
    #[serde(rename = "node.storage_cleanup", rename_all = "camelCase")]
    StorageCleanup {
        /// local | weka | all.
        scope: StorageScope,
    },
    /// Prove no tenant residue remains.
    #[serde(rename = "node.validate_clean", rename_all = "camelCase")]
    ValidateClean {
        /// Also check GPU allocations and memory.
        #[serde(default = "yes")]
        check_gpu: bool,
        /// With `check_gpu`: a GPU using more memory than this (MiB) is a residue; absent,
        /// memory is not judged (only compute processes are).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        memory_used_threshold_mib: Option<u64>,
    },
    /// Rewrite the MAAS hardware-sync credentials and restart the timer.
    #[serde(rename = "node.hw_sync_reseed")]
    HwSyncReseed(HwSyncReseed),
    /// Cordon, then run the configured drain hook and wait for it.
    #[serde(rename = "node.drain", rename_all = "camelCase")]
    Drain {
        /// Give up after this long.
        timeout_secs: u64,
    },
    /// Remove tenant users (in the configured uid range) and end their sessions.
    #[serde(rename = "allocation.revoke_user", rename_all = "camelCase")]
    RevokeUser {
        /// Only these users; all tenant users when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        users: Option<Vec<String>>,
    },
    /// Remove the agent itself (end of full decommission).
    #[serde(rename = "node.uninstall", rename_all = "camelCase")]
    Uninstall {
        /// Also delete the agent's state dir (key, cert, journal).
        #[serde(default)]
        purge_state: bool,
    },
}

/// `node.hw_sync_reseed`'s parameters. On the wire the token is either the three plain
/// fields (an operator's request to the coordinator) or `sealedToken` (every task the
/// coordinator signs, stores and serves: see [`crate::seal`]); never both.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "ReseedWire", into = "ReseedWire")]
pub struct HwSyncReseed {
    /// MAAS base URL.
    pub maas_url: String,
    /// The machine's MAAS system id.
    pub system_id: String,
    /// The machine's OAuth token.
    pub token: MachineToken,
}

/// A MAAS machine token, in the clear (only between an operator and the coordinator, and
/// inside the agent once opened) or sealed to its host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MachineToken {
    /// The three OAuth parts.
    Plain(MaasToken),
    /// Sealed to the host's key for this task.
    Sealed(crate::seal::SealedBox),
}

/// The three parts of a MAAS OAuth token; also the plaintext a [`MachineToken::Sealed`]
/// holds (its canonical JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MaasToken {
    /// OAuth consumer key of the machine token.
    pub consumer_key: Secret,
    /// OAuth token key.
    pub token_key: Secret,
    /// OAuth token secret.
    pub token_secret: Secret,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ReseedWire {
    maas_url: String,
    system_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    consumer_key: Option<Secret>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    token_key: Option<Secret>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    token_secret: Option<Secret>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sealed_token: Option<crate::seal::SealedBox>,
}

/// Why a `node.hw_sync_reseed` does not carry exactly one MAAS token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReseedError {
    /// A sealed token and plain token fields together.
    #[error("node.hw_sync_reseed: sealedToken and plain token fields together")]
    BothTokens,
    /// Neither a whole plain token nor a sealed one.
    #[error("node.hw_sync_reseed: needs consumerKey, tokenKey and tokenSecret (or sealedToken)")]
    NoToken,
}

impl TryFrom<ReseedWire> for HwSyncReseed {
    type Error = ReseedError;
    fn try_from(w: ReseedWire) -> Result<Self, ReseedError> {
        let token = match (w.consumer_key, w.token_key, w.token_secret, w.sealed_token) {
            (Some(consumer_key), Some(token_key), Some(token_secret), None) => {
                MachineToken::Plain(MaasToken { consumer_key, token_key, token_secret })
            }
            (None, None, None, Some(sealed)) => MachineToken::Sealed(sealed),
            (_, _, _, Some(_)) => return Err(ReseedError::BothTokens),
            _ => return Err(ReseedError::NoToken),
        };
        Ok(HwSyncReseed { maas_url: w.maas_url, system_id: w.system_id, token })
    }
}

impl From<HwSyncReseed> for ReseedWire {
    fn from(r: HwSyncReseed) -> Self {
        let (plain, sealed_token) = match r.token {
            MachineToken::Plain(t) => (Some(t), None),
            MachineToken::Sealed(s) => (None, Some(s)),
        };
        ReseedWire {
            maas_url: r.maas_url,
            system_id: r.system_id,
            consumer_key: plain.as_ref().map(|t| t.consumer_key.clone()),
            token_key: plain.as_ref().map(|t| t.token_key.clone()),
            token_secret: plain.map(|t| t.token_secret),
            sealed_token,
        }
    }
}

fn yes() -> bool {
    true
}

impl TaskKind {
    /// The catalog name (`node.gpu_scrub`, …).
    pub fn type_name(&self) -> &'static str {
        match self {
            TaskKind::GpuScrub { .. } => "node.gpu_scrub",
            TaskKind::StorageCleanup { .. } => "node.storage_cleanup",
            TaskKind::ValidateClean { .. } => "node.validate_clean",
            TaskKind::HwSyncReseed { .. } => "node.hw_sync_reseed",
            TaskKind::Drain { .. } => "node.drain",
            TaskKind::RevokeUser { .. } => "allocation.revoke_user",
            TaskKind::Uninstall { .. } => "node.uninstall",
        }
    }
}

/// A signed unit of maintenance for one host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Task {
    /// Unique id (UUID); the agent's journal refuses a second run.
    pub task_id: String,
    /// The host it is for.
    pub host_id: String,
    /// The job that issued it, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// When the director signed it.
    pub issued_at: Time,
    /// Not to be started after this instant.
    pub expires_at: Time,
    /// What to do.
    pub kind: TaskKind,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_print() {
        let k = TaskKind::HwSyncReseed(HwSyncReseed {
            maas_url: "http://maas:5240/MAAS".into(),
            system_id: "abc123".into(),
            token: MachineToken::Plain(MaasToken {
                consumer_key: Secret::new("ck-VALUE"),
                token_key: Secret::new("tk-VALUE"),
                token_secret: Secret::new("ts-VALUE"),
            }),
        });
        let shown = format!("{k:?}");
        assert!(!shown.contains("VALUE"), "{shown}");
        let json = serde_json::to_string(&k).expect("json");
        assert!(json.contains("\"type\":\"node.hw_sync_reseed\""), "{json}");
        assert!(json.contains("ts-VALUE"), "an operator's request carries the token to the coordinator");
        assert_eq!(serde_json::from_str::<TaskKind>(&json).expect("back"), k);
    }

    #[test]
    fn a_reseed_carries_a_plain_or_a_sealed_token_never_both_or_part() {
        let plain = r#"{"type":"node.hw_sync_reseed","maasUrl":"u","systemId":"s","consumerKey":"a","tokenKey":"b","tokenSecret":"c"}"#;
        assert!(serde_json::from_str::<TaskKind>(plain).is_ok());
        let sealed =
            r#"{"type":"node.hw_sync_reseed","maasUrl":"u","systemId":"s","sealedToken":{"suite":"x","enc":"e","ciphertext":"c"}}"#;
        let TaskKind::HwSyncReseed(r) = serde_json::from_str::<TaskKind>(sealed).expect("sealed") else { panic!("kind") };
        assert!(matches!(r.token, MachineToken::Sealed(_)));
        let both = r#"{"type":"node.hw_sync_reseed","maasUrl":"u","systemId":"s","consumerKey":"a","tokenKey":"b","tokenSecret":"c","sealedToken":{"suite":"x","enc":"e","ciphertext":"c"}}"#;
        assert!(serde_json::from_str::<TaskKind>(both).is_err());
        let part = r#"{"type":"node.hw_sync_reseed","maasUrl":"u","systemId":"s","consumerKey":"a"}"#;
        assert!(serde_json::from_str::<TaskKind>(part).is_err());
        let extra =
            r#"{"type":"node.hw_sync_reseed","maasUrl":"u","systemId":"s","consumerKey":"a","tokenKey":"b","tokenSecret":"c","x":1}"#;
        assert!(serde_json::from_str::<TaskKind>(extra).is_err());
    }

    #[test]
    fn catalog_names_are_the_wire_tags() {
        let json = r#"{"type":"node.storage_cleanup","scope":"weka"}"#;
        let k: TaskKind = serde_json::from_str(json).expect("parse");
        assert_eq!(k.type_name(), "node.storage_cleanup");
        assert!(serde_json::from_str::<TaskKind>(r#"{"type":"node.format_disk"}"#).is_err());
        assert!(serde_json::from_str::<TaskKind>(r#"{"type":"node.storage_cleanup","scope":"weka","extra":1}"#).is_err());
    }
}
