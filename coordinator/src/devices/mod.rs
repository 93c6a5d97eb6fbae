//! Rack devices (`rack-on-demand-maintenance.md`, `power-shelf-state-machine.md`): the pure
//! decisions of their controllers and requests, so each rule is tested without a device, a
//! store or a clock; the narrow trait through which the controllers reach devices; and the
//! controller loops that apply the decisions.
//!
//! - [`power`]: [`power::PowerControl`] and its Redfish implementation (credentials from the
//!   secret store at each use).
//! - [`work`]: device work in flight beside the loops (nothing stored, so a restart asks
//!   again).
//! - [`shelf_loop`]: the power-shelf controller: every tick, each shelf one step, written
//!   compare-and-set with its event.
//! - [`rack`]: on-demand rack maintenance: preconditions, scope, activities, the firmware
//!   resolution table, the next activity, and the power sequence's safe order.
//! - [`shelf`]: the power shelf's controller tick (one transition per tick, with its reason)
//!   and the rules of an on-demand maintenance request (ids, operation, all or nothing,
//!   initiator string).

pub mod power;
pub mod rack;
pub mod rack_loop;
pub mod rack_tick;
pub mod shelf;
pub mod shelf_loop;
pub mod work;
