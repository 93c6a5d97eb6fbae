//! Racks, their switches and power shelves, and host placement in SQLite. Names are checked
//! with a read inside the write transaction (a `Conflict` naming the collision); the UNIQUE
//! constraints stay as the backstop. Every write appends its [`ChangeLog`].

use drover_proto::states::{PowerShelfState, RackState};
use rusqlite::{Connection, OptionalExtension, Row, params};

use super::log::{insert_audit, insert_event};
use super::*;

fn log_change(c: &Connection, log: &ChangeLog) -> Result<(), StoreError> {
    insert_event(c, &log.event)?;
    insert_audit(c, &log.audit).map(drop)
}

fn opt_json(r: &Row<'_>, idx: usize) -> rusqlite::Result<Option<Value>> {
    match r.get::<_, Option<String>>(idx)? {
        Some(s) => serde_json::from_str(&s).map(Some).map_err(|e| conversion(idx, Type::Text, e)),
        None => Ok(None),
    }
}

const RACK_COLS: &str = "rack_id, name, hardware_type, labels, state, maintenance, created_at, updated_at";

fn rack_row(r: &Row<'_>) -> rusqlite::Result<Rack> {
    let labels: String = r.get(3)?;
    let state: String = r.get(4)?;
    Ok(Rack {
        id: uuid_col(r, 0)?,
        name: r.get(1)?,
        hardware_type: r.get(2)?,
        labels: serde_json::from_str(&labels).map_err(|e| conversion(3, Type::Text, e))?,
        state: state.parse::<RackState>().map_err(|e| conversion(4, Type::Text, e))?,
        maintenance: opt_json(r, 5)?,
        created_at: time_col(r, 6)?,
        updated_at: time_col(r, 7)?,
    })
}

pub(super) fn get_rack(c: &Connection, id: Uuid) -> Result<Option<Rack>, StoreError> {
    c.prepare_cached(&format!("SELECT {RACK_COLS} FROM racks WHERE rack_id = ?1"))
        .db()?
        .query_row([id.to_string()], rack_row)
        .optional()
        .db()
}

pub(super) fn list_racks(c: &Connection) -> Result<Vec<Rack>, StoreError> {
    let mut stmt = c.prepare_cached(&format!("SELECT {RACK_COLS} FROM racks ORDER BY name")).db()?;
    let rows = stmt.query_map([], rack_row).db()?;
    rows.collect::<Result<_, _>>().db()
}

pub(super) fn create_rack(c: &Connection, rack: &Rack, log: &ChangeLog) -> Result<Rack, StoreError> {
    let taken: Option<String> =
        c.prepare_cached("SELECT rack_id FROM racks WHERE name = ?1").db()?.query_row([&rack.name], |r| r.get(0)).optional().db()?;
    if let Some(other) = taken {
        return Err(StoreError::conflict("rack", &rack.name, format!("rack name {} is taken by rack {other}", rack.name)));
    }
    let labels = serde_json::to_string(&rack.labels).map_err(StoreError::backend)?;
    c.prepare_cached(&format!("INSERT INTO racks ({RACK_COLS}) VALUES (?1, ?2, ?3, ?4, ?5, NULL, ?6, ?6)"))
        .db()?
        .execute(params![rack.id.to_string(), rack.name, rack.hardware_type, labels, rack.state.as_str(), rack.created_at.unix(),])
        .db()?;
    log_change(c, log)?;
    get_rack(c, rack.id)?.ok_or_else(|| StoreError::backend("rack vanished inside its own transaction"))
}

pub(super) fn delete_rack(c: &Connection, id: Uuid, log: &ChangeLog) -> Result<Rack, StoreError> {
    let rack = get_rack(c, id)?.ok_or_else(|| StoreError::not_found("rack", id))?;
    let devices: i64 =
        c.prepare_cached("SELECT COUNT(*) FROM rack_devices WHERE rack_id = ?1").db()?.query_row([id.to_string()], |r| r.get(0)).db()?;
    let hosts: i64 = c
        .prepare_cached("SELECT COUNT(*) FROM hosts WHERE rack_id = ?1 AND state <> 'deleted'")
        .db()?
        .query_row([id.to_string()], |r| r.get(0))
        .db()?;
    if devices > 0 || hosts > 0 {
        return Err(StoreError::conflict(
            "rack",
            id,
            format!("rack {} still holds {devices} device(s) and {hosts} host(s): remove or move them first", rack.name),
        ));
    }
    c.prepare_cached("DELETE FROM racks WHERE rack_id = ?1").db()?.execute([id.to_string()]).db()?;
    log_change(c, log)?;
    Ok(rack)
}

