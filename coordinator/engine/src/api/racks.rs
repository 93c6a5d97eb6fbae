//! The rack inventory API: racks, their switches and power shelves, hosts placed in
//! racks, and the power shelves' on-demand maintenance request.
//!
//! | route | role | what |
//! |---|---|---|
//! | `POST /v1/racks`, `GET /v1/racks`, `GET|DELETE /v1/racks/{rack}` | admin / viewer | racks (`{rack}`: id or name, the id tried first; a name never parses as an id); a rack is removed only when empty |
//! | `POST /v1/switches`, `GET /v1/switches[?rack=R]`, `GET|DELETE /v1/switches/{id}` | admin / viewer | switches |
//! | `POST /v1/power-shelves`, `GET /v1/power-shelves[?rack=R]`, `GET|DELETE /v1/power-shelves/{id}` | admin / viewer | power shelves; delete marks the shelf for its controller |
//! | `POST /v1/power-shelves/maintenance` | admin | `SetPowerShelfMaintenance`: `{powerShelfIds, operation, reference?}`, all or nothing |
//! | `POST /v1/hosts/{id}/rack` | admin | place a host: `{rack: ID|NAME|null, reason}` |
//!
//! Every write takes a `reason` (events and audit). Device credentials are secret-store paths,
//! never values; endpoints must be `https://` (a BMC is reached with Basic authentication).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use drover_proto::states::{PowerShelfState, RackState};
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

pub use drover_proto::api::racks::{DeviceList, DeviceView, HostPlacement, RackDetail, RackList, RackView, ShelfMaintenanceAnswer};

use crate::api::auth::{Admin, OperatorCaller, Reader};
use crate::api::error::{ApiError, JsonBody};
use crate::api::lifecycle::check_reason;
use crate::api::operator::QueryParams;
use crate::app::AppState;
use crate::devices::shelf::{self, MaintenanceRequest};
use crate::secrets::SecretPath;
use crate::store::{self, ChangeLog, Device, DeviceKind, NewAudit, NewEvent, Rack, StoreError};

pub(crate) fn change(app: &AppState, op: &OperatorCaller, kind: &str, target: Uuid, reason: &str, data: Value) -> ChangeLog {
    let at = app.clock.now();
    ChangeLog {
        event: NewEvent {
            at,
            kind: kind.to_owned(),
            host_id: None,
            rollout_id: None,
            job_id: None,
            message: format!("{kind} by {}: {reason}", op.name),
            data,
        },
        audit: NewAudit {
            at,
            actor: op.name.clone(),
            role: op.role.as_str().to_owned(),
            action: kind.to_owned(),
            target: target.to_string(),
            reason: reason.to_owned(),
            prior_state: None,
            expected_state: None,
        },
    }
}

pub(crate) fn check_name(field: &str, name: &str) -> Result<String, ApiError> {
    let n = name.trim().to_ascii_lowercase();
    let ok = !n.is_empty() && n.len() <= 63 && n.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !ok {
        return Err(ApiError::bad_request(format!("{field}: 1-63 characters of a-z, 0-9, '-', '_', '.'")));
    }
    Ok(n)
}

/// A rack as the API shows it.
pub(crate) fn rack_view(r: &Rack) -> RackView {
    RackView {
        rack_id: r.id.to_string(),
        name: r.name.clone(),
        hardware_type: r.hardware_type.clone(),
        labels: r.labels.clone(),
        state: r.state,
        maintenance: crate::api::operator::stored_as("rack maintenance", r.id, r.maintenance.as_ref()),
        created_at: r.created_at,
        updated_at: r.updated_at,
    }
}

