//! Racks, their switches and power shelves, and host placement in PostgreSQL, as
//! `store-sqlite/src/racks.rs`. Names are checked
//! with a read inside the write transaction (a `Conflict` naming the collision); the UNIQUE
//! constraints stay as the backstop. Every write appends its [`ChangeLog`].

use drover_proto::states::{PowerShelfState, RackState};
use serde_json::Value;
use uuid::Uuid;

use super::cols::{col, time_col, uuid_col};
use super::log::{insert_audit, insert_event};
use super::postgres::{Row, Transaction};
use crate::DbResult;
use drover_store::rack_records::*;
use drover_store::{ChangeLog, NewEvent, StoreError};

fn log_change(c: &mut Transaction<'_>, log: &ChangeLog) -> Result<(), StoreError> {
    insert_event(c, &log.event)?;
    insert_audit(c, &log.audit).map(drop)
}

fn opt_json(r: &Row, idx: usize) -> Result<Option<Value>, StoreError> {
    match col::<Option<String>>(r, idx)? {
        Some(s) => serde_json::from_str(&s).map(Some).map_err(|e| StoreError::backend(format!("column {}: {e}", idx))),
        None => Ok(None),
    }
}

const RACK_COLS: &str = "rack_id, name, hardware_type, labels, state, maintenance, created_at, updated_at";

fn rack_row(r: &Row) -> Result<Rack, StoreError> {
    let labels: String = col(r, 3)?;
    let state: String = col(r, 4)?;
    Ok(Rack {
        id: uuid_col(r, 0)?,
        name: col(r, 1)?,
        hardware_type: col(r, 2)?,
        labels: serde_json::from_str(&labels).map_err(|e| StoreError::backend(format!("column {}: {e}", 3)))?,
        state: state.parse::<RackState>().map_err(|e| StoreError::backend(format!("column {}: {e}", 4)))?,
        maintenance: opt_json(r, 5)?,
        created_at: time_col(r, 6)?,
        updated_at: time_col(r, 7)?,
    })
}

pub(crate) fn get_rack(c: &mut Transaction<'_>, id: Uuid) -> Result<Option<Rack>, StoreError> {
    c.query_opt(format!("SELECT {RACK_COLS} FROM racks WHERE rack_id = $1").as_str(), &[&id.to_string()])
        .db()?
        .map(|r| rack_row(&r))
        .transpose()
}

pub(crate) fn list_racks(c: &mut Transaction<'_>) -> Result<Vec<Rack>, StoreError> {
    c.query(format!("SELECT {RACK_COLS} FROM racks ORDER BY name").as_str(), &[]).db()?.iter().map(rack_row).collect()
}

pub(crate) fn create_rack(c: &mut Transaction<'_>, rack: &Rack, log: &ChangeLog) -> Result<Rack, StoreError> {
    let taken: Option<String> =
        c.query_opt("SELECT rack_id FROM racks WHERE name = $1", &[&&rack.name]).db()?.map(|r| col(&r, 0)).transpose()?;
    if let Some(other) = taken {
        return Err(StoreError::conflict("rack", &rack.name, format!("rack name {} is taken by rack {other}", rack.name)));
    }
    let labels = serde_json::to_string(&rack.labels).map_err(StoreError::backend)?;
    c.execute(
        format!("INSERT INTO racks ({RACK_COLS}) VALUES ($1, $2, $3, $4, $5, NULL, $6, $6)").as_str(),
        &[&rack.id.to_string(), &rack.name, &rack.hardware_type, &labels, &rack.state.as_str(), &rack.created_at.unix()],
    )
    .db()?;
    log_change(c, log)?;
    get_rack(c, rack.id)?.ok_or_else(|| StoreError::backend("rack vanished inside its own transaction"))
}

pub(crate) fn delete_rack(c: &mut Transaction<'_>, id: Uuid, log: &ChangeLog) -> Result<Rack, StoreError> {
    let rack = get_rack(c, id)?.ok_or_else(|| StoreError::not_found("rack", id))?;
    let devices: i64 = col(&c.query_one("SELECT COUNT(*) FROM rack_devices WHERE rack_id = $1", &[&id.to_string()]).db()?, 0)?;
    let hosts: i64 =
        col(&c.query_one("SELECT COUNT(*) FROM hosts WHERE rack_id = $1 AND state <> 'deleted'", &[&id.to_string()]).db()?, 0)?;
    if devices > 0 || hosts > 0 {
        return Err(StoreError::conflict(
            "rack",
            id,
            format!("rack {} still holds {devices} device(s) and {hosts} host(s): remove or move them first", rack.name),
        ));
    }
    c.execute("DELETE FROM racks WHERE rack_id = $1", &[&id.to_string()]).db()?;
    log_change(c, log)?;
    Ok(rack)
}

