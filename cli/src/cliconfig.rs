//! `drover`'s own configuration file: where the coordinator is and the operator credentials
//! to present, so an operator does not repeat four flags on every verb.
//!
//! ```toml
//! # ~/.config/drover/config.toml
//! coordinator = "https://coord-1.example:8443"
//! cert = "alice.crt"      # relative paths are resolved against this file's directory
//! key = "alice.key"
//! ca = "/etc/drover/coordinator-ca.crt"
//! ```
//!
//! Which file: `--config FILE` (or `DROVER_CONFIG`), which must exist; otherwise
//! `$XDG_CONFIG_HOME/drover/config.toml` (`~/.config/drover/config.toml` when
//! `XDG_CONFIG_HOME` is unset), used only when it exists. Every key is optional; unknown keys
//! are refused (a misspelt `cert` must not silently fall back to nothing). Precedence, per
//! key: flag > environment variable > config file (clap merges the first two, then
//! [`CliConfig::fill`] fills what is still missing).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::exit::{CliError, codes};

/// Largest config file read: it holds four short lines.
const MAX_CONFIG_BYTES: u64 = 64 * 1024;

/// The config file's keys.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CliConfig {
    /// The coordinator's URL.
    pub coordinator: Option<String>,
    /// The operator certificate (PEM).
    pub cert: Option<PathBuf>,
    /// The operator's private key (PEM).
    pub key: Option<PathBuf>,
    /// The coordinator CA (PEM).
    pub ca: Option<PathBuf>,
}

/// The default config file given `XDG_CONFIG_HOME` and `HOME` (passed in, so tests do not
/// touch the process environment). An empty or relative `XDG_CONFIG_HOME` is ignored, as the
/// XDG base directory specification says.
pub fn default_path(xdg_config_home: Option<OsString>, home: Option<OsString>) -> Option<PathBuf> {
    let xdg = xdg_config_home.map(PathBuf::from).filter(|p| p.is_absolute());
    let base = xdg.or_else(|| home.map(PathBuf::from).filter(|p| p.is_absolute()).map(|h| h.join(".config")))?;
    Some(base.join("drover").join("config.toml"))
}

/// The default config file of this process's environment.
pub fn default_path_from_env() -> Option<PathBuf> {
    default_path(std::env::var_os("XDG_CONFIG_HOME"), std::env::var_os("HOME"))
}

impl CliConfig {
    /// Parses `text` (the content of `path`), resolving relative paths against `path`'s
    /// directory. A malformed file is 65, naming the file and, where TOML says, the key.
    pub fn parse(path: &Path, text: &str) -> Result<CliConfig, CliError> {
        let mut config: CliConfig = toml::from_str(text).map_err(|e| {
            // toml's message names the key and the line; keep it on one line.
            let why = e.message().replace('\n', " ");
            // Counted over bytes: a span may start inside a multi-byte character, where a
            // `str` slice would panic (found by the `cli_config` fuzz target).
            let at = e
                .span()
                .map(|s| format!(" (line {})", 1 + text.as_bytes()[..s.start.min(text.len())].iter().filter(|b| **b == b'\n').count()))
                .unwrap_or_default();
            CliError::data(format!("config file {}{at}: {why}", path.display()))
        })?;
        let dir = path.parent().unwrap_or(Path::new("."));
        for p in [&mut config.cert, &mut config.key, &mut config.ca].into_iter().flatten() {
            if p.as_os_str().is_empty() {
                return Err(CliError::data(format!("config file {}: a path is empty", path.display())));
            }
            if p.is_relative() {
                *p = dir.join(&*p);
            }
        }
        Ok(config)
    }

    /// Loads the file: `explicit` must exist (66 otherwise); `default` is used when it exists.
    /// `None` when there is no file to read.
    pub fn load(explicit: Option<&Path>, default: Option<&Path>) -> Result<Option<(PathBuf, CliConfig)>, CliError> {
        let path = match (explicit, default) {
            (Some(p), _) => p.to_path_buf(),
            (None, Some(d)) if d.is_file() => d.to_path_buf(),
            _ => return Ok(None),
        };
        let meta = std::fs::metadata(&path).map_err(|e| CliError::new(codes::NO_INPUT, format!("config file {}: {e}", path.display())))?;
        if meta.len() > MAX_CONFIG_BYTES {
            return Err(CliError::data(format!("config file {}: larger than {MAX_CONFIG_BYTES} bytes", path.display())));
        }
        let text =
            std::fs::read_to_string(&path).map_err(|e| CliError::new(codes::NO_INPUT, format!("config file {}: {e}", path.display())))?;
        let config = CliConfig::parse(&path, &text)?;
        Ok(Some((path, config)))
    }

