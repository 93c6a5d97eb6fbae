//! Conformance checks for durable jobs: one step as one compare-and-set transaction, creating
//! work only on a host no other job holds, maintenance requests all-or-nothing, and which jobs
//! hold their hosts for the planner.

use drover_proto::names::RolloutId;
use drover_proto::states::{HostLifecycle, HostRolloutState, JobState};
use serde_json::{Value, json};
use uuid::Uuid;

use super::{Factory, all_events, drive, host, t};
#[allow(unused_imports)]
use crate::imports::*;
use crate::store::*;

const ACTIVE: &[HostLifecycle] = &[HostLifecycle::Enrolling, HostLifecycle::Active];

/// An active host.
fn active(s: &dyn Store, hostname: &str) -> Host {
    drive(s, &host(s, hostname), ACTIVE)
}

fn new_job(kind: &str, host_id: Uuid, at: i64) -> NewJob {
    NewJob { job_id: Uuid::new_v4(), kind: kind.into(), host_id: Some(host_id), input: json!({}), created_at: t(at), request_id: None }
}

/// A step that changes nothing but the progress, from the job as read.
fn step(job: &Job, progress: Value, at: i64) -> JobStep {
    JobStep {
        job_id: job.job.job_id,
        expected_state: job.state,
        expected_progress: job.progress.clone(),
        new_state: job.state,
        new_progress: progress,
        reason: "suite step".into(),
        task: None,
        requeue_task: None,
        host_ops: Vec::new(),
        events: Vec::new(),
        audits: Vec::new(),
        at: t(at),
    }
}

fn audit(target: &str, at: i64) -> NewAudit {
    NewAudit {
        at: t(at),
        actor: "alice".into(),
        role: "operator".into(),
        action: "job.step".into(),
        target: target.into(),
        reason: "suite".into(),
        prior_state: None,
        expected_state: None,
    }
}

fn task_for(job: &Job, at: i64) -> NewTask {
    NewTask {
        task_id: Uuid::new_v4(),
        host_id: job.job.host_id.expect("suite jobs have hosts"),
        job_id: Some(job.job.job_id),
        envelope: format!("{{\"task\":{at}}}").into_bytes(),
        created_at: t(at),
    }
}

fn audit_count(s: &dyn Store) -> usize {
    s.list_audit(&AuditFilter::default()).unwrap().len()
}

/// A job, its tasks, every host, every event and every audit record: what "nothing written"
/// compares.
fn world(s: &dyn Store, job_id: Uuid) -> (Option<Job>, Vec<TaskRecord>, Vec<Host>, usize, usize) {
    (
        s.get_job(job_id).unwrap(),
        s.list_tasks(&TaskFilter::default()).unwrap(),
        s.list_hosts(&HostFilter::default()).unwrap(),
        all_events(s).len(),
        audit_count(s),
    )
}

/// A step whose expected state or progress is stale is refused and writes nothing, whatever
/// else it carries.
pub fn job_step_stale_state_or_progress_writes_nothing(make: Factory<'_>) {
    let s = make();
    let h = active(&*s, "gpu-01");
    let job = s.create_job(&new_job("soft_reset", h.id, 1)).unwrap();
    let job = s.apply_job_step(&JobStep { new_state: JobState::Running, ..step(&job, json!({"stage": "drain"}), 2) }).unwrap();
    assert_eq!((job.state, &job.progress, job.updated_at), (JobState::Running, &json!({"stage": "drain"}), t(2)));
    let before = world(&*s, job.job.job_id);
    let loaded = JobStep {
        task: Some(task_for(&job, 3)),
        host_ops: vec![HostOp::SetSchedulable { host_id: h.id, schedulable: false, reason: "cordon".into() }],
        events: vec![super::note("suite.note", 3)],
        audits: vec![audit("job", 3)],
        ..step(&job, json!({"stage": "scrub"}), 3)
    };
    let stale = s.apply_job_step(&JobStep { expected_state: JobState::Pending, ..loaded.clone() });
    assert!(
        matches!(&stale, Err(StoreError::StaleState { what: "job", expected, actual, .. }) if expected == "pending" && actual == "running"),
        "{stale:?}"
    );
    let stale = s.apply_job_step(&JobStep { expected_progress: json!({"stage": "cordon"}), ..loaded.clone() });
    assert!(matches!(&stale, Err(StoreError::StaleState { .. })), "{stale:?}");
    assert_eq!(stale.unwrap_err().kind(), ErrorKind::Conflict);
    assert_eq!(world(&*s, job.job.job_id), before, "a refused step wrote something");
    let ghost = s.apply_job_step(&JobStep { job_id: Uuid::new_v4(), ..loaded.clone() });
    assert!(matches!(ghost, Err(StoreError::NotFound { .. })), "{ghost:?}");
    // The same step from the current read goes through, all of it.
    let after = s.apply_job_step(&loaded).unwrap();
    assert_eq!(after.progress, json!({"stage": "scrub"}));
    assert!(!s.get_host(h.id).unwrap().unwrap().schedulable);
    assert_eq!(s.list_tasks(&TaskFilter { job_id: Some(job.job.job_id), ..Default::default() }).unwrap().len(), 1);
    assert_eq!(audit_count(&*s), before.4 + 1);
}

