package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"
)

func TestOpenErrors(t *testing.T) {
	tests := []struct {
		name    string
		dir     func(t *testing.T) string // returns the Dir to open
		wantErr error                     // optional sentinel
		wantMsg string                    // substring besides the dir
	}{
		{
			name:    "empty dir",
			dir:     func(*testing.T) string { return "" },
			wantErr: ErrInvalid,
		},
		{
			name: "file in the way",
			dir: func(t *testing.T) string {
				p := filepath.Join(t.TempDir(), "data")
				if err := os.WriteFile(p, []byte("not a database"), 0o600); err != nil {
					t.Fatal(err)
				}
				return p
			},
			wantMsg: "not a directory",
		},
		{
			name: "parent is a file",
			dir: func(t *testing.T) string {
				p := filepath.Join(t.TempDir(), "file")
				if err := os.WriteFile(p, nil, 0o600); err != nil {
					t.Fatal(err)
				}
				return filepath.Join(p, "data")
			},
			wantMsg: "not a directory",
		},
		{
			name: "no permission",
			dir: func(t *testing.T) string {
				if os.Geteuid() == 0 {
					t.Skip("root ignores directory permissions")
				}
				p := filepath.Join(t.TempDir(), "ro")
				if err := os.Mkdir(p, 0o500); err != nil {
					t.Fatal(err)
				}
				return filepath.Join(p, "data")
			},
			wantMsg: "permission denied",
		},
		{
			name: "already open in this process",
			dir: func(t *testing.T) string {
				s, _ := openTest(t)
				return s.dir
			},
			wantMsg: "locked",
		},
		{
			name: "another schema version",
			dir: func(t *testing.T) string {
				dir := t.TempDir()
				db, err := pebble.Open(dir, &pebble.Options{})
				if err != nil {
					t.Fatal(err)
				}
				if err := db.Set(metaSchemaKey, []byte{99}, pebble.Sync); err != nil {
					t.Fatal(err)
				}
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}
				return dir
			},
			wantErr: ErrCorrupt,
			wantMsg: "schema version",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := tt.dir(t)
			s, err := Open(context.Background(), Options{Dir: dir, SweepInterval: -1})
			if err == nil {
				s.Close()
				t.Fatalf("Open(%q) succeeded", dir)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("error %v, want %v", err, tt.wantErr)
			}
			if dir != "" && !strings.Contains(err.Error(), fmt.Sprintf("%q", dir)) {
				t.Errorf("error %q does not name the dir %q", err, dir)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error %q does not contain %q", err, tt.wantMsg)
			}
		})
	}
}

func TestOpenCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Open(ctx, Options{Dir: t.TempDir()}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Open with canceled context: %v", err)
	}
}

