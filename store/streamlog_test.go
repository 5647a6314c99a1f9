package store

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestStreamLogRoundTrip(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, clk := b.open(t)
		ctx := context.Background()
		in := StreamLog{
			ResponseID: "resp_1", Owner: "ckh", Status: "in_progress", Background: true, Ended: true,
			Response: []byte(`{"id":"resp_1"}`), Input: []byte(`[{"role":"user"}]`),
			CreatedAt: t0.Add(-time.Minute), ExpiresAt: t0.Add(time.Hour),
		}
		if err := s.PutStreamLog(ctx, in); err != nil {
			t.Fatal(err)
		}
		// A shared store says when the record was written (its clock).
		_, shared := s.(SharedStreamLogStore)
		if shared {
			in.SavedAt = clk.Now()
		}
		got, err := s.GetStreamLog(ctx, "resp_1")
		if err != nil || !reflect.DeepEqual(got, in) {
			t.Fatalf("GetStreamLog = %+v, %v; want %+v", got, err, in)
		}

		// A zero CreatedAt becomes the store's clock; empty fields stay empty.
		clk.Advance(time.Minute)
		if err := s.PutStreamLog(ctx, StreamLog{ResponseID: "resp_2", ExpiresAt: t0.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		want := StreamLog{ResponseID: "resp_2", CreatedAt: t0.Add(time.Minute), ExpiresAt: t0.Add(time.Hour)}
		if shared {
			want.SavedAt = clk.Now()
		}
		if got, err := s.GetStreamLog(ctx, "resp_2"); err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("GetStreamLog = %+v, %v; want %+v", got, err, want)
		}
		if st := s.Stats(); st.StreamLogsWritten != 2 {
			t.Errorf("StreamLogsWritten = %d, want 2", st.StreamLogsWritten)
		}
	})
}

// streamStep is one step of a stream-log scenario.
type streamStep struct {
	op      string // put, get, append, events, cancel, delete, advance, sweep, left, written
	id      string
	status  string        // put: the status; get: the status wanted
	d       time.Duration // put: TTL (default an hour); advance
	cancel  bool          // put: CancelRequested; get: the flag wanted
	first   int64         // append
	names   []string      // append: one event per name, Data {"n":"<name>"}
	after   int64         // events
	max     int           // events
	want    []string      // events: "seq:name"
	n       int           // sweep (Pebble): records removed; left: parts left; written: StreamEventsWritten
	pebble  bool          // only on Pebble (Redis expires keys on its own clock, not the store's)
	wantErr error
}

