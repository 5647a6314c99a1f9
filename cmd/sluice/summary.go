package main

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/sluice-gw/sluice/gateway/config"
	"github.com/sluice-gw/sluice/internal/httpx"
	"github.com/sluice-gw/sluice/plugins"
)

// logSummary logs what the gateway is about to run, one INFO line per
// item: where its config, state and policies come from, where it listens
// (ln's address as configured: 0.0.0.0 stays 0.0.0.0), each upstream (its
// URL without credentials) and each route. No key, token or URL query ever
// appears. An open admin API that anyone else can reach is a WARN.
func logSummary(logger hclog.Logger, configPath string, cfg config.Config, ln net.Addr) {
	b := currentBuild()
	cfgFile := "none (flags and built-in defaults)"
	if configPath != "" {
		cfgFile = absPath(configPath)
	}
	policyDir := "none (embedded policies only)"
	if cfg.PolicyDir != "" {
		policyDir = absPath(cfg.PolicyDir)
	}
	dataDir := absPath(cfg.DataDir)
	if cfg.Continuity.Disabled {
		dataDir += " (continuity disabled: unused)"
	}
	addr := configuredAddr(cfg.Listen, ln)
	admin := "open"
	if cfg.AdminToken != "" {
		admin = "token required"
	}
	logger.Info("starting", "version", b.Version, "commit", b.Commit)
	logger.Info("config", "file", cfgFile)
	logger.Info("config", "data_dir", dataDir)
	logger.Info("config", "policy_dir", policyDir)
	logger.Info("config", "wasm_cache_dir", wasmCacheDir(cfg))
	logger.Info("config", "listen", addr, "admin", admin)
	if exposed := adminExposure(cfg, ln); exposed != "" {
		// SECURITY.md: without a token the admin surfaces are open; with
		// Sluice keys required or a listener others reach, an open
		// POST /admin/keys undoes the keys.
		logger.Warn("the admin API is open to anyone who reaches the listen address: they can mint keys (POST /admin/keys), "+
			"revoke them, and read usage and /metrics; set admin_token: (or SLUICE_ADMIN_TOKEN) to require a token",
			"listen", addr, "because", exposed)
	}
	logger.Info("config", "tracing", tracingSummary(cfg.Tracing))
	if r := cfg.Tracing.SampleRatio; r != nil && !cfg.Tracing.Enabled() {
		// Accepted (an otlp_endpoint from an empty ${VARIABLE} is how a
		// deployment turns tracing off), but not silently: the operator
		// who set a ratio expects spans.
		logger.Warn("tracing.sample_ratio is set but tracing.otlp_endpoint is not: nothing is traced", "sample_ratio", *r)
	}
	for _, u := range cfg.Upstreams {
		auth := "the client's"
		switch {
		case u.APIKey != "":
			auth = "api_key"
		case cfg.Auth.Required:
			// README "Keys, limits and usage": a Sluice key is never
			// forwarded, so such an upstream gets no Authorization at all.
			auth = "none (auth.required: client keys are not forwarded)"
		}
		logger.Info("upstream", "name", u.Name, "url", httpx.RedactURL(u.BaseURL), "protocol", or(u.Protocol, "responses"),
			"transport", or(u.Transport, "http"), "credentials", auth)
	}
	if len(cfg.Routes) == 0 {
		logger.Info("routes", "routes", "none: every upstream serves every model")
	}
	for i, r := range cfg.Routes {
		targets := make([]string, 0, len(r.Targets))
		for _, t := range r.Targets {
			if t.Model != "" {
				targets = append(targets, t.Upstream+" (model "+t.Model+")")
			} else {
				targets = append(targets, t.Upstream)
			}
		}
		logger.Info("route", "index", i, "models", strings.Join(r.Models, ", "), "targets", strings.Join(targets, " → "))
	}
}

// configuredAddr is the listen address as the operator wrote it, with the
// port the listener got (listen: 127.0.0.1:0 picks one): the host is not
// rewritten the way the listener reports it (0.0.0.0 as [::]).
func configuredAddr(listen string, ln net.Addr) string {
	host, _, err := net.SplitHostPort(listen)
	tcp, ok := ln.(*net.TCPAddr)
	if err != nil || !ok {
		return ln.String()
	}
	return net.JoinHostPort(host, strconv.Itoa(tcp.Port))
}

// adminExposure says why an admin API without a token is open to more than
// the operator ("" when it is not, or has a token): Sluice keys are
// required, which an open POST /admin/keys undoes, or the listener is not
// on loopback.
func adminExposure(cfg config.Config, ln net.Addr) string {
	if cfg.AdminToken != "" {
		return ""
	}
	var why []string
	if cfg.Auth.Required {
		why = append(why, "auth.required is on")
	}
	if tcp, ok := ln.(*net.TCPAddr); !ok || !tcp.IP.IsLoopback() {
		why = append(why, "listen is not a loopback address")
	}
	return strings.Join(why, "; ")
}

// wasmFallbackCacheDir is the Wasm compilation cache when the user cache
// dir cannot be written (plugins.Options.FallbackCacheDir).
func wasmFallbackCacheDir(cfg config.Config) string {
	return filepath.Join(cfg.DataDir, "wasm-cache")
}

// wasmCacheDir is the directory the policy runtime will keep its
// compilation cache in (plugins.CacheDirFor, the runtime's own rule; the
// runtime, opened after this summary, warns when it falls back), or
// "memory".
func wasmCacheDir(cfg config.Config) string {
	dir, _ := plugins.CacheDirFor(plugins.Options{CacheDir: cfg.WasmCacheDir, FallbackCacheDir: wasmFallbackCacheDir(cfg)})
	if dir == "" {
		return "memory (neither the user cache dir nor data_dir/wasm-cache can be written)"
	}
	return absPath(dir)
}

func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// writableDir creates dir when missing and checks a file can be written in
// it, so an unusable data dir is reported before anything starts.
func writableDir(dir string) error {
	if dir == "" { // MkdirAll would say "mkdir : no such file or directory"
		return errors.New("it is empty")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".write-check-*")
	if err != nil {
		return err
	}
	name := f.Name()
	_ = f.Close()
	return os.Remove(name)
}
