//! `drover rollout status` as an operator types it, the real binary against a real coordinator
//! with simulated agents: one host stays offline through its wave, so the rollout converges
//! with it Skipped, and the table says so beside the state (`Converged (1 skipped)`), counts
//! the hosts converged out of the rollout's, and `-o wide` adds every host state's count;
//! `-o json` stays the coordinator's answer.

use std::collections::BTreeMap;

use drover_engine::app::Clock as _;
use drover_proto::keys::KeySigner;
use drover_proto::publish::PublishRequest;
use drover_proto::release::{ReleaseParams, build_release};
use drover_proto::resolve::ReleaseMeta;
use drover_proto::spec::FleetSpec;
use drover_proto::states::RolloutState;
use drover_tests::Harness;
use drover_tests::sim_agent::{Behaviour, SimAgent, step_all};
use ed25519_dalek::SigningKey;
use serde_json::Value;

const FLEET: &[u8] = include_bytes!("../../../examples/fleet.json");

use drover_tests::output_text as text;

/// Runs `drover args` as the admin; it must succeed. Its stdout.
async fn ok(h: &Harness, args: &[&str]) -> String {
    let out = h.drover_as(&h.admin, args).await;
    assert!(out.status.success(), "drover {args:?}: {}", text(&out));
    String::from_utf8(out.stdout).expect("utf-8")
}

fn rollout_states(h: &Harness) -> BTreeMap<String, RolloutState> {
    let rollouts = h.running.app.store.list_rollouts(&Default::default()).expect("rollouts");
    rollouts.into_iter().map(|r| (r.rollout_id.to_string(), r.state)).collect()
}

/// Every example host as a simulated agent (`gpu-a-02` offline), the example release
/// published, then agents and ticks driven until both rollouts converge, the clock advanced
/// whenever a round changes nothing (so soak and offline timeouts pass). Bounded.
async fn converged_with_one_offline() -> Harness {
    let h = Harness::start_with_long_poll(1).await;
    let spec: Value = serde_json::from_slice(FLEET).expect("json");
    let names: Vec<String> = spec["hosts"].as_object().expect("hosts").keys().cloned().collect();
    let mut agents: Vec<SimAgent> = h.sim_agents(&names, |name| if name == "gpu-a-02" { Behaviour::Offline } else { Behaviour::Healthy });
    let params = ReleaseParams { meta: ReleaseMeta { ci_commit: "c0ffee".into(), created_at: h.clock.now() }, version: 1, previous: None };
    let files = build_release(&FleetSpec::from_json(FLEET).expect("spec"), &params, &[KeySigner::new(SigningKey::from_bytes(&[9u8; 32]))])
        .expect("release");
    let body = serde_json::to_string(&PublishRequest::from_files(&files, None).expect("utf-8")).expect("json");
    let (code, out) = h.call(Some(&h.admin), "POST", "/v1/releases", Some(&body)).await;
    assert_eq!(code, "201", "{out}");
    let app = h.running.app.clone();
    for round in 0..200 {
        let (next, handled) = step_all(agents, h.clock.now()).await;
        agents = next;
        let out = app.executor.tick_now(&app).await.unwrap_or_else(|e| panic!("tick failed in round {round}: {e}"));
        let states = rollout_states(&h);
        if states.len() == 2 && states.values().all(|s| *s == RolloutState::Converged) {
            return h;
        }
        if handled == 0 && out.plan.actions.is_empty() {
            h.clock.advance(300);
        }
    }
    panic!("not converged after 200 rounds: {:?}", rollout_states(&h));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rollout_status_prints_a_table_that_counts_skipped_hosts() {
    let h = converged_with_one_offline().await;
    let json: Value = serde_json::from_str(&ok(&h, &["rollout", "status", "gpu", "-o", "json"]).await).expect("json");
    let hosts = json["hosts"].as_array().expect("hosts");
    let state = |s: &str| hosts.iter().filter(|x| x["state"] == s).count();
    assert_eq!(state("Skipped"), 1, "{json}");
    let id = json["rolloutId"].as_str().expect("id");

    let table = ok(&h, &["rollout", "status", "gpu"]).await;
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().expect("header").split_whitespace().collect();
    assert_eq!(header, ["ROLLOUT", "CHANNEL", "STATE", "WAVE", "HOSTS", "SKIPPED", "AGE"], "{table}");
    let row = lines.next().expect("row");
    assert!(lines.next().is_none(), "one row: {table}");
    let cells: Vec<&str> = row.split("  ").map(str::trim).filter(|c| !c.is_empty()).collect();
    let hosts_cell = format!("{}/{}", state("Converged"), hosts.len());
    assert_eq!(cells[..6], [id, "gpu", "Converged (1 skipped)", "-", hosts_cell.as_str(), "1"], "{table}");

    let wide = ok(&h, &["rollout", "status", "gpu", "-o", "wide"]).await;
    assert!(wide.lines().next().expect("header").ends_with("CHANGED  HOST-STATES"), "{wide}");
    let counts = format!("Converged={},Skipped=1", state("Converged"));
    assert!(wide.lines().nth(1).expect("row").ends_with(&counts), "want {counts:?}\n{wide}");

    // Every other view of the rollout says so too: the listing (from the API's per-state
    // counts), the description, and each host's channel and wave in `get hosts -o wide`.
    let listed = ok(&h, &["get", "rollouts"]).await;
    assert!(listed.lines().any(|l| l.starts_with(id) && l.contains("Converged (1 skipped)")), "{listed}");
    let api: Value = serde_json::from_str(&ok(&h, &["get", "rollouts", "-o", "json"]).await).expect("json");
    let listed_gpu = api.as_array().and_then(|a| a.iter().find(|r| r["rolloutId"] == id)).expect("listed");
    assert_eq!(listed_gpu["hosts"]["Skipped"], 1, "{api}");
    let described = ok(&h, &["describe", "rollout", id]).await;
    assert!(described.contains("State:         Converged (1 skipped)\n"), "{described}");
    let wave_of = |name: &str| hosts.iter().find(|x| x["hostname"] == name).and_then(|x| x["waveIndex"].as_u64());
    let listed: Value = serde_json::from_str(&ok(&h, &["get", "hosts", "-o", "json"]).await).expect("json");
    let wide_hosts = ok(&h, &["get", "hosts", "-o", "wide"]).await;
    let header = wide_hosts.lines().next().expect("header");
    let column = |row: &str, name: &str| row[header.find(name).expect(name)..].split_whitespace().next().unwrap_or_default().to_owned();
    let mut checked = 0;
    for host in listed.as_array().expect("hosts") {
        let name = host["hostname"].as_str().expect("hostname");
        let Some(wave) = wave_of(name) else { continue }; // another channel's host
        checked += 1;
        assert_eq!((host["channel"].as_str(), host["wave"].as_u64()), (Some("gpu"), Some(wave)), "{host}");
        assert_eq!(host["rolloutId"], id, "{host}");
        let row = wide_hosts.lines().find(|l| l.starts_with(&format!("{name} "))).expect("row");
        assert_eq!((column(row, "CHANNEL"), column(row, "WAVE")), ("gpu".to_owned(), wave.to_string()), "{wide_hosts}");
    }
    assert_eq!(checked, hosts.len(), "every host of the rollout is listed with its channel and wave");

    // An output format for an action is refused, not ignored.
    let out = h.drover_as(&h.admin, &["rollout", "halt", "gpu", "--reason", "x", "-o", "json"]).await;
    assert_eq!(out.status.code(), Some(64), "{}", text(&out));
}
