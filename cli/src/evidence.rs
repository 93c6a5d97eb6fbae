//! `drover evidence get HOST|JOB [-o json]` and `drover evidence verify FILE --ca CA.crt
//! [--host ID] [--task ID] [--job ID]`: the statements hosts signed about their own
//! cleanliness (`node.validate_clean`, `node.gpu_scrub`, probe results), and their offline
//! check.
//!
//! `get` asks the coordinator (`GET /v1/jobs/{id}/evidence` for a job id, else
//! `/v1/hosts/{id}/evidence`; a hostname is resolved to its id); `-o json` prints the
//! documents as the hosts sent them, a JSON array that `verify` reads as it is.
//!
//! `verify` needs nothing but the file and the coordinator's CA certificate: each document's
//! signature, its certificate (issued by that CA, for evidence only, naming the statement's
//! host, valid when the statement was signed) and what the verifier expects (`--host`,
//! `--task`, `--job`: evidence about another host, task or job — a replay — is refused). It
//! prints one line per document and exits 0 only if every one verifies; otherwise it names
//! the rule that failed and exits 65.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use drover_proto::api::evidence::EvidenceView;
use drover_proto::evidence::{Evidence, EvidenceError, Expect, Subject, verify};
use serde_json::Value;
use uuid::Uuid;

use crate::client::{ConnectArgs, Session};
use crate::exit::{CliError, codes};
use crate::listing::list_all;
use crate::output::{OutputArgs, clean, dash, pretty, print, table};

/// Largest file `verify` reads (a JSON array of many documents).
const MAX_FILE_BYTES: u64 = 64 << 20;

/// Arguments of `drover evidence`.
#[derive(Args)]
pub struct EvidenceArgs {
    #[command(subcommand)]
    command: EvidenceCommand,
}

#[derive(Subcommand)]
enum EvidenceCommand {
    /// The evidence a host (hostname or id) or a job (id) holds on the coordinator.
    Get {
        /// A hostname, a host id, or a job id.
        target: String,
        #[command(flatten)]
        output: OutputArgs,
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// Verify evidence offline (a document, or the JSON array `get -o json` prints).
    Verify {
        /// The evidence file; stdin when "-".
        file: PathBuf,
        /// The coordinator's CA certificate (PEM), e.g. from `GET /v1/ca.crt`.
        #[arg(long, value_name = "CA.crt")]
        ca: PathBuf,
        /// Refuse evidence about any other host (id).
        #[arg(long, value_name = "HOST_ID")]
        host: Option<String>,
        /// Refuse evidence about any other task (id).
        #[arg(long, value_name = "TASK_ID")]
        task: Option<String>,
        /// Refuse evidence about any other job (id).
        #[arg(long, value_name = "JOB_ID")]
        job: Option<String>,
    },
}

/// Runs `drover evidence`.
pub fn run(args: &EvidenceArgs) -> Result<(), CliError> {
    match &args.command {
        EvidenceCommand::Get { target, output, connect } => get(target, output, connect),
        EvidenceCommand::Verify { file, ca, host, task, job } => {
            let expect = Expect { host_id: host.as_deref(), task_id: task.as_deref(), job_id: job.as_deref() };
            verify_file(file, ca, &expect)
        }
    }
}

fn get(target: &str, output: &OutputArgs, connect: &ConnectArgs) -> Result<(), CliError> {
    let s = Session::open(connect)?;
    let base = match Uuid::parse_str(target) {
        // A job id, or else a host id.
        Ok(id) => match s.get::<drover_proto::api::jobs::JobDetail>(&format!("/v1/jobs/{id}")) {
            Ok(_) => format!("/v1/jobs/{id}/evidence"),
            Err(e) if e.code() == codes::DATA => format!("/v1/hosts/{}/evidence", crate::resolve::host(&s, "TARGET", target)?.id),
            Err(e) => return Err(e),
        },
        Err(_) => format!("/v1/hosts/{}/evidence", crate::resolve::host(&s, "TARGET", target)?.id),
    };
    let items = list_all(&s, &base, &[("limit", "500".to_owned())], None)?;
    if output.output.is_json() {
        let docs: Vec<Value> = items.iter().map(|i| i.get("evidence").cloned().unwrap_or(Value::Null)).collect();
        return print(&pretty(&Value::Array(docs))?);
    }
    if items.is_empty() {
        eprintln!("no evidence for {}", clean(target, 80));
        return Ok(());
    }
    let kept: Vec<EvidenceView> = crate::answer::decode_all(&base, &items)?;
    let rows: Vec<Vec<String>> = kept
        .iter()
        .map(|i| {
            // The document as the host sent it; one that is not evidence is shown as such (it
            // would not verify either).
            let what = match serde_json::from_value::<Evidence>(i.evidence.clone()).map(|e| e.statement.subject) {
                Ok(Subject::Task { task_type, outcome, .. }) => format!("{} {}", clean(&task_type, 48), crate::output::wire(&outcome)),
                Ok(Subject::Probes { results }) => format!("{} probe result(s)", results.len()),
                Err(_) => "not an evidence document".to_owned(),
            };
            vec![
                i.seq.to_string(),
                i.signed_at.to_string(),
                clean(dash(i.task_id.as_deref().unwrap_or("")), 40),
                clean(dash(i.job_id.as_deref().unwrap_or("")), 40),
                what,
            ]
        })
        .collect();
    print(&table(&["SEQ", "SIGNED AT", "TASK", "JOB", "STATEMENT"], &rows))
}

fn read_input(file: &PathBuf) -> Result<Vec<u8>, CliError> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    let limit = MAX_FILE_BYTES;
    let result = if file.as_os_str() == "-" {
        std::io::stdin().lock().take(limit + 1).read_to_end(&mut bytes)
    } else {
        std::fs::File::open(file).and_then(|f| f.take(limit + 1).read_to_end(&mut bytes))
    };
    result.map_err(|e| CliError::new(codes::NO_INPUT, format!("{}: {e}", file.display())))?;
    if bytes.len() as u64 > limit {
        return Err(CliError::data(format!("{}: larger than {limit} bytes", file.display())));
    }
    Ok(bytes)
}

