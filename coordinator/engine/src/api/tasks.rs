//! Task routes: an admin issues one maintenance task to a host (`POST /v1/hosts/{id}/tasks`);
//! operators read tasks and their per-step results (`GET /v1/tasks`, `GET /v1/tasks/{id}`).
//!
//! The coordinator signs the task with its director key, binds it to the host id, gives it a
//! fresh id and a validity window, and queues it; the host leases it on its next check-in
//! (woken at once from its long-poll), runs it, and reports the result with every step. A
//! lease that lapses puts the task back in the queue; a task never has two live leases; the
//! agent's journal refuses a second run of the same id. Listings never show the signed
//! envelope (a `node.hw_sync_reseed` carries a MAAS token, erased once the task completes),
//! only the task's type.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use drover_proto::keys::KeySigner;
use drover_proto::sig::Envelope;
use drover_proto::states::HostLifecycle;
use drover_proto::task::{MachineToken, Task, TaskKind};
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::api::auth::{Admin, Reader};
use crate::api::error::{ApiError, JsonBody};
use crate::api::lifecycle::check_reason;
use crate::api::operator::Page;
use crate::api::operator::QueryParams;
use crate::app::AppState;
use crate::store::{self, NewAudit, NewEvent, NewTask, TaskFilter, TaskRecord, TaskState};

/// Default validity of an issued task.
pub const DEFAULT_TASK_TTL_SECS: u64 = 3600;
/// Longest validity an admin may give a task.
pub const MAX_TASK_TTL_SECS: u64 = 7 * 86_400;

/// `POST /v1/hosts/{id}/tasks` body.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IssueTaskRequest {
    /// What to do, as the task catalog spells it (`{"type": "node.storage_cleanup", "scope": "local"}`).
    pub task: TaskKind,
    /// How long the host may start it (default one hour).
    #[serde(default)]
    pub ttl_secs: Option<u64>,
    /// Why (required; audited).
    pub reason: Option<String>,
}

pub use drover_proto::api::tasks::TaskView;

fn kind_of(envelope: &[u8]) -> String {
    serde_json::from_slice::<Value>(envelope)
        .ok()
        .and_then(|v| v.get("signed")?.get("kind")?.get("type")?.as_str().map(str::to_owned))
        .unwrap_or_else(|| "unknown".to_owned())
}

/// A task as the API shows it. Its result is stored as the report this coordinator checked;
/// one that no longer reads as one (an older build's) is left out rather than failing the read.
pub fn task_view(r: &TaskRecord) -> TaskView {
    TaskView {
        task_id: r.task.task_id.to_string(),
        host_id: r.task.host_id.to_string(),
        job_id: r.task.job_id.map(|j| j.to_string()),
        kind: kind_of(&r.task.envelope),
        state: r.state,
        attempts: r.attempts,
        created_at: r.task.created_at,
        lease_expires_at: r.lease_expires_at,
        completed_at: r.completed_at,
        result: crate::api::operator::stored_as("task result", r.task.task_id, r.result.as_ref()),
    }
}

/// Signs `kind` for `host_id` (director key) and returns the task and the store row that
/// queues it. Shared by the task route and the job executor, which queues it inside the job's
/// own transaction.
pub async fn seal(
    app: &AppState,
    host_id: Uuid,
    job_id: Option<Uuid>,
    kind: TaskKind,
    ttl_secs: u64,
) -> Result<(Task, NewTask), SealTaskError> {
    let task_id = Uuid::new_v4();
    let kind = seal_secrets(app, host_id, task_id, kind).await?;
    let now = app.clock.now();
    let task = Task {
        task_id: task_id.to_string(),
        host_id: host_id.to_string(),
        job_id: job_id.map(|j| j.to_string()),
        issued_at: now,
        expires_at: now.plus_secs(ttl_secs),
        kind,
    };
    let signer = KeySigner::new(app.director.signing_key(now).clone());
    let envelope = Envelope::seal(&task, std::slice::from_ref(&signer)).map_err(|e| match e {
        drover_proto::sig::SignError::Schema(source) => SealTaskError::Invalid { message: source.to_string() },
        other => SealTaskError::Failed { message: other.to_string() },
    })?;
    let bytes = serde_json::to_vec(&envelope).map_err(|e| SealTaskError::Failed { message: e.to_string() })?;
    Ok((task, NewTask { task_id, host_id, job_id, envelope: bytes, created_at: now }))
}

