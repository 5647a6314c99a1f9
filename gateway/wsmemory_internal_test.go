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
			m := newSessionMemory(c.limit)
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
