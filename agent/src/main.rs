//! `drover-agent`: the Drover node agent's command line.
//!
//! Exit codes follow sysexits, like `drover`: 0 ok, 64 usage, 65 bad or refused input data
//! (config, trust hash mismatch, a certificate that is not ours), 66 missing input, 69 the
//! coordinator is unreachable or refused the request, 70 internal, 73 cannot create state
//! (or already enrolled).

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::error::ErrorKind;
use clap::{ArgGroup, Args, Parser, Subcommand};
use drover_agent::config::{Config, ConfigError};
use drover_agent::enroll::{self, EnrollError, TokenSource};
use drover_agent::exit::{ExitStatus, codes};

/// The Drover node agent.
#[derive(Parser)]
#[command(name = "drover-agent", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Enroll this host: generate its key here, send a CSR with the one-time token, check the
    /// coordinator's trust roots against the operator's hash, store key, certificate and trust.
    Enroll(EnrollArgs),
    /// Run the agent: check in, verify, act, report, until SIGTERM (a systemd `Type=notify`
    /// service: READY=1 once running, watchdog pings when the unit asks for them).
    Run(RunArgs),
    /// Check a configuration file and the CA file it names, and exit: 0 when it would start,
    /// 65 naming the file and the key when it would not, 66 when a file is missing.
    CheckConfig(CheckConfigArgs),
}

/// Arguments of `drover-agent run`.
#[derive(Args)]
struct RunArgs {
    /// The agent configuration (`agent.toml`).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
}

/// Arguments of `drover-agent check-config`: `--config FILE` as `run` takes it, or the file
/// alone (the older form).
#[derive(Args)]
#[command(group(ArgGroup::new("file_arg").required(true).args(["config", "file"])))]
struct CheckConfigArgs {
    /// The agent configuration (`agent.toml`).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The configuration file, without `--config`.
    #[arg(value_name = "FILE")]
    file: Option<PathBuf>,
}

/// Arguments of `drover-agent enroll`. The token is read from stdin or a file, never taken
/// as an argument: arguments are visible to every local user in the process list.
#[derive(Args)]
#[command(group(ArgGroup::new("token").required(true).args(["token_stdin", "token_file"])))]
struct EnrollArgs {
    /// The agent configuration (`agent.toml`).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// The host id `drover enroll` created this host under (the token is bound to it).
    #[arg(long, value_name = "UUID", value_parser = enroll::parse_host_id)]
    host_id: String,
    /// Read the one-time enrollment token from stdin.
    #[arg(long)]
    token_stdin: bool,
    /// Read the one-time enrollment token from this file.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// sha256 (hex) of the operator's trust.json, as `drover enroll` put it in the command.
    #[arg(long, value_name = "HEX", value_parser = enroll::parse_sha256_hex)]
    trust_sha256: String,
}

fn run_enroll(args: EnrollArgs) -> anyhow::Result<()> {
    let config = Config::load(&args.config)?;
    let source = match args.token_file {
        Some(path) => TokenSource::File(path),
        None => TokenSource::Stdin,
    };
    let token = enroll::read_token(&source)?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().context("cannot start the async runtime")?;
    let identity = runtime.block_on(enroll::enroll(&config, &args.host_id, token, &args.trust_sha256))?;
    println!("enrolled as {} ({})", identity.hostname, identity.host_id);
    Ok(())
}

fn run_agent(args: RunArgs) -> anyhow::Result<()> {
    let config = Config::load(&args.config)?;
    drover_agent::run::init_logging();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().context("cannot start the async runtime")?;
    let result = runtime.block_on(drover_agent::run::run(config));
    // A switch in progress runs in its own systemd unit and is resumed from its record at the
    // next start: no reason to hold the exit for a blocking thread.
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));
    Ok(result?)
}

fn check_config(args: CheckConfigArgs) -> anyhow::Result<()> {
    // The group makes one of the two required and they conflict.
    let file = args.config.or(args.file).context("no configuration file given")?;
    Config::load(&file)?.check_ca(&file)?;
    println!("{}: ok", file.display());
    Ok(())
}

/// The exit code for an error: the first error in its chain that knows one, else 70.
fn exit_code(e: &anyhow::Error) -> u8 {
    for cause in e.chain() {
        if let Some(e) = cause.downcast_ref::<EnrollError>() {
            return e.exit_code();
        }
        if let Some(e) = cause.downcast_ref::<ConfigError>() {
            return e.exit_code();
        }
        if let Some(e) = cause.downcast_ref::<drover_agent::run::RunError>() {
            return e.exit_code();
        }
    }
    codes::SOFTWARE
}

fn main() -> ExitCode {
    // clap's own exit code for a usage error is 2; the documented one is 64 (EX_USAGE).
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return match e.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => ExitCode::SUCCESS,
                _ => ExitCode::from(codes::USAGE),
            };
        }
    };
    let result = match cli.command {
        Command::Enroll(args) => run_enroll(args),
        Command::Run(args) => run_agent(args),
        Command::CheckConfig(args) => check_config(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("drover-agent: {e}");
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
