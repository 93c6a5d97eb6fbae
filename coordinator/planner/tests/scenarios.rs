//! Golden-file scenarios: every directory under `tests/scenarios/` holds `input.json`
//! (`{"now": <time>, "input": <PlanInput>}`) and `expected.json` (the `Plan`). The test plans
//! each input, runs the invariant checker over the plan, checks that re-planning the applied
//! result adds nothing, and compares with `expected.json`. `DROVER_BLESS=1` rewrites the
//! expected files instead of comparing.

use std::path::{Path, PathBuf};

use drover_planner::{Plan, PlanInput, apply, check_plan, plan};
use drover_proto::time::Time;
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Scenario {
    now: Time,
    input: PlanInput,
}

fn scenario_dirs() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios");
    let mut dirs: Vec<PathBuf> =
        std::fs::read_dir(&root).expect("tests/scenarios").map(|e| e.expect("entry").path()).filter(|p| p.is_dir()).collect();
    dirs.sort();
    dirs
}

#[test]
fn golden_scenarios_match_their_expected_plans() {
    let bless = std::env::var_os("DROVER_BLESS").is_some_and(|v| v == "1");
    let dirs = scenario_dirs();
    assert!(!dirs.is_empty(), "no scenarios");
    for dir in dirs {
        let name = dir.display().to_string();
        let text = std::fs::read_to_string(dir.join("input.json")).expect("input.json");
        let s: Scenario = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: bad input.json: {e}"));
        let p = plan(&s.input, s.now);
        if let Err(v) = check_plan(&s.input, &p, s.now) {
            panic!("{name}: invariants broken: {v:?}");
        }
        let mut after = s.input.clone();
        for a in &p.actions {
            apply(&mut after, a, s.now);
        }
        assert!(plan(&after, s.now).actions.is_empty(), "{name}: re-planning acted again");
        let got = serde_json::to_string_pretty(&p).expect("json") + "\n";
        let expected_path = dir.join("expected.json");
        if bless {
            std::fs::write(&expected_path, &got).expect("write expected.json");
            continue;
        }
        let expected = std::fs::read_to_string(&expected_path).unwrap_or_else(|_| panic!("{name}: no expected.json (DROVER_BLESS=1)"));
        let want: Plan = serde_json::from_str(&expected).expect("expected.json");
        assert_eq!(p, want, "{name}: plan differs from expected.json (DROVER_BLESS=1 to regenerate)\n{got}");
    }
}
