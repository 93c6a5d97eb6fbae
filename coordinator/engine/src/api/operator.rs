//! Operator read routes (admin and viewer: the [`Reader`] guard) and `/readyz` (`/metrics` is
//! [`super::metrics_route`]).
//!
//! Every answer is built from explicit view structs below, never by serialising store rows,
//! so what a listing shows is decided here: no token hash, no key, no envelope bytes. The
//! store rows cannot carry a token hash anyway (see `store::records`); the views are the
//! second fence.
//!
//! Paging: hosts page by an opaque cursor (hostname + id, base64url), because their order is
//! by hostname; jobs and maintenance requests by one of creation time + id; events and audit
//! page by their strictly increasing id (`next` is the last id of the page). `next` is `null` when the page came back short, so a client loops until then.
//! Bad query values (a non-numeric limit, a malformed UUID, an unknown state or an unknown
//! parameter) are a 400 in the API's error shape, never a silently ignored filter.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::Arc;

use axum::Json;
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use drover_proto::names::RolloutId;
use drover_proto::states::{HostLifecycle, HostRolloutState, RolloutState};
use drover_proto::time::Time;
use serde::de::DeserializeOwned;
use serde_json::Value;
use uuid::Uuid;

pub use drover_proto::api::Page;
pub use drover_proto::api::events::{AuditView, EventView};
pub use drover_proto::api::hosts::{CertView, CheckinView, HealthView, HostDetail, HostHealthReport, HostView};
pub use drover_proto::api::rollouts::{ReleaseView, RolloutView};

use crate::api::auth::Reader;
use crate::api::error::ApiError;
use crate::app::AppState;
use crate::store::{self, AuditFilter, CreatedCursor, EventFilter, Host, HostCursor, HostFilter, HostRollout, MAX_PAGE, RolloutFilter};

/// Page size when the client names none.
pub const DEFAULT_PAGE: u32 = 100;

/// A query string whose rejections (a value of the wrong type, an unknown parameter) are
/// answered in the API's error shape with 400, like [`crate::api::error::JsonBody`] for bodies.
#[derive(Debug, Clone)]
pub struct QueryParams<T>(pub T);

impl<T, S> FromRequestParts<S> for QueryParams<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(value)) => Ok(QueryParams(value)),
            Err(rejection) => Err(ApiError::bad_request(rejection.body_text())),
        }
    }
}

/// The page size asked for: default when absent, 400 when 0, clamped to [`MAX_PAGE`].
pub(crate) fn page_size(limit: Option<u32>) -> Result<u32, ApiError> {
    match limit {
        None => Ok(DEFAULT_PAGE),
        Some(0) => Err(ApiError::bad_request("limit must be at least 1")),
        Some(n) => Ok(n.min(MAX_PAGE)),
    }
}

/// An `after=` cursor of a listing paged by id or sequence number: ids start at 1, so a
/// negative one was never issued and is refused (a 400) rather than read as "from the start".
pub(crate) fn id_cursor(after: Option<i64>) -> Result<Option<i64>, ApiError> {
    match after {
        Some(n) if n < 0 => Err(ApiError::bad_request(format!("after={n}: must be an id this coordinator issued (0 or more)"))),
        other => Ok(other),
    }
}

/// Parses an optional state name with the state machine's own `FromStr`, as a 400 naming it.
fn parse_opt<T: FromStr>(what: &str, value: Option<&str>) -> Result<Option<T>, ApiError>
where
    T::Err: std::fmt::Display,
{
    value.map(|v| v.parse::<T>().map_err(|e| ApiError::bad_request(format!("{what}: {e}")))).transpose()
}

/// JSON this coordinator stored (`what` of `id`), read as the API's type; what no longer reads
/// as such (an older build's shape) shows as `null`, with a warning, rather than failing the
/// read.
pub(crate) fn stored_as<T: serde::de::DeserializeOwned>(what: &str, id: impl std::fmt::Display, v: Option<&Value>) -> Option<T> {
    match serde_json::from_value(v?.clone()) {
        Ok(t) => Some(t),
        Err(e) => {
            tracing::warn!(%id, error = %e, "stored {what} does not parse; not shown");
            None
        }
    }
}

