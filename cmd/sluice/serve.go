package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/config"
	"github.com/sluice-gw/sluice/gateway/streaminput"
	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/plugins"
	"github.com/sluice-gw/sluice/policies"
	"github.com/sluice-gw/sluice/store"
)

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "YAML config file")
	listen := fs.String("listen", "", "listen address (overrides listen:)")
	dataDir := fs.String("data-dir", "", "state directory (overrides data_dir:)")
	policyDir := fs.String("policy-dir", "", "watched policy directory (overrides policy_dir:)")
	wasmCache := fs.String("wasm-cache-dir", "", "Wasm compilation cache (overrides wasm_cache_dir:)")
	logJSON := fs.Bool("log-json", false, "log JSON lines instead of text")
	logLevel := fs.String("log-level", "", "trace, debug, info, warn or error (overrides log.level:)")
	var upstreams stringList
	fs.Var(&upstreams, "upstream", "upstream base URL, e.g. https://api.openai.com/v1 (repeatable; replaces upstreams:)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg := config.Defaults()
	if *configPath != "" {
		var err error
		if cfg, err = config.Load(*configPath); err != nil {
			fmt.Fprintf(stderr, "sluice: %v\n", err)
			return 1
		}
	}
	if len(upstreams) > 0 {
		cfg.Upstreams = nil
		for i, raw := range upstreams {
			u, err := config.UpstreamFromURL(raw, i)
			if err != nil {
				fmt.Fprintf(stderr, "sluice: %v\n", err)
				return 2
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
	if *logJSON {
		cfg.Log.JSON = true
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "sluice: config: %v\n", err)
		return 1
	}
	if len(cfg.Upstreams) == 0 {
		fmt.Fprintln(stderr, "sluice: config: upstreams: at least one upstream is required (or pass --upstream URL)")
		return 1
	}
	logger := newLogger(cfg.Log, stderr)
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		logger.Error("cannot listen", "addr", cfg.Listen, "error", err)
		return 1
	}
	return serve(ctx, cfg, ln, logger, stdout)
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
	gw, cleanup, err := assemble(ctx, cfg, logger, admin)
	defer cleanup() // also on failure: stops what assemble had started
	if err != nil {
		logger.Error("startup failed", "error", err)
		_ = ln.Close()
		return 1
	}

	errc := make(chan error, 1)
	go func() { errc <- gw.Serve(ln) }()
	logger.Info("listening", "addr", ln.Addr().String(), "upstreams", len(cfg.Upstreams))
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
		ups = append(ups, upstream.Config{Name: u.Name, BaseURL: u.BaseURL, APIKey: u.APIKey, Weight: u.Weight, Protocol: u.Protocol, Transport: u.Transport})
	}
	pool, err := upstream.NewPool(ups, upstream.Options{
		Client:        &http.Client{Transport: transport, Timeout: 30 * time.Second},
		ProbeInterval: cfg.Timeouts.ProbeInterval.D(),
		Logger:        logger.Named("upstream"),
	})
	if err != nil {
		return nil, cleanup, err
	}
	probeCtx, stopProbes := context.WithCancel(context.WithoutCancel(ctx))
	probesDone := make(chan struct{})
	go func() { defer close(probesDone); pool.Run(probeCtx) }()
	closers = append(closers, func() { stopProbes(); <-probesDone })

	var st store.Store
	var inputs store.InputSessionStore // nil: streaming-input sessions in memory only
	if !cfg.Continuity.Disabled {
		ps, err := store.Open(ctx, store.Options{Dir: filepath.Join(cfg.DataDir, "store"), AnchorTTL: cfg.Continuity.AnchorTTL.D(), Logger: logger.Named("store")})
		if err != nil {
			return nil, cleanup, fmt.Errorf("opening the continuity store in %s: %w", cfg.DataDir, err)
		}
		closers = append(closers, func() {
			if err := ps.Close(); err != nil {
				logger.Error("closing the store", "error", err)
			}
		})
		st, inputs = ps, ps
	}

	rt, err := plugins.New(ctx, plugins.Options{
		PolicyDir: cfg.PolicyDir,
		CacheDir:  cfg.WasmCacheDir,
		Embedded:  policies.Defaults(),
		Config:    policyConfig(cfg.Policies),
		Logger:    logger.Named("plugins"),
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
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(rt.Collectors()...)

	gw, err := gateway.New(gateway.Options{
		Pool:               pool,
		Policy:             rt,
		Ready:              rt.Ready,
		Registry:           reg,
		Admin:              withAdmin(admin, "/admin/policies", policyStatusHandler(rt)),
		AdminToken:         cfg.AdminToken,
		Store:              st,
		Conversations:      convStore(st),
		AnchorTTL:          cfg.Continuity.AnchorTTL.D(),
		Logger:             logger.Named("gateway"),
		MaxBodyBytes:       cfg.Limits.MaxBodyBytes,
		MaxEventBytes:      cfg.Limits.MaxEventBytes,
		ConnectTimeout:     cfg.Timeouts.Connect.D(),
		HeaderTimeout:      cfg.Timeouts.Header.D(),
		IdleTimeout:        cfg.Timeouts.Idle.D(),
		ReadHeader:         cfg.Timeouts.ReadHeader.D(),
		DrainGrace:         cfg.Timeouts.DrainGrace.D(),
		MaxWSFrameBytes:    cfg.Limits.MaxWSFrameBytes,
		UpstreamSockets:    cfg.Limits.UpstreamSockets,
		UpstreamSocketIdle: cfg.Timeouts.UpstreamIdle.D(),
		ClientWriteTimeout: cfg.Timeouts.ClientWrite.D(),
		Transport:          transport,
	})
	if err != nil {
		return nil, cleanup, err
	}

	sim, err := streaminput.New(ctx, streaminput.Options{
		Store: inputs, Dispatch: gw.Handler(), Logger: logger.Named("streaminput"), Registerer: reg,
		MaxSessionBytes: cfg.Limits.MaxBodyBytes / 4 * 3, // byte chunks travel base64 in the assembled body
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
func convStore(st store.Store) store.ConversationStore {
	if cs, ok := st.(store.ConversationStore); ok {
		return cs
	}
	return nil
}

// policyConfig renders each policy's YAML config as the JSON the config host
// function hands to the guest.
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
