//! `drover-coordinator`: the coordinator's command line.
//!
//! - `init --state-dir D --san NAME…`: create the state directory (CA, server certificate,
//!   director key) and print what clients pin: the CA fingerprint, the server key's pin in
//!   curl's `sha256//…` form, the director key id.
//! - `operator-cert --state-dir D --role R --name N --out DIR [--config F]`: issue an operator
//!   credential (recorded in the store `F`'s `[store]` names, else the state dir's SQLite).
//! - `serve --config coordinator.toml`: run the server (TLS 1.3, mTLS) until SIGINT/SIGTERM.
//! - `check-config --config coordinator.toml`: everything `serve` checks before it binds, then
//!   "ok" — the same code path, so the same refusals and exit codes.
//!
//! Exit codes follow sysexits: 0 ok, 64 usage, 65 bad input data, 66 a missing input (a state
//! dir or state file, the trust file, the agent binary), 70 internal, 73 cannot create output
//! (an existing file is never replaced), 74 I/O error, 78 bad configuration file.

#![forbid(unsafe_code)]

use std::os::unix::fs::DirBuilderExt as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::error::ErrorKind;
use clap::{Args, Parser, Subcommand};
use drover_engine::identity::Role;
use drover_engine::pki::{PkiError, San};
use drover_engine::run::StartError;
use drover_engine::state_dir::{self, StateDir, StateDirError};
use drover_proto::time::Time;

/// sysexits-style codes.
mod codes {
    pub const USAGE: u8 = 64;
    pub const DATA: u8 = 65;
    pub const NO_INPUT: u8 = 66;
    pub const SOFTWARE: u8 = 70;
    pub const CANT_CREATE: u8 = 73;
    pub const IO: u8 = 74;
    pub const CONFIG: u8 = 78;
}

/// The Drover coordinator: CA, state directory and (elsewhere) the mTLS server.
#[derive(Parser)]
#[command(name = "drover-coordinator", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create a state directory: CA, server certificate and key, director key. Never overwrites.
    Init(InitArgs),
    /// Issue an operator certificate and key (NAME.crt, NAME.key, ca.crt in --out).
    OperatorCert(OperatorCertArgs),
    /// Run the coordinator: one TLS 1.3 listener for enrollment, agents and operators.
    Serve(ServeArgs),
    /// Check a configuration as `serve` would before binding (state dir, trust file, agent
    /// binary included); print "ok", or exit with serve's error and code.
    CheckConfig(ServeArgs),
    /// Copy the store while the coordinator serves: one consistent snapshot, checked.
    Backup(BackupArgs),
    /// Install a backup as the store of a state directory that has none (coordinator stopped).
    Restore(RestoreArgs),
    /// Hand the director key over to a new one after an overlap; restart `serve` to take effect.
    RotateDirectorKey(RotateArgs),
}

#[derive(Args)]
struct RotateArgs {
    /// The state directory.
    #[arg(long, value_name = "DIR")]
    state_dir: PathBuf,
    /// Seconds from now until the new key takes over; agents learn it on check-in meanwhile.
    #[arg(long, value_name = "SECS")]
    overlap_secs: u64,
}

fn rotate_director_key(args: &RotateArgs, now: Time) -> anyhow::Result<()> {
    let state = StateDir::open(&args.state_dir)?;
    let rotated = drover_engine::director::rotate(state.path(), state.director_key(), now, args.overlap_secs)?;
    println!(
        "director key {} hands over to {} at {} (rotation step {})",
        rotated.previous_key_id, rotated.new_key_id, rotated.valid_from, rotated.step
    );
    println!("restart the coordinator to serve the rotation");
    Ok(())
}

#[derive(Args)]
struct BackupArgs {
    /// The state directory.
    #[arg(long, value_name = "DIR")]
    state_dir: PathBuf,
    /// Where to write the copy (must not exist).
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
}

#[derive(Args)]
struct RestoreArgs {
    /// The state directory (its `coordinator.db` must not exist).
    #[arg(long, value_name = "DIR")]
    state_dir: PathBuf,
    /// The backup to install.
    #[arg(long, value_name = "FILE")]
    from: PathBuf,
}

