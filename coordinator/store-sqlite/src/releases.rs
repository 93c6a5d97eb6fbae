//! Releases, manifests, rollouts and per-host rollout state in SQLite.
//!
//! Release files are BLOBs keyed by (version, path) and come back byte-for-byte; each
//! `rollouts/<id>.json` of a release is also kept under its rollout id, where its bytes may
//! never change (DESIGN: a rollout's manifest never changes bytes under its id).

use std::collections::BTreeMap;

use drover_proto::release::sig_path;
use rusqlite::{Connection, OptionalExtension, Row, params};
use serde_json::json;
use sha2::{Digest, Sha256};

use super::log::insert_event;
use super::*;
use drover_store::rules::{manifest_id, version_arg};

pub(super) fn put_release(c: &Connection, version: u64, signed_at: Time, files: &ReleaseFiles) -> Result<(), StoreError> {
    let v = version_arg(version)?;
    let highest: Option<i64> = c.prepare_cached("SELECT MAX(version) FROM releases").db()?.query_row([], |r| r.get(0)).db()?;
    if let Some(highest) = highest.filter(|h| v <= *h) {
        return Err(StoreError::VersionNotIncreasing { version, highest: highest as u64 });
    }
    c.prepare_cached("INSERT INTO releases (version, signed_at) VALUES (?1, ?2)").db()?.execute(params![v, signed_at.unix()]).db()?;
    let mut insert = c.prepare_cached("INSERT INTO release_files (version, path, bytes) VALUES (?1, ?2, ?3)").db()?;
    for (path, bytes) in &files.files {
        insert.execute(params![v, path, bytes]).db()?;
    }
    for (path, bytes) in &files.files {
        let Some(id) = manifest_id(path) else { continue };
        let id = id?;
        let sig = files
            .get(&sig_path(path))
            .ok_or_else(|| StoreError::invalid("release", format!("{path} has no signature file {}", sig_path(path))))?;
        match get_manifest(c, &id)? {
            // An error here aborts the whole release: the caller's transaction rolls back.
            Some(stored) if stored.bytes != *bytes => return Err(StoreError::ManifestBytesDiffer { rollout_id: id.to_string() }),
            Some(stored) if stored.sig != sig => {
                c.prepare_cached("UPDATE manifests SET sig = ?1 WHERE rollout_id = ?2").db()?.execute(params![sig, id.as_str()]).db()?;
            }
            Some(_) => {}
            None => {
                c.prepare_cached("INSERT INTO manifests (rollout_id, bytes, sig, sha256, first_version) VALUES (?1, ?2, ?3, ?4, ?5)")
                    .db()?
                    .execute(params![id.as_str(), bytes, sig, hex::encode(Sha256::digest(bytes)), v])
                    .db()?;
            }
        }
    }
    Ok(())
}

pub(super) fn get_release(c: &Connection, version: Option<u64>) -> Result<Option<Release>, StoreError> {
    let head = match version {
        Some(v) => c
            .prepare_cached("SELECT version, signed_at FROM releases WHERE version = ?1")
            .db()?
            .query_row([version_arg(v)?], |r| Ok((u64_col(r, 0)?, time_col(r, 1)?)))
            .optional()
            .db()?,
        None => c
            .prepare_cached("SELECT version, signed_at FROM releases ORDER BY version DESC LIMIT 1")
            .db()?
            .query_row([], |r| Ok((u64_col(r, 0)?, time_col(r, 1)?)))
            .optional()
            .db()?,
    };
    let Some((version, signed_at)) = head else { return Ok(None) };
    let mut stmt = c.prepare_cached("SELECT path, bytes FROM release_files WHERE version = ?1").db()?;
    let rows = stmt.query_map([version as i64], |r| Ok((r.get::<_, String>(0)?, r.get::<_, Vec<u8>>(1)?))).db()?;
    let files: BTreeMap<String, Vec<u8>> = rows.collect::<Result<_, _>>().db()?;
    Ok(Some(Release { version, signed_at, files: ReleaseFiles { files } }))
}

