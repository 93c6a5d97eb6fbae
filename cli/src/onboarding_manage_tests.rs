//! Unit tests of the onboarding reads and actions: routes and percent-encoded filters, local
//! refusals, decoding as the coordinator's own types, the tables, the batch summary, `describe` (a failed onboarding
//! with diagnostics and hostile strings) and the action names.

use clap::Parser;
use serde_json::{Value, json};

use drover_proto::time::Time;

use super::*;
use crate::exit::codes;
use crate::onboarding_view::{ActionJson, BatchJson, OnboardingJson, TEXT_CHARS, render_created};

const ID: &str = "0d9e1c7a-2b3c-4d5e-8f90-123456789abc";
const BATCH: &str = "5b7d3c1e-9a0f-4e2d-8c6b-abcdefabcdef";

/// A failed onboarding as `GET /v1/maas/onboardings/{id}` answers it (the `onboarding` inside).
pub(crate) fn failed() -> Value {
    json!({
        "onboardingId": ID,
        "batchId": BATCH,
        "site": "dc1",
        "profile": "gpu-default",
        "sku": "hgx-h100",
        "hostname": "gpu-a-01",
        "ipmiIp": "10.0.0.11",
        "state": "failed_manual_intervention",
        "stage": "commission",
        "stageIndex": 2,
        "stages": ["create_or_find", "power_check", "commission", "verify_sku", "deploy"],
        "attempt": 3,
        "systemId": "abc123",
        "hostId": null,
        "failureClass": "hardware_mismatch",
        "message": format!("found 7 GPUs\x1b[2J\x07, expected 8 {}", "y".repeat(400)),
        "recommendedAction": "reseat the GPU tray, then retry",
        "diagnostics": {
            "maasStatus": "Failed commissioning",
            "powerState": "on",
            "ipAddresses": ["10.1.0.5", "fd00::5"],
            "upstreamSnippet": "lspci: 7 devices\r\n\x1b]0;pwned\x07 end",
            "somethingNew": 1
        },
        "requester": "alice (admin)",
        "createdAt": "2030-01-01T00:00:00Z",
        "startedAt": "2030-01-01T00:00:05Z",
        "completedAt": null,
        "updatedAt": "2030-01-01T00:50:00Z",
        "events": [
            {"stage": "create_or_find", "status": "succeeded", "attempt": 1, "at": "2030-01-01T00:00:06Z", "details": "created abc123"},
            {"stage": "commission", "status": "failed", "attempt": 3, "at": "2030-01-01T00:49:00Z", "details": "7 of 8 GPUs"}
        ],
        "workflow": "onboard",
        "futureField": {"x": 1}
    })
}

fn decoded(v: &Value) -> OnboardingJson {
    decode("/v1/maas/onboardings/x", v).expect("decode")
}

fn now() -> Time {
    Time::parse_lenient("2030-01-01T01:00:00Z").expect("time")
}

#[derive(Parser)]
struct Wrap {
    #[command(subcommand)]
    command: OnboardingCommand,
}

fn parse(args: &[&str]) -> Result<OnboardingCommand, clap::Error> {
    Wrap::try_parse_from(std::iter::once("onboarding").chain(args.iter().copied())).map(|w| w.command)
}

#[derive(Parser)]
struct ListWrap {
    #[command(flatten)]
    filters: Filters,
}

fn filters(args: &[&str]) -> Filters {
    ListWrap::try_parse_from(std::iter::once("get").chain(args.iter().copied())).expect("parse").filters
}

#[test]
fn list_paths_carry_the_filters_percent_encoded() {
    assert_eq!(list_path(&filters(&[])).expect("path"), "/v1/maas/onboardings");
    let f = filters(&["--batch", BATCH, "--host", "gpu a&b=c/d?", "--state", "failed-retryable", "--site", "dc 1#x"]);
    assert_eq!(
        list_path(&f).expect("path"),
        format!("/v1/maas/onboardings?batch={BATCH}&host=gpu%20a%26b%3Dc%2Fd%3F&state=failed_retryable&site=dc%201%23x")
    );
    assert_eq!(list_path(&filters(&["--state", "running"])).expect("path"), "/v1/maas/onboardings?state=running");
    assert_eq!(list_path(&filters(&["--host", "gpu-ä"])).expect("path"), "/v1/maas/onboardings?host=gpu-%C3%A4");
    let e = list_path(&filters(&["--batch", "../x"])).expect_err("not a uuid");
    assert_eq!(e.code(), codes::USAGE);
    assert!(e.to_string().contains("--batch"), "{e}");
    assert!(ListWrap::try_parse_from(["get", "--state", "sleeping"]).is_err());
}

#[test]
fn one_batch_and_action_paths_take_only_uuids() {
    assert_eq!(one_path(ID).expect("path"), format!("/v1/maas/onboardings/{ID}"));
    assert_eq!(batch_path(BATCH).expect("path"), format!("/v1/maas/onboardings/batches/{BATCH}"));
    for bad in ["", "gpu-a-01", "../hosts", "a/b", "a?b=1", "0d9e1c7a-2b3c-4d5e-8f90-123456789abc/cancel"] {
        assert_eq!(one_path(bad).expect_err(bad).code(), codes::USAGE, "{bad}");
        assert_eq!(action_path(bad, Action::Cancel).expect_err(bad).code(), codes::USAGE, "{bad}");
        assert_eq!(batch_path(bad).expect_err(bad).code(), codes::USAGE, "{bad}");
    }
}