/// An illegal job transition is refused and writes nothing; a legal one writes a
/// `job.transition` event with the step's reason.
pub fn job_step_illegal_transition_refused(make: Factory<'_>) {
    let s = make();
    let h = active(&*s, "gpu-01");
    let job = s.create_job(&new_job("soft_reset", h.id, 1)).unwrap();
    let before = world(&*s, job.job.job_id);
    let illegal = s.apply_job_step(&JobStep { new_state: JobState::Completed, ..step(&job, json!({"stage": "done"}), 2) });
    assert!(matches!(illegal, Err(StoreError::IllegalTransition { what: "job", .. })), "{illegal:?}");
    assert_eq!(world(&*s, job.job.job_id), before);
    let running = s
        .apply_job_step(&JobStep { new_state: JobState::Running, reason: "admitted".into(), ..step(&job, json!({"stage": "drain"}), 3) })
        .unwrap();
    assert_eq!(running.state, JobState::Running);
    let events = s.list_events(&EventFilter { job_id: Some(job.job.job_id), kind: Some("job.transition".into()), ..Default::default() });
    let events = events.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!((events[0].event.message.as_str(), &events[0].event.data), ("admitted", &json!({"from": "pending", "to": "running"})));
    // A step without a transition writes no transition event.
    s.apply_job_step(&step(&running, json!({"stage": "scrub"}), 4)).unwrap();
    let n = s.list_events(&EventFilter { kind: Some("job.transition".into()), ..Default::default() }).unwrap().len();
    assert_eq!(n, 1);
}

/// A step enqueues its task and requeues a leased one in the same transaction; a task of
/// another job, a completed task, or a task not naming the job is refused with nothing written.
pub fn job_step_enqueues_and_requeues_tasks(make: Factory<'_>) {
    let s = make();
    let h = active(&*s, "gpu-01");
    let job = s.create_job(&new_job("maintenance", h.id, 1)).unwrap();
    let first = task_for(&job, 2);
    let job = s
        .apply_job_step(&JobStep { new_state: JobState::Running, task: Some(first.clone()), ..step(&job, json!({"stage": "scrub"}), 2) })
        .unwrap();
    let leased = s.lease_tasks(h.id, t(3), 600, 8).unwrap();
    assert_eq!((leased.len(), leased[0].attempts), (1, 1));
    // Retry the stage: requeue the leased task and enqueue a second one, in one step.
    let second = task_for(&job, 4);
    let job = s
        .apply_job_step(&JobStep {
            task: Some(second.clone()),
            requeue_task: Some(first.task_id),
            ..step(&job, json!({"stage": "scrub", "attempt": 2}), 4)
        })
        .unwrap();
    let rec = s.get_task(first.task_id).unwrap().unwrap();
    assert_eq!((rec.state, rec.lease_expires_at, rec.attempts), (TaskState::Queued, None, 1), "requeue must keep attempts");
    assert_eq!(s.get_task(second.task_id).unwrap().map(|r| r.state), Some(TaskState::Queued));
    // Requeueing a queued task changes nothing.
    let job = s.apply_job_step(&JobStep { requeue_task: Some(first.task_id), ..step(&job, json!({"stage": "wait"}), 5) }).unwrap();
    assert_eq!(s.get_task(first.task_id).unwrap().map(|r| (r.state, r.attempts)), Some((TaskState::Queued, 1)));

    let before = world(&*s, job.job.job_id);
    let foreign = NewTask { job_id: None, ..task_for(&job, 6) };
    let r = s.apply_job_step(&JobStep { task: Some(foreign), ..step(&job, json!({"x": 1}), 6) });
    assert!(matches!(r, Err(StoreError::Invalid { .. })), "{r:?}");
    let other = s.create_job(&new_job("storage_cleanup", h.id, 6)).unwrap();
    let others_task = task_for(&other, 6);
    s.enqueue_task(&others_task).unwrap();
    let before = (before.0, before.2, before.4);
    let r = s.apply_job_step(&JobStep { requeue_task: Some(others_task.task_id), ..step(&job, json!({"x": 1}), 7) });
    assert!(matches!(r, Err(StoreError::Conflict { .. })), "{r:?}");
    s.lease_tasks(h.id, t(8), 600, 8).unwrap();
    s.complete_task(h.id, second.task_id, &json!({"ok": true}), t(9)).unwrap();
    let r = s.apply_job_step(&JobStep { requeue_task: Some(second.task_id), ..step(&job, json!({"x": 1}), 10) });
    assert!(matches!(r, Err(StoreError::Conflict { .. })), "{r:?}");
    assert_eq!(s.get_task(second.task_id).unwrap().map(|r| r.state), Some(TaskState::Completed));
    let now = world(&*s, job.job.job_id);
    assert_eq!((now.0, now.2, now.4), before, "a refused step wrote something");
}

