//! The power-shelf controller: every `[devices] tick_ms`, each shelf takes one step of
//! [`shelf::tick`], and a move is written compare-and-set with its event
//! (`power_shelf.transition`, the reason in the message and data) — so two coordinators, or a
//! controller racing an operator's request, can never both move a shelf.
//!
//! Device work (fetching data, configuring, the power operation) runs as a task beside the
//! loop, remembered here by shelf and state; the next ticks see it running, then done or
//! failed. Nothing about it is stored, and that is what makes the loop restart-safe: after a
//! restart a shelf in `maintenance` has no task, so the tick starts the operation again, and
//! the operation is idempotent (outlets already in the asked-for state are left alone).

use std::sync::Arc;

use drover_proto::states::PowerShelfState as S;
use drover_redfish::PowerTarget;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use super::power::{Bmc, PowerControl};
use super::shelf::{self, DeviceAct, MaintenanceRequest, PowerOp, ShelfView, Step, Work};
use super::work::Outcome;
use crate::app::AppState;
use crate::store::{self, Device, DeviceKind, NewEvent, ShelfStep};

/// The shelf as [`shelf::tick`] reads it.
pub fn view(d: &Device) -> Option<ShelfView> {
    let state = d.shelf_state?;
    Some(ShelfView {
        state,
        operation: d.operation.as_deref().and_then(|o| serde_json::from_value(json!(o)).ok()),
        marked_for_deletion: d.marked_for_deletion,
        requested: d.maintenance_requested.clone().and_then(|v| serde_json::from_value::<MaintenanceRequest>(v).ok()),
    })
}

fn bmc(d: &Device) -> Bmc {
    Bmc { name: format!("power shelf {}", d.name), endpoint: d.endpoint.clone(), credentials_path: d.credentials_path.clone() }
}

/// The power target of an operation.
pub fn target(op: PowerOp) -> PowerTarget {
    match op {
        PowerOp::PowerOn => PowerTarget::On,
        PowerOp::PowerOff => PowerTarget::Off,
    }
}

fn spawn_act(power: Arc<dyn PowerControl>, dev: Bmc, act: DeviceAct) -> JoinHandle<Outcome> {
    crate::store::fence::spawn(async move {
        match act {
            DeviceAct::FetchData => power.shelf_facts(&dev).await.map(Some).map_err(|e| e.to_string()),
            DeviceAct::Configure => {
                // Configuring checks that the credentials reach the shelf and that it is a shelf
                // Drover can drive: a PowerShelf with outlets under power control.
                let facts = power.shelf_facts(&dev).await.map_err(|e| e.to_string())?;
                if facts["equipmentType"] != "PowerShelf" {
                    return Err(format!("{}: EquipmentType is {}, not PowerShelf", dev.name, facts["equipmentType"]));
                }
                if facts["outlets"].as_array().is_none_or(Vec::is_empty) {
                    return Err(format!("{}: the shelf lists no outlets to control", dev.name));
                }
                Ok(Some(facts))
            }
            DeviceAct::Power(op) => power.shelf_power(&dev, target(op)).await.map(|()| None).map_err(|e| e.to_string()),
        }
    })
}

fn event(app: &AppState, d: &Device, kind: &str, message: String, data: Value) -> NewEvent {
    let mut data = data;
    data["powerShelfId"] = json!(d.id);
    data["rackId"] = json!(d.rack_id);
    NewEvent { at: app.clock.now(), kind: kind.into(), host_id: None, rollout_id: None, job_id: None, message, data }
}

/// One step for one shelf. Returns whether the store changed.
async fn step_one(app: &Arc<AppState>, d: Device) -> Result<bool, store::StoreError> {
    let Some(v) = view(&d) else { return Ok(false) };
    let (work, facts) = app.device_work.take(d.id, v.state.as_str());
    if let Work::Failed(why) = &work
        && v.state != S::Maintenance
    {
        tracing::warn!(shelf = %d.name, state = %v.state, error = %why, "power shelf device work failed; asking again");
    }
    let step = shelf::tick(&v, &work);
    let (write, ev) = match step {
        Step::Wait(_) => return Ok(false),
        Step::Act(act) => {
            app.device_work.start(d.id, v.state.as_str(), spawn_act(app.power.clone(), bmc(&d), act));
            return Ok(false);
        }
        Step::Move { to, operation, clear_request, reason } => {
            let write = ShelfStep {
                id: d.id,
                from: v.state,
                to: Some(to),
                operation: operation.map(|o| o.as_str().to_owned()),
                clear_request,
                facts: facts.filter(|_| matches!(v.state, S::FetchingData | S::Configuring)),
            };
            let ev = event(
                app,
                &d,
                "power_shelf.transition",
                format!("power shelf {}: {} -> {to}: {reason}", d.name, v.state),
                json!({"from": v.state, "to": to, "operation": operation, "reason": reason}),
            );
            (write, ev)
        }
        Step::FinalDelete => {
            let write = ShelfStep { id: d.id, from: S::Deleting, to: None, operation: None, clear_request: true, facts: None };
            let ev = event(app, &d, "power_shelf.deleted", format!("power shelf {} deleted", d.name), json!({"reason": "final delete"}));
            (write, ev)
        }
    };
    tracing::info!(shelf = %d.name, kind = %ev.kind, message = %ev.message, "power shelf step");
    store::blocking(app.store.clone(), move |s| s.shelf_step(&write, &ev)).await
}

/// One controller tick over every power shelf.
pub async fn tick_all(app: &Arc<AppState>) -> Result<usize, store::StoreError> {
    let shelves = store::blocking(app.store.clone(), |s| s.list_devices(None, Some(DeviceKind::PowerShelf))).await?;
    let mut moved = 0;
    for d in shelves {
        let name = d.name.clone();
        match step_one(app, d).await {
            Ok(true) => moved += 1,
            Ok(false) => {}
            Err(e) => tracing::error!(shelf = %name, error = %e, "power shelf step could not be written"),
        }
    }
    Ok(moved)
}
