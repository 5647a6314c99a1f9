package upstreamtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Ending says what happens after a stream's frames have been written.
type Ending int

const (
	// EndNormal ends the response cleanly after the frames (which should
	// already hold the terminal event, and "data: [DONE]" for chat). On a
	// WebSocket the socket stays open for the next response.create.
	EndNormal Ending = iota
	// EndCut closes the connection abruptly after the frames: no terminal
	// event, no end of the chunked body, no WebSocket close frame. On a
	// non-streaming request the connection is closed before any response byte.
	EndCut
	// EndHang stops writing and keeps the connection open until the client
	// goes away or the Server is closed, then closes it abruptly. On a
	// non-streaming request no response byte is ever written.
	EndHang
)

// Shape is how an error reaches the client.
type Shape int

const (
	// ShapeStatus is a non-2xx HTTP status with an OpenAI error body before
	// any event; on a WebSocket, the frame {"type":"error","status":N,"error":{…}}.
	ShapeStatus Shape = iota
	// ShapeErrorEvent is a 200 stream whose event is
	// {"type":"error","status":N,"error":{…}} (SSE "event: error"; the same
	// JSON as a WebSocket frame). On chat it is data: {"error":{…}} then [DONE].
	ShapeErrorEvent
	// ShapeFailed is a 200 stream whose event is
	// {"type":"response.failed","response":{"id":…,"status":"failed","error":{"code":…,"message":…}}}.
	// On chat it is data: {"error":{…}} then [DONE].
	ShapeFailed
)

// Frame is one unit of a stream.
type Frame struct {
	// Raw is written verbatim on HTTP streams, then flushed. It may be any
	// bytes: a whole SSE event, an "error:" field, an empty "data:" line,
	// garbage.
	Raw []byte
	// WS is the text message sent for this frame on a WebSocket. When nil it
	// is derived from Raw: the payload of Raw's "data:" lines, or nothing at
	// all when that payload is empty or "[DONE]".
	WS []byte
}

// Script is the behaviour of the server for one request. Scripts are plain
// data: build them with the constructors below and adjust fields as needed.
// The zero Script is the canned successful answer.
//
// Placeholders (PlaceholderID, PlaceholderModel, …) in Body and frames are
// replaced with this request's values.
type Script struct {
	// Status, when non-2xx, is sent with Header and Body before any event and
	// nothing else happens (Frames and End are ignored). On a WebSocket it
	// becomes the frame {"type":"error","status":Status,"error":<Body's
	// error>,"headers":{…}} and the socket stays open. 0 means 200.
	Status int
	// Header is added to the response headers (e.g. Retry-After).
	Header http.Header
	// Body is the non-streaming answer (or, with a non-2xx Status, the error
	// body). nil means the canned answer for the endpoint (or a generic
	// OpenAI error body for Status).
	Body []byte
	// Frames are written in order on a streaming /v1/responses request (SSE)
	// and on a WebSocket response.create. nil means the canned stream; a
	// non-nil empty slice means no frames at all.
	Frames []Frame
	// ChatFrames are written in order on a streaming /v1/chat/completions
	// request. nil means the canned stream; non-nil empty means none.
	ChatFrames []Frame
	// Latency is waited before the response headers (or before the first
	// WebSocket frame).
	Latency time.Duration
	// Gap is waited between consecutive frames.
	Gap time.Duration
	// End is what happens after the frames.
	End Ending

	// Text, when set, is the answer a stream carries, built per request
	// (Frames and ChatFrames are ignored): the canned event sequence (or
	// chunks) for Text in Deltas text deltas, with usage. A request whose
	// input (Responses) or messages (Chat) ends with an assistant message
	// whose text is a prefix of Text is a prefill: it is answered with the
	// rest of Text only, as a model continues its own message. Any other
	// request (a restart) gets all of Text. See Answer.
	Text string
	// Deltas is how many text deltas Text (or its rest) is sent in; 0: 3.
	Deltas int
	// StopAfterDeltas, when > 0, stops a Text stream after that many text
	// deltas: Tail (ChatTail on chat) follows, then End (EndCut: the
	// stream is cut there; EndHang: it stalls). 0: the whole stream.
	StopAfterDeltas int
	// Tail and ChatTail are written after a stopped Text stream, e.g. the
	// error event of FailAfterDeltas.
	Tail, ChatTail []Frame
	// BodyPrefix, when > 0, makes an answer sent as one body (a
	// non-streaming 2xx, or a non-2xx Status) whose End is EndCut or
	// EndHang send its headers and the first BodyPrefix bytes of its body
	// (flushed) before that End. Without it a non-streaming 2xx with such
	// an End sends no response byte at all, and a non-2xx ignores End.
	BodyPrefix int
}

