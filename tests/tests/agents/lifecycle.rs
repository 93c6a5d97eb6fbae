//! Host lifecycle end to end: the admin verbs over real mTLS (`curl`, and the `drover host`
//! binary once), their guardrails (only legal transitions, nothing written when refused, no
//! reactivation after removal, a removed host's certificate no longer connects), their audit
//! rows, the roles allowed to call them, and `offline` after silence (the manual clock and a
//! direct call to the reconciler's step) with the return to `active` on the next check-in.
//!
//! `retire` and `remove` are carried out by their jobs: here a simulated agent (the real
//! protocol and task rules, `drover_tests::sim_agent`) runs the drain and the uninstall, and
//! each test waits (bounded) for the job to finish. `lifecycle_tasks.rs` runs them on the real
//! agent.
//!
//! Refused verbs leave no audit row: the audit records accepted operator actions; refusals are
//! answered (409 with the guardrail) and logged, and change nothing.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use drover_engine::api::lifecycle::mark_silent_hosts_offline;
use drover_engine::app::Clock as _;
use drover_engine::store::{AuditFilter, AuditRecord, CertKind, EventFilter, JobFilter, NewCert, TaskFilter};
use drover_proto::states::{HostLifecycle, JobState};
use drover_tests::Harness;
use drover_tests::sim_agent::{Behaviour, SimAgent};
use serde_json::Value;
use uuid::Uuid;

/// The bound on every wait for a job.
const WAIT: Duration = Duration::from_secs(60);

/// A host in the store with a recorded certificate, driven to `active` as enrollment and a
/// first check-in would.
fn active_host(h: &Harness, hostname: &str) -> (Uuid, (PathBuf, PathBuf)) {
    let (id, cert, serial) = h.host_credentials(hostname);
    let store = &h.running.app.store;
    let now = h.clock.now();
    store
        .record_cert(&NewCert {
            serial,
            kind: CertKind::Host,
            host_id: Some(id),
            subject: hostname.into(),
            not_before: now,
            not_after: now.plus_secs(86_400),
        })
        .expect("record cert");
    store.transition_host(id, HostLifecycle::BootstrapIssued, HostLifecycle::Enrolling, "test enroll", now).expect("enrolling");
    store.transition_host(id, HostLifecycle::Enrolling, HostLifecycle::Active, "test check-in", now).expect("active");
    (id, cert)
}

fn reason(text: &str) -> String {
    serde_json::json!({ "reason": text }).to_string()
}

/// `POST /v1/hosts/{id}/{verb}` as the admin; returns (status, JSON body).
async fn verb(h: &Harness, id: Uuid, verb: &str, why: &str) -> (String, Value) {
    let (code, body) = h.call(Some(&h.admin), "POST", &format!("/v1/hosts/{id}/{verb}"), Some(&reason(why))).await;
    let json = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{verb}: not JSON ({e}): {body:?}"));
    (code, json)
}

fn state(h: &Harness, id: Uuid) -> HostLifecycle {
    h.running.app.store.get_host(id).expect("store").expect("host").state
}

fn audit(h: &Harness, id: Uuid) -> Vec<AuditRecord> {
    h.running.app.store.list_audit(&AuditFilter { target: Some(id.to_string()), ..AuditFilter::default() }).expect("audit")
}

fn transitions(h: &Harness, id: Uuid) -> Vec<String> {
    let events = h
        .running
        .app
        .store
        .list_events(&EventFilter { host_id: Some(id), kind: Some("host.transition".into()), ..EventFilter::default() })
        .expect("events");
    events.into_iter().map(|e| e.event.message).collect()
}

/// A simulated agent for a host [`active_host`] made: it runs the tasks it is handed (the
/// drain, the uninstall) and reports them with its next check-in.
fn sim_agent(h: &Harness, id: Uuid, hostname: &str, (cert, key): &(PathBuf, PathBuf)) -> SimAgent {
    let trust = std::fs::read(&h.trust.0).expect("trust");
    let director = std::fs::read_to_string(h.dir.path().join("state").join("director.pub")).expect("director.pub");
    SimAgent::new(&h.url, &h.ca, (cert, key), hostname, id, &trust, &director, Behaviour::Healthy)
}

/// The job a `retire` / `remove` answer names.
fn job_of(body: &Value) -> Uuid {
    Uuid::parse_str(body["jobId"].as_str().unwrap_or_else(|| panic!("no jobId: {body}"))).expect("jobId is a UUID")
}