pub(super) fn latest_version(c: &Connection) -> Result<Option<u64>, StoreError> {
    let highest: Option<i64> = c.prepare_cached("SELECT MAX(version) FROM releases").db()?.query_row([], |r| r.get(0)).db()?;
    Ok(highest.and_then(|v| u64::try_from(v).ok()))
}

pub(super) fn list_releases(c: &Connection) -> Result<Vec<ReleaseSummary>, StoreError> {
    // One statement for the whole listing. A release "opened" the rollouts whose manifest it
    // was the first to carry (`manifests.first_version`): a later release carrying the same
    // manifest again reopens nothing. The publisher is the actor of the release's first
    // publish audit record (an index lookup by target).
    let mut stmt = c
        .prepare_cached(
            "WITH rel AS (
             SELECT r.version, r.signed_at,
                    (SELECT a.actor FROM audit a WHERE a.target = CAST(r.version AS TEXT) AND a.action = ?1
                     ORDER BY a.id LIMIT 1) AS publisher
             FROM releases r),
         opened AS (
             SELECT m.first_version AS version, COUNT(*) AS n, json_group_array(DISTINCT ro.channel) AS channels
             FROM rollouts ro JOIN manifests m ON m.rollout_id = ro.rollout_id
             GROUP BY m.first_version)
         SELECT rel.version, rel.signed_at, f.path, rel.publisher, COALESCE(o.n, 0), o.channels
         FROM rel LEFT JOIN release_files f ON f.version = rel.version LEFT JOIN opened o ON o.version = rel.version
         ORDER BY rel.version DESC, f.path",
        )
        .db()?;
    let rows = stmt
        .query_map([RELEASE_PUBLISH_ACTION], |r| {
            Ok((
                u64_col(r, 0)?,
                time_col(r, 1)?,
                r.get::<_, Option<String>>(2)?,
                r.get::<_, Option<String>>(3)?,
                u64_col(r, 4)?,
                r.get::<_, Option<String>>(5)?,
            ))
        })
        .db()?;
    let mut out: Vec<ReleaseSummary> = Vec::new();
    for row in rows {
        let (version, signed_at, path, publisher, rollouts, channels) = row.db()?;
        if out.last().is_none_or(|s| s.version != version) {
            let mut channels: Vec<String> = match channels {
                Some(json) => serde_json::from_str(&json).map_err(StoreError::backend)?,
                None => Vec::new(),
            };
            channels.sort();
            out.push(ReleaseSummary { version, signed_at, paths: Vec::new(), publisher, channels, rollouts });
        }
        if let (Some(path), Some(last)) = (path, out.last_mut()) {
            last.paths.push(path);
        }
    }
    Ok(out)
}

/// The root file and its signature from the newest release holding both.
pub(super) fn get_manifest_root(c: &Connection, id: &RolloutId) -> Result<Option<SignedBytes>, StoreError> {
    let path = drover_proto::release::root_path(id);
    let mut stmt = c
        .prepare_cached(
            "SELECT r.bytes, s.bytes FROM release_files r JOIN release_files s ON s.version = r.version AND s.path = ?2 \
         WHERE r.path = ?1 ORDER BY r.version DESC LIMIT 1",
        )
        .db()?;
    stmt.query_row(params![path, sig_path(&path)], |r| Ok((r.get(0)?, r.get(1)?))).optional().db()
}

pub(super) fn get_manifest(c: &Connection, id: &RolloutId) -> Result<Option<Manifest>, StoreError> {
    let mut stmt = c.prepare_cached("SELECT rollout_id, bytes, sig, sha256, first_version FROM manifests WHERE rollout_id = ?1").db()?;
    stmt.query_row([id.as_str()], |r| {
        Ok(Manifest { rollout_id: rollout_col(r, 0)?, bytes: r.get(1)?, sig: r.get(2)?, sha256: r.get(3)?, first_version: u64_col(r, 4)? })
    })
    .optional()
    .db()
}

// ---- rollouts -----------------------------------------------------------------------------

pub(super) const ROLLOUT_COLS: &str = "rollout_id, channel, state, manifest_sha256, opened_at, updated_at";

