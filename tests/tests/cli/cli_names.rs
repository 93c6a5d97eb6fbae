//! One way to name a host or a rollout on `drover`'s command line, as an operator types it:
//! the real binary against a real coordinator over mutual TLS. A host is its hostname or its
//! id in every verb (`host VERB`, `decommission`, `maintenance --host`, `get host`, filters);
//! a rollout is its id, a unique prefix of it, or its channel.

use std::process::Output;

use drover_engine::app::Clock as _;
use drover_proto::artifacts::TimestampDoc;
use drover_proto::keys::KeySigner;
use drover_proto::publish::PublishRequest;
use drover_proto::release::{ReleaseParams, TIMESTAMP, build_release};
use drover_proto::resolve::ReleaseMeta;
use drover_proto::spec::FleetSpec;
use drover_proto::states::HostLifecycle;
use drover_tests::Harness;
use ed25519_dalek::SigningKey;
use serde_json::Value;
use uuid::Uuid;

const FLEET: &[u8] = include_bytes!("../../../examples/fleet.json");

use drover_tests::output_text as text;

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).trim().to_owned()
}

/// Runs `drover args` as the admin; it must succeed. Its stdout, trimmed.
async fn ok(h: &Harness, args: &[&str]) -> String {
    let out = h.drover_as(&h.admin, args).await;
    assert!(out.status.success(), "drover {args:?}: {}", text(&out));
    stdout(&out)
}

/// Runs `drover args` as the admin; it must exit `code`. Its stderr, trimmed.
async fn fails(h: &Harness, args: &[&str], code: i32) -> String {
    let out = h.drover_as(&h.admin, args).await;
    assert_eq!(out.status.code(), Some(code), "drover {args:?}: {}", text(&out));
    assert!(out.stdout.is_empty(), "drover {args:?} printed: {}", text(&out));
    stderr(&out)
}

/// Publishes the example fleet at commit `commit` (its closures renamed by `suffix`), after
/// `previous`; the executor plans it once. Returns the release's timestamp document.
async fn publish(h: &Harness, commit: &str, version: u64, suffix: &str, previous: Option<TimestampDoc>) -> TimestampDoc {
    let spec = String::from_utf8(FLEET.to_vec()).expect("utf-8").replace("-25.05\"", &format!("-{suffix}\""));
    let params = ReleaseParams { meta: ReleaseMeta { ci_commit: commit.into(), created_at: h.clock.now() }, version, previous };
    let ci = [KeySigner::new(SigningKey::from_bytes(&[9u8; 32]))];
    let files = build_release(&FleetSpec::from_json(spec.as_bytes()).expect("spec"), &params, &ci).expect("release");
    let body = serde_json::to_string(&PublishRequest::from_files(&files, None).expect("utf-8")).expect("json");
    let (code, out) = h.call(Some(&h.admin), "POST", "/v1/releases", Some(&body)).await;
    assert_eq!(code, "201", "{out}");
    let app = h.running.app.clone();
    app.executor.tick_now(&app).await.expect("tick");
    serde_json::from_slice(files.get(TIMESTAMP).expect("timestamp")).expect("timestamp doc")
}

/// The example fleet's hosts, active; the example release published and planned once.
async fn started() -> (Harness, Vec<(String, Uuid)>, TimestampDoc) {
    let h = Harness::start_with_long_poll(1).await;
    let mut hosts = Vec::new();
    for name in ["infra-01", "gpu-a-01", "gpu-a-02", "gpu-b-01", "gpu-b-02"] {
        let (id, _, _) = h.host_credentials(name);
        let store = &h.running.app.store;
        store.transition_host(id, HostLifecycle::BootstrapIssued, HostLifecycle::Enrolling, "enrolled", h.clock.now()).expect("enrolling");
        store.transition_host(id, HostLifecycle::Enrolling, HostLifecycle::Active, "checked in", h.clock.now()).expect("active");
        hosts.push((name.to_owned(), id));
    }
    let first = publish(&h, "c0ffee", 1, "25.05", None).await;
    (h, hosts, first)
}

fn id_of(hosts: &[(String, Uuid)], name: &str) -> Uuid {
    hosts.iter().find(|(n, _)| n == name).map(|(_, id)| *id).unwrap_or_else(|| panic!("{name}"))
}

