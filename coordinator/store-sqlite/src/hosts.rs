//! Hosts, enrollment tokens and certificates in SQLite.
//!
//! Each function runs inside the transaction its caller opened (see `SqliteStore::write`),
//! so a check and the write that depends on it (a token's state and its use, a host's state
//! and its transition) cannot be separated by another writer.

use rusqlite::{Connection, OptionalExtension, Row, params};
use serde_json::json;

use super::log::insert_event;
use super::*;
use drover_store::rules::normalize_serial;

pub(super) const HOST_COLS: &str =
    "id, hostname, state, schedulable, created_at, updated_at, last_checkin_at, agent_version, boot_id, current_generation";

pub(super) fn host_row(r: &Row<'_>) -> rusqlite::Result<Host> {
    let last_checkin = match opt_time_col(r, 6)? {
        Some(at) => Some(Checkin {
            at,
            agent_version: r.get::<_, Option<String>>(7)?.unwrap_or_default(),
            boot_id: r.get::<_, Option<String>>(8)?.unwrap_or_default(),
            current_generation: r.get(9)?,
        }),
        None => None,
    };
    Ok(Host {
        id: uuid_col(r, 0)?,
        hostname: r.get(1)?,
        state: parse_col(r, 2)?,
        schedulable: r.get(3)?,
        created_at: time_col(r, 4)?,
        updated_at: time_col(r, 5)?,
        last_checkin,
    })
}

pub(super) fn get_host(c: &Connection, id: Uuid) -> Result<Option<Host>, StoreError> {
    let sql = format!("SELECT {HOST_COLS} FROM hosts WHERE id = ?1");
    c.prepare_cached(&sql).db()?.query_row([id.to_string()], host_row).optional().db()
}

fn require_host(c: &Connection, id: Uuid) -> Result<Host, StoreError> {
    get_host(c, id)?.ok_or_else(|| StoreError::not_found("host", id))
}

pub(super) fn get_host_by_hostname(c: &Connection, hostname: &str) -> Result<Option<Host>, StoreError> {
    let sql = format!("SELECT {HOST_COLS} FROM hosts WHERE hostname = ?1 AND state <> 'deleted'");
    c.prepare_cached(&sql).db()?.query_row([hostname], host_row).optional().db()
}

pub(super) fn create_host(c: &Connection, new: &NewHost) -> Result<Host, StoreError> {
    drover_proto::names::check_hostname(&new.hostname).map_err(|e| StoreError::invalid("hostname", e.to_string()))?;
    if let Some(live) = get_host_by_hostname(c, &new.hostname)? {
        return Err(StoreError::conflict("hostname", &new.hostname, format!("already names live host {} ({})", live.id, live.state)));
    }
    // A fresh v4 id; the primary key would refuse the (astronomically unlikely) reuse of any
    // id ever issued, deleted hosts' included, since their rows are never removed.
    let id = Uuid::new_v4();
    let at = new.created_at.unix();
    c.prepare_cached("INSERT INTO hosts (id, hostname, state, schedulable, created_at, updated_at) VALUES (?1, ?2, ?3, 1, ?4, ?4)")
        .db()?
        .execute(params![id.to_string(), new.hostname, HostLifecycle::BootstrapIssued.as_str(), at])
        .db()?;
    if let Some(token) = &new.token {
        create_token(c, id, token, new.created_at)?;
    }
    insert_event(
        c,
        &NewEvent {
            at: new.created_at,
            kind: "host.created".into(),
            host_id: Some(id),
            rollout_id: None,
            job_id: None,
            message: format!("host {} created", new.hostname),
            data: json!({ "hostname": new.hostname, "state": HostLifecycle::BootstrapIssued.as_str() }),
        },
    )?;
    require_host(c, id)
}

