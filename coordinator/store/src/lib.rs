//! The coordinator's durable state behind one [`Store`] trait (the crate `drover-store`): the
//! trait, its errors, its records and the rules every backend applies, with no backend and no
//! async runtime in it.
//!
//! - [`records`] (and [`plans`], [`rack_records`], [`site_records`], [`evidence_records`]):
//!   the rows (hosts, tokens, certificates, releases, rollouts, intents, tasks, jobs,
//!   maintenance requests, events, audit), re-exported here.
//! - [`rules`]: the checks both SQL backends apply outside any SQL, one copy of them.
//! - [`erase`]: the secrets a completed task's stored envelope loses.
//! - [`fence`]: the leader term a blocking thread's writes are fenced with.
//!
//! The backends are crates of their own: `drover-store-sqlite` (the default, one WAL-mode
//! SQLite file in the state dir) and `drover-store-postgres` (for replicas, one PostgreSQL
//! database they share). The checks every backend must pass are the crate
//! `drover-store-conformance`, which only tests depend on: the store that ships is built once,
//! with no test feature, for `cargo build` and `cargo test` alike.
//!
//! The trait is synchronous and object-safe so a backend is plain blocking code; the async
//! server (the engine's `store` module) reaches it through `blocking`, which runs the call on
//! tokio's blocking pool so a slow disk or a held lock never stalls a runtime worker thread —
//! except for the check-in's read-only look ([`Store::checkin_view`]), which runs `inline`
//! (see there why). Every operation that changes more than one row (a transition and its
//! event, a token check and its use, a release and its manifests) is one transaction: a crash
//! leaves either all of it or none.
//!
//! Errors are structured ([`StoreError`]) so the API can answer 404 / 409 / 400 without parsing
//! messages, and a backend failure stays distinguishable from a refusal ([`StoreError::kind`]).

#![forbid(unsafe_code)]

pub mod erase;
pub mod evidence_records;
pub mod fence;
pub mod plans;
pub mod rack_records;
pub mod records;
pub mod rules;
pub mod site_records;

use drover_proto::names::RolloutId;
use drover_proto::release::ReleaseFiles;
use drover_proto::states::{HostLifecycle, HostRolloutState, JobState, RolloutState};
use drover_proto::time::Time;
use serde_json::Value;
use sha2::{Digest, Sha256};
use uuid::Uuid;

pub use evidence_records::*;
pub use plans::*;
pub use rack_records::*;
pub use records::*;
pub use site_records::*;

