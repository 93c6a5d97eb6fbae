#!/bin/sh
# Drover bootstrap: installs and enrolls the Drover agent on this host.
#
# Run exactly as `drover enroll` printed it:
#   s=$(curl ... --pinnedpubkey 'sha256//PIN' https://COORDINATOR/v1/bootstrap.sh) && \
#     printf '%s\n' 'TOKEN' | sudo sh -c "$s" drover-bootstrap --url https://COORDINATOR \
#       --pin 'sha256//PIN' --host-id UUID --trust-sha256 HEX
#
# The script arrives whole before any of it runs, and the one-time token arrives on stdin,
# never in a process's arguments (which any local user can list).
#
# Nothing here trusts on first use: every download is pinned to the coordinator's public key
# (the pin came with the command, from the operator), the agent binary is checked against
# the sha256 baked into this script by the coordinator that served it, and the agent checks
# the CI trust roots against the hash in the command before enrolling.
#
# Any host with systemd and curl will do (it is how MAAS-deployed Ubuntu gets its agent): the
# script installs the binary, `/etc/drover/agent.toml` and a plain systemd unit hardened like
# the NixOS module's (nixos-modules/lib/agent.nix; the tests compare the two), then enables and
# starts it. On a host with `dpkg` (Debian, Ubuntu) whose coordinator serves the agent's Debian
# package (`agent_package`), it installs that package instead, checked against the sha256
# baked in here: the binary in /usr/bin and the package's unit (the same hardening), so
# `apt` and `dpkg` know the agent and upgrade or remove it. On a host that is not NixOS the
# agent runs tasks and reports health and refuses activation intents with the reason.
#
# Running it again on an enrolled host is harmless: enrollment is skipped (the token is not
# needed again), agent.toml and the certificates are kept, the binary and the unit are
# replaced only if they changed (then the agent is restarted), and the unit is enabled and
# started. A host enrolled under another host id is refused before anything is touched.
#
# Test hooks (never needed on a real host): DROVER_BOOTSTRAP_ROOT installs under another
# root (a package with `dpkg --root`, its maintainer scripts run outside a chroot and its
# dependencies taken as met there); DROVER_BOOTSTRAP_SKIP_SYSTEMD=1 skips the systemctl calls
# where no systemd runs (the unit file is still written); DROVER_BOOTSTRAP_NO_PACKAGE=1 installs
# the bare binary even where a package is served.
set -eu

AGENT_SHA256='@AGENT_SHA256@'
# Empty when the coordinator serves no Debian package of the agent.
PACKAGE_SHA256='@AGENT_PACKAGE_SHA256@'
URL=''
PIN=''
TOKEN=''
HOST_ID=''
TRUST_SHA256=''
ROOT="${DROVER_BOOTSTRAP_ROOT:-}"

die() { echo "drover bootstrap: $*" >&2; exit 1; }
say() { echo "drover bootstrap: $*"; }

while [ $# -gt 0 ]; do
  case "$1" in
    --url) URL="${2:-}"; shift 2 ;;
    --pin) PIN="${2:-}"; shift 2 ;;
    --host-id) HOST_ID="${2:-}"; shift 2 ;;
    --trust-sha256) TRUST_SHA256="${2:-}"; shift 2 ;;
    *) die "unknown argument: $1" ;;
  esac
done
[ -n "$URL" ] || die "--url is required"
[ -n "$PIN" ] || die "--pin is required"
[ -n "$HOST_ID" ] || die "--host-id is required"
IFS= read -r TOKEN || true
[ -n "$TOKEN" ] || die "the enrollment token must arrive on stdin"
[ -n "$TRUST_SHA256" ] || die "--trust-sha256 is required"
case "$URL" in https://*) ;; *) die "--url must be https://" ;; esac
if [ -z "$ROOT" ] && [ "$(id -u)" != 0 ]; then die "must run as root (pipe into sudo sh)"; fi
command -v curl >/dev/null 2>&1 || die "curl is required"
command -v sha256sum >/dev/null 2>&1 || die "sha256sum is required"
SKIP_SYSTEMD="${DROVER_BOOTSTRAP_SKIP_SYSTEMD:-0}"
if [ "$SKIP_SYSTEMD" != 1 ]; then
  command -v systemctl >/dev/null 2>&1 || die "systemctl is required to run the agent's unit (DROVER_BOOTSTRAP_SKIP_SYSTEMD=1 skips it)"
