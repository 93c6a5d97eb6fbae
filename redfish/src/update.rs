//! Firmware through `UpdateService.SimpleUpdate` (DSP0266; schema `UpdateService`): the BMC
//! fetches `ImageURI` itself and applies it to the listed `Targets`. The action is found
//! through the service root's `UpdateService` link and posted to its own `target`. A 202
//! answer names a task monitor in `Location`: it is read until it stops answering 202
//! (bounded by `converge_timeout`), and the task's end state decides; 200 or 204 is done.

use std::time::Instant;

use serde_json::{Value, json};

use crate::client::RedfishClient;
use crate::error::RedfishError;

/// Task states that end a task badly (schema `Task.TaskState`).
const FAILED_TASK_STATES: [&str; 4] = ["Exception", "Killed", "Cancelled", "Interrupted"];

impl RedfishClient {
    /// Asks the BMC to apply the image at `image_uri` to `targets` (resource URIs, e.g. a
    /// system), and waits for the update's task when the BMC runs it as one.
    pub async fn simple_update(&self, image_uri: &str, targets: &[String]) -> Result<(), RedfishError> {
        let root = self.get("/redfish/v1/").await?;
        let protocol = |uri: &str, reason: &str| RedfishError::Protocol { uri: uri.to_owned(), reason: reason.to_owned() };
        let service =
            root["UpdateService"]["@odata.id"].as_str().ok_or_else(|| protocol("/redfish/v1/", "the service has no UpdateService"))?;
        let us = self.get(service).await?;
        let action = us["Actions"]["#UpdateService.SimpleUpdate"]["target"]
            .as_str()
            .ok_or_else(|| protocol(service, "the UpdateService advertises no #UpdateService.SimpleUpdate action"))?
            .to_owned();
        tracing::info!(action = %action, image = %image_uri, targets = ?targets, "redfish simple update");
        let (status, _, location) = self.post_with_location(&action, &json!({ "ImageURI": image_uri, "Targets": targets })).await?;
        if status != 202 {
            return Ok(());
        }
        let monitor = location.ok_or_else(|| protocol(&action, "202 without a Location task monitor"))?;
        let started = Instant::now();
        loop {
            let (status, body) = self.get_status(&monitor).await?;
            if status != 202 {
                return task_outcome(&monitor, &body);
            }
            if started.elapsed() >= self.config.converge_timeout {
                return Err(RedfishError::NotConverged {
                    uri: monitor,
                    target: "Completed".into(),
                    last: body["TaskState"].as_str().unwrap_or("Running").to_owned(),
                    waited_secs: started.elapsed().as_secs(),
                });
            }
            tokio::time::sleep(self.config.poll_interval).await;
        }
    }
}

/// A finished task monitor's answer: the operation's own response, or a `Task` whose state
/// says how it ended.
fn task_outcome(monitor: &str, body: &Value) -> Result<(), RedfishError> {
    match body["TaskState"].as_str() {
        Some(s) if FAILED_TASK_STATES.contains(&s) => {
            let why = body["Messages"][0]["Message"].as_str().unwrap_or("no message");
            Err(RedfishError::Refused { uri: monitor.to_owned(), status: 200, message: format!("update task ended {s}: {why}") })
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_that_ended_badly_is_an_error_with_its_message() {
        let bad = json!({"TaskState": "Exception", "Messages": [{"Message": "image signature invalid"}]});
        let e = task_outcome("/redfish/v1/TaskService/Tasks/7", &bad).unwrap_err();
        assert!(e.to_string().contains("Exception: image signature invalid"), "{e}");
        assert!(task_outcome("/t", &json!({"TaskState": "Completed"})).is_ok());
        assert!(task_outcome("/t", &Value::Null).is_ok(), "the operation's own empty answer");
    }
}
