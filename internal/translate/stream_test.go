package translate

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/internal/apierr"
	"github.com/tidwall/gjson"
)

// counterIDs returns a deterministic NewID: msg_1, msg_2, rs_1, fc_1, …
func counterIDs() func(string) string {
	n := map[string]int{}
	return func(p string) string {
		n[p]++
		return fmt.Sprintf("%s_%d", p, n[p])
	}
}

// testCompletedAt is the clock testStreamOptions gives a Stream.
const testCompletedAt = 1750000042

func testStreamOptions() StreamOptions {
	return StreamOptions{ResponseID: "resp_test", CreatedAt: 1750000000, NewID: counterIDs(),
		Now: func() time.Time { return time.Unix(testCompletedAt, 0) }}
}

// readSSE returns the data payloads of an SSE file, in order, and whether
// it ended with [DONE] (payloads after it are not returned).
func readSSE(t testing.TB, name string) (payloads [][]byte, sawDone bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "streams", name))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		data, ok := strings.CutPrefix(line, "data:")
		if !ok {
			continue
		}
		data = strings.TrimPrefix(data, " ")
		if data == "[DONE]" {
			return payloads, true
		}
		payloads = append(payloads, []byte(data))
	}
	return payloads, false
}

// runStream drives a Stream the way the gateway's event pump does.
func runStream(t testing.TB, name string, opts StreamOptions) ([]Event, *Stream) {
	t.Helper()
	payloads, sawDone := readSSE(t, name)
	s := NewStream(opts)
	events := s.Start()
	for _, p := range payloads {
		ev, err := s.Chunk(p)
		if err != nil {
			events = append(events, s.Fail(apierr.StreamIncomplete("bad chunk: %v", err))...)
			break
		}
		events = append(events, ev...)
	}
	switch {
	case sawDone || s.FinishReason() != "":
		events = append(events, s.Finish()...)
	default:
		events = append(events, s.Fail(apierr.StreamIncomplete("the upstream closed the stream without a finish reason"))...)
	}
	return events, s
}

// describe renders an event as "type item_id oN cN" for sequence assertions.
func describe(e Event) string {
	r := gjson.ParseBytes(e.Data)
	out := e.Type
	id := r.Get("item_id")
	if !id.Exists() {
		id = r.Get("item.id")
	}
	if id.Exists() {
		out += " " + id.Str
	}
	if v := r.Get("output_index"); v.Exists() {
		out += " o" + v.Raw
	}
	if v := r.Get("content_index"); v.Exists() {
		out += " c" + v.Raw
	}
	return out
}

