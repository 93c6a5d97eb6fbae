//! Unit tests of `drover job`: request paths and bodies, local refusals. The renderings are
//! tested in [`crate::job_view`], decoding in [`crate::answer`].

use clap::Parser;

use crate::exit::codes;

use super::*;

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