/// Why a task could not be made.
#[derive(Debug, thiserror::Error)]
pub enum SealTaskError {
    /// The task carries a secret and the host has no key to seal it to.
    #[error(
        "host {host_id} registered no sealing key (its agent enrolled before task secrets were sealed): enroll it again to send it a task that carries a secret"
    )]
    NoSealKey {
        /// The host.
        host_id: Uuid,
    },
    /// The task breaks the signed artifacts' schema (an integer beyond ±(2^53 − 1)).
    #[error("task cannot be signed: {message}")]
    Invalid {
        /// Which rule.
        message: String,
    },
    /// Sealing or signing failed.
    #[error("cannot seal or sign the task: {message}")]
    Failed {
        /// Why.
        message: String,
    },
}

impl From<SealTaskError> for ApiError {
    fn from(e: SealTaskError) -> ApiError {
        match e {
            SealTaskError::NoSealKey { .. } => ApiError::conflict(e.to_string()),
            SealTaskError::Invalid { .. } => ApiError::bad_request(e.to_string()),
            SealTaskError::Failed { .. } => {
                tracing::error!(error = %e, "cannot sign a task");
                ApiError::internal()
            }
        }
    }
}

/// `kind` with every secret it carries sealed to the host's key for this task
/// ([`drover_proto::seal`]): what is signed, stored and served never holds a secret in the
/// clear. A host that registered no sealing key gets no task that carries a secret.
async fn seal_secrets(app: &AppState, host_id: Uuid, task_id: Uuid, kind: TaskKind) -> Result<TaskKind, SealTaskError> {
    let TaskKind::HwSyncReseed(mut reseed) = kind else { return Ok(kind) };
    let MachineToken::Plain(token) = &reseed.token else { return Ok(TaskKind::HwSyncReseed(reseed)) };
    // One indexed read, only for the rare task that carries a secret.
    let failed = |message: String| SealTaskError::Failed { message };
    let keys = store::blocking(app.store.clone(), move |s| s.host_keys(host_id)).await.map_err(|e| failed(e.to_string()))?;
    let Some(public) = keys.seal_key else { return Err(SealTaskError::NoSealKey { host_id }) };
    let plain = drover_proto::canonical::to_vec_of(token).map_err(|e| failed(e.to_string()))?;
    let sealed = drover_proto::seal::seal(&public, &plain, &drover_proto::seal::secret_aad(&task_id.to_string(), &host_id.to_string()))
        .map_err(|e| failed(e.to_string()))?;
    reseed.token = MachineToken::Sealed(sealed);
    Ok(TaskKind::HwSyncReseed(reseed))
}

/// Signs `kind` for `host_id` and queues it; wakes the host.
pub async fn issue(app: &Arc<AppState>, host_id: Uuid, job_id: Option<Uuid>, kind: TaskKind, ttl_secs: u64) -> Result<Task, ApiError> {
    let (task, row) = seal(app, host_id, job_id, kind, ttl_secs).await?;
    app.dispatch_task(row).await?;
    Ok(task)
}

