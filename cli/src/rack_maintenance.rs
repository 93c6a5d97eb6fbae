//! Rack maintenance from the CLI (`rack-on-demand-maintenance.md`): on-demand maintenance
//! cycles, and what they act on and need: firmware (records and component updates), a host's
//! rack placement and its BMC. The racks and devices themselves are
//! [`crate::rack_inventory`]'s.
//!
//! - `drover rack maintenance RACK [--machine-id ID…] [--switch-id ID…] [--power-shelf-id ID…]
//!   [--activity firmware-upgrade|configure-nmx-cluster|power-sequence]… [--firmware-version V]
//!   [--reference URL]` — on-demand maintenance: no ids = the full rack, no activity = all;
//! - `drover rack place HOST RACK --reason R` (`--none` takes it out of any rack);
//! - `drover rack bmc HOST --endpoint https://… --credentials-path P [--username U
//!   --password-file F] [--ca-file F] --reason R` — the machine's BMC a power sequence drives
//!   (`--remove` forgets it); the password is read from a file (`-` is stdin), never an argument;
//! - `drover rack firmware create ID --hardware-type T --image-uri URL [--unavailable]
//!   [--default] --reason R`, `drover rack firmware list`;
//! - `drover component firmware update --compute-trays ID,… | --switches ID,… | --power-shelves
//!   ID,… [--target-version V]` — the component-firmware entry point: the rack of the first
//!   device gets a firmware-upgrade request.
//!
//! HOST is a hostname or an id ([`crate::resolve`]).

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};
use drover_proto::api::racks::{ComponentFirmwareAnswer, FirmwareList, FirmwareView, HostBmcView, HostPlacement, RackMaintenanceAnswer};
use serde_json::{Value, json};

use crate::answer::print_answer;
use crate::arg_checks::check_reason;
use crate::client::{ConnectArgs, get_once, post_once};
use crate::exit::CliError;
use crate::listing::with_query;
use crate::output::{OutputArgs, clean, dash, table};
use crate::resolve::HostName;

/// Activities of a maintenance cycle.
#[derive(Clone, Copy, ValueEnum)]
pub enum ActivityArg {
    /// Firmware upgrade (`--firmware-version` picks the record; default: the rack type's).
    FirmwareUpgrade,
    /// NMX cluster configuration.
    ConfigureNmxCluster,
    /// Power sequence (machines off, shelves off, shelves on, machines on).
    PowerSequence,
}

/// `drover rack maintenance`.
#[derive(Args)]
pub struct RackMaintenance {
    /// The rack (id or name).
    rack: String,
    /// Machines (host ids) to maintain: repeat the flag or give several values.
    #[arg(long = "machine-id", num_args = 1..)]
    machines: Vec<String>,
    /// Switches to maintain.
    #[arg(long = "switch-id", num_args = 1..)]
    switches: Vec<String>,
    /// Power shelves to maintain.
    #[arg(long = "power-shelf-id", num_args = 1..)]
    shelves: Vec<String>,
    /// Activities to perform (default: all).
    #[arg(long = "activity", value_enum)]
    activities: Vec<ActivityArg>,
    /// The firmware record the upgrade uses.
    #[arg(long)]
    firmware_version: Option<String>,
    /// URL of the ticket tracking this maintenance (part of the initiator string).
    #[arg(long, visible_alias = "ref")]
    reference: Option<String>,
    #[command(flatten)]
    common: Common,
}

/// `drover rack place`.
#[derive(Args)]
pub struct Place {
    /// The host: its hostname or its id.
    #[arg(value_name = "HOST")]
    host: String,
    /// The rack (id or name); omit with `--none`.
    rack: Option<String>,
    /// Take the host out of any rack.
    #[arg(long, conflicts_with = "rack")]
    none: bool,
    /// Why (recorded in the event and the audit log).
    #[arg(long)]
    reason: String,
    #[command(flatten)]
    common: Common,
}

/// `drover rack bmc`.
#[derive(Args)]
pub struct Bmc {
    /// The host: its hostname or its id.
    #[arg(value_name = "HOST")]
    host: String,
    /// The BMC, https://… (or the system's own URL, …/redfish/v1/Systems/ID).
    #[arg(long, required_unless_present = "remove")]
    endpoint: Option<String>,
    /// Where its credentials live in the secret store.
    #[arg(long, required_unless_present = "remove")]
    credentials_path: Option<String>,
    /// Store these credentials at the path: the account…
    #[arg(long, requires = "password_file")]
    username: Option<String>,
    /// …and a file holding its password (`-` is stdin).
    #[arg(long, requires = "username")]
    password_file: Option<PathBuf>,
    /// The CA (or self-signed certificate) the BMC's certificate chains to, PEM.
    #[arg(long, requires = "username")]
    ca_file: Option<PathBuf>,
    /// Forget the host's BMC.
    #[arg(long, conflicts_with_all = ["endpoint", "credentials_path"])]
    remove: bool,
    /// Why (recorded in the event and the audit log).
    #[arg(long)]
    reason: String,
    #[command(flatten)]
    common: Common,
}

