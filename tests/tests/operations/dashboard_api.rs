//! The routes the dashboard is built on, against a real coordinator: `whoami` by role, the
//! fleet summary agreeing with the host listing, a rollout's waves and the planner's report of
//! why its hosts wait, and the live event stream (server-sent events read by real `curl`):
//! an event arrives while the stream is open, and a reconnect with `Last-Event-ID` resumes
//! after it with nothing lost and nothing repeated.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use drover_tests::Harness;
use serde_json::Value;

async fn get(h: &Harness, creds: Option<&(std::path::PathBuf, std::path::PathBuf)>, path: &str) -> (String, Value) {
    let (code, body) = h.call(creds, "GET", path, None).await;
    (code, serde_json::from_str(&body).unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whoami_tells_the_role_and_whether_it_may_act() {
    let h = Harness::start().await;
    let (code, me) = get(&h, Some(&h.admin), "/v1/whoami").await;
    assert_eq!((code.as_str(), &me["role"], &me["canAct"]), ("200", &Value::from("admin"), &Value::from(true)), "{me}");
    let (code, me) = get(&h, Some(&h.viewer), "/v1/whoami").await;
    assert_eq!((code.as_str(), &me["role"], &me["canAct"]), ("200", &Value::from("viewer"), &Value::from(false)), "{me}");
    assert!(me["name"].as_str().is_some_and(|n| !n.is_empty()), "{me}");
    let (code, _) = get(&h, None, "/v1/whoami").await;
    assert_eq!(code, "401");
    let (_, host, _) = h.host_credentials("gpu-01");
    let (code, _) = get(&h, Some(&host), "/v1/whoami").await;
    assert_eq!(code, "403", "a host is no operator");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_summary_agrees_with_the_host_listing_and_rollout_progress_explains_the_waits() {
    let h = Harness::start_with_long_poll(0).await;
    let names = h.example_fleet_rolling().await;
    h.create_host("spare-01").await;
    let (_, one) = get(&h, Some(&h.admin), "/v1/hosts?limit=1000").await;
    let id = one["items"].as_array().expect("items").iter().find(|x| x["hostname"] == "gpu-b-02").expect("gpu-b-02")["id"].clone();
    let (code, body) =
        h.call(Some(&h.admin), "POST", &format!("/v1/hosts/{}/cordon", id.as_str().expect("id")), Some(r#"{"reason":"RMA"}"#)).await;
    assert_eq!(code, "200", "{body}");

    let (code, sum) = get(&h, Some(&h.viewer), "/v1/fleet/summary").await;
    assert_eq!(code, "200", "{sum}");
    let (_, listed) = get(&h, Some(&h.viewer), "/v1/hosts?limit=1000").await;
    let listed = listed["items"].as_array().expect("items").clone();
    assert_eq!(sum["hosts"], listed.len(), "{sum}");
    assert_eq!(sum["hosts"], names.len() + 1);
    for state in ["active", "bootstrap_issued", "offline", "quarantined"] {
        let n = listed.iter().filter(|x| x["state"] == state).count();
        assert_eq!(sum["byState"][state], n, "{state}: {sum}");
    }
    let unschedulable = listed.iter().filter(|x| x["schedulable"] == false).count();
    assert_eq!(
        (sum["cordoned"].as_u64(), sum["schedulable"].as_u64()),
        (Some(unschedulable as u64), Some((listed.len() - unschedulable) as u64))
    );
    assert_eq!(sum["cordoned"], 1, "{sum}");
    assert_eq!(sum["drifted"], 0);

    // infra goes first (the channel edge), its one host dispatched and unconfirmed.
    let (code, p) = get(&h, Some(&h.viewer), "/v1/rollouts/infra@c0ffee/progress").await;
    assert_eq!(code, "200", "{p}");
    assert_eq!(p["rollout"]["state"], "Active", "{p}");
    assert_eq!(p["waves"][0]["total"], 1, "{p}");
    assert_eq!(p["waves"][0]["states"]["Activating"], 1, "{p}");
    assert_eq!(p["waves"][0]["converged"], 0, "{p}");
    assert!(p["reportError"].is_null(), "{p}");
    let waits = p["waits"].as_array().expect("waits");
    // Typed: dispatched, awaiting its confirmation until a deadline.
    let infra = waits.iter().find(|w| w["host"] == "infra-01").unwrap_or_else(|| panic!("why infra-01 waits: {p}"));
    assert_eq!(infra["why"]["kind"], "confirm", "{infra}");
    assert!(
        infra["why"]["deadline"].is_string() && infra["reason"].as_str().is_some_and(|r| r.contains("awaiting confirmation")),
        "{infra}"
    );
    // The waves alone, without the report (and the plan it costs): what the list page asks.
    let (code, bare) = get(&h, Some(&h.viewer), "/v1/rollouts/infra@c0ffee/progress?waits=false").await;
    assert_eq!(code, "200", "{bare}");
    assert_eq!(bare["waves"], p["waves"]);
    assert_eq!((&bare["waits"], &bare["reportError"]), (&serde_json::json!([]), &Value::Null), "{bare}");
    let (code, _) = get(&h, Some(&h.viewer), "/v1/rollouts/gpu@c0ffee/progress").await;
    assert_eq!(code, "404", "gpu waits on the channel edge: no rollout is open");
    let (code, _) = get(&h, Some(&h.viewer), "/v1/rollouts/not-a-rollout/progress").await;
    assert_eq!(code, "400");
}

/// Reads the SSE stream at `path` with real `curl -N` on a thread; each complete message's
/// (id, data) comes out of the channel as it arrives. The stream's opening `retry:` line
/// comes out as (-1, null): the coordinator sends it once the stream's cursor is set.
fn sse(h: &Harness, path: &str, last_event_id: Option<i64>) -> (std::process::Child, mpsc::Receiver<(i64, Value)>) {
    let mut cmd = Command::new("curl");
    cmd.args(["-sSN", "--tlsv1.3", "--cacert"]).arg(&h.ca).arg("--cert").arg(&h.viewer.0).arg("--key").arg(&h.viewer.1);
    if let Some(id) = last_event_id {
        cmd.args(["-H", &format!("Last-Event-ID: {id}")]);
    }
    let mut child = cmd.arg(format!("{}{path}", h.url)).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().expect("curl");
    let out = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let (mut id, mut data) = (None, None);
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { return };
            if line.starts_with("retry: ") {
                if tx.send((-1, Value::Null)).is_err() {
                    return;
                }
            } else if let Some(v) = line.strip_prefix("id: ") {
                id = v.parse::<i64>().ok();
            } else if let Some(v) = line.strip_prefix("data: ") {
                data = serde_json::from_str::<Value>(v).ok();
            } else if line.is_empty() {
                if let (Some(i), Some(d)) = (id.take(), data.take()) {
                    if tx.send((i, d)).is_err() {
                        return;
                    }
                }
            }
        }
    });
    (child, rx)
}

async fn cordon(h: &Harness, id: &str, reason: &str) {
    let (code, body) =
        h.call(Some(&h.admin), "POST", &format!("/v1/hosts/{id}/cordon"), Some(&format!(r#"{{"reason":"{reason}"}}"#))).await;
    assert_eq!(code, "200", "{body}");
    let (code, body) = h.call(Some(&h.admin), "POST", &format!("/v1/hosts/{id}/uncordon"), Some(r#"{"reason":"back"}"#)).await;
    assert_eq!(code, "200", "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_stream_delivers_live_and_resumes_after_the_last_event_id() {
    let h = Harness::start().await;
    let created = h.create_host("gpu-01").await;
    let id = created["hostId"].as_str().expect("id").to_owned();
    let (mut first, rx) = sse(&h, "/v1/events/stream?kind=host.schedulable", None);
    // Opened without a cursor, the stream starts at the newest event: the host's creation
    // is not sent. Its first message arrives with the first cordon, live.
    assert_eq!(rx.recv_timeout(Duration::from_secs(5)).expect("the stream opens").0, -1);
    let sent = Instant::now();
    cordon(&h, &id, "first").await;
    let (id1, e1) = rx.recv_timeout(Duration::from_secs(5)).expect("the event arrives live");
    let took = sent.elapsed();
    assert!(took < Duration::from_secs(2), "live within a poll: {took:?}");
    assert_eq!(e1["kind"], "host.schedulable", "{e1}");
    assert_eq!(e1["id"], id1);
    assert_eq!(e1["hostId"], id.as_str());
    let (id2, _) = rx.recv_timeout(Duration::from_secs(5)).expect("the uncordon");
    assert!(id2 > id1);
    let _ = first.kill();
    let _ = first.wait();

    // While nobody listens, two more; a reconnect from the first id gets exactly the rest.
    cordon(&h, &id, "second").await;
    let (mut again, rx) = sse(&h, "/v1/events/stream?kind=host.schedulable", Some(id1));
    assert_eq!(rx.recv_timeout(Duration::from_secs(5)).expect("the stream opens").0, -1);
    let mut ids = Vec::new();
    while ids.len() < 3 {
        let (i, e) = rx.recv_timeout(Duration::from_secs(5)).unwrap_or_else(|_| panic!("resumed events, got {ids:?}"));
        assert_eq!(e["kind"], "host.schedulable");
        ids.push(i);
    }
    assert_eq!(ids[0], id2, "resumed right after the last id seen: {ids:?}");
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "in order, none twice: {ids:?}");
    assert!(rx.recv_timeout(Duration::from_millis(600)).is_err(), "nothing beyond what happened");
    let _ = again.kill();
    let _ = again.wait();

    // A cursor that is not an id, a paged stream: 400.
    for (path, header) in [("/v1/events/stream?after=-3", None), ("/v1/events/stream?limit=5", None), ("/v1/events/stream", Some("x"))] {
        let mut cmd = Command::new("curl");
        cmd.args(["-sS", "--tlsv1.3", "-o", "/dev/null", "-w", "%{http_code}", "--cacert"]).arg(&h.ca);
        cmd.arg("--cert").arg(&h.viewer.0).arg("--key").arg(&h.viewer.1);
        if let Some(v) = header {
            cmd.args(["-H", &format!("Last-Event-ID: {v}")]);
        }
        let out = cmd.arg(format!("{}{path}", h.url)).output().expect("curl");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "400", "{path} {header:?}");
    }
}