/// Host ops apply in order with the lifecycle's CAS and legality and their events; a redispatch
/// marks the host `Skipped` unless the rollout engine owns it.
pub fn job_step_host_ops_apply_with_events(make: Factory<'_>) {
    let s = make();
    let h = active(&*s, "gpu-01");
    let job = s.create_job(&new_job("decommission", h.id, 1)).unwrap();
    let rollout = RolloutId::parse("prod@c1").expect("id");
    active(&*s, "gpu-02");
    let host_state = |hostname: &str, from, to| PlanOp::HostState {
        rollout_id: rollout.clone(),
        hostname: hostname.into(),
        wave_index: 0,
        from,
        to,
        intent_target: None,
    };
    use HostRolloutState as H;
    let ops = vec![
        PlanOp::OpenRollout { rollout_id: rollout.clone(), manifest_sha256: "a".repeat(64) },
        host_state("gpu-01", H::Pending, H::Activating),
        host_state("gpu-01", H::Activating, H::Soaking),
        host_state("gpu-01", H::Soaking, H::Converged),
        host_state("gpu-02", H::Pending, H::Activating),
    ];
    s.apply_plan(&PlanWrite { at: t(1), ops, events: vec![] }, &[]).unwrap();
    let events_before = all_events(&*s).len();
    let why = "decommission: drain".to_string();
    let after = s
        .apply_job_step(&JobStep {
            new_state: JobState::Running,
            host_ops: vec![
                HostOp::SetSchedulable { host_id: h.id, schedulable: false, reason: why.clone() },
                HostOp::Transition { host_id: h.id, from: HostLifecycle::Active, to: HostLifecycle::Draining, reason: why.clone() },
                HostOp::Transition { host_id: h.id, from: HostLifecycle::Draining, to: HostLifecycle::Retired, reason: why.clone() },
                HostOp::Redispatch { rollout_id: rollout.clone(), hostname: "gpu-01".into() },
                HostOp::Redispatch { rollout_id: rollout.clone(), hostname: "gpu-02".into() },
                HostOp::Redispatch { rollout_id: rollout.clone(), hostname: "never-listed".into() },
            ],
            ..step(&job, json!({"stage": "retire"}), 5)
        })
        .unwrap();
    assert_eq!(after.state, JobState::Running);
    let host = s.get_host(h.id).unwrap().unwrap();
    assert_eq!((host.state, host.schedulable), (HostLifecycle::Retired, false));
    let rows = s.list_host_rollouts(&rollout).unwrap();
    let by_name = |n: &str| rows.iter().find(|r| r.hostname == n).map(|r| (r.state, r.since));
    assert_eq!(by_name("gpu-01"), Some((H::Skipped, t(5))), "a converged host is redispatched");
    assert_eq!(by_name("gpu-02"), Some((H::Activating, t(1))), "an activating host belongs to the rollout engine");
    assert_eq!(rows.len(), 2, "a missing row is not created");
    let kinds: Vec<String> = all_events(&*s).into_iter().skip(events_before).map(|e| e.event.kind).collect();
    assert_eq!(kinds, ["job.transition", "host.schedulable", "host.transition", "host.transition", "rollout.host"]);
    let transitions = s.list_events(&EventFilter { host_id: Some(h.id), kind: Some("host.transition".into()), ..Default::default() });
    assert!(transitions.unwrap().iter().rev().take(2).all(|e| e.event.message == why));
}