/// `drover rack firmware`.
#[derive(Args)]
pub struct FirmwareArgs {
    #[command(subcommand)]
    command: FirmwareCommand,
}

#[derive(Subcommand)]
enum FirmwareCommand {
    /// Record a firmware (admin).
    Create(FirmwareCreate),
    /// List firmware records.
    List(Common),
}

#[derive(Args)]
struct FirmwareCreate {
    /// Its id (what --firmware-version names).
    id: String,
    /// The rack hardware type it is for.
    #[arg(long)]
    hardware_type: String,
    /// Where BMCs fetch the image.
    #[arg(long)]
    image_uri: String,
    /// Recorded, but not to be used (an upgrade naming it is skipped).
    #[arg(long)]
    unavailable: bool,
    /// The default for its hardware type.
    #[arg(long)]
    default: bool,
    /// Why (recorded in the event and the audit log).
    #[arg(long)]
    reason: String,
    #[command(flatten)]
    common: Common,
}

/// Common output and connection flags.
#[derive(Args)]
pub struct Common {
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    connect: ConnectArgs,
}

/// Arguments of `drover component`.
#[derive(Args)]
pub struct ComponentArgs {
    #[command(subcommand)]
    command: ComponentCommand,
}

#[derive(Subcommand)]
enum ComponentCommand {
    /// Component firmware.
    Firmware(ComponentFirmwareArgs),
}

#[derive(Args)]
struct ComponentFirmwareArgs {
    #[command(subcommand)]
    command: ComponentFirmwareCommand,
}

#[derive(Subcommand)]
enum ComponentFirmwareCommand {
    /// Update the firmware of compute trays or switches (through their rack's maintenance).
    Update(ComponentUpdate),
}

#[derive(Args)]
struct ComponentUpdate {
    /// Compute trays (host ids), comma-separated.
    #[arg(long, value_delimiter = ',')]
    compute_trays: Vec<String>,
    /// Switches, comma-separated.
    #[arg(long, value_delimiter = ',')]
    switches: Vec<String>,
    /// Power shelves, comma-separated.
    #[arg(long, value_delimiter = ',')]
    power_shelves: Vec<String>,
    /// The firmware record (default: the rack type's default).
    #[arg(long)]
    target_version: Option<String>,
    /// URL of the ticket tracking this update.
    #[arg(long, visible_alias = "ref")]
    reference: Option<String>,
    #[command(flatten)]
    common: Common,
}

fn split(ids: &[String]) -> Vec<&str> {
    ids.iter().flat_map(|i| i.split_whitespace()).collect()
}

fn maintenance_line(v: &RackMaintenanceAnswer) -> String {
    let Some(m) = &v.maintenance else {
        return format!("maintenance requested on rack {}; the coordinator shows no cycle\n", clean(&v.name, 80));
    };
    let t = &m.targets;
    format!(
        "maintenance requested on rack {} by {}: {} machine(s), {} switch(es), {} power shelf(s); activities {}\n",
        clean(dash(&v.name), 80),
        clean(dash(&m.initiator), 200),
        t.machines.len(),
        t.switches.len(),
        t.power_shelves.len(),
        t.activities.iter().map(|a| a.as_str()).collect::<Vec<_>>().join(", ")
    )
}

fn component_line(v: &ComponentFirmwareAnswer) -> String {
    match v {
        ComponentFirmwareAnswer::Rack(m) => maintenance_line(m),
        ComponentFirmwareAnswer::Shelves(s) => format!(
            "firmware {} sent to {} power shelf(s) by {}\n",
            clean(&s.firmware, 80),
            s.power_shelf_ids.len(),
            clean(&s.initiator, 200)
        ),
    }
}

/// Runs `drover rack maintenance`.
pub fn run_maintenance(a: &RackMaintenance) -> Result<(), CliError> {
    let activities: Vec<Value> = a
        .activities
        .iter()
        .map(|x| match x {
            ActivityArg::FirmwareUpgrade => json!({ "activity": "firmware_upgrade", "firmwareVersion": a.firmware_version }),
            ActivityArg::ConfigureNmxCluster => json!({ "activity": "configure_nmx_cluster" }),
            ActivityArg::PowerSequence => json!({ "activity": "power_sequence" }),
        })
        .collect();
    if a.firmware_version.is_some() && !a.activities.is_empty() && !a.activities.iter().any(|x| matches!(x, ActivityArg::FirmwareUpgrade)) {
        return Err(CliError::usage("--firmware-version needs --activity firmware-upgrade (or no --activity: all)"));
    }
    let mut activities = activities;
    if a.activities.is_empty() && a.firmware_version.is_some() {
        // All activities, the upgrade with the named firmware.
        activities = vec![
            json!({ "activity": "firmware_upgrade", "firmwareVersion": a.firmware_version }),
            json!({ "activity": "configure_nmx_cluster" }),
            json!({ "activity": "power_sequence" }),
        ];
    }
    let body = json!({ "machineIds": split(&a.machines), "switchIds": split(&a.switches), "powerShelfIds": split(&a.shelves),
        "activities": activities, "reference": a.reference });
    let path = format!("/v1/racks/{}/maintenance", a.rack.trim());
    let v = post_once(&a.common.connect, &path, &body)?;
    print_answer(a.common.output.output, &path, &v, maintenance_line)
}

