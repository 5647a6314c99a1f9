package streaminput

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/internal/apierr"
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

// parseTemplate validates a request template: a JSON object (nested at
// most maxDepth levels, without a repeated top-level key) naming a model.
func parseTemplate(ctx context.Context, endpoint string, body []byte, maxDepth int) (template, *apierr.Error) {
	t := template{endpoint: endpoint, body: body}
	switch endpoint {
	case EndpointResponses:
	case EndpointChat:
		t.chat = true
	default:
		return template{}, apierr.Invalid("endpoint", apierr.CodeInvalidValue, "endpoint must be %q or %q, got %.100q", EndpointResponses, EndpointChat, endpoint)
	}
	if aerr := checkDepth(ctx, body, maxDepth, "the template"); aerr != nil {
		aerr.Param = "template"
		return template{}, aerr
	}
	if !gjson.ValidBytes(body) || !gjson.ParseBytes(body).IsObject() {
		return template{}, apierr.Invalid("template", apierr.CodeInvalidType, "template must be a JSON object (the request body without the streamed input)")
	}
	var model, stream, input, messages gjson.Result
	if aerr := forEachMember(ctx, gjson.ParseBytes(body), "template.", func(key string, v gjson.Result) {
		switch key {
		case "model":
			model = v
		case "stream":
			stream = v
		case "input":
			input = v
		case "messages":
			messages = v
		}
	}); aerr != nil {
		return template{}, aerr
	}
	switch {
	case model.Exists() && model.Type != gjson.Null && model.Type != gjson.String:
		return template{}, apierr.Invalid("template.model", apierr.CodeInvalidType, "model must be a string")
	case model.Type != gjson.String || strings.TrimSpace(model.Str) == "":
		return template{}, apierr.Invalid("template.model", apierr.CodeMissingField, "the template must name a model")
	}
	t.model = model.Str
	switch s := stream; {
	case !s.Exists() || s.Type == gjson.Null:
	case s.Type == gjson.True || s.Type == gjson.False:
		t.stream = s.Bool()
	default:
		return template{}, apierr.Invalid("template.stream", apierr.CodeInvalidType, "stream must be a boolean")
	}
	if t.chat {
		if m := messages; m.Exists() && m.Type != gjson.Null && !m.IsArray() {
			return template{}, apierr.Invalid("template.messages", apierr.CodeInvalidType, "messages must be an array")
		}
	} else if in := input; in.Exists() && in.Type != gjson.Null && in.Type != gjson.String && !in.IsArray() {
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

// isCredential reports whether a (canonical) header name is, or looks like,
// a credential (hostabi.LooksLikeCredential: the known ones, and any name
// that says it carries one, X-Goog-Api-Key, X-Auth-Token, …); a header
// whose value has a credential's shape is one too (splitHeaders). Such
// headers are dispatched from memory, never persisted.
func isCredential(name string) bool {
	return hostabi.LooksLikeCredential(strings.ToLower(name)) // one rule with recordings (Cookie never travels: droppedHeaders)
}

// splitHeaders separates a client's headers into those a session keeps
// (persisted with it and dispatched) and its credentials (dispatched from
// memory only). Hop-by-hop headers, and any header the client's Connection
// header names, are dropped from both.
func splitHeaders(h http.Header) (keep, cred http.Header) {
	keep, cred = http.Header{}, http.Header{}
	hop := map[string]bool{}
	for _, v := range h.Values("Connection") {
		for _, f := range strings.Split(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				hop[http.CanonicalHeaderKey(f)] = true
			}
		}
	}
	for k, v := range h {
		ck := http.CanonicalHeaderKey(k)
		switch {
		case droppedHeaders[ck] || hop[ck]:
		case isCredential(ck) || slices.ContainsFunc(v, hostabi.CredentialValue):
			cred[ck] = append(cred[ck], v...)
		default:
			keep[ck] = append(keep[ck], v...)
		}
	}
	return keep, cred
}

// envelope is what a durable session stores in its record's Template field:
// the template and the non-credential headers to dispatch with, and once
// the upstream request started, what it was sent (Audit).
type envelope struct {
	V        int             `json:"v"`
	Template json.RawMessage `json:"template"`
	Headers  http.Header     `json:"headers,omitempty"`
	Audit    *envelopeAudit  `json:"audit,omitempty"`
}

// envelopeAudit is what the upstream request was assembled from and how
// many chunks came after it started. It lives in the record because with a
// shared store the replica that answers GET …/{id} may not be the one that
// sent the request, and the late chunks may arrive on any replica (README
// "Several replicas (Redis)"); a restarted process reads it back too.
type envelopeAudit struct {
	Chunks   uint64 `json:"chunks"`
	Bytes    int64  `json:"bytes"`
	Complete bool   `json:"complete"`
	At       int64  `json:"started_at,omitempty"` // Unix nanoseconds
	Late     int    `json:"late_chunks,omitempty"`
}

// withAudit is env (an encoded envelope) holding audit instead of any
// audit it held. The audit is spliced in as the envelope's last member
// (where encodeEnvelope's field order puts it), so a started session's
// record writes copy the template's bytes once, as the record's own
// encoding does, and never re-encode it: a late chunk of a few bytes
// costs no JSON pass over a template of megabytes.
func withAudit(env []byte, audit envelopeAudit) []byte {
	base := env[:len(env)-1] // without the closing brace
	if r := gjson.GetBytes(env, "audit"); r.Exists() {
		if i := bytes.LastIndex(env[:r.Index], []byte(`,"audit"`)); i > 0 {
			base = env[:i]
		}
	}
	a, _ := json.Marshal(audit)
	out := make([]byte, 0, len(base)+len(`,"audit":}`)+len(a))
	out = append(append(append(out, base...), `,"audit":`...), a...)
	return append(out, '}')
}

// auditOf is the audit an encoded envelope holds, or nil: a session that
// has not started, or a record written before envelopes held one.
func auditOf(env []byte) *envelopeAudit {
	r := gjson.GetBytes(env, "audit")
	if !r.IsObject() {
		return nil
	}
	var a envelopeAudit
	if json.Unmarshal([]byte(r.Raw), &a) != nil {
		return nil
	}
	return &a
}

func encodeEnvelope(t template, headers http.Header) []byte {
	b, _ := json.Marshal(envelope{V: 1, Template: t.body, Headers: headers})
	return b
}

// decodeEnvelope reads a stored envelope. The envelope nests its template
// one level down (maxDepth+1 levels in all).
func decodeEnvelope(ctx context.Context, endpoint string, b []byte, maxDepth int) (template, http.Header, error) {
	if aerr := checkDepth(ctx, b, maxDepth+1, "the stored session envelope"); aerr != nil {
		return template{}, nil, aerr
	}
	var e envelope
	if err := json.Unmarshal(b, &e); err != nil {
		return template{}, nil, fmt.Errorf("decode session envelope: %w", err)
	}
	if e.V != 1 {
		return template{}, nil, fmt.Errorf("session envelope version %d is not supported", e.V)
	}
	t, aerr := parseTemplate(ctx, endpoint, envelopeTemplate(b), maxDepth)
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
