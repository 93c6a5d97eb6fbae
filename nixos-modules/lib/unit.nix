# A systemd unit file renderer using only `builtins`: the modules hand the same settings to
# NixOS (`systemd.services.<name>`) and to this renderer, so the unit the tests check with
# `systemd-analyze verify` and `systemd-analyze security --offline=true` is the one deployed.
#
# toUnit :: { Unit, Service, Install } -> string. A list value becomes one line per element;
# booleans become yes/no; `null` is left out.
let
  inherit (builtins) attrNames concatStringsSep filter isBool isList map toString;
  value = v: if isBool v then (if v then "yes" else "no") else toString v;
  lines = section: attrs:
    let ks = filter (k: attrs.${k} != null) (attrNames attrs);
    in "[${section}]\n" + concatStringsSep "" (map (k: let v = attrs.${k}; in
      if isList v then concatStringsSep "" (map (x: "${k}=${value x}\n") v) else "${k}=${value v}\n") ks);
in
{
  toUnit = unit: concatStringsSep "\n" (map (s: lines s unit.${s}) (filter (s: unit ? ${s}) [ "Unit" "Service" "Install" ]));
}