func TestStreams(t *testing.T) {
	cases := []struct {
		file   string
		events []string
		// checks on the terminal response
		status     string
		output     []string // item types with their text / arguments
		usage      string   // expected usage JSON, "" for null
		incomplete string
		errCode    string
	}{
		{
			file: "text_only.txt",
			events: []string{
				"response.created",
				"response.in_progress",
				"response.output_item.added msg_1 o0",
				"response.content_part.added msg_1 o0 c0",
				"response.output_text.delta msg_1 o0 c0",
				"response.output_text.delta msg_1 o0 c0",
				"response.output_text.delta msg_1 o0 c0",
				"response.output_text.done msg_1 o0 c0",
				"response.content_part.done msg_1 o0 c0",
				"response.output_item.done msg_1 o0",
				"response.completed",
			},
			status: "completed",
			output: []string{"message completed: Hello, \"wörld\"\n— bye"},
			usage:  `{"input_tokens":12,"input_tokens_details":{"cached_tokens":8,"cache_write_tokens":0},"output_tokens":5,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":17}`,
		},
		{
			file: "reasoning_text.txt",
			events: []string{
				"response.created",
				"response.in_progress",
				"response.output_item.added rs_1 o0",
				"response.content_part.added rs_1 o0 c0",
				"response.reasoning_text.delta rs_1 o0 c0",
				"response.reasoning_text.delta rs_1 o0 c0",
				"response.reasoning_text.delta rs_1 o0 c0",
				// the "\n\n" content waits for real text before a message opens
				"response.reasoning_text.done rs_1 o0 c0",
				"response.content_part.done rs_1 o0 c0",
				"response.output_item.done rs_1 o0",
				"response.output_item.added msg_1 o1",
				"response.content_part.added msg_1 o1 c0",
				"response.output_text.delta msg_1 o1 c0",
				"response.output_text.delta msg_1 o1 c0",
				"response.output_text.done msg_1 o1 c0",
				"response.content_part.done msg_1 o1 c0",
				"response.output_item.done msg_1 o1",
				"response.completed",
			},
			status: "completed",
			output: []string{"reasoning completed: The user wants 2+2.\nIt is 4.", "message completed: \n\n4."},
			usage:  `{"input_tokens":20,"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":0},"output_tokens":15,"output_tokens_details":{"reasoning_tokens":12},"total_tokens":35}`,
		},
		{
			file: "reasoning_tools.txt",
			events: []string{
				"response.created",
				"response.in_progress",
				"response.output_item.added rs_1 o0",
				"response.content_part.added rs_1 o0 c0",
				"response.reasoning_text.delta rs_1 o0 c0",
				"response.reasoning_text.delta rs_1 o0 c0",
				"response.reasoning_text.done rs_1 o0 c0",
				"response.content_part.done rs_1 o0 c0",
				"response.output_item.done rs_1 o0",
				// fc_2 starts while fc_1's arguments are incomplete: it waits,
				// and is announced with what it buffered once fc_1 is done.
				"response.output_item.added fc_1 o1",
				"response.function_call_arguments.delta fc_1 o1",
				"response.function_call_arguments.delta fc_1 o1",
				"response.function_call_arguments.done fc_1 o1",
				"response.output_item.done fc_1 o1",
				"response.output_item.added fc_2 o2",
				"response.function_call_arguments.delta fc_2 o2",
				"response.function_call_arguments.delta fc_2 o2",
				"response.function_call_arguments.done fc_2 o2",
				"response.output_item.done fc_2 o2",
				"response.completed",
			},
			status: "completed",
			output: []string{
				"reasoning completed: Need weather for two cities.",
				`function_call completed: call_a get_weather {"city":"Paris"}`,
				`function_call completed: call_b get_time {"tz":"Europe/Oslo"}`,
			},
			usage: `{"input_tokens":100,"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":0},"output_tokens":40,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":140}`,
		},
		{
			// Chat interleaves text and tool calls: each item is done
			// before the next is added.
			file: "text_tools_interleaved.txt",
			events: []string{
				"response.created",
				"response.in_progress",
				"response.output_item.added msg_1 o0",
				"response.content_part.added msg_1 o0 c0",
				"response.output_text.delta msg_1 o0 c0",
				"response.output_text.done msg_1 o0 c0",
				"response.content_part.done msg_1 o0 c0",
				"response.output_item.done msg_1 o0",
				"response.output_item.added fc_1 o1",
				"response.function_call_arguments.delta fc_1 o1",
				"response.function_call_arguments.delta fc_1 o1",
				"response.function_call_arguments.done fc_1 o1",
				"response.output_item.done fc_1 o1",
				"response.output_item.added msg_2 o2",
				"response.content_part.added msg_2 o2 c0",
				"response.output_text.delta msg_2 o2 c0",
				"response.output_text.done msg_2 o2 c0",
				"response.content_part.done msg_2 o2 c0",
				"response.output_item.done msg_2 o2",
				"response.output_item.added fc_2 o3",
				"response.function_call_arguments.delta fc_2 o3",
				"response.function_call_arguments.delta fc_2 o3",
				"response.function_call_arguments.done fc_2 o3",
				"response.output_item.done fc_2 o3",
				"response.completed",
			},
			status: "completed",
			output: []string{
				"message completed: Checking the weather.",
				`function_call completed: call_w get_weather {"city":"Oslo"}`,
				"message completed:  And the time.",
				`function_call completed: call_t get_time {"tz":"Europe/Oslo"}`,
			},
		},
		{
			file: "length.txt",
			events: []string{
				"response.created",
				"response.in_progress",
				"response.output_item.added msg_1 o0",
				"response.content_part.added msg_1 o0 c0",
				"response.output_text.delta msg_1 o0 c0",
				"response.output_text.delta msg_1 o0 c0",
				"response.output_text.done msg_1 o0 c0",
				"response.content_part.done msg_1 o0 c0",
				"response.output_item.done msg_1 o0",
				"response.incomplete",
			},
			status:     "incomplete",
			output:     []string{"message incomplete: Once upon a time"},
			usage:      `{"input_tokens":5,"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":0},"output_tokens":4,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":9}`,
			incomplete: "max_output_tokens",
		},
		{
			// An answer the upstream says it cut short fails as a cut
			// does, never completed: its item is left open, incomplete.
			file: "finish_abort.txt",
			events: []string{
				"response.created",
				"response.in_progress",
				"response.output_item.added msg_1 o0",
				"response.content_part.added msg_1 o0 c0",
				"response.output_text.delta msg_1 o0 c0",
				"response.failed",
			},
			status:  "failed",
			output:  []string{"message incomplete: Once upon"},
			usage:   `{"input_tokens":5,"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":0},"output_tokens":2,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":7}`,
			errCode: "server_error",
		},
		{
			// A reason the gateway does not know completes the answer.
			file: "finish_unknown.txt",
			events: []string{
				"response.created",
				"response.in_progress",
				"response.output_item.added msg_1 o0",
				"response.content_part.added msg_1 o0 c0",
				"response.output_text.delta msg_1 o0 c0",
				"response.output_text.done msg_1 o0 c0",
				"response.content_part.done msg_1 o0 c0",
				"response.output_item.done msg_1 o0",
				"response.completed",
			},
			status: "completed",
			output: []string{"message completed: Done."},
		},
		{
			// Arguments absent or null are an empty JSON object, with the
			// delta that carries it.
			file: "tool_no_args.txt",
			events: []string{
				"response.created",
				"response.in_progress",
				"response.output_item.added fc_1 o0",
				"response.function_call_arguments.delta fc_1 o0",
				"response.function_call_arguments.done fc_1 o0",
				"response.output_item.done fc_1 o0",
				"response.output_item.added fc_2 o1",
				"response.function_call_arguments.delta fc_2 o1",
				"response.function_call_arguments.done fc_2 o1",
				"response.output_item.done fc_2 o1",
				"response.completed",
			},
			status: "completed",
			output: []string{"function_call completed: call_E g {}", "function_call completed: call_N h {}"},
		},
		{
			file: "error_mid.txt",
			events: []string{
				"response.created",
				"response.in_progress",
				"response.output_item.added msg_1 o0",
				"response.content_part.added msg_1 o0 c0",
				"response.output_text.delta msg_1 o0 c0",
				"response.output_text.delta msg_1 o0 c0",
				"response.failed",
			},
			status:  "failed",
			output:  []string{"message incomplete: Partial answ"},
			errCode: "server_is_overloaded",
		},
		{
			file: "whitespace_tool.txt",
			events: []string{
				"response.created",
				"response.in_progress",
				"response.output_item.added fc_1 o0",
				"response.function_call_arguments.delta fc_1 o0",
				"response.function_call_arguments.done fc_1 o0",
				"response.output_item.done fc_1 o0",
				"response.completed",
			},
			status: "completed",
			output: []string{`function_call completed: call_x shell {"cmd":["ls"]}`},
		},
		{
			file: "tool_name_split.txt",
			events: []string{
				"response.created",
				"response.in_progress",
				"response.output_item.added fc_1 o0",
				"response.function_call_arguments.delta fc_1 o0",
				"response.function_call_arguments.delta fc_1 o0",
				"response.function_call_arguments.done fc_1 o0",
				"response.output_item.done fc_1 o0",
				"response.output_item.added fc_2 o1",
				"response.function_call_arguments.delta fc_2 o1",
				"response.function_call_arguments.done fc_2 o1",
				"response.output_item.done fc_2 o1",
				"response.completed",
			},
			status: "completed",
			output: []string{`function_call completed: call_a get_weather {"city":"Paris"}`, `function_call completed: call_b get_time {}`},
		},
		{
			file: "refusal.txt",
			events: []string{
				"response.created",
				"response.in_progress",
				"response.output_item.added msg_1 o0",
				"response.content_part.added msg_1 o0 c0",
				"response.refusal.delta msg_1 o0 c0",
				"response.refusal.delta msg_1 o0 c0",
				"response.refusal.done msg_1 o0 c0",
				"response.content_part.done msg_1 o0 c0",
				"response.output_item.done msg_1 o0",
				"response.completed",
			},
			status: "completed",
			output: []string{"message completed: refusal=I can't help with that."},
		},
		{
			// Neither index nor id: a new name starts the next call; the
			// same name continues one until its arguments are complete.
			file: "tools_no_index_no_id.txt",
			events: []string{
				"response.created",
				"response.in_progress",
				"response.output_item.added fc_1 o0",
				"response.function_call_arguments.delta fc_1 o0",
				"response.function_call_arguments.delta fc_1 o0",
				"response.function_call_arguments.done fc_1 o0",
				"response.output_item.done fc_1 o0",
				"response.output_item.added fc_2 o1",
				"response.function_call_arguments.delta fc_2 o1",
				"response.function_call_arguments.done fc_2 o1",
				"response.output_item.done fc_2 o1",
				"response.output_item.added fc_3 o2",
				"response.function_call_arguments.delta fc_3 o2",
				"response.function_call_arguments.delta fc_3 o2",
				"response.function_call_arguments.done fc_3 o2",
				"response.output_item.done fc_3 o2",
				"response.completed",
			},
			status: "completed",
			output: []string{
				`function_call completed: call_1 f0 {"a":1}`,
				`function_call completed: call_2 f1 {"b":2}`,
				`function_call completed: call_3 f1 {"c":3}`,
			},
		},
		{
			// Text in the middle of a call's arguments waits for the rest
			// of them, and follows the call.
			file: "tool_args_interrupted.txt",
			events: []string{
				"response.created",
				"response.in_progress",
				"response.output_item.added fc_1 o0",
				"response.function_call_arguments.delta fc_1 o0",
				"response.function_call_arguments.delta fc_1 o0",
				"response.function_call_arguments.done fc_1 o0",
				"response.output_item.done fc_1 o0",
				"response.output_item.added msg_1 o1",
				"response.content_part.added msg_1 o1 c0",
				"response.output_text.delta msg_1 o1 c0",
				"response.output_text.delta msg_1 o1 c0",
				"response.output_text.delta msg_1 o1 c0",
				"response.output_text.delta msg_1 o1 c0",
				"response.output_text.done msg_1 o1 c0",
				"response.content_part.done msg_1 o1 c0",
				"response.output_item.done msg_1 o1",
				"response.completed",
			},
			status: "completed",
			output: []string{
				`function_call completed: call_a f0 {"a":1}`,
				"message completed: thinking aloud, done",
			},
		},
		{
			// A pair split across deltas is joined in the second delta; a
			// lone half is U+FFFD in the deltas and the done text alike.
			file: "surrogate_split.txt",
			events: []string{
				"response.created",
				"response.in_progress",
				"response.output_item.added msg_1 o0",
				"response.content_part.added msg_1 o0 c0",
				"response.output_text.delta msg_1 o0 c0",
				"response.output_text.delta msg_1 o0 c0",
				"response.output_text.delta msg_1 o0 c0",
				"response.output_text.delta msg_1 o0 c0",
				"response.output_text.delta msg_1 o0 c0",
				"response.output_text.delta msg_1 o0 c0",
				"response.output_text.done msg_1 o0 c0",
				"response.content_part.done msg_1 o0 c0",
				"response.output_item.done msg_1 o0",
				"response.completed",
			},
			status: "completed",
			output: []string{"message completed: x\U0001F600y\U0001F603 a\uFFFDb z\uFFFD"},
		},
		{
			file: "cut.txt",
			events: []string{
				"response.created",
				"response.in_progress",
				"response.output_item.added msg_1 o0",
				"response.content_part.added msg_1 o0 c0",
				"response.output_text.delta msg_1 o0 c0",
				"response.failed",
			},
			status:  "failed",
			output:  []string{"message incomplete: Half"},
			errCode: "server_error", // the spec's enum has no stream_incomplete: it leads the message
		},
	}
	// finish_reason "error" is an answer cut short as "abort" is: the
	// same events and Response.
	for _, c := range cases {
		if c.file == "finish_abort.txt" {
			c.file = "finish_error.txt"
			cases = append(cases, c)
			break
		}
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			events, s := runStream(t, tc.file, testStreamOptions())
			if err := validateEvents(events); err != nil {
				t.Fatalf("protocol violation: %v\n%s", err, dumpEvents(events))
			}
			var got []string
			for _, e := range events {
				got = append(got, describe(e))
			}
			if strings.Join(got, "\n") != strings.Join(tc.events, "\n") {
				t.Fatalf("event sequence:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.events, "\n"))
			}
			if !s.Done() {
				t.Fatal("Done() is false after the terminal event")
			}
			last := gjson.ParseBytes(events[len(events)-1].Data)
			resp := last.Get("response")
			if resp.Get("id").Str != "resp_test" || resp.Get("created_at").Int() != 1750000000 || resp.Get("model").Str != "qwen3-8b" {
				t.Errorf("response header: %s", resp.Raw)
			}
			if resp.Get("status").Str != tc.status {
				t.Errorf("status %s, want %s", resp.Get("status").Str, tc.status)
			}
			// completed_at: the spec's "present when the status is completed".
			if c := resp.Get("completed_at"); tc.status == "completed" && c.Int() != testCompletedAt || tc.status != "completed" && c.Type != gjson.Null {
				t.Errorf("completed_at %s with status %s", c.Raw, tc.status)
			}
			var outs []string
			resp.Get("output").ForEach(func(_, it gjson.Result) bool {
				outs = append(outs, summarizeItem(it))
				return true
			})
			if strings.Join(outs, "\n") != strings.Join(tc.output, "\n") {
				t.Errorf("output:\n%s\nwant:\n%s", strings.Join(outs, "\n"), strings.Join(tc.output, "\n"))
			}
			// OutputItems is the terminal output, item for item.
			stored := s.OutputItems()
			if len(stored) != len(resp.Get("output").Array()) {
				t.Fatalf("OutputItems has %d items", len(stored))
			}
			for k, it := range resp.Get("output").Array() {
				if !jsonEqual(t, stored[k], []byte(it.Raw)) {
					t.Errorf("OutputItems[%d] = %s, terminal output %s", k, stored[k], it.Raw)
				}
			}
			if u := resp.Get("usage"); tc.usage == "" && u.Type != gjson.Null || tc.usage != "" && u.Raw != tc.usage {
				t.Errorf("usage %s, want %s", u.Raw, tc.usage)
			}
			if got := resp.Get("incomplete_details.reason").Str; got != tc.incomplete {
				t.Errorf("incomplete reason %q, want %q", got, tc.incomplete)
			}
			if got := resp.Get("error.code").Str; got != tc.errCode {
				t.Errorf("error code %q, want %q", got, tc.errCode)
			}
			// Nothing more comes out once done.
			if ev := s.Finish(); ev != nil {
				t.Errorf("Finish after done: %v", ev)
			}
			if ev := s.Fail(apierr.StreamIncomplete("x")); ev != nil {
				t.Errorf("Fail after done: %v", ev)
			}
			if ev, err := s.Chunk([]byte(`{"choices":[{"index":0,"delta":{"content":"x"}}]}`)); ev != nil || err != nil {
				t.Errorf("Chunk after done: %v %v", ev, err)
			}
		})
	}
}

