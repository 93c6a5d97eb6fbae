//! What every `drover site` verb shares (the site itself, and its RoCE assignments, BMC
//! overrides and profiles): the flags that reach the coordinator and choose the output
//! ([`Common`]), the `/v1/maas/sites/{site}`-rooted path with the site checked
//! ([`site_path`]), one request ([`call`]), printing an answer ([`show`]) and the terminal-safe
//! form of what the coordinator sent ([`c`]).

use clap::Args;
use drover_client::Method;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::client::Session;
use crate::exit::CliError;
use crate::output::{OutputArgs, clean};

/// What every `drover site` verb takes to reach the coordinator and print.
#[derive(Args)]
pub struct Common {
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub connect: crate::client::ConnectArgs,
}

/// What a coordinator sent, made safe for the terminal (control characters replaced, length bounded).
pub fn c(s: &str) -> String {
    clean(s, 300)
}

/// `/v1/maas/sites/{site}`-rooted path with the site percent-safe (names are restricted, ids
/// are UUIDs; anything else is refused before it reaches a URL).
pub fn site_path(site: &str, rest: &str) -> Result<String, CliError> {
    let site = site.trim();
    if site.is_empty() || !site.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)) {
        return Err(CliError::usage(format!("SITE {site:?} is not a site name or id")));
    }
    Ok(format!("/v1/maas/sites/{site}{rest}"))
}

/// Sends one request and returns the coordinator's JSON.
pub fn call(common: &Common, method: Method, path: &str, body: Option<&Value>) -> Result<Value, CliError> {
    let session = Session::open(&common.connect)?;
    Ok(session.runtime.block_on(session.client.request_json(method, path, body))?)
}

/// Prints the answer `v` (from `path`) as JSON when asked, else `text` of it decoded as the
/// coordinator's type `T`. It is decoded either way, so an answer that is not the API's exits 76.
pub fn show<T: DeserializeOwned>(common: &Common, path: &str, v: &Value, text: impl FnOnce(&T) -> String) -> Result<(), CliError> {
    crate::answer::print_answer(common.output.output, path, v, text)
}
