#!/bin/sh
# bench/compare.sh -- plume next to llama.cpp on this machine, in one run: interleaved rounds
# (every engine once per round, so a noisy neighbour hits all of them alike), then the median
# and range of each figure as a markdown table headed by the CPU's name.
#
# usage: bench/compare.sh [-r ROUNDS] [-t THREADS] [-p PROMPT] [-n GEN] [-f PLUME_FLAGS]...
#                         [--llama-bench PATH] MODEL...
#   MODEL         a plume bundle directory (it has model_config.json) or a .gguf file; give as
#                 many as you like (say a q8 bundle, a q4 bundle, a Q8_0 and a Q4_K_M GGUF)
#   --llama-bench the llama-bench binary of a llama.cpp build (needed for .gguf models)
#   -f FLAGS      a plume variant: each bundle runs once per -f (e.g. -f "" -f --exact);
#                 default one variant without flags
#   -r 3 rounds, -t 2 threads, -p 512 prompt tokens, -n 64 generated tokens
#   PLUME=path    the plume binary (default build/plume next to this script's parent)
# Nothing is fetched or built here: point it at what you have. Both engines measure prefill
# of -p tokens and decode of -n tokens (plume after its prefill, llama-bench from an empty
# context), from files in the page cache (each model is read once before its measurement).
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PLUME=${PLUME:-$ROOT/build/plume}
ROUNDS=3 THREADS=2 NP=512 NG=64 LLAMA_BENCH="" NFLAGS=0
die() { echo "compare.sh: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
    case $1 in
    -r) ROUNDS=${2:?}; shift 2 ;;
    -t) THREADS=${2:?}; shift 2 ;;
    -p) NP=${2:?}; shift 2 ;;
    -n) NG=${2:?}; shift 2 ;;
    -f) eval "FLAGS_$NFLAGS=\$2"; NFLAGS=$((NFLAGS + 1)); shift 2 ;;
    --llama-bench) LLAMA_BENCH=${2:?}; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) break ;;
    esac
done
[ $# -ge 1 ] || die "no model given (see --help)"
for v in "$ROUNDS" "$THREADS" "$NP" "$NG"; do
    case $v in ''|*[!0-9]*|0) die "-r, -t, -p and -n want positive integers, not '$v'" ;; esac
done
# shellcheck disable=SC2034 # FLAGS_i, MODEL_k, FL_k and NAME_k are read through eval
[ "$NFLAGS" -gt 0 ] || { FLAGS_0=""; NFLAGS=1; }
for m in "$@"; do
    if [ -f "$m/model_config.json" ]; then
        [ -x "$PLUME" ] || die "$PLUME not found: build plume (make) or set PLUME="
    else
        case $m in *.gguf) ;; *) die "$m is neither a plume bundle nor a .gguf file" ;; esac
        [ -f "$m" ] || die "$m: no such file"
        if [ -z "$LLAMA_BENCH" ] || [ ! -x "$LLAMA_BENCH" ]; then die "a .gguf model needs --llama-bench PATH"; fi
    fi
done

OUT=$(mktemp -d "${TMPDIR:-/tmp}/plume-compare.XXXXXX")
trap 'rm -rf "$OUT"' EXIT INT TERM

# The value of "key": number in a line of plume bench --json.
json_num() { sed -n "s/.*\"$1\": \([0-9.eE+-]*\).*/\1/p" | head -1; }

# avg_ts of the llama-bench JSON line (-o jsonl) whose n_prompt and n_gen are $1 and $2.
jsonl_ts() {
    grep "\"n_prompt\": $1, " | grep "\"n_gen\": $2, " | json_num avg_ts
}

