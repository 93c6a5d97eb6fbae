//! Hosts, enrollment tokens and certificates in PostgreSQL, as `store-sqlite/src/hosts.rs`.
//!
//! Each function runs inside the transaction its caller opened (`PgStore::write`, serializable),
//! so a check and the write that depends on it cannot be separated by another replica's write.
//! Flags are 0/1 BIGINTs and every integer parameter an `i64`, as the schema says.

use drover_proto::states::HostLifecycle;
use drover_proto::time::Time;
use serde_json::json;
use uuid::Uuid;

use super::cols::{col, opt_time_col, opt_uuid_col, parse_col, time_col, uuid_col};
use super::log::insert_event;
use super::postgres::types::ToSql;
use super::postgres::types::Type;
use super::postgres::{Row, Transaction};
use crate::DbResult;
use drover_store::rules::check_sha256;
use drover_store::rules::normalize_serial;
use drover_store::{
    CertKind, CertRecord, Checkin, EnrollmentToken, Host, HostFilter, NewCert, NewEvent, NewHost, Revocation, RevokedCert, StoreError,
    TokenInfo, TokenRefusal,
};

pub(crate) const HOST_COLS: &str =
    "id, hostname, state, schedulable, created_at, updated_at, last_checkin_at, agent_version, boot_id, current_generation";

pub(crate) fn host_row(r: &Row) -> Result<Host, StoreError> {
    host_row_at(r, 0)
}

/// A host from [`HOST_COLS`] starting at column `at`.
pub(crate) fn host_row_at(r: &Row, at: usize) -> Result<Host, StoreError> {
    let last_checkin = match opt_time_col(r, at + 6)? {
        Some(checked_in) => Some(Checkin {
            at: checked_in,
            agent_version: col::<Option<String>>(r, at + 7)?.unwrap_or_default(),
            boot_id: col::<Option<String>>(r, at + 8)?.unwrap_or_default(),
            current_generation: col(r, at + 9)?,
        }),
        None => None,
    };
    Ok(Host {
        id: uuid_col(r, at)?,
        hostname: col(r, at + 1)?,
        state: parse_col(r, at + 2)?,
        schedulable: col::<i64>(r, at + 3)? != 0,
        created_at: time_col(r, at + 4)?,
        updated_at: time_col(r, at + 5)?,
        last_checkin,
    })
}

pub(crate) fn get_host(c: &mut Transaction<'_>, id: Uuid) -> Result<Option<Host>, StoreError> {
    let sql = format!("SELECT {HOST_COLS} FROM hosts WHERE id = $1");
    // Typed: parse, bind and execute in one round trip (many writes check the host first).
    c.query_typed_opt(sql.as_str(), &[(&id.to_string(), Type::TEXT)]).db()?.map(|r| host_row(&r)).transpose()
}

fn require_host(c: &mut Transaction<'_>, id: Uuid) -> Result<Host, StoreError> {
    get_host(c, id)?.ok_or_else(|| StoreError::not_found("host", id))
}

pub(crate) fn get_host_by_hostname(c: &mut Transaction<'_>, hostname: &str) -> Result<Option<Host>, StoreError> {
    let sql = format!("SELECT {HOST_COLS} FROM hosts WHERE hostname = $1 AND state <> 'deleted'");
    c.query_opt(sql.as_str(), &[&hostname]).db()?.map(|r| host_row(&r)).transpose()
}