/// Drives `job` until it stops (bounded): the agent checks in (taking its tasks, reporting
/// their results) and the executor ticks. A check-in refused once the host is deleted (its
/// certificate revoked) is expected, so check-in errors are left to the job's outcome.
async fn run_job(h: &Harness, agent: &mut SimAgent, job: Uuid) -> JobState {
    let app = h.running.app.clone();
    let deadline = Instant::now() + WAIT;
    loop {
        let _ = agent.step(h.clock.now()).await;
        app.executor.tick_now(&app).await.expect("tick");
        let state = app.store.get_job(job).expect("store").expect("job").state;
        if !matches!(state, JobState::Pending | JobState::Running | JobState::Compensating) {
            return state;
        }
        assert!(Instant::now() < deadline, "job {job} still {state} after {WAIT:?}");
    }
}

async fn checkin(h: &Harness, cert: &(PathBuf, PathBuf)) -> String {
    let body = serde_json::json!({ "agentVersion": "t", "bootId": "b" }).to_string();
    h.call(Some(cert), "POST", "/v1/agent/checkin", Some(&body)).await.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quarantine_then_unquarantine() {
    let h = Harness::start().await;
    let (id, _) = active_host(&h, "gpu-q");
    let (code, body) = verb(&h, id, "quarantine", "ECC errors on GPU 3").await;
    assert_eq!(code, "200", "{body}");
    assert_eq!(body["state"], "quarantined");
    assert_eq!(body["hostId"], id.to_string());
    assert_eq!(body["hostname"], "gpu-q");
    // What a scheduler reads: a quarantined host is never schedulable, and cannot be made so.
    assert_eq!(body["schedulable"], false);
    assert_eq!(state(&h, id), HostLifecycle::Quarantined);
    let (code, body) = verb(&h, id, "uncordon", "let tenants back").await;
    assert_eq!(code, "409", "{body}");
    assert!(body.to_string().contains("unquarantine it first"), "{body}");
    let (code, body) = verb(&h, id, "unquarantine", "GPU 3 replaced").await;
    assert_eq!(code, "200", "{body}");
    assert_eq!(body["state"], "active");
    // Back in service but still cordoned: taking tenants again is the operator's own step.
    assert_eq!(body["schedulable"], false);
    let (code, body) = verb(&h, id, "uncordon", "GPU 3 replaced and tested").await;
    assert_eq!((code.as_str(), body["schedulable"].as_bool()), ("200", Some(true)), "{body}");
    // One event per transition, each carrying the operator's reason.
    let events = transitions(&h, id);
    assert!(events.iter().any(|m| m.contains("ECC errors on GPU 3")), "{events:?}");
    assert!(events.iter().any(|m| m.contains("GPU 3 replaced")), "{events:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retire_then_reactivate_and_audit_rows_carry_everything() {
    let h = Harness::start_with_long_poll(1).await;
    let (id, cert) = active_host(&h, "gpu-r");
    let mut agent = sim_agent(&h, id, "gpu-r", &cert);
    let before = transitions(&h, id).len();
    let (code, body) = verb(&h, id, "retire", "end of lease").await;
    assert_eq!(code, "200", "{body}");
    // The verb puts the host into draining and hands it to its job.
    assert_eq!(body["state"], "draining", "{body}");
    let job = job_of(&body);
    assert_eq!(run_job(&h, &mut agent, job).await, JobState::Completed);
    assert_eq!(state(&h, id), HostLifecycle::Retired);
    // Through draining: two transitions, two events — the operator's reason on the first, the
    // job that drained the host on the second.
    let events = transitions(&h, id);
    assert_eq!(events.len(), before + 2, "{events:?}");
    assert!(events[before].contains("end of lease"), "{events:?}");
    assert!(events[before + 1].contains(&job.to_string()), "{events:?}");
    // The job drained through the agent: one node.drain task, run by it.
    let tasks = h.running.app.store.list_tasks(&TaskFilter { job_id: Some(job), ..Default::default() }).expect("tasks");
    assert_eq!(tasks.len(), 1, "{tasks:?}");
    assert_eq!(agent.tasks_run, [tasks[0].task.task_id.to_string()]);
    let (code, body) = verb(&h, id, "reactivate", "lease renewed").await;
    assert_eq!(code, "200", "{body}");
    assert_eq!(body["state"], "active");
    assert!(body.get("jobId").is_none(), "reactivate is a plain transition: {body}");

    let rows = audit(&h, id);
    let find = |action: &str| rows.iter().find(|r| r.audit.action == action).unwrap_or_else(|| panic!("no {action} audit row: {rows:?}"));
    let retire = &find("host.retire").audit;
    assert_eq!(retire.actor, "alice");
    assert_eq!(retire.role, "admin");
    assert_eq!(retire.target, id.to_string());
    assert_eq!(retire.reason, "end of lease");
    assert_eq!(retire.prior_state.as_deref(), Some("active"));
    assert_eq!(retire.expected_state.as_deref(), Some("retired"));
    let reactivate = &find("host.reactivate").audit;
    assert_eq!((reactivate.prior_state.as_deref(), reactivate.expected_state.as_deref()), (Some("retired"), Some("active")));
    // The job's creation is audited on the job, as the jobs API audits its jobs.
    let on_job = h.running.app.store.list_audit(&AuditFilter { target: Some(job.to_string()), ..AuditFilter::default() }).expect("audit");
    assert_eq!(on_job.iter().map(|r| r.audit.action.as_str()).collect::<Vec<_>>(), ["job.retire"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removed_host_is_revoked_and_never_reactivated() {
    let h = Harness::start_with_long_poll(1).await;
    let (id, cert) = active_host(&h, "gpu-x");
    assert_eq!(checkin(&h, &cert).await, "200");
    let mut agent = sim_agent(&h, id, "gpu-x", &cert);
    // Only a retired host can be removed.
    let (code, body) = verb(&h, id, "remove", "decommission").await;
    assert_eq!(code, "409", "{body}");
    assert!(body["error"]["message"].as_str().unwrap_or_default().contains("retire"), "{body}");
    assert_eq!(state(&h, id), HostLifecycle::Active);

    let (code, body) = verb(&h, id, "retire", "decommission").await;
    assert_eq!(code, "200", "{body}");
    assert_eq!(run_job(&h, &mut agent, job_of(&body)).await, JobState::Completed);
    let (code, body) = verb(&h, id, "remove", "decommission").await;
    assert_eq!(code, "200", "{body}");
    assert_eq!(body["state"], "removing", "{body}");
    let job = job_of(&body);
    // Not deleted before the agent's uninstall has run and reported.
    assert!(h.running.app.store.list_certs(Some(id)).expect("certs").iter().all(|c| c.revoked.is_none()));
    assert_eq!(run_job(&h, &mut agent, job).await, JobState::Completed);
    assert_eq!(state(&h, id), HostLifecycle::Deleted);
    let tasks = h.running.app.store.list_tasks(&TaskFilter { job_id: Some(job), ..Default::default() }).expect("tasks");
    assert_eq!(tasks.len(), 1, "one node.uninstall: {tasks:?}");
    assert_eq!(agent.tasks_run.last(), Some(&tasks[0].task.task_id.to_string()), "the agent ran the uninstall");
    // Its certificates are revoked: the handshake itself fails.
    let body = serde_json::json!({ "agentVersion": "t", "bootId": "b" }).to_string();
    let mut args = vec!["-X".to_owned(), "POST".to_owned(), "-w".to_owned(), "\n%{http_code}".to_owned()];
    args.extend(["-H".to_owned(), "content-type: application/json".to_owned(), "--data-binary".to_owned(), body]);
    args.push(format!("{}/v1/agent/checkin", h.url));
    let out = h.curl_as(&cert, args).await;
    assert!(!out.status.success(), "a removed host's certificate completed a handshake");
    assert!(String::from_utf8_lossy(&out.stdout).trim().ends_with("000"), "no HTTP response at all");
    let certs = h.running.app.store.list_certs(Some(id)).expect("certs");
    assert!(!certs.is_empty() && certs.iter().all(|c| c.revoked.is_some()), "{certs:?}");

    // deleted is terminal: no verb brings it back, and the refusal names the guardrail.
    let audits = audit(&h, id).len();
    let events = transitions(&h, id).len();
    let jobs = h.running.app.store.list_jobs(&JobFilter { host_id: Some(id), ..Default::default() }).expect("jobs").len();
    for v in ["reactivate", "unquarantine", "quarantine", "retire", "remove", "cordon"] {
        let (code, body) = verb(&h, id, v, "bring it back").await;
        assert_eq!(code, "409", "{v}: {body}");
        assert!(body["error"]["message"].as_str().unwrap_or_default().contains("terminal"), "{v}: {body}");
    }
    assert_eq!(state(&h, id), HostLifecycle::Deleted);
    assert_eq!(audit(&h, id).len(), audits, "refused verbs are not audited");
    assert_eq!(transitions(&h, id).len(), events, "refused verbs write no event");
    assert_eq!(h.running.app.store.list_jobs(&JobFilter { host_id: Some(id), ..Default::default() }).expect("jobs").len(), jobs);
    // The id is never reused: the same hostname enrolls as a new host.
    let created = h.create_host("gpu-x").await;
    assert_ne!(created["hostId"], id.to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn illegal_verbs_are_refused_with_nothing_written() {
    let h = Harness::start().await;
    let (id, _) = active_host(&h, "gpu-i");
    let audits = audit(&h, id).len();
    let events = transitions(&h, id).len();
    // Active: not quarantined, not retired.
    for v in ["unquarantine", "reactivate", "remove"] {
        let (code, body) = verb(&h, id, v, "try").await;
        assert_eq!(code, "409", "{v}: {body}");
        assert_eq!(body["error"]["code"], "conflict");
    }
    // A host still in bootstrap_issued can be neither quarantined nor retired.
    let (fresh, _, _) = h.host_credentials("gpu-fresh");
    for v in ["quarantine", "retire", "unquarantine"] {
        assert_eq!(verb(&h, fresh, v, "try").await.0, "409", "{v}");
    }
    assert_eq!(state(&h, fresh), HostLifecycle::BootstrapIssued);
    assert_eq!(state(&h, id), HostLifecycle::Active);
    assert_eq!(audit(&h, id).len(), audits);
    assert!(audit(&h, fresh).is_empty());
    assert_eq!(transitions(&h, id).len(), events);
    let jobs = h.running.app.store.list_jobs(&JobFilter::default()).expect("jobs");
    assert!(jobs.is_empty(), "a refused retire or remove creates no job: {jobs:?}");
    // Unknown host 404, malformed id 400, missing or bad reason 400.
    assert_eq!(verb(&h, Uuid::new_v4(), "quarantine", "x").await.0, "404");
    let (code, _) = h.call(Some(&h.admin), "POST", "/v1/hosts/not-a-uuid/quarantine", Some(&reason("x"))).await;
    assert_eq!(code, "400");
    for bad in ["{}".to_owned(), reason(""), reason("   "), reason("line\nbreak"), reason(&"x".repeat(501))] {
        let (code, body) = h.call(Some(&h.admin), "POST", &format!("/v1/hosts/{id}/quarantine"), Some(&bad)).await;
        assert_eq!(code, "400", "{bad}: {body}");
    }
    assert_eq!(state(&h, id), HostLifecycle::Active);
    assert_eq!(audit(&h, id).len(), audits);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_admins_drive_the_lifecycle() {
    let h = Harness::start().await;
    let (id, cert) = active_host(&h, "gpu-a");
    for v in ["quarantine", "retire", "remove", "cordon"] {
        let path = format!("/v1/hosts/{id}/{v}");
        let (code, body) = h.call(Some(&h.viewer), "POST", &path, Some(&reason("x"))).await;
        assert_eq!(code, "403", "viewer {v}: {body}");
        let (code, body) = h.call(Some(&cert), "POST", &path, Some(&reason("x"))).await;
        assert_eq!(code, "403", "host certificate {v}: {body}");
        let (code, _) = h.call(None, "POST", &path, Some(&reason("x"))).await;
        assert_eq!(code, "401", "anonymous {v}");
    }
    assert_eq!(state(&h, id), HostLifecycle::Active);
    assert!(audit(&h, id).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cordon_and_uncordon_flip_the_schedulable_flag() {
    let h = Harness::start().await;
    let (id, _) = active_host(&h, "gpu-c");
    let (code, body) = verb(&h, id, "cordon", "firmware update tonight").await;
    assert_eq!(code, "200", "{body}");
    assert_eq!((body["state"].as_str(), body["schedulable"].as_bool()), (Some("active"), Some(false)));
    assert!(!h.running.app.store.get_host(id).expect("store").expect("host").schedulable);
    let (code, body) = verb(&h, id, "uncordon", "done").await;
    assert_eq!(code, "200", "{body}");
    assert_eq!(body["schedulable"], true);
    let rows = audit(&h, id);
    let cordon = rows.iter().find(|r| r.audit.action == "host.cordon").expect("cordon audited");
    assert_eq!((cordon.audit.prior_state.as_deref(), cordon.audit.expected_state.as_deref()), (Some("schedulable"), Some("cordoned")));
    assert_eq!(cordon.audit.reason, "firmware update tonight");
    assert!(rows.iter().any(|r| r.audit.action == "host.uncordon"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_host_goes_offline_and_returns_on_checkin() {
    let h = Harness::start().await;
    let (id, cert) = active_host(&h, "gpu-s");
    let (quiet, _) = active_host(&h, "gpu-t");
    assert_eq!(checkin(&h, &cert).await, "200");
    let after = h.running.app.config.hosts.offline_after_secs;
    assert_eq!(after, 180, "the default");
    // Not silent long enough yet.
    h.clock.advance(i64::try_from(after).expect("secs") - 10);
    assert_eq!(mark_silent_hosts_offline(&h.running.app).await.expect("sweep"), 0);
    assert_eq!(state(&h, id), HostLifecycle::Active);
    h.clock.advance(20);
    assert_eq!(mark_silent_hosts_offline(&h.running.app).await.expect("sweep"), 2);
    assert_eq!(state(&h, id), HostLifecycle::Offline);
    assert_eq!(state(&h, quiet), HostLifecycle::Offline);
    let events = transitions(&h, id);
    assert!(events.last().is_some_and(|m| m == &format!("no check-in for {after}s")), "{events:?}");
    // A second sweep finds nothing more to do.
    assert_eq!(mark_silent_hosts_offline(&h.running.app).await.expect("sweep"), 0);
    // The next check-in brings it back.
    assert_eq!(checkin(&h, &cert).await, "200");
    assert_eq!(state(&h, id), HostLifecycle::Active);
    assert_eq!(state(&h, quiet), HostLifecycle::Offline);
    // A quarantined host is not "active and silent": the sweep leaves it alone.
    assert_eq!(verb(&h, id, "quarantine", "investigate").await.0, "200");
    h.clock.advance(10 * i64::try_from(after).expect("secs"));
    assert_eq!(mark_silent_hosts_offline(&h.running.app).await.expect("sweep"), 0);
    assert_eq!(state(&h, id), HostLifecycle::Quarantined);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drover_host_cli_drives_the_lifecycle() {
    let h = Harness::start().await;
    let (id, _) = active_host(&h, "gpu-cli");
    let id_text = id.to_string();
    let out = h.drover_as(&h.admin, &["host", "quarantine", &id_text, "--reason", "cli test"]).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), format!("{id} gpu-cli quarantined cordoned"));
    let out = h.drover_as(&h.admin, &["host", "cordon", &id_text, "--reason", "cli test"]).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), format!("{id} gpu-cli quarantined cordoned"));
    // Refused: 409 is exit 65 with the guardrail; a viewer is exit 77.
    let out = h.drover_as(&h.admin, &["host", "reactivate", &id_text, "--reason", "cli test"]).await;
    assert_eq!(out.status.code(), Some(65), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("409"), "{}", String::from_utf8_lossy(&out.stderr));
    let out = h.drover_as(&h.viewer, &["host", "unquarantine", &id_text, "--reason", "cli test"]).await;
    assert_eq!(out.status.code(), Some(77), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(state(&h, id), HostLifecycle::Quarantined);
}

/// A host created for enrollment that never enrolled (a typo, an expired token) is removed at
/// once: deleted, its token ended (enrolling with it now fails), its hostname free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_never_enrolled_can_be_removed_and_its_token_ends() {
    let h = Harness::start().await;
    let created = h.create_host("gpu-typo").await;
    let id = Uuid::parse_str(created["hostId"].as_str().expect("id")).expect("uuid");
    let token = created["token"].as_str().expect("token").to_owned();
    assert_eq!(state(&h, id), HostLifecycle::BootstrapIssued);
    // No other verb applies to it…
    assert_eq!(verb(&h, id, "retire", "typo").await.0, "409");
    // …but remove does, without a job: nothing was installed.
    let (code, body) = verb(&h, id, "remove", "typo in the hostname").await;
    assert_eq!(code, "200", "{body}");
    assert_eq!((body["state"].as_str(), body["jobId"].as_str()), (Some("deleted"), None), "{body}");
    assert_eq!(state(&h, id), HostLifecycle::Deleted);
    let audit = h.running.app.store.list_audit(&AuditFilter { target: Some(id.to_string()), ..Default::default() }).expect("audit");
    assert!(audit.iter().any(|a| a.audit.action == "host.remove" && a.audit.reason == "typo in the hostname"), "{audit:?}");
    // The token enrolls nothing any more.
    let (_key, csr) = drover_tests::key_and_csr("gpu-typo");
    let enroll = serde_json::json!({ "hostId": id.to_string(), "token": token, "csr": csr }).to_string();
    let (code, text) = h.call(None, "POST", "/v1/enroll", Some(&enroll)).await;
    assert!(code.starts_with('4'), "enrolling with the ended token: {code} {text}");
    assert_eq!(state(&h, id), HostLifecycle::Deleted);
    // The hostname is free again, under a new id.
    let again = h.create_host("gpu-typo").await;
    assert_ne!(again["hostId"].as_str(), Some(id.to_string().as_str()));
}