/// A host op that fails (stale or illegal) rolls back the whole step: the job's state and
/// progress, the task, the host ops before it, the events and audits.
pub fn job_step_failing_host_op_rolls_back_everything(make: Factory<'_>) {
    let s = make();
    let h = active(&*s, "gpu-01");
    let job = s.create_job(&new_job("decommission", h.id, 1)).unwrap();
    let before = world(&*s, job.job.job_id);
    let doomed = |last: HostOp| JobStep {
        new_state: JobState::Running,
        task: Some(task_for(&job, 2)),
        host_ops: vec![
            HostOp::SetSchedulable { host_id: h.id, schedulable: false, reason: "cordon".into() },
            HostOp::Transition { host_id: h.id, from: HostLifecycle::Active, to: HostLifecycle::Draining, reason: "drain".into() },
            last,
        ],
        events: vec![super::note("suite.note", 2)],
        audits: vec![audit("job", 2)],
        ..step(&job, json!({"stage": "drain"}), 2)
    };
    let stale = HostOp::Transition { host_id: h.id, from: HostLifecycle::Active, to: HostLifecycle::Quarantined, reason: "x".into() };
    let r = s.apply_job_step(&doomed(stale));
    assert!(matches!(r, Err(StoreError::StaleState { what: "host", .. })), "{r:?}");
    assert_eq!(world(&*s, job.job.job_id), before, "a failed host op left part of the step behind");
    let illegal = HostOp::Transition { host_id: h.id, from: HostLifecycle::Draining, to: HostLifecycle::Deleted, reason: "x".into() };
    let r = s.apply_job_step(&doomed(illegal));
    assert!(matches!(r, Err(StoreError::IllegalTransition { .. })), "{r:?}");
    assert_eq!(world(&*s, job.job.job_id), before);
    let ghost = HostOp::SetSchedulable { host_id: Uuid::new_v4(), schedulable: true, reason: "x".into() };
    let r = s.apply_job_step(&doomed(ghost));
    assert!(matches!(r, Err(StoreError::NotFound { .. })), "{r:?}");
    assert_eq!(world(&*s, job.job.job_id), before);
}

