// Package upstreamtest is a scriptable fake OpenAI-compatible upstream, in the
// spirit of net/http/httptest, for the gateway's tests, `sluice demo` and the
// benchmark. It serves GET /v1/models, POST /v1/responses (JSON or SSE),
// POST /v1/chat/completions (JSON or SSE) and the Responses WebSocket mode on
// GET /v1/responses, with realistic wire shapes and every fault a real
// upstream produces. Without a script each request gets a canned answer,
// "Hello from <Name>" in three deltas, with ids "resp_<Name>_<n>".
//
//	up := upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
//	defer up.Close()
//	up.Enqueue(upstreamtest.QuotaEvent(upstreamtest.ShapeFailed), upstreamtest.CutAfter(3))
//	// point the gateway (or a client) at up.URL ("http://127.0.0.1:port/v1") …
//	_ = up.WaitRequests(ctx, 2)
//	reqs := up.Requests() // method, path, headers, body, time, assigned ResponseID
//
// Scripts are consumed one per model request (HTTP POST or WebSocket
// response.create) from a single FIFO shared by all endpoints; see Enqueue.
package upstreamtest
