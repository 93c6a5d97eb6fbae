//! `drover events` as an operator types it, the real binary against a real coordinator: an
//! unknown `--kind` is refused (rc 64) instead of matching nothing, `--limit` shows the newest
//! events, and `--follow` starts at the last few events (or at `--since`), not at the start of
//! history.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use drover_engine::app::Clock as _;
use drover_proto::states::HostLifecycle;
use drover_tests::{Harness, workspace_binary};
use serde_json::Value;

use drover_tests::output_text as text;

/// Creates `name` and makes it active: two `host.transition` events.
fn activate(h: &Harness, name: &str) {
    let (id, _, _) = h.host_credentials(name);
    let store = &h.running.app.store;
    store.transition_host(id, HostLifecycle::BootstrapIssued, HostLifecycle::Enrolling, "enrolled", h.clock.now()).expect("enrolling");
    store.transition_host(id, HostLifecycle::Enrolling, HostLifecycle::Active, "checked in", h.clock.now()).expect("active");
}

/// The ids of `drover events ARGS -o json`.
async fn ids(h: &Harness, args: &[&str]) -> Vec<i64> {
    let mut full = vec!["events", "-o", "json"];
    full.extend_from_slice(args);
    let out = h.drover_as(&h.admin, &full).await;
    assert!(out.status.success(), "drover {full:?}: {}", text(&out));
    let events: Vec<Value> = serde_json::from_slice(&out.stdout).expect("a JSON array");
    events.iter().map(|e| e["id"].as_i64().expect("id")).collect()
}

/// `drover events --follow -o json ARGS` running, its stdout lines arriving on a channel.
fn follow(h: &Harness, args: &[&str]) -> (std::process::Child, mpsc::Receiver<Value>) {
    let (cert, key) = &h.admin;
    let mut child = Command::new(workspace_binary("drover"))
        .args(["events", "--follow", "-o", "json"])
        .args(args)
        .args(["--coordinator", &h.url, "--ca"])
        .arg(&h.ca)
        .arg("--cert")
        .arg(cert)
        .arg("--key")
        .arg(key)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("drover runs");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(serde_json::from_str(&line).expect("one JSON event a line")).is_err() {
                return;
            }
        }
    });
    (child, rx)
}

/// The next `n` followed events' ids, each within a bound.
fn next_ids(rx: &mpsc::Receiver<Value>, n: usize) -> Vec<i64> {
    (0..n).map(|_| rx.recv_timeout(Duration::from_secs(30)).expect("a followed event in time")["id"].as_i64().expect("id")).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn events_kinds_limit_and_follow() {
    let h = Harness::start().await;
    for i in 0..8 {
        activate(&h, &format!("gpu-e-{i:02}"));
    }

    // The help's old example, a kind nothing records: refused, naming the valid families.
    let out = h.drover_as(&h.admin, &["events", "--kind", "host.state"]).await;
    assert_eq!(out.status.code(), Some(64), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("host.state") && err.contains("host.*") && err.contains("rollout.*"), "{err}");
    // The API answers the same with a 400 naming the kind.
    let (code, body) = h.call(Some(&h.admin), "GET", "/v1/events?kind=host.state", None).await;
    assert_eq!(code, "400", "{body}");
    assert!(body.contains("host.state"), "{body}");

    let all = ids(&h, &["--kind", "host.transition"]).await;
    assert_eq!(all.len(), 16, "{all:?}");
    // --limit: the newest, oldest first.
    assert_eq!(ids(&h, &["--kind", "host.transition", "--limit", "3"]).await, all[13..].to_vec());
    // A family filters to its kinds.
    let out = h.drover_as(&h.admin, &["events", "--kind", "host.*", "-o", "json"]).await;
    assert!(out.status.success(), "{}", text(&out));
    let family: Vec<Value> = serde_json::from_slice(&out.stdout).expect("json");
    assert!(family.len() > all.len(), "host.created and host.transition: {family:?}");
    assert!(family.iter().all(|e| e["kind"].as_str().is_some_and(|k| k.starts_with("host."))), "{family:?}");

    // --since an instant: the events dated from it on; a bad --since is a usage error.
    h.clock.advance(3600);
    activate(&h, "gpu-e-late");
    let out = h.drover_as(&h.admin, &["events", "--kind", "host.transition", "-o", "json"]).await;
    let dated: Vec<Value> = serde_json::from_slice(&out.stdout).expect("json");
    let late = dated.last().expect("the late host's events");
    let from = late["at"].as_str().expect("at").to_owned();
    let since = ids(&h, &["--kind", "host.transition", "--since", &from]).await;
    assert_eq!(since.len(), 2, "only the late host's two transitions are dated from {from}: {since:?}");
    assert!(since.iter().all(|id| id > all.last().expect("events")), "{since:?}");
    let out = h.drover_as(&h.admin, &["events", "--since", "yesterday"]).await;
    assert_eq!(out.status.code(), Some(64), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not an event id, a duration"), "{}", text(&out));
    let all: Vec<i64> = all.iter().copied().chain(since.iter().copied()).collect();

    // --follow without --since: the last 10, then what happens next; no older history.
    let (mut tail, rx) = follow(&h, &["--kind", "host.transition", "--interval", "1"]);
    assert_eq!(next_ids(&rx, 10), all[all.len() - 10..].to_vec());
    activate(&h, "gpu-e-new");
    let new = next_ids(&rx, 2);
    assert!(new.iter().all(|id| id > all.last().expect("events")), "only new events follow the backlog: {new:?}");
    tail.kill().expect("kill");
    tail.wait().expect("reaped");

    // --since an id: everything after it first.
    let (mut tail, rx) = follow(&h, &["--kind", "host.transition", "--since", &all[1].to_string()]);
    let mut expect = all[2..].to_vec();
    expect.extend(&new);
    assert_eq!(next_ids(&rx, expect.len()), expect);
    tail.kill().expect("kill");
    tail.wait().expect("reaped");
}
