//! `drover site`: MAAS sites on the coordinator (`/v1/maas/sites…`): the site record itself
//! (its MAAS region, secrets, checks and status), and the dispatch of the verbs on what is
//! nested under a site.
//!
//! - `create NAME --region R --maas-url URL --pxe-iface I --pxe-vlan N --node-pxe-iface I …`
//!   (admin): the site and its default profile; prints `SITE_ID NAME STATUS`.
//! - `list`, `get SITE` (viewer): a table, or `-o json`. `SITE` is a name or an id everywhere.
//! - `update SITE [--name …] [--maas-url …] [--default-profile P] …` (admin).
//! - `credentials SITE [--api-token-file F] [--power-user U --power-pass-file F]
//!   [--deploy-password-file F]` (admin): secrets are read from files (`-` is stdin), never
//!   from the command line, where `ps` and shell history would keep them. The coordinator
//!   first checks a new token against MAAS: a refused token or an unreachable MAAS is a 422
//!   (exit 65) and nothing is written.
//! - `probe SITE` (admin): MAAS's version and rack controllers; exit 69 when MAAS cannot be
//!   reached, 65 when the site's configuration or token is at fault.
//! - `preflight SITE [--profile P]` (admin): the check a workflow runs before it starts.
//! - `disable SITE`, `enable SITE` (admin).
//! - `roce …`, `override …`, `profile …`: see [`crate::site_subresources`].
//!
//! The flags, paths and printing every site verb shares are [`crate::site_request`]'s.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use drover_client::Method;
use drover_proto::api::sites::{CheckFailure, Items, PreflightAnswer, ProbeAnswer, SecretRef, SiteView};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use crate::answer::decode;
use crate::exit::{CliError, codes};
use crate::output;
use crate::site_request::{Common, c, call, show, site_path};
use crate::site_subresources::{OverrideArgs, ProfileArgs, RoceArgs};

/// Arguments of `drover site`.
#[derive(Args)]
pub struct SiteArgs {
    #[command(subcommand)]
    command: SiteCommand,
}

#[derive(Subcommand)]
enum SiteCommand {
    /// Create a site (a MAAS region) and its default profile (admin).
    Create(Box<CreateArgs>),
    /// List sites (viewer).
    List(ListArgs),
    /// Show one site (viewer).
    Get(OneArgs),
    /// Change a site's fields or default profile (admin).
    Update(Box<UpdateArgs>),
    /// Write a site's secrets: MAAS API token, default BMC credentials, deploy password (admin).
    Credentials(Box<CredentialsArgs>),
    /// Check MAAS is reachable and the token valid; show its version and rack controllers (admin).
    Probe(OneArgs),
    /// Run the preflight every MAAS workflow runs before it starts (admin).
    Preflight(PreflightArgs),
    /// Refuse new work on the site; running work finishes (admin).
    Disable(StatusArgs),
    /// Take new work on the site again (admin).
    Enable(StatusArgs),
    /// RoCE address assignments: import a CSV, list, delete.
    Roce(RoceArgs),
    /// Per-node BMC credential overrides: create, list, delete, rotate.
    Override(OverrideArgs),
    /// Site profiles (policy bundles): create, list, get, update.
    Profile(ProfileArgs),
}

