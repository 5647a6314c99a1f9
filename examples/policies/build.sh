#!/usr/bin/env bash
# Builds the example policies next to this script:
#   vendor-overloaded/  (Go, with the Sluice SDK) -> 10-vendor-overloaded.wasm
#   wat-recover/        (hand-written WAT)         -> 05-wat-recover.wasm (needs wabt's wat2wasm)
set -euo pipefail
cd "$(dirname "$0")"
GOOS=wasip1 GOARCH=wasm CGO_ENABLED=0 GOFLAGS= go build -buildmode=c-shared -trimpath -buildvcs=false \
	-ldflags="-s -w -buildid=" -o 10-vendor-overloaded.wasm ./vendor-overloaded
if command -v wat2wasm >/dev/null; then
	wat2wasm wat-recover/recover.wat -o 05-wat-recover.wasm
else
	echo "wat2wasm not found (apt-get install -y wabt): kept the committed 05-wat-recover.wasm" >&2
fi
if command -v node >/dev/null && command -v npm >/dev/null; then
	(cd ../.. && go run ./cmd/sluice policy build -update-sdk examples/policies/as-replay -o examples/policies/20-as-replay.wasm)
else
	echo "node/npm not found: kept the committed 20-as-replay.wasm" >&2
fi
