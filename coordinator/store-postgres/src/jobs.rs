//! Jobs and maintenance requests in PostgreSQL, as `store-sqlite/src/jobs.rs`: the same functions over the
//! same schema.
//!
//! A job's every step is one transaction ([`apply_job_step`]): the compare-and-set on its
//! state and progress, the task it enqueues or requeues, the host changes it makes and their
//! events commit together or not at all, so the job's read model never disagrees with the
//! hosts it drives. Creating work on a host checks, in the same transaction, that no other
//! unfinished job owns it (DESIGN: one owner of disruptive work at a time).

use drover_proto::names::RolloutId;
use drover_proto::states::{HostLifecycle, HostRolloutState, JobState};
use drover_proto::time::Time;
use serde_json::{Value, json};
use uuid::Uuid;

use super::cols::{col, json_col, opt_uuid_col, parse_col, time_col, uuid_col};
use super::log::{insert_audit, insert_event};
use super::postgres::{Row, Transaction};
use crate::DbResult;
use drover_store::rules::{check_legal, check_request, stale_state, supersedable, terminal_states_sql};
use drover_store::{
    CreatedCursor, HostOp, Job, JobCount, JobFilter, JobStep, MaintenanceFilter, MaintenanceRecord, NewAudit, NewEvent, NewJob,
    NewMaintenance, StoreError, TaskState,
};

const JOB_COLS: &str = "job_id, kind, host_id, input, created_at, state, progress, updated_at, request_id";

fn job_row(r: &Row) -> Result<Job, StoreError> {
    Ok(Job {
        job: NewJob {
            job_id: uuid_col(r, 0)?,
            kind: col(r, 1)?,
            host_id: opt_uuid_col(r, 2)?,
            input: json_col(r, 3)?,
            created_at: time_col(r, 4)?,
            request_id: opt_uuid_col(r, 8)?,
        },
        state: parse_col(r, 5)?,
        progress: json_col(r, 6)?,
        updated_at: time_col(r, 7)?,
    })
}

pub(crate) fn get_job(c: &mut Transaction<'_>, job_id: Uuid) -> Result<Option<Job>, StoreError> {
    let sql = format!("SELECT {JOB_COLS} FROM jobs WHERE job_id = $1");
    c.query_opt(sql.as_str(), &[&job_id.to_string()]).db()?.map(|r| job_row(&r)).transpose()
}

fn require_job(c: &mut Transaction<'_>, job_id: Uuid) -> Result<Job, StoreError> {
    get_job(c, job_id)?.ok_or_else(|| StoreError::not_found("job", job_id))
}

fn job_event(job: &Job, at: Time, kind: &str, message: &str, data: Value) -> NewEvent {
    NewEvent {
        at,
        kind: kind.into(),
        host_id: job.job.host_id,
        rollout_id: None,
        job_id: Some(job.job.job_id),
        message: message.into(),
        data,
    }
}

pub(crate) fn create_job(c: &mut Transaction<'_>, new: &NewJob) -> Result<Job, StoreError> {
    if let Some(stored) = get_job(c, new.job_id)? {
        let j = &stored.job;
        if j.kind == new.kind && j.host_id == new.host_id && j.input == new.input && j.request_id == new.request_id {
            return Ok(stored);
        }
        return Err(StoreError::conflict("job", new.job_id, "already exists with other content"));
    }
    if new.kind.is_empty() {
        return Err(StoreError::invalid("job kind", "must not be empty"));
    }
    if let Some(h) = new.host_id {
        super::hosts::get_host(c, h)?.ok_or_else(|| StoreError::not_found("host", h))?;
    }
    // The foreign key would refuse an unknown request too, but as a backend error; this is
    // the caller's mistake and says so.
    if let Some(r) = new.request_id {
        get_maintenance(c, r)?.ok_or_else(|| StoreError::not_found("maintenance request", r))?;
    }
    c.execute(
        "INSERT INTO jobs (job_id, kind, host_id, state, input, progress, created_at, updated_at, request_id)
         VALUES ($1, $2, $3, $4, $5, 'null', $6, $6, $7)",
        &[
            &new.job_id.to_string(),
            &new.kind,
            &new.host_id.map(|h| h.to_string()),
            &JobState::Pending.as_str(),
            &new.input.to_string(),
            &new.created_at.unix(),
            &new.request_id.map(|r| r.to_string()),
        ],
    )
    .db()?;
    let job = require_job(c, new.job_id)?;
    insert_event(c, &job_event(&job, new.created_at, "job.created", &format!("{} job created", new.kind), json!({ "kind": new.kind })))?;
    Ok(job)
}

