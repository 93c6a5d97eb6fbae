//! Host-signed evidence on the coordinator: checked when a host reports
//! it, kept as sent, and listed for tenants and auditors, who verify it offline
//! (`drover evidence verify`) without trusting this coordinator.
//!
//! On a check-in, evidence is accepted only if it is signed by the evidence key this host
//! registered at enrollment (its certificate byte for byte), is about this host, and says
//! exactly what the report beside it says (the task's result, the probe results): the
//! statement kept is the report acted on. A task result whose evidence fails is refused like
//! any result the store refuses (logged, an `evidence.refused` event, the task not completed),
//! so a forged or replayed statement never completes a `validate_clean`.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use drover_proto::evidence::{self, Evidence, Expect, Subject};
use drover_proto::report::{ProbeResult, TaskResult};
use uuid::Uuid;

use super::auth::Reader;
use super::error::ApiError;
use super::operator::{Page, QueryParams, next_after, page_size, parse_uuid};
use crate::app::AppState;
use crate::store::{self, EvidenceFilter, EvidenceRecord, HostKeys};

/// Checks evidence against the registered certificate and the host; the rule broken if not.
fn check(keys: &HostKeys, host: Uuid, evidence: &Evidence, task_id: Option<&str>) -> Result<(), String> {
    let Some(registered) = keys.evidence_cert.as_deref() else {
        return Err("this host registered no evidence key at enrollment".into());
    };
    // Kept whole in the store and served to auditors: bounded like any other document.
    let size = serde_json::to_vec(evidence).map(|b| b.len()).unwrap_or(usize::MAX);
    if size > evidence::MAX_EVIDENCE_BYTES {
        return Err(format!("evidence is {size} bytes, more than the {} a document may hold", evidence::MAX_EVIDENCE_BYTES));
    }
    if registered.trim() != evidence.certificate.trim() {
        return Err("signed by a key other than the one this host registered".into());
    }
    let host = host.to_string();
    evidence::verify(evidence, None, &Expect { host_id: Some(&host), task_id, job_id: None }).map_err(|e| e.to_string())
}

/// A task result's evidence, checked: `Ok(None)` when it carries none.
pub fn check_task_result(keys: &HostKeys, host: Uuid, result: &TaskResult) -> Result<Option<Evidence>, String> {
    let Some(evidence) = &result.evidence else { return Ok(None) };
    check(keys, host, evidence, Some(&result.task_id))?;
    let Subject::Task { outcome, steps, started_at, finished_at, .. } = &evidence.statement.subject else {
        return Err("the statement is not about a task".into());
    };
    if *outcome != result.outcome || *steps != result.steps || *started_at != result.started_at || *finished_at != result.finished_at {
        return Err("the statement does not say what the reported result says".into());
    }
    Ok(Some(evidence.clone()))
}

/// A check-in's probe evidence, checked against the probe results beside it.
pub fn check_probes(keys: &HostKeys, host: Uuid, results: &[ProbeResult], evidence: &Evidence) -> Result<(), String> {
    check(keys, host, evidence, None)?;
    match &evidence.statement.subject {
        Subject::Probes { results: signed } if signed == results => Ok(()),
        Subject::Probes { .. } => Err("the statement does not say what the reported probe results say".into()),
        Subject::Task { .. } => Err("the statement is not about probe results".into()),
    }
}

/// `GET /v1/hosts/{id}/evidence` and `/v1/jobs/{id}/evidence` query.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvidenceQuery {
    after: Option<i64>,
    limit: Option<u32>,
}

pub use drover_proto::api::evidence::EvidenceView;

/// A kept statement as the API shows it.
fn evidence_view(r: EvidenceRecord) -> EvidenceView {
    let e = r.evidence;
    EvidenceView {
        seq: r.seq,
        host_id: e.host_id.to_string(),
        task_id: e.task_id.map(|t| t.to_string()),
        job_id: e.job_id.map(|j| j.to_string()),
        kind: e.kind,
        signed_at: e.signed_at,
        received_at: e.received_at,
        evidence: serde_json::from_str(&e.document).unwrap_or(serde_json::Value::Null),
    }
}

async fn list(app: Arc<AppState>, filter: EvidenceFilter, limit: u32) -> Result<Json<Page<EvidenceView, i64>>, ApiError> {
    let rows = store::blocking(app.store.clone(), move |s| s.list_evidence(&filter)).await?;
    let next = next_after(&rows, limit, |r| r.seq);
    Ok(Json(Page { items: rows.into_iter().map(evidence_view).collect(), next }))
}

