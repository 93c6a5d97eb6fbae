//! Conformance checks for releases, manifests, rollouts and per-host rollout state.

use drover_proto::names::RolloutId;
use drover_proto::release::ReleaseFiles;
use drover_proto::states::{HostRolloutState, RolloutState};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::{Factory, all_events, host, t};
use crate::store::*;

fn rid(s: &str) -> RolloutId {
    RolloutId::parse(s).expect("valid rollout id")
}

fn files(entries: &[(&str, &[u8])]) -> ReleaseFiles {
    ReleaseFiles { files: entries.iter().map(|(p, b)| (p.to_string(), b.to_vec())).collect() }
}

/// A release with one manifest for `id` (bytes `manifest`, signature `sig`).
fn release_with(id: &str, manifest: &[u8], sig: &[u8]) -> ReleaseFiles {
    let path = format!("rollouts/{id}.json");
    let sig_path = format!("{path}.sig");
    files(&[
        ("fleet.resolved.json", b"{}"),
        ("fleet.resolved.json.sig", b"{\"signatures\":[]}"),
        ("timestamp.json", b"{\"version\":1}"),
        ("timestamp.json.sig", b"{\"signatures\":[]}"),
        (&path, manifest),
        (&sig_path, sig),
    ])
}

fn sha(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Release versions strictly increase; a refused release writes nothing.
pub fn release_version_monotonic(make: Factory<'_>) {
    let s = make();
    assert_eq!(s.latest_release().unwrap(), None);
    let f = files(&[("timestamp.json", b"{}")]);
    s.put_release(5, t(5), &f).unwrap();
    for (version, highest) in [(5, 5), (3, 5), (0, 5)] {
        match s.put_release(version, t(6), &f) {
            Err(e @ StoreError::VersionNotIncreasing { .. }) => {
                assert_eq!(e.kind(), ErrorKind::Conflict);
                assert!(matches!(e, StoreError::VersionNotIncreasing { version: v, highest: h } if v == version && h == highest));
            }
            other => panic!("version {version} after 5 accepted: {other:?}"),
        }
    }
    assert_eq!(s.get_release(3).unwrap(), None);
    s.put_release(6, t(6), &f).unwrap();
    assert_eq!(s.latest_release().unwrap().map(|r| r.version), Some(6));
    let listed: Vec<u64> = s.list_releases().unwrap().into_iter().map(|r| r.version).collect();
    assert_eq!(listed, vec![6, 5]);
}

/// Release files come back byte-for-byte: binary, empty, trailing whitespace, any path.
pub fn release_files_byte_exact(make: Factory<'_>) {
    let s = make();
    let all_bytes: Vec<u8> = (0..=255u8).rev().collect();
    let f = files(&[
        ("fleet.resolved.json", b"{\"a\":1}\n  \n"),
        ("timestamp.json", b""),
        ("timestamp.json.sig", &all_bytes),
        ("notes/\u{e9}t\u{e9}.txt", b"\xff\xfe\x00\x01 not utf-8 \r\n"),
    ]);
    s.put_release(1, t(100), &f).unwrap();
    let got = s.get_release(1).unwrap().expect("stored");
    assert_eq!((got.version, got.signed_at), (1, t(100)));
    assert_eq!(got.files, f, "release bytes changed");
    assert_eq!(s.latest_release().unwrap().map(|r| r.files), Some(f.clone()));
    let summary = &s.list_releases().unwrap()[0];
    assert_eq!(summary.paths, f.files.keys().cloned().collect::<Vec<_>>());
    assert_eq!(s.get_release(2).unwrap(), None);
}

/// A manifest keeps its bytes under its id: other bytes are refused (with the whole release);
/// the same bytes with a newer signature file are accepted and the signature served.
pub fn manifest_bytes_immutable(make: Factory<'_>) {
    let s = make();
    let id = rid("prod@abc123");
    let bytes = b"{\"rolloutId\":\"prod@abc123\"}";
    s.put_release(1, t(1), &release_with("prod@abc123", bytes, b"sig-1")).unwrap();
    let m = s.get_manifest(&id).unwrap().expect("manifest stored");
    assert_eq!((m.bytes.as_slice(), m.sig.as_slice(), m.first_version), (&bytes[..], &b"sig-1"[..], 1));
    assert_eq!(m.sha256, sha(bytes));
    assert_eq!(m.rollout_id, id);

    let tampered = s.put_release(2, t(2), &release_with("prod@abc123", b"{\"rolloutId\":\"prod@abc123\" }", b"sig-1"));
    match tampered {
        Err(StoreError::ManifestBytesDiffer { rollout_id }) => assert_eq!(rollout_id, "prod@abc123"),
        other => panic!("manifest bytes changed under their id: {other:?}"),
    }
    assert_eq!(s.latest_release().unwrap().map(|r| r.version), Some(1), "the refused release was stored");
    assert_eq!(s.get_manifest(&id).unwrap().map(|m| m.bytes), Some(bytes.to_vec()));

    s.put_release(2, t(2), &release_with("prod@abc123", bytes, b"sig-2")).unwrap();
    let m = s.get_manifest(&id).unwrap().unwrap();
    assert_eq!((m.bytes.as_slice(), m.sig.as_slice(), m.first_version), (&bytes[..], &b"sig-2"[..], 1));
    assert_eq!(s.get_manifest(&rid("prod@other")).unwrap(), None);
}

/// A manifest without its signature file is refused and nothing is stored.
pub fn manifest_without_signature_refused(make: Factory<'_>) {
    let s = make();
    let f = files(&[("timestamp.json", b"{}"), ("rollouts/prod@a.json", b"{}")]);
    assert!(matches!(s.put_release(1, t(1), &f), Err(StoreError::Invalid { .. })));
    assert_eq!(s.latest_release().unwrap(), None);
    assert_eq!(s.get_manifest(&rid("prod@a")).unwrap(), None);
    let bad_id = files(&[("rollouts/no-at-sign.json", b"{}"), ("rollouts/no-at-sign.json.sig", b"{}")]);
    assert!(matches!(s.put_release(1, t(1), &bad_id), Err(StoreError::Invalid { .. })));
    assert_eq!(s.latest_release().unwrap(), None);
}

/// Opening a rollout twice with the same manifest is a no-op; another manifest conflicts.
pub fn rollout_open_idempotent(make: Factory<'_>) {
    let s = make();
    let id = rid("prod@c1");
    let new = NewRollout { rollout_id: id.clone(), state: RolloutState::Opening, manifest_sha256: sha(b"m1"), opened_at: t(10) };
    let opened = s.open_rollout(&new).unwrap();
    assert_eq!((opened.channel.as_str(), opened.state, opened.opened_at, opened.updated_at), ("prod", RolloutState::Opening, t(10), t(10)));
    assert_eq!(s.open_rollout(&NewRollout { opened_at: t(99), ..new.clone() }).unwrap(), opened);
    let other = s.open_rollout(&NewRollout { manifest_sha256: sha(b"m2"), ..new.clone() });
    assert!(matches!(other, Err(StoreError::Conflict { .. })), "{other:?}");
    assert!(matches!(s.open_rollout(&NewRollout { manifest_sha256: "xyz".into(), ..new.clone() }), Err(StoreError::Invalid { .. })));
    s.open_rollout(&NewRollout { rollout_id: rid("canary@c1"), opened_at: t(5), ..new.clone() }).unwrap();
    assert_eq!(s.get_rollout(&id).unwrap(), Some(opened));
    let all: Vec<String> = s.list_rollouts(&RolloutFilter::default()).unwrap().into_iter().map(|r| r.rollout_id.to_string()).collect();
    assert_eq!(all, vec!["canary@c1", "prod@c1"], "ordered by opening time");
    let prod = s.list_rollouts(&RolloutFilter { channel: Some("prod".into()), ..Default::default() }).unwrap();
    assert_eq!(prod.len(), 1);
    let opened_events = all_events(&*s).into_iter().filter(|e| e.event.kind == "rollout.opened").count();
    assert_eq!(opened_events, 2, "one event per rollout, none for the repeat");
}

/// Rollout state moves only along legal transitions from the state the caller saw.
pub fn rollout_state_cas_and_legality(make: Factory<'_>) {
    let s = make();
    let id = rid("prod@c1");
    s.open_rollout(&NewRollout { rollout_id: id.clone(), state: RolloutState::Opening, manifest_sha256: sha(b"m"), opened_at: t(0) })
        .unwrap();
    let r = s.set_rollout_state(&id, RolloutState::Opening, RolloutState::Active, "gate passed", t(5)).unwrap();
    assert_eq!((r.state, r.updated_at), (RolloutState::Active, t(5)));
    let stale = s.set_rollout_state(&id, RolloutState::Opening, RolloutState::Failed, "late", t(6));
    assert!(matches!(stale, Err(StoreError::StaleState { .. })), "{stale:?}");
    let illegal = s.set_rollout_state(&id, RolloutState::Active, RolloutState::Converged, "skip", t(6));
    assert!(matches!(illegal, Err(StoreError::IllegalTransition { .. })), "{illegal:?}");
    let unknown = s.set_rollout_state(&rid("prod@nope"), RolloutState::Opening, RolloutState::Active, "x", t(6));
    assert!(matches!(unknown, Err(StoreError::NotFound { .. })), "{unknown:?}");
    s.set_rollout_state(&id, RolloutState::Active, RolloutState::Halted, "health gate", t(7)).unwrap();
    let filter = EventFilter { rollout_id: Some(id.clone()), kind: Some("rollout.transition".into()), limit: 10, ..Default::default() };
    let events = s.list_events(&filter).unwrap();
    let reasons: Vec<_> = events.iter().map(|e| e.event.message.as_str()).collect();
    assert_eq!(reasons, vec!["gate passed", "health gate"]);
    let halted = s.list_rollouts(&RolloutFilter { state: Some(RolloutState::Halted), ..Default::default() }).unwrap();
    assert_eq!(halted.len(), 1);
}

/// Per-host rollout state: created once, then compare-and-set along legal transitions.
pub fn host_rollout_state_cas_and_list(make: Factory<'_>) {
    let s = make();
    let id = rid("prod@c1");
    s.open_rollout(&NewRollout { rollout_id: id.clone(), state: RolloutState::Active, manifest_sha256: sha(b"m"), opened_at: t(0) })
        .unwrap();
    let a = host(&*s, "gpu-a");
    let b = host(&*s, "gpu-b");
    let row = |h: Uuid, state, wave, at| HostRollout { rollout_id: id.clone(), host_id: h, state, wave_index: wave, updated_at: t(at) };
    s.set_host_rollout(&row(a.id, HostRolloutState::Pending, 1, 1), None, "planned").unwrap();
    s.set_host_rollout(&row(b.id, HostRolloutState::Pending, 0, 1), None, "planned").unwrap();
    let dup = s.set_host_rollout(&row(a.id, HostRolloutState::Pending, 1, 2), None, "again");
    assert!(matches!(dup, Err(StoreError::Conflict { .. })), "{dup:?}");
    s.set_host_rollout(&row(b.id, HostRolloutState::Activating, 0, 3), Some(HostRolloutState::Pending), "dispatched").unwrap();
    let stale = s.set_host_rollout(&row(b.id, HostRolloutState::Skipped, 0, 4), Some(HostRolloutState::Pending), "offline");
    assert!(matches!(stale, Err(StoreError::StaleState { .. })), "{stale:?}");
    let illegal = s.set_host_rollout(&row(a.id, HostRolloutState::Converged, 1, 4), Some(HostRolloutState::Pending), "skip");
    assert!(matches!(illegal, Err(StoreError::IllegalTransition { .. })), "{illegal:?}");
    // Same state: a wave update only, no event.
    s.set_host_rollout(&row(a.id, HostRolloutState::Pending, 2, 5), Some(HostRolloutState::Pending), "re-waved").unwrap();
    assert_eq!(s.get_host_rollout(&id, a.id).unwrap(), Some(row(a.id, HostRolloutState::Pending, 2, 5)));
    assert_eq!(s.get_host_rollout(&id, Uuid::new_v4()).unwrap(), None);
    let listed: Vec<_> = s.list_host_rollouts(&id).unwrap().into_iter().map(|r| (r.host_id, r.state, r.wave_index)).collect();
    assert_eq!(listed, vec![(b.id, HostRolloutState::Activating, 0), (a.id, HostRolloutState::Pending, 2)]);
    let events = s.list_events(&EventFilter { kind: Some("host_rollout.transition".into()), limit: 10, ..Default::default() }).unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!((events[0].event.host_id, events[0].event.rollout_id.as_ref()), (Some(b.id), Some(&id)));
    let missing =
        s.set_host_rollout(&HostRollout { rollout_id: rid("prod@none"), ..row(a.id, HostRolloutState::Pending, 0, 1) }, None, "x");
    assert!(matches!(missing, Err(StoreError::NotFound { .. })), "{missing:?}");
    let no_host = s.set_host_rollout(&row(Uuid::new_v4(), HostRolloutState::Pending, 0, 1), None, "x");
    assert!(matches!(no_host, Err(StoreError::NotFound { .. })), "{no_host:?}");
}
