package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// routeOutcome is what a client saw of one request.
type routeOutcome struct {
	text   string // the output text deltas
	model  string // response.model of the terminal event, or the chunks' model
	status int    // an error's HTTP (or WebSocket error frame) status; 0 when served
	code   string // an error's code
}

// routeSurface sends one request for model the way a client of that
// surface does.
type routeSurface struct {
	name string
	do   func(t *testing.T, h *harness, model string) routeOutcome
}

var routeSurfaces = []routeSurface{
	{"responses_sse", func(t *testing.T, h *harness, model string) routeOutcome {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cl := h.client()
		stream := cl.Responses.NewStreaming(ctx, responses.ResponseNewParams{
			Model: model, Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
		})
		var o routeOutcome
		for stream.Next() {
			switch ev := stream.Current(); ev.Type {
			case "response.output_text.delta":
				o.text += ev.Delta
			case "response.completed":
				o.model = string(ev.Response.Model)
			case "response.failed":
				o.status, o.code = -1, string(ev.Response.Error.Code)
			}
		}
		if err := stream.Err(); err != nil {
			var ae *openai.Error
			if !errors.As(err, &ae) {
				t.Fatalf("stream: %v", err)
			}
			o.status, o.code = ae.StatusCode, ae.Code
		}
		return o
	}},
	{"responses_websocket", func(t *testing.T, h *harness, model string) routeOutcome {
		c := h.dialWS(nil)
		defer c.conn.CloseNow()
		var o routeOutcome
		for _, ev := range c.turn(`{"type":"response.create","model":"` + model + `","input":"hi"}`) {
			var v struct {
				Delta    string
				Response struct{ Model string }
			}
			_ = json.Unmarshal(ev.data, &v)
			switch ev.typ {
			case "response.output_text.delta":
				o.text += v.Delta
			case "response.completed":
				o.model = v.Response.Model
			case "response.failed":
				o.status, o.code = -1, ev.code
			case "error":
				o.status, o.code = errorStatus(ev), ev.code
			}
		}
		return o
	}},
	{"chat_sse", func(t *testing.T, h *harness, model string) routeOutcome {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cl := h.client()
		stream := cl.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		})
		var o routeOutcome
		for stream.Next() {
			c := stream.Current()
			if c.Model != "" {
				o.model = c.Model
			}
			if len(c.Choices) > 0 {
				o.text += c.Choices[0].Delta.Content
			}
		}
		if err := stream.Err(); err != nil {
			var ae *openai.Error
			if !errors.As(err, &ae) {
				t.Fatalf("stream: %v", err)
			}
			o.status, o.code = ae.StatusCode, ae.Code
		}
		return o
	}},
}

const routeTimeout = time.Second

// routeHarness is primary P and backup B behind two routes: "fast" and
// "gpt-5*" try P with the client's model, then B with gpt-4.1; "same" tries
// P then B, both with the client's model.
func routeHarness(t *testing.T, pool upstream.Options) *harness {
	t.Helper()
	return newHarness(t, harnessConfig{
		upstreams: []upstreamtest.Options{{Name: "P"}, {Name: "B"}},
		pool:      pool,
		opts: gateway.Options{Routes: []gateway.Route{
			{Models: []string{"fast", "gpt-5*"}, Targets: []gateway.RouteTarget{{Upstream: "P"}, {Upstream: "B", Model: "gpt-4.1"}},
				FirstByte: routeTimeout, FirstToken: routeTimeout},
			{Models: []string{"same"}, Targets: []gateway.RouteTarget{{Upstream: "P"}, {Upstream: "B"}},
				FirstByte: routeTimeout, FirstToken: routeTimeout},
		}},
	})
}

func contextLengthError() []byte {
	return upstreamtest.ErrorBody("This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.",
		"invalid_request_error", "context_length_exceeded", "messages")
}

func contentFilterError() []byte {
	return upstreamtest.ErrorBody("Your request was rejected as a result of our safety system.", "invalid_request_error", "content_filter", "prompt")
}

