#!/usr/bin/env bash
# Rebuilds the committed policy fixtures: *.wat -> *.wasm with wabt's
# wat2wasm (Debian: apt-get install -y wabt). The tests use the committed
# .wasm files and need no wabt.
set -euo pipefail
cd "$(dirname "$0")"
for f in *.wat; do
	wat2wasm "$f" -o "${f%.wat}.wasm"
done
