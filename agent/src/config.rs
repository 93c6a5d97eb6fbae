//! `agent.toml`: parsed once at start, unknown keys refused, every error naming the file and
//! the key.
//!
//! ```toml
//! coordinator_urls = ["https://coord-1.example:8443", "https://coord-2.example:8443"]
//! state_dir = "/var/lib/drover"
//! ca_file = "/etc/drover/ca.crt"
//!
//! [checkin]                     # optional; defaults shown
//! request_timeout_secs = 330    # above the coordinator's long-poll hold (≤ 300 s)
//! backoff_base_secs = 1
//! backoff_max_secs = 300
//!
//! [activation]                  # optional: see `activation::ActivationSettings`
//! [health]                      # optional: see `health::HealthSettings`
//!
//! [[probes]]                    # optional local probes, always observe-only
//! name = "sshd"
//! kind = "tcp"
//! host = "127.0.0.1"
//! port = 22
//! timeoutSecs = 2
//! ```
//!
//! `coordinator_urls` are tried in order (fail-over on a connection failure); each must be an
//! `https://` URL with a host and nothing after the path. A relative `state_dir` is resolved
//! against the directory holding the configuration file; `ca_file` must be absolute. Later settings (check-in, tasks, probes) are
//! added as new fields, each with a serde default or as an optional table, so existing files
//! keep parsing.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::exit::{ExitStatus, codes};

