//! `drover-coordinator` as a real process: `init`, `operator-cert`, then `serve --config`
//! answering over TLS 1.3 to `curl`, a bad config refused naming the file and key, and a clean
//! stop on SIGTERM.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use drover_tests::workspace_binary;

fn coordinator(args: &[&str]) -> std::process::Output {
    Command::new(workspace_binary("drover-coordinator")).args(args).output().expect("drover-coordinator runs")
}

#[test]
fn serve_runs_from_a_config_file_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let state = d.join("state");
    let out = coordinator(&["init", "--state-dir", state.to_str().expect("utf8"), "--san", "127.0.0.1"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = coordinator(&[
        "operator-cert",
        "--state-dir",
        state.to_str().expect("utf8"),
        "--role",
        "viewer",
        "--name",
        "vic",
        "--out",
        d.join("ops").to_str().expect("utf8"),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let ci = ed25519_dalek::SigningKey::from_bytes(&[9u8; 32]).verifying_key();
    let trust = serde_json::json!({ "schemaVersion": 1, "ci": { "threshold": 1, "keys": [{
        "keyId": drover_proto::keys::KeyId::of(&ci).to_string(), "alg": "ed25519",
        "publicKey": drover_proto::keys::verifying_key_to_pem(&ci).expect("pem") }] } });
    std::fs::write(d.join("trust.json"), trust.to_string()).expect("trust");
    let config = format!(
        "listen = \"127.0.0.1:0\"\nstate_dir = \"{}\"\npublic_urls = [\"https://127.0.0.1:1\"]\ntrust_file = \"{}\"\nagent_binary = \"{}\"\n",
        state.display(),
        d.join("trust.json").display(),
        workspace_binary("drover-agent").display()
    );
    std::fs::write(d.join("coordinator.toml"), &config).expect("config");

    // A bad config is refused before anything starts, naming file and key.
    std::fs::write(d.join("bad.toml"), format!("{config}\nlisten_backlog = 5\n")).expect("config");
    let out = coordinator(&["serve", "--config", d.join("bad.toml").to_str().expect("utf8")]);
    assert_eq!(out.status.code(), Some(78), "{}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("bad.toml") && stderr.contains("listen_backlog"), "{stderr}");

    let mut child = Command::new(workspace_binary("drover-coordinator"))
        .args(["serve", "--config", d.join("coordinator.toml").to_str().expect("utf8")])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("serve starts");
    // Wait (bounded) for the line that says where it listens.
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let deadline = Instant::now() + Duration::from_secs(30);
    let addr = loop {
        assert!(Instant::now() < deadline, "serve never said where it listens");
        match lines.next() {
            Some(Ok(line)) => {
                if let Some(a) = line.strip_prefix("listening on ") {
                    break a.trim().to_owned();
                }
            }
            _ => panic!("serve exited before listening"),
        }
    };
    let ops = d.join("ops");
    let out = Command::new("curl")
        .args(["-sS", "--tlsv1.3", "--cacert"])
        .arg(ops.join("ca.crt"))
        .arg("--cert")
        .arg(ops.join("vic.crt"))
        .arg("--key")
        .arg(ops.join("vic.key"))
        .arg(format!("https://{addr}/healthz"))
        .output()
        .expect("curl");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\n", "{}", String::from_utf8_lossy(&out.stderr));

    let pid = child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().expect("kill").success());
    let status = child.wait().expect("wait");
    assert!(status.success(), "serve did not stop cleanly on SIGTERM: {status}");
}
