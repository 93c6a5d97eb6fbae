//! Conformance checks for intents, tasks with leases, and jobs — above all host isolation:
//! one host never sees, leases or completes another host's work.

use std::collections::BTreeSet;
use std::sync::{Arc, Barrier};

use drover_proto::names::RolloutId;
use drover_proto::states::JobState;
use serde_json::json;
use uuid::Uuid;

use super::{Factory, all_events, host, t};
#[allow(unused_imports)]
use crate::imports::*;
use crate::store::*;

fn intent(host_id: Uuid, envelope: &[u8], at: i64) -> NewIntent {
    NewIntent {
        intent_id: Uuid::new_v4(),
        host_id,
        rollout_id: RolloutId::parse("prod@c1").expect("id"),
        envelope: envelope.to_vec(),
        confirm_deadline: Some(t(at + 600)),
        created_at: t(at),
    }
}

fn task(host_id: Uuid, at: i64) -> NewTask {
    NewTask { task_id: Uuid::new_v4(), host_id, job_id: None, envelope: format!("{{\"task\":{at}}}").into_bytes(), created_at: t(at) }
}

fn ids(tasks: &[TaskRecord]) -> Vec<Uuid> {
    tasks.iter().map(|r| r.task.task_id).collect()
}

/// `checkin_view` answers what `get_host` and `current_intent` would, and says a task is
/// leasable exactly while one is queued or its lease has lapsed; it never leases anything.
pub fn checkin_view_reads_without_leasing(make: Factory<'_>) {
    let s = make();
    let h = host(&*s, "gpu-01");
    let view = s.checkin_view(h.id, t(1)).unwrap();
    assert_eq!((view.host, view.intent, view.leasable), (Some(h.clone()), None, false));
    assert_eq!(s.checkin_view(Uuid::new_v4(), t(1)).unwrap(), CheckinView { host: None, intent: None, leasable: false, report: None });
    let i = s.put_intent(&intent(h.id, b"{}", 2)).unwrap();
    let queued = task(h.id, 3);
    s.enqueue_task(&queued).unwrap();
    let view = s.checkin_view(h.id, t(4)).unwrap();
    assert_eq!((view.intent, view.leasable), (Some(i), true));
    assert!(s.checkin_view(h.id, t(4)).unwrap().leasable, "looking leased the task");
    assert_eq!(ids(&s.lease_tasks(h.id, t(4), 300, 16).unwrap()), vec![queued.task_id]);
    assert!(!s.checkin_view(h.id, t(5)).unwrap().leasable, "a live lease is not leasable");
    assert!(s.checkin_view(h.id, t(4 + 300)).unwrap().leasable, "a lapsed lease is leasable again");
    let other = host(&*s, "gpu-02");
    let view = s.checkin_view(other.id, t(4 + 300)).unwrap();
    assert_eq!((view.intent, view.leasable), (None, false), "another host's work showed through");
}

/// A new intent becomes current; the one it replaces is superseded; a retry changes nothing.
pub fn intent_put_supersedes_previous(make: Factory<'_>) {
    let s = make();
    let h = host(&*s, "gpu-01");
    let first = intent(h.id, b"{\"signed\":1}", 10);
    let stored = s.put_intent(&first).unwrap();
    assert_eq!((stored.status, stored.current, &stored.intent), (IntentStatus::Wanted, true, &first));
    let second = intent(h.id, b"{\"signed\":2}", 20);
    s.put_intent(&second).unwrap();
    let old = s.get_intent(h.id, first.intent_id).unwrap().unwrap();
    assert_eq!((old.status, old.current), (IntentStatus::Superseded, false));
    assert_eq!(s.current_intent(h.id).unwrap().map(|i| i.intent), Some(second.clone()));
    // Replaying the first put (same content) is a no-op: it does not become current again.
    let replay = s.put_intent(&NewIntent { created_at: t(30), ..first.clone() }).unwrap();
    assert_eq!((replay.status, replay.current), (IntentStatus::Superseded, false));
    assert_eq!(s.current_intent(h.id).unwrap().map(|i| i.intent.intent_id), Some(second.intent_id));
    let clash = s.put_intent(&NewIntent { envelope: b"other".to_vec(), ..first.clone() });
    assert!(matches!(clash, Err(StoreError::Conflict { .. })), "{clash:?}");
    // A confirmed intent is superseded too; a cancelled one keeps its status.
    s.set_intent_status(h.id, second.intent_id, IntentStatus::Confirmed, t(25)).unwrap();
    let third = intent(h.id, b"{\"signed\":3}", 40);
    s.put_intent(&third).unwrap();
    assert_eq!(s.get_intent(h.id, second.intent_id).unwrap().map(|i| i.status), Some(IntentStatus::Superseded));
    s.set_intent_status(h.id, third.intent_id, IntentStatus::Cancelled, t(45)).unwrap();
    s.put_intent(&intent(h.id, b"{\"signed\":4}", 50)).unwrap();
    let third_now = s.get_intent(h.id, third.intent_id).unwrap().unwrap();
    assert_eq!((third_now.status, third_now.current), (IntentStatus::Cancelled, false));
}

