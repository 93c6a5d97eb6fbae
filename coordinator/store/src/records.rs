//! The rows a [`Store`](super::Store) reads and writes, independent of any backend.
//!
//! Ids are UUIDs, times are [`Time`] (unix seconds), states are the shared enums of
//! `drover_proto::states`; payloads the coordinator signs or receives (intent and task
//! envelopes, release files, manifests) are raw bytes so they come back byte-exact.
//! No record carries an enrollment token or its hash outside [`EnrollmentToken`], which only
//! flows *into* the store: listings cannot leak what they never hold.

use std::fmt;
use std::str::FromStr;

use drover_proto::names::RolloutId;
use drover_proto::release::ReleaseFiles;
use drover_proto::states::{HostLifecycle, HostRolloutState, JobState, RolloutState};
use drover_proto::time::Time;
use serde_json::Value;
use uuid::Uuid;

/// The most rows one page of a listing returns; larger limits are clamped to it, and a limit
/// of 0 (a filter's default) asks for this many, so a forgotten limit never reads as "empty".
pub const MAX_PAGE: u32 = 1000;

/// A host as the coordinator knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// Its identity, named in its certificate; never reused, even after deletion.
    pub id: Uuid,
    /// Unique among hosts that are not `deleted`.
    pub hostname: String,
    /// Coarse lifecycle state (`node-state-model.md` §3).
    pub state: HostLifecycle,
    /// False when cordoned: the flag Drover publishes for the tenant scheduler.
    pub schedulable: bool,
    /// When the record was created.
    pub created_at: Time,
    /// Last change of state or flags (not check-ins).
    pub updated_at: Time,
    /// The latest check-in, if any.
    pub last_checkin: Option<Checkin>,
}

/// What one check-in reported about the agent itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkin {
    /// When it arrived (coordinator time).
    pub at: Time,
    /// The agent's version string.
    pub agent_version: String,
    /// The kernel boot id: a change means the host rebooted.
    pub boot_id: String,
    /// The running system closure; `None` on hosts without an activation backend.
    pub current_generation: Option<String>,
}

/// A host to create (its id is chosen by the store).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewHost {
    /// Must be unique among hosts that are not `deleted`.
    pub hostname: String,
    /// Creation time.
    pub created_at: Time,
    /// An enrollment token to bind to the new host in the same transaction.
    pub token: Option<EnrollmentToken>,
}

/// The hashed form of a one-time enrollment token, as handed to the store.
///
/// `Debug` is hand-written so the hash never reaches a log line through `{:?}`.
#[derive(Clone, PartialEq, Eq)]
pub struct EnrollmentToken {
    /// Lowercase hex sha256 of the token ([`super::hash_token`]); the token itself is never stored.
    pub token_hash: String,
    /// The token is refused at and after this instant.
    pub expires_at: Time,
}

impl fmt::Debug for EnrollmentToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EnrollmentToken").field("token_hash", &"<redacted>").field("expires_at", &self.expires_at).finish()
    }
}

/// A token as listings show it: never its hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenInfo {
    /// The token record's id (not the token).
    pub id: Uuid,
    /// The only host it can enroll.
    pub host_id: Uuid,
    /// When it was issued.
    pub created_at: Time,
    /// When it stops working.
    pub expires_at: Time,
    /// When it was consumed, if it was.
    pub used_at: Option<Time>,
    /// When an operator revoked it, if one did ([`Store::revoke_token`](super::Store::revoke_token)).
    pub revoked_at: Option<Time>,
}

/// Why a token was refused. The server answers all of them alike to the client; the
/// distinction is for events and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TokenRefusal {
    /// No token has this hash.
    #[error("enrollment token is not known")]
    Unknown,
    /// Already consumed once.
    #[error("enrollment token was already used")]
    AlreadyUsed,
    /// Past its expiry.
    #[error("enrollment token has expired")]
    Expired,
    /// Issued for another host.
    #[error("enrollment token was issued for another host")]
    WrongHost,
    /// Revoked by an operator before it was used.
    #[error("enrollment token was revoked")]
    Revoked,
}

