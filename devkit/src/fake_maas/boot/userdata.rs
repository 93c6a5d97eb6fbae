//! The user data side of a fake boot, with no process in it: decoding what `deploy` stored
//! (base64, as MAAS's metadata server hands it out, else the text as given), reading the
//! `#cloud-config` document Drover renders (the `#cloud-config` line, `#` comment lines, then
//! a JSON body — the JSON subset of YAML, which is all this fake reads), laying its
//! `write_files` under a sandbox root (every path checked first: absolute, no `..`, no
//! symlink on the way; nothing is written unless every entry is acceptable), and reading back
//! the MAAS hardware-sync credentials file the user data wrote.

use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use base64::Engine;
use serde::Deserialize;

use super::BootError;

/// Decodes stored `user_data`: its bytes when the (whitespace-free) text is valid base64, as
/// MAAS's metadata server does, else the text as given.
pub fn decode_user_data(raw: &str) -> Vec<u8> {
    let compact: String = raw.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    base64::engine::general_purpose::STANDARD.decode(compact).unwrap_or_else(|_| raw.as_bytes().to_vec())
}

/// One `write_files` entry as cloud-init reads it (the keys this fake acts on; `owner` is
/// accepted and ignored, since the fake does not run as root).
#[derive(Debug, Clone, Deserialize)]
struct RawFile {
    path: String,
    #[serde(default)]
    content: String,
    #[serde(default)]
    permissions: Option<Permissions>,
    #[serde(default)]
    encoding: Option<String>,
    #[serde(default)]
    append: bool,
}

/// `permissions` as a string (`"0644"`, `"0o644"`) or a number (YAML's octal-looking int).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum Permissions {
    Text(String),
    Number(u32),
}

#[derive(Debug, Deserialize)]
struct Document {
    #[serde(default)]
    write_files: Vec<RawFile>,
}

/// A `write_files` entry, checked: where it goes under the root, its bytes and mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileToWrite {
    /// The path as the user data names it (absolute, on the node).
    pub path: String,
    /// The path under the sandbox root.
    pub target: PathBuf,
    /// The decoded content.
    pub content: Vec<u8>,
    /// The mode (`permissions`, default 0644).
    pub mode: u32,
    /// Append instead of replacing.
    pub append: bool,
}

/// Reads a `#cloud-config` user data and answers its `write_files`, each resolved under
/// `root`. Anything else (a script, a MIME multipart, YAML that is not JSON) is refused.
pub fn parse(bytes: &[u8], root: &Path) -> Result<Vec<FileToWrite>, BootError> {
    let text = std::str::from_utf8(bytes).map_err(|_| BootError::NotCloudConfig("the user data is not UTF-8 text".into()))?;
    let (first, rest) = text.split_once('\n').unwrap_or((text, ""));
    if first.trim_end() != "#cloud-config" {
        let shown: String = first.chars().take(40).collect();
        return Err(BootError::NotCloudConfig(format!("the first line is {shown:?}, not \"#cloud-config\"")));
    }
    let body: String = rest.lines().skip_while(|l| l.trim().is_empty() || l.trim_start().starts_with('#')).collect::<Vec<_>>().join("\n");
    let doc: Document = serde_json::from_str(&body).map_err(|e| {
        BootError::NotCloudConfig(format!(
            "the body after #cloud-config is not the JSON this fake reads (the JSON subset of YAML Drover renders): {e}"
        ))
    })?;
    doc.write_files.into_iter().map(|f| checked(f, root)).collect()
}

fn checked(f: RawFile, root: &Path) -> Result<FileToWrite, BootError> {
    let bad = |message: String| BootError::BadEntry { path: f.path.clone(), message };
    let target = resolve(root, &f.path)?;
    let content = match f.encoding.as_deref().map(str::to_ascii_lowercase).as_deref() {
        None | Some("text/plain") => f.content.clone().into_bytes(),
        Some("b64" | "base64") => {
            base64::engine::general_purpose::STANDARD.decode(f.content.trim()).map_err(|e| bad(format!("content is not base64: {e}")))?
        }
        Some(other) => return Err(bad(format!("encoding {other:?} is not supported here (plain text and b64 are)"))),
    };
    let mode = match &f.permissions {
        None => 0o644,
        Some(Permissions::Number(n)) => *n,
        Some(Permissions::Text(t)) => {
            let digits = t.trim().trim_start_matches("0o");
            u32::from_str_radix(digits, 8).map_err(|_| bad(format!("permissions {t:?} are not octal")))?
        }
    };
    if mode > 0o7777 {
        return Err(bad(format!("permissions {mode:o} are out of range")));
    }
    Ok(FileToWrite { path: f.path, target, content, mode, append: f.append })
}

