//! How the fake answers, in MAAS's shapes: JSON with `application/json; charset=utf-8`,
//! plain-text errors, `204` with an empty body, form errors as `{"field": ["msg"]}`, and
//! the two datetime formats MAAS writes (Django's ISO 8601 with milliseconds and `Z` in
//! objects; `%a, %d %b. %Y %H:%M:%S` in events). Time is carried as Unix milliseconds
//! ([`Millis`]) so the state machine and persistence never touch a clock.

use axum::body::Body;
use axum::http::{HeaderValue, Response, StatusCode, header};
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::macros::format_description;

use super::lifecycle::Refusal;

/// A point in time as Unix milliseconds.
pub type Millis = i64;

/// An answer before it becomes an HTTP response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The HTTP status.
    pub status: u16,
    /// The content type (empty for no body).
    pub content_type: &'static str,
    /// The body.
    pub body: Vec<u8>,
    /// Extra headers.
    pub headers: Vec<(&'static str, String)>,
}

/// `application/json; charset=utf-8`, as MAAS's emitter labels its JSON.
pub const JSON: &str = "application/json; charset=utf-8";
/// `text/plain; charset=utf-8`.
pub const TEXT: &str = "text/plain; charset=utf-8";

impl Reply {
    /// 200 with a JSON value.
    pub fn ok(value: &Value) -> Reply {
        Reply::json(200, value)
    }

    /// `status` with a JSON value.
    pub fn json(status: u16, value: &Value) -> Reply {
        Reply { status, content_type: JSON, body: value.to_string().into_bytes(), headers: Vec::new() }
    }

    /// `status` with a text body.
    pub fn text(status: u16, text: impl Into<String>) -> Reply {
        Reply { status, content_type: TEXT, body: text.into().into_bytes(), headers: Vec::new() }
    }

    /// 204, empty.
    pub fn no_content() -> Reply {
        Reply { status: 204, content_type: "", body: Vec::new(), headers: Vec::new() }
    }

    /// 400 `{"field": ["message"]}`.
    pub fn field_error(field: &str, message: impl Into<String>) -> Reply {
        Reply::json(400, &json!({ field: [message.into()] }))
    }

    /// 404 `No <Kind> matches the given query.`
    pub fn not_found(kind: &str) -> Reply {
        Reply::text(404, format!("No {kind} matches the given query."))
    }

    /// 400 `Unrecognised signature: method=GET op=None`.
    pub fn unrecognised(method: &str, op: Option<&str>) -> Reply {
        Reply::text(400, format!("Unrecognised signature: method={method} op={}", op.unwrap_or("None")))
    }

    /// Adds a header.
    pub fn with_header(mut self, name: &'static str, value: impl Into<String>) -> Reply {
        self.headers.push((name, value.into()));
        self
    }

    /// The HTTP response; successful API answers carry `X-MAAS-API-Hash` as MAAS's do.
    pub fn into_response(self, api: bool) -> Response<Body> {
        let mut resp = Response::new(Body::from(self.body));
        *resp.status_mut() = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let headers = resp.headers_mut();
        if !self.content_type.is_empty() {
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(self.content_type));
        }
        if api && self.status < 300 {
            headers.insert("x-maas-api-hash", HeaderValue::from_static("0f0a7a4b3c8d4e1f9a2b5c6d7e8f90a1b2c3d4e5"));
        }
        for (name, value) in self.headers {
            if let Ok(v) = HeaderValue::from_str(&value) {
                headers.append(name, v);
            }
        }
        resp
    }
}

impl From<Refusal> for Reply {
    fn from(r: Refusal) -> Reply {
        match r {
            Refusal::Conflict(t) => Reply::text(409, t),
            Refusal::Form(field, msg) => Reply::field_error(field, msg),
            Refusal::BadRequest(t) => Reply::text(400, t),
            Refusal::Forbidden(t) => Reply::text(403, t),
        }
    }
}

/// The current time.
pub fn now_millis() -> Millis {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn datetime(ms: Millis) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

/// Django's JSON datetime: `2026-01-02T03:04:05.678Z`.
pub fn iso(ms: Millis) -> String {
    let fmt = format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z");
    datetime(ms).format(&fmt).unwrap_or_default()
}

/// Parses an ISO 8601 / RFC 3339 datetime (the control API's input) to milliseconds.
pub fn parse_iso(text: &str) -> Option<Millis> {
    let t = OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()?;
    i64::try_from(t.unix_timestamp_nanos() / 1_000_000).ok()
}

/// The events API's `created`: `Fri, 07 Dec. 2018 20:11:08` (with that dot).
pub fn event_time(ms: Millis) -> String {
    let fmt = format_description!("[weekday repr:short], [day] [month repr:short]. [year] [hour]:[minute]:[second]");
    datetime(ms).format(&fmt).unwrap_or_default()
}

/// A JSON datetime or `null`.
pub fn iso_or_null(ms: Option<Millis>) -> Value {
    ms.map_or(Value::Null, |m| Value::String(iso(m)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datetime_formats() {
        // 2018-12-07T20:11:08.250Z
        let ms = 1_544_213_468_250;
        assert_eq!(iso(ms), "2018-12-07T20:11:08.250Z");
        assert_eq!(event_time(ms), "Fri, 07 Dec. 2018 20:11:08");
        assert_eq!(parse_iso("2018-12-07T20:11:08.250Z"), Some(ms));
        assert_eq!(parse_iso("yesterday"), None);
        assert_eq!(iso_or_null(None), Value::Null);
    }

    #[test]
    fn refusals_map_to_maas_statuses() {
        let r: Reply = Refusal::Conflict("x".into()).into();
        assert_eq!((r.status, r.content_type), (409, TEXT));
        let r: Reply = Refusal::Form("__all__", "m".into()).into();
        assert_eq!(r.status, 400);
        assert_eq!(String::from_utf8(r.body).unwrap(), r#"{"__all__":["m"]}"#);
        assert_eq!(Reply::unrecognised("POST", Some("frobnicate")).body, b"Unrecognised signature: method=POST op=frobnicate");
        assert_eq!(Reply::not_found("Machine").body, b"No Machine matches the given query.");
    }
}