func TestStreamLogs(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		tests := []struct {
			name  string
			steps []streamStep
		}{
			{"unknown log", []streamStep{
				{op: "get", id: "nope", wantErr: ErrNotFound},
				{op: "append", id: "nope", names: []string{"a"}, wantErr: ErrNotFound},
				{op: "append", id: "nope", wantErr: ErrNotFound},
				{op: "events", id: "nope", after: -1, wantErr: ErrNotFound},
				{op: "cancel", id: "nope", wantErr: ErrNotFound},
				{op: "delete", id: "nope"},
			}},
			{"append and read in order", []streamStep{
				{op: "put", id: "r", status: "queued"},
				{op: "events", id: "r", after: -1, want: []string{}},
				{op: "append", id: "r", first: 0, names: []string{"created", "delta", "delta"}},
				{op: "append", id: "r", first: 3, names: []string{"done"}},
				{op: "append", id: "r", first: 4},
				{op: "events", id: "r", after: -1, want: []string{"0:created", "1:delta", "2:delta", "3:done"}},
				{op: "written", n: 4},
			}},
			{"after and max windows", []streamStep{
				{op: "put", id: "r"},
				{op: "append", id: "r", first: 0, names: []string{"e0", "e1", "e2", "e3", "e4", "e5"}},
				{op: "events", id: "r", after: -1, max: 2, want: []string{"0:e0", "1:e1"}},
				{op: "events", id: "r", after: 1, max: 2, want: []string{"2:e2", "3:e3"}},
				{op: "events", id: "r", after: 3, max: 10, want: []string{"4:e4", "5:e5"}},
				{op: "events", id: "r", after: 5, max: 10, want: []string{}},
				{op: "events", id: "r", after: 1 << 40, want: []string{}},
				{op: "events", id: "r", after: 1<<63 - 1, want: []string{}},
				{op: "events", id: "r", after: -7, max: 1, want: []string{"0:e0"}},
				{op: "events", id: "r", after: 2, want: []string{"3:e3", "4:e4", "5:e5"}},
			}},
			{"big sequence numbers keep their order", []streamStep{
				{op: "put", id: "r"},
				{op: "append", id: "r", first: 255, names: []string{"a", "b"}},
				{op: "append", id: "r", first: 1<<53 - 1, names: []string{"y", "z"}},
				{op: "events", id: "r", after: 255, want: []string{"256:b", "9007199254740991:y", "9007199254740992:z"}},
				{op: "events", id: "r", after: 1<<53 - 1, want: []string{"9007199254740992:z"}},
			}},
			{"retried append is skipped", []streamStep{
				{op: "put", id: "r"},
				{op: "append", id: "r", first: 0, names: []string{"a", "b"}},
				{op: "append", id: "r", first: 0, names: []string{"A", "B"}},
				{op: "append", id: "r", first: 1, names: []string{"B", "c"}},
				{op: "events", id: "r", after: -1, want: []string{"0:a", "1:b", "2:c"}},
				{op: "written", n: 3},
			}},
			{"a gap is kept and can be filled", []streamStep{
				{op: "put", id: "r"},
				{op: "append", id: "r", first: 0, names: []string{"a"}},
				{op: "append", id: "r", first: 3, names: []string{"d"}},
				{op: "append", id: "r", first: 1, names: []string{"b", "c", "D"}},
				{op: "events", id: "r", after: -1, want: []string{"0:a", "1:b", "2:c", "3:d"}},
			}},
			{"put keeps the events", []streamStep{
				{op: "put", id: "r", status: "in_progress"},
				{op: "append", id: "r", first: 0, names: []string{"a"}},
				{op: "put", id: "r", status: "completed", d: 2 * time.Hour},
				{op: "get", id: "r", status: "completed"},
				{op: "events", id: "r", after: -1, want: []string{"0:a"}},
			}},
			{"cancel survives a later put", []streamStep{
				{op: "put", id: "r", status: "in_progress"},
				{op: "get", id: "r", status: "in_progress", cancel: false},
				{op: "cancel", id: "r"},
				{op: "get", id: "r", status: "in_progress", cancel: true},
				{op: "put", id: "r", status: "cancelled"},
				{op: "get", id: "r", status: "cancelled", cancel: true},
				{op: "cancel", id: "r"},
				{op: "get", id: "r", status: "cancelled", cancel: true},
			}},
			{"put may set the cancel flag", []streamStep{
				{op: "put", id: "r", cancel: true},
				{op: "get", id: "r", cancel: true},
				{op: "put", id: "r"},
				{op: "get", id: "r", cancel: true},
			}},
			{"append after delete", []streamStep{
				{op: "put", id: "r"},
				{op: "append", id: "r", first: 0, names: []string{"a"}},
				{op: "delete", id: "r"},
				{op: "append", id: "r", first: 1, names: []string{"b"}, wantErr: ErrNotFound},
				{op: "events", id: "r", after: -1, wantErr: ErrNotFound},
				{op: "get", id: "r", wantErr: ErrNotFound},
				{op: "cancel", id: "r", wantErr: ErrNotFound},
				{op: "delete", id: "r"},
			}},
			{"delete removes the events", []streamStep{
				{op: "put", id: "r"},
				{op: "cancel", id: "r"},
				{op: "append", id: "r", first: 0, names: []string{"a", "b", "c"}},
				{op: "left", id: "r", n: 2},
				{op: "delete", id: "r"},
				{op: "left", id: "r", n: 0},
				{op: "put", id: "r"},
				{op: "get", id: "r", cancel: false},
				{op: "events", id: "r", after: -1, want: []string{}},
			}},
			{"logs with prefix ids keep their own events", []streamStep{
				{op: "put", id: "s"},
				{op: "put", id: "s1"},
				{op: "put", id: "s\x00"},
				{op: "append", id: "s", first: 0, names: []string{"s"}},
				{op: "append", id: "s1", first: 0, names: []string{"s1"}},
				{op: "append", id: "s\x00", first: 0, names: []string{"s0"}},
				{op: "events", id: "s", after: -1, want: []string{"0:s"}},
				{op: "delete", id: "s"},
				{op: "events", id: "s1", after: -1, want: []string{"0:s1"}},
				{op: "events", id: "s\x00", after: -1, want: []string{"0:s0"}},
			}},
			{"expiry without a sweep", []streamStep{
				{op: "put", id: "r", d: time.Hour},
				{op: "append", id: "r", first: 0, names: []string{"a"}},
				{op: "advance", d: time.Hour - time.Nanosecond},
				{op: "get", id: "r"},
				{op: "advance", d: time.Nanosecond},
				{op: "get", id: "r", wantErr: ErrNotFound},
				{op: "append", id: "r", first: 1, names: []string{"b"}, wantErr: ErrNotFound},
				{op: "events", id: "r", after: -1, wantErr: ErrNotFound},
				{op: "cancel", id: "r", wantErr: ErrNotFound},
			}},
			{"an expired log is replaced without its events and cancel flag", []streamStep{
				{op: "put", id: "r", d: time.Hour},
				{op: "append", id: "r", first: 0, names: []string{"old"}},
				{op: "cancel", id: "r"},
				{op: "advance", d: 2 * time.Hour},
				{op: "put", id: "r", status: "queued"},
				{op: "get", id: "r", status: "queued", cancel: false},
				{op: "events", id: "r", after: -1, want: []string{}},
			}},
			{"sweep removes expired logs with their events", []streamStep{
				{op: "put", id: "old", d: time.Hour},
				{op: "append", id: "old", first: 0, names: []string{"a", "b"}},
				{op: "put", id: "new", d: 3 * time.Hour},
				{op: "append", id: "new", first: 0, names: []string{"c"}},
				{op: "advance", d: time.Hour + expiryGranularity},
				{op: "sweep", n: 1},
				{op: "left", id: "old", n: 0, pebble: true},
				{op: "left", id: "new", n: 2},
				{op: "events", id: "new", after: -1, want: []string{"0:c"}},
				{op: "sweep", n: 0},
			}},
			{"a refreshed log survives its stale index entry", []streamStep{
				{op: "put", id: "r", d: time.Hour},
				{op: "append", id: "r", first: 0, names: []string{"a"}},
				{op: "put", id: "r", d: 3 * time.Hour},
				{op: "advance", d: time.Hour + expiryGranularity},
				{op: "sweep", n: 0},
				{op: "events", id: "r", after: -1, want: []string{"0:a"}},
			}},
			{"invalid", []streamStep{
				{op: "put", id: "", wantErr: ErrInvalid},
				{op: "put", id: strings.Repeat("x", MaxIDLen+1), wantErr: ErrInvalid},
				{op: "put", id: "r", d: -1, wantErr: ErrInvalid}, // no ExpiresAt
				{op: "get", id: "", wantErr: ErrInvalid},
				{op: "put", id: "r"},
				{op: "append", id: "r", first: -1, names: []string{"a"}, wantErr: ErrInvalid},
				{op: "append", id: "r", first: 1 << 53, names: []string{"a", "b"}, wantErr: ErrInvalid},
				{op: "append", id: "", first: 0, names: []string{"a"}, wantErr: ErrInvalid},
				{op: "events", id: "", after: -1, wantErr: ErrInvalid},
				{op: "cancel", id: "", wantErr: ErrInvalid},
				{op: "delete", id: "", wantErr: ErrInvalid},
				{op: "events", id: "r", after: -1, want: []string{}},
			}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				s, clk := b.open(t)
				ctx := context.Background()
				for i, st := range tt.steps {
					what := fmt.Sprintf("step %d (%s %q)", i, st.op, st.id)
					if _, ok := s.(*PebbleStore); st.pebble && !ok {
						continue
					}
					switch st.op {
					case "put":
						l := StreamLog{ResponseID: st.id, Status: st.status, CancelRequested: st.cancel, Response: []byte(`{}`)}
						switch {
						case st.d == 0:
							l.ExpiresAt = clk.Now().Add(time.Hour)
						case st.d > 0:
							l.ExpiresAt = clk.Now().Add(st.d)
						}
						wantErr(t, what, s.PutStreamLog(ctx, l), st.wantErr)
					case "get":
						got, err := s.GetStreamLog(ctx, st.id)
						wantErr(t, what, err, st.wantErr)
						if st.wantErr == nil && (got.ResponseID != st.id || got.Status != st.status || got.CancelRequested != st.cancel) {
							t.Fatalf("%s: got %+v, want status %q, cancel %v", what, got, st.status, st.cancel)
						}
					case "append":
						var evs []StreamEvent
						for _, n := range st.names {
							evs = append(evs, StreamEvent{Name: n, Data: []byte(`{"n":"` + n + `"}`)})
						}
						wantErr(t, what, s.AppendStreamEvents(ctx, st.id, st.first, evs), st.wantErr)
					case "events":
						got, err := s.StreamEvents(ctx, st.id, st.after, st.max)
						wantErr(t, what, err, st.wantErr)
						if st.wantErr != nil {
							continue
						}
						gotS := []string{}
						for _, ev := range got {
							if want := `{"n":"` + ev.Name + `"}`; string(ev.Data) != want {
								t.Fatalf("%s: event %d data %q, want %q", what, ev.Seq, ev.Data, want)
							}
							gotS = append(gotS, fmt.Sprintf("%d:%s", ev.Seq, ev.Name))
						}
						if !reflect.DeepEqual(gotS, st.want) {
							t.Fatalf("%s: %q, want %q", what, gotS, st.want)
						}
					case "cancel":
						wantErr(t, what, s.CancelStreamLog(ctx, st.id), st.wantErr)
					case "delete":
						wantErr(t, what, s.DeleteStreamLog(ctx, st.id), st.wantErr)
					case "advance":
						clk.Advance(st.d)
					case "sweep":
						n, err := s.Sweep(ctx, clk.Now())
						wantErr(t, what, err, nil)
						if _, ok := s.(*PebbleStore); ok && n != st.n {
							t.Fatalf("%s: removed %d, want %d", what, n, st.n)
						}
						if _, ok := s.(*PebbleStore); ok && s.Stats().SweptStreamLogs < uint64(st.n) {
							t.Fatalf("%s: SweptStreamLogs = %d", what, s.Stats().SweptStreamLogs)
						}
					case "left":
						if got := streamKeysLeft(t, s, st.id); got != st.n {
							t.Fatalf("%s: %d keys left, want %d", what, got, st.n)
						}
					case "written":
						if got := s.Stats().StreamEventsWritten; got != uint64(st.n) {
							t.Fatalf("%s: StreamEventsWritten = %d, want %d", what, got, st.n)
						}
					default:
						t.Fatalf("unknown op %q", st.op)
					}
				}
			})
		}
	})
}

