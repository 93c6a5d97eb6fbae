//! Property tests for `drover_proto::canonical` (RFC 8785 / JCS) over arbitrary JSON
//! values: canonicalisation is idempotent, loses nothing, always yields bytes that
//! `is_canonical` accepts, and ignores formatting and key order in its input.

use drover_proto::canonical;
use proptest::prelude::*;
use serde_json::{Map, Number, Value};

/// Largest integer a double holds exactly (2^53 − 1).
const MAX_SAFE: i64 = (1 << 53) - 1;

/// Characters that stress escaping and UTF-16 key order, mixed with arbitrary ones.
fn arb_char() -> impl Strategy<Value = char> {
    prop_oneof![
        4 => any::<char>(),
        2 => prop::char::range('\u{0}', '\u{7f}'),
        1 => prop::char::range('\u{0}', '\u{1f}'),
        2 => prop::char::range('\u{e000}', '\u{ffff}'),
        2 => prop::char::range('\u{10000}', '\u{10ffff}'),
        1 => prop::sample::select(vec!['"', '\\', '/', '\u{7f}', '\u{2028}', '\u{2029}', '\u{feff}', '😀', 'ö', '€']),
    ]
}

fn arb_string(max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(arb_char(), 0..=max).prop_map(String::from_iter)
}

/// Finite doubles of every class, the integral ones beyond 2^53 included.
fn arb_f64() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>(),
        (-1e6f64..1e6),
        (1u64..1 << 52).prop_map(f64::from_bits),
        (-330i32..310, -3i64..=3).prop_map(|(e, ulps)| {
            let p: f64 = format!("1e{e}").parse().expect("float literal");
            f64::from_bits((p.to_bits() as i64 + ulps) as u64)
        }),
        (-1e21f64..1e21).prop_map(f64::trunc),
        Just(-0.0),
    ]
    .prop_filter("finite", |f| f.is_finite())
}

fn arb_number() -> impl Strategy<Value = Value> {
    prop_oneof![
        (-MAX_SAFE..=MAX_SAFE).prop_map(Value::from),
        (-1000i64..1000).prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        arb_f64().prop_map(|f| Value::Number(Number::from_f64(f).expect("finite"))),
    ]
}

fn arb_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![Just(Value::Null), any::<bool>().prop_map(Value::Bool), arb_number(), arb_string(12).prop_map(Value::String),]
}

fn to_object(entries: Vec<(String, Value)>) -> Value {
    Value::Object(entries.into_iter().collect::<Map<String, Value>>())
}

/// Any JSON value: scalars, and arrays and objects nested a few levels.
fn arb_value() -> impl Strategy<Value = Value> {
    arb_leaf().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((arb_string(4), inner), 0..6).prop_map(to_object),
        ]
    })
}

/// A non-empty array or object, whose pretty form has line breaks and indentation.
fn arb_container() -> impl Strategy<Value = Value> {
    prop_oneof![
        prop::collection::vec(arb_value(), 1..6).prop_map(Value::Array),
        prop::collection::vec((arb_string(4), arb_value()), 1..6).prop_map(to_object),
    ]
}

/// Equality as JSON data: numbers compare by value as doubles (a canonical `1.0` is `1`
/// and parses back as an integer; `-0.0` becomes `0`), everything else structurally.
fn same_json(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(xs), Value::Array(ys)) => xs.len() == ys.len() && xs.iter().zip(ys).all(|(x, y)| same_json(x, y)),
        (Value::Object(xs), Value::Object(ys)) => {
            xs.len() == ys.len() && xs.iter().all(|(k, x)| ys.get(k).is_some_and(|y| same_json(x, y)))
        }
        _ => a == b,
    }
}

/// Writes `value` as compact JSON with every object's members in reverse order (the
/// opposite of serde_json's sorted map), so the canonical order has to be restored.
fn reversed_json(value: &Value, out: &mut String) {
    match value {
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                reversed_json(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (key, item)) in map.iter().rev().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::to_string(key).expect("key"));
                out.push(':');
                reversed_json(item, out);
            }
            out.push('}');
        }
        scalar => out.push_str(&serde_json::to_string(scalar).expect("scalar")),
    }
}