/// `create_job_checked` (and `check_job_start`, its checks alone) refuses a missing host, a
/// host in a state not allowed, and a host an unfinished job holds — naming that job, its kind
/// and state — and writes nothing; a finished job holds nothing; a retry returns the stored job.
pub fn job_checked_create_refuses_held_host_naming_the_job(make: Factory<'_>) {
    let s = make();
    let h = active(&*s, "gpu-01");
    let allowed = [HostLifecycle::Active];
    let holder = s.create_job(&new_job("soft_reset", h.id, 1)).unwrap();
    s.set_job_state(holder.job.job_id, JobState::Pending, JobState::Running, "go", t(2)).unwrap();
    let retired = drive(&*s, &active(&*s, "gpu-02"), &[HostLifecycle::Draining, HostLifecycle::Retired]);
    let before = (all_events(&*s).len(), audit_count(&*s), s.list_jobs(&JobFilter::default()).unwrap().len());
    let new = new_job("storage_cleanup", h.id, 3);
    let dry = s.check_job_start(h.id, &allowed);
    assert!(matches!(&dry, Err(StoreError::Conflict { message, .. }) if message.contains("held by job")), "{dry:?}");
    let r = s.create_job_checked(&new, &allowed, &[audit("job", 3)]);
    match &r {
        Err(StoreError::Conflict { what: "host", id, message }) => {
            assert_eq!(id, &h.id.to_string());
            let want = format!("host gpu-01 is held by job {} (soft_reset, running)", holder.job.job_id);
            assert_eq!(message, &want);
        }
        other => panic!("a held host was not refused: {other:?}"),
    }
    let ghost = s.create_job_checked(&NewJob { host_id: Some(Uuid::new_v4()), ..new.clone() }, &allowed, &[]);
    assert!(matches!(ghost, Err(StoreError::NotFound { .. })), "{ghost:?}");
    let r = s.create_job_checked(&new_job("storage_cleanup", retired.id, 3), &allowed, &[]);
    assert!(matches!(&r, Err(StoreError::Conflict { message, .. }) if message.contains("gpu-02") && message.contains("retired")), "{r:?}");
    assert!(matches!(s.check_job_start(Uuid::new_v4(), &allowed), Err(StoreError::NotFound { .. })));
    assert!(matches!(s.check_job_start(retired.id, &allowed), Err(StoreError::Conflict { message, .. }) if message.contains("retired")));
    let hostless = s.create_job_checked(&NewJob { host_id: None, ..new.clone() }, &allowed, &[]);
    assert!(matches!(hostless, Err(StoreError::Invalid { .. })), "{hostless:?}");
    assert_eq!(before, (all_events(&*s).len(), audit_count(&*s), s.list_jobs(&JobFilter::default()).unwrap().len()));

    s.set_job_state(holder.job.job_id, JobState::Running, JobState::Completed, "done", t(4)).unwrap();
    s.check_job_start(h.id, &allowed).expect("a finished job holds nothing");
    let job = s.create_job_checked(&new, &allowed, &[audit("job", 5)]).unwrap();
    assert_eq!((job.state, &job.job), (JobState::Pending, &new));
    assert_eq!(audit_count(&*s), before.1 + 1);
    assert_eq!(s.create_job_checked(&new, &allowed, &[audit("job", 6)]).unwrap(), job, "a retry returns the stored job");
    assert_eq!(audit_count(&*s), before.1 + 1, "a retry audits again");
    let unfinished = s.list_jobs(&JobFilter { host_id: Some(h.id), unfinished: true, ..Default::default() }).unwrap();
    assert_eq!(unfinished.iter().map(|j| j.job.job_id).collect::<Vec<_>>(), vec![new.job_id]);
}

fn maintenance(hosts: &[&Host], at: i64) -> NewMaintenance {
    let request_id = Uuid::new_v4();
    NewMaintenance {
        request_id,
        initiator: "alice".into(),
        reason: "quarterly scrub".into(),
        scope: json!({ "hosts": hosts.iter().map(|h| h.hostname.clone()).collect::<Vec<_>>() }),
        activities: json!(["gpu_scrub", "validate_clean"]),
        created_at: t(at),
        jobs: hosts.iter().map(|h| NewJob { request_id: Some(request_id), ..new_job("maintenance", h.id, at) }).collect(),
        audits: vec![audit(&request_id.to_string(), at)],
    }
}

