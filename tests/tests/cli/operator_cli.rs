//! The operator's read verbs of `drover` as an operator runs them — `get`, `describe`,
//! `events --follow`, `explain host`, `--watch`, the config file — the real binary against a
//! real coordinator over mutual TLS, with simulated agents rolling the example release.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use drover_engine::app::Clock as _;
use drover_proto::keys::KeySigner;
use drover_proto::publish::PublishRequest;
use drover_proto::release::{ReleaseParams, build_release};
use drover_proto::resolve::ReleaseMeta;
use drover_proto::spec::FleetSpec;
use drover_proto::states::RolloutState;
use drover_tests::sim_agent::{Behaviour, SimAgent, step_all};
use drover_tests::{Harness, workspace_binary};
use ed25519_dalek::SigningKey;
use serde_json::{Value, json};

const FLEET: &[u8] = include_bytes!("../../../examples/fleet.json");

use drover_tests::output_text as text;

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `drover args` as the viewer; it must succeed.
async fn ok(h: &Harness, args: &[&str]) -> String {
    let out = h.drover_as(&h.viewer, args).await;
    assert!(out.status.success(), "drover {args:?}: {}", text(&out));
    stdout(&out)
}

/// Runs `drover args -o json` as the viewer; its JSON.
async fn json_of(h: &Harness, args: &[&str]) -> Value {
    let mut full = args.to_vec();
    full.extend(["-o", "json"]);
    let out = ok(h, &full).await;
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("drover {full:?}: not JSON ({e}): {out}"))
}

/// Runs `drover args` as the viewer; it must exit `code`.
async fn exits(h: &Harness, args: &[&str], code: i32) -> Output {
    let out = h.drover_as(&h.viewer, args).await;
    assert_eq!(out.status.code(), Some(code), "drover {args:?}: {}", text(&out));
    out
}

/// The example fleet's hosts plus `spare-01` (outside every channel) as healthy simulated
/// agents, checked in once; the example release published and planned once: `infra@c0ffee`
/// Active with infra-01 dispatched, `gpu` waiting behind it.
async fn started() -> (Harness, Vec<SimAgent>) {
    let h = Harness::start_with_long_poll(1).await;
    let spec: Value = serde_json::from_slice(FLEET).expect("json");
    let mut names: Vec<String> = spec["hosts"].as_object().expect("hosts").keys().cloned().collect();
    names.push("spare-01".to_owned());
    let agents = h.sim_agents(&names, |_| Behaviour::Healthy);
    let (agents, _) = step_all(agents, h.clock.now()).await;
    let params = ReleaseParams { meta: ReleaseMeta { ci_commit: "c0ffee".into(), created_at: h.clock.now() }, version: 1, previous: None };
    let files = build_release(&FleetSpec::from_json(FLEET).expect("spec"), &params, &[KeySigner::new(SigningKey::from_bytes(&[9u8; 32]))])
        .expect("release");
    let body = serde_json::to_string(&PublishRequest::from_files(&files, None).expect("utf-8")).expect("json");
    let (code, out) = h.call(Some(&h.admin), "POST", "/v1/releases", Some(&body)).await;
    assert_eq!(code, "201", "{out}");
    let app = h.running.app.clone();
    app.executor.tick_now(&app).await.expect("tick");
    (h, agents)
}

