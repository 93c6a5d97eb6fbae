//! MAAS sites over the API (`bare-metal-lifecycle.md` §3.4, §3.5): `/v1/maas/sites…`.
//!
//! | route | role | what |
//! |---|---|---|
//! | `POST /v1/maas/sites` | admin | create a site (non-secret fields) and its default profile |
//! | `GET /v1/maas/sites`, `GET /v1/maas/sites/{site}` | viewer | list, read |
//! | `PATCH /v1/maas/sites/{site}` | admin | change fields, status, default profile |
//! | `DELETE /v1/maas/sites/{site}` | admin | disable (a soft delete: rows and history stay) |
//! | `POST /v1/maas/sites/{site}/disable`, `/enable` | admin | refuse or take new work again |
//! | `POST /v1/maas/sites/{site}/credentials` | admin | probe MAAS with a new token, then write secrets |
//! | `POST /v1/maas/sites/{site}/probe` | admin | MAAS reachable, token valid: version, rack controllers |
//! | `POST /v1/maas/sites/{site}/preflight` | admin | the §4.14 preflight a workflow runs |
//!
//! `{site}` is the site's id or its name: the id is tried first, and no site or profile may be
//! named like an id, so a key never has two answers. Secrets go in through the credentials route and
//! never come out: answers, events and audit records carry secret *paths* and when each was
//! written. A credential write whose token MAAS refuses, or whose MAAS does not answer, is a
//! 422 and writes nothing. Profiles, overrides and RoCE assignments are in [`super::site_items`].

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

pub use drover_proto::api::sites::{Items, PreflightAnswer, ProbeAnswer, SecretRef, SiteCredentials, SiteView};

use crate::api::auth::{Admin, OperatorCaller, Reader};
use crate::api::error::{ApiError, JsonBody};
use crate::app::AppState;
use crate::secrets::{SecretError, SecretPath, SecretValue};
use crate::sites::preflight;
use crate::sites::probe::{ProbeError, ProbeTarget};
use crate::sites::validate::{self, FieldError};
use crate::store::{self, ChangeLog, NewAudit, NewEvent, Profile, ProfilePolicy, Site, SiteConfig, SiteStatus, StoreError};

/// Bound on each MAAS call a request makes (probe, credential check, preflight).
pub const MAAS_CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// How often a read-modify-write of a site is retried when another writer got there first.
const CAS_ATTEMPTS: usize = 5;

impl From<FieldError> for ApiError {
    fn from(e: FieldError) -> Self {
        ApiError::bad_request(e.to_string())
    }
}

/// A secret-store failure as an answer: unavailable → 503 (nothing was changed), anything
/// else → 500 with the detail in the log. Neither carries a value.
pub fn secret_error(e: SecretError) -> ApiError {
    if e.is_transient() {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "secret_store_unavailable", format!("the secret store is unavailable: {e}"))
    } else {
        tracing::error!(error = %e, "secret store failure");
        ApiError::internal()
    }
}

/// A JSON body that may be absent (empty): the type's default then. A present body is
/// parsed strictly, as [`JsonBody`]'s is (an object, never a positional array), and a refusal
/// names the field.
pub fn optional_json<T: serde::de::DeserializeOwned + Default>(body: &[u8]) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    crate::api::strict_json::from_slice(body).map_err(|e| ApiError::bad_request(e.to_string()))
}

/// The optional reason of a site change, checked like every other reason.
pub fn reason_or_default(reason: Option<&str>) -> Result<String, ApiError> {
    match reason.map(str::trim).filter(|r| !r.is_empty()) {
        None => Ok("(no reason given)".to_owned()),
        Some(r) => crate::api::lifecycle::check_reason(Some(r)),
    }
}

