//! `force_release` against a scripted scheduler webhook, through the real coordinator (real
//! mTLS, real SQLite, the real executor) and a simulated agent that enrolls the host: the
//! coordinator asks the scheduler how many allocations are still attached and goes to manual
//! intervention while any remain; an unusable answer (a 500, a malformed body) is retried and
//! never taken as zero; without a scheduler, `forceRelease` fails closed.
//!
//! The test's clock drives the polls: the executor asks at most once per
//! `jobs.scheduler_poll_secs` (1 s here), so each `advance(1)` and tick is one question.

use std::sync::Arc;

use drover_engine::app::{AppState, Clock as _};
use drover_tests::Harness;
use drover_tests::scheduler::{Answer, FakeScheduler};
use drover_tests::sim_agent::{Behaviour, step_all};
use serde_json::{Value, json};
use uuid::Uuid;

/// A coordinator (with `scheduler`'s webhook, when given, polled every second) and one active
/// host.
async fn start(scheduler: Option<&FakeScheduler>, hostname: &str) -> (Harness, Uuid) {
    let url = scheduler.map(|s| s.url.clone());
    let h = Harness::start_with_config(|_, c| {
        c.jobs.scheduler_webhook_url = url;
        c.jobs.scheduler_poll_secs = 1;
    })
    .await;
    let agents = h.sim_agents(&[hostname.to_owned()], |_| Behaviour::Healthy);
    let (agents, _) = step_all(agents, h.clock.now()).await;
    let host = agents[0].host_id;
    assert_eq!(h.get_json(&format!("/v1/hosts/{host}")).await["state"], "active");
    (h, host)
}

/// Starts a full decommission of `host`; returns the job id.
async fn decommission(h: &Harness, host: Uuid, force_release: bool) -> String {
    let (code, job) = h
        .post_json(
            &format!("/v1/hosts/{host}/decommission"),
            &json!({ "mode": "full", "forceRelease": force_release, "reason": "end of life" }),
        )
        .await;
    assert_eq!(code, "201", "{job}");
    job["jobId"].as_str().expect("jobId").to_owned()
}

async fn tick(app: &Arc<AppState>) {
    app.executor.tick_now(app).await.expect("tick");
}

async fn job(h: &Harness, id: &str) -> Value {
    h.get_json(&format!("/v1/jobs/{id}")).await
}

