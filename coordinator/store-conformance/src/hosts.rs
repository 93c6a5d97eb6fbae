//! Conformance checks for hosts and their lifecycle, enrollment tokens and certificates.

use std::sync::{Arc, Barrier};

use drover_proto::states::HostLifecycle;
use uuid::Uuid;

use super::{Factory, TO_DELETED, all_events, drive, host, t};
#[allow(unused_imports)]
use crate::imports::*;
use crate::store::*;

fn transition_events(s: &dyn Store, id: Uuid) -> Vec<Event> {
    let filter = EventFilter { host_id: Some(id), kind: Some("host.transition".into()), limit: MAX_PAGE, ..Default::default() };
    s.list_events(&filter).expect("list events")
}

fn token(hash_of: &str, expires: i64) -> EnrollmentToken {
    EnrollmentToken { token_hash: hash_token(hash_of), expires_at: t(expires) }
}

fn host_with_token(s: &dyn Store, hostname: &str, secret: &str, expires: i64) -> Host {
    s.create_host(&NewHost { hostname: hostname.into(), created_at: t(0), token: Some(token(secret, expires)) }).expect("create host")
}

fn refusal<T: std::fmt::Debug>(r: Result<T, StoreError>) -> TokenRefusal {
    match r {
        Err(StoreError::TokenRefused { refusal }) => refusal,
        other => panic!("expected a token refusal, got {other:?}"),
    }
}

/// A new host starts in `bootstrap_issued`, is found by id and by hostname, and is announced.
pub fn host_create_get_and_lookup(make: Factory<'_>) {
    let s = make();
    let h = host(&*s, "gpu-01");
    assert_eq!(h.state, HostLifecycle::BootstrapIssued);
    assert!(h.schedulable && h.last_checkin.is_none());
    assert_eq!((h.created_at, h.updated_at), (t(0), t(0)));
    assert_eq!(s.get_host(h.id).unwrap().as_ref(), Some(&h));
    assert_eq!(s.get_host_by_hostname("gpu-01").unwrap().as_ref(), Some(&h));
    assert_eq!(s.get_host_by_hostname("gpu-02").unwrap(), None);
    assert_eq!(s.get_host(Uuid::new_v4()).unwrap(), None);
    let created: Vec<_> = all_events(&*s).into_iter().filter(|e| e.event.kind == "host.created").collect();
    assert_eq!(created.len(), 1);
    assert_eq!(created[0].event.host_id, Some(h.id));
    let bad = s.create_host(&NewHost { hostname: "Not_A_Host".into(), created_at: t(0), token: None });
    assert!(matches!(bad, Err(StoreError::Invalid { .. })), "bad hostname accepted: {bad:?}");
}

/// Two live hosts never share a hostname.
pub fn hostname_unique_among_live_hosts(make: Factory<'_>) {
    let s = make();
    let first = host(&*s, "gpu-01");
    let again = s.create_host(&NewHost { hostname: "gpu-01".into(), created_at: t(5), token: None });
    match again {
        Err(e @ StoreError::Conflict { .. }) => assert_eq!(e.kind(), ErrorKind::Conflict),
        other => panic!("duplicate live hostname accepted: {other:?}"),
    }
    // Retired is not deleted: the name stays taken.
    drive(&*s, &first, &TO_DELETED[..4]);
    assert!(matches!(
        s.create_host(&NewHost { hostname: "gpu-01".into(), created_at: t(5), token: None }),
        Err(StoreError::Conflict { .. })
    ));
    let all = s.list_hosts(&HostFilter { limit: MAX_PAGE, ..Default::default() }).unwrap();
    assert_eq!(all.len(), 1);
}

/// A deleted host frees its hostname; re-onboarding gets a new id and the old id stays deleted.
pub fn hostname_reuse_after_delete_gets_new_id(make: Factory<'_>) {
    let s = make();
    let old = drive(&*s, &host(&*s, "gpu-01"), TO_DELETED);
    assert_eq!(old.state, HostLifecycle::Deleted);
    assert_eq!(s.get_host_by_hostname("gpu-01").unwrap(), None, "a deleted host is not found by hostname");
    let new = host(&*s, "gpu-01");
    assert_ne!(new.id, old.id, "a host id is never reused");
    assert_eq!(s.get_host(old.id).unwrap().map(|h| h.state), Some(HostLifecycle::Deleted));
    assert_eq!(s.get_host_by_hostname("gpu-01").unwrap().map(|h| h.id), Some(new.id));
    let all = s.list_hosts(&HostFilter { limit: MAX_PAGE, ..Default::default() }).unwrap();
    assert_eq!(all.len(), 2, "deleted hosts stay listed: {all:?}");
    let deleted = s.list_hosts(&HostFilter { state: Some(HostLifecycle::Deleted), limit: MAX_PAGE, ..Default::default() }).unwrap();
    assert_eq!(deleted.iter().map(|h| h.id).collect::<Vec<_>>(), vec![old.id]);
    let revive = s.transition_host(old.id, HostLifecycle::Deleted, HostLifecycle::Active, "reuse", t(9));
    assert!(matches!(revive, Err(StoreError::IllegalTransition { .. })), "a deleted identity came back: {revive:?}");
}

