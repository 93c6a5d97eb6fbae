//! The operator's connection to the coordinator's operator routes, over the shared
//! `drover-client` ([`connect`]).
//!
//! Mutual TLS, TLS 1.3 only (rustls with ring): the coordinator's certificate must chain to
//! the CA from `--ca` (no system roots), and the operator authenticates with the certificate
//! and key `drover-coordinator operator-cert` issued. Where to connect and with what comes from
//! flags, the environment or `drover`'s config file ([`ConnectArgs`], [`crate::cliconfig`]),
//! in that order of precedence. [`Session`] is one connection and one runtime for the verbs
//! that make several requests (listings that page, `describe`, `events --follow`, `--watch`).
//!
//! Errors map to sysexits ([`ClientErrorExit`]): a refused connection or a 5xx is 69 (EX_UNAVAILABLE), a 401/403 is
//! 77 (EX_NOPERM), any other 4xx is 65 (EX_DATAERR) with the server's `{"error":{"code",
//! "message"}}` message, an answer that is not the API's is 76 (EX_PROTOCOL). A certificate
//! problem is 77 too and names its file: an operator certificate outside its validity
//! (checked before connecting), a coordinator certificate that `--ca` did not sign, or a TLS
//! alert by which the coordinator refused the operator certificate.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use clap::Args;
use drover_client::rustls::pki_types::CertificateDer;
use drover_client::{ClientError, ClientIdentity, CoordinatorClient, REQUEST_TIMEOUT};

use crate::exit::{CliError, codes};
use crate::fsio::read_file;

/// The `User-Agent` `drover` sends.
/// What `drover` sends as its `User-Agent`.
pub const USER_AGENT: &str = concat!("drover/", env!("CARGO_PKG_VERSION"));

/// Where the coordinator is and the operator credentials to present, from flags, the
/// environment or the config file.
#[derive(Args, Debug, Clone, Default)]
pub struct ConnectArgs {
    /// drover's config file (TOML: coordinator, cert, key, ca); by default
    /// $XDG_CONFIG_HOME/drover/config.toml when it exists. Flags and variables win over it.
    #[arg(long, value_name = "FILE", env = "DROVER_CONFIG")]
    pub config: Option<PathBuf>,
    /// The coordinator's URL (https://HOST:PORT).
    #[arg(long, value_name = "URL", env = "DROVER_COORDINATOR")]
    pub coordinator: Option<String>,
    /// The operator certificate (PEM), from `drover-coordinator operator-cert`.
    #[arg(long, value_name = "FILE", env = "DROVER_CERT")]
    pub cert: Option<PathBuf>,
    /// The operator's private key (PEM).
    #[arg(long, value_name = "FILE", env = "DROVER_KEY")]
    pub key: Option<PathBuf>,
    /// The coordinator CA (PEM): the only root trusted for the coordinator's certificate.
    #[arg(long, value_name = "FILE", env = "DROVER_CA")]
    pub ca: Option<PathBuf>,
}

/// [`ConnectArgs`] with everything present.
#[derive(Debug, Clone)]
pub struct Target {
    /// The coordinator's base URL, without a trailing `/`.
    pub url: String,
    /// The operator certificate file.
    pub cert: PathBuf,
    /// The operator key file.
    pub key: PathBuf,
    /// The CA file.
    pub ca: PathBuf,
}

impl ConnectArgs {
    /// Fills what flags and variables left out from the config file (`--config`, else the
    /// default file when it exists and something is missing), then checks that everything is given (64, naming each
    /// missing flag and its variable) and that the URL is `https://`. Reads only the config
    /// file: the credentials are read by [`connect`].
    pub fn resolve(&self) -> Result<Target, CliError> {
        self.resolve_with(crate::cliconfig::default_path_from_env().as_deref())
    }