fn backup(args: &BackupArgs) -> anyhow::Result<()> {
    let db = args.state_dir.join(state_dir::DB_FILE);
    let info = drover_engine::store::sqlite_backup::backup(&db, &args.out)?;
    println!("backed up {} to {} ({} bytes, schema version {})", db.display(), args.out.display(), info.bytes, info.schema_version);
    Ok(())
}

fn restore(args: &RestoreArgs) -> anyhow::Result<()> {
    let db = args.state_dir.join(state_dir::DB_FILE);
    let info = drover_engine::store::sqlite_backup::restore(&args.from, &db)?;
    println!("restored {} into {} ({} bytes, schema version {})", args.from.display(), db.display(), info.bytes, info.schema_version);
    Ok(())
}

#[derive(Args)]
struct ServeArgs {
    /// The configuration file (TOML).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
}

/// What `serve` and `check-config` share: the configuration parsed and everything it names
/// read and checked. A refusal names the configuration file, then the key and the file.
fn load_and_prepare(file: &std::path::Path) -> anyhow::Result<drover_engine::run::Prepared> {
    let config = drover_engine::config::Config::load(file)?;
    drover_engine::run::prepare(config).with_context(|| file.display().to_string())
}

fn check_config(args: &ServeArgs) -> anyhow::Result<()> {
    let prepared = load_and_prepare(&args.config)?;
    if let Some(warning) = prepared.agent_warning() {
        eprintln!("drover-coordinator: warning: {warning}");
    }
    println!("{}: ok", args.config.display());
    Ok(())
}

fn serve(args: &ServeArgs) -> anyhow::Result<()> {
    // Before any thread exists (the runtime's, the log writer's): see drover-malloc.
    let one_arena = drover_malloc::limit_arenas();
    let prepared = load_and_prepare(&args.config)?;
    tracing_subscriber::fmt()
        .json()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("DROVER_LOG").unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .init();
    if !one_arena {
        tracing::warn!("cannot limit the allocator to one arena; memory may grow with the threads' bursts");
    }
    match drover_engine::run::raise_open_files_limit() {
        Ok((soft, hard)) => tracing::info!(was = soft, now = hard, "open-files limit raised to the hard limit"),
        Err(e) => tracing::warn!(error = %e, "cannot raise the open-files limit; hosts beyond it cannot connect"),
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start the async runtime")?;
    runtime.block_on(async {
        let running = drover_engine::run::start(prepared, std::sync::Arc::new(drover_engine::app::SystemClock)).await?;
        let app = running.app.clone();
        println!("listening on {}", running.addr);
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).context("cannot watch SIGTERM")?;
        tokio::select! {
            _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: stopping"),
            _ = term.recv() => tracing::info!("SIGTERM: stopping"),
            ended = running.task => match ended {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(anyhow::Error::new(e).context("listener failed")),
                Err(e) => return Err(anyhow::anyhow!("listener task ended: {e}")),
            },
        }
        // Buffered check-ins are written before the process goes.
        if let Err(e) = app.flush_checkins().await {
            tracing::error!(error = %e, "writing buffered check-ins at shutdown failed");
        }
        // A leader gives the lease up, so another replica takes over now, not when it lapses.
        let leaving = app.clone();
        let _ = tokio::task::spawn_blocking(move || leaving.leader.hand_over()).await;
        Ok(())
    })
}

#[derive(Args)]
struct InitArgs {
    /// The state directory (created 0700 if missing).
    #[arg(long, value_name = "DIR")]
    state_dir: PathBuf,
    /// A name clients reach the coordinator by: a DNS name or an IP address. Repeatable.
    #[arg(long = "san", value_name = "NAME", required = true)]
    sans: Vec<String>,
}

