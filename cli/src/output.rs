//! How the operator's read verbs print: the one `-o/--output table|wide|json` option
//! ([`OutputArgs`]) every verb that reads the coordinator takes, the listing form of it
//! ([`ListOutputArgs`]: also `-o name` and `--no-headers`, for `drover get`'s tables),
//! kubectl-style aligned tables ([`table`]), the short ages and times shown in them, and stdout
//! writing.
//!
//! Everything a coordinator sent passes through [`clean`] before a table shows it: a hostile
//! or broken coordinator must not be able to drive the operator's terminal.

use std::io::Write;

use clap::{Args, ValueEnum};
use drover_proto::time::Time;
use serde_json::Value;

use crate::exit::{CliError, codes};

/// How a verb prints its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum Output {
    /// Aligned columns for people (one-line answers stay easy to script). `text` is kept as
    /// an alias: it was this option's name before `wide` existed.
    #[default]
    #[value(name = "table", alias = "text")]
    Table,
    /// The table with more columns (ids, timestamps, targets).
    Wide,
    /// The coordinator's JSON, pretty-printed, unchanged (listings: every page merged).
    Json,
}

impl Output {
    /// Whether the coordinator's JSON is asked for.
    pub fn is_json(self) -> bool {
        self == Output::Json
    }
}

/// The `-o/--output` option every coordinator-reading verb takes.
#[derive(Args, Debug, Clone, Copy, Default)]
pub struct OutputArgs {
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

/// How a listing (`drover get ...`) prints: [`Output`]'s forms plus `name`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum ListOutput {
    /// Aligned columns for people.
    #[default]
    #[value(name = "table", alias = "text")]
    Table,
    /// The table with more columns (ids, timestamps, targets).
    Wide,
    /// The coordinator's JSON, pretty-printed, unchanged (every page merged).
    Json,
    /// One `kind/name` per line (`host/gpu-a-01`, `rollout/<id>`), for scripts and pipes.
    Name,
}

/// The `-o/--output` and `--no-headers` options every `drover get` listing takes.
#[derive(Args, Debug, Clone, Copy, Default)]
pub struct ListOutputArgs {
    /// Output format: table, wide, json, or name (one `kind/name` per line).
    #[arg(short = 'o', long = "output", value_enum, default_value_t = ListOutput::Table)]
    pub output: ListOutput,
    /// Print table rows without the header line (for scripts reading columns).
    #[arg(long)]
    pub no_headers: bool,
}

impl ListOutputArgs {
    /// Whether the coordinator's JSON is asked for.
    pub fn is_json(self) -> bool {
        self.output == ListOutput::Json
    }

    /// Whether the wide table is asked for.
    pub fn is_wide(self) -> bool {
        self.output == ListOutput::Wide
    }

    /// What a listing of `items` prints, `None` when it prints nothing (the caller says so on
    /// stderr): the JSON array; `kind/NAME` lines, NAME being each item's `name_key` field;
    /// or `render(items)`, its first line (the header) dropped under `--no-headers`.
    pub fn render(
        self,
        items: &[Value],
        kind: &str,
        name_key: &str,
        render: impl FnOnce(&[Value]) -> Result<String, CliError>,
    ) -> Result<Option<String>, CliError> {
        match self.output {
            ListOutput::Json => pretty(&Value::Array(items.to_vec())).map(Some),
            _ if items.is_empty() => Ok(None),
            ListOutput::Name => Ok(Some(names(items, kind, name_key))),
            ListOutput::Table | ListOutput::Wide => {
                let text = render(items)?;
                Ok(Some(if self.no_headers { without_header(&text) } else { text }))
            }
        }
    }
}

/// One `kind/NAME` line per item, NAME being the item's `name_key` field (cleaned like every
/// table cell). An item without one (a broken coordinator) is named `-` rather than dropped,
/// so the line count still matches the listing.
pub fn names(items: &[Value], kind: &str, name_key: &str) -> String {
    items.iter().map(|v| format!("{kind}/{}\n", clean(dash(field(v, name_key)), 128))).collect()
}

/// `text` without its first line.
pub fn without_header(text: &str) -> String {
    text.split_once('\n').map_or_else(String::new, |(_, rest)| rest.to_owned())
}

/// Rows as columns, two spaces apart, the last column unpadded (kubectl's layout). Rows
/// shorter than the header are padded with empty cells.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = header.iter().map(|h| (*h).to_owned()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                let pad = widths.get(i).copied().unwrap_or(0).saturating_sub(cell.chars().count());
                line.push_str(cell);
                line.push_str(&" ".repeat(pad + 2));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `table` with every line indented by two spaces (a section of a `describe`).
pub fn indented_table(header: &[&str], rows: &[Vec<String>]) -> String {
    if rows.is_empty() {
        return "  (none)\n".to_owned();
    }
    table(header, rows).lines().map(|l| format!("  {l}\n")).collect()
}

