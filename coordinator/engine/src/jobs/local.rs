//! What the executor needs beyond the store for a job's stages: the host changes each local
//! stage makes (as store ops in the job's own transaction), the scheduler webhook of the
//! force-release (the release notice and the allocations query), the per-host MAAS credentials of `hw_sync_reseed`, and the policy a job is
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
        // Retire passes through draining (node-state-model §3): a full decommission's host in
        // one step; a `retire` job's host is already there (its start put it there).
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

/// What the force-release stage tells the scheduler (with `forceRelease`, once per run of
/// the stage).
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

/// What the force-release stage asks the scheduler at every poll.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AllocationsQuery {
    /// Always `host.allocations_query`.
    pub event: &'static str,
    /// The host.
    pub host_id: String,
    /// Its name.
    pub hostname: String,
    /// The decommission job.
    pub job_id: String,
}

/// The most of an answer the coordinator reads (an allocation list of a busy host fits).
const MAX_ANSWER_BYTES: usize = 1 << 20;

fn webhook_client(config: &JobsConfig) -> Result<(String, reqwest::Client), LocalError> {
    let Some(url) = &config.scheduler_webhook_url else {
        return Err(LocalError::Webhook { url: "(none)".into(), message: "jobs.scheduler_webhook_url is not set".into() });
    };
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
    Ok((url.clone(), client))
}

/// POSTs `notice` to the configured scheduler webhook. Only a 2xx answer counts (its body is
/// not read): the stage is retried otherwise. No webhook configured is an error (the plan
/// never runs the stage without one).
pub async fn notify_scheduler(config: &JobsConfig, notice: &ReleaseNotice) -> Result<(), LocalError> {
    let (url, client) = webhook_client(config)?;
    let err = |message: String| LocalError::Webhook { url: url.clone(), message };
    let resp = client.post(&url).json(notice).send().await.map_err(|e| err(e.to_string()))?;
    if resp.status().is_success() { Ok(()) } else { Err(err(format!("answered {} to the release notice", resp.status()))) }
}

/// POSTs `query` to the configured scheduler webhook and reads how many allocations are
/// still attached to the host: a 2xx answer with a JSON body `{"allocations": N}` or
/// `{"allocations": [...]}` (the list's length). Anything else — unreachable, a non-2xx
/// status, a body that is not that JSON — is an error, never zero.
pub async fn query_allocations(config: &JobsConfig, query: &AllocationsQuery) -> Result<u64, LocalError> {
    let (url, client) = webhook_client(config)?;
    let err = |message: String| LocalError::Webhook { url: url.clone(), message };
    let mut resp = client.post(&url).json(query).send().await.map_err(|e| err(e.to_string()))?;
    if !resp.status().is_success() {
        return Err(err(format!("answered {} to the allocations query", resp.status())));
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| err(e.to_string()))? {
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(err(format!("allocations answer is over {MAX_ANSWER_BYTES} bytes")));
        }
        body.extend_from_slice(&chunk);
    }
    parse_allocations(&body).map_err(err)
}

/// The allocation count of a scheduler's answer: `{"allocations": N}` with N a non-negative
/// integer, or `{"allocations": [...]}`. Anything else is malformed (the message never
/// quotes the body).
pub fn parse_allocations(body: &[u8]) -> Result<u64, String> {
    let v: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| format!("allocations answer is not JSON ({:?} error at line {})", e.classify(), e.line()))?;
    match v.get("allocations") {
        Some(serde_json::Value::Number(n)) => {
            n.as_u64().ok_or_else(|| "allocations answer: \"allocations\" is not a non-negative integer".to_owned())
        }
        Some(serde_json::Value::Array(list)) => Ok(u64::try_from(list.len()).unwrap_or(u64::MAX)),
        Some(_) => Err("allocations answer: \"allocations\" is neither a count nor a list".to_owned()),
        None => Err("allocations answer has no \"allocations\" field".to_owned()),
    }
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
        scheduler_webhook: config.scheduler_webhook_url.is_some(),
        scheduler_poll_secs: config.scheduler_poll_secs,
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
    fn an_allocations_answer_is_a_count_or_a_list_and_nothing_else_is_zero() {
        assert_eq!(parse_allocations(br#"{"allocations": 2}"#), Ok(2));
        assert_eq!(parse_allocations(br#"{"allocations": 0, "scheduler": "slurm"}"#), Ok(0));
        assert_eq!(parse_allocations(br#"{"allocations": [{"id": "a1"}, {"id": "a2"}, {"id": "a3"}]}"#), Ok(3));
        assert_eq!(parse_allocations(br#"{"allocations": []}"#), Ok(0));
        for bad in [&b""[..], b"ok", b"{}", br#"{"allocations": -1}"#, br#"{"allocations": 1.5}"#, br#"{"allocations": "0"}"#, b"[0]"] {
            let e = parse_allocations(bad).expect_err("malformed");
            assert!(!e.is_empty());
        }
        let e = parse_allocations(b"secret-token-in-body").expect_err("not json");
        assert!(!e.contains("secret-token"), "{e}");
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
