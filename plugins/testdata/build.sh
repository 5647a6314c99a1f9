#!/usr/bin/env bash
# Rebuilds the committed test fixtures: *.wat -> *.wasm with wabt's wat2wasm
# (Debian: apt-get install -y wabt) and the Go fixture gofixture/ ->
# gofixture.wasm, and the AssemblyScript fixture asfixture/ -> asfixture.wasm
# (needs node and npm; TestASFixturesFromSource checks the committed bytes).
# CI uses the committed .wasm files and needs none of them.
# ABI versions: replay_v2.wat and stream_redact.wat declare 2, badabi.wat 99 (rejected), the others
# 1; gofixture.wasm declares the SDK's version (2 since it gained a
# stream_event handler; its tests accept either).
set -euo pipefail
cd "$(dirname "$0")"
for f in *.wat; do
	wat2wasm "$f" -o "${f%.wat}.wasm"
done
GOOS=wasip1 GOARCH=wasm CGO_ENABLED=0 GOFLAGS= go build -buildmode=c-shared -trimpath -buildvcs=false \
	-ldflags="-s -w -buildid=" -o gofixture.wasm ./gofixture
if command -v node >/dev/null && command -v npm >/dev/null; then
	(cd ../.. && go run ./cmd/sluice policy build -update-sdk plugins/testdata/asfixture -o plugins/testdata/asfixture.wasm)
else
	echo "node/npm not found: kept the committed asfixture.wasm" >&2
fi
