package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/sluice-gw/sluice/gateway/config"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// runDemo serves the gateway in front of the in-repo fake upstream, with a
// temporary data dir, so a fresh machine can try Sluice with one command.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8080", "listen on `ADDR`, host:port (127.0.0.1:0 picks a free port)")
	logLevel := fs.String("log-level", "info", "log at `LEVEL`: trace, debug, info, warn or error")
	protocol := fs.String("upstream-protocol", "responses", "configure the fake upstream as `PROTOCOL`: responses, or chat\n(Chat Completions only, behind the Responses API)")
	if done, code := parseFlags(fs, args, stdout, stderr, func(w io.Writer) { commandHelp(w, demoAbout, fs, demoEnv) }); done {
		return code
	}
	fake := upstreamtest.NewServer(upstreamtest.Options{Name: "demo"})
	defer fake.Close()
	dir, err := os.MkdirTemp("", "sluice-demo-*")
	if err != nil {
		fmt.Fprintf(stderr, "sluice demo: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)

	cfg := config.Defaults()
	cfg.Listen, cfg.DataDir, cfg.Log.Level = *listen, dir, *logLevel
	cfg.Upstreams = []config.Upstream{{Name: "demo", BaseURL: fake.URL, Protocol: *protocol}}
	if err := cfg.Validate(); err != nil { // a flag value refused: a config error, as for serve (README "Running it")
		fmt.Fprintf(stderr, "sluice demo: %s\n", demoFlagProblems(err))
		return 1
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		fmt.Fprintf(stderr, "sluice demo: %v (try --listen 127.0.0.1:0)\n", err)
		return 1
	}
	addr := ln.Addr().String()
	fmt.Fprintf(stdout, "Sluice demo: fake upstream at %s, data in %s\nTry:\n\n", fake.URL, dir)
	fmt.Fprintf(stdout, "  curl -N http://%s/v1/responses -H 'Content-Type: application/json' \\\n    -d '{\"model\":\"gpt-fake-1\",\"input\":\"Say hello\",\"stream\":true}'\n\n", addr)
	fmt.Fprintf(stdout, "  curl http://%s/v1/models\n\n", addr)
	// Every command line runs as printed (README "Set-up"): a remark is a shell comment.
	fmt.Fprintf(stdout, "  curl http://%s/admin/demo/upstream-requests   # what the fake upstream received\n\nCtrl-C drains and stops.\n\n", addr)
	return serveWith(ctx, cfg, ln, newLogger(cfg.Log, stderr), stdout, map[string]http.Handler{
		"/admin/demo/upstream-requests": upstreamRequestsHandler(fake),
	})
}

// upstreamRequestsHandler shows what the demo's fake upstream received, so
// a demo user (and the Codex end-to-end script) can see what Sluice sent.
func upstreamRequestsHandler(fake *upstreamtest.Server) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		type seen struct {
			Path      string          `json:"path"`
			WebSocket bool            `json:"websocket"`
			Body      json.RawMessage `json:"body"`
		}
		var out []seen
		for _, r := range fake.Requests() {
			body := json.RawMessage(r.Body)
			if !json.Valid(body) {
				body, _ = json.Marshal(string(r.Body))
			}
			out = append(out, seen{Path: r.Path, WebSocket: r.WebSocket, Body: body})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"requests": out})
	})
}

// demoFlags are the config keys the demo's flags set: the demo has no
// config file, so a problem names the flag its user wrote.
var demoFlags = map[string]string{
	"listen":                "--listen",
	"log.level":             "--log-level",
	"upstreams[0].protocol": "--upstream-protocol",
}

// demoFlagProblems is Validate's err with each problem's key ("key: …",
// one a line) replaced by the demo flag that set it.
func demoFlagProblems(err error) string {
	lines := strings.Split(err.Error(), "\n")
	for i, line := range lines {
		if key, msg, ok := strings.Cut(line, ": "); ok && demoFlags[key] != "" {
			lines[i] = demoFlags[key] + ": " + msg
		}
	}
	return strings.Join(lines, "\n")
}