/// A legal transition moves the host and writes one event carrying the reason.
pub fn host_transition_writes_event(make: Factory<'_>) {
    let s = make();
    let h = host(&*s, "gpu-01");
    let moved = s.transition_host(h.id, HostLifecycle::BootstrapIssued, HostLifecycle::Enrolling, "token used", t(7)).unwrap();
    assert_eq!((moved.state, moved.updated_at), (HostLifecycle::Enrolling, t(7)));
    assert_eq!(s.get_host(h.id).unwrap().map(|h| h.state), Some(HostLifecycle::Enrolling));
    let events = transition_events(&*s, h.id);
    assert_eq!(events.len(), 1);
    let e = &events[0].event;
    assert_eq!((e.at, e.message.as_str()), (t(7), "token used"));
    assert_eq!(e.data["from"], "bootstrap_issued");
    assert_eq!(e.data["to"], "enrolling");
}

/// An illegal transition is refused and writes nothing, whatever the stored state.
pub fn host_illegal_transition_writes_nothing(make: Factory<'_>) {
    let s = make();
    let h = host(&*s, "gpu-01");
    let before = all_events(&*s).len();
    let r = s.transition_host(h.id, HostLifecycle::BootstrapIssued, HostLifecycle::Active, "skip enrollment", t(3));
    match r {
        Err(StoreError::IllegalTransition { from, to, .. }) => assert_eq!((from.as_str(), to.as_str()), ("bootstrap_issued", "active")),
        other => panic!("illegal transition accepted: {other:?}"),
    }
    assert_eq!(s.get_host(h.id).unwrap().as_ref(), Some(&h), "host changed");
    assert_eq!(all_events(&*s).len(), before, "an event was written");
}

/// A transition from a state the host is no longer in (compare-and-set) is refused and writes nothing.
pub fn host_stale_transition_writes_nothing(make: Factory<'_>) {
    let s = make();
    let h = host(&*s, "gpu-01");
    let before = all_events(&*s).len();
    let r = s.transition_host(h.id, HostLifecycle::Enrolling, HostLifecycle::Active, "stale view", t(3));
    match r {
        Err(e @ StoreError::StaleState { .. }) => {
            assert_eq!(e.kind(), ErrorKind::Conflict);
            let StoreError::StaleState { expected, actual, .. } = e else { unreachable!() };
            assert_eq!((expected.as_str(), actual.as_str()), ("enrolling", "bootstrap_issued"));
        }
        other => panic!("stale transition accepted: {other:?}"),
    }
    assert_eq!(s.get_host(h.id).unwrap().as_ref(), Some(&h));
    assert_eq!(all_events(&*s).len(), before);
}

