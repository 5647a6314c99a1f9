#!/usr/bin/env bash
# openai-node's responses.stream() helper consumes a stream Sluice converted
# from a Chat-Completions-only upstream, two turns chained by
# previous_response_id. Skips (exit 0) when npm cannot install openai.
set -euo pipefail
cd "$(dirname "$0")/.."
cache="${SLUICE_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice-e2e}"
if [ ! -d "$cache/node_modules/openai" ]; then
  mkdir -p "$cache"
  if ! (cd "$cache" && timeout 300 npm install --no-audit --no-fund --silent openai >/dev/null 2>&1); then
    echo "e2e-node: SKIP: npm could not install openai"
    exit 0
  fi
fi
work=$(mktemp -d)
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
go build -o "$work/sluice" ./cmd/sluice
"$work/sluice" demo --listen 127.0.0.1:0 --upstream-protocol chat --log-level warn >"$work/out" 2>"$work/err" &
pid=$!
base=""
for _ in $(seq 1 200); do
  base=$(grep -o 'listening on http://[0-9.:]*' "$work/out" | head -1 | sed 's/listening on //') || true
  [ -n "$base" ] && break
  sleep 0.1
done
[ -n "$base" ] || { echo "e2e-node: FAIL: the demo did not start"; cat "$work/err"; exit 1; }
cp scripts/node/responses-stream.mjs "$cache/"
if node "$cache/responses-stream.mjs" "$base"; then
  echo "e2e-node: PASS"
else
  echo "e2e-node: FAIL"; exit 1
fi