// summarizeItem renders an output item as "type status: text".
func summarizeItem(it gjson.Result) string {
	head := it.Get("type").Str + " " + it.Get("status").Str + ": "
	switch it.Get("type").Str {
	case "function_call":
		return head + it.Get("call_id").Str + " " + it.Get("name").Str + " " + it.Get("arguments").Str
	default:
		var parts []string
		it.Get("content").ForEach(func(_, p gjson.Result) bool {
			if p.Get("type").Str == "refusal" {
				parts = append(parts, "refusal="+p.Get("refusal").Str)
			} else {
				parts = append(parts, p.Get("text").Str)
			}
			return true
		})
		return head + strings.Join(parts, "|")
	}
}

func jsonEqual(t testing.TB, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%v: %s", err, a)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return bytes.Equal(xb, yb)
}

func dumpEvents(events []Event) string {
	var b strings.Builder
	for _, e := range events {
		b.Write(e.Data)
		b.WriteByte('\n')
	}
	return b.String()
}

// TestStreamTerminalRule drives a Stream through odd call orders: whatever
// happens, exactly one terminal event comes out, and nothing after it.
func TestStreamTerminalRule(t *testing.T) {
	text := []byte(`{"model":"m","choices":[{"index":0,"delta":{"content":"hi"}}]}`)
	stop := []byte(`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`)
	errChunk := []byte(`{"error":{"message":"boom","type":"server_error","code":500}}`)
	length := []byte(`{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}`)
	type step func(s *Stream) []Event
	chunk := func(b []byte) step {
		return func(s *Stream) []Event { ev, _ := s.Chunk(b); return ev }
	}
	start := func(s *Stream) []Event { return s.Start() }
	finish := func(s *Stream) []Event { return s.Finish() }
	fail := func(s *Stream) []Event { return s.Fail(apierr.StreamIncomplete("cut")) }
	cases := map[string]struct {
		steps    []step
		terminal string
		first    string
	}{
		"finish only":       {[]step{finish}, "response.completed", "response.created"},
		"fail only":         {[]step{fail}, "response.failed", "response.failed"},
		"fail then finish":  {[]step{start, chunk(text), fail, finish, fail}, "response.failed", "response.created"},
		"finish then fail":  {[]step{chunk(text), finish, fail, chunk(text), finish}, "response.completed", "response.created"},
		"error chunk first": {[]step{chunk(errChunk), start, chunk(text), finish}, "response.failed", "response.failed"},
		// A finish reason makes the answer complete: an error after it does
		// not unmake it, and a later finish reason does not change it.
		"error after stop":     {[]step{start, chunk(text), chunk(stop), chunk(errChunk), finish}, "response.completed", "response.created"},
		"length then stop":     {[]step{start, chunk(text), chunk(length), chunk(stop), finish}, "response.incomplete", "response.created"},
		"content after stop":   {[]step{start, chunk(text), chunk(stop), chunk(text), finish}, "response.completed", "response.created"},
		"start twice":          {[]step{start, start, chunk(text), chunk(stop), finish, finish}, "response.completed", "response.created"},
		"garbage then fail":    {[]step{start, chunk([]byte("{nope")), chunk([]byte(`"str"`)), fail}, "response.failed", "response.created"},
		"chunk without start":  {[]step{chunk(text), chunk(stop), finish}, "response.completed", "response.created"},
		"empty stream success": {[]step{start, finish}, "response.completed", "response.created"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := NewStream(testStreamOptions())
			var events []Event
			for _, st := range tc.steps {
				events = append(events, st(s)...)
			}
			if err := validateEvents(events); err != nil {
				t.Fatalf("%v\n%s", err, dumpEvents(events))
			}
			n := 0
			for _, e := range events {
				if terminalTypes[e.Type] {
					n++
				}
			}
			if n != 1 || events[len(events)-1].Type != tc.terminal || events[0].Type != tc.first {
				t.Fatalf("got %d terminal events, last %s, first %s:\n%s", n, events[len(events)-1].Type, events[0].Type, dumpEvents(events))
			}
			if !s.Done() {
				t.Fatal("not Done")
			}
		})
	}
}

