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
# Test hooks (never needed on a real host): DROVER_BOOTSTRAP_ROOT installs under another
# root; DROVER_BOOTSTRAP_SKIP_SYSTEMD=1 skips the unit step where no systemd runs.
set -eu

AGENT_SHA256='@AGENT_SHA256@'
URL=''
PIN=''
TOKEN=''
HOST_ID=''
TRUST_SHA256=''
ROOT="${DROVER_BOOTSTRAP_ROOT:-}"

die() { echo "drover bootstrap: $*" >&2; exit 1; }

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

fetch() {
  # TLS 1.3 only, and the server must present the pinned key; the CA is not known yet, so the
  # pin is the trust anchor for these downloads (hence --insecure, which skips only the chain).
  curl -fsS --proto '=https' --tlsv1.3 --insecure --pinnedpubkey "$PIN" --retry 3 --max-time 120 -o "$2" "$URL$1"
}

BIN_DIR="$ROOT/usr/local/bin"
ETC_DIR="$ROOT/etc/drover"
STATE_DIR="$ROOT/var/lib/drover"
UNIT_DIR="$ROOT/etc/systemd/system"
umask 077
mkdir -p "$BIN_DIR" "$ETC_DIR" "$STATE_DIR"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/drover-bootstrap.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

echo "drover bootstrap: fetching the agent from $URL"
fetch /v1/agent/binary "$tmp/drover-agent"
got=$(sha256sum "$tmp/drover-agent" | cut -d' ' -f1)
[ "$got" = "$AGENT_SHA256" ] || die "agent binary sha256 $got is not the expected $AGENT_SHA256"
fetch /v1/ca.crt "$tmp/ca.crt"
install -m 0755 "$tmp/drover-agent" "$BIN_DIR/drover-agent"
install -m 0644 "$tmp/ca.crt" "$ETC_DIR/ca.crt"

cat > "$ETC_DIR/agent.toml" <<CONFIG
# Written by the Drover bootstrap.
coordinator_urls = ["$URL"]
state_dir = "$STATE_DIR"
ca_file = "$ETC_DIR/ca.crt"
CONFIG
chmod 0644 "$ETC_DIR/agent.toml"

echo "drover bootstrap: enrolling"
# The token travels on stdin, not the command line, so it never shows in a process listing.
printf '%s\n' "$TOKEN" | "$BIN_DIR/drover-agent" enroll --config "$ETC_DIR/agent.toml" --host-id "$HOST_ID" --token-stdin --trust-sha256 "$TRUST_SHA256"

if [ "${DROVER_BOOTSTRAP_SKIP_SYSTEMD:-0}" = 1 ]; then
  echo "drover bootstrap: enrolled; systemd step skipped (DROVER_BOOTSTRAP_SKIP_SYSTEMD=1)"
  exit 0
fi
mkdir -p "$UNIT_DIR"
cat > "$UNIT_DIR/drover-agent.service" <<UNIT
[Unit]
Description=Drover node agent
Wants=network-online.target
After=network-online.target

[Service]
Type=notify
NotifyAccess=main
ExecStart=/usr/local/bin/drover-agent run --config /etc/drover/agent.toml
WatchdogSec=120
Restart=always
RestartSec=5

[Install]
WantedBy=multi-user.target
UNIT
chmod 0644 "$UNIT_DIR/drover-agent.service"
command -v systemctl >/dev/null 2>&1 || die "systemctl is required to install the unit (DROVER_BOOTSTRAP_SKIP_SYSTEMD=1 skips it)"
systemctl daemon-reload
# Start the unit only with an agent that can run it: a unit whose command does not exist
# would restart forever. An agent without `run` is enrolled and waits for its upgrade.
if "$BIN_DIR/drover-agent" run --help >/dev/null 2>&1; then
  systemctl enable --now drover-agent.service
  echo "drover bootstrap: enrolled; drover-agent.service started"
else
  echo "drover bootstrap: enrolled; unit installed but not started: this agent has no 'run' command yet"
fi