/// Jobs and maintenance requests page by (creation time, id): pages of two cover every row
/// once, in order, ties on the creation time broken by id; a filter holds across pages; a
/// limit of 0 reads everything.
pub fn jobs_and_maintenance_page_by_creation_then_id_and_count(make: Factory<'_>) {
    let s = make();
    let hosts: Vec<Host> = (0..5).map(|i| active(s.as_ref(), &format!("gpu-p-{i}"))).collect();
    // Two share a creation time: the id orders them.
    let ats = [20, 10, 10, 30, 15];
    for (h, at) in hosts.iter().zip(ats) {
        s.create_job(&new_job(if at == 30 { "reimage" } else { "soft_reset" }, h.id, at)).unwrap();
    }
    let all = s.list_jobs(&JobFilter::default()).unwrap();
    let mut want: Vec<(Time, Uuid)> = all.iter().map(|j| (j.job.created_at, j.job.job_id)).collect();
    want.sort();
    assert_eq!(all.iter().map(|j| (j.job.created_at, j.job.job_id)).collect::<Vec<_>>(), want);
    let pages = |kind: Option<&str>| {
        let (mut seen, mut after) = (Vec::new(), None);
        loop {
            let f = JobFilter { kind: kind.map(str::to_owned), after, limit: 2, ..Default::default() };
            let page = s.list_jobs(&f).unwrap();
            assert!(page.len() <= 2);
            seen.extend(page.iter().map(|j| (j.job.created_at, j.job.job_id)));
            match page.last() {
                Some(j) if page.len() == 2 => after = Some(CreatedCursor { created_at: j.job.created_at, id: j.job.job_id }),
                _ => return seen,
            }
        }
    };
    assert_eq!(pages(None), want);
    assert_eq!(pages(Some("soft_reset")).len(), 4);
    let counts = s.count_jobs().unwrap();
    let pending = JobState::Pending;
    assert_eq!(
        counts,
        vec![
            JobCount { kind: "reimage".into(), state: pending, count: 1 },
            JobCount { kind: "soft_reset".into(), state: pending, count: 4 }
        ],
        "counted by kind and state, in that order"
    );

    let free: Vec<Host> = (0..3).map(|i| active(s.as_ref(), &format!("gpu-m-{i}"))).collect();
    let requests: Vec<NewMaintenance> = free.iter().zip([30, 10, 10]).map(|(h, at)| maintenance(&[h], at)).collect();
    for r in &requests {
        s.create_maintenance(r, ACTIVE).unwrap();
    }
    let mut want: Vec<(Time, Uuid)> = requests.iter().map(|r| (r.created_at, r.request_id)).collect();
    want.sort();
    let first = s.list_maintenance(&MaintenanceFilter { after: None, limit: 2 }).unwrap();
    let last = first.last().unwrap();
    let rest = s
        .list_maintenance(&MaintenanceFilter { after: Some(CreatedCursor { created_at: last.created_at, id: last.request_id }), limit: 2 })
        .unwrap();
    let paged: Vec<(Time, Uuid)> = first.iter().chain(&rest).map(|r| (r.created_at, r.request_id)).collect();
    assert_eq!(paged, want);
    assert_eq!(s.list_maintenance(&MaintenanceFilter::default()).unwrap().len(), 3);
}

/// One refused host refuses the whole request: no request row, no jobs, no events, no audits,
/// no superseded job; the error names the first offending host by id and hostname.
pub fn maintenance_all_or_nothing_refusal_leaves_no_host_changed(make: Factory<'_>) {
    let s = make();
    let a = active(&*s, "gpu-a");
    let b = active(&*s, "gpu-b");
    let c = active(&*s, "gpu-c");
    let d = active(&*s, "gpu-d");
    // a carries a failed maintenance job the request would supersede; b and d are busy.
    let failed = s.create_job(&new_job("maintenance", a.id, 1)).unwrap();
    s.set_job_state(failed.job.job_id, JobState::Pending, JobState::Running, "go", t(1)).unwrap();
    s.set_job_state(failed.job.job_id, JobState::Running, JobState::FailedRetryable, "scrub failed", t(1)).unwrap();
    let busy = s.create_job(&new_job("decommission", b.id, 1)).unwrap();
    s.create_job(&new_job("decommission", d.id, 1)).unwrap();
    let snapshot = |s: &dyn Store| {
        (s.list_jobs(&JobFilter::default()).unwrap(), s.list_hosts(&HostFilter::default()).unwrap(), all_events(s).len(), audit_count(s))
    };
    let before = snapshot(&*s);
    let req = maintenance(&[&a, &b, &c, &d], 2);
    match s.create_maintenance(&req, &[HostLifecycle::Active]) {
        Err(StoreError::Conflict { what: "host", id, message }) => {
            assert_eq!(id, b.id.to_string(), "not the first offending host");
            assert!(message.contains("gpu-b") && message.contains(&busy.job.job_id.to_string()), "{message}");
        }
        other => panic!("a request over a held host was not refused: {other:?}"),
    }
    assert_eq!(snapshot(&*s), before, "a refused request wrote something");
    assert_eq!(s.get_maintenance(req.request_id).unwrap(), None);
    assert!(s.list_maintenance(&Default::default()).unwrap().is_empty());
    // A host in a state not allowed, or missing, refuses it too.
    let quarantined = s.transition_host(c.id, HostLifecycle::Active, HostLifecycle::Quarantined, "suite", t(2)).unwrap();
    let r = s.create_maintenance(&maintenance(&[&a, &quarantined], 3), &[HostLifecycle::Active]);
    assert!(
        matches!(&r, Err(StoreError::Conflict { id, message, .. }) if *id == c.id.to_string() && message.contains("quarantined")),
        "{r:?}"
    );
    let ghost = Host { id: Uuid::new_v4(), ..a.clone() };
    let r = s.create_maintenance(&maintenance(&[&a, &ghost], 3), &[HostLifecycle::Active]);
    assert!(matches!(r, Err(StoreError::NotFound { .. })), "{r:?}");
    let mut twice = maintenance(&[&a, &a], 3);
    twice.jobs[1].job_id = Uuid::new_v4();
    assert!(matches!(s.create_maintenance(&twice, &[HostLifecycle::Active]), Err(StoreError::Invalid { .. })));
    let mut stray = maintenance(&[&a], 3);
    stray.jobs[0].request_id = None;
    assert!(matches!(s.create_maintenance(&stray, &[HostLifecycle::Active]), Err(StoreError::Invalid { .. })));
    assert_eq!(s.list_jobs(&JobFilter::default()).unwrap(), before.0);
    assert!(s.list_maintenance(&Default::default()).unwrap().is_empty());
}

