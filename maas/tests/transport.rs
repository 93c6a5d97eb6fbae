//! The client's transport against a tiny scripted HTTP server: what goes on the wire (signature,
//! op, form bodies), timeouts as transient errors, retries of GETs only, and error classes.
//!
//! The server is hand-written on purpose: it answers exactly the scripted bytes (a 503, a hang,
//! a text `OK`) and counts requests, which is what proves a POST was not retried.

#![forbid(unsafe_code)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Seen, read_request, write_answer};
use drover_maas::{ApiKey, ClientConfig, DeployOptions, ErrorClass, MaasClient, MaasError, MachineFilter, NodeStatus, ReleaseOptions};
use tokio::net::{TcpListener, TcpStream};

/// What the server does with one request.
#[derive(Clone)]
enum Reply {
    /// Answer with this status, extra headers and body.
    Answer(u16, Vec<(&'static str, &'static str)>, &'static str),
    /// Never answer (the connection stays open until the test ends).
    Hang,
}

fn json(body: &'static str) -> Reply {
    Reply::Answer(200, vec![("Content-Type", "application/json; charset=utf-8")], body)
}

struct Server {
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Server {
    /// Serves `script` in order, one reply per request; the last reply repeats.
    async fn start(script: Vec<Reply>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}/MAAS", listener.local_addr().expect("addr"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        tokio::spawn(async move {
            let mut next = 0usize;
            loop {
                let Ok((stream, _)) = listener.accept().await else { return };
                let log = log.clone();
                let reply = script[next.min(script.len() - 1)].clone();
                next += 1;
                tokio::spawn(serve_one(stream, reply, log));
            }
        });
        Server { url, seen }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("lock").clone()
    }

    fn client(&self, timeout_ms: u64, retries: u32) -> MaasClient {
        let key: ApiKey = "CK:TK:wire-secret".parse().expect("key");
        let mut config = ClientConfig::new(&self.url, key);
        config.timeout = Duration::from_millis(timeout_ms);
        config.retries = retries;
        MaasClient::new(config).expect("client")
    }
}

/// Reads one request, records it, answers `reply`.
async fn serve_one(mut stream: TcpStream, reply: Reply, log: Arc<Mutex<Vec<Seen>>>) {
    let Some(seen) = read_request(&mut stream).await else { return };
    log.lock().expect("lock").push(seen);
    match reply {
        Reply::Hang => {
            // Hold the connection open without answering until the runtime shuts down.
            let _keep = stream;
            std::future::pending::<()>().await;
        }
        Reply::Answer(status, extra, body) => write_answer(&mut stream, status, &extra, body).await,
    }
}

const VERSION: &str = r#"{"capabilities":["authenticate-api"],"version":"3.7.0","subversion":""}"#;
const LIST: &str = r#"[{"system_id":"abc123","status":4}]"#;
const MACHINE: &str = r#"{"system_id":"abc123","hostname":"gpu-01","status":9,"status_name":"Deploying","power_state":"on"}"#;

#[tokio::test]
async fn a_hang_becomes_a_transient_timeout() {
    let server = Server::start(vec![Reply::Hang]).await;
    let e = server.client(300, 0).read_machine("abc123").await.expect_err("hang");
    assert_eq!(e.class(), ErrorClass::Transient, "{e}");
    assert!(matches!(e, MaasError::Timeout { .. }), "{e:?}");
    assert_eq!(server.seen().len(), 1);
}

#[tokio::test]
async fn a_hanging_get_is_retried_after_its_timeout() {
    let server = Server::start(vec![Reply::Hang, json(MACHINE)]).await;
    let m = server.client(300, 2).read_machine("abc123").await.expect("second attempt answers");
    assert_eq!(m.status, NodeStatus::Deploying);
    assert_eq!(server.seen().len(), 2);
}

#[tokio::test]
async fn a_503_get_is_retried_then_succeeds_with_a_fresh_signature() {
    let server = Server::start(vec![
        Reply::Answer(503, vec![("Retry-After", "0")], "No rack controllers connected"),
        Reply::Answer(503, vec![], "still"),
        json(LIST),
    ])
    .await;
    let client = server.client(2000, 2);
    let machines = client.list_machines(&MachineFilter::default()).await.expect("third attempt answers");
    assert_eq!(machines.len(), 1);
    let seen = server.seen();
    assert_eq!(seen.len(), 3, "two 503s retried");
    let nonces: Vec<&str> = seen.iter().map(|s| s.header("authorization").expect("signed")).collect();
    assert_ne!(nonces[0], nonces[1], "every attempt is signed afresh");
    assert_ne!(nonces[1], nonces[2]);
}

