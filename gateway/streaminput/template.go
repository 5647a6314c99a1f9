package streaminput

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway/apierr"
)

// Endpoints a session's request may target.
const (
	EndpointResponses = "/v1/responses"
	EndpointChat      = "/v1/chat/completions"
)

// template is a validated request template.
type template struct {
	endpoint string
	chat     bool
	body     []byte
	model    string
	stream   bool
}

func parseTemplate(endpoint string, body []byte) (template, *apierr.Error) {
	t := template{endpoint: endpoint, body: body}
	switch endpoint {
	case EndpointResponses:
	case EndpointChat:
		t.chat = true
	default:
		return template{}, apierr.Invalid("endpoint", "invalid_value", "endpoint must be %q or %q, got %q", EndpointResponses, EndpointChat, endpoint)
	}
	if !gjson.ValidBytes(body) || !gjson.ParseBytes(body).IsObject() {
		return template{}, apierr.Invalid("template", apierr.CodeInvalidType, "template must be a JSON object (the request body without the streamed input)")
	}
	root := gjson.ParseBytes(body)
	model := root.Get("model")
	if model.Type != gjson.String || strings.TrimSpace(model.Str) == "" {
		return template{}, apierr.Invalid("template.model", apierr.CodeMissingField, "the template must name a model")
	}
	t.model = model.Str
	switch s := root.Get("stream"); {
	case !s.Exists() || s.Type == gjson.Null:
	case s.Type == gjson.True || s.Type == gjson.False:
		t.stream = s.Bool()
	default:
		return template{}, apierr.Invalid("template.stream", apierr.CodeInvalidType, "stream must be a boolean")
	}
	if t.chat {
		if m := root.Get("messages"); m.Exists() && m.Type != gjson.Null && !m.IsArray() {
			return template{}, apierr.Invalid("template.messages", apierr.CodeInvalidType, "messages must be an array")
		}
	} else if in := root.Get("input"); in.Exists() && in.Type != gjson.Null && in.Type != gjson.String && !in.IsArray() {
		return template{}, apierr.Invalid("template.input", apierr.CodeInvalidType, "input must be a string or an array of items")
	}
	return t, nil
}

// Headers that never travel with a session's dispatch, or are set by it.
var droppedHeaders = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Proxy-Authenticate": true,
	"Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true, "Host": true,
	"Content-Length": true, "Content-Type": true, "Content-Encoding": true, "Accept-Encoding": true,
	"Expect": true, "Cookie": true, "X-Streaming-Input": true,
}

// credentialHeaders are kept in memory only, never written to the store.
var credentialHeaders = []string{"Authorization", "Api-Key", "Proxy-Authorization"}

// splitHeaders separates a client's headers into those a session keeps
// (persisted with it) and its credentials (memory only).
func splitHeaders(h http.Header) (keep, cred http.Header) {
	keep, cred = http.Header{}, http.Header{}
	for k, v := range h {
		ck := http.CanonicalHeaderKey(k)
		if droppedHeaders[ck] {
			continue
		}
		keep[ck] = append([]string(nil), v...)
	}
	for _, k := range credentialHeaders {
		if v := keep.Values(k); len(v) > 0 {
			cred[k] = v
			keep.Del(k)
		}
	}
	return keep, cred
}

// envelope is what a durable session stores in its record's Template field:
// the template and the non-credential headers to dispatch with.
type envelope struct {
	V        int             `json:"v"`
	Template json.RawMessage `json:"template"`
	Headers  http.Header     `json:"headers,omitempty"`
}

func encodeEnvelope(t template, headers http.Header) []byte {
	b, _ := json.Marshal(envelope{V: 1, Template: t.body, Headers: headers})
	return b
}

func decodeEnvelope(endpoint string, b []byte) (template, http.Header, error) {
	var e envelope
	if err := json.Unmarshal(b, &e); err != nil {
		return template{}, nil, fmt.Errorf("decode session envelope: %w", err)
	}
	if e.V != 1 {
		return template{}, nil, fmt.Errorf("session envelope version %d is not supported", e.V)
	}
	t, aerr := parseTemplate(endpoint, envelopeTemplate(b))
	if aerr != nil {
		return template{}, nil, fmt.Errorf("stored template: %w", aerr)
	}
	if e.Headers == nil {
		e.Headers = http.Header{}
	}
	return t, e.Headers, nil
}

// envelopeTemplate is the template inside an encoded envelope, sharing its
// bytes.
func envelopeTemplate(env []byte) []byte {
	r := gjson.GetBytes(env, "template")
	if r.Index > 0 {
		return env[r.Index : r.Index+len(r.Raw) : r.Index+len(r.Raw)]
	}
	return []byte(r.Raw)
}
