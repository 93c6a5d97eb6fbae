//! `GET /v1/events/stream` (viewer): the event log as server-sent events, for the dashboard's
//! live view and for `curl -N`.
//!
//! Each event is one SSE message whose `id:` is the event's id and whose `data:` is the same
//! JSON object `GET /v1/events` lists. A client that reconnects sends `Last-Event-ID` (the
//! browser's `EventSource` does it by itself) and gets every event after it, none twice and
//! none lost: the stream is the listing read forward by id, so it is resumable by the same
//! cursor. Filters are those of `GET /v1/events` (`host`, `rollout`, `kind`), with `after=` to
//! start from an id; without one it starts after the newest event (what is live from now).
//!
//! The stream reads the store every [`POLL`] while it is idle (an event reaches a watching
//! browser within that, on any replica, whoever wrote it), and sends a comment every
//! [`KEEPALIVE`] so proxies and load balancers keep an idle stream open.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use tokio::time::Instant;

use crate::api::auth::Reader;
use crate::api::error::ApiError;
use crate::api::operator::{EventsQuery, QueryParams, event_filter};
use crate::app::AppState;
use crate::store::{self, EventFilter};

/// How often an idle stream looks for new events.
pub const POLL: Duration = Duration::from_millis(250);

/// How long a stream stays silent before it sends a keep-alive comment.
pub const KEEPALIVE: Duration = Duration::from_secs(15);

/// Most events one read sends (a reconnect far behind catches up page by page).
const BATCH: u32 = 200;

/// The cursor a client resumes from: `Last-Event-ID` wins over `after=` (a reconnecting
/// `EventSource` repeats the URL it was opened with); a malformed one is a 400.
fn resume_from(headers: &HeaderMap, after: Option<i64>) -> Result<Option<i64>, ApiError> {
    match headers.get("last-event-id") {
        Some(v) => {
            let text = v.to_str().map_err(|_| ApiError::bad_request("Last-Event-ID is not text"))?;
            let id = text.trim().parse::<i64>().map_err(|_| ApiError::bad_request(format!("Last-Event-ID {text:?} is not an event id")))?;
            crate::api::operator::id_cursor(Some(id))
        }
        None => Ok(after),
    }
}

/// One SSE message per event: `id:`, then the event as JSON on one `data:` line.
fn encode(events: Vec<crate::store::Event>) -> Bytes {
    let mut out = String::new();
    for e in events {
        let id = e.id;
        // serde_json never writes a raw newline, so the JSON is one data line.
        let json = serde_json::to_string(&crate::api::operator::event_view(e)).unwrap_or_else(|_| "{}".to_owned());
        out.push_str(&format!("id: {id}\ndata: {json}\n\n"));
    }
    Bytes::from(out)
}

/// Where a stream stands between two reads.
struct Cursor {
    app: Arc<AppState>,
    filter: EventFilter,
    last_sent: Instant,
    first: bool,
}

/// The next chunk of the stream: waits for events (or the keep-alive), then sends them.
async fn next_chunk(mut c: Cursor) -> Option<(Result<Bytes, std::convert::Infallible>, Cursor)> {
    if c.first {
        c.first = false;
        // How long a browser waits before reconnecting after a drop.
        return Some((Ok(Bytes::from_static(b"retry: 2000\n\n")), c));
    }
    loop {
        let filter = c.filter.clone();
        let events = match store::blocking(c.app.store.clone(), move |s| s.list_events(&filter)).await {
            Ok(events) => events,
            Err(e) => {
                // The client reconnects with its last id once the store answers again.
                tracing::warn!(error = %e, "event stream: the store does not answer; closing the stream");
                return None;
            }
        };
        if let Some(last) = events.last() {
            c.filter.after_id = Some(last.id);
            c.last_sent = Instant::now();
            return Some((Ok(encode(events)), c));
        }
        if c.last_sent.elapsed() >= KEEPALIVE {
            c.last_sent = Instant::now();
            return Some((Ok(Bytes::from_static(b": keep-alive\n\n")), c));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// `GET /v1/events/stream?host=&rollout=&kind=&after=` (viewer): see the module doc.
pub async fn stream(
    State(app): State<Arc<AppState>>,
    _caller: Reader,
    headers: HeaderMap,
    QueryParams(q): QueryParams<EventsQuery>,
) -> Result<Response, ApiError> {
    if q.limit.is_some() {
        return Err(ApiError::bad_request("limit: a stream has no pages; use GET /v1/events to page"));
    }
    let after = resume_from(&headers, crate::api::operator::id_cursor(q.after)?)?;
    let mut filter = event_filter(&app, &q, BATCH).await?;
    filter.after_id = match after {
        Some(id) => Some(id),
        None => Some(store::blocking(app.store.clone(), |s| s.latest_event_id()).await?),
    };
    let cursor = Cursor { app, filter, last_sent: Instant::now(), first: true };
    let body = Body::from_stream(futures_util::stream::unfold(cursor, next_chunk));
    let mut resp = body.into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // Tells nginx-like proxies not to buffer the stream.
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(resp)
}
