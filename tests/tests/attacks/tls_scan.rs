//! TLS from outside: Debian's `testssl.sh` (the `testssl` command) scans a
//! live `drover-coordinator serve` process, once anonymously and once presenting an admin
//! operator's client certificate, and its JSON report is judged here.
//!
//! - Any finding of severity MEDIUM or above (or a FATAL scan problem) fails, each one named.
//!   The one exception, [`NOT_APPLICABLE`], says why; it must keep being reported, so it cannot
//!   outlive a change that removes it.
//! - What the issue lists is asserted positively: TLS 1.3 offered, TLS 1.2, 1.1, 1.0 and SSL 2/3
//!   not; only AEAD suites; only X25519/P-256/P-384-class groups and no finite-field group; no
//!   renegotiation; the chain trusted through the private CA (handed over with `--add-ca`) and
//!   in order; every vulnerability check run and passed.
//! - The sections run are those checks and no more (`-p -s -S -f -U`: protocols, cipher
//!   categories, server defaults and certificate, forward secrecy with its groups, the
//!   vulnerabilities), so a scan takes about 45 s; client simulation and HTTP header checks are
//!   left out, being about browsers.
//! - testssl 3.0 (Debian 12's) has no option to present a client certificate and does not list
//!   the signature schemes a server accepts. The client-certificate scan hands it an `openssl`
//!   that adds the certificate to every `s_client` connection (`--openssl`), proven to present it
//!   (it gets 200 where plain `openssl` gets 401) and to be the one testssl ran; signature
//!   schemes are probed with `openssl s_client -sigalgs` directly.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use drover_tests::procs::{Proc, SitePaths, fixed_port_site, log_tail};
use serde::Deserialize;

/// How long one scan may take before the test gives up on it (a scan takes about 45 s here,
/// two at once on two cores).
const SCAN_LIMIT: Duration = Duration::from_secs(300);

/// Findings of MEDIUM or above that do not apply to Drover: (id, finding, why).
const NOT_APPLICABLE: &[(&str, &str, &str)] = &[(
    "cert_revocation",
    "Neither CRL nor OCSP URI provided",
    "testssl expects the web's PKI, where a relying party fetches the CRL or asks the OCSP \
     responder a certificate names. Drover's clients (agents, `drover`) trust the private CA \
     alone and fetch nothing, so a URI in the server certificate would revoke nothing; the \
     server certificate is retired by re-issuing it and, after a key compromise, by a new CA.",
)];

/// One entry of testssl's flat JSON report (`--jsonfile`).
#[derive(Debug, Clone, Deserialize)]
struct Finding {
    id: String,
    severity: String,
    #[serde(default)]
    finding: String,
}

/// A coordinator serving on a fixed loopback port, and its site.
struct Live {
    _dir: tempfile::TempDir,
    paths: SitePaths,
    _server: Proc,
    /// `127.0.0.1:PORT`.
    addr: String,
    ca: PathBuf,
    admin: (PathBuf, PathBuf),
}

fn live() -> Live {
    let dir = tempfile::tempdir().expect("tempdir");
    let (paths, endpoint) = fixed_port_site(dir.path(), "");
    let server = paths.serve();
    let addr = server.url.strip_prefix("https://").expect("https URL").to_owned();
    Live { _dir: dir, paths, _server: server, addr, ca: endpoint.ca, admin: endpoint.admin }
}

/// Runs `testssl` to the end (bounded by [`SCAN_LIMIT`]) with `extra` options against `uri`;
/// returns its JSON findings.
fn testssl(live: &Live, name: &str, extra: &[&str], uri: &str) -> Vec<Finding> {
    let work = live.paths.dir.join(name);
    std::fs::create_dir_all(&work).expect("scan dir");
    let json = work.join("report.json");
    let log = work.join("testssl.log");
    let mut cmd = Command::new("testssl");
    cmd.args(["--quiet", "--color", "0", "--warnings", "off", "-n", "none"])
        .args(["--connect-timeout", "10", "--openssl-timeout", "10"])
        .arg("--add-ca")
        .arg(&live.ca)
        .arg("--jsonfile")
        .arg(&json)
        .args(["-p", "-s", "-S", "-f", "-U"])
        .args(extra)
        .arg(uri)
        .env("TMPDIR", &work)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log).expect("log"))
        .stderr(Stdio::null());
    let started = Instant::now();
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("cannot run testssl ({e}): install Debian's testssl.sh (`.ci/run` does)"));
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for testssl") {
            break status;
        }
        if started.elapsed() > SCAN_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("testssl ({name}) ran past {SCAN_LIMIT:?}:\n{}", log_tail(&log, 30));
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    eprintln!("testssl ({name}): {status} after {:.0} s", started.elapsed().as_secs_f64());
    let text = std::fs::read_to_string(&json)
        .unwrap_or_else(|e| panic!("testssl ({name}, {status}) wrote no report ({e}):\n{}", log_tail(&log, 30)));
    let findings: Vec<Finding> = serde_json::from_str(&text).unwrap_or_else(|e| panic!("testssl's report is not its JSON: {e}"));
    assert!(findings.iter().any(|f| f.id == "scanTime"), "testssl ({name}, {status}) did not finish:\n{}", log_tail(&log, 30));
    findings
}

