//! A fake MAAS region API (REST API 2.0) for Drover's tests and `drover dev`: no real MAAS
//! can run here, so the MAAS client and the workflows that drive bare-metal hosts run
//! against this instead. It behaves like MAAS where Drover can observe it — JSON shapes,
//! status codes and texts, the status machine with its transition table and failure map,
//! OAuth 1.0a PLAINTEXT with nonce and timestamp checks, form bodies and `op=` dispatch,
//! the two boolean parsers, events paging, the `hardware_sync_interval` setting (`config`) — as
//! recorded in `shared/maas-facts.md`.
//!
//! # Running it by hand
//!
//! ```text
//! cargo build -p drover-devkit --bin fake-maas
//! target/debug/fake-maas --listen 127.0.0.1:5240 --api-key drover:fake-token:fake-secret \
//!     [--api-key CK:TK:TS …] [--commission-secs N] [--deploy-secs N] [--release-secs N] \
//!     [--erase-secs N] [--state FILE] [--boot-dir DIR [--agent-extra-config FILE]]
//! ```
//!
//! It prints `listening http://127.0.0.1:PORT/MAAS` first on stdout and serves until SIGTERM
//! or SIGINT. Each `--api-key` is an admin user named after its consumer key. An in-flight
//! status (Commissioning, Deploying, Releasing, Disk erasing) stays until
//! `POST /_fake/advance`, or completes by itself N seconds after it began when its
//! `--…-secs` is above 0 (checked on every request; there are no timers). `--state FILE`
//! loads the machines, subnets and events from FILE at start and rewrites it atomically
//! after every change. `--boot-dir DIR` boots each deployed machine's user data in
//! `DIR/<system_id>/root`: its `write_files`, then its agent bootstrap part, then the real
//! `drover-agent` the bootstrap installed, sandboxed by the text appended to its `agent.toml`
//! (`--agent-extra-config FILE`, else [`DEFAULT_AGENT_CONFIG`]; see [`boot`]). Sign requests
//! as MAAS's own client does, e.g. with curl:
//!
//! ```text
//! curl -H 'Authorization: OAuth oauth_version="1.0", oauth_signature_method="PLAINTEXT",
//!   oauth_consumer_key="drover", oauth_token="fake-token", oauth_signature="&fake-secret",
//!   oauth_nonce="'$RANDOM$RANDOM'", oauth_timestamp="'$(date +%s)'"' \
//!   http://127.0.0.1:5240/MAAS/api/2.0/machines/
//! ```
//!
//! From Rust, [`FakeMaas::start`] with [`FakeMaasOptions`] spawns the binary and
//! [`FakeMaas::control`] calls the control API.
//!
//! # The control API (`/_fake/`, JSON, no authentication)
//!
//! What only hardware, a BMC or the passing of time could do to a real MAAS. Errors are
//! `{"error": "..."}` with 400 or 404.
//!
//! | Call | Body | Effect / answer |
//! |---|---|---|
//! | `POST /_fake/machines` | `{"hostname"?, "power_type"?, "power_address"?, "power_user"?, "power_pass"?, "mac_addresses"?: [..], "interfaces"?: [{"name","mac_address"}], "block_devices"?: [{"name","model"?,"serial"?,"size"?}], "status"?: "New"\|"Ready"\|"Allocated"\|"Deployed"\|…, "architecture"?}` | A machine as if enlisted (and commissioned, allocated, deployed… per `status`; an owner-implying status makes the first API user the owner; `Deployed` mints a token and an address). Defaults: interface `eno1` with a random MAC, disks `sda` ("DELLBOSS VD") and `nvme0n1`; `power_type` `ipmi` when `power_address` is given. Answers the machine JSON. |
//! | `GET /_fake/machines/{id}` | | The machine JSON plus `_fake`: storage layout, armed failures, raw user data, token, power parameters, and `boot` (with `--boot-dir`, once it booted: `{"state": "booting"\|"running"\|"failed"\|"agent_exited", "error", "agent_pid", "root", "boot_log", "agent_log", "hw_sync"}`, else null). |
//! | `POST /_fake/advance` | `{"system_id"?}` | Completes the in-flight transition of that machine (or all): Commissioning → Ready, Deploying → Deployed, Releasing / Disk erasing → Ready (New if never commissioned). `{"advanced": [{"system_id","from","to"}]}`. |
//! | `POST /_fake/machines/{id}/fail` | `{"stage": "commissioning"\|"deployment"\|"disk_erasing"\|"releasing", "message"?}` | Fails that stage now when the machine is in it, else arms its next completion to fail (failure map: Failed commissioning, Failed deployment, Failed disk erasing, Releasing failed); `message` becomes the ERROR event's description and the status message (e.g. cloud-init's `no datasource`). `{"failed_now", "machine"}`. |
//! | `POST /_fake/machines/{id}/ip` | `{"ip": "10.0.0.5"\|null}` | Pins an address shown in `ip_addresses`. |
//! | `POST /_fake/machines/{id}/hw_sync` | `{"last_sync": iso\|null, "enable_hw_sync"?}` | What the machine's hardware-sync timer reports. |
//! | `POST /_fake/machines/{id}/power` | `{"state": "on"\|"off"\|"unknown"\|"error"}` | The BMC's answer; `off` finishes a waiting release. |
//! | `POST /_fake/outage` | `{"mode": "none"\|"503"\|"hang"}` | `503`: every API request answers 503 text with `Retry-After: 10`; `hang`: requests are accepted and get no answer until the mode is `none` again. |
//! | `GET /_fake/machines/{id}/user_data` | | The deploy `user_data`, base64-decoded when it is valid base64 (as MAAS's metadata server), raw bytes. |
//! | `GET /_fake/requests` (`DELETE` clears) | | Every API request: `[{"method","path","query","content_type","body"}]`. |
//!
//! # Where it differs from MAAS
//!
//! Every API user is an admin (so the non-admin 403s never happen); there is one zone,
//! pool, domain (`maas`), fabric and VLAN, no tags, no boot images beyond Ubuntu focal,
//! jammy and noble (default noble), no rescue mode or testing ops, and block devices and
//! interfaces can be read and linked but not created or edited. Commissioning links the boot
//! interface AUTO on the PXE subnet `10.20.0.0/16` (created on first use), as MAAS's initial
//! networking configuration does. A deployed machine with no
//! AUTO link gets an address from 198.18.0.0/15 so it can always be reached.