// streamKeysLeft counts which of a stream log's parts the backend still
// holds, whatever the clock says: the record (1) and any events (1). On
// Redis these are the two keys (record, events); expiry index entries
// (Pebble) are not counted.
func streamKeysLeft(t *testing.T, s contractStore, id string) int {
	t.Helper()
	switch s := s.(type) {
	case *PebbleStore:
		rec := streamLogKey(id)
		prefix := streamEventPrefix(id)
		n := countKeys(t, s, rec, append(rec, 0))
		if countKeys(t, s, prefix, prefixSuccessor(prefix)) > 0 {
			n++
		}
		return n
	case *RedisStore:
		n, err := s.c.Exists(context.Background(), s.streamLogKey(id), s.streamEventsKey(id)).Result()
		if err != nil {
			t.Fatal(err)
		}
		return int(n)
	default:
		t.Fatalf("unknown backend %T", s)
		return 0
	}
}

func TestStreamEventKeys(t *testing.T) {
	// Sequence order is key order, and no log's event prefix is a prefix of
	// another log's keys.
	seqs := []int64{0, 1, 255, 256, 1 << 32, maxStreamSeq}
	for i := 1; i < len(seqs); i++ {
		if bytes.Compare(streamEventKey("r", seqs[i-1]), streamEventKey("r", seqs[i])) >= 0 {
			t.Errorf("event %d does not sort before %d", seqs[i-1], seqs[i])
		}
	}
	for _, pair := range [][2]string{{"r", "r1"}, {"r", "r\x00"}, {"ab", "a"}} {
		p := streamEventPrefix(pair[0])
		for _, seq := range seqs {
			if k := streamEventKey(pair[1], seq); bytes.HasPrefix(k, p) {
				t.Errorf("event key %q/%d has the prefix of %q", pair[1], seq, pair[0])
			}
		}
		if bytes.HasPrefix(streamLogKey(pair[1]), streamLogKey(pair[0])) && len(streamLogKey(pair[1])) == len(streamLogKey(pair[0])) {
			t.Errorf("record keys of %q and %q collide", pair[0], pair[1])
		}
	}
}

