//! The rack maintenance API (`rack-on-demand-maintenance.md`):
//!
//! - `POST /v1/racks/{rack}/maintenance` (admin): `OnDemandRackMaintenance` — a scope (machine,
//!   switch and power-shelf ids; all empty = the full rack) and activities (empty = all),
//!   admitted only on a `ready` or `error` rack with nothing pending; every scoped machine
//!   needs a BMC when an activity drives machines. 409 names why a rack is refused.
//! - `POST /v1/components/firmware` (admin): `UpdateComponentFirmware` — compute trays or
//!   switches resolve their rack from the first device and become a rack maintenance request
//!   with a firmware upgrade carrying the target version; power shelves do not go through the
//!   rack state machine (the seed's rule): their PMCs get the update directly.
//! - `PUT`/`DELETE /v1/hosts/{id}/bmc` (admin): a host's BMC (endpoint, credentials path, and
//!   optionally the credentials themselves, written to the secret store, never echoed).
//! - `POST`/`GET /v1/rack-firmware`: the firmware records the upgrade resolves.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::json;
use uuid::Uuid;

pub use drover_proto::api::racks::{
    ComponentFirmwareAnswer, FirmwareList, FirmwareView, HostBmcView, RackMaintenanceAnswer, ShelfFirmwareAnswer,
};

use crate::api::auth::{Admin, OperatorCaller, Reader};
use crate::api::error::{ApiError, JsonBody};
use crate::api::lifecycle::check_reason;
use crate::api::racks::{change, check_endpoint, check_name, find_rack};
use crate::api::sites::secret_error;
use crate::app::AppState;
use crate::devices::rack::{Activity, ActivityConfig, RackDevices, Scope, admit};
use crate::devices::rack_tick::RackMaintenance;
use crate::devices::shelf;
use crate::secrets::{SecretPath, SecretValue};
use crate::store::{self, DeviceKind, FirmwareRecord, HostBmc, StoreError};

/// Device credentials given with an endpoint: written to the secret store at the device's
/// credentials path, never stored elsewhere or echoed.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Credentials {
    username: String,
    password: String,
    #[serde(default)]
    ca_pem: Option<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials").field("username", &self.username).finish_non_exhaustive()
    }
}

/// Checks `credentials` and writes them at `path`.
pub async fn write_credentials(app: &AppState, path: &SecretPath, c: Credentials) -> Result<(), ApiError> {
    if c.username.trim().is_empty() || c.password.is_empty() {
        return Err(ApiError::bad_request("credentials: username and password are required"));
    }
    let mut value = SecretValue::from_pairs([("username", c.username.trim().to_owned()), ("password", c.password)]);
    if let Some(pem) = c.ca_pem.filter(|p| !p.trim().is_empty()) {
        if !pem.contains("-----BEGIN CERTIFICATE-----") {
            return Err(ApiError::bad_request("credentials.caPem: not a PEM certificate"));
        }
        value.insert("caPem", pem);
    }
    app.secrets.write(path, &value).await.map_err(secret_error)
}

/// `POST /v1/racks/{rack}/maintenance`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RackMaintenanceRequest {
    #[serde(default)]
    machine_ids: Vec<String>,
    #[serde(default)]
    switch_ids: Vec<String>,
    #[serde(default)]
    power_shelf_ids: Vec<String>,
    #[serde(default)]
    activities: Vec<ActivityConfig>,
    reference: Option<String>,
}

