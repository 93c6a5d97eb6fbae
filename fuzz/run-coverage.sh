#!/usr/bin/env bash
# Runs one of Drover's bolero fuzz targets under libFuzzer, coverage-guided, on a stable Rust
# toolchain. See usage() below, and SECURITY.md ("Fuzzing").
#
# What `cargo bolero test --engine libfuzzer` does, scoped to the one test binary that holds the
# target: cargo-bolero builds every test binary of the package with sanitizer-coverage
# instrumentation, and those that do not link bolero (hence libFuzzer) fail to link for want
# of the `__sanitizer_cov_*` symbols. Here `cargo test --test NAME` (or `--bin`) builds only the
# target's own binary. The flags are all stable: `-C passes=sancov-module` and `-C llvm-args`
# instrument; `--cfg fuzzing_libfuzzer` makes bolero pull in bolero-libfuzzer, whose build script
# compiles libFuzzer (a C++ compiler is needed); no sanitizer (`-Z sanitizer`) is used, so a
# finding is a panic (assertion, overflow, index, unwrap), not a memory error.
set -euo pipefail

usage() {
    cat <<'EOF'
usage: fuzz/run-coverage.sh [-t SECONDS] [-w WORKDIR] TARGET [-- LIBFUZZER_FLAG...]
       fuzz/run-coverage.sh -l

Builds TARGET's test binary instrumented for libFuzzer (profile `fuzz`: release with debug
assertions and overflow checks) and fuzzes it for SECONDS (default 60; 0 runs until stopped).

  -t SECONDS   how long to fuzz (libFuzzer -max_total_time)
  -w WORKDIR   where the grown corpus and any crash go
               (default: $CARGO_TARGET_DIR or target/, then fuzz-coverage/TARGET)
  -l           list the targets
  -h           this text

The checked-in corpus (`__fuzz__/TARGET/corpus/` beside the target's source) seeds the run and
is only read; new inputs go to WORKDIR/corpus, a crashing input to WORKDIR/crashes/ (the run
then exits non-zero). Flags after `--` go to libFuzzer as they are, e.g. `-- -max_len=4096
-seed=1` (no spaces inside a flag or a path). The exit status is libFuzzer's.

Example: fuzz/run-coverage.sh -t 60 canonical_json
EOF
}

# target -> "package dir, cargo target selector, libtest path of the #[test]"
targets() {
    cat <<'EOF'
canonical_json     drover-proto        proto        --test=it              fuzz_canonical::canonical_json
release_files      drover-proto        proto        --test=it              fuzz_signed::release_files
intent_envelope    drover-proto        proto        --test=it              fuzz_signed::intent_envelope
task_envelope      drover-proto        proto        --test=it              fuzz_signed::task_envelope
trust_file         drover-proto        proto        --test=it              fuzz_signed::trust_file
agent_config       drover-agent        agent        --test=it              fuzz_config::agent_config
coordinator_config drover-coordinator  coordinator  --test=fuzz_config     coordinator_config
cli_argv           drover-cli          cli          --bin=drover           fuzz_tests::cli_argv
cli_config         drover-cli          cli          --bin=drover           fuzz_tests::cli_config
EOF
}

