#!/usr/bin/env bash
# Acceptance with a real client: the Codex CLI (npm @openai/codex, pinned
# below) runs `codex exec` through `sluice serve` to the in-repo fake upstream,
# over HTTP and over WebSocket, in front of a Responses upstream and a
# Chat-Completions-only one. The upstream is strict (scripts/e2e-upstream):
# a model it does not serve or a previous_response_id it did not create is
# refused, and every refusal fails the case. (Codex sends store:false; over
# HTTP it sends the whole input every turn, but over a WebSocket it sends a
# turn's tool output incrementally, with previous_response_id and only the new
# items. The gateway sends that follow-up in full from the session's memory to
# an upstream reached over HTTP (README "Privacy"), so no previous_response_id
# reaches the upstream here either: scripts/e2e-node.sh checks that chain. The
# fake upstream does not check store, so a store:false chain it was sent would
# pass here where OpenAI refuses it: gateway/ws_storefalse_chain_test.go checks
# what the upstream gets.)
# Skips (exit 0) when npm cannot install Codex, except in CI (CI=true), where
# that fails.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/e2e-lib.sh

CODEX_VERSION=0.169.0 # pinned: bump deliberately (each version gets its own cache)
dir="$e2e_cache/codex-$CODEX_VERSION"
codex="$dir/node_modules/.bin/codex"
[ -x "$codex" ] || npm_install e2e-codex "$dir" "@openai/codex@$CODEX_VERSION"
got=$("$codex" --version 2>/dev/null) || true
if [[ "$got" != *"$CODEX_VERSION"* ]]; then
  echo "e2e-codex: FAIL: $codex says '$got', want $CODEX_VERSION"
  exit 1
fi
echo "e2e-codex: $got"
e2e_build

fail=0
run_case() { # protocol websockets
  local protocol=$1 ws=$2 name="$1 upstream, supports_websockets=$2"
  if ! start_stack "$protocol-$ws" "$protocol"; then
    echo "FAIL $name: the upstream or the gateway did not start"
    fail=1
    return
  fi
  export CODEX_HOME="$work/codex-$protocol-$ws"
  mkdir -p "$CODEX_HOME"
  cat >"$CODEX_HOME/config.toml" <<TOML
model = "gpt-fake-1"
model_provider = "sluice"

[model_providers.sluice]
name = "Sluice"
base_url = "$base/v1"
wire_api = "responses"
env_key = "SLUICE_E2E_KEY"
supports_websockets = $ws
TOML
  local out1 out2
  out1=$(cd "$work" && SLUICE_E2E_KEY=sk-e2e timeout 120 "$codex" exec --skip-git-repo-check "Say hello" 2>&1) || true
  out2=$(cd "$work" && SLUICE_E2E_KEY=sk-e2e timeout 120 "$codex" exec --skip-git-repo-check resume --last "Say it again" 2>&1) || true
  echo "---- $name"
  echo "turn 1: $(echo "$out1" | tail -1)"
  echo "turn 2: $(echo "$out2" | tail -1)"
  local ok=1
  [[ "$out1" == *"Hello from e2e"* ]] || ok=0
  [[ "$out2" == *"Hello from e2e"* ]] || ok=0
  # Which client transport reached the gateway (the upstream speaks SSE, so a
  # WebSocket client is bridged WebSocket → SSE).
  local wsreqs
  # Each response.create frame counts with its answer's status (README
  # "Observability"): the turns and warm-ups Codex sent over the socket.
  wsreqs=$(curl -s "$base/metrics" | awk '/^sluice_requests_total\{code="200",surface="websocket"\}/ {print $2}')
  if [ "$ws" = true ] && [ -z "$wsreqs" ]; then echo "  Codex did not use the WebSocket mode"; ok=0; fi
  if [ "$ws" = false ] && [ -n "$wsreqs" ]; then echo "  Codex used WebSockets though they were off"; ok=0; fi
  [ -n "$wsreqs" ] && echo "  client WebSocket requests: $wsreqs"
  upstream_check || ok=0
  if [ "$protocol" = chat ]; then
    # The last Chat request must carry turn 1's prompt and answer.
    local last n
    last=$(python3 -c 'import json,sys; r=[x for x in json.load(open(sys.argv[1]))["requests"] if x["path"].endswith("/chat/completions")]; print(json.dumps(r[-1]["body"]) if r else "")' "$work/upstream-requests.json")
    n=$(python3 -c 'import json,sys; print(sum(1 for x in json.load(open(sys.argv[1]))["requests"] if x["path"].endswith("/chat/completions")))' "$work/upstream-requests.json")
    if [ "$n" != 2 ]; then echo "  $n Chat completions for 2 turns (warm-ups must not reach the Chat upstream)"; ok=0; fi
    if [[ "$last" != *"Say hello"* || "$last" != *"Hello from e2e"* || "$last" != *"Say it again"* ]]; then
      echo "  turn 2's Chat request lacks turn 1's history: ${last:0:300}"
      ok=0
    else
      echo "  turn 2's Chat request carries turn 1's history"
    fi
  fi
  if [ $ok = 1 ]; then
    echo "PASS $name"
  else
    echo "FAIL $name"
    echo "$out1" | tail -5
    echo "$out2" | tail -5
    tail -5 "$work/sluice-$protocol-$ws.err"
    fail=1
  fi
  stop_stack
}

run_case responses false
run_case responses true
run_case chat false
run_case chat true
exit $fail
