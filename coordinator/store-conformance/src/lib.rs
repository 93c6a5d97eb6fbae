//! The store conformance suite: the behaviour every [`Store`] backend must share.
//!
//! It is ordinary (non-test) code so every backend's tests (`drover-store-sqlite`'s and
//! `drover-store-postgres`'s) run exactly the same checks. A backend plugs in with one line, either one
//! `#[test]` per check:
//!
//! ```ignore
//! drover_store_conformance::store_conformance_tests!(Box::new(my_backend_for_tests()));
//! ```
//!
//! or all checks in one test with [`run_all`]. The expression (or the factory passed to
//! `run_all`) is evaluated once per store a check needs and must yield a fresh, empty store.
//!
//! Each check panics with a message naming what broke. Checks never read a clock: every
//! time is a fixed instant ([`t`]), so leases and expiries are exact.
//!
//! - [`hosts`]: hosts and lifecycle, enrollment tokens, certificates.
//! - [`releases`]: releases, manifests, rollouts, per-host rollout state.
//! - [`work`]: intents, tasks with leases, jobs, host isolation.
//! - [`jobs`]: job steps as one transaction, checked job creation, maintenance requests,
//!   which jobs hold their hosts.
//! - [`log`]: events, audit, and store calls from tokio's blocking pool ([`blocking`]).
//! - [`sites`]: MAAS sites, profiles, power-credential overrides, RoCE assignments.

#![forbid(unsafe_code)]

pub mod hosts;
pub mod jobs;
pub mod log;
pub mod racks;
pub mod releases;
pub mod sites;
pub mod work;

use std::panic::{AssertUnwindSafe, catch_unwind};

use drover_proto::states::HostLifecycle;
use drover_proto::time::Time;

pub use hosts::*;
pub use jobs::*;
pub use log::*;
pub use racks::*;
pub use releases::*;
pub use sites::*;
pub use work::*;

/// What the store's own module has in scope, which the checks (written inside it before it was
/// a crate of its own) use unqualified.
mod imports {
    pub(crate) use drover_proto::states::JobState;
    pub(crate) use drover_proto::time::Time;
}

/// The store under test, by the name the checks use for it.
pub use drover_store as store;
use drover_store::{EventFilter, Host, NewEvent, NewHost, Store};

/// Makes a fresh, empty store.
pub type Factory<'a> = &'a dyn Fn() -> Box<dyn Store>;