const DEVICE_COLS: &str = "device_id, kind, rack_id, name, endpoint, credentials_path, state, operation, maintenance_requested, \
                           marked_for_deletion, created_at, updated_at, facts";

fn device_row(r: &Row) -> Result<Device, StoreError> {
    let kind: String = col(r, 1)?;
    let state: Option<String> = col(r, 6)?;
    Ok(Device {
        id: uuid_col(r, 0)?,
        kind: DeviceKind::parse(&kind).ok_or_else(|| StoreError::backend(format!("rack_devices.kind: unknown device kind {kind}")))?,
        rack_id: uuid_col(r, 2)?,
        name: col(r, 3)?,
        endpoint: col(r, 4)?,
        credentials_path: col(r, 5)?,
        shelf_state: state
            .map(|s| s.parse::<PowerShelfState>())
            .transpose()
            .map_err(|e| StoreError::backend(format!("column {}: {e}", 6)))?,
        operation: col(r, 7)?,
        maintenance_requested: opt_json(r, 8)?,
        marked_for_deletion: col::<i64>(r, 9)? != 0,
        created_at: time_col(r, 10)?,
        updated_at: time_col(r, 11)?,
        facts: opt_json(r, 12)?,
    })
}

pub(crate) fn get_device(c: &mut Transaction<'_>, id: Uuid) -> Result<Option<Device>, StoreError> {
    c.query_opt(format!("SELECT {DEVICE_COLS} FROM rack_devices WHERE device_id = $1").as_str(), &[&id.to_string()])
        .db()?
        .map(|r| device_row(&r))
        .transpose()
}

pub(crate) fn list_devices(c: &mut Transaction<'_>, rack: Option<Uuid>, kind: Option<DeviceKind>) -> Result<Vec<Device>, StoreError> {
    c.query(format!(
        "SELECT {DEVICE_COLS} FROM rack_devices WHERE ($1::TEXT IS NULL OR rack_id = $1) AND ($2::TEXT IS NULL OR kind = $2) ORDER BY kind, name"
    ).as_str(), &[&rack.map(|r| r.to_string()), &kind.map(DeviceKind::as_str)]).db()?.iter().map(device_row).collect()
}

pub(crate) fn create_device(c: &mut Transaction<'_>, d: &Device, log: &ChangeLog) -> Result<Device, StoreError> {
    if get_rack(c, d.rack_id)?.is_none() {
        return Err(StoreError::not_found("rack", d.rack_id));
    }
    let taken: Option<String> = c
        .query_opt("SELECT device_id FROM rack_devices WHERE kind = $1 AND name = $2", &[&d.kind.as_str(), &d.name])
        .db()?
        .map(|r| col(&r, 0))
        .transpose()?;
    if let Some(other) = taken {
        return Err(StoreError::conflict("device", &d.name, format!("{} name {} is taken by {other}", d.kind.as_str(), d.name)));
    }
    c.execute(
        format!("INSERT INTO rack_devices ({DEVICE_COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7, NULL, NULL, 0, $8, $8, NULL)").as_str(),
        &[
            &d.id.to_string(),
            &d.kind.as_str(),
            &d.rack_id.to_string(),
            &d.name,
            &d.endpoint,
            &d.credentials_path,
            &d.shelf_state.map(PowerShelfState::as_str),
            &d.created_at.unix(),
        ],
    )
    .db()?;
    log_change(c, log)?;
    get_device(c, d.id)?.ok_or_else(|| StoreError::backend("device vanished inside its own transaction"))
}

pub(crate) fn delete_device(c: &mut Transaction<'_>, id: Uuid, log: &ChangeLog) -> Result<Device, StoreError> {
    let d = get_device(c, id)?.ok_or_else(|| StoreError::not_found("device", id))?;
    match d.kind {
        DeviceKind::Switch => {
            c.execute("DELETE FROM rack_devices WHERE device_id = $1", &[&id.to_string()]).db()?;
            log_change(c, log)?;
            Ok(d)
        }
        DeviceKind::PowerShelf => {
            c.execute(
                "UPDATE rack_devices SET marked_for_deletion = 1, updated_at = $2 WHERE device_id = $1",
                &[&id.to_string(), &log.event.at.unix()],
            )
            .db()?;
            log_change(c, log)?;
            get_device(c, id)?.ok_or_else(|| StoreError::backend("device vanished inside its own transaction"))
        }
    }
}

