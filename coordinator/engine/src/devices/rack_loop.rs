//! The rack controller: every tick (beside the power-shelf controller), each rack takes one
//! step of [`rack_tick::tick`], written compare-and-set on the rack's state and maintenance
//! with its event — `rack.transition` when the state changes, `rack.maintenance.progress`
//! when only the phase or step advances — so a coordinator restarted mid-cycle resumes at the
//! step it was on.
//!
//! Device steps run as tasks in the shared work table: a machine's firmware or power through
//! its BMC (the host's BMC record), a shelf's power through its PMC (only while the shelf's
//! own controller has it `ready`, so the two never drive one shelf at once), and the final
//! check that every scoped device reads powered on.
//!
//! Before a cycle starts, its machines must fit the disruption budgets (the latest release's,
//! as jobs are paced): every machine is counted against every budget that selects it, beside
//! hosts in flight in rollouts and hosts held by jobs; once the rack is in `maintenance` or
//! `validating`, the store's plan snapshot lists its machines as held, so the rollout planner
//! and the job pacer count them too.

use std::collections::BTreeSet;
use std::sync::Arc;

use drover_proto::states::{PowerShelfState, RackState};
use drover_redfish::PowerTarget;
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use uuid::Uuid;

use super::power::Bmc;
use super::rack::{Firmware, PowerStep};
use super::rack_tick::{self, Context, DeviceStep, RackMaintenance, RackStep};
use super::work::Outcome;
use crate::app::AppState;
use crate::jobs::exec::FleetView;
use crate::jobs::pacing;
use crate::store::{self, DeviceKind, NewEvent, Rack, StoreError};

/// A stored firmware record as the pure resolution table reads it.
pub(crate) fn fw_view(r: &store::FirmwareRecord) -> Firmware {
    Firmware { id: r.id.clone(), hardware_type: r.hardware_type.clone(), available: r.available, default: r.default }
}

async fn machine_bmc(app: &AppState, machine: Uuid) -> Result<Bmc, String> {
    let (host, bmc) = store::blocking(app.store.clone(), move |s| Ok((s.get_host(machine)?, s.host_bmcs(&[machine])?)))
        .await
        .map_err(|e: StoreError| format!("the coordinator's store failed: {e}"))?;
    let name = host.map(|h| h.hostname).unwrap_or_else(|| machine.to_string());
    let bmc = bmc.into_iter().next().ok_or_else(|| format!("machine {name} ({machine}) has no BMC recorded"))?;
    Ok(Bmc { name: format!("machine {name} ({machine})"), endpoint: bmc.endpoint, credentials_path: bmc.credentials_path })
}

async fn shelf_bmc(app: &AppState, shelf: Uuid, must_be_ready: bool) -> Result<Bmc, String> {
    let d = store::blocking(app.store.clone(), move |s| s.get_device(shelf))
        .await
        .map_err(|e| format!("the coordinator's store failed: {e}"))?
        .filter(|d| d.kind == DeviceKind::PowerShelf)
        .ok_or_else(|| format!("power shelf {shelf} no longer exists"))?;
    let name = format!("power shelf {} ({shelf})", d.name);
    if must_be_ready && d.shelf_state != Some(PowerShelfState::Ready) {
        let state = d.shelf_state.map(|s| s.as_str()).unwrap_or("unknown");
        return Err(format!("{name} is {state}, not ready: its own controller has it"));
    }
    Ok(Bmc { name, endpoint: d.endpoint, credentials_path: d.credentials_path })
}

/// Runs one device step.
async fn run_step(app: Arc<AppState>, m: RackMaintenance, step: DeviceStep, table: Vec<store::FirmwareRecord>) -> Outcome {
    let power = app.power.clone();
    let err = |e: super::power::PowerError| e.to_string();
    match step {
        DeviceStep::Firmware { machine, firmware } => {
            let image = table.iter().find(|f| f.id == firmware).ok_or_else(|| format!("firmware {firmware} no longer exists"))?;
            let bmc = machine_bmc(&app, machine).await?;
            power.machine_firmware(&bmc, &image.image_uri).await.map_err(err)?;
        }
        DeviceStep::Power(PowerStep::MachineOff(x)) => {
            power.machine_power(&machine_bmc(&app, x).await?, PowerTarget::Off).await.map_err(err)?
        }
        DeviceStep::Power(PowerStep::MachineOn(x)) => {
            power.machine_power(&machine_bmc(&app, x).await?, PowerTarget::On).await.map_err(err)?
        }
        DeviceStep::Power(PowerStep::ShelfOff(x)) => {
            power.shelf_power(&shelf_bmc(&app, x, true).await?, PowerTarget::Off).await.map_err(err)?
        }
        DeviceStep::Power(PowerStep::ShelfOn(x)) => {
            power.shelf_power(&shelf_bmc(&app, x, true).await?, PowerTarget::On).await.map_err(err)?
        }
        DeviceStep::Validate => {
            let mut off = Vec::new();
            for x in &m.targets.power_shelves {
                let bmc = shelf_bmc(&app, *x, false).await?;
                let facts = power.shelf_facts(&bmc).await.map_err(err)?;
                if facts["powerState"] != "On" {
                    off.push(format!("{} reads {}", bmc.name, facts["powerState"].as_str().unwrap_or("unknown")));
                }
            }
            for x in &m.targets.machines {
                // A machine without a BMC is in scope only for activities that do not drive it
                // (admission requires one for firmware and power): nothing to read.
                let has = store::blocking(app.store.clone(), {
                    let x = *x;
                    move |s| s.host_bmcs(&[x])
                })
                .await
                .map_err(|e| e.to_string())?;
                if has.is_empty() {
                    continue;
                }
                let bmc = machine_bmc(&app, *x).await?;
                let state = power.machine_power_state(&bmc).await.map_err(err)?;
                if state != "On" {
                    off.push(format!("{} reads {state}", bmc.name));
                }
            }
            if !off.is_empty() {
                return Err(format!("not powered on: {}", off.join(", ")));
            }
        }
    }
    Ok(None)
}

