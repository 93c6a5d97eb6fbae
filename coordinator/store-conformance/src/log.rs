//! Conformance checks for events and audit (append-only, stable paging), and for calling a
//! store through [`blocking`] from a single-threaded async runtime, as the engine's
//! `store::blocking` does.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use drover_proto::names::RolloutId;
use drover_proto::states::HostLifecycle;
use uuid::Uuid;

use super::{Factory, all_events, host, note, t};
#[allow(unused_imports)]
use crate::imports::*;
use crate::store::*;

/// Events round-trip, filter by host, rollout, job and kind, and page by id without skipping
/// or repeating a row even while new events are appended between pages; pages are capped at
/// [`MAX_PAGE`].
pub fn events_filter_and_page_stable(make: Factory<'_>) {
    let s = make();
    let h = host(&*s, "gpu-01");
    let rollout = RolloutId::parse("prod@c1").expect("id");
    let job = Uuid::new_v4();
    let mut appended = Vec::new();
    for i in 0..25 {
        let mut e = note(if i % 2 == 0 { "test.even" } else { "test.odd" }, i);
        if i % 3 == 0 {
            e.host_id = Some(h.id);
        }
        if i % 5 == 0 {
            e.rollout_id = Some(rollout.clone());
        }
        if i == 7 {
            e.job_id = Some(job);
        }
        appended.push((s.append_event(&e).unwrap(), e));
    }
    let listed = all_events(&*s);
    let ours: Vec<_> = listed.iter().filter(|e| e.event.kind.starts_with("test.")).map(|e| (e.id, e.event.clone())).collect();
    assert_eq!(ours, appended, "events did not round-trip");
    assert!(listed.windows(2).all(|w| w[0].id < w[1].id), "ids are not increasing");

    // Page by 10 while appending 3 more between the first and second page.
    let mut seen = Vec::new();
    let mut after = None;
    let mut extra = 0;
    loop {
        let page = s.list_events(&EventFilter { after_id: after, limit: 10, ..Default::default() }).unwrap();
        assert!(page.len() <= 10);
        let Some(last) = page.last() else { break };
        after = Some(last.id);
        seen.extend(page.iter().map(|e| e.id));
        if extra == 0 {
            for i in 0..3 {
                s.append_event(&note("test.late", 100 + i)).unwrap();
            }
            extra = 3;
        }
    }
    let total = all_events(&*s);
    assert_eq!(seen, total.iter().map(|e| e.id).collect::<Vec<_>>(), "paging skipped or repeated events");
    assert_eq!(s.latest_event_id().unwrap(), total.last().map_or(0, |e| e.id), "the newest id");
    assert_eq!(total.len(), listed.len() + extra);

    let count = |f: EventFilter| s.list_events(&EventFilter { limit: MAX_PAGE, ..f }).unwrap();
    let by_host = count(EventFilter { host_id: Some(h.id), ..Default::default() });
    assert!(by_host.iter().all(|e| e.event.host_id == Some(h.id)));
    assert_eq!(by_host.iter().filter(|e| e.event.kind.starts_with("test.")).count(), 9);
    assert_eq!(count(EventFilter { rollout_id: Some(rollout.clone()), ..Default::default() }).len(), 5);
    assert_eq!(count(EventFilter { job_id: Some(job), ..Default::default() }).len(), 1);
    assert_eq!(count(EventFilter { kind: Some("test.even".into()), ..Default::default() }).len(), 13);
    let both = count(EventFilter { kind: Some("test.odd".into()), host_id: Some(h.id), ..Default::default() });
    assert_eq!(both.iter().map(|e| e.event.at).collect::<Vec<_>>(), vec![t(3), t(9), t(15), t(21)]);
    assert_eq!(s.list_events(&EventFilter::default()).unwrap().len(), total.len(), "limit 0 means a full page");

    // Pages never exceed MAX_PAGE, however large the limit asked for.
    for i in 0..i64::from(MAX_PAGE) {
        s.append_event(&note("test.bulk", i)).unwrap();
    }
    assert_eq!(s.list_events(&EventFilter { limit: MAX_PAGE + 500, ..Default::default() }).unwrap().len(), MAX_PAGE as usize);
    assert_eq!(s.list_events(&EventFilter::default()).unwrap().len(), MAX_PAGE as usize);
}

