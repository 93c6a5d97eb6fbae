#!/bin/sh
# Builds the Debian packages drover-agent and drover-coordinator from built binaries:
#
#   packaging/deb/build-debs.sh BIN_DIR OUT_DIR
#
# BIN_DIR holds drover-agent, drover-coordinator and drover (`cargo build --release --locked
# --bins` leaves them in target/release). OUT_DIR gets drover-agent_VERSION_ARCH.deb and
# drover-coordinator_VERSION_ARCH.deb. Needs dpkg-dev (dpkg-deb, dpkg-shlibdeps) and binutils
# (strip). DROVER_DEB_COMPRESS picks dpkg-deb's compressor (xz by default; the tests use
# gzip, faster for debug builds); DROVER_DEB_ONLY=agent builds the agent's package alone.
#
# Layout: binaries in /usr/bin (the coordinator package also ships the agent binary it serves
# to bootstrap scripts, in /usr/lib/drover), units in /lib/systemd/system, configuration in
# /etc/drover, state in /var/lib/drover. The units are hardened as the NixOS modules' are
# (the tests score both with `systemd-analyze security`).
set -eu

[ $# -eq 2 ] || { echo "usage: $0 BIN_DIR OUT_DIR" >&2; exit 64; }
here=$(cd "$(dirname "$0")" && pwd)
bin=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
for b in drover-agent drover-coordinator drover; do
  [ -x "$bin/$b" ] || { echo "build-debs: $bin/$b is missing (cargo build --release --locked --bins)" >&2; exit 66; }
done
version=$(sed -n 's/^version = "\([^"]*\)"$/\1/p' "$here/../../Cargo.toml" | head -n 1)
[ -n "$version" ] || { echo "build-debs: no version in Cargo.toml" >&2; exit 65; }
debversion="$version-1"
arch=$(dpkg --print-architecture)
compress="${DROVER_DEB_COMPRESS:-xz}"
maintainer="Drover maintainers <maintainers@drover.invalid>"
work=$(mktemp -d "${TMPDIR:-/tmp}/drover-deb.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
# Reproducible: every file dated from the last commit (or the epoch outside git).
SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git -C "$here" log -1 --format=%ct 2>/dev/null || echo 0)}"
export SOURCE_DATE_EPOCH

# $1 package, $2 one-line summary: the files every package carries.
common() {
  root="$work/$1"
  install -d -m 0755 "$root/DEBIAN" "$root/usr/share/doc/$1"
  cat > "$root/usr/share/doc/$1/copyright" <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: drover
Source: the Drover repository

Files: *
Copyright: 2025-2026 the Drover authors
License: Apache-2.0

License: Apache-2.0
 On Debian systems, the complete text of the Apache License 2.0 can be found in
 /usr/share/common-licenses/Apache-2.0.
EOF
  chmod 0644 "$root/usr/share/doc/$1/copyright"
  date=$(date -u -R -d "@$SOURCE_DATE_EPOCH")
  printf '%s (%s) unstable; urgency=medium\n\n  * Built from the Drover repository (version %s).\n\n -- %s  %s\n' \
    "$1" "$debversion" "$version" "$maintainer" "$date" | gzip -9n > "$root/usr/share/doc/$1/changelog.Debian.gz"
  chmod 0644 "$root/usr/share/doc/$1/changelog.Debian.gz"
}

