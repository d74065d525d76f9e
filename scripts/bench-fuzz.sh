#!/usr/bin/env bash
# Measures fuzzing throughput on this machine: inputs a second of
# `conform fuzz` against each built-in reference, and executions a second of
# each cargo-fuzz target. Figures, not pass/fail: docs/fuzzing.md quotes them.
#
#   bash scripts/bench-fuzz.sh [FUZZ_TARGET_SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-10}"
echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(rustc --version)"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
cargo build --release --quiet
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
# Prints each run's summary line, and the mean rate of the three seeds.
run() {
    local protocol="$1" cases="$2"
    shift 2
    local sum=0
    for seed in 1 2 3; do
        line=$(./target/release/conform fuzz --protocol "$protocol" --cases "$cases" --seed "$seed" \
            --out "$out" "$@" 2>/dev/null | head -1)
        echo "$line"
        rate=$(echo "$line" | sed -n 's/.*(\([0-9]*\)\/s).*/\1/p')
        sum=$((sum + ${rate:-0}))
    done
    echo "mean $protocol: $((sum / 3))/s"
    eval "mean_${protocol//-/_}=$((sum / 3))"
}
echo "== conform fuzz against the built-in references (3 seeds each, default -j)"
run agent-socket 20000
run acp 10000
run cwx 10000
echo "== goals (issue 19): acp and cwx at 1000/s or more, and at a fifth of agent-socket's rate or more"
for p in acp cwx; do
    rate=$(eval echo "\$mean_$p")
    echo "$p: ${rate}/s; $(awk -v r="$rate" -v s="$mean_agent_socket" 'BEGIN {printf "%.2f", r / s}') of agent-socket's ${mean_agent_socket}/s"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== cargo-fuzz targets, ${seconds}s each (--sanitizer none)"
bash fuzz/run-all.sh "$seconds"
