#!/bin/sh
# The CLI's real paths under a sanitized build, once per kernel table this CPU has (make check:
# clang's ASan + UBSan; issue 28: a NULL + 0 in the AVX attention kernels aborted the first
# prompt of plume run and plume serve under clang's UBSan, and no unit test had gone through
# those paths with those kernels). Per ISA: a short run (int8 activations, the default of q8),
# the same with --exact (float activations), a run with an image (the vision tower's kernels and
# the rows it feeds: tiny-a's text and tiny-mm-a's tower), a short chat, and a serve request; a sanitizer
# report makes the command fail (-fno-sanitize-recover), and so the step.
#   sh scripts/cli-san.sh BUILD_DIR/plume
# Prints "ok ISA" or "FAIL ISA: ..." lines, then "N passed, N failed" (and the tally to $TALLY).
plume=${1:?usage: sh scripts/cli-san.sh PLUME}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/plume-cli-san-XXXXXX") || exit 1
server=
cleanup() { [ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
pass=0; fail=0
bad() { echo "FAIL cli-san $1: $2"; tail -20 "$tmp/log"; fail=$((fail + 1)); }

if ! "$plume" convert tests/data/tiny-a/hf "$tmp/tiny" --weights q8 --quiet >"$tmp/log" 2>&1; then
    bad convert "plume convert failed"
    isas=""
else
    isas="scalar avx2 avx512 neon"
fi
# a checkpoint with images: tiny-a's text shards and tokenizer, tiny-mm-a's config, index and tower
mkdir -p "$tmp/mmhf"
for f in model-00001-of-00002.safetensors model-00002-of-00002.safetensors tokenizer.json tokenizer_config.json; do
    ln -s "$(pwd)/tests/data/tiny-a/hf/$f" "$tmp/mmhf/$f"
done
cp tests/data/tiny-mm-a/hf/* "$tmp/mmhf/"
if ! "$plume" convert "$tmp/mmhf" "$tmp/mm" --weights q8 --quiet >"$tmp/log" 2>&1; then
    bad convert "plume convert of the checkpoint with images failed"
    isas=""
fi
for isa in $isas; do
    if ! "$plume" run -m "$tmp/tiny" -p "Hello there" -n 6 --isa "$isa" >"$tmp/log" 2>&1; then
        if grep -q "this CPU lacks it" "$tmp/log"; then echo "note: no $isa on this CPU"; continue; fi
        bad "$isa" "plume run"; continue
    fi
    "$plume" run -m "$tmp/tiny" -p "Hello there" -n 6 --isa "$isa" --exact >"$tmp/log" 2>&1 || { bad "$isa" "plume run --exact"; continue; }
    "$plume" run -m "$tmp/mm" --image tests/data/tiny-mm-a/A.png -p "<|image|>What is it?" -n 4 --isa "$isa" >"$tmp/log" 2>&1 \
        || { bad "$isa" "plume run --image"; continue; }
    printf 'Hi\nAnd again?\n/quit\n' | "$plume" chat -m "$tmp/tiny" -n 4 --isa "$isa" >"$tmp/log" 2>&1 \
        || { bad "$isa" "plume chat"; continue; }
    "$plume" serve -m "$tmp/tiny" --port 0 --parallel 2 --isa "$isa" >"$tmp/log" 2>&1 &
    server=$!
    port=
    for _ in $(seq 300); do
        port=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$tmp/log")
        [ -n "$port" ] && break
        kill -0 "$server" 2>/dev/null || break
        sleep 0.1
    done
    ok=0
    [ -n "$port" ] && curl -s -m 60 -o "$tmp/reply" -w '%{http_code}' "http://127.0.0.1:$port/v1/chat/completions" \
        -d '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "stream": true}' | grep -q 200 && ok=1
    kill "$server" 2>/dev/null
    wait "$server"; st=$?
    server=
    if [ "$ok" = 1 ] && [ "$st" = 0 ] && grep -q 'data: \[DONE\]' "$tmp/reply"; then
        echo "ok $isa: run, run --exact, run --image, chat, serve"
        pass=$((pass + 1))
    else
        bad "$isa" "plume serve (reply ok $ok, exit status $st)"
    fi
done
echo "$pass passed, $fail failed"
[ -n "${TALLY:-}" ] && echo "$pass $fail" >> "$TALLY"
[ "$fail" -eq 0 ]
