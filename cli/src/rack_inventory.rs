//! The rack inventory from the CLI: racks and their devices as records (`/v1/racks`,
//! `/v1/switches`, `/v1/power-shelves`), and a power shelf's power operations:
//!
//! - `drover rack create NAME --hardware-type T [--label K=V]… --reason R`, `rack list`, `rack
//!   get RACK`, `rack delete RACK --reason R`;
//! - `drover switch|power-shelf create NAME --rack RACK --endpoint https://… --credentials-path
//!   P --reason R`, `list [--rack RACK]`, `get ID`, `delete ID --reason R` (a power shelf is
//!   marked for deletion; its controller removes it);
//! - `drover power-shelf maintenance power-on|power-off --power-shelf-id ID… [--reference URL]`
//!   (the seed's CLI: alias `fix`, `--id`, `--ref`; ids repeated or space-separated) — all
//!   shelves or none.
//!
//! - `drover rack maintenance|place|bmc|firmware` (subcommands of `drover rack`, dispatched
//!   from here) and `drover component firmware update`: see [`crate::rack_maintenance`].
//!
//! Writes need an admin certificate, reads a viewer's. `-o json` prints the coordinator's JSON.

use clap::{Args, Subcommand};
use drover_proto::api::racks::{DeviceList as DeviceListView, DeviceView, RackDetail, RackList, RackView, ShelfMaintenanceAnswer};
use serde_json::{Value, json};

use crate::answer::print_answer;
use crate::arg_checks::check_reason;
use crate::client::{ConnectArgs, get_once, post_once};
use crate::exit::CliError;
use crate::listing::with_query;
use crate::output::{OutputArgs, clean, dash, table};

/// Characters of a coordinator string a table cell shows.
const CELL: usize = 80;

fn text(s: &str) -> String {
    clean(dash(s), CELL)
}

/// Arguments of `drover rack`.
#[derive(Args)]
pub struct RackArgs {
    #[command(subcommand)]
    command: RackCommand,
}

#[derive(Subcommand)]
enum RackCommand {
    /// Create a rack (admin).
    Create(RackCreate),
    /// List racks.
    List(Common),
    /// Show a rack with its devices and hosts.
    Get(Named),
    /// Delete an empty rack (admin).
    Delete(Deleting),
    /// Request on-demand maintenance: scope and activities (admin).
    Maintenance(crate::rack_maintenance::RackMaintenance),
    /// Place a host in a rack (admin).
    Place(crate::rack_maintenance::Place),
    /// Set (or --remove) a host's BMC, which a power sequence drives (admin).
    Bmc(crate::rack_maintenance::Bmc),
    /// Firmware records a rack's firmware upgrade resolves.
    Firmware(crate::rack_maintenance::FirmwareArgs),
}

