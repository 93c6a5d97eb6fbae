//! Firmware updates, with no I/O and no clock of its own: the `SimpleUpdate` body, the
//! shelf's firmware and the updates it was asked for, and the JSON of the `UpdateService`,
//! the firmware inventory, the `TaskService` and each update's `Task`. Every function that
//! depends on time takes `now`, as the outlets do.
//!
//! An accepted update `n` is task `n` (from 1), read at `/redfish/v1/TaskService/Tasks/{n}`
//! and followed at its task monitor `/redfish/v1/TaskService/TaskMonitors/{n}` (DSP0266
//! §12.2). It runs for the shelf's update time from the instant it was accepted, then ends
//! `Completed` — the shelf's `FirmwareVersion` is then the last path segment of the
//! `ImageURI` without its extension (`https://fw.example/ps-fw-2.1.bin` → `ps-fw-2.1`) — or,
//! when the failure switch was on as it was accepted, `Exception` with an
//! `Update.1.0.ApplyFailed` message and the version unchanged. Tasks are never deleted.
//!
//! | URI | `@odata.type` |
//! |---|---|
//! | `/redfish/v1/UpdateService` | `#UpdateService.v1_11_0.UpdateService` |
//! | `/redfish/v1/UpdateService/FirmwareInventory` | `#SoftwareInventoryCollection.SoftwareInventoryCollection` |
//! | `/redfish/v1/UpdateService/FirmwareInventory/PowerShelf` | `#SoftwareInventory.v1_10_0.SoftwareInventory` |
//! | `/redfish/v1/TaskService` | `#TaskService.v1_2_0.TaskService` |
//! | `/redfish/v1/TaskService/Tasks` | `#TaskCollection.TaskCollection` |
//! | `/redfish/v1/TaskService/Tasks/{n}` | `#Task.v1_7_0.Task` |

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::resources::{collection, enabled_ok, link};

/// The update service.
pub const UPDATE_SERVICE_URI: &str = "/redfish/v1/UpdateService";
/// Its `#UpdateService.SimpleUpdate` target.
pub const SIMPLE_UPDATE_URI: &str = "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate";
/// The firmware inventory.
pub const FIRMWARE_INVENTORY_URI: &str = "/redfish/v1/UpdateService/FirmwareInventory";
/// The shelf's firmware in the inventory.
pub const SHELF_FIRMWARE_URI: &str = "/redfish/v1/UpdateService/FirmwareInventory/PowerShelf";
/// The task service.
pub const TASK_SERVICE_URI: &str = "/redfish/v1/TaskService";
/// The task collection.
pub const TASKS_URI: &str = "/redfish/v1/TaskService/Tasks";
/// Where the task monitors live (one per task, `{n}` below).
pub const TASK_MONITORS_URI: &str = "/redfish/v1/TaskService/TaskMonitors";
/// The action's name in messages.
pub const SIMPLE_UPDATE: &str = "UpdateService.SimpleUpdate";
/// The `TransferProtocol` values the action allows.
pub const TRANSFER_PROTOCOLS: [&str; 2] = ["HTTP", "HTTPS"];

/// How long an update takes unless `--update-ms` says otherwise.
pub const DEFAULT_UPDATE_MS: u64 = 1000;

/// What a failed update's message says unless the control call gave one.
pub const DEFAULT_FAILURE: &str = "The firmware image could not be applied.";

/// Task `n`'s URI.
pub fn task_uri(id: u32) -> String {
    format!("{TASKS_URI}/{id}")
}

/// Task `n`'s monitor.
pub fn monitor_uri(id: u32) -> String {
    format!("{TASK_MONITORS_URI}/{id}")
}

/// The `n` of `{prefix}/{n}` (`n` a decimal number from 1, no leading zero).
fn numbered(path: &str, prefix: &str) -> Option<u32> {
    let n = path.strip_prefix(prefix)?.strip_prefix('/')?;
    (!n.is_empty() && !n.starts_with('0') && n.bytes().all(|b| b.is_ascii_digit())).then(|| n.parse().ok()).flatten()
}

/// The task id if `path` (no trailing slash) is a task monitor.
pub fn monitor_id(path: &str) -> Option<u32> {
    numbered(path, TASK_MONITORS_URI)
}