func TestStreamErrorChunkShapes(t *testing.T) {
	for _, tc := range []struct{ chunk, code, msg string }{
		{`{"error":{"message":"slow down","type":"invalid_request_error","code":"rate_limit_exceeded"}}`, "rate_limit_exceeded", "slow down"},
		{`{"error":{"code":500,"message":"llama.cpp oops","type":"server_error"}}`, "server_error", "llama.cpp oops"},
		{`{"object":"error","message":"vLLM oops","type":"BadRequestError","param":null,"code":400}`, "server_error", "BadRequestError: vLLM oops"},
		{`{"error":{"message":"no credit","type":"insufficient_quota","code":"insufficient_quota"}}`, "insufficient_quota", "no credit"},
		{`{"error":"plain string"}`, "server_error", "plain string"},
		{`{"error":{}}`, "server_error", "The upstream reported an error."},
	} {
		s := NewStream(testStreamOptions())
		s.Start()
		ev, err := s.Chunk([]byte(tc.chunk))
		if err != nil || len(ev) != 1 || ev[0].Type != "response.failed" {
			t.Fatalf("%s: %v %v", tc.chunk, ev, err)
		}
		r := gjson.ParseBytes(ev[0].Data)
		if r.Get("response.error.code").Str != tc.code || r.Get("response.error.message").Str != tc.msg || r.Get("sequence_number").Int() != 2 {
			t.Errorf("%s: %s", tc.chunk, ev[0].Data)
		}
	}
}