/// Intent statuses move only forward; repeating a status (a retried confirm) is a no-op.
pub fn intent_status_transitions(make: Factory<'_>) {
    let s = make();
    let h = host(&*s, "gpu-01");
    let i = intent(h.id, b"{}", 10);
    s.put_intent(&i).unwrap();
    let confirmed = s.set_intent_status(h.id, i.intent_id, IntentStatus::Confirmed, t(11)).unwrap();
    assert_eq!((confirmed.status, confirmed.updated_at), (IntentStatus::Confirmed, t(11)));
    let again = s.set_intent_status(h.id, i.intent_id, IntentStatus::Confirmed, t(12)).unwrap();
    assert_eq!(again.updated_at, t(11), "a repeated confirm changed the record");
    s.set_intent_status(h.id, i.intent_id, IntentStatus::RolledBack, t(13)).unwrap();
    for to in [IntentStatus::Wanted, IntentStatus::Confirmed, IntentStatus::Cancelled] {
        let r = s.set_intent_status(h.id, i.intent_id, to, t(14));
        assert!(matches!(r, Err(StoreError::IllegalTransition { .. })), "rolled_back -> {}: {r:?}", to.as_str());
    }
    assert!(matches!(s.set_intent_status(h.id, Uuid::new_v4(), IntentStatus::Confirmed, t(1)), Err(StoreError::NotFound { .. })));
}

/// Host B can neither read nor confirm host A's intent.
pub fn intent_host_isolation(make: Factory<'_>) {
    let s = make();
    let a = host(&*s, "gpu-a");
    let b = host(&*s, "gpu-b");
    let i = intent(a.id, b"{\"for\":\"a\"}", 10);
    s.put_intent(&i).unwrap();
    assert_eq!(s.get_intent(b.id, i.intent_id).unwrap(), None);
    assert_eq!(s.current_intent(b.id).unwrap(), None);
    let r = s.set_intent_status(b.id, i.intent_id, IntentStatus::Confirmed, t(11));
    assert!(matches!(r, Err(StoreError::NotFound { .. })), "host B confirmed host A's intent: {r:?}");
    assert_eq!(s.get_intent(a.id, i.intent_id).unwrap().map(|i| i.status), Some(IntentStatus::Wanted));
    // A's intents are untouched by B's.
    s.put_intent(&intent(b.id, b"{\"for\":\"b\"}", 12)).unwrap();
    assert_eq!(s.current_intent(a.id).unwrap().map(|r| (r.intent.intent_id, r.status)), Some((i.intent_id, IntentStatus::Wanted)));
    let ghost = s.put_intent(&intent(Uuid::new_v4(), b"{}", 1));
    assert!(matches!(ghost, Err(StoreError::NotFound { .. })), "{ghost:?}");
}

/// Queuing the same task twice stores it once; the same id with other content conflicts.
pub fn task_enqueue_idempotent(make: Factory<'_>) {
    let s = make();
    let h = host(&*s, "gpu-01");
    let tk = task(h.id, 1);
    assert!(s.enqueue_task(&tk).unwrap());
    assert!(!s.enqueue_task(&tk).unwrap());
    assert!(!s.enqueue_task(&NewTask { created_at: t(9), ..tk.clone() }).unwrap());
    assert_eq!(ids(&s.list_tasks(&TaskFilter::default()).unwrap()), vec![tk.task_id]);
    let clash = s.enqueue_task(&NewTask { envelope: b"other".to_vec(), ..tk.clone() });
    assert!(matches!(clash, Err(StoreError::Conflict { .. })), "{clash:?}");
    let rec = s.get_task(tk.task_id).unwrap().unwrap();
    assert_eq!((rec.state, rec.attempts, rec.lease_expires_at, &rec.task), (TaskState::Queued, 0, None, &tk));
    assert!(matches!(s.enqueue_task(&task(Uuid::new_v4(), 1)), Err(StoreError::NotFound { .. })));
    let orphan = s.enqueue_task(&NewTask { job_id: Some(Uuid::new_v4()), ..task(h.id, 2) });
    assert!(matches!(orphan, Err(StoreError::NotFound { .. })), "{orphan:?}");
}

