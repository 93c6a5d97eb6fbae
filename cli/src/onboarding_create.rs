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

/// Why one node's field is refused; `what` names the field (a CSV column or an argument).
#[derive(Debug, thiserror::Error)]
pub enum FieldError {
    /// The field is empty.
    #[error("empty {what}")]
    Empty {
        /// The field.
        what: String,
    },
    /// Not a hostname by RFC 1123.
    #[error("{what} {given:?} is not a hostname (RFC 1123: letters, digits and '-', dot-separated)")]
    Hostname {
        /// The field.
        what: String,
        /// What was given, cleaned.
        given: String,
    },
    /// A hostname that reads as an id (the host it becomes is named by hostname or id).
    #[error("{what}: {source}")]
    HostnameIsAnId {
        /// The field.
        what: String,
        /// The names rule it breaks.
        #[source]
        source: drover_proto::names::NameError,
    },
    /// Not an IP address.
    #[error("{what} {given:?} is not an IP address")]
    Ip {
        /// The field.
        what: String,
        /// What was given, cleaned.
        given: String,
    },
    /// Not a MAC address.
    #[error("{what} {given:?} is not a MAC address (aa:bb:cc:dd:ee:ff)")]
    Mac {
        /// The field.
        what: String,
        /// What was given, cleaned.
        given: String,
    },
}

/// A hostname, lowercased, checked by enrollment's rule; `what` names it in the error.
pub fn check_hostname(what: &str, v: &str) -> Result<String, FieldError> {
    let v = v.trim();
    if v.is_empty() {
        return Err(FieldError::Empty { what: what.to_owned() });
    }
    let lower = v.to_ascii_lowercase();
    drover_proto::names::check_hostname(&lower).map_err(|_| FieldError::Hostname { what: what.to_owned(), given: clean(v, 80) })?;
    // The host it becomes is named by hostname or id, the id tried first (the coordinator's rule).
    drover_proto::names::check_not_an_id("hostname", &lower)
        .map_err(|source| FieldError::HostnameIsAnId { what: what.to_owned(), source })?;
    Ok(lower)
}

/// An IP address, canonical; `what` names it in the error.
pub fn check_ip(what: &str, v: &str) -> Result<IpAddr, FieldError> {
    let v = v.trim();
    if v.is_empty() {
        return Err(FieldError::Empty { what: what.to_owned() });
    }
    v.parse::<IpAddr>().map_err(|_| FieldError::Ip { what: what.to_owned(), given: clean(v, 80) })
}

