//! What the executor needs beyond the store for a job's stages: the host changes each local
//! stage makes (as store ops in the job's own transaction), the scheduler webhook of the
//! force-release, the per-host MAAS credentials of `hw_sync_reseed`, and the policy a job is
//! decided under.

use std::path::Path;
use std::time::Duration;

use drover_proto::names::RolloutId;
use drover_proto::states::HostLifecycle;
use drover_proto::task::Secret;
use serde::Deserialize;
use uuid::Uuid;

use super::model::{HwSyncCreds, Stage, TaskSettings};
use super::plan::Policy;
use crate::config::JobsConfig;
use crate::store::HostOp;

/// The host changes a local stage makes, from the host's current lifecycle state (`None`:
/// the stage changes no host row — force-release, activate without a rollout).
pub fn host_ops(stage: Stage, host_id: Uuid, hostname: &str, state: HostLifecycle, rollout: Option<&RolloutId>, why: &str) -> Vec<HostOp> {
    use HostLifecycle as L;
    let transition = |from, to| HostOp::Transition { host_id, from, to, reason: why.to_owned() };
    match stage {
        Stage::Cordon => vec![HostOp::SetSchedulable { host_id, schedulable: false, reason: why.to_owned() }],
        Stage::Uncordon => vec![HostOp::SetSchedulable { host_id, schedulable: true, reason: why.to_owned() }],
        // Retire passes through draining, as the lifecycle verb does (node-state-model §3).
        Stage::Retire => match state {
            L::Active | L::Offline | L::Quarantined => vec![transition(state, L::Draining), transition(L::Draining, L::Retired)],
            L::Draining => vec![transition(L::Draining, L::Retired)],
            _ => Vec::new(),
        },
        Stage::Remove if state == L::Retired => vec![transition(L::Retired, L::Removing)],
        Stage::Delete if state == L::Removing => vec![transition(L::Removing, L::Deleted)],
        Stage::Activate => {
            rollout.map(|r| vec![HostOp::Redispatch { rollout_id: r.clone(), hostname: hostname.to_owned() }]).unwrap_or_default()
        }
        _ => Vec::new(),
    }
}

/// Why a local action did not take.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    /// The scheduler webhook could not be reached or refused the release.
    #[error("scheduler webhook {url}: {message}")]
    Webhook {
        /// The configured URL.
        url: String,
        /// What went wrong.
        message: String,
    },
    /// A MAAS credentials file exists but cannot be used.
    #[error("MAAS credentials {file}: {message}")]
    Creds {
        /// The file.
        file: String,
        /// What is wrong with it.
        message: String,
    },
}

/// What the force-release stage tells the scheduler.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseNotice {
    /// Always `host.force_release`.
    pub event: &'static str,
    /// The host.
    pub host_id: String,
    /// Its name.
    pub hostname: String,
    /// The decommission job.
    pub job_id: String,
    /// Why (the job's reason).
    pub reason: String,
}

/// POSTs `notice` to the configured scheduler webhook (no webhook configured: nothing to do).
/// Only a 2xx answer counts: the stage is retried otherwise.
pub async fn notify_scheduler(config: &JobsConfig, notice: &ReleaseNotice) -> Result<(), LocalError> {
    let Some(url) = &config.scheduler_webhook_url else { return Ok(()) };
    let err = |message: String| LocalError::Webhook { url: url.clone(), message };
    let mut roots = rustls::RootCertStore::empty();
    if let Some(ca) = &config.scheduler_webhook_ca {
        for cert in drover_client::load_ca(ca).map_err(|e| err(e.to_string()))? {
            roots.add(cert).map_err(|e| err(format!("CA {}: {e}", ca.display())))?;
        }
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| err(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let client = reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        .timeout(Duration::from_secs(10))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| err(e.to_string()))?;
    let resp = client.post(url).json(notice).send().await.map_err(|e| err(e.to_string()))?;
    if resp.status().is_success() { Ok(()) } else { Err(err(format!("answered {}", resp.status()))) }
}

/// One host's MAAS credentials file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CredsFile {
    maas_url: String,
    system_id: String,
    consumer_key: String,
    token_key: String,
    token_secret: String,
}

