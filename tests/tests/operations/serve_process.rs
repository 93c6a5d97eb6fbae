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
    // The binary names the commit it was built from (a git checkout here, so never `unknown`):
    // its own build script records it and hands it to the engine at start.
    let out = Command::new("curl")
        .args(["-sS", "--tlsv1.3", "--cacert"])
        .arg(ops.join("ca.crt"))
        .arg("--cert")
        .arg(ops.join("vic.crt"))
        .arg("--key")
        .arg(ops.join("vic.key"))
        .arg(format!("https://{addr}/metrics"))
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout);
    let info = format!("drover_build_info{{version=\"{}\",commit=\"", env!("CARGO_PKG_VERSION"));
    let commit = text.lines().find_map(|l| l.strip_prefix(info.as_str())).and_then(|r| r.strip_suffix("\"} 1")).expect("build_info");
    assert!(commit.len() == 40 && commit.bytes().all(|b| b.is_ascii_hexdigit()), "{commit}");

    let pid = child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().expect("kill").success());
    let status = child.wait().expect("wait");
    assert!(status.success(), "serve did not stop cleanly on SIGTERM: {status}");
}

/// The agent's pinned director key, as a key id.
fn pinned_director(agent_state: &std::path::Path) -> drover_proto::keys::KeyId {
    let pem = std::fs::read_to_string(agent_state.join("director.pub")).expect("director.pub");
    drover_proto::keys::KeyId::of(&drover_proto::keys::verifying_key_from_text(&pem).expect("key"))
}

