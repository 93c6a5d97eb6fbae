//! Free text a person reads — reasons and references in the audit, input echoed back in an
//! error or a log line: what may be in it, and how much of it comes back.
//!
//! - [`is_plain`]: no control characters, and none of the invisible formatting characters
//!   that make text read as something it is not (bidirectional overrides and isolates,
//!   zero-width spaces and joiners, the byte-order mark: the "Trojan Source" characters,
//!   CVE-2021-42574). An auditor must read what was written.
//! - [`bounded`]: a caller's input echoed back is cut to a bound, with an ellipsis and the
//!   whole length, so a megabyte of input never becomes a megabyte of error, event or log.
//! - [`line_col`]: where in a file a parser stopped, as an editor counts it, for the
//!   `FILE:LINE:COL: message` form of configuration errors.

use std::borrow::Cow;

/// The most characters of caller input an error, event or log line repeats.
pub const ECHO_MAX_CHARS: usize = 256;

/// Bidirectional controls and zero-width characters: invisible, yet they change how the
/// text around them reads.
pub fn is_invisible_format(c: char) -> bool {
    matches!(
        c,
        '\u{061C}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{2069}' | '\u{FEFF}'
    )
}

/// True when `s` has no control character and no invisible formatting character.
pub fn is_plain(s: &str) -> bool {
    !s.chars().any(|c| c.is_control() || is_invisible_format(c))
}

/// `s` as an error or log line may repeat it: at most `max` characters, a longer one cut with
/// `…` and its length in bytes.
pub fn bounded(s: &str, max: usize) -> Cow<'_, str> {
    match s.char_indices().nth(max) {
        None => Cow::Borrowed(s),
        Some((cut, _)) => Cow::Owned(format!("{}… ({} bytes)", &s[..cut], s.len())),
    }
}

/// [`bounded`] at [`ECHO_MAX_CHARS`].
pub fn echo(s: &str) -> Cow<'_, str> {
    bounded(s, ECHO_MAX_CHARS)
}

/// The 1-based line and column (in characters, as editors count them) of byte `offset` in
/// `text`; an offset past the end, or inside a character, counts up to the end or that
/// character.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut end = offset.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let before = &text[..end];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (before.matches('\n').count() + 1, before[line_start..].chars().count() + 1)
}

/// `:LINE:COL` when a parser said where, else nothing (after a file name in a config error).
pub fn at_line_col(at: Option<(usize, usize)>) -> String {
    at.map(|(line, col)| format!(":{line}:{col}")).unwrap_or_default()
}

/// "key `K`: " for a key inside a TOML document; nothing for the document itself (`.`).
pub fn key_prefix(key: &str) -> String {
    if key == "." { String::new() } else { format!("key `{key}`: ") }
}

/// A parser's message on one line: the TOML parser puts what it expected on a second one.
pub fn one_line(message: &str) -> String {
    message.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trojan_source_characters_are_not_plain() {
        for c in ['\u{202E}', '\u{2066}', '\u{2069}', '\u{200B}', '\u{200D}', '\u{FEFF}', '\u{061C}', '\n', '\u{7}'] {
            assert!(!is_plain(&format!("disk swap{c}ok")), "{:?}", c);
        }
        assert!(is_plain("disk swap in rack c07 — ticket #12 (ünïcode is fine)"));
    }

    #[test]
    fn long_input_is_cut_with_its_length() {
        assert_eq!(bounded("short", 10), "short");
        let big = "x".repeat(3 << 20);
        let cut = echo(&big);
        assert!(cut.len() < 300, "{}", cut.len());
        assert!(cut.ends_with("… (3145728 bytes)"), "{cut}");
        // Cut on a character boundary.
        assert_eq!(bounded("ääää", 2), "ää… (8 bytes)");
    }

    #[test]
    fn offsets_become_editor_lines_and_columns() {
        let text = "a = 1\nbé = \"x\nc";
        assert_eq!(line_col(text, 0), (1, 1));
        assert_eq!(line_col(text, 4), (1, 5));
        assert_eq!(line_col(text, 6), (2, 1));
        // Columns count characters: `é` is two bytes, one column.
        assert_eq!(line_col(text, 10), (2, 4));
        assert_eq!(line_col(text, text.len() + 10), (3, 2));
        assert_eq!(line_col(text, 8), (2, 2));
    }
}
