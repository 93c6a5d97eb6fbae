//! Unit tests of the renderer: order, optional parts, validation, secrets.

use super::*;

const TOKEN: &str = "tok-SEKRIT-enrollment-0123456789";
const PASSWORD: &str = "pw-SEKRIT-deploy";

fn bootstrap() -> Secret {
    Secret::new(drover_proto::enroll::bootstrap_command(
        "https://coord.example:8443",
        "sha256//AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        "6f1c2a4e-0000-4000-8000-000000000001",
        TOKEN,
        &"ab".repeat(32),
    ))
}

fn minimal() -> FirstBoot {
    FirstBoot {
        hostname: "gpu-07".into(),
        site_bundle: None,
        deploy_user: DeployUser { name: "hpcadmin".into(), password: Secret::new(PASSWORD), salt: "saltsaltsaltsalt".into() },
        deploy_ssh_iface: None,
        agent_bootstrap: bootstrap(),
        hw_sync: HwSync {
            maas_url: "http://10.0.0.2:5240/MAAS".into(),
            system_id: "4y3h7r".into(),
            token: Some(HwSyncToken {
                consumer_key: Secret::new("CK-SEKRIT-consumer"),
                token_key: Secret::new("TK-SEKRIT-token"),
                token_secret: Secret::new("TS-SEKRIT-secret"),
            }),
            interval_secs: 900,
        },
        shares: Shares::Off,
        roce: Vec::new(),
    }
}

fn everything() -> FirstBoot {
    FirstBoot {
        hostname: "gpu-07.rack3.example".into(),
        site_bundle: Some(SiteBundle { url: "https://infra.example/bundles/site-a@v3.sh".into(), sha256: Some("cd".repeat(32)) }),
        deploy_ssh_iface: Some("eno8303".into()),
        shares: Shares::EraseAndFormat {
            disks: vec!["/dev/disk/by-id/nvme-SAMSUNG_MZQL23T8_S64H0001".into(), "/dev/disk/by-id/wwn-0x5000c500a1b2c3d4".into()],
        },
        roce: vec![
            RoceLink { interface: "enp62s0np0".into(), ipv4_cidr: "172.30.9.61/31".into() },
            RoceLink { interface: "enp63s0np0".into(), ipv4_cidr: "172.30.10.5/24".into() },
        ],
        ..minimal()
    }
}

/// The JSON body (the comment lines skipped).
fn body(text: &str) -> Value {
    let json: String = text.lines().filter(|l| !l.starts_with('#')).collect::<Vec<_>>().join("\n");
    serde_json::from_str(&json).expect("the body is JSON")
}

fn files(doc: &Value) -> Vec<(String, String, String)> {
    doc["write_files"]
        .as_array()
        .expect("write_files")
        .iter()
        .map(|f| {
            let s = |k: &str| f[k].as_str().expect(k).to_owned();
            (s("path"), s("permissions"), s("content"))
        })
        .collect()
}

fn content(doc: &Value, path: &str) -> Option<String> {
    files(doc).into_iter().find(|(p, _, _)| p == path).map(|(_, _, c)| c)
}

#[test]
fn minimal_bundle_has_the_mandatory_parts_in_order() {
    let ud = render(&minimal()).expect("render");
    assert_eq!(ud.parts(), [Part::DeployUser, Part::MaasHwSync, Part::AgentBootstrap]);
    assert!(ud.text().starts_with("#cloud-config\n"));
    let doc = body(ud.text());
    assert_eq!(doc["hostname"], "gpu-07");
    assert!(doc.get("fqdn").is_none());
    assert_eq!(doc["runcmd"], json!([["/bin/sh", RUNNER_PATH]]));
    let user = &doc["users"][1];
    assert_eq!((user["name"].as_str(), user["lock_passwd"].as_bool()), (Some("hpcadmin"), Some(false)));
    assert_eq!(doc["users"][0], "default");
    assert!(
        content(&doc, SITE_PART_PATH).is_none() && content(&doc, SHARES_PART_PATH).is_none() && content(&doc, ROCE_PART_PATH).is_none()
    );
    assert!(!ud.text().contains("DESTRUCTIVE") && !ud.text().contains("wipefs"));
    let manifest = content(&doc, MANIFEST_PATH).expect("manifest");
    let m: Value = serde_json::from_str(&manifest).expect("manifest json");
    assert_eq!(m, *ud.manifest());
    assert_eq!((m["bundleVersion"].as_str(), m["shares"]["mode"].as_str()), (Some(BUNDLE_VERSION), Some("off")));
    assert_eq!(m["parts"], json!(["deploy-user", "maas-hw-sync", "agent-bootstrap"]));
}