// ---- canned frames (with placeholders) ----

func cannedRespEvents(pieces []string) [][]byte {
	return responsesEvents(PlaceholderID, PlaceholderItemID, PlaceholderModel, rawJSON(PlaceholderCreatedAt), pieces)
}

func cannedChatChunks(pieces []string, usage bool) [][]byte {
	return chatChunks(ChatSpec{
		ID: PlaceholderID, Model: PlaceholderModel,
		Text: strings.Join(pieces, ""), Deltas: len(pieces), Usage: usage,
	}, rawJSON(PlaceholderCreatedAt))
}

func cannedRespFrames() []Frame      { return eventFrames(cannedRespEvents(cannedPieces())) }
func cannedChatFrames() []Frame      { return dataFrames(cannedChatChunks(cannedPieces(), false)) }
func cannedChatUsageFrames() []Frame { return dataFrames(cannedChatChunks(cannedPieces(), true)) }

func cannedRespBody() []byte {
	pieces := cannedPieces()
	return marshal(completedResponse(PlaceholderID, PlaceholderItemID, PlaceholderModel, rawJSON(PlaceholderCreatedAt), pieces))
}

func cannedChatBody() []byte {
	pieces := cannedPieces()
	return chatCompletion(PlaceholderID, PlaceholderModel, rawJSON(PlaceholderCreatedAt), strings.Join(pieces, ""), len(pieces))
}

func head(fs []Frame, n int) []Frame {
	n = max(0, min(n, len(fs)))
	return append([]Frame{}, fs[:n]...)
}

func insertAt(fs []Frame, i int, f ...Frame) []Frame {
	i = max(0, min(i, len(fs)))
	out := append([]Frame{}, fs[:i]...)
	out = append(out, f...)
	return append(out, fs[i:]...)
}

// ---- constructors ----

// Canned is the canned successful answer: "Hello from <Name>" in three
// deltas, echoing the request's model. It is the zero Script.
func Canned() Script { return Script{} }

// Slow is the canned answer with gap between frames.
func Slow(gap time.Duration) Script { return Script{Gap: gap} }

// CutAfter writes the first n frames of the canned stream (n events on
// /v1/responses, n chunks on chat) and then closes the connection abruptly.
// On a non-streaming request the connection is closed without an answer.
func CutAfter(n int) Script {
	return Script{Frames: head(cannedRespFrames(), n), ChatFrames: head(cannedChatFrames(), n), End: EndCut}
}

// DoneOnly answers a stream (on either endpoint) with a 200 whose only
// event is "data: [DONE]": an answer that ends with nothing in it. On a
// WebSocket nothing is sent (a [DONE] frame is not).
func DoneOnly() Script {
	done := []Frame{SSEData([]byte("[DONE]"))}
	return Script{Frames: done, ChatFrames: done}
}

// HangAfter writes the first n frames of the canned stream and then stops
// writing, holding the connection until the client leaves or the Server is
// closed. HangAfter(0) sends the stream headers and nothing else.
func HangAfter(n int) Script {
	return Script{Frames: head(cannedRespFrames(), n), ChatFrames: head(cannedChatFrames(), n), End: EndHang}
}

// HangMidBody answers a non-streaming request with its headers and the
// first n bytes of its body (the canned JSON unless Body is set), then
// stops writing, holding the connection until the client leaves or the
// Server is closed. On a streaming request it is HangAfter of the whole
// canned stream.
func HangMidBody(n int) Script { return Script{BodyPrefix: n, End: EndHang} }