/// `rotate-director-key` on a stopped coordinator's state dir; returns the new key id from its
/// first line (`director key A hands over to B at T (rotation step N)`).
fn rotate(state: &std::path::Path, overlap_secs: u64) -> String {
    let overlap = overlap_secs.to_string();
    let out = coordinator(&["rotate-director-key", "--state-dir", state.to_str().expect("utf8"), "--overlap-secs", &overlap]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().next().unwrap_or_default();
    line.split(" hands over to ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_else(|| panic!("no successor in {stdout:?}"))
        .to_owned()
}

/// Two director-key rotations through real processes: `serve` stopped, `rotate-director-key`
/// run, `serve` started again on the same state dir and port, while one real `drover-agent run`
/// keeps checking in. The agent stores each statement during its overlap, pins the successor
/// once due, and keeps running tasks the coordinator now signs with the new key — no host
/// re-enrolled. A rotation during another's overlap is refused (73).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn director_key_rotates_twice_under_a_running_agent_without_re_enrolling() {
    use drover_tests::procs::{fixed_port_site, log_tail};
    use drover_tests::sandbox::sandbox;

    let dir = tempfile::tempdir().expect("tempdir");
    let (paths, endpoint) = fixed_port_site(dir.path(), "[agent]\nlong_poll_secs = 1\n");
    let logs = || {
        format!(
            "coordinator:\n{}\nagent:\n{}",
            log_tail(&paths.dir.join("coordinator.log"), 20),
            log_tail(&paths.dir.join("agent.log"), 20)
        )
    };
    let wait_for = async |what: &str, check: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !check() {
            assert!(Instant::now() < deadline, "{what}: not within 60 s\n{}", logs());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let issue_and_wait = async |host: uuid::Uuid, why: &str| {
        let body = serde_json::json!({ "task": { "type": "node.validate_clean", "checkGpu": false }, "reason": why }).to_string();
        let (code, text) = endpoint.call(Some(&endpoint.admin), "POST", &format!("/v1/hosts/{host}/tasks"), Some(&body)).await;
        assert_eq!(code, "201", "{text}");
        let id = serde_json::from_str::<serde_json::Value>(&text).expect("json")["taskId"].as_str().expect("taskId").to_owned();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (_, text) = endpoint.call(Some(&endpoint.admin), "GET", &format!("/v1/tasks/{id}"), None).await;
            let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
            // Completed with its steps: the agent accepted the signature and ran it (a refused
            // task is never completed). Its verdict on the sandbox's planted residue is beside
            // the point.
            if v["state"] == "completed" {
                assert!(v["result"]["steps"].as_array().is_some_and(|s| s.iter().any(|s| s["name"] == "users")), "{v}");
                return;
            }
            assert!(Instant::now() < deadline, "task {why} never completed: {v}\n{}", logs());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };

    let mut server = paths.serve();
    let root = paths.dir.join("root");
    let extra = format!("{}\n[checkin]\nbackoff_base_secs = 1\nbackoff_max_secs = 1\n", sandbox(&root));
    let (host, config) = endpoint.enroll_sandboxed("gpu-rotate-01", &root, &extra).await;
    let agent_log = std::fs::File::create(paths.dir.join("agent.log")).expect("agent log");
    let _agent = drover_tests::start_agent(&config, "info", Stdio::from(agent_log));
    let agent_state = root.join("var/lib/drover");
    let initial = pinned_director(&agent_state);
    issue_and_wait(host, "before any rotation").await;

    let mut previous = initial.clone();
    for step in 1..=2 {
        // Stop, rotate with a short overlap, serve again on the same port.
        drop(server);
        let successor = rotate(&paths.state, 4);
        let refused = Command::new(workspace_binary("drover-coordinator"))
            .args(["rotate-director-key", "--state-dir", paths.state.to_str().expect("utf8"), "--overlap-secs", "4"])
            .output()
            .expect("runs");
        assert_eq!(refused.status.code(), Some(73), "a rotation during the overlap: {}", String::from_utf8_lossy(&refused.stderr));
        server = paths.serve();

        // The agent learns the statement on check-in, pins the successor once due, and the
        // tasks the coordinator now signs with it run.
        wait_for(&format!("step {step} pinned"), &|| pinned_director(&agent_state).to_string() == successor).await;
        assert_ne!(pinned_director(&agent_state), previous);
        issue_and_wait(host, &format!("after rotation {step}")).await;
        previous = pinned_director(&agent_state);
    }
    assert_ne!(previous, initial);
    // The coordinator served the whole time from one state dir; no host was enrolled again.
    let (_, text) = endpoint.call(Some(&endpoint.admin), "GET", &format!("/v1/hosts/{host}"), None).await;
    assert_eq!(serde_json::from_str::<serde_json::Value>(&text).expect("json")["state"], "active", "{text}");
    drop(server);
}

/// `serve` and `check-config` with `file` → (exit code, stdout, stderr), each.
fn serve_and_check(file: &std::path::Path) -> [(Option<i32>, String, String); 2] {
    ["serve", "check-config"].map(|verb| {
        let out = coordinator(&[verb, "--config", file.to_str().expect("utf8")]);
        (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
    })
}

/// Start-up refusals as an operator meets them: `serve` and `check-config` give the same exit
/// code and the same message, naming the configuration file, the key and the file it names,
/// the OS error once; a TOML syntax error says where (`FILE:LINE:COL:`). `check-config` on a
/// good configuration prints "ok" without binding anything.
#[test]
fn start_up_refusals_name_key_and_file_and_check_config_agrees_with_serve() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let state = d.join("state");
    let out = coordinator(&["init", "--state-dir", state.to_str().expect("utf8"), "--san", "127.0.0.1"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let ci = ed25519_dalek::SigningKey::from_bytes(&[9u8; 32]).verifying_key();
    let trust = serde_json::json!({ "schemaVersion": 1, "ci": { "threshold": 1, "keys": [{
        "keyId": drover_proto::keys::KeyId::of(&ci).to_string(), "alg": "ed25519",
        "publicKey": drover_proto::keys::verifying_key_to_pem(&ci).expect("pem") }] } });
    std::fs::write(d.join("trust.json"), trust.to_string()).expect("trust");
    let agent = workspace_binary("drover-agent");
    // Port 1, which an unprivileged test could not bind: check-config never binds.
    let config = |state: &std::path::Path, trust: &std::path::Path, agent: &std::path::Path| {
        format!(
            "listen = \"127.0.0.1:1\"\nstate_dir = \"{}\"\npublic_urls = [\"https://127.0.0.1:1\"]\ntrust_file = \"{}\"\nagent_binary = \"{}\"\n",
            state.display(),
            trust.display(),
            agent.display()
        )
    };
    let good = d.join("good.toml");
    std::fs::write(&good, config(&state, &d.join("trust.json"), &agent)).expect("config");
    let out = coordinator(&["check-config", "--config", good.to_str().expect("utf8")]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{}: ok\n", good.display()));

    let cases = [
        ("no-state.toml", config(&d.join("absent-state"), &d.join("trust.json"), &agent), 66, "key `state_dir`", "absent-state"),
        ("no-trust.toml", config(&state, &d.join("absent-trust.json"), &agent), 66, "key `trust_file`", "absent-trust.json"),
        ("no-agent.toml", config(&state, &d.join("trust.json"), &d.join("absent-agent")), 66, "key `agent_binary`", "absent-agent"),
        ("bad-trust.toml", config(&state, &good, &agent), 65, "key `trust_file`", "good.toml is not valid trust roots"),
        (
            "no-pg-password.toml",
            format!(
                "{}[store]\nbackend = \"postgres\"\nurl = \"postgres://drover@127.0.0.1:1/drover\"\npassword_file = \"{}\"\n",
                config(&state, &d.join("trust.json"), &agent),
                d.join("absent-pg-password").display()
            ),
            66,
            "key `store.password_file`",
            "absent-pg-password",
        ),
    ];
    for (name, text, code, key, named) in cases {
        let file = d.join(name);
        std::fs::write(&file, text).expect("config");
        let [serve, check] = serve_and_check(&file);
        assert_eq!(serve, check, "{name}: check-config and serve differ");
        let (got, _, stderr) = serve;
        assert_eq!(got, Some(code), "{name}: {stderr}");
        assert!(stderr.starts_with(&format!("drover-coordinator: {}: {key}", file.display())), "{name}: {stderr}");
        assert!(stderr.contains(named), "{name}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{name}: one line: {stderr}");
        // A missing state dir is said in words; a missing file carries the OS error, once.
        let os_errors = if code == 66 && key != "key `state_dir`" { 1 } else { 0 };
        assert_eq!(stderr.matches("No such file or directory").count(), os_errors, "{name}: {stderr}");
    }

    // TOML syntax: the line and column of the unterminated string (line 4, after its quote).
    let file = d.join("syntax.toml");
    std::fs::write(&file, config(&state, &d.join("trust.json"), &agent).replace("trust_file = \"", "trust_file = \"\n#")).expect("config");
    let text = std::fs::read_to_string(&file).expect("read");
    let line = text.lines().position(|l| l.starts_with("trust_file")).expect("line") + 1;
    let [serve, check] = serve_and_check(&file);
    assert_eq!(serve, check, "check-config and serve differ");
    let (got, _, stderr) = serve;
    assert_eq!(got, Some(78), "{stderr}");
    assert!(stderr.starts_with(&format!("drover-coordinator: {}:{line}:15: ", file.display())), "{stderr}");
    // An unknown key: where, and which.
    let file = d.join("unknown.toml");
    std::fs::write(&file, format!("{}listen_backlog = 5\n", config(&state, &d.join("trust.json"), &agent))).expect("config");
    let [serve, check] = serve_and_check(&file);
    assert_eq!(serve, check, "check-config and serve differ");
    let (got, _, stderr) = serve;
    assert_eq!(got, Some(78), "{stderr}");
    assert!(stderr.contains(&format!("{}:6:", file.display())) && stderr.contains("listen_backlog"), "{stderr}");
    // The configuration file itself missing: 66, the OS error once.
    let [serve, check] = serve_and_check(&d.join("absent.toml"));
    assert_eq!(serve, check, "check-config and serve differ");
    let (got, _, stderr) = serve;
    assert_eq!(got, Some(66), "{stderr}");
    assert!(stderr.contains("absent.toml: cannot read") && stderr.matches("No such file or directory").count() == 1, "{stderr}");
}
