//! MAAS sites, profiles, power-credential overrides and RoCE assignments in SQLite.
//!
//! Uniqueness (site name, profile name within a site, one override per selector, one RoCE
//! row per host interface) is checked with a read inside the write transaction before the
//! insert, so a refusal is a [`StoreError::Conflict`] naming what collides rather than a
//! constraint error; the UNIQUE constraints stay as the backstop. Every write appends its
//! [`ChangeLog`] (event and audit) in the same transaction.

use rusqlite::{Connection, OptionalExtension, Row, params};

use super::log::{insert_audit, insert_event};
use super::*;
use drover_store::rules::{check_revision, json};

fn doc_col<T: serde::de::DeserializeOwned>(row: &Row<'_>, idx: usize) -> rusqlite::Result<T> {
    let s: String = row.get(idx)?;
    serde_json::from_str(&s).map_err(|e| conversion(idx, Type::Text, e))
}

fn log_change(c: &Connection, log: &ChangeLog) -> Result<(), StoreError> {
    insert_event(c, &log.event)?;
    insert_audit(c, &log.audit)?;
    Ok(())
}

// ---- sites ----------------------------------------------------------------------------------

const SITE_COLS: &str = "site_id, name, status, config, default_profile_id, secrets, revision, created_at, updated_at";

fn site_row(r: &Row<'_>) -> rusqlite::Result<Site> {
    Ok(Site {
        id: uuid_col(r, 0)?,
        name: r.get(1)?,
        status: parse_col(r, 2)?,
        config: doc_col(r, 3)?,
        default_profile_id: uuid_col(r, 4)?,
        secrets: doc_col(r, 5)?,
        revision: u64_col(r, 6)?,
        created_at: time_col(r, 7)?,
        updated_at: time_col(r, 8)?,
    })
}

pub(super) fn get_site(c: &Connection, id: Uuid) -> Result<Option<Site>, StoreError> {
    c.prepare_cached(&format!("SELECT {SITE_COLS} FROM maas_sites WHERE site_id = ?1"))
        .db()?
        .query_row([id.to_string()], site_row)
        .optional()
        .db()
}

pub(super) fn get_site_by_name(c: &Connection, name: &str) -> Result<Option<Site>, StoreError> {
    c.prepare_cached(&format!("SELECT {SITE_COLS} FROM maas_sites WHERE name = ?1")).db()?.query_row([name], site_row).optional().db()
}

pub(super) fn list_sites(c: &Connection) -> Result<Vec<Site>, StoreError> {
    let mut stmt = c.prepare_cached(&format!("SELECT {SITE_COLS} FROM maas_sites ORDER BY name")).db()?;
    let rows = stmt.query_map([], site_row).db()?;
    rows.collect::<Result<_, _>>().db()
}

fn check_site_name_free(c: &Connection, name: &str, except: Option<Uuid>) -> Result<(), StoreError> {
    match get_site_by_name(c, name)? {
        Some(other) if Some(other.id) != except => {
            Err(StoreError::conflict("site", name, format!("the name is taken by site {}", other.id)))
        }
        _ => Ok(()),
    }
}

pub(super) fn create_site(c: &Connection, site: &Site, profile: &Profile, log: &ChangeLog) -> Result<Site, StoreError> {
    if site.default_profile_id != profile.id || profile.site_id != site.id {
        return Err(StoreError::invalid("site", "the default profile must be the one created with the site"));
    }
    if get_site(c, site.id)?.is_some() {
        return Err(StoreError::conflict("site", site.id, "a site with this id exists"));
    }
    check_site_name_free(c, &site.name, None)?;
    c.prepare_cached(&format!("INSERT INTO maas_sites ({SITE_COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, 1, ?7, ?7)"))
        .db()?
        .execute(params![
            site.id.to_string(),
            site.name,
            site.status.as_str(),
            json(&site.config)?,
            site.default_profile_id.to_string(),
            json(&site.secrets)?,
            site.created_at.unix(),
        ])
        .db()?;
    insert_profile(c, profile)?;
    log_change(c, log)?;
    get_site(c, site.id)?.ok_or_else(|| StoreError::backend("site vanished inside its own transaction"))
}

