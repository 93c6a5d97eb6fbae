//! A fake Redfish power shelf (a PMC's service) for Drover's tests and `drover dev`. There
//! is no real power-shelf Redfish service to run here (sushy-emulator has no
//! `PowerEquipment`, and DMTF's mockup server never changes state), so this one behaves as
//! the DMTF schema says a shelf does (`shared/redfish-facts.md` §5–§7): one
//! `PowerDistribution` with `EquipmentType` `PowerShelf` and no power switch of its own,
//! whose outlets carry `PowerState` and `#Outlet.PowerControl` with a `PowerState`
//! parameter. URIs and property names follow DMTF's `public-power-shelf` mockup, except that
//! action targets carry `/Actions/` as DSP0266 requires (see [`resources`] for the tree).
//! Optionally it also serves `ComputerSystem`s ([`system`]), so that it can stand in for a
//! machine's BMC whose machine never reaches its power state — something sushy-emulator
//! cannot do (`redfish-facts.md` §3).
//!
//! # Running it by hand
//!
//! ```text
//! cargo build -p drover-devkit --bin fake-shelf
//! target/debug/fake-shelf --cert cert.pem --key key.pem --user admin --password secret \
//!     [--listen 127.0.0.1:0] [--outlets A1,B1] [--delay-ms 1500] [--update-ms 1000] \
//!     [--name NAME] [--serial SN] [--off] [--systems node-1,node-2] [--systems-off]
//! ```
//!
//! It serves HTTPS only (TLS 1.2 and 1.3, HTTP/1.1) with the PEM certificate chain and key,
//! prints exactly one line, `listening on https://127.0.0.1:PORT`, to stdout once bound
//! (`--listen` defaults to `127.0.0.1:0`, a free port), and serves until SIGTERM or SIGINT.
//! It never prints the password.
//!
//! ```text
//! curl --cacert cert.pem -u admin:secret https://127.0.0.1:PORT/redfish/v1/PowerEquipment/PowerShelves/1/Outlets/A1
//! curl --cacert cert.pem -u admin:secret -H 'Content-Type: application/json' -d '{"PowerState":"Off"}' \
//!   https://127.0.0.1:PORT/redfish/v1/PowerEquipment/PowerShelves/1/Outlets/A1/Actions/Outlet.PowerControl
//! ```
//!
//! From Rust, [`FakeShelf::start`] with [`FakeShelfOptions`] spawns the binary and
//! [`FakeShelf::control`] calls the control API.
//!
//! # Behaviour
//!
//! - Authentication: HTTP Basic with `--user`/`--password`. `GET /redfish`, `/redfish/v1`
//!   and `/redfish/v1/` are open; everything else under `/redfish` without the account
//!   (unknown paths included) is 401 with `WWW-Authenticate: Basic realm="…"` and a Redfish
//!   error (`Base.1.0.NoValidSession`). There is no `SessionService`.
//! - Outlets: `--outlets` names them (default `A1,B1`); all start `On`, or `Off` with
//!   `--off`. `POST` to an outlet's `#Outlet.PowerControl` target needs
//!   `Content-Type: application/json` (else 415) and a JSON body (else 400
//!   `MalformedJSON`) whose `PowerState` is `On`, `Off` or `PowerCycle` (absent: 400
//!   `ActionParameterMissing`; another value: 400 `PropertyValueNotInList`). A locked outlet
//!   (`PowerControlLocked`) is 409 `ResourceInUse`. Otherwise 204, and the outlet reads
//!   `PoweringOff`/`PoweringOn` for `--delay-ms` (default 1500), then the target.
//!   `PowerCycle` reads `PoweringOff` for one delay and `PoweringOn` for another, then `On`
//!   (an outlet reading `Off` just powers on). Asking for the state an outlet is in or on its
//!   way to is 204 and changes nothing. Time is read on each request; there are no timers.
//! - Systems ([`system`]): none unless `--systems` names them (ids of letters, digits, `-`
//!   and `_`); all start `On`, or `Off` with `--systems-off`. With systems the root links
//!   `"Systems": {"@odata.id": "/redfish/v1/Systems"}`, the collection lists them, and
//!   `/redfish/v1/Systems/{id}` is a `#ComputerSystem.v1_13_0.ComputerSystem` with `Id`,
//!   `Name`, `PowerState` and `#ComputerSystem.Reset` (target
//!   `/redfish/v1/Systems/{id}/Actions/ComputerSystem.Reset`, `ResetType@Redfish.AllowableValues`
//!   `On`, `ForceOff`, `GracefulShutdown`, `ForceRestart`). `POST` to it needs JSON as
//!   `PowerControl` does (415, 400 `MalformedJSON`) and a `ResetType` (absent: 400
//!   `ActionParameterMissing`; another value: 400 `ActionParameterValueNotInList`), then
//!   answers 204: the machine moves as an outlet does, with the same `--delay-ms` —
//!   `On` like `On`, `ForceOff` and `GracefulShutdown` like `Off`, `ForceRestart` like
//!   `PowerCycle` (`PoweringOff`, then `PoweringOn`, then `On`; an `Off` machine just powers
//!   on). The state it is in or on its way to changes nothing. Without systems all of this is
//!   404.
//! - Firmware updates ([`update`]; `redfish-facts.md` §7, DSP0266 §12.2): the root links
//!   `UpdateService` and `Tasks` (the `TaskService`); the shelf shows its `FirmwareVersion`
//!   (`1.0.0` to begin with). `POST /redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate`
//!   needs JSON like `PowerControl` (415, 400 `MalformedJSON`), `ImageURI` (an `http(s)` URL
//!   whose last path segment names the image) and `Targets` (a non-empty array of
//!   `/redfish/v1/PowerEquipment/PowerShelves/1` only); absent: 400 `ActionParameterMissing`,
//!   wrong type, format or target: 400 `ActionParameterValueTypeError`,
//!   `ActionParameterValueFormatError` or `ActionParameterValueNotInList` naming the value.
//!   `TransferProtocol`, if given, is `HTTP` or `HTTPS`; other parameters are ignored.
//!   Accepted update `n` answers 202 with `Location: /redfish/v1/TaskService/TaskMonitors/{n}`,
//!   `Retry-After: 1` and its `Task` (`TaskState` `Running`). `GET` on the monitor answers 202
//!   (the `Task`, `Running`, `Retry-After: 1`) until `--update-ms` (default 1000) has passed
//!   since it was accepted, then 200 with the `Task` `Completed`/`OK`, and from then on the
//!   `FirmwareVersion` is the image's last path segment without its extension
//!   (`https://fw.example/ps-fw-2.1.bin` → `ps-fw-2.1`). With the failure switch on when the
//!   update was accepted it ends instead `Exception`/`Critical` with one
//!   `Update.1.0.ApplyFailed` message and the version unchanged. `GET
//!   /redfish/v1/TaskService/Tasks/{n}` reads the same `Task`. Updates may overlap; the one
//!   accepted last among those completed sets the version. Tasks are never deleted.
//! - Other answers: `GET` on an action target is 405 (`Allow: POST`); any method but `GET`
//!   on a resource is 405 (`Allow: GET`); unknown paths are 404
//!   `ResourceMissingAtURI`. Trailing slashes are ignored. Every body is
//!   `application/json`; every answer has `OData-Version: 4.0`.
//!
//! # The control API (`/_fake/`, JSON, no authentication, on the same HTTPS port)
//!
//! What only the hardware or a test could do to a real shelf. Errors are `{"error": "..."}`
//! with 400, 404 or 405. [`FakeShelf::control`] calls it over TLS, trusting exactly the
//! certificate the fake was given (the simpler choice over a second plain-HTTP port: one
//! port, one listening line).
//!
//! | Call | Body | Effect / answer |
//! |---|---|---|
//! | `POST /_fake/stuck` | `{"outlet": "A1", "stuck": true}` or `{"system": "node-1", "stuck": true}` | The outlet still answers 204 to `PowerControl` (the system to `Reset`), and logs it, but never changes state: a device that never converges. `"stuck": false` lets it move again. Exactly one of `outlet` and `system`. Echoes the body. |
//! | `POST /_fake/lock` | `{"outlet": "A1", "locked": true}` | Sets `PowerControlLocked`: `PowerControl` is then 409 and not logged. Echoes the body. |
//! | `POST /_fake/busy` | `{"count": N, "retryAfter"?: 1}` | The next N requests under `/redfish` (authenticated or not) answer 503 `ServiceTemporarilyUnavailable` with `Retry-After: retryAfter`. Echoes the values. |
//! | `POST /_fake/update-fail` | `{"fail": true, "message"?: "image signature invalid"}` | Updates accepted from now on end with their monitor answering 200, `TaskState` `Exception`, `TaskStatus` `Critical`, `Messages: [{"MessageId": "Update.1.0.ApplyFailed", "Message": message, …}]`, and the version unchanged; `{"fail": false}` lets later ones succeed again. Answers `{"fail": true, "message": …}` (the default message filled in) or `{"fail": false}`. |
//! | `GET /_fake/state` | | `{"outlets": {"A1": "On", …}, "actions": [{"outlet": "A1", "powerState": "Off"}, …], "systems": {"node-1": "On", …}, "resets": [{"system": "node-1", "resetType": "ForceOff"}, …], "firmwareVersion": "1.0.0", "updates": [{"imageUri": "…", "targets": ["…"]}, …]}`: each outlet's `PowerState` now, every `PowerControl` answered 204 (no-ops and stuck outlets included), in order, each system's `PowerState` now (`{}` without systems), every `Reset` answered 204 (no-ops and stuck systems included), in order, the shelf's `FirmwareVersion` now, and every `SimpleUpdate` answered 202, in order. |

