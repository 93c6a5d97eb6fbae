//! `drover rollout VERB ROLLOUT`: the operator's rollout actions against the coordinator's
//! admin routes `POST /v1/rollouts/{id}/<verb>` — halt, resume, cancel, rollback (each with a
//! required `--reason`, recorded in the events and the audit log) — and `status` (viewer),
//! the rollout with every host's state. ROLLOUT is a rollout id (`CHANNEL@REF`), a unique
//! prefix of one, or a channel, meaning its current rollout ([`crate::resolve`]): `drover
//! rollout status training`.
//!
//! The coordinator decides legality and answers a refusal with a 409 naming the states the
//! action needs (exit 65); a viewer certificate gets 403 (exit 77). On success an action
//! prints one line, `ROLLOUT_ID STATE`; `status` prints the coordinator's JSON, or with
//! `--watch` the live progress view of [`crate::watch`].

use std::io::Write;

use clap::{Args, ValueEnum};
use serde::{Deserialize, Serialize};

use crate::client::{ConnectArgs, Session};
use crate::exit::{CliError, codes};
use crate::host::check_reason;

/// What to do with a rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Verb {
    /// Active, Converging or Reverting → Halted: nothing new is dispatched; in-flight hosts finish.
    Halt,
    /// Halted → Active (the health gate is evaluated again).
    Resume,
    /// Any live state → Cancelled; unconfirmed intents are withdrawn.
    Cancel,
    /// Active, Converging or Halted → Reverting: touched hosts go back to the channel's
    /// newest revertable rollout.
    Rollback,
    /// Print the rollout and its hosts' states as JSON (viewer).
    Status,
}

impl Verb {
    fn path_segment(self) -> &'static str {
        match self {
            Verb::Halt => "halt",
            Verb::Resume => "resume",
            Verb::Cancel => "cancel",
            Verb::Rollback => "rollback",
            Verb::Status => "status",
        }
    }
}

/// Arguments of `drover rollout`.
#[derive(Args)]
pub struct RolloutArgs {
    /// What to do.
    #[arg(value_enum)]
    verb: Verb,
    /// The rollout: its id (CHANNEL@REF), a unique prefix of it, or a channel (the channel's
    /// newest live rollout, else its newest).
    #[arg(value_name = "ROLLOUT")]
    rollout: String,
    /// Why (required for every verb but `status`; recorded in the events and the audit log).
    #[arg(long, value_name = "TEXT")]
    reason: Option<String>,
    /// With `status`: the live progress view (waves, hosts per state) until the rollout
    /// finishes or --timeout passes.
    #[arg(short = 'w', long)]
    watch: bool,
    /// With --watch: give up after this many seconds (exit 75).
    #[arg(long, value_name = "SECS", default_value_t = 3600, requires = "watch")]
    timeout: u64,
    #[command(flatten)]
    connect: ConnectArgs,
}

#[derive(Serialize)]
struct ActionRequest<'a> {
    reason: &'a str,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RolloutState {
    rollout_id: String,
    state: String,
}

/// Runs `drover rollout`.
pub fn run(args: &RolloutArgs) -> Result<(), CliError> {
    let reason = match (args.verb, args.reason.as_deref()) {
        (Verb::Status, _) => None,
        (_, Some(r)) => Some(check_reason(r)?),
        (_, None) => return Err(CliError::usage("--reason must say why (it is recorded in the events and the audit log)")),
    };
    if args.watch && args.verb != Verb::Status {
        return Err(CliError::usage("--watch goes with `status` only"));
    }
    let session = Session::open(&args.connect)?;
    let id = crate::resolve::rollout(&session, "ROLLOUT", &args.rollout)?;
    if args.watch {
        let opts = crate::watch::WatchOptions::new(Some(id), true, std::time::Duration::from_secs(args.timeout));
        return crate::watch::watch_stdout(&session, &opts);
    }
    let path = format!("/v1/rollouts/{id}/{}", args.verb.path_segment());
    let line = match reason {
        None => {
            let status = session.get(&path)?;
            serde_json::to_string_pretty(&status).map_err(|e| CliError::new(codes::SOFTWARE, format!("internal error: {e}")))?
        }
        Some(reason) => {
            let r: RolloutState = session.post(&path, &ActionRequest { reason })?;
            format!("{} {}", r.rollout_id, r.state)
        }
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").and_then(|()| out.flush()).map_err(|e| CliError::new(codes::IO, format!("cannot write stdout: {e}")))
}
