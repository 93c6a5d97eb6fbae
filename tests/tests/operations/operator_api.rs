//! The operator read API, `/metrics` and `/readyz` against a real coordinator: listings page
//! without gaps or duplicates, filters filter, bad query values are a 400 in the error shape,
//! roles are checked per route, token listings never hold a token or its hash, the metric
//! families are all exported, and readiness follows the latest release.

use drover_engine::app::Clock as _;
use drover_engine::store::{CertKind, NewCert};
use drover_proto::release::{ReleaseParams, build_release};
use drover_proto::resolve::ReleaseMeta;
use drover_proto::spec::FleetSpec;
use drover_tests::Harness;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// GET as `creds`; the status and the body parsed as JSON (`Null` when it is not JSON).
async fn get(h: &Harness, creds: Option<&(std::path::PathBuf, std::path::PathBuf)>, path: &str) -> (String, Value) {
    let (code, body) = h.call(creds, "GET", path, None).await;
    (code, serde_json::from_str(&body).unwrap_or(Value::Null))
}

/// Follows `next` from `first` until it is null; every page's items, in order.
async fn all_pages(h: &Harness, base: &str, cursor_param: &str) -> (Vec<Value>, usize) {
    let mut items = Vec::new();
    let mut pages = 0;
    let mut path = base.to_owned();
    loop {
        let (code, page) = get(h, Some(&h.viewer), &path).await;
        assert_eq!(code, "200", "{path}: {page}");
        pages += 1;
        assert!(pages < 50, "paging does not end");
        items.extend(page["items"].as_array().expect("items").iter().cloned());
        match &page["next"] {
            Value::Null => break,
            Value::String(c) => path = format!("{base}&{cursor_param}={c}"),
            Value::Number(n) => path = format!("{base}&{cursor_param}={n}"),
            other => panic!("next is {other}"),
        }
    }
    (items, pages)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_page_by_cursor_without_duplicates_and_filter_by_state() {
    let h = Harness::start().await;
    let mut ids = Vec::new();
    for name in ["gpu-05", "gpu-02", "gpu-04", "gpu-01", "gpu-03"] {
        ids.push(h.create_host(name).await["hostId"].as_str().expect("id").to_owned());
    }
    let (items, pages) = all_pages(&h, "/v1/hosts?limit=2", "after").await;
    assert_eq!(pages, 3, "5 hosts by 2 is three pages");
    let names: Vec<&str> = items.iter().map(|i| i["hostname"].as_str().expect("hostname")).collect();
    assert_eq!(names, ["gpu-01", "gpu-02", "gpu-03", "gpu-04", "gpu-05"], "ordered by hostname, no duplicates, no gaps");
    assert!(items.iter().all(|i| i["state"] == "bootstrap_issued" && i["schedulable"].is_boolean() && i["lastCheckin"].is_null()));

    let (_, page) = get(&h, Some(&h.viewer), "/v1/hosts?state=bootstrap_issued").await;
    assert_eq!(page["items"].as_array().expect("items").len(), 5);
    assert!(page["next"].is_null());
    let (_, page) = get(&h, Some(&h.viewer), "/v1/hosts?state=active").await;
    assert_eq!(page["items"], serde_json::json!([]));

    // One host in detail, with a certificate the CA issued for it.
    let id = uuid::Uuid::parse_str(&ids[0]).expect("uuid");
    let now = h.clock.now();
    let cert = NewCert {
        serial: "0a1b2c".into(),
        kind: CertKind::Host,
        host_id: Some(id),
        subject: "gpu-05".into(),
        not_before: now,
        not_after: now.plus_secs(86_400),
    };
    h.running.app.store.record_cert(&cert).expect("cert");
    let (code, host) = get(&h, Some(&h.viewer), &format!("/v1/hosts/{id}")).await;
    assert_eq!(code, "200", "{host}");
    assert_eq!(host["hostname"], "gpu-05");
    assert_eq!(host["certificates"][0]["serial"], "0a1b2c");
    assert_eq!(host["certificates"][0]["kind"], "host");
    assert_eq!(host["certificates"][0]["revoked"], false);
    assert!(host["certificates"][0]["notAfter"].is_string());
    let (code, _) = get(&h, Some(&h.viewer), &format!("/v1/hosts/{}", uuid::Uuid::new_v4())).await;
    assert_eq!(code, "404");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_and_maintenance_page_like_the_other_listings() {
    let h = Harness::start().await;
    let now = h.clock.now();
    let mut want = Vec::new();
    for (i, name) in ["gpu-01", "gpu-02", "gpu-03", "gpu-04", "gpu-05"].into_iter().enumerate() {
        let id = uuid::Uuid::parse_str(h.create_host(name).await["hostId"].as_str().expect("id")).expect("uuid");
        let kind = if i == 4 { "storage_cleanup" } else { "soft_reset" };
        // Three share a creation time: the id orders them.
        let at = now.plus_secs([3, 1, 1, 1, 2][i]);
        let job = drover_engine::store::NewJob {
            job_id: uuid::Uuid::new_v4(),
            kind: kind.into(),
            host_id: Some(id),
            input: serde_json::json!({ "kind": kind, "storage": "none" }),
            created_at: at,
            request_id: None,
        };
        h.running.app.store.create_job(&job).expect("job");
        want.push((at, job.job_id.to_string()));
    }
    want.sort();
    let want: Vec<String> = want.into_iter().map(|(_, id)| id).collect();
    let (items, pages) = all_pages(&h, "/v1/jobs?limit=2", "after").await;
    assert_eq!(pages, 3, "5 jobs by 2 is three pages");
    let ids: Vec<&str> = items.iter().map(|j| j["jobId"].as_str().expect("jobId")).collect();
    assert_eq!(ids, want, "oldest first, ids breaking ties, no duplicates, no gaps");
    let (items, _) = all_pages(&h, "/v1/jobs?limit=1&kind=storage_cleanup", "after").await;
    assert_eq!(items.len(), 1);
    // A kind the coordinator creates but none of which exist: an empty page, not a 400.
    let (code, page) = get(&h, Some(&h.viewer), "/v1/jobs?kind=maas_onboarding").await;
    assert_eq!((code.as_str(), &page["items"], &page["next"]), ("200", &serde_json::json!([]), &Value::Null));
    let (code, page) = get(&h, Some(&h.viewer), "/v1/maintenance").await;
    assert_eq!((code.as_str(), &page["items"], &page["next"]), ("200", &serde_json::json!([]), &Value::Null));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_listing_never_shows_the_token_or_its_hash() {
    let h = Harness::start().await;
    let created = h.create_host("gpu-07").await;
    let token = created["token"].as_str().expect("token").to_owned();
    let hash = hex::encode(Sha256::digest(token.as_bytes()));
    let host_id = created["hostId"].as_str().expect("id");
    for path in ["/v1/tokens".to_owned(), format!("/v1/tokens?hostId={host_id}")] {
        let (code, body) = h.call(Some(&h.admin), "GET", &path, None).await;
        assert_eq!(code, "200", "{body}");
        assert!(!body.contains(&token), "{path} shows the token: {body}");
        assert!(!body.contains(&hash), "{path} shows the token's hash: {body}");
        let page: Value = serde_json::from_str(&body).expect("json");
        let row = &page["items"][0];
        assert_eq!(row["hostId"], host_id);
        for key in ["id", "createdAt", "expiresAt"] {
            assert!(row[key].is_string(), "{key} missing: {row}");
        }
        assert!(row["usedAt"].is_null());
    }
    let (_, page) = get(&h, Some(&h.viewer), &format!("/v1/tokens?hostId={}", uuid::Uuid::new_v4())).await;
    assert_eq!(page["items"], serde_json::json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_and_audit_page_by_id() {
    let h = Harness::start().await;
    let mut ids = Vec::new();
    for i in 1..=5 {
        ids.push(h.create_host(&format!("cpu-{i:02}")).await["hostId"].as_str().expect("id").to_owned());
    }
    let (events, pages) = all_pages(&h, "/v1/events?kind=host.created&limit=2", "after").await;
    assert_eq!(events.len(), 5, "{events:?}");
    assert!(pages >= 3);
    let event_ids: Vec<i64> = events.iter().map(|e| e["id"].as_i64().expect("id")).collect();
    assert!(event_ids.windows(2).all(|w| w[0] < w[1]), "strictly increasing, so no duplicates: {event_ids:?}");
    assert!(events.iter().all(|e| e["kind"] == "host.created"));
    let (_, one) = get(&h, Some(&h.viewer), &format!("/v1/events?host={}", ids[2])).await;
    let one = one["items"].as_array().expect("items").clone();
    assert!(!one.is_empty() && one.iter().all(|e| e["hostId"] == ids[2].as_str()), "{one:?}");

    let (audit, _) = all_pages(&h, "/v1/audit?actor=alice&limit=2", "after").await;
    assert_eq!(audit.len(), 5, "{audit:?}");
    let audit_ids: Vec<i64> = audit.iter().map(|a| a["id"].as_i64().expect("id")).collect();
    assert!(audit_ids.windows(2).all(|w| w[0] < w[1]), "{audit_ids:?}");
    assert!(audit.iter().all(|a| a["action"] == "host.create" && a["role"] == "admin" && a["expectedState"] == "bootstrap_issued"));
    let (_, by_target) = get(&h, Some(&h.viewer), &format!("/v1/audit?target={}", ids[4])).await;
    assert_eq!(by_target["items"].as_array().expect("items").len(), 1);
    let (_, nobody) = get(&h, Some(&h.viewer), "/v1/audit?actor=mallory").await;
    assert_eq!(nobody["items"], serde_json::json!([]));
    assert!(nobody["next"].is_null());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_query_values_are_400_with_a_json_error() {
    let h = Harness::start().await;
    for path in [
        "/v1/hosts?limit=abc",
        "/v1/hosts?limit=-1",
        "/v1/hosts?limit=0",
        "/v1/hosts?state=bogus",
        "/v1/hosts?after=not-a-cursor!",
        "/v1/hosts?frobnicate=1",
        "/v1/hosts/not-a-uuid",
        "/v1/tokens?hostId=nope",
        "/v1/rollouts?state=sideways",
        "/v1/events?host=nope",
        "/v1/events?after=x",
        "/v1/events?rollout=..%2F..%2Fetc",
        "/v1/events?limit=99999999999999",
        "/v1/audit?limit=ten",
        "/v1/audit?after=1.5",
        // Ids start at 1: a negative cursor was never issued.
        "/v1/events?after=-5",
        "/v1/audit?after=-1",
        // A kind no job has: a typo must not pass for a quiet fleet.
        "/v1/jobs?kind=soft-reset",
        "/v1/jobs?after=not-a-cursor",
        "/v1/jobs?limit=0",
        "/v1/maintenance?after=bm90LWEtY3Vyc29y",
        "/v1/maintenance?state=running",
    ] {
        let (code, body) = get(&h, Some(&h.viewer), path).await;
        assert_eq!(code, "400", "{path}: {body}");
        assert_eq!(body["error"]["code"], "bad_request", "{path}: {body}");
        assert!(body["error"]["message"].is_string(), "{path}: {body}");
    }
    let host = uuid::Uuid::new_v4();
    let (code, body) = get(&h, Some(&h.viewer), &format!("/v1/hosts/{host}/evidence?after=-1")).await;
    assert_eq!(code, "400", "{body}");
    assert!(body["error"]["message"].as_str().is_some_and(|m| m.contains("after=-1")), "{body}");
    // Limits above the store's page are clamped, not refused.
    let (code, _) = get(&h, Some(&h.viewer), "/v1/events?limit=5000").await;
    assert_eq!(code, "200");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn viewer_reads_host_certificate_is_403_anonymous_is_401() {
    let h = Harness::start().await;
    let (host_id, host_cert, _) = h.host_credentials("gpu-09");
    let detail = format!("/v1/hosts/{host_id}");
    for path in ["/v1/hosts", detail.as_str(), "/v1/tokens", "/v1/releases", "/v1/rollouts", "/v1/events", "/v1/audit", "/metrics"] {
        for creds in [&h.admin, &h.viewer] {
            let (code, body) = h.call(Some(creds), "GET", path, None).await;
            assert_eq!(code, "200", "{path}: {body}");
        }
        let (code, body) = get(&h, Some(&host_cert), path).await;
        assert_eq!(code, "403", "{path}: {body}");
        assert_eq!(body["error"]["code"], "forbidden");
        let (code, body) = get(&h, None, path).await;
        assert_eq!(code, "401", "{path}: {body}");
        assert_eq!(body["error"]["code"], "unauthenticated");
    }
}

/// The value of an unlabelled (or fully labelled) sample line `name value`.
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("{series} missing:\n{text}"))
        .parse()
        .expect("number")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_export_every_family_and_follow_the_fleet() {
    let h = Harness::start_with_long_poll(0).await;
    let (host_id, cert, _) = h.host_credentials("gpu-11");
    h.create_host("gpu-12").await;
    let (code, text) = h.call(Some(&h.viewer), "GET", "/metrics", None).await;
    assert_eq!(code, "200", "{text}");
    for (name, kind) in [
        ("drover_build_info", "gauge"),
        ("drover_hosts", "gauge"),
        ("drover_checkins_total", "counter"),
        ("drover_checkin_duration_seconds", "histogram"),
        ("drover_checkin_work_seconds", "histogram"),
        ("drover_checkin_views_total", "counter"),
        ("drover_long_polls_held", "gauge"),
        ("drover_rollouts", "gauge"),
        ("drover_tasks", "gauge"),
        ("drover_verification_failures_total", "counter"),
        ("drover_hosts_cordoned", "gauge"),
        ("drover_jobs", "gauge"),
        ("drover_rollout_hosts", "gauge"),
        ("drover_certificate_expiry_timestamp_seconds", "gauge"),
        ("drover_client_certificates_earliest_expiry_timestamp_seconds", "gauge"),
        ("drover_http_requests_total", "counter"),
        ("process_cpu_seconds_total", "counter"),
        ("process_resident_memory_bytes", "gauge"),
        ("process_open_fds", "gauge"),
        ("process_max_fds", "gauge"),
        ("process_start_time_seconds", "gauge"),
    ] {
        assert!(text.contains(&format!("# HELP {name} ")), "HELP for {name}:\n{text}");
        assert!(text.contains(&format!("# TYPE {name} {kind}\n")), "TYPE for {name}:\n{text}");
    }
    // The commit is the binary's (its build script's), so an engine embedded in a test has none
    // (`serve_runs_from_a_config_file_and_stops_on_sigterm` checks the binary's).
    let info = format!("drover_build_info{{version=\"{}\",commit=\"unknown\"}} 1", env!("CARGO_PKG_VERSION"));
    assert!(text.lines().any(|l| l == info), "{text}");
    // Both hosts were created in bootstrap_issued; every other state is exported at zero.
    assert_eq!(sample(&text, "drover_hosts{state=\"bootstrap_issued\"}"), 2.0);
    assert_eq!(sample(&text, "drover_hosts{state=\"active\"}"), 0.0);
    assert_eq!(sample(&text, "drover_rollouts{state=\"Opening\"}"), 0.0);
    assert_eq!(sample(&text, "drover_tasks{state=\"queued\"}"), 0.0);
    assert_eq!(sample(&text, "drover_long_polls_held"), 0.0);
    let before = sample(&text, "drover_checkins_total");

    let checkin = serde_json::json!({ "agentVersion": "test", "bootId": "b-1" }).to_string();
    let (code, body) = h.call(Some(&cert), "POST", "/v1/agent/checkin", Some(&checkin)).await;
    assert_eq!(code, "200", "{body}");
    let (_, text) = h.call(Some(&h.admin), "GET", "/metrics", None).await;
    assert_eq!(sample(&text, "drover_checkins_total"), before + 1.0, "{text}");
    assert_eq!(sample(&text, "drover_checkin_duration_seconds_count"), before + 1.0);
    assert_eq!(sample(&text, "drover_checkin_duration_seconds_bucket{le=\"+Inf\"}"), before + 1.0);

    // The CA's and the server's own certificates end in the future.
    let now = h.clock.now();
    for which in ["ca", "server"] {
        let end = sample(&text, &format!("drover_certificate_expiry_timestamp_seconds{{certificate=\"{which}\"}}"));
        assert!(end > now.unix() as f64, "{which}: {text}");
    }
    // Each host's newest unrevoked certificate is the one in use: gpu-11 renewed (3 days,
    // then 30), so the earliest end among hosts is gpu-12's 10 days, not the superseded 3.
    let hosts = h.running.app.store.list_hosts(&Default::default()).expect("hosts");
    let gpu12 = hosts.iter().find(|x| x.hostname == "gpu-12").expect("gpu-12").id;
    for (serial, host, days) in [("feed01", host_id, 3), ("feed02", host_id, 30), ("feed03", gpu12, 10)] {
        let cert = NewCert {
            serial: serial.into(),
            kind: CertKind::Host,
            host_id: Some(host),
            subject: "host".into(),
            not_before: now,
            not_after: now.plus_secs(days * 86_400),
        };
        h.running.app.store.record_cert(&cert).expect("cert");
    }
    let (_, text) = h.call(Some(&h.admin), "GET", "/metrics", None).await;
    let earliest = sample(&text, "drover_client_certificates_earliest_expiry_timestamp_seconds{kind=\"host\"}");
    assert_eq!(earliest, now.plus_secs(10 * 86_400).unix() as f64, "{text}");
}

/// The kube-state-metrics-like gauges follow what happens: a cordon, a job, a rollout's
/// waves, the newest release's age; requests are counted by matched route and status, a path
/// no route matches under `unmatched`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_follow_cordons_jobs_rollouts_releases_and_routes() {
    let h = Harness::start_with_long_poll(0).await;
    let (host_id, cert, _) = h.host_credentials("gpu-31");
    let checkin = serde_json::json!({ "agentVersion": "test", "bootId": "b-1" }).to_string();
    let (code, body) = h.call(Some(&cert), "POST", "/v1/agent/checkin", Some(&checkin)).await;
    assert_eq!(code, "200", "{body}");
    let (_, text) = h.call(Some(&h.admin), "GET", "/metrics", None).await;
    assert_eq!(sample(&text, "drover_hosts_cordoned"), 0.0, "{text}");
    let (code, body) = h.call(Some(&h.admin), "POST", &format!("/v1/hosts/{host_id}/cordon"), Some(r#"{"reason":"RMA"}"#)).await;
    assert_eq!(code, "200", "{body}");
    let now = h.clock.now();
    let job = drover_engine::store::NewJob {
        job_id: uuid::Uuid::new_v4(),
        kind: "storage_cleanup".into(),
        host_id: Some(host_id),
        input: serde_json::json!({ "kind": "storage_cleanup", "scope": "local" }),
        created_at: now,
        request_id: None,
    };
    h.running.app.store.create_job(&job).expect("job");
    // The example fleet rolling: its infra rollout in flight.
    let names = h.example_fleet_rolling().await;
    h.clock.advance(90);
    let (code, _) = h.call(Some(&h.viewer), "GET", "/v1/no-such-thing", None).await;
    assert_eq!(code, "404");

    let (_, text) = h.call(Some(&h.admin), "GET", "/metrics", None).await;
    assert_eq!(sample(&text, "drover_hosts_cordoned"), 1.0, "{text}");
    // Pending, or running once the job engine took it up: one job of the kind either way.
    let jobs: f64 = text
        .lines()
        .filter_map(|l| l.strip_prefix("drover_jobs{kind=\"storage_cleanup\","))
        .filter_map(|r| r.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(jobs, 1.0, "{text}");
    assert_eq!(sample(&text, "drover_release_signed_timestamp_seconds"), now.unix() as f64, "{text}");
    assert_eq!(sample(&text, "drover_release_age_seconds"), 90.0, "{text}");
    // The infra rollout is in flight, its one host dispatched; gpu waits on the channel edge
    // with no rollout opened, so it has no series.
    assert!(text.lines().any(|l| l == "drover_rollout_hosts{rollout=\"infra@c0ffee\",wave=\"0\",state=\"Activating\"} 1"), "{text}");
    assert!(!text.contains("drover_rollout_hosts{rollout=\"gpu@"), "{text}");
    // gpu-31's check-in and one per fleet host.
    let checkins = format!("drover_http_requests_total{{route=\"/v1/agent/checkin\",method=\"POST\",status=\"200\"}} {}", 1 + names.len());
    for series in [
        checkins.as_str(),
        "drover_http_requests_total{route=\"/v1/hosts/{id}/cordon\",method=\"POST\",status=\"200\"} 1",
        "drover_http_requests_total{route=\"/metrics\",method=\"GET\",status=\"200\"} 1",
        "drover_http_requests_total{route=\"unmatched\",method=\"GET\",status=\"404\"} 1",
    ] {
        assert!(text.lines().any(|l| l == series), "{series}:\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkin_work_histogram_leaves_the_long_poll_hold_out() {
    // A 1 s long-poll with no work: the check-in is held the whole second.
    let h = Harness::start_with_long_poll(1).await;
    let (_, cert, _) = h.host_credentials("gpu-21");
    let checkin = serde_json::json!({ "agentVersion": "test", "bootId": "b-1" }).to_string();
    // The first check-in moves the host to active (a write); the second is routine.
    for _ in 0..2 {
        let (code, body) = h.call(Some(&cert), "POST", "/v1/agent/checkin", Some(&checkin)).await;
        assert_eq!(code, "200", "{body}");
    }
    let (_, text) = h.call(Some(&h.admin), "GET", "/metrics", None).await;
    assert_eq!(sample(&text, "drover_checkin_duration_seconds_count"), 2.0, "{text}");
    assert_eq!(sample(&text, "drover_checkin_duration_seconds_bucket{le=\"0.5\"}"), 0.0, "both were held 1 s: {text}");
    assert_eq!(sample(&text, "drover_checkin_work_seconds_count"), 2.0, "{text}");
    assert_eq!(sample(&text, "drover_checkin_work_seconds_bucket{le=\"0.25\"}"), 2.0, "the hold counted as work: {text}");
    assert!(sample(&text, "drover_checkin_work_seconds_sum") < 0.5, "{text}");
    // SQLite keeps no cache of views: each check-in read its view from the store.
    assert_eq!(sample(&text, "drover_checkin_views_total{source=\"store\"}"), 2.0, "{text}");
    assert_eq!(sample(&text, "drover_checkin_views_total{source=\"cache\"}"), 0.0, "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_is_503_until_a_release_is_stored_that_verifies() {
    let h = Harness::start().await;
    let (code, body) = get(&h, None, "/readyz").await;
    assert_eq!(code, "503", "{body}");
    assert_eq!(body["error"]["code"], "no_release", "{body}");
    let (code, _) = h.call(None, "GET", "/healthz", None).await;
    assert_eq!(code, "200", "liveness does not depend on releases");

    let spec = FleetSpec::from_json(include_bytes!("../../../examples/fleet.json")).expect("spec");
    let now = h.clock.now();
    let params = ReleaseParams { meta: ReleaseMeta { ci_commit: "c0ffee".into(), created_at: now }, version: 3, previous: None };
    let ci = drover_proto::keys::KeySigner::new(ed25519_dalek::SigningKey::from_bytes(&[9u8; 32]));
    let files = build_release(&spec, &params, &[ci]).expect("release");
    h.running.app.store.put_release(3, now, &files).expect("store release");
    // Written behind the API's back: the background check sees it within a second or so.
    let body = readyz_until(&h, "200").await;
    assert_eq!(body["releaseVersion"], 3);

    let (code, page) = get(&h, Some(&h.viewer), "/v1/releases").await;
    assert_eq!(code, "200");
    assert_eq!(page["items"][0]["version"], 3);
    assert!(page["items"][0]["paths"].as_array().expect("paths").iter().any(|p| p == "timestamp.json"), "{page}");

    // Months later, with CI no longer re-signing, the stored timestamp is stale: not ready.
    h.clock.advance(365 * 86_400);
    let body = readyz_until(&h, "503").await;
    assert_eq!(body["error"]["code"], "release_unverified", "{body}");
}

/// Polls `/readyz` (it answers from a verdict checked every second) until it answers `code`
/// with the verdict of a check made after the last change, for at most 10 s.
async fn readyz_until(h: &Harness, code: &str) -> serde_json::Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (got, body) = get(h, None, "/readyz").await;
        // "store_unavailable" right after the fake clock jumped: the verdict predates it.
        let interim = body["error"]["code"] == "store_unavailable" || body["error"]["code"] == "no_release";
        if got == code && !(code == "503" && interim) {
            return body;
        }
        assert!(std::time::Instant::now() < deadline, "/readyz never answered {code}: {got} {body}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_background_loop_is_listed_and_the_leaders_loops_run_on_the_one_sqlite_process() {
    let h = Harness::start().await;
    for creds in [None, Some(&h.host_credentials("gpu-13").1)] {
        let (code, body) = get(&h, creds, "/v1/loops").await;
        assert!(code == "401" || code == "403", "a reader certificate is needed: {code} {body}");
    }
    // The executor ticks once at start, and the sweeps and the check-in flush within seconds:
    // wait (bounded) until each has made a pass.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let loops = loop {
        let (code, body) = get(&h, Some(&h.viewer), "/v1/loops").await;
        assert_eq!(code, "200", "{body}");
        let loops = body["loops"].as_array().expect("loops").clone();
        let ran = |name: &str| loops.iter().any(|l| l["name"] == name && l["runs"].as_u64().unwrap_or(0) > 0);
        if ["executor", "job_tick", "checkin_flush", "readiness", "leader_supervision"].iter().all(|n| ran(n)) {
            break loops;
        }
        assert!(std::time::Instant::now() < deadline, "loops did not all make a pass: {loops:#?}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    let names: Vec<&str> = loops.iter().map(|l| l["name"].as_str().expect("name")).collect();
    assert_eq!(names, drover_engine::loops::ALL.map(drover_engine::loops::Loop::name).to_vec(), "every loop is listed, in one order");
    let get_loop = |name: &str| loops.iter().find(|l| l["name"] == name).expect("listed").clone();
    // SQLite: one process, always the leader, so the leader's loops were started here.
    for name in ["executor", "onboarding", "devices", "offline_sweep", "lease_sweep", "checkin_flush", "readiness"] {
        let l = get_loop(name);
        assert_eq!(l["running"], true, "{name}: {l}");
        assert!(l["startedAt"].is_string() && l["stoppedAt"].is_null(), "{name}: {l}");
    }
    // The harness turns the drift reconciler off (an interval of 0): started, it returns at
    // once, and shows as stopped rather than running.
    let off = get_loop("reconciler");
    assert_eq!(off["running"], false, "{off}");
    assert!(off["startedAt"].is_string() && off["stoppedAt"].is_string(), "{off}");
    // No releases_dir configured: its loop is listed, not running, never started.
    let dir = get_loop("releases_dir");
    assert_eq!((dir["running"].clone(), dir["runs"].clone(), dir["startedAt"].clone()), (Value::Bool(false), 0.into(), Value::Null));
    // The executor's pass before any release is a success: nothing failed, no error kept.
    assert_eq!(get_loop("executor")["failures"], 0);
    let (code, text) = h.call(Some(&h.viewer), "GET", "/metrics", None).await;
    assert_eq!(code, "200", "{text}");
    for (name, kind) in [
        ("drover_loop_running", "gauge"),
        ("drover_loop_runs_total", "counter"),
        ("drover_loop_failures_total", "counter"),
        ("drover_loop_last_run_timestamp_seconds", "gauge"),
    ] {
        assert!(text.contains(&format!("# TYPE {name} {kind}\n")), "TYPE for {name}:\n{text}");
    }
    assert_eq!(sample(&text, "drover_loop_running{loop=\"executor\"}"), 1.0);
    assert_eq!(sample(&text, "drover_loop_running{loop=\"releases_dir\"}"), 0.0);
    assert!(sample(&text, "drover_loop_runs_total{loop=\"executor\"}") >= 1.0);
}
