#!/usr/bin/env bash
# Builds the first-party policies (recover, replay, rewrite) to
# policies/<name>.wasm — or into the directory given as $1 — with the standard
# Go toolchain for wasip1. The flags make the output reproducible: the same
# Go version and sources give the same bytes (check-reproducible.sh checks).
set -euo pipefail
cd "$(dirname "$0")"
out="${1:-.}"
mkdir -p "$out"
for p in recover replay rewrite; do
	GOOS=wasip1 GOARCH=wasm CGO_ENABLED=0 GOFLAGS= GOWORK=off \
		go build -buildmode=c-shared -trimpath -buildvcs=false -ldflags="-s -w -buildid=" \
		-o "$out/$p.wasm" "./$p"
done
