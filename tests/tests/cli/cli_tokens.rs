//! `drover tokens revoke` as an operator types it, the real binary against a real coordinator
//! over mutual TLS: a leaked enrollment token taken back before its host used it.
//!
//! The attack: `drover enroll` prints a command carrying a one-time token; the command (or
//! the token alone) leaks — a ticket, a chat, a shell history — before the host runs it.
//! Whoever holds it could enroll as that host and be handed a host certificate. Revoking the
//! token must make `POST /v1/enroll` refuse it, and nothing the operator sees may show it.

use drover_tests::Harness;
use serde_json::Value;
use uuid::Uuid;

use drover_tests::output_text as text;

/// The one token `drover tokens list --host HOST -o json` shows (as the viewer).
async fn the_token(h: &Harness, host: Uuid) -> Value {
    let json = h.drover_ok(&h.viewer, &["tokens", "list", "--host", &host.to_string(), "-o", "json"]).await;
    let tokens: Vec<Value> = serde_json::from_str(&json).expect("json array");
    assert_eq!(tokens.len(), 1, "{json}");
    tokens[0].clone()
}

/// `POST /v1/enroll` as whoever holds the token would send it: a fresh key and CSR.
async fn enroll_with(h: &Harness, host: Uuid, hostname: &str, token: &str) -> (String, String) {
    let (_key, csr) = drover_tests::key_and_csr(hostname);
    let body = serde_json::json!({ "hostId": host.to_string(), "token": token, "csr": csr }).to_string();
    h.call(None, "POST", "/v1/enroll", Some(&body)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoked_enrollment_token_is_refused() {
    let h = Harness::start().await;
    let (host, token) = h.enroll_with_cli("gpu-leak").await;
    let listed = the_token(&h, host).await;
    let token_id = listed["id"].as_str().expect("token id").to_owned();
    assert!(listed["revokedAt"].is_null() && listed["usedAt"].is_null(), "{listed}");
    // The plain table leads with the id `revoke` takes.
    let table = h.drover_ok(&h.viewer, &["tokens", "list"]).await;
    let row = table.lines().find(|l| l.starts_with(&token_id)).unwrap_or_else(|| panic!("a row for {token_id}: {table}"));
    assert!(row.contains("gpu-leak") && row.contains("pending"), "{table}");

    // A viewer reads tokens but cannot end one (77), and the token is left as it was.
    let out = h.drover_as(&h.viewer, &["tokens", "revoke", &token_id, "--reason", "leaked in a ticket"]).await;
    assert_eq!(out.status.code(), Some(77), "{}", text(&out));
    assert!(the_token(&h, host).await["revokedAt"].is_null());

    // The admin revokes it.
    let said = h.drover_ok(&h.admin, &["tokens", "revoke", &token_id, "--reason", "leaked in a ticket"]).await;
    assert!(said.starts_with(&format!("enrollment token {token_id} (host {host}) revoked at ")), "{said}");
    let revoked = the_token(&h, host).await;
    let revoked_at = revoked["revokedAt"].as_str().expect("revokedAt").to_owned();

    // The attack: whoever kept the token tries to enroll with it. Refused, nothing issued.
    let (code, answer) = enroll_with(&h, host, "gpu-leak", &token).await;
    assert_eq!(code, "403", "{answer}");
    assert!(answer.contains("revoked") && !answer.contains("certificate\":"), "{answer}");
    let table = h.drover_ok(&h.viewer, &["tokens", "list", "-o", "wide"]).await;
    let row = table.lines().find(|l| l.starts_with(&token_id)).unwrap_or_else(|| panic!("a row for {token_id}: {table}"));
    assert!(row.contains(" revoked ") && row.contains(&revoked_at), "{table}");
    let host_json = h.drover_ok(&h.viewer, &["get", "host", "gpu-leak", "-o", "json"]).await;
    assert!(host_json.contains("bootstrap_issued"), "the host moved on a refused enrollment: {host_json}");

    // Again: nothing changes, the first revocation stays.
    let json = h.drover_ok(&h.admin, &["tokens", "revoke", &token_id, "--reason", "again", "-o", "json"]).await;
    let again: Value = serde_json::from_str(&json).expect("json");
    assert_eq!(again["revokedAt"].as_str(), Some(revoked_at.as_str()), "{json}");

    // The audit log says who and why; no output anywhere carries the token or its hash.
    let audit = h.drover_ok(&h.viewer, &["audit", "--actor", "alice", "-o", "json"]).await;
    let records: Vec<Value> = serde_json::from_str(&audit).expect("json array");
    let revocations: Vec<&Value> = records.iter().filter(|r| r["action"] == "token.revoke").collect();
    assert_eq!(revocations.len(), 2, "{audit}");
    assert_eq!(
        (revocations[0]["target"].as_str(), revocations[0]["reason"].as_str()),
        (Some(token_id.as_str()), Some("leaked in a ticket"))
    );
    let events = h.drover_ok(&h.viewer, &["events", "--kind", "host.token_revoked", "-o", "json"]).await;
    assert!(events.contains(&token_id), "{events}");
    let hash = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(token.as_bytes()));
    for out in [&said, &table, &json, &audit, &events] {
        assert!(!out.contains(&token) && !out.contains(&hash), "token material reached the output: {out}");
    }

    // The way back for the host: remove it and enroll it again; the fresh token works.
    h.drover_ok(&h.admin, &["host", "remove", "gpu-leak", "--reason", "its token leaked"]).await;
    let (fresh_host, fresh) = h.enroll_with_cli("gpu-leak").await;
    let (code, answer) = enroll_with(&h, fresh_host, "gpu-leak", &fresh).await;
    assert_eq!(code, "200", "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_a_used_unknown_or_malformed_token_id_fails_clearly() {
    let h = Harness::start().await;
    let (host, token) = h.enroll_with_cli("gpu-used").await;
    let token_id = the_token(&h, host).await["id"].as_str().expect("token id").to_owned();
    let (code, answer) = enroll_with(&h, host, "gpu-used", &token).await;
    assert_eq!(code, "200", "{answer}");

    // Used: the host enrolled with it; its certificate is what to revoke (65, the 409).
    let out = h.drover_as(&h.admin, &["tokens", "revoke", &token_id, "--reason", "too late"]).await;
    assert_eq!(out.status.code(), Some(65), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("409") && stderr.contains("was used") && stderr.contains("certificate"), "{}", text(&out));
    let listed = the_token(&h, host).await;
    assert!(listed["revokedAt"].is_null() && !listed["usedAt"].is_null(), "{listed}");

    // Unknown id: 65, naming it.
    let unknown = Uuid::new_v4().to_string();
    let out = h.drover_as(&h.admin, &["tokens", "revoke", &unknown, "--reason", "r"]).await;
    assert_eq!(out.status.code(), Some(65), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains(&unknown), "{}", text(&out));

    // The token itself where its id belongs: a usage error before any request, and the
    // token is not echoed back.
    let out = h.drover_as(&h.admin, &["tokens", "revoke", &token, "--reason", "r"]).await;
    assert_eq!(out.status.code(), Some(64), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("TOKEN_ID"), "{}", text(&out));
    assert!(!text(&out).contains(&token), "{}", text(&out));

    // No reason: a usage error.
    let out = h.drover_as(&h.admin, &["tokens", "revoke", &unknown, "--reason", " "]).await;
    assert_eq!(out.status.code(), Some(64), "{}", text(&out));
}