pub mod api;
pub mod control;
pub mod launcher;
pub mod power;
pub mod resources;
pub mod server;
pub mod shelf;
pub mod system;
pub mod update;

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

pub use launcher::{DEFAULT_PASSWORD, DEFAULT_USER, FakeShelf, FakeShelfOptions};
pub use update::DEFAULT_UPDATE_MS;

use api::Credentials;
use shelf::{Identity, Power, Shelf};

/// The outlets a shelf has unless `--outlets` says otherwise.
pub const DEFAULT_OUTLETS: [&str; 2] = ["A1", "B1"];

/// How long an outlet takes to change state unless `--delay-ms` says otherwise.
pub const DEFAULT_DELAY_MS: u64 = 1500;

/// The command line of `fake-shelf`.
#[derive(Clone, PartialEq, Eq)]
pub struct Args {
    /// `--listen ADDR` (default `127.0.0.1:0`).
    pub listen: String,
    /// `--cert PEM`: the certificate chain.
    pub cert: PathBuf,
    /// `--key PEM`: its private key.
    pub key: PathBuf,
    /// `--user U` and `--password P`.
    pub creds: Credentials,
    /// `--outlets A1,B1`.
    pub outlets: Vec<String>,
    /// `--delay-ms N`.
    pub delay_ms: u64,
    /// `--update-ms N`: how long a firmware update takes.
    pub update_ms: u64,
    /// `--name` and `--serial`.
    pub identity: Identity,
    /// `--off`: the outlets start off.
    pub off: bool,
    /// `--systems node-1,node-2`: the machines it also serves (default none).
    pub systems: Vec<String>,
    /// `--systems-off`: the systems start off.
    pub systems_off: bool,
}

