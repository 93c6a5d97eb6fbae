//! Per-host proofs (`docs/manifest-proofs.md`): a host's entry proven under its rollout's
//! CI-signed Merkle root instead of the whole manifest. Each test is an attack on the proof
//! path, named after it, and asserts the rule that refuses it; the signed root is held to the
//! manifest's own rules (threshold, rejectBefore, rollout id, the fresh timestamp).

use crate::common;

use common::*;
use drover_proto::artifacts::{HostSetEntry, ManifestRoot};
use drover_proto::intent::Intent;
use drover_proto::keys::KeySigner;
use drover_proto::merkle::{AbsenceProof, EntryProof, ProofError, Tree, leaf_hash, node_hash, verify_inclusion};
use drover_proto::names::RolloutId;
use drover_proto::release::{ReleaseFiles, TIMESTAMP, root_path, sig_path, verify_release};
use drover_proto::sig::{Envelope, sign_bytes};
use drover_proto::trust::KeySet;
use drover_proto::verify::{
    HostIdentity, ManifestAnchors, VerifiedRoot, VerifiedTimestamp, VerifyContext, VerifyError, verify_intent_at, verify_place, verify_root,
};
use serde_json::json;

const HOST_ID: &str = "5b0f2c7e-4d4e-4f51-9a36-0d6c1f4f3a10";

fn director() -> KeySigner {
    signer(50)
}

/// Eleven hosts `gpu-01`…`gpu-11` (a tree of uneven shape), `gpu-01` a canary in wave 0,
/// each with a closure named after `generation`.
fn fleet_release(commit: &str, generation: &str, version: u64, previous: Option<&ReleaseFiles>) -> ReleaseFiles {
    let mut spec = small_spec_json();
    let hosts = spec["hosts"].as_object_mut().expect("hosts");
    hosts.clear();
    for i in 1..=11 {
        let name = format!("gpu-{i:02}");
        let mut h = json!({ "system": "x86_64-linux", "channel": "stable",
            "closure": format!("/nix/store/{}-nixos-system-{name}-{generation}", "a".repeat(32)) });
        if i == 1 {
            h["tags"] = json!(["canary"]);
        }
        hosts.insert(name, h);
    }
    let previous = previous.map(timestamp_doc);
    release(&spec_from(&spec), &params(commit, t0_plus(version * 10), version, previous), &[signer(1)])
}

struct Served {
    files: ReleaseFiles,
    id: RolloutId,
    entries: Vec<HostSetEntry>,
    tree: Tree,
}

fn served(files: ReleaseFiles) -> Served {
    let verified = verify_release(&files, &trust_of(&[&signer(1)]), &VerifyContext::at(t0_plus(60))).expect("release");
    let m = verified.manifests["stable"].manifest.clone();
    let tree = Tree::from_entries(&m.host_set).expect("tree");
    Served { id: m.rollout_id.clone(), entries: m.host_set, tree, files }
}

impl Served {
    fn proof(&self, hostname: &str) -> EntryProof {
        let i = self.entries.iter().position(|e| e.hostname == hostname).expect("member");
        EntryProof::of(&self.tree, &self.entries, i).expect("proof")
    }

    fn root_bytes(&self) -> (&[u8], &[u8]) {
        let p = root_path(&self.id);
        (self.files.get(&p).expect("root"), self.files.get(&sig_path(&p)).expect("root sig"))
    }

    fn timestamp(&self) -> VerifiedTimestamp {
        verified_timestamp(&self.files, &trust_of(&[&signer(1)]), t0_plus(60))
    }

    fn root(&self, ts: &VerifiedTimestamp) -> VerifiedRoot {
        let (bytes, sig) = self.root_bytes();
        let anchors = ManifestAnchors { advertised_id: Some(&self.id), timestamp: ts, fleet: None };
        verify_root(bytes, sig, &trust_of(&[&signer(1)]), &VerifyContext::at(t0_plus(60)), anchors).expect("root")
    }