#[test]
fn site_bundle_runs_first_and_the_agent_last() {
    let ud = render(&everything()).expect("render");
    assert_eq!(
        ud.parts(),
        [Part::DeployUser, Part::SiteBootstrap, Part::MaasHwSync, Part::Shares, Part::RoceRouting, Part::AgentBootstrap]
    );
    let doc = body(ud.text());
    let runner = content(&doc, RUNNER_PATH).expect("runner");
    let lines: Vec<&str> = runner.lines().filter(|l| l.starts_with("run_part ")).collect();
    assert_eq!(
        lines,
        [
            format!("run_part 'site' 'site-bootstrap' '{SITE_PART_PATH}' keep"),
            format!("run_part 'drover' 'maas-hw-sync' '{HW_SYNC_PART_PATH}' keep"),
            format!("run_part 'drover' 'shares' '{SHARES_PART_PATH}' keep"),
            format!("run_part 'drover' 'roce-routing' '{ROCE_PART_PATH}' keep"),
            format!("run_part 'drover' 'agent-bootstrap' '{AGENT_PART_PATH}' remove"),
        ]
    );
    // The runner stops at the first failure and says which layer failed.
    assert!(runner.contains(&format!("echo \"{FAILURE_MARKER} layer=$layer part=$part exit=$rc\" >&2\n    status failed")));
    assert!(runner.contains("    exit \"$rc\"\n"));
    let site = content(&doc, SITE_PART_PATH).expect("site");
    assert!(site.contains("url='https://infra.example/bundles/site-a@v3.sh'\n"));
    assert!(site.contains("--proto '=https' --proto-redir '=https'") && site.contains("--fail") && site.contains("--retry 10"));
    assert!(
        site.contains(&format!("printf '%s  %s\\n' '{}' \"$dir/bundle\" | sha256sum -c --quiet -\nsh \"$dir/bundle\"\n", "cd".repeat(32)))
    );
    let agent = content(&doc, AGENT_PART_PATH).expect("agent");
    assert!(agent.ends_with(&format!("{}\n", bootstrap().expose())));
    assert_eq!(doc["hostname"], "gpu-07");
    assert_eq!(doc["fqdn"], "gpu-07.rack3.example");
}

#[test]
fn without_a_token_no_creds_file_is_written_and_the_timer_waits_for_the_seed() {
    let input = FirstBoot { hw_sync: HwSync { token: None, ..minimal().hw_sync }, ..minimal() };
    let ud = render(&input).expect("render");
    let doc = body(ud.text());
    assert!(files(&doc).iter().all(|(p, _, _)| p != MAAS_CREDS_PATH));
    let part = content(&doc, HW_SYNC_PART_PATH).expect("part");
    assert!(!part.contains("exit 1") && part.contains("node.hw_sync_reseed"));
    assert!(part.contains("systemctl enable 'maas_hardware_sync.timer'"));
    let service = content(&doc, "/etc/systemd/system/maas_hardware_sync.service").expect("service");
    assert!(service.contains(&format!("ConditionPathExists={MAAS_CREDS_PATH}")));
}

#[test]
fn hw_sync_credentials_are_written_before_the_timer_is_enabled() {
    let ud = render(&minimal()).expect("render");
    let doc = body(ud.text());
    let all = files(&doc);
    let (_, mode, creds) = all.iter().find(|(p, _, _)| p == MAAS_CREDS_PATH).expect("creds file");
    assert_eq!(mode, "0600");
    // Byte for byte what the agent's `node.hw_sync_reseed` writes (agent/src/tasks/hw_sync.rs).
    assert_eq!(
        creds,
        "reporting:\n  maas:\n    consumer_key: 'CK-SEKRIT-consumer'\n    endpoint: 'http://10.0.0.2:5240/MAAS/metadata/status/4y3h7r'\n    token_key: 'TK-SEKRIT-token'\n    token_secret: 'TS-SEKRIT-secret'\n"
    );
    // Files are written by cloud-init before its one command (the runner) runs; nothing but the
    // runner is a command, so no unit is enabled before the creds exist.
    assert_eq!(doc["runcmd"].as_array().map(Vec::len), Some(1));
    let part = content(&doc, HW_SYNC_PART_PATH).expect("part");
    let check = part.find("if [ ! -s \"$creds\" ]").expect("check");
    let enable = part.find("systemctl enable 'maas_hardware_sync.timer'").expect("enable");
    let start = part.find("systemctl start 'maas_hardware_sync.timer'").expect("start");
    assert!(check < enable && enable < start);
    let timer = content(&doc, "/etc/systemd/system/maas_hardware_sync.timer").expect("timer");
    assert!(timer.contains("OnUnitActiveSec=900\n") && timer.contains("WantedBy=timers.target"));
    let service = content(&doc, "/etc/systemd/system/maas_hardware_sync.service").expect("service");
    assert!(service.contains(&format!("ExecStart={HW_SYNC_SCRIPT_PATH}\n")) && service.contains("Type=oneshot"));
    let script = content(&doc, HW_SYNC_SCRIPT_PATH).expect("script");
    assert!(script.contains("url='http://10.0.0.2:5240/MAAS/maas-run-scripts'\n"));
    assert!(script.contains("report-results --config '/etc/maas/maas-machine-creds.yml'"));
}