// TestUseAfterClose checks that every operation on a closed store returns
// ErrClosed instead of panicking: the gateway fails closed on it.
func TestUseAfterClose(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := b.open(t)
		ctx := context.Background()
		if err := s.PutAnchor(ctx, anchor("r1", "up1", "s1")); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateInputSession(ctx, InputSession{ID: "in1"}); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		ops := []struct {
			name string
			call func() error
		}{
			{"PutAnchor", func() error { return s.PutAnchor(ctx, anchor("r2", "up1", "s1")) }},
			{"GetAnchor", func() error { _, err := s.GetAnchor(ctx, "r1"); return err }},
			{"DeleteAnchor", func() error { return s.DeleteAnchor(ctx, "r1") }},
			{"GetScope", func() error { _, err := s.GetScope(ctx, ScopeSession, "s1"); return err }},
			{"Sweep", func() error { _, err := s.Sweep(ctx, t0); return err }},
			{"PutConversation", func() error { return s.PutConversation(ctx, Turn{ResponseID: "r1"}) }},
			{"GetTurn", func() error { _, err := s.GetTurn(ctx, "r1"); return err }},
			{"History", func() error { _, err := s.History(ctx, "r1", 0, 0); return err }},
			{"CreateInputSession", func() error { return s.CreateInputSession(ctx, InputSession{ID: "in2"}) }},
			{"GetInputSession", func() error { _, err := s.GetInputSession(ctx, "in1"); return err }},
			{"UpdateInputSession", func() error { return s.UpdateInputSession(ctx, InputSession{ID: "in1"}) }},
			{"PutChunk", func() error { return s.PutChunk(ctx, "in1", 0, Chunk{}, InputSession{}) }},
			{"Chunks", func() error { _, err := s.Chunks(ctx, "in1"); return err }},
			{"DeleteInputSession", func() error { return s.DeleteInputSession(ctx, "in1") }},
			{"ListInputSessions", func() error { _, err := s.ListInputSessions(ctx); return err }},
			{"PutStreamLog", func() error { return s.PutStreamLog(ctx, StreamLog{ResponseID: "r1", ExpiresAt: t0.Add(time.Hour)}) }},
			{"GetStreamLog", func() error { _, err := s.GetStreamLog(ctx, "r1"); return err }},
			{"AppendStreamEvents", func() error { return s.AppendStreamEvents(ctx, "r1", 0, []StreamEvent{{}}) }},
			{"StreamEvents", func() error { _, err := s.StreamEvents(ctx, "r1", -1, 0); return err }},
			{"CancelStreamLog", func() error { return s.CancelStreamLog(ctx, "r1") }},
			{"DeleteStreamLog", func() error { return s.DeleteStreamLog(ctx, "r1") }},
			{"Close", s.Close},
		}
		for _, op := range ops {
			t.Run(op.name, func(t *testing.T) {
				if err := op.call(); !errors.Is(err, ErrClosed) {
					t.Fatalf("%s after Close: %v, want ErrClosed", op.name, err)
				}
			})
		}
		if st := s.Stats(); st.AnchorsWritten != 1 || st.DiskBytes != 0 {
			t.Errorf("Stats after Close = %+v", st)
		}
	})
}

func TestCanceledContext(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := b.open(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := s.PutAnchor(ctx, anchor("r1", "up1", "s1")); !errors.Is(err, context.Canceled) {
			t.Errorf("PutAnchor: %v", err)
		}
		if _, err := s.GetAnchor(ctx, "r1"); !errors.Is(err, context.Canceled) {
			t.Errorf("GetAnchor: %v", err)
		}
		if _, err := s.Sweep(ctx, t0); !errors.Is(err, context.Canceled) {
			t.Errorf("Sweep: %v", err)
		}
	})
}

// TestCloseUnderLoad closes the store while writers and readers run: each
// call either succeeds or reports ErrClosed, and nothing panics.
func TestCloseUnderLoad(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := b.open(t)
		ctx := context.Background()
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for g := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					id := fmt.Sprintf("r-%d-%d", g, i)
					err := s.PutAnchor(ctx, anchor(id, "up1", "s1"))
					if err == nil {
						_, err = s.GetAnchor(ctx, id)
					}
					if err != nil {
						if !errors.Is(err, ErrClosed) {
							errs <- err
						}
						return
					}
				}
			}()
		}
		time.Sleep(50 * time.Millisecond)
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("operation racing Close: %v", err)
		}
	})
}

// TestConcurrentPutAnchor runs 200 writers at once, as 200 streams
// finishing together would; Pebble groups their synced commits.
func TestConcurrentPutAnchor(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		const writers, perWriter = 200, 5
		s, _ := b.open(t)
		ctx := context.Background()
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range perWriter {
					a := anchor(fmt.Sprintf("resp_%03d_%d", w, i), fmt.Sprintf("up%d", w%3), fmt.Sprintf("sess_%d", w%10))
					if err := s.PutAnchor(ctx, a); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		for w := range writers {
			for i := range perWriter {
				id := fmt.Sprintf("resp_%03d_%d", w, i)
				a, err := s.GetAnchor(ctx, id)
				if err != nil {
					t.Fatalf("GetAnchor(%s): %v", id, err)
				}
				if want := fmt.Sprintf("up%d", w%3); a.Upstream != want {
					t.Fatalf("GetAnchor(%s).Upstream = %q, want %q", id, a.Upstream, want)
				}
			}
		}
		// Every scope points at one of its own anchors.
		for sess := range 10 {
			r, err := s.GetScope(ctx, ScopeSession, fmt.Sprintf("sess_%d", sess))
			if err != nil {
				t.Fatalf("GetScope(sess_%d): %v", sess, err)
			}
			a, err := s.GetAnchor(ctx, r.LatestResponseID)
			if err != nil || a.ScopeID != fmt.Sprintf("sess_%d", sess) || a.Upstream != r.Owner {
				t.Fatalf("scope sess_%d points at %+v (%v)", sess, a, err)
			}
		}
		if got := s.Stats().AnchorsWritten; got != writers*perWriter {
			t.Errorf("Stats().AnchorsWritten = %d, want %d", got, writers*perWriter)
		}
	})
}

