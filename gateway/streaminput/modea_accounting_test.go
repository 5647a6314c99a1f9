package streaminput_test

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/gateway/streaminput"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// accessLines are the gateway's access-log lines so far.
func (e *env) accessLines() []string {
	var out []string
	for _, l := range strings.Split(e.logs.String(), "\n") {
		if strings.Contains(l, "gateway.access: request") {
			out = append(out, l)
		}
	}
	return out
}

// gatewayMetric sums the gateway's samples of the metric name whose labels
// include every pair of want (a counter's value; 0 when there is none).
func gatewayMetric(t testing.TB, e *env, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := e.gw.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if got[k] != v {
					continue metrics
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// TestModeABadLineAfterTheAnswerBeganFailsItAtOnce: a Mode A line refused
// after the answer began (a chunk after end_of_input, a line that is not
// JSON) fails the request there and then (README "Mode A"), even where the
// gateway keeps a stream running after its client went away
// (detach_grace): the upstream request is cancelled, the client's stream
// ends with a response.failed carrying the session's error, and the
// request is logged and counted as failed, not completed.
func TestModeABadLineAfterTheAnswerBeganFailsItAtOnce(t *testing.T) {
	for _, c := range []struct{ name, line, code string }{
		{"after end_of_input", `{"payload":"late"}`, streaminput.CodeSessionFinished},
		{"not JSON", `{"payload":`, "invalid_json"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, envConfig{gated: true, resume: gateway.ResumeOptions{DetachGrace: time.Hour}})
			// Runs first: releases an upstream request left hanging, which
			// the env's shutdown would wait for.
			t.Cleanup(e.up.Close)
			e.up.Enqueue(upstreamtest.HangAfter(5)) // created, in_progress, item, part, "Hello"; then silent
			pw, respc := e.modeARequest(streaminput.EndpointResponses)
			defer pw.Close()
			writeLine(t, pw, `{"template":`+respTemplate+`,"start_policy":"on_first_chunk"}`)
			writeLine(t, pw, `{"payload":"a","end_of_input":true}`)
			resp := <-respc
			if resp == nil {
				t.FailNow()
			}
			defer resp.Body.Close()
			r := sse.NewReader(resp.Body, 1<<20)
			var evs []sse.Event
			for len(evs) == 0 || eventType(evs[len(evs)-1]) != "response.output_text.delta" {
				ev, err := r.Next()
				if err != nil {
					t.Fatalf("reading the answer: %v (after %v)", err, eventTypes(evs))
				}
				evs = append(evs, ev.Clone())
			}
			eventually(t, 10*time.Second, "upstream request in flight", func() bool { return e.upIn.Load() == 1 })

			writeLine(t, pw, c.line)
			eventually(t, 10*time.Second, "the upstream request is cancelled", func() bool { return e.upIn.Load() == 0 })
			for {
				ev, err := r.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("reading the answer: %v (after %v)", err, eventTypes(evs))
				}
				evs = append(evs, ev.Clone())
			}
			last := evs[len(evs)-1]
			if eventType(last) != "response.failed" || failureCode(last) != c.code {
				t.Fatalf("events %v, last %s; want response.failed with %s", eventTypes(evs), last.Data, c.code)
			}

			var line string
			eventually(t, 10*time.Second, "the request's access line", func() bool {
				lines := e.accessLines()
				if len(lines) > 0 {
					line = lines[len(lines)-1]
				}
				return len(lines) > 0
			})
			for _, want := range []string{"surface=responses_stream", "status=200", "code=" + c.code, "reason=gateway_error"} {
				if !strings.Contains(line, want) {
					t.Errorf("access line lacks %s: %s", want, line)
				}
			}
			stream := map[string]string{"surface": "responses_stream"}
			if n := gatewayMetric(t, e, "sluice_stream_terminal_total", map[string]string{"surface": "responses_stream", "reason": "gateway_error"}); n != 1 ||
				gatewayMetric(t, e, "sluice_stream_terminal_total", stream) != 1 {
				t.Errorf("sluice_stream_terminal_total: %v gateway_error of %v, want the one request as gateway_error",
					n, gatewayMetric(t, e, "sluice_stream_terminal_total", stream))
			}
		})
	}
}

var requestIDField = regexp.MustCompile(`request_id=(\S+)`)

// TestModeARequestIsCountedAndLoggedOnce: a Mode A request, mounted as
// cmd/sluice mounts it, is one client request: one sluice_requests_total
// count and one access line (README "Observability"), with the surface,
// model and targets of the request it assembled and the x-request-id its
// client got; one refused before anything was dispatched is counted and
// logged once too.
func TestModeARequestIsCountedAndLoggedOnce(t *testing.T) {
	e := newEnv(t, envConfig{gated: true})
	// The upstream fails: the answer is the gateway's own, with the
	// gateway's x-request-id (one relayed from an upstream keeps the
	// upstream's).
	for range 4 {
		e.up.Enqueue(upstreamtest.Status5xx(http.StatusInternalServerError))
	}
	pw, respc := e.modeARequest(streaminput.EndpointChat)
	writeLine(t, pw, `{"template":{"model":"gpt-fake-1","stream":true,"messages":[{"role":"user","content":"Q: "}]}}`)
	writeLine(t, pw, `{"payload":"x"}`)
	pw.Close()
	resp := <-respc
	if resp == nil {
		t.FailNow()
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 5 {
		t.Fatalf("Mode A: %d %s, want the gateway's 5xx", resp.StatusCode, b)
	}
	requestID := resp.Header.Get("X-Request-Id")

	// Refused on its header line: never dispatched.
	pw, respc = e.modeARequest(streaminput.EndpointChat)
	writeLine(t, pw, `{"template":`)
	pw.Close()
	resp = <-respc
	if resp == nil {
		t.FailNow()
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("bad header line: %d", resp.StatusCode)
	}

	eventually(t, 10*time.Second, "two access lines", func() bool { return len(e.accessLines()) >= 2 })
	lines := e.accessLines()
	var answered []string
	for _, l := range lines {
		if !strings.Contains(l, "status=400") {
			answered = append(answered, l)
		}
	}
	if len(lines) != 2 || len(answered) != 1 {
		t.Fatalf("want one access line per request, got:\n%s", strings.Join(lines, "\n"))
	}
	for _, want := range []string{"surface=chat_stream", "A/gpt-fake-1", "model=gpt-fake-1", "request_id=" + requestID} {
		if !strings.Contains(answered[0], want) {
			t.Errorf("access line lacks %s: %s", want, answered[0])
		}
	}
	if m := requestIDField.FindStringSubmatch(answered[0]); requestID == "" || m == nil || m[1] != requestID {
		t.Errorf("the client got x-request-id %q; its access line: %s", requestID, answered[0])
	}
	if n := gatewayMetric(t, e, "sluice_requests_total", map[string]string{"surface": "chat_stream"}); n != 1 {
		t.Errorf("sluice_requests_total{surface=chat_stream} = %v, want 1", n)
	}
	if n := gatewayMetric(t, e, "sluice_requests_total", nil); n != 2 {
		t.Errorf("sluice_requests_total counts %v requests, want 2", n)
	}
}