#[test]
fn shares_only_when_asked_and_said_loudly() {
    let ud = render(&everything()).expect("render");
    let text = ud.text();
    let json_start = text.find("\n{").expect("body");
    let destructive = text.find("# !!! DESTRUCTIVE !!!").expect("loud header");
    assert!(destructive < json_start);
    assert!(text.contains("# !!!   /share1 <- /dev/disk/by-id/nvme-SAMSUNG_MZQL23T8_S64H0001\n"));
    assert!(text.contains("# !!!   /share2 <- /dev/disk/by-id/wwn-0x5000c500a1b2c3d4\n"));
    let doc = body(text);
    let shares = content(&doc, SHARES_PART_PATH).expect("shares");
    assert!(shares.contains("DESTRUCTIVE"));
    assert!(shares.contains("holds the root filesystem: refused"));
    assert!(shares.ends_with(
        "format_disk '/dev/disk/by-id/nvme-SAMSUNG_MZQL23T8_S64H0001' 1\nformat_disk '/dev/disk/by-id/wwn-0x5000c500a1b2c3d4' 2\n"
    ));
    assert_eq!(ud.manifest()["shares"]["disks"][1], json!({ "id": "/dev/disk/by-id/wwn-0x5000c500a1b2c3d4", "mount": "/share2" }));
    assert_eq!(Shares::default(), Shares::Off);

    for (disks, field) in [
        (vec![], "shares.disks"),
        (vec!["/dev/sdb".to_owned()], "shares.disks[0]"),
        (vec!["/dev/disk/by-id/a".to_owned(), "/dev/disk/by-id/a".to_owned()], "shares.disks[1]"),
        (vec!["/dev/disk/by-id/a".to_owned(), "/dev/disk/by-id/wwn-1-part2".to_owned()], "shares.disks[1]"),
    ] {
        let input = FirstBoot { shares: Shares::EraseAndFormat { disks }, ..minimal() };
        assert_eq!(render(&input).expect_err(field).field, field);
    }
}

#[test]
fn roce_routing_unit_and_tables() {
    let ud = render(&everything()).expect("render");
    let doc = body(ud.text());
    let script = content(&doc, ROCE_SCRIPT_PATH).expect("script");
    assert!(script.contains("setup 'enp62s0np0' '172.30.9.61' 31 '172.30.9.60' '172.30.9.60' 101 1001\n"));
    assert!(script.contains("setup 'enp63s0np0' '172.30.10.5' 24 '172.30.10.0' '' 102 1002\n"));
    assert!(script.contains("ip -4 rule add from \"$addr\" lookup \"$table\" priority \"$prio\""));
    let unit = content(&doc, "/etc/systemd/system/drover-roce-routing.service").expect("unit");
    assert!(
        unit.contains("Type=oneshot")
            && unit.contains(&format!("ExecStart={ROCE_SCRIPT_PATH}"))
            && unit.contains("WantedBy=multi-user.target")
    );
    let part = content(&doc, ROCE_PART_PATH).expect("part");
    assert!(part.contains("systemctl enable 'drover-roce-routing.service'"));
    assert_eq!(ud.manifest()["roce"][0]["table"], 101);

    let dup_iface = FirstBoot {
        roce: vec![
            RoceLink { interface: "a".into(), ipv4_cidr: "10.0.0.1/31".into() },
            RoceLink { interface: "a".into(), ipv4_cidr: "10.0.0.3/31".into() },
        ],
        ..minimal()
    };
    assert_eq!(render(&dup_iface).expect_err("dup").field, "roce[1].interface");
    let dup_addr = FirstBoot {
        roce: vec![
            RoceLink { interface: "a".into(), ipv4_cidr: "10.0.0.1/31".into() },
            RoceLink { interface: "b".into(), ipv4_cidr: "10.0.0.1/31".into() },
        ],
        ..minimal()
    };
    assert_eq!(render(&dup_addr).expect_err("dup").field, "roce[1].ipv4_cidr");
}

