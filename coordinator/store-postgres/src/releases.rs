//! Releases, manifests, rollouts and per-host rollout state in PostgreSQL, as
//! `store-sqlite/src/releases.rs`.

use std::collections::BTreeMap;

use drover_proto::names::RolloutId;
use drover_proto::release::{ReleaseFiles, sig_path};
use drover_proto::states::{HostRolloutState, RolloutState};
use drover_proto::time::Time;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::cols::{col, parse_col, rollout_col, time_col, u64_col};
use super::log::insert_event;
use super::postgres::{Row, Transaction};
use crate::DbResult;
use drover_store::rules::{check_sha256, manifest_id, version_arg};
use drover_store::{
    HostRollout, Manifest, NewEvent, NewRollout, RELEASE_PUBLISH_ACTION, Release, ReleaseSummary, Rollout, RolloutFilter, StoreError,
};

pub(crate) fn put_release(c: &mut Transaction<'_>, version: u64, signed_at: Time, files: &ReleaseFiles) -> Result<(), StoreError> {
    let v = version_arg(version)?;
    if let Some(highest) = latest_version(c)?.filter(|h| version <= *h) {
        return Err(StoreError::VersionNotIncreasing { version, highest });
    }
    c.execute("INSERT INTO releases (version, signed_at) VALUES ($1, $2)", &[&v, &signed_at.unix()]).db()?;
    let insert = c.prepare("INSERT INTO release_files (version, path, bytes) VALUES ($1, $2, $3)").db()?;
    for (path, bytes) in &files.files {
        c.execute(&insert, &[&v, path, bytes]).db()?;
    }
    for (path, bytes) in &files.files {
        let Some(id) = manifest_id(path) else { continue };
        let id = id?;
        let sig = files
            .get(&sig_path(path))
            .ok_or_else(|| StoreError::invalid("release", format!("{path} has no signature file {}", sig_path(path))))?;
        match get_manifest(c, &id)? {
            Some(stored) if stored.bytes != *bytes => return Err(StoreError::ManifestBytesDiffer { rollout_id: id.to_string() }),
            Some(stored) if stored.sig != sig => {
                c.execute("UPDATE manifests SET sig = $1 WHERE rollout_id = $2", &[&sig, &id.as_str()]).db()?;
            }
            Some(_) => {}
            None => {
                c.execute(
                    "INSERT INTO manifests (rollout_id, bytes, sig, sha256, first_version) VALUES ($1, $2, $3, $4, $5)",
                    &[&id.as_str(), bytes, &sig, &hex::encode(Sha256::digest(bytes)), &v],
                )
                .db()?;
            }
        }
    }
    Ok(())
}

pub(crate) fn get_release(c: &mut Transaction<'_>, version: Option<u64>) -> Result<Option<Release>, StoreError> {
    let head = match version {
        Some(v) => c.query_opt("SELECT version, signed_at FROM releases WHERE version = $1", &[&version_arg(v)?]).db()?,
        None => c.query_opt("SELECT version, signed_at FROM releases ORDER BY version DESC LIMIT 1", &[]).db()?,
    };
    let Some(head) = head else { return Ok(None) };
    let (version, signed_at) = (u64_col(&head, 0)?, time_col(&head, 1)?);
    let rows = c.query("SELECT path, bytes FROM release_files WHERE version = $1", &[&version_arg(version)?]).db()?;
    let files: BTreeMap<String, Vec<u8>> = rows.iter().map(|r| Ok((col(r, 0)?, col(r, 1)?))).collect::<Result<_, StoreError>>()?;
    Ok(Some(Release { version, signed_at, files: ReleaseFiles { files } }))
}

pub(crate) fn latest_version(c: &mut Transaction<'_>) -> Result<Option<u64>, StoreError> {
    let highest: Option<i64> = col(&c.query_one("SELECT MAX(version) FROM releases", &[]).db()?, 0)?;
    Ok(highest.and_then(|v| u64::try_from(v).ok()))
}

