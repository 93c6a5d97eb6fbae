//! The `/_fake/` control API: what only the hardware or a test could do to a real shelf.
//! JSON in and out, no authentication; errors are `{"error": "…"}` with 400 (bad body), 404
//! (unknown call, outlet or system) or 405 (wrong method). The table is in the module docs of
//! [`fake_shelf`](super).

use std::time::Instant;

use serde_json::{Map, Value, json};

use super::api::{Reply, control_error};
use super::shelf::Shelf;
use super::update::DEFAULT_FAILURE;

/// Answers `METHOD /_fake/{rest}` at `now`.
pub fn handle(shelf: &mut Shelf, method: &str, rest: &str, body: &[u8], now: Instant) -> Reply {
    let call = rest.trim_end_matches('/');
    let expected = match call {
        "stuck" | "lock" | "busy" | "update-fail" => "POST",
        "state" => "GET",
        _ => return control_error(404, format!("no control call /_fake/{call}")),
    };
    if method != expected {
        return control_error(405, format!("/_fake/{call} takes {expected}")).with_header("allow", expected);
    }
    if call == "state" {
        return Reply::json(200, state(shelf, now));
    }
    let body: Value = match serde_json::from_slice(body) {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => return control_error(400, "the body must be a JSON object"),
        Err(e) => return control_error(400, format!("the body is not JSON: {e}")),
    };
    match call {
        "stuck" => stuck(shelf, &body),
        "lock" => lock(shelf, &body),
        "update-fail" => update_fail(shelf, &body),
        _ => busy(shelf, &body),
    }
}

/// `{"outlets": {"A1": "On", …}, "actions": [{"outlet": "A1", "powerState": "Off"}, …],
/// "systems": {"node-1": "On", …}, "resets": [{"system": "node-1", "resetType": "ForceOff"}, …],
/// "firmwareVersion": "1.0.0", "updates": [{"imageUri": "…", "targets": ["…"]}, …]}`.
fn state(shelf: &Shelf, now: Instant) -> Value {
    let outlets: Map<String, Value> = shelf.outlets.iter().map(|o| (o.id.clone(), Value::from(o.power_state(now, shelf.delay)))).collect();
    let actions: Vec<Value> =
        shelf.actions.iter().map(|(outlet, control)| json!({ "outlet": outlet, "powerState": control.as_str() })).collect();
    let systems: Map<String, Value> = shelf.systems.iter().map(|s| (s.id.clone(), Value::from(s.power_state(now, shelf.delay)))).collect();
    let resets: Vec<Value> = shelf.resets.iter().map(|(system, reset)| json!({ "system": system, "resetType": reset.as_str() })).collect();
    let updates: Vec<Value> =
        shelf.firmware.updates.iter().map(|u| json!({ "imageUri": u.request.image_uri, "targets": u.request.targets })).collect();
    json!({
        "outlets": outlets,
        "actions": actions,
        "systems": systems,
        "resets": resets,
        "firmwareVersion": shelf.firmware.version(now),
        "updates": updates,
    })
}

/// The boolean `key` of the body.
fn flag(body: &Value, key: &str) -> Result<bool, Reply> {
    body.get(key).and_then(Value::as_bool).ok_or_else(|| control_error(400, format!("\"{key}\" (a boolean) is required")))
}

/// `{"outlet": "A1", "stuck": bool}` or `{"system": "node-1", "stuck": bool}`: that device's
/// switch accepts requests and never moves (or moves again). Echoes the body.
fn stuck(shelf: &mut Shelf, body: &Value) -> Reply {
    let value = match flag(body, "stuck") {
        Ok(v) => v,
        Err(refused) => return refused,
    };
    let (kind, id, switch) = match (body.get("outlet"), body.get("system")) {
        (Some(Value::String(id)), None) => ("outlet", id, shelf.outlet_mut(id).map(|o| &mut o.switch)),
        (None, Some(Value::String(id))) => ("system", id, shelf.system_mut(id).map(|s| &mut s.switch)),
        (Some(_), Some(_)) => return control_error(400, "name an \"outlet\" or a \"system\", not both"),
        _ => return control_error(400, "\"outlet\" or \"system\" (a string) is required"),
    };
    let Some(switch) = switch else {
        return control_error(404, format!("no {kind} {id}"));
    };
    switch.stuck = value;
    Reply::json(200, json!({ kind: id, "stuck": value }))
}

/// `{"outlet": "A1", "locked": bool}`: sets the outlet's `PowerControlLocked`. Echoes the body.
fn lock(shelf: &mut Shelf, body: &Value) -> Reply {
    let Some(id) = body.get("outlet").and_then(Value::as_str) else {
        return control_error(400, "\"outlet\" (a string) is required");
    };
    let value = match flag(body, "locked") {
        Ok(v) => v,
        Err(refused) => return refused,
    };
    let Some(outlet) = shelf.outlet_mut(id) else {
        return control_error(404, format!("no outlet {id}"));
    };
    outlet.locked = value;
    Reply::json(200, json!({ "outlet": id, "locked": value }))
}