fn canon(value: &Value) -> Vec<u8> {
    canonical::to_vec(value).unwrap_or_else(|e| panic!("to_vec refused {value}: {e}"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// (a) Canonicalising canonical bytes changes nothing.
    #[test]
    fn canonicalization_is_idempotent(value in arb_value()) {
        let once = canon(&value);
        let twice = canonical::canonicalize(&once).map_err(|e| TestCaseError::fail(format!("{e} on {}", text(&once))))?;
        prop_assert_eq!(text(&twice), text(&once));
    }

    /// (b) The canonical bytes parse back to the same JSON data. Numbers are compared as
    /// doubles: JCS writes the double 1.0 as `1`, which serde_json reads back as an integer.
    #[test]
    fn canonical_form_parses_back_to_the_same_value(value in arb_value()) {
        let bytes = canon(&value);
        let back: Value = serde_json::from_slice(&bytes).map_err(|e| TestCaseError::fail(format!("{e} on {}", text(&bytes))))?;
        prop_assert!(same_json(&back, &value), "{} parsed back as {}", value, back);
    }

    /// (c) Whatever `to_vec` writes, `is_canonical` accepts, and `canonicalize` of serde_json's
    /// own compact form gives the same bytes as `to_vec` of the value.
    #[test]
    fn canonical_form_is_canonical(value in arb_value()) {
        let bytes = canon(&value);
        prop_assert!(canonical::is_canonical(&bytes), "not canonical: {}", text(&bytes));
        let compact = serde_json::to_vec(&value).expect("serialise");
        prop_assert_eq!(text(&canonical::canonicalize(&compact).expect("valid")), text(&bytes));
    }

    /// (d) Pretty-printing a non-empty container adds whitespace, which is not canonical,
    /// and canonicalising the pretty form gives the canonical bytes back.
    #[test]
    fn whitespace_is_not_canonical_and_is_removed(value in arb_container()) {
        let bytes = canon(&value);
        let pretty = serde_json::to_vec_pretty(&value).expect("serialise");
        prop_assert!(!canonical::is_canonical(&pretty), "pretty form accepted as canonical: {}", text(&pretty));
        prop_assert_eq!(text(&canonical::canonicalize(&pretty).expect("valid")), text(&bytes));
    }

    /// Member order in the input does not matter: objects written with their members in
    /// reverse order canonicalise to the same bytes.
    #[test]
    fn input_member_order_is_irrelevant(value in arb_value()) {
        let bytes = canon(&value);
        let mut reversed = String::new();
        reversed_json(&value, &mut reversed);
        prop_assert_eq!(text(&canonical::canonicalize(reversed.as_bytes()).expect("valid")), text(&bytes));
    }

    /// Canonical strings are a fixed point on their own, and a key's bytes survive intact.
    #[test]
    fn strings_and_keys_round_trip(s in arb_string(24), k in arb_string(8)) {
        let value = to_object(vec![(k, Value::String(s.clone()))]);
        let bytes = canon(&value);
        let back: Value = serde_json::from_slice(&bytes).expect("parse");
        prop_assert_eq!(back, value);
        prop_assert!(canonical::is_canonical(&canon(&Value::String(s))));
    }

    /// Every finite double is written exactly as `format_es6` writes it (integral doubles
    /// beyond 2^53 and from 10^21 on included), and that text is its own canonical form.
    #[test]
    fn every_finite_double_is_written_as_ecmascript_writes_it(f in any::<f64>().prop_filter("finite", |f| f.is_finite())) {
        let bytes = canonical::to_vec(&Value::Number(Number::from_f64(f).expect("finite"))).expect("every finite double");
        prop_assert_eq!(text(&bytes), canonical::format_es6(f).expect("finite"));
        prop_assert!(canonical::is_canonical(&bytes), "{} is not canonical", text(&bytes));
        let back: f64 = text(&bytes).parse().expect("a number");
        prop_assert_eq!(back.to_bits(), if f == 0.0 { 0 } else { f.to_bits() }, "{:e} does not read back from {}", f, text(&bytes));
    }

    /// An integer serde_json holds as u64 or i64 is written as the double nearest to it, as
    /// `JSON.parse` would hold it, whether it comes typed or as an integer literal.
    #[test]
    fn integers_are_written_as_the_double_nearest_to_them(u in any::<u64>(), i in any::<i64>()) {
        for (value, literal, double) in [(Value::from(u), u.to_string(), u as f64), (Value::from(i), i.to_string(), i as f64)] {
            let expected = canonical::format_es6(double).expect("finite");
            prop_assert_eq!(text(&canonical::to_vec(&value).expect("every integer")), expected.as_str());
            prop_assert_eq!(text(&canonical::canonicalize(literal.as_bytes()).expect("every integer")), expected.as_str());
        }
    }
}
