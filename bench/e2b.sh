#!/bin/sh
# bench/e2b.sh -- the numbers of docs/BENCHMARKS.md: full-size E2B-shaped bundles with random
# weights (speed does not depend on the values), q8 and q4, measured by `plume bench`.
#
# usage: [CONFIG=e4b] bench/e2b.sh [DIR] [THREADS]
#   DIR      where the bundles live (default: $HOME/.cache/plume/bench); made with
#            `plume synth --config e2b --bundle` (about 1 minute and 4.6 / 3.1 GB each) if missing
#   THREADS  default 2
#   CONFIG   e2b (default) or e4b: the same figures for E4B-shaped bundles e4b-q8 and e4b-q4
#            (`plume synth --config e4b`, 9.5 / 7.7 GB with the float32 towers; each is read into the page cache
#            before its rounds)
# Prints plume bench's markdown tables (add --json to plume bench for machine-readable output);
# bench/serve.sh gives the server figures and bench/compare.sh the side-by-side with llama.cpp.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PLUME=${PLUME:-$ROOT/build/plume}
DIR=${1:-$HOME/.cache/plume/bench}
T=${2:-2}
CONFIG=${CONFIG:-e2b}
[ -x "$PLUME" ] || { echo "bench/e2b.sh: build plume first (make)" >&2; exit 1; }
mkdir -p "$DIR"
for w in q8 q4; do
    B=$DIR/$CONFIG-$w
    [ -f "$B/model_config.json" ] || "$PLUME" synth --config "$CONFIG" --seed 1 --bundle "$B" --weights $w
    # warm the page cache, then measure: 512-token prompt, 64 generated tokens, int8
    # activations (the default) and --exact interleaved, 3 rounds of one repetition each
    cat "$B"/chunk_*.safetensors "$B"/embed_tokens_q8.bin > /dev/null
    for r in 1 2 3; do
        for f in "" --exact; do
            echo "== $w ${f:-int8} round $r"
            # shellcheck disable=SC2086  # an empty flag is no argument
            "$PLUME" bench -m "$B" -p 512 -n 64 -t "$T" -r 1 $f
        done
    done
    "$PLUME" bench -m "$B" -p 16 -n 32 -t 1 -r 3 | grep -E "decode" # one thread
done
# the float32 FMA peak: the ceiling of exact prefill (built by make benches)
[ -x "$ROOT/build/bench/bench_fma" ] && "$ROOT/build/bench/bench_fma" "$T"
B=$DIR/$CONFIG-q8
# decode after long histories (float and int8 K/V), the cost of k-token steps (speculative
# decoding), continuous batching, and a follow-up turn after a 4000-token conversation
"$PLUME" bench -m "$B" -p 16 -n 32 -t "$T" -r 3 --depth 0,4096,16384,32768
"$PLUME" bench -m "$B" -p 16 -n 32 -t "$T" -r 3 --depth 0,16384,32768 --kv-bits 8
"$PLUME" bench -m "$B" -p 16 -n 8 -t "$T" -r 3 --spec
"$PLUME" bench -m "$B" -p 8 -n 16 -t "$T" -r 3 --batch 1,2,4,8
"$PLUME" bench -m "$B" -p 16 -n 8 -t "$T" -r 1 --history 4000 | grep -E "follow-up|load"
