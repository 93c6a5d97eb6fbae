//! `node.hw_sync_reseed` (`bare-metal-lifecycle.md` §9.1): rewrite the MAAS hardware-sync
//! credentials and put the hardware-sync timer back to work.
//!
//! Plan ([`plan`], pure): `validate` happens first, before anything is touched — a bad
//! parameter fails the task with one step and nothing written — then
//!
//! 1. `write-creds <path>`: `[tasks].maas_creds_file` (default
//!    `/etc/maas/maas-machine-creds.yml`) in MAAS's own shape
//!    (`reporting: maas: {consumer_key, endpoint: <maas_url>/metadata/status/<system_id>,
//!    token_key, token_secret}`), mode 0600, atomically: a temporary file in the same
//!    directory created 0600 (never chmod-ed after the secret is in it), written, fsync-ed,
//!    renamed over the old file, and the directory fsync-ed;
//! 2. `restart-timer <timer>`: `RestartUnit` over D-Bus, waiting for the job;
//! 3. `start-service <service>`: `StartUnit`, waiting for the job (for the oneshot
//!    `maas_hardware_sync.service` the job ends when the sync ran, failed if it failed);
//! 4. `verify`: the file is a regular file, mode 0600, with exactly the content written
//!    (so every expected key); the timer is `active`; the service did not fail (a oneshot
//!    finished with result `success`, or it still runs).
//!
//! The health report ([`crate::health`]) then shows the creds file and the timer.
//!
//! **Secrets.** The three OAuth values stay wrapped in [`Secret`] until the YAML text is
//! rendered for the file; no step message, step data, log line or error carries them (a
//! validation error names the field, never the value). The values are written by hand as
//! single-quoted YAML scalars (`'` doubled) after validation refuses anything that could
//! bend the structure: `maas_url` must be `http(s)://host[:port][/path]` of plain URL
//! characters (no whitespace, quotes, `#`, `@`, newlines), `system_id` is MAAS's shape
//! (`[a-z0-9]{1,32}`), and a secret is 1–256 printable ASCII characters without spaces.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use drover_proto::report::StepResult;
use drover_proto::task::Secret;
use serde_json::json;

use super::TaskEnv;
use super::steps::{self, Done, Step};
use crate::systemd::dbus::NO_SUCH_UNIT;

/// The creds file's mode.
pub const CREDS_MODE: u32 = 0o600;

/// The task's parameters (borrowed from the task; the secrets stay wrapped).
#[derive(Debug, Clone, Copy)]
pub struct Params<'a> {
    /// MAAS base URL.
    pub maas_url: &'a str,
    /// The machine's system id.
    pub system_id: &'a str,
    /// OAuth consumer key.
    pub consumer_key: &'a Secret,
    /// OAuth token key.
    pub token_key: &'a Secret,
    /// OAuth token secret.
    pub token_secret: &'a Secret,
}

/// One planned step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Write the creds file.
    WriteCreds,
    /// Restart the timer unit.
    RestartTimer(String),
    /// Start the service unit.
    StartService(String),
    /// Check the file, the timer and the service.
    Verify,
}

/// Why the parameters are refused: the field, and never a secret's value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParamsError {
    /// `maas_url` is not `http(s)://host[:port][/path]`.
    #[error("maas_url {url:?} must be http(s)://host[:port][/path]: {why}")]
    MaasUrl {
        /// The URL, truncated.
        url: String,
        /// The part at fault: scheme, host, port, path, too long.
        why: &'static str,
    },
    /// `system_id` is not a MAAS system id.
    #[error("system_id {id:?} is not a MAAS system id ([a-z0-9]{{1,32}})")]
    SystemId {
        /// The id, truncated.
        id: String,
    },
    /// A token part is not plain printable ASCII (its value is not kept).
    #[error("{field} must be 1 to 256 printable ASCII characters without spaces (value not shown)")]
    Secret {
        /// The field.
        field: &'static str,
    },
}

/// Checks the parameters; the error names the field (never a secret's value).
pub fn validate(params: &Params<'_>) -> Result<(), ParamsError> {
    validate_url(params.maas_url)?;
    let id = params.system_id;
    if id.is_empty() || id.len() > 32 || !id.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()) {
        return Err(ParamsError::SystemId { id: truncate(id) });
    }
    for (field, secret) in [("consumer_key", params.consumer_key), ("token_key", params.token_key), ("token_secret", params.token_secret)] {
        let v = secret.expose();
        if v.is_empty() || v.len() > 256 || !v.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ParamsError::Secret { field });
        }
    }
    Ok(())
}

