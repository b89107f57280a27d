#!/usr/bin/env bash
# `make fuzz`: every fuzz target of fuzz/ under libFuzzer, on the stable
# toolchain (docs/security.md Z1).
#
# How it works without nightly: libfuzzer-sys builds libFuzzer from its C++
# source (needs c++), and rustc's stable codegen options add the
# SanitizerCoverage instrumentation libFuzzer reads (-C passes=sancov-module
# and -C llvm-args=-sanitizer-coverage-*). The explicit --target keeps
# RUSTFLAGS off build scripts and proc macros. No AddressSanitizer (that
# needs nightly's -Z sanitizer): Rust's own checks, debug assertions and
# overflow checks find the faults.
#
# Budget per target: FUZZ_RUNS executions (default 1,000,000) or
# FUZZ_SECONDS (default 300), whichever ends first; an input that runs
# longer than 1 s is a hang and fails the run. Corpora live in
# fuzz/corpus/TARGET (new finds are added); crashes are written to
# fuzz/artifacts/TARGET/ and fail the run: keep each as a regression input
# in fuzz/corpus/TARGET once fixed. FUZZ_TARGETS selects targets.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT/fuzz"
RUNS="${FUZZ_RUNS:-1000000}"
SECONDS_MAX="${FUZZ_SECONDS:-300}"
TARGETS="${FUZZ_TARGETS:-batch_request daemon_bodies daemon_http scale_map egress_origin proxy_head client_hello trajectory}"
TRIPLE="$(rustc -vV | sed -n 's/^host: //p')"
export RUSTFLAGS="--cfg fuzzing -C debug-assertions -C overflow-checks \
 -C passes=sancov-module -C llvm-args=-sanitizer-coverage-level=4 \
 -C llvm-args=-sanitizer-coverage-inline-8bit-counters \
 -C llvm-args=-sanitizer-coverage-pc-table \
 -C llvm-args=-sanitizer-coverage-trace-compares"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target/fuzz}"
# shellcheck disable=SC2086
cargo build --release --locked --target "$TRIPLE" $(printf -- '--bin %s ' $TARGETS)
status=0
for t in $TARGETS; do
    mkdir -p "corpus/$t" "artifacts/$t"
    echo "==> fuzz $t: up to $RUNS runs or $SECONDS_MAX s"
    log="$(mktemp)"
    if "$CARGO_TARGET_DIR/$TRIPLE/release/$t" "corpus/$t" \
        -runs="$RUNS" -max_total_time="$SECONDS_MAX" -timeout=1 \
        -artifact_prefix="artifacts/$t/" -print_final_stats=1 >"$log" 2>&1; then
        result=ok
    else
        result=FAILED
        status=1
        tail -30 "$log"
    fi
    runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")"
    speed="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")"
    cov="$(grep -Eo 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1)"
    # libFuzzer's average is runs per whole second elapsed: 0 under 1 s.
    if [[ "${speed:-0}" == 0 ]]; then speed="(all within 1 s)"; else speed="$speed/s"; fi
    echo "fuzz $t: $result, ${runs:-?} runs, $speed, $cov, corpus $(find "corpus/$t" -type f | wc -l) inputs"
    rm -f "$log"
done
exit "$status"
