#!/usr/bin/env bash
# Measures fuzzing throughput on this machine: inputs a second of
# `conform fuzz` against each built-in reference, and executions a second of
# each cargo-fuzz target. Figures, not pass/fail: the README quotes them.
#
#   bash scripts/bench-fuzz.sh [FUZZ_TARGET_SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-10}"
echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(rustc --version)"
cargo build --release --quiet
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
run() {
    local protocol="$1" cases="$2"
    shift 2
    for seed in 1 2 3; do
        ./target/release/conform fuzz --protocol "$protocol" --cases "$cases" --seed "$seed" \
            --out "$out" "$@" 2>/dev/null | head -1
    done
}
echo "== conform fuzz against the built-in references (3 seeds each)"
run agent-socket 20000
run acp 2000 -j 8
run cwx 2000 -j 8
echo "== cargo-fuzz targets, ${seconds}s each (--sanitizer none)"
bash fuzz/run-all.sh "$seconds"
