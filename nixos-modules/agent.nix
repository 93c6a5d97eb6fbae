# services.drover-agent: the Drover node agent on a NixOS host.
#
# The configuration file and the units come from ./lib/agent.nix (builtins only, tested
# without nixpkgs); this module declares the options, installs the file, and hands the same
# unit settings to systemd. The agent is never restarted by a switch (`restartIfChanged =
# false`): the switch it runs itself would otherwise kill it mid-activation.
{ config, lib, pkgs, ... }:
let
  cfg = config.services.drover-agent;
  inherit (lib) mkEnableOption mkOption mkIf types;
  rendered = import ./lib/agent.nix {
    inherit (cfg) package coordinatorUrls caFile stateDir probes tenantUids drainHook extraConfig;
    configFile = "/etc/drover/agent.toml";
    hostId = cfg.enrollment.hostId;
    tokenFile = cfg.enrollment.tokenFile;
    trustSha256 = cfg.trust.sha256;
    gpu = cfg.gpu;
    storage = cfg.storage;
    hwSync = cfg.hwSync;
  };
  toSystemd = import ./lib/nixos-unit.nix lib;
in
{
  options.services.drover-agent = {
    enable = mkEnableOption "the Drover node agent";
    package = mkOption {
      type = types.package;
      description = "The package providing bin/drover-agent.";
    };
    coordinatorUrls = mkOption {
      type = types.nonEmptyListOf types.str;
      example = [ "https://coord-1.example:8443" "https://coord-2.example:8443" ];
      description = "Coordinator URLs (https), tried in order on connection failure.";
    };
    caFile = mkOption {
      type = types.path;
      description = "The coordinator's CA certificate: the only root the agent trusts for it.";
    };
    enrollment = {
      hostId = mkOption {
        type = types.nullOr types.str;
        default = null;
        description = "The host id `drover enroll` created for this host.";
      };
      tokenFile = mkOption {
        type = types.nullOr types.str;
        default = null;
        description = ''
          A file holding the one-time enrollment token (kept out of the Nix store: give a
          path such as /run/keys/drover-token). Enrollment runs once, before the agent's first
          start; a host with an identity in its state dir never enrolls again.
        '';
      };
    };
    trust.sha256 = mkOption {
      type = types.nullOr types.str;
      default = null;
      description = "The sha256 of the CI trust roots (trust.json) the agent accepts at enrollment.";
    };
    stateDir = mkOption {
      type = types.str;
      default = "/var/lib/drover";
      description = "The agent's state: key, certificate, trust roots, journal.";
    };
    tags = mkOption {
      type = types.listOf types.str;
      default = [ ];
      example = [ "gpu" "rack-a" ];
      description = ''
        This host's tags in the fleet spec (selectors, budgets, maintenance groups). The agent
        does not read them: CI collects them from every host's configuration when it builds the
        fleet spec.
      '';
    };
    probes = mkOption {
      type = types.listOf types.attrs;
      default = [ ];
      description = "Local probes (observe-only), in agent.toml's [[probes]] shape.";
    };
    gpu = mkOption {
      type = types.attrs;
      default = { };
      example = { nvidiaSmi = "/run/current-system/sw/bin/nvidia-smi"; toolTimeoutSecs = 120; };
      description = "GPU task settings: nvidiaSmi, amdSmi, rocmSmi, dcgmi, toolTimeoutSecs.";
    };
    storage = mkOption {
      type = types.attrs;
      default = { };
      example = { roots = [ "/scratch" ]; wekaFsTypes = [ "wekafs" ]; };
      description = "Storage cleanup settings: roots (emptied, each kept), wekaFsTypes.";
    };
    hwSync = mkOption {
      type = types.attrs;
      default = { };
      description = "MAAS hardware-sync settings: credsFile, timer, service.";
    };
    tenantUids = mkOption {
      type = types.nullOr (types.submodule { options = { min = mkOption { type = types.int; }; max = mkOption { type = types.int; }; }; });
      default = null;
      description = "The tenant uid range (never below 1000).";
    };
    drainHook = mkOption {
      type = types.listOf types.str;
      default = [ ];
      description = "argv run by node.drain (no shell).";
    };
    extraConfig = mkOption {
      type = types.attrs;
      default = { };
      description = "Merged over the rendered agent.toml (its own key names).";
    };
  };

  config = mkIf cfg.enable {
    assertions = [
      {
        assertion = (cfg.enrollment.tokenFile == null) || (cfg.enrollment.hostId != null && cfg.trust.sha256 != null);
        message = "services.drover-agent: enrollment.tokenFile needs enrollment.hostId and trust.sha256.";
      }
    ];
    environment.etc."drover/agent.toml".text = rendered.toml;
    systemd.services.drover-agent = toSystemd rendered.service // {
      wantedBy = [ "multi-user.target" ];
      restartIfChanged = false;
    };
    systemd.services.drover-agent-enroll = mkIf (cfg.enrollment.tokenFile != null) (toSystemd rendered.enroll);
  };
}
