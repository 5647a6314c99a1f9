package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// The test binary re-executes itself to play the benchmark's helper
// processes: SLUICE_BENCH_ROLE selects the role, SLUICE_BENCH_UPSTREAM is
// the fake upstream's base URL (http://127.0.0.1:PORT, no /v1) for the
// proxies. A role prints "<role> listening on http://ADDR" on stdout when it
// accepts connections, and exits on SIGTERM or when its stdin (a pipe from
// the benchmark) closes.
const (
	envRole     = "SLUICE_BENCH_ROLE"
	envUpstream = "SLUICE_BENCH_UPSTREAM"
	envRouted   = "SLUICE_BENCH_ROUTED" // the gateway role: routedYAML's setup

	roleUpstream = "upstream" // the fake upstream (upstreamtest)
	roleProxy    = "proxy"    // the bare httputil.ReverseProxy
	roleGateway  = "gateway"  // Sluice's gateway in-process, for profiling
	roleQuota    = "quota"    // the fake upstream failing requests that carry quotaHeader
)

// hangHeader routes a request to the fake upstream's second handler, whose
// every stream sends one event and then holds the connection open (the idle
// streams case). Both proxies forward it like any other client header.
const hangHeader = "X-Bench-Hang"

// streamEvents is the number of events of the fake upstream's stream:
// ResponsesStream with two deltas is response.created, in_progress,
// output_item.added, content_part.added, two output_text.delta,
// output_text.done, content_part.done, output_item.done and completed.
const (
	streamEvents = 10
	streamDeltas = 2
)

// TestMain runs the tests, or, when SLUICE_BENCH_ROLE is set, plays that
// helper role of the benchmark instead.
func TestMain(m *testing.M) {
	var run func(net.Listener) (stop func(), err error)
	switch role := os.Getenv(envRole); role {
	case "":
		code := m.Run()
		removeSluiceBuild()
		if err := writePGO(); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
			code = max(code, 1)
		}
		os.Exit(code)
	case roleUpstream:
		run = runUpstream
	case roleQuota:
		run = runQuotaUpstream
	case roleProxy:
		run = runProxy
	case roleGateway:
		run = runGateway
	default:
		fmt.Fprintf(os.Stderr, "bench: unknown %s %q\n", envRole, role)
		os.Exit(2)
	}
	os.Exit(serveRole(os.Getenv(envRole), run))
}

// serveRole runs one helper role until SIGTERM or stdin EOF. With
// SLUICE_BENCH_PROFILE=DIR it writes DIR/<role>-cpu.pprof over the whole
// life of the process and, on each SIGUSR1, DIR/<role>-heap-<n>.pprof.
func serveRole(role string, run func(net.Listener) (func(), error)) int {
	raiseNoFile(0)
	profDir := os.Getenv(envProfile)
	if profDir != "" {
		f, err := os.Create(filepath.Join(profDir, role+"-cpu.pprof"))
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench %s: cpu profile: %v\n", role, err)
			return 1
		}
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench %s: listen: %v\n", role, err)
		return 1
	}
	stop, err := run(ln)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench %s: %v\n", role, err)
		return 1
	}
	fmt.Printf("%s listening on http://%s\n", role, ln.Addr())

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1)
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin) // the benchmark went away
		sigs <- syscall.SIGTERM
	}()
	heaps := 0
	for sig := range sigs {
		if sig != syscall.SIGUSR1 {
			break
		}
		if profDir == "" {
			continue
		}
		heaps++
		if err := writeHeapProfile(filepath.Join(profDir, fmt.Sprintf("%s-heap-%d", role, heaps))); err != nil {
			fmt.Fprintf(os.Stderr, "bench %s: heap profile: %v\n", role, err)
		}
	}
	stop()
	return 0
}

// writeHeapProfile writes prefix.pprof (the heap profile), and
// prefix-goroutines.pprof and prefix-memstats.txt (where the memory is:
// heap, goroutine stacks, runtime overhead) to break RSS down.
func writeHeapProfile(prefix string) error {
	runtime.GC() // the in-use numbers are as of the last GC
	for _, name := range []string{"heap", "goroutine"} {
		path := prefix + ".pprof"
		if name == "goroutine" {
			path = prefix + "-goroutines.pprof"
		}
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
			_ = f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	var mem runtime.MemStats
	runtime.ReadMemStats(&mem)
	text := fmt.Sprintf("goroutines %d\nHeapInuse %d\nHeapIdle %d\nHeapReleased %d\nStackInuse %d\nMSpanInuse %d\nSys %d\nHeapObjects %d\n",
		runtime.NumGoroutine(), mem.HeapInuse, mem.HeapIdle, mem.HeapReleased, mem.StackInuse, mem.MSpanInuse, mem.Sys, mem.HeapObjects)
	return os.WriteFile(prefix+"-memstats.txt", []byte(text), 0o644)
}

// newRoleServer is the http.Server of the upstream and proxy roles: no
// timeouts that could end an idle stream, default net/http everything else.
func newRoleServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
}