/// Audit records round-trip and page by id, filtered by actor and target.
pub fn audit_append_filter_page(make: Factory<'_>) {
    let s = make();
    let mut appended = Vec::new();
    for i in 0..6 {
        let rec = NewAudit {
            at: t(i),
            actor: if i % 2 == 0 { "alice".into() } else { "bob".into() },
            role: "admin".into(),
            action: "host.quarantine".into(),
            target: format!("host-{}", i % 3),
            reason: format!("ticket {i}"),
            prior_state: Some("active".into()),
            expected_state: if i == 5 { None } else { Some("quarantined".into()) },
        };
        appended.push(AuditRecord { id: s.append_audit(&rec).unwrap(), audit: rec });
    }
    let first = s.list_audit(&AuditFilter { limit: 4, ..Default::default() }).unwrap();
    let rest = s.list_audit(&AuditFilter { after_id: first.last().map(|r| r.id), limit: 4, ..Default::default() }).unwrap();
    assert_eq!([first, rest].concat(), appended);
    let alice = s.list_audit(&AuditFilter { actor: Some("alice".into()), limit: 10, ..Default::default() }).unwrap();
    assert_eq!(alice.iter().map(|r| r.audit.at).collect::<Vec<_>>(), vec![t(0), t(2), t(4)]);
    let target = s.list_audit(&AuditFilter { target: Some("host-1".into()), limit: 10, ..Default::default() }).unwrap();
    assert_eq!(target.iter().map(|r| r.audit.at).collect::<Vec<_>>(), vec![t(1), t(4)]);
    assert_eq!(s.list_audit(&AuditFilter::default()).unwrap(), appended, "limit 0 means a full page");
}

/// A store call on tokio's blocking pool, as the engine's `store::blocking` makes it (this crate
/// sits below the engine, so it has its own copy): `f` runs off the runtime's threads, and a
/// panic inside it becomes a backend error rather than tearing down the caller's task.
pub async fn blocking<T: Send + 'static>(
    store: Arc<dyn Store>,
    f: impl FnOnce(&dyn Store) -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    match tokio::task::spawn_blocking(move || f(&*store)).await {
        Ok(result) => result,
        Err(join) if join.is_panic() => Err(StoreError::backend("store call panicked")),
        Err(join) => Err(StoreError::backend(format!("store call did not finish: {join}"))),
    }
}

/// Through [`blocking`], a store call runs off the runtime's only thread (the runtime keeps
/// ticking while the call sleeps), typed errors come back typed, and a panic becomes a
/// backend error instead of killing the caller.
pub fn blocking_runs_off_the_runtime_thread(make: Factory<'_>) {
    let store: Arc<dyn Store> = Arc::from(make());
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().expect("runtime");
    rt.block_on(async {
        let runtime_thread = std::thread::current().id();
        let ticks = Arc::new(AtomicUsize::new(0));
        let ticker = {
            let ticks = Arc::clone(&ticks);
            tokio::spawn(async move {
                loop {
                    ticks.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
        };
        let (created, ran_on) = blocking(Arc::clone(&store), |s| {
            // Stands in for a slow disk: on the runtime thread this would freeze the ticker.
            std::thread::sleep(Duration::from_millis(200));
            let h = s.create_host(&NewHost { hostname: "gpu-01".into(), created_at: t(0), token: None })?;
            Ok((h, std::thread::current().id()))
        })
        .await
        .expect("store call");
        ticker.abort();
        assert_ne!(ran_on, runtime_thread, "the store ran on the runtime thread");
        assert!(ticks.load(Ordering::SeqCst) >= 5, "the runtime was blocked during the store call");
        let id = created.id;
        let fetched = blocking(Arc::clone(&store), move |s| s.get_host(id)).await.expect("get");
        assert_eq!(fetched, Some(created));
        let typed = blocking(Arc::clone(&store), |s| {
            s.transition_host(Uuid::new_v4(), HostLifecycle::BootstrapIssued, HostLifecycle::Enrolling, "x", t(1))
        })
        .await;
        assert!(matches!(typed, Err(StoreError::NotFound { .. })), "{typed:?}");
        let panicked = blocking(Arc::clone(&store), |_| -> Result<(), StoreError> { panic!("conformance: deliberate panic") }).await;
        assert!(matches!(&panicked, Err(e) if e.kind() == ErrorKind::Backend), "{panicked:?}");
    });
}
