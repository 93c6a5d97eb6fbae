//! Drover's Redfish client for BMC power (DSP0266; facts in `shared/redfish-facts.md`).
//!
//! - [`RedfishClient`]: one BMC. HTTP Basic authentication on every request (the DMTF
//!   emulator and many BMCs have no SessionService); `https://` only, unless the caller opts
//!   into plain HTTP for a test service; TLS 1.2 or 1.3 (BMCs rarely speak 1.3), trusting a
//!   per-BMC CA. Connect and read timeouts bound every request; a 503 (a BMC starting up or
//!   overloaded) is retried after its `Retry-After`, a bounded number of times.
//! - [`RedfishClient::set_power`]: `#ComputerSystem.Reset` on a system, read first (already
//!   there: nothing sent), with a `ResetType` chosen from the action's
//!   `ResetType@Redfish.AllowableValues` (a BMC may advertise fewer than the schema has), posted
//!   to the action's own `target` (never a built path), then `PowerState` read until it equals
//!   the target — transitional values (`PoweringOn`, `PoweringOff`) keep it waiting — bounded;
//!   a device that does not converge in time is an error naming it.
//!
//! - [`RedfishClient::power_cycle`]: `PowerCycle` where the BMC advertises it, else off then on.
//! - [`RedfishClient::set_shelf_power`]: a power shelf (`PowerEquipment/PowerShelves/{id}`)
//!   has no switch of its own in the DMTF schema: `#Outlet.PowerControl` on each outlet not
//!   already there, then every outlet's `PowerState` read until all match, bounded.
//!
//! - [`RedfishClient::simple_update`]: firmware through `UpdateService.SimpleUpdate`, following
//!   a 202's task monitor to its end, bounded.
//!
//! Errors are one [`RedfishError`] with the device's URI and, for refusals, the BMC's status
//! and message; the password never appears in one.

#![forbid(unsafe_code)]

mod client;
mod error;
mod power;
mod shelf;
mod update;

pub use client::{RedfishClient, RedfishConfig};
pub use error::RedfishError;
pub use power::{PowerTarget, System};
pub use shelf::{Outlet, Shelf};