/// The event and audit record of a site change.
pub fn change_log(op: &OperatorCaller, app: &AppState, kind: &str, site: &Site, target: &str, reason: &str, data: Value) -> ChangeLog {
    let at = app.clock.now();
    let mut data = data;
    if let Value::Object(m) = &mut data {
        m.insert("siteId".into(), json!(site.id));
        m.insert("site".into(), json!(site.name));
    }
    ChangeLog {
        event: NewEvent {
            at,
            kind: kind.to_owned(),
            host_id: None,
            rollout_id: None,
            job_id: None,
            message: format!("{kind} {} by {}: {reason}", site.name, op.name),
            data,
        },
        audit: NewAudit {
            at,
            actor: op.name.clone(),
            role: op.role.as_str().to_owned(),
            action: kind.to_owned(),
            target: target.to_owned(),
            reason: reason.to_owned(),
            prior_state: Some(site.status.as_str().to_owned()),
            expected_state: None,
        },
    }
}

/// The API's JSON of a site: its fields, status, default profile and secret paths with when
/// each was written — never a secret value.
pub fn site_view(site: &Site) -> SiteView {
    let s = &site.secrets;
    let secret = |path: &str, at: Option<i64>| SecretRef {
        path: path.to_owned(),
        set_at: at.and_then(|t| drover_proto::time::Time::from_unix(t).ok()),
    };
    SiteView {
        config: site.config.clone(),
        id: site.id.to_string(),
        name: site.name.clone(),
        status: site.status,
        default_profile_id: site.default_profile_id.to_string(),
        credentials: SiteCredentials {
            api_token: secret(&s.api_token_path, s.api_token_set_at),
            default_power: secret(&s.default_power_path, s.default_power_set_at),
            deploy_password: secret(&s.deploy_password_path, s.deploy_password_set_at),
        },
        revision: site.revision,
        created_at: site.created_at,
        updated_at: site.updated_at,
    }
}

/// The site named by `key`: its id, or its name. A key that parses as an id is only ever
/// that id (no fallback to a site of that name), and no site may be named like one
/// ([`object_name`]).
pub async fn load_site(app: &Arc<AppState>, key: &str) -> Result<Site, ApiError> {
    let key = key.trim().to_owned();
    let found = match drover_proto::names::as_id(&key) {
        Some(id) => store::blocking(app.store.clone(), move |s| s.get_site(id)).await?,
        None => {
            let name = key.clone();
            store::blocking(app.store.clone(), move |s| s.get_site_by_name(&name)).await?
        }
    };
    found.ok_or_else(|| ApiError::not_found(format!("site {key:?} not found")))
}

/// A site's or profile's name (`what` says which): [`validate::name`]'s alphabet, and not an
/// id ([`drover_proto::names::check_not_an_id`]), since `{site}` and `{profile}` are tried as
/// ids first.
pub fn object_name(field: &str, what: &'static str, v: &str) -> Result<String, ApiError> {
    let name = validate::name(field, v)?;
    drover_proto::names::check_not_an_id(what, &name)?;
    Ok(name)
}

/// Reads the site, applies `change`, and writes it back under compare-and-set, retrying when
/// another writer changed the site in between. `change` returns `None` when nothing changes.
pub async fn modify_site(
    app: &Arc<AppState>,
    key: &str,
    change: impl Fn(&Site) -> Result<Option<(Site, ChangeLog)>, ApiError>,
) -> Result<Site, ApiError> {
    for _ in 0..CAS_ATTEMPTS {
        let current = load_site(app, key).await?;
        let Some((next, log)) = change(&current)? else { return Ok(current) };
        let revision = current.revision;
        match store::blocking(app.store.clone(), move |s| s.update_site(&next, revision, &log)).await {
            Err(StoreError::StaleState { .. }) => continue,
            other => return Ok(other?),
        }
    }
    Err(ApiError::conflict(format!("site {key:?} kept changing under this update; try again")))
}

fn default_deploy_user() -> String {
    "hpcadmin".into()
}

fn default_dns() -> Vec<String> {
    vec!["1.1.1.1".into(), "8.8.8.8".into()]
}

