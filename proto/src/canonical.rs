//! RFC 8785 (JSON Canonicalization Scheme) serialisation.
//!
//! Every signature in Drover covers the JCS bytes of a JSON value, so this module is the
//! single place that decides what "the same document" means. Three rules matter:
//! numbers are written the way ECMAScript's `Number.prototype.toString` writes IEEE-754
//! doubles, object keys are ordered by their UTF-16 code units (not by UTF-8 bytes, which
//! differs above U+FFFF), and strings escape only what JSON requires, in the short forms.
//!
//! Every JSON number is a double here, as it is to `JSON.parse`: an integer literal beyond
//! 2^53 becomes the nearest double and is written as ECMAScript writes that double
//! (`9007199254740993` → `9007199254740992`, `1e21` → `1e+21`), so the canonicaliser takes
//! every finite number. Whether a *signed artifact* may carry such an integer is a rule of
//! the artifact schema, not of this module: see [`crate::artifacts::check_safe_integers`].

use serde::Serialize;
use serde_json::{Map, Number, Value};

/// Why a value could not be canonicalised.
#[derive(Debug, thiserror::Error)]
pub enum CanonicalError {
    /// The input bytes were not JSON at all.
    #[error("not valid JSON: {source}")]
    Parse {
        /// What the JSON parser reported.
        #[source]
        source: serde_json::Error,
    },
    /// NaN and the infinities have no JSON form.
    #[error("non-finite number has no JSON form")]
    NonFinite,
    /// A typed value could not be turned into JSON.
    #[error("value cannot be serialised as JSON: {source}")]
    Serialize {
        /// What serde reported.
        #[source]
        source: serde_json::Error,
    },
}

/// Up to this magnitude (2^53) an integer is exactly a double, and ECMAScript writes it as its
/// own decimal digits, so it needs no trip through the double formatter.
const EXACT_INTEGER: u64 = 1 << 53;

/// Canonical bytes of a parsed JSON value.
pub fn to_vec(value: &Value) -> Result<Vec<u8>, CanonicalError> {
    let mut out = Vec::with_capacity(256);
    write_value(value, &mut out)?;
    Ok(out)
}

/// Canonical bytes of any serialisable value (through its `serde_json::Value` form).
pub fn to_vec_of<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, CanonicalError> {
    let value = serde_json::to_value(value).map_err(|source| CanonicalError::Serialize { source })?;
    to_vec(&value)
}

/// Parses arbitrary JSON bytes and returns their canonical form.
///
/// Duplicate object keys are refused (I-JSON, which JCS builds on, forbids them); a plain
/// JSON parser would silently keep the last one and canonicalise a different document.
pub fn canonicalize(bytes: &[u8]) -> Result<Vec<u8>, CanonicalError> {
    let value = parse_strict(bytes)?;
    to_vec(&value)
}

/// Parses JSON, refusing duplicate object keys.
pub fn parse_strict(bytes: &[u8]) -> Result<Value, CanonicalError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde::de::Deserializer::deserialize_any(&mut de, strict::StrictVisitor)
        .and_then(|v| de.end().map(|()| v))
        .map_err(|source| CanonicalError::Parse { source })?;
    Ok(value)
}

/// Serde helper: deserialises a `Value` refusing duplicate object keys, for signed JSON that
/// travels inside a larger document (the `signed` part of an envelope).
pub fn deserialize_strict<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
    d.deserialize_any(strict::StrictVisitor)
}

/// A `Value` visitor that refuses duplicate object keys.
mod strict {
    use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
    use serde_json::{Map, Number, Value};

    pub struct StrictVisitor;

    struct Strict(Value);

    impl<'de> Deserialize<'de> for Strict {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_any(StrictVisitor).map(Strict)
        }
    }

    impl<'de> Visitor<'de> for StrictVisitor {
        type Value = Value;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("any JSON value")
        }
        fn visit_unit<E>(self) -> Result<Value, E> {
            Ok(Value::Null)
        }
        fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
            Ok(Value::Bool(v))
        }
        fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
            Ok(Value::from(v))
        }
        fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
            Ok(Value::from(v))
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
            Number::from_f64(v).map(Value::Number).ok_or_else(|| E::custom("non-finite number"))
        }
        fn visit_str<E>(self, v: &str) -> Result<Value, E> {
            Ok(Value::String(v.to_owned()))
        }
        fn visit_string<E>(self, v: String) -> Result<Value, E> {
            Ok(Value::String(v))
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
            let mut items = Vec::new();
            while let Some(Strict(v)) = seq.next_element()? {
                items.push(v);
            }
            Ok(Value::Array(items))
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
            let mut out = Map::new();
            while let Some(key) = map.next_key::<String>()? {
                let Strict(v) = map.next_value()?;
                if out.contains_key(&key) {
                    return Err(de::Error::custom(format_args!("duplicate object key {key:?}")));
                }
                out.insert(key, v);
            }
            Ok(Value::Object(out))
        }
    }
}

