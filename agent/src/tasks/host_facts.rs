//! What the user-facing tasks observe on the host, read from the paths `[tasks]` names so the
//! same code runs against a temporary root in tests: the passwd database (users and their uid)
//! and the process table (`<proc_dir>/<pid>/status`).
//!
//! Both readers are hostile-input safe: a malformed passwd line is reported with its number
//! (never a panic, never silently dropped — a line that does not parse may hide a tenant user),
//! and a process that exits while the table is scanned is simply not listed.

use std::path::{Path, PathBuf};

use super::TaskSettings;

/// One passwd entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// Login name.
    pub name: String,
    /// Numeric user id.
    pub uid: u32,
    /// Home directory.
    pub home: PathBuf,
}

/// A passwd line that does not have the `name:x:uid:gid:gecos:home:shell` shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

/// The users read from a passwd file, and the lines that could not be read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Passwd {
    /// Well-formed entries, in file order.
    pub users: Vec<User>,
    /// Lines that are not (NIS `+`/`-` entries count: they cannot be judged here).
    pub malformed: Vec<Malformed>,
}

impl Passwd {
    /// The entry named `name`.
    pub fn find(&self, name: &str) -> Option<&User> {
        self.users.iter().find(|u| u.name == name)
    }

    /// The malformed lines, one string each (`line 3: uid is not a number`).
    pub fn malformed_lines(&self) -> Vec<String> {
        self.malformed.iter().map(|m| format!("line {}: {}", m.line, m.message)).collect()
    }
}

/// Why a passwd line is malformed.
#[derive(Debug, thiserror::Error)]
enum LineError {
    /// Not seven `:`-separated fields.
    #[error("{found} fields, expected 7")]
    FieldCount {
        /// The fields found.
        found: usize,
    },
    /// No user name.
    #[error("empty user name")]
    EmptyName,
    /// A NIS compat entry, or a name with blanks or control characters.
    #[error("user name {name:?} is not a plain login name")]
    NotPlain {
        /// The name.
        name: String,
    },
    /// The uid field is not a number.
    #[error("uid {uid:?} is not a number")]
    Uid {
        /// The field.
        uid: String,
    },
}

fn parse_line(line: &str) -> Result<User, LineError> {
    let fields: Vec<&str> = line.split(':').collect();
    if fields.len() != 7 {
        return Err(LineError::FieldCount { found: fields.len() });
    }
    let name = fields[0];
    if name.is_empty() {
        return Err(LineError::EmptyName);
    }
    // `+`/`-` are NIS compat entries; a leading `-` would also read as an option to userdel.
    if name.starts_with(['+', '-']) || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(LineError::NotPlain { name: name.to_owned() });
    }
    let uid = fields[2].parse::<u32>().map_err(|_| LineError::Uid { uid: fields[2].to_owned() })?;
    Ok(User { name: name.to_owned(), uid, home: PathBuf::from(fields[5]) })
}

/// Every entry of passwd text. Blank lines and `#` comments are skipped.
pub fn parse_passwd(text: &str) -> Passwd {
    let mut out = Passwd::default();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        match parse_line(line) {
            Ok(user) => out.users.push(user),
            Err(e) => out.malformed.push(Malformed { line: n + 1, message: e.to_string() }),
        }
    }
    out
}

/// The tenant users of passwd text (uid in the configured range), and every malformed line
/// (a malformed line is reported whatever uid it might have had).
pub fn tenant_users(passwd_text: &str, settings: &TaskSettings) -> Passwd {
    let mut all = parse_passwd(passwd_text);
    all.users.retain(|u| settings.is_tenant_uid(u.uid));
    all
}

