//! Cross-checks `drover_proto::canonical` (RFC 8785 / JCS) against an independent
//! implementation, the Python package `rfc8785`, byte for byte on a generated corpus —
//! random documents, doubles of every class (random bit patterns, subnormals, the edges of
//! powers of two and ten, negative zero), integer literals beyond 2^53 up to 10^21 and past,
//! strings written with every escape and with paired, lone and reversed surrogates — and
//! pins the published JCS examples that the unit tests in `canonical.rs` do not cover.
//!
//! `rfc8785.dumps` refuses a Python `int` beyond ±(2^53 − 1); RFC 8785 reads every number as
//! a double (as `JSON.parse` does), so the harness hands Python such an integer as the
//! `float` nearest to it (`float()` of its digits, correctly rounded) and expects Drover's
//! bytes for the integer literal to equal the reference's for that double.
//!
//! The cross-check needs `python3` with `rfc8785` installed (`python3 -m pip install
//! rfc8785`); without them it fails, it never skips.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use drover_proto::canonical::{self, CanonicalError};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Map, Number, Value};

/// Largest integer a double holds exactly (2^53 − 1); JCS implementations refuse beyond.
const MAX_SAFE: i64 = (1 << 53) - 1;

/// How to get the Python reference, repeated in every failure about it.
const INSTALL_HINT: &str = "the JCS cross-check needs python3 with the `rfc8785` package: run `python3 -m pip install rfc8785`";

/// Reads the file named by argv[1] (one JSON document per line), and writes one line per
/// document: `E <error class>` when it is refused (by `rfc8785.dumps`, or a lone surrogate
/// that cannot be encoded), otherwise `<flag> <hex>` with the hex of the canonical bytes,
/// `flag` being `ok` when the reference reads its own output back to the same bytes.
const PY_SCRIPT: &str = r#"
import sys, json
try:
    import rfc8785
except ImportError:
    sys.stderr.write("python module rfc8785 is not installed\n")
    sys.exit(3)
SAFE = 2**53 - 1
def parse_int(text):
    i = int(text)
    return i if -SAFE <= i <= SAFE else float(text)
def load(data):
    return json.loads(data, parse_int=parse_int)
out = []
with open(sys.argv[1], "rb") as f:
    for line in f:
        try:
            c = rfc8785.dumps(load(line))
        except (rfc8785.CanonicalizationError, UnicodeEncodeError, ValueError) as e:
            out.append("E " + type(e).__name__)
            continue
        flag = "ok" if rfc8785.dumps(load(c)) == c else "notfix"
        out.append(flag + " " + c.hex())
sys.stdout.write("\n".join(out) + "\n")
"#;

/// What the Python reference said about one line.
#[derive(Debug, PartialEq)]
enum PyResult {
    /// Canonical bytes; `fixpoint` when they canonicalise to themselves in Python too.
    Canonical { bytes: Vec<u8>, fixpoint: bool },
    /// The document was refused, with the Python exception's class.
    Refused(String),
}

/// A temporary file removed when dropped.
struct TempFile(PathBuf);