/// Two concurrent transitions from the same state: exactly one wins, one event is written.
pub fn host_transition_race_has_one_winner(make: Factory<'_>) {
    let s: Arc<dyn Store> = Arc::from(make());
    let h = drive(&*s, &host(&*s, "gpu-01"), &[HostLifecycle::Enrolling]);
    let barrier = Arc::new(Barrier::new(2));
    let targets = [HostLifecycle::Active, HostLifecycle::Quarantined];
    let handles: Vec<_> = targets
        .into_iter()
        .map(|to| {
            let (s, barrier) = (Arc::clone(&s), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                s.transition_host(h.id, HostLifecycle::Enrolling, to, "race", t(4))
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|j| j.join().expect("thread")).collect();
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 1, "{results:?}");
    assert!(results.iter().any(|r| matches!(r, Err(StoreError::StaleState { .. }))), "{results:?}");
    let winner = results.into_iter().find_map(Result::ok).expect("a winner");
    assert_eq!(s.get_host(h.id).unwrap().map(|h| h.state), Some(winner.state));
    assert_eq!(transition_events(&*s, h.id).len(), 2, "enrolling + the winner only");
}

/// Operations naming a host that does not exist are `NotFound`, not backend failures.
pub fn host_ops_on_unknown_host_not_found(make: Factory<'_>) {
    let s = make();
    let ghost = Uuid::new_v4();
    let nf = |r: Result<(), StoreError>, what: &str| match r {
        Err(e @ StoreError::NotFound { .. }) => assert_eq!(e.kind(), ErrorKind::NotFound),
        other => panic!("{what} on an unknown host: {other:?}"),
    };
    nf(s.transition_host(ghost, HostLifecycle::BootstrapIssued, HostLifecycle::Enrolling, "x", t(1)).map(drop), "transition");
    let ck = Checkin { at: t(1), agent_version: "1".into(), boot_id: "b".into(), current_generation: None };
    nf(s.record_checkin(ghost, &ck).map(drop), "checkin");
    nf(s.set_schedulable(ghost, false, "x", t(1)).map(drop), "cordon");
    nf(s.create_token(ghost, &token("tok", 100), t(1)).map(drop), "token");
    nf(s.revoke_host_certs(ghost, t(1), "x").map(drop), "revoke");
}

/// Listing orders by hostname, filters by state and silence, and pages by cursor without
/// skipping or repeating a host.
pub fn host_list_filters_and_pages(make: Factory<'_>) {
    let s = make();
    let names = ["gpu-05", "gpu-01", "gpu-07", "gpu-03", "gpu-02", "gpu-06", "gpu-04"];
    let hosts: Vec<Host> = names.iter().map(|n| host(&*s, n)).collect();
    for h in &hosts[..2] {
        drive(&*s, h, &[HostLifecycle::Enrolling]);
    }
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = s.list_hosts(&HostFilter { after: after.clone(), limit: 3, ..Default::default() }).unwrap();
        assert!(page.len() <= 3);
        let Some(last) = page.last() else { break };
        after = Some(HostCursor::after(last));
        seen.extend(page.iter().map(|h| h.hostname.clone()));
    }
    let mut sorted: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    sorted.sort();
    assert_eq!(seen, sorted);
    let enrolling = s.list_hosts(&HostFilter { state: Some(HostLifecycle::Enrolling), limit: 10, ..Default::default() }).unwrap();
    assert_eq!(enrolling.iter().map(|h| h.hostname.as_str()).collect::<Vec<_>>(), vec!["gpu-01", "gpu-05"]);
    assert_eq!(s.list_hosts(&HostFilter::default()).unwrap().len(), names.len(), "limit 0 means a full page");
    // Silence: gpu-05 and gpu-01 changed state at t(1); the others have been quiet since t(0).
    let quiet = s.list_hosts(&HostFilter { silent_since: Some(t(1)), limit: 10, ..Default::default() }).unwrap();
    assert_eq!(quiet.len(), 5, "{quiet:?}");
}

/// A check-in is recorded on the host and counts against silence.
pub fn host_checkin_recorded(make: Factory<'_>) {
    let s = make();
    let h = host(&*s, "gpu-01");
    let ck =
        Checkin { at: t(50), agent_version: "0.1.0".into(), boot_id: "boot-a".into(), current_generation: Some("/nix/store/x".into()) };
    let after = s.record_checkin(h.id, &ck).unwrap();
    assert_eq!(after.last_checkin.as_ref(), Some(&ck));
    assert_eq!(after.state, h.state, "a check-in changes no state");
    let ck2 = Checkin { at: t(60), agent_version: "0.1.1".into(), boot_id: "boot-b".into(), current_generation: None };
    s.record_checkin(h.id, &ck2).unwrap();
    assert_eq!(s.get_host(h.id).unwrap().and_then(|h| h.last_checkin), Some(ck2));
    let silent = |at| s.list_hosts(&HostFilter { silent_since: Some(t(at)), limit: 10, ..Default::default() }).unwrap().len();
    assert_eq!((silent(60), silent(61)), (0, 1));
}

/// Cordoning flips the flag once, with an event; repeating it is a no-op.
pub fn host_schedulable_flag(make: Factory<'_>) {
    let s = make();
    let h = host(&*s, "gpu-01");
    let kind = || s.list_events(&EventFilter { kind: Some("host.schedulable".into()), limit: 10, ..Default::default() }).unwrap().len();
    assert!(!s.set_schedulable(h.id, false, "maintenance", t(2)).unwrap().schedulable);
    assert!(!s.set_schedulable(h.id, false, "again", t(3)).unwrap().schedulable);
    assert_eq!(kind(), 1);
    assert!(s.set_schedulable(h.id, true, "done", t(4)).unwrap().schedulable);
    assert_eq!(kind(), 2);
}

