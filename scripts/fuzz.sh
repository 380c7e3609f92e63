#!/usr/bin/env bash
# Runs every cargo-fuzz target of fuzz/ for a while each (60 s by default) with the installed
# nightly toolchain, then prints one line per target: executions, corpus size, crashes.
#
#   scripts/fuzz.sh            # 60 s per target
#   scripts/fuzz.sh 600        # 10 min per target
#   scripts/fuzz.sh 30 index_load segment_scan   # only these targets
#
# Needs cargo-fuzz (`cargo install cargo-fuzz`) and a nightly toolchain (`rustup toolchain
# install nightly`). Crashes land in fuzz/artifacts/<target>/; minimise one with
# `cargo +nightly fuzz tmin <target> <file>` and add it as a regression unit test.
set -euo pipefail

seconds="${1:-60}"
shift || true
cd "$(dirname "$0")/../fuzz"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(cargo +nightly fuzz list)
fi
jobs="${FUZZ_JOBS:-1}"
status=0
summary=()
for t in "${targets[@]}"; do
    log="artifacts/$t.log"
    mkdir -p "artifacts/$t" "corpus/$t"
    echo "== $t: ${seconds}s"
    if cargo +nightly fuzz run "$t" -- -max_total_time="$seconds" -jobs="$jobs" -workers="$jobs" \
        -rss_limit_mb=2048 -max_len=65536 >"$log" 2>&1; then
        result="ok"
    else
        result="FAILED (see fuzz/$log)"
        status=1
    fi
    execs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' | tail -1 || true)
    if [ -z "$execs" ]; then
        execs=$(grep -Eo '^#[0-9]+' "$log" | tail -1 | tr -d '#' || true)
    fi
    crashes=$(find "artifacts/$t" -type f \( -name 'crash-*' -o -name 'oom-*' -o -name 'timeout-*' -o -name 'leak-*' \) | wc -l)
    corpus=$(find "corpus/$t" -type f | wc -l)
    summary+=("$t: ${execs:-?} executions, corpus $corpus, crashes $crashes, $result")
done
echo
printf '%s\n' "${summary[@]}"
exit $status