/// One check of the suite.
pub type Check = fn(Factory<'_>);

/// The one list of checks; the test macro and [`CHECKS`] are both generated from it, so a
/// check can never be run by one and forgotten by the other.
#[doc(hidden)]
#[macro_export]
macro_rules! __drover_store_checks {
    ($callback:ident ! $args:tt) => {
        $crate::$callback! { $args
            host_create_get_and_lookup,
            hostname_unique_among_live_hosts,
            hostname_reuse_after_delete_gets_new_id,
            host_transition_writes_event,
            host_illegal_transition_writes_nothing,
            host_stale_transition_writes_nothing,
            host_transition_race_has_one_winner,
            host_ops_on_unknown_host_not_found,
            host_list_filters_and_pages,
            host_checkin_recorded,
            host_schedulable_flag,
            quarantined_host_is_never_schedulable,
            host_health_keeps_the_latest_report,
            token_consumed_once,
            token_single_use_under_concurrency,
            token_for_other_host_refused,
            token_expired_refused,
            revoking_a_host_ends_its_unused_tokens,
            revoked_token_is_refused,
            enrollment_is_one_transaction,
            evidence_is_kept_and_listed_by_host_job_and_task,
            reenrollment_needs_an_offline_host_with_no_live_certificate,
            token_unknown_or_malformed_refused,
            token_hash_never_listed,
            cert_record_get_and_list,
            cert_revocation_and_crl,
            cert_revoke_all_for_host,
            release_version_monotonic,
            release_files_byte_exact,
            manifest_bytes_immutable,
            manifest_root_from_the_newest_release,
            manifest_without_signature_refused,
            release_listing_names_publisher_and_opened_rollouts,
            rollout_open_idempotent,
            rollout_state_cas_and_legality,
            plan_write_is_one_compare_and_set_transaction,
            host_listings_read_rollout_rows_for_a_page,
            plan_snapshot_reads_what_the_planner_needs,
            cancel_intents_withdraws_wanted_intents_of_the_rollout,
            intent_put_supersedes_previous,
            checkin_view_reads_without_leasing,
            intent_status_transitions,
            intent_host_isolation,
            task_enqueue_idempotent,
            task_lease_expiry_and_requeue,
            task_concurrent_leases_never_double,
            task_lease_order_and_max,
            task_host_isolation,
            task_complete_records_result,
            completed_task_secrets_are_erased,
            job_create_get_list,
            job_state_cas_and_legality,
            job_step_stale_state_or_progress_writes_nothing,
            job_step_illegal_transition_refused,
            job_step_enqueues_and_requeues_tasks,
            job_step_host_ops_apply_with_events,
            job_step_failing_host_op_rolls_back_everything,
            job_checked_create_refuses_held_host_naming_the_job,
            maintenance_all_or_nothing_refusal_leaves_no_host_changed,
            maintenance_supersedes_failed_maintenance_job,
            maintenance_refuses_running_maintenance_job,
            jobs_and_maintenance_page_by_creation_then_id_and_count,
            plan_snapshot_held_excludes_pending_and_activate,
            events_filter_and_page_stable,
            audit_append_filter_page,
            blocking_runs_off_the_runtime_thread,
            site_create_get_list_with_default_profile,
            site_name_unique,
            site_update_compare_and_set,
            profile_names_unique_per_site,
            overrides_unique_ordered_and_scoped,
            roce_upsert_keys_and_scoping,
            maas_binding_is_one_to_one,
            maas_binding_observations_and_drift,
            maas_reconcile_batches_and_resolution,
            racks_devices_and_placement,
            shelf_maintenance_is_all_or_nothing,
            shelf_steps_are_compare_and_set,
            rack_maintenance_bmcs_and_firmware,
            rack_maintenance_holds_its_machines,
        }
    };
}

/// Expands to one `#[test]` per conformance check, each on a fresh store from `$make` (an
/// expression yielding `Box<dyn Store>`, or a `Box` of a concrete store).
#[macro_export]
macro_rules! store_conformance_tests {
    ($make:expr) => {
        $crate::__drover_store_checks!(__drover_store_tests!($make));
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __drover_store_tests {
    (($make:expr) $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                let make = || -> ::std::boxed::Box<dyn $crate::store::Store> { $make };
                $crate::$name(&make);
            }
        )*
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __drover_store_check_list {
    (() $($name:ident),* $(,)?) => {
        /// Every check, by name, in suite order.
        pub const CHECKS: &[(&str, Check)] = &[$((stringify!($name), $name as Check)),*];
    };
}

crate::__drover_store_checks!(__drover_store_check_list!());

/// Runs every check on fresh stores from `make`; panics listing each check that failed.
pub fn run_all(make: Factory<'_>) {
    let failed: Vec<&str> =
        CHECKS.iter().filter(|(_, check)| catch_unwind(AssertUnwindSafe(|| check(make))).is_err()).map(|(name, _)| *name).collect();
    assert!(failed.is_empty(), "{} of {} store conformance checks failed: {}", failed.len(), CHECKS.len(), failed.join(", "));
}

// ---- helpers shared by the checks ---------------------------------------------------------

/// A fixed instant `secs` seconds after an arbitrary epoch for the suite.
pub fn t(secs: i64) -> Time {
    Time::from_unix(1_900_000_000 + secs).expect("suite times are in range")
}

/// Creates a host (no token) at `t(0)`.
pub(crate) fn host(s: &dyn Store, hostname: &str) -> Host {
    s.create_host(&NewHost { hostname: hostname.into(), created_at: t(0), token: None }).expect("create host")
}

/// Moves a host along `path` (each step from the previous state).
pub(crate) fn drive(s: &dyn Store, host: &Host, path: &[HostLifecycle]) -> Host {
    let mut current = host.clone();
    for to in path {
        current = s.transition_host(current.id, current.state, *to, "suite", t(1)).expect("legal transition");
    }
    current
}

/// Every lifecycle step from `bootstrap_issued` to `deleted`.
pub(crate) const TO_DELETED: &[HostLifecycle] = &[
    HostLifecycle::Enrolling,
    HostLifecycle::Active,
    HostLifecycle::Draining,
    HostLifecycle::Retired,
    HostLifecycle::Removing,
    HostLifecycle::Deleted,
];

/// Every event, in order.
pub(crate) fn all_events(s: &dyn Store) -> Vec<drover_store::Event> {
    let mut out = Vec::new();
    loop {
        let page =
            s.list_events(&EventFilter { after_id: out.last().map(|e: &drover_store::Event| e.id), limit: 500, ..Default::default() });
        let page = page.expect("list events");
        if page.is_empty() {
            return out;
        }
        out.extend(page);
    }
}

/// A plain event for filters and paging.
pub(crate) fn note(kind: &str, at: i64) -> NewEvent {
    NewEvent {
        at: t(at),
        kind: kind.into(),
        host_id: None,
        rollout_id: None,
        job_id: None,
        message: format!("{kind} at {at}"),
        data: serde_json::json!({ "at": at }),
    }
}