/// A live lease hides the task; a lapsed one returns it (leased again, never twice at once),
/// and `requeue_expired` puts lapsed leases back in the queue.
pub fn task_lease_expiry_and_requeue(make: Factory<'_>) {
    let s = make();
    let h = host(&*s, "gpu-01");
    let tk = task(h.id, 0);
    s.enqueue_task(&tk).unwrap();
    let first = s.lease_tasks(h.id, t(100), 60, 10).unwrap();
    assert_eq!(ids(&first), vec![tk.task_id]);
    assert_eq!((first[0].state, first[0].attempts, first[0].lease_expires_at), (TaskState::Leased, 1, Some(t(160))));
    assert!(s.lease_tasks(h.id, t(159), 60, 10).unwrap().is_empty(), "a live lease was handed out twice");
    assert_eq!(s.requeue_expired(t(159)).unwrap(), 0);
    let second = s.lease_tasks(h.id, t(160), 60, 10).unwrap();
    assert_eq!((second.len(), second[0].attempts, second[0].lease_expires_at), (1, 2, Some(t(220))));
    assert_eq!(s.requeue_expired(t(219)).unwrap(), 0);
    assert_eq!(s.requeue_expired(t(220)).unwrap(), 1);
    let requeued = s.get_task(tk.task_id).unwrap().unwrap();
    assert_eq!((requeued.state, requeued.lease_expires_at, requeued.attempts), (TaskState::Queued, None, 2));
    assert_eq!(s.requeue_expired(t(999)).unwrap(), 0);
    assert_eq!(s.lease_tasks(h.id, t(300), 60, 10).unwrap()[0].attempts, 3);
    assert_eq!(s.list_tasks(&TaskFilter { state: Some(TaskState::Leased), ..Default::default() }).unwrap().len(), 1);
}

/// Concurrent lease calls for one host hand each task to exactly one of them.
pub fn task_concurrent_leases_never_double(make: Factory<'_>) {
    let s: Arc<dyn Store> = Arc::from(make());
    let h = host(&*s, "gpu-01");
    let queued: BTreeSet<Uuid> =
        (0..24).map(|i| task(h.id, i)).inspect(|tk| assert!(s.enqueue_task(tk).unwrap())).map(|tk| tk.task_id).collect();
    const THREADS: usize = 4;
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let (s, barrier) = (Arc::clone(&s), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                let mut got = Vec::new();
                for _ in 0..10 {
                    got.extend(ids(&s.lease_tasks(h.id, t(100), 300, 3).expect("lease")));
                }
                got
            })
        })
        .collect();
    let all: Vec<Uuid> = handles.into_iter().flat_map(|j| j.join().expect("thread")).collect();
    let distinct: BTreeSet<Uuid> = all.iter().copied().collect();
    assert_eq!(all.len(), distinct.len(), "a task was leased twice while its lease was live");
    assert_eq!(distinct, queued, "every task leased exactly once");
}

/// Leases go oldest first, at most `max` at a time.
pub fn task_lease_order_and_max(make: Factory<'_>) {
    let s = make();
    let h = host(&*s, "gpu-01");
    let tasks: Vec<NewTask> = [30, 10, 50, 20, 40].into_iter().map(|at| task(h.id, at)).collect();
    for tk in &tasks {
        s.enqueue_task(tk).unwrap();
    }
    assert!(s.lease_tasks(h.id, t(100), 60, 0).unwrap().is_empty());
    let got: Vec<_> = s.lease_tasks(h.id, t(100), 60, 2).unwrap().into_iter().map(|r| r.task.created_at).collect();
    assert_eq!(got, vec![t(10), t(20)]);
    let rest: Vec<_> = s.lease_tasks(h.id, t(100), 60, 10).unwrap().into_iter().map(|r| r.task.created_at).collect();
    assert_eq!(rest, vec![t(30), t(40), t(50)]);
    let listed: Vec<_> = s.list_tasks(&TaskFilter { host_id: Some(h.id), ..Default::default() }).unwrap();
    assert_eq!(listed.iter().map(|r| r.task.created_at).collect::<Vec<_>>(), vec![t(10), t(20), t(30), t(40), t(50)]);
}

