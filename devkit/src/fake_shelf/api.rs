//! One request in, one [`Reply`] out, with no I/O: the `/_fake/` control API is handed to
//! [`control`](super::control); everything else is the Redfish service. In order: a busy
//! spell answers 503 with `Retry-After` (before authentication, as an overloaded BMC
//! would); `GET /redfish`, `/redfish/v1` and `/redfish/v1/` are open; anything else needs
//! HTTP Basic with the configured account (else 401 with `WWW-Authenticate`); then `GET` of
//! a resource, `POST` of an outlet's `#Outlet.PowerControl` target, `POST` of a system's
//! `#ComputerSystem.Reset` target (when the shelf has systems), `POST` of
//! `#UpdateService.SimpleUpdate` (202 with `Location` = the task monitor), `GET` of a task
//! monitor (202 while the task runs, 200 once it ended), 405 for other methods (with
//! `Allow`), 404 for unknown paths. Trailing slashes are ignored.

use std::time::Instant;

use base64::Engine;
use serde_json::{Value, json};

use super::resources;
use super::shelf::{BodyError, Outcome, Refusal, Shelf, parse_control};
use super::system::{self, RESET, parse_reset};
use super::update::{self, Progress, SIMPLE_UPDATE, UpdateBodyError};

/// The realm in `WWW-Authenticate`.
pub const REALM: &str = "Drover fake power shelf";

/// The one account the shelf accepts.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The user name.
    pub user: String,
    /// The password (not in `Debug`).
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials").field("user", &self.user).finish_non_exhaustive()
    }
}

impl Credentials {
    /// Whether an `Authorization` header carries this account over Basic.
    pub fn admits(&self, authorization: Option<&str>) -> bool {
        let Some((scheme, encoded)) = authorization.and_then(|a| a.trim().split_once(' ')) else {
            return false;
        };
        if !scheme.eq_ignore_ascii_case("basic") {
            return false;
        }
        let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(encoded.trim()) else {
            return false;
        };
        let expected = format!("{}:{}", self.user, self.password);
        // Length, then every byte, so the comparison takes the same time wherever it differs.
        decoded.len() == expected.len() && decoded.iter().zip(expected.as_bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    }
}

/// A request, already read.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// `GET`, `POST`, …
    pub method: &'a str,
    /// The path, without the query.
    pub path: &'a str,
    /// The `Authorization` header.
    pub authorization: Option<&'a str>,
    /// The `Content-Type` header.
    pub content_type: Option<&'a str>,
    /// The body.
    pub body: &'a [u8],
}

/// An answer: status, extra headers, and a JSON body (none for 204).
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// Headers besides `Content-Type` and `OData-Version`.
    pub headers: Vec<(&'static str, String)>,
    /// The body.
    pub body: Option<Value>,
}

impl Reply {
    /// A JSON answer.
    pub fn json(status: u16, body: Value) -> Reply {
        Reply { status, headers: Vec::new(), body: Some(body) }
    }

    /// 204.
    pub fn no_content() -> Reply {
        Reply { status: 204, headers: Vec::new(), body: None }
    }

    /// Adds a header.
    pub fn with_header(mut self, name: &'static str, value: impl Into<String>) -> Reply {
        self.headers.push((name, value.into()));
        self
    }
}

fn redfish_error(status: u16, message: &str, text: &str, args: &[&str], resolution: &str) -> Reply {
    Reply::json(status, resources::error(message, text, args, resolution))
}

