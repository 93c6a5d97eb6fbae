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
    inherit (cfg) package coordinatorUrls caFile stateDir probes tenantUids drainHook settings;
    configFile = "/etc/drover/agent.toml";
    hostId = cfg.enrollment.hostId;
    tokenFile = cfg.enrollment.tokenFile;
    trustSha256 = cfg.trust.sha256;
    gpu = cfg.gpu;
    storage = cfg.storage;
    hwSync = cfg.hwSync;
  };
  toSystemd = import ./lib/nixos-unit.nix lib;
  toml = pkgs.formats.toml { };
  # Unset (null) leaves the key out of agent.toml, so the agent's own default applies.
  optional = type: default: description: mkOption {
    type = types.nullOr type;
    default = null;
    description = "${description} Unset: the agent's default, ${default}.";
  };
  path = types.either types.path types.str;
in
{
  options.services.drover-agent = {
    enable = mkEnableOption "the Drover node agent";
    package = mkOption {
      type = types.package;
      default = pkgs.callPackage ./package.nix { };
      defaultText = lib.literalExpression "pkgs.callPackage ./nixos-modules/package.nix { }";
      description = ''
        The package providing bin/drover-agent. The default builds this checkout's workspace
        (`package.nix`); set it to a prebuilt or pinned Drover to skip that build.
      '';
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
    # The three groups below map onto agent.toml's `[tasks]` (and `[health]`) keys, which the
    # agent parses with unknown fields denied: the names here are the only spellings accepted.
    gpu = {
      nvidiaSmi = optional path "nvidia-smi on PATH" "The `nvidia-smi` the GPU scrub and health checks run (tasks.nvidia_smi, health.nvidia_smi).";
      amdSmi = optional path "amd-smi on PATH" "The `amd-smi` for AMD GPUs (tasks.amd_smi).";
      rocmSmi = optional path "rocm-smi on PATH" "The `rocm-smi` for older AMD stacks (tasks.rocm_smi).";
      dcgmi = optional path "dcgmi on PATH" "The DCGM CLI the diagnostics run (tasks.dcgmi).";
      toolTimeoutSecs = optional types.ints.positive "120" "Longest one GPU tool call may take, in seconds (tasks.gpu_tool_timeout_secs).";
    };
    storage = {
      roots = mkOption {
        type = types.listOf path;
        default = [ ];
        example = [ "/scratch" "/local/nvme" ];
        description = "Directories emptied between tenants, each kept itself with its mode (tasks.storage_roots). Empty: none.";
      };
      wekaFsTypes = optional (types.listOf types.str) "[ \"wekafs\" ]" "Filesystem types unmounted as tenant WEKA mounts (tasks.weka_fs_types).";
    };
    hwSync = {
      credsFile = optional path "/etc/maas/maas-machine-creds.yml" "The MAAS machine credentials hardware sync reads (tasks.maas_creds_file, health.maas_creds_file).";
      timer = optional types.str "maas_hardware_sync.timer" "The hardware-sync timer unit (tasks.hw_sync_timer, health.hw_sync_timer).";
      service = optional types.str "maas_hardware_sync.service" "The hardware-sync service unit (tasks.hw_sync_service).";
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
    settings = mkOption {
      # RFC 42: any agent.toml key in its own name. The keys declared here are typed (a wrong
      # type fails evaluation naming the option); the rest are checked as TOML here and by
      # name by the agent, whose parser refuses unknown keys (`drover-agent check-config`).
      type = types.submodule {
        freeformType = toml.type;
        options = {
          systemd_bus = optional types.str "the system bus" "The D-Bus address of systemd.";
          checkin = mkOption {
            type = types.submodule {
              freeformType = toml.type;
              options = {
                request_timeout_secs = optional types.ints.positive "330" "Longest a check-in may take, in seconds; must exceed the coordinator's long-poll hold.";
                backoff_base_secs = optional types.ints.positive "1" "First backoff after a failed check-in, in seconds.";
                backoff_max_secs = optional types.ints.positive "300" "Longest backoff, in seconds.";
              };
            };
            default = { };
            description = "The check-in loop.";
          };
        };
      };
      default = { };
      example = { checkin.backoff_max_secs = 120; };
      description = ''
        agent.toml, in its own key names, merged over the file rendered from the options above
        (which set `coordinator_urls`, `state_dir`, `ca_file`, `probes`, `[tasks]`, `[health]`).
        Formerly `extraConfig`, which still works with a warning.
      '';
    };
  };

  # The old untyped option keeps working: its value becomes `settings`, with a warning.
  imports = [ (lib.mkRenamedOptionModule [ "services" "drover-agent" "extraConfig" ] [ "services" "drover-agent" "settings" ]) ];

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