/// `POST /v1/maas/sites` body.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateSite {
    name: String,
    region_code: String,
    api_base_url: String,
    pxe_iface: String,
    pxe_vlan_vid: u16,
    node_pxe_iface: String,
    #[serde(default = "default_deploy_user")]
    deploy_user: String,
    #[serde(default)]
    deploy_ssh_iface: Option<String>,
    #[serde(default = "default_dns")]
    upstream_dns_servers: Vec<String>,
    #[serde(default)]
    maas_ca_pem: Option<String>,
    #[serde(default)]
    required_capabilities: Vec<String>,
    /// Name of the default profile (`default`).
    #[serde(default)]
    default_profile_name: Option<String>,
    /// The default profile's policy; unset fields take the seed's defaults.
    #[serde(default)]
    default_profile: Option<ProfilePolicy>,
    #[serde(default)]
    reason: Option<String>,
}

/// `POST /v1/maas/sites` (admin): 201 with the site.
pub async fn create(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    JsonBody(req): JsonBody<CreateSite>,
) -> Result<(StatusCode, Json<SiteView>), ApiError> {
    let reason = reason_or_default(req.reason.as_deref())?;
    let name = object_name("name", "site name", &req.name)?;
    let config = validate::site_config(&SiteConfig {
        region_code: req.region_code,
        api_base_url: req.api_base_url,
        pxe_iface: req.pxe_iface,
        pxe_vlan_vid: req.pxe_vlan_vid,
        deploy_ssh_iface: req.deploy_ssh_iface.unwrap_or_else(|| req.node_pxe_iface.clone()),
        node_pxe_iface: req.node_pxe_iface,
        deploy_user: req.deploy_user,
        upstream_dns_servers: req.upstream_dns_servers,
        maas_ca_pem: req.maas_ca_pem,
        required_capabilities: req.required_capabilities,
    })?;
    let policy = validate::policy(&req.default_profile.unwrap_or_default())?;
    let profile_name = object_name("defaultProfileName", "profile name", req.default_profile_name.as_deref().unwrap_or("default"))?;
    let now = app.clock.now();
    let id = Uuid::new_v4();
    let profile_id = Uuid::new_v4();
    let site = Site {
        id,
        name,
        status: SiteStatus::Active,
        config,
        default_profile_id: profile_id,
        secrets: crate::sites::secret_paths(id),
        revision: 1,
        created_at: now,
        updated_at: now,
    };
    let profile = Profile {
        id: profile_id,
        site_id: id,
        name: profile_name,
        description: Some("created with the site".into()),
        status: SiteStatus::Active,
        policy,
        revision: 1,
        created_at: now,
        updated_at: now,
    };
    let log = change_log(&op, &app, "maas.site.created", &site, &id.to_string(), &reason, json!({ "defaultProfileId": profile_id }));
    let stored = store::blocking(app.store.clone(), move |s| s.create_site(&site, &profile, &log)).await?;
    Ok((StatusCode::CREATED, Json(site_view(&stored))))
}

/// `GET /v1/maas/sites` (viewer).
pub async fn list(State(app): State<Arc<AppState>>, Reader(_): Reader) -> Result<Json<Items<SiteView>>, ApiError> {
    let sites = store::blocking(app.store.clone(), |s| s.list_sites()).await?;
    Ok(Json(Items { items: sites.iter().map(site_view).collect() }))
}

/// `GET /v1/maas/sites/{site}` (viewer).
pub async fn get(State(app): State<Arc<AppState>>, Reader(_): Reader, Path(key): Path<String>) -> Result<Json<SiteView>, ApiError> {
    Ok(Json(site_view(&load_site(&app, &key).await?)))
}

/// `PATCH /v1/maas/sites/{site}` body: every field optional; `maasCaPem: null` clears it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PatchSite {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    status: Option<SiteStatus>,
    #[serde(default)]
    region_code: Option<String>,
    #[serde(default)]
    api_base_url: Option<String>,
    #[serde(default)]
    pxe_iface: Option<String>,
    #[serde(default)]
    pxe_vlan_vid: Option<u16>,
    #[serde(default)]
    node_pxe_iface: Option<String>,
    #[serde(default)]
    deploy_user: Option<String>,
    #[serde(default)]
    deploy_ssh_iface: Option<String>,
    #[serde(default)]
    upstream_dns_servers: Option<Vec<String>>,
    #[serde(default)]
    maas_ca_pem: Option<Value>,
    #[serde(default)]
    required_capabilities: Option<Vec<String>>,
    /// A profile of this site, by id or name.
    #[serde(default)]
    default_profile: Option<String>,
    #[serde(default)]
    reason: Option<String>,
}

