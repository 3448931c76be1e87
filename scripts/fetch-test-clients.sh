#!/bin/sh
# fetch-test-clients.sh -- install the npm packages of the client tests into tests/clients.
#
# usage: scripts/fetch-test-clients.sh
#
# Runs `npm ci --ignore-scripts` in tests/clients (package.json + package-lock.json: the
# official `openai`, `ollama` and `@anthropic-ai/sdk` libraries, `playwright-core`, which
# drives Debian's /usr/bin/chromium and downloads no browser of its own, and `ajv` +
# `ajv-formats`, the JSON Schema validator of the structured-output tests; the agent CLIs
# Claude Code and Codex, whose native binaries come as platform packages and are run through
# their packages' own launchers, so no install script is needed; the Vercel AI SDK and
# LangChain.js with their providers). Idempotent:
# nothing is fetched when node_modules already
# matches the lock file. Exits non-zero with the reason on stderr when node or npm is missing
# or the install fails; tests/test_clients.c then skips, printing that reason.
set -eu

die() { echo "fetch-test-clients: $*" >&2; exit 1; }

DIR=$(cd "$(dirname "$0")/../tests/clients" && pwd)
STAMP=$DIR/node_modules/.plume-lock-cksum
WANT=$(cksum < "$DIR/package-lock.json" | cut -d' ' -f1)
command -v node >/dev/null 2>&1 || die "node not found (Debian: apt-get install -y nodejs npm)"
# Tests that run at the same time (test_clients, test_serve_dialects) take turns: one installs,
# the next finds the install done (flock on the lock file, held until this script exits).
if command -v flock >/dev/null 2>&1; then
    exec 9<"$DIR/package-lock.json"
    flock 9
fi

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] \
    && [ -f "$DIR/node_modules/openai/package.json" ] && [ -f "$DIR/node_modules/playwright-core/package.json" ] \
    && [ -f "$DIR/node_modules/ollama/package.json" ] && [ -f "$DIR/node_modules/@anthropic-ai/sdk/package.json" ] \
    && [ -f "$DIR/node_modules/ajv/package.json" ] && [ -f "$DIR/node_modules/ajv-formats/package.json" ] \
    && [ -f "$DIR/node_modules/@anthropic-ai/claude-code/package.json" ] && [ -f "$DIR/node_modules/@openai/codex/package.json" ] \
    && [ -f "$DIR/node_modules/ai/package.json" ] && [ -f "$DIR/node_modules/@langchain/openai/package.json" ]; then
    exit 0
fi
command -v npm >/dev/null 2>&1 || die "npm not found (Debian: apt-get install -y npm)"
echo "fetch-test-clients: npm ci in $DIR" >&2
(cd "$DIR" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error --update-notifier=false >&2) \
    || die "npm ci failed in $DIR (is the npm registry reachable?)"
echo "$WANT" > "$STAMP"