/// Why the passwd file or the process table could not be read.
#[derive(Debug, thiserror::Error)]
pub enum HostFactsError {
    /// The passwd file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Passwd {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The process table could not be listed.
    #[error("cannot list {}: {source}", dir.display())]
    Processes {
        /// The `proc` directory.
        dir: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// Reads the passwd file the settings name.
pub fn read_passwd(settings: &TaskSettings) -> Result<Passwd, HostFactsError> {
    let path = &settings.passwd_file;
    std::fs::read_to_string(path).map(|t| parse_passwd(&t)).map_err(|source| HostFactsError::Passwd { path: path.clone(), source })
}

/// One process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proc {
    /// Process id.
    pub pid: i32,
    /// Real user id (the first field of `Uid:`).
    pub uid: u32,
    /// Command name (`Name:`, at most 15 bytes, as the kernel keeps it).
    pub comm: String,
    /// Exited but not yet reaped (`State: Z`): it holds nothing but its pid.
    pub zombie: bool,
}

/// Parses a `/proc/<pid>/status` text; `None` when `Uid:` is missing or not a number.
pub fn parse_status(pid: i32, text: &str) -> Option<Proc> {
    let mut comm = String::new();
    let mut uid = None;
    let mut zombie = false;
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("Name:") {
            comm = v.trim().to_owned();
        } else if let Some(v) = line.strip_prefix("Uid:") {
            uid = v.split_whitespace().next().and_then(|f| f.parse::<u32>().ok());
        } else if let Some(v) = line.strip_prefix("State:") {
            zombie = v.trim_start().starts_with('Z');
        }
    }
    Some(Proc { pid, uid: uid?, comm, zombie })
}

/// One process by pid: `None` when it is gone (or its status cannot be read).
pub fn process(proc_dir: &Path, pid: i32) -> Option<Proc> {
    let text = std::fs::read_to_string(proc_dir.join(pid.to_string()).join("status")).ok()?;
    parse_status(pid, &text)
}

/// Every process in `proc_dir`, by ascending pid. Entries that are not pids are ignored; a
/// process that exits during the scan (its status unreadable) is not listed. Fails only when
/// `proc_dir` itself cannot be listed.
pub fn processes(proc_dir: &Path) -> Result<Vec<Proc>, HostFactsError> {
    let entries = std::fs::read_dir(proc_dir).map_err(|source| HostFactsError::Processes { dir: proc_dir.to_owned(), source })?;
    let mut out: Vec<Proc> = entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
        .filter(|pid| *pid > 0)
        .filter_map(|pid| process(proc_dir, pid))
        .collect();
    out.sort_by_key(|p| p.pid);
    Ok(out)
}

/// The processes of tenant uids.
pub fn tenant_processes(proc_dir: &Path, settings: &TaskSettings) -> Result<Vec<Proc>, HostFactsError> {
    let mut all = processes(proc_dir)?;
    all.retain(|p| settings.is_tenant_uid(p.uid));
    Ok(all)
}

/// The last `max` bytes of `text` (on a character boundary), trimmed: what an error message
/// quotes of a tool's stderr.
pub fn tail(text: &str, max: usize) -> String {
    let t = text.trim();
    let mut start = t.len().saturating_sub(max);
    while !t.is_char_boundary(start) {
        start += 1;
    }
    t[start..].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwd_lines_parse_and_only_tenant_uids_are_tenants() {
        let text = "root:x:0:0:root:/root:/bin/bash\n# comment\n\nalice:x:10001:10001::/home/alice:/bin/sh\nnobody:x:65534:65534::/:/usr/sbin/nologin\n";
        let p = tenant_users(text, &TaskSettings::default());
        assert_eq!(p.users, vec![User { name: "alice".into(), uid: 10001, home: "/home/alice".into() }]);
        assert!(p.malformed.is_empty());
    }

    #[test]
    fn malformed_lines_are_numbered() {
        let text = "ok:x:10001:1::/h:/s\nbad:x:notanumber:1::/h:/s\nshort:x:1\n+nis::::::\n-opt:x:10002:1::/h:/s\n";
        let p = parse_passwd(text);
        assert_eq!(p.users.len(), 1);
        let lines: Vec<usize> = p.malformed.iter().map(|m| m.line).collect();
        assert_eq!(lines, vec![2, 3, 4, 5]);
    }

    #[test]
    fn status_gives_real_uid_name_and_zombie_state() {
        let text = "Name:\tsleep\nUmask:\t0022\nState:\tZ (zombie)\nTgid:\t7\nUid:\t10001\t0\t0\t0\nGid:\t0\t0\t0\t0\n";
        assert_eq!(parse_status(7, text), Some(Proc { pid: 7, uid: 10001, comm: "sleep".into(), zombie: true }));
        assert_eq!(parse_status(7, "Name:\tx\n"), None);
    }

    #[test]
    fn tail_keeps_the_end_on_a_char_boundary() {
        assert_eq!(tail("  abcdef\n", 3), "def");
        assert_eq!(tail("ééé", 3), "é");
    }

    #[test]
    fn the_real_proc_lists_this_process() {
        let me = i32::try_from(std::process::id()).expect("pid");
        let all = processes(Path::new("/proc")).expect("proc");
        assert!(all.iter().any(|p| p.pid == me));
    }
}