/// A MAC address as six hex pairs (`:` or `-`), lowercase with colons; `what` names it.
pub fn check_mac(what: &str, v: &str) -> Result<String, FieldError> {
    let v = v.trim();
    let parts: Vec<&str> = v.split([':', '-']).collect();
    if parts.len() != 6 || !parts.iter().all(|p| p.len() == 2 && p.bytes().all(|b| b.is_ascii_hexdigit())) {
        return Err(FieldError::Mac { what: what.to_owned(), given: clean(v, 80) });
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

/// Why a node CSV is refused: every problem but an empty file names its line.
#[derive(Debug, thiserror::Error)]
pub enum CsvError {
    /// Nothing but blank lines and comments.
    #[error("the file is empty: it needs a header line naming hostname,ipmi_ip[,pxe_mac] and one node a line")]
    Empty,
    /// The first line names neither hostname nor ipmi_ip.
    #[error("line {line}: no header: the first line must name the columns hostname,ipmi_ip[,pxe_mac] (found {found:?})")]
    NoHeader {
        /// The line.
        line: usize,
        /// The line as found, cleaned.
        found: String,
    },
    /// The header names a column that is not one of the three.
    #[error("line {line}: the header's column {column} is {name:?}: the columns are hostname, ipmi_ip and optionally pxe_mac")]
    UnknownColumn {
        /// The line.
        line: usize,
        /// The column, from 1.
        column: usize,
        /// Its name, cleaned.
        name: String,
    },
    /// The header names a column twice.
    #[error("line {line}: the header names column {name:?} twice")]
    DuplicateColumn {
        /// The line.
        line: usize,
        /// The column's name.
        name: String,
    },
    /// The header lacks hostname or ipmi_ip.
    #[error("line {line}: the header has no {missing} column: the first line must name hostname,ipmi_ip[,pxe_mac]")]
    MissingColumn {
        /// The line.
        line: usize,
        /// The column missing.
        missing: &'static str,
    },
    /// More rows than one batch takes.
    #[error("line {line}: more than {MAX_ROWS} rows: split the file into batches of at most {MAX_ROWS}")]
    TooManyRows {
        /// The first row over.
        line: usize,
    },
    /// A row with another number of fields than the header.
    #[error("line {line}: expected {expected} comma-separated fields (the header's columns), found {found}")]
    FieldCount {
        /// The line.
        line: usize,
        /// The header's columns.
        expected: usize,
        /// The row's fields.
        found: usize,
    },
    /// A field is refused.
    #[error("line {line}: {source}")]
    Field {
        /// The line.
        line: usize,
        /// Why.
        #[source]
        source: FieldError,
    },
    /// A hostname already on an earlier line.
    #[error("line {line}: hostname {hostname:?} is already on line {first}")]
    DuplicateHostname {
        /// The line.
        line: usize,
        /// The hostname.
        hostname: String,
        /// The line it is first on.
        first: usize,
    },
    /// An IPMI address already on an earlier line.
    #[error("line {line}: ipmi_ip {ip} is already on line {first}")]
    DuplicateIp {
        /// The line.
        line: usize,
        /// The address.
        ip: IpAddr,
        /// The line it is first on.
        first: usize,
    },
    /// A MAC already on an earlier line.
    #[error("line {line}: pxe_mac {mac} is already on line {first}")]
    DuplicateMac {
        /// The line.
        line: usize,
        /// The MAC.
        mac: String,
        /// The line it is first on.
        first: usize,
    },
    /// A header and no node.
    #[error("line {line}: the header is not followed by any node")]
    NoNodes {
        /// The header's line.
        line: usize,
    },
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
    fn parse(n: usize, line: &str) -> Result<Columns, CsvError> {
        let names: Vec<String> = line.split(',').map(|c| c.trim().to_ascii_lowercase()).collect();
        let find = |name: &str| names.iter().position(|c| c == name);
        if find("hostname").is_none() && find("ipmi_ip").is_none() {
            return Err(CsvError::NoHeader { line: n, found: clean(line, 80) });
        }
        for (i, name) in names.iter().enumerate() {
            if !matches!(name.as_str(), "hostname" | "ipmi_ip" | "pxe_mac") {
                return Err(CsvError::UnknownColumn { line: n, column: i + 1, name: clean(name, 40) });
            }
            if names[..i].contains(name) {
                return Err(CsvError::DuplicateColumn { line: n, name: name.clone() });
            }
        }
        let (Some(hostname), Some(ipmi_ip)) = (find("hostname"), find("ipmi_ip")) else {
            let missing = if find("hostname").is_none() { "hostname" } else { "ipmi_ip" };
            return Err(CsvError::MissingColumn { line: n, missing });
        };
        Ok(Columns { count: names.len(), hostname, ipmi_ip, pxe_mac: find("pxe_mac") })
    }
}

/// The nodes of a CSV (see the module's doc); a problem is named by its line.
pub fn parse_csv(text: &str) -> Result<Vec<Node>, CsvError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l.trim())).filter(|(_, l)| !l.is_empty() && !l.starts_with('#'));
    let Some((header_line, header)) = lines.next() else {
        return Err(CsvError::Empty);
    };
    let cols = Columns::parse(header_line, header)?;
    let mut nodes = Vec::new();
    let mut hosts: HashMap<String, usize> = HashMap::new();
    let mut ips: HashMap<IpAddr, usize> = HashMap::new();
    let mut macs: HashMap<String, usize> = HashMap::new();
    for (n, line) in lines {
        if nodes.len() == MAX_ROWS {
            return Err(CsvError::TooManyRows { line: n });
        }
        let at = |source: FieldError| CsvError::Field { line: n, source };
        let cells: Vec<&str> = line.split(',').map(str::trim).collect();
        if cells.len() != cols.count {
            return Err(CsvError::FieldCount { line: n, expected: cols.count, found: cells.len() });
        }
        let hostname = check_hostname("hostname", cells[cols.hostname]).map_err(at)?;
        let ip = check_ip("ipmi_ip", cells[cols.ipmi_ip]).map_err(at)?;
        let pxe_mac = match cols.pxe_mac.map(|i| cells[i]).filter(|c| !c.is_empty()) {
            Some(m) => Some(check_mac("pxe_mac", m).map_err(at)?),
            None => None,
        };
        if let Some(first) = hosts.insert(hostname.clone(), n) {
            return Err(CsvError::DuplicateHostname { line: n, hostname, first });
        }
        if let Some(first) = ips.insert(ip, n) {
            return Err(CsvError::DuplicateIp { line: n, ip, first });
        }
        if let Some((mac, first)) = pxe_mac.as_ref().and_then(|m| macs.insert(m.clone(), n).map(|first| (m, first))) {
            return Err(CsvError::DuplicateMac { line: n, mac: mac.clone(), first });
        }
        nodes.push(Node { hostname, ipmi_ip: ip.to_string(), pxe_mac });
    }
    if nodes.is_empty() {
        return Err(CsvError::NoNodes { line: header_line });
    }
    Ok(nodes)
}

/// The one node of the single form, from its arguments (64 when one is wrong).
fn single_node(hostname: &str, ipmi_ip: &str, pxe_mac: Option<&str>) -> Result<Node, CliError> {
    Ok(Node {
        hostname: check_hostname("HOSTNAME", hostname).map_err(|e| CliError::usage(e.to_string()))?,
        ipmi_ip: check_ip("IPMI_IP", ipmi_ip).map_err(|e| CliError::usage(e.to_string()))?.to_string(),
        pxe_mac: pxe_mac.map(|m| check_mac("--pxe-mac", m)).transpose().map_err(|e| CliError::usage(e.to_string()))?,
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
