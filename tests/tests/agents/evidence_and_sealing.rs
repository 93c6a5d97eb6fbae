//! Host-signed evidence and sealed secrets, end to end: a real coordinator, a real `drover-agent run` enrolled
//! by the bootstrap command (which registers its sealing key and evidence key).
//!
//! - `a_secret_task_leaves_no_plaintext_in_the_coordinators_state_dir`: a MAAS token given
//!   to the admin API in the clear reaches the host (which opens it) while every file of the
//!   coordinator's state directory — the store, its WAL, its shared memory — holds none of it,
//!   during the task and after.
//! - `validate_clean_evidence_verifies_offline_and_forgeries_do_not`: the host's signed word
//!   that it is clean, fetched with `drover evidence get` and checked with `drover evidence
//!   verify` and the CA certificate alone; a replayed (another task), other-host, altered,
//!   TLS-certificate-signed or other-CA document is refused, naming the rule.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use drover_engine::app::Clock as _;
use drover_proto::states::HostLifecycle;
use drover_tests::api::assert_task_succeeded;
use drover_tests::sandbox::sandbox;
use drover_tests::{Harness, start_agent};
use serde_json::{Value, json};
use uuid::Uuid;

/// Every byte of every file under `dir`.
fn all_files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("read dir").flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(all_files(&path));
        } else if let Ok(bytes) = std::fs::read(&path) {
            out.push((path.display().to_string(), bytes));
        }
    }
    out
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_task_leaves_no_plaintext_in_the_coordinators_state_dir() {
    let h = Harness::start().await;
    let root = h.dir.path().join("root-s");
    let mut extra = sandbox(&root);
    extra.push_str(&format!("maas_creds_file = \"{}\"\n", root.join("etc/maas/maas-machine-creds.yml").display()));
    let (host, config) = h.enroll_sandboxed("gpu-seal-01", &root, &extra).await;
    let secrets = ["CK-sealed-4a1b", "TK-sealed-9c2d", "TS-sealed-0123456789"];
    let task = json!({ "type": "node.hw_sync_reseed", "maasUrl": "http://maas.example:5240/MAAS", "systemId": "x7ab3c",
        "consumerKey": secrets[0], "tokenKey": secrets[1], "tokenSecret": secrets[2] });
    // Issued before the agent runs: the queued task is what the store holds.
    let id = h.issue_task(host, task, "reseed after reimage").await;
    let state = h.dir.path().join("state");
    let stored = String::from_utf8(h.running.app.store.get_task(id).expect("store").expect("task").task.envelope).expect("utf-8");
    assert!(stored.contains("sealedToken"), "the stored task carries the sealed token: {stored}");
    for (file, bytes) in all_files(&state) {
        for s in secrets {
            assert!(!contains(&bytes, s), "{file} holds {s} while the task is queued");
        }
    }
    let _agent = start_agent(&config, "warn", Stdio::null());
    let view = h.task_result(id, None).await;
    // The host opened it: the credentials file it wrote holds the token (no systemd here,
    // so the timer restart fails after that).
    let creds = std::fs::read_to_string(root.join("etc/maas/maas-machine-creds.yml")).expect("creds written");
    assert!(secrets.iter().all(|s| creds.contains(s)), "the host opened the sealed token: {view}");
    for (file, bytes) in all_files(&state) {
        for s in secrets {
            assert!(!contains(&bytes, s), "{file} holds {s} after the task");
        }
    }
    // And a host with no sealing key gets no secret task: refused with a reason, not a 500.
    let (bare, _creds, _) = h.host_credentials("gpu-seal-02");
    let store = &h.running.app.store;
    let now = h.clock.now();
    store.transition_host(bare, HostLifecycle::BootstrapIssued, HostLifecycle::Enrolling, "enrolled without keys", now).expect("enrolled");
    let (code, text) = h
        .call(
            Some(&h.admin),
            "POST",
            &format!("/v1/hosts/{bare}/tasks"),
            Some(
                &json!({ "task": { "type": "node.hw_sync_reseed", "maasUrl": "http://m/MAAS", "systemId": "s", "consumerKey": "a",
                "tokenKey": "b", "tokenSecret": "c" }, "reason": "no key" })
                .to_string(),
            ),
        )
        .await;
    assert_eq!(code, "409", "{text}");
    assert!(text.contains("no sealing key"), "{text}");
}

async fn drover(h: &Harness, args: &[&str]) -> std::process::Output {
    h.drover_as(&h.admin, args).await
}

fn verify(file: &Path, ca: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["evidence".to_owned(), "verify".into(), file.display().to_string(), "--ca".into(), ca.display().to_string()];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    std::process::Command::new(drover_tests::workspace_binary("drover")).args(&args).output().expect("drover runs")
}