    /// Fills each of `coordinator`, `cert`, `key`, `ca` that is still `None` from this file.
    pub fn fill(&self, coordinator: &mut Option<String>, cert: &mut Option<PathBuf>, key: &mut Option<PathBuf>, ca: &mut Option<PathBuf>) {
        if coordinator.is_none() {
            coordinator.clone_from(&self.coordinator);
        }
        for (slot, value) in [(cert, &self.cert), (key, &self.key), (ca, &self.ca)] {
            if slot.is_none() {
                slot.clone_from(value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_file_follows_xdg() {
        assert_eq!(default_path(Some("/x".into()), Some("/home/a".into())), Some(PathBuf::from("/x/drover/config.toml")));
        assert_eq!(default_path(None, Some("/home/a".into())), Some(PathBuf::from("/home/a/.config/drover/config.toml")));
        assert_eq!(default_path(Some("rel".into()), Some("/home/a".into())), Some(PathBuf::from("/home/a/.config/drover/config.toml")));
        assert_eq!(default_path(Some("".into()), None), None);
    }

    #[test]
    fn relative_paths_resolve_against_the_file() {
        let text = "coordinator = \"https://c:1\"\ncert = \"alice.crt\"\nkey = \"/abs/alice.key\"\n";
        let c = CliConfig::parse(Path::new("/etc/drover/config.toml"), text).expect("parses");
        assert_eq!(c.coordinator.as_deref(), Some("https://c:1"));
        assert_eq!(c.cert, Some(PathBuf::from("/etc/drover/alice.crt")));
        assert_eq!(c.key, Some(PathBuf::from("/abs/alice.key")));
        assert_eq!(c.ca, None);
    }

    #[test]
    fn malformed_files_name_the_file_and_the_key() {
        let path = Path::new("/etc/drover/config.toml");
        let e = CliConfig::parse(path, "coordinator = \"https://c:1\"\ncrt = \"a\"\n").expect_err("unknown key");
        assert_eq!(e.code(), codes::DATA);
        let msg = e.to_string();
        assert!(msg.contains("/etc/drover/config.toml") && msg.contains("crt") && msg.contains("line 2"), "{msg}");
        let e = CliConfig::parse(path, "coordinator = 3\n").expect_err("not a string");
        assert!(e.to_string().contains("coordinator") || e.to_string().contains("string"), "{e}");
        assert_eq!(CliConfig::parse(path, "cert = \"\"\n").expect_err("empty").code(), codes::DATA);
        assert_eq!(CliConfig::parse(path, "[[[").expect_err("not toml").code(), codes::DATA);
    }

    #[test]
    fn an_explicit_file_must_exist_and_the_default_is_optional() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("nope.toml");
        let e = CliConfig::load(Some(&missing), None).expect_err("missing");
        assert_eq!(e.code(), codes::NO_INPUT);
        assert!(CliConfig::load(None, Some(&missing)).expect("fine").is_none());
        std::fs::write(&missing, "ca = \"ca.crt\"\n").expect("write");
        let (path, c) = CliConfig::load(None, Some(&missing)).expect("reads").expect("present");
        assert_eq!((path, c.ca), (missing.clone(), Some(dir.path().join("ca.crt"))));
    }

    #[test]
    fn flags_and_environment_win_over_the_file() {
        let file = CliConfig { coordinator: Some("https://file:1".into()), cert: Some("/f/c".into()), key: Some("/f/k".into()), ca: None };
        let (mut url, mut cert, mut key, mut ca) = (Some("https://flag:1".to_owned()), None, Some(PathBuf::from("/flag/k")), None);
        file.fill(&mut url, &mut cert, &mut key, &mut ca);
        assert_eq!(url.as_deref(), Some("https://flag:1"));
        assert_eq!(cert, Some(PathBuf::from("/f/c")));
        assert_eq!(key, Some(PathBuf::from("/flag/k")));
        assert_eq!(ca, None);
        let mut none = None;
        CliConfig::default().fill(&mut none, &mut cert, &mut key, &mut ca);
        assert_eq!(none, None);
    }
}