pub mod auth;
pub mod boot;
pub mod config;
pub mod control;
pub mod devices;
pub mod events;
pub mod forms;
pub mod launcher;
pub mod lifecycle;
pub mod machine;
pub mod machines;
pub mod ops;
pub mod reply;
pub mod server;
pub mod status;
pub mod subnets;
pub mod world;

use std::io::Write;
use std::path::PathBuf;

pub use boot::{BootOptions, DEFAULT_AGENT_CONFIG};
pub use launcher::{Controller, DEFAULT_API_KEY, FakeMaas, FakeMaasOptions};

use auth::ApiKey;
use world::{Delays, World};

/// The command line of `fake-maas`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args {
    /// `--listen ADDR`.
    pub listen: String,
    /// `--api-key CK:TK:TS` (at least one).
    pub keys: Vec<ApiKey>,
    /// The `--…-secs` delays.
    pub delays: Delays,
    /// `--state FILE`.
    pub state_file: Option<PathBuf>,
    /// `--boot-dir DIR` and `--agent-extra-config FILE`.
    pub boot: Option<BootOptions>,
}

/// The usage line.
pub const USAGE: &str = "usage: fake-maas --listen ADDR --api-key CK:TK:TS [--api-key …] [--commission-secs N] \
                         [--deploy-secs N] [--release-secs N] [--erase-secs N] [--state FILE] \
                         [--boot-dir DIR [--agent-extra-config FILE]]";

impl Args {
    /// Parses the arguments (without the program name).
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Args, ArgsError> {
        let mut out = Args { listen: String::new(), keys: Vec::new(), delays: Delays::default(), state_file: None, boot: None };
        let mut extra_config = None;
        let mut it = args.into_iter();
        while let Some(flag) = it.next() {
            let mut value = || it.next().ok_or_else(|| ArgsError::NeedsValue { flag: flag.clone() });
            let secs = |v: String| v.parse::<u64>().map_err(|_| ArgsError::NotSeconds { flag: flag.clone(), value: v });
            match flag.as_str() {
                "--listen" => out.listen = value()?,
                "--api-key" => out.keys.push(ApiKey::parse(&value()?)?),
                "--commission-secs" => out.delays.commission_secs = secs(value()?)?,
                "--deploy-secs" => out.delays.deploy_secs = secs(value()?)?,
                "--release-secs" => out.delays.release_secs = secs(value()?)?,
                "--erase-secs" => out.delays.erase_secs = secs(value()?)?,
                "--state" => out.state_file = Some(PathBuf::from(value()?)),
                "--boot-dir" => out.boot = Some(BootOptions::new(value()?)),
                "--agent-extra-config" => extra_config = Some(PathBuf::from(value()?)),
                other => return Err(ArgsError::Unknown { argument: other.to_owned() }),
            }
        }
        match (&mut out.boot, extra_config) {
            (Some(boot), extra) => boot.agent_extra_config = extra,
            (None, Some(_)) => return Err(ArgsError::ExtraConfigWithoutBootDir),
            (None, None) => {}
        }
        if out.listen.is_empty() || out.keys.is_empty() {
            return Err(ArgsError::Required);
        }
        Ok(out)
    }
}

