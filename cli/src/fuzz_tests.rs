//! Fuzz targets of the CLI's own parsers (bolero; the shared scheme is in
//! `proto/tests/fuzzing/mod.rs`): the command line (`clap`'s `try_parse_from` over any
//! argv) and the TOML config file. Any input parses or is refused with a message; none
//! panics. They live in the binary crate because its parsers are not a library's.

#[path = "../../proto/tests/fuzzing/mod.rs"]
mod fuzzing;

use std::ffi::OsString;
use std::path::Path;

use clap::{CommandFactory, Parser};

use crate::Cli;
use crate::cliconfig::CliConfig;

/// Every subcommand name and long option of the command tree, and a few awkward values, so
/// that bytes spell command lines that reach deep into the tree.
fn vocabulary() -> Vec<String> {
    fn walk(cmd: &clap::Command, out: &mut Vec<String>) {
        out.push(cmd.get_name().to_owned());
        for arg in cmd.get_arguments() {
            if let Some(long) = arg.get_long() {
                out.push(format!("--{long}"));
            }
            if let Some(short) = arg.get_short() {
                out.push(format!("-{short}"));
            }
        }
        for sub in cmd.get_subcommands() {
            walk(sub, out);
        }
    }
    let mut out = Vec::new();
    walk(&Cli::command(), &mut out);
    out.sort();
    out.dedup();
    out.extend(["--", "-", "=", "0", "-1", "18446744073709551616", "1h30m", "x@y", "/nix/store/x", "\u{202e}", ""].map(str::to_owned));
    out
}

/// The argv that `input` spells: by default each byte picks a vocabulary word; after a
/// leading 0xFF, NUL-separated raw arguments (not necessarily UTF-8).
fn argv(input: &[u8], words: &[String]) -> Vec<OsString> {
    let mut args = vec![OsString::from("drover")];
    match input.split_first() {
        Some((0xFF, raw)) => {
            use std::os::unix::ffi::OsStringExt as _;
            args.extend(raw.split(|b| *b == 0).map(|a| OsString::from_vec(a.to_vec())));
        }
        _ => args.extend(input.iter().map(|b| OsString::from(&words[usize::from(*b) % words.len()]))),
    }
    args
}

#[test]
fn cli_argv() {
    let words = vocabulary();
    bolero::check!(name = "cli_argv").with_test_time(fuzzing::TEST_TIME).with_max_len(256).for_each(|input: &[u8]| {
        if let Err(e) = Cli::try_parse_from(argv(input, &words)) {
            assert!(!e.render().to_string().is_empty(), "an empty usage error for {:?}", argv(input, &words));
        }
    });
}

/// A valid CLI config file, the document the edits start from.
const VALID: &str = r#"
coordinator = "https://coord.example:8443"
cert = "operator.crt"
key = "/etc/drover/operator.key"
ca = "ca.crt"
"#;

#[test]
fn cli_config() {
    let path = Path::new("/home/op/.config/drover/config.toml");
    let parsed = CliConfig::parse(path, VALID).expect("the fuzz target starts from a valid file");
    assert_eq!(parsed.ca.as_deref(), Some(Path::new("/home/op/.config/drover/ca.crt")));
    bolero::check!(name = "cli_config").with_test_time(fuzzing::TEST_TIME).with_max_len(fuzzing::MAX_LEN).for_each(|input: &[u8]| {
        let (mode, operand) = fuzzing::split(input);
        let bytes = fuzzing::variant(VALID.as_bytes(), mode, operand);
        let Ok(text) = std::str::from_utf8(&bytes) else { return };
        if let Err(e) = CliConfig::parse(path, text) {
            let message = e.to_string();
            assert!(message.contains("config.toml"), "the error does not name the file: {message}");
        }
    });
}
