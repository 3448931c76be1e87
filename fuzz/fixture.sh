#!/bin/sh
# fixture.sh -- the tiny bundle the bundle, state and tokenize harnesses run on: plume synth
# of the tiny config (seed 1, q8) with tiny-a's tokenizer. Idempotent.
# usage: fuzz/fixture.sh PLUME OUT_DIR
set -eu
[ $# -eq 2 ] || { echo "usage: $0 PLUME OUT_DIR" >&2; exit 2; }
PLUME=$1 OUT=$2
ROOT=$(cd "$(dirname "$0")/.." && pwd)
[ -f "$OUT/model_config.json" ] && [ -f "$OUT/tokenizer.bin" ] && exit 0
rm -rf "$OUT"
mkdir -p "$(dirname "$OUT")"
"$PLUME" synth --config tiny --seed 1 --bundle "$OUT" --weights q8 --tokenizer "$ROOT/tests/data/tiny-a/hf" >/dev/null
