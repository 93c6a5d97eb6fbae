//! Hostile and malformed requests get a 4xx in the API's error shape — never a 5xx, never a
//! panic, never axum's plain-text default.

use drover_engine::app::Clock as _;
use drover_tests::Harness;

fn assert_api_error(code: &str, body: &str, expected: &str) {
    assert_eq!(code, expected, "{body}");
    let v: serde_json::Value = serde_json::from_str(body).unwrap_or_else(|_| panic!("not the API error shape: {body:?}"));
    assert!(v["error"]["code"].is_string() && v["error"]["message"].is_string(), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_enrollment_requests_are_4xx_with_the_error_shape() {
    let h = Harness::start().await;
    let host = uuid::Uuid::new_v4().to_string();
    let cases: Vec<(String, &str)> = vec![
        ("{".into(), "400"),
        ("[]".into(), "400"),
        (r#"{"token":"x"}"#.into(), "400"),
        (format!(r#"{{"hostId":"{host}","token":"x","csr":"not a csr","extra":1}}"#), "400"),
        (r#"{"hostId":"nope","token":"x","csr":"x"}"#.into(), "400"),
        (
            format!(
                r#"{{"hostId":"{host}","token":"x","csr":"-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----"}}"#
            ),
            "400",
        ),
    ];
    for (body, expected) in cases {
        let (code, text) = h.call(None, "POST", "/v1/enroll", Some(&body)).await;
        assert_api_error(&code, &text, expected);
    }
    // A well-formed request with an unknown token: refused, not an error of ours.
    let (_, csr) = drover_tests::key_and_csr("x");
    let body = serde_json::json!({ "hostId": host, "token": "unknown", "csr": csr }).to_string();
    let (code, text) = h.call(None, "POST", "/v1/enroll", Some(&body)).await;
    assert_api_error(&code, &text, "403");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_host_creation_requests_are_4xx() {
    let h = Harness::start().await;
    let sha = h.trust.1.clone();
    for (body, expected) in [
        (serde_json::json!({ "hostname": "UPPER", "trustSha256": sha }).to_string(), "400"),
        (serde_json::json!({ "hostname": "ok-1", "trustSha256": "abc" }).to_string(), "400"),
        (serde_json::json!({ "hostname": "ok-1", "trustSha256": sha, "tokenTtlSecs": 0 }).to_string(), "400"),
        (serde_json::json!({ "hostname": "ok-1", "trustSha256": sha, "tokenTtlSecs": 99_999_999 }).to_string(), "400"),
        ("not json".to_owned(), "400"),
    ] {
        let (code, text) = h.call(Some(&h.admin), "POST", "/v1/hosts", Some(&body)).await;
        assert_api_error(&code, &text, expected);
    }
    // The same hostname twice while the first is live: a conflict.
    let body = serde_json::json!({ "hostname": "dup-1", "trustSha256": sha }).to_string();
    let (code, _) = h.call(Some(&h.admin), "POST", "/v1/hosts", Some(&body)).await;
    assert_eq!(code, "201");
    let (code, text) = h.call(Some(&h.admin), "POST", "/v1/hosts", Some(&body)).await;
    assert_api_error(&code, &text, "409");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_named_with_another_hosts_id_is_refused() {
    // HOST arguments are tried as an id first: a host named with gpu-1's id would stand for
    // gpu-1 wherever it was named. Neither creating one nor onboarding one is let through.
    let h = Harness::start().await;
    let id = h.create_host("gpu-1").await["hostId"].as_str().expect("hostId").to_owned();
    for hostname in [id.clone(), id.replace('-', "")] {
        let body = serde_json::json!({ "hostname": hostname, "trustSha256": h.trust.1 }).to_string();
        let (code, text) = h.call(Some(&h.admin), "POST", "/v1/hosts", Some(&body)).await;
        assert_api_error(&code, &text, "400");
        assert!(text.contains("hostname") && text.contains("names must not parse as ids, which are resolved first"), "{text}");
        let body = serde_json::json!({ "site": "dc1", "profile": "default", "hostname": hostname, "ipmiIp": "10.0.0.9" }).to_string();
        let (code, text) = h.call(Some(&h.admin), "POST", "/v1/maas/onboardings", Some(&body)).await;
        assert_api_error(&code, &text, "400");
        assert!(text.contains("names must not parse as ids"), "{text}");
    }
    let (_, hosts) = h.call(Some(&h.viewer), "GET", "/v1/hosts", None).await;
    let hosts: serde_json::Value = serde_json::from_str(&hosts).expect("json");
    assert_eq!(hosts["items"].as_array().map(Vec::len), Some(1), "{hosts}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn positional_array_bodies_create_no_rack_host_or_onboarding() {
    // serde fills a struct's fields by position from an array: these bodies, each a valid
    // request spelled positionally, were accepted (the rack and the onboarding with a 201).
    let h = Harness::start().await;
    let sha = h.trust.1.clone();
    let cases = [
        ("/v1/racks", serde_json::json!(["arr-rack", "gb200", {}, "x"]), "NewRackRequest"),
        ("/v1/hosts", serde_json::json!(["gpu-arr", sha, null]), "CreateHostRequest"),
        ("/v1/maas/onboardings", serde_json::json!(["dc1", "default", null, "gpu-arr", "10.0.0.9", null]), "CreateRequest"),
        ("/v1/maas/sites/dc1/profiles", serde_json::json!(["arr-profile", null, null, "x"]), "CreateProfile"),
    ];
    for (path, body, shape) in cases {
        let (code, text) = h.call(Some(&h.admin), "POST", path, Some(&body.to_string())).await;
        assert_api_error(&code, &text, "400");
        let want = format!("request body must be a JSON object (the {shape} shape), not an array");
        assert!(text.contains(&want), "{path}: {text}");
    }
    // A nested struct is held to the same rule, and the refusal names the field.
    let body = serde_json::json!({ "rack": "r1", "name": "sw1", "endpoint": "https://10.0.0.2", "credentialsPath": "racks/sw1",
        "credentials": ["admin", "secret", null], "reason": "x" });
    let (code, text) = h.call(Some(&h.admin), "POST", "/v1/switches", Some(&body.to_string())).await;
    assert_api_error(&code, &text, "400");
    assert!(text.contains("request body field credentials must be a JSON object (the Credentials shape), not an array"), "{text}");
    for (path, key) in [("/v1/racks", "racks"), ("/v1/hosts", "items"), ("/v1/maas/onboardings", "onboardings")] {
        let (code, text) = h.call(Some(&h.viewer), "GET", path, None).await;
        assert_eq!(code, "200", "{text}");
        let v: serde_json::Value = serde_json::from_str(&text).expect("json");
        assert_eq!(v[key].as_array().map(Vec::len), Some(0), "nothing was created: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_routes_wrong_methods_and_huge_bodies_are_4xx() {
    let h = Harness::start().await;
    let (code, text) = h.call(None, "GET", "/v1/nothing-here", None).await;
    assert_api_error(&code, &text, "404");
    let (code, text) = h.call(None, "DELETE", "/v1/enroll", None).await;
    assert_api_error(&code, &text, "405");
    let huge = format!("{{\"pad\":\"{}\"}}", "x".repeat(2 << 20));
    let path = h.dir.path().join("huge.json");
    std::fs::write(&path, huge).expect("write");
    let (code, text) = h.call(None, "POST", "/v1/enroll", Some(&format!("@{}", path.display()))).await;
    assert_api_error(&code, &text, "413");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_content_type_is_415() {
    let h = Harness::start().await;
    let body = serde_json::json!({ "hostname": "gpu-1", "trustSha256": h.trust.1 }).to_string();
    let out = h
        .curl_as(
            &h.admin,
            vec![
                "-X".into(),
                "POST".into(),
                "-H".into(),
                "content-type: text/plain".into(),
                "--data-binary".into(),
                body,
                "-w".into(),
                "\n%{http_code}".into(),
                format!("{}/v1/hosts", h.url),
            ],
        )
        .await;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    assert_api_error(code.trim(), body, "415");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publisher_calling_a_host_route_is_403() {
    let h = Harness::start().await;
    let cred = h.running.app.ca.issue_operator("pat", drover_engine::identity::Role::Publisher, h.clock.now()).expect("cert");
    let (crt, key) = (h.dir.path().join("pat.crt"), h.dir.path().join("pat.key"));
    std::fs::write(&crt, cred.cert.pem.as_bytes()).expect("write");
    std::fs::write(&key, cred.key_pem.as_bytes()).expect("write");
    let publisher = (crt, key);
    let (code, text) = h.call(Some(&publisher), "POST", "/v1/agent/checkin", Some(r#"{"agentVersion":"x","bootId":"y"}"#)).await;
    assert_api_error(&code, &text, "403");
    let (code, text) = h
        .call(
            Some(&publisher),
            "POST",
            "/v1/hosts",
            Some(&serde_json::json!({ "hostname": "gpu-1", "trustSha256": h.trust.1 }).to_string()),
        )
        .await;
    assert_api_error(&code, &text, "403");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_traversal_in_a_rollout_id_is_400() {
    let h = Harness::start().await;
    let (_, cert, _) = h.host_credentials("gpu-t");
    for id in ["..%2F..%2Fstate%2Fca.key", "gpu@..%2F..%2Fetc", "gpu@a%2Fb", "%2E%2E"] {
        let (code, text) = h.call(Some(&cert), "GET", &format!("/v1/rollouts/{id}"), None).await;
        assert_api_error(&code, &text, "400");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_certificate_calling_an_operator_route_is_403() {
    let h = Harness::start().await;
    let (id, cert, _) = h.host_credentials("gpu-o");
    let (code, text) = h.call(Some(&cert), "POST", &format!("/v1/hosts/{id}/revoke"), Some("{}")).await;
    assert_api_error(&code, &text, "403");
    let (code, text) = h.call(Some(&cert), "GET", "/v1/hosts", None).await;
    assert_api_error(&code, &text, "403");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_900_kilobyte_hostname_comes_back_bounded() {
    let h = Harness::start().await;
    let body = serde_json::json!({ "hostname": "a".repeat(900 * 1024), "trustSha256": h.trust.1 }).to_string();
    let (code, text) = h.call(Some(&h.admin), "POST", "/v1/hosts", Some(&body)).await;
    assert_api_error(&code, &text, "400");
    assert!(text.len() < 4096, "a 900 KB name is not echoed whole: {} bytes", text.len());
    assert!(text.contains("bytes)"), "the cut says how long the input was: {text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reason_with_a_bidi_override_or_zero_width_space_is_refused() {
    let h = Harness::start().await;
    let body = serde_json::json!({ "hostname": "bidi-1", "trustSha256": h.trust.1 }).to_string();
    let (code, text) = h.call(Some(&h.admin), "POST", "/v1/hosts", Some(&body)).await;
    assert_eq!(code, "201", "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    let id = v["hostId"].as_str().or(v["id"].as_str()).expect("id").to_owned();
    // "cordon for RMA" that an auditor would read reversed, and one with a hidden space.
    for reason in ["approved by ops \u{202E}AMR rof", "disk\u{200B}swap"] {
        let body = format!(r#"{{"reason":"{reason}"}}"#);
        let (code, text) = h.call(Some(&h.admin), "POST", &format!("/v1/hosts/{id}/cordon"), Some(&body)).await;
        assert_api_error(&code, &text, "400");
        assert!(text.contains("bidirectional"), "{text}");
    }
}