#[tokio::test]
async fn a_503_version_is_retried_and_then_read() {
    let server = Server::start(vec![Reply::Answer(503, vec![], "busy"), json(VERSION)]).await;
    let v = server.client(2000, 1).version().await.expect("retried");
    assert_eq!(v.version, "3.7.0");
    let seen = server.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[1].target, "/MAAS/api/2.0/version/");
    assert!(seen[1].header("authorization").is_none(), "version is anonymous");
}

#[tokio::test]
async fn retries_run_out() {
    let server = Server::start(vec![Reply::Answer(503, vec![("Retry-After", "0")], "down")]).await;
    let e = server.client(2000, 2).read_machine("abc123").await.expect_err("down");
    assert_eq!(e.class(), ErrorClass::Transient);
    assert_eq!(e.status(), Some(503));
    assert_eq!(e.retry_after(), Some(Duration::ZERO));
    assert_eq!(server.seen().len(), 3);
}

#[tokio::test]
async fn a_post_op_is_not_retried_after_a_503() {
    let server = Server::start(vec![Reply::Answer(503, vec![], "BMC unreachable"), json(MACHINE)]).await;
    let e = server.client(2000, 5).deploy("abc123", &DeployOptions::default()).await.expect_err("503");
    assert_eq!(e.class(), ErrorClass::Transient);
    assert_eq!(e.message(), Some("BMC unreachable"));
    assert_eq!(server.seen().len(), 1, "a POST is never retried");
}

#[tokio::test]
async fn a_post_op_is_not_retried_after_a_timeout() {
    let server = Server::start(vec![Reply::Hang, json(MACHINE)]).await;
    let e = server.client(300, 5).release("abc123", &ReleaseOptions::default()).await.expect_err("hang");
    assert_eq!(e.class(), ErrorClass::Transient);
    assert_eq!(server.seen().len(), 1);
}

#[tokio::test]
async fn the_wire_format_is_what_maas_parses() {
    let server = Server::start(vec![json(MACHINE)]).await;
    let options = DeployOptions {
        user_data: Some(b"#cloud-config\n".to_vec()),
        distro_series: Some("jammy".into()),
        enable_hw_sync: true,
        ..DeployOptions::default()
    };
    let m = server.client(2000, 0).deploy("abc123", &options).await.expect("deploy");
    assert_eq!(m.system_id, "abc123");
    let seen = &server.seen()[0];
    assert_eq!(seen.method, "POST");
    assert_eq!(seen.target, "/MAAS/api/2.0/machines/abc123/?op=deploy");
    assert_eq!(seen.header("content-type"), Some("application/x-www-form-urlencoded"));
    assert_eq!(seen.body, "user_data=I2Nsb3VkLWNvbmZpZwo%3D&distro_series=jammy&enable_hw_sync=true");
    let auth = seen.header("authorization").expect("signed");
    assert!(auth.starts_with("OAuth oauth_nonce=\""), "{auth}");
    assert!(auth.contains("oauth_signature_method=\"PLAINTEXT\""), "{auth}");
    assert!(auth.contains("oauth_consumer_key=\"CK\", oauth_token=\"TK\", oauth_signature=\"%26wire-secret\""), "{auth}");
}

