//! The local fleet's CI side: a CI key and trust roots made on the spot, the demo fleet's
//! layout (two channels, three waves, a disruption budget), its fleet spec for a given
//! system generation, and releases signed exactly as `drover release` signs them.

use std::path::{Path, PathBuf};

use drover_proto::artifacts::TimestampDoc;
use drover_proto::canonical;
use drover_proto::keys::{KeySigner, Signer, signing_key_to_pem, verifying_key_to_pem};
use drover_proto::release::{ReleaseFiles, ReleaseParams, build_release, open_own_timestamp};
use drover_proto::resolve::ReleaseMeta;
use drover_proto::spec::FleetSpec;
use drover_proto::time::Time;
use drover_proto::trust::{KeySetDoc, TrustDoc, TrustKeyDoc, TrustRoots};
use serde_json::{Value, json};

use crate::nixkit::store_path;
use crate::{DevkitError, write_file};

/// The two channels.
pub const CHANNELS: [&str; 2] = ["training", "inference"];
/// The probe every channel's health gate requires (an exec probe running `node-check`).
pub const PROBE: &str = "node-check";

/// One host of the local fleet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetHost {
    /// `dev-01`, …
    pub hostname: String,
    /// One of [`CHANNELS`].
    pub channel: String,
    /// `canary` (wave 1), `early` (wave 2) or none (wave 3), plus `gpu`.
    pub tags: Vec<String>,
}

impl FleetHost {
    /// The wave (1, 2 or 3) its tags put it in.
    pub fn wave(&self) -> u32 {
        if self.tags.iter().any(|t| t == "canary") {
            1
        } else if self.tags.iter().any(|t| t == "early") {
            2
        } else {
            3
        }
    }
}

/// `n` hosts, `{prefix}-01` …, alternating between the two channels; in each channel the
/// first host is the canary, the next ⌈rest/2⌉ go in the second wave, the others in the third.
pub fn layout(prefix: &str, n: usize) -> Vec<FleetHost> {
    let mut hosts = Vec::with_capacity(n);
    for (c, channel) in CHANNELS.iter().enumerate() {
        let members: Vec<usize> = (0..n).filter(|i| i % CHANNELS.len() == c).collect();
        let early = members.len().saturating_sub(1).div_ceil(2);
        for (k, i) in members.iter().enumerate() {
            let mut tags = vec!["gpu".to_owned()];
            match k {
                0 => tags.push("canary".to_owned()),
                k if k <= early => tags.push("early".to_owned()),
                _ => {}
            }
            hosts.push(FleetHost { hostname: format!("{prefix}-{:02}", i + 1), channel: (*channel).to_owned(), tags });
        }
    }
    hosts.sort_by(|a, b| a.hostname.cmp(&b.hostname));
    hosts
}

/// The closure `hostname` runs at `generation` (1 is what it was installed with).
pub fn closure(hostname: &str, generation: u32) -> String {
    store_path(&format!("nixos-system-{hostname}-g{generation}"))
}

/// How the release's rollouts behave.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Each wave soaks this long.
    pub soak_secs: u64,
    /// `halt` or `rollback-and-halt`.
    pub on_health_failure: &'static str,
    /// At most this many hosts of the fleet out of service at once.
    pub max_in_flight: u32,
}

/// The fleet spec with every host on `generation`.
pub fn fleet_spec(hosts: &[FleetHost], generation: u32, policy: &Policy) -> Value {
    let host_specs: serde_json::Map<String, Value> = hosts
        .iter()
        .map(|h| {
            (
                h.hostname.clone(),
                json!({"system": "x86_64-linux", "tags": h.tags, "channel": h.channel, "closure": closure(&h.hostname, generation)}),
            )
        })
        .collect();
    let channels: serde_json::Map<String, Value> = CHANNELS
        .iter()
        .map(|c| {
            (
                (*c).to_owned(),
                json!({
                    "rolloutPolicy": "three-waves", "freshnessWindowSecs": "1d", "signingIntervalSecs": "4h",
                    "probes": [{"name": PROBE, "kind": "exec", "command": [PROBE], "timeoutSecs": 5, "mode": "enforce"}]
                }),
            )
        })
        .collect();
    json!({
        "hosts": host_specs,
        "channels": channels,
        "rolloutPolicies": {
            "three-waves": {
                "waves": [
                    {"selector": {"tags": ["canary"]}, "soakSecs": policy.soak_secs},
                    {"selector": {"tags": ["early"]}, "soakSecs": policy.soak_secs},
                    {"selector": {"all": true}, "soakSecs": policy.soak_secs}
                ],
                "healthGate": {"requiredProbes": [PROBE], "maxFailures": 0},
                "onHealthFailure": policy.on_health_failure
            }
        },
        "disruptionBudgets": [{"selector": {"tags": ["gpu"]}, "maxInFlight": policy.max_in_flight}]
    })
}