func TestStreamBadChunk(t *testing.T) {
	// Content on a choice other than 0 would be dropped, ending the answer
	// complete without it: the chunk is malformed, since one choice was asked
	// for.
	for _, c := range []string{"", "{", "[]", `"x"`, "nul", `{"a":1}x`,
		`{"choices":[{"index":1,"delta":{"content":"other choice"}}]}`,
		`{"choices":[{"index":0,"delta":{"content":"a"}},{"index":1,"delta":{"content":"b"}}]}`,
		`{"choices":[{"index":"0","delta":{"content":"a"}}]}`} {
		s := NewStream(testStreamOptions())
		if ev, err := s.Chunk([]byte(c)); err == nil || ev != nil {
			t.Errorf("%q: %v %v", c, ev, err)
		}
	}
	// Odd but well-formed chunks are tolerated.
	s := NewStream(testStreamOptions())
	for _, c := range []string{
		`{}`, `{"choices":null}`, `{"choices":[1,"x",null]}`, `{"choices":[{"delta":"x"}]}`,
		`{"choices":[{"index":0,"delta":{"content":5,"tool_calls":{"x":1}}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":{"a":1}}}]}}]}`,
		`{"usage":null}`,
	} {
		if _, err := s.Chunk([]byte(c)); err != nil {
			t.Errorf("%s: %v", c, err)
		}
	}
	events := append(s.Finish(), nil...)
	last := gjson.ParseBytes(events[len(events)-1].Data)
	// The call that never got a name is no function_call item: the answer
	// is unusable (TestStreamNamelessToolCall).
	if last.Get("type").Str != "response.failed" || last.Get("response.output").Raw != "[]" {
		t.Errorf("terminal %s", last.Raw)
	}
}

func TestStreamEcho(t *testing.T) {
	_, info, aerr := ToChat([]byte(`{"model":"m","instructions":"be brief","input":"hi","temperature":0.2,
		"tools":[{"type":"function","name":"f","parameters":{"type":"object"},"strict":false},{"type":"web_search"},{"type":"function","name":"g"}],
		"tool_choice":"auto","metadata":{"k":"v"},"store":false,"previous_response_id":"resp_prev","max_output_tokens":99,"truncation":"auto"}`), nil, RequestOptions{})
	if aerr != nil {
		t.Fatal(aerr)
	}
	opts := testStreamOptions()
	opts.Request = info.Echo
	opts.Model = "alias"
	s := NewStream(opts)
	ev := s.Start()
	r := gjson.ParseBytes(ev[0].Data).Get("response")
	for path, want := range map[string]string{
		"instructions":         `"be brief"`,
		"temperature":          `0.2`,
		"top_p":                `1`,
		"tools":                `[{"type":"function","name":"f","parameters":{"type":"object"},"strict":false},{"type":"function","name":"g","strict":false,"parameters":null}]`,
		"tool_choice":          `"auto"`,
		"metadata":             `{"k":"v"}`,
		"store":                `false`,
		"previous_response_id": `"resp_prev"`,
		"max_output_tokens":    `99`,
		"truncation":           `"auto"`,
		"parallel_tool_calls":  `true`,
		"model":                `"alias"`,
		"usage":                ``, // absent until known: the spec's usage is an object
		"output":               `[]`,
	} {
		if got := r.Get(path).Raw; got != want {
			t.Errorf("%s = %s, want %s", path, got, want)
		}
	}
	// Broken echo values fall back to the defaults instead of breaking events.
	s = NewStream(StreamOptions{Request: RequestEcho{Tools: json.RawMessage("[oops"), TopP: json.RawMessage("null")}})
	ev = s.Start()
	if !json.Valid(ev[0].Data) || gjson.GetBytes(ev[0].Data, "response.tools").Raw != "[]" || gjson.GetBytes(ev[0].Data, "response.top_p").Raw != "1" {
		t.Errorf("%s", ev[0].Data)
	}
	if id := s.ResponseID(); !strings.HasPrefix(id, "resp_") || len(id) != 5+48 {
		t.Errorf("default response id %q", id)
	}
}

func TestStreamSequentialToolCallsThenText(t *testing.T) {
	chunks := []string{
		`{"choices":[{"index":0,"delta":{"content":"Let me check."}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","function":{"name":"a","arguments":"{}"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_2","function":{"name":"b"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{\"x\":1}"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"reasoning_content":"hmm"}}]}`,
		`{"choices":[{"index":0,"delta":{"content":"Done."},"finish_reason":"stop"}]}`,
	}
	s := NewStream(testStreamOptions())
	events := s.Start()
	for _, c := range chunks {
		ev, err := s.Chunk([]byte(c))
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, ev...)
	}
	events = append(events, s.Finish()...)
	if err := validateEvents(events); err != nil {
		t.Fatalf("%v\n%s", err, dumpEvents(events))
	}
	var got []string
	gjson.GetBytes(events[len(events)-1].Data, "response.output").ForEach(func(_, it gjson.Result) bool {
		got = append(got, summarizeItem(it))
		return true
	})
	want := []string{
		"message completed: Let me check.",
		"function_call completed: call_1 a {}",
		`function_call completed: call_2 b {"x":1}`,
		"reasoning completed: hmm",
		"message completed: Done.",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("output:\n%s", strings.Join(got, "\n"))
	}
}