/// Moves `job` from the state it was read in to `to`, with its `job.transition` event. The
/// caller has checked legality and the compare-and-set; the `WHERE` repeats the latter so a
/// backend without a global writer lock cannot lose it.
fn write_transition(c: &mut Transaction<'_>, job: &Job, to: JobState, reason: &str, at: Time) -> Result<(), StoreError> {
    let from = job.state;
    let n = c
        .execute(
            "UPDATE jobs SET state = $1, updated_at = $2 WHERE job_id = $3 AND state = $4",
            &[&to.as_str(), &at.unix(), &job.job.job_id.to_string(), &from.as_str()],
        )
        .db()?;
    if n != 1 {
        return Err(stale_state(job.job.job_id, from, "changed concurrently"));
    }
    insert_event(c, &job_event(job, at, "job.transition", reason, json!({ "from": from.as_str(), "to": to.as_str() })))?;
    Ok(())
}

pub(crate) fn set_job_state(
    c: &mut Transaction<'_>,
    job_id: Uuid,
    from: JobState,
    to: JobState,
    reason: &str,
    at: Time,
) -> Result<Job, StoreError> {
    check_legal(from, to)?;
    let job = require_job(c, job_id)?;
    if job.state != from {
        return Err(stale_state(job_id, from, job.state.as_str()));
    }
    write_transition(c, &job, to, reason, at)?;
    require_job(c, job_id)
}

pub(crate) fn set_job_progress(c: &mut Transaction<'_>, job_id: Uuid, progress: &Value, at: Time) -> Result<Job, StoreError> {
    let n = c
        .execute(
            "UPDATE jobs SET progress = $1, updated_at = $2 WHERE job_id = $3",
            &[&progress.to_string(), &at.unix(), &job_id.to_string()],
        )
        .db()?;
    if n == 0 {
        return Err(StoreError::not_found("job", job_id));
    }
    require_job(c, job_id)
}

pub(crate) fn list_jobs(c: &mut Transaction<'_>, f: &JobFilter) -> Result<Vec<Job>, StoreError> {
    let sql = format!(
        "SELECT {JOB_COLS} FROM jobs WHERE ($1::TEXT IS NULL OR host_id = $1) AND ($2::TEXT IS NULL OR state = $2)
             AND ($3::TEXT IS NULL OR kind = $3) AND ($4::TEXT IS NULL OR request_id = $4) AND (NOT $5::BOOLEAN OR state NOT IN ({}))
             AND ($6::BIGINT IS NULL OR created_at > $6 OR (created_at = $6 AND job_id > $7::TEXT))
         ORDER BY created_at, job_id LIMIT $8::BIGINT",
        terminal_states_sql()
    );
    let (after_at, after_id) = CreatedCursor::params(f.after);
    let rows = c
        .query(
            sql.as_str(),
            &[
                &f.host_id.map(|h| h.to_string()),
                &f.state.map(JobState::as_str),
                &f.kind,
                &f.request_id.map(|r| r.to_string()),
                &f.unfinished,
                &after_at,
                &after_id,
                &limit_param(f.limit),
            ],
        )
        .db()?;
    rows.iter().map(job_row).collect()
}

pub(crate) fn count_jobs(c: &mut Transaction<'_>) -> Result<Vec<JobCount>, StoreError> {
    let rows = c.query("SELECT kind, state, COUNT(*) FROM jobs GROUP BY kind, state ORDER BY kind, state", &[]).db()?;
    rows.iter().map(|r| Ok(JobCount { kind: col(r, 0)?, state: parse_col(r, 1)?, count: col::<i64>(r, 2)?.unsigned_abs() })).collect()
}