// TestReopen writes every kind of record, closes the store and opens it
// again.
func TestReopen(t *testing.T) {
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
	if err := s.PutAnchor(ctx, anchor("r1", "up1", "s1")); err != nil {
		t.Fatal(err)
	}
	if err := s.PutConversation(ctx, Turn{ResponseID: "r1", Input: items("in"), Output: items("out")}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateInputSession(ctx, InputSession{ID: "in1", Endpoint: "/v1/responses"}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutChunk(ctx, "in1", 0, Chunk{Modality: "text", Payload: []byte("hello")}, InputSession{NextSeq: 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open()
	defer s.Close()
	if a, err := s.GetAnchor(ctx, "r1"); err != nil || a.Upstream != "up1" {
		t.Errorf("GetAnchor after reopen = %+v, %v", a, err)
	}
	if r, err := s.GetScope(ctx, ScopeSession, "s1"); err != nil || r.LatestResponseID != "r1" {
		t.Errorf("GetScope after reopen = %+v, %v", r, err)
	}
	if h, err := s.History(ctx, "r1", 0, 0); err != nil || len(h) != 2 {
		t.Errorf("History after reopen = %s, %v", h, err)
	}
	if c, err := s.Chunks(ctx, "in1"); err != nil || len(c) != 1 || string(c[0].Payload) != "hello" {
		t.Errorf("Chunks after reopen = %+v, %v", c, err)
	}
	if l, err := s.ListInputSessions(ctx); err != nil || len(l) != 1 || l[0].NextSeq != 1 {
		t.Errorf("ListInputSessions after reopen = %+v, %v", l, err)
	}
}

// TestBackgroundSweeper checks that the sweeper runs on its own and that
// Close stops it.
func TestBackgroundSweeper(t *testing.T) {
	s, clk := openTest(t, func(o *Options) { o.SweepInterval = 5 * time.Millisecond })
	ctx := context.Background()
	if err := s.PutAnchor(ctx, anchor("r1", "up1", "s1")); err != nil {
		t.Fatal(err)
	}
	clk.Advance(DefaultAnchorTTL + expiryGranularity)
	deadline := time.Now().Add(10 * time.Second)
	for s.Stats().SweptAnchors == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("background sweeper did not run: %+v", s.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	sweeps := s.Stats().Sweeps
	time.Sleep(20 * time.Millisecond)
	if got := s.Stats().Sweeps; got != sweeps {
		t.Errorf("sweeper ran after Close: %d sweeps, then %d", sweeps, got)
	}
}

func TestRedactID(t *testing.T) {
	got := RedactID("resp_123")
	if len(got) != len("sha256:")+12 || !strings.HasPrefix(got, "sha256:") || strings.Contains(got, "resp") {
		t.Errorf("RedactID = %q", got)
	}
	if RedactID("a") == RedactID("b") {
		t.Error("RedactID collides")
	}
}

// TestErrorsDoNotLeakIDs checks that error messages carry redacted ids.
func TestErrorsDoNotLeakIDs(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := b.open(t)
		ctx := context.Background()
		const secret = "resp_secret_value"
		_, err := s.GetAnchor(ctx, secret)
		if err == nil || strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), RedactID(secret)) {
			t.Errorf("GetAnchor error %q", err)
		}
		_, err = s.GetScope(ctx, ScopeSession, secret)
		if err == nil || strings.Contains(err.Error(), secret) {
			t.Errorf("GetScope error %q", err)
		}
		for name, err := range map[string]error{
			"GetStreamLog":       func() error { _, err := s.GetStreamLog(ctx, secret); return err }(),
			"AppendStreamEvents": s.AppendStreamEvents(ctx, secret, 0, []StreamEvent{{Data: []byte("{}")}}),
			"PutStreamLog":       s.PutStreamLog(ctx, StreamLog{ResponseID: secret}),
		} {
			if err == nil || strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), RedactID(secret)) {
				t.Errorf("%s error %q", name, err)
			}
		}
	})
}