/// Admits a request and stores it; the answer is the rack as stored.
async fn request(
    app: &Arc<AppState>,
    op: &OperatorCaller,
    rack_key: &str,
    scope: Scope,
    reference: Option<&str>,
) -> Result<RackMaintenanceAnswer, ApiError> {
    if let Some(r) = reference
        && (r.len() > 500 || !drover_proto::text::is_plain(r))
    {
        return Err(ApiError::bad_request("reference: at most 500 characters without control characters"));
    }
    let rack = find_rack(app, rack_key).await?;
    let id = rack.id;
    let (machines, devices) = store::blocking(app.store.clone(), move |s| Ok((s.rack_hosts(id)?, s.list_devices(Some(id), None)?))).await?;
    let of = |k: DeviceKind| devices.iter().filter(|d| d.kind == k).map(|d| d.id).collect::<Vec<_>>();
    let inventory = RackDevices { machines, switches: of(DeviceKind::Switch), power_shelves: of(DeviceKind::PowerShelf) };
    let targets = admit(rack.state, rack.maintenance.is_some(), &scope, &inventory).map_err(|e| match e {
        crate::devices::rack::RackRequestError::WrongState { .. } | crate::devices::rack::RackRequestError::AlreadyPending => {
            ApiError::new(StatusCode::CONFLICT, "rack_not_ready", format!("rack {}: {e}", rack.name))
        }
        other => ApiError::bad_request(other.to_string()),
    })?;
    // Every machine a requested activity drives must be reachable: refuse now, naming them,
    // rather than fail the rack halfway through.
    if targets.activities.iter().any(|a| matches!(a, Activity::FirmwareUpgrade | Activity::PowerSequence)) && !targets.machines.is_empty() {
        let ms = targets.machines.clone();
        let with = store::blocking(app.store.clone(), move |s| s.host_bmcs(&ms)).await?;
        let missing: Vec<String> =
            targets.machines.iter().filter(|m| !with.iter().any(|b| b.host_id == **m)).map(Uuid::to_string).collect();
        if !missing.is_empty() {
            return Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "machine_without_bmc",
                format!("machine(s) without a BMC: {} (set one with PUT /v1/hosts/{{id}}/bmc); nothing was requested", missing.join(", ")),
            ));
        }
    }
    let initiator = shelf::initiator(Some(&op.name), reference);
    let m = RackMaintenance {
        initiator: initiator.clone(),
        requested_at: app.clock.now(),
        targets,
        phase: None,
        step: 0,
        firmware: None,
        waiting: None,
    };
    let value = serde_json::to_value(&m).map_err(|_| ApiError::internal())?;
    let log = change(app, op, "rack.maintenance.requested", rack.id, &initiator, json!({ "rack": rack.name, "targets": value["targets"] }));
    let stored = store::blocking(app.store.clone(), move |s| s.request_rack_maintenance(id, &value, &log)).await.map_err(|e| match e {
        StoreError::Conflict { message, .. } => ApiError::new(StatusCode::CONFLICT, "rack_not_ready", message),
        other => ApiError::from(other),
    })?;
    Ok(RackMaintenanceAnswer {
        rack_id: stored.id.to_string(),
        name: stored.name.clone(),
        state: stored.state,
        maintenance: crate::api::operator::stored_as("rack maintenance", stored.id, stored.maintenance.as_ref()),
    })
}

/// `POST /v1/racks/{rack}/maintenance` (admin).
pub async fn request_maintenance(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    Path(rack): Path<String>,
    JsonBody(req): JsonBody<RackMaintenanceRequest>,
) -> Result<(StatusCode, Json<RackMaintenanceAnswer>), ApiError> {
    let scope = Scope {
        machine_ids: req.machine_ids,
        switch_ids: req.switch_ids,
        power_shelf_ids: req.power_shelf_ids,
        activities: req.activities,
    };
    let v = request(&app, &op, &rack, scope, req.reference.as_deref()).await?;
    Ok((StatusCode::ACCEPTED, Json(v)))
}

/// `POST /v1/components/firmware`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ComponentFirmwareRequest {
    #[serde(default)]
    compute_trays: Vec<String>,
    #[serde(default)]
    switches: Vec<String>,
    #[serde(default)]
    power_shelves: Vec<String>,
    target_version: Option<String>,
    reference: Option<String>,
}

