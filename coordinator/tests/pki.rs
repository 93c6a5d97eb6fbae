//! The coordinator's PKI and state directory against real files and the real `openssl`:
//! `init` and its refusals, what each certificate says (and what a CSR cannot make it say),
//! the CRL as OpenSSL and rustls read it, key file permissions, and the curl pin `init`
//! prints.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use common::{coordinator, init_state, mode, now, openssl_csr, openssl_in, openssl_ok, san_strings, sans, sh_ok, tempdir, write};
use drover_engine::identity::{Identity, Role};
use drover_engine::pki::{self, Ca, HOST_CERT_VALIDITY_SECS, PkiError};
use drover_engine::state_dir::{self, StateDir, StateDirError};
use rustls::pki_types::{CertificateDer, CertificateRevocationListDer, UnixTime};
use uuid::Uuid;
use x509_parser::prelude::{FromDer, X509Certificate};

const KEY_FILES: [&str; 3] = [state_dir::CA_KEY_FILE, state_dir::SERVER_KEY_FILE, state_dir::DIRECTOR_KEY_FILE];
const PUBLIC_FILES: [&str; 3] = [state_dir::CA_CERT_FILE, state_dir::SERVER_CERT_FILE, state_dir::DIRECTOR_PUB_FILE];

#[test]
fn init_creates_every_file_with_its_mode_and_a_second_init_touches_nothing() {
    let tmp = tempdir();
    let dir = tmp.path().join("state");
    init_state(&dir);
    assert_eq!(mode(&dir), 0o700);
    for name in KEY_FILES {
        assert_eq!(mode(&dir.join(name)), 0o600, "{name}");
    }
    for name in PUBLIC_FILES {
        assert_eq!(mode(&dir.join(name)), 0o644, "{name}");
    }
    assert!(!dir.join(state_dir::DB_FILE).exists(), "the store creates its database, not init");
    let leftovers: Vec<_> = std::fs::read_dir(&dir).expect("list").map(|e| e.expect("entry").file_name()).collect();
    assert_eq!(leftovers.len(), 6, "no temporary files left behind: {leftovers:?}");
    let director = openssl_ok(&dir, &["pkey", "-in", "director.key", "-noout", "-text"]);
    assert!(director.contains("ED25519"), "openssl reads the director key: {director}");

    let before: Vec<Vec<u8>> =
        std::fs::read_dir(&dir).expect("list").map(|e| std::fs::read(e.expect("entry").path()).expect("read")).collect();
    let again = StateDir::init(&dir, &sans(&["localhost"]), now());
    match again {
        Err(StateDirError::Exists { path }) => assert!(path.starts_with(&dir), "{path:?}"),
        other => panic!("second init must refuse, got {other:?}"),
    }
    let (code, _, stderr) = coordinator(&["init", "--state-dir", dir.to_str().expect("utf-8"), "--san", "localhost"]);
    assert_eq!(code, 73, "{stderr}");
    assert!(stderr.starts_with("drover-coordinator: ") && stderr.contains("already exists"), "{stderr}");
    let after: Vec<Vec<u8>> =
        std::fs::read_dir(&dir).expect("list").map(|e| std::fs::read(e.expect("entry").path()).expect("read")).collect();
    assert_eq!(before, after, "a refused init leaves every file as it was");
}