    /// [`ConnectArgs::resolve`] with the default config file given (tests pass `None`).
    pub fn resolve_with(&self, default_config: Option<&Path>) -> Result<Target, CliError> {
        let mut args = self.clone();
        // The default file is not even read when flags and variables give everything: a
        // broken file in the home directory must not break a fully specified command.
        let complete = self.coordinator.is_some() && self.cert.is_some() && self.key.is_some() && self.ca.is_some();
        let default_config = if complete { None } else { default_config };
        let file = crate::cliconfig::CliConfig::load(self.config.as_deref(), default_config)?;
        if let Some((_, config)) = &file {
            config.fill(&mut args.coordinator, &mut args.cert, &mut args.key, &mut args.ca);
        }
        let where_from = file.as_ref().map(|(p, _)| format!(" (config file {} read)", p.display())).unwrap_or_default();
        args.resolve_given().map_err(|e| if e.code() == codes::USAGE { CliError::usage(format!("{e}{where_from}")) } else { e })
    }

    fn resolve_given(&self) -> Result<Target, CliError> {
        let missing: Vec<&str> = [
            (self.coordinator.is_none(), "--coordinator URL (or DROVER_COORDINATOR, or `coordinator` in the config file)"),
            (self.cert.is_none(), "--cert FILE (or DROVER_CERT)"),
            (self.key.is_none(), "--key FILE (or DROVER_KEY)"),
            (self.ca.is_none(), "--ca FILE (or DROVER_CA)"),
        ]
        .into_iter()
        .filter_map(|(absent, what)| absent.then_some(what))
        .collect();
        if !missing.is_empty() {
            return Err(CliError::usage(format!("no coordinator or operator credentials given: missing {}", missing.join(", "))));
        }
        let (Some(url), Some(cert), Some(key), Some(ca)) = (&self.coordinator, &self.cert, &self.key, &self.ca) else {
            return Err(CliError::usage("missing coordinator or credentials"));
        };
        check_url(url).map_err(|why| CliError::usage(format!("--coordinator {url:?} {why}")))?;
        Ok(Target { url: url.trim_end_matches('/').to_owned(), cert: cert.clone(), key: key.clone(), ca: ca.clone() })
    }
}

fn check_url(url: &str) -> Result<(), &'static str> {
    let parsed = reqwest::Url::parse(url).map_err(|_| "is not a URL")?;
    if parsed.scheme() != "https" {
        return Err("is not an https:// URL");
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err("has no host");
    }
    if parsed.query().is_some() || parsed.fragment().is_some() || !parsed.username().is_empty() {
        return Err("must be https://HOST[:PORT][/PATH] only");
    }
    Ok(())
}

/// Reads the credentials (66 missing, 65 malformed) and builds the mTLS client for `target`.
pub fn connect(target: &Target) -> Result<CoordinatorClient, CliError> {
    let (ca, identity) = credentials(target)?;
    CoordinatorClient::new(USER_AGENT, std::slice::from_ref(&target.url), &ca, Some(identity), REQUEST_TIMEOUT)
        .map_err(|e| unusable(target, e))
}

/// The CA and the operator's identity of `target`, read and checked (a certificate outside
/// its validity is refused before any connection).
fn credentials(target: &Target) -> Result<(Vec<CertificateDer<'static>>, ClientIdentity), CliError> {
    let ca = certificates(&target.ca)?;
    let chain = certificates(&target.cert)?;
    if let Some(leaf) = chain.first() {
        check_validity(&target.cert, leaf, std::time::SystemTime::now())?;
    }
    *CREDENTIALS.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some((target.cert.clone(), target.ca.clone()));
    let key = drover_client::parse_private_key(&target.key.display().to_string(), &read_file(&target.key)?)?;
    Ok((ca, ClientIdentity { chain, key }))
}

/// A client error about `target`'s files, naming them.
fn unusable(target: &Target, e: ClientError) -> CliError {
    match e {
        ClientError::UnusableCa { message } => CliError::data(format!("{}: not a usable CA certificate: {message}", target.ca.display())),
        ClientError::UnusableIdentity { message } => CliError::data(format!(
            "{} and {} are not a usable certificate and key: {message}",
            target.cert.display(),
            target.key.display()
        )),
        other => other.into(),
    }
}

/// The TLS configuration [`connect`] uses, for a client of its own (`drover ui`'s proxy,
/// whose event stream must outlive any request deadline).
pub fn tls_for(target: &Target) -> Result<drover_client::rustls::ClientConfig, CliError> {
    let (ca, identity) = credentials(target)?;
    drover_client::tls_config(&ca, Some(identity)).map_err(|e| unusable(target, e))
}

