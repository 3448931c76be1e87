#!/bin/sh
# Run every test binary given; print its lines and a final "N passed, N failed".
# A binary that crashes or exits non-zero without a FAIL line counts as one failure.
pass=0; fail=0
for t in "$@"; do
    out=$("$t" 2>&1); rc=$?
    printf '%s\n' "$out"
    p=$(printf '%s\n' "$out" | grep -c '^PASS ')
    f=$(printf '%s\n' "$out" | grep -c '^FAIL ')
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "FAIL $(basename "$t"): exited with status $rc"
        f=1
    fi
    pass=$((pass + p)); fail=$((fail + f))
done
echo "$pass passed, $fail failed"
[ -n "${TALLY:-}" ] && echo "$pass $fail" >> "$TALLY"
[ "$fail" -eq 0 ]
