# The coordinator's configuration file and systemd units, as a function of the module's
# settings, using only `builtins` (tests render them with `nix-instantiate`, parse the file
# with the coordinator's own configuration parser and check the units with `systemd-analyze`).
# `coordinator.nix` is the NixOS module around it.
{
  package,                          # a path whose bin/drover-coordinator is the coordinator
  listen ? "0.0.0.0:8443",
  publicUrls,                       # https URLs agents reach it at
  san,                              # DNS names / IPs for the server certificate (init)
  trustFile,                        # the CI trust roots (trust.json)
  agentBinary,                      # the agent binary bootstrap scripts install
  stateDir ? "/var/lib/drover-coordinator",
  configFile ? "/etc/drover/coordinator.toml",
  releasesDir ? null,
  expectedHosts ? 10000,            # the fleet's size, for the memory limits below
  settings ? { },                   # freeform, merged over the rendered file (coordinator.toml keys)
}:
let
  toml = import ./toml.nix;
  unit = import ./unit.nix;
  bin = "${toString package}/bin/drover-coordinator";
  merged = toml.merge {
    inherit listen;
    state_dir = stateDir;
    public_urls = publicUrls;
    trust_file = trustFile;
    agent_binary = agentBinary;
    releases_dir = releasesDir;
  } settings;

  # The coordinator needs nothing of the host but its state dir and a TCP port above 1024: a
  # dynamic user, a read-only system, no capabilities, no devices, a system-call allow list.
  hardening = {
    DynamicUser = true;
    StateDirectory = "drover-coordinator";
    StateDirectoryMode = "0700";
    UMask = "0077";
    NoNewPrivileges = true;
    CapabilityBoundingSet = "";
    AmbientCapabilities = "";
    ProtectSystem = "strict";
    ProtectHome = true;
    PrivateTmp = true;
    PrivateDevices = true;
    PrivateUsers = true;
    ProtectHostname = true;
    ProtectClock = true;
    ProtectKernelTunables = true;
    ProtectKernelModules = true;
    ProtectKernelLogs = true;
    ProtectControlGroups = true;
    ProtectProc = "invisible";
    ProcSubset = "pid";
    RestrictAddressFamilies = "AF_INET AF_INET6 AF_UNIX";
    RestrictNamespaces = true;
    RestrictRealtime = true;
    RestrictSUIDSGID = true;
    LockPersonality = true;
    MemoryDenyWriteExecute = true;
    RemoveIPC = true;
    SystemCallArchitectures = "native";
    SystemCallFilter = [ "@system-service" "~@privileged @resources" ];
    DevicePolicy = "closed";
  };

  # The sizing rule (BENCHMARKS.md, "Anonymous clients" and "Toward 100,000 agents"): 256 MiB
  # (the process, caches, the anonymous body budget and TLS state of the anonymous caps) plus
  # 32 KiB a host (idle 16 KiB a host measured, twice that for a rollout's peak). Past
  # MemoryHigh the kernel reclaims and throttles; MemoryMax (twice it) is the hard stop.
  memoryHighMiB = 256 + (expectedHosts * 32) / 1024;

  service = {
    Unit = {
      Description = "Drover coordinator";
      Wants = "network-online.target";
      After = "network-online.target drover-coordinator-init.service";
      Requires = "drover-coordinator-init.service";
    };
    Service = hardening // {
      # The coordinator does not speak the notify protocol: exec, so a binary that cannot
      # start fails the unit at once.
      Type = "exec";
      ExecStart = "${bin} serve --config ${configFile}";
      Restart = "on-failure";
      RestartSec = 5;
      TimeoutStopSec = 30;
      # One connection per agent (its long-poll): room for a 10,000-host fleet and the
      # operators, well past the soft 1024 most systems start a service with. `serve` raises
      # its soft limit to this hard one.
      LimitNOFILE = 65536;
      MemoryHigh = "${toString memoryHighMiB}M";
      MemoryMax = "${toString (2 * memoryHighMiB)}M";
    };
    Install.WantedBy = "multi-user.target";
  };

  init = {
    Unit = {
      Description = "Drover coordinator: one-time state (CA, server certificate, director key)";
      # `init` refuses to overwrite: once the CA exists, never again.
      ConditionPathExists = "!${stateDir}/ca.crt";
    };
    Service = hardening // {
      Type = "oneshot";
      ExecStart = "${bin} init --state-dir ${stateDir} " + builtins.concatStringsSep " " (map (s: "--san ${s}") san);
    };
  };
in
{
  settings = merged;
  inherit service init;
  toml = toml.toTOML merged;
  units = {
    "drover-coordinator.service" = unit.toUnit service;
    "drover-coordinator-init.service" = unit.toUnit init;
  };
}