/// The operator certificate and CA files of the last [`connect`], so that a TLS failure can
/// name them: requests fail far from `connect`, and their errors convert with `?` at call
/// sites that no longer hold the [`Target`].
static CREDENTIALS: Mutex<Option<(PathBuf, PathBuf)>> = Mutex::new(None);

/// Refuses an operator certificate outside its validity period (77) before connecting: the
/// coordinator would only answer with a bare TLS alert.
fn check_validity(file: &Path, leaf: &CertificateDer<'_>, now: std::time::SystemTime) -> Result<(), CliError> {
    let (_, cert) = x509_parser::parse_x509_certificate(leaf.as_ref())
        .map_err(|e| CliError::data(format!("{}: not an X.509 certificate: {e}", file.display())))?;
    let now = match now.duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(_) => 0,
    };
    let validity = cert.validity();
    let when = |t: &x509_parser::time::ASN1Time| t.to_rfc2822().unwrap_or_else(|_| t.to_string());
    if now > validity.not_after.timestamp() {
        return Err(CliError::new(
            codes::NO_PERM,
            format!("operator certificate {} expired at {}", file.display(), when(&validity.not_after)),
        ));
    }
    if now < validity.not_before.timestamp() {
        return Err(CliError::new(
            codes::NO_PERM,
            format!("operator certificate {} is not valid before {}", file.display(), when(&validity.not_before)),
        ));
    }
    Ok(())
}

/// One connection to the coordinator and the runtime its requests run on.
pub struct Session {
    /// The mTLS client.
    pub client: CoordinatorClient,
    /// A current-thread runtime: `drover` makes its requests one after another.
    pub runtime: tokio::runtime::Runtime,
}

impl Session {
    /// Resolves `connect`, reads the credentials and builds the runtime.
    pub fn open(connect: &ConnectArgs) -> Result<Session, CliError> {
        let target = connect.resolve()?;
        let client = self::connect(&target)?;
        Ok(Session { client, runtime: runtime()? })
    }

    /// `GET path`, decoded as the coordinator's answer type `T` (`drover_proto::api`).
    pub fn get<T: serde::de::DeserializeOwned>(&self, path: &str) -> Result<T, CliError> {
        Ok(self.runtime.block_on(self.client.get_json(path))?)
    }

    /// `POST path` with a JSON body; the answer decoded.
    pub fn post<B: serde::Serialize + ?Sized, T: serde::de::DeserializeOwned>(&self, path: &str, body: &B) -> Result<T, CliError> {
        Ok(self.runtime.block_on(self.client.post_json(path, body))?)
    }

    /// `GET path` as raw bytes.
    pub fn get_bytes(&self, path: &str) -> Result<Vec<u8>, CliError> {
        Ok(self.runtime.block_on(self.client.get_bytes(path))?)
    }
}

/// A current-thread runtime with timers and I/O.
pub fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::new(codes::SOFTWARE, format!("cannot start the async runtime: {e}")))
}

/// SIGINT, for the verbs that poll (`events --follow`, `--watch`): Ctrl-C ends them cleanly
/// (exit 0). Listened for from creation on, so a Ctrl-C pressed while a request is in flight
/// is not lost; once created, SIGINT no longer kills the process by default.
pub struct Interrupt(Option<tokio::signal::unix::Signal>);

impl Interrupt {
    /// Starts listening (on `rt`'s signal driver). Where that fails, SIGINT keeps its default
    /// action, which ends the process anyway.
    pub fn new(rt: &tokio::runtime::Runtime) -> Interrupt {
        let _guard = rt.enter();
        Interrupt(tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).ok())
    }

    /// Sleeps for `pause`; `true` when SIGINT arrived (before or during it).
    pub fn sleep(&mut self, rt: &tokio::runtime::Runtime, pause: std::time::Duration) -> bool {
        rt.block_on(async {
            match &mut self.0 {
                Some(sigint) => tokio::select! {
                    () = tokio::time::sleep(pause) => false,
                    got = sigint.recv() => got.is_some(),
                },
                None => {
                    tokio::time::sleep(pause).await;
                    false
                }
            }
        })
    }
}