/// Why `fake-maas`'s command line is refused.
#[derive(Debug, thiserror::Error)]
pub enum ArgsError {
    /// A flag without its value.
    #[error("{flag} needs a value")]
    NeedsValue {
        /// The flag.
        flag: String,
    },
    /// A `--…-secs` that is not a number.
    #[error("{flag}: not a number of seconds: {value}")]
    NotSeconds {
        /// The flag.
        flag: String,
        /// Its value.
        value: String,
    },
    /// A malformed `--api-key`.
    #[error(transparent)]
    ApiKey(#[from] auth::ApiKeyError),
    /// An argument it does not take.
    #[error("unknown argument {argument}")]
    Unknown {
        /// The argument.
        argument: String,
    },
    /// `--agent-extra-config` alone.
    #[error("--agent-extra-config needs --boot-dir")]
    ExtraConfigWithoutBootDir,
    /// No `--listen` or no `--api-key`.
    #[error("--listen and at least one --api-key are required")]
    Required,
}

/// Why `fake-maas` stopped serving, or never started.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The state file could not be loaded.
    #[error(transparent)]
    State(#[from] world::StateFileError),
    /// The boot directory could not be prepared.
    #[error(transparent)]
    Boot(#[from] boot::BootError),
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

/// Binds, prints the listening line, and serves until SIGTERM or SIGINT.
pub async fn run(args: Args) -> Result<(), RunError> {
    let mut world = World::new(args.keys, args.delays, args.state_file)?;
    let booter = args.boot.as_ref().map(boot::Booter::new).transpose()?;
    world.boot.clone_from(&booter);
    let listener =
        tokio::net::TcpListener::bind(&args.listen).await.map_err(|source| RunError::Bind { addr: args.listen.clone(), source })?;
    let addr = listener.local_addr()?;
    let mut stdout = std::io::stdout();
    writeln!(stdout, "listening http://{addr}/MAAS").and_then(|()| stdout.flush())?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    // No graceful drain: a request held by a `hang` outage would never let it finish.
    let outcome = tokio::select! {
        served = server::serve(listener, world) => served.map_err(RunError::Io),
        _ = term.recv() => Ok(()),
        _ = tokio::signal::ctrl_c() => Ok(()),
    };
    // The machines lose power with the fake: their bootstraps and agents are killed.
    if let Some(b) = booter {
        b.shutdown();
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Result<Args, ArgsError> {
        Args::parse(list.iter().map(|s| (*s).to_owned()))
    }

    #[test]
    fn command_line() {
        let a =
            args(&["--listen", "127.0.0.1:0", "--api-key", "a:b:c", "--api-key", "d:e:f", "--deploy-secs", "3", "--state", "/tmp/s.json"])
                .unwrap();
        assert_eq!(a.keys.len(), 2);
        assert_eq!(a.delays, Delays { deploy_secs: 3, ..Delays::default() });
        assert_eq!(a.state_file, Some(PathBuf::from("/tmp/s.json")));
        assert!(args(&["--listen", "127.0.0.1:0"]).is_err());
        assert!(args(&["--listen", "x", "--api-key", "a:b"]).is_err());
        assert!(args(&["--listen", "x", "--api-key", "a:b:c", "--erase-secs", "soon"]).is_err());
        assert!(args(&["--bogus"]).is_err());
        assert_eq!(a.boot, None);
        let b = args(&["--listen", "x", "--api-key", "a:b:c", "--agent-extra-config", "/e.toml", "--boot-dir", "/b"]).unwrap();
        assert_eq!(b.boot, Some(BootOptions { dir: "/b".into(), agent_extra_config: Some("/e.toml".into()) }));
        assert!(args(&["--listen", "x", "--api-key", "a:b:c", "--agent-extra-config", "/e.toml"]).is_err());
    }
}
