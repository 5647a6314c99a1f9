#!/usr/bin/env bash
# Rebuilds the committed test fixtures: *.wat -> *.wasm with wabt's wat2wasm
# (Debian: apt-get install -y wabt) and the Go fixture gofixture/ ->
# gofixture.wasm. CI uses the committed .wasm files and needs neither.
# ABI versions: replay_v2.wat and stream_redact.wat declare 2, badabi.wat 3 (rejected), the others
# 1; gofixture.wasm declares the SDK's version (2 since it gained a
# stream_event handler; its tests accept either).
set -euo pipefail
cd "$(dirname "$0")"
for f in *.wat; do
	wat2wasm "$f" -o "${f%.wat}.wasm"
done
GOOS=wasip1 GOARCH=wasm CGO_ENABLED=0 GOFLAGS= go build -buildmode=c-shared -trimpath -buildvcs=false \
	-ldflags="-s -w -buildid=" -o gofixture.wasm ./gofixture
