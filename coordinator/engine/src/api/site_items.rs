//! What hangs off a MAAS site over the API: profiles (§3.7), per-node power-credential
//! overrides (§3.2.1) and RoCE assignments (§3.3).
//!
//! | route | role | what |
//! |---|---|---|
//! | `GET/POST /v1/maas/sites/{site}/profiles` | viewer / admin | list, create |
//! | `GET/PATCH /v1/maas/sites/{site}/profiles/{profile}` | viewer / admin | read, change (policy merged field by field); `{profile}`: id (tried first) or name |
//! | `GET/POST /v1/maas/sites/{site}/overrides` | viewer / admin | list, create with the BMC credentials |
//! | `POST /v1/maas/sites/{site}/overrides/{id}/credentials` | admin | rotate an override's credentials |
//! | `DELETE /v1/maas/sites/{site}/overrides/{id}` | admin | remove (and its secret) |
//! | `GET/POST /v1/maas/sites/{site}/roce-assignments` | viewer / admin | list (`?hostname=`), bulk upsert |
//! | `DELETE /v1/maas/sites/{site}/roce-assignments/{id}` | admin | remove one |

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

pub use drover_proto::api::sites::{Items, OverrideView, ProfileView, RoceUpsert, RoceView};

use crate::api::auth::{Admin, Reader};
use crate::api::error::{ApiError, JsonBody};
use crate::api::sites::{PowerCredentials, change_log, load_site, object_name, reason_or_default, secret_error, secret_path};
use crate::app::AppState;
use crate::sites::validate;
use crate::store::{self, NewRoce, PowerOverride, Profile, ProfilePolicy, SelectorType, Site, SiteStatus, StoreError};

/// The most RoCE rows one upsert may carry.
pub const MAX_ROCE_ITEMS: usize = 10_000;

fn profile_view(p: &Profile, site: &Site) -> ProfileView {
    ProfileView {
        id: p.id.to_string(),
        site_id: p.site_id.to_string(),
        name: p.name.clone(),
        description: p.description.clone(),
        status: p.status,
        default: p.id == site.default_profile_id,
        policy: p.policy.clone(),
        revision: p.revision,
        created_at: p.created_at,
        updated_at: p.updated_at,
    }
}

/// One of `site`'s profiles, by id or name: a key that parses as an id is that id only (a
/// profile named like another's id, stored before names were checked, cannot stand in for it).
pub async fn load_profile(app: &Arc<AppState>, site: &Site, key: &str) -> Result<Profile, ApiError> {
    let site_id = site.id;
    let profiles = store::blocking(app.store.clone(), move |s| s.list_profiles(site_id)).await?;
    let key = key.trim();
    let id = drover_proto::names::as_id(key);
    profiles
        .into_iter()
        .find(|p| match id {
            Some(id) => p.id == id,
            None => p.name == key,
        })
        .ok_or_else(|| ApiError::not_found(format!("site {} has no profile {key:?}", site.name)))
}

/// `GET /v1/maas/sites/{site}/profiles` (viewer).
pub async fn list_profiles(
    State(app): State<Arc<AppState>>,
    Reader(_): Reader,
    Path(key): Path<String>,
) -> Result<Json<Items<ProfileView>>, ApiError> {
    let site = load_site(&app, &key).await?;
    let id = site.id;
    let profiles = store::blocking(app.store.clone(), move |s| s.list_profiles(id)).await?;
    Ok(Json(Items { items: profiles.iter().map(|p| profile_view(p, &site)).collect() }))
}

/// `GET /v1/maas/sites/{site}/profiles/{profile}` (viewer).
pub async fn get_profile(
    State(app): State<Arc<AppState>>,
    Reader(_): Reader,
    Path((key, profile)): Path<(String, String)>,
) -> Result<Json<ProfileView>, ApiError> {
    let site = load_site(&app, &key).await?;
    let p = load_profile(&app, &site, &profile).await?;
    Ok(Json(profile_view(&p, &site)))
}

/// `POST /v1/maas/sites/{site}/profiles` body.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateProfile {
    name: String,
    #[serde(default)]
    description: Option<String>,
    /// Unset fields take the seed's defaults.
    #[serde(default)]
    policy: Option<ProfilePolicy>,
    #[serde(default)]
    reason: Option<String>,
}

fn description(d: Option<&str>) -> Result<Option<String>, ApiError> {
    match d.map(str::trim).filter(|d| !d.is_empty()) {
        Some(d) if d.chars().count() > 500 || !drover_proto::text::is_plain(d) => {
            Err(ApiError::bad_request("description: at most 500 characters without control characters"))
        }
        other => Ok(other.map(str::to_owned)),
    }
}

