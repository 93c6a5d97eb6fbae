//! The `fake-maas` binary with `--boot-dir`: a deployed machine's `#cloud-config` user data
//! is booted in a sandbox root. Here the agent bootstrap part is a small hand-written script
//! (the real bootstrap, with a coordinator, is `tests/tests/maas_boot.rs`): it runs under the
//! root with the bootstrap's test hooks and a working `sudo`, the `write_files` land with
//! their modes, the "agent" it installs is started with the sandboxing config appended and is
//! stopped by release and delete, a path that climbs out of the root fails the boot with
//! nothing written, a broken boot is an ERROR event and the fake goes on serving, and hardware
//! sync is reported only for credentials naming the machine and its own current token.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine;
use drover_devkit::fake_maas::{BootOptions, FakeMaas, FakeMaasOptions};
use serde_json::{Value, json};

const AGENT_PART: &str = "/usr/local/lib/drover-first-boot/50-agent-bootstrap.sh";
const CREDS: &str = "/etc/maas/maas-machine-creds.yml";
const WAIT: Duration = Duration::from_secs(60);

/// The agent part: records its environment, proves `sudo` runs its command, and installs an
/// `agent.toml` and a `drover-agent` that records its arguments and then just stays up.
const BOOTSTRAP: &str = r#"#!/bin/sh
set -eu
R="$DROVER_BOOTSTRAP_ROOT"
printf 'root=%s skip=%s\n' "$R" "$DROVER_BOOTSTRAP_SKIP_SYSTEMD" > "$R/booted"
printf '%s\n' 'the-token' | sudo sh -c 'read -r t; echo "via sudo: $t" > "$DROVER_BOOTSTRAP_ROOT/sudo-ran"'
mkdir -p "$R/usr/local/bin" "$R/etc/drover"
printf 'coordinator_urls = []\n' > "$R/etc/drover/agent.toml"
cat > "$R/usr/local/bin/drover-agent" <<'AGENT'
#!/bin/sh
r=${0%/usr/local/bin/drover-agent}
echo "$*" > "$r/agent-args"
exec sleep 600
AGENT
chmod 0755 "$R/usr/local/bin/drover-agent"
echo "bootstrap done"
"#;

struct Fake {
    fake: FakeMaas,
    http: reqwest::Client,
    dir: tempfile::TempDir,
}

fn oauth(key: &str) -> String {
    let p: Vec<&str> = key.split(':').collect();
    let ts = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
    format!(
        "OAuth oauth_nonce=\"{}\", oauth_timestamp=\"{ts}\", oauth_version=\"1.0\", oauth_signature_method=\"PLAINTEXT\", \
         oauth_consumer_key=\"{}\", oauth_token=\"{}\", oauth_signature=\"%26{}\"",
        uuid::Uuid::new_v4().simple(),
        p[0],
        p[1],
        p[2]
    )
}

impl Fake {
    fn start() -> Fake {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = tempfile::tempdir().unwrap();
        let boot = BootOptions::new(dir.path().join("boot"));
        let fake = FakeMaas::start(&FakeMaasOptions { boot: Some(boot), ..FakeMaasOptions::default() }).expect("fake-maas starts");
        let http = reqwest::Client::builder().timeout(Duration::from_secs(20)).build().unwrap();
        Fake { fake, http, dir }
    }

    async fn api(&self, method: &str, path: &str, form: &[(&str, &str)]) -> Value {
        let url = format!("{}/api/2.0/{path}", self.fake.url());
        let mut req = self.http.request(method.parse().unwrap(), url).header("Authorization", oauth(self.fake.api_key()));
        if !form.is_empty() {
            req = req.header("Content-Type", "application/x-www-form-urlencoded").body(serde_urlencoded::to_string(form).unwrap());
        }
        let resp = req.send().await.expect("request");
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        assert!((200..300).contains(&status), "{method} {path}: {status} {text}");
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }

    fn control(&self, method: &str, path: &str, body: Value) -> Value {
        self.fake.control(method, path, Some(&body)).expect("control call")
    }

    fn inspect(&self, id: &str) -> Value {
        self.fake.control("GET", &format!("machines/{id}"), None).expect("inspect")
    }