/// A failed maintenance job does not hold its host against a new request: it is cancelled with
/// a `job.transition` event naming the request, in the same transaction that creates the new
/// jobs; the request, its jobs and audits are stored, and a retry returns them.
pub fn maintenance_supersedes_failed_maintenance_job(make: Factory<'_>) {
    let s = make();
    let a = active(&*s, "gpu-a");
    let b = active(&*s, "gpu-b");
    let old = s.create_job(&new_job("maintenance", a.id, 1)).unwrap();
    s.set_job_state(old.job.job_id, JobState::Pending, JobState::FailedManualIntervention, "blocked", t(1)).unwrap();
    let audits = audit_count(&*s);
    let req = maintenance(&[&a, &b], 5);
    let (record, jobs) = s.create_maintenance(&req, &[HostLifecycle::Active]).unwrap();
    let want = MaintenanceRecord {
        request_id: req.request_id,
        initiator: req.initiator.clone(),
        reason: req.reason.clone(),
        scope: req.scope.clone(),
        activities: req.activities.clone(),
        created_at: t(5),
    };
    assert_eq!(record, want);
    assert_eq!(
        jobs.iter().map(|j| (&j.job, j.state)).collect::<Vec<_>>(),
        req.jobs.iter().map(|j| (j, JobState::Pending)).collect::<Vec<_>>()
    );
    assert_eq!(s.get_maintenance(req.request_id).unwrap(), Some(want.clone()));
    assert_eq!(s.list_maintenance(&Default::default()).unwrap(), vec![want.clone()]);
    assert_eq!(audit_count(&*s), audits + 1);
    let superseded = s.get_job(old.job.job_id).unwrap().unwrap();
    assert_eq!(superseded.state, JobState::Cancelled);
    let events = s.list_events(&EventFilter { job_id: Some(old.job.job_id), kind: Some("job.transition".into()), ..Default::default() });
    let last = events.unwrap().pop().expect("a transition event");
    assert_eq!(last.event.message, format!("superseded by maintenance request {}", req.request_id));
    assert_eq!(last.event.data, json!({"from": "failed_manual_intervention", "to": "cancelled"}));
    let mut of_request = s.list_jobs(&JobFilter { request_id: Some(req.request_id), ..Default::default() }).unwrap();
    of_request.sort_by_key(|j| req.jobs.iter().position(|n| n.job_id == j.job.job_id));
    assert_eq!(of_request, jobs);
    let created = s.list_events(&EventFilter { kind: Some("job.created".into()), ..Default::default() }).unwrap();
    assert!(jobs.iter().all(|j| created.iter().any(|e| e.event.job_id == Some(j.job.job_id))));
    // A retry of the same request returns what is stored; other content under the id conflicts.
    assert_eq!(s.create_maintenance(&req, &[HostLifecycle::Active]).unwrap(), (want, jobs));
    assert_eq!(audit_count(&*s), audits + 1);
    let clash = s.create_maintenance(&NewMaintenance { reason: "other".into(), ..req.clone() }, &[HostLifecycle::Active]);
    assert!(matches!(clash, Err(StoreError::Conflict { .. })), "{clash:?}");
    // A later request finds the new (pending) jobs holding the hosts.
    let later = s.create_maintenance(&maintenance(&[&b], 6), &[HostLifecycle::Active]);
    assert!(matches!(later, Err(StoreError::Conflict { .. })), "{later:?}");
}

