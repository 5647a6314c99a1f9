package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"html"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/config"
	"github.com/sluice-gw/sluice/gateway/streaminput"
	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/internal/apierr"
	"github.com/sluice-gw/sluice/plugins"
	"github.com/sluice-gw/sluice/policies"
	"github.com/sluice-gw/sluice/store"
)

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	// The usages show the defaults: the flags' own are "" (unset: the file's value).
	d := config.Defaults()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	configPath := fs.String("config", "", "read the YAML config `FILE` (default: none, the built-in defaults)")
	listen := fs.String("listen", "", fmt.Sprintf("listen on `ADDR`, host:port (default %s; overrides listen:)", d.Listen))
	dataDir := fs.String("data-dir", "", fmt.Sprintf("keep state (the continuity store) in `DIR` (default %s; overrides data_dir:)", d.DataDir))
	policyDir := fs.String("policy-dir", "", "watch `DIR` for *.wasm policies that override or extend the embedded ones\n(default: none; overrides policy_dir:)")
	wasmCache := fs.String("wasm-cache-dir", "", "keep the Wasm compilation cache in `DIR` (default: the user cache dir's\nsluice/wasm, else DATA_DIR/wasm-cache, else memory; overrides wasm_cache_dir:)")
	logJSON := fs.Bool("log-json", false, "log JSON lines instead of text (overrides log.json:)")
	logLevel := fs.String("log-level", "", fmt.Sprintf("log at `LEVEL`: trace, debug, info, warn or error (default %s; overrides log.level:)", d.Log.Level))
	pprofOn := fs.Bool("pprof", false, "serve Go's profiles (CPU, heap, allocs, goroutines) at GET /debug/pprof/…,\nbehind the admin token like /admin/* (default off)")
	var upstreams stringList
	fs.Var(&upstreams, "upstream", "proxy to the upstream at `URL` (repeatable; replaces upstreams:):\n"+
		"  http(s)://HOST/v1            a Responses API server (OpenAI, vLLM, another gateway)\n"+
		"  chat+http(s)://HOST/v1       a Chat-Completions-only server (llama.cpp's server, …):\n"+
		"                               /v1/responses is converted to Chat Completions\n"+
		"  responses+http(s)://HOST/v1  a Responses API server, explicitly\n"+
		"  https://KEY@HOST/v1          with its API key (else SLUICE_UPSTREAM_API_KEY)")
	if done, code := parseFlags(fs, args, stdout, stderr, func(w io.Writer) { commandHelp(w, serveAbout, fs, serveEnv) }); done {
		return code
	}
	cfg := config.Defaults()
	// A flag given overrides the file, whichever value it gives (README
	// "Running it"); one not given leaves the file's value. --log-json has
	// no "unset" value of its own, so whether it was given is asked of fs.
	logJSONGiven := flagGiven(fs, "log-json")
	jsonLogs := func() bool {
		if logJSONGiven {
			return *logJSON
		}
		return cfg.Log.JSON
	}
	// startErr reports why the gateway cannot start: as a JSON log line when
	// logs are JSON (--log-json, or log.json once the config is read), so
	// that a log pipeline sees it, else as text.
	startErr := func(format string, args ...any) {
		if msg := fmt.Sprintf(format, args...); jsonLogs() {
			newLogger(config.Log{Level: "error", JSON: true}, stderr).Error(msg)
		} else {
			fmt.Fprintf(stderr, "sluice: %s\n", msg)
		}
	}
	if *configPath != "" {
		var err error
		if cfg, err = config.Load(*configPath); err != nil {
			startErr("%v", err)
			return 1
		}
	}
	if cfg.AdminToken == "" {
		cfg.AdminToken = os.Getenv("SLUICE_ADMIN_TOKEN")
	}
	if len(upstreams) > 0 {
		cfg.Upstreams = nil
		for i, raw := range upstreams {
			u, err := config.UpstreamFromURL(raw, i)
			if err != nil {
				// A flag's value is judged as the key it replaces: a
				// config error, exit 1, as --log-level's and --data-dir's
				// are (README "Running it"); 2 is for the command line's
				// form (parseFlags).
				startErr("%v", err)
				return 1
			}
			if u.APIKey == "" {
				u.APIKey = os.Getenv("SLUICE_UPSTREAM_API_KEY")
			}
			cfg.Upstreams = append(cfg.Upstreams, u)
		}
	}
	override(&cfg.Listen, *listen)
	override(&cfg.DataDir, *dataDir)
	override(&cfg.PolicyDir, *policyDir)
	override(&cfg.WasmCacheDir, *wasmCache)
	override(&cfg.Log.Level, *logLevel)
	cfg.Log.JSON = jsonLogs()
	if err := cfg.Validate(); err != nil {
		startErr("config: %s", config.Indent(err))
		if len(upstreams) > 0 && len(cfg.Routes) > 0 && strings.Contains(err.Error(), "is not a configured upstream") {
			startErr("note: --upstream replaces the config's upstreams; its upstreams are named %s", upstreamNames(cfg.Upstreams))
		}
		return 1
	}
	if len(cfg.Upstreams) == 0 {
		startErr("config: upstreams: at least one upstream is required (or pass --upstream URL)")
		return 1
	}
	// Before anything starts (no upstream probes, no listener): a data dir
	// that cannot be used is a config problem.
	if !cfg.Continuity.Disabled {
		if err := writableDir(cfg.DataDir); err != nil {
			startErr("data_dir %q cannot be used: %v (set data_dir: or --data-dir to a writable directory)", cfg.DataDir, err)
			return 1
		}
	}
	if cfg.WasmCacheDir != "" { // an explicit one; the default falls back on its own
		if err := writableDir(cfg.WasmCacheDir); err != nil {
			startErr("wasm_cache_dir %q cannot be used: %v (set wasm_cache_dir: or --wasm-cache-dir to a writable directory)", cfg.WasmCacheDir, err)
			return 1
		}
	}
	logger := newLogger(cfg.Log, stderr)
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		logger.Error("cannot listen", "addr", cfg.Listen, "error", err)
		return 1
	}
	logSummary(logger, *configPath, cfg, ln.Addr())
	if *pprofOn {
		return serveWith(ctx, cfg, ln, logger, stdout, pprofHandlers())
	}
	return serve(ctx, cfg, ln, logger, stdout)
}

