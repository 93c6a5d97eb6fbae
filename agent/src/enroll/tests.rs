//! Unit tests of enrollment's pure checks: the pinned trust hash, the returned certificate
//! (our key, the trusted CA, this host's names), tokens and hashes.

use drover_proto::keys::{KeyId, verifying_key_from_text};
use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, PKCS_ED25519, SanType};
use time::{Duration, OffsetDateTime};

use super::*;

const HOST_ID: &str = "7f0c6a56-1d51-4bb4-9a5e-3c8f1d2f9a10";
const HOSTNAME: &str = "gpu-a-01";

/// A CA: its certificate and key.
struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
}

fn ca(name: &str) -> Ca {
    let key = KeyPair::generate().expect("ca key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    let cert = params.self_signed(&key).expect("self-signed");
    Ca { cert, key }
}

/// A client certificate for `subject_key`, issued by `ca`, naming `host_id` and `hostname`,
/// valid from `not_before` to `not_after`.
fn leaf(ca: &Ca, subject_key: &KeyPair, host_id: &str, hostname: &str, not_before: OffsetDateTime, not_after: OffsetDateTime) -> String {
    let mut params = CertificateParams::new(vec![hostname.to_owned()]).expect("params");
    params.subject_alt_names.push(SanType::URI(format!("{HOST_URI_PREFIX}{host_id}").try_into().expect("ia5")));
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, hostname);
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.not_before = not_before;
    params.not_after = not_after;
    params.signed_by(subject_key, &ca.cert, &ca.key).expect("sign").pem()
}

fn fresh_leaf(ca: &Ca, subject_key: &KeyPair) -> String {
    let now = OffsetDateTime::now_utc();
    leaf(ca, subject_key, HOST_ID, HOSTNAME, now - Duration::minutes(1), now + Duration::days(30))
}

fn director_pem() -> String {
    KeyPair::generate_for(&PKCS_ED25519).expect("ed25519").public_key_pem()
}

fn response(ca: &Ca, certificate: String) -> EnrollResponse {
    EnrollResponse {
        host_id: HOST_ID.to_owned(),
        hostname: HOSTNAME.to_owned(),
        certificate,
        ca_certificate: ca.cert.pem(),
        director_public_key: director_pem(),
        coordinator_urls: vec!["https://127.0.0.1:8443".to_owned()],
        evidence_certificate: None,
    }
}

fn check(resp: &EnrollResponse, ours: &KeyPair, trusted: &Ca) -> Result<Identity, EnrollError> {
    check_enrollment(resp, HOST_ID, &ours.public_key_der(), &[trusted.cert.der().clone()], "/etc/drover/ca.crt", UnixTime::now())
}

/// A valid trust.json with one CI key.
fn trust_json() -> Vec<u8> {
    let pem = KeyPair::generate_for(&PKCS_ED25519).expect("ed25519").public_key_pem();
    let key_id = KeyId::of(&verifying_key_from_text(&pem).expect("key"));
    serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 1,
        "ci": {"threshold": 1, "keys": [{"keyId": key_id.as_str(), "alg": "ed25519", "publicKey": pem}]}
    }))
    .expect("json")
}

#[test]
fn trust_with_the_pinned_hash_is_accepted_in_either_case() {
    let bytes = trust_json();
    let hex = hex::encode(Sha256::digest(&bytes));
    let roots = check_trust(&bytes, &hex).expect("accepted");
    assert_eq!(roots.ci.threshold(), 1);
    check_trust(&bytes, &hex.to_ascii_uppercase()).expect("case-insensitive");
}

#[test]
fn a_trust_hash_mismatch_is_refused_naming_both_hashes() {
    let bytes = trust_json();
    let actual = hex::encode(Sha256::digest(&bytes));
    let pinned = hex::encode(Sha256::digest(b"the operator's trust.json"));
    let e = check_trust(&bytes, &pinned).expect_err("refused");
    assert!(matches!(&e, EnrollError::TrustMismatch { expected, actual: a } if *expected == pinned && *a == actual), "{e:?}");
    assert_eq!(e.exit_code(), codes::DATA);
    let msg = e.to_string();
    assert!(msg.contains(&pinned) && msg.contains(&actual), "{msg}");
    // One byte more (a trailing newline) is another file.
    let mut longer = bytes.clone();
    longer.push(b'\n');
    assert!(matches!(check_trust(&longer, &actual), Err(EnrollError::TrustMismatch { .. })));
}