#[derive(Args)]
struct OperatorCertArgs {
    /// The state directory made by `init`.
    #[arg(long, value_name = "DIR")]
    state_dir: PathBuf,
    /// The operator's role.
    #[arg(long, value_parser = ["admin", "viewer", "publisher"])]
    role: String,
    /// The operator's name ([A-Za-z0-9._-]{1,64}); it appears in audit records.
    #[arg(long)]
    name: String,
    /// Where to write NAME.crt, NAME.key (0600) and ca.crt (created 0700 if missing).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// The coordinator's configuration: the certificate is recorded in the store its
    /// `[store]` names (needed on PostgreSQL; without it, the SQLite file in the state dir).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

fn init(args: &InitArgs, now: Time) -> anyhow::Result<()> {
    let sans = args.sans.iter().map(|s| San::parse(s)).collect::<Result<Vec<_>, _>>()?;
    let state = StateDir::init(&args.state_dir, &sans, now)?;
    let names = sans.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
    println!("initialised coordinator state in {}", args.state_dir.display());
    println!("server certificate names: {names}");
    println!("CA sha256 fingerprint: {}", state.ca().sha256_fingerprint());
    println!("server key pin: {}", state.server_spki_pin());
    println!("director key id: {}", state.director_key_id());
    Ok(())
}

fn operator_cert(args: &OperatorCertArgs, now: Time) -> anyhow::Result<()> {
    let role: Role = args.role.parse().map_err(anyhow::Error::msg)?;
    drover_engine::identity::check_operator_name(&args.name)
        .map_err(|reason| PkiError::BadOperatorName { name: args.name.clone(), reason })?;
    let state = StateDir::open(&args.state_dir)?;
    let cert_path = args.out.join(format!("{}.crt", args.name));
    let key_path = args.out.join(format!("{}.key", args.name));
    let ca_path = args.out.join(state_dir::CA_CERT_FILE);
    // Check every output before writing any, so a refusal leaves nothing half-written.
    for path in [&cert_path, &key_path] {
        if path.symlink_metadata().is_ok() {
            return Err(StateDirError::Exists { path: path.clone() }.into());
        }
    }
    // Several operators' credentials may share one directory: an existing ca.crt is fine
    // when it is this CA's, and refused (never replaced) when it is not.
    let write_ca = match std::fs::read_to_string(&ca_path) {
        Ok(existing) if existing == state.ca().cert_pem() => false,
        Ok(_) => return Err(StateDirError::Exists { path: ca_path }).context("it holds a different CA certificate"),
        Err(_) => true,
    };
    let cred = state.ca().issue_operator(&args.name, role, now)?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(state_dir::DIR_MODE)
        .create(&args.out)
        .map_err(|source| StateDirError::CreateDir { path: args.out.clone(), source })?;
    if write_ca {
        state_dir::write_new_file(&ca_path, state.ca().cert_pem().as_bytes(), state_dir::PUBLIC_MODE)?;
    }
    // Recorded before the files are written: a certificate the store does not know could
    // never be listed or revoked. (The store is the same SQLite file `serve` uses; WAL lets
    // this run beside a running coordinator.)
    let store: std::sync::Arc<dyn drover_engine::store::Store> = match &args.config {
        None => std::sync::Arc::new(drover_engine::store::SqliteStore::open(state.db_path()).context("opening the coordinator's store")?),
        Some(file) => {
            let config = drover_engine::config::Config::load(file)?;
            // The secret store holds the database password when [store] says so.
            let secrets = drover_engine::secrets::from_config(&config).context("opening the secret store")?;
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().context("cannot start the async runtime")?;
            runtime
                .block_on(drover_engine::run::open_store(&config, &state.db_path(), &secrets))
                .context("opening the coordinator's store")?
                .0
        }
    };
    store
        .record_cert(&drover_engine::store::NewCert {
            serial: cred.cert.serial_hex.clone(),
            kind: drover_engine::store::CertKind::Operator,
            host_id: None,
            subject: format!("{}:{}", role, args.name),
            not_before: cred.cert.not_before,
            not_after: cred.cert.not_after,
        })
        .context("recording the certificate")?;
    state_dir::write_new_file(&key_path, cred.key_pem.as_bytes(), state_dir::PRIVATE_MODE)?;
    state_dir::write_new_file(&cert_path, cred.cert.pem.as_bytes(), state_dir::PUBLIC_MODE)?;
    println!("issued {} certificate for {:?}", role, args.name);
    println!("certificate: {}", cert_path.display());
    println!("key: {}", key_path.display());
    println!("CA certificate: {}", ca_path.display());
    println!("serial: {}", cred.cert.serial_hex);
    println!("valid until: {}", cred.cert.not_after);
    Ok(())
}

/// The one place this binary reads the clock.
fn now() -> anyhow::Result<Time> {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).context("system clock is before 1970")?.as_secs();
    Ok(Time::from_unix(i64::try_from(secs).context("system clock is out of range")?)?)
}