/// Everything a store operation can refuse or fail with.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The record does not exist (or, for host-bound records, is not this host's).
    #[error("{what} {id} not found")]
    NotFound {
        /// Which kind of record.
        what: &'static str,
        /// Its id as given.
        id: String,
    },
    /// The request collides with what is stored (a duplicate id or a live hostname).
    #[error("{what} {id}: {message}")]
    Conflict {
        /// Which kind of record.
        what: &'static str,
        /// Its id.
        id: String,
        /// What collides.
        message: String,
    },
    /// The state machine does not allow `from -> to`; nothing was written.
    #[error("illegal {what} transition {from} -> {to}")]
    IllegalTransition {
        /// Which state machine.
        what: &'static str,
        /// From.
        from: String,
        /// To.
        to: String,
    },
    /// Compare-and-set failed: the record is no longer in the state the caller saw.
    #[error("{what} {id} is {actual}, not {expected}")]
    StaleState {
        /// Which kind of record.
        what: &'static str,
        /// Its id.
        id: String,
        /// The state the caller expected.
        expected: String,
        /// The state it is in.
        actual: String,
    },
    /// A release whose version is not above the highest stored one.
    #[error("release version {version} is not greater than the stored version {highest}")]
    VersionNotIncreasing {
        /// Offered.
        version: u64,
        /// Already stored.
        highest: u64,
    },
    /// A manifest whose id is stored with other bytes: manifests never change under their id.
    #[error("rollout manifest {rollout_id} is already stored with other bytes")]
    ManifestBytesDiffer {
        /// The rollout id.
        rollout_id: String,
    },
    /// An enrollment token was refused; the token stays as it was.
    #[error("{refusal}")]
    TokenRefused {
        /// Why.
        refusal: TokenRefusal,
    },
    /// The caller passed something malformed (not a hex serial, a hash of the wrong length…).
    #[error("invalid {what}: {message}")]
    Invalid {
        /// Which input.
        what: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The store was written by a newer Drover; opening it could corrupt it.
    #[error(
        "the store's schema version {found} is newer than this coordinator supports ({supported}); upgrade the coordinator or restore a backup"
    )]
    SchemaTooNew {
        /// Version found in the store.
        found: i64,
        /// Highest version this build knows.
        supported: i64,
    },
    /// The filesystem under the store is full. The write was rolled back whole (nothing of it
    /// is kept, SQLite's transaction guarantee) and writes fail until space is freed; reads go
    /// on.
    #[error("no space left for the store{}: {source}", free_note(.available_bytes))]
    StorageFull {
        /// Bytes still free on the filesystem when it was seen, where that was read.
        available_bytes: Option<u64>,
        /// What failed.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A leader's write found that this replica no longer holds the leader lease it acts on
    /// (another replica took over, or it lapsed): nothing was written.
    #[error("not the leader: lease {lease} (token {token}) is no longer held by this replica; nothing was written")]
    NotLeader {
        /// The lease.
        lease: String,
        /// The fencing token this replica held.
        token: i64,
    },
    /// The backend itself failed (I/O, corruption, a lost connection).
    #[error("store backend failed: {source}")]
    Backend {
        /// The backend's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Coarse classes of [`StoreError`], for mapping to HTTP statuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// 404.
    NotFound,
    /// 409: duplicates, stale or illegal transitions, monotonicity.
    Conflict,
    /// 400 (or 403 for tokens, at the caller's choice).
    Refused,
    /// 500/503.
    Backend,
}

impl StoreError {
    /// Which class the error belongs to.
    pub fn kind(&self) -> ErrorKind {
        match self {
            StoreError::NotFound { .. } => ErrorKind::NotFound,
            StoreError::Conflict { .. }
            | StoreError::IllegalTransition { .. }
            | StoreError::StaleState { .. }
            | StoreError::VersionNotIncreasing { .. }
            | StoreError::ManifestBytesDiffer { .. }
            | StoreError::NotLeader { .. } => ErrorKind::Conflict,
            StoreError::TokenRefused { .. } | StoreError::Invalid { .. } => ErrorKind::Refused,
            StoreError::SchemaTooNew { .. } | StoreError::StorageFull { .. } | StoreError::Backend { .. } => ErrorKind::Backend,
        }
    }

    /// A backend failure from any error.
    pub fn backend(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        StoreError::Backend { source: e.into() }
    }

    /// A record that does not exist.
    pub fn not_found(what: &'static str, id: impl ToString) -> Self {
        StoreError::NotFound { what, id: id.to_string() }
    }

    /// A request that collides with what is stored.
    pub fn conflict(what: &'static str, id: impl ToString, message: impl Into<String>) -> Self {
        StoreError::Conflict { what, id: id.to_string(), message: message.into() }
    }

    /// Malformed input.
    pub fn invalid(what: &'static str, message: impl Into<String>) -> Self {
        StoreError::Invalid { what, message: message.into() }
    }
}

/// ` (N bytes free)` when the free space is known.
fn free_note(available_bytes: &Option<u64>) -> String {
    available_bytes.map(|b| format!(" ({b} bytes free)")).unwrap_or_default()
}

/// Lowercase hex sha256 of an enrollment token: the only form the store ever sees.
pub fn hash_token(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// The audit action a release's publication is recorded under, its target the version:
/// [`Store::list_releases`] names each release's publisher from it.
pub const RELEASE_PUBLISH_ACTION: &str = "release.publish";

/// The coordinator's durable state. Synchronous and object-safe: async callers go through
/// the engine's `store::blocking`. Every method is one transaction; the conformance suite
/// (`drover-store-conformance`) pins the semantics every backend must share.
pub trait Store: Send + Sync {
    /// Cheap liveness probe for `/readyz`.
    fn ping(&self) -> Result<(), StoreError>;
    /// Whether a short read may run on an async worker thread (the engine's `store::read_now`):
    /// true for a local file, false for a backend whose every read waits on the network.
    fn reads_inline(&self) -> bool {
        true
    }
    /// Whether writes can be expected to succeed, for `/readyz`: [`StoreError::StorageFull`]
    /// while the filesystem under the store is (nearly) full, so a coordinator goes not-ready
    /// before, not only after, a write fails for want of space. Backends with nothing to check
    /// keep the default.
    fn check_writable(&self) -> Result<(), StoreError> {
        Ok(())
    }

    // ---- hosts -------------------------------------------------------------------------

    /// Creates a host in `bootstrap_issued` with a fresh id (and its token, if given), plus a
    /// `host.created` event. `Conflict` if a host that is not deleted has the hostname.
    fn create_host(&self, new: &NewHost) -> Result<Host, StoreError>;
    /// The host with this id, deleted ones included.
    fn get_host(&self, id: Uuid) -> Result<Option<Host>, StoreError>;
    /// The host that is not deleted and has this hostname.
    fn get_host_by_hostname(&self, hostname: &str) -> Result<Option<Host>, StoreError>;
    /// Hosts ordered by (hostname, id), filtered and paged.
    fn list_hosts(&self, filter: &HostFilter) -> Result<Vec<Host>, StoreError>;
    /// Moves a host `from -> to` if the lifecycle allows it and the host is still in `from`,
    /// writing a `host.transition` event with `reason`. Refusals write nothing.
    fn transition_host(&self, id: Uuid, from: HostLifecycle, to: HostLifecycle, reason: &str, at: Time) -> Result<Host, StoreError>;
    /// Records a check-in (no event: check-ins are metrics, not history).
    fn record_checkin(&self, id: Uuid, checkin: &Checkin) -> Result<Host, StoreError>;
    /// Records many hosts' latest check-ins (a batch buffered by the server); hosts that no
    /// longer exist are skipped. Returns how many were recorded. The default loops over
    /// [`Store::record_checkin`]; a backend may do it in one transaction.
    fn record_checkins(&self, batch: &[(Uuid, Checkin)]) -> Result<u64, StoreError> {
        let mut n = 0;
        for (id, checkin) in batch {
            match self.record_checkin(*id, checkin) {
                Ok(_) => n += 1,
                Err(StoreError::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(n)
    }
    /// Cordons (`false`) or uncordons a host, with a `host.schedulable` event.
    fn set_schedulable(&self, id: Uuid, schedulable: bool, reason: &str, at: Time) -> Result<Host, StoreError>;

    // ---- enrollment tokens -------------------------------------------------------------

    /// Binds a new token to a host that is not deleted.
    fn create_token(&self, host_id: Uuid, token: &EnrollmentToken, at: Time) -> Result<TokenInfo, StoreError>;
    /// Checks and uses a token atomically: exactly one caller ever gets `Ok` for a token.
    /// Refusals are [`StoreError::TokenRefused`] and leave the token as it was.
    fn consume_token(&self, token_hash: &str, expected_host: Option<Uuid>, now: Time) -> Result<Uuid, StoreError>;
    /// Tokens (never their hashes), newest first, optionally for one host.
    fn list_tokens(&self, host_id: Option<Uuid>) -> Result<Vec<TokenInfo>, StoreError>;
    /// Revokes one unused token by its record id, with a `host.token_revoked` event: from
    /// then on [`Store::consume_token`] refuses it ([`TokenRefusal::Revoked`]). Revoking a
    /// revoked token changes nothing and answers it as it is (the first revocation stays).
    /// `NotFound` for an unknown id; `Conflict` for a token already used (its host enrolled:
    /// that host's certificate is what to revoke).
    fn revoke_token(&self, id: Uuid, at: Time) -> Result<TokenInfo, StoreError>;

    // ---- certificates ------------------------------------------------------------------

    /// Records an issued certificate. `Conflict` on a serial seen before.
    fn record_cert(&self, cert: &NewCert) -> Result<(), StoreError>;
    /// The certificate with this serial (hex, any case).
    fn get_cert(&self, serial: &str) -> Result<Option<CertRecord>, StoreError>;
    /// Certificates, optionally of one host, by serial.
    fn list_certs(&self, host_id: Option<Uuid>) -> Result<Vec<CertRecord>, StoreError>;
    /// Enrollment as one transaction: spends the token (single use, unexpired, issued for
    /// `host_id`), moves the host `bootstrap_issued -> enrolling`, and records the certificate
    /// `issue` makes for it, with the keys it registers. A re-enrollment — an `offline` host none of whose certificates is
    /// still valid, as a reimage leaves it — keeps its state (its first check-in makes it
    /// `active`) and gets the new certificate. Any refusal or failure — including `issue`'s — leaves the token
    /// unspent and nothing written, so a failed enrollment can simply be retried.
    fn enroll_host(
        &self,
        token_hash: &str,
        host_id: Uuid,
        now: Time,
        issue: &mut dyn FnMut(&Host) -> Result<Enrolled, StoreError>,
    ) -> Result<Host, StoreError>;
    /// The keys a host registered when it last enrolled (both `None` for a host that has
    /// not, or whose agent predates them). `NotFound` for an unknown host.
    fn host_keys(&self, host_id: Uuid) -> Result<HostKeys, StoreError>;
    /// Replaces each host's latest health report with the one given, unless the stored one is
    /// newer; hosts that do not exist are skipped. One transaction; returns how many rows
    /// were written.
    fn record_host_health(&self, batch: &[HostHealth]) -> Result<u64, StoreError>;
    /// A host's latest health report, if its agent ever sent one.
    fn host_health(&self, host_id: Uuid) -> Result<Option<HostHealth>, StoreError>;
    /// Keeps host-signed evidence (already verified by the caller); returns its `seq`.
    fn put_evidence(&self, evidence: &NewEvidence) -> Result<i64, StoreError>;
    /// Kept evidence matching `filter`, oldest first.
    fn list_evidence(&self, filter: &EvidenceFilter) -> Result<Vec<EvidenceRecord>, StoreError>;
    /// Revokes one certificate; `false` if it already was (the first revocation stays).
    fn revoke_cert(&self, serial: &str, at: Time, reason: &str) -> Result<bool, StoreError>;
    /// Revokes every unrevoked certificate of a host and ends its unused enrollment tokens
    /// (so a host revoked before enrolling cannot enroll); returns how many certificates.
    fn revoke_host_certs(&self, host_id: Uuid, at: Time, reason: &str) -> Result<u64, StoreError>;
    /// Every revoked certificate, by serial: the CRL's contents.
    fn list_revoked(&self) -> Result<Vec<RevokedCert>, StoreError>;

    // ---- releases and manifests -------------------------------------------------------

    /// Stores a (verified) release byte-exact, and each `rollouts/<id>.json` with its `.sig`
    /// as that rollout's manifest. `VersionNotIncreasing` unless `version` is above every
    /// stored one; `ManifestBytesDiffer` if a manifest id is stored with other bytes; either
    /// way nothing is written.
    fn put_release(&self, version: u64, signed_at: Time, files: &ReleaseFiles) -> Result<(), StoreError>;
    /// The release with the highest version.
    fn latest_release(&self) -> Result<Option<Release>, StoreError>;
    /// The highest stored release version, without its files (a cheap read for every
    /// bundle request).
    fn latest_release_version(&self) -> Result<Option<u64>, StoreError>;
    /// One release.
    fn get_release(&self, version: u64) -> Result<Option<Release>, StoreError>;
    /// Every release without its bytes, newest first, each with its publisher, the rollouts
    /// it opened and their channels (one read for the whole listing).
    fn list_releases(&self) -> Result<Vec<ReleaseSummary>, StoreError>;
    /// A manifest and its signature file, byte-exact.
    fn get_manifest(&self, rollout_id: &RolloutId) -> Result<Option<Manifest>, StoreError>;
    /// A manifest's signed root (`roots/<id>.json`) and its `.sig`, byte-exact, from the newest
    /// release that carried them (`docs/manifest-proofs.md`).
    fn get_manifest_root(&self, rollout_id: &RolloutId) -> Result<Option<SignedBytes>, StoreError>;

    // ---- rollouts ----------------------------------------------------------------------

    /// Opens a rollout (with a `rollout.opened` event). Opening it again with the same
    /// manifest hash returns the stored one unchanged; another hash is a `Conflict`.
    fn open_rollout(&self, new: &NewRollout) -> Result<Rollout, StoreError>;
    /// One rollout.
    fn get_rollout(&self, rollout_id: &RolloutId) -> Result<Option<Rollout>, StoreError>;
    /// Rollouts by opening time, then id.
    fn list_rollouts(&self, filter: &RolloutFilter) -> Result<Vec<Rollout>, StoreError>;
    /// Compare-and-set `from -> to` on a legal transition, with a `rollout.transition` event.
    fn set_rollout_state(
        &self,
        rollout_id: &RolloutId,
        from: RolloutState,
        to: RolloutState,
        reason: &str,
        at: Time,
    ) -> Result<Rollout, StoreError>;
    /// Every host with a recorded state in a rollout, by wave then hostname.
    fn list_host_rollouts(&self, rollout_id: &RolloutId) -> Result<Vec<HostRollout>, StoreError>;
    /// For each of these hostnames that any rollout names, its row in the most recently opened
    /// such rollout (its channel, wave and state there), in one read: what a host listing
    /// shows beside each host. Hostnames no rollout names are absent from the answer.
    fn latest_host_rollouts(&self, hostnames: &[String]) -> Result<Vec<HostRollout>, StoreError>;
    /// How many hosts each of these rollouts holds in each state, in one read (a rollout
    /// listing's `Converged (2 skipped)`); states with no host are absent.
    fn host_rollout_counts(&self, rollout_ids: &[RolloutId]) -> Result<Vec<(RolloutId, HostRolloutState, u64)>, StoreError>;

    // ---- the rollout executor ----------------------------------------------------------

    /// What the planner decides over, from one read snapshot: hosts that are not deleted with
    /// their last reports, rollouts that are not pruned with their hosts' states, channel
    /// bookkeeping, and hosts held by jobs (started, unfinished, and not in the rollout-owned
    /// `activate` stage).
    fn plan_snapshot(&self) -> Result<PlanSnapshot, StoreError>;
    /// Applies one plan's ops in order, with their events and audit records, in one
    /// transaction. Any op finding other than what it expects (`StaleState`,
    /// `IllegalTransition`, `Conflict`, `NotFound`) fails the whole write: nothing is written.
    fn apply_plan(&self, write: &PlanWrite, audits: &[NewAudit]) -> Result<(), StoreError>;
    /// Replaces a host's last report (written only when it changed; see `checkin_view`).
    fn record_host_report(&self, host_id: Uuid, report: &HostReport, at: Time) -> Result<(), StoreError>;

    // ---- intents -----------------------------------------------------------------------

    /// Stores a signed intent as the host's current one; the previous current intent, if still
    /// live, becomes `superseded`. Storing the same intent again is a no-op; the same id with
    /// other content is a `Conflict`.
    fn put_intent(&self, new: &NewIntent) -> Result<IntentRecord, StoreError>;
    /// The host's current intent, whatever its status.
    fn current_intent(&self, host_id: Uuid) -> Result<Option<IntentRecord>, StoreError>;
    /// The intent if it is this host's; another host's intent is `None`.
    fn get_intent(&self, host_id: Uuid, intent_id: Uuid) -> Result<Option<IntentRecord>, StoreError>;
    /// Moves this host's intent to `status` (same status: no-op). Another host's intent is
    /// `NotFound`; an illegal move `IllegalTransition`.
    fn set_intent_status(&self, host_id: Uuid, intent_id: Uuid, status: IntentStatus, at: Time) -> Result<IntentRecord, StoreError>;

    // ---- tasks -------------------------------------------------------------------------

    /// Queues a task; `true` if new, `false` if this exact task was already queued (no
    /// duplicate). The same id with other content is a `Conflict`.
    fn enqueue_task(&self, new: &NewTask) -> Result<bool, StoreError>;
    /// Leases up to `max` of the host's tasks that are queued or whose lease lapsed (oldest
    /// first) until `now + lease_secs`. A task never has two live leases.
    fn lease_tasks(&self, host_id: Uuid, now: Time, lease_secs: u64, max: u32) -> Result<Vec<TaskRecord>, StoreError>;
    /// What a check-in needs to know, from one read snapshot and without writing: the host,
    /// its current intent, and whether it has a task to lease now. Only indexed point reads,
    /// so the server answers a routine check-in from it on a runtime thread (the engine's
    /// `store::inline`) and goes to the blocking pool only when something must be written.
    fn checkin_view(&self, host_id: Uuid, now: Time) -> Result<CheckinView, StoreError>;
    /// [`Store::checkin_view`] from memory, without waiting, when this backend keeps a copy
    /// it knows to be current (PostgreSQL's replicas, `drover_store_postgres::view_cache`); `None` means
    /// ask [`Store::checkin_view`]. A cached host's check-in fields may be older than the
    /// store's.
    fn checkin_view_cached(&self, _host_id: Uuid, _now: Time) -> Option<CheckinView> {
        None
    }
    /// Records the host's result. Another host's task is `NotFound`. Completing again with the
    /// same result is a no-op; with another result a `Conflict`. Secrets the task carried (a
    /// MAAS token) are erased from the stored envelope in the same transaction ([`erase`]).
    fn complete_task(&self, host_id: Uuid, task_id: Uuid, result: &Value, now: Time) -> Result<TaskRecord, StoreError>;
    /// Returns every lapsed lease to the queue; how many.
    fn requeue_expired(&self, now: Time) -> Result<u64, StoreError>;
    /// One task (operator view: no host binding).
    fn get_task(&self, task_id: Uuid) -> Result<Option<TaskRecord>, StoreError>;
    /// Tasks by creation time, then id.
    fn list_tasks(&self, filter: &TaskFilter) -> Result<Vec<TaskRecord>, StoreError>;

    // ---- jobs --------------------------------------------------------------------------

    /// Creates a job in `pending` (with a `job.created` event). The same job again is a
    /// no-op returning it; the same id with other content a `Conflict`.
    fn create_job(&self, new: &NewJob) -> Result<Job, StoreError>;
    /// Creates a job on a host that is free for it, in one transaction: the host exists
    /// (`NotFound`), is in one of `allowed` (`Conflict` naming host and state), and no
    /// unfinished job holds it (`Conflict` naming the holding job, its kind and state); then
    /// [`Store::create_job`] and `audits`. Retrying with a job already stored answers as
    /// [`Store::create_job`] does and writes nothing.
    fn create_job_checked(&self, new: &NewJob, allowed: &[HostLifecycle], audits: &[NewAudit]) -> Result<Job, StoreError>;
    /// The checks of [`Store::create_job_checked`] on `host_id` alone, writing nothing: what a
    /// dry run answers (the same `NotFound` and `Conflict`s a real request would get now).
    fn check_job_start(&self, host_id: Uuid, allowed: &[HostLifecycle]) -> Result<(), StoreError>;
    /// One job.
    fn get_job(&self, job_id: Uuid) -> Result<Option<Job>, StoreError>;
    /// Compare-and-set `from -> to` on a legal transition, with a `job.transition` event.
    fn set_job_state(&self, job_id: Uuid, from: JobState, to: JobState, reason: &str, at: Time) -> Result<Job, StoreError>;
    /// Replaces the job's progress read model.
    fn set_job_progress(&self, job_id: Uuid, progress: &Value, at: Time) -> Result<Job, StoreError>;
    /// Applies one step of a job in one write transaction: the compare-and-set on its state and
    /// progress (`StaleState`), a legal transition with its event (`IllegalTransition`), the
    /// task it enqueues or requeues, its host changes in order, events and audits. Any error
    /// rolls back all of it. Returns the job after the step.
    fn apply_job_step(&self, step: &JobStep) -> Result<Job, StoreError>;
    /// Jobs by creation time, then id.
    fn list_jobs(&self, filter: &JobFilter) -> Result<Vec<Job>, StoreError>;
    /// How many jobs there are of each kind in each state (pairs with none left out), counted
    /// by the database: what `/metrics` exports without reading every job.
    fn count_jobs(&self) -> Result<Vec<JobCount>, StoreError>;

    // ---- maintenance requests ----------------------------------------------------------

    /// Creates a maintenance request and its jobs (one per host) all-or-nothing, in one
    /// transaction: every host passes [`Store::create_job_checked`]'s checks, except that an
    /// unfinished `maintenance` job in `failed_retryable` or `failed_manual_intervention` does
    /// not hold its host — it is superseded (moved to `cancelled` with its event), since the
    /// new request is how an operator clears a failed one. Any refusal names the first
    /// offending host (id and hostname) and writes nothing. The same request again (same
    /// content and job ids) returns what is stored; the same id with other content is a
    /// `Conflict`.
    fn create_maintenance(&self, new: &NewMaintenance, allowed: &[HostLifecycle]) -> Result<(MaintenanceRecord, Vec<Job>), StoreError>;
    /// One maintenance request.
    fn get_maintenance(&self, request_id: Uuid) -> Result<Option<MaintenanceRecord>, StoreError>;
    /// Maintenance requests, oldest first (ids breaking ties), as `filter` pages them.
    fn list_maintenance(&self, filter: &MaintenanceFilter) -> Result<Vec<MaintenanceRecord>, StoreError>;

    // ---- MAAS sites (bare-metal-lifecycle.md §3) -----------------------------------------
    //
    // Every write is one transaction with its `ChangeLog` (event and audit record); a refusal
    // writes nothing. None of these rows holds a secret value, only secret-store paths.

    /// Creates a site and its default profile (`site.default_profile_id` = `profile.id`).
    /// `Conflict` when the name is taken.
    fn create_site(&self, site: &Site, profile: &Profile, log: &ChangeLog) -> Result<Site, StoreError>;
    /// One site.
    fn get_site(&self, id: Uuid) -> Result<Option<Site>, StoreError>;
    /// The site with this name.
    fn get_site_by_name(&self, name: &str) -> Result<Option<Site>, StoreError>;
    /// Every site, by name.
    fn list_sites(&self) -> Result<Vec<Site>, StoreError>;
    /// Replaces a site's row if its revision is still `expected_revision` (`StaleState`
    /// otherwise); the stored revision becomes `expected_revision + 1`. `Conflict` on a name
    /// taken by another site; `NotFound` for an unknown id; `Invalid` when the default
    /// profile is not one of the site's.
    fn update_site(&self, site: &Site, expected_revision: u64, log: &ChangeLog) -> Result<Site, StoreError>;
    /// Adds a profile to an existing site (`NotFound`); `Conflict` on a name taken in the site.
    fn create_profile(&self, profile: &Profile, log: &ChangeLog) -> Result<Profile, StoreError>;
    /// One profile.
    fn get_profile(&self, id: Uuid) -> Result<Option<Profile>, StoreError>;
    /// A site's profiles, by name.
    fn list_profiles(&self, site_id: Uuid) -> Result<Vec<Profile>, StoreError>;
    /// Replaces a profile's row under compare-and-set on its revision, like [`Store::update_site`].
    fn update_profile(&self, profile: &Profile, expected_revision: u64, log: &ChangeLog) -> Result<Profile, StoreError>;
    /// Adds a power-credential override to an existing site; `Conflict` when the site already
    /// has one for the same selector type and value.
    fn create_override(&self, o: &PowerOverride, log: &ChangeLog) -> Result<PowerOverride, StoreError>;
    /// A site's overrides, in selection order (type, then value).
    fn list_overrides(&self, site_id: Uuid) -> Result<Vec<PowerOverride>, StoreError>;
    /// Removes one of a site's overrides and returns it; `NotFound` if it is not the site's.
    fn delete_override(&self, site_id: Uuid, id: Uuid, log: &ChangeLog) -> Result<PowerOverride, StoreError>;
    /// Inserts or updates RoCE assignments keyed by `(site, hostname, interface)`, all or
    /// nothing. `NotFound` for an unknown site.
    fn upsert_roce(&self, site_id: Uuid, items: &[NewRoce], at: Time, log: &ChangeLog) -> Result<RoceUpsert, StoreError>;
    /// A site's assignments by hostname then interface, optionally of one host.
    fn list_roce(&self, site_id: Uuid, hostname: Option<&str>) -> Result<Vec<RoceAssignment>, StoreError>;
    /// Removes one of a site's assignments and returns it; `NotFound` if it is not the site's.
    fn delete_roce(&self, site_id: Uuid, id: Uuid, log: &ChangeLog) -> Result<RoceAssignment, StoreError>;

    // ---- MAAS bindings (bare-metal-lifecycle.md §6.5) -------------------------------------

    /// Binds a host (not deleted, `NotFound` otherwise) to a machine of an existing site. The
    /// same binding again returns the stored one; a host bound to another machine, or the
    /// machine bound to another host, is a `Conflict` naming it. Written with `log`.
    fn put_maas_binding(&self, binding: &MaasBinding, log: &ChangeLog) -> Result<MaasBinding, StoreError>;
    /// A host's binding.
    fn get_maas_binding(&self, host_id: Uuid) -> Result<Option<MaasBinding>, StoreError>;
    /// The binding of a site's machine.
    fn get_maas_binding_by_machine(&self, site_id: Uuid, system_id: &str) -> Result<Option<MaasBinding>, StoreError>;
    /// Bindings, of one site or all, by host id.
    fn list_maas_bindings(&self, site_id: Option<Uuid>) -> Result<Vec<MaasBinding>, StoreError>;
    /// Records what MAAS reported about a bound host (`NotFound` when unbound); an older
    /// observation than the stored one is ignored, so a slow reader never rolls state back.
    fn observe_maas_binding(&self, host_id: Uuid, observation: &MaasObservation) -> Result<MaasBinding, StoreError>;
    /// Opens a drift (`Some(details)`; an open drift keeps its first detection time and takes
    /// the new details) or resolves the open one (`None`; nothing open: no change).
    fn set_maas_drift(&self, host_id: Uuid, drift: Option<&Value>, at: Time) -> Result<MaasBinding, StoreError>;
    /// Removes a host's binding (after a full decommission); returns it, `NotFound` if none.
    fn delete_maas_binding(&self, host_id: Uuid, log: &ChangeLog) -> Result<MaasBinding, StoreError>;
    /// A site's bound hosts that are not deleted, with their lifecycle and unfinished jobs:
    /// what one reconciler pass reads, in one read transaction.
    fn maas_reconcile_snapshot(&self, site_id: Uuid) -> Result<Vec<ReconcileRow>, StoreError>;
    /// Applies one batch of a reconciler pass in one transaction. A change whose host is no
    /// longer in its `expected_state` (or no longer bound) is skipped whole and listed.
    fn apply_maas_reconcile(&self, batch: &[ReconcileChange], at: Time) -> Result<ReconcileApplied, StoreError>;
    /// An operator resolves a host's open drift (`Conflict` when none is open, `NotFound`
    /// when unbound): the drift closes, its details are kept as acknowledged so the same
    /// condition is not reopened until it has healed, and `log` is written with it.
    fn resolve_maas_drift(&self, host_id: Uuid, at: Time, log: &ChangeLog) -> Result<MaasBinding, StoreError>;

    // ---- racks and their devices -------------------------------------------------------
    //
    // Every write is one transaction with its `ChangeLog`; a refusal writes nothing.

    /// Creates a rack; `Conflict` when the name is taken.
    fn create_rack(&self, rack: &Rack, log: &ChangeLog) -> Result<Rack, StoreError>;
    /// One rack by id.
    fn get_rack(&self, id: Uuid) -> Result<Option<Rack>, StoreError>;
    /// Every rack, by name.
    fn list_racks(&self) -> Result<Vec<Rack>, StoreError>;
    /// Removes a rack; `Conflict` naming what is still in it (devices or hosts).
    fn delete_rack(&self, id: Uuid, log: &ChangeLog) -> Result<Rack, StoreError>;
    /// Adds a switch or power shelf to an existing rack (`NotFound`); `Conflict` when another
    /// device of the kind has the name.
    fn create_device(&self, device: &Device, log: &ChangeLog) -> Result<Device, StoreError>;
    /// One device.
    fn get_device(&self, id: Uuid) -> Result<Option<Device>, StoreError>;
    /// Devices, of one rack and/or kind, by name.
    fn list_devices(&self, rack: Option<Uuid>, kind: Option<DeviceKind>) -> Result<Vec<Device>, StoreError>;
    /// Deletes a switch at once; marks a power shelf for deletion (its controller removes it
    /// from `ready` or `error`). Returns the device as it now is.
    fn delete_device(&self, id: Uuid, log: &ChangeLog) -> Result<Device, StoreError>;
    /// Places a host in a rack (`None`: in none). `NotFound` for an unknown host or rack.
    fn place_host(&self, host_id: Uuid, rack: Option<Uuid>, log: &ChangeLog) -> Result<(), StoreError>;
    /// The hosts placed in a rack, by id.
    fn rack_hosts(&self, rack: Uuid) -> Result<Vec<Uuid>, StoreError>;
    /// The rack a host is placed in (`None`: no such host, or in no rack).
    fn host_rack(&self, host_id: Uuid) -> Result<Option<Uuid>, StoreError>;
    /// `SetPowerShelfMaintenance`: sets `request` on every listed shelf in one transaction;
    /// if any id is not a power shelf (`NotFound`) or is marked for deletion (`Conflict`),
    /// nothing changes.
    fn set_shelf_maintenance(&self, ids: &[Uuid], request: &Value, log: &ChangeLog) -> Result<Vec<Device>, StoreError>;
    /// One power-shelf controller step with its event, compare-and-set on `step.from`:
    /// `Ok(false)` (nothing written) when the shelf has moved on or is gone. The final delete
    /// removes the record.
    fn shelf_step(&self, step: &ShelfStep, event: &NewEvent) -> Result<bool, StoreError>;
    /// Sets (or with `None` removes) a host's BMC; `NotFound` for an unknown host.
    fn set_host_bmc(&self, host_id: Uuid, bmc: Option<&HostBmc>, log: &ChangeLog) -> Result<(), StoreError>;
    /// The BMCs of these hosts that have one, by host id.
    fn host_bmcs(&self, hosts: &[Uuid]) -> Result<Vec<HostBmc>, StoreError>;
    /// Records a firmware; `Conflict` when the id is taken or its type has a default already.
    fn create_firmware(&self, firmware: &FirmwareRecord, log: &ChangeLog) -> Result<FirmwareRecord, StoreError>;
    /// Every firmware record, by id.
    fn list_firmware(&self) -> Result<Vec<FirmwareRecord>, StoreError>;
    /// `OnDemandRackMaintenance`: stores `maintenance` on a rack in `ready` or `error` with no
    /// maintenance pending, else `Conflict` naming why (`NotFound` for no rack); one transaction.
    fn request_rack_maintenance(&self, rack: Uuid, maintenance: &Value, log: &ChangeLog) -> Result<Rack, StoreError>;
    /// One rack controller step with its event, compare-and-set on the rack's state and
    /// maintenance as `expected` read them: `Ok(false)` (nothing written) when it moved on.
    fn rack_step(
        &self,
        expected: &Rack,
        to: drover_proto::states::RackState,
        maintenance: Option<&Value>,
        event: &NewEvent,
    ) -> Result<bool, StoreError>;

    // ---- events and audit --------------------------------------------------------------

    /// Appends an event; returns its id.
    fn append_event(&self, event: &NewEvent) -> Result<i64, StoreError>;
    /// Events by id, filtered and paged.
    fn list_events(&self, filter: &EventFilter) -> Result<Vec<Event>, StoreError>;
    /// The newest event's id, 0 when there is none: where a live stream starts.
    fn latest_event_id(&self) -> Result<i64, StoreError>;
    /// Appends an audit record; returns its id.
    fn append_audit(&self, audit: &NewAudit) -> Result<i64, StoreError>;
    /// Audit records by id, filtered and paged.
    fn list_audit(&self, filter: &AuditFilter) -> Result<Vec<AuditRecord>, StoreError>;
}
