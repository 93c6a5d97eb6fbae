//! Unit tests of `drover onboard`: the CSV (a good file, header orders, every refusal with its
//! line), the single form's checks, the routes and bodies, refusals before anything is sent,
//! and what a created onboarding or batch prints.

use clap::Parser;
use serde_json::{Value, json};

use super::*;
use crate::exit::codes;

#[derive(Parser)]
struct Wrap {
    #[command(flatten)]
    args: OnboardArgs,
}

fn parse(args: &[&str]) -> Result<OnboardArgs, clap::Error> {
    Wrap::try_parse_from(std::iter::once("onboard").chain(args.iter().copied())).map(|w| w.args)
}

fn node(hostname: &str, ip: &str, mac: Option<&str>) -> Node {
    Node { hostname: hostname.to_owned(), ipmi_ip: ip.to_owned(), pxe_mac: mac.map(str::to_owned) }
}

/// The error of `text`, which must start with `line N: `.
fn line_error(text: &str, n: usize) -> String {
    let e = parse_csv(text).expect_err("refused").to_string();
    assert!(e.starts_with(&format!("line {n}: ")), "line {n}: {e}");
    e
}

#[test]
fn a_good_file_becomes_nodes() {
    let text = "\u{feff}hostname,ipmi_ip,pxe_mac\r\n\
                GPU-A-01 , 10.0.0.11 ,AA-BB-CC-DD-EE-01\r\n\
                \r\n\
                # spare, not yet cabled\n\
                gpu-a-02,10.0.0.12,\n\
                gpu-a-03,fd00::13,aa:bb:cc:dd:ee:03\n";
    let nodes = parse_csv(text).expect("good file");
    assert_eq!(
        nodes,
        vec![
            node("gpu-a-01", "10.0.0.11", Some("aa:bb:cc:dd:ee:01")),
            node("gpu-a-02", "10.0.0.12", None),
            node("gpu-a-03", "fd00::13", Some("aa:bb:cc:dd:ee:03")),
        ]
    );
}

#[test]
fn columns_come_in_any_order_and_pxe_mac_is_optional() {
    let want = vec![node("gpu-a-01", "10.0.0.11", None), node("gpu-a-02", "10.0.0.12", None)];
    assert_eq!(parse_csv("hostname,ipmi_ip\ngpu-a-01,10.0.0.11\ngpu-a-02,10.0.0.12\n").expect("plain"), want);
    assert_eq!(parse_csv(" IPMI_IP , Hostname\n10.0.0.11,gpu-a-01\n10.0.0.12 ,gpu-a-02").expect("reordered"), want);
    let nodes = parse_csv("pxe_mac,ipmi_ip,hostname\naa:bb:cc:dd:ee:01,10.0.0.11,gpu-a-01\n").expect("mac first");
    assert_eq!(nodes, vec![node("gpu-a-01", "10.0.0.11", Some("aa:bb:cc:dd:ee:01"))]);
    // Blank lines before the header do not count as the header; line numbers stay the file's.
    let e = line_error("\n\nipmi_ip,hostname\n10.0.0.11,\n", 4);
    assert!(e.contains("empty hostname"), "{e}");
}

#[test]
fn each_problem_is_named_with_its_line() {
    let cases: &[(&str, usize, &str)] = &[
        ("gpu-a-01,10.0.0.11\n", 1, "no header: the first line must name the columns hostname,ipmi_ip[,pxe_mac]"),
        ("\n# nodes\nhostnames,ipmi_ips\n", 3, "no header"),
        ("ipmi_ip,pxe_mac\n10.0.0.11,\n", 1, "no hostname column"),
        ("hostname,ip\ngpu-a-01,10.0.0.11\n", 1, "column 2 is \"ip\""),
        ("hostname\ngpu-a-01\n", 1, "no ipmi_ip column"),
        ("hostname,ipmi_ip,hostname\n", 1, "column \"hostname\" twice"),
        ("hostname,ipmi_ip,rack\n", 1, "column 3 is \"rack\""),
        ("hostname,ipmi_ip\n", 1, "not followed by any node"),
        ("hostname,ipmi_ip\ngpu-a-01,10.0.0.11\n,10.0.0.12\n", 3, "empty hostname"),
        ("hostname,ipmi_ip\ngpu-a-01,  \n", 2, "empty ipmi_ip"),
        ("hostname,ipmi_ip\ngpu-a-01,10.0.0.300\n", 2, "ipmi_ip \"10.0.0.300\" is not an IP address"),
        ("hostname,ipmi_ip\ngpu-a-01,bmc-a-01\n", 2, "is not an IP address"),
        ("hostname,ipmi_ip\ngpu_a_01,10.0.0.11\n", 2, "hostname \"gpu_a_01\" is not a hostname"),
        ("hostname,ipmi_ip\ngpu-a-01,10.0.0.11,extra\n", 2, "expected 2 comma-separated fields (the header's columns), found 3"),
        ("hostname,ipmi_ip\ngpu-a-01\n", 2, "expected 2 comma-separated fields (the header's columns), found 1"),
        ("hostname,ipmi_ip\ngpu-a-01,10.0.0.11\n\ngpu-a-01,10.0.0.12\n", 4, "hostname \"gpu-a-01\" is already on line 2"),
        ("hostname,ipmi_ip\ngpu-a-01,10.0.0.11\nGPU-A-01,10.0.0.12\n", 3, "is already on line 2"),
        ("hostname,ipmi_ip\ngpu-a-01,10.0.0.11\ngpu-a-02,10.0.0.11\n", 3, "ipmi_ip 10.0.0.11 is already on line 2"),
        ("hostname,ipmi_ip\ngpu-a-01,fd00::1\ngpu-a-02,fd00:0::0:1\n", 3, "ipmi_ip fd00::1 is already on line 2"),
        ("hostname,ipmi_ip,pxe_mac\ngpu-a-01,10.0.0.11,aa:bb:cc:dd:ee\n", 2, "pxe_mac \"aa:bb:cc:dd:ee\" is not a MAC address"),
        (
            "hostname,ipmi_ip,pxe_mac\na,10.0.0.1,AA:bb:cc:dd:ee:ff\nb,10.0.0.2,aa-bb-cc-dd-ee-ff\n",
            3,
            "pxe_mac aa:bb:cc:dd:ee:ff is already on line 2",
        ),
    ];
    for (text, n, needle) in cases {
        let e = line_error(text, *n);
        assert!(e.contains(needle), "{text:?}: {needle:?} in {e}");
    }
}

