//! The observability kit in `examples/observability`, proven against the real tools: a real
//! Prometheus (Debian's `prometheus`) loads the example configuration, with only its targets
//! and file paths pointed at this test, scrapes a live coordinator over TLS 1.3 with a viewer
//! certificate, and evaluates the alerting rules; `promtool` checks the configuration and
//! runs the rules' unit tests; and every metric the rules and the Grafana dashboard name is
//! one Prometheus actually received from the coordinator.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use drover_engine::app::Clock as _;
use drover_tests::Harness;
use serde_json::Value;

fn kit(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/observability").join(file)
}

/// A tool from Debian's `prometheus` package, which `.ci/run` installs.
fn tool(name: &str) -> Command {
    drover_tests::required_tool(name, "prometheus")
}

fn run_ok(mut cmd: Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{what} failed:\n{text}");
    text
}

/// The `drover_*` and `process_*` metric names a PromQL expression reads.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let starts = (expr[i..].starts_with("drover_") || expr[i..].starts_with("process_"))
            && (i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_'));
        if starts {
            let end = expr[i..].find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).map_or(expr.len(), |n| i + n);
            out.insert(expr[i..end].to_owned());
            i = end;
        } else {
            i += 1;
        }
    }
    out
}

/// Every `expr:` of the rules file (each on one line).
fn rule_exprs() -> Vec<String> {
    let text = std::fs::read_to_string(kit("drover-alerts.yml")).expect("rules");
    text.lines().filter_map(|l| l.trim().strip_prefix("expr: ")).map(str::to_owned).collect()
}

/// Every target expression of the dashboard.
fn dashboard_exprs() -> Vec<String> {
    let dash: Value = serde_json::from_str(&std::fs::read_to_string(kit("grafana-dashboard.json")).expect("dashboard")).expect("json");
    assert_eq!(dash["uid"], "drover-fleet");
    let panels = dash["panels"].as_array().expect("panels");
    let mut ids = BTreeSet::new();
    let mut exprs = Vec::new();
    for p in panels {
        assert!(ids.insert(p["id"].as_u64().expect("panel id")), "panel ids are unique: {p}");
        for t in p["targets"].as_array().into_iter().flatten() {
            assert_eq!(t["datasource"]["uid"], "${datasource}", "every query uses the chosen data source: {p}");
            exprs.push(t["expr"].as_str().expect("expr").to_owned());
        }
    }
    exprs
}

/// `GET` on Prometheus's HTTP API with `curl`; the `data` of a successful answer.
fn api(port: u16, path: &str, query: Option<&str>) -> Option<Value> {
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "--max-time", "5", "-G", &format!("http://127.0.0.1:{port}{path}")]);
    if let Some(q) = query {
        cmd.args(["--data-urlencode", &format!("query={q}")]);
    }
    let out = cmd.output().ok()?;
    let v: Value = serde_json::from_slice(&out.stdout).ok()?;
    (v["status"] == "success").then(|| v["data"].clone())
}