/// The host as the coordinator holds it.
async fn host_json(h: &Harness, id: Uuid) -> Value {
    h.get_json(&format!("/v1/hosts/{id}")).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_host_verb_takes_a_hostname_or_an_id() {
    let (h, hosts, _) = started().await;
    let a02 = id_of(&hosts, "gpu-a-02");

    // `host VERB` by hostname: the verb reaches that host, and the line names it by id and name.
    assert_eq!(ok(&h, &["host", "cordon", "gpu-a-02", "--reason", "disk swap"]).await, format!("{a02} gpu-a-02 active cordoned"));
    assert_eq!(host_json(&h, a02).await["schedulable"], false);
    // Hostnames are stored in lowercase; what the operator typed is compared without case.
    assert_eq!(ok(&h, &["host", "uncordon", "GPU-A-02", "--reason", "swapped"]).await, format!("{a02} gpu-a-02 active schedulable"));
    assert_eq!(host_json(&h, a02).await["schedulable"], true);
    // By id, as before.
    let a02_text = a02.to_string();
    assert_eq!(ok(&h, &["host", "quarantine", &a02_text, "--reason", "ecc"]).await, format!("{a02} gpu-a-02 quarantined cordoned"));

    // An unknown hostname: 65, naming it, and no host changed.
    let before = h.get_json("/v1/hosts").await;
    let err = fails(&h, &["host", "cordon", "dev-05", "--reason", "disk swap"], 65).await;
    assert_eq!(err, "drover: unknown host \"dev-05\": no host of that name on the coordinator");
    // Something no hostname can be: 64 before any request.
    let err = fails(&h, &["host", "cordon", "gpu/a-02", "--reason", "x"], 64).await;
    assert_eq!(err, "drover: HOST \"gpu/a-02\" is not a hostname or a host id");
    // An id no host has: the coordinator's 404, 65.
    let nobody = Uuid::new_v4().to_string();
    let err = fails(&h, &["host", "cordon", &nobody, "--reason", "x"], 65).await;
    assert!(err.contains(&nobody) && err.contains("not found"), "{err}");
    assert_eq!(h.get_json("/v1/hosts").await, before, "nothing changed");

    // `decommission HOST`: the job is for that host.
    let b02 = id_of(&hosts, "gpu-b-02");
    let line = ok(&h, &["decommission", "gpu-b-02", "--mode", "soft-reset", "--reason", "tenant turnover"]).await;
    let job_id = line.split(' ').next().expect("job id").to_owned();
    assert_eq!(line.split(' ').nth(1), Some("soft_reset"), "{line}");
    let job = h.get_json(&format!("/v1/jobs/{job_id}")).await;
    assert_eq!(job["hostId"], b02.to_string(), "{job}");
    // `get jobs --host NAME` and `job get --host NAME` find it.
    for args in [&["get", "jobs", "--host", "gpu-b-02", "-o", "json"][..], &["job", "get", "--host", "gpu-b-02", "-o", "json"]] {
        let out = ok(&h, args).await;
        let v: Value = serde_json::from_str(&out).expect("json");
        let jobs = v.as_array().unwrap_or_else(|| panic!("{args:?}: {v}"));
        assert_eq!(jobs.len(), 1, "{args:?}: {v}");
        assert_eq!(jobs[0]["jobId"], job_id.as_str(), "{args:?}: {v}");
    }
    // The ids only: the soft reset above moves on meanwhile, which is not what is asked here.
    let job_ids = async || {
        let v = h.get_json("/v1/jobs").await;
        v["items"].as_array().map(|a| a.iter().map(|j| j["jobId"].to_string()).collect::<Vec<_>>()).unwrap_or_default()
    };
    let jobs_before = job_ids().await;
    let err = fails(&h, &["decommission", "gpu-b-03", "--mode", "soft-reset", "--reason", "r"], 65).await;
    assert_eq!(err, "drover: unknown host \"gpu-b-03\": no host of that name on the coordinator");

    // `maintenance request --host`: a hostname and the same host's id are one host; an unknown
    // name among them stops the request before anything is sent.
    let b01 = id_of(&hosts, "gpu-b-01");
    let b01_text = b01.to_string();
    let err = fails(&h, &["maintenance", "request", "--host", "gpu-b-01", "--host", "spare-09", "--reason", "scrub"], 65).await;
    assert_eq!(err, "drover: unknown host \"spare-09\": no host of that name on the coordinator");
    assert_eq!(job_ids().await, jobs_before, "no job was started");
    let args = ["maintenance", "request", "--host", "gpu-b-01", "--host", &b01_text, "--activity", "validate_clean", "--reason", "scrub"];
    let out = ok(&h, &args).await;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "one request, one job: {out}");
    assert!(lines[1].contains(" gpu-b-01 "), "{out}");
    let jobs = h.get_json(&format!("/v1/jobs?host={b01}")).await;
    assert_eq!(jobs["items"].as_array().map(Vec::len), Some(1), "{jobs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_host_shows_one_host_by_name_or_id() {
    let (h, hosts, _) = started().await;
    let a01 = id_of(&hosts, "gpu-a-01");
    let table = ok(&h, &["get", "host", "gpu-a-01"]).await;
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 2, "a header and one row: {table}");
    assert!(lines[0].starts_with("NAME") && lines[1].starts_with("gpu-a-01 ") && lines[1].contains("active"), "{table}");
    let wide = ok(&h, &["get", "host", &a01.to_string(), "-o", "wide"]).await;
    assert!(wide.lines().nth(1).expect("row").contains(&a01.to_string()), "{wide}");
    // `-o json`: the host's own object, as `describe host -o json` prints it.
    let one: Value = serde_json::from_str(&ok(&h, &["get", "host", "gpu-a-01", "-o", "json"]).await).expect("json");
    assert_eq!(one, host_json(&h, a01).await);
    assert_eq!(one["id"], a01.to_string());
    // The listing is unchanged.
    assert_eq!(ok(&h, &["get", "hosts"]).await.lines().count(), 6);
    let err = fails(&h, &["get", "host", "gpu-z-99"], 65).await;
    assert_eq!(err, "drover: unknown host \"gpu-z-99\": no host of that name on the coordinator");
    fails(&h, &["get", "host", "gpu-a-01", "--state", "active"], 64).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_is_its_id_a_unique_prefix_or_its_channel() {
    let (h, _, first) = started().await;
    let status = |out: String| -> Value { serde_json::from_str(&out).expect("status json") };

    // The channel: its current rollout.
    assert_eq!(status(ok(&h, &["rollout", "status", "infra", "-o", "json"]).await)["rolloutId"], "infra@c0ffee");
    // A unique prefix.
    assert_eq!(status(ok(&h, &["rollout", "status", "infra@c0f", "-o", "json"]).await)["rolloutId"], "infra@c0ffee");
    // A prefix without `@` that is no channel's name (`gpu` waits behind `infra`: no rollout).
    assert_eq!(status(ok(&h, &["rollout", "status", "inf", "-o", "json"]).await)["rolloutId"], "infra@c0ffee");
    // Actions too.
    assert_eq!(ok(&h, &["rollout", "halt", "infra", "--reason", "looks wrong"]).await, "infra@c0ffee Halted");
    assert_eq!(ok(&h, &["rollout", "resume", "infra@c0", "--reason", "false alarm"]).await, "infra@c0ffee Active");

    // Cancelled, then a second commit opens infra@c0ffee2: `infra@c0f` now starts two ids,
    // the whole id still names the first, and the channel names the live one.
    assert_eq!(ok(&h, &["rollout", "cancel", "infra", "--reason", "superseded by a fix"]).await, "infra@c0ffee Cancelled");
    publish(&h, "c0ffee2", 2, "25.11", Some(first)).await;
    let err = fails(&h, &["rollout", "status", "infra@c0f"], 65).await;
    assert_eq!(
        err,
        "drover: rollout \"infra@c0f\" is ambiguous: it starts 2 rollout ids: infra@c0ffee, infra@c0ffee2; give more of the id"
    );
    assert_eq!(status(ok(&h, &["rollout", "status", "infra@c0ffee", "-o", "json"]).await)["rolloutId"], "infra@c0ffee");
    assert_eq!(status(ok(&h, &["rollout", "status", "infra", "-o", "json"]).await)["rolloutId"], "infra@c0ffee2");
    // `describe rollout` and `events --rollout` take the same names.
    let described = ok(&h, &["describe", "rollout", "infra@c0ffee2", "-o", "json"]).await;
    assert_eq!(status(described)["rolloutId"], "infra@c0ffee2");
    let events: Value = serde_json::from_str(&ok(&h, &["events", "--rollout", "infra", "-o", "json"]).await).expect("json");
    let events = events.as_array().expect("events");
    assert!(!events.is_empty() && events.iter().all(|e| e["rolloutId"] == "infra@c0ffee2"), "{events:?}");

    // Unknown, and impossible.
    let err = fails(&h, &["rollout", "status", "training"], 65).await;
    assert_eq!(err, "drover: unknown rollout \"training\": no rollout id starts with it and no channel has that name");
    fails(&h, &["rollout", "halt", "in/fra", "--reason", "x"], 64).await;
    fails(&h, &["rollout", "halt", "infra"], 64).await;
}
