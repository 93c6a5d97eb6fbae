//! The per-host wire messages and the state enums.
//!
//! Every message (intents, tasks of every kind, check-in requests and responses, confirms, API
//! errors, and the release artifacts) survives a serde round trip with stable canonical bytes
//! and the documented field names, secrets carried by tasks never reach `Debug`, and the state
//! enums keep their string forms and transition tables.

use crate::spec_fixtures;

use std::collections::BTreeSet;
use std::fmt::Debug;

use drover_proto::artifacts::{FleetResolved, RolloutManifest, TimestampDoc};
use drover_proto::canonical;
use drover_proto::intent::Intent;
use drover_proto::keys::KeySigner;
use drover_proto::names::RolloutId;
use drover_proto::release::{self, ReleaseParams};
use drover_proto::report::{
    ActivationPhase, ActivationStatus, ApiError, ApiErrorBody, CheckinRequest, CheckinResponse, ConfirmRequest, DiskUsage, GpuSummary,
    HealthReport, HwSyncState, ProbeOutcome, ProbeResult, ReportEvent, StateDirHealth, StepOutcome, StepResult, TaskOutcome, TaskResult,
};
use drover_proto::sig::Envelope;
use drover_proto::spec::Mode;
use drover_proto::states::{HostLifecycle, HostRolloutState, JobState, RolloutState, WaveState};
use drover_proto::task::{ComputeProcessPolicy, GpuVendor, HwSyncReseed, MaasToken, MachineToken, Secret, StorageScope, Task, TaskKind};
use ed25519_dalek::SigningKey;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use spec_fixtures::*;

// ---------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------

fn signer() -> KeySigner {
    KeySigner::new(SigningKey::from_bytes(&[9u8; 32]))
}

/// Serialises, parses back and checks equality and canonical-byte stability; returns the
/// value's JSON form for shape checks.
fn round_trip<T: Serialize + DeserializeOwned + PartialEq + Debug>(value: &T) -> Value {
    let json = serde_json::to_vec(value).expect("serialise");
    let back: T = serde_json::from_slice(&json).expect("parse back");
    assert_eq!(&back, value, "serde round trip");
    let c1 = canonical::to_vec_of(value).expect("canonical");
    let c2 = canonical::to_vec_of(&back).expect("canonical");
    assert_eq!(c1, c2, "canonical bytes stable across a round trip");
    assert!(canonical::is_canonical(&c1));
    let from_canonical: T = serde_json::from_slice(&c1).expect("parse canonical bytes");
    assert_eq!(&from_canonical, value, "canonical bytes parse to the same value");
    assert_eq!(canonical::to_vec_of(&from_canonical).expect("canonical"), c1);
    serde_json::to_value(value).expect("value")
}

fn keys(v: &Value) -> BTreeSet<&str> {
    v.as_object().expect("object").keys().map(String::as_str).collect()
}

// ---------------------------------------------------------------------------------------------
// Serde round trips
// ---------------------------------------------------------------------------------------------

fn intent() -> Intent {
    Intent {
        intent_id: "7d3c2a5e-3c1f-4b7e-9a4d-1f2e3d4c5b6a".to_owned(),
        host_id: "0f0e0d0c-0b0a-4909-8807-060504030201".to_owned(),
        hostname: "gpu-a-01".to_owned(),
        rollout_id: RolloutId::new("gpu", COMMIT).expect("id"),
        manifest_sha256: "ab".repeat(32),
        wave_index: 0,
        target_closure: "/nix/store/1a2b3c4d556f7g8h9i0jklmnpqrsvwxy-nixos-system-gpu-a-01-25.05".to_owned(),
        issued_at: t("2026-11-21T10:00:00Z"),
        expires_at: t("2026-11-21T11:00:00Z"),
        confirm_window_secs: 120,
    }
}

const CK: &str = "CK-secret-consumer-9f8e7d";
const TK: &str = "TK-secret-token-6c5b4a";
const TS: &str = "TS-secret-tokensecret-3a2b1c";

fn task(kind: TaskKind) -> Task {
    Task {
        task_id: "c1d2e3f4-a5b6-4c7d-8e9f-0a1b2c3d4e5f".to_owned(),
        host_id: "0f0e0d0c-0b0a-4909-8807-060504030201".to_owned(),
        job_id: Some("job-42".to_owned()),
        issued_at: t("2026-11-21T10:00:00Z"),
        expires_at: t("2026-11-21T10:30:00Z"),
        kind,
    }
}