pub(super) fn update_site(c: &Connection, site: &Site, expected_revision: u64, log: &ChangeLog) -> Result<Site, StoreError> {
    let current = get_site(c, site.id)?.ok_or_else(|| StoreError::not_found("site", site.id))?;
    check_revision("site", site.id, expected_revision, current.revision)?;
    check_site_name_free(c, &site.name, Some(site.id))?;
    match get_profile(c, site.default_profile_id)? {
        Some(p) if p.site_id == site.id => {}
        _ => return Err(StoreError::invalid("defaultProfileId", format!("profile {} is not one of this site's", site.default_profile_id))),
    }
    c.prepare_cached(
        "UPDATE maas_sites SET name = ?2, status = ?3, config = ?4, default_profile_id = ?5, secrets = ?6,
             revision = revision + 1, updated_at = ?7 WHERE site_id = ?1",
    )
    .db()?
    .execute(params![
        site.id.to_string(),
        site.name,
        site.status.as_str(),
        json(&site.config)?,
        site.default_profile_id.to_string(),
        json(&site.secrets)?,
        site.updated_at.unix(),
    ])
    .db()?;
    log_change(c, log)?;
    get_site(c, site.id)?.ok_or_else(|| StoreError::backend("site vanished inside its own transaction"))
}

// ---- profiles -------------------------------------------------------------------------------

const PROFILE_COLS: &str = "profile_id, site_id, name, description, status, policy, revision, created_at, updated_at";

fn profile_row(r: &Row<'_>) -> rusqlite::Result<Profile> {
    Ok(Profile {
        id: uuid_col(r, 0)?,
        site_id: uuid_col(r, 1)?,
        name: r.get(2)?,
        description: r.get(3)?,
        status: parse_col(r, 4)?,
        policy: doc_col(r, 5)?,
        revision: u64_col(r, 6)?,
        created_at: time_col(r, 7)?,
        updated_at: time_col(r, 8)?,
    })
}

fn insert_profile(c: &Connection, p: &Profile) -> Result<(), StoreError> {
    if get_profile(c, p.id)?.is_some() {
        return Err(StoreError::conflict("profile", p.id, "a profile with this id exists"));
    }
    check_profile_name_free(c, p.site_id, &p.name, None)?;
    c.prepare_cached(&format!("INSERT INTO maas_site_profiles ({PROFILE_COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, 1, ?7, ?7)"))
        .db()?
        .execute(params![
            p.id.to_string(),
            p.site_id.to_string(),
            p.name,
            p.description,
            p.status.as_str(),
            json(&p.policy)?,
            p.created_at.unix()
        ])
        .db()?;
    Ok(())
}

fn check_profile_name_free(c: &Connection, site_id: Uuid, name: &str, except: Option<Uuid>) -> Result<(), StoreError> {
    let other: Option<String> = c
        .prepare_cached("SELECT profile_id FROM maas_site_profiles WHERE site_id = ?1 AND name = ?2")
        .db()?
        .query_row(params![site_id.to_string(), name], |r| r.get(0))
        .optional()
        .db()?;
    match other {
        Some(id) if Some(id.as_str()) != except.map(|e| e.to_string()).as_deref() => {
            Err(StoreError::conflict("profile", name, format!("the site already has a profile named {name:?} ({id})")))
        }
        _ => Ok(()),
    }
}

pub(super) fn get_profile(c: &Connection, id: Uuid) -> Result<Option<Profile>, StoreError> {
    c.prepare_cached(&format!("SELECT {PROFILE_COLS} FROM maas_site_profiles WHERE profile_id = ?1"))
        .db()?
        .query_row([id.to_string()], profile_row)
        .optional()
        .db()
}

pub(super) fn list_profiles(c: &Connection, site_id: Uuid) -> Result<Vec<Profile>, StoreError> {
    let mut stmt = c.prepare_cached(&format!("SELECT {PROFILE_COLS} FROM maas_site_profiles WHERE site_id = ?1 ORDER BY name")).db()?;
    let rows = stmt.query_map([site_id.to_string()], profile_row).db()?;
    rows.collect::<Result<_, _>>().db()
}

fn require_site(c: &Connection, site_id: Uuid) -> Result<Site, StoreError> {
    get_site(c, site_id)?.ok_or_else(|| StoreError::not_found("site", site_id))
}