fi

fetch() {
  # TLS 1.3 only, and the server must present the pinned key; the CA is not known yet, so the
  # pin is the trust anchor for these downloads (hence --insecure, which skips only the chain).
  # A coordinator serving as many agent downloads as it allows at once answers 503 with a
  # Retry-After, which curl waits out: a rack enrolling together queues for ten minutes at most.
  curl -fsS --proto '=https' --tlsv1.3 --insecure --pinnedpubkey "$PIN" --retry 100 --retry-max-time 600 --max-time 120 -o "$2" "$URL$1"
}

# The package where one is served and dpkg can install it; the bare binary otherwise.
PACKAGE=0
if [ -n "$PACKAGE_SHA256" ] && command -v dpkg >/dev/null 2>&1 && [ "${DROVER_BOOTSTRAP_NO_PACKAGE:-0}" != 1 ]; then
  PACKAGE=1
fi

# Paths as the host sees them (the unit and agent.toml name these); files go under $ROOT.
BIN=/usr/local/bin/drover-agent
[ "$PACKAGE" = 1 ] && BIN=/usr/bin/drover-agent
CONFIG=/etc/drover/agent.toml
CA=/etc/drover/ca.crt
STATE=/var/lib/drover
UNIT=/etc/systemd/system/drover-agent.service

# Enrolled already (what `drover-agent enroll` writes, identity last)? Then as whom.
enrolled=0
if [ -e "$ROOT$STATE/identity.json" ] && [ -e "$ROOT$STATE/key.pem" ] && [ -e "$ROOT$STATE/cert.pem" ]; then
  enrolled=1
  was=$(sed -n 's/.*"hostId"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p' "$ROOT$STATE/identity.json")
  [ "$was" = "$HOST_ID" ] || die "this host is already enrolled as host ${was:-?} (not $HOST_ID); to enroll it again, stop drover-agent and remove $STATE first"
fi

umask 077
mkdir -p "$ROOT/usr/local/bin" "$ROOT/etc/drover" "$ROOT$STATE" "$ROOT/etc/systemd/system"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/drover-bootstrap.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

# Replaces $ROOT$2 with file $1 at mode $3 unless it already holds the same bytes; atomic (a
# rename in the target's directory: a running agent keeps its binary). Sets `changed`.
changed=0
put() {
  if [ -f "$ROOT$2" ] && [ ! -L "$ROOT$2" ] && cmp -s "$1" "$ROOT$2"; then
    chmod "$3" "$ROOT$2"
    return 0
  fi
  rm -f "$ROOT$2.drover-new"
  cp "$1" "$ROOT$2.drover-new"
  chmod "$3" "$ROOT$2.drover-new"
  mv -f "$ROOT$2.drover-new" "$ROOT$2"
  changed=1
}

if [ "$PACKAGE" = 1 ]; then
  say "fetching the agent's Debian package from $URL"
  fetch /v1/agent/package.deb "$tmp/drover-agent.deb"
  got=$(sha256sum "$tmp/drover-agent.deb" | cut -d' ' -f1)
  [ "$got" = "$PACKAGE_SHA256" ] || die "agent package sha256 $got is not the expected $PACKAGE_SHA256"
  before=$(cat "$ROOT$BIN" 2>/dev/null | sha256sum | cut -d' ' -f1)
  if [ -n "$ROOT" ]; then
    # A root of its own: its dpkg database starts empty, its scripts run outside a chroot.
    mkdir -p "$ROOT/var/lib/dpkg/info" "$ROOT/var/lib/dpkg/updates"
    [ -e "$ROOT/var/lib/dpkg/status" ] || : > "$ROOT/var/lib/dpkg/status"
    dpkg --root="$ROOT" --force-script-chrootless --force-depends --force-not-root -i "$tmp/drover-agent.deb" >/dev/null \
      || die "dpkg could not install the agent package"
  else
    dpkg -i "$tmp/drover-agent.deb" >/dev/null || die "dpkg could not install the agent package (apt-get -f install may fetch what it depends on)"
  fi
  after=$(sha256sum "$ROOT$BIN" | cut -d' ' -f1)
  [ "$before" = "$after" ] || changed=1
  # A unit an earlier bare install wrote would override the package's.
  if [ -e "$ROOT/etc/systemd/system/drover-agent.service" ]; then
    rm -f "$ROOT/etc/systemd/system/drover-agent.service"
    changed=1
  fi
  say "drover-agent $(dpkg-deb --field "$tmp/drover-agent.deb" Version) installed from its package"
