#!/usr/bin/env bash
# Rebuilds the first-party policies into a temporary directory and fails if
# the bytes differ from the committed policies/*.wasm (run by CI).
set -euo pipefail
cd "$(dirname "$0")"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
./build.sh "$tmp"
status=0
for p in recover replay rewrite; do
	if ! cmp -s "$p.wasm" "$tmp/$p.wasm"; then
		echo "policies/$p.wasm is not reproducible from source ($(go version)): rebuild with policies/build.sh" >&2
		status=1
	else
		echo "policies/$p.wasm: reproducible ($(sha256sum < "$p.wasm" | cut -c1-16))"
	fi
done
exit $status
