//! Fuzz targets: parse-and-verify of everything Drover signs (bolero; see `fuzzing/mod.rs`
//! for how they run and how an input becomes a variant of a genuine document).
//!
//! - `release_files`: one file of a genuine signed release (an artifact or its `.sig`)
//!   replaced or edited, then the whole release verified. An artifact whose bytes differ
//!   from the genuine ones never verifies; the genuine release always does.
//! - `intent_envelope`, `task_envelope`: a director-signed envelope's wire bytes replaced or
//!   edited, parsed and verified. Whatever verifies carries exactly the genuine message
//!   (the envelope's own JSON may be re-spelt: only its `signed` part is signed).
//! - `trust_file`: `trust.json` replaced or edited: parsed and validated, or refused with a
//!   message.
//!
//! None may panic.

use crate::common;
use crate::fuzzing;

use std::sync::LazyLock;

use common::*;
use drover_proto::intent::Intent;
use drover_proto::keys::{KeySigner, Signer as _};
use drover_proto::release::{ReleaseFiles, verify_release};
use drover_proto::sig::Envelope;
use drover_proto::task::{Task, TaskKind};
use drover_proto::time::Time;
use drover_proto::trust::{KeySet, TrustRoots};
use drover_proto::verify::{HostIdentity, VerifiedManifest, VerifiedTimestamp, VerifyContext, verify_intent, verify_task};

const HOST_ID: &str = "0f0e0d0c-0b0a-4909-8807-060504030201";
const HOSTNAME: &str = "gpu-01";

/// The genuine world every input is a variant of: a release signed by CI key 1, its trust
/// roots, what a host verified from it, and an intent and a task sealed by director key 7.
struct World {
    files: ReleaseFiles,
    trust: TrustRoots,
    trust_json: Vec<u8>,
    now: Time,
    manifest: VerifiedManifest,
    timestamp: VerifiedTimestamp,
    director: KeySet,
    intent: Intent,
    intent_wire: Vec<u8>,
    task: Task,
    task_wire: Vec<u8>,
}

static WORLD: LazyLock<World> = LazyLock::new(|| {
    let ci = signer(1);
    let files = small_release(std::slice::from_ref(&ci));
    let trust_json = serde_json::to_vec(&trust_doc(1, vec![trust_key(&ci, None, None)])).expect("trust json");
    let trust = TrustRoots::from_json(&trust_json).expect("genuine trust");
    let now = t0_plus(60);
    let verified = verify_release(&files, &trust, &VerifyContext::at(now)).expect("the genuine release verifies");
    let manifest = verified.manifests["stable"].clone();
    let director_key: KeySigner = signer(7);
    let director = trust_of(&[&director_key]).ci;
    let intent = Intent {
        intent_id: "7d3c2a5e-3c1f-4b7e-9a4d-1f2e3d4c5b6a".to_owned(),
        host_id: HOST_ID.to_owned(),
        hostname: HOSTNAME.to_owned(),
        rollout_id: manifest.manifest.rollout_id.clone(),
        manifest_sha256: manifest.sha256.clone(),
        wave_index: 0,
        target_closure: manifest.manifest.host(HOSTNAME).expect("host in manifest").target_closure.clone(),
        issued_at: at(T0),
        expires_at: t0_plus(3600),
        confirm_window_secs: 120,
    };
    let task = Task {
        task_id: "c1d2e3f4-a5b6-4c7d-8e9f-0a1b2c3d4e5f".to_owned(),
        host_id: HOST_ID.to_owned(),
        job_id: Some("job-42".to_owned()),
        issued_at: at(T0),
        expires_at: t0_plus(1800),
        kind: TaskKind::Drain { timeout_secs: 600 },
    };
    let intent_wire = seal(&intent, &director_key);
    let task_wire = seal(&task, &director_key);
    assert!(director.get(director_key.key_id()).is_some(), "director trust holds the sealing key");
    World { files, trust, trust_json, now, manifest, timestamp: verified.timestamp, director, intent, intent_wire, task, task_wire }
});