fn refused(out: &std::process::Output, rule: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(65), "stdout {} stderr {stderr}", String::from_utf8_lossy(&out.stdout));
    assert!(stderr.contains(rule), "expected {rule:?} in {stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_clean_evidence_verifies_offline_and_forgeries_do_not() {
    let h = Harness::start().await;
    let root = h.dir.path().join("root-e");
    let extra = sandbox(&root);
    let (host, config) = h.enroll_sandboxed("gpu-ev-01", &root, &extra).await;
    let _agent = start_agent(&config, "warn", Stdio::null());
    // The tenant's user and scratch files go first, so the host can truthfully say it is clean.
    for cleanup in [json!({ "type": "allocation.revoke_user" }), json!({ "type": "node.storage_cleanup", "scope": "local" })] {
        let id = h.issue_task(host, cleanup, "tenant turnover").await;
        assert_task_succeeded(&h.task_result(id, None).await);
    }
    let task = h.issue_task(host, json!({ "type": "node.validate_clean", "checkGpu": false }), "tenant turnover").await;
    assert_task_succeeded(&h.task_result(task, None).await);

    // The statement is stored beside the result; wait for it (bounded).
    let deadline = Instant::now() + Duration::from_secs(30);
    let docs: Value = loop {
        let out = drover(&h, &["evidence", "get", "gpu-ev-01", "-o", "json"]).await;
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).expect("json");
        if v.as_array().is_some_and(|a| !a.is_empty()) {
            break v;
        }
        assert!(Instant::now() < deadline, "no evidence for the validate_clean task");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let doc = docs[0].clone();
    assert_eq!(doc["statement"]["subject"]["taskId"], task.to_string());
    assert_eq!(doc["statement"]["subject"]["outcome"], "succeeded");
    let file = h.dir.path().join("evidence.json");
    std::fs::write(&file, serde_json::to_vec(&docs).expect("json")).expect("write");
    let (host_s, task_s) = (host.to_string(), task.to_string());
    let ok = verify(&file, &h.ca, &["--host", &host_s, "--task", &task_s]);
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    let said = String::from_utf8_lossy(&ok.stdout);
    assert!(said.contains("node.validate_clean") && said.contains("succeeded") && said.contains(&host_s), "{said}");
    // The table form names it too.
    let table = drover(&h, &["evidence", "get", &host_s]).await;
    assert!(String::from_utf8_lossy(&table.stdout).contains("node.validate_clean succeeded"));

    // Replayed: genuine evidence, but about another task than the one asked about.
    let other = Uuid::new_v4().to_string();
    refused(&verify(&file, &h.ca, &["--task", &other]), "expected task");
    // Another host's evidence presented as this one's.
    refused(&verify(&file, &h.ca, &["--host", &other]), "expected host");
    // Forged: the outcome edited after signing.
    let mut forged = doc.clone();
    forged["statement"]["subject"]["steps"][0]["message"] = json!("all clean, trust me");
    let forged_file = h.dir.path().join("forged.json");
    std::fs::write(&forged_file, forged.to_string()).expect("write");
    refused(&verify(&forged_file, &h.ca, &[]), "signature does not verify");
    // Signed with the host's TLS key and certificate instead: not an evidence certificate.
    let mut tls = doc.clone();
    let cert = std::fs::read_to_string(state_dir(&config).join("cert.pem")).expect("the agent's TLS certificate");
    tls["certificate"] = json!(cert);
    let tls_file = h.dir.path().join("tls.json");
    std::fs::write(&tls_file, tls.to_string()).expect("write");
    refused(&verify(&tls_file, &h.ca, &[]), "not an evidence certificate");
    // Checked against another CA: not issued by it.
    let stranger = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let other_ca = h.dir.path().join("other-ca.crt");
    std::fs::write(&other_ca, params.self_signed(&stranger).expect("ca").pem()).expect("write");
    refused(&verify(&file, &other_ca, &[]), "not issued by the given CA");

    // The job route answers for jobs only.
    let (code, _) = h.call(Some(&h.admin), "GET", &format!("/v1/jobs/{other}/evidence"), None).await;
    assert_eq!(code, "404");
}

/// The agent's state directory, from its config.
fn state_dir(config: &Path) -> std::path::PathBuf {
    let text = std::fs::read_to_string(config).expect("config");
    let line = text.lines().find(|l| l.trim_start().starts_with("state_dir")).expect("state_dir in the agent config");
    std::path::PathBuf::from(line.split('"').nth(1).expect("quoted path"))
}
