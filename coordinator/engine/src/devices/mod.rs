//! Rack devices (`rack-on-demand-maintenance.md`, `power-shelf-state-machine.md`): the narrow
//! trait through which the controllers reach devices, and the controller loops that apply the
//! pure decisions of the crate `drover-workflows` (`drover_workflows::devices`, re-exported
//! here as [`rack`], [`rack_tick`] and [`shelf`]).
//!
//! - [`power`]: [`power::PowerControl`] and its Redfish implementation (credentials from the
//!   secret store at each use).
//! - [`work`]: device work in flight beside the loops (nothing stored, so a restart asks
//!   again).
//! - [`shelf_loop`]: the power-shelf controller: every tick, each shelf one step, written
//!   compare-and-set with its event.
//! - [`rack_loop`]: the rack controller applied: each step [`rack_tick`] decides, committed.
//! - [`run`]: the loop that ticks both.

pub mod power;
pub mod rack_loop;
pub mod shelf_loop;
pub mod work;

pub use drover_workflows::devices::{rack, rack_tick, shelf};

/// The device controllers' loop (off when `[devices] tick_ms` is 0): every tick, each power
/// shelf and then each rack takes at most one step. One loop for both, so a rack's shelf step
/// and the shelf's own controller never interleave within a tick.
pub async fn run(app: std::sync::Arc<crate::app::AppState>) {
    let ms = app.config.devices.tick_ms;
    if ms == 0 {
        return;
    }
    let mut every = tokio::time::interval(std::time::Duration::from_millis(ms));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let shelves = shelf_loop::tick_all(&app).await;
        if let Err(e) = &shelves {
            tracing::error!(error = %e, "power shelf controller tick failed");
        }
        let racks = rack_loop::tick_all(&app).await;
        if let Err(e) = &racks {
            tracing::error!(error = %e, "rack controller tick failed");
        }
        app.loops.ran(crate::loops::DEVICES, app.clock.now(), shelves.and(racks).map(|_| ()));
    }
}