/// True when `bytes` are exactly the canonical form of the JSON they contain.
///
/// Duplicate object keys, insignificant whitespace, other number spellings or key orders all
/// make this false: the parsed value would re-serialise to different bytes.
pub fn is_canonical(bytes: &[u8]) -> bool {
    parse_if_canonical(bytes).is_some()
}

/// The parsed value of `bytes` when they are exactly its canonical form, so a verifier parses
/// once and reuses the value.
pub fn parse_if_canonical(bytes: &[u8]) -> Option<Value> {
    let value: Value = serde_json::from_slice(bytes).ok()?;
    let mut out = Vec::with_capacity(bytes.len());
    write_value(&value, &mut out).ok()?;
    (out == bytes).then_some(value)
}

fn write_value(value: &Value, out: &mut Vec<u8>) -> Result<(), CanonicalError> {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => write_number(n, out)?,
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(item, out)?;
            }
            out.push(b']');
        }
        Value::Object(map) => write_object(map, out)?,
    }
    Ok(())
}

fn write_object(map: &Map<String, Value>, out: &mut Vec<u8>) -> Result<(), CanonicalError> {
    out.push(b'{');
    // serde_json's map is ordered by UTF-8 bytes; JCS orders by UTF-16 code units. The two
    // agree except when a supplementary-plane character meets one in U+E000..U+FFFF, so
    // only sort again when a key could disagree (rare; keeps the common path allocation-free).
    if map.keys().any(|k| k.chars().any(|c| c as u32 >= 0xE000)) {
        let mut entries: Vec<(&String, &Value)> = map.iter().collect();
        entries.sort_by(|(a, _), (b, _)| a.encode_utf16().cmp(b.encode_utf16()));
        write_entries(entries.into_iter(), out)?;
    } else {
        write_entries(map.iter(), out)?;
    }
    out.push(b'}');
    Ok(())
}

fn write_entries<'a>(entries: impl Iterator<Item = (&'a String, &'a Value)>, out: &mut Vec<u8>) -> Result<(), CanonicalError> {
    for (i, (key, item)) in entries.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_string(key, out);
        out.push(b':');
        write_value(item, out)?;
    }
    Ok(())
}