// TestRouteFailureTable drives each row of the before-content failure table
// through every client surface: which targets are called how often, who
// serves, and what the client sees.
func TestRouteFailureTable(t *testing.T) {
	rows := []struct {
		name     string
		model    string
		p        []upstreamtest.Script // P's queue
		servedBy string                // "P" or "B"; "" → the error reaches the client
		status   int                   // when servedBy == ""
		code     string
		pCalls   int
		bCalls   int
		minTime  time.Duration
		maxTime  time.Duration
		after    func(t *testing.T, h *harness, s routeSurface)
	}{
		{name: "429 Retry-After 1s: wait, same target again", model: "fast", p: []upstreamtest.Script{upstreamtest.Status429(time.Second)},
			servedBy: "P", pCalls: 2, minTime: time.Second},
		{name: "429 Retry-After 30s: next target, the first cools down", model: "fast", p: []upstreamtest.Script{upstreamtest.Status429(30 * time.Second)},
			servedBy: "B", pCalls: 1, bCalls: 1, after: func(t *testing.T, h *harness, s routeSurface) {
				o := s.do(t, h, "fast")
				if o.text != "Hello from B" || h.ups["P"].RequestCount() != 1 {
					t.Fatalf("next request: %+v, P called %d times; want B and P left alone", o, h.ups["P"].RequestCount())
				}
			}},
		{name: "500 twice: one retry on the same target, then the next", model: "fast",
			p: []upstreamtest.Script{upstreamtest.Status5xx(500), upstreamtest.Status5xx(500)}, servedBy: "B", pCalls: 2, bCalls: 1},
		{name: "502 once: the retry serves", model: "fast", p: []upstreamtest.Script{upstreamtest.Status5xx(502)}, servedBy: "P", pCalls: 2},
		{name: "503: next target at once", model: "fast", p: []upstreamtest.Script{upstreamtest.Status5xx(503)}, servedBy: "B", pCalls: 1, bCalls: 1,
			maxTime: 2 * time.Second},
		{name: "overloaded code on a 500: next target at once", model: "fast",
			p:        []upstreamtest.Script{upstreamtest.Failure(upstreamtest.ShapeStatus, 500, upstreamtest.ErrorBody("Overloaded", "server_error", "server_is_overloaded", ""))},
			servedBy: "B", pCalls: 1, bCalls: 1},
		{name: "first_byte timeout: next target, no retry", model: "fast", p: []upstreamtest.Script{{Latency: 10 * time.Second}},
			servedBy: "B", pCalls: 1, bCalls: 1, minTime: routeTimeout, maxTime: 5 * time.Second},
		{name: "first_token timeout: next target, no retry", model: "gpt-5-mini", p: []upstreamtest.Script{upstreamtest.HangAfter(0)},
			servedBy: "B", pCalls: 1, bCalls: 1, minTime: routeTimeout, maxTime: 5 * time.Second},
		{name: "context_length_exceeded: next target with another model", model: "fast",
			p: []upstreamtest.Script{upstreamtest.Failure(upstreamtest.ShapeStatus, 400, contextLengthError())}, servedBy: "B", pCalls: 1, bCalls: 1},
		{name: "context_length_exceeded: never the same model again", model: "same",
			p:      []upstreamtest.Script{upstreamtest.Failure(upstreamtest.ShapeStatus, 400, contextLengthError())},
			status: 400, code: "context_length_exceeded", pCalls: 1},
		{name: "content filter: passed through, no second call", model: "fast",
			p:      []upstreamtest.Script{upstreamtest.Failure(upstreamtest.ShapeStatus, 400, contentFilterError())},
			status: 400, code: "content_filter", pCalls: 1, after: func(t *testing.T, h *harness, s routeSurface) {
				if s.name != "responses_sse" {
					return
				}
				// Byte for byte, as the upstream said it.
				h.ups["P"].Enqueue(upstreamtest.Failure(upstreamtest.ShapeStatus, 400, contentFilterError()))
				resp := h.post("/v1/responses", `{"model":"fast","input":"hi","stream":true}`)
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 400 || string(body) != string(contentFilterError()) || h.ups["B"].RequestCount() != 0 {
					t.Fatalf("raw pass-through: %d %s (B called %d times)", resp.StatusCode, body, h.ups["B"].RequestCount())
				}
			}},
	}
	for _, s := range routeSurfaces {
		for _, row := range rows {
			t.Run(s.name+"/"+row.name, func(t *testing.T) {
				h := routeHarness(t, upstream.Options{})
				h.ups["P"].Enqueue(row.p...)
				start := time.Now()
				o := s.do(t, h, row.model)
				took := time.Since(start)
				p, b := h.ups["P"].RequestCount(), h.ups["B"].RequestCount()
				if p != row.pCalls || b != row.bCalls {
					t.Fatalf("P called %d times, B %d; want %d, %d (client saw %+v)", p, b, row.pCalls, row.bCalls, o)
				}
				switch row.servedBy {
				case "":
					if o.status != row.status || o.code != row.code {
						t.Fatalf("client saw %+v; want status %d code %q", o, row.status, row.code)
					}
				default:
					// The client sees the served model, never the alias.
					wantModel := row.model
					if row.servedBy == "B" {
						wantModel = "gpt-4.1"
						if got := h.ups["B"].Requests()[0].Model; got != "gpt-4.1" {
							t.Fatalf("B was asked for %q, want gpt-4.1", got)
						}
					}
					if o.status != 0 || o.text != "Hello from "+row.servedBy || o.model != wantModel {
						t.Fatalf("client saw %+v; want %q served by %s as %s", o, o.text, row.servedBy, wantModel)
					}
				}
				for _, r := range h.ups["P"].Requests() {
					if r.Model != row.model {
						t.Fatalf("P was asked for %q, want the client's %q", r.Model, row.model)
					}
				}
				if took < row.minTime || (row.maxTime > 0 && took > row.maxTime) {
					t.Fatalf("took %v; want between %v and %v", took, row.minTime, row.maxTime)
				}
				if row.after != nil {
					row.after(t, h, s)
				}
			})
		}
	}
}

