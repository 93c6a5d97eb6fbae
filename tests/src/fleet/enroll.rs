//! Enrolling the simulated fleet the way a real host enrolls, minus the shell: an admin
//! creates each host (`POST /v1/hosts`, which answers a one-time token), then the "host" makes
//! its own P-256 key, sends a CSR with the token (`POST /v1/enroll`, no client certificate)
//! and keeps the certificate it is given. Many at once, over a handful of connections.

use std::sync::Arc;

use drover_client::{ClientIdentity, CoordinatorClient};
use drover_proto::enroll::{CreateHostRequest, CreateHostResponse, EnrollRequest, EnrollResponse};
use rustls::pki_types::CertificateDer;
use uuid::Uuid;

use super::FleetError;

/// One enrolled host's credentials.
#[derive(Clone)]
pub struct Enrolled {
    /// Its name.
    pub hostname: String,
    /// Its id.
    pub host_id: Uuid,
    /// Its certificate and key, ready for a client.
    pub identity: ClientIdentityPem,
}

/// A certificate and key as PEM text (a [`ClientIdentity`] is made from them per connection).
#[derive(Clone)]
pub struct ClientIdentityPem {
    /// The certificate.
    pub cert_pem: String,
    /// The PKCS#8 key.
    pub key_pem: String,
}

impl ClientIdentityPem {
    /// The parsed identity.
    pub fn identity(&self) -> Result<ClientIdentity, FleetError> {
        ClientIdentity::from_pem(self.cert_pem.as_bytes(), self.key_pem.as_bytes()).map_err(FleetError::client("host credential"))
    }
}

/// What every enrollment answered alike: the director's public key and the CA.
pub struct Anchors {
    /// The director key (PEM), which signs intents and tasks.
    pub director_pem: String,
}

/// Creates and enrolls `hostnames` on the coordinator at `url`, `concurrency` at a time, the
/// admin presenting `admin`; hosts are created for the trust file whose sha256 is
/// `trust_sha256`.
pub async fn enroll_all(
    url: &str,
    ca: &[CertificateDer<'static>],
    admin: ClientIdentity,
    trust_sha256: &str,
    hostnames: &[String],
    concurrency: usize,
) -> Result<(Vec<Enrolled>, Anchors), FleetError> {
    let timeout = std::time::Duration::from_secs(60);
    let urls = [url.to_owned()];
    let admin = CoordinatorClient::new("drover-bench", &urls, ca, Some(admin), timeout).map_err(FleetError::client("admin client"))?;
    let anonymous = CoordinatorClient::new("drover-bench", &urls, ca, None, timeout).map_err(FleetError::client("enrollment client"))?;
    let permits = Arc::new(tokio::sync::Semaphore::new(concurrency.max(1)));
    let mut set = tokio::task::JoinSet::new();
    for (i, hostname) in hostnames.iter().enumerate() {
        let (admin, anonymous, permits) = (admin.clone(), anonymous.clone(), permits.clone());
        let (hostname, trust_sha256) = (hostname.clone(), trust_sha256.to_owned());
        set.spawn(async move {
            let _permit = permits.acquire_owned().await.map_err(|e| FleetError::Setup(e.to_string()))?;
            enroll_one(&admin, &anonymous, &hostname, &trust_sha256).await.map(|r| (i, r))
        });
    }
    let mut out: Vec<Option<(Enrolled, String)>> = vec![None; hostnames.len()];
    while let Some(joined) = set.join_next().await {
        let (i, r) = joined.map_err(|e| FleetError::Setup(format!("enrollment task: {e}")))??;
        out[i] = Some(r);
    }
    let mut director = None;
    let mut enrolled = Vec::with_capacity(out.len());
    for (e, d) in out.into_iter().flatten() {
        director.get_or_insert(d);
        enrolled.push(e);
    }
    let director_pem = director.ok_or_else(|| FleetError::Setup("no host enrolled".into()))?;
    Ok((enrolled, Anchors { director_pem }))
}

/// One host: created, then enrolled with a fresh key. Returns its credentials and the
/// director key the coordinator answered.
async fn enroll_one(
    admin: &CoordinatorClient,
    anonymous: &CoordinatorClient,
    hostname: &str,
    trust_sha256: &str,
) -> Result<(Enrolled, String), FleetError> {
    let create = CreateHostRequest { hostname: hostname.to_owned(), trust_sha256: trust_sha256.to_owned(), token_ttl_secs: None };
    let created: CreateHostResponse =
        admin.post_json("/v1/hosts", &create).await.map_err(FleetError::client(format!("create {hostname}")))?;
    let key = rcgen::KeyPair::generate().map_err(|e| FleetError::Setup(format!("key for {hostname}: {e}")))?;
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(|e| FleetError::Setup(e.to_string()))?;
    params.distinguished_name.push(rcgen::DnType::CommonName, hostname);
    let csr = params.serialize_request(&key).and_then(|r| r.pem()).map_err(|e| FleetError::Setup(format!("csr for {hostname}: {e}")))?;
    let request = EnrollRequest { host_id: created.host_id.clone(), token: created.token, csr, seal_key: None, evidence_csr: None };
    let answer: EnrollResponse =
        anonymous.post_json("/v1/enroll", &request).await.map_err(FleetError::client(format!("enroll {hostname}")))?;
    let host_id = Uuid::parse_str(&answer.host_id).map_err(|e| FleetError::Setup(format!("{hostname}: host id {e}")))?;
    let identity = ClientIdentityPem { cert_pem: answer.certificate, key_pem: key.serialize_pem() };
    Ok((Enrolled { hostname: answer.hostname, host_id, identity }, answer.director_public_key))
}