secs=60
work=""
while getopts ":t:w:lh" opt; do
    case "$opt" in
        t) secs="$OPTARG" ;;
        w) work="$OPTARG" ;;
        l) targets | awk '{print $1}'; exit 0 ;;
        h) usage; exit 0 ;;
        *) usage >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[[ $# -ge 1 ]] || { usage >&2; exit 2; }
target="$1"
shift
if [[ $# -gt 0 ]]; then
    [[ "$1" == "--" ]] || { usage >&2; exit 2; }
    shift
fi
for a in "$@"; do
    [[ "$a" != *" "* && -n "$a" ]] || { echo "run-coverage: a libFuzzer flag may not be empty or contain a space: '$a'" >&2; exit 2; }
done
[[ "$secs" =~ ^[0-9]+$ ]] || { echo "run-coverage: -t wants whole seconds, not '$secs'" >&2; exit 2; }

row="$(targets | awk -v t="$target" '$1 == t')"
[[ -n "$row" ]] || { echo "run-coverage: no target '$target'; -l lists them" >&2; exit 2; }
read -r _ package dir selector test_path <<<"$row"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
command -v cargo >/dev/null || { echo "run-coverage: cargo is not on PATH" >&2; exit 1; }
# bolero-libfuzzer's build script compiles libFuzzer's C++ sources through the cc crate.
if ! command -v "${CXX:-c++}" >/dev/null; then
    echo "run-coverage: no C++ compiler ('${CXX:-c++}'); install one (e.g. the g++ package) or set CXX" >&2
    exit 1
fi

host="$(rustc -vV | sed -n 's/^host: //p')"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
work="${work:-$target_dir/fuzz-coverage/$target}"
mkdir -p "$work/corpus" "$work/crashes"
work="$(cd "$work" && pwd)"
[[ "$work" != *" "* ]] || { echo "run-coverage: the work directory may not contain a space: $work" >&2; exit 2; }

# The instrumentation cargo-bolero's libFuzzer engine asks for, minus the sanitizer. With
# `--target` given, RUSTFLAGS reach only the target's crates, not build scripts or proc macros.
rustflags=(
    --cfg fuzzing
    --cfg fuzzing_libfuzzer
    -Cpasses=sancov-module
    -Cllvm-args=-sanitizer-coverage-inline-8bit-counters
    -Cllvm-args=-sanitizer-coverage-level=4
    -Cllvm-args=-sanitizer-coverage-pc-table
    -Cllvm-args=-sanitizer-coverage-trace-compares
    -Cllvm-args=-sanitizer-coverage-stack-depth
)
build=(
    cargo test --manifest-path "$root/Cargo.toml" -p "$package" "$selector" --no-run
    --target "$host"
    --config 'profile.fuzz.inherits="release"'
    --config 'profile.fuzz.debug-assertions=true'
    --config 'profile.fuzz.overflow-checks=true'
    --profile fuzz
    --message-format=json-render-diagnostics
)
echo "run-coverage: building $package $selector (instrumented; the first build takes minutes)" >&2
messages="$(RUSTFLAGS="${rustflags[*]} ${RUSTFLAGS:-}" BOLERO_FUZZER=libfuzzer "${build[@]}")"
exe="$(grep '"test":true' <<<"$messages" | grep -o '"executable":"[^"]*"' | tail -n 1 | sed 's/^"executable":"//; s/"$//' || true)"
[[ -n "$exe" && -x "$exe" ]] || { echo "run-coverage: cargo built no test executable for $selector" >&2; exit 1; }

# Tests run from their package's directory, as under `cargo test`.
cd "$root/$dir"

# Ask the binary where the target keeps its corpus, the way cargo-bolero does.
info="$(CARGO_BOLERO_SELECT=one "$exe" "$test_path" --exact --nocapture | grep '"__bolero_target"' | head -n 1 || true)"
fuzz_dir="$(sed -n 's/.*"work_dir":"\([^"]*\)".*/\1/p' <<<"$info")"
[[ -n "$fuzz_dir" ]] || { echo "run-coverage: $exe did not report the target $test_path" >&2; exit 1; }
seeds="$fuzz_dir/corpus"
[[ -d "$seeds" ]] || { echo "run-coverage: no checked-in corpus at $seeds" >&2; exit 1; }
[[ "$seeds" != *" "* ]] || { echo "run-coverage: the corpus path may not contain a space: $seeds" >&2; exit 2; }

# libFuzzer writes new inputs to the first corpus directory only; the checked-in one is read.
args=("$work/corpus" "$seeds" "-artifact_prefix=$work/crashes/" "-print_final_stats=1")
[[ "$secs" == 0 ]] || args+=("-max_total_time=$secs")
args+=("$@")

echo "run-coverage: fuzzing $target for ${secs}s; corpus $work/corpus, crashes $work/crashes" >&2
status=0
BOLERO_LIBFUZZER_ARGS="${args[*]}" "$exe" "$test_path" --exact --nocapture || status=$?
echo "run-coverage: corpus now holds $(find "$work/corpus" -type f | wc -l) inputs; crashes: $(find "$work/crashes" -type f | wc -l)" >&2
exit "$status"
