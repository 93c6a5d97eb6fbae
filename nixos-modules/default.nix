# Drover's NixOS modules: `imports = [ (import ./nixos-modules).default ];` brings both, or
# pick one of `drover-agent` / `drover-coordinator`.
{
  drover-agent = ./agent.nix;
  drover-coordinator = ./coordinator.nix;
  default = { imports = [ ./agent.nix ./coordinator.nix ]; };
}