#[test]
fn every_verb_maps_to_its_action_route() {
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
        let cmd = parse(&[verb, ID, "--reason", "tray reseated"]).expect(verb);
        let (action, a) = action_of(&cmd);
        assert_eq!(a.id, ID);
        assert_eq!(a.reason, "tray reseated");
        assert_eq!(action_path(&a.id, action).expect("path"), format!("/v1/maas/onboardings/{ID}/{segment}"), "{verb}");
        assert!(parse(&[verb, ID]).is_err(), "{verb} needs --reason");
    }
    assert!(parse(&["retry-stage", ID, "--reason", "r"]).is_err(), "only the documented verbs");
}

#[test]
fn a_bad_reason_or_id_is_refused_before_connecting() {
    // No credentials are given: a refusal for anything else would be about them.
    let e = run(&OnboardingArgs { command: parse(&["cancel", ID, "--reason", "  "]).expect("parse") }).expect_err("blank");
    assert_eq!(e.code(), codes::USAGE);
    assert!(e.to_string().contains("--reason"), "{e}");
    let e = run(&OnboardingArgs { command: parse(&["retry", "gpu-a-01", "--reason", "r"]).expect("parse") }).expect_err("bad id");
    assert_eq!(e.code(), codes::USAGE);
    assert!(e.to_string().contains("ID \"gpu-a-01\""), "{e}");
}

#[test]
fn decoding_needs_what_the_coordinator_always_writes() {
    let mut v = failed();
    for (k, empty) in [("stage", json!("")), ("stages", json!([])), ("events", json!([])), ("message", json!(""))] {
        v[k] = empty;
    }
    for k in ["sku", "diagnostics"] {
        v[k] = Value::Null;
    }
    let minimal = decoded(&v);
    assert!(minimal.stages.is_empty() && minimal.events.is_empty() && minimal.diagnostics.is_none(), "{minimal:?}");
    let out = render_describe(&minimal);
    for needle in ["Stage:         -\n", "Diagnostics:   -\n", "Stages:\n  (none)\n", "Events:\n  (none)\n", "SKU:           -\n"] {
        assert!(out.contains(needle), "{needle:?} in\n{out}");
    }
    let e = decode::<OnboardingJson>("/v1/maas/onboardings", &json!({"state": "pending"})).expect_err("no id");
    assert_eq!(e.code(), codes::PROTOCOL);
    let mut no_workflow = failed();
    no_workflow.as_object_mut().expect("object").remove("workflow");
    assert_eq!(decode::<OnboardingJson>("/v1/maas/onboardings", &no_workflow).expect_err("no workflow").code(), codes::PROTOCOL);
    let e = decode::<ListJson>("/v1/maas/onboardings", &json!({"items": []})).expect_err("not the listing");
    assert_eq!(e.code(), codes::PROTOCOL);
}

#[test]
fn the_list_table_shows_class_and_age_and_cleans_hostile_strings() {
    let mut pending = failed();
    pending["onboardingId"] = "11111111-2222-4333-8444-555555555555".into();
    pending["hostname"] = format!("evil\x1b[31m{}", "h".repeat(100)).into();
    pending["state"] = "pending".into();
    pending["stage"] = "".into();
    pending["failureClass"] = Value::Null;
    pending["createdAt"] = "2030-01-01T00:59:30Z".into();
    let out = render_list(now(), &[decoded(&failed()), decoded(&pending)], false);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(
        lines[0].starts_with("ID  ") && lines[0].ends_with("  SITE  STATE                       STAGE       CLASS              AGE"),
        "{out}"
    );
    assert!(lines[1].starts_with(&format!("{ID}  gpu-a-01 ")), "{out}");
    assert!(lines[1].ends_with("  dc1   failed_manual_intervention  commission  hardware_mismatch  60m"), "{out}");
    assert!(lines[2].contains("evil [31mhhhh") && lines[2].contains("h…  dc1   pending "), "{out}");
    assert!(lines[2].ends_with("  -           -                  30s"), "{out}");
    assert!(!out.contains('\x1b'), "{out}");
    let wide = render_list(now(), &[decoded(&failed())], true);
    let header = wide.lines().next().expect("header");
    assert!(header.contains("  AGE  IPMI       PROFILE      ATTEMPT  BATCH  ") && header.ends_with("  UPDATED  MESSAGE"), "{wide}");
    assert!(wide.contains(&format!("60m  10.0.0.11  gpu-default  3        {BATCH}  10m      found 7 GPUs [2J , expected 8 y")), "{wide}");
    assert!(!wide.contains('\x07') && wide.trim_end().ends_with('…'), "{wide}");
}