type adminTarget struct {
	Upstream    string
	Model       string
	Circuit     string
	Failures    int    `json:"consecutive_failures"`
	CoolingFor  string `json:"cooling_for"`
	OpenFor     string `json:"open_for"`
	LastFailure string `json:"last_failure"`
	Configured  bool
	Shared      bool // the skip shown was learnt from another replica
}

func (h *harness) target(upstreamName, model string) (adminTarget, bool) {
	h.t.Helper()
	var st struct {
		Upstreams []struct {
			Name    string
			Targets []adminTarget
		}
	}
	h.getJSON("/admin/upstreams", &st)
	for _, u := range st.Upstreams {
		for _, tg := range u.Targets {
			if u.Name == upstreamName && tg.Model == model {
				return tg, true
			}
		}
	}
	return adminTarget{}, false
}

// served posts a non-streaming request and returns who answered.
func (h *harness) served(model string) string {
	h.t.Helper()
	resp := h.post("/v1/responses", `{"model":"`+model+`","input":"hi"}`)
	defer resp.Body.Close()
	var v struct {
		Output []struct {
			Content []struct{ Text string }
		}
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || json.Unmarshal(body, &v) != nil || len(v.Output) == 0 || len(v.Output[0].Content) == 0 {
		h.t.Fatalf("%d %s", resp.StatusCode, body)
	}
	return strings.TrimPrefix(v.Output[0].Content[0].Text, "Hello from ")
}

// TestRouteTargetCircuit: a flapping target opens after three failures
// (requests skip it without calling it), is half-open after the open
// period (exactly one probe reaches it), and closes when the probe succeeds.
func TestRouteTargetCircuit(t *testing.T) {
	const openFor = 600 * time.Millisecond
	h := newHarness(t, harnessConfig{
		upstreams: []upstreamtest.Options{{Name: "P"}, {Name: "B"}},
		pool:      upstream.Options{CircuitOpenFor: openFor},
		opts: gateway.Options{Routes: []gateway.Route{
			{Models: []string{"fast"}, Targets: []gateway.RouteTarget{{Upstream: "P"}, {Upstream: "B", Model: "gpt-4.1"}}},
		}},
	})
	h.ups["P"].Enqueue(upstreamtest.Status5xx(503), upstreamtest.Status5xx(503), upstreamtest.Status5xx(503))
	for i := range 3 {
		if got := h.served("fast"); got != "B" {
			t.Fatalf("request %d served by %s", i, got)
		}
	}
	if tg, _ := h.target("P", "fast"); tg.Circuit != "open" || tg.Failures != 3 || !strings.Contains(tg.LastFailure, "overloaded") {
		t.Fatalf("after 3 failures: %+v", tg)
	}
	m := h.metrics()
	for _, want := range []string{`sluice_target_circuit_state{model="fast",upstream="P"} 1`, `sluice_target_circuit_state{model="gpt-4.1",upstream="B"} 0`,
		`sluice_target_failures_total{class="overloaded",model="fast",upstream="P"} 3`} {
		if !strings.Contains(m, want) {
			t.Fatalf("metrics lack %s:\n%s", want, grep(m, "sluice_target"))
		}
	}
	if got := h.served("fast"); got != "B" || h.ups["P"].RequestCount() != 3 {
		t.Fatalf("open circuit: served by %s, P called %d times", got, h.ups["P"].RequestCount())
	}

	deadline := time.Now().Add(10 * openFor)
	for tg, _ := h.target("P", "fast"); tg.Circuit != "half_open"; tg, _ = h.target("P", "fast") {
		if time.Now().After(deadline) {
			t.Fatalf("never half-open: %+v", tg)
		}
		time.Sleep(openFor / 10)
	}
	if m := h.metrics(); !strings.Contains(m, `sluice_target_circuit_state{model="fast",upstream="P"} 2`) {
		t.Fatalf("half-open not in metrics:\n%s", grep(m, "circuit_state"))
	}
	// The probe is slow: requests that arrive meanwhile go to B.
	h.ups["P"].Enqueue(upstreamtest.Script{Latency: time.Second})
	var probe string
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); probe = h.served("fast") }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.ups["P"].WaitRequests(ctx, 4); err != nil {
		t.Fatal("the probe never reached P")
	}
	for i := range 2 {
		if got := h.served("fast"); got != "B" {
			t.Fatalf("request %d during the probe served by %s", i, got)
		}
	}
	wg.Wait()
	if probe != "P" || h.ups["P"].RequestCount() != 4 {
		t.Fatalf("probe served by %s; P called %d times, want exactly one probe", probe, h.ups["P"].RequestCount())
	}
	if tg, ok := h.target("P", "fast"); !ok || tg.Circuit != "closed" || tg.Failures != 0 {
		t.Fatalf("after the probe: %+v", tg)
	}
	if got := h.served("fast"); got != "P" {
		t.Fatalf("closed circuit: served by %s", got)
	}
}