const DEVICE_COLS: &str = "device_id, kind, rack_id, name, endpoint, credentials_path, state, operation, maintenance_requested, \
                           marked_for_deletion, created_at, updated_at, facts";

fn device_row(r: &Row<'_>) -> rusqlite::Result<Device> {
    let kind: String = r.get(1)?;
    let state: Option<String> = r.get(6)?;
    Ok(Device {
        id: uuid_col(r, 0)?,
        kind: DeviceKind::parse(&kind)
            .ok_or_else(|| conversion(1, Type::Text, StoreError::backend(format!("unknown device kind {kind}"))))?,
        rack_id: uuid_col(r, 2)?,
        name: r.get(3)?,
        endpoint: r.get(4)?,
        credentials_path: r.get(5)?,
        shelf_state: state.map(|s| s.parse::<PowerShelfState>()).transpose().map_err(|e| conversion(6, Type::Text, e))?,
        operation: r.get(7)?,
        maintenance_requested: opt_json(r, 8)?,
        marked_for_deletion: r.get(9)?,
        created_at: time_col(r, 10)?,
        updated_at: time_col(r, 11)?,
        facts: opt_json(r, 12)?,
    })
}

pub(super) fn get_device(c: &Connection, id: Uuid) -> Result<Option<Device>, StoreError> {
    c.prepare_cached(&format!("SELECT {DEVICE_COLS} FROM rack_devices WHERE device_id = ?1"))
        .db()?
        .query_row([id.to_string()], device_row)
        .optional()
        .db()
}

pub(super) fn list_devices(c: &Connection, rack: Option<Uuid>, kind: Option<DeviceKind>) -> Result<Vec<Device>, StoreError> {
    let mut stmt = c
        .prepare_cached(&format!(
            "SELECT {DEVICE_COLS} FROM rack_devices WHERE (?1 IS NULL OR rack_id = ?1) AND (?2 IS NULL OR kind = ?2) ORDER BY kind, name"
        ))
        .db()?;
    let rows = stmt.query_map(params![rack.map(|r| r.to_string()), kind.map(DeviceKind::as_str)], device_row).db()?;
    rows.collect::<Result<_, _>>().db()
}

pub(super) fn create_device(c: &Connection, d: &Device, log: &ChangeLog) -> Result<Device, StoreError> {
    if get_rack(c, d.rack_id)?.is_none() {
        return Err(StoreError::not_found("rack", d.rack_id));
    }
    let taken: Option<String> = c
        .prepare_cached("SELECT device_id FROM rack_devices WHERE kind = ?1 AND name = ?2")
        .db()?
        .query_row(params![d.kind.as_str(), d.name], |r| r.get(0))
        .optional()
        .db()?;
    if let Some(other) = taken {
        return Err(StoreError::conflict("device", &d.name, format!("{} name {} is taken by {other}", d.kind.as_str(), d.name)));
    }
    c.prepare_cached(&format!("INSERT INTO rack_devices ({DEVICE_COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL, NULL, 0, ?8, ?8, NULL)"))
        .db()?
        .execute(params![
            d.id.to_string(),
            d.kind.as_str(),
            d.rack_id.to_string(),
            d.name,
            d.endpoint,
            d.credentials_path,
            d.shelf_state.map(PowerShelfState::as_str),
            d.created_at.unix(),
        ])
        .db()?;
    log_change(c, log)?;
    get_device(c, d.id)?.ok_or_else(|| StoreError::backend("device vanished inside its own transaction"))
}

