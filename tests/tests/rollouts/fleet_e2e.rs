//! The whole fleet end to end, with real processes only: a `drover-coordinator serve` and 20
//! `drover-agent run` processes on loopback (the devkit's [`LocalFleet`]), two channels
//! (`training`, `inference`) rolled out in three waves each.
//!
//! 1. Release 1 (generation 1, what every host already runs) converges on both channels, so
//!    release 2 has a revertable rollout to go back to.
//! 2. Release 2 (generation 2): its `inference` rollout converges; on `training` the second
//!    wave's closures are broken (they switch fine, then the enforced `node-check` probe fails),
//!    so the agent's health gate fails, the rollout's health gate (maxFailures 0) fires
//!    `rollback-and-halt`, every touched training host goes back to generation 1 and the third
//!    wave is never touched.
//! 3. A maintenance request on two inference hosts completes.
//! 4. A `full` decommission of one training host: the job completes, the agent uninstalls
//!    itself and exits, the host is deleted.
//!
//! Finally every host's lifecycle state and running closure, and the events the coordinator
//! wrote for all of it, are checked. Every wait is bounded; a failure prints the rollouts, the
//! coordinator's log and the agents' logs.

use std::collections::BTreeMap;
use std::time::Instant;

use drover_devkit::DevkitError;
use drover_devkit::fleet::{Binaries, FleetOptions, LocalFleet};
use drover_devkit::spec::{self, CiKey, FleetHost, Policy};
use drover_proto::release::ReleaseFiles;
use drover_tests::scheduler::{Answer, FakeScheduler};
use drover_tests::{wall_now, workspace_binary};
use serde_json::{Value, json};

/// Bound on every wait, in seconds.
const WAIT: u64 = 120;
const HOSTS: usize = 20;
const COMMIT_1: &str = "e2e0001";
const COMMIT_2: &str = "e2e0002";

fn rollout_id(channel: &str, commit: &str) -> String {
    format!("{channel}@{commit}")
}

/// The last `n` lines of `path`.
fn tail(path: &std::path::Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| format!("({}: {e})", path.display()));
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// What a failure prints: the rollouts with their hosts, the coordinator's log and every
/// agent's log tail.
fn diagnose(fleet: &LocalFleet) -> String {
    let mut out = String::new();
    if let Ok(list) = fleet.get("/v1/rollouts") {
        for r in list["items"].as_array().into_iter().flatten() {
            let id = r["rolloutId"].as_str().unwrap_or_default();
            let status = fleet.get(&format!("/v1/rollouts/{id}/status")).unwrap_or_else(|e| json!(e.to_string()));
            out.push_str(&format!("--- rollout {id}\n{}\n", serde_json::to_string_pretty(&status).unwrap_or_default()));
        }
    }
    out.push_str(&format!("--- coordinator.log\n{}\n", tail(&fleet.coordinator.log, 60)));
    for a in &fleet.agents {
        let t = tail(&a.log, 8);
        if !t.trim().is_empty() {
            out.push_str(&format!("--- {} agent.log\n{t}\n", a.hostname));
        }
    }
    out
}

/// `r`'s value, or a panic naming `what` with the fleet's state.
fn must<T>(fleet: &LocalFleet, what: &str, r: Result<T, DevkitError>) -> T {
    r.unwrap_or_else(|e| panic!("{what}: {e}\n{}", diagnose(fleet)))
}

/// Waits (bounded) for `cond`, panicking with the fleet's state when it never holds.
fn wait(fleet: &mut LocalFleet, what: &str, cond: impl FnMut(&mut LocalFleet) -> Result<bool, DevkitError>) {
    let r = fleet.wait_until(what, WAIT, cond);
    must(fleet, what, r);
}

/// Every rollout's state, by id.
fn rollout_states(fleet: &LocalFleet) -> Result<BTreeMap<String, String>, DevkitError> {
    let list = fleet.get("/v1/rollouts")?;
    Ok(list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| (r["rolloutId"].as_str().unwrap_or_default().to_owned(), r["state"].as_str().unwrap_or_default().to_owned()))
        .collect())
}

