package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"
	"sort"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/gateway/upstream"
)

// minScrubKeyLen is the shortest api_key the scrubber looks for. A shorter
// key ("test", "sk-1", "none") matches ordinary text, so redacting it would
// corrupt model output, and the redaction would become an oracle: a client
// could make the model echo guesses and watch which come back [redacted].
// Real keys are far longer; an operator with a key this short has no secret
// to protect.
const minScrubKeyLen = 8

var (
	redactedText = []byte("[redacted]")
	bearerText   = []byte("Bearer ")
)

// scrubber replaces the upstreams' configured API keys with [redacted] in
// upstream text on its way to a client or a log line: error bodies, every
// event or WebSocket frame, response headers. An upstream that quotes the
// credential it received ("Incorrect API key provided: Bearer sk-…") must not
// hand the operator's key to a client.
//
// It is built once; a nil scrubber (no keyed upstream) does nothing. Each
// needle costs one bytes.Index per payload and nothing is allocated unless a
// key is found. "Bearer <key>" is replaced as a whole.
//
// Besides the plain key it looks for the key's JSON-escaped forms when they
// differ (keys with quotes, backslashes, control characters, <, >, & or /,
// which JSON encoders may escape). An upstream may escape any character
// (\u0073\u006b… or a\/b), so a JSON string with a \u or \/ escape is also
// checked decoded (decodedStrings): a client's JSON parser, the gateway's own
// error handling, a policy and a recording all read the decoded text, and
// SECURITY.md promises none of them sees a key. Matching is per payload: a
// key split across two events (two output_text deltas) is not seen, which
// only matters if a model could echo the key, and it never sees it.
type scrubber struct {
	needles []needle // longest first, so a key inside a longer key is not half-redacted
}

type needle struct {
	b     []byte
	s     string
	lower string // s in lower case, for header names (Header)
}

// scrubberFor collects the api_key of every upstream in the pool.
func scrubberFor(p *upstream.Pool) *scrubber {
	var keys []string
	for _, u := range p.Upstreams() {
		keys = append(keys, u.Config().APIKey)
	}
	return newScrubber(keys)
}

func newScrubber(keys []string) *scrubber {
	seen := map[string]bool{}
	var needles []needle
	add := func(n string) {
		if len(n) >= minScrubKeyLen && !seen[n] {
			seen[n] = true
			needles = append(needles, needle{b: []byte(n), s: n, lower: strings.ToLower(n)})
		}
	}
	for _, k := range keys {
		if len(k) < minScrubKeyLen {
			continue
		}
		add(k)
		for _, e := range jsonForms(k) {
			add(e)
		}
	}
	if len(needles) == 0 {
		return nil
	}
	sort.SliceStable(needles, func(i, j int) bool { return len(needles[i].b) > len(needles[j].b) })
	return &scrubber{needles: needles}
}

// jsonForms are the ways JSON encoders may write k inside a string, when
// they differ from k itself.
func jsonForms(k string) []string {
	var out []string
	if b, err := json.Marshal(k); err == nil { // escapes <, > and & too
		out = append(out, string(b[1:len(b)-1]))
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if enc.Encode(k) == nil {
		b := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
		out = append(out, string(b[1:len(b)-1]))
	}
	if strings.Contains(k, "/") {
		out = append(out, strings.ReplaceAll(k, "/", `\/`))
	}
	forms := out[:0]
	for _, f := range out {
		if f != k {
			forms = append(forms, f)
		}
	}
	return forms
}

// Bytes returns b with every key replaced, or b itself when none occurs.
// b is never modified. A valid JSON document stays valid: a match that
// starts or ends inside an escape sequence is widened to cover it, and a
// JSON string that holds a key only once decoded is replaced by its decoded,
// scrubbed text re-encoded (decodedStrings).
func (s *scrubber) Bytes(b []byte) []byte {
	if s == nil {
		return b
	}
	for i := range s.needles {
		if j := bytes.Index(b, s.needles[i].b); j >= 0 {
			b = replaceAll(b, s.needles[i].b, j)
		}
	}
	if hasRareEscape(b) {
		b = s.decodedStrings(b)
	}
	return b
}

// String is Bytes for a string (a header value, a log field, a message
// decoded from an upstream's JSON).
func (s *scrubber) String(v string) string {
	if s == nil {
		return v
	}
	if strings.Contains(v, unicodeEscape) || strings.Contains(v, slashEscape) {
		return string(s.Bytes([]byte(v)))
	}
	for i := range s.needles {
		if strings.Contains(v, s.needles[i].s) {
			return string(s.Bytes([]byte(v)))
		}
	}
	return v
}

// The escapes no JSON encoder needs for a key's characters (jsonForms
// covers the ones they use), so only an upstream hiding a key writes them
// around one; Python's ensure_ascii writes \u for any non-ASCII text.
const (
	unicodeEscape = `\u`
	slashEscape   = `\/`
)

// hasRareEscape reports whether b may hold a JSON string that decodedStrings
// must look at: one scan of b's backslashes, and the hot path (events
// without \u or \/) does no more.
func hasRareEscape(b []byte) bool {
	for i := bytes.IndexByte(b, '\\'); i >= 0 && i+1 < len(b); {
		if c := b[i+1]; c == 'u' || c == '/' {
			return true
		}
		// The next backslash, the escaped one included: "\\u" inside a
		// string that holds JSON is that JSON's \u once decoded.
		j := bytes.IndexByte(b[i+1:], '\\')
		if j < 0 {
			return false
		}
		i += 1 + j
	}
	return false
}

// decodedStrings replaces each JSON string literal in b that has a \u or \/
// escape and holds a key once decoded with the scrubbed decoded text,
// re-encoded. b is JSON, or text whose quoted parts are treated alike. A
// string that decodes to JSON with escapes of its own (a function call's
// arguments) is scrubbed the same way through String, one level per call,
// each on shorter text.
func (s *scrubber) decodedStrings(b []byte) []byte {
	var out []byte // nil until a string changes
	done := 0      // b[:done] is in out
	for i := 0; i < len(b); i++ {
		if b[i] != '"' {
			continue
		}
		end := stringLiteralEnd(b, i)
		if end < 0 {
			break // an unterminated string: the plain scrub above is all there is
		}
		lit := b[i:end]
		if hasRareEscape(lit) {
			var text string
			if json.Unmarshal(lit, &text) != nil {
				// A bad escape beside them: gjson, which the gateway reads
				// error fields with, still decodes the rest.
				text = gjson.ParseBytes(lit).Str
			}
			if clean := s.String(text); clean != text {
				out = append(out, b[done:i]...)
				out = appendJSONString(out, clean)
				done = end
			}
		}
		i = end - 1
	}
	if out == nil {
		return b
	}
	return append(out, b[done:]...)
}

// stringLiteralEnd is the index just past the closing quote of the string
// literal opening at b[i] == '"', or -1 when it does not close.
func stringLiteralEnd(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++ // the escaped character, a quote or backslash included
		case '"':
			return j + 1
		}
	}
	return -1
}

