package gateway_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// shapedStream is the canned Responses stream of text in deltas pieces,
// edit applied to each event's data (nil: none), as SSE frames whose
// event names are the data's types unless name says otherwise.
func shapedStream(t *testing.T, text string, deltas int, edit func(i int, data []byte) []byte, name func(typ string) string) []upstreamtest.Frame {
	t.Helper()
	var fs []upstreamtest.Frame
	for i, data := range upstreamtest.ResponsesEvents("resp_shape", "gpt-fake-1", text, deltas) {
		if edit != nil {
			if data = edit(i, data); data == nil {
				continue
			}
		}
		typ := gjson.GetBytes(data, "type").Str
		n := typ
		if name != nil {
			n = name(typ)
		}
		fs = append(fs, upstreamtest.RawFrame([]byte("event: "+n+"\ndata: "+string(data)+"\n\n")))
	}
	return fs
}

// An upstream's usage whose counts are negative, not integers or absurd
// (1e20, which a JSON reader saturates to MaxInt64) is no usage: the
// request is charged its estimate, as a stream without usage is (README
// "Usage"). Summed as reported, /admin/usage went negative and
// sluice_usage_tokens_total, a counter, went backwards. The relayed event
// keeps what the upstream sent; the gateway warns once.
func TestUpstreamUsageThatIsNotATokenCountIsEstimated(t *testing.T) {
	h, _ := keyedHarness(t, keyRec("team-a", teamAKey, nil, store.KeyLimits{}))
	bad := []string{
		`{"input_tokens":-5,"output_tokens":100000000000000000000,"total_tokens":-1}`,
		`{"input_tokens":5,"output_tokens":2.5,"total_tokens":7.5}`,
		`{"input_tokens":5,"output_tokens":"abc","total_tokens":5}`,
		`{"input_tokens":9223372036854775807,"output_tokens":9223372036854775807,"total_tokens":1}`,
	}
	body := `{"model":"gpt-fake-1","input":"hi","stream":true}`
	for _, u := range bad {
		frames := shapedStream(t, "one two three", 3, func(_ int, data []byte) []byte {
			if gjson.GetBytes(data, "type").Str != "response.completed" {
				return data
			}
			out, err := sjson.SetRawBytes(data, "response.usage", []byte(u))
			if err != nil {
				t.Fatal(err)
			}
			return out
		}, nil)
		h.ups["A"].Enqueue(upstreamtest.Script{Frames: frames})
		resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, body)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "response.completed") {
			t.Fatalf("usage %s: %d %s", u, resp.StatusCode, b)
		}
	}
	n := int64(len(bad))
	rep := waitUsage(t, h, n)
	inputEstimate := int64(len(body)+3) / 4
	if rep.Total.Requests != n || rep.Total.InputTokens != n*inputEstimate || rep.Total.OutputTokens != n*3 {
		t.Fatalf("/admin/usage: %+v, want %d requests charged the estimate (%d in, 3 out each)", rep.Total, n, inputEstimate)
	}
	m := h.metrics()
	for _, series := range []string{
		fmt.Sprintf(`sluice_usage_estimated_requests_total{key="team-a",model="gpt-fake-1",route="",target="A"} %d`, n),
		fmt.Sprintf(`sluice_usage_tokens_total{key="team-a",kind="output",model="gpt-fake-1",route="",target="A"} %d`, n*3),
	} {
		if !strings.Contains(m, series+"\n") {
			t.Errorf("want %s in:\n%s", series, grepLines(m, "sluice_usage_"))
		}
	}
	if c := strings.Count(h.logs.String(), "not a token count"); c != 1 {
		t.Errorf("%d warnings of the invalid usage, want 1 (rate-limited):\n%s", c, grepLines(h.logs.String(), "token count"))
	}
}

// A response.completed without a Response ({"type":"response.completed",
// "sequence_number":7}) reaches the client with the Response the gateway
// builds of what it sent, status completed (README, the terminal-event
// rule), and GET /v1/responses/{id} answers that Response, not a 200
// with an empty body.
func TestCompletedWithoutResponseIsFilledIn(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	frames := shapedStream(t, "one two three", 3, func(_ int, data []byte) []byte {
		if gjson.GetBytes(data, "type").Str == "response.completed" {
			return []byte(`{"type":"response.completed","sequence_number":` + gjson.GetBytes(data, "sequence_number").Raw + `}`)
		}
		return data
	}, nil)
	h.ups["A"].Enqueue(upstreamtest.Script{Frames: frames})
	s := g6Post(t, h, `{"model":"gpt-fake-1","input":"hi","stream":true}`)
	resp := gjson.GetBytes(s.terminal.data, "response")
	if s.terminal.typ != "response.completed" || resp.Get("status").Str != "completed" ||
		resp.Get("output.0.content.0.text").Str != "one two three" || resp.Get("id").Str == "" {
		t.Fatalf("terminal %s %s", s.terminal.typ, s.terminal.data)
	}
	id := resp.Get("id").Str
	req, _ := http.NewRequest(http.MethodGet, h.url+"/v1/responses/"+id, nil)
	req.Header.Set("Authorization", "Bearer sk-client-secret") // the stream's owner
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var sb strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := r.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			break
		}
	}
	got := gjson.Parse(sb.String())
	if r.StatusCode != http.StatusOK || got.Get("id").Str != id || got.Get("status").Str != "completed" ||
		got.Get("output.0.content.0.text").Str != "one two three" {
		t.Fatalf("GET /v1/responses/%s: %d %s", id, r.StatusCode, sb.String())
	}
}

