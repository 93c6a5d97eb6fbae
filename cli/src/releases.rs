//! `drover releases list [-o table|wide|json]`: the releases the coordinator stores, `GET
//! /v1/releases` (admin or viewer), newest first: version, when CI signed it and how many
//! artifacts it carries (`wide` lists their paths).

use clap::{Args, Subcommand};
use serde_json::Value;

use crate::client::{ConnectArgs, Session};
use crate::exit::CliError;
use crate::job::clean;
use crate::output::{Output, OutputArgs, dash, field, pretty, print, table};

/// Arguments of `drover releases`.
#[derive(Args)]
pub struct ReleasesArgs {
    #[command(subcommand)]
    command: ReleasesCommand,
}

/// The `drover releases` verbs.
#[derive(Subcommand)]
enum ReleasesCommand {
    /// List stored releases, newest first: version, signed at, artifacts.
    List(ListArgs),
}

/// Arguments of `drover releases list`.
#[derive(Args)]
struct ListArgs {
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    connect: ConnectArgs,
}

/// Runs `drover releases`.
pub fn run(args: &ReleasesArgs) -> Result<(), CliError> {
    let ReleasesCommand::List(a) = &args.command;
    let s = Session::open(&a.connect)?;
    let releases = &crate::get::list_all(&s, "/v1/releases", &[], "items", None)?;
    match a.output.output {
        Output::Json => print(&pretty(&Value::Array(releases.clone()))?),
        _ if releases.is_empty() => {
            eprintln!("no releases");
            Ok(())
        }
        o => print(&render(releases, o == Output::Wide)),
    }
}

/// The releases table.
fn render(releases: &[Value], wide: bool) -> String {
    let header = if wide { vec!["VERSION", "SIGNED", "ARTIFACTS", "PATHS"] } else { vec!["VERSION", "SIGNED", "ARTIFACTS"] };
    let rows: Vec<Vec<String>> = releases
        .iter()
        .map(|r| {
            let paths: Vec<&str> =
                r.get("paths").and_then(Value::as_array).map(|p| p.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
            let mut row = vec![
                r.get("version").and_then(Value::as_u64).map_or_else(|| "-".to_owned(), |v| v.to_string()),
                clean(dash(field(r, "signedAt")), 40),
                paths.len().to_string(),
            ];
            if wide {
                row.push(clean(&paths.join(","), 400));
            }
            row
        })
        .collect();
    table(&header, &rows)
}
