package store

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"
)

func TestInputSessionRoundTrip(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, clk := b.open(t)
		ctx := context.Background()
		in := InputSession{
			ID: "in1", ClientKeyHash: "ckh", Endpoint: "/v1/responses", Template: []byte(`{"model":"m"}`),
			StartPolicy: "on_final", State: "receiving", NextSeq: 3, ReceivedBytes: 1 << 40,
			CreatedAt: t0.Add(-time.Minute), LastActivity: t0, ExpiresAt: t0.Add(time.Hour),
		}
		if err := s.CreateInputSession(ctx, in); err != nil {
			t.Fatal(err)
		}
		got, err := s.GetInputSession(ctx, "in1")
		if err != nil || !reflect.DeepEqual(got, in) {
			t.Fatalf("GetInputSession = %+v, %v; want %+v", got, err, in)
		}

		// Defaults on update: LastActivity = clock, ExpiresAt = +InputSessionTTL.
		clk.Advance(time.Minute)
		up := got
		up.State, up.LastActivity, up.ExpiresAt = "ready", time.Time{}, time.Time{}
		if err := s.UpdateInputSession(ctx, up); err != nil {
			t.Fatal(err)
		}
		got, err = s.GetInputSession(ctx, "in1")
		if err != nil {
			t.Fatal(err)
		}
		now := t0.Add(time.Minute)
		if got.State != "ready" || !got.LastActivity.Equal(now) || !got.ExpiresAt.Equal(now.Add(DefaultInputSessionTTL)) ||
			!got.CreatedAt.Equal(in.CreatedAt) {
			t.Errorf("after update: %+v", got)
		}
	})
}

// inputStep is one step of an input-session scenario.
type inputStep struct {
	op      string // create, get, update, chunk, chunks, delete, list, advance
	id      string
	seq     uint64
	payload string
	update  InputSession  // chunk: the session update
	d       time.Duration // advance; create: TTL via ExpiresAt
	want    []string      // chunks: payloads in order ("seq:payload"); list: session ids
	wantErr error
}

