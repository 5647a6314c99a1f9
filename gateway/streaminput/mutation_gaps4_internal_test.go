package streaminput

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/internal/apierr"
	"github.com/sluice-gw/sluice/store"
)

// Behaviour of the pure parts of streaming input that the whole mutation
// run found unpinned (README, "Mutation testing"). The survivors of these
// parts judged equivalent are listed in mutation_gaps3_test.go; one more:
//   - modea.go:351 `len(p) > c.left` (`>=`): cutting p to its own length
//     changes nothing.

// sseEvent is one data-only SSE event numbered seq.
func sseEvent(seq int, typ string) string {
	return `data: {"type":"` + typ + `","sequence_number":` + strconv.Itoa(seq) + "}\n\n"
}

// TestTrackerAcrossWrites: however the stream is split into writes, the
// tracker finds each event's end, joins data lines with a newline, and a
// reader resuming after event 0 starts right after it.
func TestTrackerAcrossWrites(t *testing.T) {
	ev0, ev1 := sseEvent(0, "response.created"), sseEvent(1, "response.in_progress")
	stream := ev0 + ev1
	for cut := 0; cut <= len(stream); cut++ {
		var tr tracker
		tr.maxDepth = 64
		tr.feed([]byte(stream[:cut]), 0)
		tr.feed([]byte(stream[cut:]), int64(cut))
		if len(tr.ends) != 2 || tr.ends[0] != (eventEnd{0, int64(len(ev0))}) || tr.ends[1] != (eventEnd{1, int64(len(stream))}) {
			t.Fatalf("cut at %d: ends %+v", cut, tr.ends)
		}
		if off := tr.offsetAfter(0); off != int64(len(ev0)) {
			t.Fatalf("cut at %d: offsetAfter(0) = %d", cut, off)
		}
		if tr.partial {
			t.Fatalf("cut at %d: a whole stream left a partial event", cut)
		}
	}
	// Two data lines are one value joined by a newline: "1\n0" is the
	// number 1 followed by other bytes, never the number 10.
	var tr tracker
	tr.maxDepth = 64
	tr.feed([]byte("data: {\"sequence_number\":1\ndata: 0}\n\n"), 0)
	if tr.lastSeq != 1 {
		t.Fatalf("read sequence number %d from two data lines", tr.lastSeq)
	}
	tr.feed([]byte("data: {\"sequence_number\":\ndata: 7}\n\n"), 0)
	if !tr.sawSeq || tr.lastSeq != 7 {
		t.Fatalf("a value split over two data lines: seq %d (saw %v)", tr.lastSeq, tr.sawSeq)
	}
}

// TestResultBufferTrim: the replay buffer is cut back to its limit once it
// is more than a quarter over it, not before.
func TestResultBufferTrim(t *testing.T) {
	r := newResult(template{model: "m"}, 100, 64)
	r.Header().Set("Content-Type", "application/json")
	r.WriteHeader(http.StatusOK)
	for _, tt := range []struct {
		write    int
		base     int64
		buffered int
	}{{100, 0, 100}, {25, 0, 125}, {1, 26, 100}} {
		if _, err := r.Write([]byte(strings.Repeat("x", tt.write))); err != nil {
			t.Fatal(err)
		}
		if r.base != tt.base || len(r.buf) != tt.buffered {
			t.Fatalf("after %d more bytes: base %d, %d buffered; want %d, %d", tt.write, r.base, len(r.buf), tt.base, tt.buffered)
		}
	}
}

// TestResultServeStartingAfter: a reader resuming after event 0 gets the
// events after it, also when the buffer was trimmed before them.
func TestResultServeStartingAfter(t *testing.T) {
	for _, limit := range []int64{1 << 20, 120} {
		r := newResult(template{stream: true, model: "m"}, limit, 64)
		r.Header().Set("Content-Type", "text/event-stream")
		r.WriteHeader(http.StatusOK)
		var evs []string
		for i := range 4 {
			typ := "response.in_progress"
			if i == 3 {
				typ = "response.completed"
			}
			evs = append(evs, sseEvent(i, typ))
			_, _ = r.Write([]byte(evs[i]))
		}
		r.finish(nil)
		after := 1
		if limit < 1<<20 && r.base == 0 {
			t.Fatalf("limit %d: the buffer was not trimmed", limit)
		}
		rec := httptest.NewRecorder()
		if aerr := r.serve(context.Background(), rec, serveOptions{startingAfter: int64(after)}); aerr != nil {
			t.Fatalf("limit %d: not served: %s", limit, aerr.Message)
		}
		if want := strings.Join(evs[after+1:], ""); rec.Body.String() != want {
			t.Fatalf("limit %d: served %q, want %q", limit, rec.Body.String(), want)
		}
	}
	r := newResult(template{stream: true, model: "m"}, 1<<20, 64)
	r.Header().Set("Content-Type", "text/event-stream")
	r.WriteHeader(http.StatusOK)
	_, _ = r.Write([]byte(sseEvent(0, "response.created") + sseEvent(1, "response.completed")))
	r.finish(nil)
	rec := httptest.NewRecorder()
	r.serve(context.Background(), rec, serveOptions{startingAfter: 0})
	if rec.Body.String() != sseEvent(1, "response.completed") {
		t.Fatalf("starting_after 0 served %q", rec.Body.String())
	}
}

