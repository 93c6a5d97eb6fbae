//! Helpers of the MAAS workflow tests: what the fake MAAS's request log says each machine was
//! asked to change, and when an onboarding has stopped moving.

use std::collections::BTreeMap;

use drover_devkit::fake_maas::FakeMaas;
use serde_json::Value;

/// State-changing MAAS calls per machine, from the fake's request log: each POST's `op=`
/// (`create` for a POST without one), keyed by the machine's system id — from the path, or for
/// a collection op such as `accept` from the `machines=` field of its body.
pub fn state_changes(maas: &FakeMaas) -> BTreeMap<String, Vec<String>> {
    let log = maas.control("GET", "requests", None).expect("the fake's request log");
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in log.as_array().cloned().unwrap_or_default() {
        if r["method"] != "POST" {
            continue;
        }
        let path = r["path"].as_str().unwrap_or_default();
        let query = r["query"].as_str().unwrap_or_default();
        let op = query.split('&').find_map(|kv| kv.strip_prefix("op=")).unwrap_or("create").to_owned();
        let mut id = path.split('/').skip_while(|s| *s != "machines" && *s != "nodes").nth(1).unwrap_or("").to_owned();
        if id.is_empty() {
            let body = r["body"].as_str().unwrap_or_default();
            id = body.split('&').find_map(|kv| kv.strip_prefix("machines=")).unwrap_or_default().to_owned();
        }
        out.entry(id).or_default().push(op);
    }
    out
}

/// The onboarding (its API JSON) has stopped: completed, reconciled, cancelled or failed.
pub fn settled(o: &Value) -> bool {
    matches!(o["state"].as_str(), Some("completed" | "failed_manual_intervention" | "failed_retryable" | "cancelled" | "reconciled"))
}
