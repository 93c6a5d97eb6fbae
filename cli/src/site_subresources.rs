//! `drover site roce|override|profile`: the resources nested under a MAAS site
//! (`/v1/maas/sites/{site}/…`): RoCE assignments, BMC credential overrides and profiles. The
//! site record itself is [`crate::site_record`]'s.
//!
//! - `roce import SITE FILE.csv` (admin): a CSV with the header `hostname,interface,ipv4_cidr`
//!   becomes the JSON of `POST …/roce-assignments` (one upsert, all rows or none). Rows are
//!   checked here first and a bad one is named by its line (exit 65); the coordinator checks
//!   them again. `roce list SITE [--hostname H]`, `roce delete SITE ID`.
//! - `override create SITE --selector-type pxe_mac|ipmi_ip|hostname --selector-value V
//!   --power-user U --power-pass-file F` (admin), `override list SITE`, `override delete SITE
//!   ID`, `override credentials SITE ID --power-user U --power-pass-file F` (rotation).
//! - `profile create SITE NAME [--description D] [--set KEY=VALUE]…`, `profile list SITE`,
//!   `profile get SITE PROFILE`, `profile update SITE PROFILE [--set KEY=VALUE]… [--name N]
//!   [--status active|disabled]`: `KEY` is a policy field as the API names it
//!   (`batchMaxParallel`, `distroSeries`…); `VALUE` is read as JSON when it parses (numbers,
//!   booleans, null), else as a string.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use drover_client::Method;
use drover_proto::api::sites::{Items, OverrideView, ProfileView, RoceUpsert, RoceView};
use serde_json::{Map, Value, json};

use crate::exit::CliError;
use crate::fsio::read_secret;
use crate::output;
use crate::site_request::{Common, c, call, show, site_path};

/// Arguments of `drover site roce`.
#[derive(Args)]
pub struct RoceArgs {
    #[command(subcommand)]
    command: RoceCommand,
}

#[derive(Subcommand)]
enum RoceCommand {
    /// Upsert the assignments of a CSV file (`hostname,interface,ipv4_cidr`) (admin).
    Import {
        /// The site's name or id.
        site: String,
        /// The CSV file (`-`: stdin).
        file: PathBuf,
        /// Why (recorded in the audit log).
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
        #[command(flatten)]
        common: Common,
    },
    /// List a site's assignments (viewer).
    List {
        /// The site's name or id.
        site: String,
        /// Only this host's.
        #[arg(long)]
        hostname: Option<String>,
        #[command(flatten)]
        common: Common,
    },
    /// Remove one assignment (admin).
    Delete {
        /// The site's name or id.
        site: String,
        /// The assignment's id.
        id: String,
        #[command(flatten)]
        common: Common,
    },
}

/// The JSON items of a RoCE CSV: the header must be `hostname,interface,ipv4_cidr` (in any
/// order, any case); blank lines and `#` comments are skipped; a bad row is named by line.
pub fn roce_csv(text: &str) -> Result<Vec<Value>, CliError> {
    let mut lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
    let (_, header) = lines.next().ok_or_else(|| CliError::data("the CSV is empty: it needs a header hostname,interface,ipv4_cidr"))?;
    let cols: Vec<String> = header.split(',').map(|c| c.trim().to_ascii_lowercase()).collect();
    let find = |name: &str| cols.iter().position(|c| c == name);
    let (Some(h), Some(i), Some(c)) = (find("hostname"), find("interface"), find("ipv4_cidr")) else {
        return Err(CliError::data(format!("line 1: the header must name hostname,interface,ipv4_cidr (found {header:?})")));
    };
    if cols.len() != 3 {
        return Err(CliError::data(format!("line 1: expected exactly 3 columns, found {}", cols.len())));
    }
    let mut items = Vec::new();
    for (n, line) in lines {
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        if fields.len() != 3 || fields.iter().any(|f| f.is_empty()) {
            return Err(CliError::data(format!("line {}: expected 3 non-empty fields, found {:?}", n + 1, line)));
        }
        let cidr = fields[c];
        let valid = cidr
            .split_once('/')
            .is_some_and(|(a, p)| a.parse::<std::net::Ipv4Addr>().is_ok() && p.parse::<u8>().is_ok_and(|p| (1..=32).contains(&p)));
        if !valid {
            return Err(CliError::data(format!("line {}: ipv4_cidr {cidr:?} is not an IPv4 address with a /1-/32 prefix", n + 1)));
        }
        items.push(json!({ "hostname": fields[h], "interface": fields[i], "ipv4Cidr": cidr }));
    }
    if items.is_empty() {
        return Err(CliError::data("the CSV has a header but no rows"));
    }
    Ok(items)
}