/// Invariant: a quarantined host is never schedulable. Quarantine cordons it (with an event),
/// and uncordoning it while quarantined is refused; leaving quarantine leaves it cordoned.
pub fn quarantined_host_is_never_schedulable(make: Factory<'_>) {
    let s = make();
    let h = host(&*s, "gpu-01");
    s.transition_host(h.id, HostLifecycle::BootstrapIssued, HostLifecycle::Enrolling, "enrolled", t(1)).unwrap();
    s.transition_host(h.id, HostLifecycle::Enrolling, HostLifecycle::Active, "healthy", t(2)).unwrap();
    assert!(s.get_host(h.id).unwrap().unwrap().schedulable);
    let q = s.transition_host(h.id, HostLifecycle::Active, HostLifecycle::Quarantined, "ECC errors", t(3)).unwrap();
    assert!(!q.schedulable, "quarantine cordons");
    let e = s.set_schedulable(h.id, true, "uncordon", t(4)).expect_err("refused");
    assert!(matches!(e, StoreError::IllegalTransition { .. }), "{e:?}");
    assert!(!s.get_host(h.id).unwrap().unwrap().schedulable);
    let back = s.transition_host(h.id, HostLifecycle::Quarantined, HostLifecycle::Active, "fixed", t(5)).unwrap();
    assert!(!back.schedulable, "leaving quarantine does not uncordon");
    assert!(s.set_schedulable(h.id, true, "tested", t(6)).unwrap().schedulable);
    // Every host in quarantine, however it got there, reads unschedulable.
    for host in s.list_hosts(&Default::default()).unwrap() {
        assert!(host.state != HostLifecycle::Quarantined || !host.schedulable, "{host:?}");
    }
}

/// A host's latest health report replaces the one before, never by an older one; a report
/// for a host that does not exist is skipped.
pub fn host_health_keeps_the_latest_report(make: Factory<'_>) {
    let s = make();
    let h = host(&*s, "gpu-01");
    assert_eq!(s.host_health(h.id).unwrap(), None);
    let report = |at: i64, text: &str| HostHealth { host_id: h.id, reported_at: t(at), report: text.to_owned() };
    assert_eq!(s.record_host_health(&[report(10, "{\"n\":1}")]).unwrap(), 1);
    assert_eq!(s.host_health(h.id).unwrap(), Some(report(10, "{\"n\":1}")));
    s.record_host_health(&[report(20, "{\"n\":2}")]).unwrap();
    // Late, out of order: the newer report stays.
    s.record_host_health(&[report(15, "{\"n\":0}")]).unwrap();
    assert_eq!(s.host_health(h.id).unwrap(), Some(report(20, "{\"n\":2}")));
    let ghost = HostHealth { host_id: Uuid::new_v4(), reported_at: t(30), report: "{}".into() };
    assert_eq!(s.record_host_health(std::slice::from_ref(&ghost)).unwrap(), 0);
    assert_eq!(s.host_health(ghost.host_id).unwrap(), None);
}

/// A token enrolls its host once; a second use is refused.
pub fn token_consumed_once(make: Factory<'_>) {
    let s = make();
    let h = host_with_token(&*s, "gpu-01", "secret-1", 7200);
    assert_eq!(s.consume_token(&hash_token("secret-1"), Some(h.id), t(10)).unwrap(), h.id);
    assert_eq!(refusal(s.consume_token(&hash_token("secret-1"), Some(h.id), t(11))), TokenRefusal::AlreadyUsed);
    assert_eq!(refusal(s.consume_token(&hash_token("secret-1"), None, t(11))), TokenRefusal::AlreadyUsed);
    let listed = s.list_tokens(Some(h.id)).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!((listed[0].host_id, listed[0].used_at, listed[0].expires_at), (h.id, Some(t(10)), t(7200)));
}

