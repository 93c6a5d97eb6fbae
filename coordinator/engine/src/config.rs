//! `coordinator.toml`: parsed once at start, unknown keys refused, every error naming the
//! file and the key.
//!
//! ```toml
//! listen = "0.0.0.0:8443"
//! state_dir = "/var/lib/drover-coordinator"
//! public_urls = ["https://coordinator.example:8443"]
//! trust_file = "/etc/drover/trust.json"      # the CI trust roots enrolling agents receive
//! agent_binary = "/usr/lib/drover/drover-agent"  # served to bootstrap scripts
//! agent_package = "/srv/drover/drover-agent_0.1.0-1_amd64.deb"  # optional: dpkg hosts install it
//! releases_dir = "/var/lib/drover/releases"  # optional: one release directory per entry
//! releases_poll_secs = 10
//!
//! [enrollment]
//! token_ttl_secs = 7200
//! max_agent_downloads = 8    # agent downloads served at once; more are answered 503 + Retry-After
//!
//! [agent]
//! long_poll_secs = 55
//!
//! [hosts]
//! offline_after_secs = 180   # an active host silent this long becomes `offline`
//!
//! [rollouts]
//! interval_secs = 30           # the executor plans at least this often
//! debounce_ms = 500            # triggers arriving within this window collapse into one tick
//! confirm_window_secs = 120    # an agent confirms a switch within this (intent field)
//! confirm_deadline_secs = 1800 # a host still Activating this long after dispatch is Reverted
//! retention_secs = 604800      # finished rollouts are Pruned after this
//!
//! [secrets]                    # where MAAS tokens and power credentials live (the store keeps paths)
//! backend = "file"             # "file" (0600 files, one coordinator) | "vault" (KV v2)
//! dir = "/var/lib/drover-coordinator/secrets"  # file backend; default <state_dir>/secrets
//!
//! [secrets.vault]              # backend = "vault"
//! addr = "https://vault.example:8200"
//! ca_file = "/etc/drover/vault-ca.pem"  # required with https://
//! mount = "secret"             # the KV v2 mount
//! prefix = "drover"            # secrets live at <mount>/data/<prefix>/<path>
//! token_file = "/run/drover/vault-token"  # read at each call; or the AppRole pair:
//! # approle_role_id_file = "/etc/drover/vault-role-id"
//! # approle_secret_id_file = "/etc/drover/vault-secret-id"
//! timeout_secs = 10            # total, per call
//! connect_timeout_secs = 10
//! allow_insecure_http = false  # true allows an http:// addr (test servers only)
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// `[connections]` is the transport's, the crate `drover-http`.
pub use drover_http::config::{ConnectionsConfig, Http1Stack};
/// `[secrets]` is the crate `drover-secrets`' (the file or Vault backend and its settings).
pub use drover_secrets::{SecretsBackend, SecretsConfig, VaultConfig};

/// Why the configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read (the OS error is the source: printed once, after this).
    #[error("{file}: cannot read")]
    Read {
        /// The file.
        file: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// TOML syntax, an unknown key, a wrong type: `FILE:LINE:COL: key `K`: message`, without
    /// the key for a syntax error (whose key is the document, `.`).
    #[error("{file}{}: {}{message}", drover_proto::text::at_line_col(*at), drover_proto::text::key_prefix(key))]
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
    #[error("{file}: key `{key}`: {message}")]
    Invalid {
        /// The file.
        file: PathBuf,
        /// The dotted key.
        key: &'static str,
        /// What is wrong.
        message: String,
    },
}

/// Enrollment settings.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnrollmentConfig {
    /// How long a one-time enrollment token stays valid.
    #[serde(default = "default_token_ttl")]
    pub token_ttl_secs: u64,
    /// Downloads of the agent binary (and, apart, of the agent package) served at once;
    /// more are answered 503 with `Retry-After` ([`crate::agent_download`]).
    #[serde(default = "default_max_agent_downloads")]
    pub max_agent_downloads: usize,
}

impl Default for EnrollmentConfig {
    fn default() -> Self {
        EnrollmentConfig { token_ttl_secs: default_token_ttl(), max_agent_downloads: default_max_agent_downloads() }
    }
}

fn default_max_agent_downloads() -> usize {
    crate::agent_download::DEFAULT_MAX_DOWNLOADS
}