/// The wire bytes of `message` sealed by `by`.
fn seal<T: serde::Serialize>(message: &T, by: &KeySigner) -> Vec<u8> {
    serde_json::to_vec(&Envelope::seal(message, std::slice::from_ref(by)).expect("seal")).expect("wire json")
}

#[test]
fn release_files() {
    let w = &*WORLD;
    let paths: Vec<String> = w.files.files.keys().cloned().collect();
    bolero::check!(name = "release_files").with_test_time(fuzzing::TEST_TIME).with_max_len(fuzzing::MAX_LEN).for_each(|input: &[u8]| {
        let Some((which, rest)) = input.split_first() else { return };
        let path = &paths[usize::from(*which) % paths.len()];
        let genuine = w.files.get(path).expect("genuine file");
        let (mode, operand) = fuzzing::split(rest);
        let doc = fuzzing::variant(genuine, mode, operand);
        let mut files = w.files.clone();
        files.files.insert(path.clone(), doc.clone());
        let result = verify_release(&files, &w.trust, &VerifyContext::at(w.now));
        if let Err(e) = &result {
            assert!(!e.to_string().is_empty() && !e.rule().is_empty());
        }
        if path.ends_with(".sig") {
            // A signature file is parsed, not canonical: a re-spelt one may still verify, but
            // the artifacts it vouches for are the genuine ones, untouched.
            return;
        }
        assert_eq!(result.is_ok(), doc == genuine, "{path}: a changed artifact verified, or the genuine one did not: {result:?}");
    });
}

/// One input of an envelope target: `open` verifies the parsed envelope and says whether
/// what it returned is the genuine message.
fn check_envelope(name: &str, genuine: &[u8], input: &[u8], open: impl Fn(&Envelope) -> Result<bool, String>) {
    let (mode, operand) = fuzzing::split(input);
    let wire = fuzzing::variant(genuine, mode, operand);
    let Ok(env) = serde_json::from_slice::<Envelope>(&wire) else { return };
    let opened = open(&env);
    match &opened {
        Ok(same) => assert!(same, "{name}: an envelope verified carrying another message than the one signed"),
        Err(message) => assert!(!message.is_empty()),
    }
    assert!(wire != genuine || opened.is_ok(), "{name}: the genuine envelope did not verify: {opened:?}");
}

#[test]
fn intent_envelope() {
    let w = &*WORLD;
    let host = HostIdentity { host_id: HOST_ID, hostname: HOSTNAME };
    bolero::check!(name = "intent_envelope").with_test_time(fuzzing::TEST_TIME).with_max_len(fuzzing::MAX_LEN).for_each(
        |input: &[u8]| {
            check_envelope("intent", &w.intent_wire, input, |env| {
                verify_intent(env, &w.director, host, &w.manifest, &w.timestamp, &VerifyContext::at(w.now))
                    .map(|intent| intent == w.intent)
                    .map_err(|e| e.to_string())
            })
        },
    );
}

#[test]
fn task_envelope() {
    let w = &*WORLD;
    bolero::check!(name = "task_envelope").with_test_time(fuzzing::TEST_TIME).with_max_len(fuzzing::MAX_LEN).for_each(|input: &[u8]| {
        check_envelope("task", &w.task_wire, input, |env| {
            verify_task(env, &w.director, HOST_ID, &VerifyContext::at(w.now)).map(|task| task == w.task).map_err(|e| e.to_string())
        })
    });
}

#[test]
fn trust_file() {
    let w = &*WORLD;
    bolero::check!(name = "trust_file").with_test_time(fuzzing::TEST_TIME).with_max_len(fuzzing::MAX_LEN).for_each(|input: &[u8]| {
        let (mode, operand) = fuzzing::split(input);
        let doc = fuzzing::variant(&w.trust_json, mode, operand);
        match TrustRoots::from_json(&doc) {
            Ok(trust) => assert!(trust.ci.threshold() >= 1, "accepted trust roots with an impossible threshold"),
            Err(e) => assert!(!e.to_string().is_empty()),
        }
    });
}
