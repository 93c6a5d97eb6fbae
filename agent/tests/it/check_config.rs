//! `drover-agent check-config FILE` (and `--config FILE`, as `run` takes it) as a process: the
//! documented full configuration passes, a wrong key or value is named with the file and exits
//! 65, a missing file exits 66 — the configuration, or the CA file `ca_file` names.

use std::path::Path;
use std::process::Command;

/// Where the documented configurations put the CA; [`check`] points it at a real one.
const DOC_CA: &str = "/etc/drover/ca.crt";

/// The full `agent.toml` as the README documents it.
const FULL: &str = r#"
coordinator_urls = ["https://coord-1.example:8443", "https://coord-2.example:8443"]
state_dir = "/var/lib/drover"
ca_file = "/etc/drover/ca.crt"
systemd_bus = "unix:path=/run/dbus/system_bus_socket"

[checkin]
request_timeout_secs = 330
backoff_base_secs = 1
backoff_max_secs = 300

[activation]
root = "/"
nix_store = "nix-store"
nix_env = "nix-env"
realise_timeout_secs = 3600
switch_timeout_secs = 900
quarantine_secs = 86400
confirm_retry_secs = 5

[health]
maas_creds_file = "/etc/maas/maas-machine-creds.yml"
hw_sync_timer = "maas_hardware_sync.timer"
nvidia_smi = "nvidia-smi"
disks = ["/"]

[[probes]]
name = "sshd"
kind = "tcp"
host = "127.0.0.1"
port = 22
timeoutSecs = 2
"#;

/// A real self-signed CA certificate (PEM) at `path`.
fn write_ca(path: &Path) {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    std::fs::write(path, params.self_signed(&key).expect("ca").pem()).expect("write ca");
}

/// `drover-agent ARGS…` → (exit code, stdout, stderr).
fn agent(args: &[&std::ffi::OsStr]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_drover-agent")).args(args).output().expect("run");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// `check-config FILE` on `text` (none: no file), with `ca_file` pointing at a real CA.
fn check(text: Option<&str>) -> (i32, String, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("agent.toml");
    let ca = dir.path().join("ca.crt");
    write_ca(&ca);
    if let Some(t) = text {
        std::fs::write(&file, t.replace(DOC_CA, ca.to_str().expect("utf-8"))).expect("write");
    }
    agent(&["check-config".as_ref(), file.as_os_str()])
}

#[test]
fn the_documented_configuration_passes() {
    let (code, out, err) = check(Some(FULL));
    assert_eq!(code, 0, "{err}");
    assert!(out.trim_end().ends_with("agent.toml: ok"), "{out}");
}

/// The README's `agent.toml` block (everything beyond enrollment), with enrollment's keys.
fn readme_config() -> String {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).expect("README.md");
    let start = readme.find("```toml\nsystemd_bus = ").expect("the README documents agent.toml") + "```toml\n".len();
    let block = &readme[start..];
    let block = &block[..block.find("```").expect("block end")];
    format!(
        "coordinator_urls = [\"https://coord-1.example:8443\"]\nstate_dir = \"/var/lib/drover\"\nca_file = \"/etc/drover/ca.crt\"\n{block}"
    )
}

#[test]
fn the_readme_configuration_passes_and_lists_every_table() {
    let text = readme_config();
    let (code, out, err) = check(Some(&text));
    assert_eq!(code, 0, "{err}\n{text}");
    assert!(out.trim_end().ends_with("agent.toml: ok"), "{out}");
    for table in ["[checkin]", "[activation]", "[health]", "[tasks]", "[[probes]]"] {
        assert!(text.contains(table), "the README's agent.toml lacks {table}");
    }
    // A key misspelt in the documented [tasks] table is named, not ignored.
    let (code, _, err) = check(Some(&text.replace("tenant_uid_min", "tenant_uid_minimum")));
    assert_eq!(code, 65, "{err}");
    assert!(err.contains("tenant_uid_minimum"), "{err}");
}

#[test]
fn a_misspelt_key_is_named_with_the_file_and_refused() {
    let (code, _, err) = check(Some(&FULL.replace("quarantine_secs", "quarantine_sec")));
    assert_eq!(code, 65, "{err}");
    assert!(err.contains("agent.toml") && err.contains("quarantine_sec"), "{err}");
}

