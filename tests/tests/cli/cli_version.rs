//! `drover version` against a real coordinator (`GET /v1/version` over mutual TLS), and the
//! coordinator's agent-skew event and metric from real check-ins (`POST /v1/agent/checkin`).

use std::process::{Command, Stdio};

use drover_engine::app::Clock as _;
use drover_proto::states::HostLifecycle;
use drover_tests::{Harness, workspace_binary};
use serde_json::Value;

use drover_tests::output_text as text;

const VERSION: &str = env!("CARGO_PKG_VERSION");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drover_version_shows_the_client_and_the_coordinator() {
    let h = Harness::start().await;
    let out = h.drover_as(&h.viewer, &["version"]).await;
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(&format!("client  {VERSION}\n")), "{}", text(&out));
    assert!(stdout.contains(&format!("server  {VERSION} ({})", h.url)), "{}", text(&out));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("warning"), "same release, no warning: {}", text(&out));

    let out = h.drover_as(&h.viewer, &["version", "-o", "json"]).await;
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["client"]["version"], VERSION);
    assert_eq!(v["server"]["answer"]["version"], VERSION);
    assert_eq!(v["server"]["answer"]["apiVersion"], "v1");

    // The route is an operator read: anonymous callers learn nothing.
    let (code, _) = h.call(None, "GET", "/v1/version", None).await;
    assert!(code == "401" || code == "403", "anonymous GET /v1/version answered {code}");

    // Nothing configured: the client alone, and why, exit 0.
    let home = tempfile::tempdir().expect("tempdir");
    let out = Command::new(workspace_binary("drover"))
        .arg("version")
        .env_remove("DROVER_COORDINATOR")
        .env_remove("DROVER_CONFIG")
        .env("XDG_CONFIG_HOME", home.path())
        .env("HOME", home.path())
        .stdin(Stdio::null())
        .output()
        .expect("drover runs");
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("client  {VERSION}\n"));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not asking a coordinator"), "{}", text(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_two_minor_releases_away_raises_one_event_and_the_metric() {
    let h = Harness::start_with_long_poll(1).await;
    let (id, creds, _) = h.host_credentials("gpu-v-01");
    let store = &h.running.app.store;
    store.transition_host(id, HostLifecycle::BootstrapIssued, HostLifecycle::Enrolling, "enrolled", h.clock.now()).expect("enrolling");
    store.transition_host(id, HostLifecycle::Enrolling, HostLifecycle::Active, "checked in", h.clock.now()).expect("active");
    let checkin = |version: &str| format!(r#"{{"agentVersion":"{version}","bootId":"b"}}"#);
    let skew_events = || async {
        let (code, body) = h.call(Some(&h.viewer), "GET", "/v1/events?kind=host.version_skew", None).await;
        assert_eq!(code, "200", "{body}");
        let page: Value = serde_json::from_str(&body).expect("json");
        page["items"].as_array().expect("items").clone()
    };
    let metric = || async {
        let (_, body) = h.call(Some(&h.viewer), "GET", "/metrics", None).await;
        body.lines().find(|l| l.starts_with("drover_agents_version_skewed ")).map(str::to_owned)
    };

    // The coordinator's own release: nothing.
    let (code, body) = h.call(Some(&creds), "POST", "/v1/agent/checkin", Some(&checkin(VERSION))).await;
    assert_eq!(code, "200", "{body}");
    assert!(skew_events().await.is_empty());
    assert_eq!(metric().await.as_deref(), Some("drover_agents_version_skewed 0"));

    // Far away, twice: one event, naming both versions; the gauge counts the host.
    for _ in 0..2 {
        let (code, body) = h.call(Some(&creds), "POST", "/v1/agent/checkin", Some(&checkin("99.0.0"))).await;
        assert_eq!(code, "200", "{body}");
    }
    let events = skew_events().await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["hostId"], id.to_string());
    assert_eq!(events[0]["data"]["agentVersion"], "99.0.0");
    assert_eq!(events[0]["data"]["coordinatorVersion"], VERSION);
    assert_eq!(metric().await.as_deref(), Some("drover_agents_version_skewed 1"));

    // Upgraded: out of the gauge, no new event.
    let (code, _) = h.call(Some(&creds), "POST", "/v1/agent/checkin", Some(&checkin(VERSION))).await;
    assert_eq!(code, "200");
    assert_eq!(metric().await.as_deref(), Some("drover_agents_version_skewed 0"));
    assert_eq!(skew_events().await.len(), 1);
}