/// `GET /v1/hosts/{id}/evidence` (viewer): a host's signed statements, oldest first.
pub async fn for_host(
    State(app): State<Arc<AppState>>,
    _caller: Reader,
    Path(id): Path<String>,
    QueryParams(q): QueryParams<EvidenceQuery>,
) -> Result<Json<Page<EvidenceView, i64>>, ApiError> {
    let host_id = parse_uuid("host id", &id)?;
    let limit = page_size(q.limit)?;
    let after = super::operator::id_cursor(q.after)?;
    if store::blocking(app.store.clone(), move |s| s.get_host(host_id)).await?.is_none() {
        return Err(ApiError::not_found(format!("host {host_id} not found")));
    }
    list(app, EvidenceFilter { host_id: Some(host_id), after, limit: limit as usize, ..Default::default() }, limit).await
}

/// `GET /v1/jobs/{id}/evidence` (viewer): the statements of a job's tasks, oldest first.
pub async fn for_job(
    State(app): State<Arc<AppState>>,
    _caller: Reader,
    Path(id): Path<String>,
    QueryParams(q): QueryParams<EvidenceQuery>,
) -> Result<Json<Page<EvidenceView, i64>>, ApiError> {
    let job_id = parse_uuid("job id", &id)?;
    let limit = page_size(q.limit)?;
    let after = super::operator::id_cursor(q.after)?;
    if store::blocking(app.store.clone(), move |s| s.get_job(job_id)).await?.is_none() {
        return Err(ApiError::not_found(format!("job {job_id} not found")));
    }
    list(app, EvidenceFilter { job_id: Some(job_id), after, limit: limit as usize, ..Default::default() }, limit).await
}

#[cfg(test)]
mod tests {
    use drover_proto::report::{StepOutcome, StepResult, TaskOutcome};
    use drover_proto::time::Time;
    use serde_json::Value;

    use super::*;
    use crate::pki::Ca;

    fn at(secs: i64) -> Time {
        Time::from_unix(1_800_000_000 + secs).expect("time")
    }