/// Filter and page for [`Store::list_hosts`](super::Store::list_hosts).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostFilter {
    /// Only hosts in this state (`None`: all, `deleted` included).
    pub state: Option<HostLifecycle>,
    /// Only hosts whose last check-in (or, never checked in, last state change) is before this.
    pub silent_since: Option<Time>,
    /// Start after this position (the last row of the previous page).
    pub after: Option<HostCursor>,
    /// Page size, clamped to [`MAX_PAGE`]; 0 (the default) means a full page of [`MAX_PAGE`].
    pub limit: u32,
}

/// A position in the hostname-ordered host listing. Deleted hosts may share a hostname with
/// a live one, so the id breaks ties.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostCursor {
    /// Hostname of the last row seen.
    pub hostname: String,
    /// Id of the last row seen.
    pub id: Uuid,
}

impl HostCursor {
    /// The cursor that continues after `host`.
    pub fn after(host: &Host) -> Self {
        HostCursor { hostname: host.hostname.clone(), id: host.id }
    }
}

/// Which kind of subject a certificate names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CertKind {
    /// An agent's client certificate (bound to a host id).
    Host,
    /// An operator's client certificate.
    Operator,
    /// The coordinator's server certificate.
    Server,
}

impl CertKind {
    /// The stable string form.
    pub const fn as_str(self) -> &'static str {
        match self {
            CertKind::Host => "host",
            CertKind::Operator => "operator",
            CertKind::Server => "server",
        }
    }
}

impl FromStr for CertKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "host" => Ok(CertKind::Host),
            "operator" => Ok(CertKind::Operator),
            "server" => Ok(CertKind::Server),
            other => Err(format!("unknown certificate kind {other:?}")),
        }
    }
}

/// A certificate the CA issued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewCert {
    /// Serial number, hex (stored lowercase).
    pub serial: String,
    /// What it identifies.
    pub kind: CertKind,
    /// The host, for [`CertKind::Host`] (required there, refused elsewhere).
    pub host_id: Option<Uuid>,
    /// Subject, for humans (e.g. `CN=gpu-01`).
    pub subject: String,
    /// Validity start.
    pub not_before: Time,
    /// Validity end.
    pub not_after: Time,
}

/// An issued certificate and its revocation, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertRecord {
    /// As issued.
    pub cert: NewCert,
    /// Set once revoked; never cleared.
    pub revoked: Option<Revocation>,
}

/// When and why a certificate was revoked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revocation {
    /// Revocation time (the CRL's revocationDate).
    pub at: Time,
    /// Free text for operators.
    pub reason: String,
}

/// One entry of the CRL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevokedCert {
    /// Serial, lowercase hex.
    pub serial: String,
    /// Revocation time.
    pub revoked_at: Time,
}

/// A stored release: every file of the release directory, byte-exact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    /// The timestamp version; strictly increasing across stored releases.
    pub version: u64,
    /// The timestamp's `signedAt`.
    pub signed_at: Time,
    /// Path → bytes, exactly as published.
    pub files: ReleaseFiles,
}

/// A release without its bytes, for listings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleaseSummary {
    /// The timestamp version.
    pub version: u64,
    /// The timestamp's `signedAt`.
    pub signed_at: Time,
    /// The paths it holds, sorted.
    pub paths: Vec<String>,
    /// Who published it: the actor of its `release.publish` audit record
    /// ([`RELEASE_PUBLISH_ACTION`](super::RELEASE_PUBLISH_ACTION)); `None` where none is kept.
    pub publisher: Option<String>,
    /// The channels of the rollouts it opened (those whose manifest it was the first release
    /// to carry), sorted, each once.
    pub channels: Vec<String>,
    /// How many rollouts it opened.
    pub rollouts: u64,
}

/// A signed artifact's bytes and its detached `.sig` file's bytes, byte-exact.
pub type SignedBytes = (Vec<u8>, Vec<u8>);