/// The findings with `id` (some checks report more than once).
fn all<'a>(findings: &'a [Finding], id: &str) -> Vec<&'a Finding> {
    findings.iter().filter(|f| f.id == id).collect()
}

/// The one finding with `id`.
fn one<'a>(findings: &'a [Finding], id: &str) -> &'a Finding {
    let found = all(findings, id);
    assert!(!found.is_empty(), "testssl reported no `{id}`");
    found[0]
}

fn fails(severity: &str) -> bool {
    matches!(severity, "MEDIUM" | "HIGH" | "CRITICAL" | "FATAL")
}

/// Fails on every MEDIUM-or-above finding but [`NOT_APPLICABLE`]'s, naming each; then asserts
/// what the coordinator promises: TLS 1.3 alone, no weak cipher category, forward-secret AEAD
/// suites only, elliptic-curve groups, and the certificate checks below.
fn judge(name: &str, findings: &[Finding]) {
    let failing: Vec<String> = findings
        .iter()
        .filter(|f| fails(&f.severity))
        .filter(|f| !NOT_APPLICABLE.iter().any(|(id, text, _)| f.id == *id && f.finding == *text))
        .map(|f| format!("{} {}: {}", f.severity, f.id, f.finding))
        .collect();
    assert!(failing.is_empty(), "testssl ({name}) found, at MEDIUM or above:\n  {}", failing.join("\n  "));
    for (id, text, why) in NOT_APPLICABLE {
        assert!(
            findings.iter().any(|f| f.id == *id && f.finding == *text),
            "testssl ({name}) no longer reports `{id}: {text}`; remove it from NOT_APPLICABLE ({why})"
        );
    }

    // Protocols: TLS 1.3 alone.
    assert!(one(findings, "TLS1_3").finding.starts_with("offered"), "TLS 1.3: {:?}", one(findings, "TLS1_3"));
    for id in ["SSLv2", "SSLv3", "TLS1", "TLS1_1", "TLS1_2"] {
        assert!(one(findings, id).finding.starts_with("not offered"), "{id}: {:?}", one(findings, id));
    }
    // Ciphers: no weak category, forward secrecy with the TLS 1.3 AEAD suites only.
    for id in ["cipherlist_NULL", "cipherlist_aNULL", "cipherlist_EXPORT", "cipherlist_LOW", "cipherlist_3DES_IDEA", "cipherlist_AVERAGE"] {
        assert_eq!(one(findings, id).finding, "not offered", "{id}");
    }
    let suites: Vec<&str> = one(findings, "PFS_ciphers").finding.split_whitespace().collect();
    assert!(!suites.is_empty(), "no forward-secret suite");
    for suite in &suites {
        assert!(
            ["TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"].contains(suite),
            "suite {suite} offered (all: {suites:?})"
        );
    }
    // Groups: elliptic curves of the X25519/P-256/P-384 class, no finite-field group at all.
    let groups: Vec<&str> = one(findings, "PFS_ECDHE_curves").finding.split_whitespace().collect();
    assert!(groups.contains(&"X25519"), "X25519 not offered: {groups:?}");
    for group in &groups {
        assert!(["X25519", "X448", "prime256v1", "secp384r1", "secp521r1"].contains(group), "weak group {group} offered (all: {groups:?})");
    }
    assert!(all(findings, "DH_groups").is_empty(), "finite-field groups offered: {:?}", all(findings, "DH_groups"));
    // The certificate: signed with a strong scheme, a strong key, trusted through the private
    // CA with the chain the server sends, in order.
    for id in ["cert_signatureAlgorithm", "cert_keySize", "cert_trust", "cert_chain_of_trust", "cert_expirationStatus"] {
        assert_eq!(one(findings, id).severity, "OK", "{id}: {:?}", one(findings, id));
    }
    assert!(one(findings, "cert_chain_of_trust").finding.starts_with("passed"), "{:?}", one(findings, "cert_chain_of_trust"));
    assert_eq!(one(findings, "certs_list_ordering_problem").finding, "no");
    // No renegotiation, and every vulnerability check ran and passed.
    for id in [
        "secure_renego",
        "secure_client_renego",
        "heartbleed",
        "CCS",
        "ticketbleed",
        "ROBOT",
        "CRIME_TLS",
        "BREACH",
        "POODLE_SSL",
        "fallback_SCSV",
        "FREAK",
        "DROWN",
        "LOGJAM",
        "BEAST",
        "LUCKY13",
        "RC4",
    ] {
        one(findings, id);
        for f in all(findings, id) {
            assert_eq!(f.severity, "OK", "{id}: {f:?}");
        }
    }
    assert!(one(findings, "secure_renego").finding.contains("TLS 1.3 only"), "{:?}", one(findings, "secure_renego"));
}