pub(crate) fn place_host(c: &mut Transaction<'_>, host_id: Uuid, rack: Option<Uuid>, log: &ChangeLog) -> Result<(), StoreError> {
    if let Some(r) = rack
        && get_rack(c, r)?.is_none()
    {
        return Err(StoreError::not_found("rack", r));
    }
    let changed = c
        .execute(
            "UPDATE hosts SET rack_id = $2 WHERE id = $1 AND state <> 'deleted'",
            &[&host_id.to_string(), &rack.map(|r| r.to_string())],
        )
        .db()?;
    if changed == 0 {
        return Err(StoreError::not_found("host", host_id));
    }
    log_change(c, log)
}

pub(crate) fn rack_hosts(c: &mut Transaction<'_>, rack: Uuid) -> Result<Vec<Uuid>, StoreError> {
    c.query("SELECT id FROM hosts WHERE rack_id = $1 AND state <> 'deleted' ORDER BY id", &[&rack.to_string()])
        .db()?
        .iter()
        .map(|r| uuid_col(r, 0))
        .collect()
}

pub(crate) fn host_rack(c: &mut Transaction<'_>, host_id: Uuid) -> Result<Option<Uuid>, StoreError> {
    let rack: Option<Option<String>> = c
        .query_opt("SELECT rack_id FROM hosts WHERE id = $1 AND state <> 'deleted'", &[&host_id.to_string()])
        .db()?
        .map(|r| col(&r, 0))
        .transpose()?;
    Ok(rack.flatten().and_then(|r| Uuid::parse_str(&r).ok()))
}

pub(crate) fn set_shelf_maintenance(
    c: &mut Transaction<'_>,
    ids: &[Uuid],
    request: &Value,
    log: &ChangeLog,
) -> Result<Vec<Device>, StoreError> {
    // Every shelf is checked before any is written: one refusal leaves all of them as they were.
    for id in ids {
        let d = get_device(c, *id)?.filter(|d| d.kind == DeviceKind::PowerShelf).ok_or_else(|| StoreError::not_found("power shelf", id))?;
        if d.marked_for_deletion {
            return Err(StoreError::conflict("power shelf", id, format!("power shelf {id} is marked for deletion; no shelf was changed")));
        }
    }
    let text = request.to_string();
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        c.execute(
            "UPDATE rack_devices SET maintenance_requested = $2, updated_at = $3 WHERE device_id = $1",
            &[&id.to_string(), &text, &log.event.at.unix()],
        )
        .db()?;
        out.push(get_device(c, *id)?.ok_or_else(|| StoreError::backend("shelf vanished inside its own transaction"))?);
    }
    log_change(c, log)?;
    Ok(out)
}

pub(crate) fn shelf_step(c: &mut Transaction<'_>, step: &ShelfStep, event: &NewEvent) -> Result<bool, StoreError> {
    let id = step.id.to_string();
    let Some(now) = get_device(c, step.id)?.filter(|d| d.kind == DeviceKind::PowerShelf) else {
        return Ok(false);
    };
    if now.shelf_state != Some(step.from) {
        return Ok(false);
    }
    match step.to {
        None => {
            if step.from != PowerShelfState::Deleting {
                return Err(StoreError::backend("a power shelf is removed only from deleting"));
            }
            c.execute("DELETE FROM rack_devices WHERE device_id = $1", &[&&id]).db()?;
        }
        Some(to) => {
            let facts = match &step.facts {
                Some(f) => Some(f.to_string()),
                None => now.facts.as_ref().map(Value::to_string),
            };
            c.execute(
                "UPDATE rack_devices SET state = $2, operation = $3, facts = $4, updated_at = $5, \
                 maintenance_requested = CASE WHEN $6 THEN NULL ELSE maintenance_requested END WHERE device_id = $1",
                &[&id, &to.as_str(), &step.operation, &facts, &event.at.unix(), &step.clear_request],
            )
            .db()?;
        }
    }
    insert_event(c, event)?;
    Ok(true)
}

pub(crate) fn set_host_bmc(c: &mut Transaction<'_>, host_id: Uuid, bmc: Option<&HostBmc>, log: &ChangeLog) -> Result<(), StoreError> {
    let exists: Option<String> = c
        .query_opt("SELECT id FROM hosts WHERE id = $1 AND state <> 'deleted'", &[&host_id.to_string()])
        .db()?
        .map(|r| col(&r, 0))
        .transpose()?;
    if exists.is_none() {
        return Err(StoreError::not_found("host", host_id));
    }
    match bmc {
        Some(b) => c
            .execute(
                "INSERT INTO host_bmcs (host_id, endpoint, credentials_path, updated_at) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (host_id) DO UPDATE SET endpoint = $2, credentials_path = $3, updated_at = $4",
                &[&host_id.to_string(), &b.endpoint, &b.credentials_path, &log.event.at.unix()],
            )
            .db()?,
        None => c.execute("DELETE FROM host_bmcs WHERE host_id = $1", &[&host_id.to_string()]).db()?,
    };
    log_change(c, log)
}