/// Every host's lifecycle state, by hostname.
fn host_states(fleet: &LocalFleet) -> Result<BTreeMap<String, String>, DevkitError> {
    Ok(fleet
        .hosts()?
        .iter()
        .map(|h| (h["hostname"].as_str().unwrap_or_default().to_owned(), h["state"].as_str().unwrap_or_default().to_owned()))
        .collect())
}

/// Every event so far, paging by id.
fn all_events(fleet: &LocalFleet) -> Vec<Value> {
    let mut out = Vec::new();
    let mut after: Option<i64> = None;
    loop {
        let path = match after {
            Some(id) => format!("/v1/events?limit=200&after={id}"),
            None => "/v1/events?limit=200".to_owned(),
        };
        let page = must(fleet, "GET /v1/events", fleet.get(&path));
        out.extend(page["items"].as_array().cloned().unwrap_or_default());
        match page["next"].as_i64() {
            Some(next) => after = Some(next),
            None => return out,
        }
    }
}

/// The `data.transition` of every event of `kind` about `rollout`, in order.
fn transitions(events: &[Value], kind: &str, rollout: &str, host: Option<&str>) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["kind"] == kind && e["rolloutId"] == rollout && host.is_none_or(|h| e["data"]["host"] == h))
        .map(|e| e["data"]["transition"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Waits for job `id` to finish and asserts it completed.
fn job_completes(fleet: &mut LocalFleet, id: &str) -> Value {
    let path = format!("/v1/jobs/{id}");
    wait(fleet, &format!("job {id} to finish"), |f| {
        let v = f.get(&path)?;
        Ok(["completed", "failed_retryable", "failed_manual_intervention"].iter().any(|s| v["state"] == *s))
    });
    let job = must(fleet, &path, fleet.get(&path));
    assert_eq!(job["state"], "completed", "{}\n{}", serde_json::to_string_pretty(&job).unwrap_or_default(), diagnose(fleet));
    job
}

/// Removes the tenant user from a host's sandbox (what a finished tenancy leaves), so a
/// validation after the cleanup finds no residue.
fn without_tenant(root: &std::path::Path) {
    let passwd = root.join("etc/passwd");
    let text = std::fs::read_to_string(&passwd).expect("passwd");
    std::fs::write(&passwd, text.lines().filter(|l| !l.starts_with("alice:")).map(|l| format!("{l}\n")).collect::<String>())
        .expect("write passwd");
}

fn is_broken(h: &FleetHost) -> bool {
    h.channel == "training" && h.wave() == 2
}

#[test]
fn a_fleet_of_twenty_rolls_out_reverts_a_bad_wave_runs_maintenance_and_decommissions() {
    let started = Instant::now();
    let dir = tempfile::tempdir().expect("tempdir");
    let bin_dir = workspace_binary("drover-agent").parent().expect("target dir").to_path_buf();
    let binaries = Binaries::in_dir(&bin_dir).expect("binaries (run `cargo build --bins` first)");
    let key = CiKey::create(dir.path()).expect("CI key");
    // The tenant scheduler the decommission's force_release asks (no allocation left).
    let scheduler = FakeScheduler::start(vec![Answer::count(0)]);
    let mut fleet = LocalFleet::start(FleetOptions {
        dir: dir.path().join("fleet"),
        binaries,
        trust_file: key.trust_file.clone(),
        coordinator_sections: format!(
            "[agent]\nlong_poll_secs = 5\n\n[rollouts]\ninterval_secs = 1\ndebounce_ms = 50\nconfirm_window_secs = 30\n\n\
             [jobs]\nscheduler_webhook_url = \"{}\"\nscheduler_poll_secs = 1\n",
            scheduler.url
        ),
        agent_log: "warn".into(),
    })
    .expect("coordinator");

    // ---- 20 agents, each running generation 1 and holding generation 2 ---------------------
    let hosts = spec::layout("e2e", HOSTS);
    for h in &hosts {
        let broken = is_broken(h).then_some("e2e: generation 2 breaks training's second wave");
        let (g1, g2) = (spec::closure(&h.hostname, 1), spec::closure(&h.hostname, 2));
        let added = fleet
            .add_agent(&h.hostname, |nix| {
                nix.closure(&g1, None)?;
                nix.closure(&g2, broken)?;
                nix.install_running(&g1)
            })
            .map(|_| ());
        must(&fleet, &format!("adding {}", h.hostname), added);
    }
    wait(&mut fleet, "all 20 hosts active", |f| Ok(host_states(f)?.values().filter(|s| *s == "active").count() == HOSTS));
    let ids: BTreeMap<String, String> = must(&fleet, "hosts", fleet.hosts())
        .iter()
        .map(|h| (h["hostname"].as_str().unwrap_or_default().to_owned(), h["id"].as_str().unwrap_or_default().to_owned()))
        .collect();
    let enrolled = started.elapsed();

    // ---- release 1: what the hosts run; both rollouts converge -----------------------------
    let policy = Policy { soak_secs: 1, on_health_failure: "rollback-and-halt", max_in_flight: 4 };
    let first: ReleaseFiles = key.sign(&spec::fleet_spec(&hosts, 1, &policy), COMMIT_1, 1, wall_now(), None).expect("release 1");
    must(&fleet, "publish release 1", fleet.publish(&first, "e2e: release 1"));
    let (t1, i1) = (rollout_id("training", COMMIT_1), rollout_id("inference", COMMIT_1));
    wait(&mut fleet, "release 1's rollouts converged", |f| {
        let s = rollout_states(f)?;
        Ok(s.get(&t1).map(String::as_str) == Some("Converged") && s.get(&i1).map(String::as_str) == Some("Converged"))
    });
    let release_1 = started.elapsed();

    // ---- release 2: inference converges, training's wave 2 fails -> rollback-and-halt ------
    let previous = key.timestamp(&first, wall_now()).expect("release 1's timestamp");
    let second = key.sign(&spec::fleet_spec(&hosts, 2, &policy), COMMIT_2, 2, wall_now(), Some(previous)).expect("release 2");
    must(&fleet, "publish release 2", fleet.publish(&second, "e2e: release 2"));
    let (t2, i2) = (rollout_id("training", COMMIT_2), rollout_id("inference", COMMIT_2));
    wait(&mut fleet, "release 2: inference Converged, training Reverted", |f| {
        let s = rollout_states(f)?;
        Ok(s.get(&i2).map(String::as_str) == Some("Converged") && s.get(&t2).map(String::as_str) == Some("Reverted"))
    });
    // The rollback intents are issued once the rollout is Reverting; the hosts act on them.
    wait(&mut fleet, "every training host back on generation 1", |f| {
        Ok(f.agents
            .iter()
            .zip(&hosts)
            .filter(|(_, h)| h.channel == "training")
            .all(|(a, h)| a.nix.running() == Some(spec::closure(&h.hostname, 1))))
    });
    let release_2 = started.elapsed();

    let calls = |hostname: &str| {
        std::fs::read_to_string(fleet.agents.iter().find(|a| a.hostname == hostname).expect("agent").nix.calls_log()).unwrap_or_default()
    };
    let t2_status = must(&fleet, "training status", fleet.get(&format!("/v1/rollouts/{t2}/status")));
    let t2_hosts: BTreeMap<String, Value> = t2_status["hosts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|h| (h["hostname"].as_str().unwrap_or_default().to_owned(), h.clone()))
        .collect();
    let mut touched_wave_2 = Vec::new();
    for h in hosts.iter().filter(|h| h.channel == "training") {
        let (g1, g2) = (spec::closure(&h.hostname, 1), spec::closure(&h.hostname, 2));
        let log = calls(&h.hostname);
        let switched_to_g2 = log.lines().any(|l| l == format!("{g2} switch"));
        match h.wave() {
            1 => {
                assert!(switched_to_g2, "the canary {} switched to generation 2: {log}", h.hostname);
                assert!(log.lines().last() == Some(&format!("{g1} switch")), "then back to generation 1 last: {log}");
                assert_eq!(t2_hosts[&h.hostname]["state"], "Reverted", "{t2_status:#}");
            }
            2 => {
                if switched_to_g2 {
                    touched_wave_2.push(h.hostname.clone());
                    assert!(
                        log.lines().last() == Some(&format!("{g1} switch")),
                        "{} switched back to generation 1 last: {log}",
                        h.hostname
                    );
                }
            }
            _ => {
                assert!(!log.contains(&g2), "wave 3 host {} was never touched by release 2: {log}", h.hostname);
                assert!(t2_hosts.get(&h.hostname).is_none_or(|r| r["state"] == "Pending"), "{t2_status:#}");
            }
        }
    }
    assert!(!touched_wave_2.is_empty(), "wave 2 was dispatched: {t2_status:#}");
    for h in hosts.iter().filter(|h| h.channel == "inference") {
        let a = fleet.agents.iter().find(|a| a.hostname == h.hostname).expect("agent");
        assert_eq!(a.nix.running(), Some(spec::closure(&h.hostname, 2)), "{} runs generation 2", h.hostname);
    }

    // ---- maintenance on two inference hosts -------------------------------------------------
    let maintained: Vec<&FleetHost> = hosts.iter().filter(|h| h.channel == "inference" && h.wave() == 3).take(2).collect();
    for h in &maintained {
        without_tenant(&fleet.agents.iter().find(|a| a.hostname == h.hostname).expect("agent").root.root);
    }
    let request = must(
        &fleet,
        "POST /v1/maintenance",
        fleet.post(
            "/v1/maintenance",
            &json!({
                "hosts": maintained.iter().map(|h| ids[&h.hostname].clone()).collect::<Vec<_>>(),
                "activities": ["gpu_scrub", "storage_cleanup", "validate_clean"],
                "storage": "local", "reference": "E2E-1", "reason": "e2e: scrub between tenants"
            }),
        ),
    );
    let request_id = request["requestId"].as_str().expect("requestId").to_owned();
    let maintenance_jobs: Vec<String> =
        request["jobs"].as_array().expect("jobs").iter().map(|j| j["jobId"].as_str().expect("jobId").to_owned()).collect();
    assert_eq!(maintenance_jobs.len(), 2, "{request}");
    for id in &maintenance_jobs {
        job_completes(&mut fleet, id);
    }
    let view = must(&fleet, "maintenance request", fleet.get(&format!("/v1/maintenance/{request_id}")));
    assert_eq!(view["state"], "completed", "{view:#}");
    for h in &maintained {
        let root = &fleet.agents.iter().find(|a| a.hostname == h.hostname).expect("agent").root;
        assert_eq!(std::fs::read_dir(root.path("scratch")).expect("scratch").count(), 0, "{}'s scratch was cleaned", h.hostname);
        assert!(tail(&root.gpu_log(), 1000).contains("--gpu-reset"), "{}'s GPUs were reset", h.hostname);
    }

    // ---- full decommission of an untouched training host -----------------------------------
    let retired = hosts.iter().rfind(|h| h.channel == "training" && h.wave() == 3).expect("a wave-3 training host");
    let retired_id = ids[&retired.hostname].clone();
    let job = must(
        &fleet,
        "POST decommission",
        fleet.post(
            &format!("/v1/hosts/{retired_id}/decommission"),
            &json!({ "mode": "full", "storage": "local", "forceRelease": true, "reason": "e2e: end of life" }),
        ),
    );
    assert_eq!(
        job["stages"],
        json!([
            "cordon",
            "force_release",
            "drain",
            "revoke_users",
            "cleanup_storage",
            "retire",
            "remove",
            "uninstall",
            "maas_workflow",
            "delete"
        ]),
        "{job}"
    );
    let decommission_job = job["jobId"].as_str().expect("jobId").to_owned();
    job_completes(&mut fleet, &decommission_job);
    let name = retired.hostname.clone();
    wait(&mut fleet, "the decommissioned agent to exit", |f| Ok(!f.agent(&name).expect("agent").is_running()));
    let retired_root = fleet.agents.iter().find(|a| a.hostname == retired.hostname).expect("agent").root.clone();
    assert!(!retired_root.path("var/lib/drover").exists(), "the agent purged its state dir");
    assert!(!retired_root.path("etc/drover/agent.toml").exists(), "the agent removed its config");

    // ---- every host's final state ----------------------------------------------------------
    let states = must(&fleet, "hosts", host_states(&fleet));
    let listed = must(&fleet, "hosts", fleet.hosts());
    for h in &hosts {
        let a = fleet.agents.iter().find(|a| a.hostname == h.hostname).expect("agent");
        let expected_generation = if h.channel == "inference" { 2 } else { 1 };
        assert_eq!(
            a.nix.running(),
            Some(spec::closure(&h.hostname, expected_generation)),
            "{} runs generation {expected_generation}",
            h.hostname
        );
        if h.hostname == retired.hostname {
            assert_eq!(states.get(&h.hostname).map(String::as_str).unwrap_or("deleted"), "deleted", "{states:?}");
            let view = must(&fleet, "host", fleet.get(&format!("/v1/hosts/{retired_id}")));
            assert_eq!(view["state"], "deleted", "{view}");
        } else {
            assert_eq!(states.get(&h.hostname).map(String::as_str), Some("active"), "{}: {states:?}", h.hostname);
            let row = listed.iter().find(|r| r["hostname"] == h.hostname.as_str()).expect("row");
            assert_eq!(row["schedulable"], true, "{} is schedulable again: {row}", h.hostname);
        }
    }
    for a in fleet.agents.iter_mut() {
        assert_eq!(a.is_running(), a.hostname != retired.hostname, "only {}'s agent exited ({})", retired.hostname, a.hostname);
    }
    let final_rollouts = must(&fleet, "rollouts", rollout_states(&fleet));
    assert_eq!(final_rollouts.get(&i2).map(String::as_str), Some("Converged"), "{final_rollouts:?}");
    assert_eq!(final_rollouts.get(&t2).map(String::as_str), Some("Reverted"), "{final_rollouts:?}");

    // ---- the events --------------------------------------------------------------------------
    let events = all_events(&fleet);
    let ids_unique: std::collections::BTreeSet<i64> = events.iter().filter_map(|e| e["id"].as_i64()).collect();
    assert_eq!(ids_unique.len(), events.len(), "paging returned every event once");
    let print = |what: &str| format!("{what}\n{}", diagnose(&fleet));
    for published in [&t1, &i1, &t2, &i2] {
        assert!(
            events.iter().any(|e| e["kind"] == "rollout.opened" && e["rolloutId"] == published.as_str()),
            "{}",
            print(&format!("{published} opened"))
        );
    }
    assert_eq!(
        transitions(&events, "rollout.transition", &t2, None),
        ["Opening -> Active", "Active -> Reverting", "Reverting -> Reverted"]
    );
    let i2_transitions = transitions(&events, "rollout.transition", &i2, None);
    assert_eq!(i2_transitions.first().map(String::as_str), Some("Opening -> Active"), "{i2_transitions:?}");
    assert_eq!(i2_transitions.last().map(String::as_str), Some("Converging -> Converged"), "{i2_transitions:?}");
    // The rollout's health gate fired on wave 2 (index 1) and rolled back, as the policy says.
    let reverting = events
        .iter()
        .find(|e| e["kind"] == "rollout.transition" && e["rolloutId"] == t2.as_str() && e["data"]["transition"] == "Active -> Reverting")
        .expect("the Reverting transition");
    let why = reverting["message"].as_str().unwrap_or_default();
    assert!(why.starts_with("health gate: wave 1 has ") && why.ends_with("; onHealthFailure rollback-and-halt"), "{why}");
    // A wave-2 host failed its own health gate after the switch and rolled back by itself; every
    // touched wave-2 host ends Reverted.
    let failed: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "rollout.host" && e["rolloutId"] == t2.as_str() && e["data"]["transition"] == "Activating -> Failed")
        .collect();
    assert!(!failed.is_empty(), "a host failed its activation");
    for e in &failed {
        let host = e["data"]["host"].as_str().unwrap_or_default();
        assert!(touched_wave_2.iter().any(|h| h == host), "only broken wave-2 hosts fail: {e}");
        let why = e["message"].as_str().unwrap_or_default();
        assert!(why.starts_with("activation rolled-back: ") && why.contains("health gate failed: probe node-check Failed"), "{e}");
    }
    // The agent reported its own rollback as an event of the rollout.
    assert!(
        events.iter().any(|e| e["kind"] == "agent.RolledBack"
            && e["rolloutId"] == t2.as_str()
            && e["message"].as_str().unwrap_or_default().contains("health gate failed: probe node-check Failed")),
        "an agent.RolledBack event"
    );
    for host in &touched_wave_2 {
        let seen = transitions(&events, "rollout.host", &t2, Some(host));
        assert!(seen.last().is_some_and(|t| t.ends_with("-> Reverted")), "{host} ends Reverted in release 2: {seen:?}");
        assert_eq!(t2_hosts[host]["state"], "Reverted", "{t2_status:#}");
    }
    let canary = hosts.iter().find(|h| h.channel == "training" && h.wave() == 1).expect("canary");
    let seen = transitions(&events, "rollout.host", &t2, Some(&canary.hostname));
    assert!(seen.iter().any(|t| *t == format!("Converged -> revert to {t1}")), "the canary was reverted to {t1}: {seen:?}");
    assert!(seen.iter().any(|t| t.ends_with("-> Reverted")), "{seen:?}");
    for h in hosts.iter().filter(|h| h.channel == "training" && h.wave() == 3) {
        assert!(transitions(&events, "rollout.host", &t2, Some(&h.hostname)).is_empty(), "{} never moved in {t2}", h.hostname);
    }
    // The jobs: a stage event per decision, the scheduler notice, the host's way to deleted.
    let stages_of = |job: &str| -> Vec<String> {
        events
            .iter()
            .filter(|e| e["kind"] == "job.stage" && e["jobId"] == job)
            .filter_map(|e| e["data"]["stage"].as_str().map(str::to_owned))
            .collect()
    };
    for id in &maintenance_jobs {
        let stages = stages_of(id);
        for stage in ["cordon", "scrub_gpu", "cleanup_storage", "validate_clean", "uncordon"] {
            assert!(stages.iter().any(|s| s == stage), "maintenance job {id}: {stage} in {stages:?}");
        }
    }
    let decommission_stages = stages_of(&decommission_job);
    for stage in
        ["cordon", "force_release", "drain", "revoke_users", "cleanup_storage", "retire", "remove", "uninstall", "maas_workflow", "delete"]
    {
        assert!(decommission_stages.iter().any(|s| s == stage), "decommission job: {stage} in {decommission_stages:?}");
    }
    assert!(events.iter().any(|e| e["kind"] == "host.force_release" && e["hostId"] == retired_id.as_str()));
    assert_eq!(scheduler.events("host.force_release").len(), 1, "the scheduler was told once");
    assert!(scheduler.events("host.allocations_query").iter().all(|q| q["hostId"] == retired_id.as_str()));
    assert!(!scheduler.events("host.allocations_query").is_empty(), "and asked whether allocations remain");
    let host_path: Vec<String> = events
        .iter()
        .filter(|e| e["kind"] == "host.transition" && e["hostId"] == retired_id.as_str())
        .map(|e| format!("{}->{}", e["data"]["from"].as_str().unwrap_or_default(), e["data"]["to"].as_str().unwrap_or_default()))
        .collect();
    assert!(
        host_path.ends_with(&[
            "active->draining".into(),
            "draining->retired".into(),
            "retired->removing".into(),
            "removing->deleted".into()
        ]),
        "{host_path:?}"
    );

    eprintln!(
        "fleet_e2e: enrolled {:.1?}, release 1 converged {:.1?}, release 2 settled {:.1?}, total {:.1?}; wave 2 touched: {touched_wave_2:?}",
        enrolled,
        release_1,
        release_2,
        started.elapsed()
    );
}