/// The version an image installs: the last path segment of the URL, without query,
/// fragment or extension; None when that leaves nothing.
pub fn version_from_uri(uri: &str) -> Option<String> {
    let rest = uri.split_once("://").map_or(uri, |(_, r)| r);
    let path = rest.split(['?', '#']).next().unwrap_or_default();
    let segment = path.rsplit('/').next().unwrap_or_default();
    let stem = segment.rsplit_once('.').map_or(segment, |(stem, _)| stem);
    (!stem.is_empty() && path.contains('/')).then(|| stem.to_owned())
}

/// Whether `uri` is an absolute `http://` or `https://` URL with a host and no white space.
fn is_http_url(uri: &str) -> bool {
    let Some((scheme, rest)) = uri.split_once("://") else {
        return false;
    };
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    (scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https"))
        && !host.is_empty()
        && !uri.chars().any(char::is_whitespace)
}

/// Why a `SimpleUpdate` body was refused (all 400). Values are JSON text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpdateBodyError {
    /// Not JSON, or not a JSON object.
    Malformed(String),
    /// A required parameter is absent (`ActionParameterMissing`).
    Missing(&'static str),
    /// A parameter has the wrong JSON type (`ActionParameterValueTypeError`).
    WrongType(&'static str, String),
    /// A parameter's value is not well formed (`ActionParameterValueFormatError`).
    BadFormat(&'static str, String),
    /// A parameter's value is not one the shelf accepts (`ActionParameterValueNotInList`).
    NotInList(&'static str, String),
}

/// An accepted `SimpleUpdate` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateRequest {
    /// `ImageURI`.
    pub image_uri: String,
    /// `Targets`, as given.
    pub targets: Vec<String>,
    /// The version the image installs.
    pub version: String,
    /// The body as sent (the task's `Payload.JsonBody`).
    pub body: String,
}

/// Parses the body of `#UpdateService.SimpleUpdate`: `ImageURI`, an `http(s)` URL naming a
/// file; `Targets`, a non-empty array whose every entry is `shelf_uri` (a trailing slash is
/// ignored); optionally `TransferProtocol`, one of [`TRANSFER_PROTOCOLS`]. Other parameters
/// (`Username`, `Password`, …) are ignored.
pub fn parse_simple_update(body: &[u8], shelf_uri: &str) -> Result<UpdateRequest, UpdateBodyError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| UpdateBodyError::Malformed(e.to_string()))?;
    let Value::Object(map) = value else {
        return Err(UpdateBodyError::Malformed("the body is not a JSON object".into()));
    };
    let image_uri = match map.get("ImageURI") {
        None => return Err(UpdateBodyError::Missing("ImageURI")),
        Some(Value::String(s)) => s.clone(),
        Some(other) => return Err(UpdateBodyError::WrongType("ImageURI", other.to_string())),
    };
    let version = version_from_uri(&image_uri).filter(|_| is_http_url(&image_uri));
    let Some(version) = version else {
        return Err(UpdateBodyError::BadFormat("ImageURI", Value::String(image_uri).to_string()));
    };
    let targets = match map.get("Targets") {
        None => return Err(UpdateBodyError::Missing("Targets")),
        Some(Value::Array(a)) if a.is_empty() => return Err(UpdateBodyError::BadFormat("Targets", "[]".into())),
        Some(Value::Array(a)) => a,
        Some(other) => return Err(UpdateBodyError::WrongType("Targets", other.to_string())),
    };
    let mut uris = Vec::with_capacity(targets.len());
    for target in targets {
        match target {
            Value::String(s) if s.trim_end_matches('/') == shelf_uri => uris.push(s.clone()),
            Value::String(_) => return Err(UpdateBodyError::NotInList("Targets", target.to_string())),
            other => return Err(UpdateBodyError::WrongType("Targets", other.to_string())),
        }
    }
    match map.get("TransferProtocol") {
        None => {}
        Some(Value::String(p)) if TRANSFER_PROTOCOLS.contains(&p.as_str()) => {}
        Some(Value::String(p)) => return Err(UpdateBodyError::NotInList("TransferProtocol", Value::String(p.clone()).to_string())),
        Some(other) => return Err(UpdateBodyError::WrongType("TransferProtocol", other.to_string())),
    }
    Ok(UpdateRequest { image_uri, targets: uris, version, body: String::from_utf8_lossy(body).into_owned() })
}

/// A task's `TaskState` at some instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// Still applying; the percentage done (0–99).
    Running(u8),
    /// Applied.
    Completed,
    /// Failed; the version is unchanged.
    Exception,
}