#[test]
fn an_empty_file_and_too_many_rows_are_refused() {
    for empty in ["", "\n\n  \n", "# only a comment\n", "\u{feff}"] {
        let e = parse_csv(empty).expect_err("empty").to_string();
        assert!(e.contains("the file is empty"), "{empty:?}: {e}");
    }
    let rows = |n: usize| -> String {
        let mut s = "hostname,ipmi_ip\n".to_owned();
        for i in 0..n {
            s.push_str(&format!("gpu-{i},10.{}.{}.{}\n", i / 65536, (i / 256) % 256, i % 256));
        }
        s
    };
    assert_eq!(parse_csv(&rows(MAX_ROWS)).expect("exactly the maximum").len(), MAX_ROWS);
    let e = line_error(&rows(MAX_ROWS + 1), MAX_ROWS + 2);
    assert!(e.contains("more than 1000 rows"), "{e}");
}

#[test]
fn the_single_form_checks_its_arguments() {
    let a = parse(&["--site", "dc1", "--profile", "gpu", "GPU-A-01", " 10.0.0.11 ", "--pxe-mac", "AA-BB-CC-DD-EE-FF"]).expect("parse");
    let Request::Single { site, profile, sku, node: n } = request(&a).expect("request") else { panic!("single") };
    assert_eq!((site.as_str(), profile.as_str(), sku), ("dc1", "gpu", None));
    assert_eq!(n, node("gpu-a-01", "10.0.0.11", Some("aa:bb:cc:dd:ee:ff")));
    let refused = |args: &[&str], needle: &str| {
        let e = request(&parse(args).expect("parse")).expect_err(needle);
        assert_eq!(e.code(), codes::USAGE, "{e}");
        assert!(e.to_string().contains(needle), "{needle:?} in {e}");
    };
    refused(&["--site", "dc1", "--profile", "gpu", "gpu-a-01", "10.0.0"], "IPMI_IP \"10.0.0\" is not an IP address");
    refused(&["--site", "dc1", "--profile", "gpu", "gpu a", "10.0.0.1"], "HOSTNAME \"gpu a\" is not a hostname");
    refused(&["--site", "dc1", "--profile", "gpu", "gpu-a", "10.0.0.1", "--pxe-mac", "zz:bb:cc:dd:ee:ff"], "--pxe-mac");
    refused(&["--site", "dc/1", "--profile", "gpu", "gpu-a", "10.0.0.1"], "--site \"dc/1\"");
    refused(&["--site", "dc1", "--profile", " ", "gpu-a", "10.0.0.1"], "--profile");
    refused(&["--site", "dc1", "--profile", "gpu", "--sku", "a\nb", "gpu-a", "10.0.0.1"], "--sku");
}

#[test]
fn the_command_line_takes_one_node_or_a_csv() {
    assert!(parse(&["--site", "s", "--profile", "p", "h"]).is_err(), "IPMI_IP is required with HOSTNAME");
    assert!(parse(&["--site", "s", "--profile", "p"]).is_err(), "a node or --csv");
    assert!(parse(&["--profile", "p", "--csv", "f"]).is_err(), "--site is required");
    assert!(parse(&["--site", "s", "--csv", "f"]).is_err(), "--profile is required");
    assert!(parse(&["--site", "s", "--profile", "p", "--csv", "f", "h", "10.0.0.1"]).is_err(), "not both");
    assert!(parse(&["--site", "s", "--profile", "p", "--csv", "f", "--pxe-mac", "aa:bb:cc:dd:ee:ff"]).is_err(), "MACs are in the file");
    assert!(parse(&["--site", "s", "--profile", "p", "--csv", "f", "-o", "json"]).is_ok());
}