pub(super) fn delete_device(c: &Connection, id: Uuid, log: &ChangeLog) -> Result<Device, StoreError> {
    let d = get_device(c, id)?.ok_or_else(|| StoreError::not_found("device", id))?;
    match d.kind {
        DeviceKind::Switch => {
            c.prepare_cached("DELETE FROM rack_devices WHERE device_id = ?1").db()?.execute([id.to_string()]).db()?;
            log_change(c, log)?;
            Ok(d)
        }
        DeviceKind::PowerShelf => {
            c.prepare_cached("UPDATE rack_devices SET marked_for_deletion = 1, updated_at = ?2 WHERE device_id = ?1")
                .db()?
                .execute(params![id.to_string(), log.event.at.unix()])
                .db()?;
            log_change(c, log)?;
            get_device(c, id)?.ok_or_else(|| StoreError::backend("device vanished inside its own transaction"))
        }
    }
}

pub(super) fn place_host(c: &Connection, host_id: Uuid, rack: Option<Uuid>, log: &ChangeLog) -> Result<(), StoreError> {
    if let Some(r) = rack
        && get_rack(c, r)?.is_none()
    {
        return Err(StoreError::not_found("rack", r));
    }
    let changed = c
        .prepare_cached("UPDATE hosts SET rack_id = ?2 WHERE id = ?1 AND state <> 'deleted'")
        .db()?
        .execute(params![host_id.to_string(), rack.map(|r| r.to_string())])
        .db()?;
    if changed == 0 {
        return Err(StoreError::not_found("host", host_id));
    }
    log_change(c, log)
}

pub(super) fn rack_hosts(c: &Connection, rack: Uuid) -> Result<Vec<Uuid>, StoreError> {
    let mut stmt = c.prepare_cached("SELECT id FROM hosts WHERE rack_id = ?1 AND state <> 'deleted' ORDER BY id").db()?;
    let rows = stmt.query_map([rack.to_string()], |r| uuid_col(r, 0)).db()?;
    rows.collect::<Result<_, _>>().db()
}

pub(super) fn host_rack(c: &Connection, host_id: Uuid) -> Result<Option<Uuid>, StoreError> {
    let rack: Option<Option<String>> = c
        .prepare_cached("SELECT rack_id FROM hosts WHERE id = ?1 AND state <> 'deleted'")
        .db()?
        .query_row([host_id.to_string()], |r| r.get(0))
        .optional()
        .db()?;
    Ok(rack.flatten().and_then(|r| Uuid::parse_str(&r).ok()))
}

pub(super) fn set_shelf_maintenance(c: &Connection, ids: &[Uuid], request: &Value, log: &ChangeLog) -> Result<Vec<Device>, StoreError> {
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
        c.prepare_cached("UPDATE rack_devices SET maintenance_requested = ?2, updated_at = ?3 WHERE device_id = ?1")
            .db()?
            .execute(params![id.to_string(), text, log.event.at.unix()])
            .db()?;
        out.push(get_device(c, *id)?.ok_or_else(|| StoreError::backend("shelf vanished inside its own transaction"))?);
    }
    log_change(c, log)?;
    Ok(out)
}

pub(super) fn shelf_step(c: &Connection, step: &ShelfStep, event: &NewEvent) -> Result<bool, StoreError> {
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
            c.prepare_cached("DELETE FROM rack_devices WHERE device_id = ?1").db()?.execute([&id]).db()?;
        }
        Some(to) => {
            let facts = match &step.facts {
                Some(f) => Some(f.to_string()),
                None => now.facts.as_ref().map(Value::to_string),
            };
            c.prepare_cached(
                "UPDATE rack_devices SET state = ?2, operation = ?3, facts = ?4, updated_at = ?5, \
                 maintenance_requested = CASE WHEN ?6 THEN NULL ELSE maintenance_requested END WHERE device_id = ?1",
            )
            .db()?
            .execute(params![id, to.as_str(), step.operation, facts, event.at.unix(), step.clear_request])
            .db()?;
        }
    }
    insert_event(c, event)?;
    Ok(true)
}