/// Whether the scoped machines may all be taken out of service now (`Err`: the first full
/// budget, or a machine already out of service for other work).
fn budget_check(m: &RackMaintenance, snapshot: &store::PlanSnapshot, fleet: &FleetView) -> Result<(), String> {
    let names: std::collections::BTreeMap<Uuid, &str> = snapshot.hosts.iter().map(|h| (h.id, h.hostname.as_str())).collect();
    let mut disrupted: BTreeSet<String> = crate::jobs::exec::in_flight_hosts(snapshot);
    disrupted.extend(snapshot.held.keys().chain(&snapshot.lent).filter_map(|id| names.get(id).map(|n| (*n).to_owned())));
    let candidates: Vec<(Uuid, String)> =
        m.targets.machines.iter().filter_map(|id| names.get(id).map(|n| (*id, (*n).to_owned()))).collect();
    // One owner of disruptive work at a time: a machine in flight in a rollout, or held by a
    // job, is finished with first (the pacer would admit it without a second slot, which is
    // right for counting and wrong for powering it off under an activation).
    if let Some((_, busy)) = candidates.iter().find(|(_, n)| disrupted.contains(n)) {
        return Err(format!("machine {busy} is out of service for a rollout or a job"));
    }
    let admission = pacing::admit(&candidates, &disrupted, &fleet.budgets);
    match admission.waiting.into_iter().next() {
        Some((_, why)) => Err(why),
        None => Ok(()),
    }
}

fn event(app: &AppState, rack: &Rack, kind: &str, message: String, data: Value) -> NewEvent {
    let mut data = data;
    data["rackId"] = json!(rack.id);
    NewEvent { at: app.clock.now(), kind: kind.into(), host_id: None, rollout_id: None, job_id: None, message, data }
}

async fn step_one(
    app: &Arc<AppState>,
    rack: Rack,
    table: &[store::FirmwareRecord],
    fleet: &mut Option<Arc<FleetView>>,
) -> Result<bool, StoreError> {
    let m = match rack.maintenance.clone().map(serde_json::from_value::<RackMaintenance>).transpose() {
        Ok(m) => m,
        Err(e) => {
            tracing::error!(rack = %rack.name, error = %e, "rack maintenance record does not parse; rack left alone");
            return Ok(false);
        }
    };
    let stage = format!(
        "{}:{}:{}",
        rack.state,
        m.as_ref().and_then(|m| m.phase).map(|p| format!("{p:?}")).unwrap_or_default(),
        m.as_ref().map_or(0, |m| m.step)
    );
    let (work, _) = app.device_work.take(rack.id, &stage);
    // Budgets matter only when a request waits to start; read them only then.
    let mut budget = Ok(());
    if let Some(m) = m
        .as_ref()
        .filter(|m| m.phase.is_none() && matches!(rack.state, RackState::Ready | RackState::Error) && !m.targets.machines.is_empty())
    {
        if fleet.is_none() {
            *fleet = Some(FleetView::load(app).await);
        }
        let snapshot = store::blocking(app.store.clone(), |s| s.plan_snapshot()).await?;
        if let Some(f) = fleet.as_ref() {
            budget = budget_check(m, &snapshot, f);
        }
    }
    let firmware: Vec<Firmware> = table.iter().map(fw_view).collect();
    let cx =
        Context { hardware_type: &rack.hardware_type, firmware: &firmware, budget: budget.as_ref().map(|_| ()).map_err(String::as_str) };
    match rack_tick::tick(rack.state, m.as_ref(), &work, cx) {
        RackStep::Wait(_) => Ok(false),
        RackStep::Act(step) => {
            let Some(m) = m else { return Ok(false) };
            tracing::info!(rack = %rack.name, step = %step.label(), "rack device step");
            let handle: JoinHandle<Outcome> = crate::store::fence::spawn(run_step(app.clone(), m, step, table.to_vec()));
            app.device_work.start(rack.id, &stage, handle);
            Ok(false)
        }
        RackStep::Move { to, maintenance, reason } => {
            if to != rack.state && !rack.state.successors().contains(&to) {
                tracing::error!(rack = %rack.name, from = %rack.state, to = %to, "refusing an illegal rack transition");
                return Ok(false);
            }
            let kind = if to == rack.state { "rack.maintenance.progress" } else { "rack.transition" };
            let message = format!("rack {}: {} -> {to}: {reason}", rack.name, rack.state);
            let ev = event(app, &rack, kind, message, json!({"from": rack.state, "to": to, "reason": reason}));
            tracing::info!(rack = %rack.name, kind, reason = %reason, "rack step");
            let value = maintenance.map(|m| serde_json::to_value(m).map_err(StoreError::backend)).transpose()?;
            store::blocking(app.store.clone(), move |s| s.rack_step(&rack, to, value.as_ref(), &ev)).await
        }
    }
}

/// One controller tick over every rack.
pub async fn tick_all(app: &Arc<AppState>) -> Result<usize, StoreError> {
    let (racks, table) = store::blocking(app.store.clone(), |s| Ok((s.list_racks()?, s.list_firmware()?))).await?;
    let mut fleet = None;
    let mut moved = 0;
    for rack in racks {
        let name = rack.name.clone();
        match step_one(app, rack, &table, &mut fleet).await {
            Ok(true) => moved += 1,
            Ok(false) => {}
            Err(e) => tracing::error!(rack = %name, error = %e, "rack step could not be written"),
        }
    }
    Ok(moved)
}
