//! `GET /metrics`: this process's counters ([`crate::metrics`], requests by route, `process_*`)
//! and the state gauges read from the store at scrape time.
//!
//! What a scrape reads is bounded by the fleet, not by history: hosts page by page, jobs
//! counted by the database (`GROUP BY`), rollouts in flight only (a converged or cancelled
//! one's progress no longer moves), and the certificates table once.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use drover_proto::artifacts::RolloutManifest;
use drover_proto::states::{HostLifecycle, HostRolloutState, RolloutState};
use drover_proto::time::Time;
use uuid::Uuid;

use crate::api::auth::Reader;
use crate::api::error::ApiError;
use crate::app::AppState;
use crate::metrics::{RolloutHosts, Snapshot};
use crate::store::{self, CertKind, HostCursor, HostFilter, MAX_PAGE, RolloutFilter, TaskFilter};

/// Rollouts whose hosts still move: their progress is exported per wave.
fn in_flight(state: RolloutState) -> bool {
    matches!(
        state,
        RolloutState::Opening | RolloutState::Active | RolloutState::Converging | RolloutState::Halted | RolloutState::Reverting
    )
}

/// The hosts counted in one pass over the table, page by page (one query per state would
/// read it once per state): what the scrape and the dashboard's summary both report.
pub(crate) struct HostCensus {
    /// Hosts per lifecycle state (every state present, zeros included).
    pub by_state: BTreeMap<&'static str, u64>,
    /// Hosts (not deleted) that take no new work.
    pub cordoned: u64,
    /// The hosts that are not deleted.
    pub live: HashSet<Uuid>,
}

/// Counts every host (see [`HostCensus`]).
pub(crate) fn host_census(s: &dyn store::Store) -> Result<HostCensus, store::StoreError> {
    let mut census = HostCensus { by_state: Snapshot::zeroed().hosts, cordoned: 0, live: HashSet::new() };
    let mut filter = HostFilter { limit: MAX_PAGE, ..HostFilter::default() };
    loop {
        let page = s.list_hosts(&filter)?;
        for h in &page {
            *census.by_state.entry(h.state.as_str()).or_insert(0) += 1;
            if h.state != HostLifecycle::Deleted {
                census.live.insert(h.id);
                if !h.schedulable {
                    census.cordoned += 1;
                }
            }
        }
        match page.last() {
            Some(last) if page.len() as u64 >= u64::from(MAX_PAGE) => filter.after = Some(HostCursor::after(last)),
            _ => return Ok(census),
        }
    }
}

/// Reads the state gauges from the store in one blocking call.
fn snapshot(s: &dyn store::Store, now: Time) -> Result<Snapshot, store::StoreError> {
    let mut snap = Snapshot::zeroed();
    snap.now = now.unix();
    let HostCensus { by_state, cordoned, live } = host_census(s)?;
    (snap.hosts, snap.cordoned) = (by_state, cordoned);
    for r in s.list_rollouts(&RolloutFilter::default())? {
        *snap.rollouts.entry(r.state.as_str()).or_insert(0) += 1;
        if in_flight(r.state) {
            snap.rollout_hosts.extend(rollout_progress(s, &r.rollout_id)?);
        }
    }
    for t in s.list_tasks(&TaskFilter::default())? {
        *snap.tasks.entry(t.state.as_str()).or_insert(0) += 1;
    }
    snap.jobs = s.count_jobs()?;
    snap.release_signed_at = s.list_releases()?.iter().max_by_key(|r| r.version).map(|r| r.signed_at.unix());
    // Per host and per operator, the newest unrevoked certificate is the one in use; the
    // earliest of those to end is what needs renewing first.
    let (mut hosts, mut operators): (HashMap<Uuid, i64>, HashMap<String, i64>) = Default::default();
    for c in s.list_certs(None)?.into_iter().filter(|c| c.revoked.is_none()) {
        let end = c.cert.not_after.unix();
        match (c.cert.kind, c.cert.host_id) {
            (CertKind::Host, Some(id)) if live.contains(&id) => {
                let e = hosts.entry(id).or_insert(end);
                *e = (*e).max(end);
            }
            (CertKind::Operator, _) => {
                let e = operators.entry(c.cert.subject).or_insert(end);
                *e = (*e).max(end);
            }
            _ => {}
        }
    }
    snap.client_cert_expiry.insert("host", hosts.values().min().copied());
    // An operator whose newest certificate has already ended no longer signs in: left out,
    // or one departed operator would hold the gauge in the past for ever.
    snap.client_cert_expiry.insert("operator", operators.values().filter(|end| **end > snap.now).min().copied());
    Ok(snap)
}

/// A rollout's hosts by wave and state: the manifest's hosts, each in its recorded state or
/// `Pending` when it has none yet.
pub(crate) fn rollout_progress(s: &dyn store::Store, id: &drover_proto::names::RolloutId) -> Result<Vec<RolloutHosts>, store::StoreError> {
    let rows = s.list_host_rollouts(id)?;
    let manifest = s.get_manifest(id)?.and_then(|m| serde_json::from_slice::<RolloutManifest>(&m.bytes).ok());
    let mut counts: BTreeMap<(u32, &'static str), u64> = BTreeMap::new();
    match manifest {
        Some(m) => {
            let recorded: HashMap<&str, HostRolloutState> = rows.iter().map(|h| (h.hostname.as_str(), h.state)).collect();
            for e in &m.host_set {
                let state = recorded.get(e.hostname.as_str()).copied().unwrap_or(HostRolloutState::Pending);
                *counts.entry((e.wave_index, state.as_str())).or_insert(0) += 1;
            }
        }
        // Without a manifest that parses (never expected), the recorded hosts alone.
        None => {
            for h in &rows {
                *counts.entry((h.wave_index, h.state.as_str())).or_insert(0) += 1;
            }
        }
    }
    Ok(counts.into_iter().map(|((wave, state), count)| RolloutHosts { rollout: id.to_string(), wave, state, count }).collect())
}

/// The end of a DER certificate's validity, Unix seconds.
fn not_after(der: &[u8]) -> Option<i64> {
    x509_parser::parse_x509_certificate(der).ok().map(|(_, c)| c.validity().not_after.timestamp())
}

/// `GET /metrics`: Prometheus text. It needs a reader certificate: host counts and states
/// are fleet information, and DESIGN lists `/metrics` among the operator routes.
pub async fn metrics(State(app): State<Arc<AppState>>, _caller: Reader) -> Result<Response, ApiError> {
    let now = app.clock.now();
    let mut snap = store::blocking(app.store.clone(), move |s| snapshot(s, now)).await?;
    snap.long_polls_held = app.hub.held() as u64;
    snap.own_cert_expiry.insert("ca", not_after(app.ca.cert_der()));
    snap.own_cert_expiry.insert("server", not_after(app.tls.server_cert_der()));
    let mut body = app.metrics.render(&snap);
    app.metrics.http.render_into(&mut body);
    app.connections.render_into(&mut body);
    crate::readiness::render_into(&app.readiness.verdict(), &mut body);
    app.leader.render_into(&mut body);
    app.loops.render_into(&mut body);
    crate::process_metrics::render_into(&mut body);
    Ok(([(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], body).into_response())
}