#[derive(Args)]
struct RackCreate {
    /// Its name (a-z, 0-9, '-', '_', '.').
    name: String,
    /// Hardware type (selects the default firmware).
    #[arg(long)]
    hardware_type: String,
    /// A label, KEY=VALUE; repeat for more.
    #[arg(long = "label", value_name = "KEY=VALUE")]
    labels: Vec<String>,
    /// Why (recorded in the event and the audit log).
    #[arg(long)]
    reason: String,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
struct Common {
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    connect: ConnectArgs,
}

#[derive(Args)]
struct Named {
    /// Id (or, for a rack, name).
    item: String,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
struct Deleting {
    /// Id (or, for a rack, name).
    item: String,
    /// Why (recorded in the event and the audit log).
    #[arg(long)]
    reason: String,
    #[command(flatten)]
    common: Common,
}

/// Arguments of `drover switch` and `drover power-shelf`.
#[derive(Args)]
pub struct DeviceArgs {
    #[command(subcommand)]
    command: DeviceCommand,
}

#[derive(Subcommand)]
enum DeviceCommand {
    /// Add one to a rack (admin).
    Create(DeviceCreate),
    /// List them.
    List(DeviceList),
    /// Show one.
    Get(Named),
    /// Delete one (admin; a power shelf is marked for its controller).
    Delete(Deleting),
    /// Power shelves only: request a power operation on one or more shelves (admin).
    #[command(visible_alias = "fix")]
    Maintenance(Maintenance),
}

#[derive(Args)]
struct DeviceCreate {
    /// Its name.
    name: String,
    /// Its rack (id or name).
    #[arg(long)]
    rack: String,
    /// Its BMC / PMC, https://….
    #[arg(long)]
    endpoint: String,
    /// Where its credentials live in the secret store.
    #[arg(long)]
    credentials_path: String,
    /// Store these credentials at the path: the account…
    #[arg(long, requires = "password_file")]
    username: Option<String>,
    /// …and a file holding its password (`-` is stdin).
    #[arg(long, requires = "username")]
    password_file: Option<std::path::PathBuf>,
    /// The CA (or self-signed certificate) the device's certificate chains to, PEM.
    #[arg(long, requires = "username")]
    ca_file: Option<std::path::PathBuf>,
    /// Why (recorded in the event and the audit log).
    #[arg(long)]
    reason: String,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
struct DeviceList {
    /// Only this rack's (id or name).
    #[arg(long)]
    rack: Option<String>,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
struct Maintenance {
    #[command(subcommand)]
    operation: Operation,
}

#[derive(Subcommand)]
enum Operation {
    /// Power the shelves on.
    PowerOn(MaintenanceTargets),
    /// Power the shelves off.
    PowerOff(MaintenanceTargets),
}

#[derive(Args)]
struct MaintenanceTargets {
    /// One or more power shelf ids: repeat the flag or give several values.
    #[arg(long = "power-shelf-id", visible_alias = "id", num_args = 1.., required = true)]
    ids: Vec<String>,
    /// URL of the ticket tracking this maintenance (part of the initiator string).
    #[arg(long, visible_alias = "ref")]
    reference: Option<String>,
    #[command(flatten)]
    common: Common,
}

/// `DELETE path`, the answer as JSON.
fn delete(connect: &ConnectArgs, path: &str) -> Result<Value, CliError> {
    let session = crate::client::Session::open(connect)?;
    Ok(session.runtime.block_on(session.client.request_json::<Value, Value>(reqwest::Method::DELETE, path, None))?)
}

fn rack_row(r: &RackView) -> Vec<String> {
    vec![text(&r.name), text(&r.hardware_type), r.state.as_str().to_owned(), text(&r.rack_id)]
}

fn device_rows(items: &[DeviceView]) -> String {
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|d| vec![text(&d.name), text(&d.kind), d.state.map_or("-", |s| s.as_str()).to_owned(), text(&d.endpoint), text(&d.id)])
        .collect();
    table(&["NAME", "KIND", "STATE", "ENDPOINT", "ID"], &rows)
}

/// Runs `drover rack`.
pub fn run_rack(args: &RackArgs) -> Result<(), CliError> {
    match &args.command {
        RackCommand::Create(a) => {
            let reason = check_reason(&a.reason)?;
            let mut labels = serde_json::Map::new();
            for l in &a.labels {
                let (k, v) = l.split_once('=').ok_or_else(|| CliError::usage(format!("--label {l:?}: KEY=VALUE")))?;
                labels.insert(k.to_owned(), json!(v));
            }
            let body = json!({ "name": a.name, "hardwareType": a.hardware_type, "labels": labels, "reason": reason });
            let v = post_once(&a.common.connect, "/v1/racks", &body)?;
            print_answer(a.common.output.output, "/v1/racks", &v, |r: &RackView| {
                table(&["NAME", "HARDWARE", "STATE", "ID"], &[rack_row(r)])
            })
        }
        RackCommand::List(c) => {
            let v = get_once(&c.connect, "/v1/racks")?;
            print_answer(c.output.output, "/v1/racks", &v, |l: &RackList| {
                table(&["NAME", "HARDWARE", "STATE", "ID"], &l.racks.iter().map(rack_row).collect::<Vec<_>>())
            })
        }
        RackCommand::Get(n) => {
            let path = format!("/v1/racks/{}", n.item.trim());
            let v = get_once(&n.common.connect, &path)?;
            print_answer(n.common.output.output, &path, &v, |r: &RackDetail| {
                let head = table(&["NAME", "HARDWARE", "STATE", "ID"], &[rack_row(&r.rack)]);
                format!("{head}\nhosts: {}\n{}", r.hosts.len(), device_rows(&r.devices))
            })
        }
        RackCommand::Delete(d) => {
            let reason = check_reason(&d.reason)?;
            let path = with_query(&format!("/v1/racks/{}", d.item.trim()), &[("reason", reason.to_owned())]);
            let v = delete(&d.common.connect, &path)?;
            print_answer(d.common.output.output, &path, &v, |r: &RackView| format!("rack {} deleted\n", text(&r.name)))
        }
        RackCommand::Maintenance(m) => crate::rack_maintenance::run_maintenance(m),
        RackCommand::Place(p) => crate::rack_maintenance::run_place(p),
        RackCommand::Bmc(b) => crate::rack_maintenance::run_bmc(b),
        RackCommand::Firmware(f) => crate::rack_maintenance::run_firmware(f),
    }
}

/// Runs `drover switch` (`shelves` false) or `drover power-shelf`.
pub fn run_device(args: &DeviceArgs, shelves: bool) -> Result<(), CliError> {
    let route = if shelves { "/v1/power-shelves" } else { "/v1/switches" };
    match &args.command {
        DeviceCommand::Create(a) => {
            let reason = check_reason(&a.reason)?;
            let mut body =
                json!({ "rack": a.rack, "name": a.name, "endpoint": a.endpoint, "credentialsPath": a.credentials_path, "reason": reason });
            if let (Some(user), Some(f)) = (&a.username, &a.password_file) {
                let mut c = json!({ "username": user, "password": crate::fsio::read_secret(f, "the device password")? });
                if let Some(ca) = &a.ca_file {
                    c["caPem"] = json!(crate::fsio::read_text(ca)?);
                }
                body["credentials"] = c;
            }
            let v = post_once(&a.common.connect, route, &body)?;
            print_answer(a.common.output.output, route, &v, |d: &DeviceView| device_rows(std::slice::from_ref(d)))
        }
        DeviceCommand::List(l) => {
            let q: Vec<(&str, String)> = l.rack.iter().map(|r| ("rack", r.clone())).collect();
            let path = with_query(route, &q);
            let v = get_once(&l.common.connect, &path)?;
            print_answer(l.common.output.output, &path, &v, |l: &DeviceListView| device_rows(&l.items))
        }
        DeviceCommand::Get(n) => {
            let path = format!("{route}/{}", n.item.trim());
            let v = get_once(&n.common.connect, &path)?;
            print_answer(n.common.output.output, &path, &v, |d: &DeviceView| device_rows(std::slice::from_ref(d)))
        }
        DeviceCommand::Delete(d) => {
            let reason = check_reason(&d.reason)?;
            let path = with_query(&format!("{route}/{}", d.item.trim()), &[("reason", reason.to_owned())]);
            let v = delete(&d.common.connect, &path)?;
            print_answer(d.common.output.output, &path, &v, |d: &DeviceView| device_rows(std::slice::from_ref(d)))
        }
        DeviceCommand::Maintenance(m) => {
            if !shelves {
                return Err(CliError::usage("maintenance is a power shelf verb: drover power-shelf maintenance power-on|power-off"));
            }
            let (op, t) = match &m.operation {
                Operation::PowerOn(t) => ("power_on", t),
                Operation::PowerOff(t) => ("power_off", t),
            };
            let ids: Vec<&str> = t.ids.iter().flat_map(|i| i.split_whitespace()).collect();
            let body = json!({ "powerShelfIds": ids, "operation": op, "reference": t.reference });
            let path = "/v1/power-shelves/maintenance";
            let v = post_once(&t.common.connect, path, &body)?;
            print_answer(t.common.output.output, path, &v, |a: &ShelfMaintenanceAnswer| {
                format!("{op} requested on {} power shelf(s) by {}\n", a.items.len(), text(&a.initiator))
            })
        }
    }
}
