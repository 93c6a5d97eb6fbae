//! Agent routes. The host is always the one the client certificate names: every store call
//! below is keyed by `caller.host_id`, so host A's certificate can neither read nor write
//! host B's intents, tasks or results.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use drover_proto::enroll::{RenewRequest, RenewResponse, RolloutBundle};
use drover_proto::evidence::Evidence;
use drover_proto::names::RolloutId;
use drover_proto::release::{TIMESTAMP, sig_path};
use drover_proto::report::{
    ActivationStatus, CheckinRequest, CheckinResponse, ConfirmRequest, MAX_EVENT_TEXT_BYTES, MAX_EVENTS_PER_CHECKIN, ReportEvent,
    TaskResult,
};
use drover_proto::sig::Envelope;
use drover_proto::states::HostLifecycle;
use drover_proto::time::Time;
use uuid::Uuid;

use crate::api::auth::{HostCaller, KnownHost};
use crate::api::error::{ApiError, JsonBody};
use crate::app::AppState;
use crate::store::{self, CertKind, Checkin, CheckinView, HostKeys, HostReport, IntentStatus, NewCert, NewEvent, NewEvidence, StoreError};

/// How long a leased task is the host's before it is requeued.
pub const TASK_LEASE_SECS: u64 = 300;
/// Most tasks handed out per check-in.
pub const MAX_TASKS_PER_CHECKIN: u32 = 16;
/// What the server asks agents to wait between check-ins (long-poll makes this short).
pub const NEXT_CHECKIN_SECS: u64 = 1;

fn envelope(bytes: &[u8]) -> Result<Envelope, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| {
        tracing::error!(error = %e, "stored envelope does not parse");
        ApiError::internal()
    })
}

/// Work for one host, as stored envelopes: its intent (if new to the agent) and tasks.
struct Work {
    intent: Option<Vec<u8>>,
    tasks: Vec<Vec<u8>>,
}

impl Work {
    fn is_empty(&self) -> bool {
        self.intent.is_none() && self.tasks.is_empty()
    }
}

/// Reads what a check-in needs: from the backend's cache of current views if it keeps one
/// ([`Store::checkin_view_cached`]), else [`Store::checkin_view`] on the calling thread where
/// the backend allows it ([`store::read_now`]).
async fn view(app: &AppState, host: Uuid, now: drover_proto::time::Time) -> Result<CheckinView, ApiError> {
    if let Some(cached) = app.store.checkin_view_cached(host, now) {
        app.metrics.record_checkin_view(true);
        return Ok(cached);
    }
    app.metrics.record_checkin_view(false);
    Ok(store::read_now(&app.store, move |s| s.checkin_view(host, now)).await?)
}

/// The work in `view`: the live intent if the agent does not hold it yet, and the host's
/// tasks, leased now. Leasing writes, so it goes to the blocking pool, and only when the view
/// says there is something to lease.
async fn work_from(
    app: &AppState,
    host: Uuid,
    known_intent: Option<&str>,
    view: CheckinView,
    now: drover_proto::time::Time,
) -> Result<Work, ApiError> {
    let intent = view
        .intent
        .filter(|i| i.status == IntentStatus::Wanted && Some(i.intent.intent_id.to_string().as_str()) != known_intent)
        .map(|i| i.intent.envelope);
    let tasks = if view.leasable {
        store::blocking(app.store.clone(), move |s| s.lease_tasks(host, now, TASK_LEASE_SECS, MAX_TASKS_PER_CHECKIN)).await?
    } else {
        Vec::new()
    };
    Ok(Work { intent, tasks: tasks.into_iter().map(|t| t.task.envelope).collect() })
}

/// The most a shown release (`timestamp.json` and its signature) may be: a timestamp lists
/// a few channels, a few KiB.
pub const MAX_RELEASE_SEEN_BYTES: usize = 64 << 10;

/// Most task results one check-in may carry.
pub const MAX_TASK_RESULTS_PER_CHECKIN: usize = 64;