# $1 package root, $2.. binaries: the shared-library dependencies, as dpkg-shlibdeps finds them.
depends() {
  root=$1
  shift
  mkdir -p "$work/shlibs/debian"
  printf 'Source: drover\n\nPackage: drover\nArchitecture: any\n' > "$work/shlibs/debian/control"
  (cd "$work/shlibs" && dpkg-shlibdeps -O "$@" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
}

# $1 package root: Installed-Size, the md5sums, and the archive.
finish() {
  root=$1
  (cd "$root" && find . -type f ! -path './DEBIAN/*' -printf '%P\0' | sort -z | xargs -0 md5sum > DEBIAN/md5sums)
  chmod 0644 "$root/DEBIAN/md5sums"
  find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
  dpkg-deb --root-owner-group -Z"$compress" --build "$root" "$out/$(basename "$root")_${debversion}_$arch.deb" >/dev/null
}

# $1 package root: its size in KiB, for the control file.
size() { du -sk --exclude=DEBIAN "$1" | cut -f1; }

# Maintainer scripts honour DPKG_ROOT (dpkg sets it for an install into another root).
maintscript() {
  install -m 0755 /dev/stdin "$1"
}

# The maintainer scripts of a package: $1 its root, $2 the unit enabled and restarted, $3 all
# its units (space-separated), $4 shell lines run on configure first, $5 shell lines a purge
# runs last. The rest is what debhelper writes for systemd units, and it touches no running
# systemd in an install into another root ($DPKG_ROOT).
scripts() {
  {
    printf '#!/bin/sh\nset -e\nif [ "$1" = configure ]; then\n%s\n' "$4"
    sed -e "s|@UNIT@|$2|g" -e "s|@UNITS@|$3|g" <<'EOF'
  if [ -z "$DPKG_ROOT" ] && [ -d /run/systemd/system ]; then
    systemctl --system daemon-reload >/dev/null || true
  fi
  for unit in @UNITS@; do
    deb-systemd-helper unmask "$unit" >/dev/null || true
  done
  if deb-systemd-helper --quiet was-enabled @UNIT@; then
    deb-systemd-helper enable @UNIT@ >/dev/null || true
  else
    deb-systemd-helper update-state @UNIT@ >/dev/null || true
  fi
  # An upgrade restarts what runs on the new binary; a fresh install waits for its conditions.
  if [ -n "$2" ] && [ -z "$DPKG_ROOT" ] && [ -d /run/systemd/system ]; then
    deb-systemd-invoke try-restart @UNIT@ >/dev/null || true
  fi
fi
exit 0
EOF
  } | maintscript "$1/DEBIAN/postinst"
  sed -e "s|@UNIT@|$2|g" <<'EOF' | maintscript "$1/DEBIAN/prerm"
#!/bin/sh
set -e
if [ "$1" = remove ] && [ -z "$DPKG_ROOT" ] && [ -d /run/systemd/system ]; then
  deb-systemd-invoke stop @UNIT@ >/dev/null || true
fi
exit 0
EOF
  {
    sed -e "s|@UNITS@|$3|g" <<'EOF'
#!/bin/sh
set -e
if [ -z "$DPKG_ROOT" ] && [ -d /run/systemd/system ]; then
  systemctl --system daemon-reload >/dev/null || true
fi
if [ "$1" = remove ]; then
  for unit in @UNITS@; do
    deb-systemd-helper mask "$unit" >/dev/null || true
  done
fi
if [ "$1" = purge ]; then
  for unit in @UNITS@; do
    deb-systemd-helper purge "$unit" >/dev/null || true
    deb-systemd-helper unmask "$unit" >/dev/null || true
  done
EOF
    printf '%s\nfi\nexit 0\n' "$5"
  } | maintscript "$1/DEBIAN/postrm"
}

# ---- drover-agent ----------------------------------------------------------------------------
common drover-agent
root="$work/drover-agent"
install -D -m 0755 "$bin/drover-agent" "$root/usr/bin/drover-agent"
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$root/usr/bin/drover-agent"
install -D -m 0644 "$here/drover-agent.service" "$root/lib/systemd/system/drover-agent.service"
cat > "$root/DEBIAN/control" <<EOF
Package: drover-agent
Version: $debversion
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $(size "$root")
Depends: $(depends "$root" "$root/usr/bin/drover-agent"), curl
Section: admin
Priority: optional
Description: Drover node agent for bare-metal GPU hosts
 The agent a Drover coordinator drives: it pulls its host's signed work
 (NixOS activation with automatic rollback, GPU scrub, storage cleanup,
 MAAS hardware-sync reseed), verifies every signature and its own wave
 membership, and reports health and probe results back. Enroll it with
 the bootstrap command "drover enroll" prints; the unit starts once the
 host is enrolled.
EOF
# Prepared on configure: the configuration and state directories. Purged: the host's identity
# (key, certificate) and what the bootstrap wrote for it.
scripts "$root" drover-agent.service drover-agent.service \
  '  install -d -m 0755 "$DPKG_ROOT/etc/drover"
  install -d -m 0700 "$DPKG_ROOT/var/lib/drover"' \
  '  rm -rf "$DPKG_ROOT/var/lib/drover"
  rm -f "$DPKG_ROOT/etc/drover/agent.toml" "$DPKG_ROOT/etc/drover/ca.crt"
  rmdir "$DPKG_ROOT/etc/drover" 2>/dev/null || true'
finish "$root"

# ---- drover-coordinator ------------------------------------------------------------------------
if [ "${DROVER_DEB_ONLY:-}" = agent ]; then
  echo "$out/drover-agent_${debversion}_$arch.deb"
  exit 0
fi
common drover-coordinator
root="$work/drover-coordinator"
install -D -m 0755 "$bin/drover-coordinator" "$root/usr/bin/drover-coordinator"
install -D -m 0755 "$bin/drover" "$root/usr/bin/drover"
install -D -m 0755 "$bin/drover-agent" "$root/usr/lib/drover/drover-agent"
strip --strip-unneeded --remove-section=.comment --remove-section=.note \
  "$root/usr/bin/drover-coordinator" "$root/usr/bin/drover" "$root/usr/lib/drover/drover-agent"
for u in drover-coordinator.service drover-coordinator-init.service; do
  install -D -m 0644 "$here/$u" "$root/lib/systemd/system/$u"
done
install -D -m 0644 "$here/coordinator-init.env" "$root/etc/drover/coordinator-init.env"
install -D -m 0644 "$here/coordinator.toml.example" "$root/usr/share/doc/drover-coordinator/examples/coordinator.toml"
printf '/etc/drover/coordinator-init.env\n' > "$root/DEBIAN/conffiles"
chmod 0644 "$root/DEBIAN/conffiles"
cat > "$root/DEBIAN/control" <<EOF
Package: drover-coordinator
Version: $debversion
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $(size "$root")
Depends: $(depends "$root" "$root/usr/bin/drover-coordinator" "$root/usr/bin/drover")
Section: admin
Priority: optional
Description: Drover coordinator and operator CLI for fleets of GPU hosts
 The coordinator serves CI-signed rollout manifests, per-host intents and
 tasks over mutual TLS 1.3 to Drover agents, rolls releases out in waves
 under disruption budgets, and drives MAAS and rack devices. The package
 also carries the "drover" operator CLI and the agent binary served to
 bootstrap scripts. Configure /etc/drover/coordinator.toml (an example is
 in /usr/share/doc/drover-coordinator/examples), then enable
 drover-coordinator.
EOF
# A purge never removes the state directory: it holds the fleet's CA key and store. Back it
# up (`drover-coordinator backup`) and remove /var/lib/drover by hand if you mean it.
scripts "$root" drover-coordinator.service "drover-coordinator.service drover-coordinator-init.service" '  :' '  :'
finish "$root"

echo "$out/drover-agent_${debversion}_$arch.deb"
echo "$out/drover-coordinator_${debversion}_$arch.deb"