/// `path` (absolute, as on the node) under `root`: refused when it is relative, names no file,
/// or has a `..` component (which could climb out of the root).
pub fn resolve(root: &Path, path: &str) -> Result<PathBuf, BootError> {
    let escape = || BootError::Escape { path: path.to_owned() };
    let mut parts = Path::new(path).components();
    if parts.next() != Some(Component::RootDir) {
        return Err(escape());
    }
    let mut out = root.to_path_buf();
    let mut named = false;
    for part in parts {
        match part {
            Component::Normal(p) => {
                out.push(p);
                named = true;
            }
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => return Err(escape()),
        }
    }
    if !named {
        return Err(BootError::BadEntry { path: path.to_owned(), message: "names no file".into() });
    }
    Ok(out)
}

/// Writes every file under `root` (which must exist). Every target is checked before any is
/// written: it must lie under the root with no symlink on the way or at its end, so nothing
/// lands outside the root whatever the tree holds.
pub fn materialize(root: &Path, files: &[FileToWrite]) -> Result<(), BootError> {
    for f in files {
        let rel = f.target.strip_prefix(root).map_err(|_| BootError::Escape { path: f.path.clone() })?;
        let mut at = root.to_path_buf();
        for part in rel.components() {
            at.push(part);
            match std::fs::symlink_metadata(&at) {
                Ok(meta) if meta.file_type().is_symlink() => return Err(BootError::Escape { path: f.path.clone() }),
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                Err(e) => return Err(BootError::Io { path: at, source: e }),
            }
        }
    }
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| BootError::Io { path, source }
    };
    for f in files {
        if let Some(parent) = f.target.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(f.append)
            .truncate(!f.append)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .mode(f.mode)
            .open(&f.target)
            .map_err(io(&f.target))?;
        std::io::Write::write_all(&mut file, &f.content).map_err(io(&f.target))?;
        file.set_permissions(std::fs::Permissions::from_mode(f.mode)).map_err(io(&f.target))?;
    }
    Ok(())
}

/// The MAAS hardware-sync credentials as the creds file carries them.
#[derive(Clone, PartialEq, Eq)]
pub struct Creds {
    /// `consumer_key`.
    pub consumer_key: String,
    /// `token_key`.
    pub token_key: String,
    /// `token_secret`.
    pub token_secret: String,
    /// `endpoint`: `<maas_url>/metadata/status/<system_id>`.
    pub endpoint: String,
}

impl std::fmt::Debug for Creds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Creds").field("endpoint", &self.endpoint).field("token_secret", &"<redacted>").finish_non_exhaustive()
    }
}

/// Why the creds do not make this machine's hardware sync work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CredsCheck {
    /// They name this machine and its current token.
    Ok,
    /// No creds file, or not the `reporting: maas:` shape.
    Missing,
    /// The endpoint names another machine (or is not `…/metadata/status/<id>`).
    OtherMachine,
    /// The token is not the machine's current one (or it has none).
    WrongToken,
}

impl CredsCheck {
    /// A short name for the control API.
    pub fn as_str(self) -> &'static str {
        match self {
            CredsCheck::Ok => "ok",
            CredsCheck::Missing => "no credentials",
            CredsCheck::OtherMachine => "credentials name another machine",
            CredsCheck::WrongToken => "credentials carry another token",
        }
    }
}

impl Creds {
    /// Reads the YAML MAAS writes (`reporting:` / `maas:` / four `key: 'value'` lines; single
    /// quotes with `''` escapes, or plain scalars). `None` when the shape is not that.
    pub fn parse(text: &str) -> Option<Creds> {
        let mut section = Vec::new();
        let (mut ck, mut ep, mut tk, mut ts) = (None, None, None, None);
        for line in text.lines().filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#')) {
            let indent = line.len() - line.trim_start().len();
            let (key, value) = line.trim().split_once(':')?;
            let value = value.trim();
            section.truncate(indent / 2);
            if value.is_empty() {
                section.push(key.to_owned());
                continue;
            }
            if section != ["reporting", "maas"] {
                continue;
            }
            let value = scalar(value)?;
            match key {
                "consumer_key" => ck = Some(value),
                "endpoint" => ep = Some(value),
                "token_key" => tk = Some(value),
                "token_secret" => ts = Some(value),
                _ => {}
            }
        }
        Some(Creds { consumer_key: ck?, token_key: tk?, token_secret: ts?, endpoint: ep? })
    }

    /// Whether these name `system_id` and its current `token` (`consumer_key`, `token_key`,
    /// `token_secret`).
    pub fn check(&self, system_id: &str, token: Option<&(String, String, String)>) -> CredsCheck {
        let named = self.endpoint.trim_end_matches('/').rsplit_once("/metadata/status/").map(|(_, id)| id);
        if named != Some(system_id) {
            return CredsCheck::OtherMachine;
        }
        match token {
            Some((ck, tk, ts)) if *ck == self.consumer_key && *tk == self.token_key && *ts == self.token_secret => CredsCheck::Ok,
            _ => CredsCheck::WrongToken,
        }
    }
}