/// Maps the first error in the chain that says what went wrong to its exit code.
fn exit_code(error: &anyhow::Error) -> u8 {
    use drover_engine::director::DirectorError;
    for cause in error.chain() {
        let cause = match cause.downcast_ref::<DirectorError>() {
            Some(DirectorError::State(e)) => e as &(dyn std::error::Error + 'static),
            Some(DirectorError::AlreadyRotating { .. } | DirectorError::Write { .. }) => return codes::CANT_CREATE,
            Some(DirectorError::Sign { .. }) => return codes::SOFTWARE,
            Some(_) => return codes::DATA,
            None => cause,
        };
        if let Some(e) = cause.downcast_ref::<StateDirError>() {
            return match e {
                StateDirError::Exists { .. } | StateDirError::CreateDir { .. } | StateDirError::Write { .. } => codes::CANT_CREATE,
                StateDirError::Missing { .. } => codes::NO_INPUT,
                StateDirError::Read { .. } => codes::IO,
                StateDirError::Generate { source } => pki_code(source),
                _ => codes::DATA,
            };
        }
        if let Some(e) = cause.downcast_ref::<PkiError>() {
            return pki_code(e);
        }
        if let Some(code) = cause.downcast_ref::<StartError>().and_then(start_code) {
            return code;
        }
        if let Some(e) = cause.downcast_ref::<drover_engine::config::ConfigError>() {
            return match e {
                drover_engine::config::ConfigError::Read { source, .. } => io_input_code(source),
                _ => codes::CONFIG,
            };
        }
        if let Some(e) = cause.downcast_ref::<drover_engine::store::StoreError>() {
            return match e {
                drover_engine::store::StoreError::Conflict { .. } => codes::CANT_CREATE,
                drover_engine::store::StoreError::NotFound { .. } => codes::NO_INPUT,
                _ => codes::DATA,
            };
        }
    }
    codes::SOFTWARE
}

/// A start-up error's own code; `None` where its source, next in the chain, decides.
fn start_code(error: &StartError) -> Option<u8> {
    match error {
        // sysexits' EX_NOINPUT: "did not exist or was not readable".
        StartError::Read { source, .. } => Some(io_input_code(source)),
        StartError::Trust { .. } | StartError::NotAPackage { .. } => Some(codes::DATA),
        _ => None,
    }
}

/// An input file that could not be read: sysexits' EX_NOINPUT ("did not exist or was not
/// readable"), EX_IOERR for anything else.
fn io_input_code(error: &std::io::Error) -> u8 {
    match error.kind() {
        std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::IsADirectory => codes::NO_INPUT,
        _ => codes::IO,
    }
}

fn pki_code(error: &PkiError) -> u8 {
    match error {
        PkiError::KeyGen { .. } | PkiError::Sign { .. } | PkiError::TimeOutOfRange { .. } => codes::SOFTWARE,
        _ => codes::DATA,
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let now = now()?;
    match cli.command {
        Command::Init(args) => init(&args, now),
        Command::OperatorCert(args) => operator_cert(&args, now),
        Command::Serve(args) => serve(&args),
        Command::CheckConfig(args) => check_config(&args),
        Command::Backup(args) => backup(&args),
        Command::Restore(args) => restore(&args),
        Command::RotateDirectorKey(args) => rotate_director_key(&args, now),
    }
}

fn main() -> ExitCode {
    drover_engine::metrics::set_build_commit(env!("DROVER_BUILD_COMMIT"));
    // clap's own exit code for a usage error is 2; the documented one is 64 (EX_USAGE).
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout; errors, with their usage line, to stderr.
            let _ = e.print();
            return match e.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => ExitCode::SUCCESS,
                _ => ExitCode::from(codes::USAGE),
            };
        }
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // `{:#}` joins the chain: "what failed: why".
            eprintln!("drover-coordinator: {e:#}");
            ExitCode::from(exit_code(&e))
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn command_line_definition_is_consistent() {
        super::Cli::command().debug_assert();
    }
}