pub(super) fn rollout_row(r: &Row<'_>) -> rusqlite::Result<Rollout> {
    Ok(Rollout {
        rollout_id: rollout_col(r, 0)?,
        channel: r.get(1)?,
        state: parse_col(r, 2)?,
        manifest_sha256: r.get(3)?,
        opened_at: time_col(r, 4)?,
        updated_at: time_col(r, 5)?,
    })
}

pub(super) fn get_rollout(c: &Connection, id: &RolloutId) -> Result<Option<Rollout>, StoreError> {
    let sql = format!("SELECT {ROLLOUT_COLS} FROM rollouts WHERE rollout_id = ?1");
    c.prepare_cached(&sql).db()?.query_row([id.as_str()], rollout_row).optional().db()
}

fn rollout_event(rollout_id: &RolloutId, at: Time, kind: &str, message: &str, data: Value) -> NewEvent {
    NewEvent { at, kind: kind.into(), host_id: None, rollout_id: Some(rollout_id.clone()), job_id: None, message: message.into(), data }
}

pub(super) fn open_rollout(c: &Connection, new: &NewRollout) -> Result<Rollout, StoreError> {
    check_sha256("manifest sha256", &new.manifest_sha256)?;
    if let Some(stored) = get_rollout(c, &new.rollout_id)? {
        if stored.manifest_sha256 == new.manifest_sha256 {
            return Ok(stored);
        }
        return Err(StoreError::conflict("rollout", &new.rollout_id, "already opened with another manifest"));
    }
    c.prepare_cached(
        "INSERT INTO rollouts (rollout_id, channel, state, manifest_sha256, opened_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?5)",
    )
    .db()?
    .execute(params![new.rollout_id.as_str(), new.rollout_id.channel(), new.state.as_str(), new.manifest_sha256, new.opened_at.unix()])
    .db()?;
    let data = json!({ "state": new.state.as_str(), "manifestSha256": new.manifest_sha256 });
    insert_event(c, &rollout_event(&new.rollout_id, new.opened_at, "rollout.opened", "rollout opened", data))?;
    get_rollout(c, &new.rollout_id)?.ok_or_else(|| StoreError::not_found("rollout", &new.rollout_id))
}

pub(super) fn list_rollouts(c: &Connection, f: &RolloutFilter) -> Result<Vec<Rollout>, StoreError> {
    let sql = format!(
        "SELECT {ROLLOUT_COLS} FROM rollouts WHERE (?1 IS NULL OR state = ?1) AND (?2 IS NULL OR channel = ?2)
         ORDER BY opened_at, rollout_id"
    );
    let mut stmt = c.prepare_cached(&sql).db()?;
    let rows = stmt.query_map(params![f.state.map(RolloutState::as_str), f.channel], rollout_row).db()?;
    rows.collect::<Result<_, _>>().db()
}

pub(super) fn set_rollout_state(
    c: &Connection,
    id: &RolloutId,
    from: RolloutState,
    to: RolloutState,
    reason: &str,
    at: Time,
) -> Result<Rollout, StoreError> {
    update_rollout_state(c, id, from, to, at)?;
    insert_event(c, &rollout_event(id, at, "rollout.transition", reason, json!({ "from": from.as_str(), "to": to.as_str() })))?;
    get_rollout(c, id)?.ok_or_else(|| StoreError::not_found("rollout", id))
}

/// Compare-and-set of a rollout's state along a legal transition, without an event (the
/// caller writes the event it wants).
pub(super) fn update_rollout_state(
    c: &Connection,
    id: &RolloutId,
    from: RolloutState,
    to: RolloutState,
    at: Time,
) -> Result<(), StoreError> {
    if !from.can_transition_to(to) {
        return Err(StoreError::IllegalTransition { what: "rollout", from: from.as_str().into(), to: to.as_str().into() });
    }
    let stored = get_rollout(c, id)?.ok_or_else(|| StoreError::not_found("rollout", id))?;
    if stored.state != from {
        return Err(StoreError::StaleState {
            what: "rollout",
            id: id.to_string(),
            expected: from.as_str().into(),
            actual: stored.state.as_str().into(),
        });
    }
    c.prepare_cached("UPDATE rollouts SET state = ?1, updated_at = ?2 WHERE rollout_id = ?3 AND state = ?4")
        .db()?
        .execute(params![to.as_str(), at.unix(), id.as_str(), from.as_str()])
        .db()?;
    Ok(())
}

