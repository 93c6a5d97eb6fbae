//! Hostile and malformed requests get a 4xx in the API's error shape — never a 5xx, never a
//! panic, never axum's plain-text default.

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