pub(crate) fn parse_uuid(what: &str, value: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(value).map_err(|_| ApiError::bad_request(format!("{what} is not a UUID")))
}

// ---- hosts ---------------------------------------------------------------------------------

/// `GET /v1/hosts` query.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostsQuery {
    state: Option<String>,
    limit: Option<u32>,
    after: Option<String>,
}

/// Hosts as views, each with its latest rollout row, read for the whole page at once.
fn placed_views(s: &dyn store::Store, hosts: Vec<Host>) -> Result<Vec<HostView>, store::StoreError> {
    let names: Vec<String> = hosts.iter().map(|h| h.hostname.clone()).collect();
    let rows: std::collections::HashMap<String, HostRollout> =
        s.latest_host_rollouts(&names)?.into_iter().map(|r| (r.hostname.clone(), r)).collect();
    Ok(hosts
        .into_iter()
        .map(|h| {
            let row = rows.get(&h.hostname);
            placed(host_view(h), row)
        })
        .collect())
}

/// Fills a host view's rollout fields from the host's latest rollout row, if it has one.
fn placed(mut view: HostView, row: Option<&HostRollout>) -> HostView {
    if let Some(r) = row {
        view.channel = Some(r.rollout_id.channel().to_owned());
        view.wave = Some(r.wave_index);
        view.rollout_id = Some(r.rollout_id.as_str().to_owned());
        view.rollout_state = Some(r.state);
    }
    view
}

/// A host's row, without its rollout placement ([`placed`] adds it).
pub fn host_view(h: Host) -> HostView {
    HostView {
        id: h.id.to_string(),
        host_id: h.id.to_string(),
        hostname: h.hostname,
        state: h.state,
        schedulable: h.schedulable,
        created_at: h.created_at,
        updated_at: h.updated_at,
        last_checkin: h.last_checkin.map(|c| CheckinView {
            at: c.at,
            agent_version: c.agent_version,
            boot_id: c.boot_id,
            current_generation: c.current_generation,
        }),
        channel: None,
        wave: None,
        rollout_id: None,
        rollout_state: None,
    }
}

/// Encodes a host cursor: opaque to clients so the ordering key can change without an API change.
pub fn encode_host_cursor(c: &HostCursor) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{}/{}", c.id, c.hostname))
}

/// Decodes what [`encode_host_cursor`] made; anything else is a 400.
pub fn decode_host_cursor(s: &str) -> Result<HostCursor, ApiError> {
    let bad = || ApiError::bad_request("after is not a cursor this coordinator issued");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(s).map_err(|_| bad())?;
    let text = String::from_utf8(bytes).map_err(|_| bad())?;
    let (id, hostname) = text.split_once('/').ok_or_else(bad)?;
    Ok(HostCursor { id: Uuid::parse_str(id).map_err(|_| bad())?, hostname: hostname.to_owned() })
}

/// The opaque `after=` cursor of a listing ordered by creation time and id (jobs, maintenance
/// requests): the last row's time and id, base64url.
pub fn encode_created_cursor(c: &CreatedCursor) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{}/{}", c.created_at.unix(), c.id))
}

/// Decodes what [`encode_created_cursor`] made; anything else is a 400.
pub fn decode_created_cursor(s: &str) -> Result<CreatedCursor, ApiError> {
    let bad = || ApiError::bad_request("after is not a cursor this coordinator issued");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(s).map_err(|_| bad())?;
    let text = String::from_utf8(bytes).map_err(|_| bad())?;
    let (at, id) = text.split_once('/').ok_or_else(bad)?;
    let created_at = at.parse::<i64>().ok().and_then(|secs| Time::from_unix(secs).ok()).ok_or_else(bad)?;
    Ok(CreatedCursor { created_at, id: Uuid::parse_str(id).map_err(|_| bad())? })
}