// pprofHandlers are net/http/pprof's endpoints under /debug/pprof/, for
// --pprof. The gateway mounts them as admin handlers (GET, exact paths,
// behind the admin token when one is set). Not cmdline: the command line
// can hold an upstream's key (--upstream https://sk-…@host/v1), and keys
// are never returned by an endpoint (SECURITY.md). The index is the
// gateway's own (pprofIndex), since net/http/pprof's links to cmdline.
func pprofHandlers() map[string]http.Handler {
	links := []pprofLink{
		{"profile", "CPU profile (?seconds=N, default 30)"},
		{"trace", "execution trace (?seconds=N, default 1)"},
		{"symbol", "program counters to function names"},
	}
	hs := map[string]http.Handler{
		"/debug/pprof/profile": http.HandlerFunc(pprof.Profile),
		"/debug/pprof/symbol":  http.HandlerFunc(pprof.Symbol),
		"/debug/pprof/trace":   http.HandlerFunc(pprof.Trace),
	}
	for _, name := range []string{"allocs", "block", "goroutine", "heap", "mutex", "threadcreate"} {
		hs["/debug/pprof/"+name] = pprof.Handler(name)
		links = append(links, pprofLink{name + "?debug=1", name + " profile"})
	}
	hs["/debug/pprof/"] = pprofIndex(links)
	return hs
}