/// Host B never leases, completes or lists host A's tasks or results.
pub fn task_host_isolation(make: Factory<'_>) {
    let s = make();
    let a = host(&*s, "gpu-a");
    let b = host(&*s, "gpu-b");
    let tk = task(a.id, 1);
    s.enqueue_task(&tk).unwrap();
    assert!(s.lease_tasks(b.id, t(10), 60, 10).unwrap().is_empty(), "host B leased host A's task");
    let forged = s.complete_task(b.id, tk.task_id, &json!({"ok": true}), t(11));
    assert!(matches!(forged, Err(StoreError::NotFound { .. })), "host B completed host A's task: {forged:?}");
    let rec = s.get_task(tk.task_id).unwrap().unwrap();
    assert_eq!((rec.state, rec.result), (TaskState::Queued, None));
    s.complete_task(a.id, tk.task_id, &json!({"ok": true, "freedBytes": 7}), t(12)).unwrap();
    assert!(s.list_tasks(&TaskFilter { host_id: Some(b.id), ..Default::default() }).unwrap().is_empty());
    let late = s.complete_task(b.id, tk.task_id, &json!({"ok": true, "freedBytes": 7}), t(13));
    assert!(matches!(late, Err(StoreError::NotFound { .. })), "{late:?}");
}

/// Completion records the result once; a retry with the same result is a no-op, another
/// result conflicts, and a completed task is never leased again.
pub fn task_complete_records_result(make: Factory<'_>) {
    let s = make();
    let h = host(&*s, "gpu-01");
    let job = s.create_job(&NewJob {
        job_id: Uuid::new_v4(),
        kind: "storage_cleanup".into(),
        host_id: Some(h.id),
        input: json!({}),
        created_at: t(0),
        request_id: None,
    });
    let job = job.unwrap();
    let tk = NewTask { job_id: Some(job.job.job_id), ..task(h.id, 1) };
    s.enqueue_task(&tk).unwrap();
    s.lease_tasks(h.id, t(10), 60, 10).unwrap();
    let result = json!({"steps": [{"name": "unlink", "ok": true}], "freedBytes": 4096});
    let done = s.complete_task(h.id, tk.task_id, &result, t(20)).unwrap();
    assert_eq!((done.state, done.lease_expires_at, done.completed_at), (TaskState::Completed, None, Some(t(20))));
    assert_eq!(done.result.as_ref(), Some(&result));
    assert_eq!(s.complete_task(h.id, tk.task_id, &result, t(21)).unwrap().completed_at, Some(t(20)));
    let other = s.complete_task(h.id, tk.task_id, &json!({"ok": false}), t(22));
    assert!(matches!(other, Err(StoreError::Conflict { .. })), "{other:?}");
    assert!(s.lease_tasks(h.id, t(1000), 60, 10).unwrap().is_empty(), "a completed task was leased");
    assert_eq!(s.requeue_expired(t(1000)).unwrap(), 0);
    assert_eq!(ids(&s.list_tasks(&TaskFilter { job_id: Some(job.job.job_id), ..Default::default() }).unwrap()), vec![tk.task_id]);
    // A result arriving after the lease lapsed and the task was requeued still counts.
    let late = task(h.id, 2);
    s.enqueue_task(&late).unwrap();
    s.lease_tasks(h.id, t(100), 10, 10).unwrap();
    s.requeue_expired(t(200)).unwrap();
    assert_eq!(s.complete_task(h.id, late.task_id, &json!({"ok": true}), t(201)).unwrap().state, TaskState::Completed);
    let events = all_events(&*s).into_iter().filter(|e| e.event.kind == "task.completed").collect::<Vec<_>>();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0].event.job_id, Some(job.job.job_id));
}

/// A completed task's secrets (the MAAS token of `node.hw_sync_reseed`) are erased from the
/// stored envelope; until then it is served byte-exact.
pub fn completed_task_secrets_are_erased(make: Factory<'_>) {
    let s = make();
    let h = host(&*s, "gpu-01");
    let envelope = json!({
        "signed": { "taskId": "x", "kind": { "type": "node.hw_sync_reseed", "maasUrl": "http://maas:5240/MAAS", "systemId": "abc123",
            "consumerKey": "CK-SECRET", "tokenKey": "TK-SECRET", "tokenSecret": "TS-SECRET" } },
        "signatures": []
    })
    .to_string()
    .into_bytes();
    let tk = NewTask { envelope: envelope.clone(), ..task(h.id, 1) };
    s.enqueue_task(&tk).unwrap();
    let leased = s.lease_tasks(h.id, t(10), 60, 10).unwrap();
    assert_eq!(leased[0].task.envelope, envelope, "served byte-exact while live");
    s.complete_task(h.id, tk.task_id, &json!({"outcome": "succeeded"}), t(20)).unwrap();
    let stored = String::from_utf8(s.get_task(tk.task_id).unwrap().unwrap().task.envelope).unwrap();
    assert!(!stored.contains("SECRET"), "{stored}");
    assert!(stored.contains("abc123"), "only the secrets go: {stored}");
}