// TestParseStartingAfter: 0 is a valid sequence number; negatives and
// words are not.
func TestParseStartingAfter(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int64
		ok   bool
	}{{"", -1, true}, {"0", 0, true}, {"12", 12, true}, {"-1", 0, false}, {"x", 0, false}} {
		got, aerr := parseStartingAfter(tt.in)
		if (aerr == nil) != tt.ok || (tt.ok && got != tt.want) {
			t.Errorf("parseStartingAfter(%q) = %d, %v", tt.in, got, aerr)
		}
	}
}

// TestValidFormat: a chunk's format is 1–16 characters of a-z, 0-9, '-',
// '+' and '.'.
func TestValidFormat(t *testing.T) {
	for s, ok := range map[string]bool{
		"wav": true, "pcm16": true, "x-y+z.1": true, "a": true, strings.Repeat("a", 16): true,
		"": false, strings.Repeat("a", 17): false, "WAV": false, "a b": false, "a/b": false, "é": false,
		"0": true, "9": true, "z": true,
		"`": false, "{": false, "/": false, ":": false, ",": false,
	} {
		if validFormat(s) != ok {
			t.Errorf("validFormat(%q) = %v", s, !ok)
		}
	}
}

// TestStartPolicyBoundaries: on_first_chunk starts with the first chunk in
// order; on_min_length at exactly its length.
func TestStartPolicyBoundaries(t *testing.T) {
	first, minLen := startPolicy{kind: PolicyOnFirstChunk}, startPolicy{kind: PolicyOnMinLength, min: 10}
	for _, tt := range []struct {
		p      startPolicy
		next   uint64
		contig int64
		want   bool
	}{
		{first, 0, 0, false}, {first, 1, 0, true},
		{minLen, 3, 9, false}, {minLen, 3, 10, true}, {minLen, 3, 11, true},
	} {
		if got := tt.p.holds(tt.next, tt.contig, false); got != tt.want {
			t.Errorf("%s holds(%d, %d) = %v", tt.p, tt.next, tt.contig, got)
		}
	}
}

// TestMaxDecodedModeA: a compressed Mode A body may expand to the header
// line plus twice the largest chunk request.
func TestMaxDecodedModeA(t *testing.T) {
	o := Options{MaxTemplateBytes: 1000, MaxSessionBytes: 3000}
	if got, want := o.maxDecodedModeA(), o.maxHeaderLine()+2*o.maxChunkRequest(); got != want || got <= o.maxHeaderLine()+o.maxChunkRequest() {
		t.Fatalf("maxDecodedModeA = %d, want %d", got, want)
	}
}

// TestMembersWithContext: a large object is read whole under a live
// context, and a cancelled one stops the scan (the client left).
func TestMembersWithContext(t *testing.T) {
	var b strings.Builder
	b.WriteString("{")
	for i := range 5000 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`"k` + strconv.Itoa(i) + `":1`)
	}
	b.WriteString("}")
	obj := gjson.Parse(b.String())
	n := 0
	if aerr := forEachMember(context.Background(), obj, "", func(string, gjson.Result) { n++ }); aerr != nil || n != 5000 {
		t.Fatalf("live context: %d members, %v", n, aerr)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if aerr := forEachMember(ctx, obj, "", func(string, gjson.Result) {}); aerr == nil || aerr.Status != errClientGone().Status {
		t.Fatalf("cancelled context: %v", aerr)
	}
	big := []byte("[" + strings.Repeat(`"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",`, 70000) + "1]") // over the 1 MiB between context checks
	if aerr := checkDepth(ctx, big, 64, "the body"); aerr == nil || aerr.Status != errClientGone().Status {
		t.Fatalf("cancelled depth check: %v", aerr)
	}
	if aerr := checkDepth(context.Background(), big, 64, "the body"); aerr != nil {
		t.Fatalf("live depth check: %v", aerr)
	}
}

