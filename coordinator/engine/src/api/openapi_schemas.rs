//! Which type each route answers with, for the success bodies of `GET /v1/openapi.json`: the
//! schema of each is generated from the very type the handler serialises
//! ([`drover_proto::api`] and the dashboard's own views), with `schemars` describing how it
//! is written, so schemathesis holds every answer to it.
//!
//! A route missing here is described by its content type only: the host routes (their bodies
//! are the agent protocol's signed envelopes, checked by the agent), the downloads and the
//! text answers, and `GET /v1/plan-input` (the planner's own input format, `observed.json`).
//! The test below holds the table to the route table: no row names a handler that is not
//! routed.

use schemars::{JsonSchema, Schema, SchemaGenerator};

use drover_proto::api::Page;
use drover_proto::api::admin::{LoopList, OperatorCertView, TokenView, VersionView};
use drover_proto::api::events::{AuditView, EventView};
use drover_proto::api::evidence::EvidenceView;
use drover_proto::api::hosts::{HostDetail, HostStateResponse, HostView};
use drover_proto::api::jobs::{ActionResponse, JobDetail, JobJson};
use drover_proto::api::maintenance::MaintenanceView;
use drover_proto::api::onboardings::{BatchView, CreatedBatch, OnboardingActionResponse, OnboardingList, OneOnboarding};
use drover_proto::api::racks::{
    ComponentFirmwareAnswer, DeviceList, DeviceView, FirmwareList, FirmwareView, HostBmcView, HostPlacement, RackDetail, RackList,
    RackMaintenanceAnswer, RackView, ShelfMaintenanceAnswer,
};
use drover_proto::api::reconciliation::{DriftList, DriftResolved, ReconciliationStatus, RunList};
use drover_proto::api::rollouts::{ReleaseView, RolloutStateResponse, RolloutStatus, RolloutView};
use drover_proto::api::sites::{Items, OverrideView, PreflightAnswer, ProbeAnswer, ProfileView, RoceUpsert, RoceView, SiteView};
use drover_proto::api::tasks::TaskView;
use drover_proto::enroll::{CreateHostResponse, EnrollResponse};
use drover_proto::publish::PublishResponse;

use crate::api::dashboard::{FleetSummary, RolloutProgress, WhoAmI};

/// Makes (or refers to) the schema of one answer type.
type SchemaFn = fn(&mut SchemaGenerator) -> Schema;

fn of<T: JsonSchema>(g: &mut SchemaGenerator) -> Schema {
    g.subschema_for::<T>()
}

