# The unit settings of ./agent.nix and ./coordinator.nix's renderers, as NixOS's
# `systemd.services.<name>` wants them (needs nixpkgs' `lib`): the same settings the tests
# render and check with `systemd-analyze`.
lib: unit: {
  description = unit.Unit.Description;
  wants = lib.splitString " " (unit.Unit.Wants or "");
  after = lib.splitString " " (unit.Unit.After or "");
  requires = lib.optional ((unit.Unit.Requires or null) != null) unit.Unit.Requires;
  unitConfig = lib.filterAttrs (n: _: n == "ConditionPathExists") unit.Unit;
  serviceConfig = unit.Service;
}
