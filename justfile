# Sluice task runner. Install just with `npm install -g rust-just`.

# Build the sluice binary into ./sluice
build:
    go build -trimpath -o sluice ./cmd/sluice

# The README's test command (what CI runs, plus vet and -race)
test:
    go test ./...

# What CI runs: vet, staticcheck, policy reproducibility, tests with the race detector
ci:
    bash .ci/run

# gofmt, vet and staticcheck
lint:
    test -z "$(gofmt -l $(git ls-files '*.go'))"
    go vet ./...
    go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

# Rebuild the embedded first-party policies (policies/*.wasm)
build-policies:
    bash policies/build.sh

# Direct vs bare reverse proxy vs Sluice, interleaved, with ratios
bench:
    go test -run '^$' -bench . -benchtime 1x -timeout 30m ./gateway/bench/

# Micro-benchmarks of every package
bench-micro:
    go test -run '^$' -bench . -benchmem ./...

# Fuzz each parser for a while (FUZZTIME=30s by default): SSE reader, translators, ABI decoding
fuzz FUZZTIME="30s":
    go test -run '^$' -fuzz '^FuzzReader$' -fuzztime {{FUZZTIME}} ./gateway/sse/
    go test -run '^$' -fuzz '^FuzzToChat$' -fuzztime {{FUZZTIME}} ./gateway/translate/
    go test -run '^$' -fuzz '^FuzzStream$' -fuzztime {{FUZZTIME}} ./gateway/translate/
    go test -run '^$' -fuzz '^FuzzFromChatResponse$' -fuzztime {{FUZZTIME}} ./gateway/translate/
    go test -run '^$' -fuzz '^FuzzDecodeInputs$' -fuzztime {{FUZZTIME}} ./hostabi/
    go test -run '^$' -fuzz '^FuzzDocument$' -fuzztime {{FUZZTIME}} ./hostabi/
    go test -run '^$' -fuzz '^FuzzDecodeRecoverResult$' -fuzztime {{FUZZTIME}} ./plugins/
    go test -run '^$' -fuzz '^FuzzDecodeReplayResult$' -fuzztime {{FUZZTIME}} ./plugins/

# Run the gateway on the embedded fake upstream
demo:
    go run ./cmd/sluice demo

# Codex CLI (npm) through Sluice to the fake upstream: HTTP and WebSocket, Responses and Chat-only upstreams
e2e-codex:
    bash scripts/e2e-codex.sh

# openai-node's responses.stream() helper through Sluice to a Chat-only upstream
e2e-node:
    bash scripts/e2e-node.sh