func TestStreamLogRecordEncoding(t *testing.T) {
	in := StreamLog{ResponseID: "r", Owner: "o", Status: "completed", Ended: true, CancelRequested: true,
		Response: []byte("{}"), Input: []byte("[]"), CreatedAt: t0, ExpiresAt: t0.Add(time.Hour), IssuedBelow: 300}
	v := encodeStreamLog(&in)
	// A record without IssuedBelow is encoded as before it existed.
	without := in
	without.IssuedBelow = 0
	if w := encodeStreamLog(&without); len(w) >= len(v) || !bytes.Equal(w[2:], v[2:len(w)]) || w[1] != v[1]&^streamLogIssuedBelow {
		t.Fatalf("without IssuedBelow: %x, with: %x", w, v)
	}
	got, err := decodeStreamLog("r", v)
	if err != nil || !reflect.DeepEqual(got, in) {
		t.Fatalf("decode = %+v, %v", got, err)
	}
	if exp, err := decodeExpiry(streamLogKey("r"), v); err != nil || !exp.Equal(in.ExpiresAt) {
		t.Errorf("decodeExpiry = %v, %v", exp, err)
	}
	for i := range v {
		if _, err := decodeStreamLog("r", v[:i]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated to %d bytes: %v", i, err)
		}
	}
	bad := append([]byte(nil), v...)
	bad[1] |= 0x80
	if _, err := decodeStreamLog("r", bad); !errors.Is(err, ErrCorrupt) {
		t.Errorf("unknown flag: %v", err)
	}
	ev := StreamEvent{Seq: 7, Name: "response.output_text.delta", Data: []byte(`{"delta":"x"}`)}
	if got, err := decodeStreamEvent(7, encodeStreamEvent(&ev)); err != nil || !reflect.DeepEqual(got, ev) {
		t.Errorf("event decode = %+v, %v", got, err)
	}
}