// pprofLink is one entry of the --pprof index: a path relative to
// /debug/pprof/ and what it serves.
type pprofLink struct{ href, what string }

// pprofIndex is the page at /debug/pprof/: a link to each profile the
// gateway serves, and none to what it does not (cmdline).
func pprofIndex(links []pprofLink) http.Handler {
	var b strings.Builder
	b.WriteString("<!DOCTYPE html>\n<html><head><title>/debug/pprof/</title></head><body>\n<p>Go profiles of this gateway " +
		"(<code>go tool pprof http://HOST/debug/pprof/profile?seconds=30</code>):</p>\n<ul>\n")
	for _, l := range links {
		fmt.Fprintf(&b, "<li><a href=\"%s\">%s</a>: %s</li>\n", html.EscapeString(l.href), html.EscapeString(l.href), html.EscapeString(l.what))
	}
	b.WriteString("</ul>\n</body></html>\n")
	page := b.String()
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_, _ = io.WriteString(w, page)
	})
}

// ignoreHangups logs and otherwise ignores SIGHUP until the returned stop
// is called. The gateway has nothing to reload (the config is read once at
// start; policies hot-swap from policy_dir on their own), and a hang-up of
// the terminal that started it must not end streams in flight without their
// terminal events, as the signal's default action would.
func ignoreHangups(logger hclog.Logger) (stop func()) {
	return onSignal(func() {
		logger.Warn("SIGHUP ignored: the config is read once at start (restart to change it); policies in policy_dir hot-swap when their files change")
	}, syscall.SIGHUP)
}

// onSignal calls fn for each of sigs that arrives until the returned stop
// is called.
func onSignal(fn func(), sigs ...os.Signal) (stop func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, sigs...)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-ch:
				fn()
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
	}
}

// flagGiven says whether the command line set the flag name, to any value.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

func override(dst *string, v string) {
	if v != "" {
		*dst = v
	}
}

func newLogger(c config.Log, w io.Writer) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "sluice", Level: hclog.LevelFromString(c.Level), JSONFormat: c.JSON, Output: w})
}

// serve runs the gateway on ln until ctx ends, then drains. It returns the
// process exit code.
func serve(ctx context.Context, cfg config.Config, ln net.Listener, logger hclog.Logger, stdout io.Writer) int {
	return serveWith(ctx, cfg, ln, logger, stdout, nil)
}

// serveWith is serve with extra admin handlers mounted.
func serveWith(ctx context.Context, cfg config.Config, ln net.Listener, logger hclog.Logger, stdout io.Writer, admin map[string]http.Handler) int {
	defer ignoreHangups(logger)()
	gw, cleanup, err := assemble(ctx, cfg, logger, admin)
	defer cleanup() // also on failure: stops what assemble had started
	if err != nil {
		_ = ln.Close()
		if ctx.Err() != nil {
			// SIGTERM or SIGINT while starting: nothing was served, so
			// stopping is a clean exit, not a failed start.
			logger.Info("stopped while starting", "cause", context.Cause(ctx))
			return 0
		}
		logger.Error("startup failed", "error", err)
		return 1
	}
	// Loading the policies (decoding and compiling three Wasm modules)
	// leaves tens of MiB of garbage: give it back to the OS now rather
	// than idle with it resident. The embedded modules' bytes, read once
	// to compile them, need not stay resident either.
	debug.FreeOSMemory()
	policies.Evict()
	if ctx.Err() != nil {
		// A signal that came while a step of the start did not stop for
		// it: nothing was served, so stop now, before announcing a
		// listener a supervisor would take for a started gateway.
		_ = ln.Close()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = gw.Shutdown(sctx)
		logger.Info("stopped while starting", "cause", context.Cause(ctx))
		return 0
	}

	errc := make(chan error, 1)
	go func() { errc <- gw.Serve(ln) }()
	logger.Info("listening", "addr", configuredAddr(cfg.Listen, ln.Addr()), "upstreams", len(cfg.Upstreams))
	fmt.Fprintf(stdout, "sluice listening on http://%s\n", ln.Addr())

	select {
	case err := <-errc:
		if err != nil {
			logger.Error("server stopped", "error", err)
			return 1
		}
		return 0
	case <-ctx.Done():
	}
	// A second SIGTERM or SIGINT during the drain (an operator pressing
	// Ctrl-C again) ends the grace: streams get their terminal events now,
	// and the durable logs and usage totals are still written.
	defer onSignal(func() {
		logger.Warn("second signal: ending the drain grace now; streams in flight end with their terminal events")
		gw.EndDrainGrace()
	}, syscall.SIGTERM, syscall.SIGINT)()
	grace := cfg.Timeouts.DrainGrace.D()
	sctx, cancel := context.WithTimeout(context.Background(), grace+10*time.Second)
	defer cancel()
	if err := gw.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		logger.Error("drain", "error", err)
	}
	<-errc
	logger.Info("stopped")
	return 0
}