// An upstream event name that disagrees with the data's type is not
// relayed: the client gets the type as the name (every event's name is
// its data's type), else a client dispatching on names would see a
// terminal event for every event.
func TestUpstreamEventNameIsTheType(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	h.ups["A"].Enqueue(upstreamtest.Script{Frames: shapedStream(t, "one two three", 3, nil, func(string) string { return "response.completed" })})
	_, evs := h.streamEvents("/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`)
	if len(evs) == 0 {
		t.Fatal("no events")
	}
	for _, ev := range evs {
		if typ := gjson.GetBytes(ev.Data, "type").Str; ev.Name != typ {
			t.Errorf("event named %q carries type %q", ev.Name, typ)
		}
	}
}

// A delta or done event naming output the client was never sent (an
// unknown item_id at an unknown output_index, a negative or out-of-range
// output_index or content_index) is an unparseable event: skipped and
// counted, so the client's text agrees with the terminal Response; three
// in a row fail the stream (README, unparseable events).
func TestEventNamingUnsentOutputIsSkipped(t *testing.T) {
	orphans := []struct{ name, event string }{
		{"unknown item", `{"type":"response.output_text.delta","item_id":"msg_zzz","output_index":5,"content_index":0,"delta":" ORPHAN"}`},
		{"negative indexes", `{"type":"response.output_text.delta","item_id":"msg_zzz","output_index":-1,"content_index":-3,"delta":" ORPHAN"}`},
		{"huge index", `{"type":"response.output_text.delta","item_id":"msg_zzz","output_index":99999999999999999999,"content_index":0,"delta":" ORPHAN"}`},
		{"unknown part", `{"type":"response.output_text.delta","item_id":"msg_shape","output_index":0,"content_index":4,"delta":" ORPHAN"}`},
		{"unknown item done", `{"type":"response.output_text.done","item_id":"msg_zzz","output_index":7,"content_index":0,"text":" ORPHAN"}`},
	}
	for _, o := range orphans {
		t.Run(o.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{})
			var at int
			frames := shapedStream(t, "one two three", 3, func(i int, data []byte) []byte {
				if gjson.GetBytes(data, "type").Str == "response.output_text.delta" && at == 0 {
					at = i
					return append(append(data, "\n\nevent: x\ndata: "...), o.event...) // a second event after the first delta
				}
				return data
			}, nil)
			h.ups["A"].Enqueue(upstreamtest.Script{Frames: frames})
			s := g6Post(t, h, `{"model":"gpt-fake-1","input":"hi","stream":true}`)
			for _, ev := range s.evs {
				if strings.Contains(string(ev.data), "ORPHAN") {
					t.Fatalf("relayed %s", ev.data)
				}
			}
			if s.terminal.typ != "response.completed" || s.text != "one two three" {
				t.Fatalf("client got %q ending %s %s", s.text, s.terminal.typ, s.terminal.data)
			}
			if m := h.metrics(); !strings.Contains(m, `reason="unparseable"`) {
				t.Errorf("the skipped event is not counted:\n%s", grepLines(m, "skipped"))
			}
		})
	}
	t.Run("three in a row", func(t *testing.T) {
		h := newHarness(t, harnessConfig{})
		orphan := orphans[0].event
		frames := shapedStream(t, "one two three", 3, func(i int, data []byte) []byte {
			if gjson.GetBytes(data, "type").Str == "response.output_text.delta" && strings.Contains(string(data), `"one`) {
				for range 3 {
					data = append(append(data, "\n\nevent: x\ndata: "...), orphan...)
				}
			}
			return data
		}, nil)
		h.ups["A"].Enqueue(upstreamtest.Script{Frames: frames})
		s := g6Post(t, h, `{"model":"gpt-fake-1","input":"hi","stream":true}`)
		if s.terminal.typ != "response.failed" || s.code != "stream_incomplete" || strings.Contains(s.text, "ORPHAN") {
			t.Fatalf("client got %q ending %s %s", s.text, s.terminal.typ, s.terminal.data)
		}
	})
}