/// A running maintenance job (or a failed job of another kind) still holds its host.
pub fn maintenance_refuses_running_maintenance_job(make: Factory<'_>) {
    let s = make();
    let a = active(&*s, "gpu-a");
    let b = active(&*s, "gpu-b");
    let running = s.create_job(&new_job("maintenance", a.id, 1)).unwrap();
    s.set_job_state(running.job.job_id, JobState::Pending, JobState::Running, "go", t(1)).unwrap();
    let failed_other = s.create_job(&new_job("storage_cleanup", b.id, 1)).unwrap();
    s.set_job_state(failed_other.job.job_id, JobState::Pending, JobState::Running, "go", t(1)).unwrap();
    s.set_job_state(failed_other.job.job_id, JobState::Running, JobState::FailedRetryable, "x", t(1)).unwrap();
    let r = s.create_maintenance(&maintenance(&[&a], 2), &[HostLifecycle::Active]);
    let want = format!("host gpu-a is held by job {} (maintenance, running)", running.job.job_id);
    assert!(matches!(&r, Err(StoreError::Conflict { message, .. }) if *message == want), "{r:?}");
    let r = s.create_maintenance(&maintenance(&[&b], 2), &[HostLifecycle::Active]);
    assert!(matches!(&r, Err(StoreError::Conflict { message, .. }) if message.contains("storage_cleanup")), "{r:?}");
    assert_eq!(s.get_job(running.job.job_id).unwrap().map(|j| j.state), Some(JobState::Running));
    assert_eq!(s.get_job(failed_other.job.job_id).unwrap().map(|j| j.state), Some(JobState::FailedRetryable));
    assert!(s.list_maintenance(&Default::default()).unwrap().is_empty());
}

/// The planner's `held` counts started, unfinished jobs only: not pending ones (they have not
/// taken the host out of service), not ones in the `activate` stage (the rollout engine owns
/// the host then), not finished ones.
pub fn plan_snapshot_held_excludes_pending_and_activate(make: Factory<'_>) {
    let s = make();
    let pending = active(&*s, "gpu-pending");
    let activating = active(&*s, "gpu-activate");
    let running = active(&*s, "gpu-running");
    let failed = active(&*s, "gpu-failed");
    let done = active(&*s, "gpu-done");
    s.create_job(&new_job("maintenance", pending.id, 1)).unwrap();
    let start = |h: &Host, progress: Value| {
        let job = s.create_job(&new_job("maintenance", h.id, 1)).unwrap();
        s.apply_job_step(&JobStep { new_state: JobState::Running, ..step(&job, progress, 2) }).unwrap()
    };
    let act = start(&activating, json!({"stage": "activate"}));
    let run = start(&running, json!({"stage": "scrub"}));
    let fail = start(&failed, json!({"stage": "activate"}));
    s.apply_job_step(&JobStep { new_state: JobState::FailedRetryable, ..step(&fail, fail.progress.clone(), 3) }).unwrap();
    let fin = start(&done, json!({"stage": "scrub"}));
    s.apply_job_step(&JobStep { new_state: JobState::Completed, ..step(&fin, json!({"stage": "done"}), 3) }).unwrap();
    let held = s.plan_snapshot().unwrap().held;
    let mut want = vec![running.id, failed.id];
    want.sort();
    assert_eq!(held.keys().copied().collect::<Vec<_>>(), want);
    assert!(held[&running.id].contains(&run.job.job_id.to_string()) && held[&running.id].contains("running"));
    // Leaving the activate stage takes the host back.
    s.apply_job_step(&step(&act, json!({"stage": "validate"}), 4)).unwrap();
    assert!(s.plan_snapshot().unwrap().held.contains_key(&activating.id));
}
