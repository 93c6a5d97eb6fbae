# services.drover-coordinator: the Drover coordinator on a NixOS host.
#
# The configuration file and the units come from ./lib/coordinator.nix (builtins only, tested
# without nixpkgs): a one-time init unit makes the CA, server certificate and director key,
# then the coordinator runs as a dynamic user with a read-only system and no capabilities.
{ config, lib, pkgs, ... }:
let
  cfg = config.services.drover-coordinator;
  inherit (lib) mkEnableOption mkOption mkIf types;
  rendered = import ./lib/coordinator.nix {
    inherit (cfg) package listen publicUrls san trustFile agentBinary releasesDir extraConfig;
    configFile = "/etc/drover/coordinator.toml";
  };
  toSystemd = import ./lib/nixos-unit.nix lib;
in
{
  options.services.drover-coordinator = {
    enable = mkEnableOption "the Drover coordinator";
    package = mkOption {
      type = types.package;
      description = "The package providing bin/drover-coordinator.";
    };
    listen = mkOption {
      type = types.str;
      default = "0.0.0.0:8443";
      description = "Address to listen on (TLS 1.3 only).";
    };
    publicUrls = mkOption {
      type = types.nonEmptyListOf types.str;
      description = "URLs agents reach the coordinator at (https).";
    };
    san = mkOption {
      type = types.nonEmptyListOf types.str;
      description = "DNS names and IP addresses of the server certificate made at first start.";
    };
    trustFile = mkOption {
      type = types.path;
      description = "The CI trust roots (trust.json) handed to enrolling agents.";
    };
    agentBinary = mkOption {
      type = types.path;
      description = "The agent binary bootstrap scripts install.";
    };
    releasesDir = mkOption {
      type = types.nullOr types.str;
      default = null;
      description = "A directory of signed release directories to publish from.";
    };
    openFirewall = mkOption {
      type = types.bool;
      default = false;
      description = "Open the listen port in the firewall.";
    };
    extraConfig = mkOption {
      type = types.attrs;
      default = { };
      example = { rollouts.interval_secs = 30; jobs.max_attempts = 3; };
      description = "Merged over the rendered coordinator.toml (its own key names).";
    };
  };

  config = mkIf cfg.enable {
    environment.etc."drover/coordinator.toml".text = rendered.toml;
    systemd.services.drover-coordinator-init = toSystemd rendered.init;
    systemd.services.drover-coordinator = toSystemd rendered.service // { wantedBy = [ "multi-user.target" ]; };
    networking.firewall.allowedTCPPorts = mkIf cfg.openFirewall [ (lib.toInt (lib.last (lib.splitString ":" cfg.listen))) ];
  };
}