pub(super) fn list_hosts(c: &Connection, f: &HostFilter) -> Result<Vec<Host>, StoreError> {
    let limit = page(f.limit);
    let mut sql = format!("SELECT {HOST_COLS} FROM hosts WHERE 1 = 1");
    let mut args: Vec<rusqlite::types::Value> = Vec::new();
    if let Some(state) = f.state {
        args.push(state.as_str().to_owned().into());
        sql += &format!(" AND state = ?{}", args.len());
    }
    if let Some(t) = f.silent_since {
        args.push(t.unix().into());
        sql += &format!(" AND COALESCE(last_checkin_at, updated_at) < ?{}", args.len());
    }
    if let Some(after) = &f.after {
        args.push(after.hostname.clone().into());
        args.push(after.id.to_string().into());
        sql += &format!(" AND (hostname, id) > (?{}, ?{})", args.len() - 1, args.len());
    }
    args.push(limit.into());
    sql += &format!(" ORDER BY hostname, id LIMIT ?{}", args.len());
    let mut stmt = c.prepare_cached(&sql).db()?;
    let rows = stmt.query_map(rusqlite::params_from_iter(args), host_row).db()?;
    rows.collect::<Result<_, _>>().db()
}

pub(super) fn transition_host(
    c: &Connection,
    id: Uuid,
    from: HostLifecycle,
    to: HostLifecycle,
    reason: &str,
    at: Time,
) -> Result<Host, StoreError> {
    // Legality first: an illegal request is the caller's bug whatever the stored state is.
    if !from.can_transition_to(to) {
        return Err(StoreError::IllegalTransition { what: "host lifecycle", from: from.as_str().into(), to: to.as_str().into() });
    }
    let host = require_host(c, id)?;
    if host.state != from {
        return Err(StoreError::StaleState {
            what: "host",
            id: id.to_string(),
            expected: from.as_str().into(),
            actual: host.state.as_str().into(),
        });
    }
    // The WHERE repeats the compare-and-set so a backend without a global writer lock (or a
    // future refactor) cannot lose it.
    let changed = c
        .prepare_cached("UPDATE hosts SET state = ?1, updated_at = ?2 WHERE id = ?3 AND state = ?4")
        .db()?
        .execute(params![to.as_str(), at.unix(), id.to_string(), from.as_str()])
        .db()?;
    if changed != 1 {
        return Err(StoreError::StaleState {
            what: "host",
            id: id.to_string(),
            expected: from.as_str().into(),
            actual: "changed concurrently".into(),
        });
    }
    insert_event(
        c,
        &NewEvent {
            at,
            kind: "host.transition".into(),
            host_id: Some(id),
            rollout_id: None,
            job_id: None,
            message: reason.to_owned(),
            data: json!({ "from": from.as_str(), "to": to.as_str(), "hostname": host.hostname }),
        },
    )?;
    // The flag is what a scheduler reads: a host blocked pending investigation must never
    // read as schedulable, whoever quarantined it (an operator, a failed validation, drift).
    if to == HostLifecycle::Quarantined && host.schedulable {
        set_schedulable(c, id, false, "quarantined: a quarantined host is never schedulable", at)?;
    }
    require_host(c, id)
}

pub(super) fn record_checkin(c: &Connection, id: Uuid, ck: &Checkin) -> Result<Host, StoreError> {
    let changed = c
        .prepare_cached("UPDATE hosts SET last_checkin_at = ?1, agent_version = ?2, boot_id = ?3, current_generation = ?4 WHERE id = ?5")
        .db()?
        .execute(params![ck.at.unix(), ck.agent_version, ck.boot_id, ck.current_generation, id.to_string()])
        .db()?;
    if changed == 0 {
        return Err(StoreError::not_found("host", id));
    }
    require_host(c, id)
}

pub(super) fn set_schedulable(c: &Connection, id: Uuid, schedulable: bool, reason: &str, at: Time) -> Result<Host, StoreError> {
    let host = require_host(c, id)?;
    if host.schedulable == schedulable {
        return Ok(host);
    }
    if schedulable && host.state == HostLifecycle::Quarantined {
        return Err(StoreError::IllegalTransition { what: "host schedulable flag", from: "quarantined".into(), to: "schedulable".into() });
    }
    c.prepare_cached("UPDATE hosts SET schedulable = ?1, updated_at = ?2 WHERE id = ?3")
        .db()?
        .execute(params![schedulable, at.unix(), id.to_string()])
        .db()?;
    insert_event(
        c,
        &NewEvent {
            at,
            kind: "host.schedulable".into(),
            host_id: Some(id),
            rollout_id: None,
            job_id: None,
            message: reason.to_owned(),
            data: json!({ "schedulable": schedulable }),
        },
    )?;
    require_host(c, id)
}