/// A rollout manifest as CI produced it. Its bytes never change under its id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// The rollout it describes.
    pub rollout_id: RolloutId,
    /// The manifest bytes.
    pub bytes: Vec<u8>,
    /// The detached signature file from the newest release that carried the manifest (a
    /// re-sign under a rotated key may add signatures; the bytes signed stay the same).
    pub sig: Vec<u8>,
    /// Lowercase hex sha256 of `bytes`.
    pub sha256: String,
    /// The release version that first carried it.
    pub first_version: u64,
}

/// A rollout to open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewRollout {
    /// `channel@ref`.
    pub rollout_id: RolloutId,
    /// The initial state (normally `Opening`).
    pub state: RolloutState,
    /// sha256 (hex) of its manifest.
    pub manifest_sha256: String,
    /// When it was opened.
    pub opened_at: Time,
}

/// A rollout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rollout {
    /// `channel@ref`.
    pub rollout_id: RolloutId,
    /// The channel part of the id, stored for filtering.
    pub channel: String,
    /// Current state.
    pub state: RolloutState,
    /// sha256 (hex) of its manifest.
    pub manifest_sha256: String,
    /// When it was opened.
    pub opened_at: Time,
    /// Last state change.
    pub updated_at: Time,
}

/// Filter for [`Store::list_rollouts`](super::Store::list_rollouts).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RolloutFilter {
    /// Only this state.
    pub state: Option<RolloutState>,
    /// Only this channel.
    pub channel: Option<String>,
}

/// One host's participation in one rollout, keyed by hostname (as the manifest names it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRollout {
    /// The rollout.
    pub rollout_id: RolloutId,
    /// The host, as the manifest's host set names it (it may never have enrolled).
    pub hostname: String,
    /// Its state in this rollout.
    pub state: HostRolloutState,
    /// Its wave in the manifest.
    pub wave_index: u32,
    /// Since when it is in `state`.
    pub since: Time,
    /// The closure of the last intent issued to it for this rollout (dispatch or revert).
    pub intent_target: Option<String>,
}

/// What an intent asks of the host now. Serves `POST /v1/agent/confirm`: only `Wanted` and
/// `Confirmed` answer 204.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IntentStatus {
    /// Dispatched; the host should act on it.
    Wanted,
    /// The host confirmed the activation.
    Confirmed,
    /// Withdrawn by an operator or a halted rollout.
    Cancelled,
    /// A newer intent replaced it.
    Superseded,
    /// The rollout reverted it.
    RolledBack,
}

impl IntentStatus {
    /// Every status.
    pub const ALL: &'static [IntentStatus] =
        &[IntentStatus::Wanted, IntentStatus::Confirmed, IntentStatus::Cancelled, IntentStatus::Superseded, IntentStatus::RolledBack];

    /// The stable string form.
    pub const fn as_str(self) -> &'static str {
        match self {
            IntentStatus::Wanted => "wanted",
            IntentStatus::Confirmed => "confirmed",
            IntentStatus::Cancelled => "cancelled",
            IntentStatus::Superseded => "superseded",
            IntentStatus::RolledBack => "rolled_back",
        }
    }

    /// Whether `self -> to` is legal. A confirmed intent can still be rolled back or replaced;
    /// cancelled, superseded and rolled-back ones are final.
    pub fn can_transition_to(self, to: IntentStatus) -> bool {
        use IntentStatus::*;
        matches!((self, to), (Wanted, Confirmed | Cancelled | Superseded | RolledBack) | (Confirmed, Superseded | RolledBack))
    }

    /// True while the intent still stands (no transition has ended it).
    pub fn is_live(self) -> bool {
        matches!(self, IntentStatus::Wanted | IntentStatus::Confirmed)
    }
}

impl FromStr for IntentStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        IntentStatus::ALL.iter().copied().find(|v| v.as_str() == s).ok_or_else(|| format!("unknown intent status {s:?}"))
    }
}

