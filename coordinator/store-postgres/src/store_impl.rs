//! The `Store` trait on PostgreSQL: each method one
//! transaction, delegating to the area modules as `store-sqlite/src/lib.rs` does.

use drover_proto::names::RolloutId;
use drover_proto::release::ReleaseFiles;
use drover_proto::states::{HostLifecycle, HostRolloutState, JobState, RolloutState};
use drover_proto::time::Time;
use serde_json::Value;
use uuid::Uuid;

use super::{PgStore, bindings, evidence, health, hosts, jobs, log, plans, racks, releases, sites, work};
use crate::DbResult;
use drover_store::*;

impl Store for PgStore {
    fn reads_inline(&self) -> bool {
        false
    }

    fn ping(&self) -> Result<(), StoreError> {
        self.read(|c| c.query_one("SELECT 1", &[]).map(drop).db())
    }

    fn create_host(&self, new: &NewHost) -> Result<Host, StoreError> {
        self.write(|tx| hosts::create_host(tx, new))
    }
    fn get_host(&self, id: Uuid) -> Result<Option<Host>, StoreError> {
        self.read(|c| hosts::get_host(c, id))
    }
    fn get_host_by_hostname(&self, hostname: &str) -> Result<Option<Host>, StoreError> {
        self.read(|c| hosts::get_host_by_hostname(c, hostname))
    }
    fn list_hosts(&self, filter: &HostFilter) -> Result<Vec<Host>, StoreError> {
        self.read(|c| hosts::list_hosts(c, filter))
    }
    fn transition_host(&self, id: Uuid, from: HostLifecycle, to: HostLifecycle, reason: &str, at: Time) -> Result<Host, StoreError> {
        self.write(|tx| hosts::transition_host(tx, id, from, to, reason, at))
    }
    fn record_checkins(&self, batch: &[(Uuid, Checkin)]) -> Result<u64, StoreError> {
        // One write transaction for the whole batch: this is why check-ins are buffered. Only
        // last-seen fields, which no cached check-in view is kept current for.
        self.write_outside_views(|tx| {
            let mut n = 0;
            for (id, checkin) in batch {
                match hosts::record_checkin(tx, *id, checkin) {
                    Ok(_) => n += 1,
                    Err(StoreError::NotFound { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(n)
        })
    }
    fn record_checkin(&self, id: Uuid, checkin: &Checkin) -> Result<Host, StoreError> {
        self.write(|tx| hosts::record_checkin(tx, id, checkin))
    }
    fn set_schedulable(&self, id: Uuid, schedulable: bool, reason: &str, at: Time) -> Result<Host, StoreError> {
        self.write(|tx| hosts::set_schedulable(tx, id, schedulable, reason, at))
    }

    fn create_token(&self, host_id: Uuid, token: &EnrollmentToken, at: Time) -> Result<TokenInfo, StoreError> {
        self.write(|tx| hosts::create_token(tx, host_id, token, at))
    }
    fn consume_token(&self, token_hash: &str, expected_host: Option<Uuid>, now: Time) -> Result<Uuid, StoreError> {
        self.write(|tx| hosts::consume_token(tx, token_hash, expected_host, now))
    }
    fn list_tokens(&self, host_id: Option<Uuid>) -> Result<Vec<TokenInfo>, StoreError> {
        self.read(|c| hosts::list_tokens(c, host_id))
    }
    fn revoke_token(&self, id: Uuid, at: Time) -> Result<TokenInfo, StoreError> {
        self.write(|tx| hosts::revoke_token(tx, id, at))
    }

    fn enroll_host(
        &self,
        token_hash: &str,
        host_id: Uuid,
        now: Time,
        issue: &mut dyn FnMut(&Host) -> Result<Enrolled, StoreError>,
    ) -> Result<Host, StoreError> {
        self.write(|tx| {
            let owner = hosts::consume_token(tx, token_hash, Some(host_id), now)?;
            let current = hosts::get_host(tx, owner)?.ok_or_else(|| StoreError::not_found("host", owner))?;
            let host = if current.state == HostLifecycle::Offline && !hosts::has_live_cert(tx, owner)? {
                // A re-enrollment (a reimage): the host's old identity was revoked with its OS;
                // it keeps its state — its first check-in brings it back `active` — and gets a
                // new certificate.
                current
            } else {
                hosts::transition_host(tx, owner, HostLifecycle::BootstrapIssued, HostLifecycle::Enrolling, "enrollment token used", now)?
            };
            let enrolled = issue(&host)?;
            hosts::record_cert(tx, &enrolled.cert)?;
            evidence::set_host_keys(tx, host.id, &enrolled.keys)?;
            Ok(host)
        })
    }
    fn host_keys(&self, host_id: Uuid) -> Result<HostKeys, StoreError> {
        self.read(|c| evidence::host_keys(c, host_id))
    }
    fn record_host_health(&self, batch: &[HostHealth]) -> Result<u64, StoreError> {
        self.write_outside_views(|tx| health::record_host_health(tx, batch))
    }
    fn host_health(&self, host_id: Uuid) -> Result<Option<HostHealth>, StoreError> {
        self.read(|c| health::host_health(c, host_id))
    }
    fn put_evidence(&self, evidence: &NewEvidence) -> Result<i64, StoreError> {
        self.write(|tx| evidence::put_evidence(tx, evidence))
    }
    fn list_evidence(&self, filter: &EvidenceFilter) -> Result<Vec<EvidenceRecord>, StoreError> {
        self.read(|c| evidence::list_evidence(c, filter))
    }
    fn record_cert(&self, cert: &NewCert) -> Result<(), StoreError> {
        self.write(|tx| hosts::record_cert(tx, cert))
    }
    fn get_cert(&self, serial: &str) -> Result<Option<CertRecord>, StoreError> {
        self.read(|c| hosts::get_cert(c, serial))
    }
    fn list_certs(&self, host_id: Option<Uuid>) -> Result<Vec<CertRecord>, StoreError> {
        self.read(|c| hosts::list_certs(c, host_id))
    }
    fn revoke_cert(&self, serial: &str, at: Time, reason: &str) -> Result<bool, StoreError> {
        self.write(|tx| hosts::revoke_cert(tx, serial, at, reason))
    }
    fn revoke_host_certs(&self, host_id: Uuid, at: Time, reason: &str) -> Result<u64, StoreError> {
        self.write(|tx| hosts::revoke_host_certs(tx, host_id, at, reason))
    }
    fn list_revoked(&self) -> Result<Vec<RevokedCert>, StoreError> {
        self.read(hosts::list_revoked)
    }

    fn put_release(&self, version: u64, signed_at: Time, files: &ReleaseFiles) -> Result<(), StoreError> {
        self.write(|tx| releases::put_release(tx, version, signed_at, files))
    }
    fn latest_release(&self) -> Result<Option<Release>, StoreError> {
        self.read(|c| releases::get_release(c, None))
    }
    fn latest_release_version(&self) -> Result<Option<u64>, StoreError> {
        self.read(releases::latest_version)
    }
    fn get_release(&self, version: u64) -> Result<Option<Release>, StoreError> {
        self.read(|c| releases::get_release(c, Some(version)))
    }
    fn list_releases(&self) -> Result<Vec<ReleaseSummary>, StoreError> {
        self.read(releases::list_releases)
    }
    fn get_manifest(&self, rollout_id: &RolloutId) -> Result<Option<Manifest>, StoreError> {
        self.read(|c| releases::get_manifest(c, rollout_id))
    }
    fn get_manifest_root(&self, rollout_id: &RolloutId) -> Result<Option<SignedBytes>, StoreError> {
        self.read(|c| releases::get_manifest_root(c, rollout_id))
    }

    fn open_rollout(&self, new: &NewRollout) -> Result<Rollout, StoreError> {
        self.write(|tx| releases::open_rollout(tx, new))
    }
    fn get_rollout(&self, rollout_id: &RolloutId) -> Result<Option<Rollout>, StoreError> {
        self.read(|c| releases::get_rollout(c, rollout_id))
    }
    fn list_rollouts(&self, filter: &RolloutFilter) -> Result<Vec<Rollout>, StoreError> {
        self.read(|c| releases::list_rollouts(c, filter))
    }
    fn set_rollout_state(
        &self,
        rollout_id: &RolloutId,
        from: RolloutState,
        to: RolloutState,
        reason: &str,
        at: Time,
    ) -> Result<Rollout, StoreError> {
        self.write(|tx| releases::set_rollout_state(tx, rollout_id, from, to, reason, at))
    }
    fn list_host_rollouts(&self, rollout_id: &RolloutId) -> Result<Vec<HostRollout>, StoreError> {
        self.read(|c| releases::list_host_rollouts(c, rollout_id))
    }
    fn latest_host_rollouts(&self, hostnames: &[String]) -> Result<Vec<HostRollout>, StoreError> {
        self.read(|c| releases::latest_host_rollouts(c, hostnames))
    }
    fn host_rollout_counts(&self, rollout_ids: &[RolloutId]) -> Result<Vec<(RolloutId, HostRolloutState, u64)>, StoreError> {
        self.read(|c| releases::host_rollout_counts(c, rollout_ids))
    }

    fn plan_snapshot(&self) -> Result<PlanSnapshot, StoreError> {
        self.read(plans::plan_snapshot)
    }
    fn apply_plan(&self, write: &PlanWrite, audits: &[NewAudit]) -> Result<(), StoreError> {
        self.write(|tx| plans::apply_plan(tx, write, audits))
    }
    fn record_host_report(&self, host_id: Uuid, report: &HostReport, at: Time) -> Result<(), StoreError> {
        self.write(|tx| plans::record_host_report(tx, host_id, report, at))
    }

    fn put_intent(&self, new: &NewIntent) -> Result<IntentRecord, StoreError> {
        self.write(|tx| work::put_intent(tx, new))
    }
    fn current_intent(&self, host_id: Uuid) -> Result<Option<IntentRecord>, StoreError> {
        self.read(|c| work::current_intent(c, host_id))
    }
    fn checkin_view(&self, host_id: Uuid, now: Time) -> Result<CheckinView, StoreError> {
        // Read as the cache keeps it (leasable from when, not at `now`), and kept unless an
        // invalidation of this host may have arrived meanwhile.
        let ticket = self.views.ticket(host_id);
        let view = self.read_view(host_id)?;
        self.views.fill(host_id, ticket, view.clone(), std::time::Instant::now());
        Ok(view.at(now))
    }
    fn checkin_view_cached(&self, host_id: Uuid, now: Time) -> Option<CheckinView> {
        self.views.lookup(host_id, std::time::Instant::now()).map(|v| v.at(now))
    }
    fn get_intent(&self, host_id: Uuid, intent_id: Uuid) -> Result<Option<IntentRecord>, StoreError> {
        self.read(|c| work::get_intent(c, host_id, intent_id))
    }
    fn set_intent_status(&self, host_id: Uuid, intent_id: Uuid, status: IntentStatus, at: Time) -> Result<IntentRecord, StoreError> {
        self.write(|tx| work::set_intent_status(tx, host_id, intent_id, status, at))
    }

    fn enqueue_task(&self, new: &NewTask) -> Result<bool, StoreError> {
        self.write(|tx| work::enqueue_task(tx, new))
    }
    fn lease_tasks(&self, host_id: Uuid, now: Time, lease_secs: u64, max: u32) -> Result<Vec<TaskRecord>, StoreError> {
        // Almost every check-in finds nothing to lease: look on a reader first and take the
        // single writer only when there is work (the write re-checks under its lock).
        if max == 0 || !self.read(|c| work::has_leasable_task(c, host_id, now))? {
            return Ok(Vec::new());
        }
        self.write(|tx| work::lease_tasks(tx, host_id, now, lease_secs, max))
    }
    fn complete_task(&self, host_id: Uuid, task_id: Uuid, result: &Value, now: Time) -> Result<TaskRecord, StoreError> {
        // PostgreSQL keeps no WAL file of ours to truncate: the erased envelope is gone with
        // the row version once vacuumed.
        Ok(self.write(|tx| work::complete_task(tx, host_id, task_id, result, now))?.0)
    }
    fn requeue_expired(&self, now: Time) -> Result<u64, StoreError> {
        self.write(|tx| work::requeue_expired(tx, now))
    }
    fn get_task(&self, task_id: Uuid) -> Result<Option<TaskRecord>, StoreError> {
        self.read(|c| work::get_task(c, task_id))
    }
    fn list_tasks(&self, filter: &TaskFilter) -> Result<Vec<TaskRecord>, StoreError> {
        self.read(|c| work::list_tasks(c, filter))
    }

    fn create_job(&self, new: &NewJob) -> Result<Job, StoreError> {
        self.write(|tx| jobs::create_job(tx, new))
    }
    fn create_job_checked(&self, new: &NewJob, allowed: &[HostLifecycle], audits: &[NewAudit]) -> Result<Job, StoreError> {
        self.write(|tx| jobs::create_job_checked(tx, new, allowed, audits))
    }
    fn check_job_start(&self, host_id: Uuid, allowed: &[HostLifecycle]) -> Result<(), StoreError> {
        self.read(|c| jobs::check_job_start(c, host_id, allowed))
    }
    fn get_job(&self, job_id: Uuid) -> Result<Option<Job>, StoreError> {
        self.read(|c| jobs::get_job(c, job_id))
    }
    fn set_job_state(&self, job_id: Uuid, from: JobState, to: JobState, reason: &str, at: Time) -> Result<Job, StoreError> {
        self.write(|tx| jobs::set_job_state(tx, job_id, from, to, reason, at))
    }
    fn set_job_progress(&self, job_id: Uuid, progress: &Value, at: Time) -> Result<Job, StoreError> {
        self.write(|tx| jobs::set_job_progress(tx, job_id, progress, at))
    }
    fn apply_job_step(&self, step: &JobStep) -> Result<Job, StoreError> {
        self.write(|tx| jobs::apply_job_step(tx, step))
    }
    fn list_jobs(&self, filter: &JobFilter) -> Result<Vec<Job>, StoreError> {
        self.read(|c| jobs::list_jobs(c, filter))
    }
    fn count_jobs(&self) -> Result<Vec<JobCount>, StoreError> {
        self.read(jobs::count_jobs)
    }

    fn create_maintenance(&self, new: &NewMaintenance, allowed: &[HostLifecycle]) -> Result<(MaintenanceRecord, Vec<Job>), StoreError> {
        self.write(|tx| jobs::create_maintenance(tx, new, allowed))
    }
    fn get_maintenance(&self, request_id: Uuid) -> Result<Option<MaintenanceRecord>, StoreError> {
        self.read(|c| jobs::get_maintenance(c, request_id))
    }
    fn list_maintenance(&self, filter: &MaintenanceFilter) -> Result<Vec<MaintenanceRecord>, StoreError> {
        self.read(|c| jobs::list_maintenance(c, filter))
    }

    fn create_site(&self, site: &Site, profile: &Profile, log: &ChangeLog) -> Result<Site, StoreError> {
        self.write(|tx| sites::create_site(tx, site, profile, log))
    }
    fn get_site(&self, id: Uuid) -> Result<Option<Site>, StoreError> {
        self.read(|c| sites::get_site(c, id))
    }
    fn get_site_by_name(&self, name: &str) -> Result<Option<Site>, StoreError> {
        self.read(|c| sites::get_site_by_name(c, name))
    }
    fn list_sites(&self) -> Result<Vec<Site>, StoreError> {
        self.read(sites::list_sites)
    }
    fn update_site(&self, site: &Site, expected_revision: u64, log: &ChangeLog) -> Result<Site, StoreError> {
        self.write(|tx| sites::update_site(tx, site, expected_revision, log))
    }
    fn create_profile(&self, profile: &Profile, log: &ChangeLog) -> Result<Profile, StoreError> {
        self.write(|tx| sites::create_profile(tx, profile, log))
    }
    fn get_profile(&self, id: Uuid) -> Result<Option<Profile>, StoreError> {
        self.read(|c| sites::get_profile(c, id))
    }
    fn list_profiles(&self, site_id: Uuid) -> Result<Vec<Profile>, StoreError> {
        self.read(|c| sites::list_profiles(c, site_id))
    }
    fn update_profile(&self, profile: &Profile, expected_revision: u64, log: &ChangeLog) -> Result<Profile, StoreError> {
        self.write(|tx| sites::update_profile(tx, profile, expected_revision, log))
    }
    fn create_override(&self, o: &PowerOverride, log: &ChangeLog) -> Result<PowerOverride, StoreError> {
        self.write(|tx| sites::create_override(tx, o, log))
    }
    fn list_overrides(&self, site_id: Uuid) -> Result<Vec<PowerOverride>, StoreError> {
        self.read(|c| sites::list_overrides(c, site_id))
    }
    fn delete_override(&self, site_id: Uuid, id: Uuid, log: &ChangeLog) -> Result<PowerOverride, StoreError> {
        self.write(|tx| sites::delete_override(tx, site_id, id, log))
    }
    fn upsert_roce(&self, site_id: Uuid, items: &[NewRoce], at: Time, log: &ChangeLog) -> Result<RoceUpsert, StoreError> {
        self.write(|tx| sites::upsert_roce(tx, site_id, items, at, log))
    }
    fn list_roce(&self, site_id: Uuid, hostname: Option<&str>) -> Result<Vec<RoceAssignment>, StoreError> {
        self.read(|c| sites::list_roce(c, site_id, hostname))
    }
    fn delete_roce(&self, site_id: Uuid, id: Uuid, log: &ChangeLog) -> Result<RoceAssignment, StoreError> {
        self.write(|tx| sites::delete_roce(tx, site_id, id, log))
    }

    fn put_maas_binding(&self, binding: &MaasBinding, log: &ChangeLog) -> Result<MaasBinding, StoreError> {
        self.write(|tx| bindings::put(tx, binding, log))
    }
    fn get_maas_binding(&self, host_id: Uuid) -> Result<Option<MaasBinding>, StoreError> {
        self.read(|c| bindings::get(c, host_id))
    }
    fn get_maas_binding_by_machine(&self, site_id: Uuid, system_id: &str) -> Result<Option<MaasBinding>, StoreError> {
        self.read(|c| bindings::get_by_machine(c, site_id, system_id))
    }
    fn list_maas_bindings(&self, site_id: Option<Uuid>) -> Result<Vec<MaasBinding>, StoreError> {
        self.read(|c| bindings::list(c, site_id))
    }
    fn observe_maas_binding(&self, host_id: Uuid, observation: &MaasObservation) -> Result<MaasBinding, StoreError> {
        self.write(|tx| bindings::observe(tx, host_id, observation))
    }
    fn set_maas_drift(&self, host_id: Uuid, drift: Option<&Value>, at: Time) -> Result<MaasBinding, StoreError> {
        self.write(|tx| bindings::set_drift(tx, host_id, drift, at))
    }
    fn delete_maas_binding(&self, host_id: Uuid, log: &ChangeLog) -> Result<MaasBinding, StoreError> {
        self.write(|tx| bindings::delete(tx, host_id, log))
    }
    fn maas_reconcile_snapshot(&self, site_id: Uuid) -> Result<Vec<ReconcileRow>, StoreError> {
        self.read(|c| bindings::snapshot(c, site_id))
    }
    fn apply_maas_reconcile(&self, batch: &[ReconcileChange], at: Time) -> Result<ReconcileApplied, StoreError> {
        self.write(|tx| bindings::apply_reconcile(tx, batch, at))
    }
    fn resolve_maas_drift(&self, host_id: Uuid, at: Time, log: &ChangeLog) -> Result<MaasBinding, StoreError> {
        self.write(|tx| bindings::resolve(tx, host_id, at, log))
    }

    fn create_rack(&self, rack: &Rack, log: &ChangeLog) -> Result<Rack, StoreError> {
        self.write(|tx| racks::create_rack(tx, rack, log))
    }
    fn get_rack(&self, id: Uuid) -> Result<Option<Rack>, StoreError> {
        self.read(|c| racks::get_rack(c, id))
    }
    fn list_racks(&self) -> Result<Vec<Rack>, StoreError> {
        self.read(racks::list_racks)
    }
    fn delete_rack(&self, id: Uuid, log: &ChangeLog) -> Result<Rack, StoreError> {
        self.write(|tx| racks::delete_rack(tx, id, log))
    }
    fn create_device(&self, device: &Device, log: &ChangeLog) -> Result<Device, StoreError> {
        self.write(|tx| racks::create_device(tx, device, log))
    }
    fn get_device(&self, id: Uuid) -> Result<Option<Device>, StoreError> {
        self.read(|c| racks::get_device(c, id))
    }
    fn list_devices(&self, rack: Option<Uuid>, kind: Option<DeviceKind>) -> Result<Vec<Device>, StoreError> {
        self.read(|c| racks::list_devices(c, rack, kind))
    }
    fn delete_device(&self, id: Uuid, log: &ChangeLog) -> Result<Device, StoreError> {
        self.write(|tx| racks::delete_device(tx, id, log))
    }
    fn place_host(&self, host_id: Uuid, rack: Option<Uuid>, log: &ChangeLog) -> Result<(), StoreError> {
        self.write(|tx| racks::place_host(tx, host_id, rack, log))
    }
    fn rack_hosts(&self, rack: Uuid) -> Result<Vec<Uuid>, StoreError> {
        self.read(|c| racks::rack_hosts(c, rack))
    }
    fn host_rack(&self, host_id: Uuid) -> Result<Option<Uuid>, StoreError> {
        self.read(|c| racks::host_rack(c, host_id))
    }
    fn set_shelf_maintenance(&self, ids: &[Uuid], request: &Value, log: &ChangeLog) -> Result<Vec<Device>, StoreError> {
        self.write(|tx| racks::set_shelf_maintenance(tx, ids, request, log))
    }
    fn shelf_step(&self, step: &ShelfStep, event: &NewEvent) -> Result<bool, StoreError> {
        self.write(|tx| racks::shelf_step(tx, step, event))
    }
    fn set_host_bmc(&self, host_id: Uuid, bmc: Option<&HostBmc>, log: &ChangeLog) -> Result<(), StoreError> {
        self.write(|tx| racks::set_host_bmc(tx, host_id, bmc, log))
    }
    fn host_bmcs(&self, hosts: &[Uuid]) -> Result<Vec<HostBmc>, StoreError> {
        self.read(|c| racks::host_bmcs(c, hosts))
    }
    fn create_firmware(&self, firmware: &FirmwareRecord, log: &ChangeLog) -> Result<FirmwareRecord, StoreError> {
        self.write(|tx| racks::create_firmware(tx, firmware, log))
    }
    fn list_firmware(&self) -> Result<Vec<FirmwareRecord>, StoreError> {
        self.read(racks::list_firmware)
    }
    fn request_rack_maintenance(&self, rack: Uuid, maintenance: &Value, log: &ChangeLog) -> Result<Rack, StoreError> {
        self.write(|tx| racks::request_rack_maintenance(tx, rack, maintenance, log))
    }
    fn rack_step(
        &self,
        expected: &Rack,
        to: drover_proto::states::RackState,
        maintenance: Option<&Value>,
        event: &NewEvent,
    ) -> Result<bool, StoreError> {
        self.write(|tx| racks::rack_step(tx, expected, to, maintenance, event))
    }

    fn append_event(&self, event: &NewEvent) -> Result<i64, StoreError> {
        self.write(|tx| log::insert_event(tx, event))
    }
    fn list_events(&self, filter: &EventFilter) -> Result<Vec<Event>, StoreError> {
        self.read(|c| log::list_events(c, filter))
    }
    fn latest_event_id(&self) -> Result<i64, StoreError> {
        self.read(|c| super::cols::col(&c.query_one("SELECT COALESCE(MAX(id), 0)::BIGINT FROM events", &[]).db()?, 0))
    }
    fn append_audit(&self, audit: &NewAudit) -> Result<i64, StoreError> {
        self.write(|tx| log::insert_audit(tx, audit))
    }
    fn list_audit(&self, filter: &AuditFilter) -> Result<Vec<AuditRecord>, StoreError> {
        self.read(|c| log::list_audit(c, filter))
    }
}