/// `PATCH /v1/maas/sites/{site}` (admin).
pub async fn patch(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    Path(key): Path<String>,
    JsonBody(req): JsonBody<PatchSite>,
) -> Result<Json<SiteView>, ApiError> {
    let reason = reason_or_default(req.reason.as_deref())?;
    let ca = match &req.maas_ca_pem {
        None => None,
        Some(Value::Null) => Some(None),
        Some(Value::String(p)) => Some(Some(p.clone())),
        Some(_) => return Err(ApiError::bad_request("maasCaPem: must be a PEM string or null")),
    };
    let default_profile = match &req.default_profile {
        None => None,
        Some(p) => {
            let site = load_site(&app, &key).await?;
            Some(crate::api::site_items::load_profile(&app, &site, p).await?.id)
        }
    };
    let site = modify_site(&app, &key, |current| {
        let mut next = current.clone();
        let c = &mut next.config;
        if let Some(v) = &req.name {
            next.name = object_name("name", "site name", v)?;
        }
        if let Some(v) = req.status {
            next.status = v;
        }
        macro_rules! set {
            ($($field:ident),*) => { $( if let Some(v) = &req.$field { c.$field = v.clone(); } )* };
        }
        set!(
            region_code,
            api_base_url,
            pxe_iface,
            pxe_vlan_vid,
            node_pxe_iface,
            deploy_user,
            deploy_ssh_iface,
            upstream_dns_servers,
            required_capabilities
        );
        if let Some(v) = &ca {
            c.maas_ca_pem = v.clone();
        }
        next.config = validate::site_config(&next.config)?;
        if let Some(p) = default_profile {
            next.default_profile_id = p;
        }
        if next == *current {
            return Ok(None);
        }
        next.updated_at = app.clock.now();
        let kind = match (current.status, next.status) {
            (SiteStatus::Active, SiteStatus::Disabled) => "maas.site.disabled",
            (SiteStatus::Disabled, SiteStatus::Active) => "maas.site.enabled",
            _ => "maas.site.updated",
        };
        let log = change_log(&op, &app, kind, current, &current.id.to_string(), &reason, json!({ "status": next.status }));
        Ok(Some((next, log)))
    })
    .await?;
    Ok(Json(site_view(&site)))
}

/// `POST /v1/maas/sites/{site}/disable|enable` body.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StatusChange {
    #[serde(default)]
    reason: Option<String>,
}

async fn set_status(
    app: Arc<AppState>,
    op: OperatorCaller,
    key: String,
    to: SiteStatus,
    reason: Option<String>,
) -> Result<Json<SiteView>, ApiError> {
    let reason = reason_or_default(reason.as_deref())?;
    let kind = if to == SiteStatus::Disabled { "maas.site.disabled" } else { "maas.site.enabled" };
    let site = modify_site(&app, &key, |current| {
        if current.status == to {
            return Ok(None);
        }
        let mut next = current.clone();
        next.status = to;
        next.updated_at = app.clock.now();
        let log = change_log(&op, &app, kind, current, &current.id.to_string(), &reason, json!({ "status": to }));
        Ok(Some((next, log)))
    })
    .await?;
    Ok(Json(site_view(&site)))
}

/// `POST /v1/maas/sites/{site}/disable` (admin): new work is refused, running work finishes.
pub async fn disable(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    Path(key): Path<String>,
    body: axum::body::Bytes,
) -> Result<Json<SiteView>, ApiError> {
    set_status(app, op, key, SiteStatus::Disabled, optional_json::<StatusChange>(&body)?.reason).await
}

/// `POST /v1/maas/sites/{site}/enable` (admin).
pub async fn enable(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    Path(key): Path<String>,
    body: axum::body::Bytes,
) -> Result<Json<SiteView>, ApiError> {
    set_status(app, op, key, SiteStatus::Active, optional_json::<StatusChange>(&body)?.reason).await
}

