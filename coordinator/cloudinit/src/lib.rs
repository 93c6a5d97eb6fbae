//! The cloud-init first-boot bundle (`bare-metal-lifecycle.md` §9, §9.1): the `#cloud-config`
//! user data MAAS hands a node at deploy, rendered by one pure function, [`render`] — no I/O,
//! no clock, no randomness (the password salt is an input; draw it with [`salt_from_bytes`]).
//!
//! The body is JSON (a subset of YAML) after the `#cloud-config` line and a few `#` comment
//! lines; Debian's `cloud-init schema` accepts it (`tests/cloudinit_schema.rs`). The bundle is
//! versioned ([`BUNDLE_VERSION`]) and records itself on the node in [`MANIFEST_PATH`]
//! (version, parts, disks, RoCE links — no secret).
//!
//! # What runs, in which order
//!
//! cloud-init applies its declarative modules in its early stages: the hostname, the deploy
//! user ([`Part::DeployUser`]: cloud-init's `users` module, the distro's default user kept),
//! then `write_files` — every file below, the MAAS credentials included — before any command
//! runs. Its final stage then runs one command, the runner ([`RUNNER_PATH`]), which runs the
//! scripted parts in this order and **stops at the first failure**:
//!
//! 1. layer `site`: [`Part::SiteBootstrap`] (when the profile names a bundle) — the infra-owned
//!    site bootstrap bundle runs first, as §9 orders. Its reference must be an
//!    `https://host[:port]/path` URL of plain URL characters (no credentials, query, fragment
//!    or shell metacharacter); it is fetched with `curl --fail --retry … --proto =https
//!    --proto-redir =https` into a private temporary directory, checked against its sha256
//!    when one is pinned, and run by `/bin/sh` as root with no arguments.
//! 2. layer `drover`, [`Part::MaasHwSync`] (§9.1, a required invariant): when the machine
//!    token is known at render time the credentials are already in [`MAAS_CREDS_PATH`]
//!    (mode 0600, byte for byte the shape `node.hw_sync_reseed` writes) and the part checks
//!    them; either way it enables and starts `maas_hardware_sync.timer`, whose service runs
//!    only once the file exists. Onboarding renders without the token (MAAS mints it inside
//!    the deploy call) and seeds it through the enrolled agent.
//!    The bundle also writes the timer, its oneshot service and the script the service runs
//!    (fetch `<maas_url>/maas-run-scripts`, `report-results --config <creds>`): a user data
//!    with `write_files`/`runcmd` replaces the vendor data's lists of the same name under
//!    cloud-init's default merge, and MAAS's own hardware-sync wiring travels in those lists.
//! 3. [`Part::Shares`], only when the input says [`Shares::EraseAndFormat`]: see below.
//! 4. [`Part::RoceRouting`], when the site has RoCE assignments for the host:
//!    `drover-roce-routing.service` (oneshot, enabled at boot) runs a script that gives each
//!    interface its address, its own routing table ([`ROCE_TABLE_BASE`]` + 1 + i`: the subnet,
//!    and for a /31 the peer as default route), a rule `from <addr> lookup <table>`
//!    ([`ROCE_RULE_PRIORITY_BASE`]` + 1 + i`) and ARP settings for multi-homing.
//! 5. [`Part::AgentBootstrap`], last: the coordinator's bootstrap command (`curl … | sudo sh -c
//!    …`), so an enrolled agent — the onboarding's last wait — means every part ran.
//!
//! A failure prints one line starting with [`FAILURE_MARKER`] naming the layer (`site` or
//! `drover`) and the part, and writes [`STATUS_PATH`]: a deploy failure can be classified as a
//! site bootstrap failure or a Drover bootstrap failure, as §9 asks.
//!
//! # What is destructive
//!
//! Only [`Part::Shares`], and only on request: [`Shares`] defaults to [`Shares::Off`];
//! [`Shares::EraseAndFormat`] names whole disks by stable `/dev/disk/by-id/` paths (never
//! partitions, never `sdX` names). On the node the script checks every listed disk before it
//! erases any — present, a whole disk, not under the root filesystem (through partitions, LVM
//! or RAID), nothing mounted, no swap, not stacked under LVM/RAID/crypt, not listed twice —
//! then wipes each, formats it ext4 (label `shareN`) and mounts it at `/shareN` (fstab by
//! UUID). The rendered user data says so in a `# DESTRUCTIVE` header comment, and the script in
//! its own banner.
//!
//! # Secrets
//!
//! The enrollment token (inside the bootstrap command), the MAAS machine token and the deploy
//! password are wrapped in [`Secret`] in the input, so `Debug` of a [`FirstBoot`] shows none of
//! them; a validation error names the field and never a secret's value. The password is never
//! rendered: the user data carries its SHA-512 crypt hash (`$6$rounds=`[`PASSWORD_HASH_ROUNDS`]),
//! which MAAS then stores instead of the plaintext. The rendered text holds the remaining
//! secrets, so [`UserData`]'s `Debug` shows only the version, the parts, the length and the
//! sha256; [`UserData::text`] is for the MAAS deploy call alone. On the node the creds file is
//! 0600 and the parts are 0700 root; the runner deletes the agent bootstrap script once it ran
//! (cloud-init keeps its own root-only copy of the user data).