pub(crate) fn list_releases(c: &mut Transaction<'_>) -> Result<Vec<ReleaseSummary>, StoreError> {
    // One statement for the whole listing, as in SQLite: the publisher from the release's
    // first publish audit record, the rollouts it opened through `manifests.first_version`.
    let rows = c
        .query(
            "WITH rel AS (
             SELECT r.version, r.signed_at,
                    (SELECT a.actor FROM audit a WHERE a.target = r.version::TEXT AND a.action = $1
                     ORDER BY a.id LIMIT 1) AS publisher
             FROM releases r),
         opened AS (
             SELECT m.first_version AS version, COUNT(*) AS n, array_agg(DISTINCT ro.channel ORDER BY ro.channel) AS channels
             FROM rollouts ro JOIN manifests m ON m.rollout_id = ro.rollout_id
             GROUP BY m.first_version)
         SELECT rel.version, rel.signed_at, f.path, rel.publisher, COALESCE(o.n, 0), o.channels
         FROM rel LEFT JOIN release_files f ON f.version = rel.version LEFT JOIN opened o ON o.version = rel.version
         ORDER BY rel.version DESC, f.path",
            &[&RELEASE_PUBLISH_ACTION],
        )
        .db()?;
    let mut out: Vec<ReleaseSummary> = Vec::new();
    for r in &rows {
        let version = u64_col(r, 0)?;
        if out.last().is_none_or(|s| s.version != version) {
            out.push(ReleaseSummary {
                version,
                signed_at: time_col(r, 1)?,
                paths: Vec::new(),
                publisher: col(r, 3)?,
                channels: col::<Option<Vec<String>>>(r, 5)?.unwrap_or_default(),
                rollouts: u64_col(r, 4)?,
            });
        }
        if let (Some(path), Some(last)) = (col::<Option<String>>(r, 2)?, out.last_mut()) {
            last.paths.push(path);
        }
    }
    Ok(out)
}

/// The root file and its signature from the newest release holding both.
pub(crate) fn get_manifest_root(c: &mut Transaction<'_>, id: &RolloutId) -> Result<Option<drover_store::SignedBytes>, StoreError> {
    let path = drover_proto::release::root_path(id);
    let sig = drover_proto::release::sig_path(&path);
    let row = c
        .query_opt(
            "SELECT r.bytes, s.bytes FROM release_files r JOIN release_files s ON s.version = r.version AND s.path = $2 \
         WHERE r.path = $1 ORDER BY r.version DESC LIMIT 1",
            &[&path, &sig],
        )
        .db()?;
    row.map(|r| Ok((col(&r, 0)?, col(&r, 1)?))).transpose()
}

pub(crate) fn get_manifest(c: &mut Transaction<'_>, id: &RolloutId) -> Result<Option<Manifest>, StoreError> {
    let row =
        c.query_opt("SELECT rollout_id, bytes, sig, sha256, first_version FROM manifests WHERE rollout_id = $1", &[&id.as_str()]).db()?;
    row.map(|r| {
        Ok(Manifest {
            rollout_id: rollout_col(&r, 0)?,
            bytes: col(&r, 1)?,
            sig: col(&r, 2)?,
            sha256: col(&r, 3)?,
            first_version: u64_col(&r, 4)?,
        })
    })
    .transpose()
}

// ---- rollouts -----------------------------------------------------------------------------

pub(crate) const ROLLOUT_COLS: &str = "rollout_id, channel, state, manifest_sha256, opened_at, updated_at";

pub(crate) fn rollout_row(r: &Row) -> Result<Rollout, StoreError> {
    Ok(Rollout {
        rollout_id: rollout_col(r, 0)?,
        channel: col(r, 1)?,
        state: parse_col(r, 2)?,
        manifest_sha256: col(r, 3)?,
        opened_at: time_col(r, 4)?,
        updated_at: time_col(r, 5)?,
    })
}

pub(crate) fn get_rollout(c: &mut Transaction<'_>, id: &RolloutId) -> Result<Option<Rollout>, StoreError> {
    let sql = format!("SELECT {ROLLOUT_COLS} FROM rollouts WHERE rollout_id = $1");
    c.query_opt(sql.as_str(), &[&id.as_str()]).db()?.map(|r| rollout_row(&r)).transpose()
}

fn rollout_event(rollout_id: &RolloutId, at: Time, kind: &str, message: &str, data: Value) -> NewEvent {
    NewEvent { at, kind: kind.into(), host_id: None, rollout_id: Some(rollout_id.clone()), job_id: None, message: message.into(), data }
}

pub(crate) fn open_rollout(c: &mut Transaction<'_>, new: &NewRollout) -> Result<Rollout, StoreError> {
    check_sha256("manifest sha256", &new.manifest_sha256)?;
    if let Some(stored) = get_rollout(c, &new.rollout_id)? {
        if stored.manifest_sha256 == new.manifest_sha256 {
            return Ok(stored);
        }
        return Err(StoreError::conflict("rollout", &new.rollout_id, "already opened with another manifest"));
    }
    c.execute(
        "INSERT INTO rollouts (rollout_id, channel, state, manifest_sha256, opened_at, updated_at) VALUES ($1, $2, $3, $4, $5, $5)",
        &[&new.rollout_id.as_str(), &new.rollout_id.channel(), &new.state.as_str(), &new.manifest_sha256, &new.opened_at.unix()],
    )
    .db()?;
    let data = json!({ "state": new.state.as_str(), "manifestSha256": new.manifest_sha256 });
    insert_event(c, &rollout_event(&new.rollout_id, new.opened_at, "rollout.opened", "rollout opened", data))?;
    get_rollout(c, &new.rollout_id)?.ok_or_else(|| StoreError::not_found("rollout", &new.rollout_id))
}