/// A signed intent to store for a host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewIntent {
    /// The intent's id (inside the signed envelope too).
    pub intent_id: Uuid,
    /// The host it is for.
    pub host_id: Uuid,
    /// The rollout it belongs to.
    pub rollout_id: RolloutId,
    /// The signed envelope, served byte-exact.
    pub envelope: Vec<u8>,
    /// After this instant a confirmation is refused (410).
    pub confirm_deadline: Option<Time>,
    /// When it was stored.
    pub created_at: Time,
}

/// What [`Store::checkin_view`] reads for one check-in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckinView {
    /// The host, `None` if no such host exists.
    pub host: Option<Host>,
    /// Its current intent, whatever its status.
    pub intent: Option<IntentRecord>,
    /// Whether it has a queued task, or one whose lease lapsed, to lease now.
    pub leasable: bool,
    /// Its last report (what the planner decides on), if it sent one.
    pub report: Option<super::plans::HostReport>,
}

/// A stored intent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntentRecord {
    /// As stored.
    pub intent: NewIntent,
    /// Where it stands.
    pub status: IntentStatus,
    /// Last status change.
    pub updated_at: Time,
    /// Whether it is the host's current intent (the latest one stored).
    pub current: bool,
}

/// Where a task stands: the API's own type.
pub use drover_proto::api::tasks::TaskState;

/// A signed task to queue for a host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTask {
    /// The task's id (inside the signed envelope too).
    pub task_id: Uuid,
    /// The only host that may lease and complete it.
    pub host_id: Uuid,
    /// The job it serves, if any.
    pub job_id: Option<Uuid>,
    /// The signed envelope, served byte-exact.
    pub envelope: Vec<u8>,
    /// When it was queued.
    pub created_at: Time,
}

/// A stored task.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskRecord {
    /// As queued.
    pub task: NewTask,
    /// Where it stands.
    pub state: TaskState,
    /// While leased: when the lease lapses and the task may be leased again.
    pub lease_expires_at: Option<Time>,
    /// How many times it was leased.
    pub attempts: u32,
    /// The host's result, once completed.
    pub result: Option<Value>,
    /// When the result arrived.
    pub completed_at: Option<Time>,
}

/// Filter for [`Store::list_tasks`](super::Store::list_tasks).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskFilter {
    /// Only this host's tasks.
    pub host_id: Option<Uuid>,
    /// Only this job's tasks.
    pub job_id: Option<Uuid>,
    /// Only tasks in this state.
    pub state: Option<TaskState>,
}

/// A job to create.
#[derive(Debug, Clone, PartialEq)]
pub struct NewJob {
    /// The job's id.
    pub job_id: Uuid,
    /// What it does (`decommission`, `storage_cleanup`, `maintenance`, …).
    pub kind: String,
    /// The host it works on, if one.
    pub host_id: Option<Uuid>,
    /// Its parameters.
    pub input: Value,
    /// When it was created.
    pub created_at: Time,
    /// The maintenance request it was created for, if any ([`NewMaintenance`]).
    pub request_id: Option<Uuid>,
}

/// A stored job.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// As created.
    pub job: NewJob,
    /// Where it stands.
    pub state: JobState,
    /// The workflow's own read model (stage, attempt, failure class, …); `null` at first.
    pub progress: Value,
    /// Last change.
    pub updated_at: Time,
}

/// Filter for [`Store::list_jobs`](super::Store::list_jobs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobFilter {
    /// Only jobs on this host.
    pub host_id: Option<Uuid>,
    /// Only jobs in this state.
    pub state: Option<JobState>,
    /// Only jobs of this kind.
    pub kind: Option<String>,
    /// Only jobs of this maintenance request.
    pub request_id: Option<Uuid>,
    /// Only jobs that have not finished (whose state is not terminal).
    pub unfinished: bool,
    /// Only jobs after this position (a page's continuation).
    pub after: Option<CreatedCursor>,
    /// At most this many; 0 (the default) means every match, which the coordinator's own
    /// readers want (operators' listings page with [`MAX_PAGE`](super::MAX_PAGE) at most).
    pub limit: u32,
}