#![forbid(unsafe_code)]

mod scripts;
pub mod validate;

use std::fmt;

use drover_proto::task::Secret;
use serde::Serialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

pub use scripts::{ROCE_RULE_PRIORITY_BASE, ROCE_TABLE_BASE, sh_quote};
pub use validate::{PASSWORD_HASH_ROUNDS, hash_password, salt_from_bytes};

/// The bundle's version, recorded on the node and in the read model.
pub const BUNDLE_VERSION: &str = "drover-first-boot/1";
/// The bundle's record on the node (no secrets).
pub const MANIFEST_PATH: &str = "/etc/drover/first-boot.json";
/// The runner's outcome on the node.
pub const STATUS_PATH: &str = "/var/lib/drover-first-boot/status.json";
/// The runner, the one command cloud-init runs.
pub const RUNNER_PATH: &str = "/usr/local/lib/drover-first-boot/run.sh";
/// The site layer's script.
pub const SITE_PART_PATH: &str = "/usr/local/lib/drover-first-boot/10-site-bootstrap.sh";
/// The hardware-sync part.
pub const HW_SYNC_PART_PATH: &str = "/usr/local/lib/drover-first-boot/20-maas-hw-sync.sh";
/// The destructive share part.
pub const SHARES_PART_PATH: &str = "/usr/local/lib/drover-first-boot/30-shares.sh";
/// The RoCE part.
pub const ROCE_PART_PATH: &str = "/usr/local/lib/drover-first-boot/40-roce-routing.sh";
/// The agent bootstrap part (deleted once it ran).
pub const AGENT_PART_PATH: &str = "/usr/local/lib/drover-first-boot/50-agent-bootstrap.sh";
/// MAAS's hardware-sync credentials (the path `node.hw_sync_reseed` rewrites).
pub const MAAS_CREDS_PATH: &str = "/etc/maas/maas-machine-creds.yml";
/// The hardware-sync timer (the unit `node.hw_sync_reseed` restarts and health watches).
pub const HW_SYNC_TIMER: &str = "maas_hardware_sync.timer";
/// The hardware-sync service (the unit `node.hw_sync_reseed` starts).
pub const HW_SYNC_SERVICE: &str = "maas_hardware_sync.service";
/// What the hardware-sync service runs.
pub const HW_SYNC_SCRIPT_PATH: &str = "/usr/local/sbin/drover-maas-hardware-sync";
/// The RoCE routing unit.
pub const ROCE_UNIT: &str = "drover-roce-routing.service";
/// What the RoCE unit runs.
pub const ROCE_SCRIPT_PATH: &str = "/usr/local/sbin/drover-roce-routing";
/// The start of the line the runner prints when a part fails.
pub const FAILURE_MARKER: &str = "drover-first-boot: FAILED";
/// Most disks a share initialisation may name.
pub const MAX_DISKS: usize = 64;
/// Most RoCE links of one host.
pub const MAX_ROCE_LINKS: usize = 64;