/// `POST /v1/components/firmware` (admin): `UpdateComponentFirmware`.
pub async fn component_firmware(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    JsonBody(req): JsonBody<ComponentFirmwareRequest>,
) -> Result<(StatusCode, Json<ComponentFirmwareAnswer>), ApiError> {
    let kinds = [!req.compute_trays.is_empty(), !req.switches.is_empty(), !req.power_shelves.is_empty()];
    if kinds.iter().filter(|k| **k).count() != 1 {
        return Err(ApiError::bad_request("name one kind of component: computeTrays, switches or powerShelves"));
    }
    if !req.power_shelves.is_empty() {
        let answer = shelf_firmware(&app, &op, &req.power_shelves, req.target_version.as_deref(), req.reference.as_deref()).await?;
        return Ok((StatusCode::ACCEPTED, Json(ComponentFirmwareAnswer::Shelves(answer))));
    }
    let first = req.compute_trays.first().or(req.switches.first()).cloned().unwrap_or_default();
    let first_id = Uuid::parse_str(first.trim()).map_err(|_| ApiError::bad_request(format!("component id {first:?} is not a UUID")))?;
    // The rack of the first device; the scope check then refuses any device not in it.
    let rack_id = if req.compute_trays.is_empty() {
        store::blocking(app.store.clone(), move |s| s.get_device(first_id))
            .await?
            .filter(|d| d.kind == DeviceKind::Switch)
            .map(|d| d.rack_id)
            .ok_or_else(|| ApiError::not_found(format!("switch {first_id} does not exist")))?
    } else {
        store::blocking(app.store.clone(), move |s| s.host_rack(first_id))
            .await?
            .ok_or_else(|| ApiError::not_found(format!("compute tray {first_id} does not exist or is in no rack")))?
    };
    let scope = Scope {
        machine_ids: req.compute_trays,
        switch_ids: req.switches,
        power_shelf_ids: Vec::new(),
        activities: vec![ActivityConfig::FirmwareUpgrade { firmware_version: req.target_version }],
    };
    let v = request(&app, &op, &rack_id.to_string(), scope, req.reference.as_deref()).await?;
    Ok((StatusCode::ACCEPTED, Json(ComponentFirmwareAnswer::Rack(v))))
}

