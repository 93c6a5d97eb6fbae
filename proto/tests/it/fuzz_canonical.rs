//! Fuzz target: the canonical JSON parser and serialiser (bolero; see `fuzzing/mod.rs` for
//! how it runs). Whatever the bytes, `canonicalize` returns, never panics; and when it
//! accepts them, its output is a fixpoint — canonical, canonicalising to itself, parsing
//! back to the same value — and equals the input exactly when the input was already
//! canonical.

use crate::fuzzing;

use drover_proto::canonical;

/// JSON fragments that a byte picks from, so random bytes also spell near-JSON: nesting,
/// numbers at every notation switch, escapes, surrogates and duplicate-prone keys.
const FRAGMENTS: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\"",
    "\"a\"",
    "\"b\"",
    "null",
    "true",
    "false",
    "0",
    "-",
    "1",
    "9007199254740993",
    "1e21",
    "e",
    "E+",
    "e-7",
    ".5",
    "0.1",
    "-0",
    "5e-324",
    "1.7976931348623157e308",
    "1e400",
    "\\u0000",
    "\\ud83d\\ude00",
    "\\ud800",
    "\\udc00",
    "\\\"",
    "\\\\",
    "\\/",
    "\\n",
    "\\u20ac",
    "\u{e000}",
    "\u{10000}",
    "😀",
    " ",
    "\n",
    "18446744073709551616",
    "123456789012345678901",
];

/// The near-JSON text `input` spells through [`FRAGMENTS`].
fn spell(input: &[u8]) -> String {
    input.iter().map(|b| FRAGMENTS[usize::from(*b) % FRAGMENTS.len()]).collect()
}

/// The fixpoint properties of one input.
fn check(input: &[u8]) {
    let Ok(out) = canonical::canonicalize(input) else { return };
    let text = String::from_utf8_lossy(&out);
    assert!(std::str::from_utf8(&out).is_ok(), "canonical output is not UTF-8: {text}");
    assert_eq!(canonical::canonicalize(&out).expect("canonical output re-parses"), out, "not a fixpoint: {text}");
    let value = canonical::parse_if_canonical(&out).unwrap_or_else(|| panic!("output not accepted as canonical: {text}"));
    assert_eq!(canonical::to_vec(&value).expect("re-serialises"), out, "the parsed value re-serialises differently: {text}");
    assert_eq!(
        canonical::is_canonical(input),
        out == input,
        "is_canonical disagrees with canonicalize on {:?}",
        String::from_utf8_lossy(input)
    );
}

#[test]
fn canonical_json() {
    bolero::check!(name = "canonical_json").with_test_time(fuzzing::TEST_TIME).with_max_len(fuzzing::MAX_LEN).for_each(|input: &[u8]| {
        check(input);
        check(spell(input).as_bytes());
    });
}
