//! `--wait` as a CI gate or an operator types it: the real `drover` binary against a real
//! coordinator over mutual TLS, with simulated agents rolling a release or running a job while
//! `drover` waits. `release publish --wait` exits 0 once its rollouts converge, 2 when one is
//! halted, 75 on timeout; `get rollouts --watch --release` waits for rollouts not yet open;
//! `decommission --mode full` asks first (64 without a terminal and `--yes`) and `--dry-run`
//! starts nothing; a job action with `--wait` returns once the job is finished.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use drover_engine::app::Clock as _;
use drover_proto::keys::KeySigner;
use drover_proto::release::{ReleaseParams, build_release};
use drover_proto::resolve::ReleaseMeta;
use drover_proto::spec::FleetSpec;
use drover_proto::states::RolloutState;
use drover_tests::Harness;
use drover_tests::sim_agent::{Behaviour, SimAgent, step_all};
use ed25519_dalek::SigningKey;

const FLEET: &[u8] = include_bytes!("../../../examples/fleet.json");

use drover_tests::output_text as text;

/// The example fleet's hosts as healthy simulated agents, checked in once.
async fn fleet() -> (Harness, Vec<SimAgent>) {
    let h = Harness::start_with_long_poll(1).await;
    let spec: serde_json::Value = serde_json::from_slice(FLEET).expect("json");
    let names: Vec<String> = spec["hosts"].as_object().expect("hosts").keys().cloned().collect();
    let agents = h.sim_agents(&names, |_| Behaviour::Healthy);
    let (agents, _) = step_all(agents, h.clock.now()).await;
    (h, agents)
}

/// The example release (version 1, `c0ffee`) written to a directory as `drover release` does.
fn release_dir(h: &Harness) -> PathBuf {
    let params = ReleaseParams { meta: ReleaseMeta { ci_commit: "c0ffee".into(), created_at: h.clock.now() }, version: 1, previous: None };
    let files = build_release(&FleetSpec::from_json(FLEET).expect("spec"), &params, &[KeySigner::new(SigningKey::from_bytes(&[9u8; 32]))])
        .expect("release");
    let dir = h.dir.path().join("release");
    for (path, bytes) in &files.files {
        let to = dir.join(path);
        std::fs::create_dir_all(to.parent().expect("parent")).expect("mkdir");
        std::fs::write(&to, bytes).expect("write");
    }
    dir
}

fn arg(p: &Path) -> String {
    p.to_str().expect("utf-8 path").to_owned()
}

fn rollout_states(h: &Harness) -> Vec<(String, RolloutState)> {
    let rows = h.running.app.store.list_rollouts(&Default::default()).expect("rollouts");
    rows.iter().map(|r| (r.rollout_id.to_string(), r.state)).collect()
}

/// Steps agents and ticks the executor until both example rollouts converge, advancing the
/// clock when a round changes nothing (soak times). Bounded.
async fn converge(h: &Harness, mut agents: Vec<SimAgent>) {
    let app = h.running.app.clone();
    for _ in 0..200 {
        let (next, handled) = step_all(agents, h.clock.now()).await;
        agents = next;
        let out = app.executor.tick_now(&app).await.expect("tick");
        let states = rollout_states(h);
        if states.len() == 2 && states.iter().all(|(_, s)| *s == RolloutState::Converged) {
            return;
        }
        if handled == 0 && out.plan.actions.is_empty() {
            h.clock.advance(300);
        }
    }
    panic!("the example release did not converge");
}

