package gateway

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/store"
)

// turnOf is a turn of one input and one output item, n bytes in all.
func turnOf(id, parent string, n int) store.Turn {
	in := json.RawMessage(`"` + strings.Repeat("i", n/2-2) + `"`)
	out := json.RawMessage(`"` + strings.Repeat("o", n-n/2-2) + `"`)
	return store.Turn{ResponseID: id, ParentID: parent, Input: []json.RawMessage{in}, Output: []json.RawMessage{out}}
}

// TestSessionMemoryEvictsOldestTurns: a session holds at most its bound in
// bytes of kept items; the oldest turns go first, a turn larger than the
// bound is not kept, and a turn put again is counted once.
func TestSessionMemoryEvictsOldestTurns(t *testing.T) {
	for _, c := range []struct {
		name  string
		limit int64
		puts  []store.Turn
		want  []string // the turns held, oldest first
		bytes int64
	}{
		{"within the bound", 300, []store.Turn{turnOf("r1", "", 100), turnOf("r2", "r1", 100), turnOf("r3", "r2", 100)}, []string{"r1", "r2", "r3"}, 300},
		{"the oldest goes first", 250, []store.Turn{turnOf("r1", "", 100), turnOf("r2", "r1", 100), turnOf("r3", "r2", 100)}, []string{"r2", "r3"}, 200},
		{"as many as it takes", 250, []store.Turn{turnOf("r1", "", 100), turnOf("r2", "r1", 100), turnOf("r3", "r2", 200)}, []string{"r3"}, 200},
		{"a turn larger than the bound", 150, []store.Turn{turnOf("r1", "", 100), turnOf("r2", "r1", 200)}, nil, 0},
		{"a turn put again is counted once", 250, []store.Turn{turnOf("r1", "", 100), turnOf("r2", "r1", 100), turnOf("r1", "", 100)}, []string{"r1", "r2"}, 200},
		{"no bound", 0, []store.Turn{turnOf("r1", "", 100), turnOf("r2", "r1", 1000)}, []string{"r1", "r2"}, 1100},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := newSessionMemory(c.limit, nil)
			for _, tr := range c.puts {
				if got := turnBytes(tr); got != int64(len(tr.Input[0])+len(tr.Output[0])) {
					t.Fatalf("turnBytes(%s) = %d", tr.ResponseID, got)
				}
				m.markContinued(tr.ResponseID)
				m.put(tr, "P")
			}
			var held []string
			for _, id := range []string{"r1", "r2", "r3"} {
				if m.holds(id) {
					held = append(held, id)
				} else if m.wasContinued(id) || m.heldBy(id) != "" {
					t.Fatalf("%s was evicted but is still known (continued %v, held by %q)", id, m.wasContinued(id), m.heldBy(id))
				}
			}
			if !slices.Equal(held, c.want) || m.held != c.bytes {
				t.Fatalf("held %v (%d bytes), want %v (%d bytes)", held, m.held, c.want, c.bytes)
			}
		})
	}
}