// assemble builds the gateway and everything it needs from cfg. cleanup
// releases what assemble started, in reverse order.
func assemble(ctx context.Context, cfg config.Config, logger hclog.Logger, admin map[string]http.Handler) (*gateway.Server, func(), error) {
	var closers []func()
	cleanup := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	transport := gateway.NewTransport(cfg.Timeouts.Connect.D(), cfg.Timeouts.Header.D())
	ups := make([]upstream.Config, 0, len(cfg.Upstreams))
	for _, u := range cfg.Upstreams {
		ups = append(ups, upstream.Config{Name: u.Name, BaseURL: u.BaseURL, APIKey: u.APIKey, Weight: u.Weight, Protocol: u.Protocol, Transport: u.Transport,
			ForwardHeaders: u.ForwardHeaders, Prefill: u.Prefill})
	}
	routes := make([]gateway.Route, 0, len(cfg.Routes))
	for _, r := range cfg.Routes {
		gr := gateway.Route{Models: r.Models, FirstByte: r.Timeouts.FirstByte.D(), FirstToken: r.Timeouts.FirstToken.D(),
			Stall: r.Timeouts.Stall.D(), Continuation: r.Continuation}
		for _, t := range r.Targets {
			gr.Targets = append(gr.Targets, gateway.RouteTarget{Upstream: t.Upstream, Model: t.Model})
		}
		routes = append(routes, gr)
	}
	retryMaxWait := cfg.Retry.MaxWait.D()
	if retryMaxWait == 0 {
		retryMaxWait = -1 // retry.max_wait: 0 never waits
	}
	trusted, err := gateway.ParseTrustedProxies(cfg.TrustedProxies)
	if err != nil {
		return nil, cleanup, err
	}
	stores, err := openStore(ctx, cfg, logger) // store.go: pebble or redis
	if err != nil {
		return nil, cleanup, err
	}
	closers = append(closers, stores.close)
	st, inputs := stores.st, stores.inputs
	pool, err := upstream.NewPool(ups, upstream.Options{
		Client:        &http.Client{Transport: transport, Timeout: 30 * time.Second},
		ProbeInterval: cfg.Timeouts.ProbeInterval.D(),
		Logger:        logger.Named("upstream"),
		Shared:        stores.shared, // redis: target cooldowns and open circuits hold for every replica
	})
	if err != nil {
		return nil, cleanup, err
	}
	probeCtx, stopProbes := context.WithCancel(context.WithoutCancel(ctx))
	probesDone := make(chan struct{})
	go func() { defer close(probesDone); pool.Run(probeCtx) }()
	closers = append(closers, func() { stopProbes(); <-probesDone })

	rt, err := plugins.New(ctx, plugins.Options{
		PolicyDir: cfg.PolicyDir,
		CacheDir:  cfg.WasmCacheDir,
		Embedded:  policies.Defaults(),
		// Parked at idle: their native twins (the functions the modules
		// call) answer the first failures while they compile again.
		StandIns: map[string]plugins.StandIn{
			"recover.wasm": {Recover: hostabi.EmbeddedRecover},
			"replay.wasm":  {Replay: hostabi.EmbeddedReplay},
		},
		Config:    policyConfig(cfg.PolicyConfigs()),
		Logger:    logger.Named("plugins"),
		RecordDir: cfg.RecordDir,

		CallTimeout:          cfg.PolicyLimits.CallTimeout.D(),
		MemoryLimitPages:     cfg.PolicyLimits.MemoryPages(),
		FaultsBeforeRollback: cfg.PolicyLimits.FaultsBeforeRollback,

		// The Wasm compilation cache when the user cache dir cannot be written.
		FallbackCacheDir: wasmFallbackCacheDir(cfg),
	})
	if err != nil {
		return nil, cleanup, fmt.Errorf("loading policies: %w", err)
	}
	closers = append(closers, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := rt.Close(ctx); err != nil {
			logger.Error("closing the policy runtime", "error", err)
		}
	})
	if err := checkPolicyConfig(&cfg, rt.Status(), logger); err != nil {
		return nil, cleanup, err
	}
	tp, err := tracerProvider(ctx, cfg.Tracing, logger) // tracing.go: nil without tracing.otlp_endpoint
	if err != nil {
		return nil, cleanup, err
	}
	if tp != nil {
		// The gateway owns it (Shutdown flushes it); this closer covers a
		// failed start. Shutting down twice is harmless.
		closers = append(closers, func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = tp.Shutdown(sctx)
		})
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(rt.Collectors()...)
	reg.MustRegister(storeCollectors(cfg, stores)...)

	gw, err := gateway.New(gateway.Options{
		Pool:                      pool,
		Policy:                    rt,
		FailClosedRewrites:        cfg.FailClosedRewrites(),
		Ready:                     rt.Ready,
		StoreHealth:               stores.health,
		Registry:                  reg,
		Admin:                     withAdmin(withAdmin(admin, "/admin/record", recordHandler(rt)), "/admin/policies", policyStatusHandler(rt)),
		AdminPost:                 map[string]http.Handler{"/admin/record": recordHandler(rt)},
		AdminToken:                cfg.AdminToken,
		TrustedProxies:            trusted,
		Store:                     st,
		Conversations:             convStore(st),
		AnchorTTL:                 cfg.Continuity.AnchorTTL.D(),
		Portable:                  cfg.Continuity.Portable,
		RehydrateAfter:            cfg.Continuity.RehydrateAfter.D(),
		Logger:                    logger.Named("gateway"),
		MaxBodyBytes:              cfg.Limits.MaxBodyBytes,
		MaxEventBytes:             cfg.Limits.MaxEventBytes,
		ConnectTimeout:            cfg.Timeouts.Connect.D(),
		HeaderTimeout:             cfg.Timeouts.Header.D(),
		IdleTimeout:               cfg.Timeouts.Idle.D(),
		ReadHeader:                cfg.Timeouts.ReadHeader.D(),
		DrainGrace:                cfg.Timeouts.DrainGrace.D(),
		MaxWSFrameBytes:           cfg.Limits.MaxWSFrameBytes,
		UpstreamSockets:           cfg.Limits.UpstreamSockets,
		UpstreamSocketIdle:        cfg.Timeouts.UpstreamIdle.D(),
		WSSessionMemoryBytes:      cfg.Limits.WSSessionMemoryBytes,
		WSSessionMemoryTotalBytes: cfg.Limits.WSSessionMemoryTotalBytes,
		ClientWriteTimeout:        cfg.Timeouts.ClientWrite.D(),
		MaxJSONDepth:              cfg.Limits.MaxJSONDepth,
		BodyMemoryBytes:           cfg.Limits.BodyMemoryBytes,
		ReadBodyTimeout:           cfg.Timeouts.ReadBody.D(),
		MaxConnections:            cfg.Limits.MaxConnections,
		WSIdleTimeout:             cfg.Timeouts.WSIdle.D(),
		MetricsPublic:             cfg.MetricsPublic,
		Routes:                    routes,
		RetryMaxWait:              retryMaxWait,
		KeepAlive:                 cfg.Timeouts.KeepAlive.D(),
		MalformedEvents:           cfg.Streams.MalformedEvents,
		Resume:                    resumeOptions(cfg, st),
		Transport:                 transport,
		Accounts:                  accountsOptions(cfg, st),
		TracerProvider:            tracerOption(tp),
	})
	if err != nil {
		return nil, cleanup, err
	}

	// Every assembled request, Mode A's too, is dispatched through the
	// gate (gw.Handler, taken before Mode A wraps the router): it runs on
	// the session's context, so the gate finds its key again from the
	// credential headers the session kept, and the key's models, limits
	// and usage apply to it as to any request of that key.
	sim, err := streaminput.New(ctx, streaminput.Options{
		Store: inputs, Dispatch: gw.Handler(), Logger: logger.Named("streaminput"), Registerer: reg,
		MaxSessionBytes: cfg.Limits.MaxBodyBytes / 4 * 3, // byte chunks travel base64 in the assembled body
		MaxRequestBytes: cfg.Limits.MaxBodyBytes,         // the assembled body, template and all, must pass the gateway's limit
		ModelAllowed:    gw.ModelAllowed,
		MaxJSONDepth:    cfg.Limits.MaxJSONDepth,
		ReadTimeout:     cfg.Timeouts.ReadBody.D(),
		KeepAlive:       cfg.Timeouts.KeepAlive.D(),
		MaxSessions:     cfg.Limits.InputSessions,
		MaxTotalBytes:   cfg.Limits.InputSessionBytes,
		Trace:           gw.TraceStreamingInput, // its calls' spans; nothing without tracing
	})
	if err != nil {
		return nil, cleanup, fmt.Errorf("streaming input: %w", err)
	}
	closers = append(closers, func() { // before the store's closer runs
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := sim.Close(cctx); err != nil {
			logger.Error("closing streaming-input sessions", "error", err)
		}
	})
	for _, rt := range sim.Routes() {
		gw.Handle(rt.Method, rt.Path, rt.Handler)
	}
	gw.Wrap(sim.ModeA)
	gw.OnDrain(sim.Drain)
	sim.Start()
	return gw, cleanup, nil
}