    fn intent_for(&self, hostname: &str) -> Intent {
        let e = self.entries.iter().find(|e| e.hostname == hostname).expect("member");
        let root: ManifestRoot = serde_json::from_slice(self.root_bytes().0).expect("root parses");
        Intent {
            intent_id: "0d9a4c4e-2f7b-4e0c-8d53-8e3f0b6a7c21".to_owned(),
            host_id: HOST_ID.to_owned(),
            hostname: hostname.to_owned(),
            rollout_id: self.id.clone(),
            manifest_sha256: root.manifest_sha256,
            wave_index: e.wave_index,
            target_closure: e.target_closure.clone(),
            issued_at: t0_plus(30),
            expires_at: t0_plus(900),
            confirm_window_secs: 300,
        }
    }
}

fn me(hostname: &str) -> HostIdentity<'_> {
    HostIdentity { host_id: HOST_ID, hostname }
}

fn seal(intent: &Intent) -> Envelope {
    Envelope::seal(intent, &[director()]).expect("seal")
}

fn directors() -> KeySet {
    KeySet::any_of([drover_proto::keys::Signer::verifying_key(&director())])
}

#[test]
fn every_hosts_own_proof_admits_its_intent() {
    let s = served(fleet_release("c0ffee1", "g1", 1, None));
    let ts = s.timestamp();
    let root = s.root(&ts);
    assert_eq!(root.root.tree_size, 11);
    for e in &s.entries {
        let place = verify_place(&root, &s.proof(&e.hostname), &e.hostname).unwrap_or_else(|err| panic!("{}: {err}", e.hostname));
        let intent = verify_intent_at(
            &seal(&s.intent_for(&e.hostname)),
            &directors(),
            me(&e.hostname),
            &place,
            &ts,
            &VerifyContext::at(t0_plus(60)),
        )
        .unwrap_or_else(|err| panic!("{}: {err}", e.hostname));
        assert_eq!(intent.target_closure, e.target_closure);
    }
}

#[test]
fn proof_for_another_host_is_refused() {
    let s = served(fleet_release("c0ffee1", "g1", 1, None));
    let root = s.root(&s.timestamp());
    // gpu-07's genuine proof, served to gpu-03: valid under the root, but not gpu-03's entry.
    let err = refused!(verify_place(&root, &s.proof("gpu-07"), "gpu-03"), VerifyError::WrongHost { .. });
    assert!(err.to_string().contains("gpu-07"), "{err}");
}

#[test]
fn proof_against_an_older_root_is_refused() {
    let old = served(fleet_release("c0ffee1", "g1", 1, None));
    let new = served(fleet_release("c0ffee2", "g2", 2, Some(&old.files)));
    let ts = new.timestamp();
    let root = new.root(&ts);
    // The older tree's path for gpu-04, with its older entry, against the current root.
    let err = refused!(verify_place(&root, &old.proof("gpu-04"), "gpu-04"), VerifyError::ProofInvalid { .. });
    assert!(matches!(&err, VerifyError::ProofInvalid { source, .. } if matches!(**source, ProofError::RootDiffers { .. })), "{err:?}");
    // The older root itself, offered under the current rollout's id.
    let (bytes, sig) = old.root_bytes();
    let anchors = ManifestAnchors { advertised_id: Some(&new.id), timestamp: &ts, fleet: None };
    refused!(
        verify_root(bytes, sig, &trust_of(&[&signer(1)]), &VerifyContext::at(t0_plus(60)), anchors),
        VerifyError::RolloutIdMismatch { .. }
    );
    // Under its own id it is the revertable rollout the timestamp lists; an intent for the
    // current rollout still cannot be admitted against it.
    let old_root = old.root(&ts);
    let place = verify_place(&old_root, &old.proof("gpu-04"), "gpu-04").expect("the old proof holds under the old root");
    refused!(
        verify_intent_at(&seal(&new.intent_for("gpu-04")), &directors(), me("gpu-04"), &place, &ts, &VerifyContext::at(t0_plus(60))),
        VerifyError::RolloutIdMismatch { .. }
    );
}

