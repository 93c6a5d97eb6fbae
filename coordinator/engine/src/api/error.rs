//! The one error shape of every route, `{"error":{"code","message"}}`, and the explicit
//! mapping from each failure to its HTTP status. Bad input is a 4xx naming what is wrong;
//! only the coordinator's own failures are 5xx, and those never echo internals.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// The longest error message sent, in characters (the transport's bound).
pub use drover_http::body::MAX_MESSAGE_CHARS;

/// A failed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// A stable machine-readable code.
    pub code: &'static str,
    /// A human message (never a secret, never a backtrace).
    pub message: String,
}

impl ApiError {
    /// With an explicit status and code.
    /// The message is bounded ([`MAX_MESSAGE_CHARS`]): whatever of the caller's input it
    /// repeats, an error is never larger than that.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        let message = message.into();
        let message = match drover_proto::text::bounded(&message, MAX_MESSAGE_CHARS) {
            std::borrow::Cow::Borrowed(_) => message,
            std::borrow::Cow::Owned(cut) => cut,
        };
        ApiError { status, code, message }
    }
    /// 400: the request is malformed.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }
    /// 401: no (usable) client certificate.
    pub fn unauthenticated(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthenticated", message)
    }
    /// 403: the certificate's identity may not use this route.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }
    /// 404.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }
    /// 403 `host_unknown_reenroll`: a host certificate this coordinator's CA issued names a
    /// host its store has no record of — the store was restored from a backup older than the
    /// host's enrollment. Every agent route answers this one way, naming the host from the
    /// certificate and the way back: enrolling it again under a new id. The certificate stays
    /// good for nothing else, so the agent cannot renew its way around this.
    pub fn host_unknown(host_id: uuid::Uuid, hostname: &str) -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            drover_proto::report::HOST_UNKNOWN_REENROLL,
            format!(
                "this coordinator has no record of host {host_id} ({hostname}): its state may have been restored from a backup \
                 older than this host's enrollment. To enroll the host again: `drover enroll {hostname}` (if that says the \
                 hostname exists, that record is an older enrollment of this machine: remove it first), then on the host stop \
                 the agent and move its old state aside (`systemctl stop drover-agent && mv /var/lib/drover \
                 /var/lib/drover.{host_id}`, or the agent's state_dir) and run the command `drover enroll` printed"
            ),
        )
    }
    /// 409: the request conflicts with current state.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "conflict", message)
    }
    /// 507 Insufficient Storage: the coordinator's disk is full, so the write was not made
    /// (none of it: the store's transaction was rolled back whole). RFC 4918 defines 507 for
    /// exactly this — the server cannot store what the request needs, a condition considered
    /// temporary — where a 500 would say nothing and a 503 would suggest overload. The
    /// message names the condition but no path: the log has those.
    pub fn insufficient_storage() -> Self {
        Self::new(
            StatusCode::INSUFFICIENT_STORAGE,
            "insufficient_storage",
            "the coordinator's disk is full: nothing was written; retry once space is freed (reads still work)",
        )
    }
    /// 500: the coordinator failed; details go to the log, not the client.
    pub fn internal() -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "internal error; see the coordinator's log")
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        // The transport renders the one error shape, so its own refusals and the routes' match.
        drover_http::body::error_response(self.status, self.code, self.message)
    }
}

impl From<crate::store::StoreError> for ApiError {
    fn from(e: crate::store::StoreError) -> Self {
        use crate::store::ErrorKind;
        if let crate::store::StoreError::StorageFull { .. } = e {
            tracing::error!(error = %e, "a write refused: the store's disk is full");
            return ApiError::insufficient_storage();
        }
        match e.kind() {
            ErrorKind::NotFound => ApiError::not_found(e.to_string()),
            ErrorKind::Conflict => ApiError::conflict(e.to_string()),
            ErrorKind::Refused => ApiError::bad_request(e.to_string()),
            ErrorKind::Backend => {
                tracing::error!(error = %e, "store failure");
                ApiError::internal()
            }
        }
    }
}

impl From<drover_proto::names::NameError> for ApiError {
    /// A refused name or identifier is the caller's input: a 400 that says which rule.
    fn from(e: drover_proto::names::NameError) -> Self {
        ApiError::bad_request(e.to_string())
    }
}

/// A JSON request body whose rejections (bad JSON, wrong shape, wrong content type) are
/// answered in the API's error shape with a 4xx, never axum's plain-text default. It is
/// decoded by [`super::strict_json::from_slice`]: where `T` (or a struct nested in it) is a
/// struct, the JSON must be an object — serde alone would take a positional array.
#[derive(Debug, Clone)]
pub struct JsonBody<T>(pub T);

/// Whether the request says its body is JSON: `application/json` or `application/*+json`
/// (parameters such as `charset` allowed), as axum's own `Json` extractor required.
fn is_json(headers: &axum::http::HeaderMap) -> bool {
    let Some(value) = headers.get(axum::http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) else { return false };
    let essence = value.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    match essence.split_once('/') {
        Some(("application", sub)) => sub == "json" || sub.ends_with("+json"),
        _ => false,
    }
}

impl<T, S> axum::extract::FromRequest<S> for JsonBody<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, ApiError> {
        if !is_json(req.headers()) {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "bad_request",
                "Expected request with `Content-Type: application/json`",
            ));
        }
        let bytes = <axum::body::Bytes as axum::extract::FromRequest<S>>::from_request(req, state).await.map_err(|rejection| {
            ApiError::new(
                match rejection.status() {
                    StatusCode::PAYLOAD_TOO_LARGE => StatusCode::PAYLOAD_TOO_LARGE,
                    _ => StatusCode::BAD_REQUEST,
                },
                "bad_request",
                rejection.body_text(),
            )
        })?;
        super::strict_json::from_slice(&bytes).map(JsonBody).map_err(|e| ApiError::bad_request(e.to_string()))
    }
}

/// The answer for a path no route serves.
pub async fn no_such_route() -> ApiError {
    ApiError::not_found("no such route")
}

/// The answer for a route called with a method it does not take.
pub async fn wrong_method() -> ApiError {
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", "this route does not take that method")
}
