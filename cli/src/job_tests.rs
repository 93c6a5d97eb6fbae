//! Unit tests of `drover job`: request paths and bodies, local refusals, the table, describe
//! and action renderings, decoding as the coordinator's own types.

use clap::Parser;

use super::*;

/// A job as `GET /v1/jobs/{id}` answers it.
pub(crate) fn sample_job() -> Value {
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

#[derive(Parser)]
struct Wrap {
    #[command(subcommand)]
    command: JobCommand,
}

fn parse(args: &[&str]) -> Result<JobCommand, clap::Error> {
    Wrap::try_parse_from(std::iter::once("job").chain(args.iter().copied())).map(|w| w.command)
}

#[test]
fn get_paths_carry_the_filters() {
    // Ids stand for themselves here; hostnames are resolved against a coordinator in the
    // end-to-end tests.
    let id = |h: &str| Ok(uuid::Uuid::parse_str(h).expect("a host id"));
    let JobCommand::Get(a) = parse(&["get", "job-7"]).expect("parse") else { panic!("get") };
    assert_eq!(get_path(&a, id).expect("path"), "/v1/jobs/job-7");
    let JobCommand::Get(a) = parse(&["get"]).expect("parse") else { panic!("get") };
    assert_eq!(get_path(&a, id).expect("path"), "/v1/jobs");
    let args = ["get", "--host", "7f0c6a56-1d51-4bb4-9a5e-3c8f1d2f9a10", "--state", "failed-retryable", "--kind", "soft_reset"];
    let JobCommand::Get(a) = parse(&args).expect("parse") else { panic!("get") };
    assert_eq!(
        get_path(&a, id).expect("path"),
        "/v1/jobs?host=7f0c6a56-1d51-4bb4-9a5e-3c8f1d2f9a10&state=failed_retryable&kind=soft_reset"
    );
    let JobCommand::Get(a) = parse(&["get", "--kind", "maintenance"]).expect("parse") else { panic!("get") };
    assert_eq!(get_path(&a, id).expect("path"), "/v1/jobs?kind=maintenance");
    let JobCommand::Get(a) = parse(&["get", "--host", "gpu/a-01"]).expect("parse") else { panic!("get") };
    assert_eq!(get_path(&a, id).expect_err("no hostname").code(), codes::USAGE);
    assert!(parse(&["get", "job-7", "--state", "running"]).is_err(), "a job id and filters conflict");
    assert!(parse(&["get", "--state", "sleeping"]).is_err());
}

#[test]
fn job_ids_are_checked_before_they_go_into_a_path() {
    assert_eq!(check_job_id("job-7").expect("ok"), "job-7");
    assert_eq!(check_job_id("0d9e1c7a-2b3c-4d5e-8f90-123456789abc").expect("ok"), "0d9e1c7a-2b3c-4d5e-8f90-123456789abc");
    for bad in ["", "../hosts", "a/b", "a?b=1", "a b", "a%2f"] {
        assert_eq!(check_job_id(bad).expect_err(bad).code(), codes::USAGE, "{bad}");
    }
}

#[test]
fn every_action_has_its_route() {
    let cases = [
        ("retry", "retry_stage"),
        ("resume", "resume"),
        ("rerun", "rerun"),
        ("restart-clean", "restart_clean"),
        ("cancel", "cancel"),
        ("adopt", "adopt_observed_state"),
        ("mark-manual", "mark_manual_intervention_required"),
    ];
    for (verb, segment) in cases {
        let cmd = parse(&[verb, "job-7", "--reason", "disk swap"]).expect(verb);
        let action = match cmd {
            JobCommand::Retry(_) => Action::RetryStage,
            JobCommand::Resume(_) => Action::Resume,
            JobCommand::Rerun(_) => Action::Rerun,
            JobCommand::RestartClean(_) => Action::RestartClean,
            JobCommand::Cancel(_) => Action::Cancel,
            JobCommand::Adopt(_) => Action::AdoptObservedState,
            JobCommand::MarkManual(_) => Action::MarkManualInterventionRequired,
            JobCommand::Get(_) | JobCommand::Describe(_) => panic!("{verb}"),
        };
        assert_eq!(action_path("job-7", action).expect("path"), format!("/v1/jobs/job-7/{segment}"));
        assert!(parse(&[verb, "job-7"]).is_err(), "{verb} needs --reason");
    }
    assert_eq!(action_path("a/b", Action::Cancel).expect_err("bad id").code(), codes::USAGE);
    let body = serde_json::to_value(ReasonBody { reason: "disk swap" }).expect("json");
    assert_eq!(body, serde_json::json!({"reason": "disk swap"}));
}

#[test]
fn a_blank_reason_is_refused_before_connecting() {
    let cmd = parse(&["cancel", "job-7", "--reason", "  "]).expect("parse");
    // No credentials are given: a refusal for anything but the reason would be about them.
    let e = run(&JobArgs { command: cmd }).expect_err("blank reason");
    assert_eq!(e.code(), codes::USAGE);
    assert!(e.to_string().contains("--reason"), "{e}");
    let e = run(&JobArgs { command: parse(&["cancel", "../x", "--reason", "r"]).expect("parse") }).expect_err("bad id");
    assert!(e.to_string().contains("JOB_ID"), "{e}");
}

#[test]
fn the_table_has_one_row_per_job_and_truncates_messages() {
    let job: JobJson = decode::<JobDetail>("/v1/jobs/job-7", &sample_job()).expect("decode").job;
    let mut pending = job.clone();
    pending.job_id = "job-8".to_owned();
    pending.state = drover_proto::states::JobState::Pending;
    pending.stage = String::new();
    pending.message = String::new();
    pending.hostname = None;
    let out = render_job_table(&[job, pending]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(lines[0].starts_with("JOB    KIND               HOST "), "{out}");
    assert!(lines[0].ends_with("STAGE  ATTEMPT  MESSAGE"), "{out}");
    assert!(lines[1].starts_with("job-7  full_decommission  gpu-a-01 "), "{out}");
    assert!(lines[1].contains("failed_retryable  drain  2        drain timed out "), "{out}");
    assert!(lines[1].ends_with("x…") && !lines[1].contains('\x1b'), "{out}");
    let message = lines[1].split_once("  2        ").map(|(_, m)| m).unwrap_or_default();
    assert_eq!(message.chars().count(), TABLE_MESSAGE_CHARS + 1, "{out}");
    assert!(lines[2].starts_with("job-8  full_decommission  7f0c6a56-1d51-4bb4-9a5e-3c8f1d2f9a10  pending "), "{out}");
    assert!(lines[2].ends_with("  pending           -      2        -"), "{out}");
}

#[test]
fn describe_marks_the_current_stage_and_lists_history_and_events() {
    let job: JobDetail = decode("/v1/jobs/job-7", &sample_job()).expect("decode");
    let out = render_describe(&job);
    for needle in [
        "Job:           job-7\n",
        "Kind:          full_decommission\n",
        "Host:          gpu-a-01 (7f0c6a56-1d51-4bb4-9a5e-3c8f1d2f9a10)\n",
        "State:         failed_retryable\n",
        "Attempt:       2\n",
        "Task:          task-9\n",
        "Failure class: transient\n",
        "Stages:\n     1. cordon\n  -> 2. drain\n     3. wipe\n     4. release\n",
        "History:\n  AT                    STAGE   ATTEMPT  STATUS     MESSAGE\n",
        "  2030-01-01T00:10:00Z  drain   1        failed     timeout\n",
        "Events:\n  AT                    KIND          MESSAGE\n  2030-01-01T00:10:01Z  stage_failed  drain failed\n",
    ] {
        assert!(out.contains(needle), "{needle:?} in\n{out}");
    }
    assert!(!out.contains('\x1b'), "{out}");
    assert!(!out.contains("Request:"), "{out}");
    // With a stage index out of range, the current stage is found by name.
    let mut v = sample_job();
    v["stageIndex"] = 9.into();
    v["stage"] = "wipe".into();
    let out = render_describe(&decode("/v1/jobs/job-7", &v).expect("decode"));
    assert!(out.contains("  -> 3. wipe\n") && out.contains("     2. drain\n"), "{out}");
}

#[test]
fn describe_shows_the_requester_the_last_error_and_the_next_action() {
    let mut v = sample_job();
    v["requester"] = "alice (admin)".into();
    v["startedAt"] = "2030-01-01T00:00:01Z".into();
    v["error"] =
        serde_json::json!({"class": "transient", "stage": "drain", "attempt": 1, "message": "timeout", "at": "2030-01-01T00:10:00Z"});
    v["recommendedAction"] = "retry (the stage is safe to run again)".into();
    let out = render_describe(&decode("/v1/jobs/job-7", &v).expect("decode"));
    for needle in [
        "Requester:     alice (admin)\n",
        "Last error:    transient at drain (attempt 1): timeout\n",
        "Next action:   retry (the stage is safe to run again)\n",
        "Started:       2030-01-01T00:00:01Z\n",
        "Completed:     -\n",
    ] {
        assert!(out.contains(needle), "{needle:?} in\n{out}");
    }
}

#[test]
fn a_job_with_nothing_started_renders_dashes() {
    let job = crate::fixtures::job("j", "soft_reset", "h", "gpu-a-01", drover_proto::states::JobState::Pending);
    let out = render_describe(&crate::fixtures::job_detail(job, Vec::new()));
    assert!(out.contains("Task:          -\n") && out.contains("Stages:\n  (none)\n") && out.contains("Events:\n  (none)\n"), "{out}");
}

#[test]
fn an_answer_that_is_not_the_coordinators_job_is_a_protocol_error() {
    // A field the coordinator always writes is missing, or has the wrong type, or a state no
    // coordinator writes: the CLI says so (76) instead of showing blanks.
    let missing = serde_json::json!({"jobId": "j", "kind": "soft_reset", "state": "pending"});
    let e = decode::<JobJson>("/v1/jobs/j", &missing).expect_err("not a job");
    assert_eq!(e.code(), codes::PROTOCOL);
    let mut unknown_state = sample_job();
    unknown_state["state"] = "exploded".into();
    let e = decode::<JobDetail>("/v1/jobs/job-7", &unknown_state).expect_err("no such state");
    assert!(e.to_string().contains("state"), "{e}");
    let mut wrong_type = sample_job();
    wrong_type["attempt"] = "two".into();
    assert_eq!(decode::<JobDetail>("/v1/jobs/job-7", &wrong_type).expect_err("not a number").code(), codes::PROTOCOL);
}

#[test]
fn an_action_prints_the_state_progress_and_task() {
    let v = serde_json::json!({
        "job": sample_job(),
        "outcome": {"action": "retry_stage", "priorState": "failed_retryable", "newState": "running",
                    "expectedState": "failed_retryable", "progressChange": "stage drain retried", "task": "requeued task-9"}
    });
    let mut resp: ActionResponse = decode("/v1/jobs/job-7/retry_stage", &v).expect("decode");
    resp.job.state = drover_proto::states::JobState::Running;
    assert_eq!(render_action(&resp), "job-7 running (stage drain retried; task requeued task-9)\n");
    let json = pretty(&v).expect("pretty");
    assert!(json.contains("\"expectedState\"") && json.contains("\"somethingNew\""), "unknown fields pass through: {json}");
}