#[test]
fn init_refuses_a_directory_holding_only_a_database() {
    let tmp = tempdir();
    write(tmp.path(), state_dir::DB_FILE, "");
    match StateDir::init(tmp.path(), &sans(&["localhost"]), now()) {
        Err(StateDirError::Exists { path }) => assert!(path.ends_with(state_dir::DB_FILE)),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(!tmp.path().join(state_dir::CA_KEY_FILE).exists(), "nothing written");
}

#[test]
fn server_cert_verifies_with_openssl_and_names_the_sans_given() {
    let tmp = tempdir();
    let state = init_state(tmp.path());
    openssl_ok(tmp.path(), &["verify", "-CAfile", "ca.crt", "-purpose", "sslserver", "server.crt"]);
    let text = openssl_ok(tmp.path(), &["x509", "-in", "server.crt", "-noout", "-ext", "subjectAltName,extendedKeyUsage"]);
    assert!(text.contains("DNS:localhost, IP Address:127.0.0.1, DNS:coord.example.com"), "{text}");
    assert!(text.contains("TLS Web Server Authentication") && !text.contains("Client"), "{text}");
    assert_eq!(san_strings(state.server_cert_der()), ["DNS:localhost", "IP:7f000001", "DNS:coord.example.com"]);
    let ca_text = openssl_ok(tmp.path(), &["x509", "-in", "ca.crt", "-noout", "-text"]);
    assert!(ca_text.contains("CA:TRUE, pathlen:0"), "{ca_text}");
    assert!(ca_text.contains("Certificate Sign, CRL Sign"), "{ca_text}");
    assert!(ca_text.contains("Subject: CN = Drover coordinator CA"), "{ca_text}");
    let fingerprint = openssl_ok(tmp.path(), &["x509", "-in", "ca.crt", "-noout", "-fingerprint", "-sha256"]);
    assert_eq!(fingerprint.trim(), format!("sha256 Fingerprint={}", state.ca().sha256_fingerprint()));
}

#[test]
fn csr_asking_for_admin_gets_only_its_host_identity() {
    let tmp = tempdir();
    let state = init_state(tmp.path());
    let csr = openssl_csr(
        tmp.path(),
        "evil",
        "/CN=evil",
        &["-addext", "subjectAltName=URI:urn:drover:operator:admin:root", "-addext", "basicConstraints=critical,CA:TRUE"],
    );
    let host_id = Uuid::new_v4();
    let issued = state.ca().issue_host_from_csr(&csr, host_id, "gpu-017.dc1", now()).expect("issued");

    let identity = Identity::from_cert_der(&issued.der).expect("an identity");
    assert_eq!(identity, Identity::Host { host_id, hostname: "gpu-017.dc1".into() });
    assert_eq!(san_strings(&issued.der), [format!("URI:urn:drover:host:{host_id}"), "DNS:gpu-017.dc1".to_owned()]);
    let path = write(tmp.path(), "host.crt", &issued.pem);
    let text = openssl_ok(tmp.path(), &["x509", "-in", path.to_str().expect("utf-8"), "-noout", "-text"]);
    assert!(!text.contains("operator") && !text.contains("evil") && !text.contains("CA:TRUE"), "{text}");
    assert!(text.contains("Subject: CN = gpu-017.dc1") && text.contains("TLS Web Client Authentication"), "{text}");
    // The certificate carries the CSR's key: the key openssl generated matches it.
    let cert_pub = openssl_ok(tmp.path(), &["x509", "-in", "host.crt", "-noout", "-pubkey"]);
    let key_pub = openssl_ok(tmp.path(), &["pkey", "-in", "evil.key", "-pubout"]);
    assert_eq!(cert_pub, key_pub);
}

#[test]
fn a_csr_whose_signature_is_broken_is_refused() {
    let tmp = tempdir();
    let ca = Ca::generate(now()).expect("ca");
    let csr = openssl_csr(tmp.path(), "h", "/CN=evil", &[]);
    let der = pki::pem_to_der(&csr, "CERTIFICATE REQUEST").expect("pem");

    // The signed content altered after signing: the subject.
    let at = der.windows(4).position(|w| w == b"evil").expect("subject in DER");
    let mut tampered = der.clone();
    tampered[at + 2] = b'x';
    let result = ca.issue_host_from_csr(&pki::der_to_pem("CERTIFICATE REQUEST", &tampered), Uuid::new_v4(), "h1", now());
    assert!(matches!(result, Err(PkiError::CsrSignature { .. })), "{result:?}");

    // The signature itself altered: its last byte (inside the ECDSA `s` integer).
    let mut bad_sig = der.clone();
    *bad_sig.last_mut().expect("non-empty") ^= 0x01;
    let result = ca.issue_host_from_csr(&pki::der_to_pem("CERTIFICATE REQUEST", &bad_sig), Uuid::new_v4(), "h1", now());
    assert!(matches!(result, Err(PkiError::CsrSignature { .. })), "{result:?}");

    // Not a CSR at all.
    let result = ca.issue_host_from_csr(ca.cert_pem(), Uuid::new_v4(), "h1", now());
    assert!(matches!(result, Err(PkiError::NotPem { .. })), "{result:?}");
    // The untouched CSR is fine, for a valid hostname only.
    ca.issue_host_from_csr(&csr, Uuid::new_v4(), "h1", now()).expect("intact csr");
    let result = ca.issue_host_from_csr(&csr, Uuid::new_v4(), "H1/evil", now());
    assert!(matches!(result, Err(PkiError::BadHostname { .. })), "{result:?}");
}

/// A CSR for a new key made by `openssl req -newkey NEWKEY` (extra `args` after), in `dir`.
fn csr_for(dir: &std::path::Path, name: &str, newkey: &str, args: &[&str]) -> String {
    let (key, csr) = (format!("{name}.key"), format!("{name}.csr"));
    let mut all = vec!["req", "-new", "-newkey", newkey, "-nodes", "-keyout", key.as_str(), "-out", csr.as_str(), "-subj", "/CN=x"];
    all.extend_from_slice(args);
    openssl_ok(dir, &all);
    std::fs::read_to_string(dir.join(&csr)).expect("csr")
}

/// The refusal of `csr` for `purpose`, as an operator reads it.
fn refusal(csr: &str, purpose: pki::CsrPurpose) -> (PkiError, String) {
    let e = pki::check_csr(csr, purpose).expect_err("refused");
    let shown = e.to_string();
    (e, shown)
}

#[test]
fn csr_key_types_other_than_ecdsa_and_ed25519_are_refused() {
    let tmp = tempdir();
    let ca = Ca::generate(now()).expect("ca");
    let ed = csr_for(tmp.path(), "ed", "ed25519", &[]);
    ca.issue_host_from_csr(&ed, Uuid::new_v4(), "h1", now()).expect("Ed25519 is certified");
    let p384 = csr_for(tmp.path(), "p384", "ec", &["-pkeyopt", "ec_paramgen_curve:P-384"]);
    ca.issue_host_from_csr(&p384, Uuid::new_v4(), "h1", now()).expect("P-384 is certified");
    for (name, newkey, args, found) in [
        ("p521", "ec", &["-pkeyopt", "ec_paramgen_curve:P-521"][..], "ECDSA on curve P-521"),
        ("k1", "ec", &["-pkeyopt", "ec_paramgen_curve:secp256k1"][..], "ECDSA on curve secp256k1"),
        ("ed448", "ed448", &[][..], "Ed448"),
    ] {
        let csr = csr_for(tmp.path(), name, newkey, args);
        let (e, shown) = refusal(&csr, pki::CsrPurpose::Host);
        assert!(matches!(e, PkiError::UnsupportedCsrKey { purpose: pki::CsrPurpose::Host, .. }), "{e:?}");
        assert!(shown.starts_with(&format!("the CSR's key is {found}; host certificates need ECDSA P-256")), "{shown}");
    }
}

/// An RSA CSR used to be refused as "signature does not verify" (the verifier refuses RSA
/// keys under 2048 bits, and checked before the key type): an operator went looking for a
/// broken signature. It is named for what it is, whatever its size.
#[test]
fn an_rsa_csr_is_refused_as_rsa_not_as_a_bad_signature() {
    let tmp = tempdir();
    let ca = Ca::generate(now()).expect("ca");
    for bits in [1024, 2048] {
        let csr = csr_for(tmp.path(), &format!("rsa{bits}"), &format!("rsa:{bits}"), &[]);
        let (e, shown) = refusal(&csr, pki::CsrPurpose::Host);
        assert!(
            matches!(&e, PkiError::UnsupportedCsrKey { found: pki::CsrKey::Rsa { bits: b }, purpose: pki::CsrPurpose::Host } if *b == bits),
            "{e:?}"
        );
        assert_eq!(
            shown,
            format!("the CSR's key is RSA ({bits}-bit); host certificates need ECDSA P-256 (as the agent makes), ECDSA P-384 or Ed25519")
        );
        let issued = ca.issue_host_from_csr(&csr, Uuid::new_v4(), "h1", now()).expect_err("refused");
        assert_eq!(issued.to_string(), shown, "issuing refuses it as checking does");
    }
    // RSA-PSS keys too.
    let pss = csr_for(tmp.path(), "pss", "rsa-pss", &["-pkeyopt", "rsa_keygen_bits:2048"]);
    assert!(refusal(&pss, pki::CsrPurpose::Host).1.starts_with("the CSR's key is RSASSA-PSS; "));
}

/// An evidence CSR for a P-256 key used to be refused as "key type is not supported (use
/// ECDSA P-256 …)": the message recommended the very key it refused.
#[test]
fn a_p256_evidence_csr_is_refused_as_p256_not_as_an_unsupported_type() {
    let tmp = tempdir();
    let ca = Ca::generate(now()).expect("ca");
    let p256 = csr_for(tmp.path(), "p256", "ec", &["-pkeyopt", "ec_paramgen_curve:P-256"]);
    pki::check_csr(&p256, pki::CsrPurpose::Host).expect("a host key");
    let (e, shown) = refusal(&p256, pki::CsrPurpose::Evidence);
    assert!(matches!(e, PkiError::UnsupportedCsrKey { found: pki::CsrKey::EcdsaP256, purpose: pki::CsrPurpose::Evidence }), "{e:?}");
    assert_eq!(shown, "the CSR's key is ECDSA P-256; evidence keys must be Ed25519");
    let issued = ca.issue_evidence_from_csr(&p256, Uuid::new_v4(), "h1", now()).expect_err("refused");
    assert_eq!(issued.to_string(), shown);
    let ed = csr_for(tmp.path(), "ed", "ed25519", &[]);
    ca.issue_evidence_from_csr(&ed, Uuid::new_v4(), "h1", now()).expect("Ed25519 is an evidence key");
}

/// With the key accepted, what is wrong with the signature is named: one made by another key,
/// or an algorithm the verifier does not take.
#[test]
fn a_csr_signature_that_does_not_verify_names_its_key() {
    let tmp = tempdir();
    let p256 = csr_for(tmp.path(), "p256", "ec", &["-pkeyopt", "ec_paramgen_curve:P-256"]);
    // Another key's signature over a request naming this key: what a sender who does not hold
    // the key would send.
    let other = csr_for(tmp.path(), "other", "ec", &["-pkeyopt", "ec_paramgen_curve:P-256"]);
    let der = |pem: &str| pki::pem_to_der(pem, "CERTIFICATE REQUEST").expect("pem");
    let spki = |d: &[u8]| {
        let (_, csr) = x509_parser::certification_request::X509CertificationRequest::from_der(d).expect("csr");
        csr.certification_request_info.subject_pki.raw.to_vec()
    };
    let (mine, mut forged) = (der(&p256), der(&other));
    let (my_key, their_key) = (spki(&mine), spki(&forged));
    let at = forged.windows(their_key.len()).position(|w| w == their_key.as_slice()).expect("their key in their CSR");
    forged[at..at + their_key.len()].copy_from_slice(&my_key);
    let forged_pem = pki::der_to_pem("CERTIFICATE REQUEST", &forged);
    let (e, shown) = refusal(&forged_pem, pki::CsrPurpose::Host);
    assert!(matches!(e, PkiError::CsrSignature { key: pki::CsrKey::EcdsaP256, .. }), "{e:?}");
    assert_eq!(shown, "the CSR's self-signature does not verify against its own ECDSA P-256 key: it was not signed by that key");
    // ECDSA with SHA-512: a sound signature the verifier does not implement.
    let sha512 = csr_for(tmp.path(), "sha512", "ec", &["-pkeyopt", "ec_paramgen_curve:P-256", "-sha512"]);
    let (e, shown) = refusal(&sha512, pki::CsrPurpose::Host);
    assert!(matches!(e, PkiError::CsrSignatureAlgorithm { key: pki::CsrKey::EcdsaP256, .. }), "{e:?}");
    assert!(shown.contains("signature algorithm 1.2.840.10045.4.3.4 is not"), "{shown}");
}

#[test]
fn host_certs_are_valid_for_30_days() {
    let tmp = tempdir();
    let ca = Ca::generate(now()).expect("ca");
    let csr = openssl_csr(tmp.path(), "h", "/CN=h", &[]);
    let t = now();
    let issued = ca.issue_host_from_csr(&csr, Uuid::new_v4(), "h1", t).expect("issued");
    assert_eq!(HOST_CERT_VALIDITY_SECS, 30 * 86_400);
    assert_eq!(issued.not_after.secs_since(t), 30 * 86_400);
    assert_eq!(t.secs_since(issued.not_before), pki::BACKDATE_SECS as i64);
    let (_, cert) = X509Certificate::from_der(&issued.der).expect("x509");
    assert_eq!(cert.validity().not_after.timestamp(), issued.not_after.unix());
    assert_eq!(cert.validity().not_before.timestamp(), issued.not_before.unix());
    assert_eq!(hex::encode(cert.raw_serial()), issued.serial_hex);
    assert_eq!(issued.serial_hex.len(), 32);
}

#[test]
fn operator_and_host_certs_verify_with_openssl_and_name_their_identity() {
    let tmp = tempdir();
    let state = init_state(tmp.path());
    let op = state.ca().issue_operator("ci-bot", Role::Publisher, now()).expect("operator");
    assert_eq!(
        Identity::from_cert_der(&op.cert.der).expect("identity"),
        Identity::Operator { name: "ci-bot".into(), role: Role::Publisher }
    );
    pki::check_key_matches(&op.cert.der, &op.key_pem, "operator").expect("key belongs to the cert");
    write(tmp.path(), "op.crt", &op.cert.pem);
    let csr = openssl_csr(tmp.path(), "h", "/CN=h", &[]);
    let host = state.ca().issue_host_from_csr(&csr, Uuid::new_v4(), "h1", now()).expect("host");
    write(tmp.path(), "host.crt", &host.pem);
    let out = openssl_ok(tmp.path(), &["verify", "-CAfile", "ca.crt", "-purpose", "sslclient", "op.crt", "host.crt"]);
    assert_eq!(out, "op.crt: OK\nhost.crt: OK\n");
    // A client certificate is no server certificate.
    let refused = openssl_in(tmp.path(), &["verify", "-CAfile", "ca.crt", "-purpose", "sslserver", "op.crt"]);
    assert!(!refused.status.success());
    assert!(matches!(state.ca().issue_operator("a b", Role::Admin, now()), Err(PkiError::BadOperatorName { .. })));
}

#[test]
fn a_crl_lists_its_serials_for_openssl_and_rustls() {
    let tmp = tempdir();
    let state = init_state(tmp.path());
    let csr = openssl_csr(tmp.path(), "h", "/CN=h", &[]);
    let revoked = state.ca().issue_host_from_csr(&csr, Uuid::new_v4(), "h1", now()).expect("host");
    let kept = state.ca().issue_operator("alice", Role::Admin, now()).expect("operator");
    let crl = state.ca().crl(&[(revoked.serial_hex.as_str(), now())], now(), 3_600).expect("crl");
    std::fs::write(tmp.path().join("crl.der"), &crl).expect("write");

    let text = openssl_ok(tmp.path(), &["crl", "-inform", "DER", "-in", "crl.der", "-noout", "-text"]);
    assert!(text.contains(&format!("Serial Number: {}", revoked.serial_hex.to_uppercase())), "{text}");
    assert!(!text.contains(&kept.cert.serial_hex.to_uppercase()), "{text}");
    assert!(text.contains("Issuer: CN = Drover coordinator CA"), "{text}");
    openssl_ok(tmp.path(), &["crl", "-inform", "DER", "-in", "crl.der", "-CAfile", "ca.crt", "-noout"]);

    write(tmp.path(), "crl.pem", &pki::der_to_pem("X509 CRL", &crl));
    write(tmp.path(), "revoked.crt", &revoked.pem);
    write(tmp.path(), "kept.crt", &kept.cert.pem);
    let out = openssl_in(tmp.path(), &["verify", "-crl_check", "-CRLfile", "crl.pem", "-CAfile", "ca.crt", "revoked.crt"]);
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success() && said.contains("certificate revoked"), "{said}");
    openssl_ok(tmp.path(), &["verify", "-crl_check", "-CRLfile", "crl.pem", "-CAfile", "ca.crt", "kept.crt"]);

    // What the TLS server will do on every handshake.
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(state.ca().cert_der().to_vec())).expect("root");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .with_crls([CertificateRevocationListDer::from(crl)])
        .build()
        .expect("rustls accepts the CA and the CRL");
    let at = UnixTime::since_unix_epoch(std::time::Duration::from_secs(now().unix() as u64));
    verifier.verify_client_cert(&CertificateDer::from(kept.cert.der.clone()), &[], at).expect("unrevoked operator accepted");
    let err = verifier.verify_client_cert(&CertificateDer::from(revoked.der.clone()), &[], at).expect_err("revoked host refused");
    assert_eq!(err, rustls::Error::InvalidCertificate(rustls::CertificateError::Revoked));
}