/// Many threads racing to use one token: exactly one wins.
pub fn token_single_use_under_concurrency(make: Factory<'_>) {
    let s: Arc<dyn Store> = Arc::from(make());
    let h = host_with_token(&*s, "gpu-01", "race", 7200);
    const N: usize = 8;
    let barrier = Arc::new(Barrier::new(N));
    let handles: Vec<_> = (0..N)
        .map(|_| {
            let (s, barrier) = (Arc::clone(&s), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                s.consume_token(&hash_token("race"), Some(h.id), t(10))
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|j| j.join().expect("thread")).collect();
    assert_eq!(results.iter().filter(|r| matches!(r, Ok(id) if *id == h.id)).count(), 1, "{results:?}");
    let losers = results.into_iter().filter(Result::is_err).map(refusal).collect::<Vec<_>>();
    assert_eq!(losers, vec![TokenRefusal::AlreadyUsed; N - 1]);
}

/// A token bound to host A is refused for host B and stays usable by A.
pub fn token_for_other_host_refused(make: Factory<'_>) {
    let s = make();
    let a = host_with_token(&*s, "gpu-a", "for-a", 7200);
    let b = host_with_token(&*s, "gpu-b", "for-b", 7200);
    assert_eq!(refusal(s.consume_token(&hash_token("for-a"), Some(b.id), t(10))), TokenRefusal::WrongHost);
    assert!(s.list_tokens(Some(a.id)).unwrap()[0].used_at.is_none(), "a refused attempt burned the token");
    assert_eq!(s.consume_token(&hash_token("for-a"), Some(a.id), t(11)).unwrap(), a.id);
    assert_eq!(s.consume_token(&hash_token("for-b"), None, t(11)).unwrap(), b.id);
}

/// A token is refused at and after its expiry, and the refusal leaves it unused.
pub fn token_expired_refused(make: Factory<'_>) {
    let s = make();
    let h = host_with_token(&*s, "gpu-01", "short", 100);
    assert_eq!(refusal(s.consume_token(&hash_token("short"), Some(h.id), t(100))), TokenRefusal::Expired);
    assert_eq!(refusal(s.consume_token(&hash_token("short"), Some(h.id), t(5000))), TokenRefusal::Expired);
    assert!(s.list_tokens(Some(h.id)).unwrap()[0].used_at.is_none());
    s.create_token(h.id, &token("fresh", 200), t(150)).unwrap();
    assert_eq!(s.consume_token(&hash_token("fresh"), Some(h.id), t(199)).unwrap(), h.id);
}

/// Enrollment is all or nothing: a failing issuer leaves the token unspent and the host in
/// `bootstrap_issued`; a working one spends it, moves the host and records the certificate.
pub fn enrollment_is_one_transaction(make: Factory<'_>) {
    let s = make();
    let h = host_with_token(&*s, "gpu-01", "tok", 1000);
    let mut failing = |_: &Host| -> Result<Enrolled, StoreError> { Err(StoreError::backend("CA unavailable")) };
    assert!(s.enroll_host(&hash_token("tok"), h.id, t(10), &mut failing).is_err());
    assert!(s.list_tokens(Some(h.id)).unwrap()[0].used_at.is_none(), "a failed enrollment spent the token");
    assert_eq!(s.get_host(h.id).unwrap().unwrap().state, HostLifecycle::BootstrapIssued);
    let mut issue = |host: &Host| -> Result<Enrolled, StoreError> {
        Ok(Enrolled {
            cert: NewCert {
                serial: "0a".repeat(16),
                kind: CertKind::Host,
                host_id: Some(host.id),
                subject: host.hostname.clone(),
                not_before: t(10),
                not_after: t(10_000),
            },
            keys: HostKeys { seal_key: Some("SEAL".into()), evidence_cert: Some("CERT".into()) },
        })
    };
    let enrolled = s.enroll_host(&hash_token("tok"), h.id, t(11), &mut issue).unwrap();
    assert_eq!(enrolled.state, HostLifecycle::Enrolling);
    assert!(s.get_cert(&"0a".repeat(16)).unwrap().is_some());
    let keys = s.host_keys(h.id).unwrap();
    assert_eq!((keys.seal_key.as_deref(), keys.evidence_cert.as_deref()), (Some("SEAL"), Some("CERT")), "the keys are recorded with it");
    assert_eq!(refusal(s.enroll_host(&hash_token("tok"), h.id, t(12), &mut issue)), TokenRefusal::AlreadyUsed);
}

/// Evidence is kept as sent and listed by host, job and task, oldest first, paged by `seq`;
/// a host's keys read back `NotFound` for an unknown host.
pub fn evidence_is_kept_and_listed_by_host_job_and_task(make: Factory<'_>) {
    let s = make();
    let a = host(&*s, "gpu-a");
    let b = host(&*s, "gpu-b");
    assert_eq!(s.host_keys(a.id).unwrap(), HostKeys::default(), "no keys before enrolling");
    assert!(matches!(s.host_keys(Uuid::new_v4()), Err(StoreError::NotFound { .. })));
    let job = Uuid::new_v4();
    let task = Uuid::new_v4();
    let item = |host_id: Uuid, task_id: Option<Uuid>, job_id: Option<Uuid>, n: i64| NewEvidence {
        host_id,
        task_id,
        job_id,
        kind: if task_id.is_some() { "task".into() } else { "probes".into() },
        signed_at: t(n),
        received_at: t(n + 1),
        document: format!("{{\"n\":{n}}}"),
    };
    let first = s.put_evidence(&item(a.id, Some(task), Some(job), 1)).unwrap();
    s.put_evidence(&item(a.id, None, None, 2)).unwrap();
    s.put_evidence(&item(b.id, Some(Uuid::new_v4()), Some(job), 3)).unwrap();
    let all = |f: EvidenceFilter| s.list_evidence(&EvidenceFilter { limit: 100, ..f }).unwrap();
    let docs = |v: Vec<EvidenceRecord>| v.into_iter().map(|r| r.evidence.document).collect::<Vec<_>>();
    assert_eq!(docs(all(EvidenceFilter { host_id: Some(a.id), ..Default::default() })), ["{\"n\":1}", "{\"n\":2}"]);
    assert_eq!(docs(all(EvidenceFilter { job_id: Some(job), ..Default::default() })), ["{\"n\":1}", "{\"n\":3}"]);
    assert_eq!(docs(all(EvidenceFilter { task_id: Some(task), ..Default::default() })), ["{\"n\":1}"]);
    assert_eq!(docs(all(EvidenceFilter { after: Some(first), ..Default::default() })), ["{\"n\":2}", "{\"n\":3}"]);
    let kept = all(EvidenceFilter { task_id: Some(task), ..Default::default() }).remove(0).evidence;
    assert_eq!(kept, item(a.id, Some(task), Some(job), 1), "kept exactly as given");
    assert_eq!(s.list_evidence(&EvidenceFilter { limit: 1, ..Default::default() }).unwrap().len(), 1);
}

/// A reimage's re-enrollment: an `offline` host whose every certificate is revoked enrolls
/// again with a fresh token, keeping its id and its state, with a new certificate. The same
/// token for a host that still has a valid certificate (a stolen token for a live host) is
/// refused and leaves everything as it was.
pub fn reenrollment_needs_an_offline_host_with_no_live_certificate(make: Factory<'_>) {
    let s = make();
    let h = host_with_token(&*s, "gpu-01", "first", 1000);
    let cert = |serial: &'static str| {
        move |host: &Host| -> Result<Enrolled, StoreError> {
            Ok(NewCert {
                serial: serial.repeat(16),
                kind: CertKind::Host,
                host_id: Some(host.id),
                subject: host.hostname.clone(),
                not_before: t(10),
                not_after: t(10_000),
            }
            .into())
        }
    };
    s.enroll_host(&hash_token("first"), h.id, t(10), &mut cert("0a")).unwrap();
    s.transition_host(h.id, HostLifecycle::Enrolling, HostLifecycle::Active, "first check-in", t(11)).unwrap();
    s.transition_host(h.id, HostLifecycle::Active, HostLifecycle::Offline, "released for a reimage", t(12)).unwrap();
    // Its certificate is still valid: a token for it enrolls nothing.
    s.create_token(h.id, &token("stolen", 1000), t(13)).unwrap();
    assert!(s.enroll_host(&hash_token("stolen"), h.id, t(14), &mut cert("0b")).is_err());
    assert!(s.get_cert(&"0b".repeat(16)).unwrap().is_none());
    let stolen = s.list_tokens(Some(h.id)).unwrap().into_iter().find(|tk| tk.created_at == t(13)).expect("the second token");
    assert!(stolen.used_at.is_none(), "a refused enrollment spent the token");
    // Revoked with its OS: a fresh token re-enrolls it under the same id, still offline.
    s.revoke_host_certs(h.id, t(15), "reimage").unwrap();
    s.create_token(h.id, &token("fresh", 1000), t(16)).unwrap();
    let again = s.enroll_host(&hash_token("fresh"), h.id, t(17), &mut cert("0c")).unwrap();
    assert_eq!((again.id, again.state), (h.id, HostLifecycle::Offline));
    assert!(s.get_cert(&"0c".repeat(16)).unwrap().is_some_and(|c| c.revoked.is_none()));
}

/// Revoking a host that has not enrolled yet ends its unused token.
pub fn revoking_a_host_ends_its_unused_tokens(make: Factory<'_>) {
    let s = make();
    let h = host_with_token(&*s, "gpu-01", "pending", 1000);
    assert_eq!(s.revoke_host_certs(h.id, t(10), "revoked before enrolling").unwrap(), 0);
    assert_eq!(refusal(s.consume_token(&hash_token("pending"), Some(h.id), t(11))), TokenRefusal::Expired);
}

/// An operator's revocation ends an unused token for good: enrollment refuses it, the listing
/// shows when, a repeat keeps the first time, a used token cannot be revoked, and the host's
/// other tokens are untouched.
pub fn revoked_token_is_refused(make: Factory<'_>) {
    let s = make();
    let h = host_with_token(&*s, "gpu-01", "leaked", 7200);
    s.create_token(h.id, &token("spare", 7200), t(1)).unwrap();
    let leaked = s.list_tokens(Some(h.id)).unwrap().into_iter().find(|tk| tk.created_at == t(0)).expect("the first token");
    assert_eq!(leaked.revoked_at, None);
    let revoked = s.revoke_token(leaked.id, t(5)).unwrap();
    assert_eq!(revoked, TokenInfo { revoked_at: Some(t(5)), ..leaked.clone() });
    assert_eq!(refusal(s.consume_token(&hash_token("leaked"), Some(h.id), t(6))), TokenRefusal::Revoked);
    assert_eq!(
        refusal(s.enroll_host(&hash_token("leaked"), h.id, t(6), &mut |_| panic!("issued for a revoked token"))),
        TokenRefusal::Revoked
    );
    assert_eq!(s.get_host(h.id).unwrap().map(|x| x.state), Some(HostLifecycle::BootstrapIssued));
    assert_eq!(s.revoke_token(leaked.id, t(9)).unwrap().revoked_at, Some(t(5)), "a repeat moved the revocation");
    let listed = s.list_tokens(Some(h.id)).unwrap();
    assert_eq!(listed.iter().find(|tk| tk.id == leaked.id).and_then(|tk| tk.revoked_at), Some(t(5)));
    let events = all_events(&*s).into_iter().filter(|e| e.event.kind == "host.token_revoked").collect::<Vec<_>>();
    assert_eq!(events.len(), 1, "one event, none for the repeat: {events:?}");
    assert_eq!(events[0].event.host_id, Some(h.id));
    assert!(!format!("{events:?}").contains(&hash_token("leaked")), "the event carries the token's hash");
    // The host's other token still enrolls it; once used it cannot be revoked.
    assert_eq!(s.consume_token(&hash_token("spare"), Some(h.id), t(10)).unwrap(), h.id);
    let spare = s.list_tokens(Some(h.id)).unwrap().into_iter().find(|tk| tk.created_at == t(1)).expect("the spare token");
    assert!(matches!(s.revoke_token(spare.id, t(11)), Err(StoreError::Conflict { .. })));
    assert_eq!(s.list_tokens(Some(h.id)).unwrap().into_iter().find(|tk| tk.id == spare.id).unwrap().revoked_at, None);
    let unknown = s.revoke_token(Uuid::new_v4(), t(12));
    assert!(matches!(&unknown, Err(e) if e.kind() == ErrorKind::NotFound), "{unknown:?}");
}

/// Unknown tokens are refused; malformed hashes and tokens for deleted hosts are not stored.
pub fn token_unknown_or_malformed_refused(make: Factory<'_>) {
    let s = make();
    let h = host(&*s, "gpu-01");
    assert_eq!(refusal(s.consume_token(&hash_token("never issued"), None, t(1))), TokenRefusal::Unknown);
    assert_eq!(refusal(s.consume_token("", None, t(1))), TokenRefusal::Unknown);
    let bad = EnrollmentToken { token_hash: "not-a-hash".into(), expires_at: t(100) };
    assert!(matches!(s.create_token(h.id, &bad, t(1)), Err(StoreError::Invalid { .. })));
    let upper = EnrollmentToken { token_hash: hash_token("x").to_uppercase(), expires_at: t(100) };
    assert!(matches!(s.create_token(h.id, &upper, t(1)), Err(StoreError::Invalid { .. })), "hashes are lowercase hex");
    let gone = drive(&*s, &host(&*s, "gpu-02"), TO_DELETED);
    assert!(matches!(s.create_token(gone.id, &token("late", 100), t(2)), Err(StoreError::Conflict { .. })));
    assert!(s.list_tokens(None).unwrap().is_empty());
}

/// No listing, event or error ever carries a token's hash.
pub fn token_hash_never_listed(make: Factory<'_>) {
    let s = make();
    let hash = hash_token("top-secret");
    let h = host_with_token(&*s, "gpu-01", "top-secret", 7200);
    let dup = s.create_token(h.id, &token("top-secret", 7200), t(1));
    assert!(matches!(dup, Err(StoreError::Conflict { .. })), "{dup:?}");
    s.consume_token(&hash, Some(h.id), t(2)).unwrap();
    let seen = format!(
        "{:?} {:?} {:?} {:?} {:?} {}",
        s.list_tokens(None).unwrap(),
        s.list_tokens(Some(h.id)).unwrap(),
        all_events(&*s),
        s.list_hosts(&HostFilter { limit: 10, ..Default::default() }).unwrap(),
        token("top-secret", 1),
        dup.unwrap_err(),
    );
    assert!(!seen.contains(&hash) && !seen.contains("top-secret"), "token material leaked: {seen}");
}

fn cert(serial: &str, kind: CertKind, host_id: Option<Uuid>) -> NewCert {
    NewCert { serial: serial.into(), kind, host_id, subject: format!("CN={serial}"), not_before: t(0), not_after: t(30 * 86400) }
}

/// Certificates are recorded once per serial (any hex case), with kind/host consistency.
pub fn cert_record_get_and_list(make: Factory<'_>) {
    let s = make();
    let a = host(&*s, "gpu-a");
    let b = host(&*s, "gpu-b");
    s.record_cert(&cert("0A1B", CertKind::Host, Some(a.id))).unwrap();
    s.record_cert(&cert("0c", CertKind::Host, Some(b.id))).unwrap();
    s.record_cert(&cert("ff01", CertKind::Operator, None)).unwrap();
    s.record_cert(&cert("ff02", CertKind::Server, None)).unwrap();
    let got = s.get_cert("0a1b").unwrap().expect("found by lowercase");
    assert_eq!(s.get_cert("0A1B").unwrap().as_ref(), Some(&got));
    assert_eq!((got.cert.serial.as_str(), got.cert.kind, got.cert.host_id), ("0a1b", CertKind::Host, Some(a.id)));
    assert_eq!(got.revoked, None);
    assert!(matches!(s.record_cert(&cert("0a1b", CertKind::Host, Some(a.id))), Err(StoreError::Conflict { .. })));
    assert!(matches!(s.record_cert(&cert("01", CertKind::Host, None)), Err(StoreError::Invalid { .. })));
    assert!(matches!(s.record_cert(&cert("02", CertKind::Operator, Some(a.id))), Err(StoreError::Invalid { .. })));
    assert!(matches!(s.record_cert(&cert("zz", CertKind::Server, None)), Err(StoreError::Invalid { .. })));
    assert!(matches!(s.record_cert(&cert("03", CertKind::Host, Some(Uuid::new_v4()))), Err(StoreError::NotFound { .. })));
    assert_eq!(s.get_cert("abcdef").unwrap(), None);
    let of_a: Vec<_> = s.list_certs(Some(a.id)).unwrap().into_iter().map(|c| c.cert.serial).collect();
    assert_eq!(of_a, vec!["0a1b"]);
    assert_eq!(s.list_certs(None).unwrap().len(), 4);
}

/// Revocation is recorded once (the first time and reason stay) and feeds the CRL.
pub fn cert_revocation_and_crl(make: Factory<'_>) {
    let s = make();
    s.record_cert(&cert("aa", CertKind::Operator, None)).unwrap();
    s.record_cert(&cert("bb", CertKind::Operator, None)).unwrap();
    assert!(s.list_revoked().unwrap().is_empty());
    assert!(s.revoke_cert("AA", t(10), "key lost").unwrap());
    assert!(!s.revoke_cert("aa", t(20), "again").unwrap());
    let rec = s.get_cert("aa").unwrap().unwrap();
    assert_eq!(rec.revoked, Some(Revocation { at: t(10), reason: "key lost".into() }));
    assert_eq!(s.list_revoked().unwrap(), vec![RevokedCert { serial: "aa".into(), revoked_at: t(10) }]);
    assert!(matches!(s.revoke_cert("cc", t(10), "x"), Err(StoreError::NotFound { .. })));
}

/// Revoking a host's certificates revokes all of its live ones and nobody else's.
pub fn cert_revoke_all_for_host(make: Factory<'_>) {
    let s = make();
    let a = host(&*s, "gpu-a");
    let b = host(&*s, "gpu-b");
    for serial in ["a1", "a2", "a3"] {
        s.record_cert(&cert(serial, CertKind::Host, Some(a.id))).unwrap();
    }
    s.record_cert(&cert("b1", CertKind::Host, Some(b.id))).unwrap();
    s.revoke_cert("a3", t(5), "renewed").unwrap();
    assert_eq!(s.revoke_host_certs(a.id, t(10), "host removed").unwrap(), 2);
    assert_eq!(s.revoke_host_certs(a.id, t(11), "again").unwrap(), 0);
    assert_eq!(s.get_cert("b1").unwrap().unwrap().revoked, None);
    let crl: Vec<_> = s.list_revoked().unwrap().into_iter().map(|r| (r.serial, r.revoked_at)).collect();
    assert_eq!(crl, vec![("a1".into(), t(10)), ("a2".into(), t(10)), ("a3".into(), t(5))]);
}