/// `POST /v1/maas/sites/{site}/profiles` (admin): 201.
pub async fn create_profile(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    Path(key): Path<String>,
    JsonBody(req): JsonBody<CreateProfile>,
) -> Result<(StatusCode, Json<ProfileView>), ApiError> {
    let reason = reason_or_default(req.reason.as_deref())?;
    let site = load_site(&app, &key).await?;
    let now = app.clock.now();
    let profile = Profile {
        id: Uuid::new_v4(),
        site_id: site.id,
        name: object_name("name", "profile name", &req.name)?,
        description: description(req.description.as_deref())?,
        status: SiteStatus::Active,
        policy: validate::policy(&req.policy.unwrap_or_default())?,
        revision: 1,
        created_at: now,
        updated_at: now,
    };
    let log = change_log(&op, &app, "maas.profile.created", &site, &profile.id.to_string(), &reason, json!({ "profile": profile.name }));
    let stored = store::blocking(app.store.clone(), move |s| s.create_profile(&profile, &log)).await?;
    Ok((StatusCode::CREATED, Json(profile_view(&stored, &site))))
}

/// `PATCH /v1/maas/sites/{site}/profiles/{profile}` body; `policy` holds only the fields to change.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PatchProfile {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    status: Option<SiteStatus>,
    #[serde(default)]
    policy: Option<serde_json::Map<String, Value>>,
    #[serde(default)]
    reason: Option<String>,
}

/// `PATCH /v1/maas/sites/{site}/profiles/{profile}` (admin). The site's default profile
/// cannot be disabled: name another default first.
pub async fn patch_profile(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    Path((key, profile)): Path<(String, String)>,
    JsonBody(req): JsonBody<PatchProfile>,
) -> Result<Json<ProfileView>, ApiError> {
    let reason = reason_or_default(req.reason.as_deref())?;
    let site = load_site(&app, &key).await?;
    let current = load_profile(&app, &site, &profile).await?;
    let mut next = current.clone();
    if let Some(n) = &req.name {
        next.name = object_name("name", "profile name", n)?;
    }
    if req.description.is_some() {
        next.description = description(req.description.as_deref())?;
    }
    if let Some(s) = req.status {
        if s == SiteStatus::Disabled && current.id == site.default_profile_id {
            return Err(ApiError::conflict(format!(
                "profile {} is site {}'s default: make another profile the default before disabling it",
                current.name, site.name
            )));
        }
        next.status = s;
    }
    if let Some(changes) = &req.policy {
        let mut merged = serde_json::to_value(&current.policy).map_err(|_| ApiError::internal())?;
        if let Value::Object(m) = &mut merged {
            m.extend(changes.clone());
        }
        let policy: ProfilePolicy =
            serde_path_to_error::deserialize(merged).map_err(|e| ApiError::bad_request(format!("policy.{}: {}", e.path(), e.inner())))?;
        next.policy = validate::policy(&policy)?;
    }
    if next == current {
        return Ok(Json(profile_view(&current, &site)));
    }
    next.updated_at = app.clock.now();
    let log = change_log(&op, &app, "maas.profile.updated", &site, &current.id.to_string(), &reason, json!({ "profile": next.name }));
    let revision = current.revision;
    let stored = store::blocking(app.store.clone(), move |s| s.update_profile(&next, revision, &log)).await?;
    Ok(Json(profile_view(&stored, &site)))
}

fn override_view(o: &PowerOverride) -> OverrideView {
    OverrideView {
        id: o.id.to_string(),
        site_id: o.site_id.to_string(),
        selector_type: o.selector_type,
        selector_value: o.selector_value.clone(),
        secret_path: o.secret_path.clone(),
        status: o.status,
        created_at: o.created_at,
        updated_at: o.updated_at,
    }
}

/// `GET /v1/maas/sites/{site}/overrides` (viewer): in selection order; paths, never values.
pub async fn list_overrides(
    State(app): State<Arc<AppState>>,
    Reader(_): Reader,
    Path(key): Path<String>,
) -> Result<Json<Items<OverrideView>>, ApiError> {
    let site = load_site(&app, &key).await?;
    let overrides = store::blocking(app.store.clone(), move |s| s.list_overrides(site.id)).await?;
    Ok(Json(Items { items: overrides.iter().map(override_view).collect() }))
}

/// `POST /v1/maas/sites/{site}/overrides` body.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateOverride {
    selector_type: String,
    selector_value: String,
    credentials: PowerCredentials,
    #[serde(default)]
    reason: Option<String>,
}