#[derive(Args)]
struct CreateArgs {
    /// Unique site name, e.g. dc1-maas.
    name: String,
    /// The Drover region this MAAS serves.
    #[arg(long = "region", value_name = "CODE")]
    region: String,
    /// MAAS's base URL, e.g. http://10.0.0.1:5240/MAAS.
    #[arg(long = "maas-url", value_name = "URL")]
    maas_url: String,
    /// PXE interface on the MAAS side.
    #[arg(long, value_name = "IFACE")]
    pxe_iface: String,
    /// PXE VLAN id.
    #[arg(long = "pxe-vlan", value_name = "VID")]
    pxe_vlan: u16,
    /// PXE interface on the node side.
    #[arg(long, value_name = "IFACE")]
    node_pxe_iface: String,
    /// The site's deploy user (default hpcadmin).
    #[arg(long, value_name = "USER")]
    deploy_user: Option<String>,
    /// The interface the deploy user reaches nodes on (default: the node PXE interface).
    #[arg(long, value_name = "IFACE")]
    deploy_ssh_iface: Option<String>,
    /// An upstream resolver; repeat for more (default 1.1.1.1 and 8.8.8.8).
    #[arg(long = "dns", value_name = "IP")]
    dns: Vec<String>,
    /// PEM CA file MAAS's HTTPS certificate is verified against.
    #[arg(long = "maas-ca", value_name = "FILE")]
    maas_ca: Option<PathBuf>,
    /// A MAAS capability every workflow on this site needs; repeat for more.
    #[arg(long = "require-capability", value_name = "CAP")]
    capabilities: Vec<String>,
    /// Why (recorded in the audit log).
    #[arg(long, value_name = "TEXT")]
    reason: Option<String>,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
struct ListArgs {
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
struct OneArgs {
    /// The site's name or id.
    site: String,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
struct UpdateArgs {
    /// The site's name or id.
    site: String,
    /// A new name.
    #[arg(long)]
    name: Option<String>,
    /// A new region code.
    #[arg(long = "region", value_name = "CODE")]
    region: Option<String>,
    /// A new MAAS base URL.
    #[arg(long = "maas-url", value_name = "URL")]
    maas_url: Option<String>,
    /// A new MAAS-side PXE interface.
    #[arg(long, value_name = "IFACE")]
    pxe_iface: Option<String>,
    /// A new PXE VLAN id.
    #[arg(long = "pxe-vlan", value_name = "VID")]
    pxe_vlan: Option<u16>,
    /// A new node-side PXE interface.
    #[arg(long, value_name = "IFACE")]
    node_pxe_iface: Option<String>,
    /// A new PEM CA file for MAAS's HTTPS certificate.
    #[arg(long = "maas-ca", value_name = "FILE")]
    maas_ca: Option<PathBuf>,
    /// Make this profile (name or id) the site's default.
    #[arg(long, value_name = "PROFILE")]
    default_profile: Option<String>,
    /// Why (recorded in the audit log).
    #[arg(long, value_name = "TEXT")]
    reason: Option<String>,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
struct CredentialsArgs {
    /// The site's name or id.
    site: String,
    /// File holding MAAS's API key `consumer_key:token_key:token_secret` (`-`: stdin).
    #[arg(long, value_name = "FILE")]
    api_token_file: Option<PathBuf>,
    /// Default BMC user of the site's nodes (with --power-pass-file).
    #[arg(long, value_name = "USER", requires = "power_pass_file")]
    power_user: Option<String>,
    /// File holding the default BMC password (`-`: stdin).
    #[arg(long, value_name = "FILE", requires = "power_user")]
    power_pass_file: Option<PathBuf>,
    /// File holding the deploy user's password (`-`: stdin).
    #[arg(long, value_name = "FILE")]
    deploy_password_file: Option<PathBuf>,
    /// Why (recorded in the audit log).
    #[arg(long, value_name = "TEXT")]
    reason: Option<String>,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
struct PreflightArgs {
    /// The site's name or id.
    site: String,
    /// A profile of the site (name or id); the default profile when absent.
    #[arg(long)]
    profile: Option<String>,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
struct StatusArgs {
    /// The site's name or id.
    site: String,
    /// Why (recorded in the audit log).
    #[arg(long, value_name = "TEXT")]
    reason: Option<String>,
    #[command(flatten)]
    common: Common,
}

/// Prints a probe or preflight answer: JSON when asked; else the text of a success (a
/// failure is the error message, printed once by `main`).
fn show_check<T: DeserializeOwned>(
    common: &Common,
    path: &str,
    v: &Value,
    ok: impl Fn(&T) -> Option<&CheckFailure>,
    text: impl FnOnce(&T) -> String,
) -> Result<(), CliError> {
    // Decoded once: an answer that is not the API's exits 76 even with -o json.
    let answer: T = decode(path, v)?;
    let failure = ok(&answer);
    if common.output.output.is_json() {
        output::print(&output::pretty(v)?)?;
    } else if failure.is_none() {
        output::print(&text(&answer))?;
    }
    failure.map_or(Ok(()), verdict)
}

fn site_line(v: &SiteView) -> String {
    format!("{} {} {}\n", c(&v.id), c(&v.name), v.status)
}

fn set_at(s: &SecretRef) -> String {
    s.set_at.map_or_else(|| "-".into(), |t| t.to_string())
}

fn site_table(l: &Items<SiteView>) -> String {
    let rows: Vec<Vec<String>> = l
        .items
        .iter()
        .map(|v| {
            vec![
                c(&v.name),
                v.status.to_string(),
                c(&v.config.region_code),
                c(&v.config.api_base_url),
                if v.credentials.api_token.set_at.is_some() { "set".into() } else { "missing".into() },
            ]
        })
        .collect();
    output::table(&["NAME", "STATUS", "REGION", "MAAS", "TOKEN"], &rows)
}

fn describe(v: &SiteView) -> String {
    let k = &v.config;
    let mut out = String::new();
    let status = v.status.to_string();
    for (label, value) in [("Name", &v.name), ("Id", &v.id), ("Status", &status), ("Region", &k.region_code), ("MAAS", &k.api_base_url)] {
        out.push_str(&format!("{label}:\t{}\n", c(value)));
    }
    out.push_str(&format!("PXE:\t{} vlan {} (node {})\n", c(&k.pxe_iface), k.pxe_vlan_vid, c(&k.node_pxe_iface)));
    out.push_str(&format!("Deploy user:\t{} via {}\n", c(&k.deploy_user), c(&k.deploy_ssh_iface)));
    out.push_str(&format!("Default profile:\t{}\n", c(&v.default_profile_id)));
    out.push_str(&credentials_line("Credentials:\t", v));
    out
}

fn credentials_line(prefix: &str, v: &SiteView) -> String {
    let s = &v.credentials;
    format!(
        "{prefix}api token {}; default power {}; deploy password {}\n",
        set_at(&s.api_token),
        set_at(&s.default_power),
        set_at(&s.deploy_password)
    )
}

/// Runs `drover site`.
pub fn run(args: &SiteArgs) -> Result<(), CliError> {
    match &args.command {
        SiteCommand::Create(a) => {
            let mut body = json!({
                "name": a.name, "regionCode": a.region, "apiBaseUrl": a.maas_url, "pxeIface": a.pxe_iface,
                "pxeVlanVid": a.pxe_vlan, "nodePxeIface": a.node_pxe_iface, "requiredCapabilities": a.capabilities,
            });
            let m = body.as_object_mut().expect("object literal");
            put_opt(m, "deployUser", a.deploy_user.clone());
            put_opt(m, "deploySshIface", a.deploy_ssh_iface.clone());
            put_opt(m, "reason", a.reason.clone());
            if !a.dns.is_empty() {
                m.insert("upstreamDnsServers".into(), json!(a.dns));
            }
            if let Some(f) = &a.maas_ca {
                m.insert("maasCaPem".into(), json!(crate::fsio::read_text(f)?));
            }
            let v = call(&a.common, Method::POST, "/v1/maas/sites", Some(&body))?;
            show(&a.common, "/v1/maas/sites", &v, site_line)
        }
        SiteCommand::List(a) => {
            let v = call(&a.common, Method::GET, "/v1/maas/sites", None)?;
            show(&a.common, "/v1/maas/sites", &v, site_table)
        }
        SiteCommand::Get(a) => {
            let path = site_path(&a.site, "")?;
            let v = call(&a.common, Method::GET, &path, None)?;
            show(&a.common, &path, &v, describe)
        }
        SiteCommand::Update(a) => {
            let mut m = Map::new();
            put_opt(&mut m, "name", a.name.clone());
            put_opt(&mut m, "regionCode", a.region.clone());
            put_opt(&mut m, "apiBaseUrl", a.maas_url.clone());
            put_opt(&mut m, "pxeIface", a.pxe_iface.clone());
            put_opt(&mut m, "nodePxeIface", a.node_pxe_iface.clone());
            put_opt(&mut m, "defaultProfile", a.default_profile.clone());
            put_opt(&mut m, "reason", a.reason.clone());
            if let Some(v) = a.pxe_vlan {
                m.insert("pxeVlanVid".into(), json!(v));
            }
            if let Some(f) = &a.maas_ca {
                m.insert("maasCaPem".into(), json!(crate::fsio::read_text(f)?));
            }
            let path = site_path(&a.site, "")?;
            let v = call(&a.common, Method::PATCH, &path, Some(&Value::Object(m)))?;
            show(&a.common, &path, &v, site_line)
        }
        SiteCommand::Credentials(a) => {
            let mut m = Map::new();
            if let Some(f) = &a.api_token_file {
                m.insert("apiToken".into(), json!(crate::fsio::read_secret(f, "the MAAS API token")?));
            }
            if let (Some(user), Some(f)) = (&a.power_user, &a.power_pass_file) {
                m.insert("defaultPower".into(), json!({ "user": user, "pass": crate::fsio::read_secret(f, "the BMC password")? }));
            }
            if let Some(f) = &a.deploy_password_file {
                m.insert("deployPassword".into(), json!(crate::fsio::read_secret(f, "the deploy password")?));
            }
            if m.is_empty() {
                return Err(CliError::usage("give --api-token-file, --power-user with --power-pass-file, and/or --deploy-password-file"));
            }
            put_opt(&mut m, "reason", a.reason.clone());
            let path = site_path(&a.site, "/credentials")?;
            let v = call(&a.common, Method::POST, &path, Some(&Value::Object(m)))?;
            show(&a.common, &path, &v, |v: &SiteView| credentials_line(&format!("{}: ", c(&v.name)), v))
        }
        SiteCommand::Probe(a) => {
            let path = site_path(&a.site, "/probe")?;
            let v = call(&a.common, Method::POST, &path, Some(&json!({})))?;
            show_check(&a.common, &path, &v, |p: &ProbeAnswer| p.failure.as_ref(), probe_text)
        }
        SiteCommand::Preflight(a) => {
            let body = match &a.profile {
                Some(p) => json!({ "profile": p }),
                None => json!({}),
            };
            let path = site_path(&a.site, "/preflight")?;
            let v = call(&a.common, Method::POST, &path, Some(&body))?;
            show_check(
                &a.common,
                &path,
                &v,
                |p: &PreflightAnswer| p.failure.as_ref(),
                |p| format!("preflight passed: site {} profile {}\n", c(&p.site_id), c(p.profile.as_deref().unwrap_or("-"))),
            )
        }
        SiteCommand::Disable(a) | SiteCommand::Enable(a) => {
            let verb = if matches!(args.command, SiteCommand::Disable(_)) { "/disable" } else { "/enable" };
            let body = match &a.reason {
                Some(r) => json!({ "reason": r }),
                None => json!({}),
            };
            let path = site_path(&a.site, verb)?;
            let v = call(&a.common, Method::POST, &path, Some(&body))?;
            show(&a.common, &path, &v, site_line)
        }
        SiteCommand::Roce(a) => crate::site_subresources::run_roce(a),
        SiteCommand::Override(a) => crate::site_subresources::run_override(a),
        SiteCommand::Profile(a) => crate::site_subresources::run_profile(a),
    }
}

fn put_opt(m: &mut Map<String, Value>, key: &str, v: Option<String>) {
    if let Some(v) = v {
        m.insert(key.into(), json!(v));
    }
}

fn probe_text(v: &ProbeAnswer) -> String {
    let Some(report) = &v.report else { return String::new() };
    let mut out = format!("MAAS {} at {}\n", c(&report.version), c(v.api_base_url.as_deref().unwrap_or("-")));
    let rows: Vec<Vec<String>> = report
        .rack_controllers
        .iter()
        .map(|r| vec![c(&r.system_id), c(&r.hostname), c(output::dash(r.version.as_deref().unwrap_or("")))])
        .collect();
    out.push_str(&output::table(&["RACK CONTROLLER", "HOSTNAME", "VERSION"], &rows));
    out
}

/// A failed probe or preflight as an exit code: MAAS away is 69, the site's own fault 65.
fn verdict(failure: &CheckFailure) -> Result<(), CliError> {
    let class = failure.class.as_str();
    let message = format!("{}: {}", c(class), c(&failure.message));
    Err(match class {
        "upstream_transient" => CliError::new(codes::UNAVAILABLE, message),
        _ => CliError::data(message),
    })
}