#[test]
fn the_created_table_has_id_hostname_ipmi_state_stage() {
    let mut o = failed();
    o["state"] = "pending".into();
    o["stage"] = "create_or_find".into();
    assert_eq!(
        render_created(&[decoded(&o)]),
        format!(
            "ID                                    HOSTNAME  IPMI       STATE    STAGE\n{ID}  gpu-a-01  10.0.0.11  pending  create_or_find\n"
        )
    );
}

#[test]
fn the_batch_summary_counts_states_in_lifecycle_order() {
    let b: BatchJson = decode(
        "/v1/maas/onboardings/batches/x",
        &json!({"batchId": BATCH, "site": "dc1", "total": 12, "onboardings": [],
                "counts": {"failed_retryable": 1, "completed": 3, "running": 7, "cancelled": 0, "pending": 1}}),
    )
    .expect("decode");
    assert_eq!(
        render_batch_summary(&b),
        format!("Batch {BATCH} (site dc1): 12 onboardings: pending 1, running 7, completed 3, failed_retryable 1\n")
    );
    let v = json!({"batchId": "b\x1b", "site": "", "total": 0, "counts": {}, "onboardings": []});
    let empty: BatchJson = decode("/v1/maas/onboardings/batches/x", &v).expect("an empty batch");
    assert_eq!(render_batch_summary(&empty), "Batch b : 0 onboardings: none\n");
}

#[test]
fn describe_shows_everything_of_a_failed_onboarding_cleaned() {
    let out = render_describe(&decoded(&failed()));
    for needle in [
        &format!("Onboarding:    {ID}\n"),
        "Hostname:      gpu-a-01\n",
        "IPMI:          10.0.0.11\n",
        "Site:          dc1\n",
        "Profile:       gpu-default\n",
        "SKU:           hgx-h100\n",
        &format!("Batch:         {BATCH}\n"),
        "State:         failed_manual_intervention\n",
        "Stage:         commission (3/5)\n",
        "Attempt:       3\n",
        "MAAS system:   abc123\n",
        "Host:          -\n",
        "Failure class: hardware_mismatch\n",
        "Message:       found 7 GPUs [2J , expected 8 yyy",
        "Next action:   reseat the GPU tray, then retry\n",
        "Diagnostics:\n  MAAS status: Failed commissioning\n  Power:       on\n  IPs:         10.1.0.5, fd00::5\n",
        "  Upstream:    lspci: 7 devices   ]0;pwned  end\n",
        "Requester:     alice (admin)\n",
        "Started:       2030-01-01T00:00:05Z\nCompleted:     -\nUpdated:       2030-01-01T00:50:00Z\n",
        "Stages:\n     1. create_or_find\n     2. power_check\n  -> 3. commission\n     4. verify_sku\n     5. deploy\n",
        "Events:\n  AT                    STAGE           ATTEMPT  STATUS     DETAILS\n",
        "  2030-01-01T00:49:00Z  commission      3        failed     7 of 8 GPUs\n",
    ] {
        assert!(out.contains(needle), "{needle:?} in\n{out}");
    }
    assert!(!out.chars().any(|c| c.is_control() && c != '\n'), "no control characters but newlines:\n{out}");
    let message = out.lines().find(|l| l.starts_with("Message:")).expect("message");
    assert_eq!(message.chars().count(), 15 + TEXT_CHARS + 1, "bounded, then …: {message}");
    assert!(!out.contains("PXE MAC:"), "only when the coordinator reports it");
    // With a stage index out of range, the current stage is found by name.
    let mut v = failed();
    v["stageIndex"] = 9.into();
    v["stage"] = "verify_sku".into();
    v["pxeMac"] = "aa:bb:cc:dd:ee:ff".into();
    let out = render_describe(&decoded(&v));
    assert!(out.contains("Stage:         verify_sku (4/5)\n") && out.contains("  -> 4. verify_sku\n"), "{out}");
    assert!(out.contains("PXE MAC:       aa:bb:cc:dd:ee:ff\n"), "{out}");
}

#[test]
fn an_action_prints_the_new_state_and_the_message() {
    let mut o = failed();
    o["state"] = "running".into();
    let v = json!({"onboarding": o, "message": "retrying commission (attempt 4)\x1b[2J", "extra": true});
    let a: ActionJson = decode("/v1/maas/onboardings/x/retry_stage", &v).expect("decode");
    assert_eq!(render_action(&a), format!("{ID} running (stage commission): retrying commission (attempt 4) [2J\n"));
    let json = pretty(&v).expect("pretty");
    assert!(json.contains("\"extra\"") && json.contains("\"futureField\""), "unknown fields pass through -o json: {json}");
}

#[test]
fn adopt_can_name_the_machine_and_only_adopt() {
    let body = action_body(Action::AdoptObservedState, "decoy gone", Some("4y3h7r")).expect("body");
    assert_eq!(body, serde_json::json!({"reason": "decoy gone", "systemId": "4y3h7r"}));
    assert!(action_body(Action::RetryStage, "r", Some("4y3h7r")).is_err());
    assert!(action_body(Action::AdoptObservedState, "r", Some("a b;rm")).is_err());
    assert_eq!(action_body(Action::Rerun, "r", None).expect("body"), serde_json::json!({"reason": "r"}));
}