/// The `next` of a page of `rows` read with `limit`: the last row's cursor when the page is
/// full (there may be more), `None` when it came back short.
pub(crate) fn next_after<T, C>(rows: &[T], limit: u32, cursor: impl Fn(&T) -> C) -> Option<C> {
    if rows.len() as u64 >= u64::from(limit) { rows.last().map(cursor) } else { None }
}

/// [`next_after`] for a listing ordered by creation time and id (its opaque cursor).
pub fn next_created<T>(rows: &[T], limit: u32, cursor: impl Fn(&T) -> CreatedCursor) -> Option<String> {
    next_after(rows, limit, |r| encode_created_cursor(&cursor(r)))
}

/// `GET /v1/hosts?state=&limit=&after=`: hosts by hostname, paged.
pub async fn list_hosts(
    State(app): State<Arc<AppState>>,
    _caller: Reader,
    QueryParams(q): QueryParams<HostsQuery>,
) -> Result<Json<Page<HostView, String>>, ApiError> {
    let limit = page_size(q.limit)?;
    let filter = HostFilter {
        state: parse_opt::<HostLifecycle>("state", q.state.as_deref())?,
        silent_since: None,
        after: q.after.as_deref().map(decode_host_cursor).transpose()?,
        limit,
    };
    let (items, next) = store::blocking(app.store.clone(), move |s| {
        let hosts = s.list_hosts(&filter)?;
        let next = next_after(&hosts, limit, |h| encode_host_cursor(&HostCursor::after(h)));
        Ok((placed_views(s, hosts)?, next))
    })
    .await?;
    Ok(Json(Page { items, next }))
}

/// `GET /v1/hosts/{id}`: the host, its last check-in and its certificates.
pub async fn get_host(State(app): State<Arc<AppState>>, _caller: Reader, Path(id): Path<String>) -> Result<Json<HostDetail>, ApiError> {
    let id = parse_uuid("host id", &id)?;
    let (host, certs, health) = store::blocking(app.store.clone(), move |s| {
        let host = match s.get_host(id)? {
            Some(h) => placed_views(s, vec![h])?.pop(),
            None => None,
        };
        Ok((host, s.list_certs(Some(id))?, s.host_health(id)?))
    })
    .await?;
    let host = host.ok_or_else(|| ApiError::not_found(format!("host {id} not found")))?;
    // Written by this coordinator from a report it checked; one that no longer parses (an
    // older build's shape) is left out rather than failing the read.
    let health = health.and_then(|h| match serde_json::from_str::<HostHealthReport>(&h.report) {
        Ok(report) => Some(HealthView { reported_at: h.reported_at, report }),
        Err(e) => {
            tracing::warn!(host = %id, error = %e, "stored health report does not parse; not shown");
            None
        }
    });
    let certificates = certs
        .into_iter()
        .map(|c| CertView {
            serial: c.cert.serial,
            kind: c.cert.kind.as_str().to_owned(),
            not_before: c.cert.not_before,
            not_after: c.cert.not_after,
            revoked: c.revoked.is_some(),
            revoked_at: c.revoked.map(|r| r.at),
        })
        .collect();
    Ok(Json(HostDetail { host, certificates, health }))
}

// ---- releases and rollouts -----------------------------------------------------------------

/// `GET /v1/releases`: stored releases, newest first.
pub async fn list_releases(State(app): State<Arc<AppState>>, _caller: Reader) -> Result<Json<Page<ReleaseView, String>>, ApiError> {
    let releases = store::blocking(app.store.clone(), |s| s.list_releases()).await?;
    let items = releases
        .into_iter()
        .map(|r| ReleaseView {
            version: r.version,
            signed_at: r.signed_at,
            paths: r.paths,
            publisher: r.publisher,
            channels: r.channels,
            rollouts: r.rollouts,
        })
        .collect();
    Ok(Json(Page { items, next: None }))
}