// runUpstream serves the fake upstream: the default script answers JSON
// requests with the canned Response and streams (HTTP and the Responses
// WebSocket mode) with streamEvents events; requests carrying hangHeader get
// one event and then a held connection.
func runUpstream(ln net.Listener) (func(), error) { return serveFake(ln, false) }

// runQuotaUpstream serves the fake upstream of runUpstream, except that
// requests carrying quotaHeader get quotaFailure (before hangHeader counts).
func runQuotaUpstream(ln net.Listener) (func(), error) { return serveFake(ln, true) }

func serveFake(ln net.Listener, quota bool) (func(), error) {
	main := upstreamtest.NewHandler(upstreamtest.Options{Name: "bench", DisableRecording: true})
	main.SetDefault(upstreamtest.Script{
		Frames: upstreamtest.ResponsesStream(upstreamtest.PlaceholderID, upstreamtest.PlaceholderModel, "Hello from the bench", streamDeltas),
	})
	hang := upstreamtest.NewHandler(upstreamtest.Options{Name: "hang", DisableRecording: true})
	hang.SetDefault(upstreamtest.HangAfter(1))
	fail := upstreamtest.NewHandler(upstreamtest.Options{Name: "quota", DisableRecording: true})
	fail.SetDefault(quotaFailure())
	stamped := upstreamtest.NewHandler(upstreamtest.Options{Name: "stamped", DisableRecording: true})
	stamped.SetDefault(upstreamtest.StampedDeltas(stampedDeltas, stampedGap))
	srv := newRoleServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case quota && r.Header.Get(quotaHeader) != "":
			fail.ServeHTTP(w, r)
		case r.Header.Get(hangHeader) != "":
			hang.ServeHTTP(w, r)
		case r.Header.Get(stampedHeader) != "":
			stamped.ServeHTTP(w, r)
		default:
			main.ServeHTTP(w, r)
		}
	}))
	go func() { _ = srv.Serve(ln) }()
	return func() {
		fail.Close()
		stamped.Close()
		hang.Close()
		main.Close()
		_ = srv.Close()
	}, nil
}

// runProxy serves the bare reverse proxy: httputil.ReverseProxy flushing
// every write, over the gateway's own upstream transport. Full duplex is on:
// without it the HTTP/1 server closes the inbound body when the response
// starts, and the Transport's final read of that body (its check that the
// body holds no more than Content-Length bytes) can then fail and tear down
// the upstream connection mid-stream (golang/go#40747): a fraction of a
// percent of streams cut under load. Sluice reads the body first instead.
func runProxy(ln net.Listener) (func(), error) {
	target, err := url.Parse(os.Getenv(envUpstream))
	if err != nil || target.Host == "" {
		return nil, fmt.Errorf("%s=%q is not a URL", envUpstream, os.Getenv(envUpstream))
	}
	rp := &httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		FlushInterval: -1,
		Transport:     gateway.NewTransport(5*time.Second, 120*time.Second),
	}
	srv := newRoleServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).EnableFullDuplex()
		rp.ServeHTTP(w, r)
	}))
	go func() { _ = srv.Serve(ln) }()
	return func() { _ = srv.Close() }, nil
}

// runGateway serves Sluice's gateway in this process, so that
// SLUICE_BENCH_PROFILE can profile it: the transport, pool and gateway
// defaults of `sluice serve --upstream URL/v1`, but the built-in policy
// instead of the Wasm runtime and no continuity store. Profile the real
// binary (perf record -g -p PID) for those.
func runGateway(ln net.Listener) (func(), error) {
	base := os.Getenv(envUpstream)
	transport := gateway.NewTransport(5*time.Second, 120*time.Second)
	cfgs := []upstream.Config{{Name: "127.0.0.1-1", BaseURL: base + "/v1"}}
	var routes []gateway.Route
	if os.Getenv(envRouted) == "1" { // as routedYAML
		cfgs = []upstream.Config{{Name: "primary", BaseURL: base + "/v1"}, {Name: "backup", BaseURL: base + "/v1"}}
		routes = []gateway.Route{{Models: []string{benchModel}, Targets: []gateway.RouteTarget{{Upstream: "primary"}, {Upstream: "backup"}},
			Stall: routedStall, Continuation: gateway.ContinuationAuto}}
	}
	pool, err := upstream.NewPool(cfgs, upstream.Options{
		Client: &http.Client{Transport: transport, Timeout: 30 * time.Second},
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	probes := make(chan struct{})
	go func() { defer close(probes); pool.Run(ctx) }()
	gw, err := gateway.New(gateway.Options{Pool: pool, Transport: transport, Routes: routes})
	if err != nil {
		cancel()
		return nil, err
	}
	go func() { _ = gw.Serve(ln) }()
	return func() { // no drain: the process exits right after
		cancel()
		<-probes
	}, nil
}