#[test]
fn leaf_moved_to_another_wave_is_refused() {
    let s = served(fleet_release("c0ffee1", "g1", 1, None));
    let ts = s.timestamp();
    let root = s.root(&ts);
    // gpu-01 is the canary (wave 0); a coordinator with the director key moves gpu-05 there.
    let mut proof = s.proof("gpu-05");
    assert_eq!(proof.entry.wave_index, 1);
    proof.entry.wave_index = 0;
    refused!(verify_place(&root, &proof, "gpu-05"), VerifyError::ProofInvalid { .. });
    // And without touching the leaf, an intent claiming the other wave disagrees with it.
    let place = verify_place(&root, &s.proof("gpu-05"), "gpu-05").expect("genuine");
    let mut moved = s.intent_for("gpu-05");
    moved.wave_index = 0;
    refused!(
        verify_intent_at(&seal(&moved), &directors(), me("gpu-05"), &place, &ts, &VerifyContext::at(t0_plus(60))),
        VerifyError::WaveMismatch { .. }
    );
}

#[test]
fn truncated_or_extended_proof_is_refused() {
    let s = served(fleet_release("c0ffee1", "g1", 1, None));
    let root = s.root(&s.timestamp());
    for e in &s.entries {
        let genuine = s.proof(&e.hostname);
        let mut short = genuine.clone();
        short.path.pop();
        let err = refused!(verify_place(&root, &short, &e.hostname), VerifyError::ProofInvalid { .. });
        assert!(matches!(&err, VerifyError::ProofInvalid { source, .. } if matches!(**source, ProofError::PathTooShort { .. })), "{err:?}");
        let mut long = genuine.clone();
        long.path.push(long.path[0].clone());
        refused!(verify_place(&root, &long, &e.hostname), VerifyError::ProofInvalid { .. });
        let mut moved_index = genuine.clone();
        moved_index.leaf_index = (genuine.leaf_index + 1) % 11;
        refused!(verify_place(&root, &moved_index, &e.hostname), VerifyError::ProofInvalid { .. });
    }
}

#[test]
fn second_preimage_with_an_interior_node_as_a_leaf_is_refused() {
    let s = served(fleet_release("c0ffee1", "g1", 1, None));
    let root = s.root(&s.timestamp());
    // The node over leaves 0 and 1 is H(0x01 ‖ l0 ‖ l1). Offered as a leaf, the 64 bytes
    // l0 ‖ l1 hash as H(0x00 ‖ l0 ‖ l1): another value, so the rest of leaf 0's path (from
    // the level above) does not reach the root.
    let leaves: Vec<_> = s.entries.iter().map(|e| leaf_hash(&drover_proto::merkle::entry_leaf(e).expect("leaf"))).collect();
    let mut forged = leaves[0].to_vec();
    forged.extend_from_slice(&leaves[1]);
    let path = s.tree.audit_path(0).expect("path");
    assert_eq!(node_hash(&leaves[0], &leaves[1]), Tree::from_leaf_hashes(leaves[..2].to_vec()).root());
    let upper = &path[1..];
    assert!(verify_inclusion(&leaf_hash(&forged), 0, 6, upper, root.hash()).is_err(), "as a leaf of a half-size tree");
    assert!(verify_inclusion(&leaf_hash(&forged), 0, 11, upper, root.hash()).is_err(), "in the signed size");
    // The node's own hash, passed off as a leaf hash at the signed size, needs one hash fewer
    // than leaf 0's path: the exact length rule refuses it before any hashing.
    assert_eq!(
        verify_inclusion(&node_hash(&leaves[0], &leaves[1]), 0, 11, upper, root.hash()),
        Err(ProofError::PathTooShort { index: 0, size: 11 })
    );
    // And through the typed path, a leaf is a host-set entry: 64 raw bytes are no entry.
    assert!(serde_json::from_slice::<HostSetEntry>(&forged).is_err());
}

#[test]
fn root_signed_by_an_unknown_key_is_refused() {
    let s = served(fleet_release("c0ffee1", "g1", 1, None));
    let ts = s.timestamp();
    let (bytes, _) = s.root_bytes();
    let forged_sig = serde_json::to_vec(&sign_bytes(bytes, &[signer(9)]).expect("sign")).expect("sig");
    let anchors = ManifestAnchors { advertised_id: Some(&s.id), timestamp: &ts, fleet: None };
    refused!(
        verify_root(bytes, &forged_sig, &trust_of(&[&signer(1)]), &VerifyContext::at(t0_plus(60)), anchors),
        VerifyError::UnknownKey { .. }
    );
}