/// PostgreSQL's `LIMIT` for a page size: `LIMIT NULL` means none.
fn limit_param(limit: u32) -> Option<i64> {
    (limit > 0).then_some(i64::from(limit))
}

// ---- one step of a job ----------------------------------------------------------------------

pub(crate) fn apply_job_step(c: &mut Transaction<'_>, step: &JobStep) -> Result<Job, StoreError> {
    let job_id = step.job_id;
    let job = require_job(c, job_id)?;
    if job.state != step.expected_state {
        return Err(stale_state(job_id, step.expected_state, job.state.as_str()));
    }
    if job.progress != step.expected_progress {
        return Err(StoreError::StaleState {
            what: "job progress",
            id: job_id.to_string(),
            expected: step.expected_progress.to_string(),
            actual: job.progress.to_string(),
        });
    }
    if step.new_state != job.state {
        check_legal(job.state, step.new_state)?;
        write_transition(c, &job, step.new_state, &step.reason, step.at)?;
    }
    c.execute(
        "UPDATE jobs SET progress = $1, updated_at = $2 WHERE job_id = $3",
        &[&step.new_progress.to_string(), &step.at.unix(), &job_id.to_string()],
    )
    .db()?;
    if let Some(task) = &step.task {
        if task.job_id != Some(job_id) {
            return Err(StoreError::invalid("job step task", format!("task {} does not belong to job {job_id}", task.task_id)));
        }
        super::work::enqueue_task(c, task)?;
    }
    if let Some(task_id) = step.requeue_task {
        requeue_task(c, job_id, task_id)?;
    }
    for op in &step.host_ops {
        apply_host_op(c, &job, op, step.at)?;
    }
    for e in &step.events {
        insert_event(c, e)?;
    }
    for a in &step.audits {
        insert_audit(c, a)?;
    }
    require_job(c, job_id)
}

/// Makes one of the job's tasks leasable again now, without waiting for its lease to lapse
/// (a retried stage after the agent restarted). Attempts stay as they are: they count leases.
fn requeue_task(c: &mut Transaction<'_>, job_id: Uuid, task_id: Uuid) -> Result<(), StoreError> {
    let task = super::work::get_task(c, task_id)?.ok_or_else(|| StoreError::not_found("task", task_id))?;
    if task.task.job_id != Some(job_id) {
        return Err(StoreError::conflict("task", task_id, format!("is not a task of job {job_id}")));
    }
    match task.state {
        TaskState::Queued => Ok(()),
        TaskState::Completed => Err(StoreError::conflict("task", task_id, "is completed; a completed task is never run again")),
        TaskState::Leased => {
            c.execute(
                "UPDATE tasks SET state = 'queued', lease_expires_at = NULL WHERE task_id = $1 AND state = 'leased'",
                &[&task_id.to_string()],
            )
            .db()?;
            Ok(())
        }
    }
}

fn apply_host_op(c: &mut Transaction<'_>, job: &Job, op: &HostOp, at: Time) -> Result<(), StoreError> {
    match op {
        HostOp::Transition { host_id, from, to, reason } => {
            super::hosts::transition_host(c, *host_id, *from, *to, reason, at)?;
        }
        HostOp::SetSchedulable { host_id, schedulable, reason } => {
            super::hosts::set_schedulable(c, *host_id, *schedulable, reason, at)?;
        }
        HostOp::Redispatch { rollout_id, hostname } => redispatch(c, job, rollout_id, hostname, at)?,
    }
    Ok(())
}