/// Jobs are created once (a retry returns the same job) and listed by host, state and kind.
pub fn job_create_get_list(make: Factory<'_>) {
    let s = make();
    let h = host(&*s, "gpu-01");
    let new = NewJob {
        job_id: Uuid::new_v4(),
        kind: "decommission".into(),
        host_id: Some(h.id),
        input: json!({"mode": "full"}),
        created_at: t(5),
        request_id: None,
    };
    let job = s.create_job(&new).unwrap();
    assert_eq!((&job.job, job.state, &job.progress, job.updated_at), (&new, JobState::Pending, &json!(null), t(5)));
    assert_eq!(s.create_job(&NewJob { created_at: t(9), ..new.clone() }).unwrap(), job);
    let clash = s.create_job(&NewJob { input: json!({"mode": "partial"}), ..new.clone() });
    assert!(matches!(clash, Err(StoreError::Conflict { .. })), "{clash:?}");
    let ghost = s.create_job(&NewJob { job_id: Uuid::new_v4(), host_id: Some(Uuid::new_v4()), ..new.clone() });
    assert!(matches!(ghost, Err(StoreError::NotFound { .. })), "{ghost:?}");
    let fleetwide = NewJob {
        job_id: Uuid::new_v4(),
        kind: "maintenance".into(),
        host_id: None,
        input: json!([1, 2]),
        created_at: t(6),
        request_id: None,
    };
    s.create_job(&fleetwide).unwrap();
    assert_eq!(s.get_job(fleetwide.job_id).unwrap().map(|j| j.job), Some(fleetwide.clone()));
    assert_eq!(s.get_job(Uuid::new_v4()).unwrap(), None);
    let by_host = s.list_jobs(&JobFilter { host_id: Some(h.id), ..Default::default() }).unwrap();
    assert_eq!(by_host.iter().map(|j| j.job.job_id).collect::<Vec<_>>(), vec![new.job_id]);
    let by_kind = s.list_jobs(&JobFilter { kind: Some("maintenance".into()), ..Default::default() }).unwrap();
    assert_eq!(by_kind.len(), 1);
    assert_eq!(s.list_jobs(&JobFilter::default()).unwrap().len(), 2);
    let created = s.list_events(&EventFilter { job_id: Some(new.job_id), limit: 10, ..Default::default() }).unwrap();
    assert_eq!((created.len(), created[0].event.kind.as_str(), created[0].event.host_id), (1, "job.created", Some(h.id)));
}

/// Job state moves only along legal transitions from the state the caller saw, with events.
pub fn job_state_cas_and_legality(make: Factory<'_>) {
    let s = make();
    let id = Uuid::new_v4();
    s.create_job(&NewJob { job_id: id, kind: "maintenance".into(), host_id: None, input: json!({}), created_at: t(0), request_id: None })
        .unwrap();
    let illegal = s.set_job_state(id, JobState::Pending, JobState::Completed, "skip", t(1));
    assert!(matches!(illegal, Err(StoreError::IllegalTransition { .. })), "{illegal:?}");
    let running = s.set_job_state(id, JobState::Pending, JobState::Running, "started", t(2)).unwrap();
    assert_eq!((running.state, running.updated_at), (JobState::Running, t(2)));
    let stale = s.set_job_state(id, JobState::Pending, JobState::Cancelled, "operator", t(3));
    assert!(matches!(stale, Err(StoreError::StaleState { .. })), "{stale:?}");
    let progress = json!({"stage": "drain", "attempt": 2, "failureClass": null});
    assert_eq!(s.set_job_progress(id, &progress, t(4)).unwrap().progress, progress);
    s.set_job_state(id, JobState::Running, JobState::FailedRetryable, "drain hook failed", t(5)).unwrap();
    assert_eq!(s.list_jobs(&JobFilter { state: Some(JobState::FailedRetryable), ..Default::default() }).unwrap().len(), 1);
    let filter = EventFilter { job_id: Some(id), kind: Some("job.transition".into()), limit: 10, ..Default::default() };
    let reasons: Vec<_> = s.list_events(&filter).unwrap().into_iter().map(|e| e.event.message).collect();
    assert_eq!(reasons, vec!["started", "drain hook failed"]);
    assert!(matches!(s.set_job_state(Uuid::new_v4(), JobState::Pending, JobState::Running, "x", t(1)), Err(StoreError::NotFound { .. })));
    assert!(matches!(s.set_job_progress(Uuid::new_v4(), &progress, t(1)), Err(StoreError::NotFound { .. })));
}
