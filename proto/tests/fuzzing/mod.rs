//! What the fuzz targets (`fuzz_*.rs`) share: how long `cargo test` runs each, and how an
//! input becomes a variant of a genuine document.
//!
//! Each target is an ordinary `#[test]` built on bolero: under `cargo test` it runs its
//! checked-in corpus (`__fuzz__/<target>/corpus/` beside the target's file, e.g.
//! `proto/tests/it/__fuzz__/`) and then random inputs for
//! [`TEST_TIME`] (`BOLERO_RANDOM_TEST_TIME_MS` overrides it); under `fuzz/run-coverage.sh
//! TARGET` (libFuzzer, on stable Rust) the same target runs coverage-guided. Inputs are
//! bytes, so that a corpus file is an input as it stands.
//!
//! An input is either a replacement for the genuine document or an edit script over it (see
//! [`variant`]): random bytes thus mostly make near-misses of a valid signed document, the
//! inputs that reach deep into verification, rather than noise the JSON parser stops at once.

#![allow(dead_code)]

use std::time::Duration;

/// Random inputs per target under `cargo test`, after the corpus: bounded so that CI's two
/// cores spend a few seconds per target.
pub const TEST_TIME: Duration = Duration::from_secs(6);

/// The longest random input, in bytes.
pub const MAX_LEN: usize = 8 * 1024;

/// How `input[1..]` turns the genuine document into the one under test: byte 0 of the
/// input says which, the rest is its operand.
///
/// - `0`: the operand is the document (a corpus file holds a whole one);
/// - `1`: the operand is triples `(offset_hi, offset_lo, value)`, each overwriting a byte;
/// - `2`: the same triples, each inserting its value before the offset;
/// - `3`: triples `(offset_hi, offset_lo, length)`, each deleting up to 16 bytes;
/// - anything else: triples XOR-ing a byte with a non-zero value.
///
/// Offsets wrap around the current length, so every script applies to any document.
pub fn variant(genuine: &[u8], mode: u8, operand: &[u8]) -> Vec<u8> {
    let mut doc = genuine.to_vec();
    let at = |hi: u8, lo: u8, len: usize| if len == 0 { 0 } else { usize::from(u16::from_be_bytes([hi, lo])) % len };
    match mode {
        0 => return operand.to_vec(),
        1 => {
            for t in operand.chunks_exact(3) {
                if !doc.is_empty() {
                    let i = at(t[0], t[1], doc.len());
                    doc[i] = t[2];
                }
            }
        }
        2 => {
            for t in operand.chunks_exact(3) {
                let i = at(t[0], t[1], doc.len() + 1);
                doc.insert(i, t[2]);
            }
        }
        3 => {
            for t in operand.chunks_exact(3) {
                let i = at(t[0], t[1], doc.len());
                let end = (i + usize::from(t[2] % 16) + 1).min(doc.len());
                doc.drain(i..end);
            }
        }
        _ => {
            for t in operand.chunks_exact(3) {
                if !doc.is_empty() {
                    let i = at(t[0], t[1], doc.len());
                    doc[i] ^= t[2].max(1);
                }
            }
        }
    }
    doc
}

/// Splits an input into `(mode, operand)`; the empty input is the genuine document unchanged.
pub fn split(input: &[u8]) -> (u8, &[u8]) {
    match input.split_first() {
        Some((mode, rest)) => (*mode, rest),
        None => (1, &[]),
    }
}

/// The body of the TOML configuration targets: `input` makes a variant of `valid` (see
/// [`variant`]); text that `parse` accepts is fine, and text it refuses must be refused with
/// an error that names `file`, the one thing an operator needs to find the mistake.
pub fn check_config_loader<T, E: std::fmt::Display>(valid: &str, file: &str, input: &[u8], parse: impl FnOnce(&str) -> Result<T, E>) {
    let (mode, operand) = split(input);
    let bytes = variant(valid.as_bytes(), mode, operand);
    let Ok(text) = std::str::from_utf8(&bytes) else { return };
    if let Err(e) = parse(text) {
        let message = e.to_string();
        assert!(message.contains(file), "the error does not name the file: {message}");
    }
}
