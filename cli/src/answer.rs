//! Coordinator answers as the CLI reads them: decoded as the coordinator's own types
//! ([`drover_proto::api`]), exit 76 (EX_PROTOCOL) when one is not ([`decode`],
//! [`decode_all`]), and printed as `-o` asks ([`print_answer`]).
//!
//! Shared by every verb that reads the coordinator; the requests themselves are
//! [`crate::client`]'s.

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::exit::{CliError, codes};
use crate::output::{Output, clean, pretty, print};

/// Decodes a coordinator answer already read as JSON (76 when it is not the API's).
pub fn decode<T: DeserializeOwned>(path: &str, value: &Value) -> Result<T, CliError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let at = e.path().to_string();
        CliError::new(codes::PROTOCOL, format!("{path}: unexpected answer: {} (at {at})", clean(&e.inner().to_string(), 200)))
    })
}

/// Decodes every row of a listing read as JSON (76 when one is not the API's).
pub fn decode_all<T: DeserializeOwned>(path: &str, rows: &[Value]) -> Result<Vec<T>, CliError> {
    rows.iter().map(|r| decode(path, r)).collect()
}

/// Prints a coordinator answer `value` (from `path`) as `output` asks: the JSON unchanged, or
/// `render` of it decoded as `T`. It is decoded either way, so an answer that is not the API's
/// exits 76 even with `-o json`.
pub fn print_answer<T: DeserializeOwned>(
    output: Output,
    path: &str,
    value: &Value,
    render: impl FnOnce(&T) -> String,
) -> Result<(), CliError> {
    let decoded: T = decode(path, value)?;
    print(&match output {
        Output::Json => pretty(value)?,
        Output::Table | Output::Wide => render(&decoded),
    })
}

#[cfg(test)]
mod tests {
    use drover_proto::api::jobs::{JobDetail, JobJson};

    use super::*;

    #[test]
    fn an_answer_that_is_not_the_coordinators_job_is_a_protocol_error() {
        // A field the coordinator always writes is missing, or has the wrong type, or a state no
        // coordinator writes: the CLI says so (76) instead of showing blanks.
        let missing = serde_json::json!({"jobId": "j", "kind": "soft_reset", "state": "pending"});
        let e = decode::<JobJson>("/v1/jobs/j", &missing).expect_err("not a job");
        assert_eq!(e.code(), codes::PROTOCOL);
        let mut unknown_state = crate::fixtures::sample_job();
        unknown_state["state"] = "exploded".into();
        let e = decode::<JobDetail>("/v1/jobs/job-7", &unknown_state).expect_err("no such state");
        assert!(e.to_string().contains("state"), "{e}");
        let mut wrong_type = crate::fixtures::sample_job();
        wrong_type["attempt"] = "two".into();
        assert_eq!(decode::<JobDetail>("/v1/jobs/job-7", &wrong_type).expect_err("not a number").code(), codes::PROTOCOL);
    }
}