#[test]
fn root_below_the_threshold_or_before_reject_before_is_refused() {
    let s = served(fleet_release("c0ffee1", "g1", 1, None));
    let ts = s.timestamp();
    let (bytes, sig) = s.root_bytes();
    let anchors = ManifestAnchors { advertised_id: Some(&s.id), timestamp: &ts, fleet: None };
    let two = trust_from(&trust_doc(2, vec![trust_key(&signer(1), None, None), trust_key(&signer(2), None, None)]));
    refused!(verify_root(bytes, sig, &two, &VerifyContext::at(t0_plus(60)), anchors), VerifyError::BelowThreshold { .. });
    let mut doc = trust_doc(1, vec![trust_key(&signer(1), None, None)]);
    doc.ci.reject_before = Some(t0_plus(30));
    refused!(verify_root(bytes, sig, &trust_from(&doc), &VerifyContext::at(t0_plus(60)), anchors), VerifyError::RejectedBefore { .. });
}

#[test]
fn root_for_a_stale_or_unlisted_timestamp_is_refused() {
    let old = served(fleet_release("c0ffee1", "g1", 1, None));
    // A timestamp that does not list the root's manifest: the older rollout's root against a
    // release that never carried it.
    let other = served(fleet_release("c0ffee3", "g3", 1, None));
    let ts = other.timestamp();
    let (bytes, sig) = old.root_bytes();
    let anchors = ManifestAnchors { advertised_id: Some(&old.id), timestamp: &ts, fleet: None };
    refused!(
        verify_root(bytes, sig, &trust_of(&[&signer(1)]), &VerifyContext::at(t0_plus(60)), anchors),
        VerifyError::ManifestNotInTimestamp { .. }
    );
    // Freshness lives in the timestamp, which the agent verifies first (window 1 day).
    let files = &old.files;
    refused!(
        drover_proto::verify::verify_timestamp(
            files.get(TIMESTAMP).expect("ts"),
            files.get(&sig_path(TIMESTAMP)).expect("sig"),
            &trust_of(&[&signer(1)]),
            &VerifyContext::at(t0_plus(86_400 + 60)),
        ),
        VerifyError::Stale { .. }
    );
}

#[test]
fn root_that_is_not_its_manifests_projection_is_refused_in_a_release() {
    // CI's key signs a root whose rootHash is not the manifest's (a buggy or subverted
    // producer): the release does not verify, so no coordinator serves it.
    let mut s = served(fleet_release("c0ffee1", "g1", 1, None));
    let path = root_path(&s.id);
    let mut root: ManifestRoot = serde_json::from_slice(s.files.get(&path).expect("root")).expect("parses");
    root.root_hash = hex::encode(leaf_hash(b"something else"));
    let bytes = drover_proto::canonical::to_vec_of(&root).expect("canonical");
    let sig = serde_json::to_vec(&sign_bytes(&bytes, &[signer(1)]).expect("sign")).expect("sig");
    s.files.files.insert(path.clone(), bytes);
    s.files.files.insert(sig_path(&path), sig);
    refused!(verify_release(&s.files, &trust_of(&[&signer(1)]), &VerifyContext::at(t0_plus(60))), VerifyError::RootMismatch { .. });
}

#[test]
fn a_non_member_is_proven_absent_and_cannot_be_proven_present() {
    let s = served(fleet_release("c0ffee1", "g1", 1, None));
    let root = s.root(&s.timestamp());
    for name in ["gpu-00", "gpu-05a", "gpu-99"] {
        let proof = AbsenceProof::of(&s.tree, &s.entries, name).expect("absent");
        proof.verify(name, root.root.tree_size, root.hash()).unwrap_or_else(|e| panic!("{name}: {e}"));
        // Nor can a neighbour's genuine proof be relabelled as its own.
        let mut stolen = proof.left.or(proof.right).expect("a neighbour");
        stolen.entry.hostname = name.to_owned();
        refused!(verify_place(&root, &stolen, name), VerifyError::ProofInvalid { .. });
    }
}