/// `POST /v1/hosts/{id}/tasks` (admin): issue one task to a host that is not deleted and has
/// enrolled. Answers 201 with the task (its type, never its secrets).
pub async fn issue_route(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    Path(id): Path<String>,
    JsonBody(req): JsonBody<IssueTaskRequest>,
) -> Result<(StatusCode, Json<TaskView>), ApiError> {
    let host_id = Uuid::parse_str(&id).map_err(|_| ApiError::bad_request("host id is not a UUID"))?;
    let reason = check_reason(req.reason.as_deref())?;
    let ttl = req.ttl_secs.unwrap_or(DEFAULT_TASK_TTL_SECS);
    if ttl == 0 || ttl > MAX_TASK_TTL_SECS {
        return Err(ApiError::bad_request(format!("ttlSecs must be between 1 and {MAX_TASK_TTL_SECS}")));
    }
    let host = store::blocking(app.store.clone(), move |s| s.get_host(host_id))
        .await?
        .ok_or_else(|| ApiError::not_found(format!("host {host_id} not found")))?;
    if matches!(host.state, HostLifecycle::Deleted | HostLifecycle::BootstrapIssued) {
        return Err(ApiError::conflict(format!("host {host_id} is {}: tasks go to enrolled hosts that are not deleted", host.state)));
    }
    let kind_name = req.task.type_name();
    let task = issue(&app, host_id, None, req.task, ttl).await?;
    let at = app.clock.now();
    let task_id = task.task_id.clone();
    let audit = NewAudit {
        at,
        actor: op.name.clone(),
        role: op.role.as_str().to_owned(),
        action: "task.issue".to_owned(),
        target: task_id.clone(),
        reason: reason.clone(),
        prior_state: None,
        expected_state: Some(format!("{kind_name} queued for host {host_id}")),
    };
    let event = NewEvent {
        at,
        kind: "task.issued".to_owned(),
        host_id: Some(host_id),
        rollout_id: None,
        job_id: None,
        message: format!("{kind_name} issued by {}: {reason}", op.name),
        data: json!({ "taskId": task_id, "type": kind_name, "expiresAt": task.expires_at }),
    };
    let id = Uuid::parse_str(&task_id).map_err(|_| ApiError::internal())?;
    let record = store::blocking(app.store.clone(), move |s| {
        s.append_audit(&audit)?;
        s.append_event(&event)?;
        s.get_task(id)
    })
    .await?
    .ok_or_else(ApiError::internal)?;
    tracing::info!(%host_id, task_id = %id, kind = kind_name, operator = %op.name, "task issued");
    Ok((StatusCode::CREATED, Json(task_view(&record))))
}

/// `GET /v1/tasks` query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TasksQuery {
    host: Option<String>,
    job: Option<String>,
    state: Option<String>,
}

/// `GET /v1/tasks?host=&job=&state=` (viewer): tasks by creation time.
pub async fn list(
    State(app): State<Arc<AppState>>,
    _caller: Reader,
    QueryParams(q): QueryParams<TasksQuery>,
) -> Result<Json<Page<TaskView, String>>, ApiError> {
    let host_id = q.host.as_deref().map(|h| Uuid::parse_str(h).map_err(|_| ApiError::bad_request("host is not a UUID"))).transpose()?;
    let state = q.state.as_deref().map(|s| s.parse::<TaskState>().map_err(|e| ApiError::bad_request(format!("state: {e}")))).transpose()?;
    let job_id = q.job.as_deref().map(|j| crate::api::operator::parse_uuid("job", j)).transpose()?;
    let filter = TaskFilter { host_id, job_id, state };
    let tasks = store::blocking(app.store.clone(), move |s| s.list_tasks(&filter)).await?;
    let items: Vec<TaskView> = tasks.iter().map(task_view).collect();
    Ok(Json(Page { items, next: None }))
}

/// `GET /v1/tasks/{id}` (viewer): one task with its result.
pub async fn get(State(app): State<Arc<AppState>>, _caller: Reader, Path(id): Path<String>) -> Result<Json<TaskView>, ApiError> {
    let task_id = Uuid::parse_str(&id).map_err(|_| ApiError::bad_request("task id is not a UUID"))?;
    let record = store::blocking(app.store.clone(), move |s| s.get_task(task_id))
        .await?
        .ok_or_else(|| ApiError::not_found(format!("task {task_id} not found")))?;
    Ok(Json(task_view(&record)))
}
