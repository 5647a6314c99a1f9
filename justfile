# Sluice task runner. Install just with `npm install -g rust-just`.

# Build the sluice binary into ./sluice, stamped with the version and commit (sluice version)
build:
    go build -trimpath -ldflags "-X main.version=$(git describe --tags --always --dirty 2>/dev/null || echo devel) -X main.commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)" -o sluice ./cmd/sluice

# Release binaries of VERSION (e.g. v0.4.0) for each platform into dist/, stamped, static, reproducible
release VERSION:
    for p in linux/amd64 linux/arm64 darwin/amd64 darwin/arm64; do \
      CGO_ENABLED=0 GOOS=${p%/*} GOARCH=${p#*/} go build -trimpath -buildvcs=false \
        -ldflags "-s -w -buildid= -X main.version={{VERSION}} -X main.commit=$(git rev-parse HEAD)" \
        -o dist/sluice-{{VERSION}}-${p%/*}-${p#*/} ./cmd/sluice || exit 1; \
    done
    cd dist && sha256sum sluice-{{VERSION}}-* > SHA256SUMS-{{VERSION}}

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

# Refresh cmd/sluice/default.pgo, the CPU profile every `go build` of Sluice is optimised with (PGO), from the stamped and overhead benchmarks
pgo:
    SLUICE_BENCH_PGO="$(pwd)/cmd/sluice/default.pgo" SLUICE_BENCH_CASES=stamped,overhead SLUICE_BENCH_ROUNDS=2 go test -run '^$' -bench 'StampedStreams|ProxyOverhead' -benchtime 1x -timeout 30m ./gateway/bench/

# Micro-benchmarks of every package
bench-micro:
    go test -run '^$' -bench . -benchmem ./...

# Fuzz each parser for a while (FUZZTIME=30s by default): SSE reader, translators, ABI decoding, event scan, splicer, the HTTP entry
fuzz FUZZTIME="30s":
    go test -run '^$' -fuzz '^FuzzReader$' -fuzztime {{FUZZTIME}} ./gateway/sse/
    go test -run '^$' -fuzz '^FuzzToChat$' -fuzztime {{FUZZTIME}} ./internal/translate/
    go test -run '^$' -fuzz '^FuzzStream$' -fuzztime {{FUZZTIME}} ./internal/translate/
    go test -run '^$' -fuzz '^FuzzFromChatResponse$' -fuzztime {{FUZZTIME}} ./internal/translate/
    go test -run '^$' -fuzz '^FuzzDecodeInputs$' -fuzztime {{FUZZTIME}} ./hostabi/
    go test -run '^$' -fuzz '^FuzzDocument$' -fuzztime {{FUZZTIME}} ./internal/jsonx/
    go test -run '^$' -fuzz '^FuzzSWAR$' -fuzztime {{FUZZTIME}} ./internal/jsonx/
    go test -run '^$' -fuzz '^FuzzCheckDepth$' -fuzztime {{FUZZTIME}} ./internal/jsonx/
    go test -run '^$' -fuzz '^FuzzScanTop$' -fuzztime {{FUZZTIME}} ./internal/jsonx/
    go test -run '^$' -fuzz '^FuzzScanEvent$' -fuzztime {{FUZZTIME}} ./gateway/
    go test -run '^$' -fuzz '^FuzzSplice$' -fuzztime {{FUZZTIME}} ./gateway/
    go test -run '^$' -fuzz '^FuzzDecodeRecoverResult$' -fuzztime {{FUZZTIME}} ./plugins/
    go test -run '^$' -fuzz '^FuzzDecodeReplayResult$' -fuzztime {{FUZZTIME}} ./plugins/
    # fuzz-serve: the whole HTTP entry (coverage through a loopback upstream is not deterministic: bound minimization)
    go test -run '^$' -fuzz '^FuzzServeHTTP$' -fuzztime {{FUZZTIME}} -fuzzminimizetime 200x ./gateway/

# Mutation testing (gremlins, on a copy of the tree): LIVED mutants are edits no test notices. Slow: try `just mutate ./store`
mutate +PKGS="./gateway ./store ./plugins ./hostabi ./internal/jsonx":
    for p in {{PKGS}}; do \
      go run github.com/go-gremlins/gremlins/cmd/gremlins@v0.6.0 unleash --workers 1 --timeout-coefficient 10 "$p" || exit 1; \
    done

# Coverage-guided mutation testing, gremlins' mutants, each run against only the tests that reach it (no tree copy):
# `just mutants -sample 120 -seed 20261125 ./gateway/...`; flags before packages (README, "Mutation testing")
mutants +ARGS:
    go run ./scripts/mutants {{ARGS}}

# Run the gateway on the embedded fake upstream
demo:
    go run ./cmd/sluice demo

# Codex CLI (npm) through Sluice to the fake upstream: HTTP and WebSocket, Responses and Chat-only upstreams
e2e-codex:
    bash scripts/e2e-codex.sh

# openai-node's responses.stream() helper through Sluice to a Chat-only upstream
e2e-node:
    bash scripts/e2e-node.sh

# Redis and two replicas on loopback, no containers: a follow-up and a streaming-input session cross replicas (examples/scale-out)
scale-demo:
    bash examples/scale-out/demo.sh