/// How many jobs of one kind are in one state ([`Store::count_jobs`](super::Store::count_jobs)).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct JobCount {
    /// The kind.
    pub kind: String,
    /// The state.
    pub state: JobState,
    /// How many.
    pub count: u64,
}

/// A position in a listing ordered by creation time, its id breaking ties (jobs and
/// maintenance requests): the last row a page held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreatedCursor {
    /// The row's creation time.
    pub created_at: Time,
    /// Its id.
    pub id: Uuid,
}

impl CreatedCursor {
    /// `after` as the two query parameters both backends bind (both `NULL` without one): the
    /// creation time in Unix seconds, as the columns hold it, and the id as text.
    pub fn params(after: Option<CreatedCursor>) -> (Option<i64>, Option<String>) {
        after.map(|a| (a.created_at.unix(), a.id.to_string())).unzip()
    }
}

/// Filter for [`Store::list_maintenance`](super::Store::list_maintenance): a page.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MaintenanceFilter {
    /// Only requests after this position.
    pub after: Option<CreatedCursor>,
    /// At most this many; 0 (the default) means every one.
    pub limit: u32,
}

/// One step of a job, applied in one transaction ([`Store::apply_job_step`](super::Store::apply_job_step)):
/// the job's new state and progress together with the task, host changes, events and audit
/// records that step decided on, so a crash never leaves a host changed by a step the job
/// does not remember taking (or the reverse).
#[derive(Debug, Clone, PartialEq)]
pub struct JobStep {
    /// The job.
    pub job_id: Uuid,
    /// Compare-and-set: the state as the caller read it; a mismatch is
    /// [`StoreError::StaleState`](super::StoreError::StaleState) and nothing is written.
    pub expected_state: JobState,
    /// Compare-and-set: the progress JSON as the caller read it; a mismatch is
    /// [`StoreError::StaleState`](super::StoreError::StaleState) and nothing is written.
    pub expected_progress: Value,
    /// The state after the step. May equal `expected_state` (no transition); otherwise the
    /// move must be legal ([`JobState::can_transition_to`]) and writes a `job.transition`
    /// event `{from, to}` with `reason` as its message.
    pub new_state: JobState,
    /// The progress read model after the step.
    pub new_progress: Value,
    /// Why, for the transition event.
    pub reason: String,
    /// A task to enqueue in the same transaction; its `job_id` must be `Some(job_id)`.
    pub task: Option<NewTask>,
    /// A task of this job to make leasable again: a `leased` one becomes `queued` with no
    /// lease (attempts unchanged); a `queued` one stays as it is; a completed one, or one
    /// that is not this job's, is a conflict.
    pub requeue_task: Option<Uuid>,
    /// Host changes, applied in order with the semantics of
    /// [`Store::transition_host`](super::Store::transition_host) and
    /// [`Store::set_schedulable`](super::Store::set_schedulable).
    pub host_ops: Vec<HostOp>,
    /// Further events to append.
    pub events: Vec<NewEvent>,
    /// Audit records to append.
    pub audits: Vec<NewAudit>,
    /// When the step happens.
    pub at: Time,
}

/// A host change made by a [`JobStep`].
#[derive(Debug, Clone, PartialEq)]
pub enum HostOp {
    /// Compare-and-set `from -> to` on a legal lifecycle transition, with a `host.transition`
    /// event.
    Transition {
        /// The host.
        host_id: Uuid,
        /// The state the caller expects it in.
        from: HostLifecycle,
        /// The state to move it to.
        to: HostLifecycle,
        /// Why, for the event.
        reason: String,
    },
    /// Cordons (`false`) or uncordons the host, with a `host.schedulable` event when it changes.
    SetSchedulable {
        /// The host.
        host_id: Uuid,
        /// The flag to set.
        schedulable: bool,
        /// Why, for the event.
        reason: String,
    },
    /// Asks the rollout engine to bring `hostname` onto its channel's current target again:
    /// its row for `rollout_id` becomes `Skipped` (since the step's time) unless it is
    /// `Activating` or `Soaking` (the engine owns it then: nothing changes). No row: nothing.
    Redispatch {
        /// The rollout whose per-host row is reset.
        rollout_id: RolloutId,
        /// The host, by the name the rollout's manifest uses.
        hostname: String,
    },
}