/// Runs `drover site roce`.
pub fn run_roce(args: &RoceArgs) -> Result<(), CliError> {
    match &args.command {
        RoceCommand::Import { site, file, reason, common } => {
            let (name, bytes) = crate::fsio::read_input(Some(file))?;
            let text = String::from_utf8(bytes).map_err(|_| CliError::data(format!("{name} is not UTF-8")))?;
            let items = roce_csv(&text).map_err(|e| CliError::data(format!("{name}: {e}")))?;
            let mut body = json!({ "items": items });
            if let Some(r) = reason {
                body["reason"] = json!(r);
            }
            let path = site_path(site, "/roce-assignments")?;
            let v = call(common, Method::POST, &path, Some(&body))?;
            show(common, &path, &v, |r: &RoceUpsert| format!("created {}, updated {}, unchanged {}\n", r.created, r.updated, r.unchanged))
        }
        RoceCommand::List { site, hostname, common } => {
            let mut path = site_path(site, "/roce-assignments")?;
            if let Some(h) = hostname {
                if !h.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)) {
                    return Err(CliError::usage(format!("--hostname {h:?} is not a hostname")));
                }
                path.push_str(&format!("?hostname={h}"));
            }
            let v = call(common, Method::GET, &path, None)?;
            show(common, &path, &v, |l: &Items<RoceView>| {
                let rows: Vec<Vec<String>> =
                    l.items.iter().map(|r| [&r.hostname, &r.interface, &r.ipv4_cidr, &r.id].map(|s| c(output::dash(s))).to_vec()).collect();
                output::table(&["HOSTNAME", "INTERFACE", "IPV4 CIDR", "ID"], &rows)
            })
        }
        RoceCommand::Delete { site, id, common } => {
            let path = site_path(site, &format!("/roce-assignments/{}", checked_id(id)?))?;
            let v = call(common, Method::DELETE, &path, None)?;
            show(common, &path, &v, |r: &RoceView| format!("deleted {} {} {}\n", c(&r.hostname), c(&r.interface), c(&r.ipv4_cidr)))
        }
    }
}

fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn checked_id(id: &str) -> Result<String, CliError> {
    uuid::Uuid::parse_str(id.trim()).map(|u| u.to_string()).map_err(|_| CliError::usage(format!("{id:?} is not an id (a UUID)")))
}

/// Arguments of `drover site override`.
#[derive(Args)]
pub struct OverrideArgs {
    #[command(subcommand)]
    command: OverrideCommand,
}

#[derive(Args)]
struct PowerArgs {
    /// The BMC user.
    #[arg(long, value_name = "USER")]
    power_user: String,
    /// File holding the BMC password (`-`: stdin).
    #[arg(long, value_name = "FILE")]
    power_pass_file: PathBuf,
}

impl PowerArgs {
    fn json(&self) -> Result<Value, CliError> {
        Ok(json!({ "user": self.power_user, "pass": read_secret(&self.power_pass_file, "the BMC password")? }))
    }
}

#[derive(Subcommand)]
enum OverrideCommand {
    /// Give one node (by PXE MAC, IPMI address or hostname) its own BMC credentials (admin).
    Create {
        /// The site's name or id.
        site: String,
        /// pxe_mac, ipmi_ip or hostname.
        #[arg(long, value_name = "TYPE")]
        selector_type: String,
        /// The MAC, address or hostname.
        #[arg(long, value_name = "VALUE")]
        selector_value: String,
        #[command(flatten)]
        power: PowerArgs,
        /// Why (recorded in the audit log).
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
        #[command(flatten)]
        common: Common,
    },
    /// List a site's overrides in selection order (viewer).
    List {
        /// The site's name or id.
        site: String,
        #[command(flatten)]
        common: Common,
    },
    /// Remove an override and its credentials (admin).
    Delete {
        /// The site's name or id.
        site: String,
        /// The override's id.
        id: String,
        #[command(flatten)]
        common: Common,
    },
    /// Rotate an override's credentials (admin).
    Credentials {
        /// The site's name or id.
        site: String,
        /// The override's id.
        id: String,
        #[command(flatten)]
        power: PowerArgs,
        #[command(flatten)]
        common: Common,
    },
}

