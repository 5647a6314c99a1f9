package gateway_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// waitUsage polls /admin/usage?key=team-a until it counts n requests.
func waitUsage(t *testing.T, h *harness, n int64) usageReport {
	t.Helper()
	var rep usageReport
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		rep = usageReport{}
		if code := h.getJSON("/admin/usage?key=team-a", &rep); code != 200 {
			t.Fatalf("admin/usage: %d", code)
		}
		if rep.Total.Requests >= n || time.Now().After(deadline) {
			return rep
		}
	}
}

// TestUsageChatClientThatDidNotAskIsStillCounted: the gateway asks a Chat
// upstream for usage (stream_options.include_usage) when the client did not
// ask for it, counts the usage chunk and does not send it; a client that
// asked keeps its stream_options as sent and gets its usage chunk.
func TestUsageChatClientThatDidNotAskIsStillCounted(t *testing.T) {
	h, _ := keyedHarness(t, keyRec("team-a", teamAKey, nil, store.KeyLimits{}))
	// Asked: the client sees the usage (the reference).
	_, evs := postWithKey(t, h, `{"model":"gpt-fake-1","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`)
	var in, out int64
	for _, ev := range evs {
		if u := gjson.GetBytes(ev.Data, "usage"); u.IsObject() {
			in, out = u.Get("prompt_tokens").Int(), u.Get("completion_tokens").Int()
		}
	}
	if in == 0 || out == 0 {
		t.Fatalf("no usage chunk for a client that asked: %v", evs)
	}
	if so := gjson.GetBytes(h.ups["A"].Requests()[0].Body, "stream_options").Raw; so != `{"include_usage":true}` {
		t.Fatalf("the client's stream_options became %s", so)
	}
	// Not asked: the upstream is asked, the client sees no usage chunk.
	_, evs = postWithKey(t, h, `{"model":"gpt-fake-1","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if len(evs) == 0 || !evs[len(evs)-1].Done {
		t.Fatalf("stream does not end with [DONE]: %v", evs)
	}
	for _, ev := range evs {
		if gjson.GetBytes(ev.Data, "usage").IsObject() || (!ev.Done && len(gjson.GetBytes(ev.Data, "choices").Array()) == 0) {
			t.Fatalf("the client got a usage chunk it did not ask for: %s", ev.Data)
		}
	}
	if v := gjson.GetBytes(h.ups["A"].Requests()[1].Body, "stream_options.include_usage"); v.Type != gjson.True {
		t.Fatalf("the upstream was not asked for usage: %s", h.ups["A"].Requests()[1].Body)
	}
	// Set, but not asking (include_usage false, or null): the upstream is
	// asked all the same, its other options kept, and the client sees no
	// usage chunk; a key's token limits cannot be dodged this way.
	for i, opts := range []string{`{"include_usage":false,"include_obfuscation":false}`, `null`} {
		_, evs = postWithKey(t, h, `{"model":"gpt-fake-1","stream":true,"stream_options":`+opts+`,"messages":[{"role":"user","content":"hi"}]}`)
		for _, ev := range evs {
			if gjson.GetBytes(ev.Data, "usage").IsObject() {
				t.Fatalf("stream_options %s: the client got a usage chunk it did not ask for: %s", opts, ev.Data)
			}
		}
		sent := gjson.GetBytes(h.ups["A"].Requests()[2+i].Body, "stream_options")
		if sent.Get("include_usage").Type != gjson.True || (i == 0 && sent.Get("include_obfuscation").Type != gjson.False) {
			t.Fatalf("stream_options %s reached the upstream as %s", opts, sent.Raw)
		}
	}
	// The per-day totals hold all four requests.
	rep := waitUsage(t, h, 4)
	if rep.Total.Requests != 4 || rep.Total.InputTokens != 4*in || rep.Total.OutputTokens != 4*out {
		t.Fatalf("usage %+v, want 4 requests, %d in, %d out (every usage chunk counted)", rep.Total, 4*in, 4*out)
	}
}

// postWithKey posts a Chat stream with team-a's key and reads its events.
func postWithKey(t *testing.T, h *harness, body string) (int, []sseEvent) {
	t.Helper()
	resp, evs := postWith(t, h, "/v1/chat/completions", body, map[string]string{"Authorization": "Bearer " + teamAKey})
	out := make([]sseEvent, 0, len(evs))
	for _, ev := range evs {
		out = append(out, sseEvent{Data: ev.Data, Done: ev.Done})
	}
	return resp.StatusCode, out
}

type sseEvent struct {
	Data []byte
	Done bool
}

// TestUsageOfARescuedStreamSumsBothAttempts: a stream continued on another
// target after content is counted once, with both attempts' usage summed,
// in /admin/usage and in sluice_usage_tokens_total.
func TestUsageOfARescuedStreamSumsBothAttempts(t *testing.T) {
	st, err := store.Open(context.Background(), store.Options{Dir: t.TempDir(), SweepInterval: -1, Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	h := contHarness(t, gateway.ContinuationAuto, harnessConfig{opts: gateway.Options{Accounts: gateway.AccountsOptions{
		Keys: []store.KeyRecord{keyRec("team-a", teamAKey, nil, store.KeyLimits{})}, Usage: st}}})
	a := upstreamtest.Answer(fullAnswer, 9)
	h.ups["P"].Enqueue(a.FailAfterDeltas(3, "server_error")) // reports 8 in, 3 out in its response.failed
	h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 3))   // 8 in, 3 out
	c := openai.NewClient(option.WithBaseURL(h.url+"/v1/"), option.WithAPIKey(teamAKey), option.WithMaxRetries(0))
	s := c.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{Model: "m", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
	var text string
	var in, out int64
	for s.Next() {
		ev := s.Current()
		switch ev.Type {
		case "response.output_text.delta":
			text += ev.Delta
		case "response.completed":
			in, out = ev.Response.Usage.InputTokens, ev.Response.Usage.OutputTokens
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if text != fullAnswer || h.ups["P"].RequestCount() != 1 || h.ups["B"].RequestCount() != 1 {
		t.Fatalf("not rescued: %q, P %d, B %d", text, h.ups["P"].RequestCount(), h.ups["B"].RequestCount())
	}
	if in != 16 || out != 6 {
		t.Fatalf("the client's usage %d in %d out; want both attempts summed (16, 6)", in, out)
	}
	rep := waitUsage(t, h, 1)
	if rep.Total.Requests != 1 || rep.Total.InputTokens != 16 || rep.Total.OutputTokens != 6 {
		t.Fatalf("recorded usage %+v; want 1 request, 16 in, 6 out", rep.Total)
	}
	m := h.metrics()
	for kind, want := range map[string]int{"input": 16, "output": 6} {
		series := fmt.Sprintf(`sluice_usage_tokens_total{key="team-a",kind=%q,model="m",route="m",target="B"}`, kind)
		if !strings.Contains(m, series+fmt.Sprintf(" %d\n", want)) {
			t.Errorf("want %s %d in:\n%s", series, want, grepLines(m, "sluice_usage_tokens_total"))
		}
	}
}
