//! The operator's administrative reads of `drover` as an operator types them — `audit`,
//! `tokens list`, `releases list`, `operator-cert` — the real binary against a real
//! coordinator over mutual TLS.

use drover_engine::app::Clock as _;
use drover_proto::keys::KeySigner;
use drover_proto::publish::PublishRequest;
use drover_proto::release::{ReleaseParams, build_release};
use drover_proto::resolve::ReleaseMeta;
use drover_proto::spec::FleetSpec;
use drover_proto::states::HostLifecycle;
use drover_tests::Harness;
use ed25519_dalek::SigningKey;
use serde_json::Value;

use drover_tests::output_text as text;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_lists_the_action_just_done_with_its_reason() {
    let h = Harness::start().await;
    let (id, _) = h.enroll_with_cli("gpu-07").await;
    let store = &h.running.app.store;
    store.transition_host(id, HostLifecycle::BootstrapIssued, HostLifecycle::Enrolling, "enrolled", h.clock.now()).expect("enrolling");
    store.transition_host(id, HostLifecycle::Enrolling, HostLifecycle::Active, "checked in", h.clock.now()).expect("active");
    h.drover_ok(&h.admin, &["host", "cordon", "gpu-07", "--reason", "swap the failing PSU"]).await;

    // The viewer reads it: the newest record is the cordon, by alice, with her reason.
    let table = h.drover_ok(&h.viewer, &["audit", "--limit", "1"]).await;
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 2, "a header and the newest record: {table}");
    assert!(lines[0].starts_with("AT") && lines[0].contains("REASON"), "{table}");
    assert!(lines[1].contains("alice") && lines[1].contains("swap the failing PSU") && lines[1].contains(&id.to_string()), "{table}");

    // JSON, filtered by actor and paged one record a request: both actions, oldest first.
    let json = h.drover_ok(&h.viewer, &["audit", "--actor", "alice", "--page-size", "1", "-o", "json"]).await;
    let records: Vec<Value> = serde_json::from_str(&json).expect("json array");
    let actions: Vec<&str> = records.iter().map(|r| r["action"].as_str().unwrap_or("")).collect();
    assert_eq!(actions.len(), 2, "{json}");
    assert_eq!(actions[0], "host.create", "{json}");
    assert_eq!(records[1]["reason"], "swap the failing PSU", "{json}");
    // `--since` the first record: only the second.
    let first = records[0]["id"].as_i64().expect("id").to_string();
    let json = h.drover_ok(&h.viewer, &["audit", "--since", &first, "-o", "json"]).await;
    let after: Vec<Value> = serde_json::from_str(&json).expect("json array");
    assert_eq!(after, records[1..].to_vec());
    // Nobody else did anything.
    let json = h.drover_ok(&h.viewer, &["audit", "--actor", "victor", "-o", "json"]).await;
    assert_eq!(json.trim(), "[]");
    // A limit of 0 is a usage error, before any request.
    let out = h.drover_as(&h.viewer, &["audit", "--limit", "0"]).await;
    assert_eq!(out.status.code(), Some(64), "{}", text(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_list_shows_an_enrollment_token_but_never_its_secret() {
    let h = Harness::start().await;
    let (id, token) = h.enroll_with_cli("gpu-08").await;
    assert!(token.len() >= 16, "a real token: {token}");

    let table = h.drover_ok(&h.viewer, &["tokens", "list"]).await;
    assert!(table.starts_with("ID") && table.contains("gpu-08") && table.contains("pending"), "{table}");
    let wide = h.drover_ok(&h.viewer, &["tokens", "list", "--host", "gpu-08", "-o", "wide"]).await;
    assert!(wide.contains(&id.to_string()), "{wide}");
    let json = h.drover_ok(&h.admin, &["tokens", "list", "--host", &id.to_string(), "-o", "json"]).await;
    let tokens: Vec<Value> = serde_json::from_str(&json).expect("json array");
    assert_eq!(tokens.len(), 1, "{json}");
    assert_eq!(tokens[0]["hostId"], id.to_string());
    assert!(tokens[0]["usedAt"].is_null(), "{json}");
    for out in [&table, &wide, &json] {
        assert!(!out.contains(&token), "the token's secret reached the output: {out}");
    }
    // An unknown host: 65, naming it.
    let out = h.drover_as(&h.viewer, &["tokens", "list", "--host", "gpu-99"]).await;
    assert_eq!(out.status.code(), Some(65), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("gpu-99"), "{}", text(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_list_shows_a_published_release() {
    let h = Harness::start().await;
    let out = h.drover_as(&h.viewer, &["releases", "list"]).await;
    assert!(out.status.success() && out.stdout.is_empty(), "nothing published yet: {}", text(&out));

    let fleet: &[u8] = include_bytes!("../../../examples/fleet.json");
    let params = ReleaseParams { meta: ReleaseMeta { ci_commit: "c0ffee".into(), created_at: h.clock.now() }, version: 3, previous: None };
    let files = build_release(&FleetSpec::from_json(fleet).expect("spec"), &params, &[KeySigner::new(SigningKey::from_bytes(&[9u8; 32]))])
        .expect("release");
    let body = serde_json::to_string(&PublishRequest::from_files(&files, None).expect("utf-8")).expect("json");
    let (code, answer) = h.call(Some(&h.admin), "POST", "/v1/releases", Some(&body)).await;
    assert_eq!(code, "201", "{answer}");
    // The rollouts the release carries, and their channels (`channel@ref`), as publishing said.
    let carried: Vec<String> = serde_json::from_str::<Value>(&answer).expect("json")["rollouts"]
        .as_array()
        .expect("rollouts")
        .iter()
        .map(|r| r.as_str().expect("rollout id").to_owned())
        .collect();
    let mut channels: Vec<&str> = carried.iter().map(|r| r.split_once('@').expect("channel@ref").0).collect();
    channels.sort_unstable();
    channels.dedup();
    assert!(!carried.is_empty(), "{answer}");
    // The planner opens them: bounded, one tick a round.
    let app = h.running.app.clone();
    for round in 0.. {
        assert!(round < 50, "the release's rollouts did not open: {:?}", app.store.list_rollouts(&Default::default()));
        if app.store.list_rollouts(&Default::default()).expect("rollouts").len() == carried.len() {
            break;
        }
        app.executor.tick_now(&app).await.expect("tick");
    }

    let table = h.drover_ok(&h.viewer, &["releases", "list"]).await;
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 2, "{table}");
    let cells: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(lines[0].split_whitespace().collect::<Vec<_>>(), ["VERSION", "SIGNED", "PUBLISHER", "ROLLOUTS", "CHANNELS", "ARTIFACTS"]);
    // Published by alice (the admin), the rollouts it opened and their channels.
    assert_eq!(cells[..1], ["3"], "{table}");
    assert_eq!(cells[2..5], ["alice", carried.len().to_string().as_str(), channels.join(",").as_str()], "{table}");
    let json = h.drover_ok(&h.viewer, &["releases", "list", "-o", "json"]).await;
    let releases: Vec<Value> = serde_json::from_str(&json).expect("json array");
    assert_eq!(releases.len(), 1, "{json}");
    assert_eq!(releases[0]["version"], 3);
    assert_eq!(
        (releases[0]["publisher"].as_str(), releases[0]["rollouts"].as_u64()),
        (Some("alice"), Some(carried.len() as u64)),
        "{json}"
    );
    let paths = releases[0]["paths"].as_array().expect("paths");
    assert!(!paths.is_empty() && cells[5] == paths.len().to_string(), "{table}");
}

/// `drover-coordinator operator-cert` beside the running coordinator (its store is shared):
/// NAME's certificate and key.
fn issue_operator(h: &Harness, name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let out_dir = h.dir.path().join(format!("issued-{name}"));
    let state = h.dir.path().join("state");
    let out = std::process::Command::new(drover_tests::workspace_binary("drover-coordinator"))
        .args(["operator-cert", "--role", "admin", "--name", name, "--state-dir"])
        .arg(&state)
        .arg("--out")
        .arg(&out_dir)
        .output()
        .expect("drover-coordinator runs");
    assert!(out.status.success(), "operator-cert: {}", text(&out));
    (out_dir.join(format!("{name}.crt")), out_dir.join(format!("{name}.key")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_cert_revoked_is_refused() {
    let h = Harness::start().await;
    let bob = issue_operator(&h, "bob");
    let carol = issue_operator(&h, "carol");
    h.drover_ok(&bob, &["get", "hosts"]).await;

    let listed: Value = serde_json::from_str(&h.drover_ok(&h.admin, &["operator-cert", "list", "-o", "json"]).await).expect("json");
    let serial_of = |name: &str| -> String {
        let row = listed.as_array().expect("array").iter().find(|c| c["name"] == name).unwrap_or_else(|| panic!("{name} listed: {listed}"));
        assert_eq!(row["role"], "admin");
        assert!(row["revokedAt"].is_null(), "{row}");
        row["serial"].as_str().expect("serial").to_owned()
    };
    let (bob_serial, carol_serial) = (serial_of("bob"), serial_of("carol"));

    // Revoking one's own certificate needs --force: carol cannot lock herself out by a typo.
    let out = h.drover_as(&carol, &["operator-cert", "revoke", &carol_serial, "--reason", "oops"]).await;
    assert_eq!(out.status.code(), Some(65), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("issued to you"), "{}", text(&out));

    // Carol revokes bob: bob is refused from his next request on (77), carol still works.
    let said = h.drover_ok(&carol, &["operator-cert", "revoke", &bob_serial, "--reason", "left the team"]).await;
    assert!(said.contains(&format!("operator certificate {bob_serial} (admin bob) revoked at ")), "{said}");
    let out = h.drover_as(&bob, &["get", "hosts"]).await;
    assert_eq!(out.status.code(), Some(77), "{}", text(&out));
    h.drover_ok(&carol, &["get", "hosts"]).await;

    // The listing shows when and why; the audit log says who.
    let table = h.drover_ok(&h.admin, &["operator-cert", "list", "-o", "wide"]).await;
    let bob_row = table.lines().find(|l| l.starts_with(&bob_serial)).expect("bob's row");
    assert!(bob_row.contains("left the team") && !bob_row.contains(" - "), "{table}");
    let audit: Value = serde_json::from_str(&h.drover_ok(&h.admin, &["audit", "-o", "json", "--actor", "carol"]).await).expect("json");
    assert!(audit.to_string().contains("operator_cert.revoke"), "{audit}");

    // Bad input: not a serial (64), an unknown serial (65, the coordinator's 404).
    let out = h.drover_as(&carol, &["operator-cert", "revoke", "zz-top", "--reason", "r"]).await;
    assert_eq!(out.status.code(), Some(64), "{}", text(&out));
    let out = h.drover_as(&carol, &["operator-cert", "revoke", "abcdef", "--reason", "r"]).await;
    assert_eq!(out.status.code(), Some(65), "{}", text(&out));
}