/// Refuses reports whose free-text fields could bloat the store or the logs.
fn check_report(req: &CheckinRequest) -> Result<(), ApiError> {
    let short = |what: &str, v: &str, max: usize| {
        if v.len() > max || v.chars().any(char::is_control) {
            Err(ApiError::bad_request(format!("{what} must be at most {max} bytes without control characters")))
        } else {
            Ok(())
        }
    };
    short("agentVersion", &req.agent_version, 64)?;
    short("bootId", &req.boot_id, 64)?;
    if let Some(g) = &req.current_generation {
        short("currentGeneration", g, 512)?;
    }
    if let Some(sd) = req.health.as_ref().and_then(|h| h.state_dir.as_ref()) {
        short("health.stateDir.path", &sd.path, 1024)?;
        if let Some(reason) = &sd.reason {
            short("health.stateDir.reason", reason, 2048)?;
        }
    }
    if req.events.len() > MAX_EVENTS_PER_CHECKIN {
        return Err(ApiError::bad_request(format!("at most {MAX_EVENTS_PER_CHECKIN} events per check-in")));
    }
    if let Some(e) = req.events.iter().find(|e| !e.is_bounded()) {
        return Err(ApiError::bad_request(format!("events: a {} event has a text field over {MAX_EVENT_TEXT_BYTES} bytes", e.type_name())));
    }
    if req.task_results.len() > MAX_TASK_RESULTS_PER_CHECKIN {
        return Err(ApiError::bad_request(format!("at most {MAX_TASK_RESULTS_PER_CHECKIN} task results per check-in")));
    }
    if req.probe_results.len() > MAX_PROBE_RESULTS_PER_CHECKIN {
        return Err(ApiError::bad_request(format!("at most {MAX_PROBE_RESULTS_PER_CHECKIN} probe results per check-in")));
    }
    for p in &req.probe_results {
        short("probeResults.name", &p.name, 128)?;
    }
    if let Some(r) = &req.release_seen
        && r.timestamp.len() + r.timestamp_sig.len() > MAX_RELEASE_SEEN_BYTES
    {
        return Err(ApiError::bad_request(format!("releaseSeen must be at most {MAX_RELEASE_SEEN_BYTES} bytes")));
    }
    if let Some(a) = &req.activation {
        short("activation.intentId", &a.intent_id, 64)?;
        short("activation.targetClosure", &a.target_closure, 512)?;
        if a.message.len() > MAX_EVENT_TEXT_BYTES {
            return Err(ApiError::bad_request(format!("activation.message must be at most {MAX_EVENT_TEXT_BYTES} bytes")));
        }
    }
    Ok(())
}

/// Evidence as the store keeps it: the document exactly as it verified.
fn kept_evidence(
    host: Uuid,
    task_id: Option<Uuid>,
    job_id: Option<Uuid>,
    kind: &str,
    e: &Evidence,
    now: Time,
) -> Result<NewEvidence, StoreError> {
    Ok(NewEvidence {
        host_id: host,
        task_id,
        job_id,
        kind: kind.to_owned(),
        signed_at: e.statement.at,
        received_at: now,
        document: serde_json::to_string(e).map_err(StoreError::backend)?,
    })
}

/// The event that says a host's evidence was refused, and by which rule.
/// `host.version_skew`: the host's agent is further from this coordinator's release than an
/// upgrade in progress explains.
fn version_skew_event(host: Uuid, agent_version: &str, now: Time) -> NewEvent {
    let coordinator = drover_proto::version::VERSION;
    NewEvent {
        at: now,
        kind: "host.version_skew".into(),
        host_id: Some(host),
        rollout_id: None,
        job_id: None,
        message: format!(
            "agent {agent_version} is more than {} minor release from coordinator {coordinator}",
            drover_proto::version::AGENT_MINOR_SKEW
        ),
        data: serde_json::json!({ "agentVersion": agent_version, "coordinatorVersion": coordinator }),
    }
}

fn evidence_refused(host: Uuid, task_id: Option<Uuid>, why: &str, now: Time) -> NewEvent {
    NewEvent {
        at: now,
        kind: "evidence.refused".into(),
        host_id: Some(host),
        rollout_id: None,
        job_id: None,
        message: match task_id {
            Some(t) => format!("evidence for task {t} refused: {why}; the result was not accepted"),
            None => format!("probe evidence refused: {why}"),
        },
        data: serde_json::json!({ "taskId": task_id.map(|t| t.to_string()), "reason": why }),
    }
}

