//! Free text a person reads — reasons and references in the audit, input echoed back in an
//! error or a log line: what may be in it, and how much of it comes back.
//!
//! - [`is_plain`]: no control characters, and none of the invisible formatting characters
//!   that make text read as something it is not (bidirectional overrides and isolates,
//!   zero-width spaces and joiners, the byte-order mark: the "Trojan Source" characters,
//!   CVE-2021-42574). An auditor must read what was written.
//! - [`bounded`]: a caller's input echoed back is cut to a bound, with an ellipsis and the
//!   whole length, so a megabyte of input never becomes a megabyte of error, event or log.

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
}