/// A duration as kubectl's AGE column shows it: `45s`, `12m`, `5h`, `3d`; `-` when negative
/// (a clock ahead of ours) so a skewed clock never prints nonsense.
pub fn short_duration(secs: i64) -> String {
    match secs {
        s if s < 0 => "-".to_owned(),
        s if s < 120 => format!("{s}s"),
        s if s < 2 * 3600 => format!("{}m", s / 60),
        s if s < 2 * 86_400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// A value's wire form (its serde string), for enums the API sends as strings.
pub fn wire<T: serde::Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => "-".to_owned(),
    }
}

/// How long ago `at` was, kubectl-style (`30s`, `60m`, `2d`).
pub fn age_of(now: Time, at: Time) -> String {
    short_duration(now.secs_since(at))
}

/// A string field of a JSON object, or `""`.
pub fn field<'a>(v: &'a Value, name: &str) -> &'a str {
    v.get(name).and_then(Value::as_str).unwrap_or("")
}

/// `s` with control characters replaced by spaces and at most `max` characters (then `…`):
/// a coordinator's text must not drive the terminal.
pub fn clean(s: &str, max: usize) -> String {
    let mut out: String = s.chars().take(max).map(|c| if c.is_control() { ' ' } else { c }).collect();
    if s.chars().count() > max {
        out.push('…');
    }
    out
}

/// `s`, or `-` when empty.
pub fn dash(s: &str) -> &str {
    if s.is_empty() { "-" } else { s }
}

/// The coordinator's JSON, pretty-printed, with a final newline.
pub fn pretty<T: serde::Serialize + ?Sized>(value: &T) -> Result<String, CliError> {
    serde_json::to_string_pretty(value).map(|s| s + "\n").map_err(|e| CliError::new(codes::SOFTWARE, format!("internal error: {e}")))
}

/// Writes `text` to `out` and flushes it (74 on failure).
pub fn write_to(out: &mut dyn Write, text: &str) -> Result<(), CliError> {
    out.write_all(text.as_bytes()).and_then(|()| out.flush()).map_err(|e| CliError::new(codes::IO, format!("cannot write stdout: {e}")))
}

/// Writes `text` to stdout.
pub fn print(text: &str) -> Result<(), CliError> {
    write_to(&mut std::io::stdout().lock(), text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_columns_and_leave_the_last_unpadded() {
        let rows = vec![vec!["gpu-a-01".to_owned(), "active".to_owned(), "yes".to_owned()], vec!["b".to_owned(), "x".to_owned()]];
        let out = table(&["NAME", "STATE", "SCHEDULABLE"], &rows);
        assert_eq!(out, "NAME      STATE   SCHEDULABLE\ngpu-a-01  active  yes\nb         x\n");
        assert_eq!(indented_table(&["A"], &[]), "  (none)\n");
        assert_eq!(indented_table(&["A", "B"], &[vec!["1".into(), "2".into()]]), "  A  B\n  1  2\n");
    }

    #[test]
    fn listings_print_names_or_headerless_tables() {
        let items = vec![serde_json::json!({"hostname": "gpu-a-01"}), serde_json::json!({"hostname": "b\u{1b}[2J"}), serde_json::json!({})];
        let render = |i: &[Value]| Ok(table(&["NAME"], &i.iter().map(|h| vec![field(h, "hostname").to_owned()]).collect::<Vec<_>>()));
        let name = ListOutputArgs { output: ListOutput::Name, no_headers: false };
        assert_eq!(name.render(&items, "host", "hostname", render).expect("name").as_deref(), Some("host/gpu-a-01\nhost/b [2J\nhost/-\n"));
        let bare = ListOutputArgs { output: ListOutput::Table, no_headers: true };
        let out = bare.render(&items[..1], "host", "hostname", render).expect("table");
        assert_eq!(out.as_deref(), Some("gpu-a-01\n"));
        let with = ListOutputArgs::default().render(&items[..1], "host", "hostname", render).expect("table");
        assert_eq!(with.as_deref(), Some("NAME\ngpu-a-01\n"));
        assert_eq!(name.render(&[], "host", "hostname", render).expect("empty"), None);
        let json = ListOutputArgs { output: ListOutput::Json, no_headers: true };
        assert_eq!(json.render(&[], "host", "hostname", render).expect("json").as_deref(), Some("[]\n"));
    }

    #[test]
    fn ages_read_like_kubectl() {
        assert_eq!(short_duration(-5), "-");
        assert_eq!(short_duration(59), "59s");
        assert_eq!(short_duration(600), "10m");
        assert_eq!(short_duration(3 * 3600), "3h");
        assert_eq!(short_duration(5 * 86_400), "5d");
        let now = Time::parse_lenient("2025-01-01T01:00:00Z").expect("time");
        assert_eq!(age_of(now, Time::parse_lenient("2025-01-01T00:50:00Z").expect("time")), "10m");
    }

    #[test]
    fn json_fields_default_to_empty_and_dashes() {
        let v = serde_json::json!({"a": "x", "b": 1});
        assert_eq!((field(&v, "a"), field(&v, "b"), field(&v, "c")), ("x", "", ""));
        assert_eq!((dash(""), dash("y")), ("-", "y"));
    }
}