#[test]
fn open_refuses_private_keys_readable_by_others_and_names_the_file() {
    let tmp = tempdir();
    init_state(tmp.path());
    StateDir::open(tmp.path()).expect("opens as made");
    for name in KEY_FILES {
        let path = tmp.path().join(name);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let err = StateDir::open(tmp.path()).expect_err("refused");
        assert!(matches!(&err, StateDirError::KeyPermissions { path: p, mode: 0o644 } if *p == path), "{err:?}");
        assert!(err.to_string().contains(name) && err.to_string().contains("chmod 600"), "{err}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    }
    // A certificate's mode is not a secret.
    std::fs::set_permissions(tmp.path().join("ca.crt"), std::fs::Permissions::from_mode(0o644)).expect("chmod");
    StateDir::open(tmp.path()).expect("opens");
}

#[test]
fn open_names_a_missing_or_mismatched_file() {
    let tmp = tempdir();
    init_state(tmp.path());
    let other = tempdir();
    init_state(other.path());

    std::fs::remove_file(tmp.path().join("director.pub")).expect("rm");
    let err = StateDir::open(tmp.path()).expect_err("refused");
    assert!(matches!(&err, StateDirError::Missing { path } if path.ends_with("director.pub")), "{err:?}");
    std::fs::copy(other.path().join("director.pub"), tmp.path().join("director.pub")).expect("cp");
    let err = StateDir::open(tmp.path()).expect_err("refused");
    assert!(matches!(&err, StateDirError::DirectorKeyMismatch { path } if path.ends_with("director.pub")), "{err:?}");

    std::fs::copy(other.path().join("server.crt"), tmp.path().join("server.crt")).expect("cp");
    let err = StateDir::open(tmp.path()).expect_err("refused");
    assert!(
        matches!(&err, StateDirError::Invalid { path, source: PkiError::NotIssuedByCa { .. } } if path.ends_with("server.crt")),
        "{err:?}"
    );
    std::fs::copy(other.path().join("ca.key"), tmp.path().join("ca.key")).expect("cp");
    let err = StateDir::open(tmp.path()).expect_err("refused");
    assert!(matches!(&err, StateDirError::Invalid { path, source: PkiError::KeyMismatch { .. } } if path.ends_with("ca.key")), "{err:?}");
}

#[test]
fn the_pin_init_prints_is_the_one_openssl_computes() {
    let tmp = tempdir();
    let dir = tmp.path().join("st");
    let (code, stdout, stderr) = coordinator(&["init", "--state-dir", dir.to_str().expect("utf-8"), "--san", "localhost", "--san", "::1"]);
    assert_eq!(code, 0, "{stderr}");
    let line = |prefix: &str| {
        stdout.lines().find_map(|l| l.strip_prefix(prefix)).unwrap_or_else(|| panic!("no {prefix:?} in {stdout}")).to_owned()
    };
    let pin = line("server key pin: ");
    let openssl = sh_ok(
        &dir,
        "openssl x509 -in server.crt -pubkey -noout | openssl pkey -pubin -outform der | openssl dgst -sha256 -binary | base64",
    );
    assert_eq!(pin, format!("sha256//{}", openssl.trim()));
    let state = StateDir::open(&dir).expect("open");
    assert_eq!(line("CA sha256 fingerprint: "), state.ca().sha256_fingerprint());
    assert_eq!(line("director key id: "), state.director_key_id().to_string());
    assert_eq!(pin, state.server_spki_pin());
}

#[test]
fn operator_cert_writes_a_credential_and_never_overwrites() {
    let tmp = tempdir();
    let st = tmp.path().join("st");
    let out = tmp.path().join("ops");
    let (st_s, out_s) = (st.to_str().expect("utf-8"), out.to_str().expect("utf-8"));
    let (code, _, stderr) = coordinator(&["operator-cert", "--state-dir", st_s, "--role", "admin", "--name", "alice", "--out", out_s]);
    assert_eq!(code, 66, "no state dir yet: {stderr}");
    assert!(stderr.contains("ca.crt"), "{stderr}");
    init_state(&st);

    let (code, stdout, stderr) = coordinator(&["operator-cert", "--state-dir", st_s, "--role", "admin", "--name", "alice", "--out", out_s]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("serial: "), "{stdout}");
    assert_eq!(mode(&out.join("alice.key")), 0o600);
    assert_eq!(mode(&out.join("alice.crt")), 0o644);
    let der = pki::pem_to_der(&std::fs::read_to_string(out.join("alice.crt")).expect("crt"), "CERTIFICATE").expect("pem");
    assert_eq!(Identity::from_cert_der(&der).expect("identity"), Identity::Operator { name: "alice".into(), role: Role::Admin });
    openssl_ok(&out, &["verify", "-CAfile", "ca.crt", "alice.crt"]);
    openssl_ok(&out, &["pkey", "-in", "alice.key", "-noout"]);
    // The coordinator's store knows the certificate, so it can be listed and revoked.
    let serial = stdout.lines().find_map(|l| l.strip_prefix("serial: ")).expect("serial line").trim().to_owned();
    let store = drover_engine::store::SqliteStore::open(st.join("coordinator.db")).expect("store");
    let record = drover_engine::store::Store::get_cert(&store, &serial).expect("store").expect("operator certificate recorded");
    assert_eq!(record.cert.kind, drover_engine::store::CertKind::Operator);

    // A second operator may share the directory (same ca.crt); the same name may not.
    let (code, _, stderr) = coordinator(&["operator-cert", "--state-dir", st_s, "--role", "viewer", "--name", "bob", "--out", out_s]);
    assert_eq!(code, 0, "{stderr}");
    let before = std::fs::read(out.join("alice.crt")).expect("read");
    let (code, _, stderr) = coordinator(&["operator-cert", "--state-dir", st_s, "--role", "viewer", "--name", "alice", "--out", out_s]);
    assert_eq!(code, 73, "{stderr}");
    assert!(stderr.starts_with("drover-coordinator: ") && stderr.contains("alice.crt"), "{stderr}");
    assert_eq!(std::fs::read(out.join("alice.crt")).expect("read"), before);

    let (code, _, stderr) = coordinator(&["operator-cert", "--state-dir", st_s, "--role", "admin", "--name", "../x", "--out", out_s]);
    assert_eq!(code, 65, "{stderr}");
    let (code, _, _) = coordinator(&["operator-cert", "--state-dir", st_s, "--role", "root", "--name", "x", "--out", out_s]);
    assert_eq!(code, 64);
    let (code, _, _) = coordinator(&["init", "--state-dir", st_s]);
    assert_eq!(code, 64, "--san is required");
    let (code, _, stderr) = coordinator(&["init", "--state-dir", tmp.path().join("new").to_str().expect("utf-8"), "--san", "*.x"]);
    assert_eq!(code, 65, "{stderr}");
}
