//! The rendered first-boot bundle against the real tools: Debian's `cloud-init schema` must
//! accept every variant (and refuse a deliberately broken document, so the check can fail),
//! and every script the user data writes must parse under `bash -n` and `sh -n`.
//!
//! `cloud-init` is required: without it this test fails and says how to install it (CI's
//! `.ci/run` installs it).

use std::path::Path;
use std::process::Command;

use drover_cloudinit::{
    self as cloudinit, DeployUser, FirstBoot, HwSync, HwSyncToken, MAAS_CREDS_PATH, MANIFEST_PATH, Part, RoceLink, Shares, SiteBundle,
    render,
};
use drover_proto::task::Secret;
use serde_json::Value;

fn minimal() -> FirstBoot {
    FirstBoot {
        hostname: "gpu-07".into(),
        site_bundle: None,
        deploy_user: DeployUser {
            name: "hpcadmin".into(),
            password: Secret::new("correct horse battery staple"),
            salt: cloudinit::salt_from_bytes(&[42; 12]),
        },
        deploy_ssh_iface: Some("eno8303".into()),
        agent_bootstrap: Secret::new(drover_proto::enroll::bootstrap_command(
            "https://coord.example:8443",
            "sha256//AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
            "6f1c2a4e-0000-4000-8000-000000000001",
            "enrollment-token_0123456789",
            &"ab".repeat(32),
        )),
        hw_sync: HwSync {
            maas_url: "http://10.0.0.2:5240/MAAS".into(),
            system_id: "4y3h7r".into(),
            token: Some(HwSyncToken {
                consumer_key: Secret::new("CKconsumer"),
                token_key: Secret::new("TKtoken"),
                token_secret: Secret::new("TS'secret"),
            }),
            interval_secs: 900,
        },
        shares: Shares::Off,
        roce: Vec::new(),
    }
}

fn shares_on() -> FirstBoot {
    FirstBoot {
        shares: Shares::EraseAndFormat {
            disks: vec!["/dev/disk/by-id/nvme-SAMSUNG_MZQL23T8_S64H0001".into(), "/dev/disk/by-id/wwn-0x5000c500a1b2c3d4".into()],
        },
        ..minimal()
    }
}

fn everything() -> FirstBoot {
    FirstBoot {
        hostname: "gpu-07.rack3.example".into(),
        site_bundle: Some(SiteBundle { url: "https://infra.example/bundles/site-a@v3.sh".into(), sha256: Some("cd".repeat(32)) }),
        roce: vec![
            RoceLink { interface: "enp62s0np0".into(), ipv4_cidr: "172.30.9.61/31".into() },
            RoceLink { interface: "enp63s0np0".into(), ipv4_cidr: "172.30.9.63/31".into() },
            RoceLink { interface: "eth1.100".into(), ipv4_cidr: "10.20.0.7/24".into() },
        ],
        ..shares_on()
    }
}

fn cloud_init() -> &'static str {
    let found = Command::new("cloud-init").arg("--version").output().map(|o| o.status.success()).unwrap_or(false);
    assert!(
        found,
        "`cloud-init` is not installed: this test validates the rendered user data with the real `cloud-init schema`. \
         Install it with `apt-get install cloud-init` (CI's .ci/run does)."
    );
    "cloud-init"
}

/// Runs `cloud-init schema --config-file` on `text`; (success, stdout + stderr).
fn schema(dir: &Path, name: &str, text: &str) -> (bool, String) {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write user data");
    let out = Command::new(cloud_init()).arg("schema").arg("--config-file").arg(&path).output().expect("run cloud-init schema");
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

fn body(text: &str) -> Value {
    let json: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    serde_json::from_str(&json.join("\n")).expect("the body is JSON")
}

#[test]
fn every_variant_passes_cloud_init_schema() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, input, parts) in [("minimal", minimal(), 3), ("shares", shares_on(), 4), ("everything", everything(), 6)] {
        let ud = render(&input).expect(name);
        assert_eq!(ud.parts().len(), parts, "{name}: {:?}", ud.parts());
        let (ok, out) = schema(dir.path(), &format!("{name}.yaml"), ud.text());
        assert!(ok, "{name}: cloud-init schema refused the rendered user data:\n{out}");
        assert!(out.contains("Valid cloud-config"), "{name}: {out}");
        assert!(!out.to_ascii_lowercase().contains("deprecat"), "{name}: deprecated keys: {out}");
    }
}

#[test]
fn a_broken_document_fails_cloud_init_schema() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = render(&minimal()).expect("render").into_text();
    let needle = "\"hostname\": \"gpu-07\"";
    assert!(text.contains(needle), "{text}");
    let broken = text.replace(needle, "\"hostname\": 7").replacen("\"runcmd\": [", "\"runcmd\": \"not a list\", \"x\": [", 1);
    let (ok, out) = schema(dir.path(), "broken.yaml", &broken);
    assert!(!ok, "cloud-init schema accepted a broken document:\n{out}");
    assert!(out.contains("hostname"), "{out}");
}

#[test]
fn every_written_script_parses() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ud = render(&everything()).expect("render");
    assert!(ud.includes(Part::SiteBootstrap) && ud.includes(Part::Shares) && ud.includes(Part::RoceRouting));
    let doc = body(ud.text());
    let mut scripts = 0;
    for (i, f) in doc["write_files"].as_array().expect("write_files").iter().enumerate() {
        let path = f["path"].as_str().expect("path");
        let content = f["content"].as_str().expect("content");
        if path == MANIFEST_PATH {
            serde_json::from_str::<Value>(content).expect("the manifest is JSON");
        }
        if path == MAAS_CREDS_PATH {
            assert_eq!(f["permissions"], "0600");
        }
        if !content.starts_with("#!/bin/sh\n") {
            continue;
        }
        scripts += 1;
        let file = dir.path().join(format!("script-{i}.sh"));
        std::fs::write(&file, content).expect("write script");
        for shell in ["bash", "sh"] {
            let out = Command::new(shell).arg("-n").arg(&file).output().unwrap_or_else(|e| panic!("run {shell} -n: {e}"));
            assert!(out.status.success(), "{shell} -n {path}:\n{}\n---\n{content}", String::from_utf8_lossy(&out.stderr));
        }
    }
    // runner, site bundle, hw-sync part and service script, shares, RoCE part and script, agent.
    assert_eq!(scripts, 8);
}
