//! Secrets a completed task no longer needs are erased from the stored envelope: a
//! `node.hw_sync_reseed` carries the machine's MAAS OAuth token, which the coordinator must
//! hold only until the host has acknowledged the task. The envelope's signature no longer
//! verifies afterwards, which is fine: a completed task is never served again.
//!
//! The token is stored only sealed to the host's key (`sealedToken`, see
//! `drover_proto::seal`), so erasing removes ciphertext; the plain field names stay listed for
//! stores written before tokens were sealed. With `secure_delete` on and the WAL truncated after an erasure
//! (`SqliteStore`), the old row does not linger in free pages or the WAL either.

use serde_json::Value;

/// The task fields that hold secrets (`drover_proto::task::Secret` values), by kind.
const SECRET_FIELDS: &[&str] = &["consumerKey", "tokenKey", "tokenSecret", "sealedToken"];

/// What replaces an erased value.
pub const ERASED: &str = "<erased>";

/// The envelope with every secret field of its task erased, or `None` when it holds none
/// (or is not a task envelope at all).
pub fn erase_task_secrets(envelope: &[u8]) -> Option<Vec<u8>> {
    let mut v: Value = serde_json::from_slice(envelope).ok()?;
    let kind = v.get_mut("signed")?.get_mut("kind")?.as_object_mut()?;
    let mut erased = false;
    for field in SECRET_FIELDS {
        if let Some(value) = kind.get_mut(*field) {
            if value.as_str() != Some(ERASED) {
                *value = Value::String(ERASED.to_owned());
                erased = true;
            }
        }
    }
    if !erased {
        return None;
    }
    serde_json::to_vec(&v).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_maas_token_is_erased_and_nothing_else_changes() {
        let env = serde_json::json!({
            "signed": { "taskId": "t", "kind": { "type": "node.hw_sync_reseed", "maasUrl": "http://maas:5240/MAAS", "systemId": "abc123",
                "consumerKey": "CK-SECRET", "tokenKey": "TK-SECRET", "tokenSecret": "TS-SECRET" } },
            "signatures": [{ "keyId": "k", "alg": "ed25519", "sig": "s" }]
        });
        let out = erase_task_secrets(env.to_string().as_bytes()).expect("erased");
        let text = String::from_utf8(out).expect("utf-8");
        assert!(!text.contains("SECRET"), "{text}");
        let v: Value = serde_json::from_str(&text).expect("json");
        assert_eq!(v["signed"]["kind"]["systemId"], "abc123");
        assert_eq!(v["signed"]["kind"]["tokenSecret"], ERASED);
        assert!(erase_task_secrets(text.as_bytes()).is_none(), "erasing twice changes nothing");
    }

    #[test]
    fn tasks_without_secrets_are_left_alone() {
        let env = serde_json::json!({ "signed": { "kind": { "type": "node.gpu_scrub" } }, "signatures": [] });
        assert!(erase_task_secrets(env.to_string().as_bytes()).is_none());
        assert!(erase_task_secrets(b"not json").is_none());
    }
}