/// `{"fail": true, "message"?: "…"}` makes updates accepted from now on end in `Exception`
/// with that message ([`DEFAULT_FAILURE`] when absent); `{"fail": false}` lets them succeed.
fn update_fail(shelf: &mut Shelf, body: &Value) -> Reply {
    let Some(fail) = body.get("fail").and_then(Value::as_bool) else {
        return control_error(400, "\"fail\" (a boolean) is required");
    };
    let message = match body.get("message") {
        None => DEFAULT_FAILURE.to_owned(),
        Some(Value::String(m)) if !m.is_empty() => m.clone(),
        Some(_) => return control_error(400, "\"message\" must be a non-empty string"),
    };
    shelf.firmware.fail = fail.then_some(message);
    match &shelf.firmware.fail {
        Some(message) => Reply::json(200, json!({ "fail": true, "message": message })),
        None => Reply::json(200, json!({ "fail": false })),
    }
}

fn busy(shelf: &mut Shelf, body: &Value) -> Reply {
    let Some(count) = body.get("count").and_then(Value::as_u64).and_then(|c| u32::try_from(c).ok()) else {
        return control_error(400, "\"count\" (a non-negative integer) is required");
    };
    let retry_after = match body.get("retryAfter") {
        None => 1,
        Some(v) => match v.as_u64() {
            Some(secs) => secs,
            None => return control_error(400, "\"retryAfter\" must be a non-negative integer of seconds"),
        },
    };
    shelf.busy = count;
    shelf.retry_after = retry_after;
    Reply::json(200, json!({ "count": count, "retryAfter": retry_after }))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::fake_shelf::shelf::{Control, Identity, Power};
    use crate::fake_shelf::system::ResetType;
    use crate::fake_shelf::update::parse_simple_update;

    fn shelf() -> Shelf {
        Shelf::new(Identity::default(), &["A1".into(), "B1".into()], Power::On, Duration::from_millis(1500))
    }

    fn call(s: &mut Shelf, method: &str, rest: &str, body: &str) -> (u16, Value) {
        let r = handle(s, method, rest, body.as_bytes(), Instant::now());
        (r.status, r.body.unwrap_or(Value::Null))
    }

    #[test]
    fn stuck_and_lock_set_their_flags() {
        let mut s = shelf();
        assert_eq!(call(&mut s, "POST", "stuck", r#"{"outlet":"A1","stuck":true}"#), (200, json!({"outlet":"A1","stuck":true})));
        assert!(s.outlet("A1").unwrap().switch.stuck);
        assert_eq!(call(&mut s, "POST", "lock/", r#"{"outlet":"B1","locked":true}"#).0, 200);
        assert!(s.outlet("B1").unwrap().locked);
        assert_eq!(call(&mut s, "POST", "lock", r#"{"outlet":"B1","locked":false}"#).0, 200);
        assert!(!s.outlet("B1").unwrap().locked);
        assert_eq!(call(&mut s, "POST", "lock", r#"{"outlet":"C1","locked":true}"#).0, 404);
        assert_eq!(call(&mut s, "POST", "lock", r#"{"outlet":"A1","locked":"yes"}"#).0, 400);
        assert_eq!(call(&mut s, "POST", "stuck", r#"{"stuck":true}"#).0, 400);
        assert_eq!(call(&mut s, "POST", "stuck", "nope").0, 400);
        assert_eq!(call(&mut s, "POST", "stuck", "[]").0, 400);
        assert_eq!(call(&mut s, "POST", "stuck", r#"{"system":"node-1","stuck":true}"#).0, 404, "no systems unless asked");
    }

    #[test]
    fn stuck_takes_a_system_and_state_reports_systems_and_resets() {
        let mut s = shelf().with_systems(&["node-1".into(), "node-2".into()], Power::Off);
        let t0 = Instant::now();
        assert_eq!(call(&mut s, "POST", "stuck", r#"{"system":"node-1","stuck":true}"#), (200, json!({"system":"node-1","stuck":true})));
        assert!(s.system("node-1").unwrap().switch.stuck);
        assert!(!s.outlet("A1").unwrap().switch.stuck);
        assert_eq!(call(&mut s, "POST", "stuck", r#"{"system":"node-9","stuck":true}"#).0, 404);
        assert_eq!(call(&mut s, "POST", "stuck", r#"{"system":"node-1","outlet":"A1","stuck":true}"#).0, 400);
        assert_eq!(call(&mut s, "POST", "stuck", r#"{"system":1,"stuck":true}"#).0, 400);
        assert_eq!(call(&mut s, "POST", "stuck", r#"{"system":"node-1"}"#).0, 400);
        s.reset("node-1", ResetType::On, t0).unwrap();
        s.reset("node-2", ResetType::ForceRestart, t0).unwrap();
        let v = state(&s, t0);
        assert_eq!(v["systems"], json!({"node-1": "Off", "node-2": "PoweringOn"}));
        assert_eq!(v["resets"], json!([{"system": "node-1", "resetType": "On"}, {"system": "node-2", "resetType": "ForceRestart"}]));
        assert_eq!(v["actions"], json!([]));
        assert_eq!(call(&mut s, "POST", "stuck", r#"{"system":"node-1","stuck":false}"#).0, 200);
        s.reset("node-1", ResetType::On, t0).unwrap();
        assert_eq!(state(&s, t0 + s.delay)["systems"]["node-1"], "On");
        assert_eq!(state(&shelf(), t0)["systems"], json!({}));
    }

    #[test]
    fn busy_sets_the_spell() {
        let mut s = shelf();
        assert_eq!(call(&mut s, "POST", "busy", r#"{"count":3}"#), (200, json!({"count":3,"retryAfter":1})));
        assert_eq!((s.busy, s.retry_after), (3, 1));
        assert_eq!(call(&mut s, "POST", "busy", r#"{"count":1,"retryAfter":7}"#).0, 200);
        assert_eq!((s.busy, s.retry_after), (1, 7));
        assert_eq!(call(&mut s, "POST", "busy", r#"{"count":-1}"#).0, 400);
        assert_eq!(call(&mut s, "POST", "busy", r#"{"count":1,"retryAfter":"soon"}"#).0, 400);
    }

    #[test]
    fn state_reports_outlets_and_accepted_actions_in_order() {
        let mut s = shelf();
        let now = Instant::now();
        s.power_control("B1", Control::Off, now).unwrap();
        s.power_control("A1", Control::PowerCycle, now).unwrap();
        let (status, v) = call(&mut s, "GET", "state", "");
        assert_eq!(status, 200);
        assert_eq!(v["outlets"], json!({"A1": "PoweringOff", "B1": "PoweringOff"}));
        assert_eq!(v["actions"], json!([{"outlet":"B1","powerState":"Off"},{"outlet":"A1","powerState":"PowerCycle"}]));
    }

    #[test]
    fn update_fail_sets_and_clears_the_switch() {
        let mut s = shelf();
        let body = r#"{"fail":true,"message":"image signature invalid"}"#;
        assert_eq!(call(&mut s, "POST", "update-fail", body), (200, json!({"fail": true, "message": "image signature invalid"})));
        assert_eq!(s.firmware.fail.as_deref(), Some("image signature invalid"));
        assert_eq!(call(&mut s, "POST", "update-fail", r#"{"fail":true}"#).1["message"], DEFAULT_FAILURE);
        assert_eq!(call(&mut s, "POST", "update-fail", r#"{"fail":false}"#), (200, json!({"fail": false})));
        assert_eq!(s.firmware.fail, None);
        assert_eq!(call(&mut s, "POST", "update-fail", r#"{"fail":"yes"}"#).0, 400);
        assert_eq!(call(&mut s, "POST", "update-fail", r#"{"fail":true,"message":7}"#).0, 400);
        assert_eq!(call(&mut s, "GET", "update-fail", "").0, 405);
    }

    #[test]
    fn state_reports_the_firmware_version_and_every_update() {
        let mut s = shelf();
        let t0 = Instant::now();
        let (status, v) = call(&mut s, "GET", "state", "");
        assert_eq!((status, &v["firmwareVersion"], &v["updates"]), (200, &json!("1.0.0"), &json!([])));
        let shelf_uri = "/redfish/v1/PowerEquipment/PowerShelves/1";
        let body = json!({"ImageURI": "https://fw.example/ps-fw-2.1.bin", "Targets": [shelf_uri]}).to_string();
        s.firmware.start(parse_simple_update(body.as_bytes(), shelf_uri).unwrap(), t0);
        let v = state(&s, t0);
        assert_eq!(v["firmwareVersion"], "1.0.0");
        assert_eq!(v["updates"], json!([{"imageUri": "https://fw.example/ps-fw-2.1.bin", "targets": [shelf_uri]}]));
        assert_eq!(state(&s, t0 + s.firmware.time)["firmwareVersion"], "ps-fw-2.1");
    }

    #[test]
    fn unknown_calls_and_methods() {
        let mut s = shelf();
        assert_eq!(call(&mut s, "GET", "nope", "").0, 404);
        assert_eq!(call(&mut s, "POST", "state", "{}").0, 405);
        let r = handle(&mut s, "GET", "busy", b"", Instant::now());
        assert_eq!((r.status, r.headers), (405, vec![("allow", "POST".to_owned())]));
    }
}