/// One accepted update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update {
    /// Its task id (from 1).
    pub id: u32,
    /// What was asked.
    pub request: UpdateRequest,
    /// When it was accepted.
    pub started: Instant,
    /// The failure it will end in (the switch as it was when accepted).
    pub failure: Option<String>,
}

impl Update {
    /// Where it stands at `now` for a shelf whose updates take `time`.
    pub fn progress(&self, now: Instant, time: Duration) -> Progress {
        let elapsed = now.saturating_duration_since(self.started);
        match &self.failure {
            _ if elapsed < time => {
                Progress::Running(u8::try_from(elapsed.as_millis() * 100 / time.as_millis().max(1)).unwrap_or(99).min(99))
            }
            None => Progress::Completed,
            Some(_) => Progress::Exception,
        }
    }
}

/// The shelf's firmware: the version it shipped with, the updates it was asked for, and the
/// failure switch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Firmware {
    /// The version before any update.
    pub shipped: String,
    /// How long an update takes.
    pub time: Duration,
    /// Every accepted update, in order.
    pub updates: Vec<Update>,
    /// When set, updates accepted from now on end in `Exception` with this message.
    pub fail: Option<String>,
}

impl Firmware {
    /// Firmware at `shipped` whose updates take `time`.
    pub fn new(shipped: &str, time: Duration) -> Firmware {
        Firmware { shipped: shipped.to_owned(), time, updates: Vec::new(), fail: None }
    }

    /// Accepts an update at `now`; answers it (its task).
    pub fn start(&mut self, request: UpdateRequest, now: Instant) -> &Update {
        let id = u32::try_from(self.updates.len() + 1).unwrap_or(u32::MAX);
        self.updates.push(Update { id, request, started: now, failure: self.fail.clone() });
        &self.updates[self.updates.len() - 1]
    }

    /// Task `id`.
    pub fn update(&self, id: u32) -> Option<&Update> {
        self.updates.iter().find(|u| u.id == id)
    }

    /// `FirmwareVersion` at `now`: that of the update accepted last among those completed by
    /// then, else the shipped one.
    pub fn version(&self, now: Instant) -> &str {
        self.updates
            .iter()
            .filter(|u| u.progress(now, self.time) == Progress::Completed)
            .max_by_key(|u| u.started)
            .map_or(&self.shipped, |u| &u.request.version)
    }

    /// Task `update` as JSON at `now`.
    pub fn task(&self, update: &Update, now: Instant) -> Value {
        task_json(update, update.progress(now, self.time))
    }
}

/// A task as JSON in the given state (the 202 that accepts an update shows it `Running` at 0 %).
pub fn task_json(update: &Update, progress: Progress) -> Value {
    let id = update.id.to_string();
    let (state, status, percent) = match progress {
        Progress::Running(p) => ("Running", "OK", p),
        Progress::Completed => ("Completed", "OK", 100),
        Progress::Exception => ("Exception", "Critical", 100),
    };
    let target = update.request.targets.first().map_or("", String::as_str);
    let messages = match (progress, &update.failure) {
        (Progress::Exception, Some(text)) => vec![json!({
            "@odata.type": "#Message.v1_1_1.Message",
            "MessageId": "Update.1.0.ApplyFailed",
            "Message": text,
            "MessageArgs": [update.request.image_uri, target],
            "MessageSeverity": "Critical",
            "Resolution": "Check the image and resubmit the update.",
        })],
        (Progress::Completed, _) => vec![json!({
            "@odata.type": "#Message.v1_1_1.Message",
            "MessageId": "TaskEvent.1.0.TaskCompletedOK",
            "Message": format!("The task with Id '{id}' has completed."),
            "MessageArgs": [id],
            "MessageSeverity": "OK",
            "Resolution": "None.",
        })],
        _ => Vec::new(),
    };
    json!({
        "@odata.id": task_uri(update.id),
        "@odata.type": "#Task.v1_7_0.Task",
        "Id": id,
        "Name": format!("SimpleUpdate {id}"),
        "TaskState": state,
        "TaskStatus": status,
        "PercentComplete": percent,
        "TaskMonitor": monitor_uri(update.id),
        "HidePayload": false,
        "Payload": {
            "TargetUri": SIMPLE_UPDATE_URI,
            "HttpOperation": "POST",
            "HttpHeaders": [],
            "JsonBody": update.request.body,
        },
        "Messages": messages,
    })
}

