//! How jobs show on the terminal: the jobs table ([`render_job_table`]: `drover job get`,
//! `get jobs`, a maintenance request's jobs), the host column ([`host_of`]), the full view of
//! `drover job describe` and `describe job` ([`render_describe`]), and the one line a job
//! action prints ([`render_action`]). Everything the coordinator sent passes through
//! [`clean`].

use drover_proto::api::jobs::{ActionResponse, JobDetail, JobJson};

use crate::output::{clean, table};

/// How many characters of a message a table shows.
const TABLE_MESSAGE_CHARS: usize = 60;
/// How many characters of any one coordinator string a human view shows.
const TEXT_CHARS: usize = 300;

fn or_dash(s: Option<&str>) -> &str {
    match s {
        Some(s) if !s.is_empty() => s,
        _ => "-",
    }
}

/// The host column: the hostname, else the id.
pub fn host_of(job: &JobJson) -> String {
    let name = job.hostname.as_deref().filter(|n| !n.is_empty());
    clean(or_dash(name.or(job.host_id.as_deref())), 64)
}

/// The jobs table of `drover job get`.
pub fn render_job_table(jobs: &[JobJson]) -> String {
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|j| {
            vec![
                clean(&j.job_id, 64),
                clean(&j.kind, 32),
                host_of(j),
                j.state.as_str().to_owned(),
                clean(or_dash(Some(&j.stage)), 32),
                j.attempt.to_string(),
                clean(or_dash(Some(&j.message)), TABLE_MESSAGE_CHARS),
            ]
        })
        .collect();
    table(&["JOB", "KIND", "HOST", "STATE", "STAGE", "ATTEMPT", "MESSAGE"], &rows)
}

/// The index of the current stage: `stageIndex` when it is in range, else where `stage` is.
fn current_stage(job: &JobJson) -> Option<usize> {
    Some(job.stage_index).filter(|i| *i < job.stages.len()).or_else(|| job.stages.iter().position(|x| *x == job.stage))
}

/// The human view of `drover job describe`.
pub fn render_describe(detail: &JobDetail) -> String {
    use std::fmt::Write as _;
    let job = &detail.job;
    let mut out = String::new();
    let t = |s: &str| clean(s, TEXT_CHARS);
    let mut field = |name: &str, value: String| {
        let _ = writeln!(out, "{:<15}{value}", format!("{name}:"));
    };
    field("Job", t(&job.job_id));
    field("Kind", t(&job.kind));
    let name = job.hostname.as_deref().filter(|n| !n.is_empty());
    let host = match (name, job.host_id.as_deref()) {
        (Some(n), Some(id)) => format!("{} ({})", t(n), t(id)),
        (Some(n), None) => t(n),
        (None, id) => t(or_dash(id)),
    };
    field("Host", host);
    field("State", job.state.as_str().to_owned());
    if let Some(r) = &job.request_id {
        field("Request", t(r));
    }
    field("Attempt", job.attempt.to_string());
    field("Task", t(or_dash(job.task_id.as_deref())));
    field("Failure class", t(or_dash(job.failure_class.as_deref())));
    field("Message", t(or_dash(Some(&job.message))));
    field("Requester", t(or_dash(job.requester.as_deref())));
    if let Some(e) = &job.error {
        let class = e.class.as_deref().unwrap_or("-");
        field("Last error", t(&format!("{class} at {} (attempt {}): {}", e.stage, e.attempt, e.message)));
    }
    if let Some(a) = &job.recommended_action {
        field("Next action", t(a));
    }
    let when = |at: Option<drover_proto::time::Time>| at.map_or_else(|| "-".to_owned(), |at| at.to_string());
    field("Created", when(Some(job.created_at)));
    field("Started", when(job.started_at));
    field("Completed", when(job.completed_at));
    field("Updated", when(Some(job.updated_at)));
    out.push_str("Stages:\n");
    if job.stages.is_empty() {
        out.push_str("  (none)\n");
    }
    let current = current_stage(job);
    for (i, stage) in job.stages.iter().enumerate() {
        let marker = if Some(i) == current { "->" } else { "  " };
        let _ = writeln!(out, "  {marker} {}. {}", i + 1, t(stage));
    }
    out.push_str("History:\n");
    if job.history.is_empty() {
        out.push_str("  (none)\n");
    } else {
        let rows: Vec<Vec<String>> = job
            .history
            .iter()
            .map(|h| vec![h.at.to_string(), t(&h.stage), h.attempt.to_string(), t(&h.status), t(or_dash(Some(&h.message)))])
            .collect();
        for line in table(&["AT", "STAGE", "ATTEMPT", "STATUS", "MESSAGE"], &rows).lines() {
            let _ = writeln!(out, "  {line}");
        }
    }
    out.push_str("Events:\n");
    if detail.events.is_empty() {
        out.push_str("  (none)\n");
    } else {
        let rows: Vec<Vec<String>> =
            detail.events.iter().map(|e| vec![e.at.to_string(), t(&e.kind), t(or_dash(Some(&e.message)))]).collect();
        for line in table(&["AT", "KIND", "MESSAGE"], &rows).lines() {
            let _ = writeln!(out, "  {line}");
        }
    }
    out
}

/// The one line an action prints: `JOB_ID STATE (PROGRESS_CHANGE; task TASK)`.
pub fn render_action(resp: &ActionResponse) -> String {
    let progress = if resp.outcome.progress_change.is_empty() { "no change" } else { &resp.outcome.progress_change };
    let task = if resp.outcome.task.is_empty() { "none" } else { &resp.outcome.task };
    format!("{} {} ({}; task {})\n", clean(&resp.job.job_id, 64), resp.job.state.as_str(), clean(progress, 80), clean(task, 80))
}

#[cfg(test)]
mod tests {
    use drover_proto::api::jobs::{ActionResponse, JobDetail, JobJson};

    use super::*;
    use crate::answer::decode;
    use crate::output::pretty;

    #[test]
    fn the_table_has_one_row_per_job_and_truncates_messages() {
        let job: JobJson = decode::<JobDetail>("/v1/jobs/job-7", &crate::fixtures::sample_job()).expect("decode").job;
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
        let job: JobDetail = decode("/v1/jobs/job-7", &crate::fixtures::sample_job()).expect("decode");
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
        let mut v = crate::fixtures::sample_job();
        v["stageIndex"] = 9.into();
        v["stage"] = "wipe".into();
        let out = render_describe(&decode("/v1/jobs/job-7", &v).expect("decode"));
        assert!(out.contains("  -> 3. wipe\n") && out.contains("     2. drain\n"), "{out}");
    }

    #[test]
    fn describe_shows_the_requester_the_last_error_and_the_next_action() {
        let mut v = crate::fixtures::sample_job();
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
    fn an_action_prints_the_state_progress_and_task() {
        let v = serde_json::json!({
            "job": crate::fixtures::sample_job(),
            "outcome": {"action": "retry_stage", "priorState": "failed_retryable", "newState": "running",
                        "expectedState": "failed_retryable", "progressChange": "stage drain retried", "task": "requeued task-9"}
        });
        let mut resp: ActionResponse = decode("/v1/jobs/job-7/retry_stage", &v).expect("decode");
        resp.job.state = drover_proto::states::JobState::Running;
        assert_eq!(render_action(&resp), "job-7 running (stage drain retried; task requeued task-9)\n");
        let json = pretty(&v).expect("pretty");
        assert!(json.contains("\"expectedState\"") && json.contains("\"somethingNew\""), "unknown fields pass through: {json}");
    }
}
