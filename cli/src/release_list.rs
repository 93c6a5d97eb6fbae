//! Listing the releases the coordinator stores (building, signing and publishing one is
//! [`crate::release_ci`]'s).
//!
//! `drover releases list [-o table|wide|json]`: the releases the coordinator stores, `GET
//! /v1/releases` (admin or viewer), newest first: version, when CI signed it, who published it
//! (from the audit log; `-` where it holds no record), how many rollouts it opened and on
//! which channels, and how many artifacts it carries (`wide` lists their paths).

use clap::{Args, Subcommand};
use drover_proto::api::rollouts::ReleaseView;

use crate::answer::decode_all;
use crate::client::{ConnectArgs, Session};
use crate::exit::CliError;
use crate::output::{Output, OutputArgs, clean, dash, pretty, print, table};

/// Arguments of `drover releases`.
#[derive(Args)]
pub struct ReleasesArgs {
    #[command(subcommand)]
    command: ReleasesCommand,
}

/// The `drover releases` verbs.
#[derive(Subcommand)]
enum ReleasesCommand {
    /// List stored releases, newest first: version, signed at, publisher, rollouts, channels, artifacts.
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
    let raw = crate::listing::list_all(&s, "/v1/releases", &[], None)?;
    let releases: Vec<ReleaseView> = decode_all("/v1/releases", &raw)?;
    match a.output.output {
        Output::Json => print(&pretty(&raw)?),
        _ if releases.is_empty() => {
            eprintln!("no releases");
            Ok(())
        }
        o => print(&render(&releases, o == Output::Wide)),
    }
}

/// The releases table.
fn render(releases: &[ReleaseView], wide: bool) -> String {
    let mut header = vec!["VERSION", "SIGNED", "PUBLISHER", "ROLLOUTS", "CHANNELS", "ARTIFACTS"];
    if wide {
        header.push("PATHS");
    }
    let rows: Vec<Vec<String>> = releases
        .iter()
        .map(|r| {
            let mut row = vec![
                r.version.to_string(),
                r.signed_at.to_string(),
                clean(dash(r.publisher.as_deref().unwrap_or("")), 64),
                r.rollouts.to_string(),
                clean(dash(&r.channels.join(",")), 200),
                r.paths.len().to_string(),
            ];
            if wide {
                row.push(clean(&r.paths.join(","), 400));
            }
            row
        })
        .collect();
    table(&header, &rows)
}

#[cfg(test)]
mod tests {
    use drover_proto::api::rollouts::ReleaseView;
    use serde_json::json;

    #[test]
    fn releases_render_publisher_rollouts_and_channels() {
        let releases = vec![
            json!({"version": 7, "signedAt": "2030-01-02T00:00:00Z", "paths": ["a", "b"], "publisher": "ci-bot",
                   "channels": ["canary", "prod"], "rollouts": 2}),
            json!({"version": 6, "signedAt": "2030-01-01T00:00:00Z", "paths": ["a"], "publisher": null,
                   "channels": [], "rollouts": 0}),
            json!({"version": 5, "signedAt": "2029-12-31T00:00:00Z", "paths": [], "publisher": "evil\u{1b}[2J",
                   "channels": [], "rollouts": 0}),
        ];
        let releases: Vec<ReleaseView> = crate::answer::decode_all("/v1/releases", &releases).expect("releases");
        let t = super::render(&releases, false);
        let lines: Vec<Vec<&str>> = t.lines().map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(lines[0], ["VERSION", "SIGNED", "PUBLISHER", "ROLLOUTS", "CHANNELS", "ARTIFACTS"], "{t}");
        assert_eq!(lines[1], ["7", "2030-01-02T00:00:00Z", "ci-bot", "2", "canary,prod", "2"], "{t}");
        assert_eq!(lines[2], ["6", "2030-01-01T00:00:00Z", "-", "0", "-", "1"], "{t}");
        // No channels and a hostile name: dashes, no escapes.
        assert_eq!(lines[3][lines[3].len() - 3..], ["0", "-", "0"], "{t}");
        assert!(!t.contains('\u{1b}'), "{t}");
        assert!(super::render(&releases, true).lines().nth(1).unwrap().ends_with("a,b"));
    }
}
