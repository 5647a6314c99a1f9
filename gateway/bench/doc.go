// Package bench holds the proxy-overhead benchmark (`just bench`): in one
// run, against the same fake upstream, it measures a client talking to the
// upstream directly, through a bare net/http/httputil.ReverseProxy (the
// practical floor of any Go proxy) and through Sluice, interleaved in rounds
// so that machine noise hits all three alike, and prints the ratios.
//
// The fake upstream, the bare proxy and Sluice each run as a separate
// process: the test binary re-executes itself to play the first two, and
// Sluice is the real binary built from ./cmd/sluice. The benchmark process
// itself is the load generator. The package has only test files; see
// bench_test.go for the cases, the knobs (quick mode with -short or
// SLUICE_BENCH_QUICK=1) and profiling (SLUICE_BENCH_PROFILE).
package bench
