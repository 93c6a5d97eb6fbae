//! The texts the user data writes onto the node: the runner, one script per part, the
//! systemd units and the MAAS credentials file. Pure string building over values that
//! [`super::validate`] already accepted; every interpolated value is single-quoted all the same.

use std::fmt::Write as _;
use std::net::Ipv4Addr;

use super::{BUNDLE_VERSION, FAILURE_MARKER, HW_SYNC_SCRIPT_PATH, HW_SYNC_TIMER, MAAS_CREDS_PATH, ROCE_SCRIPT_PATH, STATUS_PATH};

/// First routing table of the RoCE interfaces (`ROCE_TABLE_BASE + 1 + index`).
pub const ROCE_TABLE_BASE: u32 = 100;
/// First `ip rule` priority of the RoCE interfaces (`ROCE_RULE_PRIORITY_BASE + 1 + index`).
pub const ROCE_RULE_PRIORITY_BASE: u32 = 1000;

/// A POSIX shell single-quoted word (`'` becomes `'\''`).
pub fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// One line of the runner: which layer, which part, which script, and whether the script is
/// removed once it ran (the agent bootstrap's, which holds the enrollment token).
pub struct RunnerStep<'a> {
    /// `site` or `drover`.
    pub layer: &'a str,
    /// The part's name.
    pub part: &'a str,
    /// The script's path.
    pub script: &'a str,
    /// Delete the script after it ran, whatever its outcome.
    pub remove_after: bool,
}