#[test]
fn a_backoff_cap_below_its_base_is_refused() {
    let (code, _, err) = check(Some(&FULL.replace("backoff_max_secs = 300", "backoff_max_secs = 0")));
    assert_eq!(code, 65, "{err}");
    assert!(err.contains("checkin.backoff_max_secs"), "{err}");
}

#[test]
fn a_local_probe_name_used_twice_is_refused() {
    let twice = format!("{FULL}\n[[probes]]\nname = \"sshd\"\nkind = \"tcp\"\nhost = \"::1\"\nport = 22\ntimeoutSecs = 2\n");
    let (code, _, err) = check(Some(&twice));
    assert_eq!(code, 65, "{err}");
    assert!(err.contains("probes") && err.contains("sshd"), "{err}");
}

#[test]
fn a_local_probe_missing_its_fields_is_refused_naming_them() {
    let (code, _, err) = check(Some(&FULL.replace("port = 22\n", "")));
    assert_eq!(code, 65, "{err}");
    assert!(err.contains("probes[0].port"), "{err}");
    let (code, _, err) = check(Some(&FULL.replace("host = \"127.0.0.1\"", "url = \"http://127.0.0.1/\"")));
    assert_eq!(code, 65, "{err}");
    assert!(err.contains("probes[0]"), "{err}");
}

#[test]
fn a_missing_file_is_no_input() {
    let (code, _, err) = check(None);
    assert_eq!(code, 66, "{err}");
}

#[test]
fn config_flag_works_like_run_and_the_bare_file_still_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (file, ca) = (dir.path().join("agent.toml"), dir.path().join("ca.crt"));
    write_ca(&ca);
    std::fs::write(&file, FULL.replace(DOC_CA, ca.to_str().expect("utf-8"))).expect("write");
    for args in [vec!["check-config".as_ref(), "--config".as_ref(), file.as_os_str()], vec!["check-config".as_ref(), file.as_os_str()]] {
        let (code, out, err) = agent(&args);
        assert_eq!(code, 0, "{args:?}: {err}");
        assert_eq!(out, format!("{}: ok\n", file.display()), "{args:?}");
    }
    // Both at once, or neither, is a usage error.
    let (code, _, err) = agent(&["check-config".as_ref(), "--config".as_ref(), file.as_os_str(), file.as_os_str()]);
    assert_eq!(code, 64, "{err}");
    let (code, _, err) = agent(&["check-config".as_ref()]);
    assert_eq!(code, 64, "{err}");
}

#[test]
fn a_relative_ca_file_is_refused_naming_the_key() {
    let (code, out, err) = check(Some(&FULL.replace(DOC_CA, "ca.crt")));
    assert_eq!(code, 65, "{out}{err}");
    assert!(err.contains("agent.toml: key `ca_file`: ca.crt must be an absolute path"), "{err}");
}

#[test]
fn a_ca_file_that_is_missing_or_not_a_certificate_is_refused_naming_key_and_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (file, ca) = (dir.path().join("agent.toml"), dir.path().join("absent-ca.crt"));
    std::fs::write(&file, FULL.replace(DOC_CA, ca.to_str().expect("utf-8"))).expect("write");
    let (code, out, err) = agent(&["check-config".as_ref(), "--config".as_ref(), file.as_os_str()]);
    assert_eq!(code, 66, "{out}{err}");
    assert!(err.contains("agent.toml: key `ca_file`") && err.contains(&ca.display().to_string()), "{err}");
    assert_eq!(err.matches("No such file or directory").count(), 1, "the OS error once: {err}");
    std::fs::write(&ca, "not a certificate\n").expect("write");
    let (code, _, err) = agent(&["check-config".as_ref(), "--config".as_ref(), file.as_os_str()]);
    assert_eq!(code, 65, "{err}");
    assert!(err.contains("key `ca_file`") && err.contains("no PEM certificate"), "{err}");
}

#[test]
fn a_toml_syntax_error_says_line_and_column() {
    let (code, _, err) = check(Some(&FULL.replace("backoff_max_secs = 300", "backoff_max_secs = \"300")));
    assert_eq!(code, 65, "{err}");
    let line = FULL.lines().position(|l| l.starts_with("backoff_max_secs")).expect("line") + 1;
    assert!(err.contains(&format!("agent.toml:{line}:")), "line {line}: {err}");
}