/// Runs `drover rack place`.
pub fn run_place(a: &Place) -> Result<(), CliError> {
    let reason = check_reason(&a.reason)?;
    if a.rack.is_none() && !a.none {
        return Err(CliError::usage("name the RACK, or --none to take the host out of any rack"));
    }
    HostName::parse("HOST", &a.host)?;
    let session = crate::client::Session::open(&a.common.connect)?;
    let path = format!("/v1/hosts/{}/rack", crate::resolve::host_id(&session, "HOST", &a.host)?);
    let v: Value = session.post(&path, &json!({ "rack": a.rack, "reason": reason }))?;
    print_answer(a.common.output.output, &path, &v, |p: &HostPlacement| {
        format!("host {} placed in rack {}\n", clean(&p.host_id, 40), clean(dash(p.rack.as_deref().unwrap_or("")), 80))
    })
}

/// Runs `drover rack bmc`.
pub fn run_bmc(a: &Bmc) -> Result<(), CliError> {
    let reason = check_reason(&a.reason)?;
    HostName::parse("HOST", &a.host)?;
    let session = crate::client::Session::open(&a.common.connect)?;
    let path = format!("/v1/hosts/{}/bmc", crate::resolve::host_id(&session, "HOST", &a.host)?);
    let v: Value = if a.remove {
        let p = with_query(&path, &[("reason", reason.to_owned())]);
        session.runtime.block_on(session.client.request_json::<Value, Value>(reqwest::Method::DELETE, &p, None))?
    } else {
        let mut body = json!({ "endpoint": a.endpoint, "credentialsPath": a.credentials_path, "reason": reason });
        if let (Some(user), Some(f)) = (&a.username, &a.password_file) {
            let mut c = json!({ "username": user, "password": crate::fsio::read_secret(f, "the BMC password")? });
            if let Some(ca) = &a.ca_file {
                c["caPem"] = json!(crate::fsio::read_text(ca)?);
            }
            body["credentials"] = c;
        }
        session.runtime.block_on(session.client.request_json::<Value, Value>(reqwest::Method::PUT, &path, Some(&body)))?
    };
    print_answer(a.common.output.output, &path, &v, |b: &HostBmcView| {
        format!("host {} BMC: {}\n", clean(&b.host_id, 40), clean(dash(b.endpoint.as_deref().unwrap_or("")), 200))
    })
}

/// Runs `drover rack firmware`.
pub fn run_firmware(a: &FirmwareArgs) -> Result<(), CliError> {
    let row = |f: &FirmwareView| {
        vec![clean(&f.id, 80), clean(&f.hardware_type, 80), f.available.to_string(), f.default.to_string(), clean(&f.image_uri, 300)]
    };
    let head = ["ID", "HARDWARE", "AVAILABLE", "DEFAULT", "IMAGE"];
    match &a.command {
        FirmwareCommand::Create(c) => {
            let reason = check_reason(&c.reason)?;
            let body = json!({ "id": c.id, "hardwareType": c.hardware_type, "imageUri": c.image_uri, "available": !c.unavailable,
                "default": c.default, "reason": reason });
            let v = post_once(&c.common.connect, "/v1/rack-firmware", &body)?;
            print_answer(c.common.output.output, "/v1/rack-firmware", &v, |f: &FirmwareView| table(&head, &[row(f)]))
        }
        FirmwareCommand::List(c) => {
            let v = get_once(&c.connect, "/v1/rack-firmware")?;
            print_answer(c.output.output, "/v1/rack-firmware", &v, |l: &FirmwareList| {
                table(&head, &l.firmware.iter().map(row).collect::<Vec<_>>())
            })
        }
    }
}

/// Runs `drover component`.
pub fn run_component(a: &ComponentArgs) -> Result<(), CliError> {
    let ComponentCommand::Firmware(f) = &a.command;
    let ComponentFirmwareCommand::Update(u) = &f.command;
    let body = json!({ "computeTrays": u.compute_trays, "switches": u.switches, "powerShelves": u.power_shelves,
        "targetVersion": u.target_version, "reference": u.reference });
    let v = post_once(&u.common.connect, "/v1/components/firmware", &body)?;
    print_answer(u.common.output.output, "/v1/components/firmware", &v, component_line)
}
