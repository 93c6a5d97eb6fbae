//! Operator-API helpers the end-to-end tests share: JSON calls as the admin and the viewer,
//! issuing a task and waiting (bounded) for its result, waiting for a host to come up.

use std::path::Path;
use std::time::{Duration, Instant};

use drover_engine::store::TaskState;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::Harness;

/// The bound on every wait here.
pub const WAIT: Duration = Duration::from_secs(90);

impl Harness {
    /// `POST path` with a JSON body as the admin: the status code and the answer as JSON (a
    /// string when the answer is not JSON).
    pub async fn post_json(&self, path: &str, body: &Value) -> (String, Value) {
        let (code, text) = self.call(Some(&self.admin), "POST", path, Some(&body.to_string())).await;
        (code, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    /// `GET path` as the viewer; it must answer 200 with JSON.
    pub async fn get_json(&self, path: &str) -> Value {
        let (code, text) = self.call(Some(&self.viewer), "GET", path, None).await;
        assert_eq!(code, "200", "{path}: {text}");
        serde_json::from_str(&text).expect("json")
    }

    /// Issues `task` to `host` through `POST /v1/hosts/{id}/tasks` with `reason`; its id.
    pub async fn issue_task(&self, host: Uuid, task: Value, reason: &str) -> Uuid {
        let (code, v) = self.post_json(&format!("/v1/hosts/{host}/tasks"), &json!({ "task": task, "reason": reason })).await;
        assert_eq!(code, "201", "{v}");
        Uuid::parse_str(v["taskId"].as_str().expect("taskId")).expect("uuid")
    }

    /// Waits (bounded) for the task's result and reads it through the operator API; the
    /// agent's `log`, when given, goes into the panic message if none came.
    pub async fn task_result(&self, task: Uuid, log: Option<&Path>) -> Value {
        let deadline = Instant::now() + WAIT;
        loop {
            let record = self.running.app.store.get_task(task).expect("store").expect("task");
            if record.state == TaskState::Completed {
                return self.get_json(&format!("/v1/tasks/{task}")).await;
            }
            assert!(
                Instant::now() < deadline,
                "task {task} never completed ({:?}); the agent's log:\n{}",
                record.state,
                log.map(|l| std::fs::read_to_string(l).unwrap_or_default()).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits (bounded) until the host has checked in and is active.
    pub async fn until_active(&self, host: Uuid) {
        let deadline = Instant::now() + WAIT;
        loop {
            let v = self.get_json(&format!("/v1/hosts/{host}")).await;
            if v["state"] == "active" {
                return;
            }
            assert!(Instant::now() < deadline, "host {host} never became active: {v}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A task view (`GET /v1/tasks/{id}`) that completed and succeeded.
pub fn assert_task_succeeded(view: &Value) {
    assert_eq!(view["state"], "completed", "{view}");
    assert_eq!(view["result"]["outcome"], "succeeded", "{}", serde_json::to_string_pretty(view).unwrap_or_default());
}

/// Every event `filter` selects (`kind=…&rollout=…`, or empty for all), all pages, in id
/// order, read through `admin`.
pub async fn all_events(admin: &drover_client::CoordinatorClient, filter: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut after = 0;
    loop {
        let page: Value = admin.get_json(&format!("/v1/events?{filter}&after={after}&limit=500")).await.expect("events");
        out.extend(page["items"].as_array().expect("items").iter().cloned());
        match page["next"].as_i64() {
            Some(next) => after = next,
            None => return out,
        }
    }
}