/// The resource at `path` (no trailing slash) among those this module serves, read at `now`;
/// `shelf_uri` and `manufacturer` describe the shelf the firmware belongs to.
pub fn get(firmware: &Firmware, path: &str, now: Instant, shelf_uri: &str, manufacturer: &str) -> Option<Value> {
    let value = match path {
        UPDATE_SERVICE_URI => json!({
            "@odata.id": UPDATE_SERVICE_URI,
            "@odata.type": "#UpdateService.v1_11_0.UpdateService",
            "Id": "UpdateService",
            "Name": "Update Service",
            "Status": enabled_ok(),
            "ServiceEnabled": true,
            "FirmwareInventory": link(FIRMWARE_INVENTORY_URI),
            "Actions": {
                "#UpdateService.SimpleUpdate": {
                    "target": SIMPLE_UPDATE_URI,
                    "TransferProtocol@Redfish.AllowableValues": TRANSFER_PROTOCOLS,
                }
            },
        }),
        FIRMWARE_INVENTORY_URI => {
            collection(FIRMWARE_INVENTORY_URI, "SoftwareInventoryCollection", "Firmware Inventory", &[SHELF_FIRMWARE_URI.to_owned()])
        }
        SHELF_FIRMWARE_URI => json!({
            "@odata.id": SHELF_FIRMWARE_URI,
            "@odata.type": "#SoftwareInventory.v1_10_0.SoftwareInventory",
            "Id": "PowerShelf",
            "Name": "Power Shelf Firmware",
            "Manufacturer": manufacturer,
            "Version": firmware.version(now),
            "Updateable": true,
            "Status": enabled_ok(),
            "RelatedItem": [link(shelf_uri)],
        }),
        TASK_SERVICE_URI => json!({
            "@odata.id": TASK_SERVICE_URI,
            "@odata.type": "#TaskService.v1_2_0.TaskService",
            "Id": "TaskService",
            "Name": "Task Service",
            "Status": enabled_ok(),
            "ServiceEnabled": true,
            "CompletedTaskOverWritePolicy": "Manual",
            "LifeCycleEventOnTaskStateChange": false,
            "Tasks": link(TASKS_URI),
        }),
        TASKS_URI => {
            let members: Vec<String> = firmware.updates.iter().map(|u| task_uri(u.id)).collect();
            collection(TASKS_URI, "TaskCollection", "Task Collection", &members)
        }
        _ => firmware.task(firmware.update(numbered(path, TASKS_URI)?)?, now),
    };
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHELF: &str = "/redfish/v1/PowerEquipment/PowerShelves/1";
    const T: Duration = Duration::from_millis(1000);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn parse(body: &str) -> Result<UpdateRequest, UpdateBodyError> {
        parse_simple_update(body.as_bytes(), SHELF)
    }

    fn request(image: &str) -> UpdateRequest {
        parse(&json!({ "ImageURI": image, "Targets": [SHELF] }).to_string()).unwrap()
    }

    #[test]
    fn versions_come_from_the_last_path_segment() {
        assert_eq!(version_from_uri("https://fw.example/ps-fw-2.1.bin").as_deref(), Some("ps-fw-2.1"));
        assert_eq!(version_from_uri("http://fw.example/a/b/fw-3.tar.gz?sig=1#x").as_deref(), Some("fw-3.tar"));
        assert_eq!(version_from_uri("https://fw.example/images/v7").as_deref(), Some("v7"));
        assert_eq!(version_from_uri("https://fw.example/images/"), None);
        assert_eq!(version_from_uri("https://fw.example/.bin"), None);
        assert_eq!(version_from_uri("https://fw.example"), None);
    }

    #[test]
    fn simple_update_bodies_parse_or_name_what_is_wrong() {
        let ok = parse(r#"{"ImageURI":"https://fw.example/ps-fw-2.1.bin","Targets":["/redfish/v1/PowerEquipment/PowerShelves/1/"],"TransferProtocol":"HTTPS","Username":"u"}"#).unwrap();
        assert_eq!((ok.image_uri.as_str(), ok.version.as_str()), ("https://fw.example/ps-fw-2.1.bin", "ps-fw-2.1"));
        assert_eq!(ok.targets, vec!["/redfish/v1/PowerEquipment/PowerShelves/1/"]);
        assert!(ok.body.contains("Username"));
        assert!(matches!(parse("{"), Err(UpdateBodyError::Malformed(_))));
        assert!(matches!(parse("[]"), Err(UpdateBodyError::Malformed(_))));
        assert_eq!(parse(&json!({"Targets": [SHELF]}).to_string()), Err(UpdateBodyError::Missing("ImageURI")));
        assert_eq!(parse(r#"{"ImageURI":"http://h/f.bin"}"#), Err(UpdateBodyError::Missing("Targets")));
        assert_eq!(parse(r#"{"ImageURI":7,"Targets":[]}"#), Err(UpdateBodyError::WrongType("ImageURI", "7".into())));
        for bad in ["ftp://h/f.bin", "fw.bin", "https:///f.bin", "https://h/", "https://h/a b.bin"] {
            let body = json!({"ImageURI": bad, "Targets": [SHELF]}).to_string();
            assert_eq!(parse(&body), Err(UpdateBodyError::BadFormat("ImageURI", format!("\"{bad}\""))), "{bad}");
        }
        let with = |targets: Value| parse(&json!({"ImageURI": "HTTP://h/f.bin", "Targets": targets}).to_string());
        assert_eq!(with(json!([])), Err(UpdateBodyError::BadFormat("Targets", "[]".into())));
        assert_eq!(with(json!(SHELF)), Err(UpdateBodyError::WrongType("Targets", format!("\"{SHELF}\""))));
        assert_eq!(with(json!([SHELF, 3])), Err(UpdateBodyError::WrongType("Targets", "3".into())));
        let other = "/redfish/v1/Chassis/PowerShelf";
        assert_eq!(with(json!([SHELF, other])), Err(UpdateBodyError::NotInList("Targets", format!("\"{other}\""))));
        let proto = |p: Value| parse(&json!({"ImageURI": "http://h/f.bin", "Targets": [SHELF], "TransferProtocol": p}).to_string());
        assert_eq!(proto(json!("FTP")), Err(UpdateBodyError::NotInList("TransferProtocol", "\"FTP\"".into())));
        assert_eq!(proto(json!(1)), Err(UpdateBodyError::WrongType("TransferProtocol", "1".into())));
        assert!(proto(json!("HTTP")).is_ok());
    }

    #[test]
    fn an_update_runs_for_the_update_time_then_changes_the_version() {
        let t0 = Instant::now();
        let mut fw = Firmware::new("1.0.0", T);
        let first = fw.start(request("https://fw.example/ps-fw-2.1.bin"), t0);
        assert_eq!(first.id, 1);
        assert_eq!(first.progress(t0, T), Progress::Running(0));
        assert_eq!(first.progress(t0 + ms(500), T), Progress::Running(50));
        assert_eq!(first.progress(t0 + ms(999), T), Progress::Running(99));
        assert_eq!(fw.version(t0 + ms(999)), "1.0.0");
        assert_eq!(fw.version(t0 + T), "ps-fw-2.1");
        let second = fw.start(request("https://fw.example/ps-fw-2.2.bin"), t0 + ms(200));
        assert_eq!(second.id, 2);
        assert_eq!(fw.version(t0 + ms(1100)), "ps-fw-2.1");
        assert_eq!(fw.version(t0 + ms(1200)), "ps-fw-2.2");
        assert!(fw.update(3).is_none());
    }

    #[test]
    fn a_failing_update_ends_in_exception_and_keeps_the_version() {
        let t0 = Instant::now();
        let mut fw = Firmware::new("1.0.0", T);
        fw.fail = Some("image signature invalid".into());
        fw.start(request("https://fw.example/bad.bin"), t0);
        fw.fail = None;
        fw.start(request("https://fw.example/good.bin"), t0);
        let bad = fw.update(1).unwrap();
        assert_eq!(bad.progress(t0 + ms(10), T), Progress::Running(1));
        assert_eq!(bad.progress(t0 + T, T), Progress::Exception);
        let task = fw.task(bad, t0 + T);
        assert_eq!((task["TaskState"].as_str(), task["TaskStatus"].as_str()), (Some("Exception"), Some("Critical")));
        assert_eq!(task["Messages"][0]["MessageId"], "Update.1.0.ApplyFailed");
        assert_eq!(task["Messages"][0]["Message"], "image signature invalid");
        assert_eq!(task["Messages"][0]["MessageArgs"], json!(["https://fw.example/bad.bin", SHELF]));
        assert_eq!(fw.version(t0 + T), "good");
    }

    #[test]
    fn a_zero_update_time_completes_at_once() {
        let t0 = Instant::now();
        let mut fw = Firmware::new("1.0.0", Duration::ZERO);
        let u = fw.start(request("https://fw.example/z.bin"), t0).clone();
        assert_eq!(u.progress(t0, Duration::ZERO), Progress::Completed);
        assert_eq!(fw.version(t0), "z");
        // The answer to the POST still shows the task as created.
        assert_eq!(task_json(&u, Progress::Running(0))["TaskState"], "Running");
    }

    #[test]
    fn tasks_and_services_read_as_the_schema_says() {
        let t0 = Instant::now();
        let mut fw = Firmware::new("1.0.0", T);
        fw.start(request("https://fw.example/ps-fw-2.1.bin"), t0);
        let running = get(&fw, "/redfish/v1/TaskService/Tasks/1", t0 + ms(250), SHELF, "M").unwrap();
        assert_eq!(running["@odata.type"], "#Task.v1_7_0.Task");
        assert_eq!((running["Id"].as_str(), running["TaskState"].as_str()), (Some("1"), Some("Running")));
        assert_eq!((running["TaskStatus"].as_str(), running["PercentComplete"].as_u64()), (Some("OK"), Some(25)));
        assert_eq!(running["TaskMonitor"], "/redfish/v1/TaskService/TaskMonitors/1");
        assert_eq!(running["Payload"]["TargetUri"], SIMPLE_UPDATE_URI);
        assert_eq!(running["Messages"], json!([]));
        let done = get(&fw, "/redfish/v1/TaskService/Tasks/1", t0 + T, SHELF, "M").unwrap();
        assert_eq!((done["TaskState"].as_str(), done["TaskStatus"].as_str()), (Some("Completed"), Some("OK")));
        assert_eq!(done["Messages"][0]["MessageId"], "TaskEvent.1.0.TaskCompletedOK");
        for missing in ["/redfish/v1/TaskService/Tasks/2", "/redfish/v1/TaskService/Tasks/01", "/redfish/v1/TaskService/Tasks/x"] {
            assert!(get(&fw, missing, t0, SHELF, "M").is_none(), "{missing}");
        }
        let service = get(&fw, UPDATE_SERVICE_URI, t0, SHELF, "M").unwrap();
        assert_eq!(service["@odata.type"], "#UpdateService.v1_11_0.UpdateService");
        assert_eq!(service["ServiceEnabled"], true);
        let action = &service["Actions"]["#UpdateService.SimpleUpdate"];
        assert_eq!(action["target"], SIMPLE_UPDATE_URI);
        assert_eq!(action["TransferProtocol@Redfish.AllowableValues"], json!(["HTTP", "HTTPS"]));
        assert_eq!(get(&fw, SHELF_FIRMWARE_URI, t0 + T, SHELF, "M").unwrap()["Version"], "ps-fw-2.1");
        assert_eq!(get(&fw, TASKS_URI, t0, SHELF, "M").unwrap()["Members"], json!([{"@odata.id": "/redfish/v1/TaskService/Tasks/1"}]));
    }

    #[test]
    fn monitor_paths_name_their_task() {
        assert_eq!(monitor_id(&monitor_uri(12)), Some(12));
        for bad in [
            TASK_MONITORS_URI,
            "/redfish/v1/TaskService/TaskMonitors/",
            "/redfish/v1/TaskService/TaskMonitors/0",
            "/redfish/v1/TaskService/TaskMonitors/1/x",
            "/redfish/v1/TaskService/TaskMonitors/99999999999",
        ] {
            assert_eq!(monitor_id(bad), None, "{bad}");
        }
    }
}
