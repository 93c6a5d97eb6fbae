//! What the agent costs a host while nothing happens: a real `drover-agent run` long-polls a
//! real `drover-coordinator serve` (its default 55 s hold) for `--secs` (600) seconds; the
//! figures are its CPU seconds over that time, its resident memory, and its release binary's
//! size. The baseline, measured over the same seconds against the same coordinator, is the
//! smallest client that does the same job: a shell loop of real `curl` posting the same
//! check-in as another enrolled host (no health, no verification, a fresh TLS handshake each
//! time, which the agent avoids by keeping its connection).
//!
//! Run: `cargo build --release -p drover-coordinator -p drover-agent -p drover-tests && cargo bench -p drover-tests --bench
//! agent_idle` (options after `--`: `--secs S`).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use drover_engine::state_dir::StateDir as CoordinatorState;
use drover_engine::store::{CertKind, NewCert, NewHost, SqliteStore, Store};
use drover_proto::time::Time;
use drover_tests::procs::{Proc, cpu_secs, release_binary, rss_kib, start_server};

/// An enrolled host: its id, and its certificate and key PEM.
struct Enrolled {
    hostname: String,
    host_id: String,
    cert: String,
    key: String,
}

fn enroll(store: &SqliteStore, state: &CoordinatorState, hostname: &str, now: Time) -> Enrolled {
    let host = store.create_host(&NewHost { hostname: hostname.to_owned(), created_at: now, token: None }).expect("host");
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key");
    let csr = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params").serialize_request(&key).expect("csr");
    let cert = state.ca().issue_host_from_csr(&csr.pem().expect("pem"), host.id, hostname, now).expect("cert");
    store
        .record_cert(&NewCert {
            serial: cert.serial_hex.clone(),
            kind: CertKind::Host,
            host_id: Some(host.id),
            subject: hostname.to_owned(),
            not_before: cert.not_before,
            not_after: cert.not_after,
        })
        .expect("record");
    Enrolled { hostname: hostname.to_owned(), host_id: host.id.to_string(), cert: cert.pem, key: key.serialize_pem() }
}