fn override_line(v: &OverrideView) -> String {
    format!("{} {}={}\n", c(&v.id), v.selector_type, c(&v.selector_value))
}

/// Runs `drover site override`.
pub fn run_override(args: &OverrideArgs) -> Result<(), CliError> {
    match &args.command {
        OverrideCommand::Create { site, selector_type, selector_value, power, reason, common } => {
            let mut body = json!({ "selectorType": selector_type, "selectorValue": selector_value, "credentials": power.json()? });
            if let Some(r) = reason {
                body["reason"] = json!(r);
            }
            let path = site_path(site, "/overrides")?;
            let v = call(common, Method::POST, &path, Some(&body))?;
            show(common, &path, &v, override_line)
        }
        OverrideCommand::List { site, common } => {
            let path = site_path(site, "/overrides")?;
            let v = call(common, Method::GET, &path, None)?;
            show(common, &path, &v, |l: &Items<OverrideView>| {
                let rows: Vec<Vec<String>> = l
                    .items
                    .iter()
                    .map(|o| vec![o.selector_type.to_string(), c(&o.selector_value), o.status.to_string(), c(&o.id)])
                    .collect();
                output::table(&["TYPE", "VALUE", "STATUS", "ID"], &rows)
            })
        }
        OverrideCommand::Delete { site, id, common } => {
            let path = site_path(site, &format!("/overrides/{}", checked_id(id)?))?;
            let v = call(common, Method::DELETE, &path, None)?;
            show(common, &path, &v, |o: &OverrideView| format!("deleted {}", override_line(o)))
        }
        OverrideCommand::Credentials { site, id, power, common } => {
            let body = json!({ "credentials": power.json()? });
            let path = site_path(site, &format!("/overrides/{}/credentials", checked_id(id)?))?;
            let v = call(common, Method::POST, &path, Some(&body))?;
            show(common, &path, &v, |o: &OverrideView| format!("rotated {}", override_line(o)))
        }
    }
}

/// Arguments of `drover site profile`.
#[derive(Args)]
pub struct ProfileArgs {
    #[command(subcommand)]
    command: ProfileCommand,
}

#[derive(Subcommand)]
enum ProfileCommand {
    /// Add a profile to a site (admin).
    Create {
        /// The site's name or id.
        site: String,
        /// The profile's name, unique in the site.
        name: String,
        /// Free text.
        #[arg(long)]
        description: Option<String>,
        /// A policy field, KEY=VALUE (repeat); unset fields take the defaults.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
        #[command(flatten)]
        common: Common,
    },
    /// List a site's profiles (viewer).
    List {
        /// The site's name or id.
        site: String,
        #[command(flatten)]
        common: Common,
    },
    /// Show one profile and its policy (viewer).
    Get {
        /// The site's name or id.
        site: String,
        /// The profile's name or id.
        profile: String,
        #[command(flatten)]
        common: Common,
    },
    /// Change a profile (admin).
    Update {
        /// The site's name or id.
        site: String,
        /// The profile's name or id.
        profile: String,
        /// A new name.
        #[arg(long)]
        name: Option<String>,
        /// active or disabled.
        #[arg(long)]
        status: Option<String>,
        /// A policy field to change, KEY=VALUE (repeat).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
        #[command(flatten)]
        common: Common,
    },
}

/// `KEY=VALUE` pairs as a JSON object; a value that parses as JSON is taken as such.
pub fn policy_pairs(pairs: &[String]) -> Result<Map<String, Value>, CliError> {
    let mut m = Map::new();
    for pair in pairs {
        let (k, v) = pair.split_once('=').ok_or_else(|| CliError::usage(format!("--set {pair:?} is not KEY=VALUE")))?;
        let value = serde_json::from_str::<Value>(v).ok().filter(|j| !j.is_object() && !j.is_array()).unwrap_or_else(|| json!(v));
        m.insert(k.trim().to_owned(), value);
    }
    Ok(m)
}

