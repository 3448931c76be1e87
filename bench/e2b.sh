#!/bin/sh
# bench/e2b.sh -- the numbers of docs/BENCHMARKS.md: full-size E2B-shaped bundles with random
# weights (speed does not depend on the values), q8 and q4, measured by `plume bench`.
#
# usage: bench/e2b.sh [DIR] [THREADS]
#   DIR      where the bundles live (default: $HOME/.cache/plume/bench); made with
#            `plume synth --config e2b --bundle` (about 1 minute and 4.6 / 3.1 GB each) if missing
#   THREADS  default 2
# Prints one markdown table per precision (add --json to plume bench for machine-readable output).
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PLUME=${PLUME:-$ROOT/build/plume}
DIR=${1:-$HOME/.cache/plume/bench}
T=${2:-2}
[ -x "$PLUME" ] || { echo "bench/e2b.sh: build plume first (make)" >&2; exit 1; }
mkdir -p "$DIR"
for w in q8 q4; do
    B=$DIR/e2b-$w
    [ -f "$B/model_config.json" ] || "$PLUME" synth --config e2b --seed 1 --bundle "$B" --weights $w
    # warm the page cache, then measure: 512-token prompt, 128 generated tokens, 5 repetitions
    cat "$B"/chunk_*.safetensors "$B"/embed_tokens_q8.bin > /dev/null
    "$PLUME" bench -m "$B" -p 512 -n 128 -t "$T" -r 5
done
# a follow-up turn after a 4000-token conversation (the cache is kept: TTFT must not grow)
"$PLUME" bench -m "$DIR/e2b-q8" -p 16 -n 8 -t "$T" -r 1 --history 4000 | grep -E "follow-up|load"
