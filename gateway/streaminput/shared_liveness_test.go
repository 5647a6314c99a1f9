package streaminput_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/gateway/streaminput"
	"github.com/sluice-gw/sluice/internal/redistest"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// terminalOf is the last event of evs, which must be a Responses terminal
// event, with its sequence number.
func terminalOf(t *testing.T, name string, evs []sse.Event) (sse.Event, int64) {
	t.Helper()
	if len(evs) == 0 {
		t.Fatalf("the %s's reader got no event", name)
	}
	last := evs[len(evs)-1]
	switch eventType(last) {
	case "response.completed", "response.failed", "response.incomplete":
	default:
		t.Fatalf("the %s's reader ended with %s, not a terminal event (events %v)", name, last.Data, eventTypes(evs))
	}
	var v struct {
		Seq int64 `json:"sequence_number"`
	}
	mustJSON(t, last.Data, &v)
	return last, v.Seq
}

// TestSharedAnswerOutlivesTheIdleTimeout: with Redis, an answer that runs
// for several idle timeouts (an upstream quiet for longer than one before
// its first byte, then streaming) is not cut: the replica running it keeps
// the session alive while it runs, and a reader on the other replica takes
// that, not the answer's bytes, for the runner's sign of life. Both readers
// get the whole answer and the same terminal event.
func TestSharedAnswerOutlivesTheIdleTimeout(t *testing.T) {
	srv := redistest.Start(t)
	const idle = time.Second
	rs := replicasOpts(t, 2, srv, gateway.ResumeOptions{}, streaminput.Options{IdleTimeout: idle})
	runner, other := rs[0], rs[1]
	runner.up.SetDefault(upstreamtest.Script{Latency: 3 * idle, Text: "one two three four five six", Deltas: 6, Gap: idle / 3})
	id := runner.create(sessionBody(streaminput.EndpointResponses, "on_first_chunk", respTemplate))

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	type read struct {
		name string
		evs  []sse.Event
		err  error
	}
	reads := make(chan read, 2)
	for name, e := range map[string]*env{"runner": runner, "other": other} {
		go func() { // attached before the start: they wait for it
			evs, err := readEvents(ctx, e, id)
			reads <- read{name, evs, err}
		}()
	}
	runner.mustChunk(id, textChunk(0, "run", false))
	// A late chunk through the other replica, then a request to the runner
	// that reads the session again: the runner goes on keeping it alive.
	if a := other.mustChunk(id, textChunk(1, " late", true)); a.Duplicate {
		t.Fatalf("late chunk: %+v", a)
	}
	if code, st := runner.status(id); code != http.StatusOK || !st.Started || st.LateChunks != 1 {
		t.Fatalf("status on the runner: %d %+v", code, st)
	}
	events := map[string][]sse.Event{}
	for range 2 {
		r := <-reads
		if r.err != nil {
			t.Fatalf("the %s's reader: %v (events %v)", r.name, r.err, eventTypes(r.evs))
		}
		events[r.name] = r.evs
	}
	runnerTerm, runnerSeq := terminalOf(t, "runner", events["runner"])
	otherTerm, otherSeq := terminalOf(t, "other", events["other"])
	if eventType(runnerTerm) != "response.completed" || eventType(otherTerm) != "response.completed" {
		t.Fatalf("terminal events: runner %s, other %s; want response.completed for both", runnerTerm.Data, otherTerm.Data)
	}
	if string(runnerTerm.Data) != string(otherTerm.Data) || runnerSeq != otherSeq {
		t.Fatalf("different terminal events:\nrunner %s\nother  %s", runnerTerm.Data, otherTerm.Data)
	}
	if got := completedText(t, events["other"]); got != "one two three four five six" {
		t.Fatalf("the other replica's reader got %q", got)
	}
	if n := metricValue(t, runner, "sluice_streaming_input_sessions_closed_total", "deleted"); n != 0 {
		t.Fatalf("the runner counted %v sessions closed as deleted", n)
	}
}

// TestSharedStoreLosesTheSessionMidAnswer: Redis loses a session's data
// while its answer runs (FLUSHALL here; a restart without persistence or an
// eviction alike). Nobody deleted or cancelled it: the readers on both
// replicas end at once, well within the session's idle timeout, with the
// same stream_incomplete failure, not with a cancel.
func TestSharedStoreLosesTheSessionMidAnswer(t *testing.T) {
	srv := redistest.Start(t)
	rs := replicasOpts(t, 2, srv, gateway.ResumeOptions{}, streaminput.Options{IdleTimeout: time.Minute})
	runner, other := rs[0], rs[1]
	runner.up.SetDefault(upstreamtest.Script{Text: "one two three four", Deltas: 4}.StallAfterDeltas(2))
	id := runner.create(sessionBody(streaminput.EndpointResponses, "on_first_chunk", respTemplate))
	runner.mustChunk(id, textChunk(0, "run", true))

	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	readers := map[string]*sse.Reader{"runner": shrOpenResult(t, ctx, runner, id), "other": shrOpenResult(t, ctx, other, id)}
	events := map[string][]sse.Event{}
	for name, rd := range readers { // read both up to the stall: they have seen the same events
		for deltas := 0; deltas < 2; {
			ev, err := rd.Next()
			if err != nil {
				t.Fatalf("the %s's reader: %v (events %v)", name, err, eventTypes(events[name]))
			}
			events[name] = append(events[name], ev.Clone())
			if eventType(ev) == "response.output_text.delta" {
				deltas++
			}
		}
	}

	opt, err := redis.ParseURL(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(opt)
	defer rc.Close()
	if err := rc.FlushAll(ctx).Err(); err != nil {
		t.Fatalf("FLUSHALL: %v", err)
	}

	terms := map[string]sse.Event{}
	seqs := map[string]int64{}
	for name, rd := range readers {
		events[name] = append(events[name], restOf(t, name, rd)...)
		terms[name], seqs[name] = terminalOf(t, name, events[name])
	}
	if ctx.Err() != nil {
		t.Fatal("the readers did not end promptly")
	}
	for name, term := range terms {
		r := responseOf(t, term)
		if eventType(term) != "response.failed" || r.Status != "failed" || failureCode(term) != "stream_incomplete" {
			t.Fatalf("the %s's reader ended with %s, want response.failed stream_incomplete", name, term.Data)
		}
	}
	var runnerErr, otherErr json.RawMessage = responseOf(t, terms["runner"]).Error, responseOf(t, terms["other"]).Error
	if string(runnerErr) != string(otherErr) || seqs["runner"] != seqs["other"] || eventTypes(events["runner"])[len(events["runner"])-1] != eventTypes(events["other"])[len(events["other"])-1] {
		t.Fatalf("different terminal events:\nrunner %s\nother  %s", terms["runner"].Data, terms["other"].Data)
	}
	if len(events["runner"]) != len(events["other"]) {
		t.Fatalf("different event sequences: runner %v, other %v", eventTypes(events["runner"]), eventTypes(events["other"]))
	}
	if n := metricValue(t, runner, "sluice_streaming_input_sessions_closed_total", "deleted"); n != 0 {
		t.Fatalf("the runner counted the lost session as deleted (%v)", n)
	}
}