/// Why the configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{file}: cannot read: {source}", file = file.display())]
    Read {
        /// The file.
        file: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// TOML syntax, an unknown key, a wrong type: `FILE:LINE:COL: key `K`: message`, without
    /// the key for a syntax error (whose key is the document, `.`).
    #[error("{file}{}: {}{message}", drover_proto::text::at_line_col(*at), drover_proto::text::key_prefix(key), file = file.display())]
    Parse {
        /// The file.
        file: PathBuf,
        /// The dotted key path (`.` for the document).
        key: String,
        /// What is wrong.
        message: String,
        /// The line and column the parser stopped at, when it says.
        at: Option<(usize, usize)>,
    },
    /// A value breaks a rule.
    #[error("{file}: key `{key}`: {message}", file = file.display())]
    Invalid {
        /// The file.
        file: PathBuf,
        /// The dotted key.
        key: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The CA file `ca_file` names cannot be read or holds no usable certificate (the agent
    /// main prints only the top error, so the cause is in the message as well as the source).
    #[error("{file}: key `ca_file`: {source}", file = file.display())]
    Ca {
        /// The configuration file.
        file: PathBuf,
        /// Why the CA file is unusable.
        #[source]
        source: drover_client::ClientError,
    },
}

impl ExitStatus for ConfigError {
    fn exit_code(&self) -> u8 {
        match self {
            // Missing or unreadable alike (sysexits: "did not exist or was not readable").
            ConfigError::Read { .. } => codes::NO_INPUT,
            ConfigError::Parse { .. } | ConfigError::Invalid { .. } => codes::DATA,
            // 66 when it is missing or unreadable, 65 when it is not a certificate.
            ConfigError::Ca { source, .. } => source.exit_code(),
        }
    }
}

/// The whole agent configuration.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where to reach the coordinator, tried in order.
    pub coordinator_urls: Vec<String>,
    /// The agent's durable state (key, certificate, trust roots, …); created 0700.
    pub state_dir: PathBuf,
    /// The coordinator CA (PEM): the only root the agent's TLS client trusts.
    pub ca_file: PathBuf,
    /// `[checkin]`: request timeout and backoff of the pull loop.
    #[serde(default)]
    pub checkin: crate::pull::PullSettings,
    /// `[activation]`: the NixOS activation backend.
    #[serde(default)]
    pub activation: crate::activation::ActivationSettings,
    /// `[health]`: what the health report looks at.
    #[serde(default)]
    pub health: crate::health::HealthSettings,
    /// `[[probes]]`: local probes, observe-only whatever they say (only the CI-signed
    /// manifest may define probes that gate a rollout).
    #[serde(default)]
    pub probes: Vec<drover_proto::spec::ProbeSpec>,
    /// The D-Bus address of systemd's bus; the system bus when absent (tests point it at a
    /// private bus).
    #[serde(default)]
    pub systemd_bus: Option<String>,
    /// `[tasks]`: what maintenance tasks may touch (see `tasks::settings`).
    #[serde(default)]
    pub tasks: crate::tasks::TaskSettings,
}

impl Config {
    /// Reads and validates a configuration file.
    pub fn load(file: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(file).map_err(|source| ConfigError::Read { file: file.to_owned(), source })?;
        Self::parse(file, &text)
    }

    /// Parses and validates configuration text; `file` names it in messages and anchors
    /// relative paths.
    pub fn parse(file: &Path, text: &str) -> Result<Config, ConfigError> {
        let de = toml::Deserializer::new(text);
        let mut config: Config = serde_path_to_error::deserialize(de).map_err(|e| {
            let key = e.path().to_string();
            let e = e.into_inner();
            let at = e.span().map(|span| drover_proto::text::line_col(text, span.start));
            ConfigError::Parse { file: file.to_owned(), key, message: drover_proto::text::one_line(e.message()), at }
        })?;
        let invalid = |key, message: String| ConfigError::Invalid { file: file.to_owned(), key, message };
        if config.coordinator_urls.is_empty() {
            return Err(invalid("coordinator_urls", "at least one https:// coordinator URL is required".to_owned()));
        }
        for url in &config.coordinator_urls {
            check_url(url).map_err(|why| invalid("coordinator_urls", format!("{url:?} {why}")))?;
        }
        if config.state_dir.as_os_str().is_empty() {
            return Err(invalid("state_dir", "must not be empty".to_owned()));
        }
        if config.ca_file.as_os_str().is_empty() {
            return Err(invalid("ca_file", "must not be empty".to_owned()));
        }
        // The one root the agent's TLS trusts is named exactly, never found relative to
        // wherever the configuration (or the agent's working directory) happens to be.
        if !config.ca_file.is_absolute() {
            return Err(invalid("ca_file", format!("{} must be an absolute path", config.ca_file.display())));
        }
        let c = &config.checkin;
        if c.request_timeout_secs < 10 || c.request_timeout_secs > 3600 {
            return Err(invalid(
                "checkin.request_timeout_secs",
                "must be between 10 and 3600 seconds (above the coordinator's long-poll hold)".to_owned(),
            ));
        }
        if c.backoff_base_secs == 0 || c.backoff_max_secs < c.backoff_base_secs {
            return Err(invalid(
                "checkin.backoff_max_secs",
                "backoff_base_secs must be at least 1 and backoff_max_secs at least backoff_base_secs".to_owned(),
            ));
        }
        let mut names = std::collections::BTreeSet::new();
        for (i, p) in config.probes.iter().enumerate() {
            if let Err((field, rule)) = p.validate(&format!("probes[{i}]")) {
                return Err(invalid("probes", format!("{field}: {rule}")));
            }
            if !names.insert(p.name.clone()) {
                return Err(invalid("probes", format!("probe name {:?} is used twice", p.name)));
            }
        }
        config.tasks.validate().map_err(|(key, message)| invalid(key, message))?;
        let base = file.parent().unwrap_or(Path::new(""));
        config.state_dir = base.join(&config.state_dir);
        Ok(config)
    }

    /// Reads `ca_file` as every connection does ([`drover_client::tls::load_ca`]): what
    /// `check-config` adds to parsing, so a CA the agent could not use fails there and not
    /// only at the first check-in. `file` is the configuration, for the message.
    pub fn check_ca(&self, file: &Path) -> Result<(), ConfigError> {
        drover_client::tls::load_ca(&self.ca_file).map(drop).map_err(|source| ConfigError::Ca { file: file.to_owned(), source })
    }
}

/// Whether `url` is one the agent may talk to: `https://HOST[:PORT][/PATH]`, no credentials,
/// no query, no fragment.
fn check_url(url: &str) -> Result<(), &'static str> {
    let parsed = reqwest::Url::parse(url).map_err(|_| "is not a URL")?;
    if parsed.scheme() != "https" {
        return Err("is not an https:// URL");
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err("has no host");
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err("must not carry credentials");
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err("must not have a query or fragment");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
coordinator_urls = ["https://coord-1.example:8443", "https://127.0.0.1:9443/"]
state_dir = "/var/lib/drover"
ca_file = "/etc/drover/ca.crt"
"#;

    fn err(text: &str) -> ConfigError {
        Config::parse(Path::new("/etc/drover/agent.toml"), text).expect_err("refused")
    }

    #[test]
    fn a_good_file_parses() {
        let c = Config::parse(Path::new("/etc/drover/agent.toml"), GOOD).expect("valid");
        assert_eq!(c.coordinator_urls.len(), 2);
        assert_eq!(c.state_dir, Path::new("/var/lib/drover"));
        assert_eq!(c.ca_file, Path::new("/etc/drover/ca.crt"));
    }

    #[test]
    fn a_relative_state_dir_is_resolved_against_the_config_directory_and_a_relative_ca_file_refused() {
        let c = Config::parse(Path::new("/srv/agent/agent.toml"), &GOOD.replace("/var/lib/drover", "state")).expect("valid");
        assert_eq!(c.state_dir, Path::new("/srv/agent/state"));
        let e = err(&GOOD.replace("/etc/drover/ca.crt", "ca.crt"));
        assert_eq!(e.exit_code(), codes::DATA);
        let e = e.to_string();
        assert!(e.starts_with("/etc/drover/agent.toml: key `ca_file`: ca.crt must be an absolute path"), "{e}");
    }

    #[test]
    fn an_unknown_key_is_refused_naming_file_and_key() {
        let e = err(&format!("{GOOD}\ncoordinator_url = \"https://x\"\n"));
        assert_eq!(e.exit_code(), codes::DATA);
        let e = e.to_string();
        // Where it is (line 6: GOOD's own lines, a blank one, then the misspelt key) and what.
        assert!(e.starts_with("/etc/drover/agent.toml:6:1: key `coordinator_url`: unknown field"), "{e}");
    }

    #[test]
    fn an_http_url_is_refused_naming_file_and_key() {
        let e = err(&GOOD.replace("https://coord-1.example:8443", "http://coord-1.example:8443")).to_string();
        assert!(e.starts_with("/etc/drover/agent.toml: key `coordinator_urls`"), "{e}");
        assert!(e.contains("http://coord-1.example:8443") && e.contains("https://"), "{e}");
        for bad in ["coord.example", "https://", "https://user:pw@coord.example", "https://coord.example/?a=b", "ftp://x"] {
            let e = err(&GOOD.replace("https://127.0.0.1:9443/", bad)).to_string();
            assert!(e.contains("key `coordinator_urls`"), "{bad}: {e}");
        }
    }

    #[test]
    fn empty_urls_are_refused_naming_file_and_key() {
        let text = GOOD.replace(r#"["https://coord-1.example:8443", "https://127.0.0.1:9443/"]"#, "[]");
        let e = err(&text).to_string();
        assert!(e.starts_with("/etc/drover/agent.toml: key `coordinator_urls`"), "{e}");
    }

    #[test]
    fn missing_keys_wrong_types_and_syntax_errors_name_the_file() {
        let e = err("state_dir = \"/x\"\nca_file = \"/y\"\n").to_string();
        assert!(e.starts_with("/etc/drover/agent.toml:") && e.contains("missing field `coordinator_urls`"), "{e}");
        let e = err(&GOOD.replace("\"/var/lib/drover\"", "7")).to_string();
        assert!(e.contains("key `state_dir`"), "{e}");
        // A syntax error: where the parser stopped, on one line, without the document's key.
        let e = err("ca_file = \"/y\"\ncoordinator_urls = [").to_string();
        assert!(e.starts_with("/etc/drover/agent.toml:2:21: "), "{e}");
        assert!(!e.contains('\n') && !e.contains("key `.`"), "{e}");
    }

    #[test]
    fn a_missing_file_is_no_input() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let e = Config::load(&tmp.path().join("absent.toml")).expect_err("missing");
        assert_eq!(e.exit_code(), codes::NO_INPUT);
        assert!(e.to_string().contains("absent.toml"), "{e}");
    }
}