/// A switch or power shelf as the API shows it.
pub(crate) fn device_view(d: &Device) -> DeviceView {
    DeviceView {
        id: d.id.to_string(),
        kind: d.kind.as_str().to_owned(),
        rack_id: d.rack_id.to_string(),
        name: d.name.clone(),
        endpoint: d.endpoint.clone(),
        credentials_path: d.credentials_path.clone(),
        state: d.shelf_state,
        operation: d.operation.clone(),
        maintenance_requested: crate::api::operator::stored_as("shelf maintenance request", d.id, d.maintenance_requested.as_ref()),
        marked_for_deletion: d.marked_for_deletion,
        facts: d.facts.clone(),
        created_at: d.created_at,
        updated_at: d.updated_at,
    }
}

/// A rack by id or name. A key that parses as an id is that id and nothing else: it never
/// falls back to a rack of that name, so a rack whose name is another rack's id (one stored
/// before names were checked) cannot stand in for it.
pub(crate) async fn find_rack(app: &Arc<AppState>, key: &str) -> Result<Rack, ApiError> {
    let found = match drover_proto::names::as_id(key) {
        Some(id) => store::blocking(app.store.clone(), move |s| s.get_rack(id)).await?,
        None => {
            let name = key.trim().to_ascii_lowercase();
            store::blocking(app.store.clone(), |s| s.list_racks()).await?.into_iter().find(|r| r.name == name)
        }
    };
    found.ok_or_else(|| ApiError::not_found(format!("rack {key} not found")))
}

/// A rack's, switch's or power shelf's name: [`check_name`]'s alphabet, and not an id
/// ([`drover_proto::names::check_not_an_id`]), since every `{rack}` is tried as an id first.
pub(crate) fn check_object_name(what: &'static str, name: &str) -> Result<String, ApiError> {
    let name = check_name("name", name)?;
    drover_proto::names::check_not_an_id(what, &name)?;
    Ok(name)
}

/// `POST /v1/racks`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NewRackRequest {
    name: String,
    hardware_type: String,
    #[serde(default)]
    labels: std::collections::BTreeMap<String, String>,
    reason: Option<String>,
}

/// `POST /v1/racks` (admin).
pub async fn create_rack(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    JsonBody(req): JsonBody<NewRackRequest>,
) -> Result<(StatusCode, Json<RackView>), ApiError> {
    let reason = check_reason(req.reason.as_deref())?;
    let name = check_object_name("rack name", &req.name)?;
    let hardware_type = check_name("hardwareType", &req.hardware_type)?;
    if req.labels.len() > 32
        || req.labels.iter().any(|(k, v)| k.is_empty() || k.len() > 63 || v.len() > 253 || !drover_proto::text::is_plain(v))
    {
        return Err(ApiError::bad_request("labels: at most 32, keys 1-63 characters, values at most 253 without control characters"));
    }
    let now = app.clock.now();
    let rack = Rack {
        id: Uuid::new_v4(),
        name,
        hardware_type,
        labels: req.labels,
        state: RackState::Ready,
        maintenance: None,
        created_at: now,
        updated_at: now,
    };
    let log = change(&app, &op, "rack.created", rack.id, &reason, json!({ "name": rack.name }));
    let stored = store::blocking(app.store.clone(), move |s| s.create_rack(&rack, &log)).await?;
    Ok((StatusCode::CREATED, Json(rack_view(&stored))))
}

/// `GET /v1/racks` (viewer).
pub async fn list_racks(State(app): State<Arc<AppState>>, Reader(_): Reader) -> Result<Json<RackList>, ApiError> {
    let racks = store::blocking(app.store.clone(), |s| s.list_racks()).await?;
    Ok(Json(RackList { racks: racks.iter().map(rack_view).collect() }))
}

/// `GET /v1/racks/{rack}` (viewer): the rack, its devices and its hosts.
pub async fn get_rack(State(app): State<Arc<AppState>>, Reader(_): Reader, Path(key): Path<String>) -> Result<Json<RackDetail>, ApiError> {
    let rack = find_rack(&app, &key).await?;
    let id = rack.id;
    let (devices, hosts) = store::blocking(app.store.clone(), move |s| Ok((s.list_devices(Some(id), None)?, s.rack_hosts(id)?))).await?;
    let v = RackDetail {
        rack: rack_view(&rack),
        devices: devices.iter().map(device_view).collect(),
        hosts: hosts.iter().map(Uuid::to_string).collect(),
    };
    Ok(Json(v))
}

