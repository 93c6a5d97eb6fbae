# The Drover workspace as a package: bin/drover-agent, bin/drover-coordinator and bin/drover,
# built from this checkout with the versions its Cargo.lock pins (no git dependencies, so no
# output hashes to maintain). The modules' default `package` is `pkgs.callPackage ./package.nix { }`;
# an overlay or a pinned build can replace it through each module's `package` option.
#
# The workspace's tests are not run here: the end-to-end ones need the fake fleet, D-Bus and
# systemd tools that CI provides, not a build sandbox.
{ lib, rustPlatform }:
let
  root = ../.;
  # Not the build output, CI files or this directory: a change to a module does not rebuild the
  # binaries. (`.cargo/config.toml` is kept: it sets SQLite's build flags.)
  skipped = [ "target" "nixos-modules" ".ci" ];
  keep = path: type:
    let rel = lib.removePrefix (toString root + "/") (toString path);
    in !(builtins.any (d: rel == d || lib.hasPrefix (d + "/") rel) skipped);
in
rustPlatform.buildRustPackage {
  pname = "drover";
  version = (lib.importTOML ../Cargo.toml).workspace.package.version;
  src = lib.cleanSourceWith { src = lib.cleanSource root; filter = keep; };
  cargoLock.lockFile = ../Cargo.lock;
  cargoBuildFlags = [ "-p" "drover-agent" "-p" "drover-coordinator" "-p" "drover-cli" ];
  doCheck = false;
  meta = {
    description = "Pull-based fleet management for GPU hosts: coordinator, node agent and CLI";
    license = lib.licenses.asl20;
    mainProgram = "drover";
    platforms = lib.platforms.linux;
  };
}