/// Agent-facing settings.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// The longest a check-in is held open waiting for work.
    #[serde(default = "default_long_poll")]
    pub long_poll_secs: u64,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig { long_poll_secs: default_long_poll() }
    }
}

/// Host lifecycle settings.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostsConfig {
    /// How long an `active` host may go without a check-in before it is marked `offline`.
    #[serde(default = "default_offline_after")]
    pub offline_after_secs: u64,
}

impl Default for HostsConfig {
    fn default() -> Self {
        HostsConfig { offline_after_secs: default_offline_after() }
    }
}

/// Rollout executor settings.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RolloutsConfig {
    /// The longest the executor goes without planning (RFC-0002 §6: periodic, default 30 s).
    #[serde(default = "default_interval")]
    pub interval_secs: u64,
    /// Triggers arriving within this window collapse into one tick (RFC-0002 §6: 500 ms).
    #[serde(default = "default_debounce")]
    pub debounce_ms: u64,
    /// The confirm window written into every intent: the agent confirms a live switch
    /// within it or rolls back.
    #[serde(default = "default_confirm_window")]
    pub confirm_window_secs: u64,
    /// A host still `Activating` this long after its dispatch is `Reverted`, and the
    /// coordinator refuses its confirmation from then on (the agent rolls back). Covers
    /// fetching the closure, the switch and the confirm window.
    #[serde(default = "default_confirm_deadline")]
    pub confirm_deadline_secs: u64,
    /// Finished rollouts are `Pruned` from the planner's view after this long.
    #[serde(default = "default_retention")]
    pub retention_secs: u64,
}

impl Default for RolloutsConfig {
    fn default() -> Self {
        RolloutsConfig {
            interval_secs: default_interval(),
            debounce_ms: default_debounce(),
            confirm_window_secs: default_confirm_window(),
            confirm_deadline_secs: default_confirm_deadline(),
            retention_secs: default_retention(),
        }
    }
}

/// Coordinator jobs (soft reset, storage cleanup, decommission, on-demand maintenance).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobsConfig {
    /// Attempts per stage before a job stops for an operator (`failed_retryable`).
    #[serde(default = "default_job_attempts")]
    pub max_attempts: u32,
    /// Lifetime of each task a job issues (the agent refuses it after).
    #[serde(default = "default_job_task_ttl")]
    pub task_ttl_secs: u64,
    /// The most hosts one maintenance request may list (a request over it is refused whole).
    #[serde(default = "default_max_hosts_per_request")]
    pub max_hosts_per_request: usize,
    /// Most power shelves one `SetPowerShelfMaintenance` request may name (the seed's
    /// `max_find_by_ids`); a longer list is refused whole.
    #[serde(default = "default_max_shelves_per_request")]
    pub max_shelves_per_request: usize,
    /// `node.drain` gives up after this long.
    #[serde(default = "default_drain_timeout")]
    pub drain_timeout_secs: u64,
    /// GPU vendor for `node.gpu_scrub`: auto | nvidia | amd.
    #[serde(default)]
    pub gpu_vendor: drover_proto::task::GpuVendor,
    /// What a scrub does about compute processes still running: refuse | stop-tenant.
    #[serde(default)]
    pub compute_processes: drover_proto::task::ComputeProcessPolicy,
    /// Scrub verification threshold: MiB a GPU may still use.
    #[serde(default = "default_memory_threshold")]
    pub memory_used_threshold_mib: u64,
    /// Run `dcgmi diag -r N` after a scrub (1–4), when set.
    #[serde(default)]
    pub dcgm_diag_level: Option<u8>,
    /// `node.validate_clean` also checks GPU allocations and memory.
    #[serde(default = "default_true")]
    pub validate_check_gpu: bool,
    /// A decommissioned host's agent also deletes its state dir.
    #[serde(default = "default_true")]
    pub uninstall_purge_state: bool,
    /// Directory of per-host MAAS machine credentials for `hw_sync_reseed`:
    /// `<hostname>.toml` with `maas_url`, `system_id`, `consumer_key`, `token_key`,
    /// `token_secret` (keep it 0600; the secrets never reach the store but in the signed task,
    /// which is erased when the result arrives).
    #[serde(default)]
    pub maas_creds_dir: Option<PathBuf>,
    /// The scheduler's webhook the `force_release` stage of a full decommission POSTs to:
    /// `{"event":"host.allocations_query",hostId,hostname,jobId}` answered by 2xx
    /// `{"allocations": N | [...]}`, and with `forceRelease` first the release notice
    /// `{"event":"host.force_release",hostId,hostname,jobId,reason}`. Unset: a decommission
    /// with `forceRelease` stops for an operator (`configuration`), one without passes the
    /// stage (Drover cannot know).
    #[serde(default)]
    pub scheduler_webhook_url: Option<String>,
    /// CA certificate (PEM) the webhook's HTTPS server is verified against.
    #[serde(default)]
    pub scheduler_webhook_ca: Option<PathBuf>,
    /// `force_release` asks the scheduler again at most this often while allocations remain
    /// (`max_attempts` asks in all, then an operator is needed).
    #[serde(default = "default_scheduler_poll")]
    pub scheduler_poll_secs: u64,
}