// TestEnvelopeRoundTrip: a stored session envelope gives back its
// template and its headers, and holds a template nested to the limit.
func TestEnvelopeRoundTrip(t *testing.T) {
	deep := strings.Repeat(`{"a":`, 62) + `1` + strings.Repeat(`}`, 62)
	body := []byte(`{"model":"m","input":"hi","metadata":` + deep + `}`)
	tm, aerr := parseTemplate(context.Background(), EndpointResponses, body, 64)
	if aerr != nil {
		t.Fatal(aerr)
	}
	h := http.Header{"X-Client": {"one"}}
	got, gotH, err := decodeEnvelope(context.Background(), EndpointResponses, encodeEnvelope(tm, h), 64)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.body) != string(body) || gotH.Get("X-Client") != "one" {
		t.Fatalf("round trip: %s %v", got.body, gotH)
	}
}

// TestTemplateInputShapes: a Responses template's input is a string or a
// list; a Chat template's messages a list.
func TestTemplateInputShapes(t *testing.T) {
	for _, tt := range []struct {
		endpoint, body string
		ok             bool
	}{
		{EndpointResponses, `{"model":"m","input":"hi"}`, true},
		{EndpointResponses, `{"model":"m","input":[]}`, true},
		{EndpointResponses, `{"model":"m","input":null}`, true},
		{EndpointResponses, `{"model":"m","input":{"a":1}}`, false},
		{EndpointResponses, `{"model":"m","input":3}`, false},
		{EndpointChat, `{"model":"m","messages":[]}`, true},
		{EndpointChat, `{"model":"m","messages":"hi"}`, false},
	} {
		_, aerr := parseTemplate(context.Background(), tt.endpoint, []byte(tt.body), 64)
		if (aerr == nil) != tt.ok {
			t.Errorf("%s %s: %v", tt.endpoint, tt.body, aerr)
		}
	}
}

// TestAccumulatorGaps: Apply refuses chunks with holes, naming the first
// ten missing sequence ids and no more, and drops them with the refused
// response.create: the next one starts clean, its ids again from 0; the
// whole batch resent applies, whatever order it came in.
func TestAccumulatorGaps(t *testing.T) {
	add := func(a *Accumulator, seqs ...int) {
		t.Helper()
		for _, q := range seqs {
			if err := a.Add([]byte(`{"type":"input_chunk","sequence_id":` + strconv.Itoa(q) + `,"payload":"` + strconv.Itoa(q) + ` "}`)); err != nil {
				t.Fatalf("Add %d: %v", q, err)
			}
		}
	}
	gapsOf := func(err error) string {
		var ae *apierr.Error
		if !errors.As(err, &ae) || ae.Code != CodeSequenceGap {
			t.Fatalf("error %v, want %s", err, CodeSequenceGap)
		}
		_, after, _ := strings.Cut(ae.Message, "the input chunks have gaps: ")
		return after
	}
	create := []byte(`{"type":"response.create","model":"m","input":""}`)

	a := NewAccumulator(AccumulatorOptions{ReorderWindow: 32})
	add(a, 2, 0)
	_, err := a.Apply(create)
	if got := gapsOf(err); got != "sequence id 1 is missing" {
		t.Fatalf("missing %q, want 1", got)
	}
	if out, err := a.Apply(create); err != nil || string(out) != string(create) {
		t.Fatalf("the next response.create after a refused one: %s %v, want it unchanged", out, err)
	}
	add(a, 2, 1, 0)
	out, err := a.Apply(create)
	if err != nil || gjson.GetBytes(out, "input").Str != "0 1 2 " {
		t.Fatalf("the whole batch resent: %s %v", out, err)
	}

	a = NewAccumulator(AccumulatorOptions{ReorderWindow: 32})
	add(a, 0, 13, 5) // eleven missing
	_, err = a.Apply(create)
	if got := gapsOf(err); got != "11 sequence ids are missing: 1, 2, 3, 4, 6, 7, 8, 9, 10, 11 and 1 more" {
		t.Fatalf("missing %q, want the first ten", got)
	}

	// The highest id seen bounds the gap check, whichever came first.
	a = NewAccumulator(AccumulatorOptions{ReorderWindow: 32})
	add(a, 3, 1)
	_, err = a.Apply(create)
	if got := gapsOf(err); got != "sequence ids 0, 2 are missing" {
		t.Fatalf("missing %q, want 0, 2", got)
	}
}

// TestGroupChunksEmpty: an empty text chunk adds nothing, also after a
// part of another kind; an empty chunk of another kind is still a part.
func TestGroupChunksEmpty(t *testing.T) {
	audio := chunk{meta: chunkMeta{modality: ModalityAudio, format: "wav"}, payload: []byte{1}}
	emptyText := chunk{meta: chunkMeta{modality: ModalityText}}
	emptyAudio := chunk{meta: chunkMeta{modality: ModalityAudio, format: "wav"}}
	if gs := groupChunks([]chunk{audio, emptyText}); len(gs) != 1 {
		t.Fatalf("audio then an empty text chunk: %d groups", len(gs))
	}
	if gs := groupChunks([]chunk{emptyAudio}); len(gs) != 1 || gs[0].modality != ModalityAudio {
		t.Fatalf("an empty audio chunk: %+v", gs)
	}
}

