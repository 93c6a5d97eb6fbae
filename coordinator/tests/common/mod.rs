//! Helpers shared by the coordinator's integration tests: the clock, temporary state
//! directories, and running the real `openssl` and the real `drover-coordinator` binary.

// Each test crate uses a different subset of these.
#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use drover_engine::pki::San;
use drover_engine::state_dir::StateDir;
use drover_proto::time::Time;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

/// The current time: certificates are checked by `openssl verify`, which reads the real clock.
pub fn now() -> Time {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock after 1970").as_secs();
    Time::from_unix(i64::try_from(secs).expect("in range")).expect("in range")
}

/// A fresh temporary directory.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

/// Runs `openssl` with `args` in `dir`; returns its output whatever the exit status.
pub fn openssl_in(dir: &Path, args: &[&str]) -> Output {
    Command::new("openssl").args(args).current_dir(dir).output().expect("openssl runs (is it installed?)")
}

/// Runs `openssl` in `dir` and returns stdout, failing the test on a non-zero exit.
pub fn openssl_ok(dir: &Path, args: &[&str]) -> String {
    let out = openssl_in(dir, args);
    assert!(
        out.status.success(),
        "openssl {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// Runs a shell pipeline in `dir` and returns stdout, failing the test on a non-zero exit.
pub fn sh_ok(dir: &Path, script: &str) -> String {
    let out = Command::new("sh").args(["-c", script]).current_dir(dir).output().expect("sh runs");
    assert!(out.status.success(), "{script} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf-8")
}

/// The built `drover-coordinator` binary.
pub fn coordinator_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_drover-coordinator"))
}

/// Runs `drover-coordinator` with `args`; returns (exit code, stdout, stderr).
pub fn coordinator(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(coordinator_bin()).args(args).output().expect("drover-coordinator runs");
    (
        out.status.code().expect("exited, not killed"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Makes a P-256 key and a CSR with `openssl req` in `dir` (as `name.key`, `name.csr`);
/// `extra` adds arguments such as `-addext …`. Returns the CSR's PEM.
pub fn openssl_csr(dir: &Path, name: &str, subject: &str, extra: &[&str]) -> String {
    let key = format!("{name}.key");
    let csr = format!("{name}.csr");
    let mut args = vec![
        "req",
        "-new",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        &key,
        "-out",
        &csr,
        "-subj",
        subject,
    ];
    args.extend_from_slice(extra);
    openssl_ok(dir, &args);
    std::fs::read_to_string(dir.join(&csr)).expect("csr written")
}

/// Writes `text` to `dir/name` and returns the path.
pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write");
    path
}

/// Parses SAN strings.
pub fn sans(names: &[&str]) -> Vec<San> {
    names.iter().map(|n| San::parse(n).expect("valid san")).collect()
}

/// Permission bits of a file.
pub fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).expect("exists").permissions().mode() & 0o7777
}

/// SANs of a DER certificate as `DNS:…`, `IP:…`, `URI:…` strings.
pub fn san_strings(der: &[u8]) -> Vec<String> {
    let (_, cert) = X509Certificate::from_der(der).expect("x509");
    let san = cert.subject_alternative_name().expect("parses").expect("has SANs");
    san.value
        .general_names
        .iter()
        .map(|n| match n {
            GeneralName::DNSName(d) => format!("DNS:{d}"),
            GeneralName::URI(u) => format!("URI:{u}"),
            GeneralName::IPAddress(ip) => format!("IP:{}", hex::encode(ip)),
            other => format!("other:{other:?}"),
        })
        .collect()
}

/// A state directory for `localhost`, `127.0.0.1` and `coord.example.com`.
pub fn init_state(dir: &Path) -> StateDir {
    StateDir::init(dir, &sans(&["localhost", "127.0.0.1", "coord.example.com"]), now()).expect("init")
}
