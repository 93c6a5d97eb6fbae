//! The OpenAPI 3.1 description (`GET /v1/openapi.json`) against the routes the coordinator
//! serves, both ways: every operation it lists is served (not the router's "no such route" or
//! "method not allowed"), and every `.route(...)` of the router has its operation. Then
//! schemathesis (PyPI; `.ci/run` installs it in its virtualenv) runs against a live
//! coordinator as an admin and as a viewer: no 5xx, every answer's status and content type as
//! described, every refusal in the API's error shape.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use drover_tests::Harness;
use serde_json::Value;

/// (METHOD, path) of every `.route(...)` in the router's source.
fn router_routes() -> BTreeSet<(String, String)> {
    let src = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../coordinator/src/api/mod.rs")).expect("api/mod.rs");
    let mut out = BTreeSet::new();
    for line in src.lines().filter(|l| l.trim_start().starts_with(".route(")) {
        let path = match line.split('"').nth(1) {
            Some(p) => p.to_owned(),
            None if line.contains("RELEASES_PATH") => drover_coordinator::api::RELEASES_PATH.to_owned(),
            None => panic!("a route without a path: {line}"),
        };
        for method in ["get", "post", "put", "patch", "delete"] {
            let call = format!("{method}(");
            let mut rest = line;
            while let Some(i) = rest.find(&call) {
                let before = rest[..i].chars().last();
                if before.is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_')) {
                    out.insert((method.to_ascii_uppercase(), path.clone()));
                }
                rest = &rest[i + call.len()..];
            }
        }
    }
    out
}

fn described(doc: &Value) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for (path, ops) in doc["paths"].as_object().expect("paths") {
        for method in ops.as_object().expect("operations").keys() {
            out.insert((method.to_ascii_uppercase(), path.clone()));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_description_lists_every_route_the_router_serves_and_only_those() {
    let h = Harness::start().await;
    let (code, body) = h.call(None, "GET", "/v1/openapi.json", None).await;
    assert_eq!(code, "200", "anonymous, like the enrollment routes");
    let doc: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(doc["openapi"], "3.1.0");
    let listed = described(&doc);
    let routed = router_routes();
    assert!(routed.len() > 100, "{routed:?}");
    let missing: Vec<_> = routed.difference(&listed).collect();
    let extra: Vec<_> = listed.difference(&routed).collect();
    assert!(missing.is_empty() && extra.is_empty(), "routes without an operation: {missing:?}; operations without a route: {extra:?}");

    // Each operation reaches its handler: whatever it answers, it is not the router's own
    // refusal of a path or method it does not know.
    let placeholder = uuid::Uuid::new_v4().to_string();
    for (method, path) in &listed {
        if path == "/v1/events/stream" || path == "/v1/agent/checkin" {
            continue; // they hold the request open; reached by their own tests
        }
        let concrete: String =
            path.split('/').map(|seg| if seg.starts_with('{') { placeholder.as_str() } else { seg }).collect::<Vec<_>>().join("/");
        let body = (method != "GET").then_some("{}");
        let (code, text) = h.call(Some(&h.admin), method, &concrete, body).await;
        assert_ne!(code, "405", "{method} {path}: {text}");
        assert!(!(code == "404" && text.contains("no such route")), "{method} {path} is described but not routed: {text}");
        // Readiness is 503 by design until a release is stored.
        assert!(!code.starts_with('5') || path == "/readyz", "{method} {path}: {code} {text}");
    }
}

/// schemathesis's `st`, from the virtualenv `.ci/run` makes (or PATH).
fn schemathesis() -> Command {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.ci/venv/bin/st");
    if venv.is_file() {
        return Command::new(venv);
    }
    drover_tests::required_tool("st", "(none: pip install schemathesis, as .ci/run does in .ci/venv)")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_no_server_error_and_no_answer_off_the_description() {
    let h = Harness::start().await;
    // A few things to read: hosts, a rollout's worth of state is not needed for the shapes.
    for name in ["gpu-01", "gpu-02"] {
        h.create_host(name).await;
    }
    let (code, body) = h.call(None, "GET", "/v1/openapi.json", None).await;
    assert_eq!(code, "200");
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = dir.path().join("openapi.json");
    std::fs::write(&spec, body).expect("spec");
    for (who, creds) in [("admin", &h.admin), ("viewer", &h.viewer)] {
        let out = schemathesis()
            .arg("run")
            .arg(&spec)
            .args(["--url", &h.url])
            .arg("--tls-verify")
            .arg(&h.ca)
            .arg("--request-cert")
            .arg(&creds.0)
            .arg("--request-cert-key")
            .arg(&creds.1)
            .args(["--checks", "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance"])
            .args(["--phases", "examples,coverage,fuzzing"])
            .args(["--max-examples", "5", "--workers", "1", "--seed", "26"])
            // Routes that reach outside this machine (MAAS sites, BMCs, power shelves, rack
            // firmware) or hold the request open (the event stream, the agent's long-poll);
            // and readiness, whose 503 before any release is its contract (operator_api).
            .args([
                "--exclude-path-regex",
                "^(/readyz|/v1/(maas/|racks|switches|power-shelves|components/|rack-firmware|hosts/\\{id\\}/bmc|events/stream|agent/checkin))",
            ])
            .env("NO_COLOR", "1")
            .current_dir(dir.path())
            .output()
            .expect("schemathesis runs");
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        eprintln!(
            "schemathesis as {who}:\n{}",
            text.lines().rev().take(15).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n")
        );
        assert!(out.status.success(), "schemathesis as {who} found failures:\n{text}");
    }
}
