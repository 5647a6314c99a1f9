package store_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/sluice-gw/sluice/store"
)

// readyStore is GET /readyz's status code and its "store" field.
func readyStore(t *testing.T, base string) (int, string) {
	t.Helper()
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Store string `json:"store"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("GET /readyz: %v", err)
	}
	return resp.StatusCode, body.Store
}

// A data dir removed (or moved away) while the gateway serves leaves the
// Pebble database working in files no longer under it, and all it holds
// would be lost at the next start: /readyz shows the store unavailable
// (staying 200, as for any store outage) and the log says so at ERROR once,
// however often /readyz is asked; a directory moved back is ok again
// (README "Continuity").
func TestReadyzReportsADataDirGoneWhileServing(t *testing.T) {
	for _, tc := range []struct {
		name      string
		goAway    func(dir string) error
		comesBack func(dir string) error // nil: it does not
	}{
		{"removed", os.RemoveAll, nil},
		{"moved away and back",
			func(dir string) error { return os.Rename(dir, dir+".moved") },
			func(dir string) error { return os.Rename(dir+".moved", dir) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := &lockedLog{}
			logger := hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Debug})
			dir := filepath.Join(t.TempDir(), "data")
			st, err := store.Open(context.Background(), store.Options{Dir: dir, SweepInterval: -1, Logger: logger})
			if err != nil {
				t.Fatal(err)
			}
			// Wired as sluice serve wires the store (cmd/sluice: openedStore.health).
			base := serveGatewayOn(t, st, logger, st.Health)

			if code, s := readyStore(t, base); code != http.StatusOK || s != "ok" {
				t.Fatalf("before: /readyz %d store %q, want 200 ok", code, s)
			}
			if err := tc.goAway(dir); err != nil {
				t.Fatal(err)
			}
			for range 3 {
				if code, s := readyStore(t, base); code != http.StatusOK || s != "unavailable" {
					t.Fatalf("data dir gone: /readyz %d store %q, want 200 unavailable", code, s)
				}
			}
			gone := grepLog(logs.String(), "[ERROR]", "the data dir is gone")
			if len(gone) != 1 || !strings.Contains(gone[0], dir) {
				t.Fatalf("want one ERROR line naming %s, got %d:\n%s", dir, len(gone), logs.String())
			}
			if tc.comesBack == nil {
				return
			}
			if err := tc.comesBack(dir); err != nil {
				t.Fatal(err)
			}
			if code, s := readyStore(t, base); code != http.StatusOK || s != "ok" {
				t.Fatalf("data dir back: /readyz %d store %q, want 200 ok", code, s)
			}
			if len(grepLog(logs.String(), "[INFO]", "the data dir is back")) != 1 {
				t.Fatalf("the data dir's return is not logged:\n%s", logs.String())
			}
		})
	}
}

// grepLog is the lines of logs that hold every one of subs.
func grepLog(logs string, subs ...string) []string {
	var out []string
	for _, l := range strings.Split(logs, "\n") {
		all := true
		for _, s := range subs {
			all = all && strings.Contains(l, s)
		}
		if all {
			out = append(out, l)
		}
	}
	return out
}