/// Most probe results one check-in may carry.
pub const MAX_PROBE_RESULTS_PER_CHECKIN: usize = 64;

/// The host's report as the planner sees it after this check-in: the stored one, updated by
/// what the check-in carries (health, new probe results, the activation status).
///
/// An activation status counts only when it names the host's current intent (`current`). One
/// that names any other intent is history: an agent reports its last activation until it
/// handles the next intent, and after a restore from backup it may report one of an intent
/// the restored store never issued, for the same rollout and target as a dispatch to come.
/// Kept, it would read as the outcome of that dispatch (a roll-back failing a host that was
/// never asked to activate), so it clears what the planner knows of the activation instead.
fn merged_report(
    stored: Option<&HostReport>,
    req: &CheckinRequest,
    current: Option<Uuid>,
    refused: Option<ActivationStatus>,
) -> HostReport {
    let mut report = stored.cloned().unwrap_or_default();
    if let Some(h) = &req.health {
        report.failed_units = u32::try_from(h.failed_units.len()).unwrap_or(u32::MAX);
    }
    // In the order the agent observed them: the latest result per probe wins.
    let mut results: Vec<_> = req.probe_results.iter().collect();
    results.sort_by_key(|p| p.observed_at);
    for p in results {
        report.probes.insert(p.name.clone(), p.outcome);
    }
    if let Some(a) = &req.activation {
        let names_current = current.is_some_and(|id| Uuid::parse_str(&a.intent_id).is_ok_and(|named| named == id));
        report.activation = names_current.then(|| a.clone());
    }
    if let Some(refused) = refused {
        // The agent refused its current intent as a version rollback: it will never confirm.
        report.activation = Some(refused);
    }
    report
}

/// The store event for a report event: kind `agent.<Type>`, the rollout when it names one,
/// one line for humans, and the event itself as data.
fn agent_event(host: Uuid, e: &ReportEvent, at: drover_proto::time::Time) -> store::NewEvent {
    let (rollout, message) = match e {
        ReportEvent::ManifestMismatch { rollout_id, reason } => (Some(rollout_id.as_str()), reason.clone()),
        ReportEvent::VerificationFailed { artifact, reason } => (None, format!("{artifact}: {reason}")),
        ReportEvent::TaskRefused { task_id, reason } => (None, format!("task {task_id}: {reason}")),
        ReportEvent::ClockSteppedBack { last_seen, now } => (None, format!("clock stepped back from {last_seen} to {now}")),
        ReportEvent::RolledBack { rollout_id, restored_closure, reason } => {
            (Some(rollout_id.as_str()), format!("rolled back to {restored_closure}: {reason}"))
        }
        ReportEvent::NoActivationBackend { rollout_id } => (Some(rollout_id.as_str()), "no activation backend on this host".to_owned()),
    };
    store::NewEvent {
        at,
        kind: format!("agent.{}", e.type_name()),
        host_id: Some(host),
        rollout_id: rollout.and_then(|r| RolloutId::parse(r).ok()),
        job_id: None,
        message,
        data: serde_json::to_value(e).unwrap_or(serde_json::Value::Null),
    }
}

/// `POST /v1/agent/checkin`: records the report, then answers with work — at once if there
/// is any, else after the host is woken or the long-poll deadline passes.
pub async fn checkin(
    State(app): State<Arc<AppState>>,
    caller: HostCaller,
    JsonBody(req): JsonBody<CheckinRequest>,
) -> Result<Json<CheckinResponse>, ApiError> {
    // Counted and timed on every exit, a dropped long-poll included.
    let mut timer = app.metrics.checkin_timer();
    let host = caller.host_id;
    let known = req.known_intent_id.clone();
    // What comes before the wait runs in futures of its own, boxed: this one is held by every
    // parked long-poll — ten thousand of them — and is only as large as its largest state.
    let mut work = Box::pin(record_checkin(&app, &caller, req)).await?;
    if work.is_empty() {
        timer.hold();
        let woken = app.hub.wait(host, Duration::from_secs(app.config.agent.long_poll_secs)).await;
        timer.work();
        if woken {
            let now = app.clock.now();
            work = Box::pin(async { work_from(&app, host, known.as_deref(), view(&app, host, now).await?, now).await }).await?;
        }
    }
    Ok(Json(CheckinResponse {
        intent: work.intent.as_deref().map(envelope).transpose()?,
        tasks: work.tasks.iter().map(|t| envelope(t)).collect::<Result<_, _>>()?,
        next_checkin_secs: NEXT_CHECKIN_SECS,
        director_rotations: app.director.rotations(),
    }))
}