/// A maintenance request and its jobs, created all-or-nothing
/// ([`Store::create_maintenance`](super::Store::create_maintenance)).
#[derive(Debug, Clone, PartialEq)]
pub struct NewMaintenance {
    /// The request's id.
    pub request_id: Uuid,
    /// Who asked (the operator certificate's name).
    pub initiator: String,
    /// The operator's stated reason.
    pub reason: String,
    /// The hosts (or selector) the request named, as given.
    pub scope: Value,
    /// The activities each job runs.
    pub activities: Value,
    /// When it was made.
    pub created_at: Time,
    /// One job per host; each with `request_id == Some(request_id)` and a `host_id`.
    pub jobs: Vec<NewJob>,
    /// Audit records to append with it.
    pub audits: Vec<NewAudit>,
}

/// A stored maintenance request (its jobs are listed with [`JobFilter::request_id`]).
#[derive(Debug, Clone, PartialEq)]
pub struct MaintenanceRecord {
    /// The request's id.
    pub request_id: Uuid,
    /// Who asked.
    pub initiator: String,
    /// The operator's stated reason.
    pub reason: String,
    /// The hosts (or selector) the request named.
    pub scope: Value,
    /// The activities each job runs.
    pub activities: Value,
    /// When it was made.
    pub created_at: Time,
}

/// A structured event to append.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    /// When it happened.
    pub at: Time,
    /// Dotted kind, e.g. `host.transition`.
    pub kind: String,
    /// The host concerned.
    pub host_id: Option<Uuid>,
    /// The rollout concerned.
    pub rollout_id: Option<RolloutId>,
    /// The job concerned.
    pub job_id: Option<Uuid>,
    /// One line for humans (the reason).
    pub message: String,
    /// Structured detail.
    pub data: Value,
}

/// A stored event.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Strictly increasing, never reused: the paging cursor.
    pub id: i64,
    /// As appended.
    pub event: NewEvent,
}

/// Filter and page for [`Store::list_events`](super::Store::list_events).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventFilter {
    /// Only this host's events.
    pub host_id: Option<Uuid>,
    /// Only this rollout's events.
    pub rollout_id: Option<RolloutId>,
    /// Only this job's events.
    pub job_id: Option<Uuid>,
    /// Only this kind.
    pub kind: Option<String>,
    /// Only events with a larger id (the last id of the previous page).
    pub after_id: Option<i64>,
    /// Page size, clamped to [`MAX_PAGE`]; 0 (the default) means a full page of [`MAX_PAGE`].
    pub limit: u32,
}

/// An operator action to audit (DESIGN: actor, role, reason, prior state, requested action,
/// expected target state).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewAudit {
    /// When.
    pub at: Time,
    /// Who (the operator certificate's name).
    pub actor: String,
    /// With which role.
    pub role: String,
    /// The requested action, e.g. `host.quarantine`.
    pub action: String,
    /// What it acted on, e.g. a host id.
    pub target: String,
    /// The operator's stated reason.
    pub reason: String,
    /// The target's state before the action.
    pub prior_state: Option<String>,
    /// The state the action aims for.
    pub expected_state: Option<String>,
}

/// A stored audit record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRecord {
    /// Strictly increasing, never reused: the paging cursor.
    pub id: i64,
    /// As appended.
    pub audit: NewAudit,
}

/// Filter and page for [`Store::list_audit`](super::Store::list_audit).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditFilter {
    /// Only this actor's actions.
    pub actor: Option<String>,
    /// Only actions on this target.
    pub target: Option<String>,
    /// Only records with a larger id.
    pub after_id: Option<i64>,
    /// Page size, clamped to [`MAX_PAGE`]; 0 (the default) means a full page of [`MAX_PAGE`].
    pub limit: u32,
}
