#!/usr/bin/env bash
# `just scale-demo`: Redis and two Sluice replicas on loopback, no containers,
# in front of two strict fake upstreams (a previous_response_id an upstream did
# not create is previous_response_not_found there, so a follow-up that reached
# the wrong one would show). It walks through a follow-up and a streaming-input
# session that cross replicas, prints curl lines to try, and stops everything
# on Ctrl-C.
#
# Ports (override from the environment): REDIS_PORT=6390, REPLICA_1=127.0.0.1:8081,
# REPLICA_2=127.0.0.1:8082, UPSTREAM_A=127.0.0.1:9101, UPSTREAM_B=127.0.0.1:9102.
# WALKTHROUGH_ONLY=1 stops after the walkthrough instead of waiting for Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/../.."

REDIS_PORT=${REDIS_PORT:-6390}
R1=${REPLICA_1:-127.0.0.1:8081}
R2=${REPLICA_2:-127.0.0.1:8082}
UPA=${UPSTREAM_A:-127.0.0.1:9101}
UPB=${UPSTREAM_B:-127.0.0.1:9102}

if ! command -v redis-server >/dev/null; then
  echo "scale-demo needs redis-server (Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis)" >&2
  exit 1
fi
if redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1; then
  echo "something already answers on 127.0.0.1:$REDIS_PORT; set REDIS_PORT to a free port" >&2
  exit 1
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/sluice-scale-demo-XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 0' INT TERM

echo "building sluice and the fake upstream into $work …"
go build -o "$work/sluice" ./cmd/sluice
go build -o "$work/e2e-upstream" ./scripts/e2e-upstream

# AOF with an fsync per write: what Sluice acknowledged survives a Redis crash.
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$work" --appendonly yes --appendfsync always \
  --save "" --daemonize no --logfile "$work/redis.log" &
pids+=($!)
"$work/e2e-upstream" -name A -listen "$UPA" >"$work/upstream-a.log" 2>&1 &
pids+=($!)
"$work/e2e-upstream" -name B -listen "$UPB" >"$work/upstream-b.log" 2>&1 &
pids+=($!)

cat >"$work/sluice.yaml" <<EOF
log: {level: warn}
store:
  backend: redis
  redis: {url: "redis://127.0.0.1:$REDIS_PORT/0", key_prefix: "sluice:"}
upstreams:
  - {name: A, base_url: "http://$UPA/v1"}
  - {name: B, base_url: "http://$UPB/v1"}
EOF
"$work/sluice" serve --config "$work/sluice.yaml" --listen "$R1" --data-dir "$work/replica-1" >/dev/null 2>"$work/replica-1.log" &
pids+=($!)
"$work/sluice" serve --config "$work/sluice.yaml" --listen "$R2" --data-dir "$work/replica-2" >/dev/null 2>"$work/replica-2.log" &
pids+=($!)

for addr in "$R1" "$R2"; do
  for _ in $(seq 100); do
    curl -fs "http://$addr/readyz" 2>/dev/null | grep -q '"store":"ok"' && break
    sleep 0.1
  done
  if ! curl -fs "http://$addr/readyz" | grep -q '"store":"ok"'; then
    echo "replica $addr is not ready:"; cat "$work"/replica-*.log "$work/redis.log" >&2; exit 1
  fi
done
echo
echo "Redis on 127.0.0.1:$REDIS_PORT, replica 1 on http://$R1, replica 2 on http://$R2, upstreams A and B (logs in $work)"
echo

respond() { # base, previous id → the response id
  local body='{"model":"gpt-fake-1","input":"hi"'
  [ -n "$2" ] && body+=",\"previous_response_id\":\"$2\""
  curl -fs "http://$1/v1/responses" -H 'Content-Type: application/json' -H 'Authorization: Bearer sk-demo' -d "$body}" | jq -r .id
}
id1=$(respond "$R1" "")
echo "1. a response through replica 1:              $id1   (served by upstream ${id1:5:1})"
id2=$(respond "$R2" "$id1")
echo "2. its follow-up through replica 2:           $id2   (the owner, ${id1:5:1}, again)"
id3=$(respond "$R1" "$id2")
echo "3. and the next one through replica 1:        $id3"

sis=$(curl -fs "http://$R1/v1/streaming_input/sessions" -H 'Authorization: Bearer sk-demo' -H 'Content-Type: application/json' \
  -d '{"endpoint":"/v1/responses","start_policy":"on_end_only","template":{"model":"gpt-fake-1","input":"Say: "},"chunk":{"sequence_id":0,"payload":"hello "}}' | jq -r .session_id)
echo "4. a streaming-input session opened on replica 1 with chunk 0: $sis"
curl -fs "http://$R2/v1/streaming_input/sessions/$sis/chunks" -H 'Authorization: Bearer sk-demo' -H 'Content-Type: application/json' \
  -d '{"sequence_id":1,"payload":"world"}' | jq -c '{chunk: .sequence_id, next_sequence_id}' | sed 's/^/   chunk 1 on replica 2: /'
curl -fs "http://$R2/v1/streaming_input/sessions/$sis/finish" -H 'Authorization: Bearer sk-demo' -d '{}' | jq -c '{state, started}' | sed 's/^/   finish on replica 2:  /'
echo "   its answer, read from replica 1:"
curl -fs "http://$R1/v1/streaming_input/sessions/$sis/result" -H 'Authorization: Bearer sk-demo' | jq -c '{id, status, text: .output[0].content[0].text}' | sed 's/^/   /'
echo
echo "What the upstreams received (model, previous_response_id → response id):"
for up in "$UPA" "$UPB"; do
  curl -fs "http://$up/e2e/requests" | jq -r --arg up "$up" '.requests[] | "   \($up): \(.model) \(if (.previous_response_id // "") == "" then "-" else .previous_response_id end) → \(.response_id)"'
done

if [ -n "${WALKTHROUGH_ONLY:-}" ]; then
  exit 0
fi
cat <<EOF

Try (any replica serves any request):
  curl -N http://$R1/v1/responses -H 'Content-Type: application/json' -d '{"model":"gpt-fake-1","input":"hi","stream":true}'
  curl -N http://$R2/v1/responses -H 'Content-Type: application/json' -d '{"model":"gpt-fake-1","input":"more","stream":true,"previous_response_id":"$id3"}'
  curl http://$R2/readyz ; curl -s http://$R1/metrics | grep sluice_store
  kill the Redis (redis-cli -p $REDIS_PORT shutdown nosave): follow-ups fail closed (upstream_unavailable), new requests still flow

Ctrl-C stops Redis, the upstreams and both replicas.
EOF
wait
