#!/bin/sh
# Run every libFuzzer target of a -DKESTREL_FUZZ=ON build for SECONDS each (ASan+UBSan), on its
# committed corpus (new inputs that add coverage land there; commit them, minimized with -merge=1).
# A crash stops the run; its input is written to tests/fuzz/crashes/ (commit it with the fix: the
# corpus replay in make check then keeps it fixed).
# Usage: scripts/fuzz.sh BUILD_DIR SECONDS [TARGET...]
set -eu
B=$1
S=$2
shift 2
T=${*:-wire tree index slurm pack config route batch}
cd "$(dirname "$0")/.."
mkdir -p tests/fuzz/crashes
for t in $T; do
    echo "== $t: ${S}s"
    out=$(mktemp)
    # one job per core; -timeout: an input taking a second is a bug too
    if ! "$B/tests/fuzz/${t}_fuzzer" -max_total_time="$S" -timeout=2 -rss_limit_mb=2048 -print_final_stats=1 \
         -artifact_prefix=tests/fuzz/crashes/"$t"- "tests/fuzz/corpora/$t" >"$out" 2>&1; then
        tail -40 "$out"
        echo "fuzz: $t found a crash: see tests/fuzz/crashes/" >&2
        rm -f "$out"
        exit 1
    fi
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out")
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$out")
    cov=$(grep -o 'cov: [0-9]*' "$out" | tail -1)
    echo "fuzz: $t: $execs execs ($rate/s), $cov, clean"
    rm -f "$out"
done