#[test]
fn bytes_matching_the_hash_must_still_be_valid_trust_roots() {
    let bytes = br#"{"schemaVersion":2,"ci":{"threshold":1,"keys":[]}}"#;
    let e = check_trust(bytes, &hex::encode(Sha256::digest(bytes))).expect_err("refused");
    assert!(matches!(e, EnrollError::TrustMalformed { .. }), "{e:?}");
    let e = check_trust(b"not json", &hex::encode(Sha256::digest(b"not json"))).expect_err("refused");
    assert!(matches!(e, EnrollError::TrustMalformed { .. }), "{e:?}");
}

#[test]
fn a_good_answer_is_accepted() {
    let ca = ca("drover CA");
    let ours = generate_key().expect("key");
    let id = check(&response(&ca, fresh_leaf(&ca, &ours)), &ours, &ca).expect("accepted");
    assert_eq!(id, Identity { host_id: HOST_ID.to_owned(), hostname: HOSTNAME.to_owned() });
}

#[test]
fn a_certificate_for_another_public_key_is_refused() {
    let ca = ca("drover CA");
    let ours = generate_key().expect("key");
    let theirs = generate_key().expect("key");
    let chain = client::parse_certificates("cert", fresh_leaf(&ca, &theirs).as_bytes()).expect("pem");
    let e = check_public_key(&chain[0], &ours.public_key_der()).expect_err("refused");
    assert!(matches!(e, EnrollError::ForeignKey), "{e:?}");
    let e = check(&response(&ca, fresh_leaf(&ca, &theirs)), &ours, &ca).expect_err("refused");
    assert!(matches!(e, EnrollError::ForeignKey), "{e:?}");
    assert_eq!(e.exit_code(), codes::DATA);
}

#[test]
fn a_certificate_from_another_ca_is_refused() {
    let trusted = ca("drover CA");
    let other = ca("drover CA");
    let ours = generate_key().expect("key");
    // The answer claims the trusted CA but the certificate was signed by another one.
    let e = check(&response(&trusted, fresh_leaf(&other, &ours)), &ours, &trusted).expect_err("refused");
    assert!(matches!(&e, EnrollError::BadCertificate { message } if message.contains("does not verify")), "{e:?}");
}

#[test]
fn a_returned_ca_other_than_the_trusted_one_is_refused() {
    let trusted = ca("drover CA");
    let other = ca("drover CA");
    let ours = generate_key().expect("key");
    let e = check(&response(&other, fresh_leaf(&other, &ours)), &ours, &trusted).expect_err("refused");
    assert!(matches!(&e, EnrollError::CaMismatch { ca_file } if ca_file == "/etc/drover/ca.crt"), "{e:?}");
}

#[test]
fn a_certificate_naming_another_host_is_refused() {
    let ca = ca("drover CA");
    let ours = generate_key().expect("key");
    let now = OffsetDateTime::now_utc();
    let (from, until) = (now - Duration::minutes(1), now + Duration::days(30));
    let other_id = leaf(&ca, &ours, "0b7e8f3e-0000-4000-8000-000000000001", HOSTNAME, from, until);
    let e = check(&response(&ca, other_id), &ours, &ca).expect_err("refused");
    assert!(matches!(&e, EnrollError::BadCertificate { message } if message.contains("host ids")), "{e:?}");
    let other_name = leaf(&ca, &ours, HOST_ID, "gpu-b-07", from, until);
    let e = check(&response(&ca, other_name), &ours, &ca).expect_err("refused");
    assert!(matches!(&e, EnrollError::BadCertificate { message } if message.contains("CN")), "{e:?}");
}

#[test]
fn a_lagging_host_clock_is_tolerated_but_an_expired_certificate_is_not() {
    let ca = ca("drover CA");
    let ours = generate_key().expect("key");
    let now = OffsetDateTime::now_utc();
    let future = leaf(&ca, &ours, HOST_ID, HOSTNAME, now + Duration::minutes(5), now + Duration::days(30));
    check(&response(&ca, future), &ours, &ca).expect("issued 5 minutes ahead of this host's clock");
    let expired = leaf(&ca, &ours, HOST_ID, HOSTNAME, now - Duration::days(31), now - Duration::days(1));
    let e = check(&response(&ca, expired), &ours, &ca).expect_err("refused");
    assert!(matches!(e, EnrollError::BadCertificate { .. }), "{e:?}");
}