// convStore is the conversation side of the continuity store, when it has one.
// resumeOptions: streams.* (README "Resuming a stream").
func resumeOptions(cfg config.Config, st store.Store) gateway.ResumeOptions {
	o := gateway.ResumeOptions{Window: cfg.Streams.ResumeWindow.D(), MaxBytes: cfg.Streams.ResumeMaxBytes,
		MemoryBytes: cfg.Streams.ResumeMemoryBytes}
	if o.Window == 0 {
		o.Window = -1 // resume_window: 0 turns resume off
	}
	if cfg.Streams.DetachOnDisconnect == nil || *cfg.Streams.DetachOnDisconnect {
		o.DetachGrace = cfg.Streams.DetachGrace.D()
	}
	if sl, ok := st.(store.StreamLogStore); ok && cfg.Streams.Durable {
		o.Store = sl
	}
	return o
}

func convStore(st store.Store) store.ConversationStore {
	if cs, ok := st.(store.ConversationStore); ok {
		return cs
	}
	return nil
}

// policyConfig renders each policy's YAML config as the JSON the config host
// function hands to the guest. config.Validate has refused what JSON cannot
// hold, so nothing is skipped here in practice.
func policyConfig(in map[string]any) map[string]json.RawMessage {
	out := make(map[string]json.RawMessage, len(in))
	for name, v := range in {
		b, err := json.Marshal(v)
		if err == nil {
			out[name] = b
		}
	}
	return out
}