// ---- enrollment tokens --------------------------------------------------------------------

const TOKEN_COLS: &str = "id, host_id, created_at, expires_at, used_at, revoked_at";

fn token_row(r: &Row<'_>) -> rusqlite::Result<TokenInfo> {
    Ok(TokenInfo {
        id: uuid_col(r, 0)?,
        host_id: uuid_col(r, 1)?,
        created_at: time_col(r, 2)?,
        expires_at: time_col(r, 3)?,
        used_at: opt_time_col(r, 4)?,
        revoked_at: opt_time_col(r, 5)?,
    })
}

pub(super) fn create_token(c: &Connection, host_id: Uuid, token: &EnrollmentToken, at: Time) -> Result<TokenInfo, StoreError> {
    check_sha256("token hash", &token.token_hash)?;
    let host = require_host(c, host_id)?;
    if host.state == HostLifecycle::Deleted {
        return Err(StoreError::conflict("host", host_id, "is deleted; re-onboarding creates a new host"));
    }
    let exists: bool = c
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM enrollment_tokens WHERE token_hash = ?1)")
        .db()?
        .query_row([&token.token_hash], |r| r.get(0))
        .db()?;
    if exists {
        // Never echo the hash: the error may end up in a response or a log.
        return Err(StoreError::conflict("enrollment token", "<redacted>", "a token with this hash already exists"));
    }
    let id = Uuid::new_v4();
    c.prepare_cached("INSERT INTO enrollment_tokens (id, host_id, token_hash, created_at, expires_at) VALUES (?1, ?2, ?3, ?4, ?5)")
        .db()?
        .execute(params![id.to_string(), host_id.to_string(), token.token_hash, at.unix(), token.expires_at.unix()])
        .db()?;
    Ok(TokenInfo { id, host_id, created_at: at, expires_at: token.expires_at, used_at: None, revoked_at: None })
}

pub(super) fn consume_token(c: &Connection, token_hash: &str, expected: Option<Uuid>, now: Time) -> Result<Uuid, StoreError> {
    let refuse = |refusal| Err(StoreError::TokenRefused { refusal });
    let row = c
        .prepare_cached(&format!("SELECT {TOKEN_COLS} FROM enrollment_tokens WHERE token_hash = ?1"))
        .db()?
        .query_row([token_hash], token_row)
        .optional()
        .db()?;
    let Some(token) = row else { return refuse(TokenRefusal::Unknown) };
    if token.revoked_at.is_some() {
        return refuse(TokenRefusal::Revoked);
    }
    if token.used_at.is_some() {
        return refuse(TokenRefusal::AlreadyUsed);
    }
    if now >= token.expires_at {
        return refuse(TokenRefusal::Expired);
    }
    if expected.is_some_and(|h| h != token.host_id) {
        return refuse(TokenRefusal::WrongHost);
    }
    // Conditional on `used_at IS NULL`: the use itself is the compare-and-set, so exactly one
    // consumer can ever see a changed row.
    let changed = c
        .prepare_cached("UPDATE enrollment_tokens SET used_at = ?1 WHERE id = ?2 AND used_at IS NULL")
        .db()?
        .execute(params![now.unix(), token.id.to_string()])
        .db()?;
    if changed != 1 {
        return refuse(TokenRefusal::AlreadyUsed);
    }
    insert_event(
        c,
        &NewEvent {
            at: now,
            kind: "host.token_used".into(),
            host_id: Some(token.host_id),
            rollout_id: None,
            job_id: None,
            message: "enrollment token used".into(),
            data: json!({ "tokenId": token.id.to_string() }),
        },
    )?;
    Ok(token.host_id)
}