/// `DELETE /v1/maas/sites/{site}` (admin): the soft delete of §3.4 — the site is disabled.
pub async fn delete(State(app): State<Arc<AppState>>, Admin(op): Admin, Path(key): Path<String>) -> Result<Json<SiteView>, ApiError> {
    set_status(app, op, key, SiteStatus::Disabled, Some("deleted (soft: disabled)".into())).await
}

/// BMC credentials as the API takes them.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PowerCredentials {
    /// BMC user.
    pub user: String,
    /// BMC password.
    pub pass: String,
}

impl std::fmt::Debug for PowerCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PowerCredentials").field("user", &self.user).field("pass", &"<redacted>").finish()
    }
}

impl PowerCredentials {
    /// Checked and turned into the stored shape `{"user","pass"}`.
    pub fn to_secret(&self, field: &str) -> Result<SecretValue, ApiError> {
        let user = self.user.trim();
        if user.is_empty() || user.len() > 128 || user.chars().any(char::is_control) {
            return Err(ApiError::bad_request(format!("{field}.user: must be 1-128 characters without control characters")));
        }
        if self.pass.is_empty() || self.pass.len() > 1024 {
            return Err(ApiError::bad_request(format!("{field}.pass: must be 1-1024 characters")));
        }
        Ok(SecretValue::from_pairs([("user", user.to_owned()), ("pass", self.pass.clone())]))
    }
}

/// `POST /v1/maas/sites/{site}/credentials` body: any of the three.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Credentials {
    #[serde(default)]
    api_token: Option<String>,
    #[serde(default)]
    default_power: Option<PowerCredentials>,
    #[serde(default)]
    deploy_password: Option<String>,
    #[serde(default)]
    reason: Option<String>,
}

/// A MAAS API key's shape: three non-empty colon-separated parts. Refusals never echo it.
pub fn check_api_token(token: &str) -> Result<String, ApiError> {
    let token = token.trim();
    let parts: Vec<&str> = token.split(':').collect();
    if parts.len() != 3 || parts.iter().any(|p| p.is_empty() || p.chars().any(|c| c.is_whitespace() || c.is_control())) || token.len() > 512
    {
        return Err(ApiError::bad_request("apiToken: must be MAAS's API key, consumer_key:token_key:token_secret"));
    }
    Ok(token.to_owned())
}

fn unprocessable(code: &'static str, message: String) -> ApiError {
    ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, code, message)
}

/// A stored secret path as the secret store takes it; a stored path that does not parse is
/// the coordinator's own fault (500, logged).
pub fn secret_path(p: &str) -> Result<SecretPath, ApiError> {
    SecretPath::new(p).map_err(|e| {
        tracing::error!(error = %e, "a stored secret path is invalid");
        ApiError::internal()
    })
}