impl std::fmt::Debug for Args {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Args")
            .field("listen", &self.listen)
            .field("cert", &self.cert)
            .field("key", &self.key)
            .field("creds", &self.creds)
            .field("outlets", &self.outlets)
            .field("delay_ms", &self.delay_ms)
            .field("update_ms", &self.update_ms)
            .field("identity", &self.identity)
            .field("off", &self.off)
            .field("systems", &self.systems)
            .field("systems_off", &self.systems_off)
            .finish()
    }
}

/// The usage line.
pub const USAGE: &str = "usage: fake-shelf --cert PEM --key PEM --user U --password P [--listen ADDR] [--outlets A1,B1] \
                         [--delay-ms N] [--update-ms N] [--name NAME] [--serial SERIAL] [--off] \
                         [--systems ID,ID] [--systems-off]";

/// Splits and checks the list of `flag` (`--outlets`, `--systems`): non-empty, distinct ids
/// of ASCII letters, digits, `-`, `_`.
pub fn parse_ids(flag: &str, list: &str) -> Result<Vec<String>, ArgsError> {
    let ids: Vec<String> = list.split(',').map(|s| s.trim().to_owned()).collect();
    for (i, id) in ids.iter().enumerate() {
        if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            return Err(ArgsError::BadId { flag: flag.to_owned(), id: id.clone() });
        }
        if ids[..i].contains(id) {
            return Err(ArgsError::DuplicateId { flag: flag.to_owned(), id: id.clone() });
        }
    }
    Ok(ids)
}

