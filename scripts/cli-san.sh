#!/bin/sh
# The CLI's real paths under a sanitized build, once per kernel table this CPU has (make check:
# clang's ASan + UBSan; issue 28: a NULL + 0 in the AVX attention kernels aborted the first
# prompt of plume run and plume serve under clang's UBSan, and no unit test had gone through
# those paths with those kernels). Per ISA: a short run (int8 activations, the default of q8),
# the same with --exact (float activations), a run with an image (the vision tower's kernels and
# the rows it feeds: tiny-a's text and tiny-mm-a's tower), the media decoders and both towers
# (JPEG with EXIF and CMYK, PNG, WebP; MP3, Opus, FLAC, 24-bit WAV through run, transcribe and
# the server's image, audio and transcription requests), a short chat, and serve requests; a sanitizer
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
# a checkpoint with both towers (as tests/t_mm.h makes it): tiny-a's text, tiny-mm-a's config
# and towers, the index naming each tower's tensors
mkdir -p "$tmp/avhf"
for f in tiny-a/hf/model-00001-of-00002.safetensors tiny-a/hf/model-00002-of-00002.safetensors tiny-a/hf/tokenizer.json \
         tiny-a/hf/tokenizer_config.json tiny-mm-a/config.json tiny-mm-a/audio_tower.safetensors tiny-mm-a/vision_tower.safetensors; do
    ln -s "$(pwd)/tests/data/$f" "$tmp/avhf/$(basename "$f")"
done
if ! python3 - "$tmp/avhf" >"$tmp/log" 2>&1 <<'PY' || ! "$plume" convert "$tmp/avhf" "$tmp/av" --weights q8 --quiet >>"$tmp/log" 2>&1; then
import json, struct, sys
d = sys.argv[1]
index = json.load(open("tests/data/tiny-a/hf/model.safetensors.index.json"))
for tower in ("audio_tower.safetensors", "vision_tower.safetensors"):
    with open(f"{d}/{tower}", "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        for name in json.loads(f.read(n)):
            if name != "__metadata__":
                index["weight_map"][name] = tower
json.dump(index, open(f"{d}/model.safetensors.index.json", "w"))
PY
    bad convert "plume convert of the checkpoint with both towers failed"
    isas=""
fi
# the media a request may carry, decoded under the sanitizers: JPEG (EXIF, CMYK), PNG (eXIf,
# 16-bit gray), WebP (EXIF, lossy); MP3, FLAC, Ogg Opus and a 24-bit WAV
D=tests/data/tiny-mm-a/decode
images="--image $D/exif6.jpg --image $D/cmyk.jpg --image $D/exif8.png --image $D/gray16.png --image $D/exif5.webp --image $D/lossy.webp"
b64() { base64 -w0 "$1"; }
printf '{"max_tokens": 3, "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,%s"}}, {"type": "input_audio", "input_audio": {"format": "mp3", "data": "%s"}}, {"type": "text", "text": "What is it?"}]}]}' \
    "$(b64 $D/exif6.jpg)" "$(b64 tests/data/audio/tone.mp3)" > "$tmp/media.json"
for isa in $isas; do
    if ! "$plume" run -m "$tmp/tiny" -p "Hello there" -n 6 --isa "$isa" >"$tmp/log" 2>&1; then
        if grep -q "this CPU lacks it" "$tmp/log"; then echo "note: no $isa on this CPU"; continue; fi
        bad "$isa" "plume run"; continue
    fi
    "$plume" run -m "$tmp/tiny" -p "Hello there" -n 6 --isa "$isa" --exact >"$tmp/log" 2>&1 || { bad "$isa" "plume run --exact"; continue; }
    "$plume" run -m "$tmp/mm" --image tests/data/tiny-mm-a/A.png -p "<|image|>What is it?" -n 4 --isa "$isa" >"$tmp/log" 2>&1 \
        || { bad "$isa" "plume run --image"; continue; }
    "$plume" run -m "$tmp/av" $images -p "What are they?" -n 2 --isa "$isa" >"$tmp/log" 2>&1 \
        || { bad "$isa" "plume run with JPEG, PNG and WebP images"; continue; }
    "$plume" run -m "$tmp/av" --audio tests/data/audio/tone.mp3 --audio tests/data/audio/tone.opus -p "<|audio|><|audio|>Heard?" -n 2 \
        --isa "$isa" >"$tmp/log" 2>&1 || { bad "$isa" "plume run --audio (MP3, Opus)"; continue; }
    "$plume" transcribe -m "$tmp/av" tests/data/audio/tone.flac -n 2 --isa "$isa" >"$tmp/log" 2>&1 \
        || { bad "$isa" "plume transcribe (FLAC)"; continue; }
    "$plume" transcribe -m "$tmp/av" tests/data/audio/tone-s24.wav -n 2 --isa "$isa" >"$tmp/log" 2>&1 \
        || { bad "$isa" "plume transcribe (24-bit WAV)"; continue; }
    printf 'Hi\nAnd again?\n/quit\n' | "$plume" chat -m "$tmp/tiny" -n 4 --isa "$isa" >"$tmp/log" 2>&1 \
        || { bad "$isa" "plume chat"; continue; }
    "$plume" serve -m "$tmp/av" --port 0 --parallel 2 --isa "$isa" >"$tmp/log" 2>&1 &
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
    [ "$ok" = 1 ] && { curl -s -m 120 -o "$tmp/reply2" -w '%{http_code}' "http://127.0.0.1:$port/v1/chat/completions" \
        -H 'Content-Type: application/json' --data-binary @"$tmp/media.json" | grep -q 200 || ok=0; }
    [ "$ok" = 1 ] && { curl -s -m 120 -o "$tmp/reply3" -w '%{http_code}' "http://127.0.0.1:$port/v1/audio/transcriptions" \
        -F file=@tests/data/audio/tone.ogg | grep -q 200 || ok=0; }
    kill "$server" 2>/dev/null
    wait "$server"; st=$?
    server=
    if [ "$ok" = 1 ] && [ "$st" = 0 ] && grep -q 'data: \[DONE\]' "$tmp/reply"; then
        echo "ok $isa: run, run --exact, run --image, media (6 images, 4 audio files), chat, serve (text, image + audio, transcription)"
        pass=$((pass + 1))
    else
        bad "$isa" "plume serve (reply ok $ok, exit status $st)"
    fi
done
echo "$pass passed, $fail failed"
[ -n "${TALLY:-}" ] && echo "$pass $fail" >> "$TALLY"
[ "$fail" -eq 0 ]
