//! Fuzz target: the agent's TOML configuration loader (bolero; the shared scheme is in
//! `proto/tests/fuzzing/mod.rs`). Arbitrary text, and edits of a valid file, are either a
//! configuration or refused with an error naming the file — never a panic.

#[path = "../../../proto/tests/fuzzing/mod.rs"]
mod fuzzing;

use std::path::Path;

use drover_agent::config::Config;

/// A valid agent configuration, the document the edits start from.
const VALID: &str = r#"
coordinator_urls = ["https://coord-1.example:8443", "https://127.0.0.1:9443/"]
state_dir = "/var/lib/drover"
ca_file = "/etc/drover/ca.crt"
"#;

const FILE: &str = "/etc/drover/agent.toml";

#[test]
fn the_seed_configuration_is_valid() {
    Config::parse(Path::new(FILE), VALID).expect("the fuzz target starts from a valid file");
}

#[test]
fn agent_config() {
    bolero::check!(name = "agent_config").with_test_time(fuzzing::TEST_TIME).with_max_len(fuzzing::MAX_LEN).for_each(|input: &[u8]| {
        fuzzing::check_config_loader(VALID, FILE, input, |text| Config::parse(Path::new(FILE), text));
    });
}