/// Runs one request future to completion on a single-threaded runtime: every `drover`
/// operator verb makes one call and exits.
pub fn block_on<T>(request: impl std::future::Future<Output = Result<T, ClientError>>) -> Result<T, CliError> {
    Ok(runtime()?.block_on(request)?)
}

/// `GET path` as JSON, on a connection of its own (for a verb that makes one request).
pub fn get_once(connect: &ConnectArgs, path: &str) -> Result<serde_json::Value, CliError> {
    let target = connect.resolve()?;
    let client = self::connect(&target)?;
    block_on(client.get_json(path))
}

/// `POST path` with `body`, the answer as JSON, on a connection of its own.
pub fn post_once<B: serde::Serialize>(connect: &ConnectArgs, path: &str, body: &B) -> Result<serde_json::Value, CliError> {
    let target = connect.resolve()?;
    let client = self::connect(&target)?;
    block_on(client.post_json(path, body))
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, CliError> {
    Ok(drover_client::parse_certificates(&path.display().to_string(), &read_file(path)?)?)
}

/// How `drover` reports a [`ClientError`]: its exit code and its message.
pub trait ClientErrorExit {
    /// The exit code: 77 for 401/403, 65 for another 4xx and for unusable credentials, 76 for
    /// an answer that is not the API's, 70 for a client that cannot be built, 66 for an
    /// unreadable CA file, 69 for everything else (unreachable, 5xx).
    fn code(&self) -> u8;
    /// The message `drover` prints (the coordinator's own message for a refusal).
    fn message(&self) -> String;
}

impl ClientErrorExit for ClientError {
    fn code(&self) -> u8 {
        match self {
            ClientError::Api { status, .. } | ClientError::Http { status, .. } => match status {
                401 | 403 => codes::NO_PERM,
                400..=499 => codes::DATA,
                _ => codes::UNAVAILABLE,
            },
            ClientError::TooLarge { .. } | ClientError::Decode { .. } => codes::PROTOCOL,
            ClientError::Unreachable { attempts, .. } if attempts.iter().any(|a| tls_failure(&a.cause).is_some()) => codes::NO_PERM,
            ClientError::Transport { message, .. } if tls_failure(message).is_some() => codes::NO_PERM,
            ClientError::Unreachable { .. } | ClientError::Transport { .. } => codes::UNAVAILABLE,
            ClientError::BadPem { .. } | ClientError::UnusableCa { .. } | ClientError::UnusableIdentity { .. } => codes::DATA,
            ClientError::ReadCa { .. } => codes::NO_INPUT,
            ClientError::Setup { .. } => codes::SOFTWARE,
        }
    }

    fn message(&self) -> String {
        match self {
            ClientError::Unreachable { attempts, .. } => {
                if let Some((url, tls)) = attempts.iter().find_map(|a| tls_failure(&a.cause).map(|t| (&a.url, t))) {
                    return tls.message(url);
                }
                let tried: Vec<String> = attempts.iter().map(|a| format!("{}: {}", a.url, without_url(&a.cause))).collect();
                format!("cannot reach the coordinator at {}", tried.join("; "))
            }
            ClientError::Transport { url, message } => match tls_failure(message) {
                Some(tls) => tls.message(url),
                None => format!("{url}: {}", without_url(message)),
            },
            ClientError::Api { status, code, message, .. } => format!("coordinator refused ({status} {code}): {message}"),
            ClientError::TooLarge { url, limit } => format!("{url}: unexpected answer: answer larger than {limit} bytes"),
            ClientError::Decode { url, message, .. } => format!("{url}: unexpected answer: {message}"),
            other => other.to_string(),
        }
    }
}

/// reqwest's message names the URL it requested, which `drover` prints itself.
fn without_url(cause: &str) -> &str {
    match cause.strip_prefix("error sending request for url (").and_then(|rest| rest.split_once("): ")) {
        Some((_, after)) => after,
        None => cause,
    }
}

/// A TLS handshake failure that is about a certificate, read from rustls's message (the
/// client crate hands the cause on as text).
#[derive(Debug, Clone, PartialEq, Eq)]
enum TlsFailure {
    /// The coordinator's certificate does not chain to `--ca`.
    UntrustedServer,
    /// The coordinator's certificate is refused for another reason (rustls's words).
    BadServerCertificate(String),
    /// The coordinator answered our certificate with this alert.
    ClientCertificateRefused(String),
}

/// The alerts a TLS server sends when it refuses the client's certificate. rustls answers a
/// certificate whose signature does not verify (another CA of the same name) with
/// `DecryptError`; only the client's certificate is verified after the handshake keys are
/// agreed, so that alert is about it.
const CERTIFICATE_ALERTS: &[&str] = &[
    "DecryptError",
    "BadCertificate",
    "CertificateExpired",
    "UnknownCA",
    "CertificateRevoked",
    "CertificateUnknown",
    "UnsupportedCertificate",
    "CertificateRequired",
];

fn tls_failure(cause: &str) -> Option<TlsFailure> {
    if let Some((_, why)) = cause.split_once("invalid peer certificate: ") {
        let why = why.split(": ").next().unwrap_or(why).trim();
        if why.starts_with("UnknownIssuer") || why.starts_with("BadSignature") || why.contains("UnknownIssuer") {
            return Some(TlsFailure::UntrustedServer);
        }
        return Some(TlsFailure::BadServerCertificate(why.to_owned()));
    }
    let (_, alert) = cause.split_once("received fatal alert: ")?;
    let alert = alert.split(|c: char| !c.is_ascii_alphanumeric()).next().unwrap_or(alert);
    CERTIFICATE_ALERTS.contains(&alert).then(|| TlsFailure::ClientCertificateRefused(alert.to_owned()))
}

impl TlsFailure {
    fn message(&self, url: &str) -> String {
        let files = CREDENTIALS.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        let (cert, ca) = match &files {
            Some((cert, ca)) => (cert.display().to_string(), ca.display().to_string()),
            None => ("given with --cert".to_owned(), "given with --ca".to_owned()),
        };
        match self {
            TlsFailure::UntrustedServer => format!("the coordinator's certificate ({url}) is not signed by the CA in {ca}"),
            TlsFailure::BadServerCertificate(why) => format!("the coordinator's certificate ({url}) is not acceptable: {why}"),
            TlsFailure::ClientCertificateRefused(alert) => {
                format!("the coordinator ({url}) refused the operator certificate {cert} ({alert})")
            }
        }
    }
}

impl From<ClientError> for CliError {
    fn from(e: ClientError) -> CliError {
        CliError::new(e.code(), e.message())
    }
}

#[cfg(test)]
mod tests {
    use drover_client::error_from_body;

    use super::*;

    #[test]
    fn statuses_map_to_sysexits() {
        let api = |status| error_from_body("https://c/v1/hosts", status, br#"{"error":{"code":"x","message":"why"}}"#);
        assert_eq!(api(401).code(), codes::NO_PERM);
        assert_eq!(api(403).code(), codes::NO_PERM);
        assert_eq!(api(400).code(), codes::DATA);
        assert_eq!(api(409).code(), codes::DATA);
        assert_eq!(api(500).code(), codes::UNAVAILABLE);
        assert_eq!(api(503).code(), codes::UNAVAILABLE);
        assert!(api(409).to_string().contains("why"));
        let e = error_from_body("https://c/v1/hosts", 404, b"<html>\x1b[2J</html>");
        assert!(matches!(&e, ClientError::Http { body, .. } if !body.contains('\x1b')), "{e:?}");
        assert_eq!(e.code(), codes::DATA);
    }

    #[test]
    fn client_errors_keep_the_cli_wording() {
        let unreachable = ClientError::Unreachable {
            path: "/v1/hosts".to_owned(),
            attempts: vec![drover_client::ConnectFailure { url: "https://c:1".to_owned(), cause: "connection refused".to_owned() }],
        };
        let e = CliError::from(unreachable);
        assert_eq!(
            (e.code(), e.to_string().as_str()),
            (codes::UNAVAILABLE, "cannot reach the coordinator at https://c:1: connection refused")
        );
        let e = CliError::from(error_from_body("https://c/v1/hosts", 409, br#"{"error":{"code":"conflict","message":"taken"}}"#));
        assert_eq!((e.code(), e.to_string().as_str()), (codes::DATA, "coordinator refused (409 conflict): taken"));
        let e = CliError::from(ClientError::TooLarge { url: "https://c/v1/hosts".to_owned(), limit: 7 });
        assert_eq!(
            (e.code(), e.to_string().as_str()),
            (codes::PROTOCOL, "https://c/v1/hosts: unexpected answer: answer larger than 7 bytes")
        );
        let decode = ClientError::Decode { url: "https://c/v1/hosts".to_owned(), path: "hostId".to_owned(), message: "bad".to_owned() };
        let e = CliError::from(decode);
        assert_eq!((e.code(), e.to_string().as_str()), (codes::PROTOCOL, "https://c/v1/hosts: unexpected answer: bad"));
    }

    #[test]
    fn certificate_failures_are_told_apart() {
        let via = |cause: &str| format!("error sending request for url (https://c:1/v1/hosts): client error (Connect): {cause}");
        assert_eq!(tls_failure(&via("invalid peer certificate: UnknownIssuer")), Some(TlsFailure::UntrustedServer));
        assert_eq!(tls_failure(&via("invalid peer certificate: BadSignature")), Some(TlsFailure::UntrustedServer));
        assert_eq!(tls_failure(&via("invalid peer certificate: Expired")), Some(TlsFailure::BadServerCertificate("Expired".into())));
        assert_eq!(
            tls_failure(&via("received fatal alert: CertificateExpired")),
            Some(TlsFailure::ClientCertificateRefused("CertificateExpired".into()))
        );
        assert_eq!(
            tls_failure("client error (Canceled): operation was canceled: connection error: received fatal alert: DecryptError"),
            Some(TlsFailure::ClientCertificateRefused("DecryptError".into()))
        );
        assert_eq!(tls_failure(&via("received fatal alert: HandshakeFailure")), None);
        assert_eq!(tls_failure(&via("tcp connect error: Connection refused (os error 111)")), None);
        let e = CliError::from(ClientError::Unreachable {
            path: "/v1/hosts".to_owned(),
            attempts: vec![drover_client::ConnectFailure {
                url: "https://c:1".to_owned(),
                cause: via("invalid peer certificate: UnknownIssuer"),
            }],
        });
        assert_eq!(e.code(), codes::NO_PERM);
        assert_eq!(e.to_string().matches("https://c:1").count(), 1, "{e}");
        assert!(e.to_string().contains("not signed by the CA in"), "{e}");
        let e = CliError::from(ClientError::Unreachable {
            path: "/v1/hosts".to_owned(),
            attempts: vec![drover_client::ConnectFailure { url: "https://c:1".to_owned(), cause: via("tcp connect error") }],
        });
        assert_eq!(
            (e.code(), e.to_string().as_str()),
            (codes::UNAVAILABLE, "cannot reach the coordinator at https://c:1: client error (Connect): tcp connect error")
        );
    }

    #[test]
    fn certificates_outside_their_validity_are_refused() {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::new(vec!["op".to_owned()]).expect("params");
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        let cert = params.self_signed(&key).expect("cert");
        let file = Path::new("op.crt");
        let e = check_validity(file, cert.der(), std::time::SystemTime::now()).expect_err("expired");
        assert_eq!(e.code(), codes::NO_PERM);
        assert!(e.to_string().starts_with("operator certificate op.crt expired at ") && e.to_string().contains("2021"), "{e}");
        let before = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_500_000_000);
        let e = check_validity(file, cert.der(), before).expect_err("not yet");
        assert!(e.to_string().starts_with("operator certificate op.crt is not valid before ") && e.to_string().contains("2020"), "{e}");
        let during = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_590_000_000);
        check_validity(file, cert.der(), during).expect("valid");
    }

    #[test]
    fn unusable_credentials_are_named_by_their_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = rcgen::generate_simple_self_signed(vec!["c".to_owned()]).expect("ca");
        let stranger = rcgen::KeyPair::generate().expect("key");
        std::fs::write(dir.path().join("ca.crt"), ca.cert.pem()).expect("write");
        std::fs::write(dir.path().join("op.crt"), ca.cert.pem()).expect("write");
        std::fs::write(dir.path().join("op.key"), stranger.serialize_pem()).expect("write");
        let target = Target {
            url: "https://c:1".to_owned(),
            cert: dir.path().join("op.crt"),
            key: dir.path().join("op.key"),
            ca: dir.path().join("ca.crt"),
        };
        let e = connect(&target).expect_err("the key is not the certificate's");
        assert_eq!(e.code(), codes::DATA);
        let expected = format!("{} and {} are not a usable certificate and key: ", target.cert.display(), target.key.display());
        assert!(e.to_string().starts_with(&expected), "{e}");
        std::fs::write(dir.path().join("op.key"), "not a key").expect("write");
        let e = connect(&target).expect_err("no key");
        assert_eq!(e.code(), codes::DATA);
        assert!(e.to_string().starts_with(&format!("{}: no usable private key: ", target.key.display())), "{e}");
        std::fs::remove_file(&target.ca).expect("remove");
        assert_eq!(connect(&target).expect_err("no CA").code(), codes::NO_INPUT);
    }

    #[test]
    fn missing_pieces_are_named_with_their_variables() {
        let e = ConnectArgs::default().resolve_with(None).expect_err("missing");
        assert_eq!(e.code(), codes::USAGE);
        for needle in ["--coordinator", "DROVER_COORDINATOR", "--cert", "DROVER_CERT", "--key", "DROVER_KEY", "--ca", "DROVER_CA"] {
            assert!(e.to_string().contains(needle), "{needle}: {e}");
        }
        let args = ConnectArgs {
            coordinator: Some("http://c:1".into()),
            cert: Some("c".into()),
            key: Some("k".into()),
            ca: Some("a".into()),
            config: None,
        };
        assert_eq!(args.resolve_with(None).expect_err("http").code(), codes::USAGE);
        let ok = ConnectArgs { coordinator: Some("https://c:1/".into()), ..args }.resolve_with(None).expect("ok");
        assert_eq!(ok.url, "https://c:1");
    }

    #[test]
    fn the_config_file_fills_what_flags_leave_out() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("config.toml");
        std::fs::write(&file, "coordinator = \"https://file:1\"\ncert = \"op.crt\"\nkey = \"op.key\"\nca = \"ca.crt\"\n").expect("write");
        let flags = ConnectArgs { coordinator: Some("https://flag:2".into()), ..ConnectArgs::default() };
        // The default file is used when present; an explicit one wins over it.
        let t = flags.resolve_with(Some(&file)).expect("resolves");
        assert_eq!((t.url.as_str(), t.cert, t.ca), ("https://flag:2", dir.path().join("op.crt"), dir.path().join("ca.crt")));
        let other = dir.path().join("other.toml");
        std::fs::write(&other, "coordinator = \"https://other:3\"\n").expect("write");
        let e = ConnectArgs { config: Some(other.clone()), ..ConnectArgs::default() }.resolve_with(Some(&file)).expect_err("incomplete");
        assert_eq!(e.code(), codes::USAGE);
        assert!(e.to_string().contains("--cert") && e.to_string().contains(&other.display().to_string()), "{e}");
        std::fs::write(&other, "coordinator = \"http://plain:3\"\ncert = \"a\"\nkey = \"b\"\nca = \"c\"\n").expect("write");
        let e = ConnectArgs { config: Some(other), ..ConnectArgs::default() }.resolve_with(None).expect_err("http");
        assert_eq!(e.code(), codes::USAGE);
        // A broken default file is not read when nothing is missing; an explicit one is.
        std::fs::write(&file, "nonsense = 1\n").expect("write");
        let full = ConnectArgs {
            coordinator: Some("https://c:1".into()),
            cert: Some("c".into()),
            key: Some("k".into()),
            ca: Some("a".into()),
            config: None,
        };
        assert_eq!(full.resolve_with(Some(&file)).expect("not read").url, "https://c:1");
        let e = ConnectArgs { config: Some(file.clone()), ..full }.resolve_with(None).expect_err("read");
        assert_eq!(e.code(), codes::DATA);
    }
}