/// The MAAS credentials of `hostname` from `dir/<hostname>.toml`: `Ok(None)` when there is no
/// such file (the stage then fails as a configuration problem, naming what is missing).
pub fn maas_creds(dir: Option<&Path>, hostname: &str) -> Result<Option<HwSyncCreds>, LocalError> {
    let Some(dir) = dir else { return Ok(None) };
    // Hostnames are validated names, but a path is built from one: refuse anything that is
    // not a plain file name.
    if hostname.is_empty() || hostname.contains(['/', '\\']) || hostname.starts_with('.') {
        return Ok(None);
    }
    let file = dir.join(format!("{hostname}.toml"));
    let shown = file.display().to_string();
    let text = match std::fs::read_to_string(&file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(LocalError::Creds { file: shown, message: e.to_string() }),
    };
    // The parse error would quote the file: never echo a secret, name the key only.
    let c: CredsFile = toml::from_str(&text).map_err(|e| LocalError::Creds {
        file: shown.clone(),
        message: format!("not a valid credentials file ({})", e.message().split('\n').next().unwrap_or("parse error")),
    })?;
    Ok(Some(HwSyncCreds {
        maas_url: c.maas_url,
        system_id: c.system_id,
        consumer_key: Secret::new(c.consumer_key),
        token_key: Secret::new(c.token_key),
        token_secret: Secret::new(c.token_secret),
    }))
}

/// The policy a job on `hostname` is decided under.
pub fn policy(config: &JobsConfig, hw_sync: Option<HwSyncCreds>) -> Policy {
    Policy {
        max_attempts: config.max_attempts,
        tasks: TaskSettings {
            drain_timeout_secs: config.drain_timeout_secs,
            gpu_vendor: config.gpu_vendor,
            compute_processes: config.compute_processes,
            memory_used_threshold_mib: config.memory_used_threshold_mib,
            dcgm_diag_level: config.dcgm_diag_level,
            validate_check_gpu: config.validate_check_gpu,
            uninstall_purge_state: config.uninstall_purge_state,
            hw_sync,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retire_passes_through_draining_and_delete_needs_removing() {
        let h = Uuid::nil();
        let ops = host_ops(Stage::Retire, h, "a", HostLifecycle::Quarantined, None, "why");
        assert_eq!(ops.len(), 2);
        assert!(matches!(ops[1], HostOp::Transition { to: HostLifecycle::Retired, .. }));
        assert!(host_ops(Stage::Delete, h, "a", HostLifecycle::Retired, None, "why").is_empty());
        assert!(host_ops(Stage::ForceRelease, h, "a", HostLifecycle::Active, None, "why").is_empty());
    }

    #[test]
    fn maas_creds_file_is_read_and_a_bad_one_never_echoes_its_secret() {
        let dir = tempfile::tempdir().expect("tmp");
        assert!(maas_creds(Some(dir.path()), "gpu-1").expect("absent").is_none());
        std::fs::write(
            dir.path().join("gpu-1.toml"),
            "maas_url = \"http://maas/MAAS\"\nsystem_id = \"abc\"\nconsumer_key = \"ck\"\ntoken_key = \"tk\"\ntoken_secret = \"s3cret\"\n",
        )
        .expect("write");
        let c = maas_creds(Some(dir.path()), "gpu-1").expect("read").expect("present");
        assert_eq!(c.system_id, "abc");
        assert_eq!(c.token_secret.expose(), "s3cret");
        std::fs::write(dir.path().join("gpu-2.toml"), "token_secret = \"leaky-value\"\nextra = 1\n").expect("write");
        let e = maas_creds(Some(dir.path()), "gpu-2").expect_err("bad").to_string();
        assert!(!e.contains("leaky-value"), "{e}");
        assert!(maas_creds(Some(dir.path()), "../gpu-1").expect("refused").is_none());
    }
}