fn profile_table(l: &Items<ProfileView>) -> String {
    let rows: Vec<Vec<String>> = l
        .items
        .iter()
        .map(|p| {
            vec![
                c(&p.name),
                p.status.to_string(),
                if p.default { "yes".into() } else { String::new() },
                c(&p.policy.distro_series),
                c(&p.id),
            ]
        })
        .collect();
    output::table(&["NAME", "STATUS", "DEFAULT", "DISTRO", "ID"], &rows)
}

fn profile_text(p: &ProfileView) -> String {
    let mut out = format!("{} ({}) {}\n", c(&p.name), c(&p.id), p.status);
    // Every policy field by its API name, as the coordinator would write it.
    if let Ok(Value::Object(m)) = serde_json::to_value(&p.policy) {
        for (k, val) in m {
            out.push_str(&format!("  {k}: {}\n", c(&value_text(&val))));
        }
    }
    out
}

/// Runs `drover site profile`.
pub fn run_profile(args: &ProfileArgs) -> Result<(), CliError> {
    match &args.command {
        ProfileCommand::Create { site, name, description, set, common } => {
            let mut body = json!({ "name": name, "policy": policy_pairs(set)? });
            if let Some(d) = description {
                body["description"] = json!(d);
            }
            let path = site_path(site, "/profiles")?;
            let v = call(common, Method::POST, &path, Some(&body))?;
            show(common, &path, &v, profile_text)
        }
        ProfileCommand::List { site, common } => {
            let path = site_path(site, "/profiles")?;
            let v = call(common, Method::GET, &path, None)?;
            show(common, &path, &v, profile_table)
        }
        ProfileCommand::Get { site, profile, common } => {
            let path = site_path(site, &format!("/profiles/{}", path_segment(profile)?))?;
            let v = call(common, Method::GET, &path, None)?;
            show(common, &path, &v, profile_text)
        }
        ProfileCommand::Update { site, profile, name, status, set, common } => {
            let mut body = Map::new();
            if let Some(n) = name {
                body.insert("name".into(), json!(n));
            }
            if let Some(s) = status {
                body.insert("status".into(), json!(s));
            }
            if !set.is_empty() {
                body.insert("policy".into(), Value::Object(policy_pairs(set)?));
            }
            let path = site_path(site, &format!("/profiles/{}", path_segment(profile)?))?;
            let v = call(common, Method::PATCH, &path, Some(&Value::Object(body)))?;
            show(common, &path, &v, profile_text)
        }
    }
}

fn path_segment(s: &str) -> Result<&str, CliError> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)) {
        return Err(CliError::usage(format!("{s:?} is not a profile name or id")));
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roce_csv_becomes_the_api_shape() {
        let items =
            roce_csv("hostname,interface,ipv4_cidr\nc07u31,enp28s0np0,172.30.9.61/31\n\n# spare\nc07u31,enp29s0np0,172.29.1.219/31\n")
                .expect("valid");
        assert_eq!(
            items,
            vec![
                json!({ "hostname": "c07u31", "interface": "enp28s0np0", "ipv4Cidr": "172.30.9.61/31" }),
                json!({ "hostname": "c07u31", "interface": "enp29s0np0", "ipv4Cidr": "172.29.1.219/31" }),
            ]
        );
        let reordered = roce_csv("IPV4_CIDR,hostname,interface\n10.0.0.1/31,h1,eth0\n").expect("any order");
        assert_eq!(reordered[0]["hostname"], "h1");
    }

    #[test]
    fn roce_csv_names_the_bad_line() {
        let e = roce_csv("hostname,interface,ipv4_cidr\nh1,eth0,10.0.0.1/31\nh2,eth0,10.0.0.300/31\n").expect_err("bad cidr");
        assert!(e.to_string().contains("line 3"), "{e}");
        let e = roce_csv("host,iface,cidr\n").expect_err("bad header");
        assert!(e.to_string().contains("header"), "{e}");
        assert!(roce_csv("hostname,interface,ipv4_cidr\nh1,eth0\n").is_err());
    }

    #[test]
    fn policy_pairs_read_json_scalars_and_strings() {
        let m =
            policy_pairs(&["batchMaxParallel=4".into(), "distroSeries=ubuntu/jammy".into(), "requireHwSync=false".into()]).expect("pairs");
        assert_eq!(m["batchMaxParallel"], json!(4));
        assert_eq!(m["distroSeries"], json!("ubuntu/jammy"));
        assert_eq!(m["requireHwSync"], json!(false));
        assert!(policy_pairs(&["novalue".into()]).is_err());
    }
}
