// Package bench holds the process benchmarks of `just bench`. Each runs the
// fake upstream (internal/upstreamtest), and Sluice (the real binary built
// from ./cmd/sluice), as separate processes — the test binary re-executes
// itself to play the fake upstreams and the bare proxy — and is itself the
// load generator. Paths are measured interleaved in rounds, so that machine
// noise hits them alike, and printed as tables with the differences and
// ratios, every number also reported with b.ReportMetric.
//
//   - BenchmarkProxyOverhead (case "overhead"): client → upstream directly,
//     through a bare net/http/httputil.ReverseProxy (the practical floor of
//     any Go proxy) and through Sluice: JSON and 10-event streams, closed
//     loop and fixed rate, and the RSS of idle streams.
//   - BenchmarkWebSocket (cases "ws-turns" and "ws-idle"): the Responses
//     WebSocket mode directly and through Sluice with a WebSocket and with an
//     SSE upstream: added latency per event, time to first frame, RSS per
//     idle client socket (sockets per GiB).
//   - BenchmarkReplay (case "replay"): the time to first event a transparent
//     replay adds when the first upstream fails with usage_limit_reached.
//   - BenchmarkContinuity (case "continuity"): store:true streams through
//     Sluice with continuity on and off, first turns and follow-ups.
//   - BenchmarkStampedStreams (case "stamped"): per-frame latency (arrival −
//     emit, stamped by the fake upstream) of 64-delta streams 20 ms apart at
//     64, 256 and 1,024 concurrent streams, direct / bare proxy / sluice
//     (routed, with continuation and a stall bound armed).
//
// The package has only test files; see bench_test.go and cases_test.go for
// the knobs: SLUICE_BENCH_CASES selects cases (default all), -short or
// SLUICE_BENCH_QUICK=1 is the quick mode, SLUICE_BENCH_PROFILE profiles,
// SLUICE_BENCH_SLUICE_ARGS and SLUICE_BENCH_SLUICE_ENV add arguments and
// environment variables (GOGC=off, GODEBUG=gctrace=1) to the measured Sluice
// only, and SLUICE_BENCH_PGO=FILE merges CPU profiles of every measured
// sluice binary into FILE (`just pgo` writes cmd/sluice/default.pgo with it).
package bench
