//! `drover enroll` as a process: bad input exits with its sysexits code before any network
//! traffic, an unreachable coordinator is 69, and against a fake coordinator over real mutual
//! TLS 1.3 the operator certificate is presented, stdout is exactly the command, and refusals
//! map to 77 (401/403) and 65 (other 4xx).

use crate::common;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use common::mtls::{self, Pki, drover_blocking, operator_flags};
use common::{Run, Scratch, drover_env, sha256_hex};
use drover_proto::enroll::{CreateHostRequest, CreateHostResponse};
use drover_proto::task::Secret;
use drover_proto::time::Time;
use rcgen::ExtendedKeyUsagePurpose;

/// A port nothing listens on.
fn dead_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

fn creds(url: &str) -> Vec<String> {
    operator_flags(url).map(str::to_owned).to_vec()
}

fn enroll(sc: &Scratch, extra: &[String], env: &[(&str, &str)]) -> Run {
    let mut args = vec!["enroll", "gpu-a-01", "--trust", "trust.json"];
    args.extend(extra.iter().map(String::as_str));
    drover_env(sc.path(), &args, b"", env)
}

/// A scratch directory with a valid `trust.json`.
fn with_trust() -> Scratch {
    let sc = Scratch::new();
    sc.keygen("ci");
    sc.trust("trust.json", &["ci.pub"]);
    sc
}

#[test]
fn a_missing_trust_file_exits_66() {
    let sc = Scratch::new();
    enroll(&sc, &creds("https://127.0.0.1:1"), &[]).fails_with(66).stderr_has(&["trust.json"]);
}