fn maas_token() -> MaasToken {
    MaasToken { consumer_key: Secret::new(CK), token_key: Secret::new(TK), token_secret: Secret::new(TS) }
}

fn reseed() -> TaskKind {
    TaskKind::HwSyncReseed(HwSyncReseed {
        maas_url: "http://maas.example:5240/MAAS".to_owned(),
        system_id: "abc123".to_owned(),
        token: MachineToken::Plain(maas_token()),
    })
}

fn every_task_kind() -> Vec<(TaskKind, &'static str)> {
    vec![
        (
            TaskKind::GpuScrub {
                vendor: GpuVendor::Nvidia,
                compute_processes: ComputeProcessPolicy::StopTenant,
                memory_used_threshold_mib: 64,
                dcgm_diag_level: Some(2),
            },
            "node.gpu_scrub",
        ),
        (TaskKind::StorageCleanup { scope: StorageScope::All }, "node.storage_cleanup"),
        (TaskKind::ValidateClean { check_gpu: false, memory_used_threshold_mib: Some(64) }, "node.validate_clean"),
        (reseed(), "node.hw_sync_reseed"),
        (TaskKind::Drain { timeout_secs: 600 }, "node.drain"),
        (TaskKind::RevokeUser { users: Some(vec!["alice".to_owned(), "bob".to_owned()]) }, "allocation.revoke_user"),
        (TaskKind::Uninstall { purge_state: true }, "node.uninstall"),
    ]
}

#[test]
fn intent_round_trips_with_design_field_names() {
    let v = round_trip(&intent());
    let want: BTreeSet<&str> = [
        "intentId",
        "hostId",
        "hostname",
        "rolloutId",
        "manifestSha256",
        "waveIndex",
        "targetClosure",
        "issuedAt",
        "expiresAt",
        "confirmWindowSecs",
    ]
    .into();
    assert_eq!(keys(&v), want);
    assert_eq!(v["rolloutId"], json!(format!("gpu@{COMMIT}")));
    assert_eq!(v["issuedAt"], json!("2026-11-21T10:00:00Z"));
    let mut bad = v.clone();
    bad["extra"] = json!(true);
    assert!(serde_json::from_value::<Intent>(bad).is_err(), "unknown fields are refused");
    let mut bad = v;
    bad["rolloutId"] = json!("gpu@../x");
    assert!(serde_json::from_value::<Intent>(bad).is_err(), "a bad rollout id is refused");
}

#[test]
fn task_round_trips_for_every_kind_with_catalog_type_tags() {
    let kinds = every_task_kind();
    let tags: BTreeSet<&str> = kinds.iter().map(|(_, tag)| *tag).collect();
    assert_eq!(tags.len(), 7, "every variant, distinct tags");
    for (kind, tag) in kinds {
        assert_eq!(kind.type_name(), tag);
        let v = round_trip(&task(kind));
        assert_eq!(v["kind"]["type"], json!(tag), "{v}");
        assert_eq!(v["taskId"], json!("c1d2e3f4-a5b6-4c7d-8e9f-0a1b2c3d4e5f"));
        assert_eq!(v["jobId"], json!("job-42"));
    }
    let mut no_job = task(TaskKind::Drain { timeout_secs: 1 });
    no_job.job_id = None;
    assert!(round_trip(&no_job).get("jobId").is_none());
}

#[test]
fn task_kind_fields_are_camel_case_with_defaults() {
    let v = serde_json::to_value(task(every_task_kind().swap_remove(0).0)).expect("json");
    assert_eq!(
        v["kind"],
        json!({ "type": "node.gpu_scrub", "vendor": "nvidia", "computeProcesses": "stop-tenant", "memoryUsedThresholdMib": 64, "dcgmDiagLevel": 2 })
    );
    let v = serde_json::to_value(reseed()).expect("json");
    assert_eq!(v["maasUrl"], json!("http://maas.example:5240/MAAS"));
    assert_eq!(v["tokenSecret"], json!(TS), "the wire form carries the secret to the agent");
    let k: TaskKind = serde_json::from_value(json!({ "type": "node.validate_clean" })).expect("parse");
    assert_eq!(k, TaskKind::ValidateClean { check_gpu: true, memory_used_threshold_mib: None });
    let k: TaskKind = serde_json::from_value(json!({ "type": "node.gpu_scrub", "memoryUsedThresholdMib": 10 })).expect("parse");
    assert_eq!(
        k,
        TaskKind::GpuScrub {
            vendor: GpuVendor::Auto,
            compute_processes: ComputeProcessPolicy::Refuse,
            memory_used_threshold_mib: 10,
            dcgm_diag_level: None
        }
    );
    let k: TaskKind = serde_json::from_value(json!({ "type": "allocation.revoke_user" })).expect("parse");
    assert_eq!(k, TaskKind::RevokeUser { users: None });
    assert!(serde_json::from_value::<TaskKind>(json!({ "type": "node.storage_cleanup", "scope": "nfs" })).is_err());
    assert!(serde_json::from_value::<TaskKind>(json!({ "type": "node.drain", "timeoutSecs": 5, "force": true })).is_err());
}