pub(super) fn list_tokens(c: &Connection, host_id: Option<Uuid>) -> Result<Vec<TokenInfo>, StoreError> {
    let mut stmt = c
        .prepare_cached(&format!(
            "SELECT {TOKEN_COLS} FROM enrollment_tokens WHERE ?1 IS NULL OR host_id = ?1 ORDER BY created_at DESC, id"
        ))
        .db()?;
    let rows = stmt.query_map([host_id.map(|h| h.to_string())], token_row).db()?;
    rows.collect::<Result<_, _>>().db()
}

pub(super) fn revoke_token(c: &Connection, id: Uuid, at: Time) -> Result<TokenInfo, StoreError> {
    let token = c
        .prepare_cached(&format!("SELECT {TOKEN_COLS} FROM enrollment_tokens WHERE id = ?1"))
        .db()?
        .query_row([id.to_string()], token_row)
        .optional()
        .db()?
        .ok_or_else(|| StoreError::not_found("enrollment token", id))?;
    if token.revoked_at.is_some() {
        return Ok(token);
    }
    if let Some(used) = token.used_at {
        return Err(StoreError::conflict(
            "enrollment token",
            id,
            format!("was used at {used}: its host enrolled with it; revoke the host's certificate instead"),
        ));
    }
    // `used_at IS NULL` in the same statement: within this transaction nothing can spend it
    // between the check and the write, and a backend with weaker isolation still cannot
    // revoke a token already spent.
    let changed = c
        .prepare_cached("UPDATE enrollment_tokens SET revoked_at = ?1 WHERE id = ?2 AND used_at IS NULL AND revoked_at IS NULL")
        .db()?
        .execute(params![at.unix(), id.to_string()])
        .db()?;
    if changed != 1 {
        return Err(StoreError::conflict("enrollment token", id, "changed while being revoked"));
    }
    insert_event(
        c,
        &NewEvent {
            at,
            kind: "host.token_revoked".into(),
            host_id: Some(token.host_id),
            rollout_id: None,
            job_id: None,
            message: "enrollment token revoked".into(),
            data: json!({ "tokenId": id.to_string() }),
        },
    )?;
    Ok(TokenInfo { revoked_at: Some(at), ..token })
}

// ---- certificates -------------------------------------------------------------------------

const CERT_COLS: &str = "serial, kind, host_id, subject, not_before, not_after, revoked_at, revoke_reason";

fn cert_row(r: &Row<'_>) -> rusqlite::Result<CertRecord> {
    let revoked = match opt_time_col(r, 6)? {
        Some(at) => Some(Revocation { at, reason: r.get::<_, Option<String>>(7)?.unwrap_or_default() }),
        None => None,
    };
    Ok(CertRecord {
        cert: NewCert {
            serial: r.get(0)?,
            kind: parse_col(r, 1)?,
            host_id: opt_uuid_col(r, 2)?,
            subject: r.get(3)?,
            not_before: time_col(r, 4)?,
            not_after: time_col(r, 5)?,
        },
        revoked,
    })
}

pub(super) fn record_cert(c: &Connection, cert: &NewCert) -> Result<(), StoreError> {
    let serial = normalize_serial(&cert.serial)?;
    match (cert.kind, cert.host_id) {
        (CertKind::Host, None) => return Err(StoreError::invalid("certificate", "a host certificate needs a host id")),
        (CertKind::Operator | CertKind::Server, Some(_)) => {
            return Err(StoreError::invalid("certificate", "only host certificates name a host id"));
        }
        (CertKind::Host, Some(h)) => {
            require_host(c, h)?;
        }
        _ => {}
    }
    if cert.not_after < cert.not_before {
        return Err(StoreError::invalid("certificate", "notAfter is before notBefore"));
    }
    if get_cert(c, &serial)?.is_some() {
        return Err(StoreError::conflict("certificate", &serial, "serial already recorded"));
    }
    c.prepare_cached("INSERT INTO certificates (serial, kind, host_id, subject, not_before, not_after) VALUES (?1, ?2, ?3, ?4, ?5, ?6)")
        .db()?
        .execute(params![
            serial,
            cert.kind.as_str(),
            cert.host_id.map(|h| h.to_string()),
            cert.subject,
            cert.not_before.unix(),
            cert.not_after.unix()
        ])
        .db()?;
    Ok(())
}