/// Ticks the executor until rollout `id` is open (the release must be published first, by the
/// `drover` running beside this). Bounded; polls every 100 ms.
async fn until_open(h: &Harness, id: &str) {
    let app = h.running.app.clone();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !rollout_states(h).iter().any(|(r, _)| r == id) {
        assert!(Instant::now() < deadline, "{id} never opened");
        if app.store.latest_release_version().expect("store").is_some() {
            app.executor.tick_now(&app).await.expect("tick");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_wait_exits_0_once_the_release_converges_and_75_when_it_does_not_in_time() {
    let (h, agents) = fleet().await;
    let dir = arg(&release_dir(&h));

    // Nothing is in progress yet: a plain --watch says so instead of passing silently.
    let out = h.drover_as(&h.viewer, &["get", "rollouts", "--watch", "--timeout", "5"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing was watched"), "{}", text(&out));

    // The agents are not stepped: nothing converges within a second.
    let out = h.drover_as(&h.admin, &["release", "publish", &dir, "--wait", "--timeout", "1"]).await;
    assert_eq!(out.status.code(), Some(75), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("still not finished after 1 s"), "{}", text(&out));

    // Watching the published release waits for rollouts that are not open yet, then for
    // their convergence, while the agents roll it.
    let (out, ()) =
        tokio::join!(h.drover_as(&h.viewer, &["get", "rollouts", "--watch", "--release", "1", "--timeout", "300"]), converge(&h, agents));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let lines = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(lines.contains("infra@c0ffee Converged") && lines.contains("gpu@c0ffee Converged"), "{lines}");
    // Each change once: no line repeats.
    let mut seen: Vec<&str> = lines.lines().collect();
    let before = seen.len();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), before, "{lines}");

    // A release that was never published is refused, naming the latest.
    let out = h.drover_as(&h.viewer, &["get", "rollouts", "--watch", "--release", "2", "--timeout", "5"]).await;
    assert_eq!(out.status.code(), Some(65), "release 2 was never published: {}", text(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_wait_converges_with_0_and_a_halt_while_waiting_exits_2() {
    let (h, agents) = fleet().await;
    let dir = arg(&release_dir(&h));
    let publish = ["release", "publish", &dir, "--wait", "--timeout", "300"];
    let (out, ()) = tokio::join!(h.drover_as(&h.admin, &publish), converge(&h, agents));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(stdout.contains("published release version 1"), "{stdout}");
    assert!(stdout.contains("gpu@c0ffee Converged") && stdout.contains("every rollout of release version 1 converged"), "{stdout}");

    // A second harness: the rollout is halted by another operator while publish waits.
    let (h, _agents) = fleet().await;
    let dir = arg(&release_dir(&h));
    let halt = async {
        until_open(&h, "infra@c0ffee").await;
        let out = h.drover_as(&h.admin, &["rollout", "halt", "infra@c0ffee", "--reason", "bad metrics"]).await;
        assert!(out.status.success(), "{}", text(&out));
    };
    let publish = ["release", "publish", &dir, "--wait", "--timeout", "300"];
    let (out, ()) = tokio::join!(h.drover_as(&h.admin, &publish), halt);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("infra@c0ffee Halted"), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("did not succeed"), "{}", text(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_decommission_asks_first_and_a_dry_run_starts_nothing() {
    let h = Harness::start_with_long_poll(1).await;
    let agents = h.sim_agents(&["gpu-wait-01".to_owned()], |_| Behaviour::Healthy);
    let _agents = step_all(agents, h.clock.now()).await;
    let jobs = || h.running.app.store.list_jobs(&Default::default()).expect("jobs").len();

    // drover's stdin is not a terminal here: without --yes nothing is sent.
    let out = h.drover_as(&h.admin, &["decommission", "gpu-wait-01", "--mode", "full", "--reason", "end of life"]).await;
    assert_eq!(out.status.code(), Some(64), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("pass --yes"), "{}", text(&out));
    assert_eq!(jobs(), 0, "no job was started");

    let out = h.drover_as(&h.admin, &["decommission", "gpu-wait-01", "--mode", "full", "--dry-run", "--reason", "end of life"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(stdout.contains("would start a full_decommission job on gpu-wait-01"), "{stdout}");
    assert!(stdout.contains("1. cordon") && stdout.contains("nothing was started"), "{stdout}");
    assert!(stdout.contains("maas_workflow (nothing to do: the host has no MAAS binding)"), "{stdout}");
    assert_eq!(jobs(), 0, "a dry run starts no job");
    let audits = || h.running.app.store.list_audit(&Default::default()).expect("audit").len();
    let audited = audits();
    let state = h.get_json("/v1/hosts").await["items"][0]["state"].as_str().expect("state").to_owned();
    assert!(stdout.contains(&format!("now {state}\n")), "the host's state as the coordinator has it: {stdout}");

    // The coordinator's own checks answer a dry run: a host another job holds is refused
    // the way the real request would be, and still nothing is written.
    let held = h.drover_as(&h.admin, &["decommission", "gpu-wait-01", "--mode", "soft-reset", "--reason", "turnover"]).await;
    assert_eq!(held.status.code(), Some(0), "{}", text(&held));
    let audited = audited + 1;
    let out = h.drover_as(&h.admin, &["decommission", "gpu-wait-01", "--mode", "full", "--dry-run", "--reason", "end of life"]).await;
    assert_eq!(out.status.code(), Some(65), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("held by job"), "{}", text(&out));
    assert_eq!((jobs(), audits()), (1, audited), "a refused dry run writes nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decommission_and_job_actions_with_wait_return_once_the_job_is_finished() {
    let h = Harness::start_with_long_poll(1).await;
    let app = h.running.app.clone();
    let agents = h.sim_agents(&["gpu-wait-02".to_owned()], |_| Behaviour::Healthy);
    let (agents, _) = step_all(agents, h.clock.now()).await;

    // Runs the job engine and the agent until every job has completed. Bounded.
    let drive = |mut agents: Vec<SimAgent>| {
        let app = app.clone();
        let h = &h;
        async move {
            let deadline = Instant::now() + Duration::from_secs(120);
            loop {
                (agents, _) = step_all(agents, h.clock.now()).await;
                app.executor.tick_now(&app).await.expect("tick");
                let jobs = app.store.list_jobs(&Default::default()).expect("jobs");
                if !jobs.is_empty() && jobs.iter().all(|j| j.state.as_str() == "completed") {
                    return agents;
                }
                assert!(Instant::now() < deadline, "the job never finished");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };

    let cleanup = ["decommission", "gpu-wait-02", "--mode", "storage-cleanup", "--storage", "local", "--reason", "between tenants"];
    let mut args = cleanup.to_vec();
    args.extend(["--wait", "--timeout", "300"]);
    let (out, agents) = tokio::join!(h.drover_as(&h.admin, &args), drive(agents));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let job_id = stdout.split_whitespace().next().expect("job id").to_owned();
    assert!(stdout.lines().last().is_some_and(|l| l.starts_with(&format!("{job_id} completed"))), "{stdout}");
    // Each change once: after the `JOB_ID KIND STATE` line, no progress line repeats.
    let mut progress: Vec<&str> = stdout.lines().skip(1).collect();
    let before = progress.len();
    progress.sort_unstable();
    progress.dedup();
    assert_eq!(progress.len(), before, "{stdout}");

    // A second job, frozen for a person, then resumed with --wait.
    let out = h.drover_as(&h.admin, &cleanup).await;
    assert!(out.status.success(), "{}", text(&out));
    let second = String::from_utf8_lossy(&out.stdout).split_whitespace().next().expect("job id").to_owned();
    let out = h.drover_as(&h.admin, &["job", "mark-manual", &second, "--reason", "look first", "--wait", "--timeout", "30"]).await;
    assert_eq!(out.status.code(), Some(2), "a job frozen for a person did not succeed: {}", text(&out));
    let resume = ["job", "resume", &second, "--reason", "looked", "--wait", "--timeout", "300"];
    let (out, _agents) = tokio::join!(h.drover_as(&h.admin, &resume), drive(agents));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("{second} completed")), "{}", text(&out));
    let job = h.get_json(&format!("/v1/jobs/{second}")).await;
    assert_eq!(job["state"], "completed", "{job}");
}
