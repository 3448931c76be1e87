#!/usr/bin/env bash
# bench/replicas.sh -- how to split one host's cores between plume serve replicas, measured
# (docs/DEPLOY.md): the same C concurrent requests served by one replica of T threads with C
# slots, and by K replicas of T/K threads with C/K slots each (requests spread evenly); the
# aggregate decode tok/s (completion tokens / wall time of the whole batch of requests) and
# the median prefill time (timings.prompt_ms), in interleaved rounds. curl only; 127.0.0.1 only.
#
# usage: bench/replicas.sh BUNDLE [THREADS] [REPLICAS] [CONCURRENT] [ROUNDS]
#   THREADS 2, REPLICAS 2 (the split compared with one replica), CONCURRENT 8, ROUNDS 3;
#   GEN (environment) tokens per answer, default 48.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PLUME=${PLUME:-$ROOT/build/plume}
B=${1:?usage: bench/replicas.sh BUNDLE [THREADS] [REPLICAS] [CONCURRENT] [ROUNDS]}
T=${2:-2}
K=${3:-2}
C=${4:-8}
ROUNDS=${5:-3}
GEN=${GEN:-48}
[ -x "$PLUME" ] || { echo "bench/replicas.sh: build plume first (make)" >&2; exit 1; }
[ -f "$B/model_config.json" ] || { echo "bench/replicas.sh: no bundle at $B" >&2; exit 1; }
[ $((T % K)) = 0 ] && [ $((C % K)) = 0 ] || { echo "bench/replicas.sh: THREADS and CONCURRENT must divide by REPLICAS" >&2; exit 1; }
TMP=$(mktemp -d)
PIDS=""
trap 'for p in $PIDS; do kill $p 2>/dev/null; done; wait 2>/dev/null; rm -rf "$TMP"' EXIT INT TERM
cat "$B"/chunk_*.safetensors "$B"/embed_tokens*.bin >/dev/null # warm the page cache

# start NAME THREADS SLOTS: a replica; its port in $port.
start() {
    "$PLUME" serve -m "$B" --port 0 --parallel "$3" -t "$2" --draft 0 2>"$TMP/$1.log" &
    PIDS="$PIDS $!"
    for i in $(seq 1 300); do
        port=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$TMP/$1.log" 2>/dev/null || true) # (the log may not be there yet)
        [ -n "$port" ] && return
        sleep 0.1
    done
    cat "$TMP/$1.log" >&2
    exit 1
}
start one "$T" "$C"
ONE=$port
SPLIT=""
for k in $(seq 1 "$K"); do
    start split$k $((T / K)) $((C / K))
    SPLIT="$SPLIT $port"
done

# batch PORTS...: C requests at once, spread over the ports in turn; prints "tok/s prefill_ms"
# (the median of the answers' timings.prompt_ms: admitted to first token).
batch() {
    trap - EXIT INT TERM # a subshell: the servers are not its to stop
    n=0
    t0=$(date +%s.%N)
    while [ $n -lt "$C" ]; do
        for port in "$@"; do
            [ $n -lt "$C" ] || break
            body="{\"messages\": [{\"role\": \"user\", \"content\": \"Request $n of round $r: tell me about load balancers.\"}], \"max_tokens\": $GEN, \"ignore_eos\": true, \"temperature\": 0.7, \"seed\": $n}"
            curl -s -o "$TMP/r$n.json" -d "$body" "http://127.0.0.1:$port/v1/chat/completions" &
            n=$((n + 1))
        done
    done
    wait # the curls: batch runs in a subshell, of which the servers are not children
    t1=$(date +%s.%N)
    tokens=$(cat "$TMP"/r*.json | grep -o '"completion_tokens":[0-9]*' | cut -d: -f2 | awk '{s += $1} END {print s + 0}')
    ttft=$(cat "$TMP"/r*.json | grep -o '"prompt_ms":[0-9.]*' | cut -d: -f2 | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    rm -f "$TMP"/r*.json
    echo "$tokens $t0 $t1 $ttft" | awk '{printf "%.1f %.0f\n", $1 / ($3 - $2), $4}'
}

echo "bench/replicas.sh: $(basename "$B"), $C concurrent requests of $GEN tokens, on $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
for r in $(seq 1 "$ROUNDS"); do
    a=$(batch "$ONE")
    b=$(batch $SPLIT)
    echo "round $r (load $(cut -d' ' -f1 /proc/loadavg)): 1 replica x $T threads x $C slots: $a | $K replicas x $((T / K)) threads x $((C / K)) slots: $b   (tok/s, median prefill ms)"
done