    /// A host's evidence key and the certificate the CA issued for it.
    fn evidence_identity(ca: &Ca, host: Uuid) -> (ed25519_dalek::SigningKey, String) {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).expect("key");
        let csr = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params").serialize_request(&key).expect("csr");
        let cert = ca.issue_evidence_from_csr(&csr.pem().expect("pem"), host, "gpu-01", at(0)).expect("issue");
        (drover_proto::keys::signing_key_from_pem(&key.serialize_pem()).expect("key"), cert.pem)
    }

    fn result(task_id: &str) -> TaskResult {
        TaskResult {
            task_id: task_id.into(),
            outcome: TaskOutcome::Succeeded,
            steps: vec![StepResult { name: "no residue".into(), outcome: StepOutcome::Ok, message: String::new(), data: Value::Null }],
            started_at: at(10),
            finished_at: at(11),
            evidence: None,
        }
    }

    fn signed(result: &TaskResult, host: Uuid, key: &ed25519_dalek::SigningKey, cert: &str) -> Evidence {
        let subject = Subject::Task {
            task_id: result.task_id.clone(),
            job_id: None,
            task_type: "node.validate_clean".into(),
            outcome: result.outcome,
            steps: result.steps.clone(),
            started_at: result.started_at,
            finished_at: result.finished_at,
        };
        let statement = drover_proto::evidence::Statement { version: 1, host_id: host.to_string(), at: at(12), subject };
        drover_proto::evidence::sign(statement, key, cert).expect("sign")
    }

    #[test]
    fn evidence_from_the_registered_key_about_this_result_is_accepted() {
        let ca = Ca::generate(at(0)).expect("ca");
        let host = Uuid::new_v4();
        let (key, cert) = evidence_identity(&ca, host);
        let keys = HostKeys { seal_key: None, evidence_cert: Some(cert.clone()) };
        let mut r = result("t-1");
        r.evidence = Some(signed(&r, host, &key, &cert));
        assert!(check_task_result(&keys, host, &r).expect("accepted").is_some());
    }

    #[test]
    fn evidence_signed_by_an_unregistered_key_is_refused() {
        let ca = Ca::generate(at(0)).expect("ca");
        let host = Uuid::new_v4();
        let (_, registered) = evidence_identity(&ca, host);
        // A key the CA certified too (an earlier enrollment, say), but not the one on record.
        let (other_key, other_cert) = evidence_identity(&ca, host);
        let keys = HostKeys { seal_key: None, evidence_cert: Some(registered) };
        let mut r = result("t-1");
        r.evidence = Some(signed(&r, host, &other_key, &other_cert));
        assert!(check_task_result(&keys, host, &r).expect_err("refused").contains("other than the one this host registered"));
    }

    #[test]
    fn another_hosts_evidence_is_refused() {
        let ca = Ca::generate(at(0)).expect("ca");
        let (me, other) = (Uuid::new_v4(), Uuid::new_v4());
        let (key, cert) = evidence_identity(&ca, other);
        let mut r = result("t-1");
        r.evidence = Some(signed(&r, other, &key, &cert));
        // Even with that host's certificate on record for this one, the statement names another.
        let keys = HostKeys { seal_key: None, evidence_cert: Some(cert) };
        assert!(check_task_result(&keys, me, &r).expect_err("refused").contains("expected host"));
    }

    #[test]
    fn replayed_evidence_of_another_task_is_refused() {
        let ca = Ca::generate(at(0)).expect("ca");
        let host = Uuid::new_v4();
        let (key, cert) = evidence_identity(&ca, host);
        let keys = HostKeys { seal_key: None, evidence_cert: Some(cert.clone()) };
        let earlier = result("t-1");
        let mut now = result("t-2");
        now.evidence = Some(signed(&earlier, host, &key, &cert));
        assert!(check_task_result(&keys, host, &now).expect_err("refused").contains("expected task t-2"));
    }

    #[test]
    fn evidence_that_says_other_than_the_result_is_refused() {
        let ca = Ca::generate(at(0)).expect("ca");
        let host = Uuid::new_v4();
        let (key, cert) = evidence_identity(&ca, host);
        let keys = HostKeys { seal_key: None, evidence_cert: Some(cert.clone()) };
        let mut failed = result("t-1");
        failed.outcome = TaskOutcome::Failed;
        let clean = result("t-1");
        // A genuine "succeeded" statement beside a result that says "failed", or the reverse.
        let mut r = failed.clone();
        r.evidence = Some(signed(&clean, host, &key, &cert));
        assert!(check_task_result(&keys, host, &r).expect_err("refused").contains("does not say what"));
        // A statement altered after signing.
        let mut tampered = signed(&clean, host, &key, &cert);
        if let Subject::Task { steps, .. } = &mut tampered.statement.subject {
            steps[0].message = "edited".into();
        }
        let mut r = clean.clone();
        r.steps[0].message = "edited".into();
        r.evidence = Some(tampered);
        assert!(check_task_result(&keys, host, &r).expect_err("refused").contains("signature does not verify"));
        // No key registered: nothing to check against.
        let mut r = clean.clone();
        r.evidence = Some(signed(&clean, host, &key, &cert));
        assert!(check_task_result(&HostKeys::default(), host, &r).expect_err("refused").contains("no evidence key"));
    }

    #[test]
    fn probe_evidence_must_match_the_probe_results() {
        let ca = Ca::generate(at(0)).expect("ca");
        let host = Uuid::new_v4();
        let (key, cert) = evidence_identity(&ca, host);
        let keys = HostKeys { seal_key: None, evidence_cert: Some(cert.clone()) };
        let statement = drover_proto::evidence::Statement {
            version: 1,
            host_id: host.to_string(),
            at: at(1),
            subject: Subject::Probes { results: vec![] },
        };
        let e = drover_proto::evidence::sign(statement, &key, &cert).expect("sign");
        check_probes(&keys, host, &[], &e).expect("matches");
        let reported = vec![ProbeResult {
            name: "nccl".into(),
            outcome: drover_proto::report::ProbeOutcome::Failed,
            mode: drover_proto::spec::Mode::Enforce,
            message: String::new(),
            duration_ms: 5,
            observed_at: at(1),
        }];
        assert!(check_probes(&keys, host, &reported, &e).is_err());
    }

    #[test]
    fn oversized_evidence_is_refused_before_it_is_kept() {
        let ca = Ca::generate(at(0)).expect("ca");
        let host = Uuid::new_v4();
        let (key, cert) = evidence_identity(&ca, host);
        let keys = HostKeys { seal_key: None, evidence_cert: Some(cert.clone()) };
        let mut r = result("5b0e9c1d-2a3f-4b6c-8d7e-0f1a2b3c4d5e");
        // Genuinely signed by the registered key, yet larger than any document may be.
        r.steps[0].message = "x".repeat(evidence::MAX_EVIDENCE_BYTES);
        r.evidence = Some(signed(&r, host, &key, &cert));
        let e = check_task_result(&keys, host, &r).expect_err("refused");
        assert!(e.contains("more than the"), "{e}");
    }
}
