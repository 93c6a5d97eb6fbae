//! The coordinator's MAAS onboardings as the CLI reads and shows them: the route
//! ([`ONBOARDINGS`]), the JSON shapes (the coordinator's own types,
//! [`drover_proto::api::onboardings`]; unknown fields are ignored), onboarding and batch ids
//! checked before they go into a path, and the renderings: the table of what `drover onboard`
//! created, the `get onboardings` table and batch summary, the full view of `describe
//! onboarding`, and the line an action prints. Everything shown passes through [`clean`].
//!
//! Shared by `drover onboard` ([`crate::onboarding_create`]), the verbs on existing onboardings
//! ([`crate::onboarding_manage`]) and `--wait` ([`crate::wait`]).

use std::fmt::Write as _;

use drover_proto::time::Time;
use uuid::Uuid;

use crate::exit::CliError;
use crate::output::{age_of, clean, dash, indented_table, table};

/// The onboardings route.
pub const ONBOARDINGS: &str = "/v1/maas/onboardings";
/// How many characters of any one coordinator string a human view shows.
pub const TEXT_CHARS: usize = 300;
/// How many characters of MAAS's answer (the upstream snippet) `describe` shows.
const SNIPPET_CHARS: usize = 600;
/// How many characters of a message the wide table shows.
const TABLE_MESSAGE_CHARS: usize = 60;
/// The states in lifecycle order (the batch summary lists them so).
const STATE_ORDER: [&str; 8] =
    ["pending", "running", "compensating", "completed", "failed_retryable", "failed_manual_intervention", "cancelled", "reconciled"];

pub use drover_proto::api::onboardings::{
    BatchView as BatchJson, CreatedBatch as CreatedBatchJson, OnboardingActionResponse as ActionJson, OnboardingList as ListJson,
    OnboardingView as OnboardingJson, OneOnboarding as OneJson,
};

/// Parses an id that goes into a URL path (64 otherwise, `what` naming the argument).
pub fn parse_id(what: &str, id: &str) -> Result<Uuid, CliError> {
    Uuid::parse_str(id.trim()).map_err(|_| CliError::usage(format!("{what} {:?} is not an onboarding id (a UUID)", clean(id, 80))))
}

/// `GET /v1/maas/onboardings/{id}`.
pub fn one_path(id: &str) -> Result<String, CliError> {
    Ok(format!("{ONBOARDINGS}/{}", parse_id("ID", id)?))
}

/// Parses a batch id (64 otherwise).
pub fn parse_batch(b: &str) -> Result<Uuid, CliError> {
    Uuid::parse_str(b.trim()).map_err(|_| CliError::usage(format!("--batch {:?} is not a batch id (a UUID)", clean(b, 80))))
}

/// `GET /v1/maas/onboardings/batches/{id}`.
pub fn batch_path(batch: &str) -> Result<String, CliError> {
    Ok(format!("{ONBOARDINGS}/batches/{}", parse_batch(batch)?))
}

fn t(s: &str) -> String {
    clean(s, TEXT_CHARS)
}

fn opt(s: Option<&str>) -> String {
    t(dash(s.unwrap_or("")))
}

/// The table `drover onboard` prints of what it created: `ID HOSTNAME IPMI STATE STAGE`.
pub fn render_created(onboardings: &[OnboardingJson]) -> String {
    let rows: Vec<Vec<String>> = onboardings
        .iter()
        .map(|o| {
            vec![
                clean(&o.onboarding_id, 40),
                clean(&o.hostname, 64),
                clean(&o.ipmi_ip, 48),
                o.state.as_str().to_owned(),
                clean(dash(&o.stage), 32),
            ]
        })
        .collect();
    table(&["ID", "HOSTNAME", "IPMI", "STATE", "STAGE"], &rows)
}

/// The table of `drover get onboardings`, ages seen from `now`.
pub fn render_list(now: Time, onboardings: &[OnboardingJson], wide: bool) -> String {
    let rows: Vec<Vec<String>> = onboardings
        .iter()
        .map(|o| {
            let mut row = vec![
                clean(&o.onboarding_id, 40),
                clean(&o.hostname, 64),
                clean(&o.site, 64),
                o.state.as_str().to_owned(),
                clean(dash(&o.stage), 32),
                clean(dash(o.failure_class.as_deref().unwrap_or("")), 32),
                age_of(now, o.created_at),
            ];
            if wide {
                row.extend([
                    clean(&o.ipmi_ip, 48),
                    clean(&o.profile, 64),
                    o.attempt.to_string(),
                    clean(dash(o.batch_id.as_deref().unwrap_or("")), 40),
                    age_of(now, o.updated_at),
                    clean(dash(&o.message), TABLE_MESSAGE_CHARS),
                ]);
            }
            row
        })
        .collect();
    let mut header = vec!["ID", "HOSTNAME", "SITE", "STATE", "STAGE", "CLASS", "AGE"];
    if wide {
        header.extend(["IPMI", "PROFILE", "ATTEMPT", "BATCH", "UPDATED", "MESSAGE"]);
    }
    table(&header, &rows)
}