/// Everything the bundle is rendered from. `Debug` shows no secret (they are [`Secret`]s).
#[derive(Debug, Clone)]
pub struct FirstBoot {
    /// The node's hostname (lowercase RFC 1123); the first label becomes the hostname, the
    /// whole name the FQDN when it has dots.
    pub hostname: String,
    /// The site profile's `site_bootstrap_bundle_ref`, run first.
    pub site_bundle: Option<SiteBundle>,
    /// The site's deploy user.
    pub deploy_user: DeployUser,
    /// The site's `deploy_ssh_iface`: informational, recorded in the manifest only.
    pub deploy_ssh_iface: Option<String>,
    /// The coordinator's bootstrap command with a fresh enrollment token.
    pub agent_bootstrap: Secret,
    /// MAAS hardware-sync wiring.
    pub hw_sync: HwSync,
    /// Destructive share initialisation; off unless asked.
    pub shares: Shares,
    /// The site's RoCE assignments for this host (none: no RoCE part).
    pub roce: Vec<RoceLink>,
}

/// The infra-owned site bootstrap bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteBundle {
    /// `https://host[:port]/path`.
    pub url: String,
    /// The bundle's sha256 (64 lowercase hex digits), checked before it runs when given.
    pub sha256: Option<String>,
}

/// The deploy user: sudo with its password (`ALL=(ALL) ALL`), password login not locked (for
/// the console), SSH left as the image configures it.
#[derive(Debug, Clone)]
pub struct DeployUser {
    /// POSIX user name, e.g. `hpcadmin`; not `root`.
    pub name: String,
    /// From the secret store; only its SHA-512 crypt hash is rendered.
    pub password: Secret,
    /// The crypt salt (1–16 of `./0-9A-Za-z`); draw a fresh one per render with
    /// [`salt_from_bytes`].
    pub salt: String,
}

/// MAAS hardware-sync credentials and interval (§9.1).
#[derive(Debug, Clone)]
pub struct HwSync {
    /// MAAS's base URL, e.g. `http://10.0.0.2:5240/MAAS`.
    pub maas_url: String,
    /// The machine's system id.
    pub system_id: String,
    /// The machine token, when it is known at render time. MAAS mints a fresh one inside the
    /// deploy call (and deletes the old one when the owner changes), so onboarding renders
    /// without it and seeds it through the enrolled agent (`node.hw_sync_reseed`); the timer
    /// is enabled either way and its service waits for the file (`ConditionPathExists`).
    pub token: Option<HwSyncToken>,
    /// The profile's `hardware_sync_interval_secs` (60–86400).
    pub interval_secs: u64,
}

/// A MAAS machine token (`op=get_token`).
#[derive(Debug, Clone)]
pub struct HwSyncToken {
    /// The consumer key.
    pub consumer_key: Secret,
    /// The token key.
    pub token_key: Secret,
    /// The token secret.
    pub token_secret: Secret,
}

/// The destructive `/shareN` initialisation: off unless the caller says otherwise.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Shares {
    /// Touch no disk (the default).
    #[default]
    Off,
    /// **Erase** each listed whole disk (a `/dev/disk/by-id/` path) and mount it at
    /// `/share1`, `/share2`, … in list order. Never the root disk (checked on the node).
    EraseAndFormat {
        /// The disks, by stable id.
        disks: Vec<String>,
    },
}

/// One RoCE assignment of the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoceLink {
    /// The interface, e.g. `enp62s0np0`.
    pub interface: String,
    /// Address and prefix, e.g. `172.30.9.61/31`.
    pub ipv4_cidr: String,
}

/// A part of the bundle, in the order the node applies them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Part {
    /// The deploy user (cloud-init's `users` module, before any command).
    DeployUser,
    /// The site bootstrap bundle (layer `site`).
    SiteBootstrap,
    /// MAAS hardware-sync credentials and timer.
    MaasHwSync,
    /// The destructive share initialisation.
    Shares,
    /// The RoCE routing unit.
    RoceRouting,
    /// Drover's agent bootstrap.
    AgentBootstrap,
}

