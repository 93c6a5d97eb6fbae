//! Rules both SQL backends (the crates `drover-store-sqlite` and `drover-store-postgres`) apply
//! the same way, outside any SQL: input checks, the job and revision compare-and-set errors,
//! the maintenance request's shape, page sizes. One copy, so the two backends cannot drift
//! apart on what they accept. Public because the backends are crates of their own; nothing
//! above a backend has a reason to call these.

use drover_proto::names::RolloutId;
use drover_proto::release::ROLLOUTS_DIR;
use drover_proto::states::JobState;
use uuid::Uuid;

use super::{Job, MAX_PAGE, NewMaintenance, StoreError};

/// Clamps a page size to 1..=MAX_PAGE, 0 meaning a full page.
pub fn page(limit: u32) -> i64 {
    i64::from(if limit == 0 { MAX_PAGE } else { limit.min(MAX_PAGE) })
}

/// A lowercase 64-digit hex sha256, or `Invalid`.
pub fn check_sha256(what: &'static str, s: &str) -> Result<(), StoreError> {
    if drover_proto::names::is_sha256_hex(s) { Ok(()) } else { Err(StoreError::invalid(what, "expected 64 lowercase hex digits")) }
}

/// Serials are compared in one spelling: lowercase hex.
pub fn normalize_serial(serial: &str) -> Result<String, StoreError> {
    if serial.is_empty() || serial.len() > 64 || !serial.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(StoreError::invalid("certificate serial", "expected 1 to 64 hex digits"));
    }
    Ok(serial.to_ascii_lowercase())
}

/// A release version as the `BIGINT` column holds it, `Invalid` above `i64::MAX`.
pub fn version_arg(version: u64) -> Result<i64, StoreError> {
    i64::try_from(version).map_err(|_| StoreError::invalid("release version", "above 2^63 - 1"))
}

/// The rollout id of a manifest path `rollouts/<id>.json`, `None` for any other path.
pub fn manifest_id(path: &str) -> Option<Result<RolloutId, StoreError>> {
    let stem = path.strip_prefix(ROLLOUTS_DIR)?.strip_prefix('/')?.strip_suffix(".json")?;
    Some(RolloutId::parse(stem).map_err(|e| StoreError::invalid("manifest path", format!("{path}: {e}"))))
}

/// The terminal job states as an SQL list (`'completed', …`), from the one state machine so a
/// new terminal state cannot be forgotten here.
pub fn terminal_states_sql() -> String {
    JobState::ALL.iter().filter(|s| s.is_terminal()).map(|s| format!("'{}'", s.as_str())).collect::<Vec<_>>().join(", ")
}

/// The compare-and-set error of a job no longer in the state the caller expected.
pub fn stale_state(job_id: Uuid, expected: JobState, actual: &str) -> StoreError {
    StoreError::StaleState { what: "job", id: job_id.to_string(), expected: expected.as_str().into(), actual: actual.into() }
}

/// The job state machine's check of `from -> to`, `IllegalTransition` if it is not allowed.
pub fn check_legal(from: JobState, to: JobState) -> Result<(), StoreError> {
    if from.can_transition_to(to) {
        Ok(())
    } else {
        Err(StoreError::IllegalTransition { what: "job", from: from.as_str().into(), to: to.as_str().into() })
    }
}

/// Whether an unfinished job stands aside for a new maintenance request: a maintenance job that
/// failed has already stopped working on the host, and the new request is how an operator
/// clears it.
pub fn supersedable(job: &Job) -> bool {
    job.job.kind == "maintenance" && matches!(job.state, JobState::FailedRetryable | JobState::FailedManualIntervention)
}

/// The request's own shape: every job belongs to it and names a host, no host twice. Returns
/// the hosts in the request's order.
pub fn check_request(new: &NewMaintenance) -> Result<Vec<Uuid>, StoreError> {
    let what = "maintenance request";
    if new.jobs.is_empty() {
        return Err(StoreError::invalid(what, "names no hosts"));
    }
    let mut hosts = Vec::with_capacity(new.jobs.len());
    for job in &new.jobs {
        if job.request_id != Some(new.request_id) {
            return Err(StoreError::invalid(what, format!("job {} does not belong to request {}", job.job_id, new.request_id)));
        }
        let host = job.host_id.ok_or_else(|| StoreError::invalid(what, format!("job {} names no host", job.job_id)))?;
        if hosts.contains(&host) {
            return Err(StoreError::invalid(what, format!("host {host} is listed twice")));
        }
        hosts.push(host);
    }
    Ok(hosts)
}

/// The compare-and-set of every update: the row must still be at the revision the caller read.
pub fn check_revision(what: &'static str, id: Uuid, expected: u64, actual: u64) -> Result<(), StoreError> {
    if expected == actual {
        return Ok(());
    }
    Err(StoreError::StaleState { what, id: id.to_string(), expected: format!("revision {expected}"), actual: format!("revision {actual}") })
}

/// A value as the JSON text a column holds; failing to encode is a backend error.
pub fn json<T: serde::Serialize>(v: &T) -> Result<String, StoreError> {
    serde_json::to_string(v).map_err(StoreError::backend)
}
