#!/usr/bin/env bash
# Acceptance with a real client: the Codex CLI (npm @openai/codex) runs
# `codex exec` through Sluice to the in-repo fake upstream, over HTTP and over
# WebSocket, in front of a Responses upstream and a Chat-Completions-only one.
# Skips (exit 0) when npm cannot install Codex.
set -euo pipefail
cd "$(dirname "$0")/.."

cache="${SLUICE_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice-e2e}"
codex="$cache/node_modules/.bin/codex"
if [ ! -x "$codex" ]; then
  mkdir -p "$cache"
  if ! (cd "$cache" && timeout 600 npm install --no-audit --no-fund --silent '@openai/codex@>=0.169' >/dev/null 2>&1); then
    echo "e2e-codex: SKIP: npm could not install @openai/codex"
    exit 0
  fi
fi
echo "e2e-codex: $("$codex" --version 2>/dev/null)"

work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
go build -o "$work/sluice" ./cmd/sluice

fail=0
run_case() { # protocol websockets
  local protocol=$1 ws=$2 name="$1 upstream, supports_websockets=$2"
  "$work/sluice" demo --listen 127.0.0.1:0 --upstream-protocol "$protocol" --log-level warn >"$work/demo.out" 2>"$work/demo.err" &
  local pid=$!
  pids+=("$pid")
  local base=""
  for _ in $(seq 1 200); do
    base=$(grep -o 'listening on http://[0-9.:]*' "$work/demo.out" | head -1 | sed 's/listening on //') || true
    [ -n "$base" ] && break
    sleep 0.1
  done
  if [ -z "$base" ]; then echo "FAIL $name: the demo did not start"; cat "$work/demo.err"; fail=1; return; fi
  export CODEX_HOME="$work/codex-$protocol-$ws"
  mkdir -p "$CODEX_HOME"
  cat >"$CODEX_HOME/config.toml" <<TOML
model = "gpt-fake-1"
model_provider = "sluice"

[model_providers.sluice]
name = "Sluice"
base_url = "$base/v1"
wire_api = "responses"
env_key = "SLUICE_DEMO_KEY"
supports_websockets = $ws
TOML
  local out1 out2
  out1=$(cd "$work" && SLUICE_DEMO_KEY=sk-demo timeout 120 "$codex" exec --skip-git-repo-check "Say hello" 2>&1) || true
  out2=$(cd "$work" && SLUICE_DEMO_KEY=sk-demo timeout 120 "$codex" exec --skip-git-repo-check resume --last "Say it again" 2>&1) || true
  local seen
  seen=$(curl -s "$base/admin/demo/upstream-requests")
  echo "---- $name"
  echo "turn 1: $(echo "$out1" | tail -1)"
  echo "turn 2: $(echo "$out2" | tail -1)"
  local ok=1
  [[ "$out1" == *"Hello from demo"* ]] || ok=0
  [[ "$out2" == *"Hello from demo"* ]] || ok=0
  # Which client transport reached the gateway (the demo's upstream speaks
  # SSE, so a WebSocket client is bridged WebSocket → SSE).
  local wsreqs
  wsreqs=$(curl -s "$base/metrics" | awk '/^sluice_requests_total\{code="101",surface="websocket"\}/ {print $2}')
  if [ "$ws" = true ] && [ -z "$wsreqs" ]; then echo "  Codex did not use the WebSocket mode"; ok=0; fi
  if [ "$ws" = false ] && [ -n "$wsreqs" ]; then echo "  Codex used WebSockets though they were off"; ok=0; fi
  [ -n "$wsreqs" ] && echo "  client WebSocket requests: $wsreqs"
  if [ "$protocol" = chat ]; then
    # The last Chat request must carry turn 1's prompt and answer.
    last=$(printf '%s' "$seen" | python3 -c 'import json,sys; r=[x for x in json.load(sys.stdin)["requests"] if x["path"].endswith("/chat/completions")]; print(json.dumps(r[-1]["body"]) if r else "")')
    n=$(printf '%s' "$seen" | python3 -c 'import json,sys; print(sum(1 for x in json.load(sys.stdin)["requests"] if x["path"].endswith("/chat/completions")))')
    if [ "$n" != 2 ]; then echo "  $n Chat completions for 2 turns (warm-ups must not reach the Chat upstream)"; ok=0; fi
    if [[ "$last" != *"Say hello"* || "$last" != *"Hello from demo"* || "$last" != *"Say it again"* ]]; then
      echo "  turn 2's Chat request lacks turn 1's history: ${last:0:300}"; ok=0
    else
      echo "  turn 2's Chat request carries turn 1's history"
    fi
  fi
  if [ $ok = 1 ]; then echo "PASS $name"; else echo "FAIL $name"; echo "$out1" | tail -5; echo "$out2" | tail -5; fail=1; fi
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

run_case responses false
run_case responses true
run_case chat false
run_case chat true
exit $fail