impl Part {
    /// The stable name (also the runner's `part=`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Part::DeployUser => "deploy-user",
            Part::SiteBootstrap => "site-bootstrap",
            Part::MaasHwSync => "maas-hw-sync",
            Part::Shares => "shares",
            Part::RoceRouting => "roce-routing",
            Part::AgentBootstrap => "agent-bootstrap",
        }
    }

    /// `site` for the site bundle, `drover` for the rest (the runner's `layer=`).
    pub const fn layer(self) -> &'static str {
        match self {
            Part::SiteBootstrap => "site",
            _ => "drover",
        }
    }
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refused input: the field (its path in [`FirstBoot`]) and why. Never a secret's value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct CloudInitError {
    /// E.g. `roce[1].interface`.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

/// The rendered user data. Its text holds secrets; `Debug` shows none of it.
#[derive(Clone)]
pub struct UserData {
    text: String,
    parts: Vec<Part>,
    sha256: String,
    manifest: Value,
}

impl UserData {
    /// The `#cloud-config` text, for MAAS's deploy call only (never log it).
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The text, consumed.
    pub fn into_text(self) -> String {
        self.text
    }

    /// The parts included, in the order the node applies them.
    pub fn parts(&self) -> &[Part] {
        &self.parts
    }

    /// Whether a part is included.
    pub fn includes(&self, part: Part) -> bool {
        self.parts.contains(&part)
    }

    /// The bundle version.
    pub fn bundle_version(&self) -> &'static str {
        BUNDLE_VERSION
    }

    /// Lowercase hex sha256 of the text: names what was deployed without showing it.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// The manifest written to [`MANIFEST_PATH`] (no secrets): fit for the read model.
    pub fn manifest(&self) -> &Value {
        &self.manifest
    }
}

impl fmt::Debug for UserData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UserData")
            .field("bundle_version", &BUNDLE_VERSION)
            .field("parts", &self.parts)
            .field("len", &self.text.len())
            .field("sha256", &self.sha256)
            .field("text", &"<redacted>")
            .finish()
    }
}

#[derive(Serialize)]
struct WriteFile {
    path: &'static str,
    owner: &'static str,
    permissions: &'static str,
    content: String,
}

fn file(path: &'static str, permissions: &'static str, content: String) -> WriteFile {
    WriteFile { path, owner: "root:root", permissions, content }
}

#[derive(Serialize)]
struct Document<'a> {
    hostname: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    fqdn: Option<&'a str>,
    preserve_hostname: bool,
    users: Vec<Value>,
    write_files: Vec<WriteFile>,
    runcmd: Vec<Vec<&'static str>>,
}

