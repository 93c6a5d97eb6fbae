//! Conformance checks for releases, manifests, rollouts and per-host rollout state.

use drover_proto::names::RolloutId;
use drover_proto::release::ReleaseFiles;
use drover_proto::states::{HostRolloutState, RolloutState};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::{Factory, all_events, host, t};
#[allow(unused_imports)]
use crate::imports::*;
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
    assert_eq!(s.latest_release_version().unwrap(), None);
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
    assert_eq!(s.latest_release_version().unwrap(), Some(6));
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

/// A manifest's signed root comes from the newest release carrying it with its signature.
pub fn manifest_root_from_the_newest_release(make: Factory<'_>) {
    let s = make();
    let id = rid("prod@abc123");
    let with_root = |root: &[u8], sig: &[u8]| {
        let mut f = release_with("prod@abc123", b"{}", b"sig");
        f.files.insert("roots/prod@abc123.json".to_owned(), root.to_vec());
        f.files.insert("roots/prod@abc123.json.sig".to_owned(), sig.to_vec());
        f
    };
    assert_eq!(s.get_manifest_root(&id).unwrap(), None);
    s.put_release(1, t(1), &with_root(b"{\"r\":1}", b"root-sig-1")).unwrap();
    s.put_release(2, t(2), &release_with("prod@abc123", b"{}", b"sig")).unwrap();
    assert_eq!(s.get_manifest_root(&id).unwrap(), Some((b"{\"r\":1}".to_vec(), b"root-sig-1".to_vec())), "an older release's root");
    s.put_release(3, t(3), &with_root(b"{\"r\":1}", b"root-sig-3")).unwrap();
    assert_eq!(s.get_manifest_root(&id).unwrap(), Some((b"{\"r\":1}".to_vec(), b"root-sig-3".to_vec())), "the newest signature");
    assert_eq!(s.get_manifest_root(&rid("prod@other")).unwrap(), None);
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

fn publish_audit(s: &dyn Store, version: u64, actor: &str, action: &str) {
    s.append_audit(&NewAudit {
        at: t(version as i64),
        actor: actor.into(),
        role: "publisher".into(),
        action: action.into(),
        target: version.to_string(),
        reason: "suite".into(),
        prior_state: None,
        expected_state: None,
    })
    .expect("append audit");
}

fn open(s: &dyn Store, id: &str, manifest: &[u8]) {
    let new = NewRollout { rollout_id: rid(id), state: RolloutState::Opening, manifest_sha256: sha(manifest), opened_at: t(50) };
    s.open_rollout(&new).expect("open rollout");
}

/// The release listing names each release's publisher (from its publish audit record, no
/// other action's), and counts the rollouts it opened — those whose manifest it was the first
/// to carry, not one it merely carried again or one not yet opened — with their channels.
pub fn release_listing_names_publisher_and_opened_rollouts(make: Factory<'_>) {
    let s = make();
    s.put_release(1, t(1), &release_with("prod@a1", b"prod-a1", b"sig")).unwrap();
    // Same target, another action, written first: the publisher is not whoever acted first.
    publish_audit(&*s, 1, "mallory", "host.quarantine");
    publish_audit(&*s, 1, "ci-bot", RELEASE_PUBLISH_ACTION);
    let mut v2 = release_with("prod@a1", b"prod-a1", b"sig");
    for (path, bytes) in
        [("rollouts/canary@b2.json", &b"canary-b2"[..]), ("rollouts/prod@b2.json", b"prod-b2"), ("rollouts/train@b2.json", b"train-b2")]
    {
        v2.files.insert(path.to_owned(), bytes.to_vec());
        v2.files.insert(format!("{path}.sig"), b"sig".to_vec());
    }
    s.put_release(2, t(2), &v2).unwrap();
    s.put_release(3, t(3), &files(&[("timestamp.json", b"{}")])).unwrap();
    publish_audit(&*s, 3, "ci-bot-2", RELEASE_PUBLISH_ACTION);
    open(&*s, "prod@a1", b"prod-a1");
    open(&*s, "prod@b2", b"prod-b2");
    open(&*s, "canary@b2", b"canary-b2");
    // No release carries this one's manifest: it counts for none.
    open(&*s, "dev@x9", b"dev-x9");
    let listed: Vec<(u64, Option<String>, Vec<String>, u64)> =
        s.list_releases().unwrap().into_iter().map(|r| (r.version, r.publisher, r.channels, r.rollouts)).collect();
    let strings = |v: &[&str]| v.iter().map(|c| c.to_string()).collect::<Vec<_>>();
    assert_eq!(
        listed,
        vec![
            (3, Some("ci-bot-2".to_owned()), Vec::new(), 0),
            (2, None, strings(&["canary", "prod"]), 2),
            (1, Some("ci-bot".to_owned()), strings(&["prod"]), 1),
        ]
    );
    assert_eq!(s.list_releases().unwrap()[1].paths.len(), 12, "the new columns do not multiply or drop paths");
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

fn host_op(id: &RolloutId, host: &str, from: HostRolloutState, to: HostRolloutState, target: Option<&str>) -> PlanOp {
    PlanOp::HostState { rollout_id: id.clone(), hostname: host.into(), wave_index: 0, from, to, intent_target: target.map(str::to_owned) }
}

/// A host listing's channel and wave: each hostname's row in the rollout opened last that
/// names it (hosts no rollout names are absent); a rollout listing's hosts per state.
pub fn host_listings_read_rollout_rows_for_a_page(make: Factory<'_>) {
    use HostRolloutState as H;
    let s = make();
    let (old, new) = (rid("prod@c1"), rid("train@c2"));
    let open = |id: &RolloutId, at: i64, hosts: &[(&str, u32, H)]| {
        let mut ops = vec![PlanOp::OpenRollout { rollout_id: id.clone(), manifest_sha256: sha(id.as_str().as_bytes()) }];
        ops.extend(hosts.iter().map(|(h, wave, to)| PlanOp::HostState {
            rollout_id: id.clone(),
            hostname: (*h).into(),
            wave_index: *wave,
            from: H::Pending,
            to: *to,
            intent_target: None,
        }));
        s.apply_plan(&PlanWrite { at: t(at), ops, events: vec![] }, &[]).unwrap();
    };
    open(&old, 1, &[("gpu-a", 0, H::Activating), ("gpu-b", 1, H::Skipped)]);
    open(&new, 5, &[("gpu-a", 2, H::Activating)]);
    let names = |v: &[&str]| v.iter().map(|h| (*h).to_owned()).collect::<Vec<_>>();
    let rows: Vec<_> = s
        .latest_host_rollouts(&names(&["gpu-b", "gpu-a", "gpu-never"]))
        .unwrap()
        .into_iter()
        .map(|r| (r.hostname, r.rollout_id.channel().to_owned(), r.wave_index))
        .collect();
    assert_eq!(rows, vec![("gpu-a".into(), "train".into(), 2), ("gpu-b".into(), "prod".into(), 1)]);
    assert!(s.latest_host_rollouts(&[]).unwrap().is_empty());
    assert!(s.latest_host_rollouts(&names(&["gpu-never"])).unwrap().is_empty());

    let counts = s.host_rollout_counts(&[old.clone(), new.clone(), rid("prod@never")]).unwrap();
    let mut counts: Vec<_> = counts.into_iter().map(|(id, state, n)| (id.as_str().to_owned(), state, n)).collect();
    counts.sort_by(|a, b| (a.0.as_str(), a.1.as_str()).cmp(&(b.0.as_str(), b.1.as_str())));
    assert_eq!(
        counts,
        vec![("prod@c1".into(), H::Activating, 1), ("prod@c1".into(), H::Skipped, 1), ("train@c2".into(), H::Activating, 1)]
    );
    assert!(s.host_rollout_counts(&[]).unwrap().is_empty());
}

/// One plan is one transaction: ops apply in order with their events; an op finding another
/// state than it expects (compare-and-set) or an illegal transition fails the whole write.
pub fn plan_write_is_one_compare_and_set_transaction(make: Factory<'_>) {
    use HostRolloutState as H;
    let s = make();
    let id = rid("prod@c1");
    let event = |msg: &str| NewEvent {
        at: t(1),
        kind: "rollout.host".into(),
        host_id: None,
        rollout_id: Some(id.clone()),
        job_id: None,
        message: msg.into(),
        data: serde_json::json!({}),
    };
    let open = PlanWrite {
        at: t(1),
        ops: vec![
            PlanOp::OpenRollout { rollout_id: id.clone(), manifest_sha256: sha(b"m") },
            PlanOp::RolloutState { rollout_id: id.clone(), from: RolloutState::Opening, to: RolloutState::Active },
            host_op(&id, "gpu-a", H::Pending, H::Activating, Some("/nix/store/a")),
            host_op(&id, "gpu-b", H::Pending, H::Skipped, None),
        ],
        events: vec![event("opened"), event("dispatched")],
    };
    s.apply_plan(&open, &[]).unwrap();
    let rows: Vec<_> = s.list_host_rollouts(&id).unwrap().into_iter().map(|r| (r.hostname, r.state, r.intent_target)).collect();
    assert_eq!(rows, vec![("gpu-a".into(), H::Activating, Some("/nix/store/a".into())), ("gpu-b".into(), H::Skipped, None)]);
    assert_eq!(s.get_rollout(&id).unwrap().map(|r| r.state), Some(RolloutState::Active));
    let snap = s.plan_snapshot().unwrap();
    assert_eq!(snap.channels.get("prod").and_then(|c| c.last_rolled_ref.clone()), Some("c1".into()), "opening records the ref");
    assert_eq!(all_events(&*s).iter().filter(|e| e.event.kind == "rollout.host").count(), 2);

    // A stale expectation anywhere fails the whole write, the ops before it included.
    let stale = PlanWrite {
        at: t(2),
        ops: vec![
            host_op(&id, "gpu-a", H::Activating, H::Soaking, None),
            host_op(&id, "gpu-b", H::Pending, H::Activating, Some("/nix/store/b")),
        ],
        events: vec![event("should not stay")],
    };
    let err = s.apply_plan(&stale, &[]).unwrap_err();
    assert!(matches!(err, StoreError::StaleState { .. }), "{err:?}");
    let illegal = PlanWrite { at: t(2), ops: vec![host_op(&id, "gpu-a", H::Activating, H::Pending, None)], events: vec![] };
    assert!(matches!(s.apply_plan(&illegal, &[]), Err(StoreError::IllegalTransition { .. })));
    let again =
        PlanWrite { at: t(2), ops: vec![PlanOp::OpenRollout { rollout_id: id.clone(), manifest_sha256: sha(b"m") }], events: vec![] };
    assert!(matches!(s.apply_plan(&again, &[]), Err(StoreError::Conflict { .. })), "a rollout opens once");
    let rows: Vec<_> = s.list_host_rollouts(&id).unwrap().into_iter().map(|r| r.state).collect();
    assert_eq!(rows, vec![H::Activating, H::Skipped], "nothing of a failed write stays");
    assert!(all_events(&*s).iter().all(|e| e.event.message != "should not stay"));

    // Recording a revert intent keeps the state and its `since`.
    let before = s.list_host_rollouts(&id).unwrap()[0].since;
    let revert =
        PlanWrite { at: t(9), ops: vec![host_op(&id, "gpu-a", H::Activating, H::Activating, Some("/nix/store/old"))], events: vec![] };
    s.apply_plan(&revert, &[]).unwrap();
    let a = &s.list_host_rollouts(&id).unwrap()[0];
    assert_eq!((a.state, a.since, a.intent_target.as_deref()), (H::Activating, before, Some("/nix/store/old")));
}

/// The snapshot carries hosts with their reports, live rollouts with their hosts, channel
/// bookkeeping, and hosts held by started, unfinished jobs; pruned rollouts are left out.
pub fn plan_snapshot_reads_what_the_planner_needs(make: Factory<'_>) {
    use drover_proto::report::ProbeOutcome;
    let s = make();
    let a = host(&*s, "gpu-a");
    let b = host(&*s, "gpu-b");
    let report = HostReport { failed_units: 2, probes: [("nccl".to_owned(), ProbeOutcome::Passed)].into(), activation: None };
    s.record_host_report(a.id, &report, t(3)).unwrap();
    assert!(matches!(s.record_host_report(Uuid::new_v4(), &report, t(3)), Err(StoreError::NotFound { .. })));
    let job = s
        .create_job(&NewJob {
            job_id: Uuid::new_v4(),
            kind: "soft_reset".into(),
            host_id: Some(b.id),
            input: serde_json::json!({}),
            created_at: t(3),
            request_id: None,
        })
        .unwrap();
    // A pending job does not hold its host yet (see plan_snapshot_held_excludes_pending_and_activate).
    s.set_job_state(job.job.job_id, JobState::Pending, JobState::Running, "started", t(3)).unwrap();
    let old = rid("prod@c0");
    let new = rid("prod@c1");
    let ops = vec![
        PlanOp::OpenRollout { rollout_id: old.clone(), manifest_sha256: sha(b"0") },
        PlanOp::RolloutState { rollout_id: old.clone(), from: RolloutState::Opening, to: RolloutState::Failed },
        PlanOp::RolloutState { rollout_id: old.clone(), from: RolloutState::Failed, to: RolloutState::Pruned },
        PlanOp::OpenRollout { rollout_id: new.clone(), manifest_sha256: sha(b"1") },
        PlanOp::Deferral { channel: "infra".into(), deferral: Some(serde_json::json!({"targetRef": "r9"})) },
        PlanOp::StaleAlert { channel: "infra".into(), signed_at: t(2) },
    ];
    s.apply_plan(&PlanWrite { at: t(4), ops, events: vec![] }, &[]).unwrap();
    let snap = s.plan_snapshot().unwrap();
    let hosts: Vec<_> = snap.hosts.iter().map(|h| (h.hostname.as_str(), h.report.clone())).collect();
    assert_eq!(hosts, vec![("gpu-a", Some(report)), ("gpu-b", None)]);
    assert_eq!(snap.rollouts.iter().map(|r| r.rollout.rollout_id.clone()).collect::<Vec<_>>(), vec![new]);
    assert_eq!(snap.held.keys().copied().collect::<Vec<_>>(), vec![b.id]);
    assert!(snap.held[&b.id].contains(&job.job.job_id.to_string()));
    let infra = &snap.channels["infra"];
    assert_eq!((infra.deferral.clone(), infra.stale_alert), (Some(serde_json::json!({"targetRef": "r9"})), Some(t(2))));
    s.set_job_state(job.job.job_id, JobState::Running, JobState::Cancelled, "done", t(5)).unwrap();
    assert!(s.plan_snapshot().unwrap().held.is_empty(), "a finished job holds nothing");
}

/// Cancelling a rollout's intents withdraws the wanted ones only.
pub fn cancel_intents_withdraws_wanted_intents_of_the_rollout(make: Factory<'_>) {
    let s = make();
    let a = host(&*s, "gpu-a");
    let id = rid("prod@c1");
    let intent = NewIntent {
        intent_id: Uuid::new_v4(),
        host_id: a.id,
        rollout_id: id.clone(),
        envelope: b"{}".to_vec(),
        confirm_deadline: None,
        created_at: t(1),
    };
    s.apply_plan(&PlanWrite { at: t(1), ops: vec![PlanOp::Intent(intent.clone())], events: vec![] }, &[]).unwrap();
    let audit = NewAudit {
        at: t(2),
        actor: "alice".into(),
        role: "admin".into(),
        action: "rollout.cancel".into(),
        target: id.to_string(),
        reason: "r".into(),
        prior_state: None,
        expected_state: None,
    };
    s.apply_plan(&PlanWrite { at: t(2), ops: vec![PlanOp::CancelIntents { rollout_id: id.clone() }], events: vec![] }, &[audit]).unwrap();
    let stored = s.current_intent(a.id).unwrap().expect("intent");
    assert_eq!(stored.status, IntentStatus::Cancelled);
    assert_eq!(s.list_audit(&AuditFilter::default()).unwrap().len(), 1, "the audit record is written with the plan");
}
