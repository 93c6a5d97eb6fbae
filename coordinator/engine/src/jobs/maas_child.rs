//! The `maas_workflow` stage's child: the MAAS half of a reimage or full decommission runs as
//! its own job (`maas_reimage` / `maas_decommission`) that the MAAS executor
//! ([`crate::onboarding`]) drives stage by stage, as Temporal runs a child workflow. This
//! module finds or creates that child for a parent job, and reads what the parent observes
//! of it.
//!
//! Find-or-create keeps it single: a parent whose step was lost after the child was created
//! finds the child again (by its `parentJobId`) instead of starting a second one.

use std::sync::Arc;

use uuid::Uuid;

use super::model::JobKind;
use super::plan::{ChildObs, MaasObs};
use crate::app::AppState;
use crate::maasflow::onboard::{OnboardProgress, OnboardingRequest};
use crate::maasflow::taxonomy::Workflow;
use crate::store::{self, Host, JobFilter, NewJob, Store, StoreError};

/// The workflow a parent kind's `maas_workflow` stage runs.
pub fn workflow_of(kind: &JobKind) -> Workflow {
    match kind {
        JobKind::Reimage { .. } => Workflow::Reimage,
        _ => Workflow::Decommission,
    }
}

/// The child of `parent`, if one exists (any state).
fn find_child(s: &dyn Store, parent: Uuid) -> Result<Option<crate::store::Job>, StoreError> {
    for w in [Workflow::Reimage, Workflow::Decommission] {
        let jobs = s.list_jobs(&JobFilter { kind: Some(w.kind().to_owned()), ..Default::default() })?;
        let mut mine: Vec<_> = jobs
            .into_iter()
            .filter(|j| serde_json::from_value::<OnboardingRequest>(j.job.input.clone()).is_ok_and(|r| r.parent_job_id == Some(parent)))
            .collect();
        // The newest: a restart_clean of the parent starts a fresh child.
        mine.sort_by_key(|j| j.job.created_at);
        if let Some(j) = mine.pop() {
            return Ok(Some(j));
        }
    }
    Ok(None)
}

/// What the parent observes: the binding, and the child its progress names.
pub fn observe(s: &dyn Store, host_id: Uuid, child_id: Option<&str>) -> Result<MaasObs, StoreError> {
    let binding = s.get_maas_binding(host_id)?;
    let bound = binding.is_some();
    let released =
        binding.and_then(|b| b.observed).is_some_and(|o| matches!(o.status.as_str(), "Ready" | "New" | crate::maasflow::reconcile::ABSENT));
    let child = match child_id.and_then(|c| Uuid::parse_str(c).ok()) {
        Some(id) => s.get_job(id)?.map(|j| {
            let p = OnboardProgress::from_value(&j.progress).unwrap_or_default();
            ChildObs { job_id: id.to_string(), state: j.state, stage: p.stage.as_str().to_owned(), message: p.message }
        }),
        None => None,
    };
    Ok(MaasObs { bound, released, child })
}

/// Finds or creates the child workflow for `parent` working on `host`; returns its id, or why
/// it cannot be started (no binding, the site gone).
pub async fn start(app: &Arc<AppState>, parent: Uuid, host: &Host, kind: &JobKind) -> Result<Uuid, String> {
    let workflow = workflow_of(kind);
    let (maas, profile) = match kind {
        JobKind::Reimage { maas, profile, .. } => (*maas, profile.clone()),
        JobKind::FullDecommission { maas, .. } => (*maas, None),
        _ => return Err("this job has no MAAS half".into()),
    };
    let (host_id, hostname) = (host.id, host.hostname.clone());
    let now = app.clock.now();
    store::blocking(app.store.clone(), move |s| {
        if let Some(existing) = find_child(s, parent)?
            && !existing.state.is_terminal()
        {
            return Ok(Ok(existing.job.job_id));
        }
        let Some(binding) = s.get_maas_binding(host_id)? else { return Ok(Err("the host has no MAAS binding".to_owned())) };
        let Some(site) = s.get_site(binding.site_id)? else { return Ok(Err(format!("site {} is gone", binding.site_id))) };
        let profile = match profile {
            Some(p) => p,
            None => match s.get_profile(site.default_profile_id)? {
                Some(p) => p.name,
                None => return Ok(Err(format!("site {} has no default profile", site.name))),
            },
        };
        let request = OnboardingRequest {
            site: site.name.clone(),
            profile,
            sku: None,
            hostname,
            ipmi_ip: binding.ipmi_ip.clone().unwrap_or_default(),
            pxe_mac: binding.pxe_mac.clone(),
            batch_id: None,
            requester: Some(format!("job {parent}")),
            host_id: Some(host_id),
            system_id: Some(binding.system_id.clone()),
            parent_job_id: Some(parent),
            erase: maas.erase,
            remove_maas_record: maas.remove_maas_record,
        };
        let new = NewJob {
            job_id: Uuid::new_v4(),
            kind: workflow.kind().to_owned(),
            host_id: None,
            input: serde_json::to_value(&request).map_err(StoreError::backend)?,
            created_at: now,
            request_id: None,
        };
        Ok(Ok(s.create_job(&new)?.job.job_id))
    })
    .await
    .map_err(|e| format!("the coordinator's store failed: {e}"))?
}

/// After a full decommission deletes the host: its MAAS binding goes too (with an event and
/// an audit row); a host that had none is left as it is.
pub async fn forget_binding(app: &Arc<AppState>, host_id: Uuid, job_id: Uuid) -> Result<(), StoreError> {
    let now = app.clock.now();
    store::blocking(app.store.clone(), move |s| {
        let Some(b) = s.get_maas_binding(host_id)? else { return Ok(()) };
        let log = crate::store::ChangeLog {
            event: crate::store::NewEvent {
                at: now,
                kind: "maas.unbind".into(),
                host_id: Some(host_id),
                rollout_id: None,
                job_id: Some(job_id),
                message: format!("host {host_id} unbound from MAAS machine {} (decommissioned)", b.system_id),
                data: serde_json::json!({ "siteId": b.site_id, "systemId": b.system_id }),
            },
            audit: crate::store::NewAudit {
                at: now,
                actor: format!("job {job_id}"),
                role: "system".into(),
                action: "maas.unbind".into(),
                target: host_id.to_string(),
                reason: "full decommission".into(),
                prior_state: Some(b.system_id.clone()),
                expected_state: None,
            },
        };
        s.delete_maas_binding(host_id, &log).map(|_| ())
    })
    .await
}