#[tokio::test]
async fn errors_are_classified_and_never_show_the_secret() {
    let server = Server::start(vec![
        Reply::Answer(401, vec![("WWW-Authenticate", "OAuth realm=\"OAuth\"")], "Authorization Error: 'Invalid signature'"),
        Reply::Answer(404, vec![], "No Machine matches the given query."),
        Reply::Answer(409, vec![], "Can't deploy a machine that is in the 'New' state"),
        Reply::Answer(
            400,
            vec![("Content-Type", "application/json")],
            r#"{"__all__": ["Commission is not available because of the current state of the node."]}"#,
        ),
        Reply::Answer(400, vec![("Content-Type", "application/json")], r#"{"limit": ["No such constraint."]}"#),
        Reply::Answer(200, vec![], "not json"),
    ])
    .await;
    let c = server.client(2000, 0);
    let classes = [
        c.read_machine("abc123").await.expect_err("401"),
        c.read_machine("nope00").await.expect_err("404"),
        c.deploy("abc123", &DeployOptions::default()).await.expect_err("409"),
        c.commission("abc123", &Default::default()).await.expect_err("400 state"),
        c.list_machines(&MachineFilter { extra: vec![("limit".into(), "10".into())], ..Default::default() }).await.expect_err("400"),
        c.read_machine("abc123").await.expect_err("garbage"),
    ];
    let want = [
        ErrorClass::Credentials,
        ErrorClass::Gone,
        ErrorClass::IllegalState,
        ErrorClass::IllegalState,
        ErrorClass::BadRequest,
        ErrorClass::Protocol,
    ];
    for (e, w) in classes.iter().zip(want) {
        assert_eq!(e.class(), w, "{e}");
        let shown = format!("{e} {e:?}");
        assert!(!shown.contains("wire-secret"), "{shown}");
        assert!(!shown.contains("OAuth oauth_"), "{shown}");
    }
    assert_eq!(classes[4].field_errors()["limit"], ["No such constraint."]);
    assert_eq!(server.seen()[4].target, "/MAAS/api/2.0/machines/?limit=10");
}

/// MAAS refusing a token names it in its 401 ("Invalid access token: <token key>"), and a
/// proxy in front of it may echo the whole signed request: the error the coordinator shows an
/// operator carries none of the key's three parts nor any `oauth_…` value, and a long page is
/// cut with its length noted.
#[tokio::test]
async fn a_refused_token_is_not_echoed_from_maas_errors() {
    const ECHO: &str = "Authorization Error: Invalid access token: Tk3yAAAAAAAAAAAAAA; \
        OAuth oauth_consumer_key=\"Ck3yBBBBBBBBBBBBBB\", oauth_token=\"Tk3yAAAAAAAAAAAAAA\", oauth_signature=\"%26S3cr3tCCCCCCCCCCCCCCCCCCCCCCCC\"";
    let page: &'static str = Box::leak(format!("{ECHO} {}", "padding ".repeat(200)).into_boxed_str());
    let server = Server::start(vec![
        Reply::Answer(401, vec![("WWW-Authenticate", "OAuth realm=\"OAuth\"")], ECHO),
        Reply::Answer(403, vec![], page),
    ])
    .await;
    let key: ApiKey = "Ck3yBBBBBBBBBBBBBB:Tk3yAAAAAAAAAAAAAA:S3cr3tCCCCCCCCCCCCCCCCCCCCCCCC".parse().expect("key");
    let mut config = ClientConfig::new(&server.url, key);
    config.retries = 0;
    let c = MaasClient::new(config).expect("client");
    for e in [c.read_machine("abc123").await.expect_err("401"), c.read_machine("abc123").await.expect_err("403")] {
        assert_eq!(e.class(), ErrorClass::Credentials, "{e}");
        let shown = format!("{e} {e:?}");
        for part in ["Ck3y", "Tk3y", "S3cr3t"] {
            assert!(!shown.contains(part), "{part} in {shown}");
        }
        assert!(shown.contains("Invalid access token: <redacted>"), "{shown}");
    }
    let e = c.read_machine("abc123").await.expect_err("403");
    let message = e.message().unwrap_or_default();
    assert!(message.len() < drover_maas::MAX_MESSAGE + 100, "bounded: {message}");
    assert!(message.ends_with(&format!("(the first 512 bytes of an answer of {} bytes)", page.len())), "{message}");
    // The request did carry the key: what was scrubbed is what MAAS was sent.
    assert!(server.seen()[0].header("authorization").is_some_and(|a| a.contains("oauth_token=\"Tk3yAAAAAAAAAAAAAA\"")));
}

#[tokio::test]
async fn ok_texts_and_204s_are_success() {
    let server = Server::start(vec![
        Reply::Answer(200, vec![("Content-Type", "text/plain")], "OK"),
        Reply::Answer(204, vec![], ""),
        json("null"),
        json(r#"{"state":"off"}"#),
    ])
    .await;
    let c = server.client(2000, 0);
    c.set_boot_disk("abc123", 12).await.expect("boot disk");
    c.delete_machine("abc123").await.expect("delete");
    assert_eq!(c.get_token("abc123").await.expect("token"), None);
    assert_eq!(c.query_power_state("abc123").await.expect("power").as_str(), "off");
    let seen = server.seen();
    assert_eq!(seen[0].target, "/MAAS/api/2.0/nodes/abc123/blockdevices/12/?op=set_boot_disk");
    assert_eq!((seen[1].method.as_str(), seen[1].target.as_str()), ("DELETE", "/MAAS/api/2.0/machines/abc123/"));
    assert_eq!(seen[2].target, "/MAAS/api/2.0/machines/abc123/?op=get_token");
    assert_eq!(seen[3].method, "GET");
}

#[tokio::test]
async fn a_refused_connection_is_transient() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/MAAS", listener.local_addr().expect("addr"));
    drop(listener);
    let mut config = ClientConfig::new(&url, "CK:TK:TS".parse().expect("key"));
    config.retries = 0;
    config.timeout = Duration::from_secs(2);
    let e = MaasClient::new(config).expect("client").version().await.expect_err("refused");
    assert_eq!(e.class(), ErrorClass::Transient, "{e:?}");
    assert!(matches!(e, MaasError::Connect { .. }), "{e:?}");
}
