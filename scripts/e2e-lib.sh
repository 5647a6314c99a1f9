# Shared by the end-to-end scripts (sourced, not run): install a pinned npm
# client, and start the strict fake upstream (scripts/e2e-upstream) with
# `sluice serve` in front of it.

# in_ci: CI=true (or any value but empty, 0 or false).
in_ci() { case "${CI:-}" in "" | 0 | false) return 1 ;; esac; return 0; }

# unavailable NAME WHY: a client that cannot be installed skips, except in CI.
unavailable() {
  if in_ci; then echo "$1: FAIL: $2 (CI is set: the end-to-end tests must run)"; exit 1; fi
  echo "$1: SKIP: $2"
  exit 0
}

# npm_install NAME DIR SPEC: installs SPEC (name@exact-version) into DIR once.
npm_install() {
  local name=$1 dir=$2 spec=$3
  mkdir -p "$dir"
  # A package.json of its own, or npm would install into a parent project.
  [ -f "$dir/package.json" ] || echo '{"private": true}' >"$dir/package.json"
  if ! (cd "$dir" && timeout 600 npm install --no-audit --no-fund --silent "$spec" >"$dir/npm.log" 2>&1); then
    tail -20 "$dir/npm.log" >&2 || true
    unavailable "$name" "npm could not install $spec"
  fi
}

e2e_cache="${SLUICE_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice-e2e}"

work=$(mktemp -d)
pids=()
e2e_cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap e2e_cleanup EXIT

# build: the gateway and the fake upstream.
e2e_build() {
  go build -o "$work/sluice" ./cmd/sluice
  go build -o "$work/e2e-upstream" ./scripts/e2e-upstream
}

# wait_match FILE REGEX: prints REGEX's first match in FILE, waiting up to 20s.
wait_match() {
  local v=""
  for _ in $(seq 1 200); do
    v=$(grep -Eo "$2" "$1" 2>/dev/null | head -1) || true
    if [ -n "$v" ]; then echo "$v"; return 0; fi
    sleep 0.1
  done
  return 1
}

# start_stack TAG PROTOCOL: the strict upstream, and Sluice in front of it as
# an upstream of that protocol (responses | chat). Sets $up (the upstream's
# base URL, .../v1), $upreqs (what it received, JSON) and $base (Sluice).
start_stack() {
  local tag=$1 protocol=$2
  "$work/e2e-upstream" >"$work/up-$tag.out" 2>"$work/up-$tag.err" &
  up_pid=$!
  pids+=("$up_pid")
  up=$(wait_match "$work/up-$tag.out" 'http://[0-9.:]+/v1') || { cat "$work/up-$tag.err"; return 1; }
  upreqs="${up%/v1}/e2e/requests"
  cat >"$work/sluice-$tag.yaml" <<YAML
listen: 127.0.0.1:0
data_dir: $work/data-$tag
log: {level: warn}
upstreams:
  - name: e2e
    base_url: $up
    protocol: $protocol
YAML
  "$work/sluice" serve --config "$work/sluice-$tag.yaml" >"$work/sluice-$tag.out" 2>"$work/sluice-$tag.err" &
  gw_pid=$!
  pids+=("$gw_pid")
  base=$(wait_match "$work/sluice-$tag.out" 'http://[0-9.:]+') || { cat "$work/sluice-$tag.err"; return 1; }
}

stop_stack() {
  kill "$gw_pid" "$up_pid" 2>/dev/null || true
  wait "$gw_pid" "$up_pid" 2>/dev/null || true
}

# upstream_check PROTOCOL: what the strict upstream received, checked. Prints
# a summary; fails when a request was refused (a model it does not serve, a
# previous_response_id it did not create). With "chain" as a second argument,
# a Responses request must also have carried a previous_response_id that this
# upstream created earlier.
upstream_check() {
  curl -s "$upreqs" >"$work/upstream-requests.json"
  python3 - "$work/upstream-requests.json" "${1:-}" <<'PY'
import json, sys
reqs = json.load(open(sys.argv[1]))["requests"]
want_chain = sys.argv[2] == "chain"
model_reqs = [r for r in reqs if r["path"] in ("/v1/responses", "/v1/chat/completions")]
refused = [r for r in model_reqs if not r["response_id"]]
created, chained = set(), 0
for r in model_reqs:
    if r["previous_response_id"] and r["previous_response_id"] in created:
        chained += 1
    if r["response_id"]:
        created.add(r["response_id"])
print("  upstream: %d model requests, %d chained by previous_response_id, %d refused" % (len(model_reqs), chained, len(refused)))
ok = True
for r in refused:
    print("  refused: model=%r previous_response_id=%r" % (r["model"], r["previous_response_id"]))
    ok = False
if want_chain and chained == 0:
    print("  no previous_response_id reached the upstream")
    ok = False
sys.exit(0 if ok else 1)
PY
}
