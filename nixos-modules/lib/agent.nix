# The agent's configuration file and systemd units, as a function of the module's settings,
# using only `builtins` (tests evaluate it with `nix-instantiate` and feed the results to
# `drover-agent check-config` and `systemd-analyze`). `agent.nix` is the NixOS module around it.
{
  package,                          # a path whose bin/drover-agent is the agent
  coordinatorUrls,                  # https URLs, tried in order
  caFile,                           # the coordinator's CA certificate
  stateDir ? "/var/lib/drover",
  configFile ? "/etc/drover/agent.toml",
  hostId ? null,                    # enrollment: the host's id (from `drover enroll`)
  tokenFile ? null,                 # enrollment: a file holding the one-time token
  trustSha256 ? null,               # enrollment: sha256 of the CI trust roots to accept
  probes ? [ ],                     # local probes (observe-only), as in agent.toml's [[probes]]
  gpu ? { },                        # { nvidiaSmi, amdSmi, rocmSmi, dcgmi, toolTimeoutSecs }
  storage ? { },                    # { roots, wekaFsTypes }
  hwSync ? { },                     # { credsFile, timer, service }
  tenantUids ? null,                # { min, max }
  drainHook ? [ ],                  # argv run by node.drain
  settings ? { },                   # freeform, merged over the rendered file (agent.toml keys)
}:
let
  toml = import ./toml.nix;
  unit = import ./unit.nix;
  opt = set: name: set.${name} or null;
  bin = "${toString package}/bin/drover-agent";
  nonEmpty = l: if l == [ ] then null else l;

  # The typed groups are checked here too, so a wrong type fails evaluation naming the option
  # even where this file is evaluated without the module system (the tests, `nix-instantiate`).
  pathLike = { test = v: builtins.isString v || builtins.isPath v; expected = "a path or string"; };
  string = { test = builtins.isString; expected = "a string"; };
  listOf = k: { test = v: builtins.isList v && builtins.all k.test v; expected = "a list, each ${k.expected}"; };
  positive = { test = v: builtins.isInt v && v > 0; expected = "a positive integer"; };
  kinds = {
    gpu = { nvidiaSmi = pathLike; amdSmi = pathLike; rocmSmi = pathLike; dcgmi = pathLike; toolTimeoutSecs = positive; };
    storage = { roots = listOf pathLike; wekaFsTypes = listOf string; };
    hwSync = { credsFile = pathLike; timer = string; service = string; };
  };
  check = group: set: builtins.mapAttrs (k: v:
    let option = "services.drover-agent.${group}.${k}"; in
    if !(kinds.${group} ? ${k}) then throw "${option}: no such option (known: ${builtins.concatStringsSep ", " (builtins.attrNames kinds.${group})})"
    else if v == null || kinds.${group}.${k}.test v then v
    else throw "${option}: expected ${kinds.${group}.${k}.expected}, got ${builtins.typeOf v} ${builtins.toJSON v}") set;
  # Forced whole: an unknown name must fail even though nothing reads it.
  checked = group: set: let c = check group set; in builtins.deepSeq c c;
  gpu' = checked "gpu" gpu;
  storage' = checked "storage" storage;
  hwSync' = checked "hwSync" hwSync;

  tasks = {
    storage_roots = nonEmpty (storage'.roots or [ ]);
    weka_fs_types = opt storage' "wekaFsTypes";
    nvidia_smi = opt gpu' "nvidiaSmi";
    amd_smi = opt gpu' "amdSmi";
    rocm_smi = opt gpu' "rocmSmi";
    dcgmi = opt gpu' "dcgmi";
    gpu_tool_timeout_secs = opt gpu' "toolTimeoutSecs";
    maas_creds_file = opt hwSync' "credsFile";
    hw_sync_timer = opt hwSync' "timer";
    hw_sync_service = opt hwSync' "service";
    tenant_uid_min = if tenantUids == null then null else tenantUids.min;
    tenant_uid_max = if tenantUids == null then null else tenantUids.max;
    drain_hook = nonEmpty drainHook;
    agent_unit = "drover-agent.service";
    # A NixOS host is uninstalled by its configuration, not by deleting files: the agent
    # only purges its own state.
    uninstall_paths = [ ];
  };
  health = {
    maas_creds_file = opt hwSync' "credsFile";
    hw_sync_timer = opt hwSync' "timer";
    nvidia_smi = opt gpu' "nvidiaSmi";
  };
  merged = toml.merge {
    coordinator_urls = coordinatorUrls;
    state_dir = stateDir;
    ca_file = caFile;
    inherit tasks health;
    probes = nonEmpty probes;
  } settings;

  enrolling = tokenFile != null;

  # The agent runs as root (GPU resets, unmounting tenant filesystems, removing tenant users,
  # switching the system) and must share the host's mount namespace — an unmount in a private
  # one would not reach the host — so nothing here creates one (no ProtectSystem, PrivateTmp,
  # ReadWritePaths, …). What is left: a capability bounding set of what the tasks need, a
  # system-call deny list, no new privileges, and the network families it uses.
  hardening = {
    NoNewPrivileges = true;
    LockPersonality = true;
    RestrictRealtime = true;
    RestrictSUIDSGID = true;
    RestrictNamespaces = true;
    ProtectHostname = true;
    SystemCallArchitectures = "native";
    SystemCallFilter = [ "~@clock @cpu-emulation @debug @module @obsolete @raw-io @reboot @swap" ];
    RestrictAddressFamilies = "AF_UNIX AF_INET AF_INET6 AF_NETLINK";
    CapabilityBoundingSet = "CAP_SYS_ADMIN CAP_KILL CAP_CHOWN CAP_DAC_OVERRIDE CAP_DAC_READ_SEARCH CAP_FOWNER CAP_FSETID CAP_SETUID CAP_SETGID CAP_AUDIT_WRITE";
    UMask = "0077";
  };

  service = {
    Unit = {
      Description = "Drover node agent";
      Wants = "network-online.target";
      After = "network-online.target" + (if enrolling then " drover-agent-enroll.service" else "");
      Requires = if enrolling then "drover-agent-enroll.service" else null;
    };
    Service = hardening // {
      Type = "notify";
      NotifyAccess = "main";
      ExecStart = "${bin} run --config ${configFile}";
      Restart = "on-failure";
      RestartSec = 5;
      WatchdogSec = 120;
      TimeoutStopSec = 60;
    };
    Install.WantedBy = "multi-user.target";
  };

  enroll = {
    Unit = {
      Description = "Drover node agent: one-time enrollment";
      Wants = "network-online.target";
      After = "network-online.target";
      # Enrolled once (the state dir holds an identity): never again.
      ConditionPathExists = "!${stateDir}/identity.json";
    };
    Service = hardening // {
      Type = "oneshot";
      ExecStart = "${bin} enroll --config ${configFile} --host-id ${toString hostId} --token-file ${toString tokenFile} --trust-sha256 ${toString trustSha256}";
    };
  };
in
{
  settings = merged;
  inherit service enroll;
  toml = toml.toTOML merged;
  units = { "drover-agent.service" = unit.toUnit service; }
    // (if enrolling then { "drover-agent-enroll.service" = unit.toUnit enroll; } else { });
}