/// Marks the host `Skipped` in the rollout so the planner brings it onto its channel's current
/// target again, exactly as for a host that was offline when its wave ran. This deliberately
/// steps outside the per-host state machine (`Converged -> Skipped` is no planner move): a job
/// (a GPU scrub, a reseed) may have changed what runs on the host, so whatever the rollout
/// recorded no longer describes it. While the host is `Activating` or `Soaking` the rollout
/// engine owns it and nothing changes.
fn redispatch(c: &mut Transaction<'_>, job: &Job, rollout_id: &RolloutId, hostname: &str, at: Time) -> Result<(), StoreError> {
    let Some(row) = super::releases::get_host_rollout(c, rollout_id, hostname)? else {
        return Ok(());
    };
    if matches!(row.state, HostRolloutState::Activating | HostRolloutState::Soaking | HostRolloutState::Skipped) {
        return Ok(());
    }
    c.execute(
        "UPDATE host_rollouts SET state = $3, since = $4 WHERE rollout_id = $1 AND hostname = $2",
        &[&rollout_id.as_str(), &hostname, &HostRolloutState::Skipped.as_str(), &at.unix()],
    )
    .db()?;
    let transition = format!("{} -> {}", row.state, HostRolloutState::Skipped);
    let reason = format!("redispatch requested by job {}", job.job.job_id);
    let host_id = super::hosts::get_host_by_hostname(c, hostname)?.map(|h| h.id);
    insert_event(
        c,
        &NewEvent {
            at,
            kind: "rollout.host".into(),
            host_id,
            rollout_id: Some(rollout_id.clone()),
            job_id: Some(job.job.job_id),
            message: reason.clone(),
            data: json!({
                "ts": at.to_string(),
                "rollout": rollout_id.as_str(),
                "wave": row.wave_index,
                "host": hostname,
                "transition": transition,
                "reason": reason,
            }),
        },
    )?;
    Ok(())
}

// ---- creating work on a host ----------------------------------------------------------------

/// Checks that `host_id` exists, is in one of `allowed`, and is held by no unfinished job
/// (except, when `supersede` is set, [`supersedable`] ones, which are returned). Refusals
/// name the host by id and hostname, and the job holding it.
fn check_host_free(c: &mut Transaction<'_>, host_id: Uuid, allowed: &[HostLifecycle], supersede: bool) -> Result<Vec<Job>, StoreError> {
    let host = super::hosts::get_host(c, host_id)?.ok_or_else(|| StoreError::not_found("host", host_id))?;
    if !allowed.contains(&host.state) {
        let allowed = allowed.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ");
        return Err(StoreError::conflict("host", host_id, format!("host {} is {}, not one of [{allowed}]", host.hostname, host.state)));
    }
    let mut superseded = Vec::new();
    for job in list_jobs(c, &JobFilter { host_id: Some(host_id), unfinished: true, ..Default::default() })? {
        if supersede && supersedable(&job) {
            superseded.push(job);
            continue;
        }
        let msg = format!("host {} is held by job {} ({}, {})", host.hostname, job.job.job_id, job.job.kind, job.state);
        return Err(StoreError::conflict("host", host_id, msg));
    }
    Ok(superseded)
}

pub(crate) fn check_job_start(c: &mut Transaction<'_>, host_id: Uuid, allowed: &[HostLifecycle]) -> Result<(), StoreError> {
    check_host_free(c, host_id, allowed, false).map(|_| ())
}

pub(crate) fn create_job_checked(
    c: &mut Transaction<'_>,
    new: &NewJob,
    allowed: &[HostLifecycle],
    audits: &[NewAudit],
) -> Result<Job, StoreError> {
    let host_id = new.host_id.ok_or_else(|| StoreError::invalid("job host", "a checked job must name its host"))?;
    // A retried request finds its own job holding the host: answer it as create_job would
    // (the stored job, or a conflict on other content), writing nothing again.
    if get_job(c, new.job_id)?.is_some() {
        return create_job(c, new);
    }
    check_host_free(c, host_id, allowed, false)?;
    let job = create_job(c, new)?;
    for a in audits {
        insert_audit(c, a)?;
    }
    Ok(job)
}

// ---- maintenance requests -------------------------------------------------------------------

const MAINTENANCE_COLS: &str = "request_id, initiator, reason, scope, activities, created_at";