#[test]
fn testssl_finds_nothing_of_medium_severity_in_an_anonymous_scan() {
    let live = live();
    let findings = testssl(&live, "anonymous", &[], &live.addr);
    judge("anonymous", &findings);
}

/// `openssl` as testssl runs it, adding `cert` and `key` to every `s_client` connection; each
/// call appended to `log`.
fn openssl_presenting(path: &Path, (cert, key): &(PathBuf, PathBuf), log: &Path) {
    let quote = |p: &Path| {
        let s = p.display().to_string();
        assert!(!s.contains('\''), "{s}: a quote in a temporary path");
        format!("'{s}'")
    };
    let script = format!(
        "#!/bin/sh\n\
         printf '%s\\n' \"$*\" >> {log}\n\
         if [ \"$1\" = s_client ]; then\n\
         \x20 for a in \"$@\"; do\n\
         \x20   if [ \"$a\" = -connect ]; then shift; exec openssl s_client -cert {cert} -key {key} \"$@\"; fi\n\
         \x20 done\n\
         fi\n\
         exec openssl \"$@\"\n",
        log = quote(log),
        cert = quote(cert),
        key = quote(key)
    );
    std::fs::write(path, script).expect("write the openssl wrapper");
    let mut perms = std::fs::metadata(path).expect("stat").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(path, perms).expect("chmod");
}

/// The status line of `GET /v1/hosts` sent through `openssl` (or the wrapper) `s_client`.
fn status_line(openssl: &Path, live: &Live) -> String {
    // `timeout` bounds a server that would never close.
    let mut child = Command::new("timeout")
        .arg("20")
        .arg(openssl)
        .args(["s_client", "-quiet", "-verify_return_error", "-connect", &live.addr, "-CAfile"])
        .arg(&live.ca)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("openssl s_client");
    let request = "GET /v1/hosts HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    std::io::Write::write_all(child.stdin.as_mut().expect("stdin"), request.as_bytes()).expect("send the request");
    let out = child.wait_with_output().expect("openssl s_client ends");
    String::from_utf8_lossy(&out.stdout).lines().next().unwrap_or_default().trim().to_owned()
}

#[test]
fn testssl_finds_nothing_of_medium_severity_presenting_an_operator_certificate() {
    let live = live();
    let wrapper = live.paths.dir.join("openssl-presenting-alice");
    let calls = live.paths.dir.join("openssl-calls.log");
    openssl_presenting(&wrapper, &live.admin, &calls);
    assert_eq!(status_line(Path::new("openssl"), &live), "HTTP/1.1 401 Unauthorized", "anonymous");
    assert_eq!(status_line(&wrapper, &live), "HTTP/1.1 200 OK", "the wrapper presents alice's certificate");
    // The path makes the scan's HTTP checks (BREACH) read an authenticated JSON answer.
    let uri = format!("https://{}/v1/hosts", live.addr);
    let findings = testssl(&live, "client-certificate", &["--openssl", wrapper.to_str().expect("utf8")], &uri);
    let connections = std::fs::read_to_string(&calls).unwrap_or_default().lines().filter(|l| l.contains("-connect")).count();
    assert!(connections >= 20, "testssl made {connections} s_client connections through the wrapper");
    judge("client certificate", &findings);
}

/// `openssl s_client -tls1_3 -sigalgs SIGALGS` against the coordinator: success, and the
/// whole output.
fn handshake_offering(live: &Live, sigalgs: &str) -> (bool, String) {
    let out = Command::new("timeout")
        .args(["20", "openssl", "s_client", "-tls1_3", "-sigalgs", sigalgs, "-verify_return_error", "-connect", &live.addr, "-CAfile"])
        .arg(&live.ca)
        .stdin(Stdio::null())
        .output()
        .expect("openssl s_client");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

#[test]
fn a_client_offering_only_weak_signature_schemes_is_refused_the_handshake() {
    let live = live();
    let (ok, text) = handshake_offering(&live, "ecdsa_secp256r1_sha256");
    assert!(ok && text.contains("Peer signature type: ECDSA") && text.contains("Peer signing digest: SHA256"), "{text}");
    // SHA-1, SHA-224 and PKCS#1 v1.5 signatures: what a downgrade would steer the server to.
    let (ok, text) = handshake_offering(&live, "ECDSA+SHA1:RSA+SHA1:ECDSA+SHA224:RSA+SHA224:RSA+SHA256:RSA+SHA384:RSA+SHA512");
    assert!(!ok, "the handshake completed: {text}");
    // Alert 40 read from the server: the refusal is the coordinator's, not openssl's own.
    assert!(text.contains("alert handshake failure") && text.contains("alert number 40"), "{text}");
}