/// Why `fake-shelf`'s command line is refused.
#[derive(Debug, thiserror::Error)]
pub enum ArgsError {
    /// A flag without its value.
    #[error("{flag} needs a value")]
    NeedsValue {
        /// The flag.
        flag: String,
    },
    /// An id of `--outlets` or `--systems` with other characters.
    #[error("{flag}: {id:?} is not an id (letters, digits, - and _)")]
    BadId {
        /// The flag.
        flag: String,
        /// The id.
        id: String,
    },
    /// An id named twice.
    #[error("{flag}: {id} is named twice")]
    DuplicateId {
        /// The flag.
        flag: String,
        /// The id.
        id: String,
    },
    /// A `--…-ms` that is not a number.
    #[error("{flag}: not a number of milliseconds: {value}")]
    NotMillis {
        /// The flag.
        flag: &'static str,
        /// Its value.
        value: String,
    },
    /// An argument it does not take.
    #[error("unknown argument {argument}")]
    Unknown {
        /// The argument.
        argument: String,
    },
    /// No `--cert` or no `--key`.
    #[error("--cert and --key are required (the shelf serves HTTPS only)")]
    NoTls,
    /// No `--user` or no `--password`.
    #[error("--user and --password are required")]
    NoCredentials,
    /// A user name with `:`.
    #[error("--user cannot contain ':' (HTTP Basic splits on it)")]
    ColonInUser,
}

/// Why `fake-shelf` stopped serving, or never started.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The certificate or key is unusable.
    #[error(transparent)]
    Tls(#[from] server::TlsError),
    /// The address could not be bound.
    #[error("binding {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Reporting the address, installing the signal handler, or serving failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl Args {
    /// Parses the arguments (without the program name).
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Args, ArgsError> {
        let mut out = Args {
            listen: "127.0.0.1:0".into(),
            cert: PathBuf::new(),
            key: PathBuf::new(),
            creds: Credentials { user: String::new(), password: String::new() },
            outlets: DEFAULT_OUTLETS.iter().map(|s| (*s).to_owned()).collect(),
            delay_ms: DEFAULT_DELAY_MS,
            update_ms: DEFAULT_UPDATE_MS,
            identity: Identity::default(),
            off: false,
            systems: Vec::new(),
            systems_off: false,
        };
        let mut it = args.into_iter();
        while let Some(flag) = it.next() {
            let mut value = || it.next().ok_or_else(|| ArgsError::NeedsValue { flag: flag.clone() });
            match flag.as_str() {
                "--listen" => out.listen = value()?,
                "--cert" => out.cert = PathBuf::from(value()?),
                "--key" => out.key = PathBuf::from(value()?),
                "--user" => out.creds.user = value()?,
                "--password" => out.creds.password = value()?,
                "--outlets" => out.outlets = parse_ids("--outlets", &value()?)?,
                "--systems" => out.systems = parse_ids("--systems", &value()?)?,
                "--systems-off" => out.systems_off = true,
                "--delay-ms" => {
                    let v = value()?;
                    out.delay_ms = v.parse().map_err(|_| ArgsError::NotMillis { flag: "--delay-ms", value: v.clone() })?;
                }
                "--update-ms" => {
                    let v = value()?;
                    out.update_ms = v.parse().map_err(|_| ArgsError::NotMillis { flag: "--update-ms", value: v.clone() })?;
                }
                "--name" => out.identity.name = value()?,
                "--serial" => out.identity.serial = value()?,
                "--off" => out.off = true,
                other => return Err(ArgsError::Unknown { argument: other.to_owned() }),
            }
        }
        if out.cert.as_os_str().is_empty() || out.key.as_os_str().is_empty() {
            return Err(ArgsError::NoTls);
        }
        if out.creds.user.is_empty() || out.creds.password.is_empty() {
            return Err(ArgsError::NoCredentials);
        }
        if out.creds.user.contains(':') {
            return Err(ArgsError::ColonInUser);
        }
        Ok(out)
    }
}