pub(super) fn create_profile(c: &Connection, p: &Profile, log: &ChangeLog) -> Result<Profile, StoreError> {
    require_site(c, p.site_id)?;
    insert_profile(c, p)?;
    log_change(c, log)?;
    get_profile(c, p.id)?.ok_or_else(|| StoreError::backend("profile vanished inside its own transaction"))
}

pub(super) fn update_profile(c: &Connection, p: &Profile, expected_revision: u64, log: &ChangeLog) -> Result<Profile, StoreError> {
    let current = get_profile(c, p.id)?.ok_or_else(|| StoreError::not_found("profile", p.id))?;
    if current.site_id != p.site_id {
        return Err(StoreError::not_found("profile", p.id));
    }
    check_revision("profile", p.id, expected_revision, current.revision)?;
    check_profile_name_free(c, p.site_id, &p.name, Some(p.id))?;
    c.prepare_cached(
        "UPDATE maas_site_profiles SET name = ?2, description = ?3, status = ?4, policy = ?5, revision = revision + 1,
             updated_at = ?6 WHERE profile_id = ?1",
    )
    .db()?
    .execute(params![p.id.to_string(), p.name, p.description, p.status.as_str(), json(&p.policy)?, p.updated_at.unix()])
    .db()?;
    log_change(c, log)?;
    get_profile(c, p.id)?.ok_or_else(|| StoreError::backend("profile vanished inside its own transaction"))
}

// ---- power-credential overrides -------------------------------------------------------------

const OVERRIDE_COLS: &str = "override_id, site_id, selector_type, selector_value, secret_path, status, created_at, updated_at";

fn override_row(r: &Row<'_>) -> rusqlite::Result<PowerOverride> {
    Ok(PowerOverride {
        id: uuid_col(r, 0)?,
        site_id: uuid_col(r, 1)?,
        selector_type: parse_col(r, 2)?,
        selector_value: r.get(3)?,
        secret_path: r.get(4)?,
        status: parse_col(r, 5)?,
        created_at: time_col(r, 6)?,
        updated_at: time_col(r, 7)?,
    })
}

pub(super) fn create_override(c: &Connection, o: &PowerOverride, log: &ChangeLog) -> Result<PowerOverride, StoreError> {
    require_site(c, o.site_id)?;
    let taken: Option<String> = c
        .prepare_cached("SELECT override_id FROM maas_power_overrides WHERE site_id = ?1 AND selector_type = ?2 AND selector_value = ?3")
        .db()?
        .query_row(params![o.site_id.to_string(), o.selector_type.as_str(), o.selector_value], |r| r.get(0))
        .optional()
        .db()?;
    if let Some(id) = taken {
        return Err(StoreError::conflict(
            "override",
            format!("{}={}", o.selector_type, o.selector_value),
            format!("the site already has override {id} for this selector; delete it first"),
        ));
    }
    c.prepare_cached(&format!("INSERT INTO maas_power_overrides ({OVERRIDE_COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)"))
        .db()?
        .execute(params![
            o.id.to_string(),
            o.site_id.to_string(),
            o.selector_type.as_str(),
            o.selector_value,
            o.secret_path,
            o.status.as_str(),
            o.created_at.unix()
        ])
        .db()?;
    log_change(c, log)?;
    Ok(o.clone())
}

pub(super) fn list_overrides(c: &Connection, site_id: Uuid) -> Result<Vec<PowerOverride>, StoreError> {
    let mut stmt = c.prepare_cached(&format!("SELECT {OVERRIDE_COLS} FROM maas_power_overrides WHERE site_id = ?1")).db()?;
    let rows = stmt.query_map([site_id.to_string()], override_row).db()?;
    let mut out: Vec<PowerOverride> = rows.collect::<Result<_, _>>().db()?;
    // Selection order (pxe_mac, ipmi_ip, hostname), not the strings' order.
    out.sort_by(|a, b| (a.selector_type, &a.selector_value).cmp(&(b.selector_type, &b.selector_value)));
    Ok(out)
}

