# A TOML renderer using only `builtins`, so the agent's and the coordinator's configuration
# files can be rendered — and checked by the real binaries' parsers — without nixpkgs.
#
# toTOML :: attrset -> string. Scalars (strings, integers, booleans, paths) and lists of
# scalars become `key = value`; attrsets become `[table]`s; lists of attrsets become
# `[[array]]`s of tables. `null` values are left out (an absent key takes the binary's
# default). Keys are always quoted, so any key is valid TOML.
let
  inherit (builtins) attrNames concatStringsSep filter isAttrs isBool isInt isFloat isList isPath isString map replaceStrings toString typeOf;

  escape = s: replaceStrings [ "\\" "\"" "\n" "\r" "\t" ] [ "\\\\" "\\\"" "\\n" "\\r" "\\t" ] s;

  isTable = v: isAttrs v;
  isTableList = v: isList v && v != [ ] && builtins.all isAttrs v;

  scalar = v:
    if isString v then "\"${escape v}\""
    else if isPath v then "\"${escape (toString v)}\""
    else if isBool v then (if v then "true" else "false")
    else if isInt v || isFloat v then toString v
    else if isList v then "[" + concatStringsSep ", " (map scalar v) + "]"
    else throw "toml: cannot render a value of type ${typeOf v}";

  key = k: "\"${escape k}\"";
  path = ks: concatStringsSep "." (map key ks);

  present = attrs: filter (k: attrs.${k} != null) (attrNames attrs);

  # The `key = value` lines of a table, then its sub-tables and arrays of tables.
  render = prefix: attrs:
    let
      ks = present attrs;
      plain = filter (k: !(isTable attrs.${k}) && !(isTableList attrs.${k})) ks;
      tables = filter (k: isTable attrs.${k}) ks;
      arrays = filter (k: isTableList attrs.${k}) ks;
      lines = map (k: "${key k} = ${scalar attrs.${k}}\n") plain;
      sub = map (k: "\n[${path (prefix ++ [ k ])}]\n" + render (prefix ++ [ k ]) attrs.${k}) tables;
      arr = map (k: concatStringsSep "" (map (t: "\n[[${path (prefix ++ [ k ])}]]\n" + render (prefix ++ [ k ]) t) attrs.${k})) arrays;
    in
    concatStringsSep "" (lines ++ sub ++ arr);
in
{
  toTOML = attrs: render [ ] attrs;

  # A recursive merge (right wins), for the freeform `settings` over the rendered settings.
  merge = let
    go = a: b: a // builtins.mapAttrs (k: v: if isAttrs v && a ? ${k} && isAttrs a.${k} then go a.${k} v else v) b;
  in go;
}