# Measure engine k (a model and a variant) once; append its figures to $OUT/k.pre and k.dec
# (plume: also k.share, decode over the weights streamed right before and after it, in %).
measure() { # k model flags
    k=$1 m=$2 f=$3
    if [ -f "$m/model_config.json" ]; then
        cat "$m"/chunk_*.safetensors "$m"/embed_tokens_q8.bin > /dev/null 2>&1 || true
        # shellcheck disable=SC2086 # the flags are words
        "$PLUME" bench -m "$m" -p "$NP" -n "$NG" -t "$THREADS" -r 1 --json $f > "$OUT/$k.json" 2>> "$OUT/err" ||
            die "plume bench -m $m $f failed: $(tail -3 "$OUT/err")"
        json_num prefill_tok_s < "$OUT/$k.json" >> "$OUT/$k.pre"
        json_num decode_tok_s < "$OUT/$k.json" >> "$OUT/$k.dec"
        json_num decode_roofline < "$OUT/$k.json" | awk '{ printf "%.1f\n", $1 * 100 }' >> "$OUT/$k.share"
    else
        cat "$m" > /dev/null
        "$LLAMA_BENCH" -m "$m" -t "$THREADS" -p "$NP" -n "$NG" -r 1 -o jsonl > "$OUT/$k.jsonl" 2>> "$OUT/err" ||
            die "llama-bench -m $m failed: $(tail -3 "$OUT/err")"
        jsonl_ts "$NP" 0 < "$OUT/$k.jsonl" >> "$OUT/$k.pre"
        jsonl_ts 0 "$NG" < "$OUT/$k.jsonl" >> "$OUT/$k.dec"
    fi
}

# "median (min-max)" of the numbers in a file.
stats() {
    sort -g "$1" | awk '{ v[NR] = $1 } END {
        if (NR == 0) { print "-"; exit }
        med = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        printf "%.2f (%.2f-%.2f)\n", med, v[1], v[NR] }'
}

# The engines: every bundle once per plume variant, every GGUF once.
N=0
for m in "$@"; do
    if [ -f "$m/model_config.json" ]; then
        i=0
        while [ $i -lt "$NFLAGS" ]; do
            eval "f=\$FLAGS_$i"
            eval "MODEL_$N=\$m FL_$N=\$f NAME_$N=\"plume \$(basename \"\$m\")\${f:+ \$f}\""
            N=$((N + 1)) i=$((i + 1))
        done
    else
        eval "MODEL_$N=\$m FL_$N='' NAME_$N=\"llama.cpp \$(basename \"\$m\")\""
        N=$((N + 1))
    fi
done

m="" f="" name=""
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo "?")
r=1
while [ $r -le "$ROUNDS" ]; do
    k=0
    while [ $k -lt $N ]; do
        eval "m=\$MODEL_$k f=\$FL_$k name=\$NAME_$k"
        echo "round $r/$ROUNDS: $name" >&2
        measure $k "$m" "$f"
        k=$((k + 1))
    done
    r=$((r + 1))
done

CPU=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)
[ -n "$CPU" ] || CPU=$(sed -n 's/^model name\t*: //p' /proc/cpuinfo 2>/dev/null | head -1)
[ -n "$CPU" ] || CPU=$(sysctl -n machdep.cpu.brand_string 2>/dev/null || uname -m)
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo "?")
eval "first=\$NAME_0"
echo "$CPU, $THREADS threads; $ROUNDS interleaved rounds, medians (range); prompt $NP tokens, $NG generated;"
echo "load average $LOAD0 before, $LOAD1 after (the host's other work: a loaded host slows every engine alike,"
echo "which the per-round ratios cancel better than the speeds)"
echo
echo "| engine | prefill $NP, tok/s | decode, tok/s | decode over $first, per round | decode / bandwidth limit, % |"
echo "|---|---|---|---|---|"
k=0
while [ $k -lt $N ]; do
    eval "name=\$NAME_$k"
    share=-
    [ -f "$OUT/$k.share" ] && share=$(stats "$OUT/$k.share")
    # this engine's decode over the first engine's in the same round
    paste "$OUT/$k.dec" "$OUT/0.dec" | awk '$2 > 0 { printf "%.4f\n", $1 / $2 }' > "$OUT/$k.ratio"
    echo "| $name | $(stats "$OUT/$k.pre") | $(stats "$OUT/$k.dec") | $(stats "$OUT/$k.ratio") | $share |"
    k=$((k + 1))
done