// items makes JSON items from strings.
func items(ss ...string) []json.RawMessage {
	out := make([]json.RawMessage, len(ss))
	for i, s := range ss {
		out[i] = json.RawMessage(fmt.Sprintf("%q", s))
	}
	return out
}

func TestDirIsPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	s, err := Open(context.Background(), Options{Dir: dir, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o700 {
		t.Errorf("data dir mode %v, want 0700", perm)
	}
}

// TestConcurrentMixed runs writers, readers, deleters and sweeps at once
// (meant for -race): live records must survive the sweeps, and expired ones
// must go.
func TestConcurrentMixed(t *testing.T) {
	s, clk := openTest(t)
	ctx := context.Background()
	const workers, perWorker = 8, 60
	var wg sync.WaitGroup
	errs := make(chan error, workers+1)
	done := make(chan struct{})
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sid := fmt.Sprintf("in-%d", w)
			if err := s.CreateInputSession(ctx, InputSession{ID: sid}); err != nil {
				errs <- err
				return
			}
			for i := range perWorker {
				live := anchor(fmt.Sprintf("live-%d-%d", w, i), "up", fmt.Sprintf("s-%d", w%3))
				dead := anchor(fmt.Sprintf("dead-%d-%d", w, i), "up", fmt.Sprintf("d-%d", w%3))
				dead.ExpiresAt = t0.Add(-time.Hour)
				for _, err := range []error{
					s.PutAnchor(ctx, live),
					s.PutAnchor(ctx, dead),
					s.PutChunk(ctx, sid, uint64(i), Chunk{Payload: []byte("x")}, InputSession{NextSeq: uint64(i + 1)}),
					s.DeleteAnchor(ctx, fmt.Sprintf("live-%d-%d", w, i-1)),
				} {
					if err != nil {
						errs <- err
						return
					}
				}
				if _, err := s.GetAnchor(ctx, live.ResponseID); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			if _, err := s.Sweep(ctx, clk.Now()); err != nil {
				errs <- err
				return
			}
		}
	}()
	// Stop the sweeper once the workers are done.
	go func() {
		for s.Stats().AnchorsWritten < 2*workers*perWorker && len(errs) == 0 {
			time.Sleep(time.Millisecond)
		}
		close(done)
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if _, err := s.Sweep(ctx, clk.Now()); err != nil {
		t.Fatal(err)
	}
	for w := range workers {
		last := fmt.Sprintf("live-%d-%d", w, perWorker-1)
		if _, err := s.GetAnchor(ctx, last); err != nil {
			t.Errorf("GetAnchor(%s): %v", last, err)
		}
		if c, err := s.Chunks(ctx, fmt.Sprintf("in-%d", w)); err != nil || len(c) != perWorker {
			t.Errorf("Chunks(in-%d) = %d chunks, %v", w, len(c), err)
		}
	}
	if dead := anchorKey("dead-"); countKeys(t, s, dead, prefixSuccessor(dead)) != 0 {
		t.Error("expired anchors left after sweeping")
	}
	if st := s.Stats(); st.SweptAnchors != workers*perWorker {
		t.Errorf("SweptAnchors = %d, want %d", st.SweptAnchors, workers*perWorker)
	}
}