/// Answers one request at `now`.
pub fn handle(shelf: &mut Shelf, creds: &Credentials, req: &Request<'_>, now: Instant) -> Reply {
    if let Some(rest) = req.path.strip_prefix("/_fake/") {
        return super::control::handle(shelf, req.method, rest, req.body, now);
    }
    let path = match req.path.trim_end_matches('/') {
        "" => "/",
        p => p,
    };
    if path != "/redfish" && !path.starts_with("/redfish/") {
        return not_found(req.path);
    }
    if let Some(secs) = shelf.take_busy() {
        return redfish_error(
            503,
            "ServiceTemporarilyUnavailable",
            &format!("The service is temporarily unavailable. Retry in {secs} seconds."),
            &[&secs.to_string()],
            "Wait for the indicated retry duration and retry the operation.",
        )
        .with_header("retry-after", secs.to_string());
    }
    if req.method == "GET" {
        match path {
            "/redfish" => return Reply::json(200, resources::versions()),
            "/redfish/v1" => return Reply::json(200, resources::service_root(shelf)),
            _ => {}
        }
    }
    if !creds.admits(req.authorization) {
        return redfish_error(
            401,
            "NoValidSession",
            "There is no valid session established with the implementation.",
            &[],
            "Establish a session before attempting any operations.",
        )
        .with_header("www-authenticate", format!("Basic realm=\"{REALM}\""));
    }
    if let Some(id) = resources::action_outlet(path) {
        if shelf.outlet(id).is_none() {
            return not_found(req.path);
        }
        if req.method != "POST" {
            return method_not_allowed(req, "POST");
        }
        return power_control(shelf, id, req, now);
    }
    if let Some(id) = system::reset_system(path) {
        if shelf.system(id).is_none() {
            return not_found(req.path);
        }
        if req.method != "POST" {
            return method_not_allowed(req, "POST");
        }
        return reset(shelf, id, req, now);
    }
    if path == update::SIMPLE_UPDATE_URI {
        if req.method != "POST" {
            return method_not_allowed(req, "POST");
        }
        return simple_update(shelf, req, now);
    }
    if let Some(id) = update::monitor_id(path) {
        if shelf.firmware.update(id).is_none() {
            return not_found(req.path);
        }
        if req.method != "GET" {
            return method_not_allowed(req, "GET");
        }
        return task_monitor(shelf, id, now);
    }
    match resources::get(shelf, path, now) {
        None => not_found(req.path),
        Some(resource) if req.method == "GET" => Reply::json(200, resource),
        Some(_) => method_not_allowed(req, "GET"),
    }
}

fn not_found(path: &str) -> Reply {
    redfish_error(
        404,
        "ResourceMissingAtURI",
        &format!("The resource at the URI {path} was not found."),
        &[path],
        "Place a valid resource at the URI or correct the URI and resubmit the request.",
    )
}

fn method_not_allowed(req: &Request<'_>, allow: &'static str) -> Reply {
    redfish_error(
        405,
        "GeneralError",
        &format!("The method {} is not allowed on {}; it allows {allow}.", req.method, req.path),
        &[req.method, req.path],
        "Use an allowed method.",
    )
    .with_header("allow", allow)
}

fn is_json(content_type: Option<&str>) -> bool {
    content_type.and_then(|c| c.split(';').next()).is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
}

/// 415 unless the request says it is JSON.
fn require_json(req: &Request<'_>) -> Result<(), Reply> {
    if is_json(req.content_type) {
        return Ok(());
    }
    let given = req.content_type.unwrap_or("none");
    Err(redfish_error(
        415,
        "UnrecognizedRequestBody",
        &format!("The Content-Type {given} is not supported; send application/json."),
        &[given],
        "Send the request body as JSON with Content-Type application/json.",
    ))
}

fn malformed(why: &str) -> Reply {
    redfish_error(
        400,
        "MalformedJSON",
        &format!("The request body submitted was malformed JSON and could not be parsed by the receiving service: {why}"),
        &[],
        "Ensure that the request body is valid JSON and resubmit the request.",
    )
}

fn power_control(shelf: &mut Shelf, id: &str, req: &Request<'_>, now: Instant) -> Reply {
    if let Err(refused) = require_json(req) {
        return refused;
    }
    let control = match parse_control(req.body) {
        Ok(c) => c,
        Err(BodyError::Malformed(why)) => return malformed(&why),
        Err(BodyError::Missing) => return parameter_missing("Outlet.PowerControl", "PowerState"),
        Err(BodyError::NotInList(value)) => {
            return redfish_error(
                400,
                "PropertyValueNotInList",
                &format!("The value {value} for the property PowerState is not in the list of acceptable values."),
                &[&value, "PowerState"],
                "Choose a value from the enumeration list that the implementation can support and resubmit the request.",
            );
        }
    };
    match shelf.power_control(id, control, now) {
        Ok(Outcome::Started | Outcome::Unchanged | Outcome::Ignored) => Reply::no_content(),
        Err(Refusal::UnknownOutlet(_) | Refusal::UnknownSystem(_)) => not_found(req.path),
        Err(Refusal::Locked(id)) => redfish_error(
            409,
            "ResourceInUse",
            &format!("The change to the requested resource failed because outlet {id} has PowerControlLocked set."),
            &[&id],
            "Clear PowerControlLocked on the outlet and resubmit the request.",
        ),
    }
}

