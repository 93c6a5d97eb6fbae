#!/usr/bin/env bash
# Drover's main job until the live demo lands: sign a release of examples/fleet.json with a
# fresh CI key, then verify it as an agent would (and show a tampered copy being refused).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q --release -p drover-cli
drover=target/release/drover
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== drover keygen (CI release key)"
"$drover" keygen --out "$work/ci"
echo "== drover trust (the operator's trust roots)"
"$drover" trust --pub "$work/ci.pub" --out "$work/trust.json"
echo "== drover release --fleet examples/fleet.json"
"$drover" release --fleet examples/fleet.json --key "$work/ci.key" --out "$work/release"
echo "== drover verify (as an agent or the coordinator would)"
"$drover" verify --trust "$work/trust.json" "$work/release"
echo "== drover verify on a tampered copy (one byte of a manifest changed)"
cp -r "$work/release" "$work/tampered"
manifest=$(ls "$work/tampered/rollouts/"*.json | head -n 1)
sed -i 's/"waveIndex":2/"waveIndex":0/' "$manifest"
if "$drover" verify --trust "$work/trust.json" "$work/tampered"; then
  echo "tampered release was accepted: this is a bug" >&2
  exit 1
fi
echo "== done: the tampered release was refused, as it must be"
