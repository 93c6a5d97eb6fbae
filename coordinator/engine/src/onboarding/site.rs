//! What an onboarding step needs of its site: the site and profile by name, a MAAS client
//! with the site's API token (read from the secret store at each tick, never kept), and the
//! mapping of MAAS errors onto the failure classes of §4.7.

use std::sync::Arc;
use std::time::Duration;

use drover_maas::{ClientConfig, ErrorClass, MaasClient, MaasError};

use crate::app::AppState;
use crate::maasflow::onboard::OnboardingRequest;
use crate::maasflow::taxonomy::MaasFailureClass;
use crate::secrets::{SecretPath, SecretValue};
use crate::store::{self, Profile, Site, SiteStatus};

/// A failure with its class, as every step reports one.
pub type Failure = (MaasFailureClass, String);

/// The site an onboarding runs against, ready to call.
pub struct SiteCtx {
    /// The site.
    pub site: Site,
    /// The profile in force.
    pub profile: Profile,
    /// A client with the site's API token.
    pub client: MaasClient,
}

/// The class of a MAAS error (§4.7): unreachable or 5xx is transient; a refused token or an
/// unusable URL is the site's configuration; a machine gone or a state MAAS refuses means
/// MAAS changed under the workflow.
pub fn class_of(e: &MaasError) -> MaasFailureClass {
    match e.class() {
        ErrorClass::Transient | ErrorClass::Protocol => MaasFailureClass::UpstreamTransient,
        ErrorClass::Credentials | ErrorClass::Config | ErrorClass::BadRequest => MaasFailureClass::InputConfigError,
        ErrorClass::Gone | ErrorClass::IllegalState => MaasFailureClass::StateAmbiguity,
    }
}

/// A MAAS error as a failure.
pub fn maas_failure(what: &str, e: &MaasError) -> Failure {
    (class_of(e), format!("{what}: {e}"))
}

/// Reads one field of a secret; absent is `InputConfigError` naming the path, a backend that
/// does not answer is transient.
pub async fn read_secret(app: &Arc<AppState>, path: &str, field: &str, what: &str) -> Result<String, Failure> {
    let p = SecretPath::new(path).map_err(|e| (MaasFailureClass::InputConfigError, format!("{what}: bad secret path: {e}")))?;
    let value: Option<SecretValue> = match app.secrets.read(&p).await {
        Ok(v) => v,
        Err(e) if e.is_transient() => return Err((MaasFailureClass::UpstreamTransient, format!("the secret store is unavailable: {e}"))),
        Err(e) => return Err((MaasFailureClass::InputConfigError, format!("{what} cannot be read: {e}"))),
    };
    value
        .and_then(|v| v.get(field).map(str::to_owned))
        .filter(|v| !v.is_empty())
        .ok_or_else(|| (MaasFailureClass::InputConfigError, format!("{what} is not set in the secret store")))
}

/// Loads the site and profile by name and builds a client with the site's token.
pub async fn load(app: &Arc<AppState>, req: &OnboardingRequest) -> Result<SiteCtx, Failure> {
    let transient = |e: store::StoreError| (MaasFailureClass::UpstreamTransient, format!("the coordinator's store failed: {e}"));
    let name = req.site.clone();
    let site = store::blocking(app.store.clone(), move |s| s.get_site_by_name(&name))
        .await
        .map_err(transient)?
        .ok_or_else(|| (MaasFailureClass::InputConfigError, format!("site {} does not exist", req.site)))?;
    if site.status != SiteStatus::Active {
        return Err((MaasFailureClass::InputConfigError, format!("site {} is {}", site.name, site.status.as_str())));
    }
    let site_id = site.id;
    let profiles = store::blocking(app.store.clone(), move |s| s.list_profiles(site_id)).await.map_err(transient)?;
    let profile = profiles
        .into_iter()
        .find(|p| p.name == req.profile)
        .ok_or_else(|| (MaasFailureClass::InputConfigError, format!("site {} has no profile {}", site.name, req.profile)))?;
    if profile.status != SiteStatus::Active {
        return Err((MaasFailureClass::InputConfigError, format!("profile {} is {}", profile.name, profile.status.as_str())));
    }
    let client = client(app, &site).await?;
    Ok(SiteCtx { site, profile, client })
}

/// A client for the site's MAAS with its API token, read from the secret store now.
pub async fn client(app: &Arc<AppState>, site: &Site) -> Result<MaasClient, Failure> {
    let token = read_secret(app, &site.secrets.api_token_path, "token", &format!("site {}'s MAAS API token", site.name)).await?;
    let api_key =
        token.parse().map_err(|e: MaasError| (MaasFailureClass::InputConfigError, format!("site {}'s MAAS API token: {e}", site.name)))?;
    let config = ClientConfig {
        base_url: site.config.api_base_url.clone(),
        api_key,
        timeout: Duration::from_secs(app.config.maas.call_timeout_secs),
        ca_pem: site.config.maas_ca_pem.as_ref().map(|p| p.as_bytes().to_vec()),
        retries: 1,
    };
    MaasClient::new(config).map_err(|e| maas_failure(&format!("site {}'s MAAS", site.name), &e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_token_is_the_sites_configuration() {
        let e = MaasError::BadApiKey { reason: "not three parts".into() };
        assert_eq!(class_of(&e), MaasFailureClass::InputConfigError);
    }
}