pub(super) fn set_host_bmc(c: &Connection, host_id: Uuid, bmc: Option<&HostBmc>, log: &ChangeLog) -> Result<(), StoreError> {
    let exists: Option<String> = c
        .prepare_cached("SELECT id FROM hosts WHERE id = ?1 AND state <> 'deleted'")
        .db()?
        .query_row([host_id.to_string()], |r| r.get(0))
        .optional()
        .db()?;
    if exists.is_none() {
        return Err(StoreError::not_found("host", host_id));
    }
    match bmc {
        Some(b) => c
            .prepare_cached(
                "INSERT INTO host_bmcs (host_id, endpoint, credentials_path, updated_at) VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT (host_id) DO UPDATE SET endpoint = ?2, credentials_path = ?3, updated_at = ?4",
            )
            .db()?
            .execute(params![host_id.to_string(), b.endpoint, b.credentials_path, log.event.at.unix()])
            .db()?,
        None => c.prepare_cached("DELETE FROM host_bmcs WHERE host_id = ?1").db()?.execute([host_id.to_string()]).db()?,
    };
    log_change(c, log)
}

pub(super) fn host_bmcs(c: &Connection, hosts: &[Uuid]) -> Result<Vec<HostBmc>, StoreError> {
    let mut stmt = c.prepare_cached("SELECT host_id, endpoint, credentials_path FROM host_bmcs WHERE host_id = ?1").db()?;
    let mut out = Vec::new();
    for h in hosts {
        let row = stmt
            .query_row([h.to_string()], |r| Ok(HostBmc { host_id: uuid_col(r, 0)?, endpoint: r.get(1)?, credentials_path: r.get(2)? }))
            .optional()
            .db()?;
        out.extend(row);
    }
    out.sort_by_key(|b| b.host_id);
    Ok(out)
}

const FIRMWARE_COLS: &str = "firmware_id, hardware_type, image_uri, available, is_default, created_at";

fn firmware_row(r: &Row<'_>) -> rusqlite::Result<FirmwareRecord> {
    Ok(FirmwareRecord {
        id: r.get(0)?,
        hardware_type: r.get(1)?,
        image_uri: r.get(2)?,
        available: r.get(3)?,
        default: r.get(4)?,
        created_at: time_col(r, 5)?,
    })
}

pub(super) fn list_firmware(c: &Connection) -> Result<Vec<FirmwareRecord>, StoreError> {
    let mut stmt = c.prepare_cached(&format!("SELECT {FIRMWARE_COLS} FROM rack_firmware ORDER BY firmware_id")).db()?;
    let rows = stmt.query_map([], firmware_row).db()?;
    rows.collect::<Result<_, _>>().db()
}

pub(super) fn create_firmware(c: &Connection, f: &FirmwareRecord, log: &ChangeLog) -> Result<FirmwareRecord, StoreError> {
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
    c.prepare_cached(&format!("INSERT INTO rack_firmware ({FIRMWARE_COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"))
        .db()?
        .execute(params![f.id, f.hardware_type, f.image_uri, f.available, f.default, f.created_at.unix()])
        .db()?;
    log_change(c, log)?;
    Ok(f.clone())
}

pub(super) fn request_rack_maintenance(c: &Connection, id: Uuid, maintenance: &Value, log: &ChangeLog) -> Result<Rack, StoreError> {
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
    c.prepare_cached("UPDATE racks SET maintenance = ?2, updated_at = ?3 WHERE rack_id = ?1")
        .db()?
        .execute(params![id.to_string(), maintenance.to_string(), log.event.at.unix()])
        .db()?;
    log_change(c, log)?;
    get_rack(c, id)?.ok_or_else(|| StoreError::backend("rack vanished inside its own transaction"))
}

pub(super) fn rack_step(
    c: &Connection,
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
    c.prepare_cached("UPDATE racks SET state = ?2, maintenance = ?3, updated_at = ?4 WHERE rack_id = ?1")
        .db()?
        .execute(params![expected.id.to_string(), to.as_str(), maintenance.map(Value::to_string), event.at.unix()])
        .db()?;
    insert_event(c, event)?;
    Ok(true)
}
