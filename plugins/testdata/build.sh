#!/usr/bin/env bash
# Rebuilds the committed WAT test fixtures (*.wat -> *.wasm) with wabt's
# wat2wasm (Debian: apt-get install -y wabt). CI uses the committed .wasm files
# and does not need wabt.
set -euo pipefail
cd "$(dirname "$0")"
for f in *.wat; do
	wat2wasm "$f" -o "${f%.wat}.wasm"
done