impl TempFile {
    fn new(tag: &str) -> Self {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let path = std::env::temp_dir().join(format!("drover-jcs-{tag}-{}-{nanos}.jsonl", std::process::id()));
        TempFile(path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Runs the reference once over `lines` (each a JSON document without raw newlines).
fn python_canonicalize(tag: &str, lines: &[String]) -> Vec<PyResult> {
    let file = TempFile::new(tag);
    let mut body = String::with_capacity(lines.iter().map(|l| l.len() + 1).sum());
    for line in lines {
        assert!(!line.contains('\n') && !line.contains('\r'), "document has a raw newline: {line}");
        body.push_str(line);
        body.push('\n');
    }
    std::fs::write(&file.0, body).unwrap_or_else(|e| panic!("writing {}: {e}", file.0.display()));
    let results = run_python(&file.0);
    assert_eq!(results.len(), lines.len(), "python printed {} results for {} documents", results.len(), lines.len());
    results
}

fn run_python(path: &Path) -> Vec<PyResult> {
    let output = match Command::new("python3").arg("-c").arg(PY_SCRIPT).arg(path).output() {
        Ok(output) => output,
        Err(e) => panic!("cannot run python3 ({e}); {INSTALL_HINT}"),
    };
    let stderr = String::from_utf8_lossy(&output.stderr);
    if output.status.code() == Some(3) {
        panic!("{}; {INSTALL_HINT}", stderr.trim());
    }
    assert!(output.status.success(), "python3 reference failed ({}): {stderr}\n{INSTALL_HINT}", output.status);
    let stdout = String::from_utf8(output.stdout).expect("python output is ASCII");
    stdout
        .lines()
        .map(|line| {
            if let Some(class) = line.strip_prefix("E ") {
                return PyResult::Refused(class.to_owned());
            }
            let (flag, hex_bytes) = line.split_once(' ').unwrap_or_else(|| panic!("bad python output line {line:?}"));
            let bytes = hex::decode(hex_bytes).unwrap_or_else(|e| panic!("bad hex from python ({e}): {line:?}"));
            match flag {
                "ok" => PyResult::Canonical { bytes, fixpoint: true },
                "notfix" => PyResult::Canonical { bytes, fixpoint: false },
                other => panic!("unknown python flag {other:?}"),
            }
        })
        .collect()
}

/// Seeded generator of awkward JSON values.
struct Gen {
    rng: StdRng,
}

/// Characters that stress escaping and UTF-16 ordering, to mix into strings and keys.
const TRICKY: &[char] = &[
    '"',
    '\\',
    '/',
    '\u{0}',
    '\u{8}',
    '\t',
    '\n',
    '\u{b}',
    '\u{c}',
    '\r',
    '\u{1f}',
    '\u{7f}',
    '\u{80}',
    '\u{9f}',
    'é',
    'ö',
    '€',
    '\u{2028}',
    '\u{2029}',
    '\u{d7ff}',
    '\u{e000}',
    '\u{e001}',
    '\u{f8ff}',
    '\u{fb33}',
    '\u{feff}',
    '\u{fffd}',
    '\u{ffff}',
    '\u{10000}',
    '\u{1f600}',
    '\u{1f602}',
    '😀',
    '\u{10ffff}',
    'a',
    'A',
    '1',
    ' ',
];

impl Gen {
    fn new(seed: u64) -> Self {
        Gen { rng: StdRng::seed_from_u64(seed) }
    }

    fn char(&mut self) -> char {
        match self.rng.gen_range(0..10) {
            0..=2 => char::from(self.rng.gen_range(0x20u8..0x7f)),
            3 => char::from(self.rng.gen_range(0u8..0x20)),
            4 => TRICKY[self.rng.gen_range(0..TRICKY.len())],
            5 => char::from_u32(self.rng.gen_range(0x80..0xd800)).expect("below surrogates"),
            6 | 7 => char::from_u32(self.rng.gen_range(0xe000..=0xffff)).expect("above surrogates"),
            8 => char::from_u32(self.rng.gen_range(0x1f300..0x1fa00)).expect("emoji block"),
            _ => char::from_u32(self.rng.gen_range(0x10000..=0x10ffff)).expect("supplementary"),
        }
    }

    fn string(&mut self, max_len: usize) -> String {
        let len = self.rng.gen_range(0..=max_len);
        (0..len).map(|_| self.char()).collect()
    }

    /// Keys are short and often share prefixes, so sibling keys meet in every ordering case
    /// (UTF-16 order differs from UTF-8 order when U+E000..U+FFFF meets U+10000 and above).
    fn key(&mut self) -> String {
        const PREFIXES: &[&str] = &["", "a", "k", "\u{e000}", "\u{ffff}", "\u{10000}", "😀", "ö"];
        let mut key = PREFIXES[self.rng.gen_range(0..PREFIXES.len())].to_owned();
        let len = self.rng.gen_range(0..=3);
        for _ in 0..len {
            let c = if self.rng.gen_bool(0.5) { TRICKY[self.rng.gen_range(0..TRICKY.len())] } else { self.char() };
            key.push(c);
        }
        key
    }

    /// An integer serde_json holds exactly (i64 or u64), a third of them beyond ±(2^53 − 1).
    fn int(&mut self) -> i128 {
        match self.rng.gen_range(0..9) {
            0 => self.rng.gen_range(-1000..=1000),
            1 => self.rng.gen_range(-MAX_SAFE..=MAX_SAFE).into(),
            2 => {
                let edge = [0, 1, -1, MAX_SAFE, -MAX_SAFE, MAX_SAFE - 1, 1 << 31, -(1 << 31), 1 << 32, u32::MAX as i64];
                edge[self.rng.gen_range(0..edge.len())].into()
            }
            3 => {
                let p = 10i128.pow(self.rng.gen_range(0..=19));
                if self.rng.gen_bool(0.5) && p <= 1 << 63 { -p } else { p }
            }
            4 | 5 => {
                let bits = self.rng.gen_range(0..=53u32);
                let magnitude = self.rng.gen_range(0..=(1i64 << bits).min(MAX_SAFE));
                if self.rng.gen_bool(0.5) { magnitude.into() } else { (-magnitude).into() }
            }
            // Beyond 2^53: near a power of two (ties between two doubles included), or
            // anywhere up to u64::MAX / down to i64::MIN.
            6 => {
                let p = 1i128 << self.rng.gen_range(53..=63);
                let n = p + self.rng.gen_range(-4..=4) * (p >> 53).max(1) / 2 + self.rng.gen_range(-2..=2);
                if self.rng.gen_bool(0.5) && n <= 1 << 63 { -n } else { n }
            }
            7 => {
                let edge =
                    [MAX_SAFE as i128 + 1, MAX_SAFE as i128 + 2, MAX_SAFE as i128 + 3, i64::MAX.into(), i64::MIN.into(), u64::MAX.into()];
                edge[self.rng.gen_range(0..edge.len())]
            }
            _ => {
                if self.rng.gen_bool(0.5) {
                    self.rng.gen_range(MAX_SAFE as u64 + 1..=u64::MAX).into()
                } else {
                    self.rng.gen_range(i64::MIN..-MAX_SAFE).into()
                }
            }
        }
    }

    /// The integer as serde_json holds it (i64 for negatives, u64 otherwise).
    fn int_value(&mut self) -> Value {
        let i = self.int();
        match u64::try_from(i) {
            Ok(u) => Value::from(u),
            Err(_) => Value::from(i64::try_from(i).expect("int() stays within i64::MIN..=u64::MAX")),
        }
    }

    /// An integer literal as JSON text, beyond what u64 holds too: up to 30 digits, powers
    /// of ten around 10^21 (where ECMAScript switches to exponent form) written out or with
    /// an exponent, and negative ones.
    fn int_literal(&mut self) -> String {
        let digits = match self.rng.gen_range(0..4) {
            0 => {
                let len = self.rng.gen_range(16..=30);
                let mut d = self.rng.gen_range(1..=9).to_string();
                d.extend((1..len).map(|_| char::from(b'0' + self.rng.gen_range(0..10u8))));
                d
            }
            1 => format!("1{}", "0".repeat(self.rng.gen_range(15..=25))),
            2 => format!("{}e{}", self.rng.gen_range(1..=999), self.rng.gen_range(14..=24)),
            _ => {
                let nines = "9".repeat(self.rng.gen_range(16..=23));
                let tail = ["", "1", "5", "9"][self.rng.gen_range(0..4)];
                format!("{nines}{tail}")
            }
        };
        if self.rng.gen_bool(0.3) { format!("-{digits}") } else { digits }
    }

    /// A finite double from one of several families that stress ECMAScript formatting.
    fn float(&mut self) -> f64 {
        loop {
            let f = match self.rng.gen_range(0..9) {
                // Any bit pattern: all exponents, subnormals and both signs.
                0 | 1 => f64::from_bits(self.rng.r#gen::<u64>()),
                // Near a power of ten, a few ULPs either side.
                2 | 3 => {
                    let p: f64 = format!("1e{}", self.rng.gen_range(-325..=309)).parse().expect("float literal");
                    self.nudge(p)
                }
                // The places where ECMAScript switches notation: 1e21 and 1e-6 / 1e-7.
                4 => {
                    let p = [1e21, 1e-6, 1e-7, 1e20, 1e-5, 9.999999999999999e20, 1e22][self.rng.gen_range(0..7)];
                    self.nudge(p)
                }
                // Subnormals, small and large.
                5 => {
                    let bits = if self.rng.gen_bool(0.5) { self.rng.gen_range(1..1000) } else { self.rng.gen_range(1..1u64 << 52) };
                    f64::from_bits(bits)
                }
                // Zeros (the negative one included) and small integral doubles like 56.0.
                6 => [0.0, -0.0, 1.0, -1.0, 56.0, 4.5, 0.1, 0.5][self.rng.gen_range(0..8)],
                // Short decimals such as 333333333.33333329 or 0.002.
                7 => self.rng.gen_range(-1_000_000_000i64..1_000_000_000) as f64 / 10f64.powi(self.rng.gen_range(0..20)),
                // Wide-range mantissa × power of two.
                _ => self.rng.gen_range(-1.0..1.0) * 2f64.powi(self.rng.gen_range(-1074..=1023)),
            };
            let f = if self.rng.gen_bool(0.5) { f } else { -f };
            if f.is_finite() {
                return f;
            }
        }
    }

    fn nudge(&mut self, f: f64) -> f64 {
        let bits = f.to_bits() as i64 + self.rng.gen_range(-3..=3);
        f64::from_bits(bits as u64)
    }

    fn number(&mut self) -> Value {
        if self.rng.gen_bool(0.4) { self.int_value() } else { Value::Number(Number::from_f64(self.float()).expect("finite")) }
    }

    fn value(&mut self, depth: u32) -> Value {
        let kinds = if depth == 0 { 5 } else { 7 };
        match self.rng.gen_range(0..kinds) {
            0 => Value::Null,
            1 => Value::Bool(self.rng.r#gen()),
            2 | 3 => self.number(),
            4 => Value::String(self.string(12)),
            5 => {
                let len = self.rng.gen_range(0..6);
                Value::Array((0..len).map(|_| self.value(depth - 1)).collect())
            }
            _ => self.object(depth),
        }
    }

    fn object(&mut self, depth: u32) -> Value {
        let len = self.rng.gen_range(0..7);
        let mut map = Map::new();
        for _ in 0..len {
            let key = self.key();
            let value = self.value(depth.saturating_sub(1));
            map.insert(key, value);
        }
        Value::Object(map)
    }

    /// A JSON string literal written with escapes of every kind: the short ones, `\u00XX`
    /// for controls, `\u` escapes of BMP characters (mostly U+E000..U+FFFF, whose UTF-16
    /// order differs from their UTF-8 order against supplementary characters) and of
    /// supplementary ones as surrogate pairs, raw text, and rarely a lone or reversed
    /// surrogate, which both sides must refuse.
    fn escaped_literal(&mut self, pieces: usize) -> String {
        let mut out = String::from("\"");
        for _ in 0..pieces {
            let upper = self.rng.gen_bool(0.5);
            let hex = |u: u32| if upper { format!("\\u{u:04X}") } else { format!("\\u{u:04x}") };
            match self.rng.gen_range(0..60) {
                0..=9 => out.push_str(["\\\"", "\\\\", "\\/", "\\b", "\\f", "\\n", "\\r", "\\t"][self.rng.gen_range(0..8)]),
                10..=17 => out.push_str(&hex(self.rng.gen_range(0..0x20))),
                18..=27 => out.push_str(&hex(self.rng.gen_range(0x20..0xd800))),
                28..=37 => out.push_str(&hex(self.rng.gen_range(0xe000..=0xffff))),
                38..=47 => {
                    let c = self.rng.gen_range(0x10000u32..=0x10ffff) - 0x10000;
                    out.push_str(&hex(0xd800 + (c >> 10)));
                    out.push_str(&hex(0xdc00 + (c & 0x3ff)));
                }
                48 => out.push_str(&hex(self.rng.gen_range(0xd800..0xdc00))),
                49 => out.push_str(&hex(self.rng.gen_range(0xdc00..0xe000))),
                50 => {
                    out.push_str(&hex(self.rng.gen_range(0xdc00..0xe000)));
                    out.push_str(&hex(self.rng.gen_range(0xd800..0xdc00)));
                }
                _ => {
                    let raw = serde_json::to_string(&self.char().to_string()).expect("serialise");
                    out.push_str(&raw[1..raw.len() - 1]);
                }
            }
        }
        out.push('"');
        out
    }

    /// A document of escaped literals: a bare string, or an object whose keys are escaped
    /// literals (distinct once decoded; a lenient reader would keep the last of two).
    fn escaped_document(&mut self) -> String {
        if self.rng.gen_bool(0.3) {
            let pieces = self.rng.gen_range(0..12);
            return self.escaped_literal(pieces);
        }
        let mut seen = std::collections::HashSet::new();
        let mut members = Vec::new();
        for _ in 0..self.rng.gen_range(1..8) {
            let pieces = self.rng.gen_range(0..4);
            let key = self.escaped_literal(pieces);
            if let Ok(decoded) = serde_json::from_str::<String>(&key) {
                if !seen.insert(decoded) {
                    continue;
                }
            }
            let pieces = self.rng.gen_range(0..4);
            members.push(format!("{key}:{}", self.escaped_literal(pieces)));
        }
        format!("{{{}}}", members.join(","))
    }

    /// A document: mostly an object or array at the top, sometimes a bare scalar.
    fn document(&mut self) -> Value {
        match self.rng.gen_range(0..10) {
            0 => self.value(0),
            1..=3 => {
                let len = self.rng.gen_range(0..6);
                let depth = self.rng.gen_range(1..4);
                Value::Array((0..len).map(|_| self.value(depth)).collect())
            }
            _ => {
                let depth = self.rng.gen_range(1..4);
                self.object(depth)
            }
        }
    }
}

/// Shows bytes as text where they are UTF-8, else as hex.
fn show(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(s) => format!("{s:?}"),
        Err(_) => hex::encode(bytes),
    }
}

/// Compares Drover's result for one input line with the reference's: `Ok(true)` for equal
/// bytes, `Ok(false)` when both refuse the line; `Err` describes a difference.
fn compare(line: &str, ours: Result<Vec<u8>, CanonicalError>, theirs: &PyResult) -> Result<bool, String> {
    match (theirs, ours) {
        (PyResult::Canonical { bytes, fixpoint: true }, Ok(ours)) => {
            if ours != *bytes {
                return Err(format!("canonical bytes differ\n  input:  {line}\n  rust:   {}\n  python: {}", show(&ours), show(bytes)));
            }
            if !canonical::is_canonical(&ours) {
                return Err(format!("output is not its own canonical form\n  input: {line}\n  rust:  {}", show(&ours)));
            }
            Ok(true)
        }
        (PyResult::Refused(_), Err(CanonicalError::Parse { .. })) => Ok(false),
        (theirs, ours) => Err(format!(
            "results disagree\n  input:  {line}\n  rust:   {}\n  python: {}",
            match ours {
                Ok(bytes) => show(&bytes),
                Err(e) => format!("error: {e}"),
            },
            match theirs {
                PyResult::Canonical { bytes, fixpoint } => format!("{} (fixpoint: {fixpoint})", show(bytes)),
                PyResult::Refused(class) => format!("refused: {class}"),
            }
        )),
    }
}

/// Fails on the first difference, and says how many there were; returns how many lines were
/// compared byte for byte (the rest both sides refused).
fn check_all(lines: &[String], results: &[PyResult]) -> usize {
    let mut first = None;
    let mut mismatches = 0;
    let mut compared = 0;
    for (line, theirs) in lines.iter().zip(results) {
        match compare(line, canonical::canonicalize(line.as_bytes()), theirs) {
            Ok(true) => compared += 1,
            Ok(false) => {}
            Err(message) => {
                mismatches += 1;
                first.get_or_insert(message);
            }
        }
    }
    if let Some(message) = first {
        panic!("{mismatches} of {} documents differ from python rfc8785; first:\n{message}", lines.len());
    }
    compared
}

/// 12,000 random documents, and 300 more holding an integer beyond ±(2^53 − 1), give
/// byte-identical canonical forms in Drover and in Python's `rfc8785`; `to_vec` of the
/// value gives the same bytes as `canonicalize` of its text.
#[test]
fn random_documents_match_python_rfc8785() {
    let mut g = Gen::new(0x0d30_7e12_8785);
    let mut values: Vec<Value> = (0..12_000).map(|_| g.document()).collect();
    let unsafe_ints: [i128; 6] =
        [MAX_SAFE as i128 + 1, -(MAX_SAFE as i128) - 2, i64::MAX as i128, i64::MIN as i128, u64::MAX as i128, 1 << 60];
    for i in 0..300 {
        let big: Value = serde_json::from_str(&unsafe_ints[i % unsafe_ints.len()].to_string()).expect("integer");
        let mut doc = g.document();
        match &mut doc {
            Value::Array(items) => items.push(big),
            Value::Object(map) => {
                map.insert("\u{e000}big".to_owned(), Value::Array(vec![big]));
            }
            other => *other = Value::Array(vec![other.take(), big]),
        }
        values.push(doc);
    }
    let lines: Vec<String> = values.iter().map(|v| serde_json::to_string(v).expect("serialise")).collect();
    // serde_json (with `float_roundtrip`) must read back what it wrote, or the two sides
    // would not be looking at the same numbers.
    for (line, value) in lines.iter().zip(&values) {
        let back: Value = serde_json::from_str(line).expect("reparse");
        assert_eq!(&back, value, "serde_json does not round-trip {line}");
        let via_value = canonical::to_vec(value).expect("every finite document");
        assert_eq!(via_value, canonical::canonicalize(line.as_bytes()).expect("valid"), "to_vec and canonicalize differ on {line}");
    }
    let results = python_canonicalize("docs", &lines);
    let compared = check_all(&lines, &results);
    assert_eq!(compared, lines.len(), "every document is compared byte for byte");
}

/// Bare doubles of every kind and integers of every size serde_json holds (i64, u64):
/// `format_es6` prints each double exactly as the reference does, and an integer as the
/// reference prints the double nearest to it.
#[test]
fn random_numbers_match_python_rfc8785() {
    let mut g = Gen::new(0x5eed_0ff1_0a75);
    let floats: Vec<f64> = (0..20_000).map(|_| g.float()).collect();
    let mut lines: Vec<String> = floats.iter().map(|f| serde_json::to_string(f).expect("serialise")).collect();
    lines.extend((0..4_000).map(|_| g.int().to_string()));
    for (line, f) in lines.iter().zip(&floats) {
        assert!(line.contains(['.', 'e', 'E']), "double {f:e} serialised as {line}, which Python would read as an int");
        assert_eq!(line.parse::<f64>().expect("reparse").to_bits(), f.to_bits(), "serde_json does not round-trip {line}");
    }
    let results = python_canonicalize("numbers", &lines);

    let mut first = None;
    let mut mismatches = 0;
    for ((line, f), theirs) in lines.iter().zip(&floats).zip(&results) {
        let ours = canonical::format_es6(*f).expect("finite");
        let PyResult::Canonical { bytes, .. } = theirs else {
            panic!("python refused the double {line}: {theirs:?}");
        };
        if ours.as_bytes() != bytes.as_slice() {
            mismatches += 1;
            first.get_or_insert(format!("format_es6({line}) = {ours:?}, python {}", show(bytes)));
        }
    }
    if let Some(message) = first {
        panic!("{mismatches} doubles format differently from python rfc8785; first: {message}");
    }
    let beyond =
        lines[floats.len()..].iter().filter(|l| l.trim_start_matches('-').parse::<u64>().is_ok_and(|u| u > MAX_SAFE as u64)).count();
    assert!(beyond >= 1_000, "only {beyond} integers beyond 2^53 - 1 in the corpus");
    assert_eq!(check_all(&lines, &results), lines.len(), "every number is compared byte for byte");
}

/// Integer literals beyond what a double holds exactly, and beyond u64 (up to 30 digits,
/// around 10^21 where the exponent form starts, with exponents): each is the double nearest
/// to it, written as the reference writes that double.
#[test]
fn integer_literals_beyond_2_pow_53_match_python_rfc8785() {
    let mut g = Gen::new(0x2_5300_0021);
    let lines: Vec<String> = (0..6_000).map(|_| g.int_literal()).collect();
    let results = python_canonicalize("bigints", &lines);
    assert_eq!(check_all(&lines, &results), lines.len(), "every literal is compared byte for byte");
}

/// Strings and keys written with every escape: both sides decode them alike, order keys by
/// UTF-16 code units alike, and both refuse lone and reversed surrogates.
#[test]
fn escaped_strings_and_surrogates_match_python_rfc8785() {
    let mut g = Gen::new(0x5u64 << 40 | 0xd83d_de00);
    let lines: Vec<String> = (0..8_000).map(|_| g.escaped_document()).collect();
    let results = python_canonicalize("escapes", &lines);
    let compared = check_all(&lines, &results);
    let refused = lines.len() - compared;
    assert!(compared >= 4_000, "only {compared} escaped documents were compared byte for byte");
    assert!(refused >= 500, "only {refused} documents with lone surrogates were refused by both");
}

/// The reference's own spelling of doubles around the notation switches, checked in this
/// file so the expectations below are known to come from Python.
#[test]
fn python_rfc8785_formats_boundaries_like_ecmascript() {
    let cases: &[(f64, &str)] = &[
        (1e21, "1e+21"),
        (-1e21, "-1e+21"),
        (1e22, "1e+22"),
        (9.999999999999999e20, "999999999999999900000"),
        (1e20, "100000000000000000000"),
        (1e-6, "0.000001"),
        (1e-7, "1e-7"),
        (1.5e-7, "1.5e-7"),
        (-0.0, "0"),
        (5e-324, "5e-324"),
        (2.2250738585072014e-308, "2.2250738585072014e-308"),
        (56.0, "56"),
        (0.1, "0.1"),
        (123456789012345680000.0, "123456789012345680000"),
        (9007199254740992.0, "9007199254740992"),
        (1e17, "100000000000000000"),
        (1152921504606846976.0, "1152921504606847000"),
        (18446744073709551616.0, "18446744073709552000"),
    ];
    let lines: Vec<String> = cases.iter().map(|(f, _)| serde_json::to_string(f).expect("serialise")).collect();
    let results = python_canonicalize("boundaries", &lines);
    for ((f, expected), theirs) in cases.iter().zip(&results) {
        let PyResult::Canonical { bytes, .. } = theirs else { panic!("python refused {f:e}: {theirs:?}") };
        assert_eq!(show(bytes), format!("{expected:?}"), "python on {f:e}");
        assert_eq!(canonical::format_es6(*f).expect("finite"), *expected, "format_es6 on {f:e}");
    }
}

/// An integral double beyond ±(2^53 − 1) is written in full below 10^21 and with an
/// exponent from there on, exactly as ECMAScript writes it, and the text is canonical (it
/// reads back as the same double). Whether a signed artifact may carry one is the artifact
/// schema's rule, not the canonicaliser's.
#[test]
fn integral_doubles_beyond_2_pow_53_are_written_as_ecmascript_writes_them() {
    for (text, expected) in [
        ("9007199254740992.0", "9007199254740992"),
        // Rounds to the double 2^53.
        ("9007199254740992.5e0", "9007199254740992"),
        ("1e17", "100000000000000000"),
        ("-1e17", "-100000000000000000"),
        ("18446744073709551616", "18446744073709552000"),
        ("9.999999999999999e20", "999999999999999900000"),
        ("[1,{\"a\":2e19}]", "[1,{\"a\":20000000000000000000}]"),
        ("9007199254740991.0", "9007199254740991"),
        ("-9007199254740991.0", "-9007199254740991"),
        ("1e21", "1e+21"),
        ("1.5e300", "1.5e+300"),
        ("4503599627370495.5", "4503599627370495.5"),
    ] {
        assert_eq!(canon_str(text), expected, "{text}");
        assert!(canonical::is_canonical(expected.as_bytes()), "{expected}");
    }
}

fn canon_str(input: &str) -> String {
    String::from_utf8(canonical::canonicalize(input.as_bytes()).unwrap_or_else(|e| panic!("{input}: {e}"))).expect("utf8")
}

/// RFC 8785 §3.2.4: the UTF-8 bytes of the §3.2.2 example, as the RFC lists them in hex.
#[test]
fn rfc8785_section_3_2_4_utf8_bytes() {
    let input = br#"{
  "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}"#;
    let expected_hex = "\
7b 22 6c 69 74 65 72 61 6c 73 22 3a 5b 6e 75 6c 6c 2c 74 72
75 65 2c 66 61 6c 73 65 5d 2c 22 6e 75 6d 62 65 72 73 22 3a
5b 33 33 33 33 33 33 33 33 33 2e 33 33 33 33 33 33 33 2c 31
65 2b 33 30 2c 34 2e 35 2c 30 2e 30 30 32 2c 31 65 2d 32 37
5d 2c 22 73 74 72 69 6e 67 22 3a 22 e2 82 ac 24 5c 75 30 30
30 66 5c 6e 41 27 42 5c 22 5c 5c 5c 5c 5c 22 2f 22 7d";
    let expected = hex::decode(expected_hex.split_whitespace().collect::<String>()).expect("hex");
    let out = canonical::canonicalize(input).expect("valid");
    let mut got_hex = String::new();
    for (i, b) in out.iter().enumerate() {
        let sep = if i == 0 {
            ""
        } else if i % 20 == 0 {
            "\n"
        } else {
            " "
        };
        write!(got_hex, "{sep}{b:02x}").expect("write to string");
    }
    assert_eq!(out, expected, "got:\n{got_hex}");
}

/// The reference implementation's test data (cyberphone/json-canonicalization, by the RFC's
/// author): key order by UTF-16 code units, never by locale (`french`), and the `weird`
/// key set mixing controls, Latin-1, BMP above U+E000 and an emoji.
#[test]
fn jcs_reference_testdata() {
    let french = "{\n  \"peach\": \"This sorting order\",\n  \"p\u{e9}ch\u{e9}\": \"is wrong according to French\",\n  \
\"p\u{ea}che\": \"but canonicalization MUST\",\n  \"sin\":   \"ingnore locale\"\n}\n";
    assert_eq!(
        canon_str(french),
        "{\"peach\":\"This sorting order\",\"p\u{e9}ch\u{e9}\":\"is wrong according to French\",\
\"p\u{ea}che\":\"but canonicalization MUST\",\"sin\":\"ingnore locale\"}"
    );

    let weird = r#"{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\u000a": "Newline",
  "1": "One",
  "\u0080": "Control\u007f",
  "\ud83d\ude02": "Smiley",
  "\u00f6": "Latin Small Letter O With Diaeresis",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "</script>": "Browser Challenge"
}
"#;
    assert_eq!(
        canon_str(weird),
        "{\"\\n\":\"Newline\",\"\\r\":\"Carriage Return\",\"1\":\"One\",\"</script>\":\"Browser Challenge\",\
\"\u{80}\":\"Control\u{7f}\",\"\u{f6}\":\"Latin Small Letter O With Diaeresis\",\"\u{20ac}\":\"Euro Sign\",\
\"\u{1f602}\":\"Smiley\",\"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}"
    );

    let structures = "{\n  \"1\": {\"f\": {\"f\": \"hi\",\"F\": 5} ,\"\\n\": 56.0},\n  \"10\": { },\n  \"\": \"empty\",\n  \
\"a\": { },\n  \"111\": [ { } ],\n  \"A\": { }\n}";
    assert_eq!(
        canon_str(structures),
        "{\"\":\"empty\",\"1\":{\"\\n\":56,\"f\":{\"F\":5,\"f\":\"hi\"}},\"10\":{},\"111\":[{}],\"A\":{},\"a\":{}}"
    );

    let arrays = "[\n  56,\n  {\n    \"d\": true,\n    \"10\": null,\n    \"1\": [ ]\n  }\n]";
    assert_eq!(canon_str(arrays), "[56,{\"1\":[],\"10\":null,\"d\":true}]");

    // No Unicode normalisation: the decomposed sequence stays as it is.
    let unicode = "{\n  \"Unnormalized Unicode\":\"\\u1e0d\\u0307\"\n}\n";
    assert_eq!(canon_str(unicode), "{\"Unnormalized Unicode\":\"\u{1e0d}\u{307}\"}");
}

/// Top-level scalars are documents too, and string escapes use the short forms with
/// lowercase `\u00xx` for the other controls; DEL and U+2028/U+2029 stay raw.
#[test]
fn scalars_and_escapes() {
    for (input, expected) in [
        ("null", "null"),
        ("true", "true"),
        (" false ", "false"),
        ("-0", "0"),
        ("-0.0", "0"),
        ("0.0", "0"),
        ("1E2", "100"),
        ("\"\\u001F\\u007f\\u2028\\u2029\\/\"", "\"\\u001f\u{7f}\u{2028}\u{2029}/\""),
        ("\"\\b\\f\\n\\r\\t\\u000b\\u0000\"", "\"\\b\\f\\n\\r\\t\\u000b\\u0000\""),
        ("[]", "[]"),
        ("{}", "{}"),
    ] {
        assert_eq!(canon_str(input), expected, "{input}");
    }
}
