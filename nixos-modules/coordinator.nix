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
    inherit (cfg) package listen publicUrls san trustFile agentBinary releasesDir expectedHosts settings;
    configFile = "/etc/drover/coordinator.toml";
  };
  toSystemd = import ./lib/nixos-unit.nix lib;
  toml = pkgs.formats.toml { };
  # A table of coordinator.toml: the keys below are typed; any other key is taken as TOML and
  # left to the coordinator's own parser, which refuses unknown ones.
  section = description: options: mkOption {
    type = types.submodule { freeformType = toml.type; inherit options; };
    default = { };
    inherit description;
  };
  # Unset (null) leaves the key out of the file, so the coordinator's own default applies.
  number = type: default: description: mkOption {
    type = types.nullOr type;
    default = null;
    description = "${description} Unset: the coordinator's default, ${toString default}.";
  };
in
{
  options.services.drover-coordinator = {
    enable = mkEnableOption "the Drover coordinator";
    package = mkOption {
      type = types.package;
      default = pkgs.callPackage ./package.nix { };
      defaultText = lib.literalExpression "pkgs.callPackage ./nixos-modules/package.nix { }";
      description = ''
        The package providing bin/drover-coordinator. The default builds this checkout's
        workspace (`package.nix`); set it to a prebuilt or pinned Drover to skip that build.
      '';
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
    expectedHosts = mkOption {
      type = types.ints.positive;
      default = 10000;
      description = ''
        The fleet's size, for the unit's memory limits: MemoryHigh is 256 MiB plus 32 KiB a
        host, MemoryMax twice that (the README's sizing rule).
      '';
    };
    openFirewall = mkOption {
      type = types.bool;
      default = false;
      description = "Open the listen port in the firewall.";
    };
    settings = mkOption {
      # RFC 42: any coordinator.toml key in its own name. The keys declared here are typed
      # (a wrong type fails evaluation naming the option); the rest are checked as TOML here
      # and by name by the coordinator's parser, which refuses unknown keys.
      type = types.submodule {
        freeformType = toml.type;
        options = {
          releases_poll_secs = number (types.ints.between 1 3600) 10 "How often `releasesDir` is scanned for new releases, in seconds.";
          enrollment = section "Enrollment tokens." {
            token_ttl_secs = number (types.ints.between 1 604800) 7200 "How long an enrollment token stays valid, in seconds.";
          };
          agent = section "Agent check-ins." {
            long_poll_secs = number (types.ints.between 1 300) 55 "How long a check-in is held open waiting for work, in seconds.";
          };
          hosts = section "Host liveness." {
            offline_after_secs = number types.ints.positive 180 "Silence after which a host is shown offline, in seconds.";
          };
          rollouts = section "The rollout engine." {
            interval_secs = number types.ints.positive 30 "How often the rollout engine runs, in seconds.";
          };
          jobs = section "Maintenance jobs." {
            max_attempts = number types.ints.positive 3 "Attempts per job task before it fails.";
            max_hosts_per_request = number (types.ints.between 1 100000) 500 "Most hosts one job request may name.";
          };
        };
      };
      default = { };
      example = { rollouts.interval_secs = 30; jobs.max_attempts = 3; connections.max_open = 20000; };
      description = ''
        coordinator.toml, in its own key names (`listen`, `state_dir`, `public_urls`,
        `trust_file`, `agent_binary` and `releases_dir` come from the options above), merged
        over the rendered file. Formerly `extraConfig`, which still works with a warning.
      '';
    };
  };

  # The old untyped option keeps working: its value becomes `settings`, with a warning.
  imports = [ (lib.mkRenamedOptionModule [ "services" "drover-coordinator" "extraConfig" ] [ "services" "drover-coordinator" "settings" ]) ];

  config = mkIf cfg.enable {
    environment.etc."drover/coordinator.toml".text = rendered.toml;
    systemd.services.drover-coordinator-init = toSystemd rendered.init;
    systemd.services.drover-coordinator = toSystemd rendered.service // { wantedBy = [ "multi-user.target" ]; };
    networking.firewall.allowedTCPPorts = mkIf cfg.openFirewall [ (lib.toInt (lib.last (lib.splitString ":" cfg.listen))) ];
  };
}