fn truncate(s: &str) -> String {
    s.chars().take(80).collect()
}

/// `http(s)://host[:port][/path]` of plain URL characters.
fn validate_url(url: &str) -> Result<(), ParamsError> {
    let bad = |why: &'static str| Err(ParamsError::MaasUrl { url: truncate(url), why });
    let Some(rest) = url.strip_prefix("https://").or_else(|| url.strip_prefix("http://")) else {
        return bad("scheme");
    };
    if url.len() > 512 {
        return bad("too long");
    }
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let (host, port) = if authority.starts_with('[') {
        match authority.find(']') {
            Some(i) => match &authority[i + 1..] {
                "" => (&authority[..=i], None),
                rest => match rest.strip_prefix(':') {
                    Some(p) => (&authority[..=i], Some(p)),
                    None => return bad("host"),
                },
            },
            None => return bad("host"),
        }
    } else {
        match authority.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    let host_ok = if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        !inner.is_empty() && inner.bytes().all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
    } else {
        !host.is_empty() && host.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
    };
    if !host_ok {
        return bad("host");
    }
    if let Some(p) = port
        && (p.is_empty()
            || p.len() > 5
            || !p.bytes().all(|b| b.is_ascii_digit())
            || p.parse::<u32>().map_or(true, |n| n == 0 || n > 65_535))
    {
        return bad("port");
    }
    if !path.bytes().all(|b| b.is_ascii_alphanumeric() || b"/-._~%".contains(&b)) {
        return bad("path");
    }
    Ok(())
}

/// The status endpoint MAAS's hardware sync reports to.
pub fn endpoint(params: &Params<'_>) -> String {
    format!("{}/metadata/status/{}", params.maas_url.trim_end_matches('/'), params.system_id)
}

/// A single-quoted YAML scalar.
fn quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// The creds file's text (MAAS's `yaml.safe_dump` key order). Holds the secrets: write it
/// to the file and drop it, never log it. Call [`validate`] first.
pub fn render_creds(params: &Params<'_>) -> String {
    format!(
        "reporting:\n  maas:\n    consumer_key: {}\n    endpoint: {}\n    token_key: {}\n    token_secret: {}\n",
        quoted(params.consumer_key.expose()),
        quoted(&endpoint(params)),
        quoted(params.token_key.expose()),
        quoted(params.token_secret.expose()),
    )
}

/// The plan, or why the parameters are refused.
pub fn plan(params: &Params<'_>, settings: &super::TaskSettings) -> Result<Vec<Step<Action>>, ParamsError> {
    validate(params)?;
    Ok(vec![
        Step::new(format!("write-creds {}", settings.maas_creds_file.display()), Action::WriteCreds),
        Step::new(format!("restart-timer {}", settings.hw_sync_timer), Action::RestartTimer(settings.hw_sync_timer.clone())),
        Step::new(format!("start-service {}", settings.hw_sync_service), Action::StartService(settings.hw_sync_service.clone())),
        Step::new("verify", Action::Verify),
    ])
}

/// Writes `bytes` to `path` atomically with mode `mode` (see the module docs).
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    drover_fsio::write_atomic(path, bytes, mode, drover_fsio::Mode::Replace)
}

/// Runs the task.
pub fn run(params: &Params<'_>, env: &TaskEnv<'_>) -> Vec<StepResult> {
    let plan = match plan(params, env.settings) {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(error = %e, "hw_sync_reseed refused");
            return steps::not_planned("validate", e.to_string());
        }
    };
    steps::execute(&plan, |action| run_step(action, params, env))
}

