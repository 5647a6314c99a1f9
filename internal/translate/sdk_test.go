package translate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3/packages/respjson"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"
)

// These tests decode what a Stream emits with the real openai-go SDK: the
// SSE decoder and stream iterator a Go client uses, the event union, and the
// SDK's own accumulator. Every field the SDK marks required must be present
// and of the right type, recursively (items, parts, the response object).

// notSent lists required SDK fields this gateway does not produce because the
// information does not exist behind a Chat upstream.
var notSent = map[string]bool{
	"access_programs": true, // OpenAI account programs
}

// checkRequired walks an SDK value decoded from JSON and reports required
// fields that were absent and fields whose JSON did not fit their type.
func checkRequired(t *testing.T, path string, v reflect.Value) {
	t.Helper()
	for _, p := range requiredProblems(path, v) {
		t.Error(p)
	}
}

func requiredProblems(path string, v reflect.Value) (problems []string) {
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return
	}
	meta := v.FieldByName("JSON")
	if !meta.IsValid() || meta.Kind() != reflect.Struct {
		return
	}
	typ := v.Type()
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		mf := meta.FieldByName(f.Name)
		if !mf.IsValid() {
			continue
		}
		field, ok := mf.Interface().(respjson.Field)
		if !ok {
			continue
		}
		raw := field.Raw()
		if strings.Contains(f.Tag.Get("api"), "required") && raw == "" && !notSent[name] {
			problems = append(problems, fmt.Sprintf("%s.%s: required field missing", path, name))
		}
		if raw == "" || raw == "null" {
			continue
		}
		if !field.Valid() {
			problems = append(problems, fmt.Sprintf("%s.%s: does not decode: %s", path, name, raw))
			continue
		}
		problems = append(problems, nestedProblems(path+"."+name, v.Field(i))...)
	}
	return problems
}

func nestedProblems(path string, fv reflect.Value) []string {
	switch fv.Kind() {
	case reflect.Struct:
		if m := fv.MethodByName("AsAny"); m.IsValid() && m.Type().NumIn() == 0 {
			return requiredProblems(path, m.Call(nil)[0])
		}
		return requiredProblems(path, fv)
	case reflect.Slice:
		var out []string
		for j := range fv.Len() {
			out = append(out, nestedProblems(fmt.Sprintf("%s[%d]", path, j), fv.Index(j))...)
		}
		return out
	}
	return nil
}

// TestCheckersCatchMistakes makes sure the two checkers the stream tests rely
// on do fail on broken events.
func TestCheckersCatchMistakes(t *testing.T) {
	var ev responses.ResponseStreamEventUnion
	if err := json.Unmarshal([]byte(`{"type":"response.output_text.delta","sequence_number":3,"item_id":"msg_1","delta":"a"}`), &ev); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(requiredProblems("e", reflect.ValueOf(ev.AsAny())), "\n")
	for _, want := range []string{"e.content_index: required field missing", "e.logprobs: required field missing", "e.output_index: required field missing"} {
		if !strings.Contains(got, want) {
			t.Errorf("checker missed %q; got:\n%s", want, got)
		}
	}
	if err := json.Unmarshal([]byte(`{"type":"response.completed","sequence_number":3,"response":{"id":"r","output":[{"type":"message","id":"m","status":"completed","role":"assistant","content":[{"type":"output_text","text":"x"}]}]}}`), &ev); err != nil {
		t.Fatal(err)
	}
	got = strings.Join(requiredProblems("e", reflect.ValueOf(ev.AsAny())), "\n")
	for _, want := range []string{"e.response.created_at: required field missing", "e.response.output[0].content[0].annotations: required field missing"} {
		if !strings.Contains(got, want) {
			t.Errorf("checker missed %q; got:\n%s", want, got)
		}
	}

	good, _ := runStream(t, "reasoning_tools.txt", testStreamOptions())
	mutations := map[string]func([]Event) []Event{
		"drop a delta": func(e []Event) []Event { return append(e[:10:10], e[11:]...) },
		"swap two events": func(e []Event) []Event {
			e = append([]Event(nil), e...)
			e[3], e[4] = e[4], e[3]
			return e
		},
		"two terminals": func(e []Event) []Event { return append(e[:len(e):len(e)], e[len(e)-1]) },
		"wrong output_index": func(e []Event) []Event {
			e = append([]Event(nil), e...)
			e[10].Data = bytes.Replace(e[10].Data, []byte(`"output_index":1`), []byte(`"output_index":2`), 1)
			return e
		},
		"done text differs": func(e []Event) []Event {
			e = append([]Event(nil), e...)
			e[6].Data = bytes.Replace(e[6].Data, []byte(`cities.`), []byte(`cities!`), 1)
			return e
		},
	}
	for name, mutate := range mutations {
		events := mutate(good)
		// renumber so only the intended mistake remains
		for i := range events {
			events[i].Data = renumber(events[i].Data, i)
		}
		if validateEvents(events) == nil {
			t.Errorf("validator accepted %s", name)
		}
	}
}