#[test]
fn routes_and_bodies_are_the_apis() {
    let n = node("gpu-a-01", "10.0.0.11", None);
    let single = Request::Single { site: "dc1".into(), profile: "gpu".into(), sku: Some("hgx".into()), node: n.clone() };
    let (path, body) = single.route_and_body().expect("body");
    assert_eq!(path, "/v1/maas/onboardings");
    assert_eq!(body, json!({"site": "dc1", "profile": "gpu", "sku": "hgx", "hostname": "gpu-a-01", "ipmiIp": "10.0.0.11", "pxeMac": null}));
    let nodes = vec![n, node("gpu-a-02", "10.0.0.12", Some("aa:bb:cc:dd:ee:ff"))];
    let batch = Request::Batch { site: "dc1".into(), profile: "gpu".into(), sku: None, nodes };
    let (path, body) = batch.route_and_body().expect("body");
    assert_eq!(path, "/v1/maas/onboardings/batch");
    assert_eq!(
        body,
        json!({"site": "dc1", "profile": "gpu", "sku": null, "nodes": [
            {"hostname": "gpu-a-01", "ipmiIp": "10.0.0.11", "pxeMac": null},
            {"hostname": "gpu-a-02", "ipmiIp": "10.0.0.12", "pxeMac": "aa:bb:cc:dd:ee:ff"}
        ]})
    );
}

#[test]
fn a_bad_file_is_refused_with_its_name_before_anything_is_sent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("rack-a.csv");
    std::fs::write(&file, "hostname,ipmi_ip\ngpu-a-01,10.0.0.11\ngpu-a-02,10.0.0.11\n").expect("write");
    let f = file.to_str().expect("utf-8 path");
    // No credentials are given: a refusal for anything but the file would be about them.
    let e = run(&parse(&["--site", "dc1", "--profile", "gpu", "--csv", f]).expect("parse")).expect_err("duplicate ip");
    assert_eq!(e.code(), codes::DATA);
    let msg = e.to_string();
    assert!(msg.starts_with(&format!("{f}: line 3: ipmi_ip 10.0.0.11 is already on line 2")) && msg.contains("nothing was sent"), "{msg}");
    let missing = dir.path().join("absent.csv");
    let e =
        run(&parse(&["--site", "dc1", "--profile", "gpu", "--csv", missing.to_str().expect("path")]).expect("parse")).expect_err("absent");
    assert_eq!(e.code(), codes::NO_INPUT);
    std::fs::write(&file, b"hostname,ipmi_ip\n\xff,10.0.0.1\n").expect("write");
    assert_eq!(run(&parse(&["--site", "dc1", "--profile", "gpu", "--csv", f]).expect("parse")).expect_err("binary").code(), codes::DATA);
    // A good file gets as far as the credentials, which are missing (64 naming them).
    std::fs::write(&file, "hostname,ipmi_ip\ngpu-a-01,10.0.0.11\n").expect("write");
    let mut a = parse(&["--site", "dc1", "--profile", "gpu", "--csv", f]).expect("parse");
    a.connect = ConnectArgs { config: Some(dir.path().join("none.toml")), ..ConnectArgs::default() };
    let e = run(&a).expect_err("no credentials");
    assert!(!e.to_string().contains("line"), "{e}");
}

fn onboarding(id: &str, hostname: &str) -> Value {
    json!({"onboardingId": id, "batchId": null, "site": "dc1", "profile": "gpu", "sku": null, "hostname": hostname,
           "ipmiIp": "10.0.0.11", "state": "pending", "stage": "create_or_find", "stageIndex": 0, "stages": ["create_or_find"],
           "attempt": 0, "message": "", "createdAt": "2030-01-01T00:00:00Z", "updatedAt": "2030-01-01T00:00:00Z", "events": [],
           "workflow": "onboard"})
}

#[test]
fn what_was_created_is_printed_with_how_to_follow_it() {
    let id = "0d9e1c7a-2b3c-4d5e-8f90-123456789abc";
    let one: crate::onboarding_view::OneJson =
        decode("/v1/maas/onboardings", &json!({"onboarding": onboarding(id, "gpu-a-01\x1b[2J")})).expect("decode");
    assert_eq!(
        render_single(&one),
        format!(
            "ID                                    HOSTNAME      IPMI       STATE    STAGE\n\
             {id}  gpu-a-01 [2J  10.0.0.11  pending  create_or_find\n\
             Follow it: drover describe onboarding {id}\n"
        )
    );
    let batch = "5b7d3c1e-9a0f-4e2d-8c6b-abcdefabcdef";
    let v = json!({"batchId": batch, "onboardings": [onboarding(id, "gpu-a-01"), onboarding("11111111-2222-4333-8444-555555555555", "gpu-a-02")]});
    let out = render_batch(&decode("/v1/maas/onboardings/batch", &v).expect("decode"));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 5, "{out}");
    assert_eq!(lines[0], format!("Batch {batch}: 2 onboardings"));
    assert!(lines[1].starts_with("ID ") && lines[3].starts_with("11111111-2222-4333-8444-555555555555  gpu-a-02"), "{out}");
    assert_eq!(lines[4], format!("Follow it: drover get onboardings --batch {batch}"));
}
