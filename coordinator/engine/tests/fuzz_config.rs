//! Fuzz target: the coordinator's TOML configuration loader (bolero; the shared scheme is in
//! `proto/tests/fuzzing/mod.rs`). Arbitrary text, and edits of a valid file, are either a
//! configuration or refused with an error naming the file — never a panic.

#[path = "../../../proto/tests/fuzzing/mod.rs"]
mod fuzzing;

use std::path::Path;

use drover_engine::config::Config;

/// A valid coordinator configuration, the document the edits start from.
const VALID: &str = r#"
listen = "127.0.0.1:8443"
state_dir = "/var/lib/drover-coordinator"
public_urls = ["https://coord.example:8443"]
trust_file = "/etc/drover/trust.json"
agent_binary = "/usr/lib/drover/drover-agent"
[enrollment]
token_ttl_secs = 3600
"#;

const FILE: &str = "/etc/drover/coordinator.toml";

#[test]
fn the_seed_configuration_is_valid() {
    Config::parse(Path::new(FILE), VALID).expect("the fuzz target starts from a valid file");
}

#[test]
fn coordinator_config() {
    bolero::check!(name = "coordinator_config").with_test_time(fuzzing::TEST_TIME).with_max_len(fuzzing::MAX_LEN).for_each(
        |input: &[u8]| {
            fuzzing::check_config_loader(VALID, FILE, input, |text| Config::parse(Path::new(FILE), text));
        },
    );
}