fn checkin_request() -> CheckinRequest {
    CheckinRequest {
        agent_version: "0.1.0".to_owned(),
        boot_id: "5e6f7a8b-9c0d-4e1f-a2b3-c4d5e6f7a8b9".to_owned(),
        current_generation: Some("/nix/store/1a2b3c4d556f7g8h9i0jklmnpqrsvwxy-nixos-system-gpu-a-01-25.05".to_owned()),
        health: Some(HealthReport {
            collected_at: t("2026-11-21T10:05:00Z"),
            uptime_secs: 86_400,
            load_avg_1m: 0.37,
            mem_total_bytes: 1 << 40,
            mem_available_bytes: 3 << 38,
            cpu_usage_pct: Some(12.5),
            disks: vec![DiskUsage { mount_point: "/".to_owned(), total_bytes: 1 << 39, available_bytes: 1 << 38 }],
            failed_units: vec!["nvidia-fabricmanager.service".to_owned()],
            gpu: Some(GpuSummary { vendor: "nvidia".to_owned(), count: 8, unhealthy: 1 }),
            hw_sync: Some(HwSyncState { creds_present: true, timer_active: false }),
            collect_errors: vec![],
            state_dir: Some(StateDirHealth {
                path: "/var/lib/drover".to_owned(),
                total_bytes: 1 << 39,
                available_bytes: 0,
                ready: false,
                reason: Some("no space left on the filesystem".to_owned()),
            }),
        }),
        probe_results: vec![
            ProbeResult {
                name: "nvidia-persistenced".to_owned(),
                outcome: ProbeOutcome::Passed,
                mode: Mode::Enforce,
                message: "exit 0".to_owned(),
                duration_ms: 12,
                observed_at: t("2026-11-21T10:05:01Z"),
            },
            ProbeResult {
                name: "scheduler-port".to_owned(),
                outcome: ProbeOutcome::ProbeError,
                mode: Mode::Observe,
                message: "timed out after 5s".to_owned(),
                duration_ms: 5000,
                observed_at: t("2026-11-21T10:05:06Z"),
            },
            ProbeResult {
                name: "api-up".to_owned(),
                outcome: ProbeOutcome::Failed,
                mode: Mode::Enforce,
                message: "status 503".to_owned(),
                duration_ms: 40,
                observed_at: t("2026-11-21T10:05:07Z"),
            },
        ],
        probe_evidence: None,
        task_results: vec![TaskResult {
            task_id: "c1d2e3f4-a5b6-4c7d-8e9f-0a1b2c3d4e5f".to_owned(),
            outcome: TaskOutcome::Failed,
            steps: vec![
                StepResult {
                    name: "unmount-weka".to_owned(),
                    outcome: StepOutcome::Skipped,
                    message: "no tenant wekafs mounts".to_owned(),
                    data: Value::Null,
                },
                StepResult {
                    name: "clean-roots".to_owned(),
                    outcome: StepOutcome::Ok,
                    message: String::new(),
                    data: json!({ "bytesFreed": 123_456_789, "roots": ["/scratch", "/var/tmp/tenant"], "ratio": 0.25 }),
                },
                StepResult {
                    name: "validate".to_owned(),
                    outcome: StepOutcome::Error,
                    message: "residue found".to_owned(),
                    data: json!({ "residues": [{ "kind": "process", "pid": 4242, "uid": 100_001 }] }),
                },
            ],
            started_at: t("2026-11-21T10:01:00Z"),
            finished_at: t("2026-11-21T10:02:30Z"),
            evidence: None,
        }],
        activation: Some(ActivationStatus {
            intent_id: "7d3c2a5e-3c1f-4b7e-9a4d-1f2e3d4c5b6a".to_owned(),
            rollout_id: RolloutId::new("gpu", COMMIT).expect("id"),
            target_closure: "/nix/store/1a2b3c4d556f7g8h9i0jklmnpqrsvwxy-nixos-system-gpu-a-01-25.05".to_owned(),
            phase: ActivationPhase::AwaitingConfirm,
            message: "switched".to_owned(),
        }),
        events: vec![
            ReportEvent::ManifestMismatch {
                rollout_id: "gpu@evil".to_owned(),
                reason: "rollout id differs from channel@channelRef".to_owned(),
            },
            ReportEvent::VerificationFailed { artifact: "timestamp.json".to_owned(), reason: "stale".to_owned() },
            ReportEvent::TaskRefused { task_id: "t-1".to_owned(), reason: "replayed".to_owned() },
            ReportEvent::ClockSteppedBack { last_seen: t("2026-11-21T10:00:00Z"), now: t("2026-11-20T10:00:00Z") },
            ReportEvent::RolledBack {
                rollout_id: format!("gpu@{COMMIT}"),
                restored_closure: "/nix/store/00000000000000000000000000000000-previous".to_owned(),
                reason: "confirm window missed".to_owned(),
            },
            ReportEvent::NoActivationBackend { rollout_id: format!("gpu@{COMMIT}") },
        ],
        known_intent_id: Some("7d3c2a5e-3c1f-4b7e-9a4d-1f2e3d4c5b6a".to_owned()),
        release_seen: None,
    }
}