// TestOptionsKeepTheLogger: a logger set in Options is the one used.
func TestOptionsKeepTheLogger(t *testing.T) {
	l := hclog.New(&hclog.LoggerOptions{Name: "mine"})
	o := Options{Logger: l}
	o.setDefaults()
	if o.Logger != l {
		t.Fatal("the configured logger was replaced")
	}
}

// TestModeAHeaderNullPolicy: a Mode A header line's null start_policy is
// the default; a number is refused.
func TestModeAHeaderNullPolicy(t *testing.T) {
	line := `{"template":{"model":"m","input":"hi"},"start_policy":null}`
	if _, p, aerr := parseModeAHeader(context.Background(), EndpointResponses, []byte(line), 64); aerr != nil || p.kind != PolicyOnEndOnly {
		t.Fatalf("null start_policy: %v %v", p, aerr)
	}
	line = `{"template":{"model":"m","input":"hi"},"start_policy":3}`
	if _, _, aerr := parseModeAHeader(context.Background(), EndpointResponses, []byte(line), 64); aerr == nil {
		t.Fatal("a number start_policy was accepted")
	}
}

// TestCappedReaderBoundary: a body that ends exactly at the cap reads to
// its end; one byte more is too large.
func TestCappedReaderBoundary(t *testing.T) {
	read := func(body string) error {
		c := &cappedReader{r: strings.NewReader(body), left: 5}
		_, err := io.ReadAll(c)
		return err
	}
	if err := read("12345"); err != nil {
		t.Fatalf("a body of exactly the cap: %v", err)
	}
	if err := read("123456"); !errors.Is(err, errBodyTooLarge) {
		t.Fatalf("a body one byte over: %v", err)
	}
}

// TestLineReaderLimitAndContext: a line of exactly the limit (with its
// newline) is read, a longer one refused, and a cancelled context stops
// the reader.
func TestLineReaderLimitAndContext(t *testing.T) {
	lr := &lineReader{r: bufio.NewReader(strings.NewReader("hello\nhello!\n")), max: 6}
	if line, err := lr.next(); err != nil || string(line) != "hello" {
		t.Fatalf("a line of exactly the limit: %q %v", line, err)
	}
	if _, err := lr.next(); !errors.Is(err, errLineTooLong) {
		t.Fatalf("a line over the limit: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	lr = &lineReader{r: bufio.NewReader(strings.NewReader("hello\n")), max: 100, ctx: ctx}
	if _, err := lr.next(); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled reader: %v", err)
	}
}

// TestMirrorCoalescesUpToTheLimit: answer bytes queued for the shared store
// are coalesced into parts of at most maxMirrorPart bytes, the limit
// itself included; a head part is never merged into.
func TestMirrorCoalescesUpToTheLimit(t *testing.T) {
	mi := &mirror{wake: make(chan struct{}, 1)}
	half := make([]byte, maxMirrorPart/2)
	mi.tap(store.ResultData, 0, nil, half)
	mi.tap(store.ResultData, 0, nil, half) // exactly the limit: one part
	mi.tap(store.ResultData, 0, nil, []byte("x"))
	mi.tap(store.ResultHead, 200, http.Header{}, nil)
	mi.tap(store.ResultData, 0, nil, []byte("y"))
	var sizes []int
	for _, p := range mi.q {
		sizes = append(sizes, len(p.Data))
	}
	if len(mi.q) != 4 || sizes[0] != maxMirrorPart || sizes[1] != 1 || mi.q[2].Kind != store.ResultHead || sizes[3] != 1 {
		t.Fatalf("parts of %v bytes", sizes)
	}
}

// TestDescribeMissing: a sequence_gap message names the missing ids, says
// how many there are in all when it lists only the first ten, and reads
// right for one.
func TestDescribeMissing(t *testing.T) {
	for _, tt := range []struct {
		first   []uint64
		missing uint64
		want    string
	}{
		{[]uint64{1}, 1, "sequence id 1 is missing"},
		{[]uint64{0, 2}, 2, "sequence ids 0, 2 are missing"},
		{[]uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 10, "sequence ids 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 are missing"},
		{[]uint64{1, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 11, "11 sequence ids are missing: 1, 3, 4, 5, 6, 7, 8, 9, 10, 11 and 1 more"},
		{[]uint64{1, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 52, "52 sequence ids are missing: 1, 3, 4, 5, 6, 7, 8, 9, 10, 11 and 42 more"},
	} {
		if got := describeMissing(tt.first, tt.missing); got != tt.want {
			t.Errorf("describeMissing(%v, %d) = %q, want %q", tt.first, tt.missing, got, tt.want)
		}
	}
}