// TestSessionMemoryTotalBound: all sockets' memories together hold at most
// limits.ws_session_memory_total_bytes. A socket whose turn would take the
// total past it evicts its own oldest turns and keeps the new one only if it
// then fits (what another socket holds stays); a closed socket's bytes go
// back to the total, and a turn put after it closed is not kept.
func TestSessionMemoryTotalBound(t *testing.T) {
	type put struct {
		socket int // 0 or 1
		turn   store.Turn
	}
	for _, c := range []struct {
		name     string
		total    int64
		puts     []put
		closeA   bool     // socket 0 closes after the puts
		afterA   []string // then socket 1 puts r9 (100 bytes)
		wantA    []string // held by socket 0, oldest first
		wantB    []string // held by socket 1
		wantHeld int64    // the total's bytes
	}{
		{name: "within the total", total: 400,
			puts:  []put{{0, turnOf("a1", "", 100)}, {1, turnOf("b1", "", 100)}, {0, turnOf("a2", "a1", 100)}},
			wantA: []string{"a1", "a2"}, wantB: []string{"b1"}, wantHeld: 300},
		{name: "a socket evicts its own oldest", total: 300,
			puts:  []put{{0, turnOf("a1", "", 100)}, {1, turnOf("b1", "", 100)}, {1, turnOf("b2", "b1", 100)}, {1, turnOf("b3", "b2", 100)}},
			wantA: []string{"a1"}, wantB: []string{"b2", "b3"}, wantHeld: 300},
		{name: "a turn that cannot fit beside another socket's is not kept", total: 250,
			puts:  []put{{0, turnOf("a1", "", 200)}, {1, turnOf("b1", "", 100)}},
			wantA: []string{"a1"}, wantB: nil, wantHeld: 200},
		{name: "a closed socket's bytes go back", total: 250,
			puts:   []put{{0, turnOf("a1", "", 200)}, {1, turnOf("b1", "", 100)}},
			closeA: true, afterA: []string{"r9"},
			wantA: nil, wantB: []string{"r9"}, wantHeld: 100},
	} {
		t.Run(c.name, func(t *testing.T) {
			total := &sessionMemoryTotal{limit: c.total}
			socks := []*sessionMemory{newSessionMemory(1000, total), newSessionMemory(1000, total)}
			for _, p := range c.puts {
				socks[p.socket].put(p.turn, "")
			}
			if c.closeA {
				socks[0].release()
				socks[0].put(turnOf("a9", "", 10), "") // a response still finishing on the closed socket
			}
			for _, id := range c.afterA {
				socks[1].put(turnOf(id, "", 100), "")
			}
			heldOf := func(m *sessionMemory) (ids []string) {
				for _, id := range []string{"a1", "a2", "a9", "b1", "b2", "b3", "r9"} {
					if m.holds(id) {
						ids = append(ids, id)
					}
				}
				return ids
			}
			if a, b := heldOf(socks[0]), heldOf(socks[1]); !slices.Equal(a, c.wantA) || !slices.Equal(b, c.wantB) {
				t.Fatalf("socket 0 holds %v, socket 1 %v; want %v and %v", a, b, c.wantA, c.wantB)
			}
			if got := total.held.Load(); got != c.wantHeld || got != socks[0].held+socks[1].held {
				t.Fatalf("the total holds %d bytes (sockets %d + %d), want %d", got, socks[0].held, socks[1].held, c.wantHeld)
			}
		})
	}
}

// TestSessionMemoryFailedTurns: a failed turn is remembered by its id
// only, counted against the session's bound by the id's length and
// evicted oldest first like a kept turn; it is never held (no follow-up is
// sent its items), and a turn kept after it stays held.
func TestSessionMemoryFailedTurns(t *testing.T) {
	for _, c := range []struct {
		name       string
		limit      int64
		do         func(m *sessionMemory)
		wantFailed []string
		wantHeld   []string
		bytes      int64
	}{
		{"a failed turn is not held", 0, func(m *sessionMemory) { m.putFailed("r1") }, []string{"r1"}, nil, 2},
		{"counted with the kept turns", 250, func(m *sessionMemory) {
			m.put(turnOf("r1", "", 100), "")
			m.putFailed("r2")
			m.put(turnOf("r3", "r1", 100), "")
		}, []string{"r2"}, []string{"r1", "r3"}, 202},
		{"evicted oldest first", 150, func(m *sessionMemory) {
			m.putFailed("r1")
			m.put(turnOf("r2", "", 100), "")
			m.put(turnOf("r3", "r2", 50), "")
		}, nil, []string{"r2", "r3"}, 150},
		{"an id longer than the bound is not kept", 1, func(m *sessionMemory) { m.putFailed("r1") }, nil, nil, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := newSessionMemory(c.limit, nil)
			c.do(m)
			var failed, held []string
			for _, id := range []string{"r1", "r2", "r3"} {
				if m.failedTurn(id) {
					failed = append(failed, id)
				}
				if m.holds(id) {
					held = append(held, id)
				}
			}
			if !slices.Equal(failed, c.wantFailed) || !slices.Equal(held, c.wantHeld) || m.held != c.bytes {
				t.Fatalf("failed %v, held %v (%d bytes); want %v, %v (%d bytes)", failed, held, m.held, c.wantFailed, c.wantHeld, c.bytes)
			}
		})
	}
}