fn maintenance_row(r: &Row) -> Result<MaintenanceRecord, StoreError> {
    Ok(MaintenanceRecord {
        request_id: uuid_col(r, 0)?,
        initiator: col(r, 1)?,
        reason: col(r, 2)?,
        scope: json_col(r, 3)?,
        activities: json_col(r, 4)?,
        created_at: time_col(r, 5)?,
    })
}

pub(crate) fn get_maintenance(c: &mut Transaction<'_>, request_id: Uuid) -> Result<Option<MaintenanceRecord>, StoreError> {
    let sql = format!("SELECT {MAINTENANCE_COLS} FROM maintenance_requests WHERE request_id = $1");
    c.query_opt(sql.as_str(), &[&request_id.to_string()]).db()?.map(|r| maintenance_row(&r)).transpose()
}

pub(crate) fn list_maintenance(c: &mut Transaction<'_>, f: &MaintenanceFilter) -> Result<Vec<MaintenanceRecord>, StoreError> {
    let sql = format!(
        "SELECT {MAINTENANCE_COLS} FROM maintenance_requests
          WHERE $1::BIGINT IS NULL OR created_at > $1 OR (created_at = $1 AND request_id > $2::TEXT)
          ORDER BY created_at, request_id LIMIT $3::BIGINT"
    );
    let (after_at, after_id) = CreatedCursor::params(f.after);
    c.query(sql.as_str(), &[&after_at, &after_id, &limit_param(f.limit)]).db()?.iter().map(maintenance_row).collect()
}

pub(crate) fn create_maintenance(
    c: &mut Transaction<'_>,
    new: &NewMaintenance,
    allowed: &[HostLifecycle],
) -> Result<(MaintenanceRecord, Vec<Job>), StoreError> {
    let hosts = check_request(new)?;
    if let Some(stored) = get_maintenance(c, new.request_id)? {
        // A retried request (same content, same job ids) answers what the first one made, its
        // jobs in the request's order as the first answer had them.
        let mut stored_jobs = list_jobs(c, &JobFilter { request_id: Some(new.request_id), ..Default::default() })?;
        let mut jobs = Vec::with_capacity(new.jobs.len());
        for job in &new.jobs {
            if let Some(i) = stored_jobs.iter().position(|j| j.job.job_id == job.job_id) {
                jobs.push(stored_jobs.swap_remove(i));
            }
        }
        let same = stored.initiator == new.initiator
            && stored.reason == new.reason
            && stored.scope == new.scope
            && stored.activities == new.activities
            && stored_jobs.is_empty()
            && jobs.len() == new.jobs.len();
        if same {
            return Ok((stored, jobs));
        }
        return Err(StoreError::conflict("maintenance request", new.request_id, "already exists with other content"));
    }
    // Every host is checked before anything is written, so the refusal names the first
    // offending host in the request's order; the transaction would roll back anyway.
    let mut superseded = Vec::new();
    for host_id in hosts {
        superseded.extend(check_host_free(c, host_id, allowed, true)?);
    }
    c.execute(
        "INSERT INTO maintenance_requests (request_id, initiator, reason, scope, activities, created_at) VALUES ($1, $2, $3, $4, $5, $6)",
        &[
            &new.request_id.to_string(),
            &new.initiator,
            &new.reason,
            &new.scope.to_string(),
            &new.activities.to_string(),
            &new.created_at.unix(),
        ],
    )
    .db()?;
    let why = format!("superseded by maintenance request {}", new.request_id);
    for old in &superseded {
        check_legal(old.state, JobState::Cancelled)?;
        write_transition(c, old, JobState::Cancelled, &why, new.created_at)?;
    }
    let mut jobs = Vec::with_capacity(new.jobs.len());
    for job in &new.jobs {
        if get_job(c, job.job_id)?.is_some() {
            return Err(StoreError::conflict("job", job.job_id, "already exists"));
        }
        jobs.push(create_job(c, job)?);
    }
    for a in &new.audits {
        insert_audit(c, a)?;
    }
    let record = get_maintenance(c, new.request_id)?.ok_or_else(|| StoreError::not_found("maintenance request", new.request_id))?;
    Ok((record, jobs))
}