/// Loads the certificate, binds, prints the listening line, and serves until SIGTERM or SIGINT.
pub async fn run(args: Args) -> Result<(), RunError> {
    let tls = server::tls_config(&args.cert, &args.key)?;
    let power = if args.off { Power::Off } else { Power::On };
    let systems_power = if args.systems_off { Power::Off } else { Power::On };
    let mut shelf =
        Shelf::new(args.identity, &args.outlets, power, Duration::from_millis(args.delay_ms)).with_systems(&args.systems, systems_power);
    shelf.firmware.time = Duration::from_millis(args.update_ms);
    let listener =
        tokio::net::TcpListener::bind(&args.listen).await.map_err(|source| RunError::Bind { addr: args.listen.clone(), source })?;
    let addr = listener.local_addr()?;
    let mut stdout = std::io::stdout();
    writeln!(stdout, "listening on https://{addr}").and_then(|()| stdout.flush())?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        served = server::serve(listener, tls, shelf, args.creds) => served.map_err(RunError::Io),
        _ = term.recv() => Ok(()),
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Result<Args, ArgsError> {
        Args::parse(list.iter().map(|s| (*s).to_owned()))
    }

    const BASE: [&str; 8] = ["--cert", "c.pem", "--key", "k.pem", "--user", "admin", "--password", "pa55"];

    fn with(extra: &[&str]) -> Result<Args, ArgsError> {
        let mut all = BASE.to_vec();
        all.extend_from_slice(extra);
        args(&all)
    }

    #[test]
    fn command_line_defaults_and_options() {
        let a = with(&[]).unwrap();
        assert_eq!(a.listen, "127.0.0.1:0");
        assert_eq!(a.outlets, vec!["A1", "B1"]);
        assert_eq!(a.delay_ms, 1500);
        assert_eq!(a.update_ms, 1000);
        assert!(!a.off);
        assert!(a.systems.is_empty() && !a.systems_off);
        assert_eq!(a.identity, Identity::default());
        assert!(!format!("{a:?}").contains("pa55"), "the password stays out of Debug");
        let b = with(&[
            "--outlets",
            "A1, B1,C1",
            "--delay-ms",
            "0",
            "--update-ms",
            "25",
            "--off",
            "--name",
            "Shelf 7",
            "--serial",
            "SN7",
            "--listen",
            "127.0.0.1:8443",
            "--systems",
            "node-1, node_2",
            "--systems-off",
        ])
        .unwrap();
        assert_eq!((b.systems.clone(), b.systems_off), (vec!["node-1".to_owned(), "node_2".to_owned()], true));
        assert_eq!(b.outlets, vec!["A1", "B1", "C1"]);
        assert_eq!((b.delay_ms, b.update_ms, b.off, b.listen.as_str()), (0, 25, true, "127.0.0.1:8443"));
        assert_eq!(b.identity, Identity { name: "Shelf 7".into(), serial: "SN7".into() });
    }

    #[test]
    fn command_line_refusals() {
        assert!(with(&["--delay-ms", "soon"]).is_err());
        assert!(with(&["--update-ms", "-1"]).is_err());
        assert!(with(&["--update-ms"]).is_err());
        assert!(with(&["--outlets", "A1,A1"]).is_err());
        assert!(with(&["--outlets", "A1,"]).is_err());
        assert!(with(&["--outlets", "A/1"]).is_err());
        assert!(with(&["--systems", "n1,n1"]).unwrap_err().to_string().contains("--systems"));
        assert!(with(&["--systems", ""]).is_err());
        assert!(with(&["--systems", "node 1"]).is_err());
        assert!(with(&["--systems"]).is_err());
        assert!(with(&["--bogus"]).is_err());
        assert!(with(&["--name"]).is_err());
        assert!(args(&["--cert", "c.pem", "--user", "u", "--password", "p"]).is_err());
        assert!(args(&["--cert", "c.pem", "--key", "k.pem", "--user", "u"]).is_err());
        assert!(args(&["--cert", "c.pem", "--key", "k.pem", "--user", "u:v", "--password", "p"]).is_err());
    }
}
