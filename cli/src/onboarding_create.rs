//! Creating MAAS onboardings, `drover onboard`: ask the coordinator to bring new bare-metal
//! nodes into MAAS and Drover (admin). Following and acting on the onboardings it created is
//! [`crate::onboarding_manage`]'s.
//!
//! - `drover onboard --site S --profile P [--sku K] HOSTNAME IPMI_IP [--pxe-mac MAC]`: one
//!   node, `POST /v1/maas/onboardings` with `{"site", "profile", "sku", "hostname", "ipmiIp",
//!   "pxeMac"}`.
//! - `drover onboard --site S --profile P [--sku K] --csv FILE`: a batch, `POST
//!   /v1/maas/onboardings/batch` with `{"site", "profile", "sku", "nodes": [{"hostname",
//!   "ipmiIp", "pxeMac"}]}`. `FILE` (`-`: stdin) is a CSV whose first line is a header naming
//!   the columns `hostname` and `ipmi_ip`, and optionally `pxe_mac`, in any order; cells are
//!   trimmed, blank lines and `#` comments skipped, an empty `pxe_mac` is none. At most
//!   [`MAX_ROWS`] rows.
//!
//! Everything is checked here before anything is sent, by the coordinator's own rules:
//! hostnames are lowercase RFC 1123 (lowercased first), IPMI addresses IPv4 or IPv6, MACs six
//! hex pairs (`:` or `-`, sent lowercase with `:`), and within a file no hostname, IPMI address
//! or MAC twice. A bad file is named with its line (exit 65), a bad argument by its name (exit
//! 64); nothing is sent then. The coordinator checks again (a refusal is exit 65 with its
//! message).
//!
//! Prints what was created as a table (`ID HOSTNAME IPMI STATE STAGE`) and how to follow it
//! (`drover describe onboarding ID`, or for a batch its id and `drover get onboardings --batch
//! ID`); `-o json` prints the coordinator's JSON unchanged.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;

use clap::Args;
use serde::Serialize;

use crate::answer::decode;
use crate::client::{ConnectArgs, post_once};
use crate::exit::CliError;
use crate::onboarding_view::{CreatedBatchJson, ONBOARDINGS, OneJson, render_created};
use crate::output::{OutputArgs, clean, pretty, print};

/// The most rows one CSV may hold (one batch).
pub const MAX_ROWS: usize = 1000;
/// The longest SKU accepted.
const MAX_SKU_CHARS: usize = 128;

/// Arguments of `drover onboard`.
#[derive(Args)]
pub struct OnboardArgs {
    /// The MAAS site (name or id) the node(s) are racked in.
    #[arg(long, value_name = "SITE")]
    site: String,
    /// The site's profile (name or id) whose policy the onboarding follows.
    #[arg(long, value_name = "PROFILE")]
    profile: String,
    /// The hardware SKU the node(s) are expected to be; none when absent.
    #[arg(long, value_name = "SKU")]
    sku: Option<String>,
    /// One node's hostname (lowercase RFC 1123); give IPMI_IP with it, or --csv instead.
    #[arg(value_name = "HOSTNAME", required_unless_present = "csv", requires = "ipmi_ip")]
    hostname: Option<String>,
    /// That node's BMC (IPMI) address, IPv4 or IPv6.
    #[arg(value_name = "IPMI_IP", required_unless_present = "csv")]
    ipmi_ip: Option<String>,
    /// That node's PXE MAC (aa:bb:cc:dd:ee:ff), when known.
    #[arg(long, value_name = "MAC", conflicts_with = "csv")]
    pxe_mac: Option<String>,
    /// Onboard a batch instead: a CSV with a header naming hostname,ipmi_ip and optionally
    /// pxe_mac (any order), one node a line, at most 1000 (`-`: stdin).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["hostname", "ipmi_ip"])]
    csv: Option<PathBuf>,
    #[command(flatten)]
    wait: crate::wait::WaitArgs,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    connect: ConnectArgs,
}

/// One node to onboard, as the API names its fields.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Node {
    /// Lowercase RFC 1123.
    pub hostname: String,
    /// The BMC's address, canonical.
    pub ipmi_ip: String,
    /// Lowercase with colons; `null` when not known.
    pub pxe_mac: Option<String>,
}