pub(crate) fn create_host(c: &mut Transaction<'_>, new: &NewHost) -> Result<Host, StoreError> {
    drover_proto::names::check_hostname(&new.hostname).map_err(|e| StoreError::invalid("hostname", e.to_string()))?;
    if let Some(live) = get_host_by_hostname(c, &new.hostname)? {
        return Err(StoreError::conflict("hostname", &new.hostname, format!("already names live host {} ({})", live.id, live.state)));
    }
    let id = Uuid::new_v4();
    let at = new.created_at.unix();
    c.execute(
        "INSERT INTO hosts (id, hostname, state, schedulable, created_at, updated_at) VALUES ($1, $2, $3, 1, $4, $4)",
        &[&id.to_string(), &new.hostname, &HostLifecycle::BootstrapIssued.as_str(), &at],
    )
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

pub(crate) fn list_hosts(c: &mut Transaction<'_>, f: &HostFilter) -> Result<Vec<Host>, StoreError> {
    let limit = super::cols::page(f.limit);
    let state = f.state.map(HostLifecycle::as_str);
    let silent = f.silent_since.map(Time::unix);
    let (after_name, after_id) = match &f.after {
        Some(a) => (Some(a.hostname.clone()), Some(a.id.to_string())),
        None => (None, None),
    };
    let params: [&(dyn ToSql + Sync); 5] = [&state, &silent, &after_name, &after_id, &limit];
    let sql = format!(
        "SELECT {HOST_COLS} FROM hosts
         WHERE ($1::TEXT IS NULL OR state = $1)
           AND ($2::BIGINT IS NULL OR COALESCE(last_checkin_at, updated_at) < $2)
           AND ($3::TEXT IS NULL OR (hostname, id) > ($3, $4::TEXT))
         ORDER BY hostname, id LIMIT $5"
    );
    c.query(sql.as_str(), &params).db()?.iter().map(host_row).collect()
}

pub(crate) fn transition_host(
    c: &mut Transaction<'_>,
    id: Uuid,
    from: HostLifecycle,
    to: HostLifecycle,
    reason: &str,
    at: Time,
) -> Result<Host, StoreError> {
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
    let changed = c
        .execute(
            "UPDATE hosts SET state = $1, updated_at = $2 WHERE id = $3 AND state = $4",
            &[&to.as_str(), &at.unix(), &id.to_string(), &from.as_str()],
        )
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
    if to == HostLifecycle::Quarantined && host.schedulable {
        set_schedulable(c, id, false, "quarantined: a quarantined host is never schedulable", at)?;
    }
    require_host(c, id)
}

pub(crate) fn record_checkin(c: &mut Transaction<'_>, id: Uuid, ck: &Checkin) -> Result<Host, StoreError> {
    let changed = c
        .execute(
            "UPDATE hosts SET last_checkin_at = $1, agent_version = $2, boot_id = $3, current_generation = $4 WHERE id = $5",
            &[&ck.at.unix(), &ck.agent_version, &ck.boot_id, &ck.current_generation, &id.to_string()],
        )
        .db()?;
    if changed == 0 {
        return Err(StoreError::not_found("host", id));
    }
    require_host(c, id)
}

pub(crate) fn set_schedulable(c: &mut Transaction<'_>, id: Uuid, schedulable: bool, reason: &str, at: Time) -> Result<Host, StoreError> {
    let host = require_host(c, id)?;
    if host.schedulable == schedulable {
        return Ok(host);
    }
    if schedulable && host.state == HostLifecycle::Quarantined {
        return Err(StoreError::IllegalTransition { what: "host schedulable flag", from: "quarantined".into(), to: "schedulable".into() });
    }
    c.execute("UPDATE hosts SET schedulable = $1, updated_at = $2 WHERE id = $3", &[&i64::from(schedulable), &at.unix(), &id.to_string()])
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

fn token_row(r: &Row) -> Result<TokenInfo, StoreError> {
    Ok(TokenInfo {
        id: uuid_col(r, 0)?,
        host_id: uuid_col(r, 1)?,
        created_at: time_col(r, 2)?,
        expires_at: time_col(r, 3)?,
        used_at: opt_time_col(r, 4)?,
        revoked_at: opt_time_col(r, 5)?,
    })
}

fn token_by(c: &mut Transaction<'_>, column: &str, value: &str) -> Result<Option<TokenInfo>, StoreError> {
    let sql = format!("SELECT {TOKEN_COLS} FROM enrollment_tokens WHERE {column} = $1");
    c.query_opt(sql.as_str(), &[&value]).db()?.map(|r| token_row(&r)).transpose()
}

pub(crate) fn create_token(c: &mut Transaction<'_>, host_id: Uuid, token: &EnrollmentToken, at: Time) -> Result<TokenInfo, StoreError> {
    check_sha256("token hash", &token.token_hash)?;
    let host = require_host(c, host_id)?;
    if host.state == HostLifecycle::Deleted {
        return Err(StoreError::conflict("host", host_id, "is deleted; re-onboarding creates a new host"));
    }
    if token_by(c, "token_hash", &token.token_hash)?.is_some() {
        // Never echo the hash: the error may end up in a response or a log.
        return Err(StoreError::conflict("enrollment token", "<redacted>", "a token with this hash already exists"));
    }
    let id = Uuid::new_v4();
    c.execute(
        "INSERT INTO enrollment_tokens (id, host_id, token_hash, created_at, expires_at) VALUES ($1, $2, $3, $4, $5)",
        &[&id.to_string(), &host_id.to_string(), &token.token_hash, &at.unix(), &token.expires_at.unix()],
    )
    .db()?;
    Ok(TokenInfo { id, host_id, created_at: at, expires_at: token.expires_at, used_at: None, revoked_at: None })
}

pub(crate) fn consume_token(c: &mut Transaction<'_>, token_hash: &str, expected: Option<Uuid>, now: Time) -> Result<Uuid, StoreError> {
    let refuse = |refusal| Err(StoreError::TokenRefused { refusal });
    let Some(token) = token_by(c, "token_hash", token_hash)? else { return refuse(TokenRefusal::Unknown) };
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
    let changed = c
        .execute("UPDATE enrollment_tokens SET used_at = $1 WHERE id = $2 AND used_at IS NULL", &[&now.unix(), &token.id.to_string()])
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

pub(crate) fn list_tokens(c: &mut Transaction<'_>, host_id: Option<Uuid>) -> Result<Vec<TokenInfo>, StoreError> {
    let sql = format!("SELECT {TOKEN_COLS} FROM enrollment_tokens WHERE $1::TEXT IS NULL OR host_id = $1 ORDER BY created_at DESC, id");
    c.query(sql.as_str(), &[&host_id.map(|h| h.to_string())]).db()?.iter().map(token_row).collect()
}

pub(crate) fn revoke_token(c: &mut Transaction<'_>, id: Uuid, at: Time) -> Result<TokenInfo, StoreError> {
    let token = token_by(c, "id", &id.to_string())?.ok_or_else(|| StoreError::not_found("enrollment token", id))?;
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
    let changed = c
        .execute(
            "UPDATE enrollment_tokens SET revoked_at = $1 WHERE id = $2 AND used_at IS NULL AND revoked_at IS NULL",
            &[&at.unix(), &id.to_string()],
        )
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

fn cert_row(r: &Row) -> Result<CertRecord, StoreError> {
    let revoked = match opt_time_col(r, 6)? {
        Some(at) => Some(Revocation { at, reason: col::<Option<String>>(r, 7)?.unwrap_or_default() }),
        None => None,
    };
    Ok(CertRecord {
        cert: NewCert {
            serial: col(r, 0)?,
            kind: parse_col(r, 1)?,
            host_id: opt_uuid_col(r, 2)?,
            subject: col(r, 3)?,
            not_before: time_col(r, 4)?,
            not_after: time_col(r, 5)?,
        },
        revoked,
    })
}

pub(crate) fn record_cert(c: &mut Transaction<'_>, cert: &NewCert) -> Result<(), StoreError> {
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
    c.execute(
        "INSERT INTO certificates (serial, kind, host_id, subject, not_before, not_after) VALUES ($1, $2, $3, $4, $5, $6)",
        &[
            &serial,
            &cert.kind.as_str(),
            &cert.host_id.map(|h| h.to_string()),
            &cert.subject,
            &cert.not_before.unix(),
            &cert.not_after.unix(),
        ],
    )
    .db()?;
    Ok(())
}

pub(crate) fn get_cert(c: &mut Transaction<'_>, serial: &str) -> Result<Option<CertRecord>, StoreError> {
    let serial = normalize_serial(serial)?;
    let sql = format!("SELECT {CERT_COLS} FROM certificates WHERE serial = $1");
    c.query_opt(sql.as_str(), &[&serial]).db()?.map(|r| cert_row(&r)).transpose()
}

/// Whether the host has a certificate that is not revoked.
pub(crate) fn has_live_cert(c: &mut Transaction<'_>, host_id: Uuid) -> Result<bool, StoreError> {
    Ok(list_certs(c, Some(host_id))?.iter().any(|r| r.revoked.is_none()))
}

pub(crate) fn list_certs(c: &mut Transaction<'_>, host_id: Option<Uuid>) -> Result<Vec<CertRecord>, StoreError> {
    let sql = format!("SELECT {CERT_COLS} FROM certificates WHERE $1::TEXT IS NULL OR host_id = $1 ORDER BY serial");
    c.query(sql.as_str(), &[&host_id.map(|h| h.to_string())]).db()?.iter().map(cert_row).collect()
}

pub(crate) fn revoke_cert(c: &mut Transaction<'_>, serial: &str, at: Time, reason: &str) -> Result<bool, StoreError> {
    let record = get_cert(c, serial)?.ok_or_else(|| StoreError::not_found("certificate", serial))?;
    if record.revoked.is_some() {
        return Ok(false);
    }
    c.execute(
        "UPDATE certificates SET revoked_at = $1, revoke_reason = $2 WHERE serial = $3 AND revoked_at IS NULL",
        &[&at.unix(), &reason, &record.cert.serial],
    )
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

pub(crate) fn revoke_host_certs(c: &mut Transaction<'_>, host_id: Uuid, at: Time, reason: &str) -> Result<u64, StoreError> {
    require_host(c, host_id)?;
    let n = c
        .execute(
            "UPDATE certificates SET revoked_at = $1, revoke_reason = $2 WHERE host_id = $3 AND revoked_at IS NULL",
            &[&at.unix(), &reason, &host_id.to_string()],
        )
        .db()?;
    // A host revoked before it enrolled must not enroll afterwards: its unused tokens end now.
    c.execute(
        "UPDATE enrollment_tokens SET expires_at = LEAST(expires_at, $1) WHERE host_id = $2 AND used_at IS NULL",
        &[&at.unix(), &host_id.to_string()],
    )
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
    Ok(n)
}

pub(crate) fn list_revoked(c: &mut Transaction<'_>) -> Result<Vec<RevokedCert>, StoreError> {
    let rows = c.query("SELECT serial, revoked_at FROM certificates WHERE revoked_at IS NOT NULL ORDER BY serial", &[]).db()?;
    rows.iter().map(|r| Ok(RevokedCert { serial: col(r, 0)?, revoked_at: time_col(r, 1)? })).collect()
}