/// `POST /v1/maas/sites/{site}/overrides` (admin): writes the credentials to the secret store,
/// then the override row; if the row is refused, the secret just written is removed again.
pub async fn create_override(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    Path(key): Path<String>,
    JsonBody(req): JsonBody<CreateOverride>,
) -> Result<(StatusCode, Json<OverrideView>), ApiError> {
    let reason = reason_or_default(req.reason.as_deref())?;
    let ty: SelectorType = req
        .selector_type
        .trim()
        .parse()
        .map_err(|e: drover_proto::api::sites::NotOneOf| ApiError::bad_request(format!("selectorType: {e}")))?;
    let value = validate::selector_value(ty, &req.selector_value)?;
    let secret = req.credentials.to_secret("credentials")?;
    let site = load_site(&app, &key).await?;
    let id = Uuid::new_v4();
    let now = app.clock.now();
    let path = crate::sites::override_path(site.id, id);
    let o = PowerOverride {
        id,
        site_id: site.id,
        selector_type: ty,
        selector_value: value,
        secret_path: path.clone(),
        status: SiteStatus::Active,
        created_at: now,
        updated_at: now,
    };
    let spath = secret_path(&path)?;
    app.secrets.write(&spath, &secret).await.map_err(secret_error)?;
    let data = json!({ "overrideId": id, "selectorType": ty, "selectorValue": o.selector_value });
    let log = change_log(&op, &app, "maas.override.created", &site, &id.to_string(), &reason, data);
    match store::blocking(app.store.clone(), move |s| s.create_override(&o, &log)).await {
        Ok(stored) => Ok((StatusCode::CREATED, Json(override_view(&stored)))),
        Err(e) => {
            if let Err(cleanup) = app.secrets.delete(&spath).await {
                tracing::warn!(error = %cleanup, path = %path, "could not remove the secret of a refused override");
            }
            Err(e.into())
        }
    }
}

async fn find_override(app: &Arc<AppState>, site: &Site, id: &str) -> Result<PowerOverride, ApiError> {
    let wanted = Uuid::parse_str(id.trim()).map_err(|_| ApiError::bad_request(format!("override id {id:?} is not a UUID")))?;
    let site_id = site.id;
    let all = store::blocking(app.store.clone(), move |s| s.list_overrides(site_id)).await?;
    all.into_iter().find(|o| o.id == wanted).ok_or_else(|| ApiError::not_found(format!("site {} has no override {wanted}", site.name)))
}

/// `POST /v1/maas/sites/{site}/overrides/{id}/credentials` body.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OverrideCredentials {
    credentials: PowerCredentials,
    #[serde(default)]
    reason: Option<String>,
}

/// `POST /v1/maas/sites/{site}/overrides/{id}/credentials` (admin): rotation, same path.
pub async fn override_credentials(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    Path((key, id)): Path<(String, String)>,
    JsonBody(req): JsonBody<OverrideCredentials>,
) -> Result<Json<OverrideView>, ApiError> {
    let reason = reason_or_default(req.reason.as_deref())?;
    let secret = req.credentials.to_secret("credentials")?;
    let site = load_site(&app, &key).await?;
    let o = find_override(&app, &site, &id).await?;
    let spath = secret_path(&o.secret_path)?;
    app.secrets.write(&spath, &secret).await.map_err(secret_error)?;
    let log = change_log(&op, &app, "maas.override.credentials", &site, &o.id.to_string(), &reason, json!({ "overrideId": o.id }));
    store::blocking(app.store.clone(), move |s| {
        s.append_event(&log.event)?;
        s.append_audit(&log.audit)
    })
    .await?;
    Ok(Json(override_view(&o)))
}

/// `DELETE /v1/maas/sites/{site}/overrides/{id}` (admin): the row, then its secret.
pub async fn delete_override(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    Path((key, id)): Path<(String, String)>,
) -> Result<Json<OverrideView>, ApiError> {
    let site = load_site(&app, &key).await?;
    let o = find_override(&app, &site, &id).await?;
    let log = change_log(&op, &app, "maas.override.deleted", &site, &o.id.to_string(), "(no reason given)", json!({ "overrideId": o.id }));
    let (site_id, oid) = (site.id, o.id);
    let removed = store::blocking(app.store.clone(), move |s| s.delete_override(site_id, oid, &log)).await?;
    let spath = secret_path(&removed.secret_path)?;
    app.secrets.delete(&spath).await.map_err(secret_error)?;
    Ok(Json(override_view(&removed)))
}

