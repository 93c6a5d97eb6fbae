//! The `process_*` metrics every Prometheus client library exports (CPU seconds, resident and
//! virtual memory, open and maximum file descriptors, start time), read from Linux's `/proc`
//! at scrape time.
//!
//! Parsing is kept apart from reading, so the parsers are tested on fixed text; a file that
//! cannot be read (not Linux, a locked-down `/proc`) leaves its series out rather than failing
//! the scrape.

use std::fmt::Write as _;

/// `/proc` reports CPU times in clock ticks of `USER_HZ`, which the kernel fixes at 100 for
/// user space on every architecture Drover runs on (whatever its internal `HZ`).
const USER_HZ: f64 = 100.0;

/// What `/proc/self/stat` says that the metrics need.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stat {
    /// User plus system CPU time, in seconds.
    pub cpu_seconds: f64,
    /// When the process started, in seconds after boot.
    pub start_after_boot_secs: f64,
    /// Virtual memory size, bytes.
    pub virtual_bytes: u64,
}

/// Parses `/proc/self/stat`. The command name (field 2) is in parentheses and may itself hold
/// spaces and parentheses, so fields are counted from the last `)`.
pub fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    // After the name: field 3 (state) is index 0 here; utime is field 14, stime 15,
    // starttime 22, vsize 23.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let at = |field: usize| fields.get(field - 3).and_then(|v| v.parse::<u64>().ok());
    Some(Stat {
        cpu_seconds: (at(14)? + at(15)?) as f64 / USER_HZ,
        start_after_boot_secs: at(22)? as f64 / USER_HZ,
        virtual_bytes: at(23)?,
    })
}

/// The resident set size from `/proc/self/status` (`VmRSS:  1234 kB`), in bytes.
pub fn parse_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The boot time from `/proc/stat` (`btime 1700000000`), in Unix seconds.
pub fn parse_boot_time(stat: &str) -> Option<u64> {
    stat.lines().find_map(|l| l.strip_prefix("btime ")).and_then(|v| v.trim().parse().ok())
}

/// The soft limit on open files from `/proc/self/limits` (`Max open files  1024  4096  files`).
pub fn parse_max_fds(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..].split_whitespace().next()?.parse().ok()
}

/// Appends the `process_*` families this machine can report.
pub fn render_into(out: &mut String) {
    let read = |path: &str| std::fs::read_to_string(path).ok();
    let stat = read("/proc/self/stat").as_deref().and_then(parse_stat);
    let mut gauge = |name: &str, kind: &str, help: &str, value: Option<String>| {
        if let Some(v) = value {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}");
        }
    };
    gauge("process_cpu_seconds_total", "counter", "User and system CPU time spent, in seconds.", stat.map(|s| s.cpu_seconds.to_string()));
    gauge(
        "process_resident_memory_bytes",
        "gauge",
        "Resident memory size, in bytes.",
        read("/proc/self/status").as_deref().and_then(parse_rss).map(|b| b.to_string()),
    );
    gauge("process_virtual_memory_bytes", "gauge", "Virtual memory size, in bytes.", stat.map(|s| s.virtual_bytes.to_string()));
    let open = std::fs::read_dir("/proc/self/fd").ok().map(|d| d.count());
    gauge("process_open_fds", "gauge", "Open file descriptors.", open.map(|n| n.to_string()));
    gauge(
        "process_max_fds",
        "gauge",
        "The limit on open file descriptors.",
        read("/proc/self/limits").as_deref().and_then(parse_max_fds).map(|n| n.to_string()),
    );
    let boot = read("/proc/stat").as_deref().and_then(parse_boot_time);
    let start = stat.zip(boot).map(|(s, b)| (b as f64 + s.start_after_boot_secs).to_string());
    gauge("process_start_time_seconds", "gauge", "Start time of the process since the Unix epoch, in seconds.", start);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_a_name_with_spaces_and_parentheses() {
        // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
        // utime stime cutime cstime priority nice threads itrealvalue starttime vsize rss …
        let text =
            "4242 (drover (co) rd) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 50 0 0 20 0 8 0 12345 987654321 2048 18446744073709551615";
        let s = parse_stat(text).expect("parsed");
        assert_eq!(s, Stat { cpu_seconds: 3.0, start_after_boot_secs: 123.45, virtual_bytes: 987_654_321 });
        assert_eq!(parse_stat("4242 (cut short) S 1 2"), None);
    }

    #[test]
    fn status_limits_and_boot_time_parse() {
        assert_eq!(parse_rss("Name:\tdrover\nVmRSS:\t   2048 kB\nThreads:\t8\n"), Some(2 * 1024 * 1024));
        assert_eq!(parse_rss("Name:\tkthread\n"), None);
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            20000                20000                files\n";
        assert_eq!(parse_max_fds(limits), Some(20_000));
        assert_eq!(parse_boot_time("cpu  1 2 3\nbtime 1764200000\nprocesses 9\n"), Some(1_764_200_000));
    }

    #[test]
    fn this_process_reports_every_family() {
        let mut out = String::new();
        render_into(&mut out);
        for name in [
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
            "process_virtual_memory_bytes",
            "process_open_fds",
            "process_max_fds",
            "process_start_time_seconds",
        ] {
            assert!(out.contains(&format!("\n{name} ")), "{name} missing: {out}");
        }
    }
}