// TestRouteTargetCooldownIsPerModel: a rate-limited model cools its target
// down, not its upstream: the upstream's other models keep being served.
func TestRouteTargetCooldownIsPerModel(t *testing.T) {
	h := newHarness(t, harnessConfig{
		upstreams: []upstreamtest.Options{{Name: "P"}, {Name: "B"}},
		opts: gateway.Options{Routes: []gateway.Route{
			{Models: []string{"fast"}, Targets: []gateway.RouteTarget{{Upstream: "P"}, {Upstream: "B", Model: "gpt-4.1"}}},
			{Models: []string{"gpt-fake-1"}, Targets: []gateway.RouteTarget{{Upstream: "P"}}},
		}},
	})
	h.ups["P"].Enqueue(upstreamtest.Status429(30 * time.Second))
	if got := h.served("fast"); got != "B" {
		t.Fatalf("served by %s", got)
	}
	if tg, _ := h.target("P", "fast"); tg.CoolingFor == "" {
		t.Fatalf("P/fast not cooling: %+v", tg)
	}
	if got := h.served("gpt-fake-1"); got != "P" {
		t.Fatalf("P's other model served by %s", got)
	}
	if got := h.served("fast"); got != "B" || h.ups["P"].RequestCount() != 2 {
		t.Fatalf("cooling target called again (P: %d requests)", h.ups["P"].RequestCount())
	}
	if m := h.metrics(); !strings.Contains(m, `sluice_target_failures_total{class="rate_limited",model="fast",upstream="P"} 1`) {
		t.Fatalf("failure not counted:\n%s", grep(m, "sluice_target"))
	}
}