/// A YAML scalar on one line: `'single quoted'` (with `''`), `"double"` (no escapes
/// taken), or plain.
fn scalar(v: &str) -> Option<String> {
    if let Some(inner) = v.strip_prefix('\'') {
        return Some(inner.strip_suffix('\'')?.replace("''", "'"));
    }
    if let Some(inner) = v.strip_prefix('"') {
        return Some(inner.strip_suffix('"')?.to_owned());
    }
    Some(v.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decoding_and_the_document() {
        assert_eq!(decode_user_data("I2Nsb3VkLWNvbmZpZwo="), b"#cloud-config\n");
        assert_eq!(decode_user_data("#!/bin/sh\n"), b"#!/bin/sh\n");
        let root = Path::new("/r");
        let doc = "#cloud-config\n# a comment\n\n{\"write_files\": [{\"path\": \"/etc/a\", \"content\": \"x\", \"permissions\": \"0600\"},\
                   {\"path\": \"/b\", \"content\": \"eQ==\", \"encoding\": \"b64\", \"append\": true}], \"runcmd\": []}\n";
        let files = parse(doc.as_bytes(), root).unwrap();
        assert_eq!(files[0].target, PathBuf::from("/r/etc/a"));
        assert_eq!((files[0].mode, files[0].content.as_slice()), (0o600, b"x".as_slice()));
        assert_eq!((files[1].mode, files[1].content.as_slice(), files[1].append), (0o644, b"y".as_slice(), true));
        assert!(matches!(parse(b"#!/bin/sh\necho hi\n", root), Err(BootError::NotCloudConfig(_))));
        assert!(matches!(parse(b"#cloud-config\nwrite_files:\n  - path: /a\n", root), Err(BootError::NotCloudConfig(_))));
        assert!(matches!(parse(&[0xff, 0xfe], root), Err(BootError::NotCloudConfig(_))));
        let bad_mode = "#cloud-config\n{\"write_files\": [{\"path\": \"/a\", \"permissions\": \"rwx\"}]}";
        assert!(matches!(parse(bad_mode.as_bytes(), root), Err(BootError::BadEntry { .. })));
        let gzip = "#cloud-config\n{\"write_files\": [{\"path\": \"/a\", \"encoding\": \"gzip\"}]}";
        assert!(matches!(parse(gzip.as_bytes(), root), Err(BootError::BadEntry { .. })));
    }

    #[test]
    fn paths_stay_under_the_root() {
        let root = Path::new("/r");
        assert_eq!(resolve(root, "/etc/./maas/x").unwrap(), PathBuf::from("/r/etc/maas/x"));
        for attack in ["/../etc/passwd", "/etc/../../x", "relative/x", "", "../x"] {
            assert!(matches!(resolve(root, attack), Err(BootError::Escape { .. })), "{attack:?}");
        }
        assert!(matches!(resolve(root, "/"), Err(BootError::BadEntry { .. })));
    }

    #[test]
    fn a_symlink_on_the_way_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (root, outside) = (dir.path().join("root"), dir.path().join("outside"));
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("etc")).unwrap();
        let f = |p: &str| FileToWrite { path: format!("/{p}"), target: root.join(p), content: b"x".to_vec(), mode: 0o644, append: false };
        assert!(matches!(materialize(&root, &[f("first"), f("etc/x")]), Err(BootError::Escape { .. })));
        assert!(!outside.join("x").exists());
        assert!(!root.join("first").exists(), "nothing is written unless every target is safe");
        std::fs::remove_file(root.join("etc")).unwrap();
        std::os::unix::fs::symlink(outside.join("y"), root.join("y")).unwrap();
        assert!(matches!(materialize(&root, &[f("y")]), Err(BootError::Escape { .. })));
        assert!(!outside.join("y").exists());
        materialize(&root, &[f("etc/x"), FileToWrite { append: true, ..f("etc/x") }]).unwrap();
        assert_eq!(std::fs::read(root.join("etc/x")).unwrap(), b"xx");
    }

    #[test]
    fn creds_are_read_and_checked() {
        let text = "reporting:\n  maas:\n    consumer_key: 'CK'\n    endpoint: 'http://m:5240/MAAS/metadata/status/abc123'\n    \
                    token_key: 'TK'\n    token_secret: 'it''s'\n";
        let c = Creds::parse(text).unwrap();
        assert_eq!(c.token_secret, "it's");
        let token = ("CK".to_owned(), "TK".to_owned(), "it's".to_owned());
        assert_eq!(c.check("abc123", Some(&token)), CredsCheck::Ok);
        assert_eq!(c.check("xyz789", Some(&token)), CredsCheck::OtherMachine);
        assert_eq!(c.check("abc123", None), CredsCheck::WrongToken);
        let other = ("CK".to_owned(), "TK".to_owned(), "nope".to_owned());
        assert_eq!(c.check("abc123", Some(&other)), CredsCheck::WrongToken);
        assert!(Creds::parse("reporting:\n  other:\n    consumer_key: 'CK'\n").is_none());
        assert!(!format!("{c:?}").contains("it's"));
    }
}