/// `?reason=` of a delete or a removal.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReasonQuery {
    pub(crate) reason: Option<String>,
}

/// `DELETE /v1/racks/{rack}?reason=…` (admin): only an empty rack.
pub async fn delete_rack(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    Path(key): Path<String>,
    QueryParams(q): QueryParams<ReasonQuery>,
) -> Result<Json<RackView>, ApiError> {
    let reason = check_reason(q.reason.as_deref())?;
    let rack = find_rack(&app, &key).await?;
    let log = change(&app, &op, "rack.deleted", rack.id, &reason, json!({ "name": rack.name }));
    let id = rack.id;
    let gone = store::blocking(app.store.clone(), move |s| s.delete_rack(id, &log)).await?;
    Ok(Json(rack_view(&gone)))
}

/// `POST /v1/switches` and `/v1/power-shelves`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NewDeviceRequest {
    rack: String,
    name: String,
    endpoint: String,
    credentials_path: String,
    /// The credentials themselves, written to the secret store at `credentialsPath`.
    #[serde(default)]
    credentials: Option<crate::api::rack_maintenance::Credentials>,
    reason: Option<String>,
}

/// A BMC or PMC endpoint: an `https://` URL (Basic authentication is never sent in clear),
/// optionally naming the resource (`…/redfish/v1/Systems/1`).
pub(crate) fn check_endpoint(endpoint: &str) -> Result<String, ApiError> {
    let endpoint = endpoint.trim().trim_end_matches('/').to_owned();
    let bad = || ApiError::bad_request("endpoint: the BMC's https:// URL (Basic authentication is never sent in clear)");
    if !endpoint.starts_with("https://") || endpoint.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad());
    }
    crate::devices::power::split_endpoint(&endpoint).map_err(|e| ApiError::bad_request(format!("endpoint: {e}")))?;
    Ok(endpoint)
}

async fn create_device(
    app: Arc<AppState>,
    op: OperatorCaller,
    kind: DeviceKind,
    req: NewDeviceRequest,
) -> Result<(StatusCode, Json<DeviceView>), ApiError> {
    let reason = check_reason(req.reason.as_deref())?;
    let name = check_object_name(
        match kind {
            DeviceKind::Switch => "switch name",
            DeviceKind::PowerShelf => "power shelf name",
        },
        &req.name,
    )?;
    let endpoint = check_endpoint(&req.endpoint)?;
    let path = SecretPath::new(req.credentials_path.trim()).map_err(|e| ApiError::bad_request(format!("credentialsPath: {e}")))?;
    let rack = find_rack(&app, &req.rack).await?;
    if let Some(c) = req.credentials {
        // A request refused for its name must not have replaced a secret on its way: the
        // name is checked before anything is written (the store checks it again).
        let taken = store::blocking(app.store.clone(), move |s| s.list_devices(None, Some(kind))).await?.iter().any(|d| d.name == name);
        if taken {
            return Err(ApiError::from(StoreError::conflict("device", &name, format!("{} name {name} is taken", kind.as_str()))));
        }
        crate::api::rack_maintenance::write_credentials(&app, &path, c).await?;
    }
    let now = app.clock.now();
    let device = Device {
        id: Uuid::new_v4(),
        kind,
        rack_id: rack.id,
        name,
        endpoint,
        credentials_path: req.credentials_path.trim().to_owned(),
        shelf_state: (kind == DeviceKind::PowerShelf).then_some(PowerShelfState::Initializing),
        operation: None,
        maintenance_requested: None,
        facts: None,
        marked_for_deletion: false,
        created_at: now,
        updated_at: now,
    };
    let log =
        change(&app, &op, &format!("{}.created", kind.as_str()), device.id, &reason, json!({ "name": device.name, "rack": rack.name }));
    let stored = store::blocking(app.store.clone(), move |s| s.create_device(&device, &log)).await?;
    Ok((StatusCode::CREATED, Json(device_view(&stored))))
}