fn wait_for<T>(what: &str, secs: u64, mut check: impl FnMut() -> Option<T>, log: &Path) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not after {secs} s; prometheus log:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn the_alerting_rules_pass_their_unit_tests() {
    let mut check = tool("promtool");
    check.args(["check", "rules"]).arg(kit("drover-alerts.yml"));
    assert!(run_ok(check, "promtool check rules").contains("SUCCESS: 14 rules found"));
    let mut test = tool("promtool");
    test.current_dir(kit("")).args(["test", "rules", "drover-alerts.test.yml"]);
    assert!(run_ok(test, "promtool test rules").contains("SUCCESS"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_a_coordinator_with_the_example_config_and_every_kit_metric_exists() {
    let h = Harness::start_with_long_poll(0).await;
    // What makes the conditional families appear: a release, a rollout in flight over
    // checked-in hosts, a job, a reconciler pass, a refused release, a host certificate.
    let now = h.clock.now();
    h.example_fleet_rolling().await;
    let app = h.running.app.clone();
    let host = h.running.app.store.list_hosts(&Default::default()).expect("hosts")[0].id;
    let job = drover_engine::store::NewJob {
        job_id: uuid::Uuid::new_v4(),
        kind: "storage_cleanup".into(),
        host_id: Some(host),
        input: serde_json::json!({ "kind": "storage_cleanup", "scope": "local" }),
        created_at: now,
        request_id: None,
    };
    h.running.app.store.create_job(&job).expect("job");
    let open = [("hardware_failure".to_owned(), 1u64)].into();
    app.metrics.record_reconcile("dc1", now.unix(), Duration::from_millis(200), true, &open);
    app.metrics.record_verification_failure("stale timestamp");
    let cert = drover_engine::store::NewCert {
        serial: "0b5e".into(),
        kind: drover_engine::store::CertKind::Host,
        host_id: Some(host),
        subject: "host".into(),
        not_before: now,
        not_after: now.plus_secs(90 * 86_400),
    };
    h.running.app.store.record_cert(&cert).expect("cert");

    // The example configuration, pointed at this coordinator and this test's files only.
    let dir = tempfile::tempdir().expect("tempdir");
    let certs = dir.path().join("certs");
    std::fs::create_dir(&certs).expect("mkdir");
    std::fs::copy(&h.ca, certs.join("ca.crt")).expect("ca");
    std::fs::copy(&h.viewer.0, certs.join("prometheus.crt")).expect("crt");
    std::fs::copy(&h.viewer.1, certs.join("prometheus.key")).expect("key");
    std::fs::copy(kit("drover-alerts.yml"), dir.path().join("drover-alerts.yml")).expect("rules");
    let target = h.url.strip_prefix("https://").expect("https url").trim_end_matches('/').to_owned();
    let example = std::fs::read_to_string(kit("prometheus.yml")).expect("example config");
    let config = example
        .replace("/etc/prometheus/drover/", &format!("{}/", certs.display()))
        .replace("scrape_interval: 30s", "scrape_interval: 1s")
        .replace("evaluation_interval: 30s", "evaluation_interval: 1s")
        .replace("scrape_timeout: 10s", "scrape_timeout: 1s")
        .replace("          - coordinator-1.example.net:8443\n", &format!("          - {target}\n"))
        .replace("          - coordinator-2.example.net:8443\n", "");
    assert!(config.contains(&target) && !config.contains("example.net"), "the example's shape changed:\n{config}");
    let config_path = dir.path().join("prometheus.yml");
    std::fs::write(&config_path, &config).expect("config");
    let mut check = tool("promtool");
    check.arg("check").arg("config").arg(&config_path);
    run_ok(check, "promtool check config");

    let port = drover_tests::free_loopback_port();
    let log = dir.path().join("prometheus.log");
    let child = tool("prometheus")
        .arg(format!("--config.file={}", config_path.display()))
        .arg(format!("--storage.tsdb.path={}", dir.path().join("tsdb").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("prometheus starts");
    let _prometheus = drover_tests::KillOnDrop(child);

    // The scrape succeeds over mTLS: up is 1, and the coordinator's families arrived.
    wait_for(
        "a successful scrape",
        60,
        || {
            let data = api(port, "/api/v1/query", Some("up{job=\"drover-coordinator\"}"))?;
            (data["result"][0]["value"][1] == "1").then_some(())
        },
        &log,
    );
    let received: BTreeSet<String> = wait_for(
        "the coordinator's series",
        30,
        || {
            let data = api(port, "/api/v1/label/__name__/values", None)?;
            let names: BTreeSet<String> = data.as_array()?.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect();
            names.contains("drover_rollout_hosts").then_some(names)
        },
        &log,
    );
    let mut wanted = BTreeSet::new();
    for expr in rule_exprs().iter().chain(&dashboard_exprs()) {
        wanted.extend(metric_names(expr));
    }
    assert!(wanted.len() >= 15, "{wanted:?}");
    let missing: Vec<&String> = wanted.iter().filter(|m| !received.contains(*m)).collect();
    assert!(missing.is_empty(), "the kit names metrics the coordinator does not export: {missing:?}");

    // Every rule loaded and evaluates without error against the real series.
    let rules = wait_for(
        "every rule evaluated",
        30,
        || {
            let data = api(port, "/api/v1/rules", None)?;
            let rules: Vec<Value> =
                data["groups"].as_array()?.iter().flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default()).collect();
            rules.iter().all(|r| r["health"] != "unknown").then_some(rules)
        },
        &log,
    );
    assert_eq!(rules.len(), rule_exprs().len());
    for r in &rules {
        assert_eq!(r["health"], "ok", "{r}");
    }
    // The drift the reconciler recorded is what the alert reads.
    let drift = api(port, "/api/v1/query", Some("sum by (site) (drover_maas_drifted_hosts)")).expect("query");
    assert_eq!(drift["result"][0]["value"][1], "1", "{drift}");
}

#[test]
fn metric_names_are_read_from_expressions() {
    let names = metric_names(
        "histogram_quantile(0.99, sum by (le) (rate(drover_checkin_work_seconds_bucket[5m]))) / process_max_fds{x=\"a_drover_y\"}",
    );
    assert_eq!(names.into_iter().collect::<Vec<_>>(), ["drover_checkin_work_seconds_bucket", "process_max_fds"]);
}
