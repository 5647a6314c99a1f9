package streaminput_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluice-gw/sluice/gateway/streaminput"
	"github.com/sluice-gw/sluice/store"
)

// failingSessionStore is a session store whose session creates and chunk
// writes fail with the error in failure while one is set.
type failingSessionStore struct {
	store.InputSessionStore
	failure atomic.Pointer[error]
}

func (f *failingSessionStore) failed() error {
	if e := f.failure.Load(); e != nil {
		return *e
	}
	return nil
}

func (f *failingSessionStore) CreateInputSession(ctx context.Context, s store.InputSession) error {
	if err := f.failed(); err != nil {
		return err
	}
	return f.InputSessionStore.CreateInputSession(ctx, s)
}

func (f *failingSessionStore) PutChunk(ctx context.Context, id string, seq uint64, c store.Chunk, rec store.InputSession) error {
	if err := f.failed(); err != nil {
		return err
	}
	return f.InputSessionStore.PutChunk(ctx, id, seq, c, rec)
}

// TestStoreUnavailableAnswers: a create or chunk the session store fails
// is the 503 store_unavailable of any request the gateway's store fails
// (README "Continuity"): a store out for the moment (a full disk) says to
// retry, with Retry-After: 2; one closed until the gateway restarts (a
// damaged file) says an operator must act, with no Retry-After and no
// "retry" that no wait would honour.
func TestStoreUnavailableAnswers(t *testing.T) {
	for _, tc := range []struct {
		name           string
		failure        error
		wantRetryAfter string
		wantInMessage  string
	}{
		{"out for the moment", fmt.Errorf("test outage: %w", store.ErrUnavailable), "2", "; retry the request"},
		{"closed until restart", fmt.Errorf("test damage: %w: %w", store.ErrUnavailable, store.ErrUnavailableUntilRestart), "",
			"until an operator restores it and restarts the gateway"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := &failingSessionStore{InputSessionStore: sessOpenPebble(t)}
			e := newEnv(t, envConfig{noStore: true, opts: streaminput.Options{Store: fs}})
			id := e.create(sessionBody(streaminput.EndpointResponses, "on_end_only", respTemplate))
			fs.failure.Store(&tc.failure)
			for _, call := range []struct{ what, path, body string }{
				{"create", streaminput.PathPrefix, sessionBody(streaminput.EndpointResponses, "", respTemplate)},
				{"chunk", streaminput.PathPrefix + "/" + id + "/chunks", textChunk(0, "x", false)},
			} {
				code, hdr, b := e.postRaw(call.path, strings.NewReader(call.body), nil)
				ae := wantError(t, call.what, code, b, http.StatusServiceUnavailable, "store_unavailable")
				msg := ae.Error.Message
				if hdr.Get("Retry-After") != tc.wantRetryAfter || !strings.Contains(msg, tc.wantInMessage) ||
					strings.Contains(msg, "retry") != (tc.wantRetryAfter != "") {
					t.Errorf("%s: Retry-After %q, message %q; want Retry-After %q and a message saying %q",
						call.what, hdr.Get("Retry-After"), msg, tc.wantRetryAfter, tc.wantInMessage)
				}
			}
			fs.failure.Store(nil)
			e.mustChunk(id, textChunk(0, "x", false)) // the session stayed open for the retry
		})
	}
}