impl Default for JobsConfig {
    fn default() -> Self {
        JobsConfig {
            max_attempts: default_job_attempts(),
            task_ttl_secs: default_job_task_ttl(),
            max_hosts_per_request: default_max_hosts_per_request(),
            max_shelves_per_request: default_max_shelves_per_request(),
            drain_timeout_secs: default_drain_timeout(),
            gpu_vendor: Default::default(),
            compute_processes: Default::default(),
            memory_used_threshold_mib: default_memory_threshold(),
            dcgm_diag_level: None,
            validate_check_gpu: true,
            uninstall_purge_state: true,
            maas_creds_dir: None,
            scheduler_webhook_url: None,
            scheduler_webhook_ca: None,
            scheduler_poll_secs: default_scheduler_poll(),
        }
    }
}

/// `[devices]`: the rack device controllers (power shelves, racks) and their BMC calls.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DevicesConfig {
    /// How often the controllers tick (milliseconds); each tick moves a device at most one
    /// state. 0 turns the controllers off.
    #[serde(default = "default_devices_tick_ms")]
    pub tick_ms: u64,
    /// Bound on each Redfish request (seconds).
    #[serde(default = "default_devices_request_timeout")]
    pub request_timeout_secs: u64,
    /// Bound on a power change reaching its state on one device (seconds); past it the
    /// operation fails naming the device.
    #[serde(default = "default_devices_converge_timeout")]
    pub converge_timeout_secs: u64,
    /// Pause between two reads of a changing `PowerState` (milliseconds).
    #[serde(default = "default_devices_poll_ms")]
    pub poll_ms: u64,
}

fn default_devices_tick_ms() -> u64 {
    1000
}
fn default_devices_request_timeout() -> u64 {
    10
}
fn default_devices_converge_timeout() -> u64 {
    120
}
fn default_devices_poll_ms() -> u64 {
    1000
}

impl Default for DevicesConfig {
    fn default() -> Self {
        DevicesConfig {
            tick_ms: default_devices_tick_ms(),
            request_timeout_secs: default_devices_request_timeout(),
            converge_timeout_secs: default_devices_converge_timeout(),
            poll_ms: default_devices_poll_ms(),
        }
    }
}

/// `[maas]`: how MAAS workflows (onboarding, reimage, decommission) poll and call MAAS.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaasConfig {
    /// How often running MAAS workflows look at MAAS again (milliseconds).
    #[serde(default = "default_maas_poll_ms")]
    pub poll_ms: u64,
    /// Bound on each MAAS call (seconds).
    #[serde(default = "default_maas_call_timeout")]
    pub call_timeout_secs: u64,
    /// How often each site's drift reconciler lists MAAS's machines (seconds; each wait is
    /// jittered by up to a tenth either way so sites do not pass in lockstep). 0 turns the
    /// periodic passes off; passes on demand still run.
    #[serde(default = "default_reconcile_interval")]
    pub reconcile_interval_secs: u64,
    /// Bound on one reconciler pass over a site, MAAS's listing and the store's writes
    /// included (seconds).
    #[serde(default = "default_reconcile_timeout")]
    pub reconcile_timeout_secs: u64,
    /// Most store changes one reconciler transaction writes.
    #[serde(default = "default_reconcile_batch")]
    pub reconcile_batch: usize,
}

fn default_reconcile_interval() -> u64 {
    300
}

fn default_reconcile_timeout() -> u64 {
    120
}

