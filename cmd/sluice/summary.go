package main

import (
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/sluice-gw/sluice/gateway/config"
)

// logSummary logs what the gateway is about to run, one INFO line per
// item: where its config, state and policies come from, where it listens,
// each upstream (its URL without credentials) and each route. No key, token
// or URL query ever appears.
func logSummary(logger hclog.Logger, configPath string, cfg config.Config, addr string) {
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
	wasmCache := "default (the user cache dir, else data_dir/wasm-cache, else memory)"
	if cfg.WasmCacheDir != "" {
		wasmCache = absPath(cfg.WasmCacheDir)
	}
	admin := "open"
	if cfg.AdminToken != "" {
		admin = "token required"
	}
	logger.Info("starting", "version", b.Version, "commit", b.Commit)
	logger.Info("config", "file", cfgFile)
	logger.Info("config", "data_dir", dataDir)
	logger.Info("config", "policy_dir", policyDir)
	logger.Info("config", "wasm_cache_dir", wasmCache)
	logger.Info("config", "listen", addr, "admin", admin)
	for _, u := range cfg.Upstreams {
		auth := "the client's"
		if u.APIKey != "" {
			auth = "api_key"
		}
		logger.Info("upstream", "name", u.Name, "url", safeURL(u.BaseURL), "protocol", or(u.Protocol, "responses"),
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

// safeURL is a URL without its userinfo and query (either may hold a key).
func safeURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable)"
	}
	u.User = nil
	if u.RawQuery != "" {
		u.RawQuery = "…"
	}
	u.Fragment = ""
	return u.String()
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
