#!/usr/bin/env bash
# Runs every cargo-fuzz target for SECONDS seconds each (default 20) on the
# stable toolchain, and prints each target's executions per second.
#
#   bash fuzz/run-all.sh [SECONDS] [TARGET...]
#
# `--sanitizer none` is what works on stable: cargo-fuzz's default
# AddressSanitizer flag needs nightly (RUSTC_BOOTSTRAP=1 enables it, about
# ten times slower). Crashes land in fuzz/artifacts/<target>/; copy one to
# fuzz/regressions/<target>/ with a name that says what it found, and
# `cargo test --test fuzz_inputs` replays it from then on.
set -euo pipefail
cd "$(dirname "$0")"
seconds="${1:-20}"
shift || true
if ! command -v cargo-fuzz >/dev/null 2>&1; then
    echo "installing cargo-fuzz (about 2 minutes)" >&2
    cargo install cargo-fuzz --locked
fi
python3 make-seeds.py >/dev/null
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(cargo fuzz list)
fi
cargo fuzz build --sanitizer none
status=0
for t in "${targets[@]}"; do
    mkdir -p "corpus/$t" "artifacts/$t"
    log="$(mktemp)"
    if cargo fuzz run --sanitizer none "$t" -- -max_total_time="$seconds" -print_final_stats=1 >"$log" 2>&1; then
        result=ok
    else
        result=CRASH
        status=1
    fi
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
    per_second=$(( runs / seconds ))
    printf '%-24s %-5s %10s execs  %8s exec/s\n' "$t" "$result" "$runs" "$per_second"
    if [ "$result" = CRASH ]; then
        tail -30 "$log"
    fi
    rm -f "$log"
done
exit $status
