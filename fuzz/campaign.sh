#!/bin/sh
# campaign.sh -- run libFuzzer harnesses for a fixed time each, JOBS at a time; fail if any finds something.
# usage: PLUME=build/plume fuzz/campaign.sh SECONDS WORK_DIR HARNESS...
# Each harness starts from fuzz/corpus/NAME (committed seeds) plus fuzz/regressions/NAME and
# adds what it finds to WORK_DIR/corpus/NAME (not committed); a crash, leak or broken
# invariant is written to WORK_DIR/findings/ and fails the run. The last line of each run
# (executions, coverage) goes to WORK_DIR/fuzz-stats.txt.
set -u
[ $# -ge 3 ] || { echo "usage: $0 SECONDS WORK_DIR HARNESS..." >&2; exit 2; }
SECS=$1 WORK=$2
shift 2
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PLUME=${PLUME:-$ROOT/build/plume}
sh "$ROOT/fuzz/fixture.sh" "$PLUME" "$WORK/fixture" || exit 1
export PLUME_FUZZ_BUNDLE="$WORK/fixture" PLUME_FUZZ_TOKENIZER="$WORK/fixture/tokenizer.bin"
mkdir -p "$WORK/findings"
: > "$WORK/fuzz-stats.txt"
# One harness: its log, its line of statistics (WORK/NAME.stat) and, if it found something,
# the finding's first lines (WORK/NAME.finding).
fuzz_one() {
    h=$1 name=$(basename "$1")
    mkdir -p "$WORK/corpus/$name" "$ROOT/fuzz/regressions/$name"
    log="$WORK/$name.log"
    rm -f "$WORK/$name.finding"
    "$h" -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$WORK/findings/$name-" \
        "$WORK/corpus/$name" "$ROOT/fuzz/corpus/$name" "$ROOT/fuzz/regressions/$name" >"$log" 2>&1
    rc=$?
    done_line=$(grep -E '^#[0-9]+.*DONE' "$log" | tail -1)
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    printf '%-22s %3ss  execs %-10s %s\n' "$name" "$SECS" "${execs:-?}" "$done_line" >"$WORK/$name.stat"
    if [ $rc -ne 0 ]; then
        { echo "FINDING in $name (exit $rc): see $log and $WORK/findings/"
          grep -m3 -E 'ERROR|runtime error|SUMMARY' "$log"; } >"$WORK/$name.finding"
    fi
}

# JOBS harnesses at a time (default: one per CPU; libFuzzer runs on one), in batches: every
# harness runs for the same SECS, so a batch ends when its members do.
JOBS=${JOBS:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)}
fail=0 batch=""
flush() {
    wait
    for b in $batch; do
        n=$(basename "$b")
        tee -a "$WORK/fuzz-stats.txt" <"$WORK/$n.stat"
        if [ -f "$WORK/$n.finding" ]; then cat "$WORK/$n.finding"; fail=1; fi
    done
    batch=""
}
k=0
for h in "$@"; do
    fuzz_one "$h" &
    batch="$batch $h" k=$((k + 1))
    [ $((k % JOBS)) -eq 0 ] && flush
done
flush
[ $fail -eq 0 ] && echo "fuzz: $# harnesses, ${SECS}s each, $JOBS at a time, no finding"
exit $fail