/// The body of `POST /v1/maas/onboardings`.
#[derive(Serialize, Debug)]
pub struct SingleBody<'a> {
    /// The site.
    pub site: &'a str,
    /// The profile.
    pub profile: &'a str,
    /// The SKU, or `null`.
    pub sku: Option<&'a str>,
    /// The node.
    #[serde(flatten)]
    pub node: &'a Node,
}

/// The body of `POST /v1/maas/onboardings/batch`.
#[derive(Serialize, Debug)]
pub struct BatchBody<'a> {
    /// The site.
    pub site: &'a str,
    /// The profile.
    pub profile: &'a str,
    /// The SKU, or `null`.
    pub sku: Option<&'a str>,
    /// The nodes.
    pub nodes: &'a [Node],
}

/// A hostname, lowercased, checked by enrollment's rule; `what` names it in the error.
pub fn check_hostname(what: &str, v: &str) -> Result<String, String> {
    let v = v.trim();
    if v.is_empty() {
        return Err(format!("empty {what}"));
    }
    let lower = v.to_ascii_lowercase();
    drover_proto::names::check_hostname(&lower)
        .map_err(|_| format!("{what} {:?} is not a hostname (RFC 1123: letters, digits and '-', dot-separated)", clean(v, 80)))?;
    // The host it becomes is named by hostname or id, the id tried first (the coordinator's rule).
    drover_proto::names::check_not_an_id("hostname", &lower).map_err(|e| format!("{what}: {e}"))?;
    Ok(lower)
}

/// An IP address, canonical; `what` names it in the error.
pub fn check_ip(what: &str, v: &str) -> Result<IpAddr, String> {
    let v = v.trim();
    if v.is_empty() {
        return Err(format!("empty {what}"));
    }
    v.parse::<IpAddr>().map_err(|_| format!("{what} {:?} is not an IP address", clean(v, 80)))
}

/// A MAC address as six hex pairs (`:` or `-`), lowercase with colons; `what` names it.
pub fn check_mac(what: &str, v: &str) -> Result<String, String> {
    let v = v.trim();
    let parts: Vec<&str> = v.split([':', '-']).collect();
    if parts.len() != 6 || !parts.iter().all(|p| p.len() == 2 && p.bytes().all(|b| b.is_ascii_hexdigit())) {
        return Err(format!("{what} {:?} is not a MAC address (aa:bb:cc:dd:ee:ff)", clean(v, 80)));
    }
    Ok(parts.join(":").to_ascii_lowercase())
}

/// A site or profile: a name or id, `[A-Za-z0-9._-]{1,64}` (the coordinator's rule).
fn check_name(flag: &str, v: &str) -> Result<String, CliError> {
    let v = v.trim();
    if v.is_empty() || v.len() > 64 || !v.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)) {
        return Err(CliError::usage(format!("{flag} {:?} must be a name or id: 1-64 of A-Z a-z 0-9 . _ -", clean(v, 80))));
    }
    Ok(v.to_owned())
}

/// The SKU: trimmed, non-empty, one line, at most [`MAX_SKU_CHARS`].
fn check_sku(v: &str) -> Result<String, CliError> {
    let v = v.trim();
    if v.is_empty() || v.chars().count() > MAX_SKU_CHARS || v.chars().any(char::is_control) {
        return Err(CliError::usage(format!("--sku must be 1-{MAX_SKU_CHARS} characters on one line")));
    }
    Ok(v.to_owned())
}

/// Where each column of a node CSV is.
struct Columns {
    count: usize,
    hostname: usize,
    ipmi_ip: usize,
    pxe_mac: Option<usize>,
}