// TestRouteServedModel: the client sees the model that really served it —
// the upstream's own name for it — never the route's alias, on a Responses
// upstream and on a Chat upstream behind the translation.
func TestRouteServedModel(t *testing.T) {
	h := newHarness(t, harnessConfig{
		upstreams: []upstreamtest.Options{{Name: "R"}, {Name: "C"}},
		protocol:  map[string]string{"C": "chat"},
		opts: gateway.Options{Routes: []gateway.Route{
			{Models: []string{"fast"}, Targets: []gateway.RouteTarget{{Upstream: "C", Model: "qwen-real"}}},
			{Models: []string{"quick"}, Targets: []gateway.RouteTarget{{Upstream: "R", Model: "gpt-4.1"}}},
		}},
	})
	// Each upstream names a more specific model than it was asked for.
	h.ups["C"].Enqueue(upstreamtest.Script{ChatFrames: upstreamtest.ChatStream("chatcmpl-1", "qwen-real-2026", "Hi there", 2)})
	h.ups["R"].Enqueue(upstreamtest.Script{Frames: upstreamtest.ResponsesStream("resp_r", "gpt-4.1-2025-04-14", "Hi there", 2)})
	for model, want := range map[string]string{"fast": "qwen-real-2026", "quick": "gpt-4.1-2025-04-14"} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cl := h.client()
		stream := cl.Responses.NewStreaming(ctx, responses.ResponseNewParams{
			Model: model, Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
		})
		var created, completed, text string
		for stream.Next() {
			switch ev := stream.Current(); ev.Type {
			case "response.created":
				created = string(ev.Response.Model)
			case "response.completed":
				completed = string(ev.Response.Model)
			case "response.output_text.delta":
				text += ev.Delta
			}
		}
		cancel()
		if err := stream.Err(); err != nil {
			t.Fatalf("%s: %v", model, err)
		}
		if created != want || completed != want || text != "Hi there" {
			t.Fatalf("%s: created %q completed %q text %q; want %q", model, created, completed, text, want)
		}
	}
	if got := h.ups["C"].Requests()[0].Model; got != "qwen-real" {
		t.Fatalf("C was asked for %q", got)
	}
	// Non-streaming, through the Chat translation: the upstream's model.
	cl := h.client()
	resp, err := cl.Responses.New(context.Background(), responses.ResponseNewParams{
		Model: "fast", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Model != "qwen-real" { // the canned chat.completion echoes the model it was asked for
		t.Fatalf("non-stream model %q", resp.Model)
	}
}

// TestRouteModelsList: /v1/models lists the routes' plain names (owned by
// sluice), not their globs, plus the upstreams' models as they list them
// (the fake's owned_by).
func TestRouteModelsList(t *testing.T) {
	h := routeHarness(t, upstream.Options{})
	var list struct {
		Data []struct {
			ID      string
			OwnedBy string `json:"owned_by"`
		}
	}
	if code := h.getJSON("/v1/models", &list); code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	var got []string
	for _, m := range list.Data {
		got = append(got, m.ID+":"+m.OwnedBy)
	}
	if strings.Join(got, ",") != "fast:sluice,gpt-fake-1:upstreamtest,same:sluice" {
		t.Fatalf("models %v", got)
	}
}

// TestRouteAttemptsAreBounded: a route of three targets that all fail with
// 500 makes at most max(3, 3+1) = 4 attempts, and a same-target retry never
// costs a later target its turn.
func TestRouteAttemptsAreBounded(t *testing.T) {
	h := newHarness(t, harnessConfig{
		upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}, {Name: "C"}},
		opts: gateway.Options{Routes: []gateway.Route{
			{Models: []string{"*"}, Targets: []gateway.RouteTarget{{Upstream: "A"}, {Upstream: "B"}, {Upstream: "C"}}},
		}},
	})
	for _, n := range []string{"A", "B", "C"} {
		h.ups[n].SetDefault(upstreamtest.Status5xx(500))
	}
	resp := h.post("/v1/responses", `{"model":"m","input":"hi"}`)
	e := readError(t, resp)
	if resp.StatusCode != http.StatusBadGateway || deref(e.Error.Code) != "upstream_unavailable" {
		t.Fatalf("%d %+v", resp.StatusCode, e.Error)
	}
	a, b, c := h.ups["A"].RequestCount(), h.ups["B"].RequestCount(), h.ups["C"].RequestCount()
	if a != 2 || b != 1 || c != 1 {
		t.Fatalf("attempts A=%d B=%d C=%d; want 2, 1, 1 (4 in all)", a, b, c)
	}
}

// TestRouteLlamaOverflowEventMovesOn: llama.cpp's context overflow (type
// exceed_context_size_error, its code the bare 400) arriving as a Responses
// upstream's first event is context_length_exceeded for routing too, as it
// is for the client: the next target with another model serves, in a stream
// and in JSON alike.
func TestRouteLlamaOverflowEventMovesOn(t *testing.T) {
	overflow := []byte(`{"error":{"code":400,"message":"request (5000 tokens) exceeds the available context size (4096 tokens)",` +
		`"type":"exceed_context_size_error","n_prompt_tokens":5000,"n_ctx":4096}}`)
	for _, s := range routeSurfaces {
		t.Run(s.name, func(t *testing.T) {
			h := routeHarness(t, upstream.Options{})
			h.ups["P"].Enqueue(upstreamtest.Failure(upstreamtest.ShapeErrorEvent, 400, overflow))
			o := s.do(t, h, "fast")
			if o.status != 0 || o.text != "Hello from B" {
				t.Fatalf("client saw %+v; want B's answer", o)
			}
			if p, b := h.ups["P"].RequestCount(), h.ups["B"].RequestCount(); p != 1 || b != 1 {
				t.Fatalf("P called %d times, B %d; want once each", p, b)
			}
		})
	}
}
