//! `drover completion SHELL` and `drover man [--dir DIR]`: the shell completion script and
//! the manual pages, both generated from the command-line definition itself so they can
//! never describe flags the binary does not have.
//!
//! Without `--dir`, `man` prints the top page (`drover.1`) as roff on stdout, for
//! `drover man | man -l -`; with it, it writes `drover.1` and one page per subcommand at every
//! depth (`drover-get.1`, `drover-host-drain.1`, …), as a package installs them.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use clap_complete::Shell;

use crate::exit::{CliError, codes};

/// The documentation verbs (flattened into `drover`'s own verbs).
#[derive(Subcommand)]
pub enum DocsCommand {
    /// Print a shell completion script: `drover completion bash > /etc/bash_completion.d/drover`,
    /// `drover completion zsh > "${fpath[1]}/_drover"`, `drover completion fish >
    /// ~/.config/fish/completions/drover.fish`.
    Completion(CompletionArgs),
    /// Print drover's manual page (roff), or write every page into a directory.
    Man(ManArgs),
}

/// Arguments of `drover completion`.
#[derive(Args)]
pub struct CompletionArgs {
    /// The shell the script is for.
    #[arg(value_enum)]
    shell: Shell,
}

/// Arguments of `drover man`.
#[derive(Args)]
pub struct ManArgs {
    /// Write drover.1 and one page per subcommand (drover-get.1, …) into this existing
    /// directory instead of printing the top page.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

/// Runs a documentation verb for `cli`, `drover`'s whole command-line definition.
pub fn run(docs: &DocsCommand, cli: clap::Command) -> Result<(), CliError> {
    match docs {
        DocsCommand::Completion(args) => {
            let script = completion_script(args.shell, cli)?;
            crate::fsio::write_stdout(&script)
        }
        DocsCommand::Man(ManArgs { dir: None }) => crate::fsio::write_stdout(&top_page(cli)?),
        DocsCommand::Man(ManArgs { dir: Some(dir) }) => {
            let written = write_pages(cli, dir)?;
            eprintln!("wrote {written} manual pages to {}", dir.display());
            Ok(())
        }
    }
}

fn software(what: &str, e: impl std::fmt::Display) -> CliError {
    CliError::new(codes::SOFTWARE, format!("cannot generate {what}: {e}"))
}

/// The completion script for `shell`.
fn completion_script(shell: Shell, mut cli: clap::Command) -> Result<Vec<u8>, CliError> {
    let mut out = Vec::new();
    let name = cli.get_name().to_owned();
    clap_complete::generate(shell, &mut cli, name, &mut out);
    if out.is_empty() {
        return Err(software("the completion script", "empty output"));
    }
    Ok(out)
}

/// The top manual page, `drover.1`.
fn top_page(cli: clap::Command) -> Result<Vec<u8>, CliError> {
    let mut out = Vec::new();
    clap_mangen::Man::new(cli).render(&mut out).map_err(|e| software("the manual page", e))?;
    Ok(out)
}

/// Writes the page of `cli` and of each of its subcommands, at every depth, into `dir`;
/// returns how many were written.
fn write_pages(cli: clap::Command, dir: &Path) -> Result<usize, CliError> {
    if !dir.is_dir() {
        return Err(CliError::new(codes::CANT_CREATE, format!("--dir {}: not a directory", dir.display())));
    }
    // Built first so each subcommand's name is `drover-get`, … (its page's file name and the
    // command line its synopsis shows), as clap_mangen's own generator does.
    let mut cli = cli.disable_help_subcommand(true);
    cli.build();
    write_tree(cli, dir)
}

fn write_tree(cmd: clap::Command, dir: &Path) -> Result<usize, CliError> {
    let mut written = 0;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned() {
        written += write_tree(sub, dir)?;
    }
    let man = clap_mangen::Man::new(cmd);
    let path = dir.join(man.get_filename());
    let mut page = Vec::new();
    man.render(&mut page).map_err(|e| software("a manual page", e))?;
    std::fs::write(&path, page).map_err(|e| CliError::new(codes::CANT_CREATE, format!("{}: cannot write: {e}", path.display())))?;
    Ok(written + 1)
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    fn cli() -> clap::Command {
        crate::Cli::command()
    }

    #[test]
    fn the_bash_script_is_valid_bash_and_knows_the_verbs() {
        let script = completion_script(Shell::Bash, cli()).expect("script");
        let text = String::from_utf8(script.clone()).expect("utf-8");
        assert!(text.contains("describe") && text.contains("completion"), "verbs missing");
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("drover.bash");
        std::fs::write(&file, &script).expect("write");
        let out = std::process::Command::new("bash").arg("-n").arg(&file).output().expect("bash runs");
        assert!(out.status.success(), "bash -n: {}", String::from_utf8_lossy(&out.stderr));
        for shell in [Shell::Zsh, Shell::Fish] {
            let text = String::from_utf8(completion_script(shell, cli()).expect("script")).expect("utf-8");
            assert!(text.contains("describe"), "{shell}");
        }
    }

    #[test]
    fn the_top_page_is_roff_for_drover() {
        let page = String::from_utf8(top_page(cli()).expect("page")).expect("utf-8");
        let title = page.lines().find(|l| l.starts_with(".TH ")).expect("a .TH line");
        assert!(title.starts_with(".TH drover 1"), "{title}");
        assert!(page.contains("describe"));
    }

    #[test]
    fn dir_gets_a_page_per_subcommand() {
        let dir = tempfile::tempdir().expect("tempdir");
        let written = write_pages(cli(), dir.path()).expect("pages");
        let get = std::fs::read_to_string(dir.path().join("drover-get.1")).expect("drover-get.1");
        assert!(get.contains(".TH drover-get 1"), "{}", &get[..get.len().min(300)]);
        assert!(dir.path().join("drover.1").is_file());
        assert!(dir.path().join("drover-man.1").is_file());
        assert_eq!(std::fs::read_dir(dir.path()).expect("list").count(), written);
        let e = write_pages(cli(), &dir.path().join("absent")).expect_err("no such directory");
        assert_eq!(e.code(), codes::CANT_CREATE);
    }
}