fn run_step(action: &Action, params: &Params<'_>, env: &TaskEnv<'_>) -> Done {
    let path = &env.settings.maas_creds_file;
    match action {
        Action::WriteCreds => {
            let text = render_creds(params);
            let written = write_atomic(path, text.as_bytes(), CREDS_MODE);
            drop(text);
            match written {
                Ok(()) => {
                    tracing::info!(path = %path.display(), "wrote the MAAS hardware-sync credentials");
                    Done::ok("credentials written").with_data(json!({
                        "path": path.display().to_string(),
                        "mode": format!("{CREDS_MODE:04o}"),
                        "endpoint": endpoint(params),
                    }))
                }
                Err(e) => Done::error(format!("cannot write {}: {e}", path.display())),
            }
        }
        Action::RestartTimer(unit) => match env.systemd.restart_unit(unit) {
            Ok(()) => Done::ok(format!("{unit} restarted")),
            Err(e) => Done::error(e.to_string()),
        },
        Action::StartService(unit) => match env.systemd.start_unit(unit) {
            Ok(()) => Done::ok(format!("{unit} started")),
            Err(e) => Done::error(e.to_string()),
        },
        Action::Verify => verify(params, env),
    }
}

fn verify(params: &Params<'_>, env: &TaskEnv<'_>) -> Done {
    let s = env.settings;
    let path = &s.maas_creds_file;
    let mut problems = Vec::new();
    match std::fs::symlink_metadata(path) {
        Ok(m) if !m.file_type().is_file() => problems.push(format!("{} is not a regular file", path.display())),
        Ok(m) => {
            if m.mode() & 0o7777 != CREDS_MODE {
                problems.push(format!("{} has mode {:04o}, not {CREDS_MODE:04o}", path.display(), m.mode() & 0o7777));
            }
            match std::fs::read(path) {
                Ok(bytes) if bytes == render_creds(params).as_bytes() => {}
                Ok(_) => problems.push(format!("{} does not hold the credentials written", path.display())),
                Err(e) => problems.push(format!("cannot read {}: {e}", path.display())),
            }
        }
        Err(e) => problems.push(format!("{}: {e}", path.display())),
    }
    let timer = match env.systemd.unit_status(&s.hw_sync_timer) {
        Ok(Some(st)) if st.is_active() => format!("{}/{}", st.active_state, st.sub_state),
        Ok(Some(st)) => {
            problems.push(format!("{} is {}/{}, not active", s.hw_sync_timer, st.active_state, st.sub_state));
            format!("{}/{}", st.active_state, st.sub_state)
        }
        Ok(None) => {
            problems.push(format!("{}: {NO_SUCH_UNIT}", s.hw_sync_timer));
            "not loaded".to_owned()
        }
        Err(e) => {
            problems.push(e.to_string());
            "unknown".to_owned()
        }
    };
    let service = match env.systemd.unit_status(&s.hw_sync_service) {
        Ok(Some(st)) if st.succeeded() || (st.is_running() && st.active_state != "failed") => {
            format!("{}/{} ({})", st.active_state, st.sub_state, st.result)
        }
        Ok(Some(st)) => {
            problems.push(format!("{} is {}/{} (result {})", s.hw_sync_service, st.active_state, st.sub_state, st.result));
            format!("{}/{} ({})", st.active_state, st.sub_state, st.result)
        }
        // Its start job finished `done` (the previous step), and systemd unloaded it since.
        Ok(None) => "finished, unloaded".to_owned(),
        Err(e) => {
            problems.push(e.to_string());
            "unknown".to_owned()
        }
    };
    let data = json!({
        "credsFile": path.display().to_string(),
        "keys": ["consumer_key", "endpoint", "token_key", "token_secret"],
        "timer": timer,
        "service": service,
    });
    if problems.is_empty() {
        Done::ok("credentials in place, timer active, service ran").with_data(data)
    } else {
        Done::error(problems.join("; ")).with_data(data)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use drover_proto::report::StepOutcome;

    use super::*;
    use crate::exec::SystemRunner;
    use crate::systemd::Systemd;
    use crate::systemd::fake::{FakeKind, FakeSystemd};
    use crate::tasks::TaskSettings;
    use crate::timekeeping::SystemClock;

    struct Owned {
        url: String,
        id: String,
        ck: Secret,
        tk: Secret,
        ts: Secret,
    }

    impl Owned {
        fn new() -> Self {
            Owned {
                url: "http://10.0.0.2:5240/MAAS".into(),
                id: "4y3h7r".into(),
                ck: Secret::new("CK-sekrit-consumer"),
                tk: Secret::new("TK-sekrit-token"),
                ts: Secret::new("TS-sekrit-secret"),
            }
        }
        fn params(&self) -> Params<'_> {
            Params { maas_url: &self.url, system_id: &self.id, consumer_key: &self.ck, token_key: &self.tk, token_secret: &self.ts }
        }
    }

    fn settings(dir: &Path) -> TaskSettings {
        TaskSettings { maas_creds_file: dir.join("etc/maas/maas-machine-creds.yml"), ..TaskSettings::default() }
    }

    fn systemd() -> FakeSystemd {
        FakeSystemd::new().with_unit("maas_hardware_sync.timer", FakeKind::Timer, false).with_unit(
            "maas_hardware_sync.service",
            FakeKind::Oneshot,
            false,
        )
    }

    fn env<'a>(settings: &'a TaskSettings, sd: &'a dyn Systemd, state: &'a Path) -> TaskEnv<'a> {
        TaskEnv { settings, runner: &SystemRunner, systemd: sd, clock: &SystemClock, state_dir: state }
    }

    #[test]
    fn the_plan_writes_restarts_starts_and_verifies() {
        let o = Owned::new();
        let names: Vec<String> = plan(&o.params(), &TaskSettings::default()).expect("plan").into_iter().map(|s| s.name).collect();
        assert_eq!(
            names,
            [
                "write-creds /etc/maas/maas-machine-creds.yml",
                "restart-timer maas_hardware_sync.timer",
                "start-service maas_hardware_sync.service",
                "verify"
            ]
        );
    }

    #[test]
    fn creds_are_in_maas_shape() {
        let o = Owned::new();
        assert_eq!(
            render_creds(&o.params()),
            "reporting:\n  maas:\n    consumer_key: 'CK-sekrit-consumer'\n    endpoint: 'http://10.0.0.2:5240/MAAS/metadata/status/4y3h7r'\n    token_key: 'TK-sekrit-token'\n    token_secret: 'TS-sekrit-secret'\n"
        );
        let quote = Secret::new("it's");
        let p = Params { token_secret: &quote, ..o.params() };
        assert!(render_creds(&p).contains("token_secret: 'it''s'\n"));
    }

    #[test]
    fn injection_and_malformed_inputs_are_refused() {
        let o = Owned::new();
        for url in [
            "ftp://maas/MAAS",
            "http://",
            "http://maas/MAAS'\n  evil: 1",
            "http://maas/MAAS\nx",
            "http://ma as/",
            "http://maas:99999/",
            "http://maas:/",
            "http://user:pw@maas/",
            "http://maas/a#b",
            "http://maas/a?b=c",
            "http://maas/\"x",
            "http://maas/x\t",
            "http://[zz]/",
            "http://maas:5240:1/",
        ] {
            let p = Params { maas_url: url, ..o.params() };
            assert!(validate(&p).is_err(), "{url:?} accepted");
        }
        for url in ["http://maas", "https://maas.example:5240/MAAS/", "http://10.0.0.2:5240/MAAS", "http://[fd00::2]:5240/MAAS"] {
            let p = Params { maas_url: url, ..o.params() };
            assert_eq!(validate(&p), Ok(()), "{url}");
        }
        for id in ["", "ABC", "abc'", "abc\n", "a-b", &"a".repeat(33)] {
            let p = Params { system_id: id, ..o.params() };
            assert!(validate(&p).is_err(), "{id:?} accepted");
        }
        for bad in ["", "a b", "a\nb", "a\u{7f}", "é"] {
            let s = Secret::new(bad);
            let p = Params { token_key: &s, ..o.params() };
            let e = validate(&p).expect_err("refused").to_string();
            assert!(e.starts_with("token_key") && (bad.is_empty() || !e.contains(bad)), "{e}");
        }
    }

    #[test]
    fn refused_inputs_write_nothing_and_touch_no_unit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = settings(dir.path());
        let sd = systemd();
        let o = Owned::new();
        let p = Params { maas_url: "http://maas/MAAS'\nreporting: {}", ..o.params() };
        let steps = run(&p, &env(&s, &sd, dir.path()));
        assert_eq!(steps.len(), 1);
        assert_eq!((steps[0].name.as_str(), steps[0].outcome), ("validate", StepOutcome::Error));
        assert!(!s.maas_creds_file.exists() && !dir.path().join("etc").exists());
        assert!(sd.calls().is_empty());
    }

    #[test]
    fn a_run_writes_0600_restarts_starts_and_verifies() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = settings(dir.path());
        let sd = systemd();
        let o = Owned::new();
        let steps = run(&o.params(), &env(&s, &sd, dir.path()));
        assert!(steps.iter().all(|s| s.outcome == StepOutcome::Ok), "{steps:#?}");
        assert_eq!(std::fs::read_to_string(&s.maas_creds_file).expect("creds"), render_creds(&o.params()));
        assert_eq!(std::fs::metadata(&s.maas_creds_file).expect("meta").mode() & 0o7777, 0o600);
        assert_eq!(sd.calls(), ["RestartUnit maas_hardware_sync.timer", "StartUnit maas_hardware_sync.service"]);
        // No temporary file is left behind.
        let left: Vec<_> = std::fs::read_dir(s.maas_creds_file.parent().expect("dir")).expect("ls").collect();
        assert_eq!(left.len(), 1);
        // A re-run replaces the file in place.
        assert!(run(&o.params(), &env(&s, &sd, dir.path())).iter().all(|s| s.outcome == StepOutcome::Ok));
    }

    #[test]
    fn a_failing_service_fails_the_task_at_its_step() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = settings(dir.path());
        let sd = systemd();
        sd.fail_jobs("maas_hardware_sync.service");
        let o = Owned::new();
        let steps = run(&o.params(), &env(&s, &sd, dir.path()));
        let outcomes: Vec<StepOutcome> = steps.iter().map(|s| s.outcome).collect();
        assert_eq!(outcomes, [StepOutcome::Ok, StepOutcome::Ok, StepOutcome::Error, StepOutcome::Skipped]);
        // A host without the timer unit fails at the restart, with systemd's error.
        let bare = FakeSystemd::new();
        let steps = run(&o.params(), &env(&s, &bare, dir.path()));
        assert_eq!(steps[1].outcome, StepOutcome::Error);
        assert!(steps[1].message.contains("NoSuchUnit"), "{}", steps[1].message);
    }

    #[test]
    fn verify_catches_a_loose_mode_and_an_inactive_timer() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = settings(dir.path());
        let sd = systemd();
        let o = Owned::new();
        let e = env(&s, &sd, dir.path());
        assert!(run(&o.params(), &e).iter().all(|s| s.outcome == StepOutcome::Ok));
        std::fs::set_permissions(&s.maas_creds_file, std::os::unix::fs::PermissionsExt::from_mode(0o644)).expect("chmod");
        sd.stop_unit("maas_hardware_sync.timer").expect("stop");
        let done = verify(&o.params(), &e);
        assert_eq!(done.outcome, StepOutcome::Error);
        assert!(done.message.contains("mode 0644") && done.message.contains("not active"), "{}", done.message);
    }

    /// Captures formatted log output.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("lock").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A reseed task `task_id` as the coordinator sends it: the token sealed to this host's
    /// key (written into `state_dir`) for the task `sealed_for`.
    fn sealed_task(o: &Owned, state_dir: &std::path::Path, task_id: &str, sealed_for: &str) -> drover_proto::task::Task {
        use drover_proto::seal::{SealKeyPair, seal, secret_aad};
        use drover_proto::task::{HwSyncReseed, MaasToken, MachineToken, TaskKind};
        let key_file = state_dir.join(crate::host_keys::SEAL_KEY);
        let key = match std::fs::read_to_string(&key_file) {
            Ok(text) => SealKeyPair::from_private_b64(&text).expect("key"),
            Err(_) => {
                let key = SealKeyPair::generate();
                std::fs::write(&key_file, key.private_b64()).expect("write key");
                key
            }
        };
        let token = MaasToken { consumer_key: o.ck.clone(), token_key: o.tk.clone(), token_secret: o.ts.clone() };
        let plain = drover_proto::canonical::to_vec_of(&token).expect("canonical");
        let sealed = seal(&key.public_b64(), &plain, &secret_aad(sealed_for, "h-1")).expect("seal");
        drover_proto::task::Task {
            task_id: task_id.into(),
            host_id: "h-1".into(),
            job_id: None,
            issued_at: drover_proto::time::Time::from_unix(1_795_000_000).expect("time"),
            expires_at: drover_proto::time::Time::from_unix(1_795_000_600).expect("time"),
            kind: TaskKind::HwSyncReseed(HwSyncReseed {
                maas_url: o.url.clone(),
                system_id: o.id.clone(),
                token: MachineToken::Sealed(sealed),
            }),
        }
    }

    #[test]
    fn a_token_sealed_for_another_task_or_sent_unsealed_is_refused() {
        use drover_proto::task::{HwSyncReseed, MaasToken, MachineToken, TaskKind};
        let dir = tempfile::tempdir().expect("tempdir");
        let s = settings(dir.path());
        let o = Owned::new();
        let sd = systemd();
        // Lifted from another task: the associated data differs, so it does not open.
        let lifted = crate::tasks::run_task(&sealed_task(&o, dir.path(), "t-2", "t-1"), &env(&s, &sd, dir.path()));
        assert_eq!(lifted.outcome, drover_proto::report::TaskOutcome::Failed);
        assert!(lifted.steps[0].message.contains("does not open"), "{:?}", lifted.steps);
        // In the clear: refused, nothing written.
        let mut plain = sealed_task(&o, dir.path(), "t-3", "t-3");
        plain.kind = TaskKind::HwSyncReseed(HwSyncReseed {
            maas_url: o.url.clone(),
            system_id: o.id.clone(),
            token: MachineToken::Plain(MaasToken { consumer_key: o.ck.clone(), token_key: o.tk.clone(), token_secret: o.ts.clone() }),
        });
        let refused = crate::tasks::run_task(&plain, &env(&s, &sd, dir.path()));
        assert_eq!(refused.outcome, drover_proto::report::TaskOutcome::Failed);
        assert!(refused.steps[0].message.contains("unsealed"), "{:?}", refused.steps);
        // Another host's key: does not open either.
        std::fs::write(dir.path().join(crate::host_keys::SEAL_KEY), drover_proto::seal::SealKeyPair::generate().private_b64())
            .expect("key");
        let mut other = sealed_task(&o, dir.path(), "t-4", "t-4");
        std::fs::write(dir.path().join(crate::host_keys::SEAL_KEY), drover_proto::seal::SealKeyPair::generate().private_b64())
            .expect("key");
        other.task_id = "t-4".into();
        let misdirected = crate::tasks::run_task(&other, &env(&s, &sd, dir.path()));
        assert!(misdirected.steps[0].message.contains("does not open"), "{:?}", misdirected.steps);
        assert!(!s.maas_creds_file.exists(), "no refused token was written");
    }

    #[test]
    fn secrets_do_not_reach_step_results_or_logs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = settings(dir.path());
        let o = Owned::new();
        let secrets = ["CK-sekrit-consumer", "TK-sekrit-token", "TS-sekrit-secret", "sekrit"];
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber =
            tracing_subscriber::fmt().with_max_level(tracing::Level::TRACE).with_ansi(false).with_writer(move || writer.clone()).finish();
        let mut all = Vec::new();
        tracing::subscriber::with_default(subscriber, || {
            // Other tests may have run these callsites with no subscriber (interest cached as
            // "never"): ask again now that one listens.
            tracing::callsite::rebuild_interest_cache();
            // Through the task runner (its start/finish lines), a success, a failure, a refusal.
            let task = sealed_task(&o, dir.path(), "t-1", "t-1");
            let sd = systemd();
            let result = crate::tasks::run_task(&task, &env(&s, &sd, dir.path()));
            all.push(format!("{result:?}"));
            all.push(serde_json::to_string(&result).expect("json"));
            let failing = systemd();
            failing.fail_jobs("maas_hardware_sync.timer");
            all.push(format!("{:?}", run(&o.params(), &env(&s, &failing, dir.path()))));
            let bad = Params { maas_url: "http://x/'", ..o.params() };
            all.push(format!("{:?}", run(&bad, &env(&s, &sd, dir.path()))));
            all.push(format!("{:?} {task:?}", o.params()));
        });
        let logs = String::from_utf8(captured.0.lock().expect("lock").clone()).expect("utf-8");
        assert!(logs.contains("task started") && logs.contains("wrote the MAAS"), "{logs}");
        for secret in secrets {
            assert!(!logs.contains(secret), "a secret reached the logs: {logs}");
            for text in &all {
                assert!(!text.contains(secret), "a secret reached a result: {text}");
            }
        }
        // The file itself does hold them (that is its job).
        assert!(std::fs::read_to_string(&s.maas_creds_file).expect("creds").contains("TS-sekrit-secret"));
    }
}