// TestStreamLogIssuedBelowKeepsTheHighest: a record's IssuedBelow (the
// bound its writer raised ahead of the events it sent) is never lowered by
// a later put, a put without one or a cancel, on every backend: a put that
// lands after a newer one must not make a reader number an error event as
// one a client already got.
func TestStreamLogIssuedBelowKeepsTheHighest(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := b.open(t)
		ctx := context.Background()
		put := func(issued int64) {
			t.Helper()
			if err := s.PutStreamLog(ctx, StreamLog{ResponseID: "r", Status: "in_progress", ExpiresAt: t0.Add(time.Hour), IssuedBelow: issued}); err != nil {
				t.Fatal(err)
			}
		}
		check := func(want int64) {
			t.Helper()
			if got, err := s.GetStreamLog(ctx, "r"); err != nil || got.IssuedBelow != want {
				t.Fatalf("IssuedBelow = %d, %v; want %d", got.IssuedBelow, err, want)
			}
		}
		put(0)
		check(0)
		put(64)
		check(64)
		put(32)
		check(64)
		put(0)
		check(64)
		put(128)
		check(128)
		if err := s.CancelStreamLog(ctx, "r"); err != nil {
			t.Fatal(err)
		}
		check(128)
		if err := s.DeleteStreamLog(ctx, "r"); err != nil {
			t.Fatal(err)
		}
		put(16) // a new record: nothing of the deleted one is kept
		check(16)
	})
}