/// `POST /v1/maas/sites/{site}/credentials` (admin): a new API token is first checked against
/// MAAS (reachable, token accepted — 422 and nothing written otherwise); then every given
/// secret is written to the secret store and the site records when.
pub async fn credentials(
    State(app): State<Arc<AppState>>,
    Admin(op): Admin,
    Path(key): Path<String>,
    JsonBody(req): JsonBody<Credentials>,
) -> Result<Json<SiteView>, ApiError> {
    let reason = reason_or_default(req.reason.as_deref())?;
    let token = req.api_token.as_deref().map(check_api_token).transpose()?;
    let power = req.default_power.as_ref().map(|p| p.to_secret("defaultPower")).transpose()?;
    let deploy = match &req.deploy_password {
        Some(p) if p.is_empty() || p.len() > 1024 => return Err(ApiError::bad_request("deployPassword: must be 1-1024 characters")),
        Some(p) => Some(SecretValue::from_pairs([("password", p.clone())])),
        None => None,
    };
    if token.is_none() && power.is_none() && deploy.is_none() {
        return Err(ApiError::bad_request("nothing to write: give apiToken, defaultPower and/or deployPassword"));
    }
    let site = load_site(&app, &key).await?;
    if let Some(token) = &token {
        match app.maas.probe(ProbeTarget::for_site(&site, token, MAAS_CALL_TIMEOUT)).await {
            Ok(_) => {}
            Err(e @ ProbeError::CredentialsRefused { .. }) => {
                return Err(unprocessable("maas_token_refused", format!("{e}; nothing was written")));
            }
            Err(e) => return Err(unprocessable("maas_unreachable", format!("{e}; nothing was written"))),
        }
    }
    let mut written = Vec::new();
    for (name, path, value) in [
        ("apiToken", &site.secrets.api_token_path, token.map(|t| SecretValue::from_pairs([("token", t)]))),
        ("defaultPower", &site.secrets.default_power_path, power),
        ("deployPassword", &site.secrets.deploy_password_path, deploy),
    ] {
        let Some(value) = value else { continue };
        app.secrets.write(&secret_path(path)?, &value).await.map_err(secret_error)?;
        written.push(name);
    }
    let now = app.clock.now().unix();
    let site = modify_site(&app, &site.id.to_string(), |current| {
        let mut next = current.clone();
        for name in &written {
            match *name {
                "apiToken" => next.secrets.api_token_set_at = Some(now),
                "defaultPower" => next.secrets.default_power_set_at = Some(now),
                _ => next.secrets.deploy_password_set_at = Some(now),
            }
        }
        next.updated_at = app.clock.now();
        let log = change_log(&op, &app, "maas.site.credentials", current, &current.id.to_string(), &reason, json!({ "written": written }));
        Ok(Some((next, log)))
    })
    .await?;
    Ok(Json(site_view(&site)))
}

/// `POST /v1/maas/sites/{site}/probe` (admin): reads the token from the secret store now and
/// asks MAAS for its version and rack controllers ([`preflight::probe_site`]). 200 either
/// way; `ok` says which, and a failure carries its preflight class.
pub async fn probe(State(app): State<Arc<AppState>>, Admin(_): Admin, Path(key): Path<String>) -> Result<Json<ProbeAnswer>, ApiError> {
    let site = load_site(&app, &key).await?;
    let (report, failure) = match preflight::probe_site(&*app.secrets, &*app.maas, &site, MAAS_CALL_TIMEOUT).await {
        Ok(report) => (Some(report), None),
        Err(failure) => (None, Some(failure.view())),
    };
    Ok(Json(ProbeAnswer {
        site_id: site.id.to_string(),
        site: site.name.clone(),
        ok: report.is_some(),
        api_base_url: report.as_ref().map(|_| site.config.api_base_url.clone()),
        report,
        failure,
    }))
}

/// `POST /v1/maas/sites/{site}/preflight` body.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PreflightRequest {
    /// A profile of the site by id or name; the default profile when absent.
    #[serde(default)]
    profile: Option<String>,
    /// Capabilities the workflow needs on top of the site's.
    #[serde(default)]
    capabilities: Vec<String>,
}

/// `POST /v1/maas/sites/{site}/preflight` (admin): 200 with `ok` and, on failure, its class.
pub async fn run_preflight(
    State(app): State<Arc<AppState>>,
    Admin(_): Admin,
    Path(key): Path<String>,
    body: axum::body::Bytes,
) -> Result<Json<PreflightAnswer>, ApiError> {
    let req: PreflightRequest = optional_json(&body)?;
    let site = load_site(&app, &key).await?;
    let profile_id = match &req.profile {
        Some(p) => Some(crate::api::site_items::load_profile(&app, &site, p).await?.id),
        None => None,
    };
    let needed: Vec<&str> = req.capabilities.iter().map(String::as_str).collect();
    let result = preflight::preflight(app.store.clone(), &*app.secrets, &*app.maas, site.id, profile_id, &needed, MAAS_CALL_TIMEOUT).await;
    Ok(Json(match result {
        Ok(p) => PreflightAnswer {
            site_id: p.site.id.to_string(),
            ok: true,
            profile_id: Some(p.profile.id.to_string()),
            profile: Some(p.profile.name),
            maas: Some(p.maas),
            failure: None,
        },
        Err(failure) => PreflightAnswer {
            site_id: site.id.to_string(),
            ok: false,
            profile_id: None,
            profile: None,
            maas: None,
            failure: Some(failure.view()),
        },
    }))
}
