#!/usr/bin/env bash
# openai-node's responses.stream() helper (npm openai, pinned below) consumes
# streams through `sluice serve`, two turns chained by previous_response_id,
# in front of the in-repo fake upstream (scripts/e2e-upstream: strict about
# models and previous_response_ids) as a Responses upstream and as a
# Chat-Completions-only one. Responses: turn 2's previous_response_id must
# reach the upstream, naming the response it created in turn 1. Chat: Sluice
# converts the stream and expands the chain itself. Then the SDK resumes turn
# 2's stream after its event 2 (responses.retrieve with stream and
# starting_after) and runs a background response to completion.
# Skips (exit 0) when npm cannot install openai, except in CI (CI=true),
# where that fails.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/e2e-lib.sh

OPENAI_NODE_VERSION=7.57.0 # pinned: bump deliberately (each version gets its own cache)
dir="$e2e_cache/openai-node-$OPENAI_NODE_VERSION"
[ -f "$dir/node_modules/openai/package.json" ] || npm_install e2e-node "$dir" "openai@$OPENAI_NODE_VERSION"
got=$(node -p 'require(process.argv[1]).version' "$dir/node_modules/openai/package.json" 2>/dev/null) || true
if [ "$got" != "$OPENAI_NODE_VERSION" ]; then
  echo "e2e-node: FAIL: $dir has openai '$got', want $OPENAI_NODE_VERSION"
  exit 1
fi
echo "e2e-node: openai-node $got"
cp scripts/node/responses-stream.mjs "$dir/" # resolves "openai" from $dir/node_modules
e2e_build

fail=0
for protocol in responses chat; do
  if ! start_stack "$protocol" "$protocol"; then
    echo "FAIL $protocol upstream: the upstream or the gateway did not start"
    fail=1
    continue
  fi
  echo "---- $protocol upstream"
  ok=1
  node "$dir/responses-stream.mjs" "$base" || ok=0
  if [ "$protocol" = responses ]; then
    upstream_check chain || ok=0
  else
    upstream_check || ok=0
  fi
  if [ $ok = 1 ]; then
    echo "PASS $protocol upstream"
  else
    echo "FAIL $protocol upstream"
    tail -5 "$work/sluice-$protocol.err"
    fail=1
  fi
  stop_stack
done
if [ $fail = 0 ]; then echo "e2e-node: PASS"; else echo "e2e-node: FAIL"; fi
exit $fail
