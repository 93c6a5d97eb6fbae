//! Verification benchmark: canonicalise + hash + verify a 10,000-host rollout manifest, and
//! verification throughput as a ratio to raw `ed25519-dalek` `verify_strict` over the same
//! bytes, measured in the same run (machines here are noisy; ratios travel, absolutes less).
//!
//! Run: `cargo bench -p drover-proto --bench verify` (add `-- --hosts N --iters K` to change
//! the fleet size or the number of timed iterations).

use std::hint::black_box;
use std::time::{Duration, Instant};

use drover_proto::canonical;
use drover_proto::keys::{KeyId, KeySigner, verifying_key_to_pem};
use drover_proto::merkle::{EntryProof, Tree};
use drover_proto::names::RolloutId;
use drover_proto::release::{FLEET_RESOLVED, ReleaseParams, TIMESTAMP, build_release, manifest_path, root_path, sig_path};
use drover_proto::resolve::{ReleaseMeta, sha256_hex};
use drover_proto::sig::SignatureFile;
use drover_proto::spec::FleetSpec;
use drover_proto::time::Time;
use drover_proto::trust::{KeySetDoc, TrustDoc, TrustKeyDoc, TrustRoots};
use drover_proto::verify::{
    ManifestAnchors, VerifyContext, verify_fleet_resolved, verify_manifest, verify_place, verify_root, verify_timestamp,
};
use ed25519_dalek::{Signature, SigningKey};
use serde_json::json;

fn spec(hosts: usize) -> FleetSpec {
    let mut h = serde_json::Map::new();
    for i in 0..hosts {
        let rack = format!("rack-{:02}", i % 40);
        let mut tags = vec!["gpu".to_owned(), rack];
        if i % 100 == 0 {
            tags.push("canary".to_owned());
        }
        h.insert(
            format!("gpu-{i:05}"),
            json!({
                "system": "x86_64-linux",
                "tags": tags,
                "channel": "gpu",
                // Hex without 'e' is valid Nix base-32.
                "closure": format!("/nix/store/{}-nixos-system-gpu-{i:05}-25.05", format!("{:032x}", i as u128 * 0x9e3779b97f4a7c15).replace('e', "z")),
            }),
        );
    }
    let doc = json!({
        "hosts": h,
        "channels": {"gpu": {"rolloutPolicy": "waves", "freshnessWindowSecs": "1d", "signingIntervalSecs": "4h"}},
        "rolloutPolicies": {"waves": {"waves": [
            {"selector": {"tags": ["canary"]}, "soakSecs": "15m"},
            {"selector": {"tagsAny": ["rack-00", "rack-01", "rack-02", "rack-03"]}, "soakSecs": "15m"},
            {"selector": {"not": {"tagsAny": ["rack-30", "rack-31", "rack-32", "rack-33", "rack-34", "rack-35", "rack-36", "rack-37", "rack-38", "rack-39"]}}, "soakSecs": "30m"},
            {"selector": {"all": true}, "soakSecs": 0}
        ]}},
        "disruptionBudgets": [
            {"selector": {"tags": ["gpu"]}, "maxInFlightPct": 5},
            {"selector": {"tags": ["rack-07"]}, "maxInFlight": 2}
        ]
    });
    FleetSpec::from_json(&serde_json::to_vec(&doc).expect("json")).expect("valid spec")
}

struct Stats {
    median: Duration,
    p90: Duration,
}

fn time_it(iters: usize, mut f: impl FnMut()) -> Stats {
    f(); // warm-up
    let mut samples: Vec<Duration> = (0..iters)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    samples.sort();
    Stats { median: samples[iters / 2], p90: samples[(iters * 9 / 10).min(iters - 1)] }
}

fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1e3)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str, default: usize| {
        args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
    };
    let hosts = arg("--hosts", 10_000);
    let iters = arg("--iters", 31).max(3);

    let key = SigningKey::from_bytes(&[42; 32]);
    let vk = key.verifying_key();
    let signer = KeySigner::new(key);
    let trust = TrustRoots::from_doc(&TrustDoc {
        schema_version: 1,
        ci: KeySetDoc {
            threshold: 1,
            keys: vec![TrustKeyDoc {
                key_id: KeyId::of(&vk),
                alg: "ed25519".into(),
                public_key: verifying_key_to_pem(&vk).expect("pem"),
                not_before: None,
                not_after: None,
            }],
            reject_before: None,
        },
    })
    .expect("trust");
    let now = Time::parse_strict("2026-11-21T10:00:00Z").expect("time");
    let params = ReleaseParams { meta: ReleaseMeta { ci_commit: "bench".into(), created_at: now }, version: 1, previous: None };
    let spec = spec(hosts);
    let build = time_it(3, || {
        black_box(build_release(&spec, &params, std::slice::from_ref(&signer)).expect("release"));
    });
    let files = build_release(&spec, &params, std::slice::from_ref(&signer)).expect("release");
    let id = RolloutId::new("gpu", "bench").expect("id");
    let mpath = manifest_path(&id);
    let manifest = files.get(&mpath).expect("manifest");
    let manifest_sig = files.get(&sig_path(&mpath)).expect("sig");
    let ts_bytes = files.get(TIMESTAMP).expect("ts");
    let ts_sig = files.get(&sig_path(TIMESTAMP)).expect("ts sig");
    let ctx = VerifyContext::at(now);
    let ts = verify_timestamp(ts_bytes, ts_sig, &trust, &ctx).expect("timestamp verifies");
    let raw_sig = |sig_file: &[u8]| -> Signature {
        let f: SignatureFile = serde_json::from_slice(sig_file).expect("sig file");
        f.signatures[0].decode().expect("sig")
    };
    let m_sig = raw_sig(manifest_sig);
    let t_sig = raw_sig(ts_sig);

    // Baselines, same bytes, same run.
    let raw_manifest = time_it(iters, || vk.verify_strict(black_box(manifest), &m_sig).expect("raw verify"));
    let sha_manifest = time_it(iters, || {
        black_box(sha256_hex(black_box(manifest)));
    });
    let parse_manifest = time_it(iters, || {
        black_box(serde_json::from_slice::<serde_json::Value>(black_box(manifest)).expect("parse"));
    });
    // The full rule set an agent or the coordinator runs on a manifest: canonical check
    // (parse + re-serialise + compare), signature threshold, typed parse, rolloutId, sort
    // order, sha256, listed in the timestamp, fleet anchor.
    let full_manifest = time_it(iters, || {
        let anchors = ManifestAnchors { advertised_id: Some(&id), timestamp: &ts, fleet: None };
        black_box(verify_manifest(black_box(manifest), manifest_sig, &trust, &ctx, anchors).expect("verify"));
    });
    let canon_only = time_it(iters, || {
        black_box(canonical::is_canonical(black_box(manifest)));
    });
    // The per-host proof path: what an agent verifies instead of the manifest —
    // the signed root, then its own entry's audit path — and what the coordinator does once
    // per release and rollout (the tree) and once per host (an audit path).
    let rpath = root_path(&id);
    let (root_bytes, root_sig) = (files.get(&rpath).expect("root"), files.get(&sig_path(&rpath)).expect("root sig"));
    let parsed: drover_proto::artifacts::RolloutManifest = serde_json::from_slice(manifest).expect("manifest");
    let me = &parsed.host_set[parsed.host_set.len() / 2];
    let tree = Tree::from_entries(&parsed.host_set).expect("tree");
    let index = parsed.host_set.len() / 2;
    let proof = EntryProof::of(&tree, &parsed.host_set, index).expect("proof");
    let agent_proof = time_it(iters, || {
        let anchors = ManifestAnchors { advertised_id: Some(&id), timestamp: &ts, fleet: None };
        let root = verify_root(black_box(root_bytes), root_sig, &trust, &ctx, anchors).expect("root");
        black_box(verify_place(&root, black_box(&proof), &me.hostname).expect("proof"));
    });
    let build_tree = time_it(iters.min(11), || {
        black_box(Tree::from_entries(black_box(&parsed.host_set)).expect("tree"));
    });
    let cut_proof = time_it(iters, || {
        black_box(EntryProof::of(&tree, &parsed.host_set, black_box(index)).expect("proof"));
    });
    let proof_json = serde_json::to_vec(&proof).expect("json").len();
    let fleet_bytes = files.get(FLEET_RESOLVED).expect("fleet");
    let fleet_sig = files.get(&sig_path(FLEET_RESOLVED)).expect("fleet sig");
    let full_fleet = time_it(iters, || {
        black_box(verify_fleet_resolved(black_box(fleet_bytes), fleet_sig, &trust, &ctx).expect("verify"));
    });

    // Throughput on a small artifact (the timestamp, re-verified on every check-in).
    let small_iters = 2_000;
    let start = Instant::now();
    for _ in 0..small_iters {
        vk.verify_strict(black_box(ts_bytes), &t_sig).expect("raw");
    }
    let raw_small = start.elapsed();
    let start = Instant::now();
    for _ in 0..small_iters {
        black_box(verify_timestamp(black_box(ts_bytes), ts_sig, &trust, &ctx).expect("verify"));
    }
    let full_small = start.elapsed();
    let per_sec = |d: Duration| small_iters as f64 / d.as_secs_f64();

    println!("# drover-proto verification benchmark");
    println!();
    println!(
        "fleet: {hosts} hosts; manifest {} bytes; fleet.resolved {} bytes; timestamp {} bytes; {iters} timed iterations (median, p90)",
        manifest.len(),
        fleet_bytes.len(),
        ts_bytes.len()
    );
    println!();
    println!("| measurement | median ms | p90 ms | ratio to raw ed25519 verify of the same bytes |");
    println!("|---|---|---|---|");
    let ratio = |s: &Stats| s.median.as_secs_f64() / raw_manifest.median.as_secs_f64();
    let rows: [(&str, &Stats); 9] = [
        ("raw ed25519-dalek verify_strict (manifest bytes) — baseline", &raw_manifest),
        ("sha256 of manifest bytes", &sha_manifest),
        ("serde_json parse to Value (manifest)", &parse_manifest),
        ("RFC 8785 canonical check (manifest)", &canon_only),
        ("verify_manifest: canonicalise + hash + verify + all rules", &full_manifest),
        ("verify_fleet_resolved (whole fleet)", &full_fleet),
        ("agent, proof path: verify_root + verify_place (one host's entry)", &agent_proof),
        ("coordinator: the host-set tree (once per release and rollout)", &build_tree),
        ("coordinator: one host's audit path (per request)", &cut_proof),
    ];
    for (name, s) in rows {
        println!("| {name} | {} | {} | {:.2} |", ms(s.median), ms(s.p90), ratio(s));
    }
    println!(
        "| build_release (resolve + canonicalise + sign everything) | {} | {} | {:.2} |",
        ms(build.median),
        ms(build.p90),
        ratio(&build)
    );
    println!();
    println!(
        "small artifact throughput (timestamp, {} bytes): raw verify_strict {:.0}/s, verify_timestamp {:.0}/s, ratio {:.2} of raw",
        ts_bytes.len(),
        per_sec(raw_small),
        per_sec(full_small),
        per_sec(full_small) / per_sec(raw_small)
    );
    println!(
        "proof path: root {} bytes, one host's entry and audit path {} bytes ({} hashes) against a manifest of {} bytes",
        root_bytes.len(),
        proof_json,
        proof.path.len(),
        manifest.len()
    );
    println!(
        "goal: verify a {hosts}-host manifest in under 20 ms — {} (median {} ms)",
        if full_manifest.median < Duration::from_millis(20) { "met" } else { "NOT met" },
        ms(full_manifest.median)
    );
}
