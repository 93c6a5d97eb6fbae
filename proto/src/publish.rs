//! Publishing a release to the coordinator: `POST /v1/releases`, shared by the coordinator
//! and `drover release publish`.
//!
//! The body carries a release directory as `drover release` wrote it, each file by its
//! relative path as text. Text, not base64: every release file is canonical JSON (UTF-8), so
//! a JSON string carries it byte for byte, and the coordinator verifies exactly those bytes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::release::ReleaseFiles;

/// `POST /v1/releases` body (publisher or admin).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PublishRequest {
    /// Relative path (`timestamp.json`, `rollouts/<id>.json.sig`, …) → the file's text.
    pub files: BTreeMap<String, String>,
    /// Why it is published, for the audit log (a default is recorded when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl PublishRequest {
    /// A request carrying `files`. `None` when a file is not UTF-8: no valid release holds
    /// one, and it could not travel byte-exact as a JSON string.
    pub fn from_files(files: &ReleaseFiles, reason: Option<String>) -> Option<PublishRequest> {
        let mut out = BTreeMap::new();
        for (path, bytes) in &files.files {
            out.insert(path.clone(), String::from_utf8(bytes.clone()).ok()?);
        }
        Some(PublishRequest { files: out, reason })
    }

    /// The files as bytes, for verification and storage.
    pub fn to_files(&self) -> ReleaseFiles {
        ReleaseFiles { files: self.files.iter().map(|(p, t)| (p.clone(), t.as_bytes().to_vec())).collect() }
    }
}

/// `POST /v1/releases` response (201).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PublishResponse {
    /// The stored timestamp version.
    pub version: u64,
    /// The rollout ids of the manifests the release carries (current and revertable).
    pub rollouts: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_round_trip_and_non_utf8_is_refused() {
        let mut files = ReleaseFiles::default();
        files.files.insert("timestamp.json".into(), b"{\"a\":1}".to_vec());
        let req = PublishRequest::from_files(&files, None).expect("utf-8");
        assert_eq!(req.to_files(), files);
        files.files.insert("x".into(), vec![0xff]);
        assert!(PublishRequest::from_files(&files, None).is_none());
    }
}