/// The runner: runs the parts in order, stops at the first failure, says which layer failed.
pub fn runner(steps: &[RunnerStep<'_>]) -> String {
    let mut s = format!(
        r#"#!/bin/sh
# Drover first-boot bundle {BUNDLE_VERSION}: runs its parts in order and stops at the first
# failure. Layer "site" is the infra-owned site bootstrap bundle and always runs first; layer
# "drover" is Drover's own. A failure prints one line starting "{FAILURE_MARKER}" that names
# the layer and the part; the outcome is kept in {STATUS_PATH}.
set -u
umask 022
status_file={status}
mkdir -p "${{status_file%/*}}"
status() {{
  printf '{{"bundleVersion":"%s","result":"%s","layer":"%s","part":"%s","exit":%d}}\n' {version} "$1" "$2" "$3" "$4" > "$status_file.new"
  mv -f "$status_file.new" "$status_file"
}}
run_part() {{
  layer=$1
  part=$2
  script=$3
  echo "drover-first-boot: start layer=$layer part=$part"
  status running "$layer" "$part" 0
  sh "$script"
  rc=$?
  if [ "$4" = remove ]; then
    rm -f "$script"
  fi
  if [ "$rc" -ne 0 ]; then
    echo "{FAILURE_MARKER} layer=$layer part=$part exit=$rc" >&2
    status failed "$layer" "$part" "$rc"
    exit "$rc"
  fi
  echo "drover-first-boot: done layer=$layer part=$part"
}}
"#,
        status = sh_quote(STATUS_PATH),
        version = sh_quote(BUNDLE_VERSION),
    );
    for step in steps {
        let keep = if step.remove_after { "remove" } else { "keep" };
        let _ = writeln!(s, "run_part {} {} {} {keep}", sh_quote(step.layer), sh_quote(step.part), sh_quote(step.script));
    }
    s.push_str("status succeeded all all 0\necho \"drover-first-boot: all parts done\"\n");
    s
}

/// Layer `site`: fetch the site bundle over https only (redirects too), check its sha256 when
/// one is pinned, run it with `/bin/sh` as root.
pub fn site_bundle(url: &str, sha256: Option<&str>) -> String {
    let mut s = format!(
        r#"#!/bin/sh
# Layer "site" ({BUNDLE_VERSION}): the infra-owned site bootstrap bundle, versioned and
# tested apart from Drover. Fetched over https only (redirects included), retried, and run
# by /bin/sh as root before any of Drover's parts.
set -eu
url={url}
dir=$(mktemp -d /run/drover-site-bundle.XXXXXX)
trap 'rm -rf "$dir"' EXIT
curl --fail --silent --show-error --location --proto '=https' --proto-redir '=https' \
  --retry 10 --retry-delay 6 --retry-connrefused --connect-timeout 20 --max-time 600 \
  --output "$dir/bundle" "$url"
"#,
        url = sh_quote(url),
    );
    if let Some(hash) = sha256 {
        let _ = writeln!(s, "printf '%s  %s\\n' {} \"$dir/bundle\" | sha256sum -c --quiet -", sh_quote(hash));
    }
    s.push_str("sh \"$dir/bundle\"\n");
    s
}

/// Layer `drover`, MAAS hardware sync: when the bundle carries the credentials (cloud-init
/// writes files before it runs commands) they must be there, and are put to 0600; without
/// them the agent seeds the file later (`node.hw_sync_reseed`). The timer is enabled either
/// way; its service runs only once the file exists.
pub fn hw_sync_part(creds_in_bundle: bool) -> String {
    let check = if creds_in_bundle {
        "if [ ! -s \"$creds\" ]; then\n  echo \"drover-first-boot: $creds is missing or empty\" >&2\n  exit 1\nfi\n\
         chown root:root \"$creds\"\nchmod 0600 \"$creds\"\n"
            .to_owned()
    } else {
        "echo \"drover-first-boot: $creds arrives with node.hw_sync_reseed once the agent enrolls\"\n".to_owned()
    };
    format!(
        r#"#!/bin/sh
# Layer "drover" ({BUNDLE_VERSION}): MAAS hardware sync (a required invariant).
set -eu
creds={creds}
{check}systemctl daemon-reload
systemctl enable {timer}
systemctl start {timer}
"#,
        creds = sh_quote(MAAS_CREDS_PATH),
        timer = sh_quote(HW_SYNC_TIMER),
    )
}

/// What `maas_hardware_sync.service` runs: fetch MAAS's `maas-run-scripts` and report.
pub fn hw_sync_script(maas_url: &str) -> String {
    let url = format!("{}/maas-run-scripts", maas_url.trim_end_matches('/'));
    format!(
        r#"#!/bin/sh
# MAAS hardware sync ({BUNDLE_VERSION}), run by maas_hardware_sync.service: fetch MAAS's
# maas-run-scripts and report this machine's hardware with the machine token in
# {MAAS_CREDS_PATH} (which node.hw_sync_reseed rewrites).
set -eu
url={url}
dir=/var/lib/drover-first-boot/maas
mkdir -p "$dir"
chmod 0700 "$dir"
curl --fail --silent --show-error --location --retry 3 --retry-delay 5 --connect-timeout 20 --max-time 300 \
  --output "$dir/maas-run-scripts.new" "$url"
chmod 0700 "$dir/maas-run-scripts.new"
mv -f "$dir/maas-run-scripts.new" "$dir/maas-run-scripts"
exec "$dir/maas-run-scripts" report-results --config {creds}
"#,
        url = sh_quote(&url),
        creds = sh_quote(MAAS_CREDS_PATH),
    )
}

/// `maas_hardware_sync.service`.
pub fn hw_sync_service() -> String {
    format!(
        "[Unit]\nDescription=MAAS hardware sync ({BUNDLE_VERSION})\nWants=network-online.target\nAfter=network-online.target\n\
         ConditionPathExists={MAAS_CREDS_PATH}\n\n[Service]\nType=oneshot\nExecStart={HW_SYNC_SCRIPT_PATH}\n"
    )
}

/// `maas_hardware_sync.timer`: a first run a minute after boot, then every `interval_secs`.
pub fn hw_sync_timer(interval_secs: u64) -> String {
    format!(
        "[Unit]\nDescription=Timer for periodically running MAAS hardware sync ({BUNDLE_VERSION})\n\n\
         [Timer]\nOnBootSec=60\nOnUnitActiveSec={interval_secs}\n\n[Install]\nWantedBy=timers.target\n"
    )
}

/// A single-quoted YAML scalar.
fn yaml_quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// The creds file, byte for byte what `node.hw_sync_reseed` writes (`render_creds` in the
/// agent): MAAS's `yaml.safe_dump` key order, every value a single-quoted scalar.
pub fn creds_yaml(maas_url: &str, system_id: &str, consumer_key: &str, token_key: &str, token_secret: &str) -> String {
    let endpoint = format!("{}/metadata/status/{}", maas_url.trim_end_matches('/'), system_id);
    format!(
        "reporting:\n  maas:\n    consumer_key: {}\n    endpoint: {}\n    token_key: {}\n    token_secret: {}\n",
        yaml_quoted(consumer_key),
        yaml_quoted(&endpoint),
        yaml_quoted(token_key),
        yaml_quoted(token_secret),
    )
}

/// Layer `drover`, the destructive share initialisation. Checks every disk before it erases
/// any: present, a whole disk, not under the root filesystem, nothing mounted or stacked on it,
/// not listed twice under two ids.
pub fn shares_part(disks: &[String]) -> String {
    let mut s = format!(
        r#"#!/bin/sh
# #########################################################################################
# DESTRUCTIVE ({BUNDLE_VERSION}): this script ERASES every disk listed at its end and
# formats it as ext4 mounted at /share1 ... /shareN (fstab by UUID). It runs only because the
# caller asked for it explicitly (Shares::EraseAndFormat). Before erasing anything it refuses
# a disk that is missing, not a whole disk, under the root filesystem, mounted, swap, or in
# use by LVM, RAID or crypt, or listed twice.
# #########################################################################################
set -eu
say() {{
  echo "drover-first-boot: shares: $*" >&2
}}
root_src=$(findmnt -n -o SOURCE --target /)
root_src=${{root_src%%\[*}}
root_disks=$(lsblk -n -r -s -o NAME,TYPE "$root_src" | awk '$2 == "disk" {{ print $1 }}')
if [ -z "$root_disks" ]; then
  say "cannot tell which disk holds the root filesystem ($root_src): refusing to erase anything"
  exit 1
fi
seen=""
check_disk() {{
  id=$1
  if [ ! -b "$id" ]; then
    say "$id: no such block device"
    exit 1
  fi
  dev=$(readlink -f "$id")
  name=${{dev##*/}}
  if [ "$(lsblk -d -n -r -o TYPE "$dev")" != disk ]; then
    say "$id ($dev) is not a whole disk: refused"
    exit 1
  fi
  for r in $root_disks; do
    if [ "$r" = "$name" ]; then
      say "$id ($dev) holds the root filesystem: refused"
      exit 1
    fi
  done
  case " $seen " in
    *" $name "*)
      say "$id ($dev) is listed twice: refused"
      exit 1
      ;;
  esac
  seen="$seen $name"
  if lsblk -n -r -o MOUNTPOINT "$dev" | grep -q .; then
    say "$id ($dev) has a mounted filesystem or swap: refused"
    exit 1
  fi
  if lsblk -n -r -o TYPE "$dev" | grep -q -v -e '^disk$' -e '^part$'; then
    say "$id ($dev) is in use by LVM, RAID or crypt: refused"
    exit 1
  fi
}}
format_disk() {{
  id=$1
  n=$2
  dev=$(readlink -f "$id")
  mnt="/share$n"
  say "ERASING $id ($dev) for $mnt"
  wipefs --all --force "$dev"
  mkfs.ext4 -F -q -L "share$n" "$dev"
  udevadm settle
  uuid=$(blkid -s UUID -o value "$dev")
  mkdir -p "$mnt"
  awk -v m="$mnt" '$2 != m' /etc/fstab > /etc/fstab.drover-new
  printf 'UUID=%s %s ext4 defaults,nofail 0 2\n' "$uuid" "$mnt" >> /etc/fstab.drover-new
  mv -f /etc/fstab.drover-new /etc/fstab
  mount "$mnt"
}}
"#
    );
    for d in disks {
        let _ = writeln!(s, "check_disk {}", sh_quote(d));
    }
    for (i, d) in disks.iter().enumerate() {
        let _ = writeln!(s, "format_disk {} {}", sh_quote(d), i + 1);
    }
    s
}

/// One RoCE interface as the routing script configures it.
pub struct RoceRoute {
    /// The interface.
    pub interface: String,
    /// Its address.
    pub addr: Ipv4Addr,
    /// Its prefix length.
    pub prefix: u8,
    /// Its subnet's network address.
    pub network: Ipv4Addr,
    /// The next hop of the table's default route: the peer of a /31, else none.
    pub gateway: Option<Ipv4Addr>,
    /// Its routing table.
    pub table: u32,
    /// Its `ip rule` priority.
    pub priority: u32,
}

/// `/usr/local/sbin/drover-roce-routing`: addresses and per-interface source routing.
pub fn roce_script(routes: &[RoceRoute]) -> String {
    let mut s = format!(
        r#"#!/bin/sh
# RoCE addressing and per-interface source routing ({BUNDLE_VERSION}), run at every boot by
# drover-roce-routing.service. Each interface gets its address, its own routing table (its
# subnet, and the /31 peer as default route) and a rule sending traffic from its address to
# that table; ARP answers only for an interface's own address. Idempotent.
set -eu
wait_link() {{
  i=0
  while [ ! -e "/sys/class/net/$1" ]; do
    i=$((i + 1))
    if [ "$i" -ge 60 ]; then
      echo "drover-roce-routing: interface $1 did not appear" >&2
      return 1
    fi
    sleep 1
  done
}}
setup() {{
  iface=$1
  addr=$2
  prefix=$3
  net=$4
  gw=$5
  table=$6
  prio=$7
  wait_link "$iface"
  echo 1 > "/proc/sys/net/ipv4/conf/$iface/arp_ignore"
  echo 2 > "/proc/sys/net/ipv4/conf/$iface/arp_announce"
  echo 2 > "/proc/sys/net/ipv4/conf/$iface/rp_filter"
  ip link set dev "$iface" up
  ip -4 address replace "$addr/$prefix" dev "$iface"
  ip -4 route replace "$net/$prefix" dev "$iface" src "$addr" table "$table"
  if [ -n "$gw" ]; then
    ip -4 route replace default via "$gw" dev "$iface" table "$table"
  fi
  while ip -4 rule del priority "$prio" 2>/dev/null; do :; done
  ip -4 rule add from "$addr" lookup "$table" priority "$prio"
}}
"#
    );
    for r in routes {
        let gw = r.gateway.map(|g| g.to_string()).unwrap_or_default();
        let _ = writeln!(
            s,
            "setup {} {} {} {} {} {} {}",
            sh_quote(&r.interface),
            sh_quote(&r.addr.to_string()),
            r.prefix,
            sh_quote(&r.network.to_string()),
            sh_quote(&gw),
            r.table,
            r.priority
        );
    }
    s
}

/// `drover-roce-routing.service`: a oneshot enabled at boot.
pub fn roce_unit() -> String {
    format!(
        "[Unit]\nDescription=Drover RoCE addressing and source routing ({BUNDLE_VERSION})\nWants=network-online.target\n\
         After=network-online.target\n\n[Service]\nType=oneshot\nRemainAfterExit=yes\nExecStart={ROCE_SCRIPT_PATH}\n\n\
         [Install]\nWantedBy=multi-user.target\n"
    )
}

/// Layer `drover`, RoCE: enable the unit and run it now.
pub fn roce_part(unit: &str) -> String {
    format!(
        "#!/bin/sh\n# Layer \"drover\" ({BUNDLE_VERSION}): RoCE routing, enabled at boot and applied now.\nset -eu\n\
         systemctl daemon-reload\nsystemctl enable {unit}\nsystemctl start {unit}\n",
        unit = sh_quote(unit)
    )
}

/// Layer `drover`, last: the agent bootstrap command, as the coordinator built it.
pub fn agent_part(command: &str) -> String {
    format!(
        "#!/bin/sh\n# Layer \"drover\" ({BUNDLE_VERSION}): Drover's agent bootstrap, last, so an enrolled agent means every\n\
         # part ran. The command carries a single-use enrollment token: the runner deletes this file\n\
         # once it ran.\nset -eu\n{command}\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(sh_quote("a b"), "'a b'");
        assert_eq!(sh_quote("it's"), r"'it'\''s'");
        assert_eq!(sh_quote(""), "''");
    }

    #[test]
    fn creds_are_the_agents_bytes() {
        // The exact string `agent/src/tasks/hw_sync.rs` asserts for `render_creds` (the agent is
        // not a dependency of the coordinator, so the bytes are pinned on both sides).
        assert_eq!(
            creds_yaml("http://10.0.0.2:5240/MAAS", "4y3h7r", "CK-sekrit-consumer", "TK-sekrit-token", "TS-sekrit-secret"),
            "reporting:\n  maas:\n    consumer_key: 'CK-sekrit-consumer'\n    endpoint: 'http://10.0.0.2:5240/MAAS/metadata/status/4y3h7r'\n    token_key: 'TK-sekrit-token'\n    token_secret: 'TS-sekrit-secret'\n"
        );
        assert!(creds_yaml("http://m/MAAS/", "x", "a", "b", "it's").contains("token_secret: 'it''s'\n"));
        assert!(creds_yaml("http://m/MAAS/", "x", "a", "b", "c").contains("endpoint: 'http://m/MAAS/metadata/status/x'\n"));
    }

    #[test]
    fn shares_check_every_disk_before_erasing_any() {
        let s = shares_part(&["/dev/disk/by-id/a".into(), "/dev/disk/by-id/b".into()]);
        let last_check = s.rfind("\ncheck_disk '").expect("check");
        let first_format = s.find("\nformat_disk '").expect("format");
        assert!(last_check < first_format);
        assert!(s.contains("format_disk '/dev/disk/by-id/b' 2\n"));
        assert!(s.contains("DESTRUCTIVE"));
    }
}