func TestFromChatResponse(t *testing.T) {
	body := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"qwen3-8b",
		"choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":"Checking.",
		"reasoning_content":"think","tool_calls":[{"id":"call_9","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}},
		{"id":"call_10","type":"function","function":{"name":"g","arguments":"{}"}}]}}],
		"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`)
	resp, output, aerr, _ := FromChatResponse(body, testStreamOptions())
	if aerr != nil {
		t.Fatal(aerr)
	}
	r := gjson.ParseBytes(resp)
	if r.Get("status").Str != "completed" || r.Get("id").Str != "resp_test" || r.Get("usage.total_tokens").Int() != 7 || r.Get("model").Str != "qwen3-8b" {
		t.Errorf("%s", resp)
	}
	var got []string
	r.Get("output").ForEach(func(_, it gjson.Result) bool {
		got = append(got, it.Get("id").Str+" "+summarizeItem(it))
		return true
	})
	want := []string{
		"rs_1 reasoning completed: think",
		"msg_1 message completed: Checking.",
		"fc_1 function_call completed: call_9 f {\"a\":1}",
		"fc_2 function_call completed: call_10 g {}",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("output:\n%s", strings.Join(got, "\n"))
	}
	if len(output) != 4 || !jsonEqual(t, output[2], []byte(r.Get("output.2").Raw)) {
		t.Errorf("output items %s", output)
	}

	resp, _, aerr, _ = FromChatResponse([]byte(`{"choices":[{"index":0,"finish_reason":"length","message":{"role":"assistant","content":"cut"}}]}`), testStreamOptions())
	if aerr != nil || gjson.GetBytes(resp, "status").Str != "incomplete" || gjson.GetBytes(resp, "incomplete_details.reason").Str != "max_output_tokens" ||
		gjson.GetBytes(resp, "output.0.status").Str != "incomplete" {
		t.Errorf("length: %s %v", resp, aerr)
	}
	resp, _, aerr, _ = FromChatResponse([]byte(`{"choices":[{"index":0,"finish_reason":"content_filter","message":{"role":"assistant","content":null,"refusal":"no"}}]}`), testStreamOptions())
	if aerr != nil || gjson.GetBytes(resp, "incomplete_details.reason").Str != "content_filter" || gjson.GetBytes(resp, "output.0.content.0.refusal").Str != "no" {
		t.Errorf("content_filter: %s %v", resp, aerr)
	}
	for body, code := range map[string]string{
		`{"error":{"message":"nope","type":"invalid_request_error","code":"context_length_exceeded"}}`: "context_length_exceeded",
		`not json`:           apierr.CodeStreamIncomplete,
		`[]`:                 apierr.CodeStreamIncomplete,
		`{"choices":"x"}`:    apierr.CodeStreamIncomplete,
		`{"choices":[]}`:     apierr.CodeStreamIncomplete,
		`{"object":"error"}`: "",
	} {
		_, _, aerr, _ := FromChatResponse([]byte(body), testStreamOptions())
		if aerr == nil || aerr.Code != code || aerr.Status < 400 {
			t.Errorf("%s: %+v", body, aerr)
		}
	}
}

// TestRoundTrip feeds a stream's output items back into ToChat as history:
// the next turn's Chat body carries the same assistant turn.
func TestRoundTrip(t *testing.T) {
	_, s := runStream(t, "reasoning_tools.txt", testStreamOptions())
	history := s.OutputItems()
	body := []byte(`{"model":"m","input":[{"type":"function_call_output","call_id":"call_a","output":"sunny"},{"type":"function_call_output","call_id":"call_b","output":"12:00"}]}`)
	chat, _, aerr := ToChat(body, history, RequestOptions{})
	if aerr != nil {
		t.Fatal(aerr)
	}
	want := `[{"role":"assistant","content":null,"reasoning_content":"Need weather for two cities.","tool_calls":[` +
		`{"id":"call_a","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},` +
		`{"id":"call_b","type":"function","function":{"name":"get_time","arguments":"{\"tz\":\"Europe/Oslo\"}"}}]},` +
		`{"role":"tool","tool_call_id":"call_a","content":"sunny"},{"role":"tool","tool_call_id":"call_b","content":"12:00"}]`
	if got := gjson.GetBytes(chat, "messages").Raw; got != want {
		t.Errorf("messages:\n%s\nwant:\n%s", got, want)
	}
}

