#!/bin/sh
# bench/serve.sh -- plume serve under concurrent load, as docs/BENCHMARKS.md reports it:
# aggregate decode tok/s of 1, 2, 4 and 8 concurrent requests (continuous batching), and the
# time to first token of turn 10 of a 10-turn conversation re-sent whole each turn (prompt
# reuse: only the new turn is prefilled). curl only; 127.0.0.1 only; stops by itself.
#
# usage: bench/serve.sh [BUNDLE] [THREADS] [ROUNDS]
#   BUNDLE   default $HOME/.cache/plume/bench/e2b-q8 (bench/e2b.sh makes it)
#   THREADS  default 2;  ROUNDS  default 3 (interleaved; medians and ranges are printed)
#   FLAGS    (environment) more `plume serve` flags, e.g. FLAGS="--draft 0" (greedy requests
#            draft by default; random weights repeat themselves, so drafts inflate 1 stream)
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PLUME=${PLUME:-$ROOT/build/plume}
B=${1:-$HOME/.cache/plume/bench/e2b-q8}
T=${2:-2}
ROUNDS=${3:-3}
GEN=${GEN:-48}
[ -x "$PLUME" ] || { echo "bench/serve.sh: build plume first (make)" >&2; exit 1; }
[ -f "$B/model_config.json" ] || { echo "bench/serve.sh: no bundle at $B (run bench/e2b.sh)" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'kill $SRV 2>/dev/null; wait $SRV 2>/dev/null; rm -rf "$TMP"' EXIT INT TERM

cat "$B"/chunk_*.safetensors "$B"/embed_tokens_q8.bin > /dev/null # warm the page cache
# shellcheck disable=SC2086  # FLAGS: extra server flags, one per word
"$PLUME" serve -m "$B" --port 0 --parallel 8 -t "$T" ${FLAGS:-} 2> "$TMP/log" &
SRV=$!
for i in $(seq 1 100); do
    PORT=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$TMP/log")
    [ -n "$PORT" ] && break
    sleep 0.1
done
[ -n "$PORT" ] || { cat "$TMP/log" >&2; exit 1; }
URL=http://127.0.0.1:$PORT

now() { date +%s.%N; }

# One chat request: $1 = JSON body, $2 = output file.
post() { curl -s -o "$2" -H 'Content-Type: application/json' -d "$1" "$URL/v1/chat/completions"; }

# Median and range of the numbers on stdin.
stats() { sort -g | awk '{v[NR] = $1} END {m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2;
                                           printf "%.2f | %.2f .. %.2f", m, v[1], v[NR]}'; }

post '{"messages": [{"role": "user", "content": "warm up"}], "max_tokens": 4}' "$TMP/w" # warm up

# N concurrent requests of GEN tokens each (ignore_eos: random weights stop anywhere). Two
# figures: the aggregate decode rate (from the replies' timings, prefill excluded) and the end
# to end rate (completion tokens / wall time, first request sent to last answer received).
for r in $(seq 1 "$ROUNDS"); do
    for n in 1 2 4 8; do
        t0=$(now)
        pids=""
        for k in $(seq 1 "$n"); do
            post "{\"messages\": [{\"role\": \"user\", \"content\": \"Request $k of round $r: tell a long story.\"}],
                  \"max_tokens\": $GEN, \"temperature\": 0, \"ignore_eos\": true}" "$TMP/r$k" &
            pids="$pids $!"
        done
        # shellcheck disable=SC2086  # one pid per word
        wait $pids
        t1=$(now)
        toks=$(cat "$TMP"/r[0-9]* | grep -o '"completion_tokens":[0-9]*' | cut -d: -f2 | awk '{s += $1} END {print s + 0}')
        [ "$toks" -eq $((n * GEN)) ] || { echo "bench/serve.sh: $n streams gave $toks tokens, want $((n * GEN))" >&2; exit 1; }
        echo "$toks $t0 $t1" | awk '{printf "%.3f\n", $1 / ($3 - $2)}' >> "$TMP/e2e$n"
        # decode only: the server's timings (tokens after the first, time from the first token
        # to the last); sum of tokens over the longest decode window of the n streams
        cat "$TMP"/r[0-9]* | grep -o '"predicted_n":[0-9.]*,"predicted_ms":[0-9.e+-]*' |
            sed 's/"predicted_n":\([^,]*\),"predicted_ms":\(.*\)/\1 \2/' |
            awk '{n += $1; if ($2 > ms) ms = $2} END {printf "%.3f\n", n * 1000 / ms}' >> "$TMP/agg$n"
        rm -f "$TMP"/r[0-9]*
    done
done

# A 10-turn conversation, re-sent whole every turn; turn 10's request asks for one token, so
# its time is the time to first token; cached_tokens shows what prompt reuse kept.
for r in $(seq 1 "$ROUNDS"); do
    msgs="{\"role\": \"system\", \"content\": \"You are a helpful assistant (round $r).\"}"
    for turn in $(seq 1 10); do
        msgs="$msgs, {\"role\": \"user\", \"content\": \"Turn $turn: here is a question about the history of computing, number $turn.\"}"
        max=16; [ "$turn" -eq 10 ] && max=1
        t0=$(now)
        post "{\"messages\": [$msgs], \"max_tokens\": $max, \"temperature\": 0, \"ignore_eos\": true}" "$TMP/c"
        t1=$(now)
        answer=$(sed -n 's/.*"content":"\(\([^"\\]\|\\.\)*\)".*/\1/p' "$TMP/c" | head -1)
        msgs="$msgs, {\"role\": \"assistant\", \"content\": \"$answer\"}"
    done
    echo "$t0 $t1" | awk '{printf "%.1f\n", ($2 - $1) * 1000}' >> "$TMP/ttft"
    prompt=$(grep -o '"prompt_tokens":[0-9]*' "$TMP/c" | cut -d: -f2)
    cached=$(grep -o '"cached_tokens":[0-9]*' "$TMP/c" | cut -d: -f2)
done

CPU=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
echo "| plume serve, $(basename "$B"), $T threads, $CPU, $ROUNDS rounds | median | min .. max |"
echo "|---|---|---|"
one=$(stats < "$TMP/agg1" | cut -d' ' -f1)
one_e2e=$(stats < "$TMP/e2e1" | cut -d' ' -f1)
for n in 1 2 4 8; do
    med=$(stats < "$TMP/agg$n" | cut -d' ' -f1)
    echo "| $n concurrent requests, aggregate decode tok/s ($GEN tokens each) | $(stats < "$TMP/agg$n") |"
    [ "$n" -gt 1 ] && echo "$med $one" | awk -v n="$n" '{printf "| ... %d over 1 | %.2fx | |\n", n, $1 / $2}'
done
for n in 1 2 4 8; do
    med=$(stats < "$TMP/e2e$n" | cut -d' ' -f1)
    echo "| $n concurrent requests, end to end tok/s (prefill included, first request sent to last answer) | $(stats < "$TMP/e2e$n") |"
    [ "$n" -gt 1 ] && echo "$med $one_e2e" | awk -v n="$n" '{printf "| ... %d over 1 | %.2fx | |\n", n, $1 / $2}'
done
echo "| turn 10 of a 10-turn conversation: prompt $prompt tokens, $cached reused; TTFT ms | $(stats < "$TMP/ttft") |"
