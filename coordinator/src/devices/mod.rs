//! Rack devices (`rack-on-demand-maintenance.md`, `power-shelf-state-machine.md`): the pure
//! decisions of their controllers and requests, so each rule is tested without a device, a
//! store or a clock.
//!
//! - [`rack`]: on-demand rack maintenance: preconditions, scope, activities, the firmware
//!   resolution table, the next activity, and the power sequence's safe order.
//! - [`shelf`]: the power shelf's controller tick (one transition per tick, with its reason)
//!   and the rules of an on-demand maintenance request (ids, operation, all or nothing,
//!   initiator string).

pub mod rack;
pub mod shelf;