impl Columns {
    /// The header line `line` (number `n`).
    fn parse(n: usize, line: &str) -> Result<Columns, String> {
        let names: Vec<String> = line.split(',').map(|c| c.trim().to_ascii_lowercase()).collect();
        let find = |name: &str| names.iter().position(|c| c == name);
        if find("hostname").is_none() && find("ipmi_ip").is_none() {
            return Err(format!(
                "line {n}: no header: the first line must name the columns hostname,ipmi_ip[,pxe_mac] (found {:?})",
                clean(line, 80)
            ));
        }
        for (i, name) in names.iter().enumerate() {
            if !matches!(name.as_str(), "hostname" | "ipmi_ip" | "pxe_mac") {
                return Err(format!(
                    "line {n}: the header's column {} is {:?}: the columns are hostname, ipmi_ip and optionally pxe_mac",
                    i + 1,
                    clean(name, 40)
                ));
            }
            if names[..i].contains(name) {
                return Err(format!("line {n}: the header names column {name:?} twice"));
            }
        }
        let (Some(hostname), Some(ipmi_ip)) = (find("hostname"), find("ipmi_ip")) else {
            let missing = if find("hostname").is_none() { "hostname" } else { "ipmi_ip" };
            return Err(format!("line {n}: the header has no {missing} column: the first line must name hostname,ipmi_ip[,pxe_mac]"));
        };
        Ok(Columns { count: names.len(), hostname, ipmi_ip, pxe_mac: find("pxe_mac") })
    }
}

/// The nodes of a CSV (see the module's doc); a problem is named by its line.
pub fn parse_csv(text: &str) -> Result<Vec<Node>, String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l.trim())).filter(|(_, l)| !l.is_empty() && !l.starts_with('#'));
    let Some((header_line, header)) = lines.next() else {
        return Err("the file is empty: it needs a header line naming hostname,ipmi_ip[,pxe_mac] and one node a line".to_owned());
    };
    let cols = Columns::parse(header_line, header)?;
    let mut nodes = Vec::new();
    let mut hosts: HashMap<String, usize> = HashMap::new();
    let mut ips: HashMap<IpAddr, usize> = HashMap::new();
    let mut macs: HashMap<String, usize> = HashMap::new();
    for (n, line) in lines {
        if nodes.len() == MAX_ROWS {
            return Err(format!("line {n}: more than {MAX_ROWS} rows: split the file into batches of at most {MAX_ROWS}"));
        }
        let at = |why: String| format!("line {n}: {why}");
        let cells: Vec<&str> = line.split(',').map(str::trim).collect();
        if cells.len() != cols.count {
            return Err(at(format!("expected {} comma-separated fields (the header's columns), found {}", cols.count, cells.len())));
        }
        let hostname = check_hostname("hostname", cells[cols.hostname]).map_err(at)?;
        let ip = check_ip("ipmi_ip", cells[cols.ipmi_ip]).map_err(at)?;
        let pxe_mac = match cols.pxe_mac.map(|i| cells[i]).filter(|c| !c.is_empty()) {
            Some(m) => Some(check_mac("pxe_mac", m).map_err(at)?),
            None => None,
        };
        if let Some(first) = hosts.insert(hostname.clone(), n) {
            return Err(at(format!("hostname {hostname:?} is already on line {first}")));
        }
        if let Some(first) = ips.insert(ip, n) {
            return Err(at(format!("ipmi_ip {ip} is already on line {first}")));
        }
        if let Some((mac, first)) = pxe_mac.as_ref().and_then(|m| macs.insert(m.clone(), n).map(|first| (m, first))) {
            return Err(at(format!("pxe_mac {mac} is already on line {first}")));
        }
        nodes.push(Node { hostname, ipmi_ip: ip.to_string(), pxe_mac });
    }
    if nodes.is_empty() {
        return Err(format!("line {header_line}: the header is not followed by any node"));
    }
    Ok(nodes)
}

/// The one node of the single form, from its arguments (64 when one is wrong).
fn single_node(hostname: &str, ipmi_ip: &str, pxe_mac: Option<&str>) -> Result<Node, CliError> {
    Ok(Node {
        hostname: check_hostname("HOSTNAME", hostname).map_err(CliError::usage)?,
        ipmi_ip: check_ip("IPMI_IP", ipmi_ip).map_err(CliError::usage)?.to_string(),
        pxe_mac: pxe_mac.map(|m| check_mac("--pxe-mac", m)).transpose().map_err(CliError::usage)?,
    })
}