/// Steps agents and ticks until every rollout has converged, advancing the clock when a round
/// changes nothing (soak times). Bounded.
async fn converge(h: &Harness, mut agents: Vec<SimAgent>) {
    let app = h.running.app.clone();
    for _ in 0..200 {
        let (next, handled) = step_all(agents, h.clock.now()).await;
        agents = next;
        let out = app.executor.tick_now(&app).await.expect("tick");
        let states: Vec<RolloutState> = app.store.list_rollouts(&Default::default()).expect("rollouts").iter().map(|r| r.state).collect();
        if states.len() == 2 && states.iter().all(|s| *s == RolloutState::Converged) {
            return;
        }
        if handled == 0 && out.plan.actions.is_empty() {
            h.clock.advance(300);
        }
    }
    panic!("the example release did not converge");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_and_describe_every_kind_of_object() {
    let (h, _agents) = started().await;
    let app = h.running.app.clone();
    let spare = h.get_json("/v1/hosts").await["items"].as_array().expect("items").iter().find(|x| x["hostname"] == "spare-01").cloned();
    let spare_id = spare.expect("spare-01")["id"].as_str().expect("id").to_owned();
    let (code, job) = h
        .post_json(
            &format!("/v1/hosts/{spare_id}/decommission"),
            &json!({ "mode": "storage_cleanup", "storage": "local", "reason": "between tenants" }),
        )
        .await;
    assert_eq!(code, "201", "{job}");
    let job_id = job["jobId"].as_str().expect("job id").to_owned();
    app.executor.tick_now(&app).await.expect("tick");

    // Hosts: a table with a header in capitals, one aligned row per host; JSON across pages.
    let table = ok(&h, &["get", "hosts"]).await;
    let header = table.lines().next().expect("header");
    assert!(header.starts_with("NAME") && header.contains("STATE") && header.contains("LAST-CHECKIN"), "{table}");
    assert_eq!(table.lines().count(), 7, "{table}");
    let row = table.lines().find(|l| l.starts_with("gpu-a-01 ")).expect("gpu-a-01 row");
    assert!(row.contains("active") && row.contains("yes"), "{row}");
    assert_eq!(row.find("active"), header.find("STATE"), "columns align:\n{table}");
    let wide = ok(&h, &["get", "hosts", "-o", "wide"]).await;
    assert!(wide.lines().next().expect("header").contains("AGENT") && wide.contains(&spare_id), "{wide}");
    let hosts = json_of(&h, &["get", "hosts", "--page-size", "2"]).await;
    let mut names: Vec<&str> = hosts.as_array().expect("array").iter().filter_map(|x| x["hostname"].as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["gpu-a-01", "gpu-a-02", "gpu-b-01", "gpu-b-02", "infra-01", "spare-01"], "every page merged");
    assert_eq!(json_of(&h, &["get", "hosts", "--limit", "2"]).await.as_array().map(Vec::len), Some(2));
    assert_eq!(json_of(&h, &["get", "hosts", "--state", "retired"]).await, json!([]));

    // Rollouts.
    let rollouts = ok(&h, &["get", "rollouts"]).await;
    assert!(
        rollouts.starts_with("ROLLOUT") && rollouts.lines().any(|l| l.starts_with("infra@c0ffee") && l.contains("Active")),
        "{rollouts}"
    );
    let only_gpu = json_of(&h, &["get", "rollouts", "--channel", "infra"]).await;
    assert_eq!(only_gpu[0]["rolloutId"], "infra@c0ffee", "{only_gpu}");

    // Jobs and tasks, filtered by hostname.
    let jobs = ok(&h, &["get", "jobs", "--host", "spare-01"]).await;
    assert!(jobs.starts_with("JOB") && jobs.contains(&job_id) && jobs.contains("storage_cleanup") && jobs.contains("spare-01"), "{jobs}");
    assert!(ok(&h, &["get", "jobs", "-o", "wide"]).await.contains("HOST-ID"));
    assert_eq!(json_of(&h, &["get", "jobs", "--host", "infra-01"]).await, json!([]));
    let tasks = ok(&h, &["get", "tasks", "--host", "spare-01"]).await;
    assert!(tasks.starts_with("TASK") && tasks.lines().nth(1).is_some_and(|l| l.contains("spare-01")), "{tasks}");
    let tasks = json_of(&h, &["get", "tasks", "--job", &job_id]).await;
    assert_eq!(tasks.as_array().map(Vec::len), Some(1), "{tasks}");

    // Events: every page merged, and the same through `drover events`.
    let (_, all) = h.call(Some(&h.viewer), "GET", "/v1/events?limit=500", None).await;
    let all: Value = serde_json::from_str(&all).expect("json");
    let events = json_of(&h, &["get", "events", "--page-size", "3"]).await;
    assert_eq!(events, all["items"], "every page merged, in order");
    let table = ok(&h, &["events", "--rollout", "infra@c0ffee"]).await;
    assert!(table.starts_with("ID") && table.contains("rollout/infra@c0ffee"), "{table}");
    let first = events[0]["id"].as_i64().expect("id").to_string();
    let after = json_of(&h, &["events", "--since", &first]).await;
    assert_eq!(after.as_array().map(Vec::len), Some(events.as_array().expect("array").len() - 1));

    // Describe: sections for people, the coordinator's JSON with -o json; hosts by name or id.
    let host = ok(&h, &["describe", "host", "spare-01"]).await;
    for needle in ["Name:          spare-01\n", "State:         active\n", "Certificates:\n", "Jobs:\n", "Events (latest"] {
        assert!(host.contains(needle), "{needle:?} in\n{host}");
    }
    assert!(host.contains(&job_id), "the host's job is listed:\n{host}");
    assert_eq!(json_of(&h, &["describe", "host", &spare_id]).await["hostname"], "spare-01");
    let rollout = ok(&h, &["describe", "rollout", "infra@c0ffee"]).await;
    for needle in
        ["Rollout:       infra@c0ffee\n", "State:         Active\n", "Waves:\n", "  wave 0  [", "Hosts:\n", "infra-01", "Events (latest"]
    {
        assert!(rollout.contains(needle), "{needle:?} in\n{rollout}");
    }
    assert_eq!(json_of(&h, &["describe", "rollout", "infra@c0ffee"]).await["hosts"][0]["hostname"], "infra-01");
    let job = ok(&h, &["describe", "job", &job_id]).await;
    assert!(job.contains("Stages:") && job.contains("spare-01"), "{job}");
    assert_eq!(json_of(&h, &["describe", "job", &job_id]).await["jobId"], job_id.as_str());

    // Bad input.
    let out = exits(&h, &["describe", "host", "no-such-host"], 65).await;
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown host \"no-such-host\""), "{}", text(&out));
    exits(&h, &["get", "jobs", "--host", "no-such-host"], 65).await;
    exits(&h, &["get", "hosts", "-o", "yaml"], 64).await;
    // A rollout is named by its id, a unique prefix of it or its channel: a name that fits
    // none is 65, one that could never be any of them 64.
    let out = exits(&h, &["describe", "rollout", "not-a-rollout"], 65).await;
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown rollout \"not-a-rollout\""), "{}", text(&out));
    exits(&h, &["describe", "rollout", "not a/rollout"], 64).await;
    exits(&h, &["describe", "rollout", "nope@beef"], 65).await;
    exits(&h, &["get", "hosts", "--state", "sideways"], 65).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_a_waiting_host_and_a_converged_one_and_watch_progress() {
    let (h, agents) = started().await;
    let trust = h.trust.0.display().to_string();

    // gpu waits behind infra (a channel edge): the planner's reason is shown.
    let out = ok(&h, &["explain", "host", "gpu-a-01"]).await;
    for needle in
        ["Channel:     gpu\n", "Target:      gpu@c0ffee wave 0 ", "channel edge: waits for channel infra", "coordinator's trust.json"]
    {
        assert!(out.contains(needle), "{needle:?} in\n{out}");
    }
    let x = json_of(&h, &["explain", "host", "gpu-a-01", "--trust", &trust]).await;
    assert_eq!((x["onTarget"].as_bool(), x["channel"].as_str()), (Some(false), Some("gpu")), "{x}");
    let x = json_of(&h, &["explain", "host", "infra-01"]).await;
    assert_eq!(x["rollout"]["hostState"], "Activating", "{x}");
    let x = json_of(&h, &["explain", "host", "spare-01"]).await;
    assert!(x["channel"].is_null() && x["verdict"].as_str().is_some_and(|v| v.contains("in no channel")), "{x}");
    let out = exits(&h, &["explain", "host", "no-such-host"], 65).await;
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown host"), "{}", text(&out));

    // Watching a live rollout that does not finish in time: exit 75, one line per change.
    let out = exits(&h, &["describe", "rollout", "infra@c0ffee", "--watch", "--timeout", "1"], 75).await;
    let lines = stdout(&out);
    assert!(lines.contains("infra@c0ffee Active | wave 0: Activating=1"), "{lines}");
    assert!(!lines.contains('\x1b'), "no escape codes when stdout is not a terminal: {lines:?}");

    converge(&h, agents).await;
    let x = json_of(&h, &["explain", "host", "infra-01"]).await;
    assert_eq!((x["onTarget"].as_bool(), x["rollout"]["hostState"].as_str()), (Some(true), Some("Converged")), "{x}");
    let out = ok(&h, &["explain", "host", "gpu-b-02"]).await;
    assert!(out.contains("Verdict:     on target: Converged in gpu@c0ffee"), "{out}");

    // Finished rollouts end the watch at once.
    let out = ok(&h, &["rollout", "status", "gpu@c0ffee", "--watch", "--timeout", "30"]).await;
    assert!(out.contains("gpu@c0ffee Converged | wave 0: Converged="), "{out}");
    let out = ok(&h, &["get", "rollouts", "--watch", "--timeout", "30"]).await;
    assert!(out.contains("no rollouts in progress"), "{out}");
    exits(&h, &["rollout", "halt", "gpu@c0ffee", "--reason", "x", "--watch"], 64).await;
}