// ---- per-host rollout state ---------------------------------------------------------------

pub(super) const HOST_ROLLOUT_COLS: &str = "rollout_id, hostname, state, wave_index, since, intent_target";

pub(super) fn host_rollout_row(r: &Row<'_>) -> rusqlite::Result<HostRollout> {
    Ok(HostRollout {
        rollout_id: rollout_col(r, 0)?,
        hostname: r.get(1)?,
        state: parse_col(r, 2)?,
        wave_index: r.get(3)?,
        since: time_col(r, 4)?,
        intent_target: r.get(5)?,
    })
}

pub(super) fn get_host_rollout(c: &Connection, rollout_id: &RolloutId, hostname: &str) -> Result<Option<HostRollout>, StoreError> {
    let sql = format!("SELECT {HOST_ROLLOUT_COLS} FROM host_rollouts WHERE rollout_id = ?1 AND hostname = ?2");
    c.prepare_cached(&sql).db()?.query_row(params![rollout_id.as_str(), hostname], host_rollout_row).optional().db()
}

pub(super) fn list_host_rollouts(c: &Connection, rollout_id: &RolloutId) -> Result<Vec<HostRollout>, StoreError> {
    let sql = format!("SELECT {HOST_ROLLOUT_COLS} FROM host_rollouts WHERE rollout_id = ?1 ORDER BY wave_index, hostname");
    let mut stmt = c.prepare_cached(&sql).db()?;
    let rows = stmt.query_map([rollout_id.as_str()], host_rollout_row).db()?;
    rows.collect::<Result<_, _>>().db()
}

/// The latest row per hostname among `hostnames`: the names travel as one JSON array (one
/// statement whatever the page size), and the window keeps each host's row in the rollout
/// opened last (the rollout id breaks a tie within the same second).
pub(super) fn latest_host_rollouts(c: &Connection, hostnames: &[String]) -> Result<Vec<HostRollout>, StoreError> {
    if hostnames.is_empty() {
        return Ok(Vec::new());
    }
    let names = serde_json::to_string(hostnames).map_err(|e| StoreError::invalid("hostnames", e.to_string()))?;
    let sql = format!(
        "SELECT {HOST_ROLLOUT_COLS} FROM (
                 SELECT hr.*, ROW_NUMBER() OVER (PARTITION BY hr.hostname ORDER BY r.opened_at DESC, r.rollout_id DESC) AS n
                 FROM host_rollouts hr JOIN rollouts r ON r.rollout_id = hr.rollout_id
                 WHERE hr.hostname IN (SELECT value FROM json_each(?1)))
               WHERE n = 1 ORDER BY hostname"
    );
    let mut stmt = c.prepare_cached(&sql).db()?;
    let rows = stmt.query_map([names], host_rollout_row).db()?;
    rows.collect::<Result<_, _>>().db()
}

/// Hosts per (rollout, state) for the given rollouts, read through the primary key.
pub(super) fn host_rollout_counts(
    c: &Connection,
    rollout_ids: &[RolloutId],
) -> Result<Vec<(RolloutId, HostRolloutState, u64)>, StoreError> {
    if rollout_ids.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<&str> = rollout_ids.iter().map(RolloutId::as_str).collect();
    let ids = serde_json::to_string(&ids).map_err(|e| StoreError::invalid("rollout ids", e.to_string()))?;
    let mut stmt = c
        .prepare_cached(
            "SELECT rollout_id, state, COUNT(*) FROM host_rollouts WHERE rollout_id IN (SELECT value FROM json_each(?1))
         GROUP BY rollout_id, state ORDER BY rollout_id, state",
        )
        .db()?;
    let rows = stmt.query_map([ids], |r| Ok((rollout_col(r, 0)?, parse_col(r, 1)?, r.get::<_, i64>(2)?.unsigned_abs()))).db()?;
    rows.collect::<Result<_, _>>().db()
}