#[test]
fn shell_metacharacters_are_refused_with_the_field_named() {
    let cases: Vec<(FirstBoot, &str)> = vec![
        (FirstBoot { hostname: "gpu;reboot".into(), ..minimal() }, "hostname"),
        (FirstBoot { hostname: "$(id)".into(), ..minimal() }, "hostname"),
        (
            FirstBoot { roce: vec![RoceLink { interface: "eth0;rm".into(), ipv4_cidr: "10.0.0.1/31".into() }], ..minimal() },
            "roce[0].interface",
        ),
        (
            FirstBoot { roce: vec![RoceLink { interface: "eth0".into(), ipv4_cidr: "10.0.0.1/31'".into() }], ..minimal() },
            "roce[0].ipv4_cidr",
        ),
        (FirstBoot { deploy_ssh_iface: Some("eno1 x".into()), ..minimal() }, "deploy_ssh_iface"),
        (
            FirstBoot { site_bundle: Some(SiteBundle { url: "https://infra.example/b.sh;reboot".into(), sha256: None }), ..minimal() },
            "site_bundle.url",
        ),
        (
            FirstBoot { site_bundle: Some(SiteBundle { url: "http://infra.example/b.sh".into(), sha256: None }), ..minimal() },
            "site_bundle.url",
        ),
        (
            FirstBoot {
                site_bundle: Some(SiteBundle { url: "https://infra.example/b.sh".into(), sha256: Some("XY".into()) }),
                ..minimal()
            },
            "site_bundle.sha256",
        ),
        (FirstBoot { deploy_user: DeployUser { name: "a`b`".into(), ..minimal().deploy_user }, ..minimal() }, "deploy_user.name"),
        (FirstBoot { deploy_user: DeployUser { salt: "a'b".into(), ..minimal().deploy_user }, ..minimal() }, "deploy_user.salt"),
        (FirstBoot { hw_sync: HwSync { maas_url: "http://m/MAAS'\nx".into(), ..minimal().hw_sync }, ..minimal() }, "hw_sync.maas_url"),
        (FirstBoot { hw_sync: HwSync { system_id: "ab;c".into(), ..minimal().hw_sync }, ..minimal() }, "hw_sync.system_id"),
        (FirstBoot { hw_sync: HwSync { interval_secs: 5, ..minimal().hw_sync }, ..minimal() }, "hw_sync.interval_secs"),
    ];
    for (input, field) in cases {
        let e = render(&input).expect_err(field);
        assert_eq!(e.field, field, "{e}");
    }
}

#[test]
fn secrets_stay_out_of_debug_and_errors() {
    let input = everything();
    let ud = render(&input).expect("render");
    for shown in [format!("{input:?}"), format!("{ud:?}"), ud.manifest().to_string()] {
        for secret in ["SEKRIT", TOKEN, PASSWORD, "$6$"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
    }
    assert!(format!("{ud:?}").contains(ud.sha256()));
    // The text carries what the node needs, but never the plaintext password.
    let text = ud.text();
    assert!(text.contains(TOKEN) && text.contains("TS-SEKRIT-secret"));
    assert!(!text.contains(PASSWORD));
    let hash = body(text)["users"][1]["passwd"].as_str().expect("passwd").to_owned();
    assert!(hash.starts_with("$6$rounds=100000$saltsaltsaltsalt$"), "{hash}");

    let bad_secret = FirstBoot {
        hw_sync: HwSync {
            token: Some(HwSyncToken { token_secret: Secret::new("a b SEKRIT"), ..minimal().hw_sync.token.expect("token") }),
            ..minimal().hw_sync
        },
        ..minimal()
    };
    let bad_cmd = FirstBoot { agent_bootstrap: Secret::new(format!("curl x\n{TOKEN}")), ..minimal() };
    let bad_pw = FirstBoot { deploy_user: DeployUser { password: Secret::new("\0SEKRIT"), ..minimal().deploy_user }, ..minimal() };
    for (input, field) in [(bad_secret, "hw_sync.token.token_secret"), (bad_cmd, "agent_bootstrap"), (bad_pw, "deploy_user.password")] {
        let e = render(&input).expect_err(field);
        assert_eq!(e.field, field);
        assert!(!e.to_string().contains("SEKRIT") && !format!("{e:?}").contains("SEKRIT"), "{e:?}");
    }
}

#[test]
fn rendering_is_deterministic_and_printable() {
    let a = render(&everything()).expect("a");
    let b = render(&everything()).expect("b");
    assert_eq!(a.text(), b.text());
    assert_eq!(a.sha256(), hex::encode(Sha256::digest(a.text().as_bytes())));
    assert!(a.text().bytes().all(|c| c == b'\n' || (0x20..0x7f).contains(&c)));
    assert!(a.includes(Part::Shares) && !render(&minimal()).expect("m").includes(Part::Shares));
    let salted = FirstBoot { deploy_user: DeployUser { salt: salt_from_bytes(&[7; 12]), ..minimal().deploy_user }, ..minimal() };
    assert_ne!(render(&salted).expect("s").sha256(), render(&minimal()).expect("m").sha256());
}