fn write_string(s: &str, out: &mut Vec<u8>) {
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            0x09 => b"\\t",
            0x0A => b"\\n",
            0x0C => b"\\f",
            0x0D => b"\\r",
            0x00..=0x1F => {
                out.extend_from_slice(&bytes[start..i]);
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(&[b'\\', b'u', b'0', b'0', HEX[(b >> 4) as usize], HEX[(b & 0xF) as usize]]);
                start = i + 1;
                continue;
            }
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        out.extend_from_slice(escape);
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

fn write_number(n: &Number, out: &mut Vec<u8>) -> Result<(), CanonicalError> {
    if let Some(u) = n.as_u64().filter(|u| *u <= EXACT_INTEGER) {
        out.extend_from_slice(u.to_string().as_bytes());
        return Ok(());
    }
    if let Some(i) = n.as_i64().filter(|i| i.unsigned_abs() <= EXACT_INTEGER) {
        out.extend_from_slice(i.to_string().as_bytes());
        return Ok(());
    }
    // Everything else is the double it denotes, as `JSON.parse` reads it: serde_json holds
    // a larger integer literal as u64/i64 and `as_f64` rounds it to the nearest double (ties
    // to even, as the literal's decimal-to-double conversion does); a literal too large for
    // u64 or with a fraction or exponent is already that double (`float_roundtrip`).
    let f = n.as_f64().ok_or(CanonicalError::NonFinite)?;
    out.extend_from_slice(format_es6(f)?.as_bytes());
    Ok(())
}

/// Formats a double exactly as ECMAScript's `Number.prototype.toString` (radix 10) does.
pub fn format_es6(x: f64) -> Result<String, CanonicalError> {
    if !x.is_finite() {
        return Err(CanonicalError::NonFinite);
    }
    if x == 0.0 {
        // Both +0 and -0 serialise as "0".
        return Ok("0".to_owned());
    }
    let mut result = String::new();
    let magnitude = if x < 0.0 {
        result.push('-');
        -x
    } else {
        x
    };
    // Ryu yields the shortest round-tripping digits and, between two equally short and equally
    // close candidates, the even one: ECMAScript's rule. (`format!("{:e}")` rounds such ties
    // up, e.g. 1424953923781206.25 → "…206.3" where ECMAScript writes "…206.2".)
    let mut buf = ryu::Buffer::new();
    let (digits, exp) = decimal_digits(buf.format_finite(magnitude));
    let k = digits.len() as i32;
    // ECMAScript's n: the value is digits × 10^(n − k).
    let n = exp + k;
    if k <= n && n <= 21 {
        result.push_str(&digits);
        result.extend(std::iter::repeat_n('0', (n - k) as usize));
    } else if 0 < n && n <= 21 {
        result.push_str(&digits[..n as usize]);
        result.push('.');
        result.push_str(&digits[n as usize..]);
    } else if -6 < n && n <= 0 {
        result.push_str("0.");
        result.extend(std::iter::repeat_n('0', (-n) as usize));
        result.push_str(&digits);
    } else {
        result.push_str(&digits[..1]);
        if k > 1 {
            result.push('.');
            result.push_str(&digits[1..]);
        }
        result.push('e');
        result.push(if n > 0 { '+' } else { '-' });
        result.push_str(&(n - 1).abs().to_string());
    }
    Ok(result)
}

/// Splits a positive decimal such as `1.25e-7`, `0.001` or `123.0` into its significant
/// digits (no leading or trailing zeros) and the exponent `e` with value = digits × 10^e.
fn decimal_digits(text: &str) -> (String, i32) {
    let (mantissa, exp) = match text.split_once(['e', 'E']) {
        Some((m, e)) => (m, e.parse::<i32>().unwrap_or(0)),
        None => (text, 0),
    };
    let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let mut digits: String = int_part.chars().chain(frac_part.chars()).collect();
    let mut exp = exp - frac_part.len() as i32;
    let leading = digits.len() - digits.trim_start_matches('0').len();
    digits.drain(..leading);
    let trimmed = digits.trim_end_matches('0').len();
    exp += (digits.len() - trimmed) as i32;
    digits.truncate(trimmed);
    (digits, exp)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn num(bits: u64) -> String {
        format_es6(f64::from_bits(bits)).expect("finite")
    }

    /// The number table of RFC 8785 Appendix B (IEEE-754 bits → expected text).
    #[test]
    fn rfc8785_appendix_b_numbers() {
        let table: &[(u64, &str)] = &[
            (0x0000000000000000, "0"),
            (0x8000000000000000, "0"),
            (0x0000000000000001, "5e-324"),
            (0x8000000000000001, "-5e-324"),
            (0x7fefffffffffffff, "1.7976931348623157e+308"),
            (0xffefffffffffffff, "-1.7976931348623157e+308"),
            (0x4340000000000000, "9007199254740992"),
            (0xc340000000000000, "-9007199254740992"),
            (0x4430000000000000, "295147905179352830000"),
            (0x44b52d02c7e14af5, "9.999999999999997e+22"),
            (0x44b52d02c7e14af6, "1e+23"),
            (0x44b52d02c7e14af7, "1.0000000000000001e+23"),
            (0x444b1ae4d6e2ef4e, "999999999999999700000"),
            (0x444b1ae4d6e2ef4f, "999999999999999900000"),
            (0x444b1ae4d6e2ef50, "1e+21"),
            (0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"),
            (0x3eb0c6f7a0b5ed8d, "0.000001"),
            (0x41b3de4355555553, "333333333.3333332"),
            (0x41b3de4355555554, "333333333.33333325"),
            (0x41b3de4355555555, "333333333.3333333"),
            (0x41b3de4355555556, "333333333.3333334"),
            (0x41b3de4355555557, "333333333.33333343"),
            (0xbecbf647612f3696, "-0.0000033333333333333333"),
            (0x43143ff3c1cb0959, "1424953923781206.2"),
        ];
        for (bits, expected) in table {
            assert_eq!(num(*bits), *expected, "bits {bits:#018x}");
        }
    }

    #[test]
    fn non_finite_numbers_are_refused() {
        assert!(format_es6(f64::NAN).is_err());
        assert!(format_es6(f64::INFINITY).is_err());
    }

    /// The structured example of RFC 8785 §3.2.2 / §3.2.3.
    #[test]
    fn rfc8785_section_3_2_example() {
        let input = br#"{
  "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}"#;
        let expected = "{\"literals\":[null,true,false],\"numbers\":[333333333.3333333,1e+30,4.5,0.002,1e-27],\
\"string\":\"\u{20ac}$\\u000f\\nA'B\\\"\\\\\\\\\\\"/\"}";
        assert_eq!(String::from_utf8(canonicalize(input).expect("valid")).expect("utf8"), expected);
    }

    /// Key ordering example of RFC 8785 §3.2.3 (UTF-16 code unit order).
    #[test]
    fn rfc8785_utf16_key_order() {
        let input = "{\"\\u20ac\":\"Euro Sign\",\"\\r\":\"Carriage Return\",\"\\ufb33\":\"Hebrew Letter Dalet With Dagesh\",\
\"1\":\"One\",\"\\ud83d\\ude00\":\"Emoji: Grinning Face\",\"\\u0080\":\"Control\",\"\\u00f6\":\"Latin Small Letter O With Diaeresis\"}";
        let out = String::from_utf8(canonicalize(input.as_bytes()).expect("valid")).expect("utf8");
        let values: Vec<&str> = out.split('"').skip(3).step_by(4).collect();
        assert_eq!(
            values,
            [
                "Carriage Return",
                "One",
                "Control",
                "Latin Small Letter O With Diaeresis",
                "Euro Sign",
                "Emoji: Grinning Face",
                "Hebrew Letter Dalet With Dagesh"
            ]
        );
    }

    #[test]
    fn duplicate_keys_and_whitespace_are_not_canonical() {
        assert!(is_canonical(br#"{"a":1,"b":[true,null]}"#));
        assert!(!is_canonical(br#"{"a":1,"a":2}"#));
        let err = canonicalize(br#"{"x":{"a":1,"a":2}}"#).expect_err("duplicate keys are refused");
        assert!(err.to_string().contains("duplicate object key \"a\""), "{err}");
        assert!(!is_canonical(br#"{"b":1,"a":2}"#));
        assert!(!is_canonical(br#"{"a": 1}"#));
        assert!(!is_canonical(br#"{"a":1.0}"#));
        assert!(!is_canonical(b"{\"a\":\"\\u0041\"}"));
    }

    #[test]
    fn integers_beyond_2_pow_53_print_as_the_double_they_denote() {
        for (input, expected) in [
            ("9007199254740991", "9007199254740991"),
            ("9007199254740992", "9007199254740992"),
            ("9007199254740993", "9007199254740992"),
            ("-9007199254740993", "-9007199254740992"),
            ("9007199254740995", "9007199254740996"),
            ("18446744073709551615", "18446744073709552000"),
            ("-9223372036854775808", "-9223372036854776000"),
            ("18446744073709551616", "18446744073709552000"),
            ("1152921504606846976", "1152921504606847000"),
            ("100000000000000000000", "100000000000000000000"),
            ("1000000000000000000000", "1e+21"),
            ("1e21", "1e+21"),
            ("123456789012345678901234567890", "1.2345678901234568e+29"),
        ] {
            let out = canonicalize(input.as_bytes()).unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(std::str::from_utf8(&out).expect("utf8"), expected, "{input}");
            assert!(is_canonical(expected.as_bytes()), "{expected} is its own canonical form");
        }
        // Typed values serde_json holds as integers take the same double path.
        assert_eq!(to_vec(&Value::from(u64::MAX)).expect("finite"), b"18446744073709552000");
        assert_eq!(to_vec(&Value::from(i64::MIN + 1)).expect("finite"), b"-9223372036854776000");
        assert!(!is_canonical(b"9007199254740993"), "an integer that is not a double is not canonical");
    }
}