pub(crate) fn host_bmcs(c: &mut Transaction<'_>, hosts: &[Uuid]) -> Result<Vec<HostBmc>, StoreError> {
    let ids: Vec<String> = hosts.iter().map(Uuid::to_string).collect();
    let mut out = c
        .query("SELECT host_id, endpoint, credentials_path FROM host_bmcs WHERE host_id = ANY($1)", &[&ids])
        .db()?
        .iter()
        .map(|r| Ok(HostBmc { host_id: uuid_col(r, 0)?, endpoint: col(r, 1)?, credentials_path: col(r, 2)? }))
        .collect::<Result<Vec<_>, StoreError>>()?;
    out.sort_by_key(|b| b.host_id);
    Ok(out)
}

const FIRMWARE_COLS: &str = "firmware_id, hardware_type, image_uri, available, is_default, created_at";

fn firmware_row(r: &Row) -> Result<FirmwareRecord, StoreError> {
    Ok(FirmwareRecord {
        id: col(r, 0)?,
        hardware_type: col(r, 1)?,
        image_uri: col(r, 2)?,
        available: col::<i64>(r, 3)? != 0,
        default: col::<i64>(r, 4)? != 0,
        created_at: time_col(r, 5)?,
    })
}

pub(crate) fn list_firmware(c: &mut Transaction<'_>) -> Result<Vec<FirmwareRecord>, StoreError> {
    let sql = format!("SELECT {FIRMWARE_COLS} FROM rack_firmware ORDER BY firmware_id");
    c.query(sql.as_str(), &[]).db()?.iter().map(firmware_row).collect()
}

pub(crate) fn create_firmware(c: &mut Transaction<'_>, f: &FirmwareRecord, log: &ChangeLog) -> Result<FirmwareRecord, StoreError> {
    let all = list_firmware(c)?;
    if all.iter().any(|o| o.id == f.id) {
        return Err(StoreError::conflict("firmware", &f.id, format!("firmware {} exists already", f.id)));
    }
    if let Some(d) = all.iter().find(|o| f.default && o.default && o.hardware_type == f.hardware_type) {
        return Err(StoreError::conflict(
            "firmware",
            &f.id,
            format!("hardware type {} has a default firmware already: {}", f.hardware_type, d.id),
        ));
    }
    c.execute(
        format!("INSERT INTO rack_firmware ({FIRMWARE_COLS}) VALUES ($1, $2, $3, $4, $5, $6)").as_str(),
        &[&f.id, &f.hardware_type, &f.image_uri, &i64::from(f.available), &i64::from(f.default), &f.created_at.unix()],
    )
    .db()?;
    log_change(c, log)?;
    Ok(f.clone())
}

pub(crate) fn request_rack_maintenance(
    c: &mut Transaction<'_>,
    id: Uuid,
    maintenance: &Value,
    log: &ChangeLog,
) -> Result<Rack, StoreError> {
    let rack = get_rack(c, id)?.ok_or_else(|| StoreError::not_found("rack", id))?;
    if !matches!(rack.state, RackState::Ready | RackState::Error) {
        return Err(StoreError::conflict(
            "rack",
            id,
            format!("rack {} is {}: maintenance can only be requested on a ready or errored rack", rack.name, rack.state),
        ));
    }
    if rack.maintenance.is_some() {
        return Err(StoreError::conflict("rack", id, format!("rack {} already has a maintenance request pending", rack.name)));
    }
    c.execute(
        "UPDATE racks SET maintenance = $2, updated_at = $3 WHERE rack_id = $1",
        &[&id.to_string(), &maintenance.to_string(), &log.event.at.unix()],
    )
    .db()?;
    log_change(c, log)?;
    get_rack(c, id)?.ok_or_else(|| StoreError::backend("rack vanished inside its own transaction"))
}

pub(crate) fn rack_step(
    c: &mut Transaction<'_>,
    expected: &Rack,
    to: RackState,
    maintenance: Option<&Value>,
    event: &NewEvent,
) -> Result<bool, StoreError> {
    let Some(now) = get_rack(c, expected.id)? else {
        return Ok(false);
    };
    if now.state != expected.state || now.maintenance != expected.maintenance {
        return Ok(false);
    }
    c.execute(
        "UPDATE racks SET state = $2, maintenance = $3, updated_at = $4 WHERE rack_id = $1",
        &[&expected.id.to_string(), &to.as_str(), &maintenance.map(Value::to_string), &event.at.unix()],
    )
    .db()?;
    insert_event(c, event)?;
    Ok(true)
}