#[test]
fn checkin_request_round_trips_with_camel_case_and_typed_events() {
    let req = checkin_request();
    let v = round_trip(&req);
    let text = serde_json::to_string(&req).expect("json");
    assert!(text.contains(r#""type":"ManifestMismatch""#), "{text}");
    assert_eq!(
        v["events"][0],
        json!({ "type": "ManifestMismatch", "rolloutId": "gpu@evil", "reason": "rollout id differs from channel@channelRef" })
    );
    assert_eq!(v["events"][3]["lastSeen"], json!("2026-11-21T10:00:00Z"));
    assert_eq!(v["events"][4]["restoredClosure"], json!("/nix/store/00000000000000000000000000000000-previous"));
    assert_eq!(v["events"][5]["type"], json!("NoActivationBackend"));
    for k in
        ["agentVersion", "bootId", "currentGeneration", "health", "probeResults", "taskResults", "activation", "events", "knownIntentId"]
    {
        assert!(v.get(k).is_some(), "{k} in {v}");
    }
    assert_eq!(v["health"]["loadAvg1m"], json!(0.37));
    assert_eq!(v["health"]["hwSync"], json!({ "credsPresent": true, "timerActive": false }));
    assert_eq!(v["health"]["failedUnits"], json!(["nvidia-fabricmanager.service"]));
    assert_eq!(v["health"]["cpuUsagePct"], json!(12.5));
    assert_eq!(v["health"]["disks"], json!([{ "mountPoint": "/", "totalBytes": 1u64 << 39, "availableBytes": 1u64 << 38 }]));
    assert!(v["health"].get("collectErrors").is_none(), "empty collect errors are omitted");
    assert_eq!(v["probeResults"][1]["outcome"], json!("probe-error"));
    assert_eq!(v["probeResults"][1]["mode"], json!("observe"));
    assert_eq!(v["probeResults"][1]["durationMs"], json!(5000));
    assert_eq!(v["taskResults"][0]["steps"][1]["data"]["bytesFreed"], json!(123_456_789));
    assert_eq!(v["taskResults"][0]["steps"][0]["outcome"], json!("skipped"));
    assert_eq!(v["taskResults"][0]["finishedAt"], json!("2026-11-21T10:02:30Z"));
    assert_eq!(v["activation"]["phase"], json!("awaiting-confirm"));

    // A minimal check-in is valid too; absent optionals are omitted, not null.
    let minimal: CheckinRequest = serde_json::from_value(json!({ "agentVersion": "0.1.0", "bootId": "b" })).expect("parse");
    let v = round_trip(&minimal);
    assert_eq!(keys(&v), ["agentVersion", "bootId", "events", "probeResults", "taskResults"].into());
    assert!(serde_json::from_value::<CheckinRequest>(json!({ "agentVersion": "0.1.0", "bootId": "b", "hostId": "spoof" })).is_err());
}

#[test]
fn a_health_report_from_an_older_agent_without_cpu_and_disks_still_parses() {
    let h: HealthReport = serde_json::from_value(json!({
        "collectedAt": "2026-11-21T10:05:00Z", "uptimeSecs": 1, "loadAvg1m": 0.0, "memTotalBytes": 2, "memAvailableBytes": 1
    }))
    .expect("parse");
    assert_eq!((h.cpu_usage_pct, h.disks.len(), h.collect_errors.len()), (None, 0, 0));
}

#[test]
fn checkin_response_with_envelopes_round_trips() {
    let s = signer();
    let intent_env = Envelope::seal(&intent(), std::slice::from_ref(&s)).expect("seal");
    let task_env = Envelope::seal(&task(TaskKind::StorageCleanup { scope: StorageScope::Local }), std::slice::from_ref(&s)).expect("seal");
    let resp =
        CheckinResponse { intent: Some(intent_env.clone()), tasks: vec![task_env], next_checkin_secs: 30, director_rotations: vec![] };
    let v = round_trip(&resp);
    assert_eq!(keys(&v), ["intent", "nextCheckinSecs", "tasks"].into());
    assert_eq!(keys(&v["intent"]), ["signatures", "signed"].into());
    assert_eq!(v["intent"]["signatures"][0]["alg"], json!("ed25519"));
    assert_eq!(v["intent"]["signatures"][0]["keyId"], json!(s_key_id(&s)));
    let back: CheckinResponse = serde_json::from_value(v).expect("parse");
    let env = back.intent.expect("intent");
    assert_eq!(env.payload::<Intent>().expect("intent payload"), intent());
    assert_eq!(env.signed_bytes().expect("bytes"), canonical::to_vec_of(&intent()).expect("canonical"));
    assert_eq!(back.tasks[0].payload::<Task>().expect("task").kind.type_name(), "node.storage_cleanup");

    let idle: CheckinResponse = serde_json::from_value(json!({ "nextCheckinSecs": 60 })).expect("parse");
    assert_eq!(idle, CheckinResponse { intent: None, tasks: vec![], next_checkin_secs: 60, director_rotations: vec![] });
    assert_eq!(keys(&round_trip(&idle)), ["nextCheckinSecs", "tasks"].into());
}

fn s_key_id(s: &KeySigner) -> String {
    use drover_proto::keys::Signer as _;
    s.key_id().as_str().to_owned()
}

#[test]
fn confirm_request_round_trips() {
    let c = ConfirmRequest {
        intent_id: "7d3c2a5e-3c1f-4b7e-9a4d-1f2e3d4c5b6a".to_owned(),
        rollout_id: RolloutId::new("gpu", COMMIT).expect("id"),
        closure: "/nix/store/1a2b3c4d556f7g8h9i0jklmnpqrsvwxy-nixos-system-gpu-a-01-25.05".to_owned(),
        boot_id: "5e6f7a8b-9c0d-4e1f-a2b3-c4d5e6f7a8b9".to_owned(),
    };
    let v = round_trip(&c);
    assert_eq!(keys(&v), ["bootId", "closure", "intentId", "rolloutId"].into());
    let mut bad = v;
    bad["hostId"] = json!("spoof");
    assert!(serde_json::from_value::<ConfirmRequest>(bad).is_err());
}

#[test]
fn api_error_has_the_error_code_message_shape() {
    let e = ApiError { error: ApiErrorBody { code: "not_found".to_owned(), message: "no rollout gpu@abc".to_owned() } };
    let v = round_trip(&e);
    assert_eq!(v, json!({ "error": { "code": "not_found", "message": "no rollout gpu@abc" } }));
    assert_eq!(canonical::to_vec_of(&e).expect("canonical"), br#"{"error":{"code":"not_found","message":"no rollout gpu@abc"}}"#);
    assert!(serde_json::from_value::<ApiError>(json!({ "error": { "code": "x", "message": "y", "detail": 1 } })).is_err());
    assert!(serde_json::from_value::<ApiError>(json!({ "code": "x", "message": "y" })).is_err());
}

#[test]
fn release_artifacts_round_trip_byte_for_byte() {
    let r = resolved_example();
    // fleet.resolved
    round_trip(&r.fleet);
    let fleet: FleetResolved = serde_json::from_slice(&r.fleet_bytes).expect("parse fleet.resolved");
    assert_eq!(fleet, r.fleet);
    assert_eq!(canonical::to_vec_of(&fleet).expect("canonical"), r.fleet_bytes);
    // manifests
    for (channel, (m, bytes)) in &r.manifests {
        round_trip(m);
        let back: RolloutManifest = serde_json::from_slice(bytes).expect("parse manifest");
        assert_eq!(back, *m, "{channel}");
        assert_eq!(canonical::to_vec_of(&back).expect("canonical"), *bytes, "{channel}");
        assert!(canonical::is_canonical(bytes));
    }
    let mv = serde_json::to_value(&r.manifests["gpu"].0).expect("json");
    for k in
        ["schemaVersion", "rolloutId", "channel", "channelRef", "fleetResolvedHash", "createdAt", "hostSet", "waves", "disruptionBudgets"]
    {
        assert!(mv.get(k).is_some(), "{k}");
    }
    assert_eq!(mv["onHealthFailure"], json!("rollback-and-halt"));
    assert_eq!(
        mv["hostSet"][0],
        json!({ "hostname": "gpu-a-01", "waveIndex": 0, "targetClosure": r.manifests["gpu"].0.host_set[0].target_closure })
    );

    // timestamp.json, as `drover release` writes it.
    let params = ReleaseParams { meta: meta(COMMIT), version: 7, previous: None };
    let files = release::build_release(&example_spec(), &params, &[signer()]).expect("release");
    let ts_bytes = files.get(release::TIMESTAMP).expect("timestamp.json");
    let ts: TimestampDoc = serde_json::from_slice(ts_bytes).expect("parse timestamp");
    round_trip(&ts);
    assert_eq!(canonical::to_vec_of(&ts).expect("canonical"), ts_bytes);
    assert_eq!(ts.version, 7);
    assert_eq!(ts.fleet_resolved_sha256, r.fleet_sha256);
    assert_eq!(files.get(release::FLEET_RESOLVED), Some(r.fleet_bytes.as_slice()));
    for (channel, entry) in &ts.channels {
        let (m, bytes) = &r.manifests[channel];
        assert_eq!(entry.rollout_id, m.rollout_id);
        assert_eq!(entry.manifest_sha256, hex::encode(Sha256::digest(bytes)));
        assert_eq!(entry.freshness_window_secs, 86_400);
        assert!(entry.revertable.is_empty());
        assert_eq!(files.get(&release::manifest_path(&m.rollout_id)), Some(bytes.as_slice()));
        assert!(ts.lists(&m.rollout_id, &entry.manifest_sha256));
    }
    assert_eq!(ts.tightest_window().map(|(_, w)| w), Some(86_400));
}

// ---------------------------------------------------------------------------------------------
// Secrets
// ---------------------------------------------------------------------------------------------

fn assert_no_secret(shown: &str) {
    for secret in [CK, TK, TS] {
        assert!(!shown.contains(secret), "secret {secret:?} leaked into {shown}");
    }
}

#[test]
fn secrets_never_appear_in_debug_of_a_task() {
    let task = task(reseed());
    let shown = format!("{task:?}");
    assert_no_secret(&shown);
    assert!(shown.contains("abc123"), "non-secret fields still show: {shown}");
    assert_no_secret(&format!("{task:#?}"));
    assert_no_secret(&format!("{:?}", reseed()));
    let TaskKind::HwSyncReseed(HwSyncReseed { token: MachineToken::Plain(token), .. }) = reseed() else { unreachable!() };
    assert_no_secret(&token.token_secret.to_string());
    assert_eq!(token.token_secret.expose(), TS);
}

#[test]
fn secrets_never_appear_on_the_wire_or_in_debug_of_a_checkin_response() {
    // As the coordinator sends it: the token sealed to the host's key for this task.
    let host = drover_proto::seal::SealKeyPair::generate();
    let mut sealed_task = task(reseed());
    let aad = drover_proto::seal::secret_aad(&sealed_task.task_id, &sealed_task.host_id);
    let plain = drover_proto::canonical::to_vec_of(&maas_token()).expect("canonical");
    let sealed = drover_proto::seal::seal(&host.public_b64(), &plain, &aad).expect("seal");
    sealed_task.kind = TaskKind::HwSyncReseed(HwSyncReseed {
        maas_url: "http://maas.example:5240/MAAS".to_owned(),
        system_id: "abc123".to_owned(),
        token: MachineToken::Sealed(sealed),
    });
    let env = Envelope::seal(&sealed_task, &[signer()]).expect("seal");
    let resp = CheckinResponse { intent: None, tasks: vec![env], next_checkin_secs: 30, director_rotations: vec![] };
    let wire = serde_json::to_vec(&resp).expect("json");
    assert_no_secret(&String::from_utf8_lossy(&wire));
    let back: CheckinResponse = serde_json::from_slice(&wire).expect("parse");
    let parsed: Task = back.tasks[0].payload().expect("task payload");
    let TaskKind::HwSyncReseed(HwSyncReseed { token: MachineToken::Sealed(ref sealed), .. }) = parsed.kind else {
        panic!("wrong kind {parsed:?}")
    };
    let opened: MaasToken = serde_json::from_slice(&host.open(sealed, &aad).expect("opens on its host")).expect("token");
    assert_eq!(opened.token_secret.expose(), TS);
    assert_no_secret(&format!("{parsed:?}"));
    assert_no_secret(&format!("{parsed:#?}"));
    assert_no_secret(&format!("{:?}", back.tasks[0]));
    assert_no_secret(&format!("{back:?}"));
    assert_no_secret(&format!("{back:#?}"));
}

// ---------------------------------------------------------------------------------------------
// State tables
// ---------------------------------------------------------------------------------------------

fn strings<T: Copy + std::fmt::Display + Serialize>(all: &[T]) -> Vec<String> {
    for s in all {
        assert_eq!(serde_json::to_value(s).expect("json"), json!(s.to_string()), "serde form = Display form");
    }
    all.iter().map(ToString::to_string).collect()
}

#[test]
fn state_string_forms_are_exactly_the_documented_names() {
    assert_eq!(
        strings(RolloutState::ALL),
        ["Opening", "Active", "Converging", "Converged", "Halted", "Reverting", "Reverted", "Failed", "Superseded", "Cancelled", "Pruned"]
    );
    assert_eq!(strings(WaveState::ALL), ["Pending", "WaveActive", "WaveSoaking", "WavePromoted"]);
    assert_eq!(
        strings(HostRolloutState::ALL),
        ["Pending", "Activating", "Soaking", "Converged", "Failed", "Reverted", "Deferred", "Skipped"]
    );
    assert_eq!(
        strings(HostLifecycle::ALL),
        ["bootstrap_issued", "enrolling", "active", "offline", "quarantined", "draining", "retired", "removing", "deleted"]
    );
    assert_eq!(
        strings(JobState::ALL),
        ["pending", "running", "completed", "failed_retryable", "failed_manual_intervention", "cancelled", "compensating", "reconciled"]
    );
    // Parsing is exact: the other case is refused.
    assert_eq!("failed_manual_intervention".parse::<JobState>(), Ok(JobState::FailedManualIntervention));
    assert!("FailedManualIntervention".parse::<JobState>().is_err());
    assert!("active".parse::<RolloutState>().is_err());
    assert!("Active".parse::<HostLifecycle>().is_err());
    assert_eq!(serde_json::from_value::<HostRolloutState>(json!("Deferred")).expect("parse"), HostRolloutState::Deferred);
    assert!(serde_json::from_value::<HostRolloutState>(json!("deferred")).is_err());
    let err = "Sleeping".parse::<WaveState>().expect_err("unknown");
    assert!(err.to_string().contains("Sleeping"), "{err}");
}

fn refused<T: Copy + Debug + std::fmt::Display>(from: T, to: T, r: Result<T, drover_proto::states::IllegalTransition>) {
    let err = r.expect_err("illegal transition");
    let shown = err.to_string();
    assert!(shown.contains(&from.to_string()) && shown.contains(&to.to_string()), "names both states: {shown}");
    assert_eq!(err.from, from.to_string());
    assert_eq!(err.to, to.to_string());
}

#[test]
fn rollout_state_transitions() {
    use RolloutState::*;
    assert_eq!(Opening.transition(Active), Ok(Active));
    assert_eq!(Active.transition(Halted), Ok(Halted));
    assert_eq!(Halted.transition(Active), Ok(Active));
    assert_eq!(Reverting.transition(Reverted), Ok(Reverted));
    refused(Converged, Active, Converged.transition(Active));
    refused(Opening, Converged, Opening.transition(Converged));
    refused(Reverted, Active, Reverted.transition(Active));
    assert!(Pruned.is_terminal());
    let err = Cancelled.transition(Active).expect_err("illegal");
    assert_eq!(err.to_string(), "illegal rollout transition Cancelled -> Active");
}

#[test]
fn wave_state_transitions() {
    use WaveState::*;
    assert_eq!(Pending.transition(WaveActive), Ok(WaveActive));
    assert_eq!(WaveActive.transition(WaveSoaking), Ok(WaveSoaking));
    assert_eq!(WaveSoaking.transition(WavePromoted), Ok(WavePromoted));
    refused(Pending, WavePromoted, Pending.transition(WavePromoted));
    refused(WavePromoted, WaveActive, WavePromoted.transition(WaveActive));
    assert!(WavePromoted.is_terminal());
}

#[test]
fn host_rollout_state_transitions() {
    use HostRolloutState::*;
    assert_eq!(Pending.transition(Activating), Ok(Activating));
    assert_eq!(Activating.transition(Deferred), Ok(Deferred));
    assert_eq!(Pending.transition(Skipped), Ok(Skipped));
    assert_eq!(Skipped.transition(Activating), Ok(Activating));
    assert_eq!(Failed.transition(Reverted), Ok(Reverted));
    refused(Pending, Converged, Pending.transition(Converged));
    refused(Reverted, Activating, Reverted.transition(Activating));
    refused(Failed, Converged, Failed.transition(Converged));
}

#[test]
fn host_lifecycle_transitions_are_exactly_node_state_model() {
    use HostLifecycle::*;
    // node-state-model.md §3.2, verbatim, and one addition.
    let legal = [
        (BootstrapIssued, Enrolling),
        (Enrolling, Active),
        (Enrolling, Quarantined),
        (Active, Offline),
        (Offline, Active),
        (Active, Quarantined),
        (Offline, Quarantined),
        (Quarantined, Active),
        (Quarantined, Draining),
        (Active, Draining),
        (Offline, Draining),
        (Draining, Retired),
        (Draining, Offline),
        (Retired, Active),
        (Retired, Removing),
        (Removing, Retired),
        (Removing, Deleted),
        // Beyond §3.2: a host that never enrolled is deleted outright (nothing was installed,
        // so there is nothing to drain or uninstall).
        (BootstrapIssued, Deleted),
    ];
    for &from in HostLifecycle::ALL {
        for &to in HostLifecycle::ALL {
            if legal.contains(&(from, to)) {
                assert_eq!(from.transition(to), Ok(to), "{from} -> {to}");
            } else {
                refused(from, to, from.transition(to));
            }
        }
    }
    let err = Deleted.transition(Active).expect_err("illegal");
    assert_eq!(err.to_string(), "illegal host lifecycle transition deleted -> active");
}

#[test]
fn host_lifecycle_deleted_is_terminal() {
    assert!(HostLifecycle::Deleted.is_terminal());
    assert!(HostLifecycle::Deleted.successors().is_empty());
    let terminal: Vec<HostLifecycle> = HostLifecycle::ALL.iter().copied().filter(|s| s.is_terminal()).collect();
    assert_eq!(terminal, [HostLifecycle::Deleted], "deleted is the only terminal lifecycle state");
}

#[test]
fn job_state_transitions() {
    use JobState::*;
    assert_eq!(Pending.transition(Running), Ok(Running));
    assert_eq!(Running.transition(Completed), Ok(Completed));
    assert_eq!(Running.transition(FailedRetryable), Ok(FailedRetryable));
    assert_eq!(FailedRetryable.transition(Running), Ok(Running));
    assert_eq!(FailedManualIntervention.transition(Reconciled), Ok(Reconciled));
    assert_eq!(Compensating.transition(Pending), Ok(Pending));
    refused(Completed, Running, Completed.transition(Running));
    refused(Pending, Completed, Pending.transition(Completed));
    refused(Cancelled, Running, Cancelled.transition(Running));
    assert!(Completed.is_terminal());
    assert!(Cancelled.is_terminal());
    let err = Completed.transition(Running).expect_err("illegal");
    assert_eq!(err.to_string(), "illegal job transition completed -> running");
}