pub(super) fn get_cert(c: &Connection, serial: &str) -> Result<Option<CertRecord>, StoreError> {
    let serial = normalize_serial(serial)?;
    let sql = format!("SELECT {CERT_COLS} FROM certificates WHERE serial = ?1");
    c.prepare_cached(&sql).db()?.query_row([serial], cert_row).optional().db()
}

/// Whether the host has a certificate that is not revoked.
pub(super) fn has_live_cert(c: &Connection, host_id: Uuid) -> Result<bool, StoreError> {
    Ok(list_certs(c, Some(host_id))?.iter().any(|r| r.revoked.is_none()))
}

pub(super) fn list_certs(c: &Connection, host_id: Option<Uuid>) -> Result<Vec<CertRecord>, StoreError> {
    let sql = format!("SELECT {CERT_COLS} FROM certificates WHERE ?1 IS NULL OR host_id = ?1 ORDER BY serial");
    let mut stmt = c.prepare_cached(&sql).db()?;
    let rows = stmt.query_map([host_id.map(|h| h.to_string())], cert_row).db()?;
    rows.collect::<Result<_, _>>().db()
}

pub(super) fn revoke_cert(c: &Connection, serial: &str, at: Time, reason: &str) -> Result<bool, StoreError> {
    let record = get_cert(c, serial)?.ok_or_else(|| StoreError::not_found("certificate", serial))?;
    if record.revoked.is_some() {
        return Ok(false);
    }
    c.prepare_cached("UPDATE certificates SET revoked_at = ?1, revoke_reason = ?2 WHERE serial = ?3 AND revoked_at IS NULL")
        .db()?
        .execute(params![at.unix(), reason, record.cert.serial])
        .db()?;
    insert_event(
        c,
        &NewEvent {
            at,
            kind: "cert.revoked".into(),
            host_id: record.cert.host_id,
            rollout_id: None,
            job_id: None,
            message: reason.to_owned(),
            data: json!({ "serial": record.cert.serial, "kind": record.cert.kind.as_str() }),
        },
    )?;
    Ok(true)
}

pub(super) fn revoke_host_certs(c: &Connection, host_id: Uuid, at: Time, reason: &str) -> Result<u64, StoreError> {
    require_host(c, host_id)?;
    let n = c
        .prepare_cached("UPDATE certificates SET revoked_at = ?1, revoke_reason = ?2 WHERE host_id = ?3 AND revoked_at IS NULL")
        .db()?
        .execute(params![at.unix(), reason, host_id.to_string()])
        .db()?;
    // A host revoked before it enrolled must not enroll afterwards: its unused tokens end now.
    c.prepare_cached("UPDATE enrollment_tokens SET expires_at = MIN(expires_at, ?1) WHERE host_id = ?2 AND used_at IS NULL")
        .db()?
        .execute(params![at.unix(), host_id.to_string()])
        .db()?;
    if n > 0 {
        insert_event(
            c,
            &NewEvent {
                at,
                kind: "cert.revoked".into(),
                host_id: Some(host_id),
                rollout_id: None,
                job_id: None,
                message: reason.to_owned(),
                data: json!({ "count": n }),
            },
        )?;
    }
    Ok(n as u64)
}

pub(super) fn list_revoked(c: &Connection) -> Result<Vec<RevokedCert>, StoreError> {
    let mut stmt = c.prepare_cached("SELECT serial, revoked_at FROM certificates WHERE revoked_at IS NOT NULL ORDER BY serial").db()?;
    let rows = stmt.query_map([], |r| Ok(RevokedCert { serial: r.get(0)?, revoked_at: time_col(r, 1)? })).db()?;
    rows.collect::<Result<_, _>>().db()
}