else
  say "fetching the agent from $URL"
  fetch /v1/agent/binary "$tmp/drover-agent"
  got=$(sha256sum "$tmp/drover-agent" | cut -d' ' -f1)
  [ "$got" = "$AGENT_SHA256" ] || die "agent binary sha256 $got is not the expected $AGENT_SHA256"
  put "$tmp/drover-agent" "$BIN" 0755
fi

if [ "$enrolled" = 1 ]; then
  # Its agent.toml (maybe edited since) and certificates stay as they are.
  say "already enrolled as host $HOST_ID: enrollment skipped, $CONFIG kept"
else
  fetch /v1/ca.crt "$tmp/ca.crt"
  put "$tmp/ca.crt" "$CA" 0644
  # The defaults of every other table fit a plain (non-NixOS) host: the MAAS hardware-sync
  # credentials and timer, `nvidia-smi` on PATH, and `node.uninstall` removing the unit, the
  # binary and this file.
  cat > "$tmp/agent.toml" <<CONFIG
# Written by the Drover bootstrap.
coordinator_urls = ["$URL"]
state_dir = "$ROOT$STATE"
ca_file = "$ROOT$CA"
CONFIG
  put "$tmp/agent.toml" "$CONFIG" 0644
  say "enrolling"
  # The token travels on stdin, not the command line, so it never shows in a process listing.
  printf '%s\n' "$TOKEN" | "$ROOT$BIN" enroll --config "$ROOT$CONFIG" --host-id "$HOST_ID" --token-stdin --trust-sha256 "$TRUST_SHA256"
  say "enrolled as host $HOST_ID"
fi

# The unit: as the NixOS module's drover-agent.service (nixos-modules/lib/agent.nix); the
# package carries its own, the same (packaging/deb/drover-agent.service). The agent
# runs as root in the host's mount namespace (it unmounts tenant filesystems, removes tenant
# users, resets GPUs), so the hardening is a capability bounding set of what the tasks need, a
# system-call deny list, no new privileges, and the address families it uses.
cat > "$tmp/drover-agent.service" <<UNIT
[Unit]
Description=Drover node agent
Wants=network-online.target
After=network-online.target

[Service]
Type=notify
NotifyAccess=main
ExecStart=$BIN run --config $CONFIG
Restart=on-failure
RestartSec=5
WatchdogSec=120
TimeoutStopSec=60
NoNewPrivileges=yes
LockPersonality=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
RestrictNamespaces=yes
ProtectHostname=yes
SystemCallArchitectures=native
SystemCallFilter=~@clock @cpu-emulation @debug @module @obsolete @raw-io @reboot @swap
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK
CapabilityBoundingSet=CAP_SYS_ADMIN CAP_KILL CAP_CHOWN CAP_DAC_OVERRIDE CAP_DAC_READ_SEARCH CAP_FOWNER CAP_FSETID CAP_SETUID CAP_SETGID CAP_AUDIT_WRITE
UMask=0077

[Install]
WantedBy=multi-user.target
UNIT
[ "$PACKAGE" = 1 ] || put "$tmp/drover-agent.service" "$UNIT" 0644

if [ "$SKIP_SYSTEMD" = 1 ]; then
  say "unit in place; systemctl skipped (DROVER_BOOTSTRAP_SKIP_SYSTEMD=1)"
  exit 0
fi
systemctl daemon-reload
systemctl enable --now drover-agent.service
if [ "$enrolled" = 1 ] && [ "$changed" = 1 ]; then
  # A new binary or unit on a host whose agent already ran: run the new one.
  systemctl try-restart drover-agent.service
  say "drover-agent.service updated and restarted"
else
  say "drover-agent.service enabled and started"
fi