// TestStreamErrorBeforeOutput: an error chunk before any output item keeps
// the upstream's own error (with the HTTP status it stands for) for the
// caller, next to the response.failed the Stream still emits; once output
// was announced, or when the stream failed for another reason, there is none.
func TestStreamErrorBeforeOutput(t *testing.T) {
	llama, _ := readSSE(t, "error_first.txt")
	role := `{"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`
	text := `{"model":"m","choices":[{"index":0,"delta":{"content":"hi"}}]}`
	for _, tc := range []struct {
		name   string
		chunks []string
		want   *apierr.Error // nil: no error before output
	}{
		{"client error first", []string{`{"error":{"code":"invalid_value","message":"temperature too high","type":"invalid_request_error","param":"temperature"}}`},
			&apierr.Error{Status: 400, Code: "invalid_value", Message: "temperature too high", Type: "invalid_request_error", Param: "temperature"}},
		{"llama.cpp status as code", []string{string(llama[0])},
			// As a client gets it (apierr.FromUpstream): llama.cpp's overflow is context_length_exceeded.
			&apierr.Error{Status: 400, Code: "context_length_exceeded", Message: "the request exceeds the available context size, try increasing it", Type: "invalid_request_error"}},
		{"after the role chunk", []string{role, `{"error":{"code":500,"message":"boom","type":"server_error"}}`},
			&apierr.Error{Status: 500, Message: "boom", Type: "server_error"}},
		{"server_error type", []string{`{"error":{"message":"boom","type":"server_error"}}`},
			&apierr.Error{Status: 502, Message: "boom", Type: "server_error"}},
		{"vLLM object error", []string{`{"object":"error","message":"bad","type":"BadRequestError","param":null,"code":400}`},
			&apierr.Error{Status: 400, Message: "bad", Type: "BadRequestError"}},
		{"a capacity code, no status named", []string{`{"error":{"message":"slow down","type":"tokens","code":"rate_limit_exceeded"}}`},
			&apierr.Error{Status: 429, Code: "rate_limit_exceeded", Message: "slow down", Type: "tokens"}},
		{"no status named", []string{`{"error":{"message":"try later","type":"vendor","code":"vendor_overloaded"}}`},
			&apierr.Error{Status: 0, Code: "vendor_overloaded", Message: "try later", Type: "vendor"}},
		{"a string", []string{`{"error":"plain"}`}, &apierr.Error{Status: 502, Message: "plain", Type: "server_error"}},
		{"after output", []string{text, `{"error":{"code":"invalid_value","message":"x","type":"invalid_request_error"}}`}, nil},
		{"no error chunk", []string{role}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewStream(testStreamOptions())
			var events []Event
			for _, c := range tc.chunks {
				ev, err := s.Chunk([]byte(c))
				if err != nil {
					t.Fatal(err)
				}
				events = append(events, ev...)
			}
			events = append(events, s.Fail(nil)...) // a no-op after an error chunk
			if err := validateEvents(events); err != nil || events[len(events)-1].Type != "response.failed" {
				t.Fatalf("%v\n%s", err, dumpEvents(events))
			}
			got := s.ErrorBeforeOutput()
			switch {
			case tc.want == nil && got != nil:
				t.Fatalf("got %+v, want none", got)
			case tc.want != nil && (got == nil || *got != *tc.want):
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestStreamUpstreamError: the upstream's own error is kept whether or not
// output was announced before it; a failure of another kind (a cut, a
// [DONE] without a finish reason) has none.
func TestStreamUpstreamError(t *testing.T) {
	text := `{"model":"m","choices":[{"index":0,"delta":{"content":"hi"}}]}`
	for _, tc := range []struct {
		name  string
		chunk string
		want  *apierr.Error
	}{
		{"client error, no code", `{"error":{"code":null,"message":"x","type":"invalid_request_error"}}`,
			&apierr.Error{Status: 400, Message: "x", Type: "invalid_request_error"}},
		{"llama.cpp status as code", `{"error":{"code":400,"message":"x","type":"invalid_request_error"}}`,
			&apierr.Error{Status: 400, Message: "x", Type: "invalid_request_error"}},
		{"server error", `{"error":{"message":"boom","type":"server_error"}}`, &apierr.Error{Status: 502, Message: "boom", Type: "server_error"}},
		{"no error chunk", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewStream(testStreamOptions())
			if _, err := s.Chunk([]byte(text)); err != nil {
				t.Fatal(err)
			}
			if tc.chunk != "" {
				if _, err := s.Chunk([]byte(tc.chunk)); err != nil {
					t.Fatal(err)
				}
			}
			s.Fail(apierr.StreamIncomplete("cut")) // a no-op after an error chunk
			got := s.UpstreamError()
			switch {
			case tc.want == nil && got != nil:
				t.Fatalf("got %+v, want none", got)
			case tc.want != nil && (got == nil || *got != *tc.want):
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			if s.ErrorBeforeOutput() != nil {
				t.Fatal("an error after output reported as before it")
			}
		})
	}
}

// TestErrorEnvelope: a Chat upstream's complete answer is its error when it
// is an error envelope (OpenAI's, or vLLM's object "error"), with the status
// the error stands for; anything else is not.
func TestErrorEnvelope(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       *apierr.Error
	}{
		{"client error", `{"error":{"message":"bad","type":"invalid_request_error","param":"n","code":"invalid_value"}}`,
			&apierr.Error{Status: 400, Code: "invalid_value", Message: "bad", Type: "invalid_request_error", Param: "n"}},
		{"server error, code null", `{"error":{"message":"boom","type":"server_error","param":null,"code":null}}`,
			&apierr.Error{Status: 502, Message: "boom", Type: "server_error"}},
		// A status sent as the code is none, a 429's rate_limit_exceeded;
		// llama.cpp's context overflow is context_length_exceeded
		// (apierr.FromUpstream), the status kept.
		{"llama.cpp status as code", `{"error":{"code":400,"message":"bad","type":"invalid_request_error"}}`,
			&apierr.Error{Status: 400, Message: "bad", Type: "invalid_request_error"}},
		{"llama.cpp rate limit", `{"error":{"code":429,"message":"too many","type":"rate_limit_error"}}`,
			&apierr.Error{Status: 429, Code: "rate_limit_exceeded", Message: "too many", Type: "rate_limit_error"}},
		{"llama.cpp context overflow", `{"error":{"code":400,"message":"long","type":"exceed_context_size_error","n_prompt_tokens":5000,"n_ctx":4096}}`,
			&apierr.Error{Status: 400, Code: "context_length_exceeded", Message: "long", Type: "invalid_request_error"}},
		{"vLLM object error", `{"object":"error","message":"bad","type":"BadRequestError","param":null,"code":400}`,
			&apierr.Error{Status: 400, Message: "bad", Type: "BadRequestError"}},
		{"a chat.completion", `{"object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`, nil},
		{"error null", `{"error":null,"choices":[]}`, nil},
		{"not an object", `[{"error":{"message":"x"}}]`, nil},
		{"not json", `{"error":`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ErrorEnvelope([]byte(tc.body))
			switch {
			case tc.want == nil && got != nil:
				t.Fatalf("got %+v, want none", got)
			case tc.want != nil && (got == nil || *got != *tc.want):
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestStreamCompletion: a chat.completion answering a streaming request
// becomes a valid event stream whose output is FromChatResponse's, tool
// calls without ids kept apart by position.
func TestStreamCompletion(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		terminal   string
		output     []string
	}{
		{"tool calls without ids", `{"object":"chat.completion","model":"llama-x","choices":[{"index":0,"message":{"role":"assistant","content":null,` +
			`"tool_calls":[{"type":"function","function":{"name":"f0","arguments":"{\"a\":1}"}},{"type":"function","function":{"name":"f1","arguments":"{\"b\":2}"}}]},"finish_reason":"tool_calls"}]}`,
			"response.completed", []string{`function_call completed: call_1 f0 {"a":1}`, `function_call completed: call_2 f1 {"b":2}`}},
		{"text and reasoning, length", `{"model":"llama-x","choices":[{"index":0,"message":{"role":"assistant","reasoning_content":"hm","content":"Once upon"},"finish_reason":"length"}],` +
			`"usage":{"prompt_tokens":3,"completion_tokens":4}}`,
			"response.incomplete", []string{"reasoning completed: hm", "message incomplete: Once upon"}},
		{"error envelope", `{"error":{"message":"temperature too high","type":"invalid_request_error","param":"temperature","code":"invalid_value"}}`,
			"response.failed", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewStream(testStreamOptions())
			events, err := s.Completion([]byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if err := validateEvents(events); err != nil || events[0].Type != "response.created" && tc.output != nil {
				t.Fatalf("%v\n%s", err, dumpEvents(events))
			}
			last := gjson.ParseBytes(events[len(events)-1].Data)
			if last.Get("type").Str != tc.terminal || !s.Done() {
				t.Fatalf("terminal %s", last.Raw)
			}
			var outs []string
			last.Get("response.output").ForEach(func(_, it gjson.Result) bool {
				outs = append(outs, summarizeItem(it))
				return true
			})
			if strings.Join(outs, "\n") != strings.Join(tc.output, "\n") {
				t.Fatalf("output:\n%s\nwant:\n%s", strings.Join(outs, "\n"), strings.Join(tc.output, "\n"))
			}
			resp, _, aerr, _ := FromChatResponse([]byte(tc.body), testStreamOptions())
			if tc.terminal == "response.failed" {
				if e := s.ErrorBeforeOutput(); aerr == nil || e == nil || *e != *aerr || e.Param != "temperature" || e.Status != 400 {
					t.Fatalf("error %+v, FromChatResponse %+v", e, aerr)
				}
				return
			}
			if aerr != nil || last.Get("response.model").Str != "llama-x" || !jsonEqual(t, []byte(last.Get("response.output").Raw), []byte(gjson.GetBytes(resp, "output").Raw)) {
				t.Fatalf("FromChatResponse %s %v, stream %s", resp, aerr, last.Raw)
			}
			if ev, err := s.Completion([]byte(tc.body)); ev != nil || err != nil {
				t.Fatalf("Completion after done: %v %v", ev, err)
			}
		})
	}
	for _, body := range []string{`not json`, `[]`, `{"choices":"x"}`, `{"choices":[]}`, `{"choices":[{"index":1,"message":{}}]}`} {
		s := NewStream(testStreamOptions())
		if ev, err := s.Completion([]byte(body)); err == nil || ev != nil || s.Done() {
			t.Errorf("%s: %v %v", body, ev, err)
		}
	}
}

// TestStreamSurrogateSplitInArguments: a surrogate pair split across two
// argument deltas is joined, as in text.
func TestStreamSurrogateSplitInArguments(t *testing.T) {
	s := NewStream(testStreamOptions())
	events := s.Start()
	for _, c := range []string{
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_e","function":{"name":"say","arguments":"{\"e\":\"\ud83d"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\ude00\"}"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
	} {
		ev, err := s.Chunk([]byte(c))
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, ev...)
	}
	events = append(events, s.Finish()...)
	if err := validateEvents(events); err != nil {
		t.Fatalf("%v\n%s", err, dumpEvents(events))
	}
	if got := gjson.GetBytes(events[len(events)-1].Data, "response.output.0.arguments").Str; got != "{\"e\":\"\U0001F600\"}" {
		t.Fatalf("arguments %q", got)
	}
}

// After a finish reason only usage may follow: later text is not added to
// the answer, later finish reasons do not change its status, and the usage
// chunk is still read.
func TestStreamAfterFinishOnlyUsageCounts(t *testing.T) {
	s := NewStream(testStreamOptions())
	var events []Event
	for _, c := range []string{
		`{"choices":[{"index":0,"delta":{"role":"assistant","content":"Hello"}}]}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}`,
		`{"choices":[{"index":0,"delta":{"content":" again"},"finish_reason":"stop"}]}`,
		`{"choices":[{"index":1,"delta":{"content":" other"}}]}`, // ignored, not malformed, once finished
		`{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`,
	} {
		evs, err := s.Chunk([]byte(c))
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, evs...)
	}
	events = append(events, s.Finish()...)
	last := gjson.ParseBytes(events[len(events)-1].Data)
	if last.Get("type").Str != "response.incomplete" || last.Get("response.output.0.content.0.text").Str != "Hello" ||
		last.Get("response.output.#").Int() != 1 || last.Get("response.usage.output_tokens").Int() != 2 {
		t.Fatalf("terminal event: %s", last.Raw)
	}
}

// A Chat usage without its two counts ({}, a prompt count alone) is no
// usage: the Response has none, so the gateway charges its estimate rather
// than zero tokens; after a counted usage, an uncounted one leaves it as it
// was.
func TestStreamUsageWithoutItsCounts(t *testing.T) {
	const text = `{"choices":[{"index":0,"delta":{"role":"assistant","content":"Hello"}}]}`
	const finish = `{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`
	for _, tt := range []struct {
		name   string
		usages []string
		want   string // the terminal Response's usage
	}{
		{"empty", []string{`{}`}, ""},
		{"prompt count alone", []string{`{"prompt_tokens":3}`}, ""},
		{"null completion count", []string{`{"prompt_tokens":3,"completion_tokens":null}`}, ""},
		{"both counts", []string{`{"prompt_tokens":3,"completion_tokens":2}`}, "3/2"},
		{"counted, then empty", []string{`{"prompt_tokens":3,"completion_tokens":2}`, `{}`}, "3/2"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			chunks := []string{text, finish}
			for _, u := range tt.usages {
				chunks = append(chunks, `{"choices":[],"usage":`+u+`}`)
			}
			events := feedChunks(t, NewStream(testStreamOptions()), chunks)
			u := gjson.GetBytes(events[len(events)-1].Data, "response.usage")
			got := ""
			if u.Exists() && u.Type != gjson.Null {
				got = u.Get("input_tokens").String() + "/" + u.Get("output_tokens").String()
			}
			if got != tt.want {
				t.Fatalf("the Response's usage %q (%s), want %q", got, u.Raw, tt.want)
			}
		})
	}
}