fn default_reconcile_batch() -> usize {
    500
}

fn default_maas_poll_ms() -> u64 {
    5000
}

fn default_maas_call_timeout() -> u64 {
    30
}

impl Default for MaasConfig {
    fn default() -> Self {
        MaasConfig {
            poll_ms: default_maas_poll_ms(),
            call_timeout_secs: default_maas_call_timeout(),
            reconcile_interval_secs: default_reconcile_interval(),
            reconcile_timeout_secs: default_reconcile_timeout(),
            reconcile_batch: default_reconcile_batch(),
        }
    }
}

fn default_job_attempts() -> u32 {
    3
}

fn default_scheduler_poll() -> u64 {
    15
}

fn default_job_task_ttl() -> u64 {
    3600
}

fn default_max_shelves_per_request() -> usize {
    100
}

fn default_max_hosts_per_request() -> usize {
    500
}

fn default_drain_timeout() -> u64 {
    900
}

fn default_memory_threshold() -> u64 {
    64
}

fn default_true() -> bool {
    true
}

fn default_interval() -> u64 {
    30
}

fn default_debounce() -> u64 {
    500
}

fn default_confirm_window() -> u64 {
    120
}

fn default_confirm_deadline() -> u64 {
    1800
}

fn default_retention() -> u64 {
    7 * 86_400
}

fn default_offline_after() -> u64 {
    180
}

fn default_token_ttl() -> u64 {
    2 * 3600
}

fn default_long_poll() -> u64 {
    55
}

fn default_releases_poll() -> u64 {
    10
}

/// The whole configuration.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Address to listen on (TLS 1.3 only).
    pub listen: SocketAddr,
    /// The state dir `drover-coordinator init` made.
    pub state_dir: PathBuf,
    /// URLs agents reach this coordinator at (first one goes into bootstrap commands).
    pub public_urls: Vec<String>,
    /// The CI trust roots (`trust.json`) handed to enrolling agents.
    pub trust_file: PathBuf,
    /// The agent binary bootstrap scripts install.
    pub agent_binary: PathBuf,
    /// The `drover-agent` Debian package (`packaging/deb/build-debs.sh`), if any: a bootstrap
    /// script on a host with `dpkg` installs it instead of the bare binary.
    #[serde(default)]
    pub agent_package: Option<PathBuf>,
    /// Enrollment.
    #[serde(default)]
    pub enrollment: EnrollmentConfig,
    /// Agents.
    #[serde(default)]
    pub agent: AgentConfig,
    /// Host lifecycle.
    #[serde(default)]
    pub hosts: HostsConfig,
    /// The listener's connection bounds.
    #[serde(default)]
    pub connections: ConnectionsConfig,
    /// The rollout executor.
    #[serde(default)]
    pub rollouts: RolloutsConfig,
    /// Coordinator jobs.
    #[serde(default)]
    pub jobs: JobsConfig,
    /// A directory of release directories (each one as `drover release` writes it) that is
    /// polled and published from, through the same verification as `POST /v1/releases`.
    #[serde(default)]
    pub releases_dir: Option<PathBuf>,
    /// How often `releases_dir` is polled.
    #[serde(default = "default_releases_poll")]
    pub releases_poll_secs: u64,
    /// Where secrets live.
    #[serde(default)]
    pub secrets: SecretsConfig,
    /// MAAS workflows.
    #[serde(default)]
    pub maas: MaasConfig,
    /// Rack device controllers.
    #[serde(default)]
    pub devices: DevicesConfig,
    /// The database (`[store]`, see [`crate::store_config`]).
    #[serde(default)]
    pub store: crate::store_config::StoreConfig,
}

impl Config {
    /// Reads and validates a configuration file.
    pub fn load(file: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(file).map_err(|source| ConfigError::Read { file: file.to_owned(), source })?;
        Self::parse(file, &text)
    }