#[test]
fn a_malformed_trust_file_exits_65() {
    let sc = Scratch::new();
    sc.write("trust.json", "{\"schemaVersion\":1,");
    enroll(&sc, &creds("https://127.0.0.1:1"), &[]).fails_with(65).stderr_has(&["trust.json", "trust roots"]);
    sc.write("trust.json", r#"{"schemaVersion":1,"ci":{"threshold":1,"keys":[]}}"#);
    enroll(&sc, &creds("https://127.0.0.1:1"), &[]).fails_with(65).stderr_has(&["trust.json"]);
}

#[test]
fn missing_credentials_exit_64_naming_flags_and_variables() {
    let sc = with_trust();
    enroll(&sc, &[], &[]).fails_with(64).stderr_has(&[
        "--coordinator",
        "DROVER_COORDINATOR",
        "--cert",
        "DROVER_CERT",
        "--key",
        "DROVER_KEY",
        "--ca",
        "DROVER_CA",
    ]);
    let partial = ["--coordinator", "https://127.0.0.1:1", "--cert", "op.crt"].map(str::to_owned);
    let run = enroll(&sc, &partial, &[]);
    run.fails_with(64).stderr_has(&["--key", "DROVER_KEY", "--ca", "DROVER_CA"]);
    assert!(!run.stderr.contains("DROVER_CERT"), "{}", run.stderr);
}

#[test]
fn bad_arguments_exit_64() {
    let sc = with_trust();
    enroll(&sc, &creds("http://127.0.0.1:1"), &[]).fails_with(64).stderr_has(&["--coordinator", "https://"]);
    let mut args = vec!["enroll", "Not_A_Host", "--trust", "trust.json"];
    let c = creds("https://127.0.0.1:1");
    args.extend(c.iter().map(String::as_str));
    drover_env(sc.path(), &args, b"", &[]).fails_with(64).stderr_has(&["Not_A_Host"]);
    let mut ttl = creds("https://127.0.0.1:1");
    ttl.extend(["--token-ttl".to_owned(), "0".to_owned()]);
    assert_eq!(enroll(&sc, &ttl, &[]).code, 64);
    // There is no way to put a token or a hash on this command line: the server makes both.
    assert_eq!(drover_env(sc.path(), &["enroll", "--trust", "trust.json"], b"", &[]).code, 64);
}

#[test]
fn a_hostname_that_parses_as_a_host_id_exits_64_before_any_request() {
    // Every HOST argument is tried as an id first, so such a host would answer to no name of
    // its own and could stand for the host whose id it is.
    let sc = with_trust();
    let mut args = vec!["enroll", "0d9e1c7a-2b3c-4d5e-8f90-123456789abc", "--trust", "trust.json"];
    let c = creds(&format!("https://127.0.0.1:{}", dead_port()));
    args.extend(c.iter().map(String::as_str));
    drover_env(sc.path(), &args, b"", &[]).fails_with(64).stderr_has(&["HOSTNAME", "names must not parse as ids"]);
}

#[test]
fn missing_or_malformed_credential_files_exit_66_and_65() {
    let sc = with_trust();
    enroll(&sc, &creds("https://127.0.0.1:1"), &[]).fails_with(66).stderr_has(&["ca.crt"]);
    Pki::new().write_operator(&sc);
    sc.write("op.key", "not a key");
    enroll(&sc, &creds("https://127.0.0.1:1"), &[]).fails_with(65).stderr_has(&["op.key"]);
}

#[test]
fn an_unreachable_coordinator_exits_69_with_flags_or_environment() {
    let sc = with_trust();
    Pki::new().write_operator(&sc);
    let url = format!("https://127.0.0.1:{}", dead_port());
    enroll(&sc, &creds(&url), &[]).fails_with(69).stderr_has(&["cannot reach the coordinator", &url]);
    let env = [("DROVER_COORDINATOR", url.as_str()), ("DROVER_CERT", "op.crt"), ("DROVER_KEY", "op.key"), ("DROVER_CA", "ca.crt")];
    enroll(&sc, &[], &env).fails_with(69).stderr_has(&[&url]);
}

/// A fake coordinator: mutual TLS 1.3 (client certificate required, chained to the CA), one
/// route, `POST /v1/hosts`, answering by hostname.
struct Fake {
    seen: Mutex<Vec<CreateHostRequest>>,
}

impl Fake {
    async fn start(self: &Arc<Self>, pki: &Pki) -> SocketAddr {
        let me = Arc::clone(self);
        mtls::serve(pki, move |head, body| me.respond(head, body)).await
    }

    fn respond(&self, head: &str, body: &[u8]) -> (u16, Vec<u8>) {
        if !head.to_ascii_lowercase().starts_with("post /v1/hosts ") {
            return (404, br#"{"error":{"code":"not_found","message":"no such route"}}"#.to_vec());
        }
        let req: CreateHostRequest = serde_json::from_slice(body).expect("create host request");
        self.seen.lock().expect("lock").push(req.clone());
        match req.hostname.as_str() {
            "denied-01" => (403, br#"{"error":{"code":"forbidden","message":"role viewer may not create hosts"}}"#.to_vec()),
            "taken-01" => (409, br#"{"error":{"code":"conflict","message":"host taken-01 already exists"}}"#.to_vec()),
            _ => {
                let resp = CreateHostResponse {
                    host_id: FAKE_HOST_ID.to_owned(),
                    hostname: req.hostname.clone(),
                    token: Secret::new("tok-123"),
                    expires_at: Time::parse_strict("2030-01-01T02:00:00Z").expect("time"),
                    command: Secret::new(if req.hostname == "tampered-01" {
                        // A coordinator that swaps the operator's trust hash.
                        drover_proto::enroll::bootstrap_command(FAKE_URL, FAKE_PIN, FAKE_HOST_ID, "tok-123", &"0".repeat(64))
                    } else {
                        drover_proto::enroll::bootstrap_command(FAKE_URL, FAKE_PIN, FAKE_HOST_ID, "tok-123", &req.trust_sha256)
                    }),
                };
                (200, serde_json::to_vec(&resp).expect("json"))
            }
        }
    }
}

/// Runs `drover enroll HOST …` off the runtime's threads.
async fn enroll_host(dir: &Path, host: &str, extra: Vec<String>) -> Run {
    let mut args: Vec<String> = ["enroll", host, "--trust", "trust.json"].map(str::to_owned).to_vec();
    args.extend(extra);
    drover_blocking(dir, args).await
}

const FAKE_URL: &str = "https://coord.example:8443";
const FAKE_PIN: &str = "sha256//QUJDRA==";
const FAKE_HOST_ID: &str = "7f0c6a56-1d51-4bb4-9a5e-3c8f1d2f9a10";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn against_a_fake_coordinator_prints_only_the_command_and_maps_refusals() {
    let sc = with_trust();
    let pki = Pki::new();
    pki.write_operator(&sc);
    let fake = Arc::new(Fake { seen: Mutex::new(Vec::new()) });
    let url = format!("https://{}", fake.start(&pki).await);
    let trust_hash = sha256_hex(&std::fs::read(sc.join("trust.json")).expect("trust"));

    let mut extra = creds(&url);
    extra.extend(["--token-ttl".to_owned(), "600".to_owned()]);
    let run = enroll_host(sc.path(), "gpu-a-01", extra).await;
    run.ok();
    assert_eq!(
        run.stdout,
        format!("{}\n", drover_proto::enroll::bootstrap_command(FAKE_URL, FAKE_PIN, FAKE_HOST_ID, "tok-123", &trust_hash))
    );
    assert!(run.stderr.contains("7f0c6a56-1d51-4bb4-9a5e-3c8f1d2f9a10") && run.stderr.contains("2030-01-01T02:00:00Z"), "{}", run.stderr);
    let seen = fake.seen.lock().expect("lock").clone();
    assert_eq!(seen, vec![CreateHostRequest { hostname: "gpu-a-01".to_owned(), trust_sha256: trust_hash, token_ttl_secs: Some(600) }]);

    enroll_host(sc.path(), "denied-01", creds(&url)).await.fails_with(77).stderr_has(&["403", "role viewer may not create hosts"]);
    // A command carrying another trust hash than the operator's is never printed.
    let run = enroll_host(sc.path(), "tampered-01", creds(&url)).await;
    run.fails_with(76).stderr_has(&["unexpected bootstrap command"]);
    assert!(run.stdout.is_empty(), "{}", run.stdout);
    enroll_host(sc.path(), "taken-01", creds(&url)).await.fails_with(65).stderr_has(&["409", "already exists"]);

    // Without a certificate the fake's CA accepts, the handshake fails: no request is made.
    let other = Pki::new();
    let (cert, key) = other.issue(&["intruder"], ExtendedKeyUsagePurpose::ClientAuth);
    sc.write("other.crt", cert.pem());
    sc.write("other.key", key.serialize_pem());
    let bad = ["--coordinator", &url, "--cert", "other.crt", "--key", "other.key", "--ca", "ca.crt"].map(str::to_owned).to_vec();
    let run = enroll_host(sc.path(), "intruder-01", bad).await;
    // Named for what it is: the coordinator refused this certificate (77), not "unreachable".
    run.fails_with(77).stderr_has(&["refused the operator certificate other.crt"]);
    // Nor does the client trust a coordinator whose certificate is not from --ca.
    sc.write("other-ca.crt", other.ca.pem());
    let wrong_ca = ["--coordinator", &url, "--cert", "op.crt", "--key", "op.key", "--ca", "other-ca.crt"].map(str::to_owned).to_vec();
    enroll_host(sc.path(), "gpu-a-02", wrong_ca).await.fails_with(77).stderr_has(&["not signed by the CA in other-ca.crt"]);
    assert_eq!(fake.seen.lock().expect("lock").len(), 4, "only the four authenticated requests reached the route");
}