/// Checks every input, then renders the bundle. See the module docs.
pub fn render(input: &FirstBoot) -> Result<UserData, CloudInitError> {
    let v = validate_all(input)?;
    let mut parts = vec![Part::DeployUser];
    let mut files = Vec::new();
    let mut steps: Vec<scripts::RunnerStep<'_>> = Vec::new();
    let mut step = |parts: &mut Vec<Part>, part: Part, script: &'static str| {
        parts.push(part);
        steps.push(scripts::RunnerStep { layer: part.layer(), part: part.as_str(), script, remove_after: part == Part::AgentBootstrap });
    };

    if let Some(bundle) = &input.site_bundle {
        files.push(file(SITE_PART_PATH, "0700", scripts::site_bundle(&bundle.url, bundle.sha256.as_deref())));
        step(&mut parts, Part::SiteBootstrap, SITE_PART_PATH);
    }

    let hw = &input.hw_sync;
    if let Some(t) = &hw.token {
        files.push(file(
            MAAS_CREDS_PATH,
            "0600",
            scripts::creds_yaml(&hw.maas_url, &hw.system_id, t.consumer_key.expose(), t.token_key.expose(), t.token_secret.expose()),
        ));
    }
    files.push(file(HW_SYNC_SCRIPT_PATH, "0755", scripts::hw_sync_script(&hw.maas_url)));
    files.push(file("/etc/systemd/system/maas_hardware_sync.service", "0644", scripts::hw_sync_service()));
    files.push(file("/etc/systemd/system/maas_hardware_sync.timer", "0644", scripts::hw_sync_timer(hw.interval_secs)));
    files.push(file(HW_SYNC_PART_PATH, "0700", scripts::hw_sync_part(hw.token.is_some())));
    step(&mut parts, Part::MaasHwSync, HW_SYNC_PART_PATH);

    if let Shares::EraseAndFormat { disks } = &input.shares {
        files.push(file(SHARES_PART_PATH, "0700", scripts::shares_part(disks)));
        step(&mut parts, Part::Shares, SHARES_PART_PATH);
    }

    if !v.roce.is_empty() {
        files.push(file(ROCE_SCRIPT_PATH, "0755", scripts::roce_script(&v.roce)));
        files.push(file("/etc/systemd/system/drover-roce-routing.service", "0644", scripts::roce_unit()));
        files.push(file(ROCE_PART_PATH, "0700", scripts::roce_part(ROCE_UNIT)));
        step(&mut parts, Part::RoceRouting, ROCE_PART_PATH);
    }

    files.push(file(AGENT_PART_PATH, "0700", scripts::agent_part(input.agent_bootstrap.expose())));
    step(&mut parts, Part::AgentBootstrap, AGENT_PART_PATH);

    files.push(file(RUNNER_PATH, "0700", scripts::runner(&steps)));
    let manifest = manifest(input, &v, &parts);
    let manifest_text = serde_json::to_string_pretty(&manifest).map_err(|e| validate::bad("manifest", e.to_string()))? + "\n";
    files.insert(0, file(MANIFEST_PATH, "0644", manifest_text));

    let (short, fqdn) = match input.hostname.split_once('.') {
        Some((short, _)) => (short, Some(input.hostname.as_str())),
        None => (input.hostname.as_str(), None),
    };
    let doc = Document {
        hostname: short,
        fqdn,
        preserve_hostname: false,
        users: vec![
            json!("default"),
            json!({
                "name": input.deploy_user.name,
                "gecos": "Drover deploy user",
                "shell": "/bin/bash",
                "sudo": "ALL=(ALL) ALL",
                "lock_passwd": false,
                "passwd": v.password_hash.expose(),
            }),
        ],
        write_files: files,
        runcmd: vec![vec!["/bin/sh", RUNNER_PATH]],
    };
    let body = serde_json::to_string_pretty(&doc).map_err(|e| validate::bad("user_data", e.to_string()))?;
    let text = format!("{}{body}\n", header(input, &parts));
    if let Some(bad) = text.bytes().find(|&b| b != b'\n' && !(0x20..0x7f).contains(&b)) {
        return Err(validate::bad("user_data", format!("the rendered text holds the non-printable byte 0x{bad:02x}")));
    }
    let sha256 = hex::encode(Sha256::digest(text.as_bytes()));
    Ok(UserData { text, parts, sha256, manifest })
}

/// The `#cloud-config` line and the comments before the JSON body.
fn header(input: &FirstBoot, parts: &[Part]) -> String {
    let names: Vec<&str> = parts.iter().map(|p| p.as_str()).collect();
    let mut h = format!(
        "#cloud-config\n# Drover first-boot bundle {BUNDLE_VERSION} for {}.\n# Parts, in order: {}.\n\
         # Holds secrets (enrollment token, MAAS machine token, password hash): never log or share it.\n",
        input.hostname,
        names.join(", ")
    );
    if let Shares::EraseAndFormat { disks } = &input.shares {
        h.push_str("# !!! DESTRUCTIVE !!! This user data ERASES and formats these disks as /share1../shareN:\n");
        for (i, d) in disks.iter().enumerate() {
            h.push_str(&format!("# !!!   /share{} <- {d}\n", i + 1));
        }
    }
    h
}

/// What validation hands to rendering.
struct Validated {
    password_hash: Secret,
    roce: Vec<scripts::RoceRoute>,
}