// ErrorField writes the first afterEvents frames of the canned stream, then
// the SSE frame "error: <errJSON>\n\n" (an SSE field named "error", as
// llama.cpp's server sends), and ends the response cleanly. nil errJSON means
// {"code":500,"message":"Internal server error","type":"server_error"}. On a
// WebSocket the frame is {"type":"error","status":500,"error":<errJSON>}.
func ErrorField(errJSON []byte, afterEvents int) Script {
	if errJSON == nil {
		errJSON = []byte(`{"code":500,"message":"Internal server error","type":"server_error"}`)
	}
	raw := append(append([]byte("error: "), bytes.TrimSpace(errJSON)...), "\n\n"...)
	ws := marshal(obj{{"type", "error"}, {"status", 500}, {"error", rawJSON(bytes.TrimSpace(errJSON))}})
	f := Frame{Raw: raw, WS: ws}
	return Script{
		Frames:     append(head(cannedRespFrames(), afterEvents), f),
		ChatFrames: append(head(cannedChatFrames(), afterEvents), f),
	}
}

// StampedDeltas is a stream of deltas text deltas, gap apart (every frame
// is; the stream has 8 more: 4 before the deltas and 4 after on
// /v1/responses, 1 before and 1 or 2 after on chat), each delta's text the
// time it was written in Unix nanoseconds (PlaceholderEmitTime, 19 digits).
// A client on the same host takes arrival − emit per delta as the latency
// the path added to that frame, which the benchmark of a proxy compares
// with the direct path. The done events' texts carry their own write
// times, not the deltas'. On a WebSocket the frames are stamped alike.
func StampedDeltas(deltas int, gap time.Duration) Script {
	pieces := make([]string, max(deltas, 1))
	for i := range pieces {
		pieces[i] = PlaceholderEmitTime
	}
	created := rawJSON(PlaceholderCreatedAt)
	return Script{
		Frames: eventFrames(responsesEvents(PlaceholderID, PlaceholderItemID, PlaceholderModel, created, pieces)),
		ChatFrames: dataFrames(chatChunks(ChatSpec{ID: PlaceholderID, Model: PlaceholderModel,
			Text: strings.Join(pieces, ""), Deltas: len(pieces)}, created)),
		Gap: gap,
	}
}

// WithEmptyData is the canned stream with empty data lines between its
// frames, alternating "data:\n\n" and "data: \n\n". They are not sent on a
// WebSocket.
func WithEmptyData() Script {
	interleave := func(fs []Frame) []Frame {
		var out []Frame
		for i, f := range fs {
			out = append(out, f)
			if i < len(fs)-1 {
				if i%2 == 0 {
					out = append(out, RawFrame([]byte("data:\n\n")))
				} else {
					out = append(out, RawFrame([]byte("data: \n\n")))
				}
			}
		}
		return out
	}
	return Script{Frames: interleave(cannedRespFrames()), ChatFrames: interleave(cannedChatFrames())}
}

// Garbage is the canned stream with the frame "data: not json{{\n\n" right
// after the first text delta (on a WebSocket, the text message "not json{{").
func Garbage() Script {
	g := Frame{Raw: []byte("data: not json{{\n\n"), WS: []byte("not json{{")}
	// Responses: created, in_progress, item added, part added, delta → index 5.
	return Script{Frames: insertAt(cannedRespFrames(), 5, g), ChatFrames: insertAt(cannedChatFrames(), 2, g)}
}

// Oversize is the canned stream with one extra text delta whose delta text is
// n bytes ("x" repeated, after a space), so that event's data line is longer
// than n bytes.
func Oversize(n int) Script {
	p := cannedPieces()
	pieces := []string{p[0], " " + strings.Repeat("x", max(n, 0))}
	pieces = append(pieces, p[1:]...)
	return Script{
		Frames:     eventFrames(cannedRespEvents(pieces)),
		ChatFrames: dataFrames(cannedChatChunks(pieces, false)),
	}
}

// Status429 is a 429 with a Retry-After header (whole seconds, rounded up)
// and Retry-After-Ms when retryAfter > 0, and the body
// {"error":{"message":"Rate limit reached … Please try again in 2s.","type":"requests","param":null,"code":"rate_limit_exceeded"}}.
func Status429(retryAfter time.Duration) Script {
	h := http.Header{}
	wait := "1s"
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(int64(math.Ceil(retryAfter.Seconds())), 10))
		h.Set("Retry-After-Ms", strconv.FormatInt(retryAfter.Milliseconds(), 10))
		if retryAfter < time.Second {
			wait = strconv.FormatInt(retryAfter.Milliseconds(), 10) + "ms"
		} else {
			wait = strconv.FormatFloat(retryAfter.Seconds(), 'f', -1, 64) + "s"
		}
	}
	msg := "Rate limit reached for " + PlaceholderModel + " in organization org-upstreamtest on requests per min (RPM): " +
		"Limit 3, Used 3, Requested 1. Please try again in " + wait + "."
	return Script{Status: http.StatusTooManyRequests, Header: h, Body: ErrorBody(msg, "requests", "rate_limit_exceeded", "")}
}