/// The batch's summary line: `Batch ID (site S): N onboardings: running 3, completed 2`,
/// states in lifecycle order, states with no onboarding left out.
pub fn render_batch_summary(b: &BatchJson) -> String {
    let rank = |s: &str| STATE_ORDER.iter().position(|x| *x == s).unwrap_or(STATE_ORDER.len());
    let mut counts: Vec<(&str, &u64)> = b.counts.iter().filter(|(_, n)| **n > 0).map(|(s, n)| (s.as_str(), n)).collect();
    counts.sort_by(|a, b| (rank(a.0), a.0).cmp(&(rank(b.0), b.0)));
    let counts: Vec<String> = counts.iter().map(|(s, n)| format!("{s} {n}")).collect();
    let counts = if counts.is_empty() { "none".to_owned() } else { counts.join(", ") };
    let site = if b.site.is_empty() { String::new() } else { format!(" (site {})", clean(&b.site, 64)) };
    format!("Batch {}{site}: {} onboardings: {counts}\n", clean(&b.batch_id, 40), b.total)
}

/// The index of the current stage: `stageIndex` when in range, else where `stage` is.
fn current_stage(o: &OnboardingJson) -> Option<usize> {
    Some(o.stage_index).filter(|i| *i < o.stages.len()).or_else(|| o.stages.iter().position(|s| *s == o.stage))
}

/// The human view of `drover describe onboarding`.
pub fn render_describe(o: &OnboardingJson) -> String {
    fn field(out: &mut String, name: &str, value: String) {
        let _ = writeln!(out, "{:<15}{value}", format!("{name}:"));
    }
    let mut out = String::new();
    field(&mut out, "Onboarding", t(&o.onboarding_id));
    field(&mut out, "Hostname", t(dash(&o.hostname)));
    field(&mut out, "IPMI", t(dash(&o.ipmi_ip)));
    if let Some(mac) = &o.pxe_mac {
        field(&mut out, "PXE MAC", t(dash(mac)));
    }
    field(&mut out, "Site", t(dash(&o.site)));
    field(&mut out, "Profile", t(dash(&o.profile)));
    field(&mut out, "SKU", opt(o.sku.as_deref()));
    field(&mut out, "Batch", opt(o.batch_id.as_deref()));
    field(&mut out, "State", o.state.as_str().to_owned());
    let current = current_stage(o);
    let stage = match current {
        Some(i) => format!("{} ({}/{})", t(dash(&o.stage)), i + 1, o.stages.len()),
        None => t(dash(&o.stage)),
    };
    field(&mut out, "Stage", stage);
    field(&mut out, "Attempt", o.attempt.to_string());
    field(&mut out, "MAAS system", opt(o.system_id.as_deref()));
    field(&mut out, "Host", opt(o.host_id.as_deref()));
    field(&mut out, "Failure class", opt(o.failure_class.as_deref()));
    field(&mut out, "Message", t(dash(&o.message)));
    field(&mut out, "Next action", opt(o.recommended_action.as_deref()));
    match &o.diagnostics {
        None => field(&mut out, "Diagnostics", "-".to_owned()),
        Some(d) => {
            out.push_str("Diagnostics:\n");
            field(&mut out, "  MAAS status", opt(d.maas_status.as_deref()));
            field(&mut out, "  Power", opt(d.power_state.as_deref()));
            let ips: Vec<String> = d.ip_addresses.iter().map(|a| clean(a, 64)).collect();
            field(&mut out, "  IPs", if ips.is_empty() { "-".to_owned() } else { t(&ips.join(", ")) });
            field(&mut out, "  Upstream", clean(dash(d.upstream_snippet.as_deref().unwrap_or("")), SNIPPET_CHARS));
        }
    }
    field(&mut out, "Requester", opt(o.requester.as_deref()));
    let when = |at: Option<Time>| at.map_or_else(|| "-".to_owned(), |at| at.to_string());
    field(&mut out, "Created", when(Some(o.created_at)));
    field(&mut out, "Started", when(o.started_at));
    field(&mut out, "Completed", when(o.completed_at));
    field(&mut out, "Updated", when(Some(o.updated_at)));
    out.push_str("Stages:\n");
    if o.stages.is_empty() {
        out.push_str("  (none)\n");
    }
    for (i, stage) in o.stages.iter().enumerate() {
        let marker = if Some(i) == current { "->" } else { "  " };
        let _ = writeln!(out, "  {marker} {}. {}", i + 1, t(stage));
    }
    out.push_str("Events:\n");
    let rows: Vec<Vec<String>> = o
        .events
        .iter()
        .map(|e| vec![e.at.to_string(), t(dash(&e.stage)), e.attempt.to_string(), t(dash(&e.status)), t(dash(&e.details))])
        .collect();
    out.push_str(&indented_table(&["AT", "STAGE", "ATTEMPT", "STATUS", "DETAILS"], &rows));
    out
}

/// The line an action prints: `ID STATE (stage STAGE): MESSAGE`.
pub fn render_action(a: &ActionJson) -> String {
    let o = &a.onboarding;
    format!("{} {} (stage {}): {}\n", clean(&o.onboarding_id, 40), o.state.as_str(), clean(dash(&o.stage), 32), t(dash(&a.message)))
}
