// Command e2e-upstream serves the in-repo fake upstream (internal/upstreamtest)
// for the end-to-end scripts, strict: a request for a model it does not list
// is a 404 model_not_found, and a previous_response_id it did not create is
// previous_response_not_found. So a client that gets its answers through
// Sluice proves that Sluice forwarded the model and the chain as they must be.
//
// It prints "upstream on <base URL>" once listening, serves what it received
// at GET /e2e/requests (JSON), and stops on SIGINT or SIGTERM.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

func main() {
	name := flag.String("name", "e2e", "the upstream's `NAME` (its answers say \"Hello from NAME\")")
	models := flag.String("models", "gpt-fake-1", "comma-separated `MODELS` it serves; any other is a 404")
	listen := flag.String("listen", "127.0.0.1:0", "listen on `ADDR`")
	flag.Parse()

	fake := upstreamtest.NewHandler(upstreamtest.Options{Name: *name, Models: strings.Split(*models, ","),
		StrictModels: true, StrictPrevious: true, PreviousShape: upstreamtest.ShapeErrorEvent})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /e2e/requests", func(w http.ResponseWriter, _ *http.Request) {
		type seen struct {
			Path               string          `json:"path"`
			WebSocket          bool            `json:"websocket"`
			Model              string          `json:"model"`
			PreviousResponseID string          `json:"previous_response_id"`
			ResponseID         string          `json:"response_id"` // "" when refused (unknown model or previous id)
			Body               json.RawMessage `json:"body"`
		}
		out := []seen{}
		for _, r := range fake.Requests() {
			body := json.RawMessage(r.Body)
			if !json.Valid(body) {
				body, _ = json.Marshal(string(r.Body))
			}
			out = append(out, seen{Path: r.Path, WebSocket: r.WebSocket, Model: r.Model, PreviousResponseID: r.PreviousResponseID,
				ResponseID: r.ResponseID, Body: body})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"requests": out})
	})
	mux.Handle("/", fake)

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e-upstream:", err)
		os.Exit(1)
	}
	srv := &http.Server{Handler: mux}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		fake.Close() // unblocks hanging handlers and closes WebSockets
		_ = srv.Close()
	}()
	fmt.Printf("upstream on http://%s/v1\n", ln.Addr())
	if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
		fmt.Fprintln(os.Stderr, "e2e-upstream:", err)
		os.Exit(1)
	}
}