// Status5xx is the given status (500, 502, 503, …) with a generic OpenAI
// server_error body.
func Status5xx(code int) Script { return Script{Status: code, Body: statusErrorBody(code)} }

// Failure is an error in the given shape. body is an OpenAI error envelope
// such as ErrorBody returns; status is the HTTP status (ShapeStatus) or the
// "status" of the error event.
func Failure(shape Shape, status int, body []byte) Script {
	if shape == ShapeStatus {
		return Script{Status: status, Body: body}
	}
	inner := innerError(body)
	var ev []byte
	if shape == ShapeFailed {
		var e struct {
			Code    any    `json:"code"`
			Message string `json:"message"`
		}
		_ = json.Unmarshal(inner, &e)
		ev = marshal(obj{{"type", "response.failed"}, {"response", obj{
			{"id", PlaceholderID}, {"status", "failed"},
			{"error", obj{{"code", e.Code}, {"message", e.Message}}},
		}}})
	} else {
		ev = marshal(obj{{"type", "error"}, {"status", status}, {"error", rawJSON(inner)}})
	}
	chatErr := marshal(obj{{"error", rawJSON(inner)}})
	return Script{
		Frames:     []Frame{SSEEvent(ev)},
		ChatFrames: []Frame{SSEData(chatErr), SSEData([]byte("[DONE]"))},
	}
}

// QuotaEvent is a usage-limit failure (code usage_limit_reached, type
// invalid_request_error, status 429) before response.created, in the given
// shape: ShapeErrorEvent gives
// {"type":"error","status":429,"error":{"type":"invalid_request_error","code":"usage_limit_reached","message":…}},
// ShapeFailed gives
// {"type":"response.failed","response":{"id":…,"status":"failed","error":{"code":"usage_limit_reached","message":…}}},
// ShapeStatus a 429 with that error.
func QuotaEvent(shape Shape) Script {
	body := marshal(obj{{"error", obj{
		{"type", "invalid_request_error"},
		{"code", "usage_limit_reached"},
		{"message", "The usage limit has been reached for this account. Try again later."},
	}}})
	return Failure(shape, http.StatusTooManyRequests, body)
}

// PreviousNotFound answers like OpenAI does for an unknown
// previous_response_id: status 400,
// {"error":{"message":"Previous response with id '<id>' not found.","type":"invalid_request_error","param":"previous_response_id","code":"previous_response_not_found"}},
// in the given shape. Options.StrictPrevious plays it automatically.
func PreviousNotFound(shape Shape) Script {
	body := ErrorBody("Previous response with id '"+PlaceholderPreviousResponseID+"' not found.",
		"invalid_request_error", "previous_response_not_found", "previous_response_id")
	return Failure(shape, http.StatusBadRequest, body)
}

// AfterCreated moves a failure after response.created: a non-2xx Status
// becomes a 200 stream of response.created then the error event
// {"type":"error","status":Status,"error":{…}} (chat: the role chunk, then
// data: {"error":{…}} and [DONE]); explicit Frames get the canned
// response.created in front (ChatFrames the canned role chunk). The canned
// stream (nil frames) is returned unchanged. Use it for "never replay after
// created" tests.
func (s Script) AfterCreated() Script {
	created := cannedRespFrames()[0]
	role := cannedChatFrames()[0]
	if s.Status != 0 && (s.Status < 200 || s.Status > 299) {
		body := s.Body
		if body == nil {
			body = statusErrorBody(s.Status)
		}
		f := Failure(ShapeErrorEvent, s.Status, body)
		s.Status, s.Body = 0, nil
		s.Frames = append([]Frame{created}, f.Frames...)
		s.ChatFrames = append([]Frame{role}, f.ChatFrames...)
		return s
	}
	if s.Frames != nil {
		s.Frames = append([]Frame{created}, s.Frames...)
	}
	if s.ChatFrames != nil {
		s.ChatFrames = append([]Frame{role}, s.ChatFrames...)
	}
	return s
}