fn show(v: &Value) -> String {
    serde_json::to_string_pretty(&json!({ "state": v["state"], "stage": v["stage"], "message": v["message"], "history": v["history"] }))
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allocations_that_stay_attached_stop_the_job_for_an_operator_naming_the_count() {
    let scheduler = FakeScheduler::start(vec![Answer::count(1)]);
    let (h, host) = start(Some(&scheduler), "gpu-fr-01").await;
    let app = h.running.app.clone();
    let id = decommission(&h, host, true).await;
    tick(&app).await;
    for polls in 1..=3 {
        assert_eq!(scheduler.events("host.allocations_query").len(), polls);
        if polls < 3 {
            let v = job(&h, &id).await;
            assert_eq!((v["state"].as_str(), v["stage"].as_str()), (Some("running"), Some("force_release")), "{}", show(&v));
            h.clock.advance(1);
            tick(&app).await;
        }
    }
    let v = job(&h, &id).await;
    assert_eq!(v["state"], "failed_manual_intervention", "{}", show(&v));
    assert_eq!(v["stage"], "force_release");
    assert!(v.to_string().contains("ownership_conflict"), "{v}");
    assert!(v.to_string().contains("still reports 1 allocation attached after 3 polls"), "{}", show(&v));
    assert_eq!(scheduler.events("host.force_release").len(), 1, "the notice is sent once");
    // The host is cordoned and still there: nothing past force_release ran.
    let hv = h.get_json(&format!("/v1/hosts/{host}")).await;
    assert_eq!((hv["state"].as_str(), hv["schedulable"].as_bool()), (Some("active"), Some(false)), "{hv}");
    // Frozen: time passing asks nothing more.
    h.clock.advance(60);
    tick(&app).await;
    assert_eq!(scheduler.events("host.allocations_query").len(), 3);

    // The tenant's last allocation ends; the operator resumes: asked again (no second
    // notice), none remain, the job moves on to drain.
    scheduler.script(vec![Answer::count(0)]);
    let (code, v) = h.post_json(&format!("/v1/jobs/{id}/resume"), &json!({ "reason": "allocation ended by hand" })).await;
    assert_eq!(code, "200", "{v}");
    tick(&app).await;
    let v = job(&h, &id).await;
    assert_eq!((v["state"].as_str(), v["stage"].as_str()), (Some("running"), Some("drain")), "{}", show(&v));
    assert_eq!(scheduler.events("host.force_release").len(), 1);
    assert_eq!(scheduler.events("host.allocations_query").len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unusable_answer_is_retried_never_taken_as_zero() {
    // The notice is refused once, then a 500 and a malformed body to the questions, then 0.
    let scheduler = FakeScheduler::start(vec![Answer::status(500), Answer::raw("all good"), Answer::count(0)]);
    scheduler.notice_status(503);
    let (h, host) = start(Some(&scheduler), "gpu-fr-02").await;
    let app = h.running.app.clone();
    let id = decommission(&h, host, true).await;
    tick(&app).await;
    let v = job(&h, &id).await;
    assert_eq!((v["state"].as_str(), v["stage"].as_str()), (Some("running"), Some("force_release")), "{}", show(&v));
    assert!(v.to_string().contains("release notice not delivered"), "{}", show(&v));
    assert_eq!(scheduler.events("host.allocations_query").len(), 0, "nothing is asked before the notice is acknowledged");

    scheduler.notice_status(200);
    h.clock.advance(1);
    tick(&app).await;
    let v = job(&h, &id).await;
    assert_eq!((v["state"].as_str(), v["stage"].as_str()), (Some("running"), Some("force_release")), "a 500 is not zero: {}", show(&v));
    assert!(v.to_string().contains("500"), "{}", show(&v));
    assert_eq!(scheduler.events("host.force_release").len(), 2, "the refused notice was sent again");

    // Three attempts are spent (refused notice, 500, malformed): failed_retryable, not done.
    h.clock.advance(1);
    tick(&app).await;
    let v = job(&h, &id).await;
    assert_eq!((v["state"].as_str(), v["stage"].as_str()), (Some("failed_retryable"), Some("force_release")), "{}", show(&v));
    assert!(v.to_string().contains("not JSON"), "{}", show(&v));
    assert_eq!(scheduler.events("host.allocations_query").len(), 2);

    // retry_stage: a fresh budget; the scheduler now answers 0 and the job moves on.
    let (code, v) = h.post_json(&format!("/v1/jobs/{id}/retry_stage"), &json!({ "reason": "scheduler is back" })).await;
    assert_eq!(code, "200", "{v}");
    tick(&app).await;
    let v = job(&h, &id).await;
    assert_eq!((v["state"].as_str(), v["stage"].as_str()), (Some("running"), Some("drain")), "{}", show(&v));
    assert_eq!(scheduler.events("host.allocations_query").len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_force_release_attached_allocations_stop_the_job_at_once() {
    let scheduler = FakeScheduler::start(vec![Answer::raw(r#"{"allocations": [{"id": "a-17"}, {"id": "a-18"}]}"#)]);
    let (h, host) = start(Some(&scheduler), "gpu-fr-03").await;
    let app = h.running.app.clone();
    let id = decommission(&h, host, false).await;
    tick(&app).await;
    let v = job(&h, &id).await;
    assert_eq!((v["state"].as_str(), v["stage"].as_str()), (Some("failed_manual_intervention"), Some("force_release")), "{}", show(&v));
    assert!(v.to_string().contains("2 allocations still attached and forceRelease is false"), "{}", show(&v));
    assert_eq!(scheduler.events("host.force_release").len(), 0, "no release without forceRelease");
    assert_eq!(scheduler.events("host.allocations_query").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_release_without_a_scheduler_fails_closed() {
    let (h, host) = start(None, "gpu-fr-04").await;
    let app = h.running.app.clone();
    let id = decommission(&h, host, true).await;
    tick(&app).await;
    let v = job(&h, &id).await;
    assert_eq!((v["state"].as_str(), v["stage"].as_str()), (Some("failed_manual_intervention"), Some("force_release")), "{}", show(&v));
    assert!(v.to_string().contains("configuration") && v.to_string().contains("jobs.scheduler_webhook_url"), "{}", show(&v));
}