pub(crate) fn list_rollouts(c: &mut Transaction<'_>, f: &RolloutFilter) -> Result<Vec<Rollout>, StoreError> {
    let sql = format!(
        "SELECT {ROLLOUT_COLS} FROM rollouts WHERE ($1::TEXT IS NULL OR state = $1) AND ($2::TEXT IS NULL OR channel = $2)
         ORDER BY opened_at, rollout_id"
    );
    c.query(sql.as_str(), &[&f.state.map(RolloutState::as_str), &f.channel]).db()?.iter().map(rollout_row).collect()
}

pub(crate) fn set_rollout_state(
    c: &mut Transaction<'_>,
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

/// Compare-and-set of a rollout's state along a legal transition, without an event.
pub(crate) fn update_rollout_state(
    c: &mut Transaction<'_>,
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
    c.execute(
        "UPDATE rollouts SET state = $1, updated_at = $2 WHERE rollout_id = $3 AND state = $4",
        &[&to.as_str(), &at.unix(), &id.as_str(), &from.as_str()],
    )
    .db()?;
    Ok(())
}

// ---- per-host rollout state ---------------------------------------------------------------

pub(crate) const HOST_ROLLOUT_COLS: &str = "rollout_id, hostname, state, wave_index, since, intent_target";

pub(crate) fn host_rollout_row(r: &Row) -> Result<HostRollout, StoreError> {
    Ok(HostRollout {
        rollout_id: rollout_col(r, 0)?,
        hostname: col(r, 1)?,
        state: parse_col(r, 2)?,
        wave_index: u32::try_from(col::<i64>(r, 3)?).map_err(|e| StoreError::backend(format!("host_rollouts.wave_index: {e}")))?,
        since: time_col(r, 4)?,
        intent_target: col(r, 5)?,
    })
}

pub(crate) fn get_host_rollout(c: &mut Transaction<'_>, rollout_id: &RolloutId, hostname: &str) -> Result<Option<HostRollout>, StoreError> {
    let sql = format!("SELECT {HOST_ROLLOUT_COLS} FROM host_rollouts WHERE rollout_id = $1 AND hostname = $2");
    c.query_opt(sql.as_str(), &[&rollout_id.as_str(), &hostname]).db()?.map(|r| host_rollout_row(&r)).transpose()
}

pub(crate) fn list_host_rollouts(c: &mut Transaction<'_>, rollout_id: &RolloutId) -> Result<Vec<HostRollout>, StoreError> {
    let sql = format!("SELECT {HOST_ROLLOUT_COLS} FROM host_rollouts WHERE rollout_id = $1 ORDER BY wave_index, hostname");
    c.query(sql.as_str(), &[&rollout_id.as_str()]).db()?.iter().map(host_rollout_row).collect()
}

/// The latest row per hostname among `hostnames` (see `store-sqlite/src/releases.rs`).
pub(crate) fn latest_host_rollouts(c: &mut Transaction<'_>, hostnames: &[String]) -> Result<Vec<HostRollout>, StoreError> {
    if hostnames.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT {HOST_ROLLOUT_COLS} FROM (
             SELECT hr.*, ROW_NUMBER() OVER (PARTITION BY hr.hostname ORDER BY r.opened_at DESC, r.rollout_id DESC) AS n
             FROM host_rollouts hr JOIN rollouts r ON r.rollout_id = hr.rollout_id
             WHERE hr.hostname = ANY($1)) latest
         WHERE n = 1 ORDER BY hostname"
    );
    c.query(sql.as_str(), &[&hostnames]).db()?.iter().map(host_rollout_row).collect()
}

/// Hosts per (rollout, state) for the given rollouts.
pub(crate) fn host_rollout_counts(
    c: &mut Transaction<'_>,
    rollout_ids: &[RolloutId],
) -> Result<Vec<(RolloutId, HostRolloutState, u64)>, StoreError> {
    if rollout_ids.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<&str> = rollout_ids.iter().map(RolloutId::as_str).collect();
    let rows = c
        .query(
            "SELECT rollout_id, state, COUNT(*) FROM host_rollouts WHERE rollout_id = ANY($1)
         GROUP BY rollout_id, state ORDER BY rollout_id, state",
            &[&ids],
        )
        .db()?;
    rows.iter().map(|r| Ok((rollout_col(r, 0)?, parse_col(r, 1)?, u64_col(r, 2)?))).collect()
}
