package upstreamtest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// sseBlock is one blank-line-terminated block of an SSE stream.
type sseBlock struct {
	Event   string
	Data    string
	HasData bool
	Fields  map[string]string // other fields, e.g. "error"
}

// parseSSE splits an SSE body into blocks (a tiny local parser: field lines,
// blank-line dispatch, multi-line data joined with \n).
func parseSSE(t *testing.T, b []byte) []sseBlock {
	t.Helper()
	var out []sseBlock
	cur := sseBlock{Fields: map[string]string{}}
	started := false
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSuffix(line, "\r")
		if line == "" {
			if started {
				out = append(out, cur)
			}
			cur = sseBlock{Fields: map[string]string{}}
			started = false
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue
		}
		started = true
		name, val, _ := strings.Cut(line, ":")
		val = strings.TrimPrefix(val, " ")
		switch name {
		case "event":
			cur.Event = val
		case "data":
			if cur.HasData {
				cur.Data += "\n"
			}
			cur.Data += val
			cur.HasData = true
		default:
			cur.Fields[name] = val
		}
	}
	if started {
		t.Errorf("stream ends with an unterminated block: %+v", cur)
	}
	return out
}

// decodeEvents decodes every block's data as a JSON object, failing on any
// block that is not one.
func decodeEvents(t *testing.T, blocks []sseBlock) []map[string]any {
	t.Helper()
	var evs []map[string]any
	for _, b := range blocks {
		var m map[string]any
		if err := json.Unmarshal([]byte(b.Data), &m); err != nil {
			t.Fatalf("block data is not a JSON object: %q: %v", b.Data, err)
		}
		if b.Event != "" && b.Event != m["type"] {
			t.Errorf("event line %q does not match type %v", b.Event, m["type"])
		}
		evs = append(evs, m)
	}
	return evs
}

func types(evs []map[string]any) []string {
	var ts []string
	for _, e := range evs {
		ts = append(ts, str(e["type"]))
	}
	return ts
}

func str(v any) string { s, _ := v.(string); return s }

func num(v any) int {
	f, ok := v.(float64)
	if !ok {
		return -1
	}
	return int(f)
}

func asObj(v any) map[string]any { m, _ := v.(map[string]any); return m }

// path walks nested objects and arrays: path(m, "response", "output", 0, "id").
func path(v any, keys ...any) any {
	for _, k := range keys {
		switch k := k.(type) {
		case string:
			v = asObj(v)[k]
		case int:
			a, _ := v.([]any)
			if k >= len(a) {
				return nil
			}
			v = a[k]
		}
	}
	return v
}

type client struct {
	t  *testing.T
	hc *http.Client
}

func newClient(t *testing.T) *client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &client{t: t, hc: &http.Client{Transport: tr, Timeout: 10 * time.Second}}
}

// post sends body and returns the response and its whole body (and the read
// error, for cut streams).
func (c *client) post(url, body string, hdr ...string) (*http.Response, []byte, error) {
	c.t.Helper()
	return c.do(context.Background(), http.MethodPost, url, body, hdr...)
}

func (c *client) do(ctx context.Context, method, url, body string, hdr ...string) (*http.Response, []byte, error) {
	c.t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

func mustJSON(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("not JSON: %q: %v", b, err)
	}
	return m
}

// jsonEqual compares two JSON documents semantically.
func jsonEqual(t *testing.T, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("got is not JSON: %q", got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("want is not JSON: %q", want)
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	if !bytes.Equal(gb, wb) {
		t.Errorf("JSON mismatch\n got: %s\nwant: %s", gb, wb)
	}
}

func dialWS(t *testing.T, s *Server, hdr http.Header) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, s.WebSocketURL(), &websocket.DialOptions{HTTPHeader: hdr})
	if err != nil {
		t.Fatalf("dial: %v (resp %v)", err, resp)
	}
	t.Cleanup(func() { _ = c.CloseNow() })
	return c
}

// readWS reads text frames until (and including) a terminal or error frame.
func readWS(t *testing.T, c *websocket.Conn) ([]map[string]any, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var evs []map[string]any
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			return evs, err
		}
		m := mustJSON(t, b)
		evs = append(evs, m)
		switch m["type"] {
		case "response.completed", "response.failed", "response.incomplete", "error":
			return evs, nil
		}
	}
}
