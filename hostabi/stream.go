package hostabi

import "errors"

// StreamEventInput is the input of the optional stream_event hook (ABI.md
// §3.5): one Responses event the client is about to get, reduced to the
// members a redaction or guardrail policy needs. Whole response objects are
// never sent. OutputIndex and ContentIndex are -1 when the event has none.
type StreamEventInput struct {
	Surface        string `json:"surface"`
	Upstream       string `json:"upstream"`
	Type           string `json:"type"`
	SequenceNumber int64  `json:"sequence_number"`        // the number the client will see
	OutputIndex    int    `json:"output_index,omitempty"` // omitted when -1
	ContentIndex   int    `json:"content_index,omitempty"`
	ItemID         string `json:"item_id,omitempty"`
	Delta          string `json:"delta,omitempty"` // a *.delta event's delta (present when HasDelta)
	Text           string `json:"text,omitempty"`  // a *.done text event's text (present when HasText)
	HasDelta       bool   `json:"-"`
	HasText        bool   `json:"-"`
}

// StreamVerdict is what the host does with a stream event.
type StreamVerdict uint32

// Stream event verdicts. The numeric values are part of the ABI.
const (
	StreamPass    StreamVerdict = 0 // send the event as it is
	StreamDrop    StreamVerdict = 1 // do not send it (deltas only; on a *.done event: pass)
	StreamReplace StreamVerdict = 2 // send it with the output's delta / text
)

// String names the verdict as ABI.md does.
func (v StreamVerdict) String() string {
	switch v {
	case StreamPass:
		return "pass"
	case StreamDrop:
		return "drop"
	case StreamReplace:
		return "replace"
	}
	return "unknown"
}

// StreamEventOutput is a stream_event hook's answer. With StreamReplace,
// Delta (when HasDelta) replaces a delta event's delta and Text (when
// HasText) a done event's text.
type StreamEventOutput struct {
	Verdict  StreamVerdict `json:"verdict"`
	Delta    string        `json:"delta,omitempty"`
	Text     string        `json:"text,omitempty"`
	HasDelta bool          `json:"-"`
	HasText  bool          `json:"-"`
}

// ValidStreamVerdict reports whether v is a stream_event verdict the ABI
// defines as a bare verdict (replace needs an output object).
func ValidStreamVerdict(v uint32) bool { return v <= uint32(StreamDrop) }

// AppendStreamEventInput appends the JSON encoding of in.
func AppendStreamEventInput(dst []byte, in StreamEventInput) []byte {
	dst = append(dst, '{')
	dst = appendStrField(dst, true, "surface", in.Surface)
	dst = appendStrField(dst, false, "upstream", in.Upstream)
	dst = appendStrField(dst, false, "type", in.Type)
	dst = appendIntField(dst, false, "sequence_number", in.SequenceNumber)
	if in.OutputIndex >= 0 {
		dst = appendIntField(dst, false, "output_index", int64(in.OutputIndex))
	}
	if in.ContentIndex >= 0 {
		dst = appendIntField(dst, false, "content_index", int64(in.ContentIndex))
	}
	if in.ItemID != "" {
		dst = appendStrField(dst, false, "item_id", in.ItemID)
	}
	if in.HasDelta {
		dst = appendStrField(dst, false, "delta", in.Delta)
	}
	if in.HasText {
		dst = appendStrField(dst, false, "text", in.Text)
	}
	return append(dst, '}')
}

// DecodeStreamEventInput decodes a stream_event hook input.
func DecodeStreamEventInput(b []byte) (StreamEventInput, error) {
	in := StreamEventInput{OutputIndex: -1, ContentIndex: -1}
	d := decoder{b: b}
	err := d.object(func(k []byte, vs, ve int) error {
		switch string(k) {
		case "surface":
			return d.str(&in.Surface, vs, ve)
		case "upstream":
			return d.str(&in.Upstream, vs, ve)
		case "type":
			return d.str(&in.Type, vs, ve)
		case "sequence_number":
			return d.int64(&in.SequenceNumber, vs, ve)
		case "output_index":
			return d.int(&in.OutputIndex, vs, ve)
		case "content_index":
			return d.int(&in.ContentIndex, vs, ve)
		case "item_id":
			return d.str(&in.ItemID, vs, ve)
		case "delta":
			in.HasDelta = true
			return d.str(&in.Delta, vs, ve)
		case "text":
			in.HasText = true
			return d.str(&in.Text, vs, ve)
		}
		return nil
	})
	return in, err
}

// AppendStreamEventOutput appends the JSON encoding of out.
func AppendStreamEventOutput(dst []byte, out StreamEventOutput) []byte {
	dst = append(dst, '{')
	dst = appendIntField(dst, true, "verdict", int64(out.Verdict))
	if out.HasDelta {
		dst = appendStrField(dst, false, "delta", out.Delta)
	}
	if out.HasText {
		dst = appendStrField(dst, false, "text", out.Text)
	}
	return append(dst, '}')
}

// DecodeStreamEventOutput decodes and validates a stream_event output
// object. "verdict" is optional: without it the output is a replace.
func DecodeStreamEventOutput(b []byte) (StreamEventOutput, error) {
	out := StreamEventOutput{Verdict: StreamReplace}
	d := decoder{b: b}
	err := d.object(func(k []byte, vs, ve int) error {
		switch string(k) {
		case "verdict":
			n, err := verdictField(d.b[vs:ve], int64(StreamReplace))
			if err != nil {
				return err
			}
			out.Verdict = StreamVerdict(n)
		case "delta":
			out.HasDelta = true
			return d.str(&out.Delta, vs, ve)
		case "text":
			out.HasText = true
			return d.str(&out.Text, vs, ve)
		}
		return nil
	})
	if err == nil && out.Verdict == StreamReplace && !out.HasDelta && !out.HasText {
		err = errors.New("hostabi: replace without delta or text")
	}
	return out, err
}