/// `POST /v1/switches` (admin).
pub async fn create_switch(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    JsonBody(req): JsonBody<NewDeviceRequest>,
) -> Result<(StatusCode, Json<DeviceView>), ApiError> {
    create_device(app, op, DeviceKind::Switch, req).await
}

/// `POST /v1/power-shelves` (admin).
pub async fn create_shelf(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    JsonBody(req): JsonBody<NewDeviceRequest>,
) -> Result<(StatusCode, Json<DeviceView>), ApiError> {
    create_device(app, op, DeviceKind::PowerShelf, req).await
}

/// `?rack=` of a device listing.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceQuery {
    rack: Option<String>,
}

async fn list_devices(app: Arc<AppState>, kind: DeviceKind, q: DeviceQuery) -> Result<Json<DeviceList>, ApiError> {
    let rack = match q.rack.as_deref() {
        Some(r) => Some(find_rack(&app, r).await?.id),
        None => None,
    };
    let devices = store::blocking(app.store.clone(), move |s| s.list_devices(rack, Some(kind))).await?;
    Ok(Json(DeviceList { items: devices.iter().map(device_view).collect() }))
}

/// `GET /v1/switches` (viewer).
pub async fn list_switches(
    State(app): State<Arc<AppState>>,
    Reader(_): Reader,
    QueryParams(q): QueryParams<DeviceQuery>,
) -> Result<Json<DeviceList>, ApiError> {
    list_devices(app, DeviceKind::Switch, q).await
}

/// `GET /v1/power-shelves` (viewer).
pub async fn list_shelves(
    State(app): State<Arc<AppState>>,
    Reader(_): Reader,
    QueryParams(q): QueryParams<DeviceQuery>,
) -> Result<Json<DeviceList>, ApiError> {
    list_devices(app, DeviceKind::PowerShelf, q).await
}

async fn find_device(app: &Arc<AppState>, kind: DeviceKind, id: &str) -> Result<Device, ApiError> {
    let what = kind.as_str().replace('_', " ");
    let id = Uuid::parse_str(id).map_err(|_| ApiError::bad_request(format!("{what} id is not a UUID")))?;
    store::blocking(app.store.clone(), move |s| s.get_device(id))
        .await?
        .filter(|d| d.kind == kind)
        .ok_or_else(|| ApiError::not_found(format!("{what} {id} not found")))
}

/// `GET /v1/switches/{id}` (viewer).
pub async fn get_switch(State(app): State<Arc<AppState>>, Reader(_): Reader, Path(id): Path<String>) -> Result<Json<DeviceView>, ApiError> {
    Ok(Json(device_view(&find_device(&app, DeviceKind::Switch, &id).await?)))
}

/// `GET /v1/power-shelves/{id}` (viewer).
pub async fn get_shelf(State(app): State<Arc<AppState>>, Reader(_): Reader, Path(id): Path<String>) -> Result<Json<DeviceView>, ApiError> {
    Ok(Json(device_view(&find_device(&app, DeviceKind::PowerShelf, &id).await?)))
}

async fn delete_device(
    app: Arc<AppState>,
    op: OperatorCaller,
    kind: DeviceKind,
    id: String,
    q: ReasonQuery,
) -> Result<Json<DeviceView>, ApiError> {
    let reason = check_reason(q.reason.as_deref())?;
    let d = find_device(&app, kind, &id).await?;
    // A switch goes at once; a shelf is only marked here, and its controller's final delete
    // writes `power_shelf.deleted`.
    let kind_name = match kind {
        DeviceKind::Switch => "switch.deleted",
        DeviceKind::PowerShelf => "power_shelf.delete_requested",
    };
    let log = change(&app, &op, kind_name, d.id, &reason, json!({ "name": d.name }));
    let id = d.id;
    let after = store::blocking(app.store.clone(), move |s| s.delete_device(id, &log)).await?;
    Ok(Json(device_view(&after)))
}

