//! `drover`'s read verbs as a script or an operator types them, the real binary against a real
//! coordinator over mutual TLS: `describe host` showing the health the host's agent last
//! reported (or saying there is none yet), `-o name` and `--no-headers` on `get`'s listings,
//! and the one key (`hostId`) a host's id is read by in every operator answer.

use std::collections::BTreeSet;

use drover_engine::app::Clock as _;
use drover_proto::keys::KeySigner;
use drover_proto::publish::PublishRequest;
use drover_proto::release::{ReleaseParams, build_release};
use drover_proto::resolve::ReleaseMeta;
use drover_proto::spec::FleetSpec;
use drover_tests::Harness;
use drover_tests::sim_agent::{Behaviour, step_all};
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

/// The example fleet's GPU hosts as healthy simulated agents that checked in once (so each
/// has a stored health report), `infra-01` created but never reporting, and the example
/// release published and planned once.
async fn started() -> Harness {
    let h = Harness::start_with_long_poll(1).await;
    let names: Vec<String> = ["gpu-a-01", "gpu-a-02", "gpu-b-01", "gpu-b-02"].iter().map(|s| (*s).to_owned()).collect();
    let agents = h.sim_agents(&names, |_| Behaviour::Healthy);
    let _ = step_all(agents, h.clock.now()).await;
    h.host_credentials("infra-01");
    let params = ReleaseParams { meta: ReleaseMeta { ci_commit: "c0ffee".into(), created_at: h.clock.now() }, version: 1, previous: None };
    let files = build_release(&FleetSpec::from_json(FLEET).expect("spec"), &params, &[KeySigner::new(SigningKey::from_bytes(&[9u8; 32]))])
        .expect("release");
    let body = serde_json::to_string(&PublishRequest::from_files(&files, None).expect("utf-8")).expect("json");
    let (code, out) = h.call(Some(&h.admin), "POST", "/v1/releases", Some(&body)).await;
    assert_eq!(code, "201", "{out}");
    let app = h.running.app.clone();
    app.executor.tick_now(&app).await.expect("tick");
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_host_shows_the_stored_health_report_or_says_there_is_none() {
    let h = started().await;
    let out = ok(&h, &["describe", "host", "gpu-a-01"]).await;
    // The simulated agent reports load 0.1, 512 MiB of 1 GiB available, no GPUs, no failed
    // units, and each required probe of its channel passed.
    for needle in [
        "Health:        reported ",
        "  GPUs:        none\n",
        "  Load (1m):   0.10\n",
        "  Memory:      0.5 GiB available of 1.0 GiB\n",
        "  Failed units: none\n",
        "  Probes:\n",
    ] {
        assert!(out.contains(needle), "{needle:?} in\n{out}");
    }
    let json: Value = serde_json::from_str(&ok(&h, &["describe", "host", "gpu-a-01", "-o", "json"]).await).expect("json");
    assert_eq!(json["health"]["health"]["loadAvg1m"], 0.1, "{json}");
    let never = ok(&h, &["describe", "host", "infra-01"]).await;
    assert!(never.contains("Health:        no health report yet\n"), "{never}");
    assert!(!never.contains("Probes:"), "{never}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_prints_kind_slash_name_lines_and_headerless_tables() {
    let h = started().await;
    let names: BTreeSet<String> = ok(&h, &["get", "hosts", "-o", "name"]).await.lines().map(str::to_owned).collect();
    let want: BTreeSet<String> = ["gpu-a-01", "gpu-a-02", "gpu-b-01", "gpu-b-02", "infra-01"].iter().map(|n| format!("host/{n}")).collect();
    assert_eq!(names, want);
    assert_eq!(ok(&h, &["get", "host", "gpu-b-02", "-o", "name"]).await, "host/gpu-b-02\n");

    let rollouts: Vec<Value> = h.get_json("/v1/rollouts").await["items"].as_array().expect("items").clone();
    assert!(!rollouts.is_empty(), "the release opened no rollout");
    let want: BTreeSet<String> = rollouts.iter().map(|r| format!("rollout/{}", r["rolloutId"].as_str().expect("id"))).collect();
    let got: BTreeSet<String> = ok(&h, &["get", "rollouts", "-o", "name"]).await.lines().map(str::to_owned).collect();
    assert_eq!(got, want);

    let table = ok(&h, &["get", "hosts"]).await;
    let bare = ok(&h, &["get", "hosts", "--no-headers"]).await;
    assert!(table.starts_with("NAME "), "{table}");
    assert_eq!(bare.lines().count(), 5, "{bare}");
    assert!(bare.lines().all(|l| !l.starts_with("NAME")), "{bare}");
    let wide = ok(&h, &["get", "rollouts", "-o", "wide", "--no-headers"]).await;
    assert_eq!(wide.lines().count(), rollouts.len(), "{wide}");
    assert!(!wide.contains("MANIFEST-SHA256"), "{wide}");

    // Nothing to list: no line on stdout, the reason on stderr.
    let out = h.drover_as(&h.admin, &["get", "jobs", "-o", "name"]).await;
    assert!(out.status.success() && out.stdout.is_empty(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no jobs"), "{}", text(&out));

    // A format that does not exist is a usage error that lists `name` among the formats.
    let out = h.drover_as(&h.admin, &["get", "tasks", "-o", "names"]).await;
    assert_eq!(out.status.code(), Some(64), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("[possible values: table, wide, json, name]"), "{}", text(&out));
    let help = ok(&h, &["get", "hosts", "--help"]).await;
    assert!(help.contains("--no-headers") && help.contains("name"), "{help}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hosts_id_is_under_host_id_in_host_objects_too() {
    let h = started().await;
    let hosts: Value = serde_json::from_str(&ok(&h, &["get", "hosts", "-o", "json"]).await).expect("json");
    let hosts = hosts.as_array().expect("array");
    assert_eq!(hosts.len(), 5);
    for host in hosts {
        assert!(host["hostId"].is_string(), "{host}");
        assert_eq!(host["hostId"], host["id"], "{host}");
    }
    let one: Value = serde_json::from_str(&ok(&h, &["get", "host", "infra-01", "-o", "json"]).await).expect("json");
    assert_eq!(one["hostId"], one["id"], "{one}");
}