/// The `drover` binary with no `DROVER_*` variables and `HOME`/`XDG_CONFIG_HOME` under `dir`.
fn bare_drover(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(workspace_binary("drover"));
    cmd.args(args).stdin(Stdio::null()).env("HOME", dir).env("XDG_CONFIG_HOME", dir.join("xdg"));
    for var in ["DROVER_COORDINATOR", "DROVER_CERT", "DROVER_KEY", "DROVER_CA", "DROVER_CONFIG"] {
        cmd.env_remove(var);
    }
    cmd
}

async fn run(cmd: Command) -> Output {
    let mut cmd = cmd;
    tokio::task::spawn_blocking(move || cmd.output().expect("drover runs")).await.expect("blocking task")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_config_file_replaces_the_flags() {
    let h = Harness::start().await;
    h.create_host("cfg-01").await;
    let dir = h.dir.path();
    let name = |p: &PathBuf| p.file_name().expect("name").to_str().expect("utf8").to_owned();
    // Relative paths, resolved against the file's directory (the harness's, where they are).
    let explicit = dir.join("drover.toml");
    let body = format!(
        "coordinator = \"{}\"\ncert = \"{}\"\nkey = \"{}\"\nca = \"{}\"\n",
        h.url,
        name(&h.viewer.0),
        name(&h.viewer.1),
        name(&h.ca)
    );
    std::fs::write(&explicit, &body).expect("write");
    let out = run(bare_drover(dir, &["get", "hosts", "--config", explicit.to_str().expect("utf8")])).await;
    assert!(out.status.success() && stdout(&out).contains("cfg-01"), "{}", text(&out));
    let mut cmd = bare_drover(dir, &["get", "hosts"]);
    cmd.env("DROVER_CONFIG", &explicit);
    let out = run(cmd).await;
    assert!(out.status.success() && stdout(&out).contains("cfg-01"), "{}", text(&out));

    // The default file under XDG_CONFIG_HOME, absolute paths; a flag wins over the file.
    let xdg = dir.join("xdg").join("drover");
    std::fs::create_dir_all(&xdg).expect("mkdir");
    let absolute = |p: &PathBuf| p.display().to_string();
    let default = format!(
        "coordinator = \"https://127.0.0.1:1\"\ncert = \"{}\"\nkey = \"{}\"\nca = \"{}\"\n",
        absolute(&h.viewer.0),
        absolute(&h.viewer.1),
        absolute(&h.ca)
    );
    std::fs::write(xdg.join("config.toml"), default).expect("write");
    let out = run(bare_drover(dir, &["get", "hosts", "-o", "json"])).await;
    assert_eq!(out.status.code(), Some(69), "the file's coordinator is used, and is not there: {}", text(&out));
    let out = run(bare_drover(dir, &["get", "hosts", "-o", "json", "--coordinator", &h.url])).await;
    assert!(out.status.success(), "{}", text(&out));
    let hosts: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(hosts[0]["hostname"], "cfg-01");

    // A malformed file names itself and the key; a missing explicit one is 66.
    std::fs::write(&explicit, format!("{body}certificate = \"x\"\n")).expect("write");
    let out = run(bare_drover(dir, &["get", "hosts", "--config", explicit.to_str().expect("utf8")])).await;
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(65), "{}", text(&out));
    assert!(err.contains("drover.toml") && err.contains("certificate"), "{err}");
    let out = run(bare_drover(dir, &["get", "hosts", "--config", "/nonexistent/drover.toml"])).await;
    assert_eq!(out.status.code(), Some(66), "{}", text(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_follow_prints_new_events_as_they_happen() {
    let h = Harness::start().await;
    h.create_host("early-01").await;
    let (cert, key) = &h.viewer;
    let mut child = Command::new(workspace_binary("drover"))
        .args(["events", "--follow", "--interval", "1", "--coordinator", &h.url])
        .args(["--cert", cert.to_str().expect("utf8"), "--key", key.to_str().expect("utf8"), "--ca", h.ca.to_str().expect("utf8")])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("drover events --follow starts");
    let (tx, lines) = mpsc::channel();
    let out = child.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let wait_for = |what: &str, want: &dyn Fn(&str) -> bool| -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let mut seen = Vec::new();
        while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
            match lines.recv_timeout(left) {
                Ok(line) if want(&line) => return line,
                Ok(line) => seen.push(line),
                Err(_) => break,
            }
        }
        panic!("no line with {what} within 60 s; saw {seen:?}");
    };
    let header = wait_for("the header", &|l| l.starts_with("ID"));
    assert!(header.contains("KIND") && header.contains("MESSAGE"), "{header}");
    wait_for("early-01's creation", &|l| l.contains("host.created") && l.contains("early-01"));
    // A host created while following shows up on its own line, by name.
    h.create_host("late-01").await;
    let line = wait_for("late-01's creation", &|l| l.contains("host.created") && l.contains("late-01"));
    assert!(line.contains("host/late-01"), "{line}");
    // Ctrl-C ends it cleanly.
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).expect("SIGINT");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break Some(status);
        }
        if std::time::Instant::now() > deadline {
            break None;
        }
        std::thread::park_timeout(Duration::from_millis(50));
    };
    let Some(status) = status else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("drover events --follow ignored SIGINT for 30 s");
    };
    assert_eq!(status.code(), Some(0), "SIGINT ends the follow with exit 0: {status:?}");
}
