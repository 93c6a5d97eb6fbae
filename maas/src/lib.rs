//! drover-maas: Drover's client of the MAAS REST API 2.0.
//!
//! MAAS is where Drover's bare-metal GPU hosts are commissioned, deployed, released and erased.
//! This crate speaks the API the way MAAS actually parses it (see `../shared/maas-facts.md`):
//! OAuth 1.0a PLAINTEXT signatures made afresh for every attempt, `op=` in the query string,
//! form-encoded bodies with repeated keys for lists and Django checkbox flags sent only when
//! set, trailing slashes, 204 deletes and the `OK` text of `set_boot_disk`.
//!
//! Every call is `async`, bounded by [`ClientConfig::timeout`] per attempt, and retried (up to
//! [`ClientConfig::retries`] times, with a small backoff or MAAS's `Retry-After`) only when it is
//! a GET and the failure is [`ErrorClass::Transient`]. Failures are one [`MaasError`] whose
//! [`MaasError::class`] tells the caller what to do. Secrets — the token secret, BMC passwords,
//! machine tokens — never appear in `Debug` output, logs or error messages.
//!
//! | [`ErrorClass`] | From | What the caller does |
//! |---|---|---|
//! | `Credentials` | 401, 403 | stop; the key is wrong, revoked or lacks admin/owner rights |
//! | `Gone` | 404 with MAAS's `No Machine matches the given query.` (any other 404 is `Protocol`) | forget the machine |
//! | `IllegalState` | 409, and commission's 400 `__all__` "…because of the current state…" | re-read the machine and decide again |
//! | `BadRequest` | 400 (field errors in [`MaasError::field_errors`]) | fix the parameters; retrying will not help |
//! | `Transient` | 5xx (503 with `Retry-After`), refused connections, timeouts | try again later (GETs already were) |
//! | `Protocol` | a 2xx body that is not what MAAS sends, 3xx, 405, a 404 that is not MAAS's | a bug, a wrong base URL or a proxy in the way |
//! | `Config` | bad base URL, API key or CA; MAAS's TLS certificate refused | fix the configuration |
//!
//! Things MAAS does that callers must know (all from the facts file):
//! - releasing a Ready (or Releasing) machine is a successful no-op, not a 409; release ends in
//!   Ready, or New for a machine never commissioned — there is no "Released" status;
//! - the machine list is not paged and refuses unknown filters, and MAAS cannot filter on the
//!   BMC address: use [`MaasClient::find_by_power_address`];
//! - `is_sync_healthy` is not a REST field: use [`Machine::hw_sync`] and [`HwSync::is_healthy`];
//! - the machine token from [`MaasClient::get_token`] is minted at deploy and replaced whenever
//!   the owner changes, so it must be read again after every deployment;
//! - `mark_broken` is refused (403) to anyone but the machine's owner, admins included.
//!
//! ```no_run
//! # async fn demo() -> Result<(), drover_maas::MaasError> {
//! use drover_maas::{ClientConfig, MaasClient, MachineFilter, NodeStatus};
//! let key = "CK:TK:TS".parse()?;
//! let maas = MaasClient::new(ClientConfig::new("http://10.0.0.1:5240/MAAS", key))?;
//! maas.version().await?; // reachable (anonymous)
//! maas.rack_controllers().await?; // the key works
//! let ready = maas.list_machines(&MachineFilter { status: vec![NodeStatus::Ready], ..Default::default() }).await?;
//! # let _ = ready; Ok(()) }
//! ```

#![forbid(unsafe_code)]

mod actions;
mod auth;
mod client;
mod error;
mod events;
mod form;
mod hwsync;
mod machines;
mod network;
mod status;
mod storage;
mod types;

pub use actions::{CommissionOptions, DeployOptions, ReleaseOptions, StopMode};
pub use auth::{ApiKey, authorization_header, fresh_nonce, oauth_encode, unix_now};
pub use client::{ClientConfig, MaasClient};
pub use error::{ErrorClass, MAX_MESSAGE, MaasError, RequestLine, classify_status};
pub use events::{Event, EventLevel, EventPage, EventQuery, parse_event_created};
pub use form::Params;
pub use hwsync::{HwSync, format_maas_datetime, parse_maas_datetime};
pub use machines::{MachineFilter, MachineUpdate, NewMachine};
pub use network::{Interface, Link, LinkMode, LinkSubnet, NewSubnet, Subnet, Vlan};
pub use status::{NodeStatus, PowerState};
pub use storage::BlockDevice;
pub use types::{Machine, MachineSummary, MachineToken, NamedRef, PowerParameters, RackController, Version};
