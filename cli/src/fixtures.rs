//! Test fixtures: coordinator answers built from the coordinator's own types
//! ([`drover_proto::api`]), so a test's fake answer has every field the coordinator writes and
//! cannot drift from it; and one job answer as raw JSON ([`sample_job`]) for the tests of
//! decoding and of `-o json`.

use drover_proto::api::events::EventView;
use drover_proto::api::hosts::HostView;
use drover_proto::api::jobs::{JobDetail, JobJson};
use drover_proto::api::rollouts::{RolloutStateResponse, RolloutView};
use drover_proto::states::{HostLifecycle, JobState, RolloutState};
use drover_proto::time::Time;

/// `2030-01-01T00:00:00Z` plus `secs`.
pub fn at(secs: u64) -> Time {
    Time::parse_lenient("2030-01-01T00:00:00Z").expect("time").plus_secs(secs)
}

/// An active, schedulable host that never checked in and no rollout names.
pub fn host(id: &str, hostname: &str) -> HostView {
    HostView {
        id: id.to_owned(),
        host_id: id.to_owned(),
        hostname: hostname.to_owned(),
        state: HostLifecycle::Active,
        schedulable: true,
        created_at: at(0),
        updated_at: at(0),
        last_checkin: None,
        channel: None,
        wave: None,
        rollout_id: None,
        rollout_state: None,
    }
}

/// A rollout `CHANNEL@REF` in `state`, with no host counts.
pub fn rollout(id: &str, state: RolloutState) -> RolloutView {
    let channel = id.split_once('@').map_or(id, |(c, _)| c);
    let rollout = RolloutStateResponse {
        rollout_id: id.to_owned(),
        channel: channel.to_owned(),
        state,
        manifest_sha256: "ab".repeat(32),
        opened_at: at(0),
        updated_at: at(0),
    };
    RolloutView { rollout, hosts: Default::default() }
}

/// A job with nothing started: `kind` on `hostname`, pending.
pub fn job(job_id: &str, kind: &str, host_id: &str, hostname: &str, state: JobState) -> JobJson {
    JobJson {
        job_id: job_id.to_owned(),
        kind: kind.to_owned(),
        host_id: Some(host_id.to_owned()),
        hostname: Some(hostname.to_owned()),
        state,
        input: serde_json::json!({ "kind": kind }),
        request_id: None,
        stages: Vec::new(),
        stage: String::new(),
        stage_index: 0,
        attempt: 0,
        task_id: None,
        child_job_id: None,
        failure_class: None,
        message: String::new(),
        history: Vec::new(),
        requester: None,
        started_at: None,
        completed_at: None,
        error: None,
        recommended_action: None,
        created_at: at(0),
        updated_at: at(0),
    }
}

/// A job with its events, as `GET /v1/jobs/{id}` answers.
pub fn job_detail(job: JobJson, events: Vec<EventView>) -> JobDetail {
    JobDetail { job, events }
}

/// A job as `GET /v1/jobs/{id}` answers it, as raw JSON: a hostile message, a stage index, and
/// a field no coordinator type has yet (`somethingNew`), which must pass through `-o json`.
pub fn sample_job() -> serde_json::Value {
    serde_json::json!({
        "jobId": "job-7",
        "kind": "full_decommission",
        "hostId": "7f0c6a56-1d51-4bb4-9a5e-3c8f1d2f9a10",
        "hostname": "gpu-a-01",
        "state": "failed_retryable",
        "input": {"mode": "full", "storage": "all"},
        "stages": ["cordon", "drain", "wipe", "release"],
        "stage": "drain",
        "stageIndex": 1,
        "attempt": 2,
        "taskId": "task-9",
        "failureClass": "transient",
        "message": format!("drain timed out \x1b[2J after 600s {}", "x".repeat(100)),
        "history": [
            {"stage": "cordon", "attempt": 1, "status": "succeeded", "message": "ok", "at": "2030-01-01T00:00:00Z"},
            {"stage": "drain", "attempt": 1, "status": "failed", "message": "timeout", "at": "2030-01-01T00:10:00Z"}
        ],
        "events": [{"id": 3, "at": "2030-01-01T00:10:01Z", "kind": "stage_failed", "message": "drain failed", "data": {}}],
        "createdAt": "2030-01-01T00:00:00Z",
        "updatedAt": "2030-01-01T00:10:01Z",
        "somethingNew": true
    })
}