fn write(path: &Path, bytes: impl AsRef<[u8]>) {
    std::fs::write(path, bytes).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let secs: u64 = args.iter().position(|a| a == "--secs").and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(600);
    let dir = tempfile::tempdir().expect("tempdir");
    let now =
        Time::from_unix(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs() as i64).expect("now");

    let coordinator = release_binary("drover-coordinator");
    let cstate = dir.path().join("coordinator");
    let out = Command::new(&coordinator).args(["init", "--state-dir"]).arg(&cstate).args(["--san", "127.0.0.1"]).output().expect("init");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let state = CoordinatorState::open(&cstate).expect("state");
    let store = SqliteStore::open(state.db_path()).expect("store");
    let agent_host = enroll(&store, &state, "gpu-idle-agent", now);
    let curl_host = enroll(&store, &state, "gpu-idle-curl", now);
    drop(store);

    let ci = ed25519_dalek::SigningKey::from_bytes(&[9u8; 32]).verifying_key();
    let trust = serde_json::json!({ "schemaVersion": 1, "ci": { "threshold": 1, "keys": [{
        "keyId": drover_proto::keys::KeyId::of(&ci).to_string(), "alg": "ed25519",
        "publicKey": drover_proto::keys::verifying_key_to_pem(&ci).expect("pem") }] } })
    .to_string();
    write(&dir.path().join("trust.json"), &trust);
    write(&dir.path().join("agent-binary"), b"not served in this benchmark");
    let ca = dir.path().join("ca.crt");
    write(&ca, state.ca().cert_pem());
    write(
        &dir.path().join("coordinator.toml"),
        format!(
            "listen = \"127.0.0.1:0\"\nstate_dir = \"{}\"\npublic_urls = [\"https://127.0.0.1:1\"]\ntrust_file = \"{}\"\nagent_binary = \"{}\"\n",
            cstate.display(),
            dir.path().join("trust.json").display(),
            dir.path().join("agent-binary").display()
        ),
    );
    let server = {
        let mut cmd = Command::new(&coordinator);
        cmd.args(["serve", "--config"]).arg(dir.path().join("coordinator.toml")).env("DROVER_LOG", "warn");
        start_server(cmd)
    };

    // The agent's state directory, as enrollment leaves it.
    let astate = drover_agent::state::StateDir::open(&dir.path().join("agent-state")).expect("agent state");
    astate.write_key(&agent_host.key).expect("key");
    astate.write_cert(&agent_host.cert).expect("cert");
    astate.write_ca(state.ca().cert_pem()).expect("ca");
    astate.write_trust(trust.as_bytes()).expect("trust");
    astate
        .write_director_pub(&drover_proto::keys::verifying_key_to_pem(&state.director_key().verifying_key()).expect("pem"))
        .expect("director");
    astate
        .write_identity(&drover_agent::state::Identity { host_id: agent_host.host_id.clone(), hostname: agent_host.hostname.clone() })
        .expect("identity");
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).expect("root");
    write(
        &dir.path().join("agent.toml"),
        format!(
            "coordinator_urls = [\"{}\"]\nstate_dir = \"{}\"\nca_file = \"{}\"\nsystemd_bus = \"unix:path={}\"\n\n[activation]\nroot = \"{}\"\n",
            server.url,
            astate.path().display(),
            ca.display(),
            root.join("no-bus").display(),
            root.display()
        ),
    );
    let agent = Proc {
        child: Command::new(release_binary("drover-agent"))
            .args(["run", "--config"])
            .arg(dir.path().join("agent.toml"))
            .env("DROVER_LOG", "warn")
            .spawn()
            .expect("agent starts"),
        url: String::new(),
    };

    // The baseline: the same check-in from a shell loop of real curl, as the other host.
    write(&dir.path().join("curl.crt"), &curl_host.cert);
    write(&dir.path().join("curl.key"), &curl_host.key);
    let script = format!(
        "while :; do curl -s -o /dev/null --tlsv1.3 --cacert '{}' --cert '{}' --key '{}' -H 'content-type: application/json' \
         --data-binary '{{\"agentVersion\":\"curl\",\"bootId\":\"b\"}}' '{}/v1/agent/checkin' || sleep 1; done",
        ca.display(),
        dir.path().join("curl.crt").display(),
        dir.path().join("curl.key").display(),
        server.url
    );
    let baseline = Proc { child: Command::new("sh").arg("-c").arg(script).spawn().expect("curl loop"), url: String::new() };

    // Let both make their first check-in (start-up is not idling), then measure.
    std::thread::sleep(Duration::from_secs(5));
    let (a0, b0, c0) = (cpu_secs(agent.child.id(), false), cpu_secs(baseline.child.id(), true), cpu_secs(server.child.id(), false));
    // The measurement window itself: a fixed span of idling, not a wait for a condition.
    std::thread::sleep(Duration::from_secs(secs));
    let (a1, b1, c1) = (cpu_secs(agent.child.id(), false), cpu_secs(baseline.child.id(), true), cpu_secs(server.child.id(), false));
    let (rss, hwm) = rss_kib(agent.child.id());
    let size = |name: &str| std::fs::metadata(release_binary(name)).map(|m| m.len()).unwrap_or(0) as f64 / (1024.0 * 1024.0);
    // The release profile keeps line tables (debug = 1); what a package ships is stripped.
    let stripped = |name: &str| {
        let out = dir.path().join(format!("{name}.stripped"));
        let ok = Command::new("strip").arg("-o").arg(&out).arg(release_binary(name)).status().is_ok_and(|s| s.success());
        if ok { std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0) as f64 / (1024.0 * 1024.0) } else { f64::NAN }
    };
    let (agent_cpu, curl_cpu) = (a1 - a0, b1 - b0);

    println!("# agent idle benchmark");
    println!();
    println!("{secs} s of idle long-polling against drover-coordinator serve (55 s hold), measured after 5 s of start-up");
    println!();
    println!("| measurement | drover-agent | baseline | ratio | goal |");
    println!("|---|---|---|---|---|");
    println!(
        "| CPU seconds over {secs} s | {agent_cpu:.2} | {curl_cpu:.2} (sh + curl loop) | {:.2} | < 1 s per 600 s |",
        agent_cpu / curl_cpu.max(0.01)
    );
    println!("| resident memory (MiB) | {:.1} (peak {:.1}) | | | < 15 MiB |", rss as f64 / 1024.0, hwm as f64 / 1024.0);
    println!(
        "| release binary (MiB) | {:.1} | {:.1} (bare-tls-server) | {:.2} | |",
        size("drover-agent"),
        size("bare-tls-server"),
        size("drover-agent") / size("bare-tls-server")
    );
    println!(
        "| release binary, stripped (MiB) | {:.1} | {:.1} (bare-tls-server) | {:.2} | |",
        stripped("drover-agent"),
        stripped("bare-tls-server"),
        stripped("drover-agent") / stripped("bare-tls-server")
    );
    println!();
    println!("coordinator CPU over the same time (both clients): {:.2} s", c1 - c0);
}