/// One row of a RoCE upsert, as §3.4's payload spells it (`ipv4_cidr`) or camelCase.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RoceItem {
    hostname: String,
    interface: String,
    #[serde(alias = "ipv4_cidr")]
    ipv4_cidr: String,
}

/// `POST /v1/maas/sites/{site}/roce-assignments` body.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RoceUpsertRequest {
    items: Vec<RoceItem>,
    #[serde(default)]
    reason: Option<String>,
}

/// Validates and normalises the rows; a (hostname, interface) twice in one request is refused.
pub fn check_roce(items: &[RoceItem]) -> Result<Vec<NewRoce>, ApiError> {
    if items.is_empty() {
        return Err(ApiError::bad_request("items: at least one assignment"));
    }
    if items.len() > MAX_ROCE_ITEMS {
        return Err(ApiError::bad_request(format!("items: at most {MAX_ROCE_ITEMS} per request")));
    }
    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let row = NewRoce {
            hostname: validate::hostname(&format!("items[{i}].hostname"), &item.hostname)?,
            interface: validate::iface(&format!("items[{i}].interface"), &item.interface)?,
            ipv4_cidr: validate::ipv4_cidr(&format!("items[{i}].ipv4Cidr"), &item.ipv4_cidr)?,
        };
        if !seen.insert((row.hostname.clone(), row.interface.clone())) {
            return Err(ApiError::bad_request(format!("items[{i}]: {} {} is listed twice", row.hostname, row.interface)));
        }
        out.push(row);
    }
    Ok(out)
}

/// `POST /v1/maas/sites/{site}/roce-assignments` (admin): all rows or none.
pub async fn upsert_roce(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    Path(key): Path<String>,
    JsonBody(req): JsonBody<RoceUpsertRequest>,
) -> Result<Json<RoceUpsert>, ApiError> {
    let reason = reason_or_default(req.reason.as_deref())?;
    let rows = check_roce(&req.items)?;
    let site = load_site(&app, &key).await?;
    let log = change_log(&op, &app, "maas.roce.upserted", &site, &site.id.to_string(), &reason, json!({ "rows": rows.len() }));
    let (site_id, at) = (site.id, app.clock.now());
    let r = store::blocking(app.store.clone(), move |s| s.upsert_roce(site_id, &rows, at, &log)).await?;
    Ok(Json(RoceUpsert { site_id: site.id.to_string(), created: r.created, updated: r.updated, unchanged: r.unchanged }))
}

/// `GET …/roce-assignments` query.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoceQuery {
    #[serde(default)]
    hostname: Option<String>,
}

/// `GET /v1/maas/sites/{site}/roce-assignments` (viewer).
pub async fn list_roce(
    State(app): State<Arc<AppState>>,
    Reader(_): Reader,
    Path(key): Path<String>,
    Query(q): Query<RoceQuery>,
) -> Result<Json<Items<RoceView>>, ApiError> {
    let site = load_site(&app, &key).await?;
    let host = q.hostname.as_deref().map(|h| validate::hostname("hostname", h)).transpose()?;
    let rows = store::blocking(app.store.clone(), move |s| s.list_roce(site.id, host.as_deref())).await?;
    let items: Vec<RoceView> = rows
        .iter()
        .map(|r| RoceView {
            id: r.id.to_string(),
            hostname: r.hostname.clone(),
            interface: r.interface.clone(),
            ipv4_cidr: r.ipv4_cidr.clone(),
            created_at: Some(r.created_at),
            updated_at: Some(r.updated_at),
        })
        .collect();
    Ok(Json(Items { items }))
}

/// `DELETE /v1/maas/sites/{site}/roce-assignments/{id}` (admin).
pub async fn delete_roce(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    Path((key, id)): Path<(String, String)>,
) -> Result<Json<RoceView>, ApiError> {
    let rid = Uuid::parse_str(id.trim()).map_err(|_| ApiError::bad_request(format!("assignment id {id:?} is not a UUID")))?;
    let site = load_site(&app, &key).await?;
    let log = change_log(&op, &app, "maas.roce.deleted", &site, &rid.to_string(), "(no reason given)", json!({ "assignmentId": rid }));
    let site_id = site.id;
    let r = store::blocking(app.store.clone(), move |s| s.delete_roce(site_id, rid, &log)).await.map_err(|e| match e {
        StoreError::NotFound { .. } => ApiError::not_found(format!("site {} has no RoCE assignment {rid}", site.name)),
        other => other.into(),
    })?;
    Ok(Json(RoceView {
        id: r.id.to_string(),
        hostname: r.hostname,
        interface: r.interface,
        ipv4_cidr: r.ipv4_cidr,
        created_at: None,
        updated_at: None,
    }))
}