#[test]
fn bad_answer_fields_are_refused() {
    let ca = ca("drover CA");
    let ours = generate_key().expect("key");
    let good = response(&ca, fresh_leaf(&ca, &ours));
    for edit in [
        (|r: &mut EnrollResponse| r.host_id = "not-a-uuid".to_owned()) as fn(&mut EnrollResponse),
        |r| r.host_id = HOST_ID.to_ascii_uppercase(),
        |r| r.host_id = "0b7e8f3e-0000-4000-8000-000000000001".to_owned(),
        |r| r.hostname = "Bad_Host".to_owned(),
        |r| r.director_public_key = "junk".to_owned(),
        |r| r.ca_certificate = "junk".to_owned(),
    ] {
        let mut r = good.clone();
        edit(&mut r);
        let e = check(&r, &ours, &ca).expect_err("refused");
        assert!(matches!(e, EnrollError::BadResponse { .. }), "{e:?}");
    }
    let mut r = good.clone();
    r.certificate = "junk".to_owned();
    assert!(matches!(check(&r, &ours, &ca), Err(EnrollError::BadCertificate { .. })));
}

#[test]
fn the_csr_carries_our_public_key_and_the_fixed_common_name() {
    let key = generate_key().expect("key");
    let csr = build_csr(&key).expect("csr");
    let parsed = rcgen::CertificateSigningRequestParams::from_pem(&csr).expect("parses");
    assert_eq!(rcgen::PublicKeyData::der_bytes(&parsed.public_key), key.public_key_raw());
    assert!(key.serialize_pem().starts_with("-----BEGIN PRIVATE KEY-----"), "PKCS#8");
    let cn = parsed.params.distinguished_name.get(&DnType::CommonName).expect("cn");
    assert_eq!(cn, &rcgen::DnValue::Utf8String(CSR_COMMON_NAME.to_owned()));
}

#[test]
fn tokens_are_trimmed_validated_and_never_shown() {
    let t = parse_token("stdin", b"abc.DEF-123_x\n").expect("token");
    assert_eq!(t.expose(), "abc.DEF-123_x");
    assert_eq!(format!("{t} {t:?}"), "<redacted> Secret(<redacted>)");
    for bad in [&b""[..], b"\n", b"two tokens", b"tab\there", b"\xff\xfe", &[b'a'; 1025]] {
        let e = parse_token("stdin", bad).expect_err("refused");
        assert_eq!(e.exit_code(), codes::DATA);
    }
    let e = parse_token("/run/token", b"secret-value with-space").expect_err("refused");
    assert!(!e.to_string().contains("secret-value") && e.to_string().contains("/run/token"), "{e}");
    let tmp = tempfile::tempdir().expect("tempdir");
    let e = read_token(&TokenSource::File(tmp.path().join("absent"))).expect_err("missing");
    assert_eq!(e.exit_code(), codes::NO_INPUT);
    std::fs::write(tmp.path().join("token"), "tok-1\n").expect("write");
    assert_eq!(read_token(&TokenSource::File(tmp.path().join("token"))).expect("read").expose(), "tok-1");
}

#[test]
fn host_ids_must_be_uuids() {
    assert_eq!(parse_host_id(&HOST_ID.to_ascii_uppercase()).expect("uuid"), HOST_ID);
    for bad in ["", "gpu-a-01", "7f0c6a56-1d51-4bb4-9a5e"] {
        assert_eq!(parse_host_id(bad).expect_err("refused").exit_code(), codes::USAGE);
    }
}

#[test]
fn trust_hashes_must_be_64_hex_digits() {
    let h = "AB".repeat(32);
    assert_eq!(parse_sha256_hex(&h).expect("hex"), "ab".repeat(32));
    for bad in ["", "abc", &"g".repeat(64), &"a".repeat(63), &"a".repeat(65)] {
        let e = parse_sha256_hex(bad).expect_err("refused");
        assert_eq!(e.exit_code(), codes::USAGE);
    }
}

#[tokio::test]
async fn an_enrolled_state_dir_is_refused_before_any_network_traffic() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let state = StateDir::open(&tmp.path().join("state")).expect("state");
    state.write_key("K").expect("key");
    state.write_cert("C").expect("cert");
    state.write_identity(&Identity { host_id: HOST_ID.to_owned(), hostname: HOSTNAME.to_owned() }).expect("identity");
    // Nothing listens on port 1; reaching the network would fail differently.
    let text = format!(
        "coordinator_urls = [\"https://127.0.0.1:1\"]\nstate_dir = {:?}\nca_file = {:?}\n",
        state.path().display().to_string(),
        tmp.path().join("absent-ca.crt").display().to_string()
    );
    let config = Config::parse(&tmp.path().join("agent.toml"), &text).expect("config");
    let e = enroll(&config, HOST_ID, Secret::new("t"), &"a".repeat(64)).await.expect_err("refused");
    assert!(matches!(e, EnrollError::AlreadyEnrolled { .. }), "{e:?}");
    assert_eq!(e.exit_code(), codes::CANT_CREATE);
    assert_eq!(std::fs::read(state.file(crate::state::KEY)).expect("key kept"), b"K");
}