/// `(handler, its 2xx JSON answer)`.
#[rustfmt::skip]
const ANSWERS: &[(&str, SchemaFn)] = &[
    ("operator::list_hosts", of::<Page<HostView>>),
    ("operator::get_host", of::<HostDetail>),
    ("tokens::list", of::<Page<TokenView>>),
    ("tokens::revoke", of::<TokenView>),
    ("operator::list_releases", of::<Page<ReleaseView>>),
    ("operator::list_rollouts", of::<Page<RolloutView>>),
    ("operator::list_events", of::<Page<EventView, i64>>),
    ("dashboard::whoami", of::<WhoAmI>),
    ("dashboard::fleet_summary", of::<FleetSummary>),
    ("operator::list_audit", of::<Page<AuditView, i64>>),
    ("version::version", of::<VersionView>),
    ("operator::list_loops", of::<LoopList>),
    ("enroll::enroll", of::<EnrollResponse>),
    ("enroll::create_host", of::<CreateHostResponse>),
    ("operator_certs::list", of::<Page<OperatorCertView>>),
    ("operator_certs::revoke", of::<OperatorCertView>),
    ("lifecycle::quarantine", of::<HostStateResponse>),
    ("lifecycle::unquarantine", of::<HostStateResponse>),
    ("lifecycle::retire", of::<HostStateResponse>),
    ("lifecycle::reactivate", of::<HostStateResponse>),
    ("lifecycle::remove", of::<HostStateResponse>),
    ("lifecycle::cordon", of::<HostStateResponse>),
    ("lifecycle::uncordon", of::<HostStateResponse>),
    ("rollouts::status", of::<RolloutStatus>),
    ("dashboard::rollout_progress", of::<RolloutProgress>),
    ("rollouts::halt", of::<RolloutStateResponse>),
    ("rollouts::resume", of::<RolloutStateResponse>),
    ("rollouts::cancel", of::<RolloutStateResponse>),
    ("rollouts::rollback", of::<RolloutStateResponse>),
    ("tasks::issue_route", of::<TaskView>),
    ("jobs::list", of::<Page<JobJson>>),
    ("jobs::get", of::<JobDetail>),
    ("evidence::for_job", of::<Page<EvidenceView, i64>>),
    ("evidence::for_host", of::<Page<EvidenceView, i64>>),
    ("jobs::action", of::<ActionResponse>),
    ("maintenance::request", of::<MaintenanceView>),
    ("maintenance::list", of::<Page<MaintenanceView>>),
    ("maintenance::get", of::<MaintenanceView>),
    ("tasks::list", of::<Page<TaskView>>),
    ("tasks::get", of::<TaskView>),
    ("onboardings::create_one", of::<OneOnboarding>),
    ("onboardings::list", of::<OnboardingList>),
    ("onboardings::create_batch", of::<CreatedBatch>),
    ("onboardings::batch", of::<BatchView>),
    ("onboardings::get", of::<OneOnboarding>),
    ("onboardings::action", of::<OnboardingActionResponse>),
    ("reconciliation::status", of::<ReconciliationStatus>),
    ("reconciliation::drift", of::<DriftList>),
    ("reconciliation::resolve", of::<DriftResolved>),
    ("reconciliation::run", of::<RunList>),
    ("racks::create_rack", of::<RackView>),
    ("racks::list_racks", of::<RackList>),
    ("racks::get_rack", of::<RackDetail>),
    ("racks::delete_rack", of::<RackView>),
    ("racks::create_switch", of::<DeviceView>),
    ("racks::list_switches", of::<DeviceList>),
    ("racks::get_switch", of::<DeviceView>),
    ("racks::delete_switch", of::<DeviceView>),
    ("racks::create_shelf", of::<DeviceView>),
    ("racks::list_shelves", of::<DeviceList>),
    ("racks::shelf_maintenance", of::<ShelfMaintenanceAnswer>),
    ("racks::get_shelf", of::<DeviceView>),
    ("racks::delete_shelf", of::<DeviceView>),
    ("racks::place_host", of::<HostPlacement>),
    ("rack_maintenance::set_bmc", of::<HostBmcView>),
    ("rack_maintenance::delete_bmc", of::<HostBmcView>),
    ("rack_maintenance::request_maintenance", of::<RackMaintenanceAnswer>),
    ("rack_maintenance::component_firmware", of::<ComponentFirmwareAnswer>),
    ("rack_maintenance::create_firmware", of::<FirmwareView>),
    ("rack_maintenance::list_firmware", of::<FirmwareList>),
    ("sites::create", of::<SiteView>),
    ("sites::list", of::<Items<SiteView>>),
    ("sites::get", of::<SiteView>),
    ("sites::patch", of::<SiteView>),
    ("sites::delete", of::<SiteView>),
    ("sites::disable", of::<SiteView>),
    ("sites::enable", of::<SiteView>),
    ("sites::credentials", of::<SiteView>),
    ("sites::probe", of::<ProbeAnswer>),
    ("sites::run_preflight", of::<PreflightAnswer>),
    ("site_items::list_profiles", of::<Items<ProfileView>>),
    ("site_items::create_profile", of::<ProfileView>),
    ("site_items::get_profile", of::<ProfileView>),
    ("site_items::patch_profile", of::<ProfileView>),
    ("site_items::list_overrides", of::<Items<OverrideView>>),
    ("site_items::create_override", of::<OverrideView>),
    ("site_items::delete_override", of::<OverrideView>),
    ("site_items::override_credentials", of::<OverrideView>),
    ("site_items::list_roce", of::<Items<RoceView>>),
    ("site_items::upsert_roce", of::<RoceUpsert>),
    ("site_items::delete_roce", of::<RoceView>),
    ("releases::publish", of::<PublishResponse>),
];

/// The schema of `handler`'s successful JSON answer (a `$ref` into `g`'s definitions), or
/// `None` where the description gives the content type only.
pub fn success(handler: &str, g: &mut SchemaGenerator) -> Option<Schema> {
    ANSWERS.iter().find(|(h, _)| *h == handler).map(|(_, schema)| schema(g))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_described_answer_is_a_routed_handler_and_named_once() {
        let routed: std::collections::BTreeSet<&str> = super::super::openapi_routes::ROUTES.iter().map(|r| r.handler).collect();
        let mut seen = std::collections::BTreeSet::new();
        for (h, _) in ANSWERS {
            assert!(routed.contains(h), "{h} is not in the route table");
            assert!(seen.insert(*h), "{h} is described twice");
        }
    }
}