fn validate_all(input: &FirstBoot) -> Result<Validated, CloudInitError> {
    validate::hostname("hostname", &input.hostname)?;
    if let Some(bundle) = &input.site_bundle {
        validate::https_url("site_bundle.url", &bundle.url)?;
        if let Some(h) = &bundle.sha256 {
            validate::sha256_hex("site_bundle.sha256", h)?;
        }
    }
    let user = &input.deploy_user;
    validate::user("deploy_user.name", &user.name)?;
    let password_hash = validate::hash_password("deploy_user.password", &user.password, &user.salt)?;
    if let Some(i) = &input.deploy_ssh_iface {
        validate::iface("deploy_ssh_iface", i)?;
    }
    validate::bootstrap_command("agent_bootstrap", &input.agent_bootstrap)?;
    let hw = &input.hw_sync;
    validate::maas_url("hw_sync.maas_url", &hw.maas_url)?;
    validate::system_id("hw_sync.system_id", &hw.system_id)?;
    if let Some(t) = &hw.token {
        validate::token_secret("hw_sync.token.consumer_key", &t.consumer_key)?;
        validate::token_secret("hw_sync.token.token_key", &t.token_key)?;
        validate::token_secret("hw_sync.token.token_secret", &t.token_secret)?;
    }
    if !(60..=86_400).contains(&hw.interval_secs) {
        return Err(validate::bad("hw_sync.interval_secs", format!("{} is outside 60-86400", hw.interval_secs)));
    }
    if let Shares::EraseAndFormat { disks } = &input.shares {
        if disks.is_empty() || disks.len() > MAX_DISKS {
            return Err(validate::bad("shares.disks", format!("name 1 to {MAX_DISKS} disks (or use Shares::Off)")));
        }
        for (i, d) in disks.iter().enumerate() {
            let field = format!("shares.disks[{i}]");
            validate::disk_id(&field, d)?;
            if disks[..i].contains(d) {
                return Err(validate::bad(field, format!("{d:?} is listed twice")));
            }
        }
    }
    if input.roce.len() > MAX_ROCE_LINKS {
        return Err(validate::bad("roce", format!("at most {MAX_ROCE_LINKS} links")));
    }
    let mut roce: Vec<scripts::RoceRoute> = Vec::new();
    for (i, link) in input.roce.iter().enumerate() {
        validate::iface(&format!("roce[{i}].interface"), &link.interface)?;
        let (addr, prefix) = validate::ipv4_cidr(&format!("roce[{i}].ipv4_cidr"), &link.ipv4_cidr)?;
        if roce.iter().any(|r| r.interface == link.interface) {
            return Err(validate::bad(format!("roce[{i}].interface"), format!("{:?} has two assignments", link.interface)));
        }
        if roce.iter().any(|r| r.addr == addr) {
            return Err(validate::bad(format!("roce[{i}].ipv4_cidr"), format!("{addr} is assigned twice")));
        }
        let m = validate::mask(prefix);
        let index = u32::try_from(i).unwrap_or(u32::MAX);
        roce.push(scripts::RoceRoute {
            interface: link.interface.clone(),
            addr,
            prefix,
            network: (u32::from(addr) & m).into(),
            gateway: (prefix == 31).then(|| (u32::from(addr) ^ 1).into()),
            table: ROCE_TABLE_BASE + 1 + index,
            priority: ROCE_RULE_PRIORITY_BASE + 1 + index,
        });
    }
    Ok(Validated { password_hash, roce })
}

/// The record written to [`MANIFEST_PATH`]: what the bundle is and holds, no secret.
fn manifest(input: &FirstBoot, v: &Validated, parts: &[Part]) -> Value {
    let shares = match &input.shares {
        Shares::Off => json!({ "mode": "off" }),
        Shares::EraseAndFormat { disks } => json!({
            "mode": "erase-and-format",
            "disks": disks.iter().enumerate().map(|(i, d)| json!({ "id": d, "mount": format!("/share{}", i + 1) })).collect::<Vec<_>>(),
        }),
    };
    json!({
        "bundleVersion": BUNDLE_VERSION,
        "hostname": input.hostname,
        "parts": parts,
        "siteBundle": input.site_bundle.as_ref().map(|b| json!({ "url": b.url, "sha256": b.sha256 })),
        "deployUser": input.deploy_user.name,
        "deploySshIface": input.deploy_ssh_iface,
        "hwSync": {
            "maasUrl": input.hw_sync.maas_url,
            "systemId": input.hw_sync.system_id,
            "credsFile": MAAS_CREDS_PATH,
            "timer": HW_SYNC_TIMER,
            "intervalSecs": input.hw_sync.interval_secs,
        },
        "shares": shares,
        "roce": v.roce.iter().map(|r| json!({
            "interface": r.interface,
            "ipv4Cidr": format!("{}/{}", r.addr, r.prefix),
            "gateway": r.gateway.map(|g| g.to_string()),
            "table": r.table,
            "rulePriority": r.priority,
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests;
