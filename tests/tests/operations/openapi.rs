//! The OpenAPI 3.1 description (`GET /v1/openapi.json`) against the routes the coordinator
//! serves, both ways: every operation it lists is served (not the router's "no such route" or
//! "method not allowed"), and every `.route(...)` of the router has its operation. Then
//! schemathesis (PyPI; `.ci/run` installs it in its virtualenv) runs against a live
//! coordinator as an admin and as a viewer: no 5xx, every answer's status and content type as
//! described, every refusal in the API's error shape. And every route of the route table that
//! takes a body refuses a JSON array there (positional fields), whatever its length, as 400
//! for a caller allowed to use the route and 4xx for anyone.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use drover_client::{ClientIdentity, CoordinatorClient, Method};
use drover_engine::api::openapi::Access;
use drover_engine::api::openapi_routes::ROUTES;
use drover_tests::Harness;
use serde_json::{Value, json};

/// (METHOD, path) of every `.route(...)` in the router's source.
fn router_routes() -> BTreeSet<(String, String)> {
    let src =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../coordinator/engine/src/api/mod.rs")).expect("api/mod.rs");
    let mut out = BTreeSet::new();
    for line in src.lines().filter(|l| l.trim_start().starts_with(".route(")) {
        let path = match line.split('"').nth(1) {
            Some(p) => p.to_owned(),
            None if line.contains("RELEASES_PATH") => drover_engine::api::RELEASES_PATH.to_owned(),
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

/// A client of the harness's coordinator presenting `creds`; its connection is kept alive
/// between requests, so thousands of them take seconds.
fn client_as(h: &Harness, creds: &(PathBuf, PathBuf)) -> CoordinatorClient {
    let read = |p: &Path| std::fs::read(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
    let ca = drover_client::parse_certificates("ca", &read(&h.ca)).expect("ca");
    let identity = ClientIdentity::from_pem(&read(&creds.0), &read(&creds.1)).expect("identity");
    CoordinatorClient::new("openapi-test", std::slice::from_ref(&h.url), &ca, Some(identity), Duration::from_secs(30)).expect("client")
}

/// `method path` with `body`: the status and the error message (empty on a 2xx).
async fn send(c: &CoordinatorClient, method: &str, path: &str, body: &Value) -> (u16, String) {
    let method = Method::from_bytes(method.as_bytes()).expect("method");
    match c.request_json::<Value, Value>(method, path, Some(body)).await {
        Ok(_) => (200, String::new()),
        Err(e) => (e.status().unwrap_or(0), e.to_string()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_that_takes_a_body_refuses_a_json_array_as_400() {
    let h = Harness::start().await;
    let (_, host_creds, _) = h.host_credentials("gpu-arr");
    let (admin, viewer, host) = (client_as(&h, &h.admin), client_as(&h, &h.viewer), client_as(&h, &host_creds));
    // Every arity up to more fields than any request has (a site has 15), so whichever
    // length a body's struct has, its positional form is among these; the values are mixed,
    // since the refusal comes before any of them is read.
    let cycle = [json!("x"), json!(1), json!({}), json!(null), json!(true), json!([])];
    let arrays: Vec<Value> = (0..=20).map(|n| Value::Array(cycle.iter().cycle().take(n).cloned().collect())).collect();
    let placeholder = uuid::Uuid::new_v4().to_string();
    let mut checked = 0;
    for route in ROUTES.iter().filter(|r| r.body) {
        let path: String = route
            .path
            .split('/')
            .map(|seg| match seg {
                "{action}" => "cancel",
                s if s.starts_with('{') => placeholder.as_str(),
                s => s,
            })
            .collect::<Vec<_>>()
            .join("/");
        // The body is read after the caller's role is checked: a caller the route takes gets
        // the body's 400, any other its 401/403 — never a 2xx.
        let (allowed, refused) = match route.access {
            Access::Host => (&host, Some(&admin)),
            Access::Admin => (&admin, Some(&viewer)),
            Access::Anonymous | Access::Viewer | Access::Publisher => (&admin, None),
        };
        for body in &arrays {
            let (code, message) = send(allowed, route.method, &path, body).await;
            assert_eq!(code, 400, "{} {} {body}: {message}", route.method, route.path);
            assert!(
                message.contains("request body must be a JSON object (the ") && message.contains(" shape), not an array"),
                "{} {} {body}: {message}",
                route.method,
                route.path
            );
            if let Some(other) = refused {
                let (code, message) = send(other, route.method, &path, body).await;
                assert!((400..500).contains(&code), "{} {} {body} as another role: {code} {message}", route.method, route.path);
            }
            checked += 1;
        }
    }
    let routes = checked / arrays.len();
    assert!(routes >= 45, "the route table lists the routes that take a body: {routes}");
}
