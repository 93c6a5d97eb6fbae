//! The Redfish client against a real third-party Redfish service: OpenStack's
//! `sushy-emulator --fake` (PyPI `sushy-tools`; the README's test command installs it), with
//! HTTP Basic authentication from a bcrypt htpasswd file, each test on its own port and state
//! directory.
//!
//! - `power_on_then_off_converges_through_the_allowed_reset_types`
//! - `a_wrong_password_is_refused_and_changes_nothing`
//! - `an_unknown_system_is_refused_naming_it`
//! - `a_bmc_that_refuses_power_off_is_reported_as_refused`

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use drover_redfish::{PowerTarget, RedfishClient, RedfishConfig, RedfishError};

const OFF: &str = "11111111-2222-3333-4444-000000000001";
const ON: &str = "11111111-2222-3333-4444-000000000002";
const USER: &str = "drover";
const PASS: &str = "bmc-pa55-w0rd";

fn emulator_bin() -> PathBuf {
    let from_path =
        std::env::var_os("PATH").and_then(|p| std::env::split_paths(&p).map(|d| d.join("sushy-emulator")).find(|c| c.is_file()));
    from_path.unwrap_or_else(|| {
        panic!(
            "sushy-emulator is not on PATH: install sushy-tools (`python3 -m pip install sushy-tools`, as the README's test command does)"
        )
    })
}

/// A running emulator, killed when dropped.
struct Emulator {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(extra: &str) -> Emulator {
    let bin = emulator_bin();
    let dir = tempfile::tempdir().expect("tempdir");
    // The htpasswd entry, bcrypt as the emulator requires, made with the emulator's own Python.
    let python = bin.parent().expect("bin dir").join("python3");
    let python = if python.is_file() { python } else { PathBuf::from("python3") };
    let out = Command::new(&python)
        .args(["-c", &format!("import bcrypt; print(bcrypt.hashpw(b'{PASS}', bcrypt.gensalt()).decode())")])
        .output()
        .expect("python3 with bcrypt (installed with sushy-tools)");
    assert!(out.status.success(), "bcrypt: {}", String::from_utf8_lossy(&out.stderr));
    let hash = String::from_utf8(out.stdout).expect("utf8");
    std::fs::write(dir.path().join("htpasswd"), format!("{USER}:{}\n", hash.trim())).expect("htpasswd");
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
    let conf = format!(
        "SUSHY_EMULATOR_STATE_DIR = {state:?}\nSUSHY_EMULATOR_AUTH_FILE = {auth:?}\n\
         SUSHY_EMULATOR_FAKE_SYSTEMS = [{{'uuid': '{OFF}', 'name': 'gpu-off', 'power_state': 'Off', 'nics': []}}, \
         {{'uuid': '{ON}', 'name': 'gpu-on', 'power_state': 'On', 'nics': []}}]\n{extra}\n",
        state = dir.path().join("state").display().to_string(),
        auth = dir.path().join("htpasswd").display().to_string(),
    );
    std::fs::write(dir.path().join("conf.py"), conf).expect("conf");
    let child = Command::new(&bin)
        .args(["--fake", "-i", "127.0.0.1", "-p", &port.to_string(), "--config"])
        .arg(dir.path().join("conf.py"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn sushy-emulator");
    let url = format!("http://127.0.0.1:{port}");
    // Ready when the service root answers (bounded).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            break;
        }
        assert!(Instant::now() < deadline, "sushy-emulator did not listen within 30 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    Emulator { child, url, _dir: dir }
}

fn client(e: &Emulator, password: &str) -> RedfishClient {
    let mut c = RedfishConfig::new(&e.url, USER, password);
    c.allow_plain_http = true;
    // The emulator applies a change 0–11 s after accepting it.
    c.converge_timeout = Duration::from_secs(40);
    c.poll_interval = Duration::from_millis(250);
    RedfishClient::new(c).expect("client")
}

#[tokio::test]
async fn power_on_then_off_converges_through_the_allowed_reset_types() {
    let e = start("");
    let c = client(&e, PASS);
    let systems = c.systems().await.expect("systems");
    assert_eq!(systems.len(), 2, "{systems:?}");
    let uri = format!("/redfish/v1/Systems/{OFF}");
    let before = c.system(&uri).await.expect("read");
    assert_eq!(before.power_state, "Off");
    assert!(before.allowed.iter().any(|a| a == "On"), "{:?}", before.allowed);
    let on = c.set_power(&uri, PowerTarget::On).await.expect("power on");
    assert_eq!(on.power_state, "On");
    assert_eq!(c.system(&uri).await.expect("read").power_state, "On", "the BMC itself says On");
    let off = c.set_power(&uri, PowerTarget::Off).await.expect("power off");
    assert_eq!(off.power_state, "Off");
    // Already there: nothing is sent, the answer is immediate.
    let t = Instant::now();
    assert_eq!(c.set_power(&uri, PowerTarget::Off).await.expect("no-op").power_state, "Off");
    assert!(t.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn a_wrong_password_is_refused_and_changes_nothing() {
    let e = start("");
    let uri = format!("/redfish/v1/Systems/{ON}");
    let err = client(&e, "not-the-password").set_power(&uri, PowerTarget::Off).await.expect_err("refused");
    assert!(matches!(err, RedfishError::Refused { status: 401, .. }), "{err}");
    assert!(!err.to_string().contains("not-the-password"), "no credential in an error: {err}");
    assert_eq!(client(&e, PASS).system(&uri).await.expect("read").power_state, "On");
}

#[tokio::test]
async fn an_unknown_system_is_refused_naming_it() {
    let e = start("");
    let err = client(&e, PASS).set_power("/redfish/v1/Systems/no-such-machine", PowerTarget::On).await.expect_err("404");
    match &err {
        RedfishError::Refused { uri, status: 404, message } => {
            assert!(uri.ends_with("/Systems/no-such-machine") && message.contains("no-such-machine"), "{err}");
        }
        other => panic!("{other}"),
    }
}

#[tokio::test]
async fn a_bmc_that_refuses_power_off_is_reported_as_refused() {
    let e = start("SUSHY_EMULATOR_DISABLE_POWER_OFF = True");
    let c = client(&e, PASS);
    let uri = format!("/redfish/v1/Systems/{ON}");
    let err = c.set_power(&uri, PowerTarget::Off).await.expect_err("refused");
    assert!(matches!(err, RedfishError::Refused { status: 400, .. }), "{err}");
    assert_eq!(c.system(&uri).await.expect("read").power_state, "On", "a refusal changes nothing");
}