/// 400 `ActionParameterMissing` naming the action and the parameter.
fn parameter_missing(action: &str, param: &str) -> Reply {
    redfish_error(
        400,
        "ActionParameterMissing",
        &format!("The action {action} requires the parameter {param} to be present in the request body."),
        &[action, param],
        "Supply the action with the required parameter in the request body when the request is resubmitted.",
    )
}

/// 400 `ActionParameterValueNotInList` naming the value (as JSON text), the parameter and the
/// action; `more` is appended to the message.
fn parameter_not_in_list(action: &str, param: &str, value: &str, more: &str) -> Reply {
    redfish_error(
        400,
        "ActionParameterValueNotInList",
        &format!("The value {value} for the parameter {param} in the action {action} is not in the list of acceptable values.{more}"),
        &[value, param, action],
        "Choose a value from the enumeration list that the implementation can support and resubmit the request.",
    )
}

/// `#ComputerSystem.Reset` of system `id`: 415 or 400 for a body it cannot take, else 204
/// (a no-op, or a stuck system, included).
fn reset(shelf: &mut Shelf, id: &str, req: &Request<'_>, now: Instant) -> Reply {
    if let Err(refused) = require_json(req) {
        return refused;
    }
    let reset = match parse_reset(req.body) {
        Ok(r) => r,
        Err(BodyError::Malformed(why)) => return malformed(&why),
        Err(BodyError::Missing) => return parameter_missing(RESET, "ResetType"),
        Err(BodyError::NotInList(value)) => {
            let allowed = format!(" The allowed values are {}.", system::ALLOWED_RESET_TYPES.join(", "));
            return parameter_not_in_list(RESET, "ResetType", &value, &allowed);
        }
    };
    match shelf.reset(id, reset, now) {
        Ok(Outcome::Started | Outcome::Unchanged | Outcome::Ignored) => Reply::no_content(),
        Err(_) => not_found(req.path),
    }
}

/// `#UpdateService.SimpleUpdate`: 202 with the task as created (`Running`), `Location` (its
/// monitor) and `Retry-After: 1`; 415 or 400 for a body it cannot take.
fn simple_update(shelf: &mut Shelf, req: &Request<'_>, now: Instant) -> Reply {
    if let Err(refused) = require_json(req) {
        return refused;
    }
    let request = match update::parse_simple_update(req.body, resources::SHELF_URI) {
        Ok(r) => r,
        Err(e) => return update_refusal(e),
    };
    let task = shelf.firmware.start(request, now);
    Reply::json(202, update::task_json(task, Progress::Running(0)))
        .with_header("location", update::monitor_uri(task.id))
        .with_header("retry-after", "1")
}

fn update_refusal(error: UpdateBodyError) -> Reply {
    let resolution = "Correct the value for the parameter in the request body and resubmit the request.";
    match error {
        UpdateBodyError::Malformed(why) => malformed(&why),
        UpdateBodyError::Missing(param) => parameter_missing(SIMPLE_UPDATE, param),
        UpdateBodyError::WrongType(param, value) => redfish_error(
            400,
            "ActionParameterValueTypeError",
            &format!(
                "The value {value} for the parameter {param} in the action {SIMPLE_UPDATE} is of a different type than the parameter can accept."
            ),
            &[&value, param, SIMPLE_UPDATE],
            resolution,
        ),
        UpdateBodyError::BadFormat(param, value) => redfish_error(
            400,
            "ActionParameterValueFormatError",
            &format!(
                "The value {value} for the parameter {param} in the action {SIMPLE_UPDATE} is of a different format than the parameter can accept."
            ),
            &[&value, param, SIMPLE_UPDATE],
            resolution,
        ),
        UpdateBodyError::NotInList(param, value) => {
            let only = if param == "Targets" { format!(" The only target is {}.", resources::SHELF_URI) } else { String::new() };
            parameter_not_in_list(SIMPLE_UPDATE, param, &value, &only)
        }
    }
}