// TestStreamLogConcurrent runs a stream's writer (appending every event
// twice, as a retry would), record updates, a cancel and resuming readers
// at once (meant for -race): the readers see the events in order without
// holes, and the cancel flag survives the updates.
func TestStreamLogConcurrent(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		const events = 200
		s, clk := b.open(t)
		ctx := context.Background()
		exp := clk.Now().Add(time.Hour)
		if err := s.PutStreamLog(ctx, StreamLog{ResponseID: "r", Status: "in_progress", ExpiresAt: exp}); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		done := make(chan struct{})
		wg.Add(1)
		go func() { // the stream
			defer wg.Done()
			defer close(done)
			for i := range int64(events) {
				ev := []StreamEvent{{Name: "delta", Data: fmt.Appendf(nil, `{"i":%d}`, i)}}
				for range 2 {
					if err := s.AppendStreamEvents(ctx, "r", i, ev); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
		wg.Add(1)
		go func() { // record updates, and a cancel halfway
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				if i == 10 {
					if err := s.CancelStreamLog(ctx, "r"); err != nil {
						errs <- err
						return
					}
				}
				if err := s.PutStreamLog(ctx, StreamLog{ResponseID: "r", Status: "in_progress", ExpiresAt: exp}); err != nil {
					errs <- err
					return
				}
			}
		}()
		for range 3 { // resuming readers
			wg.Add(1)
			go func() {
				defer wg.Done()
				next := int64(0)
				for next < events {
					evs, err := s.StreamEvents(ctx, "r", next-1, 16)
					if err != nil {
						errs <- err
						return
					}
					for _, ev := range evs {
						if ev.Seq != next || string(ev.Data) != fmt.Sprintf(`{"i":%d}`, next) {
							errs <- fmt.Errorf("reader: event %d (%s), want %d", ev.Seq, ev.Data, next)
							return
						}
						next++
					}
					if len(evs) == 0 {
						time.Sleep(time.Millisecond)
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if l, err := s.GetStreamLog(ctx, "r"); err != nil || !l.CancelRequested {
			t.Errorf("GetStreamLog = %+v, %v; want CancelRequested", l, err)
		}
		if got := s.Stats().StreamEventsWritten; got != events {
			t.Errorf("StreamEventsWritten = %d, want %d", got, events)
		}
	})
}

// TestStreamLogReopen writes a stream log, closes the store and opens it
// again: the record, its cancel flag and its events are read back.
func TestStreamLogReopen(t *testing.T) {
	dir := t.TempDir()
	clk := newFakeClock()
	ctx := context.Background()
	open := func() *PebbleStore {
		s, err := Open(ctx, Options{Dir: dir, Now: clk.Now, SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open()
	l := StreamLog{ResponseID: "r1", Owner: "o", Status: "in_progress", Background: true,
		Response: []byte(`{"id":"r1"}`), Input: []byte(`[]`), CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}
	if err := s.PutStreamLog(ctx, l); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendStreamEvents(ctx, "r1", 0, []StreamEvent{{Name: "a", Data: []byte("0")}, {Name: "b", Data: []byte("1")}}); err != nil {
		t.Fatal(err)
	}
	if err := s.CancelStreamLog(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open()
	defer s.Close()
	l.CancelRequested = true
	if got, err := s.GetStreamLog(ctx, "r1"); err != nil || !reflect.DeepEqual(got, l) {
		t.Errorf("GetStreamLog after reopen = %+v, %v; want %+v", got, err, l)
	}
	want := []StreamEvent{{Seq: 0, Name: "a", Data: []byte("0")}, {Seq: 1, Name: "b", Data: []byte("1")}}
	if got, err := s.StreamEvents(ctx, "r1", -1, 0); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("StreamEvents after reopen = %+v, %v", got, err)
	}
	// The expiry index entry survived too: the log is swept once due.
	clk.Advance(time.Hour + expiryGranularity)
	if n, err := s.Sweep(ctx, clk.Now()); err != nil || n != 1 {
		t.Errorf("Sweep after reopen = %d, %v; want 1", n, err)
	}
	if left := countKeys(t, s, []byte{famStreamEvent}, familyUpperBound(famStreamEvent)); left != 0 {
		t.Errorf("%d events left after the sweep", left)
	}
}

// TestRedisStreamLogKeysExpire checks that a stream log's record and events
// keys expire together with the record, the events key refreshed by every
// put and append.
func TestRedisStreamLogKeysExpire(t *testing.T) {
	url := redisServer(t).URL
	s, _ := openRedisTestOn(t, url, func(o *Options) { o.Now = nil })
	ctx := context.Background()
	raw := rawClient(t, url)
	ttls := func() (rec, evs time.Duration) {
		return raw.PTTL(ctx, s.streamLogKey("r1")).Val(), raw.PTTL(ctx, s.streamEventsKey("r1")).Val()
	}
	near := func(d, want time.Duration) bool { return d > want-time.Minute && d <= want }

	if err := s.PutStreamLog(ctx, StreamLog{ResponseID: "r1", ExpiresAt: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendStreamEvents(ctx, "r1", 0, []StreamEvent{{Name: "a"}}); err != nil {
		t.Fatal(err)
	}
	if rec, evs := ttls(); !near(rec, time.Hour) || !near(evs, time.Hour) {
		t.Errorf("keys expire in %v (record), %v (events), want 1h", rec, evs)
	}
	if err := s.PutStreamLog(ctx, StreamLog{ResponseID: "r1", ExpiresAt: time.Now().Add(3 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if rec, evs := ttls(); !near(rec, 3*time.Hour) || !near(evs, 3*time.Hour) {
		t.Errorf("after a put: keys expire in %v (record), %v (events), want 3h", rec, evs)
	}
	if err := s.CancelStreamLog(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	if rec, _ := ttls(); !near(rec, 3*time.Hour) {
		t.Errorf("after a cancel: the record expires in %v, want 3h", rec)
	}

	if err := s.PutStreamLog(ctx, StreamLog{ResponseID: "r1", ExpiresAt: time.Now().Add(300 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendStreamEvents(ctx, "r1", 1, []StreamEvent{{Name: "b"}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if n := raw.Exists(ctx, s.streamLogKey("r1"), s.streamEventsKey("r1")).Val(); n != 0 {
		t.Errorf("%d keys of an expired stream log are left", n)
	}
	if _, err := s.GetStreamLog(ctx, "r1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetStreamLog after expiry: %v", err)
	}
}

// streamChildDirEnv, when set, turns TestStreamLogDurabilityAfterSIGKILL
// into the child process that appends events into that directory.
const streamChildDirEnv = "SLUICE_STORE_TEST_STREAM_CHILD_DIR"

// TestStreamLogDurabilityAfterSIGKILL runs a child process that appends
// events to several stream logs, one event per call, and reports each
// acknowledged append on stdout. The parent kills it with SIGKILL
// mid-stream, reopens the directory and expects every log to hold every
// acknowledged event, in order, without holes.
func TestStreamLogDurabilityAfterSIGKILL(t *testing.T) {
	if dir := os.Getenv(streamChildDirEnv); dir != "" {
		streamDurabilityChild(dir)
		return
	}
	if testing.Short() {
		t.Skip("starts a child process")
	}
	const killAfter = 200 // acknowledged events before the kill

	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestStreamLogDurabilityAfterSIGKILL$", "-test.count=1")
	cmd.Env = append(os.Environ(), streamChildDirEnv+"="+dir)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := map[string]int64{} // log → highest acknowledged sequence number
	n := 0
	sc := bufio.NewScanner(stdout)
	read := func() {
		var id string
		var seq int64
		if _, err := fmt.Sscanf(sc.Text(), "ack %s %d", &id, &seq); err == nil {
			acked[id] = max(acked[id], seq)
			n++
		}
	}
	for n < killAfter && sc.Scan() {
		read()
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for sc.Scan() { // acks written to the pipe before the kill count too
		read()
	}
	err = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die by SIGKILL: %v", err)
	}
	if n < killAfter {
		t.Fatalf("child acknowledged only %d events", n)
	}

	s, err := Open(ctx, Options{Dir: dir, SweepInterval: -1})
	if err != nil {
		t.Fatalf("reopen after SIGKILL: %v", err)
	}
	defer s.Close()
	for id, last := range acked {
		if _, err := s.GetStreamLog(ctx, id); err != nil {
			t.Fatalf("stream log %s lost after SIGKILL: %v", id, err)
		}
		evs, err := s.StreamEvents(ctx, id, -1, 0)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(evs)) < last+1 {
			t.Fatalf("stream log %s: %d events after SIGKILL, %d acknowledged", id, len(evs), last+1)
		}
		for i, ev := range evs {
			if ev.Seq != int64(i) || string(ev.Data) != fmt.Sprintf(`{"seq":%d}`, i) {
				t.Fatalf("stream log %s: event %d is %d %s", id, i, ev.Seq, ev.Data)
			}
		}
	}
	t.Logf("%d acknowledged events in %d logs survived SIGKILL", n, len(acked))
}

// streamDurabilityChild appends events until it is killed (or a minute
// passes), printing "ack <id> <seq>" after each AppendStreamEvents returns.
func streamDurabilityChild(dir string) {
	ctx := context.Background()
	s, err := Open(ctx, Options{Dir: dir, SweepInterval: -1})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	deadline := time.Now().Add(time.Minute)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := "resp_" + strconv.Itoa(g)
			if err := s.PutStreamLog(ctx, StreamLog{ResponseID: id, Status: "in_progress", ExpiresAt: time.Now().Add(time.Hour)}); err != nil {
				fmt.Fprintln(os.Stderr, "child:", err)
				os.Exit(2)
			}
			for seq := int64(0); time.Now().Before(deadline); seq++ {
				ev := []StreamEvent{{Name: "delta", Data: fmt.Appendf(nil, `{"seq":%d}`, seq)}}
				if err := s.AppendStreamEvents(ctx, id, seq, ev); err != nil {
					fmt.Fprintln(os.Stderr, "child:", err)
					os.Exit(2)
				}
				mu.Lock()
				fmt.Fprintf(out, "ack %s %d\n", id, seq)
				out.Flush()
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	os.Exit(3) // not reached when the parent kills the child in time
}
