#!/bin/sh
# jsonschemabench.sh -- plume's declared coverage of JSONSchemaBench (guidance-ai/jsonschemabench,
# arXiv 2501.10868), per set: the share of schemas plume compiles into a constraint, compile time
# per schema (median, worst), and a constrained step's cost (mask + accept, the mean over 20
# random allowed tokens per schema, median over schemas). docs/STRUCTURED.md quotes its table.
#
#   sh bench/jsonschemabench.sh DATA_DIR [OUT_DIR]
#
# DATA_DIR holds the sets as the benchmark's repository has them (data/Glaiveai2K/*.json, ...):
# copy them outside this repository; nothing of the benchmark is committed here. OUT_DIR
# (default /tmp/plume-jsb) gets one TSV per set (bench_schema's lines) and refusals.txt, the
# refusal messages counted by keyword. Needs build/bench/bench_schema and tests/vocab (make vocab).
# With ANSWERS=1, every schema compiled also gets one answer by a biased random walk
# (bench_schema --answers) and bench/validate_answers.mjs checks them with ajv by draft: the
# table gains the answers finished and those ajv refuses. AJV_DIR names a folder where
# `npm install ajv ajv-formats ajv-draft-04` was run (outside this tree).
set -eu
DATA=${1:?usage: jsonschemabench.sh DATA_DIR [OUT_DIR]}
OUT=${2:-/tmp/plume-jsb}
BUILD=${BUILD:-build}
BIN=$BUILD/bench/bench_schema
[ -x "$BIN" ] || make --no-print-directory "$BIN" >/dev/null
mkdir -p "$OUT"
SETS=${SETS:-"Glaiveai2K Github_trivial Github_easy Github_medium Github_hard Github_ultra Kubernetes Snowplow WashingtonPost JsonSchemaStore"}
for s in $SETS; do
    [ -d "$DATA/$s" ] || { echo "jsonschemabench: no set $DATA/$s" >&2; continue; }
    if [ "${ANSWERS:-0}" = 1 ]; then
        rm -f "$OUT/$s.answers.jsonl"
        find "$DATA/$s" -name '*.json' | sort | xargs "$BIN" tests/vocab/tokenizer.bin --steps 20 --answers "$OUT/$s.answers.jsonl" > "$OUT/$s.tsv"
        node bench/validate_answers.mjs "$OUT/$s.answers.jsonl" > "$OUT/$s.ajv.txt" || true
    else
        find "$DATA/$s" -name '*.json' | sort | xargs "$BIN" tests/vocab/tokenizer.bin --steps 20 > "$OUT/$s.tsv"
    fi
done
/usr/bin/python3 - "$OUT" $SETS <<'PY'
import sys, os, re, statistics as st, collections
out, sets = sys.argv[1], sys.argv[2:]
print("| set | schemas | coverage | compile ms median | compile ms worst | step ms median | answers (ajv: invalid) |")
print("|---|---|---|---|---|---|---|")
why = collections.Counter()
for s in sets:
    p = os.path.join(out, s + ".tsv")
    if not os.path.exists(p): continue
    rows = [l.rstrip("\n").split("\t") for l in open(p, encoding="utf-8", errors="replace")]
    rows = [r for r in rows if len(r) >= 4]
    ok = [r for r in rows if r[1] == "ok"]
    ms = [float(r[2]) for r in ok]
    step = [float(r[3]) for r in ok if float(r[3]) >= 0]
    for r in rows:
        if r[1] != "ok":
            m = re.search(r'"([^"]+)" (?:is not supported|next to|with more)|(\w[\w ]*?(?:not supported|refused))', r[4] if len(r) > 4 else "")
            why[(s, m.group(1) or m.group(2) if m else (r[4] if len(r) > 4 else "?")[:80])] += 1
    f = lambda xs, g: "%.2f" % g(xs) if xs else "-"
    ans = "-"
    a = os.path.join(out, s + ".ajv.txt")
    if os.path.exists(a):
        m = re.search(r"answers (\d+) valid (\d+) invalid (\d+)", open(a).read())
        ans = "%s (%s)" % (m.group(1), m.group(3)) if m else "?"
    print("| %s | %d | %.2f | %s | %s | %s | %s |" % (s, len(rows), len(ok) / len(rows) if rows else 0,
          f(ms, st.median), f(ms, max), f(step, st.median), ans))
with open(os.path.join(out, "refusals.txt"), "w") as w:
    for (s, k), n in sorted(why.items(), key=lambda x: -x[1]): w.write("%d\t%s\t%s\n" % (n, s, k))
PY
