#!/bin/sh
# Run every test binary given, JOBS at a time (default: one per CPU); print each one's lines
# in the order given, as soon as it and those before it are done, then "N passed, N failed".
# A binary that crashes or exits non-zero without a FAIL line counts as one failure.
# The tests are independent (each in its own mkdtemp directory, servers on port 0), so the
# order given matters only for the time: the Makefile puts the longest first.
JOBS=${JOBS:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)}
dir=$(mktemp -d "${TMPDIR:-/tmp}/plume-run-XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
# "index binary" lines to xargs, which runs JOBS shells: each writes the binary's output to
# index.out and then its exit status to index.rc (the .rc file appears only when it is done).
i=0
for t in "$@"; do i=$((i + 1)); printf '%s %s\n' "$i" "$t"; done |
    RUN_DIR=$dir xargs -P "$JOBS" -n 2 sh -c \
        '"$2" >"$RUN_DIR/$1.out" 2>&1; echo $? >"$RUN_DIR/$1.rc.tmp"; mv "$RUN_DIR/$1.rc.tmp" "$RUN_DIR/$1.rc"' run &
runner=$!
# interrupted: stop handing out tests (the running ones end on their own), then clean up
trap 'kill "$runner" 2>/dev/null; exit 130' INT TERM
pass=0; fail=0; i=0
for t in "$@"; do
    i=$((i + 1))
    # wait for this one; if the runner is gone without its status, it did not run to the end
    while [ ! -f "$dir/$i.rc" ] && kill -0 "$runner" 2>/dev/null; do sleep 0.1; done
    if [ -f "$dir/$i.rc" ]; then rc=$(cat "$dir/$i.rc"); else rc=127; fi
    out=$(cat "$dir/$i.out" 2>/dev/null)
    printf '%s\n' "$out"
    p=$(printf '%s\n' "$out" | grep -c '^PASS ')
    f=$(printf '%s\n' "$out" | grep -c '^FAIL ')
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "FAIL $(basename "$t"): exited with status $rc"
        f=1
    fi
    pass=$((pass + p)); fail=$((fail + f))
done
wait "$runner"
echo "$pass passed, $fail failed"
[ -n "${TALLY:-}" ] && echo "$pass $fail" >> "$TALLY"
[ "$fail" -eq 0 ]