/// A check-in's report recorded (written when it changed, or on first contact, or with task
/// results or events; otherwise buffered), and the work there is for the host right now.
async fn record_checkin(app: &Arc<AppState>, caller: &HostCaller, req: CheckinRequest) -> Result<Work, ApiError> {
    check_report(&req)?;
    let (host, now) = (caller.host_id, app.clock.now());
    let mut seen = view(app, host, now).await?;
    // A certificate of a host the store does not know: the store is older than the host.
    let record = seen.host.take().ok_or_else(|| ApiError::host_unknown(host, &caller.hostname))?;
    // A host showing a newer release than the store's: the store is behind the fleet.
    if let Some(release) = req.release_seen.clone() {
        crate::fleet_release::note_release_seen(app, host, release).await;
    }
    // What the planner decides on is written only when it changed, and wakes the executor
    // (RFC-0002 §6: a check-in with a status change).
    let current = seen.intent.as_ref().filter(|i| i.current).map(|i| i.intent.intent_id);
    // Read fresh, and only when the host shows a release (its first check-in after a start,
    // every 10 minutes): a verdict a second old could predate the release this very intent
    // came from, and fail a host that is activating it.
    let latest = match req.release_seen {
        Some(_) => store::blocking(app.store.clone(), |s| s.latest_release_version()).await?,
        None => None,
    };
    let refused = crate::fleet_release::refused_activation(seen.intent.as_ref(), &req, latest);
    let report = merged_report(seen.report.as_ref(), &req, current, refused);
    let changed = (seen.report.as_ref() != Some(&report) && (seen.report.is_some() || report != HostReport::default())).then_some(report);
    let checkin = Checkin { at: now, agent_version: req.agent_version, boot_id: req.boot_id, current_generation: req.current_generation };
    if app.metrics.note_agent_version(host, &checkin.agent_version) {
        let e = version_skew_event(host, &checkin.agent_version, now);
        tracing::warn!(%host, agent_version = %checkin.agent_version, coordinator_version = drover_proto::version::VERSION, "agent version skew");
        store::blocking(app.store.clone(), move |s| s.append_event(&e)).await?;
    }
    // What the host says of itself, for operators: kept with the buffered check-in writes.
    if req.health.is_some() || !req.probe_results.is_empty() {
        let report = super::operator::HostHealthReport { health: req.health, probes: req.probe_results.clone() };
        match serde_json::to_string(&report) {
            Ok(report) => app.note_health(store::HostHealth { host_id: host, reported_at: now, report }),
            Err(e) => tracing::warn!(%host, error = %e, "health report not kept"),
        }
    }
    // First contact after enrollment, or back from silence: written now, with the
    // transition. A routine check-in only updates last-seen fields, which are buffered and
    // written in batches (see AppState::flush_checkins), so it writes nothing here.
    let returning = matches!(record.state, HostLifecycle::Enrolling | HostLifecycle::Offline);
    // A task result may finish a job's stage: the job executor acts on it at once.
    let wake_executor = returning || changed.is_some() || !req.task_results.is_empty();
    if returning || changed.is_some() || !req.task_results.is_empty() || !req.events.is_empty() {
        let results = req.task_results;
        let reported = req.events;
        let probe_results = req.probe_results;
        // Signed probe results are kept when they change what is known of the host, not on
        // every check-in: a routine check-in writes nothing (see below), evidence included.
        let probe_evidence = req.probe_evidence.filter(|_| changed.is_some());
        let first = returning.then(|| checkin.clone());
        store::blocking(app.store.clone(), move |s| {
            if let Some(report) = &changed {
                s.record_host_report(host, report, now)?;
            }
            if let Some(checkin) = first {
                s.record_checkin(host, &checkin)?;
                // Losing a race with another transition (the offline sweep) is fine: the
                // next check-in tries again.
                match s.transition_host(host, record.state, HostLifecycle::Active, "agent checked in", now) {
                    Ok(_) | Err(StoreError::StaleState { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            // What the agent refused or noticed becomes the host's history, one event each.
            for e in &reported {
                s.append_event(&agent_event(host, e, now))?;
            }
            // Each result stands alone: one the store refuses (not this host's task, or a
            // second, different result for a task already completed) is logged and skipped,
            // so an agent resending its results can never wedge its own check-ins.
            let signed = probe_evidence.is_some() || results.iter().any(|r| r.evidence.is_some());
            let keys = if signed { s.host_keys(host)? } else { HostKeys::default() };
            if let Some(evidence) = &probe_evidence {
                match super::evidence::check_probes(&keys, host, &probe_results, evidence) {
                    Ok(()) => {
                        s.put_evidence(&kept_evidence(host, None, None, "probes", evidence, now)?)?;
                    }
                    Err(why) => {
                        s.append_event(&evidence_refused(host, None, &why, now))?;
                    }
                }
            }
            for result in &results {
                let Ok(task_id) = Uuid::parse_str(&result.task_id) else {
                    tracing::warn!(%host, task_id = %result.task_id, "task result with a malformed task id ignored");
                    continue;
                };
                let evidence = match super::evidence::check_task_result(&keys, host, result) {
                    Ok(e) => e,
                    Err(why) => {
                        tracing::warn!(%host, %task_id, reason = %why, "task result refused: its evidence does not verify");
                        s.append_event(&evidence_refused(host, Some(task_id), &why, now))?;
                        continue;
                    }
                };
                // The statement is kept on its own (below); the result row holds the report.
                let value = serde_json::to_value(TaskResult { evidence: None, ..result.clone() }).map_err(StoreError::backend)?;
                match s.complete_task(host, task_id, &value, now) {
                    Ok(record) => {
                        if let Some(evidence) = &evidence {
                            s.put_evidence(&kept_evidence(host, Some(task_id), record.task.job_id, "task", evidence, now)?)?;
                        }
                    }
                    Err(e @ (StoreError::NotFound { .. } | StoreError::Conflict { .. })) => {
                        tracing::warn!(%host, %task_id, error = %e, "task result refused");
                    }
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        })
        .await?;
        // What was written may change what there is to hand out: look again.
        seen = view(app, host, now).await?;
        if wake_executor {
            app.executor.poke();
        }
    }
    if !returning {
        app.note_checkin(host, checkin);
    }
    work_from(app, host, req.known_intent_id.as_deref(), seen, now).await
}

/// `GET /v1/rollouts/{rolloutId}`: the manifest and the current timestamp, byte-exact; built
/// once per (release, rollout) and shared by every request ([`crate::bundles`]).
pub async fn rollout(State(app): State<Arc<AppState>>, _caller: KnownHost, Path(id): Path<String>) -> Result<Response, ApiError> {
    let (id, version) = rollout_and_release(&app, &id).await?;
    let body = app.bundles.get_or_build(version, &id, || build_bundle(app.clone(), id.clone(), version)).await?;
    Ok(([(axum::http::header::CONTENT_TYPE, "application/json")], body).into_response())
}

/// The rollout a host asks about (a 400 when `id` is no rollout id) and the latest release
/// version (a 404 before any release): what both bundle routes key their caches by.
pub(crate) async fn rollout_and_release(app: &Arc<AppState>, id: &str) -> Result<(RolloutId, u64), ApiError> {
    let id = RolloutId::parse(id).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let version = store::read_now(&app.store, |s| s.latest_release_version())
        .await?
        .ok_or_else(|| ApiError::not_found("no release has been published"))?;
    Ok((id, version))
}

/// A stored signed artifact as the text CI wrote (a 500, logged, if the store holds other
/// than UTF-8: a verified release never does).
pub(crate) fn stored_text(bytes: &[u8], what: &str) -> Result<String, ApiError> {
    String::from_utf8(bytes.to_vec()).map_err(|_| {
        tracing::error!(artifact = what, "stored artifact is not UTF-8");
        ApiError::internal()
    })
}

/// A stored release's `timestamp.json` and its signature file, as text.
pub(crate) fn timestamp_text(release: &crate::store::Release) -> Result<(String, String), ApiError> {
    let ts = release.files.get(TIMESTAMP).ok_or_else(ApiError::internal)?;
    let ts_sig = release.files.get(&sig_path(TIMESTAMP)).ok_or_else(ApiError::internal)?;
    Ok((stored_text(ts, "timestamp")?, stored_text(ts_sig, "timestamp signature")?))
}

/// The serialised bundle of `id` with release `version`'s timestamp.
async fn build_bundle(app: Arc<AppState>, id: RolloutId, version: u64) -> Result<axum::body::Bytes, ApiError> {
    let lookup = id.clone();
    let (manifest, release) = store::blocking(app.store.clone(), move |s| Ok((s.get_manifest(&lookup)?, s.get_release(version)?))).await?;
    let manifest = manifest.ok_or_else(|| ApiError::not_found(format!("rollout {id} has no manifest")))?;
    let release = release.ok_or_else(|| ApiError::not_found("no release has been published"))?;
    let (timestamp, timestamp_sig) = timestamp_text(&release)?;
    let bundle = RolloutBundle {
        manifest: stored_text(&manifest.bytes, "manifest")?,
        manifest_sig: stored_text(&manifest.sig, "manifest signature")?,
        timestamp,
        timestamp_sig,
    };
    let bytes = serde_json::to_vec(&bundle).map_err(|e| {
        tracing::error!(error = %e, "cannot serialise a rollout bundle");
        ApiError::internal()
    })?;
    Ok(bytes.into())
}

/// `POST /v1/agent/confirm`: 204 while the host's dispatch is still wanted (and within its
/// confirm deadline), 410 Gone — roll back — when it was cancelled, superseded, rolled back,
/// its deadline passed, or it is not this host's.
pub async fn confirm(
    State(app): State<Arc<AppState>>,
    KnownHost(caller): KnownHost,
    JsonBody(req): JsonBody<ConfirmRequest>,
) -> Result<Response, ApiError> {
    let host = caller.host_id;
    let intent_id = Uuid::parse_str(&req.intent_id).map_err(|_| ApiError::bad_request("intentId is not a UUID"))?;
    let now = app.clock.now();
    let confirmed = store::blocking(app.store.clone(), move |s| {
        let Some(record) = s.get_intent(host, intent_id)? else { return Ok(false) };
        let in_time = record.intent.confirm_deadline.is_none_or(|d| now <= d);
        match record.status {
            IntentStatus::Confirmed => Ok(true),
            IntentStatus::Wanted if record.current && in_time && record.intent.rollout_id == req.rollout_id => {
                // Superseded or cancelled between the read and this write: no longer wanted.
                match s.set_intent_status(host, intent_id, IntentStatus::Confirmed, now) {
                    Ok(_) => Ok(true),
                    Err(StoreError::IllegalTransition { .. } | StoreError::StaleState { .. } | StoreError::NotFound { .. }) => Ok(false),
                    Err(e) => Err(e),
                }
            }
            _ => Ok(false),
        }
    })
    .await?;
    Ok(if confirmed { StatusCode::NO_CONTENT.into_response() } else { StatusCode::GONE.into_response() })
}

/// `POST /v1/agent/renew`: a fresh 30-day certificate for the key in the CSR, naming the
/// same host the current certificate names.
pub async fn renew(
    State(app): State<Arc<AppState>>,
    KnownHost(caller): KnownHost,
    JsonBody(req): JsonBody<RenewRequest>,
) -> Result<Json<RenewResponse>, ApiError> {
    let now = app.clock.now();
    let cert = app
        .ca
        .issue_host_from_csr(&req.csr, caller.host_id, &caller.hostname, now)
        .map_err(|e| ApiError::bad_request(format!("csr: {e}")))?;
    let record = NewCert {
        serial: cert.serial_hex.clone(),
        kind: CertKind::Host,
        host_id: Some(caller.host_id),
        subject: caller.hostname.clone(),
        not_before: cert.not_before,
        not_after: cert.not_after,
    };
    store::blocking(app.store.clone(), move |s| s.record_cert(&record)).await?;
    Ok(Json(RenewResponse { certificate: cert.pem }))
}

/// `GET /healthz`: the process is up.
pub async fn healthz() -> impl IntoResponse {
    (StatusCode::OK, "ok\n")
}
