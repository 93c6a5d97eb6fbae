//! The coordinator's operator API as types: every answer `drover` reads is one of these
//! structs, written by the coordinator with `serde_json` and read back by the CLI with the same
//! definition, so the two cannot drift apart (a field renamed on one side is a compile error on
//! the other, not a blank column).
//!
//! Reading is forward-compatible: unknown fields are ignored, so an older `drover` reads a
//! newer coordinator's answers (the agent's own reports carried inside them, health and probe
//! and task results, keep the strictness the coordinator reads them with). Fields the coordinator always writes are required; the ones it
//! leaves out are `Option` with `skip_serializing_if`, and say so.
//!
//! The module holds data, with at most a wire name or a reading of its own fields (a token's
//! state at an instant): how a view is built from the store lives in the coordinator, how it
//! is rendered lives in the CLI.

pub mod admin;
pub mod events;
pub mod evidence;
pub mod hosts;
pub mod jobs;
pub mod maintenance;
pub mod onboardings;
pub mod racks;
pub mod reconciliation;
pub mod rollouts;
pub mod sites;
pub mod tasks;

use serde::{Deserialize, Serialize};

/// A page of a listing: its rows and where the next page starts (`null` on the last page).
/// `C` is the cursor: an opaque string (hosts, jobs, maintenance), or the last row's id
/// (events, audit), passed back as `after=`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", schemars(rename = "Page_of_{T}_after_{C}"))]
pub struct Page<T, C = String> {
    /// The rows.
    pub items: Vec<T>,
    /// Where the next page starts, or `None` when this was the last.
    pub next: Option<C>,
}
