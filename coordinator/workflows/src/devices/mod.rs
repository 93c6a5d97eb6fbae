//! Rack devices' pure decisions (`rack-on-demand-maintenance.md`,
//! `power-shelf-state-machine.md`), each rule tested without a device, a store or a clock; the
//! engine's `devices` module holds the loops that apply them.
//!
//! - [`rack`]: on-demand rack maintenance: preconditions, scope, activities, the firmware
//!   resolution table, the next activity, and the power sequence's safe order.
//! - [`rack_tick`]: the rack controller's tick: maintenance cycles step by step, budgets first.
//! - [`shelf`]: the power shelf's controller tick (one transition per tick, with its reason)
//!   and the rules of an on-demand maintenance request (ids, operation, all or nothing,
//!   initiator string).

pub mod rack;
pub mod rack_tick;
pub mod shelf;
