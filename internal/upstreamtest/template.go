package upstreamtest

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// Placeholders that may appear anywhere in Script bodies and frames. The
// server replaces them with per-request values when it plays the script, so a
// script built once (for example by CutAfter) still carries this request's
// response id and echoes this request's model. Values are JSON-string escaped
// (without the surrounding quotes), except PlaceholderCreatedAt, which is a
// bare number. Unknown "{{…}}" sequences are left alone.
const (
	// PlaceholderID is the id the server assigned to this response:
	// "resp_<Name>_<n>" on /v1/responses (HTTP and WebSocket),
	// "chatcmpl-<Name>-<n>" on /v1/chat/completions.
	PlaceholderID = "{{id}}"
	// PlaceholderItemID is the message item id, "msg_<Name>_<n>".
	PlaceholderItemID = "{{item_id}}"
	// PlaceholderModel is the request's model (the first of Options.Models
	// when the request named none).
	PlaceholderModel = "{{model}}"
	// PlaceholderCreatedAt is the Unix time of the request, as a JSON number.
	PlaceholderCreatedAt = "{{created_at}}"
	// PlaceholderName is Options.Name.
	PlaceholderName = "{{name}}"
	// PlaceholderPreviousResponseID is the request's previous_response_id.
	PlaceholderPreviousResponseID = "{{previous_response_id}}"
	// PlaceholderEmitTime is the time the frame holding it is written, in
	// Unix nanoseconds (19 digits), rendered per frame just before the
	// write: a client on the same host measures each frame's delivery
	// latency as arrival − emit (see StampedDeltas).
	PlaceholderEmitTime = "{{emit_unix_nano}}"
)

// Hole indexes into a vars array.
const (
	holeID = iota
	holeItemID
	holeModel
	holeCreatedAt
	holeName
	holePrevious
	holeEmit
	nHoles
)

func holeIndex(name string) int {
	switch name {
	case PlaceholderID:
		return holeID
	case PlaceholderItemID:
		return holeItemID
	case PlaceholderModel:
		return holeModel
	case PlaceholderCreatedAt:
		return holeCreatedAt
	case PlaceholderName:
		return holeName
	case PlaceholderPreviousResponseID:
		return holePrevious
	case PlaceholderEmitTime:
		return holeEmit
	}
	return -1
}

// vars holds the rendered value of every placeholder for one request.
type vars [nHoles][]byte

// seg is a literal run of bytes (hole < 0) or a placeholder.
type seg struct {
	lit  []byte
	hole int
}

// tmpl is pre-split bytes: rendering is a few appends, no scanning and no
// JSON work, which keeps the canned happy path cheap.
type tmpl []seg

// compile splits b at known placeholders. A nil b compiles to a nil tmpl.
func compile(b []byte) tmpl {
	if b == nil {
		return nil
	}
	t := tmpl{}
	lit := 0 // start of the pending literal
	i := 0
	for {
		j := bytes.Index(b[i:], []byte("{{"))
		if j < 0 {
			break
		}
		j += i
		k := bytes.Index(b[j:], []byte("}}"))
		if k < 0 {
			break
		}
		k += j + 2
		if h := holeIndex(string(b[j:k])); h >= 0 {
			if j > lit {
				t = append(t, seg{lit: b[lit:j], hole: -1})
			}
			t = append(t, seg{hole: h})
			lit, i = k, k
			continue
		}
		i = j + 1
	}
	if len(b) > lit || len(t) == 0 {
		t = append(t, seg{lit: b[lit:], hole: -1})
	}
	return t
}

// stamped reports whether t holds PlaceholderEmitTime.
func (t tmpl) stamped() bool {
	for _, s := range t {
		if s.hole == holeEmit {
			return true
		}
	}
	return false
}

// stamp sets v's emit time to now.
func (v *vars) stamp() { v[holeEmit] = strconv.AppendInt(v[holeEmit][:0], time.Now().UnixNano(), 10) }

// render appends t with v's values to dst.
func (t tmpl) render(dst []byte, v *vars) []byte {
	for _, s := range t {
		if s.hole < 0 {
			dst = append(dst, s.lit...)
		} else {
			dst = append(dst, v[s.hole]...)
		}
	}
	return dst
}

// jsonEscape returns s escaped for use inside a JSON string, without quotes.
func jsonEscape(s string) []byte {
	clean := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 || c == '<' || c == '>' || c == '&' {
			clean = false
			break
		}
	}
	if clean {
		return []byte(s)
	}
	b, _ := json.Marshal(s)
	return b[1 : len(b)-1]
}

// idSafe maps a name to the characters OpenAI ids use.
func idSafe(name string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-':
			return r
		}
		return '_'
	}, name)
}