/// `GET /v1/rollouts` query.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RolloutsQuery {
    state: Option<String>,
    channel: Option<String>,
}

/// `GET /v1/rollouts?state=&channel=`: rollouts by opening time.
pub async fn list_rollouts(
    State(app): State<Arc<AppState>>,
    _caller: Reader,
    QueryParams(q): QueryParams<RolloutsQuery>,
) -> Result<Json<Page<RolloutView, String>>, ApiError> {
    let filter = RolloutFilter { state: parse_opt::<RolloutState>("state", q.state.as_deref())?, channel: q.channel };
    let (rollouts, counts) = store::blocking(app.store.clone(), move |s| {
        let rollouts = s.list_rollouts(&filter)?;
        let ids: Vec<RolloutId> = rollouts.iter().map(|r| r.rollout_id.clone()).collect();
        Ok((rollouts, s.host_rollout_counts(&ids)?))
    })
    .await?;
    let mut hosts: BTreeMap<String, BTreeMap<HostRolloutState, u64>> = BTreeMap::new();
    for (id, state, n) in counts {
        hosts.entry(id.as_str().to_owned()).or_default().insert(state, n);
    }
    let items = rollouts
        .into_iter()
        .map(|r| RolloutView {
            hosts: hosts.remove(r.rollout_id.as_str()).unwrap_or_default(),
            rollout: crate::api::rollouts::rollout_state(&r),
        })
        .collect();
    Ok(Json(Page { items, next: None }))
}

// ---- events and audit ----------------------------------------------------------------------

/// `GET /v1/events` query.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    pub(crate) host: Option<String>,
    pub(crate) rollout: Option<String>,
    pub(crate) kind: Option<String>,
    pub(crate) after: Option<i64>,
    pub(crate) limit: Option<u32>,
}

/// An event as the API shows it.
pub fn event_view(e: crate::store::Event) -> EventView {
    EventView {
        id: e.id,
        at: e.event.at,
        kind: e.event.kind,
        host_id: e.event.host_id.map(|h| h.to_string()),
        rollout_id: e.event.rollout_id.map(|r| r.to_string()),
        job_id: e.event.job_id.map(|j| j.to_string()),
        message: e.event.message,
        data: e.event.data,
    }
}

/// The store filter an events query asks for (its filters checked: a 400 names what is wrong).
pub(crate) async fn event_filter(app: &Arc<AppState>, q: &EventsQuery, limit: u32) -> Result<EventFilter, ApiError> {
    Ok(EventFilter {
        host_id: q.host.as_deref().map(|h| parse_uuid("host", h)).transpose()?,
        rollout_id: q
            .rollout
            .as_deref()
            .map(|r| RolloutId::parse(r).map_err(|e| ApiError::bad_request(format!("rollout: {e}"))))
            .transpose()?,
        job_id: None,
        kind: match q.kind.as_deref() {
            Some(k) => Some(checked_kind(app, k).await?),
            None => None,
        },
        after_id: id_cursor(q.after)?,
        limit,
    })
}

/// `GET /v1/events?host=&rollout=&kind=&after=&limit=`: events by id, paged by id.
pub async fn list_events(
    State(app): State<Arc<AppState>>,
    _caller: Reader,
    QueryParams(q): QueryParams<EventsQuery>,
) -> Result<Json<Page<EventView, i64>>, ApiError> {
    let limit = page_size(q.limit)?;
    let filter = event_filter(&app, &q, limit).await?;
    let events = store::blocking(app.store.clone(), move |s| s.list_events(&filter)).await?;
    let next = next_after(&events, limit, |e| e.id);
    let items = events.into_iter().map(event_view).collect();
    Ok(Json(Page { items, next }))
}