/// Why one document of an evidence file is refused.
#[derive(Debug, thiserror::Error)]
enum DocumentRefused {
    /// It does not decode as evidence.
    #[error("not an evidence document ({source})")]
    NotEvidence {
        /// The decoding error.
        #[source]
        source: serde_json::Error,
    },
    /// It decodes and does not verify.
    #[error("{source}")]
    Refused {
        /// The rule it breaks.
        #[source]
        source: EvidenceError,
    },
}

/// Verifies every document of `file` under the CA of `ca`.
fn verify_file(file: &PathBuf, ca: &PathBuf, expect: &Expect<'_>) -> Result<(), CliError> {
    let ca_pem = std::fs::read_to_string(ca).map_err(|e| CliError::new(codes::NO_INPUT, format!("--ca {}: {e}", ca.display())))?;
    let bytes = read_input(file)?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|e| CliError::data(format!("{}: not JSON ({e})", file.display())))?;
    let docs = match value {
        Value::Array(items) => items,
        one => vec![one],
    };
    if docs.is_empty() {
        return Err(CliError::data(format!("{}: no evidence in it", file.display())));
    }
    let mut lines = String::new();
    let mut failed = Vec::new();
    for (i, doc) in docs.into_iter().enumerate() {
        let outcome = serde_json::from_value::<Evidence>(doc)
            .map_err(|source| DocumentRefused::NotEvidence { source })
            .and_then(|e| verify(&e, Some(&ca_pem), expect).map(|()| e).map_err(|source| DocumentRefused::Refused { source }));
        match outcome {
            Ok(e) => lines.push_str(&format!("ok  #{i}  {}\n", describe(&e))),
            Err(why) => failed.push(format!("#{i}: {why}")),
        }
    }
    print(&lines)?;
    if failed.is_empty() { Ok(()) } else { Err(CliError::data(format!("evidence refused: {}", failed.join("; ")))) }
}

/// What a verified statement says, in one line.
fn describe(e: &Evidence) -> String {
    let s = &e.statement;
    match &s.subject {
        Subject::Task { task_id, job_id, task_type, outcome, .. } => format!(
            "host {} said at {}: task {task_id} ({task_type}){} {}",
            s.host_id,
            s.at,
            job_id.as_ref().map(|j| format!(" of job {j}")).unwrap_or_default(),
            crate::output::wire(outcome)
        ),
        Subject::Probes { results } => format!("host {} said at {}: {} probe result(s)", s.host_id, s.at, results.len()),
    }
}