// checkPolicyConfig holds the policies: section to the policies loaded at
// start. A configured policy that refused its config there (its own load
// code, the self-test most often, failed with it) and that nothing else
// serves is a config error, as a bad key elsewhere is: starting without it
// would silently drop what the config asked for. A file that could not load
// at all (not Wasm, a wrong ABI version) is the file's problem, not the
// config's: it is rejected and reported as at run time (ABI.md §10), and
// the embedded default of its name, if any, serves. A
// config for a name no policy has is logged: policy_dir may get that file
// later, but more often the name is misspelled. A policy held to its
// rewrites (failClosed) that serves no rewrite hook is a config error too:
// the gateway would refuse every request for want of its rewrite. Its
// problems are reported as the file's are, at the line of policies.NAME:
// only the policy judges its config, so they come once the rest of the file
// is right (README "Running it").
func checkPolicyConfig(cfg *config.Config, loaded []plugins.PolicyStatus, logger hclog.Logger) error {
	configured, failClosed := cfg.Policies, cfg.FailClosedRewrites()
	byName := make(map[string]plugins.PolicyStatus, len(loaded))
	names := make([]string, 0, len(loaded))
	for _, st := range loaded {
		byName[st.Name] = st
		names = append(names, st.Name)
	}
	var problems []config.Problem
	for _, name := range slices.Sorted(maps.Keys(configured)) {
		st, ok := byName[name]
		var failClosedProblem string
		if slices.Contains(failClosed, name) && st.SHA256 != "" {
			// Only a version that serves can lack the rewrite hook; with
			// none serving (its file rejected), requests are refused with
			// 503 and /readyz says so (README "Policies").
			failClosedProblem = st.FailClosedProblem()
		}
		switch {
		case !ok:
			logger.Warn("a policy config names no loaded policy; it waits for a policy_dir file of that name",
				"key", "policies."+name, "loaded", strings.Join(names, ", "))
		case st.ConfigRefusal != "":
			problems = append(problems, config.Problem{Key: "policies." + name, Msg: "the policy refused its config: " + st.ConfigRefusal})
		case failClosedProblem != "":
			problems = append(problems, config.Problem{Key: "policies." + name + "." + config.FailClosedKey, Msg: failClosedProblem})
		}
	}
	return cfg.Refuse(problems...)
}

