//! HTTP requests counted by route, method and status, for `drover_http_requests_total`.
//!
//! A route layer ([`CountRequests`]) applied after routing, so the route is the matched
//! template (`/v1/hosts/{id}`), never the raw path: the label set is bounded by the router,
//! whatever paths clients send. Its future only adds the route's shared name and the method
//! to the handler's, and allocates nothing per request once a (route, method, status) has
//! been seen: ten thousand parked long-polls each hold one.
//!
//! A request no route matches (a 404 or 405 from the router's fallbacks) is counted under
//! the route `unmatched` by [`HttpCounts::record_unmatched`].

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use axum::extract::MatchedPath;
use axum::http::{Method, Request};
use axum::response::Response;

/// The methods counted by name; any other is `other`.
const METHODS: [Method; 5] = [Method::GET, Method::POST, Method::PUT, Method::PATCH, Method::DELETE];

fn method_index(m: &Method) -> u8 {
    METHODS.iter().position(|x| x == m).map_or(METHODS.len() as u8, |i| i as u8)
}

fn method_name(i: u8) -> &'static str {
    METHODS.get(usize::from(i)).map_or("other", Method::as_str)
}

/// The route label of requests no route matched.
pub const UNMATCHED: &str = "unmatched";

/// One route's counts by (method index, status).
type RouteCounts = BTreeMap<(u8, u16), u64>;

/// Requests by route, then (method, status).
#[derive(Debug, Default)]
pub struct HttpCounts {
    by_route: Mutex<HashMap<String, RouteCounts>>,
}

impl HttpCounts {
    /// Counts one answered request.
    pub fn record(&self, route: &str, method: &Method, status: u16) {
        let mut map = self.by_route.lock().unwrap_or_else(|e| e.into_inner());
        let key = (method_index(method), status);
        match map.get_mut(route) {
            Some(per) => *per.entry(key).or_insert(0) += 1,
            None => {
                map.insert(route.to_owned(), BTreeMap::from([(key, 1)]));
            }
        }
    }

    /// Counts a request no route matched.
    pub fn record_unmatched(&self, method: &Method, status: u16) {
        self.record(UNMATCHED, method, status);
    }

    /// Appends `drover_http_requests_total`, in a stable order.
    pub fn render_into(&self, out: &mut String) {
        let _ = writeln!(out, "# HELP drover_http_requests_total HTTP requests answered, by matched route, method and status.");
        let _ = writeln!(out, "# TYPE drover_http_requests_total counter");
        let map = self.by_route.lock().unwrap_or_else(|e| e.into_inner());
        let mut routes: Vec<&String> = map.keys().collect();
        routes.sort();
        for route in routes {
            for ((m, status), n) in &map[route] {
                let route = route.replace('\\', "\\\\").replace('"', "\\\"");
                let _ =
                    writeln!(out, "drover_http_requests_total{{route=\"{route}\",method=\"{}\",status=\"{status}\"}} {n}", method_name(*m));
            }
        }
    }
}

/// The route layer that counts (see the module doc).
#[derive(Debug, Clone)]
pub struct CountRequests(pub Arc<HttpCounts>);

impl<S> tower::Layer<S> for CountRequests {
    type Service = Counted<S>;
    fn layer(&self, inner: S) -> Counted<S> {
        Counted { inner, counts: self.0.clone() }
    }
}

/// A service counted by [`CountRequests`].
#[derive(Debug, Clone)]
pub struct Counted<S> {
    inner: S,
    counts: Arc<HttpCounts>,
}

impl<S, B> tower::Service<Request<B>> for Counted<S>
where
    S: tower::Service<Request<B>, Response = Response>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = CountedFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let route = req.extensions().get::<MatchedPath>().cloned();
        let method = req.method().clone();
        CountedFuture { inner: self.inner.call(req), tag: Some((route, method, self.counts.clone())) }
    }
}

pin_project_lite::pin_project! {
    /// The handler's future; counts its answer when it completes.
    pub struct CountedFuture<F> {
        #[pin]
        inner: F,
        tag: Option<(Option<MatchedPath>, Method, Arc<HttpCounts>)>,
    }
}

impl<F, E> Future for CountedFuture<F>
where
    F: Future<Output = Result<Response, E>>,
{
    type Output = Result<Response, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let out = std::task::ready!(this.inner.poll(cx));
        if let (Ok(resp), Some((route, method, counts))) = (&out, this.tag.take()) {
            counts.record(route.as_ref().map_or(UNMATCHED, MatchedPath::as_str), &method, resp.status().as_u16());
        }
        Poll::Ready(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_render_by_route_method_and_status_with_escaping() {
        let c = HttpCounts::default();
        c.record("/v1/hosts/{id}", &Method::GET, 200);
        c.record("/v1/hosts/{id}", &Method::GET, 200);
        c.record("/v1/hosts/{id}", &Method::GET, 404);
        c.record("/v1/agent/checkin", &Method::POST, 200);
        c.record_unmatched(&Method::OPTIONS, 404);
        c.record("a\"b", &Method::GET, 200);
        let mut out = String::new();
        c.render_into(&mut out);
        assert!(out.contains("drover_http_requests_total{route=\"/v1/hosts/{id}\",method=\"GET\",status=\"200\"} 2\n"), "{out}");
        assert!(out.contains("drover_http_requests_total{route=\"/v1/hosts/{id}\",method=\"GET\",status=\"404\"} 1\n"), "{out}");
        assert!(out.contains("drover_http_requests_total{route=\"/v1/agent/checkin\",method=\"POST\",status=\"200\"} 1\n"), "{out}");
        assert!(out.contains("drover_http_requests_total{route=\"unmatched\",method=\"other\",status=\"404\"} 1\n"), "{out}");
        assert!(out.contains("route=\"a\\\"b\""), "{out}");
    }
}