func renumber(data []byte, seq int) []byte {
	r := gjson.GetBytes(data, "sequence_number")
	out := append([]byte(nil), data[:r.Index]...)
	out = append(out, fmt.Sprint(seq)...)
	return append(out, data[r.Index+len(r.Raw):]...)
}

// sdkEcho is a request echo with every field a real client would send.
func sdkEcho(t *testing.T) RequestEcho {
	_, info, aerr := ToChat([]byte(`{"model":"qwen3-8b","instructions":"Be brief.","input":"hi","stream":true,
		"tools":[{"type":"function","name":"get_weather","description":"Weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}},"strict":false}],
		"tool_choice":"auto","parallel_tool_calls":true,"reasoning":{"effort":"low","summary":"auto"},"store":false}`), nil, RequestOptions{})
	if aerr != nil {
		t.Fatal(aerr)
	}
	return info.Echo
}

func sseBody(events []Event) []byte {
	var b bytes.Buffer
	for _, e := range events {
		b.WriteString("event: ")
		b.WriteString(e.Type)
		b.WriteString("\ndata: ")
		b.Write(e.Data)
		b.WriteString("\n\n")
	}
	return b.Bytes()
}

func TestSDKDecodesEvents(t *testing.T) {
	for _, file := range []string{"text_only.txt", "reasoning_text.txt", "reasoning_tools.txt", "length.txt", "error_mid.txt", "whitespace_tool.txt", "refusal.txt", "cut.txt"} {
		t.Run(file, func(t *testing.T) {
			opts := testStreamOptions()
			opts.Model = "qwen3-8b"
			opts.Request = sdkEcho(t)
			events, _ := runStream(t, file, opts)

			// 1. The SSE path a Go client takes: ssestream + json.Unmarshal
			// into the event union.
			res := &http.Response{
				Header: http.Header{"Content-Type": []string{"text/event-stream"}},
				Body:   io.NopCloser(bytes.NewReader(sseBody(events))),
			}
			stream := ssestream.NewStream[responses.ResponseStreamEventUnion](ssestream.NewDecoder(res), nil)
			n := 0
			for stream.Next() {
				ev := stream.Current()
				if n >= len(events) || ev.Type != events[n].Type || ev.SequenceNumber != int64(n) {
					t.Fatalf("SDK event %d: type %q seq %d", n, ev.Type, ev.SequenceNumber)
				}
				n++
			}
			if err := stream.Err(); err != nil || n != len(events) {
				t.Fatalf("SDK stream: %d of %d events, err %v", n, len(events), err)
			}

			// 2. Each event on its own, with the typed variant checked for
			// every required field.
			var text strings.Builder
			for i, e := range events {
				var ev responses.ResponseStreamEventUnion
				if err := json.Unmarshal(e.Data, &ev); err != nil {
					t.Fatalf("event %d: %v", i, err)
				}
				variant := ev.AsAny()
				if variant == nil {
					t.Fatalf("event %d: SDK does not know type %q", i, ev.Type)
				}
				checkRequired(t, fmt.Sprintf("event[%d](%s)", i, e.Type), reflect.ValueOf(variant))
				switch v := variant.(type) {
				case responses.ResponseTextDeltaEvent:
					if v.ItemID == "" || !v.JSON.OutputIndex.Valid() || !v.JSON.ContentIndex.Valid() {
						t.Errorf("event %d: %s", i, e.Data)
					}
					text.WriteString(v.Delta)
				case responses.ResponseCompletedEvent:
					if v.Response.ID != "resp_test" || v.Response.Status != responses.ResponseStatusCompleted || v.Response.Model != "qwen3-8b" {
						t.Errorf("completed: %s", e.Data)
					}
					if got := v.Response.OutputText(); got != text.String() {
						t.Errorf("Response.OutputText() = %q, deltas %q", got, text.String())
					}
				case responses.ResponseIncompleteEvent:
					if v.Response.IncompleteDetails.Reason != "max_output_tokens" {
						t.Errorf("incomplete: %s", e.Data)
					}
				case responses.ResponseFailedEvent:
					if v.Response.Error.Code == "" || v.Response.Error.Message == "" {
						t.Errorf("failed: %s", e.Data)
					}
				case responses.ResponseOutputItemDoneEvent:
					if v.Item.ID == "" || v.Item.Status == "" {
						t.Errorf("item done: %s", e.Data)
					}
				case responses.ResponseFunctionCallArgumentsDoneEvent:
					if v.ItemID == "" || !v.JSON.Arguments.Valid() {
						t.Errorf("arguments done: %s", e.Data)
					}
				}
			}

			// 3. The SDK's accumulator agrees with the terminal response.
			var acc responses.ResponseAccumulator
			for i, e := range events {
				var ev responses.ResponsesServerEventUnion
				if err := json.Unmarshal(e.Data, &ev); err != nil {
					t.Fatalf("event %d as server event: %v", i, err)
				}
				if err := acc.AddEvent(ev); err != nil {
					t.Fatalf("accumulator rejects event %d: %v\n%s", i, err, e.Data)
				}
			}
			final, err := acc.ReconstructedResponse()
			if err != nil {
				t.Fatalf("accumulator: %v", err)
			}
			last := gjson.ParseBytes(events[len(events)-1].Data).Get("response")
			if final.ID != "resp_test" || string(final.Status) != last.Get("status").Str || len(final.Output) != len(last.Get("output").Array()) {
				t.Errorf("reconstructed response %s", final.RawJSON())
			}
			snap := acc.Snapshot()
			for _, o := range snap.Output {
				item := last.Get("output").Array()[o.OutputIndex]
				if item.Get("id").Str != o.ItemID || item.Get("type").Str != o.Type {
					t.Errorf("snapshot item %d: %+v vs %s", o.OutputIndex, o, item.Raw)
				}
				if o.Type == "function_call" && (o.Arguments != item.Get("arguments").Str || o.CallID != item.Get("call_id").Str || o.Name != item.Get("name").Str) {
					t.Errorf("snapshot call %+v vs %s", o, item.Raw)
				}
				if o.Type == "message" && item.Get("content.0.type").Str == "output_text" && o.Text[0] != item.Get("content.0.text").Str {
					t.Errorf("snapshot text %q vs %s", o.Text[0], item.Raw)
				}
			}
		})
	}
}

func TestSDKDecodesFromChatResponse(t *testing.T) {
	opts := testStreamOptions()
	opts.Request = sdkEcho(t)
	body := []byte(`{"id":"x","object":"chat.completion","model":"qwen3-8b","choices":[{"index":0,"finish_reason":"tool_calls",
		"message":{"role":"assistant","content":"ok","reasoning_content":"r","tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{}"}}]}}],
		"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3,"prompt_tokens_details":{"cached_tokens":1},"completion_tokens_details":{"reasoning_tokens":1}}}`)
	raw, _, aerr, _ := FromChatResponse(body, opts)
	if aerr != nil {
		t.Fatal(aerr)
	}
	var r responses.Response
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	checkRequired(t, "response", reflect.ValueOf(r))
	if r.OutputText() != "ok" || len(r.Output) != 3 || r.Usage.OutputTokensDetails.ReasoningTokens != 1 || r.Usage.InputTokensDetails.CachedTokens != 1 {
		t.Errorf("%s", raw)
	}
	if fc := r.Output[2].AsFunctionCall(); fc.CallID != "call_1" || fc.Name != "get_weather" || fc.Arguments != "{}" {
		t.Errorf("function call %+v", fc)
	}
}