/// A task monitor (DSP0266 §12.2): 202 with the task, `Location` and `Retry-After: 1` while it
/// runs; 200 with the task once it is `Completed` or `Exception`.
fn task_monitor(shelf: &Shelf, id: u32, now: Instant) -> Reply {
    let Some(task) = shelf.firmware.update(id) else {
        return not_found(&update::monitor_uri(id));
    };
    let progress = task.progress(now, shelf.firmware.time);
    let body = update::task_json(task, progress);
    match progress {
        Progress::Running(_) => Reply::json(202, body).with_header("location", update::monitor_uri(id)).with_header("retry-after", "1"),
        Progress::Completed | Progress::Exception => Reply::json(200, body),
    }
}

/// The control API's error body.
pub fn control_error(status: u16, message: impl Into<String>) -> Reply {
    Reply::json(status, json!({ "error": message.into() }))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::fake_shelf::shelf::{Identity, Power};

    const TARGET: &str = "/redfish/v1/PowerEquipment/PowerShelves/1/Outlets/A1/Actions/Outlet.PowerControl";

    fn setup() -> (Shelf, Credentials, String) {
        let shelf = Shelf::new(Identity::default(), &["A1".into(), "B1".into()], Power::On, Duration::from_millis(1500));
        let creds = Credentials { user: "admin".into(), password: "s3cret:pw".into() };
        let auth = format!("Basic {}", base64::engine::general_purpose::STANDARD.encode("admin:s3cret:pw"));
        (shelf, creds, auth)
    }

    fn req<'a>(method: &'a str, path: &'a str, auth: Option<&'a str>, body: &'a [u8]) -> Request<'a> {
        Request { method, path, authorization: auth, content_type: Some("application/json; charset=utf-8"), body }
    }

    #[test]
    fn basic_auth_is_checked_exactly() {
        let (_, creds, auth) = setup();
        assert!(creds.admits(Some(&auth)));
        assert!(creds.admits(Some(&auth.replace("Basic", "basic"))));
        let enc = |s: &str| format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(s));
        for bad in
            [enc("admin:s3cret"), enc("admin:s3cret:pwx"), enc("Admin:s3cret:pw"), "Bearer x".into(), "Basic !!".into(), String::new()]
        {
            assert!(!creds.admits(Some(&bad)), "{bad}");
        }
        assert!(!creds.admits(None));
        assert!(!format!("{creds:?}").contains("s3cret"));
    }

    #[test]
    fn the_root_is_open_and_the_rest_needs_the_account() {
        let (mut s, c, auth) = setup();
        let now = Instant::now();
        for path in ["/redfish", "/redfish/", "/redfish/v1", "/redfish/v1/"] {
            assert_eq!(handle(&mut s, &c, &req("GET", path, None, b""), now).status, 200, "{path}");
        }
        let r = handle(&mut s, &c, &req("GET", "/redfish/v1/PowerEquipment", None, b""), now);
        assert_eq!(r.status, 401);
        assert_eq!(r.headers, vec![("www-authenticate", format!("Basic realm=\"{REALM}\""))]);
        assert_eq!(r.body.unwrap()["error"]["code"], "Base.1.0.NoValidSession");
        // Unknown paths need the account too, so they reveal nothing.
        assert_eq!(handle(&mut s, &c, &req("GET", "/redfish/v1/Nope", None, b""), now).status, 401);
        assert_eq!(handle(&mut s, &c, &req("GET", "/redfish/v1/PowerEquipment/", Some(&auth), b""), now).status, 200);
        let missing = handle(&mut s, &c, &req("GET", "/redfish/v1/Systems", Some(&auth), b""), now);
        assert_eq!(missing.status, 404);
        assert_eq!(missing.body.unwrap()["error"]["code"], "Base.1.0.ResourceMissingAtURI");
        assert_eq!(handle(&mut s, &c, &req("GET", "/elsewhere", None, b""), now).status, 404);
        let post = handle(&mut s, &c, &req("POST", "/redfish/v1/PowerEquipment", Some(&auth), b"{}"), now);
        assert_eq!((post.status, post.headers[0].clone()), (405, ("allow", "GET".to_owned())));
    }

    #[test]
    fn power_control_refusals_and_success() {
        let (mut s, c, auth) = setup();
        let now = Instant::now();
        let a = Some(auth.as_str());
        let code = |r: Reply| (r.status, r.body.map(|b| b["error"]["code"].as_str().unwrap_or_default().to_owned()));
        let get = handle(&mut s, &c, &req("GET", TARGET, a, b""), now);
        assert_eq!((get.status, get.headers[0].clone()), (405, ("allow", "POST".to_owned())));
        let mut form = req("POST", TARGET, a, br#"{"PowerState":"Off"}"#);
        form.content_type = Some("application/x-www-form-urlencoded");
        assert_eq!(code(handle(&mut s, &c, &form, now)).0, 415);
        form.content_type = None;
        assert_eq!(code(handle(&mut s, &c, &form, now)).0, 415);
        assert_eq!(code(handle(&mut s, &c, &req("POST", TARGET, a, b"{"), now)), (400, Some("Base.1.0.MalformedJSON".into())));
        assert_eq!(code(handle(&mut s, &c, &req("POST", TARGET, a, b"{}"), now)), (400, Some("Base.1.0.ActionParameterMissing".into())));
        assert_eq!(
            code(handle(&mut s, &c, &req("POST", TARGET, a, br#"{"PowerState":"ForceOff"}"#), now)),
            (400, Some("Base.1.0.PropertyValueNotInList".into()))
        );
        let c1 = TARGET.replace("A1", "C1");
        assert_eq!(code(handle(&mut s, &c, &req("POST", &c1, a, br#"{"PowerState":"Off"}"#), now)).0, 404);
        assert_eq!(code(handle(&mut s, &c, &req("POST", TARGET, None, br#"{"PowerState":"Off"}"#), now)).0, 401);
        assert!(s.actions.is_empty());
        assert_eq!(handle(&mut s, &c, &req("POST", TARGET, a, br#"{"PowerState":"Off"}"#), now), Reply::no_content());
        assert_eq!(s.outlet("A1").unwrap().power_state(now, s.delay), "PoweringOff");
        s.outlet_mut("A1").unwrap().locked = true;
        assert_eq!(
            code(handle(&mut s, &c, &req("POST", TARGET, a, br#"{"PowerState":"On"}"#), now)),
            (409, Some("Base.1.0.ResourceInUse".into()))
        );
        assert_eq!(s.actions.len(), 1);
    }

    const RESET_TARGET: &str = "/redfish/v1/Systems/node-1/Actions/ComputerSystem.Reset";

    #[test]
    fn reset_refusals_and_success() {
        let (s, c, auth) = setup();
        let mut s = s.with_systems(&["node-1".into()], Power::On);
        let now = Instant::now();
        let root = handle(&mut s, &c, &req("GET", "/redfish/v1/", None, b""), now).body.unwrap();
        assert_eq!(root["Systems"]["@odata.id"], "/redfish/v1/Systems");
        let a = Some(auth.as_str());
        let mut call = |r: &Request<'_>| {
            let reply = handle(&mut s, &c, r, now);
            let e = reply.body.map(|b| b["error"].clone()).unwrap_or_default();
            (reply.status, e["code"].as_str().unwrap_or_default().to_owned(), e["message"].as_str().unwrap_or_default().to_owned())
        };
        assert_eq!(call(&req("GET", "/redfish/v1/Systems/node-1", a, b"")).0, 200);
        assert_eq!(call(&req("GET", RESET_TARGET, a, b"")).0, 405);
        let mut form = req("POST", RESET_TARGET, a, br#"{"ResetType":"On"}"#);
        form.content_type = Some("text/plain");
        assert_eq!(call(&form).0, 415);
        assert_eq!(call(&req("POST", RESET_TARGET, a, b"{")).1, "Base.1.0.MalformedJSON");
        let missing = call(&req("POST", RESET_TARGET, a, br#"{"PowerState":"Off"}"#));
        assert_eq!((missing.0, missing.1.as_str()), (400, "Base.1.0.ActionParameterMissing"));
        assert!(missing.2.contains("ResetType"), "{}", missing.2);
        let wrong = call(&req("POST", RESET_TARGET, a, br#"{"ResetType":"Nmi"}"#));
        assert_eq!((wrong.0, wrong.1.as_str()), (400, "Base.1.0.ActionParameterValueNotInList"));
        assert!(wrong.2.contains("\"Nmi\"") && wrong.2.contains("ForceRestart"), "{}", wrong.2);
        assert_eq!(call(&req("POST", &RESET_TARGET.replace("node-1", "node-9"), a, br#"{"ResetType":"On"}"#)).0, 404);
        assert_eq!(call(&req("POST", RESET_TARGET, None, br#"{"ResetType":"ForceOff"}"#)).0, 401);
        assert_eq!(call(&req("POST", &format!("{RESET_TARGET}/"), a, br#"{"ResetType":"ForceOff"}"#)).0, 204);
        assert_eq!(call(&req("POST", RESET_TARGET, a, br#"{"ResetType":"GracefulShutdown"}"#)).0, 204);
        assert_eq!(s.system("node-1").unwrap().power_state(now, s.delay), "PoweringOff");
        let logged: Vec<&str> = s.resets.iter().map(|(_, r)| r.as_str()).collect();
        assert_eq!(logged, vec!["ForceOff", "GracefulShutdown"]);
    }

    #[test]
    fn a_shelf_without_systems_has_no_reset_target() {
        let (mut s, c, auth) = setup();
        let r = handle(&mut s, &c, &req("POST", RESET_TARGET, Some(&auth), br#"{"ResetType":"On"}"#), Instant::now());
        assert_eq!(r.status, 404);
        assert!(handle(&mut s, &c, &req("GET", "/redfish/v1", None, b""), Instant::now()).body.unwrap().get("Systems").is_none());
    }

    const UPDATE: &str = "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate";
    const IMAGE_BODY: &[u8] = br#"{"ImageURI":"https://fw.example/ps-fw-2.1.bin","Targets":["/redfish/v1/PowerEquipment/PowerShelves/1"]}"#;

    fn header<'r>(r: &'r Reply, name: &str) -> Option<&'r str> {
        r.headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str())
    }

    #[test]
    fn simple_update_answers_202_and_its_monitor_202_then_200() {
        let (mut s, c, auth) = setup();
        let a = Some(auth.as_str());
        let t0 = Instant::now();
        let accepted = handle(&mut s, &c, &req("POST", UPDATE, a, IMAGE_BODY), t0);
        assert_eq!(accepted.status, 202);
        assert_eq!(header(&accepted, "location"), Some("/redfish/v1/TaskService/TaskMonitors/1"));
        let task = accepted.body.clone().unwrap();
        assert_eq!((task["@odata.type"].as_str(), task["TaskState"].as_str()), (Some("#Task.v1_7_0.Task"), Some("Running")));
        let monitor = "/redfish/v1/TaskService/TaskMonitors/1";
        let running = handle(&mut s, &c, &req("GET", monitor, a, b""), t0 + Duration::from_millis(999));
        assert_eq!((running.status, header(&running, "retry-after")), (202, Some("1")));
        assert_eq!(running.body.unwrap()["TaskState"], "Running");
        assert_eq!(handle(&mut s, &c, &req("GET", monitor, None, b""), t0).status, 401);
        let t1 = t0 + s.firmware.time;
        let done = handle(&mut s, &c, &req("GET", &format!("{monitor}/"), a, b""), t1);
        assert_eq!(done.status, 200);
        let body = done.body.unwrap();
        assert_eq!((body["TaskState"].as_str(), body["TaskStatus"].as_str()), (Some("Completed"), Some("OK")));
        let shelf = handle(&mut s, &c, &req("GET", "/redfish/v1/PowerEquipment/PowerShelves/1", a, b""), t1);
        assert_eq!(shelf.body.unwrap()["FirmwareVersion"], "ps-fw-2.1");
        let task = handle(&mut s, &c, &req("GET", "/redfish/v1/TaskService/Tasks/1", a, b""), t1);
        assert_eq!((task.status, task.body.unwrap()["TaskState"].as_str().map(str::to_owned)), (200, Some("Completed".into())));
        let delete = handle(&mut s, &c, &req("DELETE", monitor, a, b""), t1);
        assert_eq!((delete.status, header(&delete, "allow")), (405, Some("GET")));
        assert_eq!(handle(&mut s, &c, &req("GET", "/redfish/v1/TaskService/TaskMonitors/2", a, b""), t1).status, 404);
        let get = handle(&mut s, &c, &req("GET", UPDATE, a, b""), t1);
        assert_eq!((get.status, header(&get, "allow")), (405, Some("POST")));
    }

    #[test]
    fn a_failing_update_ends_200_with_exception_and_the_version_unchanged() {
        let (mut s, c, auth) = setup();
        let a = Some(auth.as_str());
        let t0 = Instant::now();
        s.firmware.fail = Some("image signature invalid".into());
        assert_eq!(handle(&mut s, &c, &req("POST", UPDATE, a, IMAGE_BODY), t0).status, 202);
        let t1 = t0 + s.firmware.time;
        let ended = handle(&mut s, &c, &req("GET", "/redfish/v1/TaskService/TaskMonitors/1", a, b""), t1);
        assert_eq!(ended.status, 200);
        let body = ended.body.unwrap();
        assert_eq!((body["TaskState"].as_str(), body["TaskStatus"].as_str()), (Some("Exception"), Some("Critical")));
        assert_eq!(body["Messages"][0]["MessageId"], "Update.1.0.ApplyFailed");
        assert_eq!(body["Messages"][0]["Message"], "image signature invalid");
        assert_eq!(s.firmware.version(t1), resources::FIRMWARE_VERSION);
    }

    #[test]
    fn simple_update_refusals_name_the_parameter() {
        let (mut s, c, auth) = setup();
        let a = Some(auth.as_str());
        let now = Instant::now();
        let mut call = |body: &str| {
            let r = handle(&mut s, &c, &req("POST", UPDATE, a, body.as_bytes()), now);
            let e = r.body.map(|b| b["error"].clone()).unwrap_or_default();
            (r.status, e["code"].as_str().unwrap_or_default().to_owned(), e["message"].as_str().unwrap_or_default().to_owned())
        };
        assert_eq!(call("{").1, "Base.1.0.MalformedJSON");
        let missing = call(r#"{"Targets":["/redfish/v1/PowerEquipment/PowerShelves/1"]}"#);
        assert_eq!((missing.0, missing.1.as_str()), (400, "Base.1.0.ActionParameterMissing"));
        assert!(missing.2.contains("ImageURI"), "{}", missing.2);
        assert_eq!(call(r#"{"ImageURI":"https://h/f.bin"}"#).1, "Base.1.0.ActionParameterMissing");
        assert_eq!(
            call(r#"{"ImageURI":"ftp://h/f.bin","Targets":["/redfish/v1/PowerEquipment/PowerShelves/1"]}"#).1,
            "Base.1.0.ActionParameterValueFormatError"
        );
        assert_eq!(call(r#"{"ImageURI":"https://h/f.bin","Targets":[]}"#).1, "Base.1.0.ActionParameterValueFormatError");
        assert_eq!(call(r#"{"ImageURI":"https://h/f.bin","Targets":"x"}"#).1, "Base.1.0.ActionParameterValueTypeError");
        let wrong = call(r#"{"ImageURI":"https://h/f.bin","Targets":["/redfish/v1/Chassis/PowerShelf"]}"#);
        assert_eq!((wrong.0, wrong.1.as_str()), (400, "Base.1.0.ActionParameterValueNotInList"));
        assert!(wrong.2.contains("/redfish/v1/Chassis/PowerShelf"), "{}", wrong.2);
        let mut form = req("POST", UPDATE, a, IMAGE_BODY);
        form.content_type = Some("text/plain");
        assert_eq!(handle(&mut s, &c, &form, now).status, 415);
        assert_eq!(handle(&mut s, &c, &req("POST", UPDATE, None, IMAGE_BODY), now).status, 401);
        assert!(s.firmware.updates.is_empty());
    }

    #[test]
    fn busy_answers_503_before_authentication() {
        let (mut s, c, _) = setup();
        let now = Instant::now();
        s.busy = 2;
        s.retry_after = 4;
        let r = handle(&mut s, &c, &req("GET", "/redfish/v1/", None, b""), now);
        assert_eq!((r.status, r.headers.clone()), (503, vec![("retry-after", "4".to_owned())]));
        assert_eq!(handle(&mut s, &c, &req("GET", "/redfish/v1/PowerEquipment", None, b""), now).status, 503);
        assert_eq!(handle(&mut s, &c, &req("GET", "/redfish/v1/", None, b""), now).status, 200);
        // Control calls and paths outside /redfish do not count.
        s.busy = 1;
        assert_eq!(handle(&mut s, &c, &req("GET", "/_fake/state", None, b""), now).status, 200);
        assert_eq!(handle(&mut s, &c, &req("GET", "/elsewhere", None, b""), now).status, 404);
        assert_eq!(handle(&mut s, &c, &req("GET", "/redfish", None, b""), now).status, 503);
    }
}