/// The CI key of the local fleet (on disk, like `drover keygen` writes it) and its trust
/// roots.
pub struct CiKey {
    signer: KeySigner,
    /// `ci.key` (PKCS#8 PEM, 0600).
    pub key_file: PathBuf,
    /// `trust.json`, threshold 1.
    pub trust_file: PathBuf,
}

impl CiKey {
    /// Makes a fresh key in `dir`.
    pub fn create(dir: &Path) -> Result<CiKey, DevkitError> {
        let key = ed25519_dalek::SigningKey::generate(&mut rand::rngs::OsRng);
        let pem = signing_key_to_pem(&key).map_err(|e| DevkitError::Release(e.to_string()))?;
        let signer = KeySigner::new(key);
        let public = verifying_key_to_pem(&signer.verifying_key()).map_err(|e| DevkitError::Release(e.to_string()))?;
        let (key_file, pub_file, trust_file) = (dir.join("ci.key"), dir.join("ci.pub"), dir.join("trust.json"));
        write_file(&key_file, &pem, 0o600)?;
        write_file(&pub_file, &public, 0o644)?;
        // The document `drover trust` writes, checked by the rules an agent applies.
        let doc = TrustDoc {
            schema_version: 1,
            ci: KeySetDoc {
                threshold: 1,
                keys: vec![TrustKeyDoc {
                    key_id: signer.key_id().clone(),
                    alg: "ed25519".to_owned(),
                    public_key: public.clone(),
                    not_before: None,
                    not_after: None,
                }],
                reject_before: None,
            },
        };
        TrustRoots::from_doc(&doc).map_err(|e| DevkitError::Release(e.to_string()))?;
        let mut trust = canonical::to_vec_of(&doc).map_err(|e| DevkitError::Release(e.to_string()))?;
        trust.push(b'\n');
        std::fs::write(&trust_file, trust).map_err(crate::io_at(&trust_file))?;
        Ok(CiKey { signer, key_file, trust_file })
    }

    /// Signs a release of `spec` as CI does: timestamp `version`, carrying `previous`'s
    /// revertable rollouts forward.
    pub fn sign(
        &self,
        spec: &Value,
        commit: &str,
        version: u64,
        now: Time,
        previous: Option<TimestampDoc>,
    ) -> Result<ReleaseFiles, DevkitError> {
        let bytes = serde_json::to_vec(spec).map_err(|e| DevkitError::Release(e.to_string()))?;
        let spec = FleetSpec::from_json(&bytes).map_err(|e| DevkitError::Release(format!("fleet spec refused: {e}")))?;
        let params = ReleaseParams { meta: ReleaseMeta { ci_commit: commit.to_owned(), created_at: now }, version, previous };
        build_release(&spec, &params, std::slice::from_ref(&self.signer)).map_err(|e| DevkitError::Release(e.to_string()))
    }

    /// The timestamp of `files` (a release this key signed), to build the next one on.
    pub fn timestamp(&self, files: &ReleaseFiles, now: Time) -> Result<TimestampDoc, DevkitError> {
        open_own_timestamp(files, std::slice::from_ref(&self.signer), now).map_err(|e| DevkitError::Release(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn five_hosts_make_two_channels_of_three_waves() {
        let hosts = layout("dev", 5);
        let waves: Vec<(&str, &str, u32)> = hosts.iter().map(|h| (h.hostname.as_str(), h.channel.as_str(), h.wave())).collect();
        assert_eq!(
            waves,
            [
                ("dev-01", "training", 1),
                ("dev-02", "inference", 1),
                ("dev-03", "training", 2),
                ("dev-04", "inference", 2),
                ("dev-05", "training", 3)
            ]
        );
        let twenty = layout("e2e", 20);
        assert_eq!(twenty.iter().filter(|h| h.wave() == 2).count(), 10);
        assert_eq!(twenty.iter().filter(|h| h.wave() == 3).count(), 8);
    }

    #[test]
    fn the_spec_is_a_valid_fleet_spec() {
        let policy = Policy { soak_secs: 2, on_health_failure: "rollback-and-halt", max_in_flight: 2 };
        let spec = fleet_spec(&layout("dev", 5), 2, &policy);
        FleetSpec::from_json(&serde_json::to_vec(&spec).expect("json")).expect("valid");
    }
}