    /// Parses and validates configuration text; `file` is only for messages.
    pub fn parse(file: &Path, text: &str) -> Result<Config, ConfigError> {
        let de = toml::Deserializer::new(text);
        let config: Config = serde_path_to_error::deserialize(de).map_err(|e| {
            let key = e.path().to_string();
            let e = e.into_inner();
            let at = e.span().map(|span| drover_proto::text::line_col(text, span.start));
            ConfigError::Parse { file: file.to_owned(), key, message: drover_proto::text::one_line(e.message()), at }
        })?;
        let invalid = |key, message: String| ConfigError::Invalid { file: file.to_owned(), key, message };
        if config.public_urls.is_empty() {
            return Err(invalid("public_urls", "at least one https:// URL agents can reach is required".to_owned()));
        }
        for url in &config.public_urls {
            // These URLs are interpolated into the bootstrap command and the agent's TOML, so
            // the alphabet is closed: host, port and path characters only.
            let ok = drover_proto::enroll::is_command_safe_url(url);
            if !ok {
                return Err(invalid(
                    "public_urls",
                    format!("{url:?} must be https://HOST[:PORT][/PATH] (letters, digits, . - _ : [ ] /; no trailing slash)"),
                ));
            }
        }
        if config.enrollment.token_ttl_secs == 0 || config.enrollment.token_ttl_secs > 7 * 86_400 {
            return Err(invalid("enrollment.token_ttl_secs", "must be between 1 second and 7 days".to_owned()));
        }
        if !(1..=1024).contains(&config.enrollment.max_agent_downloads) {
            return Err(invalid("enrollment.max_agent_downloads", "must be between 1 and 1024".to_owned()));
        }
        let jobs = &config.jobs;
        if !(1..=20).contains(&jobs.max_attempts) {
            return Err(invalid("jobs.max_attempts", "must be between 1 and 20".to_owned()));
        }
        if jobs.task_ttl_secs == 0 || jobs.task_ttl_secs > 7 * 86_400 {
            return Err(invalid("jobs.task_ttl_secs", "must be between 1 second and 7 days".to_owned()));
        }
        if !(1..=10_000).contains(&jobs.max_shelves_per_request) {
            return Err(invalid("jobs.max_shelves_per_request", "must be between 1 and 10000".to_owned()));
        }
        if jobs.max_hosts_per_request == 0 || jobs.max_hosts_per_request > 100_000 {
            return Err(invalid("jobs.max_hosts_per_request", "must be between 1 and 100000".to_owned()));
        }
        if jobs.dcgm_diag_level.is_some_and(|l| !(1..=4).contains(&l)) {
            return Err(invalid("jobs.dcgm_diag_level", "must be 1, 2, 3 or 4".to_owned()));
        }
        if !(50..=600_000).contains(&config.maas.poll_ms) {
            return Err(invalid("maas.poll_ms", "must be between 50 and 600000 milliseconds".to_owned()));
        }
        if !(1..=600).contains(&config.maas.call_timeout_secs) {
            return Err(invalid("maas.call_timeout_secs", "must be between 1 and 600 seconds".to_owned()));
        }
        if config.maas.reconcile_interval_secs > 86_400 {
            return Err(invalid("maas.reconcile_interval_secs", "must be at most 86400 seconds (0 turns periodic passes off)".to_owned()));
        }
        if !(1..=3600).contains(&config.maas.reconcile_timeout_secs) {
            return Err(invalid("maas.reconcile_timeout_secs", "must be between 1 and 3600 seconds".to_owned()));
        }
        if !(1..=10_000).contains(&config.maas.reconcile_batch) {
            return Err(invalid("maas.reconcile_batch", "must be between 1 and 10000 changes".to_owned()));
        }
        let c = &config.connections;
        if !(16..=1_000_000).contains(&c.max_open) {
            return Err(invalid("connections.max_open", "must be between 16 and 1000000".to_owned()));
        }
        if !(1..=c.max_open).contains(&c.max_handshakes) {
            return Err(invalid("connections.max_handshakes", "must be between 1 and connections.max_open".to_owned()));
        }
        if !(1..=c.max_open).contains(&c.max_unauthenticated) {
            return Err(invalid("connections.max_unauthenticated", "must be between 1 and connections.max_open".to_owned()));
        }
        if !(1..=c.max_unauthenticated.max(c.max_handshakes)).contains(&c.max_unauthenticated_per_source) {
            return Err(invalid(
                "connections.max_unauthenticated_per_source",
                "must be between 1 and the larger of max_unauthenticated and max_handshakes".to_owned(),
            ));
        }
        if !(1..=c.max_handshakes).contains(&c.max_handshakes_per_source) {
            return Err(invalid("connections.max_handshakes_per_source", "must be between 1 and connections.max_handshakes".to_owned()));
        }
        if c.anonymous_bytes_per_sec < (64 << 10) {
            return Err(invalid("connections.anonymous_bytes_per_sec", "must be at least 65536 (64 KiB a second)".to_owned()));
        }
        if c.anonymous_requests_per_sec == 0 || c.anonymous_burst == 0 {
            let key = if c.anonymous_burst == 0 { "connections.anonymous_burst" } else { "connections.anonymous_requests_per_sec" };
            return Err(invalid(key, "must be at least 1".to_owned()));
        }
        if !(crate::api::MAX_ANONYMOUS_BODY_BYTES..=(1 << 30)).contains(&c.anonymous_body_budget_bytes) {
            return Err(invalid(
                "connections.anonymous_body_budget_bytes",
                format!("must be between {} (one enrollment body) and 1073741824", crate::api::MAX_ANONYMOUS_BODY_BYTES),
            ));
        }
        for (key, v) in [
            ("connections.handshake_secs", c.handshake_secs),
            ("connections.first_request_secs", c.first_request_secs),
            ("connections.unauthenticated_idle_secs", c.unauthenticated_idle_secs),
        ] {
            if !(1..=300).contains(&v) {
                return Err(invalid(key, "must be between 1 and 300 seconds".to_owned()));
            }
        }
        let d = &config.devices;
        if d.tick_ms > 3_600_000 {
            return Err(invalid("devices.tick_ms", "must be at most 3600000 milliseconds (0 turns the controllers off)".to_owned()));
        }
        if !(1..=600).contains(&d.request_timeout_secs) {
            return Err(invalid("devices.request_timeout_secs", "must be between 1 and 600 seconds".to_owned()));
        }
        if !(1..=3600).contains(&d.converge_timeout_secs) {
            return Err(invalid("devices.converge_timeout_secs", "must be between 1 and 3600 seconds".to_owned()));
        }
        if !(10..=60_000).contains(&d.poll_ms) {
            return Err(invalid("devices.poll_ms", "must be between 10 and 60000 milliseconds".to_owned()));
        }
        if !(1..=3600).contains(&jobs.scheduler_poll_secs) {
            return Err(invalid("jobs.scheduler_poll_secs", "must be between 1 and 3600 seconds".to_owned()));
        }
        if let Some(url) = &jobs.scheduler_webhook_url
            && !(url.starts_with("https://")
                || url.starts_with("http://127.")
                || url.starts_with("http://[::1]")
                || url.starts_with("http://localhost"))
        {
            return Err(invalid("jobs.scheduler_webhook_url", format!("{url:?} must be https:// (plain http only on loopback)")));
        }
        if !(1..=300).contains(&config.agent.long_poll_secs) {
            return Err(invalid("agent.long_poll_secs", "must be between 1 and 300 seconds".to_owned()));
        }
        // A healthy agent's check-in is recorded when it arrives and then held for up to
        // long_poll_secs: a shorter silence threshold would flap healthy hosts offline.
        let offline_after = config.hosts.offline_after_secs;
        if offline_after <= config.agent.long_poll_secs || offline_after > 7 * 86_400 {
            return Err(invalid(
                "hosts.offline_after_secs",
                format!(
                    "must be more than agent.long_poll_secs ({}) and at most 7 days: a host held in a long-poll must not look silent",
                    config.agent.long_poll_secs
                ),
            ));
        }
        let r = &config.rollouts;
        if !(1..=3600).contains(&r.interval_secs) {
            return Err(invalid("rollouts.interval_secs", "must be between 1 and 3600 seconds".to_owned()));
        }
        if r.debounce_ms > 10_000 {
            return Err(invalid("rollouts.debounce_ms", "must be at most 10000 ms".to_owned()));
        }
        if !(10..=3600).contains(&r.confirm_window_secs) {
            return Err(invalid("rollouts.confirm_window_secs", "must be between 10 and 3600 seconds".to_owned()));
        }
        // The deadline runs from dispatch; the window from the switch, which comes later.
        if r.confirm_deadline_secs <= r.confirm_window_secs || r.confirm_deadline_secs > 7 * 86_400 {
            return Err(invalid(
                "rollouts.confirm_deadline_secs",
                format!("must be more than rollouts.confirm_window_secs ({}) and at most 7 days", r.confirm_window_secs),
            ));
        }
        if !(60..=366 * 86_400).contains(&r.retention_secs) {
            return Err(invalid("rollouts.retention_secs", "must be between 60 seconds and 366 days".to_owned()));
        }
        if !(1..=3600).contains(&config.releases_poll_secs) {
            return Err(invalid("releases_poll_secs", "must be between 1 and 3600 seconds".to_owned()));
        }
        let secrets = &config.secrets;
        if secrets.dir.as_ref().is_some_and(|d| d.as_os_str().is_empty()) {
            return Err(invalid("secrets.dir", "must not be empty".to_owned()));
        }
        match (&secrets.backend, &secrets.vault) {
            (SecretsBackend::Vault, None) => {
                return Err(invalid("secrets.vault", "required when secrets.backend = \"vault\"".to_owned()));
            }
            (_, Some(vault)) => crate::secrets::vault::validate(vault).map_err(|(key, message)| invalid(key, message))?,
            (SecretsBackend::File, None) => {}
        }
        crate::store_config::validate(&config.store).map_err(|(key, message)| invalid(key, message))?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
listen = "127.0.0.1:8443"
state_dir = "/var/lib/drover-coordinator"
public_urls = ["https://coord.example:8443"]
trust_file = "/etc/drover/trust.json"
agent_binary = "/usr/lib/drover/drover-agent"
[enrollment]
token_ttl_secs = 3600
"#;

    fn err(text: &str) -> String {
        Config::parse(Path::new("coordinator.toml"), text).expect_err("refused").to_string()
    }

    #[test]
    fn a_good_file_parses_with_defaults() {
        let c = Config::parse(Path::new("coordinator.toml"), GOOD).expect("valid");
        assert_eq!(c.enrollment.token_ttl_secs, 3600);
        assert_eq!(c.agent.long_poll_secs, 55);
        assert_eq!(c.hosts.offline_after_secs, 180);
        assert_eq!((c.releases_dir.as_deref(), c.releases_poll_secs), (None, 10));
    }

    #[test]
    fn unknown_keys_are_refused_naming_file_and_key() {
        let e = err(&GOOD.replace("token_ttl_secs = 3600", "token_ttl_secs = 3600\ntoken_tll = 5"));
        // Line 9: GOOD opens with a blank line; the misspelt key follows token_ttl_secs.
        assert!(e.starts_with("coordinator.toml:9:1: key `enrollment.token_tll`: unknown field"), "{e}");
        let e = err(&format!("{GOOD}\nlisten_port = 1\n"));
        assert!(e.contains("listen_port"), "{e}");
    }

    #[test]
    fn wrong_types_and_values_name_the_key() {
        let e = err(&GOOD.replace("\"127.0.0.1:8443\"", "8443"));
        assert!(e.contains("key `listen`"), "{e}");
        let e = err(&GOOD.replace("https://coord.example:8443", "http://coord.example"));
        assert!(e.contains("key `public_urls`"), "{e}");
        for injected in ["https://x'; reboot; '", "https://x y", "https://x$(id)", "https://x/"] {
            let e = err(&GOOD.replace("https://coord.example:8443", injected));
            assert!(e.contains("key `public_urls`"), "{injected}: {e}");
        }
        let e = err(&GOOD.replace("token_ttl_secs = 3600", "token_ttl_secs = 0"));
        assert!(e.contains("key `enrollment.token_ttl_secs`"), "{e}");
        let e = err(&format!("releases_poll_secs = 0\n{GOOD}"));
        assert!(e.contains("key `releases_poll_secs`"), "{e}");
        let e = err(&format!("{GOOD}\n[hosts]\noffline_after_secs = 55\n"));
        assert!(e.contains("key `hosts.offline_after_secs`"), "{e}");
        let e = err(&format!("{GOOD}\n[hosts]\noffline_after = 600\n"));
        assert!(e.contains("key `hosts"), "{e}");
        let c = Config::parse(Path::new("coordinator.toml"), &format!("{GOOD}\n[hosts]\noffline_after_secs = 600\n")).expect("valid");
        assert_eq!(c.hosts.offline_after_secs, 600);
        let e = err(&format!("{GOOD}\n[rollouts]\nconfirm_deadline_secs = 60\n"));
        assert!(e.contains("key `rollouts.confirm_deadline_secs`"), "{e}");
        let e = err(&format!("{GOOD}\n[rollouts]\ndebounce = 5\n"));
        assert!(e.contains("key `rollouts"), "{e}");
        let c = Config::parse(Path::new("coordinator.toml"), GOOD).expect("valid");
        assert_eq!((c.rollouts.interval_secs, c.rollouts.debounce_ms), (30, 500));
        // A syntax error: where the parser stopped, on one line, without the document's key.
        let e = err("listen = ");
        assert!(e.starts_with("coordinator.toml:1:10: "), "{e}");
        assert!(!e.contains('\n') && !e.contains("key `.`"), "{e}");
    }

    #[test]
    fn store_defaults_to_sqlite_and_postgres_settings_are_checked_naming_the_key() {
        use crate::store_config::StoreBackend;
        let c = Config::parse(Path::new("c.toml"), GOOD).expect("parses");
        assert_eq!(c.store.backend, StoreBackend::Sqlite);
        let pg =
            format!("{GOOD}\n[store]\nbackend = \"postgres\"\nurl = \"postgres://drover@db:5432/drover\"\npassword_file = \"/run/pg\"\n");
        let c = Config::parse(Path::new("c.toml"), &pg).expect("parses");
        assert_eq!(c.store.backend, StoreBackend::Postgres);
        assert_eq!(c.store.pool_size, 16);
        for (extra, key) in [
            ("backend = \"postgres\"\n", "key `store.url`"),
            ("url = \"postgres://x@y/z\"\n", "key `store.url`"),
            ("backend = \"mysql\"\n", "key `store.backend`"),
            (
                "backend = \"postgres\"\nurl = \"postgres://x@y/z\"\npassword_file = \"/a\"\npassword_secret = \"b\"\n",
                "key `store.password_secret`",
            ),
            ("backend = \"postgres\"\nurl = \"postgres://x@y/z\"\npassword_secret = \"../etc\"\n", "key `store.password_secret`"),
            ("pool_size = 0\n", "key `store.pool_size`"),
            ("lease_ms = 10\n", "key `store.lease_ms`"),
            ("replica = \"a b\"\n", "key `store.replica`"),
            ("password = \"hunter2\"\n", "store.password"),
        ] {
            let e = err(&format!("{GOOD}\n[store]\n{extra}"));
            assert!(e.contains(key), "{extra:?}: {e}");
            assert!(!e.contains("hunter2"), "{e}");
        }
    }

    #[test]
    fn secrets_default_to_files_and_vault_is_checked_naming_the_key() {
        let c = Config::parse(Path::new("coordinator.toml"), GOOD).expect("valid");
        assert_eq!(c.secrets, SecretsConfig::default());
        assert_eq!(c.secrets.backend, SecretsBackend::File);
        let vault = "[secrets]\nbackend = \"vault\"\n[secrets.vault]\naddr = \"https://vault.example:8200\"\nca_file = \"/etc/ca.pem\"\ntoken_file = \"/run/token\"\n";
        let c = Config::parse(Path::new("coordinator.toml"), &format!("{GOOD}\n{vault}")).expect("valid");
        let v = c.secrets.vault.expect("vault");
        assert_eq!((v.mount.as_str(), v.prefix.as_str(), v.timeout_secs, v.allow_insecure_http), ("secret", "drover", 10, false));
        let e = err(&format!("{GOOD}\n[secrets]\nbackend = \"vault\"\n"));
        assert!(e.contains("key `secrets.vault`"), "{e}");
        let e = err(&format!("{GOOD}\n{}", vault.replace("https://", "http://")));
        assert!(e.contains("key `secrets.vault.addr`") && e.contains("allow_insecure_http"), "{e}");
        let e = err(&format!("{GOOD}\n{}", vault.replace("token_file", "approle_role_id_file")));
        assert!(e.contains("key `secrets.vault.approle_secret_id_file`"), "{e}");
        let e = err(&format!("{GOOD}\n{vault}prefix = \"../up\"\n"));
        assert!(e.contains("key `secrets.vault.prefix`"), "{e}");
        let e = err(&format!("{GOOD}\n{vault}token = \"s.x\"\n"));
        assert!(e.contains("key `secrets.vault") && e.contains("token"), "{e}");
        let e = err(&format!("{GOOD}\n[secrets]\nbackend = \"s3\"\n"));
        assert!(e.contains("key `secrets.backend`"), "{e}");
    }
}