/// `DELETE /v1/switches/{id}?reason=…` (admin).
pub async fn delete_switch(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    Path(id): Path<String>,
    QueryParams(q): QueryParams<ReasonQuery>,
) -> Result<Json<DeviceView>, ApiError> {
    delete_device(app, op, DeviceKind::Switch, id, q).await
}

/// `DELETE /v1/power-shelves/{id}?reason=…` (admin): marks it; its controller removes it.
pub async fn delete_shelf(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    Path(id): Path<String>,
    QueryParams(q): QueryParams<ReasonQuery>,
) -> Result<Json<DeviceView>, ApiError> {
    delete_device(app, op, DeviceKind::PowerShelf, id, q).await
}

/// `POST /v1/power-shelves/maintenance`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ShelfMaintenanceRequest {
    #[serde(default)]
    power_shelf_ids: Vec<String>,
    #[serde(default)]
    operation: String,
    reference: Option<String>,
}

/// `POST /v1/power-shelves/maintenance` (admin): `SetPowerShelfMaintenance`, all or nothing.
pub async fn shelf_maintenance(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    JsonBody(req): JsonBody<ShelfMaintenanceRequest>,
) -> Result<Json<ShelfMaintenanceAnswer>, ApiError> {
    let (ids, operation) = shelf::parse_request(&req.power_shelf_ids, &req.operation, app.config.jobs.max_shelves_per_request)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    if let Some(r) = &req.reference
        && (r.len() > 500 || !drover_proto::text::is_plain(r))
    {
        return Err(ApiError::bad_request("reference: at most 500 characters without control characters"));
    }
    let initiator = shelf::initiator(Some(&op.name), req.reference.as_deref());
    let request = MaintenanceRequest { operation, initiator: initiator.clone(), requested_at: app.clock.now() };
    let value = serde_json::to_value(&request).map_err(|_| ApiError::internal())?;
    let log = change(
        &app,
        &op,
        "power_shelf.maintenance_requested",
        ids[0],
        &initiator,
        json!({ "powerShelfIds": ids.iter().map(Uuid::to_string).collect::<Vec<_>>(), "operation": operation }),
    );
    let set = store::blocking(app.store.clone(), move |s| s.set_shelf_maintenance(&ids, &value, &log)).await.map_err(|e| match e {
        StoreError::NotFound { id, .. } => ApiError::not_found(format!("power shelf {id} does not exist; no shelf was changed")),
        other => ApiError::from(other),
    })?;
    Ok(Json(ShelfMaintenanceAnswer { initiator, items: set.iter().map(device_view).collect() }))
}

/// `POST /v1/hosts/{id}/rack`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlaceRequest {
    rack: Option<String>,
    reason: Option<String>,
}

/// `POST /v1/hosts/{id}/rack` (admin): places a host in a rack (`rack: null`: in none).
pub async fn place_host(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    Path(id): Path<String>,
    JsonBody(req): JsonBody<PlaceRequest>,
) -> Result<Json<HostPlacement>, ApiError> {
    let reason = check_reason(req.reason.as_deref())?;
    let host_id = Uuid::parse_str(&id).map_err(|_| ApiError::bad_request("host id is not a UUID"))?;
    let rack = match req.rack.as_deref() {
        Some(r) => Some(find_rack(&app, r).await?),
        None => None,
    };
    let rack_id = rack.as_ref().map(|r| r.id);
    let mut log = change(&app, &op, "host.placed", host_id, &reason, json!({ "rack": rack.as_ref().map(|r| r.name.clone()) }));
    log.event.host_id = Some(host_id);
    store::blocking(app.store.clone(), move |s| s.place_host(host_id, rack_id, &log)).await?;
    Ok(Json(HostPlacement { host_id: host_id.to_string(), rack: rack.map(|r| r.name) }))
}