// appendJSONString appends v as a JSON string literal, leaving <, > and &
// as they are.
func appendJSONString(dst []byte, v string) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // a string always encodes
	return append(dst, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...)
}

// Header scrubs h's values in place (h is an upstream's response header,
// owned by the gateway); a header whose name holds a key, in any letter case,
// is dropped: Go's transport has canonicalised the name already
// (X-Sk-Abc… for x-sk-ABC…).
func (s *scrubber) Header(h http.Header) {
	if s == nil {
		return
	}
	for k, vs := range h {
		if s.nameHoldsKey(k) {
			delete(h, k)
			continue
		}
		for i, v := range vs {
			vs[i] = s.String(v)
		}
	}
}

// nameHoldsKey reports whether a header name holds a key, ignoring case.
func (s *scrubber) nameHoldsKey(name string) bool {
	name = strings.ToLower(name)
	for i := range s.needles {
		if strings.Contains(name, s.needles[i].lower) {
			return true
		}
	}
	return false
}

// answer scrubs what an upstream said before any of it reaches the client:
// its body, its headers and every event of its stream.
func (s *scrubber) answer(ans *upstreamAnswer) {
	if s == nil || ans == nil {
		return
	}
	ans.body = s.Bytes(ans.body)
	s.Header(ans.header)
	if ans.src != nil {
		ans.src = scrubbedSource{src: ans.src, s: s}
	}
}

// scrubbedSource scrubs each event of an upstream stream (SSE events,
// WebSocket frames, converted Chat events).
type scrubbedSource struct {
	src eventSource
	s   *scrubber
}

func (x scrubbedSource) wrapped() eventSource { return x.src } // chatSourceOf

func (x scrubbedSource) Next() (sse.Event, error) {
	ev, err := x.src.Next()
	ev.Data = x.s.Bytes(ev.Data)
	ev.Error = x.s.Bytes(ev.Error)
	ev.Name = x.s.String(ev.Name)
	return ev, err
}

// replaceAll replaces every occurrence of n in b, the first at i, with
// [redacted], swallowing a "Bearer " in front of each.
func replaceAll(b, n []byte, i int) []byte {
	out := make([]byte, 0, len(b))
	for i >= 0 {
		start, end := i, i+len(n)
		if e := escapeStart(b, start); e >= 0 {
			start = e // the match begins inside "\n" or "\u00e9": take the whole escape
		}
		if end < len(b) {
			if e := escapeStart(b, end); e >= 0 {
				end = escapeEnd(b, e) // the match ends inside an escape: take the rest of it
			}
		}
		head := b[:start]
		if len(head) >= len(bearerText) && bytes.EqualFold(head[len(head)-len(bearerText):], bearerText) {
			head = head[:len(head)-len(bearerText)]
		}
		out = append(out, head...)
		out = append(out, redactedText...)
		b = b[end:]
		i = bytes.Index(b, n)
	}
	return append(out, b...)
}

// escapeStart returns where the JSON escape sequence covering b[i] starts,
// when one that starts before i does, else -1.
func escapeStart(b []byte, i int) int {
	for j := i - 1; j >= 0 && j >= i-5; j-- {
		if b[j] != '\\' {
			continue
		}
		run := 0 // backslashes right before j
		for k := j - 1; k >= 0 && b[k] == '\\'; k-- {
			run++
		}
		if run%2 == 1 {
			return -1 // b[j] is the second half of "\\", which ends before i
		}
		if escapeEnd(b, j) > i {
			return j
		}
		return -1
	}
	return -1
}

// escapeEnd is the end of the escape sequence starting at b[j] == '\\'.
func escapeEnd(b []byte, j int) int {
	end := j + 2
	if j+1 < len(b) && b[j+1] == 'u' {
		end = j + 6
	}
	return min(end, len(b))
}