func TestInputSessions(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		tests := []struct {
			name  string
			steps []inputStep
		}{
			{"unknown session", []inputStep{
				{op: "get", id: "nope", wantErr: ErrNotFound},
				{op: "update", id: "nope", wantErr: ErrNotFound},
				{op: "chunk", id: "nope", seq: 0, payload: "x", wantErr: ErrNotFound},
				{op: "chunks", id: "nope", wantErr: ErrNotFound},
				{op: "delete", id: "nope"},
			}},
			{"create twice", []inputStep{
				{op: "create", id: "a"},
				{op: "create", id: "a", wantErr: ErrExists},
			}},
			{"chunks come back in sequence order", []inputStep{
				{op: "create", id: "a"},
				{op: "chunks", id: "a", want: []string{}},
				{op: "chunk", id: "a", seq: 256, payload: "p256"},
				{op: "chunk", id: "a", seq: 2, payload: "p2"},
				{op: "chunk", id: "a", seq: 1 << 40, payload: "pbig"},
				{op: "chunk", id: "a", seq: 0, payload: "p0"},
				{op: "chunk", id: "a", seq: 255, payload: "p255"},
				{op: "chunks", id: "a", want: []string{"0:p0", "2:p2", "255:p255", "256:p256", "1099511627776:pbig"}},
			}},
			{"same seq replaces", []inputStep{
				{op: "create", id: "a"},
				{op: "chunk", id: "a", seq: 1, payload: "first"},
				{op: "chunk", id: "a", seq: 1, payload: "second"},
				{op: "chunks", id: "a", want: []string{"1:second"}},
			}},
			{"chunk updates the session in the same batch", []inputStep{
				{op: "create", id: "a"},
				{op: "chunk", id: "a", seq: 0, payload: "x", update: InputSession{State: "receiving", NextSeq: 1, ReceivedBytes: 1}},
				{op: "get", id: "a", want: []string{"receiving", "1"}},
			}},
			{"sessions with prefix ids keep their own chunks", []inputStep{
				{op: "create", id: "s"},
				{op: "create", id: "s1"},
				{op: "create", id: "s\x00"},
				{op: "chunk", id: "s", seq: 1, payload: "s-1"},
				{op: "chunk", id: "s1", seq: 1, payload: "s1-1"},
				{op: "chunk", id: "s\x00", seq: 1, payload: "s0-1"},
				{op: "chunks", id: "s", want: []string{"1:s-1"}},
				{op: "chunks", id: "s1", want: []string{"1:s1-1"}},
				{op: "delete", id: "s"},
				{op: "chunks", id: "s", wantErr: ErrNotFound},
				{op: "chunks", id: "s1", want: []string{"1:s1-1"}},
				{op: "chunks", id: "s\x00", want: []string{"1:s0-1"}},
				{op: "list", want: []string{"s\x00", "s1"}},
			}},
			{"delete removes every chunk", []inputStep{
				{op: "create", id: "a"},
				{op: "chunk", id: "a", seq: 0, payload: "x"},
				{op: "chunk", id: "a", seq: 1, payload: "y"},
				{op: "delete", id: "a"},
				{op: "get", id: "a", wantErr: ErrNotFound},
				{op: "create", id: "a"},
				{op: "chunks", id: "a", want: []string{}},
			}},
			{"expiry", []inputStep{
				{op: "create", id: "a", d: time.Hour},
				{op: "create", id: "b", d: 3 * time.Hour},
				{op: "chunk", id: "a", seq: 0, payload: "old"},
				{op: "list", want: []string{"a", "b"}},
				{op: "advance", d: 2 * time.Hour},
				{op: "get", id: "a", wantErr: ErrNotFound},
				{op: "chunks", id: "a", wantErr: ErrNotFound},
				{op: "chunk", id: "a", seq: 1, payload: "late", wantErr: ErrNotFound},
				{op: "list", want: []string{"b"}},
				// An expired, unswept session can be created again, without its
				// old chunks.
				{op: "create", id: "a"},
				{op: "chunks", id: "a", want: []string{}},
			}},
			{"invalid", []inputStep{
				{op: "create", id: "", wantErr: ErrInvalid},
				{op: "create", id: "a"},
				{op: "chunk", id: "a", update: InputSession{ID: "b"}, wantErr: ErrInvalid},
				{op: "chunk", id: "a", payload: string(make([]byte, 2048)), wantErr: ErrTooLarge},
			}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				s, clk := b.open(t, func(o *Options) { o.MaxChunkBytes = 1024 })
				ctx := context.Background()
				for i, st := range tt.steps {
					what := fmt.Sprintf("step %d (%s %q)", i, st.op, st.id)
					switch st.op {
					case "create":
						sess := InputSession{ID: st.id, Endpoint: "/v1/responses"}
						if st.d != 0 {
							sess.ExpiresAt = clk.Now().Add(st.d)
						}
						wantErr(t, what, s.CreateInputSession(ctx, sess), st.wantErr)
					case "get":
						got, err := s.GetInputSession(ctx, st.id)
						wantErr(t, what, err, st.wantErr)
						if st.want != nil && (got.State != st.want[0] || fmt.Sprint(got.NextSeq) != st.want[1]) {
							t.Fatalf("%s: got %+v, want state/next %v", what, got, st.want)
						}
					case "update":
						wantErr(t, what, s.UpdateInputSession(ctx, InputSession{ID: st.id}), st.wantErr)
					case "chunk":
						c := Chunk{Modality: "text", Payload: []byte(st.payload)}
						wantErr(t, what, s.PutChunk(ctx, st.id, st.seq, c, st.update), st.wantErr)
					case "chunks":
						got, err := s.Chunks(ctx, st.id)
						wantErr(t, what, err, st.wantErr)
						if st.wantErr != nil {
							continue
						}
						var gotS = []string{}
						for _, c := range got {
							gotS = append(gotS, fmt.Sprintf("%d:%s", c.Seq, c.Payload))
						}
						if !reflect.DeepEqual(gotS, st.want) {
							t.Fatalf("%s: %q, want %q", what, gotS, st.want)
						}
					case "delete":
						wantErr(t, what, s.DeleteInputSession(ctx, st.id), st.wantErr)
					case "list":
						got, err := s.ListInputSessions(ctx)
						wantErr(t, what, err, st.wantErr)
						ids := []string{}
						for _, sess := range got {
							ids = append(ids, sess.ID)
						}
						if !reflect.DeepEqual(ids, st.want) {
							t.Fatalf("%s: %q, want %q", what, ids, st.want)
						}
					case "advance":
						clk.Advance(st.d)
					default:
						t.Fatalf("unknown op %q", st.op)
					}
				}
			})
		}
	})
}