/// What `drover onboard` sends: the route and the body, everything checked.
#[derive(Debug)]
pub enum Request {
    /// One node.
    Single {
        /// The site.
        site: String,
        /// The profile.
        profile: String,
        /// The SKU.
        sku: Option<String>,
        /// The node.
        node: Node,
    },
    /// A batch from a CSV.
    Batch {
        /// The site.
        site: String,
        /// The profile.
        profile: String,
        /// The SKU.
        sku: Option<String>,
        /// The nodes.
        nodes: Vec<Node>,
    },
}

impl Request {
    /// The route and the JSON body.
    pub fn route_and_body(&self) -> Result<(String, serde_json::Value), CliError> {
        let json = |r: Result<serde_json::Value, serde_json::Error>| {
            r.map_err(|e| CliError::new(crate::exit::codes::SOFTWARE, format!("internal error: {e}")))
        };
        Ok(match self {
            Request::Single { site, profile, sku, node } => {
                let body = SingleBody { site, profile, sku: sku.as_deref(), node };
                (ONBOARDINGS.to_owned(), json(serde_json::to_value(body))?)
            }
            Request::Batch { site, profile, sku, nodes } => {
                let body = BatchBody { site, profile, sku: sku.as_deref(), nodes };
                (format!("{ONBOARDINGS}/batch"), json(serde_json::to_value(body))?)
            }
        })
    }
}

/// Checks the arguments and reads the CSV: the request, or why not (nothing is sent).
pub fn request(args: &OnboardArgs) -> Result<Request, CliError> {
    let site = check_name("--site", &args.site)?;
    let profile = check_name("--profile", &args.profile)?;
    let sku = args.sku.as_deref().map(check_sku).transpose()?;
    match (&args.csv, &args.hostname, &args.ipmi_ip) {
        (Some(file), _, _) => {
            let (name, bytes) = crate::fsio::read_input(Some(file))?;
            let text = String::from_utf8(bytes).map_err(|_| CliError::data(format!("{name} is not UTF-8 text")))?;
            let nodes = parse_csv(&text).map_err(|why| CliError::data(format!("{name}: {why}; nothing was sent")))?;
            Ok(Request::Batch { site, profile, sku, nodes })
        }
        (None, Some(hostname), Some(ipmi_ip)) => {
            Ok(Request::Single { site, profile, sku, node: single_node(hostname, ipmi_ip, args.pxe_mac.as_deref())? })
        }
        _ => Err(CliError::usage("give HOSTNAME and IPMI_IP for one node, or --csv FILE for a batch")),
    }
}

/// What a batch prints: its id, the table, and how to follow it.
pub fn render_batch(b: &CreatedBatchJson) -> String {
    let id = clean(&b.batch_id, 40);
    format!(
        "Batch {id}: {} onboardings\n{}Follow it: drover get onboardings --batch {id}\n",
        b.onboardings.len(),
        render_created(&b.onboardings)
    )
}

/// What one onboarding prints: the table and how to follow it.
pub fn render_single(one: &OneJson) -> String {
    format!(
        "{}Follow it: drover describe onboarding {}\n",
        render_created(std::slice::from_ref(&one.onboarding)),
        clean(&one.onboarding.onboarding_id, 40)
    )
}

/// Runs `drover onboard`.
pub fn run(args: &OnboardArgs) -> Result<(), CliError> {
    let req = request(args)?;
    let (path, body) = req.route_and_body()?;
    let value = post_once(&args.connect, &path, &body)?;
    let (text, ids) = match req {
        Request::Single { .. } => {
            let one: OneJson = decode(&path, &value)?;
            (render_single(&one), vec![one.onboarding.onboarding_id])
        }
        Request::Batch { .. } => {
            let batch: CreatedBatchJson = decode(&path, &value)?;
            let ids = batch.onboardings.iter().map(|o| o.onboarding_id.clone()).collect();
            (render_batch(&batch), ids)
        }
    };
    print(&if args.output.output.is_json() { pretty(&value)? } else { text })?;
    if !args.wait.wait {
        return Ok(());
    }
    let session = crate::client::Session::open(&args.connect)?;
    let mut out = crate::wait::progress_sink(args.output.output.is_json());
    crate::wait::wait_onboardings(&session, &ids, false, args.wait.limit(), &mut out)
}

#[cfg(test)]
#[path = "onboarding_create_tests.rs"]
mod tests;