// policyStatusHandler serves GET /admin/policies.
func policyStatusHandler(rt *plugins.Runtime) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"policies": rt.Status()})
	})
}

func withAdmin(extra map[string]http.Handler, path string, h http.Handler) map[string]http.Handler {
	out := map[string]http.Handler{path: h}
	for k, v := range extra {
		out[k] = v
	}
	return out
}

// recordHandler serves GET /admin/record (the recording state) and POST
// /admin/record?on=true|false (start or stop recording hook calls to
// record_dir).
func recordHandler(rt *plugins.Runtime) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			on, err := strconv.ParseBool(r.URL.Query().Get("on"))
			if err != nil {
				apierr.Invalid("on", apierr.CodeInvalidValue, "on must be true or false").Write(w)
				return
			}
			if err := rt.SetRecording(on); err != nil {
				(&apierr.Error{Status: http.StatusConflict, Type: apierr.TypeInvalidRequest, Code: apierr.CodeInvalidValue, Param: "on",
					Message: "recording needs record_dir in the config"}).Write(w)
				return
			}
		}
		dir, on := rt.Recording()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"record_dir": dir, "recording": on})
	})
}

// upstreamNames lists the upstreams' names, quoted, for a message.
func upstreamNames(ups []config.Upstream) string {
	names := make([]string, len(ups))
	for i, u := range ups {
		names[i] = strconv.Quote(u.Name)
	}
	return strings.Join(names, ", ")
}