// ---- errors ----

func innerError(body []byte) []byte {
	var env struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &env) == nil && len(env.Error) > 0 && env.Error[0] == '{' {
		return env.Error
	}
	return marshal(errorObject(strings.TrimSpace(string(body)), "server_error", "", ""))
}

func statusErrorBody(status int) []byte {
	switch {
	case status == http.StatusUnauthorized:
		return ErrorBody("Incorrect API key provided.", "invalid_request_error", "invalid_api_key", "")
	case status == http.StatusTooManyRequests:
		return ErrorBody("Rate limit reached. Please try again in 1s.", "requests", "rate_limit_exceeded", "")
	case status == http.StatusServiceUnavailable:
		return ErrorBody("The server is overloaded or not ready yet.", "server_error", "", "")
	case status >= 500:
		return ErrorBody("The server had an error while processing your request. Sorry about that!", "server_error", "", "")
	case status == http.StatusNotFound:
		return ErrorBody("Not found.", "invalid_request_error", "", "")
	}
	return ErrorBody(fmt.Sprintf("Request failed with status %d.", status), "invalid_request_error", "", "")
}

// ---- compiled form ----

type cframe struct {
	sse tmpl
	ws  tmpl // nil: not sent on a WebSocket
	// stamped: the frame holds PlaceholderEmitTime, set just before it is
	// rendered.
	stamped bool
}

type plan struct {
	status     int
	header     http.Header
	body       tmpl // nil: canned
	wsError    tmpl // the WebSocket error frame for a non-2xx status
	resp, chat []cframe
	respCanned bool
	chatCanned bool
	latency    time.Duration
	gap        time.Duration
	end        Ending
	text       *textPlan // a Text script: frames built per request
	bodyPrefix int       // Script.BodyPrefix
}

func (p *plan) failed() bool { return p.status != 0 && (p.status < 200 || p.status > 299) }

func compileFrames(fs []Frame) []cframe {
	out := make([]cframe, len(fs))
	for i, f := range fs {
		out[i].sse = compile(f.Raw)
		ws := f.WS
		if ws == nil {
			ws = wsFromRaw(f.Raw)
		}
		out[i].ws = compile(ws)
		out[i].stamped = out[i].sse.stamped() || out[i].ws.stamped()
	}
	return out
}

// wsFromRaw is the payload of raw's data lines, nil when empty or [DONE].
func wsFromRaw(raw []byte) []byte {
	var data [][]byte
	for line := range bytes.Lines(raw) {
		line = bytes.TrimRight(line, "\r\n")
		if v, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			data = append(data, bytes.TrimPrefix(v, []byte(" ")))
		}
	}
	d := bytes.Join(data, []byte("\n"))
	if len(bytes.TrimSpace(d)) == 0 || string(d) == "[DONE]" {
		return nil
	}
	return d
}

func compileScript(sc Script) *plan {
	p := &plan{
		status: sc.Status, header: sc.Header.Clone(),
		latency: sc.Latency, gap: sc.Gap, end: sc.End, bodyPrefix: sc.BodyPrefix,
		respCanned: sc.Frames == nil, chatCanned: sc.ChatFrames == nil,
		resp: compileFrames(sc.Frames), chat: compileFrames(sc.ChatFrames),
	}
	if sc.Text != "" {
		p.text = &textPlan{text: sc.Text, deltas: sc.Deltas, stop: sc.StopAfterDeltas,
			tail: compileFrames(sc.Tail), chatTail: compileFrames(sc.ChatTail)}
		p.respCanned, p.chatCanned = false, false
	}
	body := sc.Body
	if body == nil && p.failed() {
		body = statusErrorBody(p.status)
	}
	p.body = compile(body)
	if p.failed() {
		o := obj{{"type", "error"}, {"status", p.status}, {"error", rawJSON(innerError(body))}}
		if len(sc.Header) > 0 {
			var hs obj
			for _, k := range slices.Sorted(maps.Keys(sc.Header)) {
				hs = append(hs, kv{strings.ToLower(k), strings.Join(sc.Header[k], ", ")})
			}
			o = append(o, kv{"headers", hs})
		}
		p.wsError = compile(marshal(o))
	}
	return p
}
