//! Hostile and malformed requests get a 4xx in the API's error shape — never a 5xx, never a
//! panic, never axum's plain-text default.

use drover_tests::Harness;

/// (status, body) of a request.
async fn call(
    h: &Harness,
    creds: Option<&(std::path::PathBuf, std::path::PathBuf)>,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> (String, String) {
    let mut args = vec!["-X".to_owned(), method.to_owned(), "-w".to_owned(), "\n%{http_code}".to_owned()];
    if let Some(b) = body {
        args.extend(["-H".to_owned(), "content-type: application/json".to_owned(), "--data-binary".to_owned(), b.to_owned()]);
    }
    args.push(format!("{}{path}", h.url));
    let out = match creds {
        Some(c) => h.curl_as(c, args).await,
        None => h.curl(args).await,
    };
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.trim().to_owned(), body.to_owned())
}

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
        let (code, text) = call(&h, None, "POST", "/v1/enroll", Some(&body)).await;
        assert_api_error(&code, &text, expected);
    }
    // A well-formed request with an unknown token: refused, not an error of ours.
    let (_, csr) = drover_tests::key_and_csr("x");
    let body = serde_json::json!({ "hostId": host, "token": "unknown", "csr": csr }).to_string();
    let (code, text) = call(&h, None, "POST", "/v1/enroll", Some(&body)).await;
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
        let (code, text) = call(&h, Some(&h.admin), "POST", "/v1/hosts", Some(&body)).await;
        assert_api_error(&code, &text, expected);
    }
    // The same hostname twice while the first is live: a conflict.
    let body = serde_json::json!({ "hostname": "dup-1", "trustSha256": sha }).to_string();
    let (code, _) = call(&h, Some(&h.admin), "POST", "/v1/hosts", Some(&body)).await;
    assert_eq!(code, "201");
    let (code, text) = call(&h, Some(&h.admin), "POST", "/v1/hosts", Some(&body)).await;
    assert_api_error(&code, &text, "409");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_routes_wrong_methods_and_huge_bodies_are_4xx() {
    let h = Harness::start().await;
    let (code, text) = call(&h, None, "GET", "/v1/nothing-here", None).await;
    assert_api_error(&code, &text, "404");
    let (code, text) = call(&h, None, "DELETE", "/v1/enroll", None).await;
    assert_api_error(&code, &text, "405");
    let huge = format!("{{\"pad\":\"{}\"}}", "x".repeat(2 << 20));
    let path = h.dir.path().join("huge.json");
    std::fs::write(&path, huge).expect("write");
    let (code, text) = call(&h, None, "POST", "/v1/enroll", Some(&format!("@{}", path.display()))).await;
    assert_api_error(&code, &text, "413");
}