/// Power shelves' firmware goes straight to their PMCs, not through the rack state machine
/// (the seed's rule): the firmware is resolved as for a rack (the default for the rack's
/// hardware type, or the record named), every shelf must exist, not be marked for deletion and
/// be `ready` (else nothing is started), then each PMC gets `UpdateService.SimpleUpdate` and
/// its outcome is an event (`power_shelf.firmware.completed` or `.failed`, naming the shelf).
/// A coordinator stopped mid-update loses only that event: the PMC runs its own task.
async fn shelf_firmware(
    app: &Arc<AppState>,
    op: &OperatorCaller,
    ids: &[String],
    version: Option<&str>,
    reference: Option<&str>,
) -> Result<ShelfFirmwareAnswer, ApiError> {
    let mut parsed = Vec::new();
    for id in ids {
        parsed.push(Uuid::parse_str(id.trim()).map_err(|_| ApiError::bad_request(format!("power shelf id {id:?} is not a UUID")))?);
    }
    let want = parsed.clone();
    let (shelves, table) = store::blocking(app.store.clone(), move |s| {
        let mut out = Vec::new();
        for id in &want {
            out.push((*id, s.get_device(*id)?.filter(|d| d.kind == DeviceKind::PowerShelf)));
        }
        Ok((out, s.list_firmware()?))
    })
    .await?;
    let mut devices = Vec::new();
    for (id, d) in shelves {
        let d = d.ok_or_else(|| ApiError::not_found(format!("power shelf {id} does not exist; nothing was started")))?;
        if d.marked_for_deletion || d.shelf_state != Some(drover_proto::states::PowerShelfState::Ready) {
            let state = d.shelf_state.map(|s| s.as_str()).unwrap_or("unknown");
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "power_shelf_not_ready",
                format!(
                    "power shelf {} is {state}{}: nothing was started",
                    d.name,
                    if d.marked_for_deletion { " and marked for deletion" } else { "" }
                ),
            ));
        }
        devices.push(d);
    }
    let rack = store::blocking(app.store.clone(), {
        let r = devices[0].rack_id;
        move |s| s.get_rack(r)
    })
    .await?
    .ok_or_else(ApiError::internal)?;
    let views: Vec<crate::devices::rack::Firmware> = table.iter().map(crate::devices::rack_loop::fw_view).collect();
    let firmware = match crate::devices::rack::resolve_firmware(version, &rack.hardware_type, &views) {
        crate::devices::rack::FirmwareChoice::Use(id) => id,
        crate::devices::rack::FirmwareChoice::Skip(why) | crate::devices::rack::FirmwareChoice::Fail(why) => {
            return Err(ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "firmware_unusable", format!("{why}; nothing was started")));
        }
    };
    let image = table.iter().find(|f| f.id == firmware).map(|f| f.image_uri.clone()).ok_or_else(ApiError::internal)?;
    let initiator = shelf::initiator(Some(&op.name), reference);
    let names: Vec<String> = devices.iter().map(|d| d.name.clone()).collect();
    let log = change(
        app,
        op,
        "power_shelf.firmware.requested",
        devices[0].id,
        &initiator,
        json!({ "powerShelves": names, "firmware": firmware }),
    );
    // The request's event and audit record (two writes: nothing else changes with them).
    store::blocking(app.store.clone(), move |s| {
        s.append_event(&log.event)?;
        s.append_audit(&log.audit)
    })
    .await?;
    for d in devices {
        let (app, image, firmware) = (app.clone(), image.clone(), firmware.clone());
        tokio::spawn(async move {
            let bmc = crate::devices::power::Bmc {
                name: format!("power shelf {}", d.name),
                endpoint: d.endpoint.clone(),
                credentials_path: d.credentials_path.clone(),
            };
            let outcome = app.power.shelf_firmware(&bmc, &image).await;
            let (kind, message) = match &outcome {
                Ok(()) => ("power_shelf.firmware.completed", format!("power shelf {}: firmware {firmware} applied", d.name)),
                Err(e) => ("power_shelf.firmware.failed", format!("power shelf {}: firmware {firmware} failed: {e}", d.name)),
            };
            let ev = crate::store::NewEvent {
                at: app.clock.now(),
                kind: kind.into(),
                host_id: None,
                rollout_id: None,
                job_id: None,
                message,
                data: json!({ "powerShelfId": d.id, "rackId": d.rack_id, "firmware": firmware }),
            };
            if let Err(e) = store::blocking(app.store.clone(), move |s| s.append_event(&ev)).await {
                tracing::error!(error = %e, "power shelf firmware outcome could not be recorded");
            }
        });
    }
    Ok(ShelfFirmwareAnswer { firmware, power_shelf_ids: parsed.iter().map(Uuid::to_string).collect(), initiator })
}

/// `PUT /v1/hosts/{id}/bmc`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BmcRequest {
    endpoint: String,
    credentials_path: String,
    #[serde(default)]
    credentials: Option<Credentials>,
    reason: Option<String>,
}

fn host_id(id: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(id).map_err(|_| ApiError::bad_request("host id is not a UUID"))
}