/// [`exact_kind`], or a kind the list does not know but the store holds events of: the
/// list is kept by hand, and a kind missing from it must not hide events that exist.
async fn checked_kind(app: &Arc<AppState>, kind: &str) -> Result<String, ApiError> {
    let refused = match exact_kind(kind) {
        Ok(k) => return Ok(k),
        Err(e) => e,
    };
    let plain = kind.len() <= 64 && kind.contains('.') && kind.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_');
    if !plain {
        return Err(refused);
    }
    let probe = EventFilter { kind: Some(kind.to_owned()), limit: 1, ..Default::default() };
    let seen = store::blocking(app.store.clone(), move |s| s.list_events(&probe)).await?;
    if seen.is_empty() { Err(refused) } else { Ok(kind.to_owned()) }
}

/// An events `kind` filter: one kind the coordinator records (a filter on anything else would
/// match nothing, and a typo would pass for a quiet fleet).
fn exact_kind(kind: &str) -> Result<String, ApiError> {
    match drover_proto::event_kinds::parse_filter(kind) {
        Ok(drover_proto::event_kinds::KindFilter::Exact(k)) => Ok(k),
        Ok(drover_proto::event_kinds::KindFilter::Family(_)) => {
            Err(ApiError::bad_request(format!("kind: {kind:?} is a family; name one kind (e.g. host.transition)")))
        }
        Err(e) => Err(ApiError::bad_request(format!("kind: {e}"))),
    }
}

/// `GET /v1/audit` query.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    actor: Option<String>,
    target: Option<String>,
    after: Option<i64>,
    limit: Option<u32>,
}

/// `GET /v1/audit?actor=&target=&after=&limit=`: audit records by id, paged by id.
pub async fn list_audit(
    State(app): State<Arc<AppState>>,
    _caller: Reader,
    QueryParams(q): QueryParams<AuditQuery>,
) -> Result<Json<Page<AuditView, i64>>, ApiError> {
    let limit = page_size(q.limit)?;
    let filter = AuditFilter { actor: q.actor, target: q.target, after_id: id_cursor(q.after)?, limit };
    let records = store::blocking(app.store.clone(), move |s| s.list_audit(&filter)).await?;
    let next = next_after(&records, limit, |a| a.id);
    let items = records
        .into_iter()
        .map(|r| AuditView {
            id: r.id,
            at: r.audit.at,
            actor: r.audit.actor,
            role: r.audit.role,
            action: r.audit.action,
            target: r.audit.target,
            reason: r.audit.reason,
            prior_state: r.audit.prior_state,
            expected_state: r.audit.expected_state,
        })
        .collect();
    Ok(Json(Page { items, next }))
}

// ---- /readyz ------------------------------------------------------------------------------

/// `GET /readyz` (anonymous, like `/healthz`: load balancers probe without certificates).
///
/// Ready means "can serve agents what they need": the store answers and has room for writes
/// (`disk_full` otherwise), and the latest stored release verifies against the CI trust roots
/// and is fresh. A coordinator with no release at all is **not** ready (503): it could enroll
/// hosts but has nothing to roll out, and a replica that lost its store content must not take
/// traffic. The answer comes from the verdict [`crate::readiness::watch`] keeps: this route
/// reads it and the clock and nothing else, so an anonymous prober costs O(1) whatever the
/// fleet's size.
pub async fn readyz(State(app): State<Arc<AppState>>) -> Result<Response, ApiError> {
    match crate::readiness::judge(&app.readiness.verdict(), app.clock.now()) {
        Ok(ready) => Ok((StatusCode::OK, Json(ready)).into_response()),
        Err(why) => Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, why.code, why.message)),
    }
}

/// `GET /v1/loops` (viewer or admin): every background loop of the replica that answers —
/// running or not, its passes, its last error ([`crate::loops`]). O(number of loops).
pub async fn list_loops(State(app): State<Arc<AppState>>, _caller: Reader) -> Json<drover_proto::api::admin::LoopList> {
    Json(app.loops.list())
}
