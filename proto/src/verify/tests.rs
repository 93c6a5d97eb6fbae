//! Unit tests of the verification rules that need the crate's internals.

use std::collections::BTreeMap;

use ed25519_dalek::SigningKey;

use super::*;
use crate::artifacts::TimestampChannel;
use crate::keys::{KeySigner, Signer as _, verifying_key_to_pem};
use crate::trust::{KeySetDoc, TrustDoc, TrustKeyDoc};

#[test]
fn stale_timestamp_is_refused_unless_report_stale_is_asked() {
    let signer = KeySigner::new(SigningKey::from_bytes(&[7; 32]));
    let key = TrustKeyDoc {
        key_id: signer.key_id().clone(),
        alg: "ed25519".to_owned(),
        public_key: verifying_key_to_pem(&signer.verifying_key()).expect("pem"),
        not_before: None,
        not_after: None,
    };
    let doc = TrustDoc { schema_version: 1, ci: KeySetDoc { threshold: 1, keys: vec![key], reject_before: None } };
    let trust = TrustRoots::from_doc(&doc).expect("trust");
    let signed_at = Time::from_unix(1_800_000_000).expect("time");
    let id = RolloutId::new("gpu", "c0ffee").expect("id");
    let channel = TimestampChannel { rollout_id: id, manifest_sha256: "0".repeat(64), freshness_window_secs: 3600, revertable: vec![] };
    let ts = TimestampDoc {
        schema_version: SCHEMA_VERSION,
        version: 5,
        signed_at,
        fleet_resolved_sha256: "0".repeat(64),
        channels: BTreeMap::from([("gpu".to_owned(), channel)]),
    };
    let bytes = canonical::to_vec_of(&ts).expect("canonical");
    let sig = serde_json::to_vec(&crate::sig::sign_bytes(&bytes, &[signer]).expect("sign")).expect("sig json");
    let stale = VerifyContext::at(signed_at.plus_secs(3601));
    assert!(matches!(verify_timestamp(&bytes, &sig, &trust, &stale), Err(VerifyError::Stale { .. })));
    assert_eq!(VerifyContext::at(signed_at).freshness, Freshness::Enforce, "enforcing is the default");
    let reported = verify_timestamp(&bytes, &sig, &trust, &stale.reporting_stale()).expect("stale but reported");
    assert_eq!(reported.doc.signed_at, signed_at);
    // Only staleness is waived: a version rollback, a bad signature still refuse.
    let floor = stale.reporting_stale().with_floor(VersionFloor::Above(5));
    assert!(matches!(verify_timestamp(&bytes, &sig, &trust, &floor), Err(VerifyError::VersionRollback { .. })));
    let mut tampered = bytes.clone();
    let at = tampered.iter().position(|b| *b == b'5').expect("a digit");
    tampered[at] = b'6';
    assert!(verify_timestamp(&tampered, &sig, &trust, &stale.reporting_stale()).is_err());
}