/// `PUT /v1/hosts/{id}/bmc` (admin).
pub async fn set_bmc(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    Path(id): Path<String>,
    JsonBody(req): JsonBody<BmcRequest>,
) -> Result<Json<HostBmcView>, ApiError> {
    let reason = check_reason(req.reason.as_deref())?;
    let host = host_id(&id)?;
    let endpoint = check_endpoint(&req.endpoint)?;
    let path = SecretPath::new(req.credentials_path.trim()).map_err(|e| ApiError::bad_request(format!("credentialsPath: {e}")))?;
    if store::blocking(app.store.clone(), move |s| s.get_host(host)).await?.is_none() {
        return Err(ApiError::not_found(format!("host {host} does not exist")));
    }
    if let Some(c) = req.credentials {
        write_credentials(&app, &path, c).await?;
    }
    let bmc = HostBmc { host_id: host, endpoint, credentials_path: path.as_str().to_owned() };
    let mut log =
        change(&app, &op, "host.bmc.set", host, &reason, json!({ "endpoint": bmc.endpoint, "credentialsPath": bmc.credentials_path }));
    log.event.host_id = Some(host);
    let b = bmc.clone();
    store::blocking(app.store.clone(), move |s| s.set_host_bmc(host, Some(&b), &log)).await?;
    Ok(Json(HostBmcView { host_id: host.to_string(), endpoint: Some(bmc.endpoint), credentials_path: Some(bmc.credentials_path) }))
}

/// `DELETE /v1/hosts/{id}/bmc?reason=…` (admin).
pub async fn delete_bmc(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    Path(id): Path<String>,
    crate::api::operator::QueryParams(q): crate::api::operator::QueryParams<crate::api::racks::ReasonQuery>,
) -> Result<Json<HostBmcView>, ApiError> {
    let reason = check_reason(q.reason.as_deref())?;
    let host = host_id(&id)?;
    let mut log = change(&app, &op, "host.bmc.removed", host, &reason, json!({}));
    log.event.host_id = Some(host);
    store::blocking(app.store.clone(), move |s| s.set_host_bmc(host, None, &log)).await?;
    Ok(Json(HostBmcView { host_id: host.to_string(), endpoint: None, credentials_path: None }))
}

/// `POST /v1/rack-firmware`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FirmwareRequest {
    id: String,
    hardware_type: String,
    image_uri: String,
    #[serde(default = "yes")]
    available: bool,
    #[serde(default)]
    default: bool,
    reason: Option<String>,
}

fn yes() -> bool {
    true
}

fn firmware_view(f: &FirmwareRecord) -> FirmwareView {
    FirmwareView {
        id: f.id.clone(),
        hardware_type: f.hardware_type.clone(),
        image_uri: f.image_uri.clone(),
        available: f.available,
        default: f.default,
        created_at: f.created_at,
    }
}

/// `POST /v1/rack-firmware` (admin).
pub async fn create_firmware(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    JsonBody(req): JsonBody<FirmwareRequest>,
) -> Result<(StatusCode, Json<FirmwareView>), ApiError> {
    let reason = check_reason(req.reason.as_deref())?;
    let id = check_name("id", &req.id)?;
    let hardware_type = check_name("hardwareType", &req.hardware_type)?;
    let uri = req.image_uri.trim();
    if !(uri.starts_with("https://") || uri.starts_with("http://"))
        || uri.len() > 2000
        || uri.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(ApiError::bad_request("imageUri: the http(s) URL a BMC fetches the image from"));
    }
    let f = FirmwareRecord {
        id,
        hardware_type,
        image_uri: uri.to_owned(),
        available: req.available,
        default: req.default,
        created_at: app.clock.now(),
    };
    let log = change(&app, &op, "rack.firmware.created", Uuid::nil(), &reason, serde_json::to_value(firmware_view(&f)).unwrap_or_default());
    let stored = store::blocking(app.store.clone(), move |s| s.create_firmware(&f, &log)).await?;
    Ok((StatusCode::CREATED, Json(firmware_view(&stored))))
}

/// `GET /v1/rack-firmware` (viewer).
pub async fn list_firmware(State(app): State<Arc<AppState>>, Reader(_): Reader) -> Result<Json<FirmwareList>, ApiError> {
    let all = store::blocking(app.store.clone(), |s| s.list_firmware()).await?;
    Ok(Json(FirmwareList { firmware: all.iter().map(firmware_view).collect() }))
}