    /// A Ready machine, deployed once without user data and aborted, so it is Allocated with
    /// its token minted (MAAS keeps it across an abort by the same owner): the token the user
    /// data's credentials can then carry.
    async fn allocated_with_token(&self, hostname: &str) -> (String, (String, String, String)) {
        let id =
            self.control("POST", "machines", json!({ "hostname": hostname, "status": "Ready" }))["system_id"].as_str().unwrap().to_owned();
        self.api("POST", &format!("machines/{id}/?op=deploy"), &[]).await;
        self.api("POST", &format!("machines/{id}/?op=abort"), &[]).await;
        let t = self.api("GET", &format!("machines/{id}/?op=get_token"), &[]).await;
        let s = |k: &str| t[k].as_str().unwrap().to_owned();
        (id, (s("consumer_key"), s("token_key"), s("token_secret")))
    }

    /// Deploys `user_data` (base64, as MAAS's client sends it) with hardware sync on, completes
    /// the deployment, and waits (bounded) until the boot is no longer booting.
    async fn deploy_and_boot(&self, id: &str, user_data: &str) -> Value {
        let b64 = base64::engine::general_purpose::STANDARD.encode(user_data);
        self.api("POST", &format!("machines/{id}/?op=deploy"), &[("user_data", &b64), ("enable_hw_sync", "true")]).await;
        self.control("POST", "advance", json!({ "system_id": id }));
        let deadline = Instant::now() + WAIT;
        loop {
            let m = self.inspect(id);
            let state = m["_fake"]["boot"]["state"].as_str().unwrap_or_default().to_owned();
            if !state.is_empty() && state != "booting" {
                return m;
            }
            assert!(Instant::now() < deadline, "the boot never finished: {m}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn event_types(&self, id: &str, level: &str) -> Vec<(String, String)> {
        let ev = self.api("GET", &format!("events/?op=query&id={id}&level={level}&limit=1000"), &[]).await;
        ev["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| (e["type"].as_str().unwrap().to_owned(), e["description"].as_str().unwrap().to_owned()))
            .collect()
    }
}

fn file(path: &str, permissions: &str, content: &str) -> Value {
    json!({ "path": path, "owner": "root:root", "permissions": permissions, "content": content })
}

/// A `#cloud-config` user data as Drover renders it: comments, then a JSON body.
fn cloud_config(files: Vec<Value>) -> String {
    let body = json!({ "hostname": "gpu", "write_files": files, "runcmd": [["/bin/sh", "/usr/local/lib/drover-first-boot/run.sh"]] });
    format!("#cloud-config\n# A hand-written test bundle.\n{}\n", serde_json::to_string_pretty(&body).unwrap())
}

fn creds(system_id: &str, (ck, tk, ts): &(String, String, String)) -> String {
    format!(
        "reporting:\n  maas:\n    consumer_key: '{ck}'\n    endpoint: 'http://10.0.0.2:5240/MAAS/metadata/status/{system_id}'\n    \
         token_key: '{tk}'\n    token_secret: '{ts}'\n"
    )
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).permissions().mode() & 0o7777
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn alive(pid: u64) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// MAAS's `is_sync_healthy` over the REST fields, at now.
fn sync_healthy(m: &Value) -> bool {
    let parse = |v: &Value| v.as_str().and_then(|s| time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok());
    let (Some(last), Some(interval)) = (parse(&m["last_sync"]), m["sync_interval"].as_i64()) else { return false };
    m["enable_hw_sync"] == true && interval > 0 && time::OffsetDateTime::now_utc() <= last + time::Duration::seconds(interval * 3 / 2)
}

async fn wait_dead(pid: u64) {
    let deadline = Instant::now() + WAIT;
    while alive(pid) {
        assert!(Instant::now() < deadline, "process {pid} is still running");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn booting_runs_the_agent_part_under_the_root_and_release_stops_the_agent() {
    let f = Fake::start();
    let (id, token) = f.allocated_with_token("gpu-01").await;
    let ud = cloud_config(vec![
        file("/etc/drover/first-boot.json", "0644", "{}\n"),
        file(CREDS, "0600", &creds(&id, &token)),
        file("/usr/local/sbin/drover-maas-hardware-sync", "0755", "#!/bin/sh\nexit 0\n"),
        file(AGENT_PART, "0700", BOOTSTRAP),
    ]);
    let m = f.deploy_and_boot(&id, &ud).await;
    let boot = &m["_fake"]["boot"];
    assert_eq!(boot["state"], "running", "{boot}\nboot.log: {}", read(Path::new(boot["boot_log"].as_str().unwrap())));
    let root = PathBuf::from(boot["root"].as_str().unwrap());
    let canonical_dir = std::fs::canonicalize(f.dir.path()).unwrap();
    assert_eq!(root, canonical_dir.join("boot").join(&id).join("root"));

    // write_files, with their modes.
    assert_eq!((mode(&root.join("etc/drover/first-boot.json")), mode(&root.join(&CREDS[1..]))), (0o644, 0o600));
    assert_eq!(mode(&root.join("usr/local/sbin/drover-maas-hardware-sync")), 0o755);
    assert_eq!(read(&root.join(&CREDS[1..])), creds(&id, &token));
    // The part ran under the root with the test hooks and a sudo that passes stdin on, and was
    // then deleted (it holds the enrollment token), as the first-boot runner does.
    assert_eq!(read(&root.join("booted")), format!("root={} skip=1\n", root.display()));
    assert_eq!(read(&root.join("sudo-ran")), "via sudo: the-token\n");
    assert!(!root.join(&AGENT_PART[1..]).exists());
    assert!(read(Path::new(boot["boot_log"].as_str().unwrap())).contains("bootstrap done"));
    // Nothing else of the bundle ran, and nothing was written outside the machine's directory.
    assert!(!root.join("var/lib/drover-first-boot/status.json").exists());
    let listed: Vec<_> = std::fs::read_dir(canonical_dir.join("boot")).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(listed, vec![std::ffi::OsString::from(&id)]);

    // The agent: started with the installed config, the sandboxing appended to it.
    let config = root.join("etc/drover/agent.toml");
    let deadline = Instant::now() + WAIT;
    while !root.join("agent-args").exists() {
        assert!(Instant::now() < deadline, "the agent never started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(read(&root.join("agent-args")), format!("run --config {}\n", config.display()));
    let toml = read(&config);
    assert!(toml.starts_with("coordinator_urls = []\n"), "{toml}");
    assert!(toml.contains(&format!("systemd_bus = \"unix:path={}/no-bus\"", root.display())), "{toml}");
    assert!(toml.contains(&format!("[activation]\nroot = \"{}\"", root.display())), "{toml}");
    let pid = boot["agent_pid"].as_u64().expect("agent pid");
    assert!(alive(pid));
    let kinds = f.event_types(&id, "INFO").await;
    assert!(kinds.iter().any(|(k, _)| k == "Booting") && kinds.iter().any(|(k, _)| k == "Booted"), "{kinds:?}");
    assert!(sync_healthy(&f.api("GET", &format!("machines/{id}/"), &[]).await), "its own token: hardware sync is healthy");

    // Release powers it off: the agent is killed (and reaped), the boot forgotten.
    f.api("POST", &format!("machines/{id}/?op=release"), &[]).await;
    wait_dead(pid).await;
    assert_eq!(f.inspect(&id)["_fake"]["boot"], Value::Null);

    // Delete, on a second boot of another machine, does the same.
    let (id2, token2) = f.allocated_with_token("gpu-02").await;
    let m =
        f.deploy_and_boot(&id2, &cloud_config(vec![file(CREDS, "0600", &creds(&id2, &token2)), file(AGENT_PART, "0700", BOOTSTRAP)])).await;
    assert_eq!(m["_fake"]["boot"]["state"], "running", "{m}");
    let pid2 = m["_fake"]["boot"]["agent_pid"].as_u64().expect("agent pid");
    assert!(alive(pid2));
    f.api("DELETE", &format!("machines/{id2}/"), &[]).await;
    wait_dead(pid2).await;
    // Stopping the fake stops a third one.
    let (id3, _) = f.allocated_with_token("gpu-03").await;
    let m = f.deploy_and_boot(&id3, &cloud_config(vec![file(AGENT_PART, "0700", BOOTSTRAP)])).await;
    let pid3 = m["_fake"]["boot"]["agent_pid"].as_u64().expect("agent pid");
    drop(f.fake);
    wait_dead(pid3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_files_path_cannot_escape_the_boot_root() {
    let f = Fake::start();
    let boot_dir = std::fs::canonicalize(f.dir.path()).unwrap().join("boot");
    for (n, attack) in ["/../../escaped", "/etc/../../../escaped", "escaped"].into_iter().enumerate() {
        let (id, _) = f.allocated_with_token(&format!("gpu-{n}")).await;
        let ud = cloud_config(vec![file("/etc/innocent", "0644", "x"), file(attack, "0644", "pwned"), file(AGENT_PART, "0700", BOOTSTRAP)]);
        let m = f.deploy_and_boot(&id, &ud).await;
        let boot = &m["_fake"]["boot"];
        assert_eq!(boot["state"], "failed", "{attack}: {boot}");
        assert!(boot["error"].as_str().unwrap().contains("escapes the boot root"), "{boot}");
        // Nothing was written, inside or out, and the agent part never ran.
        let root = boot_dir.join(&id).join("root");
        for p in [boot_dir.join("escaped"), boot_dir.join(&id).join("escaped"), f.dir.path().join("escaped"), root.join("escaped")] {
            assert!(!p.exists(), "{attack} wrote {}", p.display());
        }
        assert!(!root.join("etc/innocent").exists() && !root.join("booted").exists());
        assert_eq!(boot["agent_pid"], Value::Null);
        let errors = f.event_types(&id, "ERROR").await;
        assert!(errors.iter().any(|(k, d)| k == "Boot failed" && d.contains(attack)), "{errors:?}");
        assert_eq!(m["status_name"], "Deployed", "a failed boot does not change MAAS's status");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_boot_is_an_error_event_and_the_fake_goes_on() {
    let f = Fake::start();
    let cases = [
        ("#!/bin/sh\necho a script, not cloud-config\n".to_owned(), "not a #cloud-config"),
        ("#cloud-config\nwrite_files:\n  - path: /a\n".to_owned(), "JSON"),
        (cloud_config(vec![file("/etc/a", "0644", "x")]), "no agent bootstrap part"),
        (cloud_config(vec![file(AGENT_PART, "0700", "#!/bin/sh\necho boom >&2\nexit 3\n")]), "boom"),
        (cloud_config(vec![file(AGENT_PART, "0700", "#!/bin/sh\nexit 0\n")]), "no agent.toml"),
    ];
    for (n, (ud, want)) in cases.iter().enumerate() {
        let (id, _) = f.allocated_with_token(&format!("bad-{n}")).await;
        let m = f.deploy_and_boot(&id, ud).await;
        let boot = &m["_fake"]["boot"];
        assert_eq!(boot["state"], "failed", "{boot}");
        assert!(boot["error"].as_str().unwrap().contains(want), "want {want:?}: {boot}");
        assert!(f.event_types(&id, "ERROR").await.iter().any(|(k, _)| k == "Boot failed"));
        assert!(!sync_healthy(&m), "a failed boot never syncs: {m}");
    }
    assert!(f.api("GET", "version/", &[]).await["version"].is_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hw_sync_needs_the_machines_own_token() {
    let f = Fake::start();
    let (own, own_token) = f.allocated_with_token("sync-own").await;
    let (wrong, wrong_token) = f.allocated_with_token("sync-wrong-secret").await;
    let (other, _) = f.allocated_with_token("sync-other-machine").await;
    let (none, _) = f.allocated_with_token("sync-no-creds").await;
    let mut bad_secret = wrong_token.clone();
    bad_secret.2.push('x');
    let cases = [
        (&own, Some(creds(&own, &own_token)), "ok"),
        (&wrong, Some(creds(&wrong, &bad_secret)), "credentials carry another token"),
        // Another machine's (valid) token, under this machine's id.
        (&other, Some(creds(&other, &own_token)), "credentials carry another token"),
        (&none, None, "no credentials"),
    ];
    for (id, text, want) in cases {
        let mut files = vec![file(AGENT_PART, "0700", BOOTSTRAP)];
        if let Some(t) = text {
            files.push(file(CREDS, "0600", &t));
        }
        let m = f.deploy_and_boot(id, &cloud_config(files)).await;
        assert_eq!(m["_fake"]["boot"]["state"], "running", "{m}");
        // The answer's request ticked after the boot finished: the creds were looked at.
        let m = f.inspect(id);
        assert_eq!(m["_fake"]["boot"]["hw_sync"], want, "{id}: {m}");
        assert_eq!(m["enable_hw_sync"], true);
        assert_eq!(sync_healthy(&m), want == "ok", "{id}: {m}");
        assert_eq!(m["last_sync"].is_null(), want != "ok", "{id}: {m}");
        let rest = f.api("GET", &format!("machines/{id}/"), &[]).await;
        assert_eq!(sync_healthy(&rest), want == "ok", "{id}: {rest}");
    }
    // Creds rewritten to name another machine (as a bad reseed could): checked on read, so the
    // next report is refused; the last good one stands until it goes stale, as in MAAS.
    let root = PathBuf::from(f.inspect(&own)["_fake"]["boot"]["root"].as_str().unwrap().to_owned());
    std::fs::write(root.join(&CREDS[1..]), creds(&none, &own_token)).unwrap();
    assert_eq!(f.inspect(&own)["_fake"]["boot"]["hw_sync"], "credentials name another machine");
    // Release takes the token with the owner: nothing syncs any more.
    f.api("POST", &format!("machines/{own}/?op=release"), &[]).await;
    let m = f.inspect(&own);
    assert!(!sync_healthy(&m) && m["last_sync"].is_null(), "{m}");
}