pub(super) fn delete_override(c: &Connection, site_id: Uuid, id: Uuid, log: &ChangeLog) -> Result<PowerOverride, StoreError> {
    let found = c
        .prepare_cached(&format!("SELECT {OVERRIDE_COLS} FROM maas_power_overrides WHERE override_id = ?1 AND site_id = ?2"))
        .db()?
        .query_row(params![id.to_string(), site_id.to_string()], override_row)
        .optional()
        .db()?
        .ok_or_else(|| StoreError::not_found("override", id))?;
    c.prepare_cached("DELETE FROM maas_power_overrides WHERE override_id = ?1").db()?.execute([id.to_string()]).db()?;
    log_change(c, log)?;
    Ok(found)
}

// ---- RoCE assignments -----------------------------------------------------------------------

const ROCE_COLS: &str = "assignment_id, site_id, hostname, interface, ipv4_cidr, created_at, updated_at";

fn roce_row(r: &Row<'_>) -> rusqlite::Result<RoceAssignment> {
    Ok(RoceAssignment {
        id: uuid_col(r, 0)?,
        site_id: uuid_col(r, 1)?,
        hostname: r.get(2)?,
        interface: r.get(3)?,
        ipv4_cidr: r.get(4)?,
        created_at: time_col(r, 5)?,
        updated_at: time_col(r, 6)?,
    })
}

pub(super) fn upsert_roce(c: &Connection, site_id: Uuid, items: &[NewRoce], at: Time, log: &ChangeLog) -> Result<RoceUpsert, StoreError> {
    require_site(c, site_id)?;
    let mut out = RoceUpsert::default();
    let mut find = c
        .prepare_cached(
            "SELECT assignment_id, ipv4_cidr FROM maas_roce_assignments WHERE site_id = ?1 AND hostname = ?2 AND interface = ?3",
        )
        .db()?;
    for item in items {
        let existing: Option<(String, String)> =
            find.query_row(params![site_id.to_string(), item.hostname, item.interface], |r| Ok((r.get(0)?, r.get(1)?))).optional().db()?;
        match existing {
            Some((_, cidr)) if cidr == item.ipv4_cidr => out.unchanged += 1,
            Some((id, _)) => {
                c.prepare_cached("UPDATE maas_roce_assignments SET ipv4_cidr = ?2, updated_at = ?3 WHERE assignment_id = ?1")
                    .db()?
                    .execute(params![id, item.ipv4_cidr, at.unix()])
                    .db()?;
                out.updated += 1;
            }
            None => {
                c.prepare_cached(&format!("INSERT INTO maas_roce_assignments ({ROCE_COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6)"))
                    .db()?
                    .execute(params![
                        Uuid::new_v4().to_string(),
                        site_id.to_string(),
                        item.hostname,
                        item.interface,
                        item.ipv4_cidr,
                        at.unix()
                    ])
                    .db()?;
                out.created += 1;
            }
        }
    }
    log_change(c, log)?;
    Ok(out)
}

pub(super) fn list_roce(c: &Connection, site_id: Uuid, hostname: Option<&str>) -> Result<Vec<RoceAssignment>, StoreError> {
    let mut stmt = c.prepare_cached(&format!(
        "SELECT {ROCE_COLS} FROM maas_roce_assignments WHERE site_id = ?1 AND (?2 IS NULL OR hostname = ?2) ORDER BY hostname, interface"
    )).db()?;
    let rows = stmt.query_map(params![site_id.to_string(), hostname], roce_row).db()?;
    rows.collect::<Result<_, _>>().db()
}

pub(super) fn delete_roce(c: &Connection, site_id: Uuid, id: Uuid, log: &ChangeLog) -> Result<RoceAssignment, StoreError> {
    let found = c
        .prepare_cached(&format!("SELECT {ROCE_COLS} FROM maas_roce_assignments WHERE assignment_id = ?1 AND site_id = ?2"))
        .db()?
        .query_row(params![id.to_string(), site_id.to_string()], roce_row)
        .optional()
        .db()?
        .ok_or_else(|| StoreError::not_found("RoCE assignment", id))?;
    c.prepare_cached("DELETE FROM maas_roce_assignments WHERE assignment_id = ?1").db()?.execute([id.to_string()]).db()?;
    log_change(c, log)?;
    Ok(found)
}
